"""The AMQP 1.0 test kit (tests/crafting_amqp10.py) checked twice: its encodings against the bytes
the spec gives (OASIS AMQP 1.0 Part 1 §1.6, hand-written here), and a capture crafted with it
against both amqpcap's `amqp10_frames` (exactly the fields given) and tshark's AMQP dissector (an
independent reading of the same bytes)."""

from __future__ import annotations

import shutil
import subprocess

import pandas as pd
import pytest

import crafting
import crafting_amqp10 as a

U = a.UINT_MAX


# ---------------------------------------------------------------------------
# the encodings, byte for byte (Part 1 §1.6)
# ---------------------------------------------------------------------------

ENCODINGS = [
    (a.null(), "40"),
    (a.boolean(True), "41"), (a.boolean(False), "42"), (a.boolean(True, wide=True), "5601"),
    (a.ubyte(7), "5007"), (a.ushort(0x1234), "601234"),
    (a.uint(0), "43"), (a.uint(255), "52ff"), (a.uint(256), "7000000100"), (a.uint(5, wide=True), "7000000005"),
    (a.ulong(0), "44"), (a.ulong(9), "5309"), (a.ulong(2**40), "800000010000000000"),
    (a.int_(-2), "54fe"), (a.int_(70000), "7100011170"), (a.long_(5), "5505"), (a.long_(-2**40), "81ffffff0000000000"),
    (a.timestamp(1_000), "8300000000000003e8"),
    (a.symbol("ab"), "a3026162"), (a.string("é"), "a102c3a9"), (a.binary(b"\x00\x01"), "a0020001"),
    (a.list_([]), "45"), (a.list_([a.uint(1)]), "c003015201"), (a.list_([], wide=True), "d00000000400000000"),
    (a.map_([(a.symbol("k"), a.null())]), "c10502a3016b40"),
    (a.symbols(["A", "BC"]), "e00702a30141024243"),
    (a.described(0x24, a.list_([])), "00532445"),
]


@pytest.mark.parametrize("value,wire", ENCODINGS, ids=[w for _, w in ENCODINGS])
def test_each_encoding_is_the_specs(value, wire):
    assert value.hex() == wire


def test_long_values_take_the_four_octet_size_forms():
    s, b = a.string("x" * 300), a.binary(b"y" * 256)
    assert s[:5].hex() == "b10000012c" and len(s) == 305  # str32-utf8
    assert b[:5].hex() == "b000000100" and len(b) == 261  # vbin32
    assert a.symbol("z" * 256)[:1] == b"\xb3"
    big = a.list_([a.string("x" * 300)])
    assert big[:9].hex() == "d0" + f"{4 + 305:08x}" + "00000001"  # list32: size counts the count's 4 octets
    assert a.map_([(a.symbol("k"), a.string("v" * 300))])[:1] == b"\xd1"
    assert a.array(0xA3, [b"\x01a"] * 200)[:1] == b"\xf0"


def test_frame_header_and_protocol_headers():
    # §2.3.1: SIZE 4 octets (the whole frame), DOFF 2 (8-octet header), TYPE, channel
    f = a.close(channel=0)
    assert f[:8] == bytes.fromhex("0000000c02000000") and f[8:] == bytes.fromhex("00531845")
    assert a.sasl("sasl-outcome", code="ok")[4:6] == b"\x02\x01"  # TYPE 1: SASL
    assert a.heartbeat() == bytes.fromhex("0000000802000000")
    assert a.AMQP_HEADER == b"AMQP\x00\x01\x00\x00" and a.SASL_HEADER == b"AMQP\x03\x01\x00\x00"


def test_fields_are_written_in_spec_order_with_nulls_before_a_given_one():
    # flow: next-incoming-id, incoming-window, next-outgoing-id, outgoing-window, handle, ...
    f = a.composite("flow", handle=3, incoming_window=0)
    assert f.hex() == "005313" + "c0" + "07" + "05" + "40" + "43" + "40" + "40" + "5203"
    with pytest.raises(AssertionError, match="no field"):
        a.composite("flow", credit=1)


# ---------------------------------------------------------------------------
# a crafted conversation, read by amqpcap and by tshark
# ---------------------------------------------------------------------------

def conversation() -> a.Conversation:
    """Every performative, SASL, both outcomes' shapes, a message over two frames, ids that wrap,
    the wide encodings (list32, str32, vbin32, uint 0x70) where a decoder might take only the
    short ones."""
    c = a.Conversation()
    a.sasl_plain_opening(c)
    c.send("c2s", a.open_(container_id="kit-client", hostname="vhost:/", max_frame_size=512, channel_max=7,
                          idle_time_out=15_000))
    c.send("s2c", a.open_(container_id="kit-broker", max_frame_size=131072, idle_time_out=30_000,
                          offered_capabilities=["ANONYMOUS-RELAY"], properties={"product": a.string("x")}))
    c.send("c2s", a.begin(1, next_outgoing_id=U - 1, incoming_window=300, outgoing_window=U))
    c.send("s2c", a.begin(4, remote_channel=1, next_outgoing_id=U - 3, incoming_window=400, outgoing_window=U,
                          handle_max=255))
    c.send("c2s", a.attach(1, name="pub-link", handle=0, role="sender", snd_settle_mode="mixed",
                           rcv_settle_mode="first", source="here", target="/queues/kit", initial_delivery_count=U - 2))
    c.send("s2c", a.attach(4, name="pub-link", handle=9, role="receiver", snd_settle_mode="mixed",
                           rcv_settle_mode="second", source="here", target="/queues/kit", max_message_size=2**24))
    c.send("s2c", a.flow(4, next_incoming_id=U - 1, incoming_window=400, next_outgoing_id=U - 3, outgoing_window=U,
                  handle=9, delivery_count=U - 2, link_credit=170))
    body = a.message(a.header(durable=True, priority=7, ttl=60_000, first_acquirer=True, delivery_count=2),
                     a.properties(message_id="id-1", to="/queues/kit", subject="s", reply_to="/queues/r",
                                  correlation_id="c-1", content_type="text/plain", creation_time=1_700_000_000_000),
                     a.data(b"m" * 700))
    # the first frame holds the header and properties sections whole (and the data section's start):
    # the table reads the sections there, so it expects the message's section fields
    assert len(body) - 700 < 300
    first, rest = a.Encoded(body[:300], body.expect), body[300:]
    c.send("c2s", a.transfer(1, first, handle=0, delivery_id=U, delivery_tag=b"\xde\xad", message_format=0,
                             settled=False, more=True))
    c.send("c2s", a.transfer(1, rest, handle=0, more=False))
    c.send("c2s", a.transfer(1, a.message(a.data(b"z" * 5)), handle=0, delivery_id=0, delivery_tag=b"\x01",
                             settled=True, batchable=True))
    c.send("s2c", a.disposition(4, role="receiver", first=U, last=0, settled=True, state=a.outcome("accepted")))
    c.send("s2c", a.disposition(4, role="receiver", first=1, settled=False,
                                state=a.outcome("rejected", error=a.error("amqp:precondition-failed", "full"))))
    c.send("c2s", a.disposition(1, role="sender", first=1, last=1, settled=True,
                                state=a.outcome("modified", delivery_failed=True, undeliverable_here=False)))
    c.send("c2s", a.heartbeat())
    # the wide forms: list32 for the performative, uint 0x70 for a small handle, str32 for a description
    wide = a.Frame(a.frame(a.described(0x16, a.list_([a.uint(0, wide=True), a.boolean(True, wide=True),
                                                      a.error("amqp:link:detach-forced", "d" * 300)], wide=True)), 1))
    wide.expect = {**a.frame(b"", 1).expect, "type": "amqp", "size_bytes": len(wide) - 8, "performative": "detach",
                   "handle": 0, "closed": True, "error_condition": "amqp:link:detach-forced",
                   "error_description": "d" * 300}
    c.send("c2s", wide)
    c.send("s2c", a.detach(4, handle=9, closed=True))
    c.send("s2c", a.end(4, error=a.error("amqp:session:window-violation", "incoming window violation")))
    c.send("c2s", a.end(1))
    c.send("c2s", a.close(0, error=a.error("amqp:connection:forced", "bye")))
    c.send("s2c", a.close(0))
    c.close()
    return c


@pytest.fixture(scope="module")
def crafted(tmp_path_factory):
    c = conversation()
    path = c.write(tmp_path_factory.mktemp("kit") / "kit.pcap")
    return c, path, crafting.load(path)


def test_amqpcap_reads_exactly_the_fields_given(crafted):
    c, _, cap = crafted
    f = cap.amqp10_frames
    assert len(f) == len(c.frames) and cap.anomalies.empty, cap.anomalies.to_string()
    assert list(f["direction"].astype(object)) == [d for d, _, _ in c.frames]
    assert list(f["ts"].array.asi8) == [t for _, t, _ in c.frames]  # one frame per packet, at its time
    wrong = []
    for i, (_, _, fr) in enumerate(c.frames):
        for col, want in fr.expect.items():
            got = f[col].iat[i]
            if not (pd.isna(got) and want is None) and got != want:
                wrong.append(f"row {i} {fr.expect.get('performative')}.{col}: {got!r} != {want!r}")
    assert not wrong, "\n".join(wrong)


#: columns every row has, and those the spec's defaults fill when a field is absent (docs/tables.md)
ALWAYS = {"packet", "first_packet", "ts", "stream", "direction", "channel", "type", "size_bytes", "performative"}
DEFAULTS = {"open": {"max_frame_size", "channel_max"}, "begin": {"handle_max"},
            "attach": {"snd_settle_mode", "rcv_settle_mode"}, "flow": {"drain", "echo"},
            "transfer": {"more", "aborted", "resume", "batchable", "continuation", "delivery_id", "message_bytes",
                         "priority", "durable", "first_acquirer", "header_delivery_count"},
            "disposition": {"settled", "last", "batchable"}, "detach": {"closed"}}


def test_no_column_is_filled_but_the_given_and_the_defaulted(crafted):
    c, _, cap = crafted
    f = cap.amqp10_frames
    extra = []
    for i, (_, _, fr) in enumerate(c.frames):
        kind = fr.expect.get("performative")
        filled = {col for col in f.columns if not pd.isna(f[col].iat[i])}
        more = filled - ALWAYS - set(fr.expect) - DEFAULTS.get(kind, set())
        if more:
            extra.append(f"row {i} {kind}: {sorted(more)}")
    assert not extra, "\n".join(extra)


def test_a_message_over_two_frames_and_the_header_defaults(crafted):
    c, _, cap = crafted
    t = cap.amqp10_frames[cap.amqp10_frames["performative"] == "transfer"]
    # the continuation carries no delivery-id of its own: the table gives it the first frame's
    assert list(t["delivery_id"]) == [U, U, 0] and list(t["continuation"]) == [False, True, False]
    sizes = [len(fr) - 8 for fr in c.sent("c2s", "transfer")]
    payloads = list(t["payload_bytes"])
    assert payloads[0] + payloads[1] == len(a.message(
        a.header(durable=True, priority=7, ttl=60_000, first_acquirer=True, delivery_count=2),
        a.properties(message_id="id-1", to="/queues/kit", subject="s", reply_to="/queues/r", correlation_id="c-1",
                     content_type="text/plain", creation_time=1_700_000_000_000), a.data(b"m" * 700)))
    assert t["message_bytes"].iat[1] == payloads[0] + payloads[1] and pd.isna(t["message_bytes"].iat[0])
    assert list(t["size_bytes"]) == sizes
    assert pd.isna(t["durable"].iat[2])  # no header section: no header values at all


TSHARK_FIELDS = {"performative": "amqp.performative", "container_id": "amqp.performative.arguments.containerId",
                 "next_outgoing_id": "amqp.performative.arguments.nextOutgoingId",
                 "incoming_window": "amqp.performative.arguments.incomingWindow",
                 "handle_max": "amqp.performative.arguments.handleMax",
                 "handle": "amqp.performative.arguments.handle",
                 "initial_delivery_count": "amqp.performative.arguments.initDeliveryCount",
                 "delivery_count": "amqp.performative.arguments.deliveryCount",
                 "link_credit": "amqp.performative.arguments.linkCredit",
                 "delivery_id": "amqp.performative.arguments.deliveryId",
                 "delivery_tag": "amqp.performative.arguments.deliveryTag",
                 "first": "amqp.performative.arguments.first", "last": "amqp.performative.arguments.last",
                 "error_condition": "amqp.error.condition", "mechanism": "amqp.sasl.mechanism",
                 "sasl": "amqp.sasl.method"}
#: tshark's performative codes (Part 2 §2.7, Part 5 §5.3.3)
CODES = {k: v for k, v in a.CODES.items() if k not in ("error", "source", "target", "header", "properties", "data")
         and k not in ("accepted", "rejected", "released", "modified")}


def tshark_rows(path) -> list[dict]:
    cols = list(TSHARK_FIELDS)
    cmd = ["tshark", "-r", str(path), "-Y", "amqp", "-T", "fields", "-E", "occurrence=f"]
    for c in cols:
        cmd += ["-e", TSHARK_FIELDS[c]]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return [dict(zip(cols, line.split("\t"))) for line in out.splitlines()]


def test_tshark_reads_the_same_performatives_and_values(crafted):
    if shutil.which("tshark") is None:
        pytest.skip("tshark is installed by scripts/test.sh")
    c, path, _ = crafted
    # one frame per packet, so tshark's rows are the frames in order; an empty frame is no row of its own
    rows = tshark_rows(path)
    # rows with neither a performative nor a SASL method: the three packets holding a protocol header
    # alone (the broker's SASL header shares its packet with its mechanisms) and the empty frame
    got = [r for r in rows if r["performative"] or r["sasl"]]
    assert len(rows) - len(got) == 3 + 1
    frames = [fr for _, _, fr in c.frames if fr.expect["type"] != "empty"]
    assert [int(r["performative"] or r["sasl"]) for r in got] == [CODES[fr.expect["performative"]] for fr in frames]
    wrong = []
    for r, fr in zip(got, frames):
        for col, want in fr.expect.items():
            if col in TSHARK_FIELDS and col != "performative":
                if col == "delivery_tag":
                    have = r[col].replace(":", "")
                elif col == "error_condition" and fr.expect["performative"] == "disposition":
                    continue  # tshark shows a rejected state's error as the state, not amqp.error
                else:
                    have = int(r[col]) if r[col].lstrip("-").isdigit() else r[col]
                if have != want:
                    wrong.append(f"{fr.expect['performative']}.{col}: tshark {have!r}, given {want!r}")
    assert not wrong, "\n".join(wrong)
    # fields of performatives amqpcap and tshark both read, present where given
    assert sum(r["error_condition"] != "" for r in got) >= 4
