"""TCP-level edge cases crafted with scapy: retransmission, reordering, overlap,
gaps, snaplen truncation, tiny segments, port reuse, sequence wrap, mid-stream
starts.  Expected values come from the crafted scenario (see tests/crafting.py).
"""

import pandas as pd
import pytest

import crafting as c


def publish(channel=1, body=b"hello", **props):
    """basic.publish + content header + body frames."""
    return [c.basic_publish(channel), *c.content(channel, body, **props)]


def opened(**kw) -> c.TcpConversation:
    """Handshake + AMQP opening, nothing else yet."""
    conv = c.TcpConversation(**kw).handshake()
    conv.exchange(c.opening())
    return conv


def write_load(tmp_path, records, name="t.pcap", **kw):
    path = c.write_pcap(tmp_path / name, records, **kw)
    return c.load(path)


def packets_row(cap, records, pkt) -> pd.Series:
    rows = cap.packets[cap.packets["packet"] == c.number(records, pkt)]
    assert len(rows) == 1, f"packet {c.number(records, pkt)} has {len(rows)} packets rows"
    return rows.iloc[0]


# ---------------------------------------------------------------------------
# baseline: a clean conversation, every packets/connections column checked
# ---------------------------------------------------------------------------

def test_clean_conversation_packets_and_connection(tmp_path):
    conv = opened()
    conv.send_frames("c2s", publish(body=b"x" * 3000), segment_sizes=[500])
    conv.ack("s2c")
    conv.send_frames("s2c", [c.basic_deliver(), *c.content(1, b"y" * 10)])
    conv.send_frames("c2s", [c.basic_ack()])
    conv.close()
    recs = conv.timed()
    cap = write_load(tmp_path, recs)

    c.assert_frames(cap.frames, c.expected_frames(recs, conv))
    exp = c.expected_packets(recs, conv)
    exp_frames = c.expected_frames(recs, conv)
    assert len(cap.packets) == len(exp)
    for e, (_, row) in zip(exp, cap.packets.iterrows()):
        for k, v in e.items():
            assert c._same(row[k], v), f"packet {e['packet']}: {k} = {row[k]!r}, expected {v!r}"
    assert cap.packets.set_index("packet")["frames_ended"].to_dict() == {
        e["packet"]: sum(f["packet"] == e["packet"] for f in exp_frames) for e in exp}
    assert not cap.packets["retransmission"].any()
    assert (cap.packets["gap_before"] == 0).all()
    assert cap.anomalies.empty, cap.anomalies.to_string()

    assert len(cap.connections) == 1
    conn = cap.connections.iloc[0]
    c2s = [p for p in recs if p.direction == "c2s"]
    s2c = [p for p in recs if p.direction == "s2c"]
    expected = dict(
        stream=0, client_addr="10.0.0.1", broker_addr="10.0.0.2", client_port=40000,
        broker_port=5672, first_ts=c.ts(recs[0].time_ns), last_ts=c.ts(recs[-1].time_ns),
        c2s_packets=len(c2s), s2c_packets=len(s2c),
        c2s_bytes=sum(len(p.payload) for p in c2s), s2c_bytes=sum(len(p.payload) for p in s2c),
        handshake_seen=True, protocol_header_seen=True, frame_max=131072, channel_max=2047,
        heartbeat_s=60, vhost="/", user="guest", mechanism="PLAIN", client_product="pika",
        client_version="1.3.2", client_platform="Python 3.11.7", server_product="RabbitMQ",
        server_version="3.13.7", mss_c2s=1460, mss_s2c=1460, window_scale_c2s=7,
        window_scale_s2c=9, frames=len(cap.frames),
        c2s_bytes_decoded=len(conv.data["c2s"]), s2c_bytes_decoded=len(conv.data["s2c"]),
        c2s_bytes_skipped=0, s2c_bytes_skipped=0, bytes_missing=0, anomalies=0)
    for k, v in expected.items():
        assert c._same(conn[k], v), f"connections.{k} = {conn[k]!r}, expected {v!r}"
    assert pd.isna(conn["connection_name"])


def test_non_amqp_records_and_streams_are_numbered(tmp_path):
    """Packet numbers count every record; stream numbers count every TCP conversation."""
    from scapy.all import IP, UDP, Raw
    udp = c.RawRecord(IP(src="10.0.0.9", dst="10.0.0.10") / UDP(sport=9999, dport=9999) / Raw(b"not amqp"))
    http = c.TcpConversation(client=("10.0.0.1", 41000), broker=("10.0.0.3", 80)).handshake()
    http.send("c2s", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    http.send("s2c", b"HTTP/1.1 204 No Content\r\n\r\n")
    amqp = opened()
    amqp.send_frames("c2s", publish())
    recs = c.stamp([udp] + http.packets[:2] + amqp.packets[:1] + http.packets[2:]
                   + amqp.packets[1:])
    cap = write_load(tmp_path, recs)

    c.assert_frames(cap.frames, c.expected_frames(recs, amqp, streams=[1]))
    assert list(cap.connections["stream"]) == [1]
    assert set(cap.packets["stream"]) == {1}
    assert list(cap.packets["packet"]) == [c.number(recs, p) for p in amqp.packets]
    assert cap.summary["packets"] == len(recs)
    assert cap.summary["tcp_packets"] == len(recs) - 1


# ---------------------------------------------------------------------------
# 1. retransmission
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["right-after", "after-later-data"])
def test_retransmitted_segment_counted_once(tmp_path, where):
    conv = opened()
    segs = conv.send_frames("c2s", publish(body=b"z" * 2000), segment_sizes=[700, 700])
    conv.send_frames("c2s", [c.basic_publish(routing_key="second")])
    copy = conv.duplicate(segs[1], at=None if where == "right-after" else len(conv.packets))
    conv.ack("s2c")
    recs = conv.timed()
    cap = write_load(tmp_path, recs)

    expected = c.expected_frames(recs, conv)
    assert len(expected) == 8 + 4  # opening frames + publish (3) + publish
    c.assert_frames(cap.frames, expected)
    retrans = cap.packets.set_index("packet")["retransmission"]
    assert retrans[c.number(recs, copy)]
    assert retrans.sum() == 1
    assert packets_row(cap, recs, copy)["frames_ended"] == 0
    conn = cap.connections.iloc[0]
    assert conn["c2s_bytes"] == len(conv.data["c2s"]) + len(copy.payload)
    assert conn["c2s_bytes_decoded"] == len(conv.data["c2s"])
    assert c.kinds(cap, "capture-gap").empty


# ---------------------------------------------------------------------------
# 2. reordering
# ---------------------------------------------------------------------------

def test_reordered_segments(tmp_path):
    def build(swap):
        conv = opened()
        segs = conv.send_frames("c2s", publish(body=b"r" * 1500), segment_sizes=[30, 600])
        if swap:
            conv.swap(segs[1], segs[2])
        conv.ack("s2c")
        return conv, conv.timed()

    conv, recs = build(swap=True)
    cap = write_load(tmp_path, recs, "swapped.pcap")
    _, recs0 = build(swap=False)
    cap0 = write_load(tmp_path, recs0, "inorder.pcap")

    c.assert_frames(cap.frames, c.expected_frames(recs, conv))
    pd.testing.assert_frame_equal(c.comparable(cap.frames), c.comparable(cap0.frames))
    assert c.kinds(cap, "capture-gap").empty
    assert c.kinds(cap, "resync-skipped").empty
    assert not cap.packets["retransmission"].any()
    assert (cap.packets["gap_before"] == 0).all()
    # the body frame (bytes 30+.. of the publish) is completed by the late segment
    late = [p for p in conv.packets if p.direction == "c2s" and p.payload][-1]
    body = cap.frames[cap.frames["type"] == "body"].iloc[-1]
    assert body["packet"] == c.number(recs, late)
    assert body["first_packet"] == c.number(recs, late)  # its first byte is at offset 51


# ---------------------------------------------------------------------------
# 3. overlapping retransmission
# ---------------------------------------------------------------------------

def test_overlapping_retransmission(tmp_path):
    conv = opened()
    segs = conv.send_frames("c2s", publish(body=b"o" * 500), segment_sizes=[100, 100])
    base = segs[0].offset
    # replace the second segment by one re-sending bytes 50..200 (half old, half new)
    at = conv.index(segs[1])
    conv.drop(segs[1])
    overlap = conv.retransmit("c2s", base + 50, 150, at=at)
    conv.ack("s2c")
    recs = conv.timed()
    cap = write_load(tmp_path, recs)

    plain = opened()
    plain.send_frames("c2s", publish(body=b"o" * 500), segment_sizes=[100, 100])
    plain.ack("s2c")
    cap0 = write_load(tmp_path, plain.timed(), "plain.pcap")

    c.assert_frames(cap.frames, c.expected_frames(recs, conv))
    pd.testing.assert_frame_equal(c.comparable(cap.frames), c.comparable(cap0.frames))
    assert packets_row(cap, recs, overlap)["retransmission"]
    assert cap.packets["retransmission"].sum() == 1
    assert c.kinds(cap, "capture-gap").empty
    assert cap.connections.iloc[0]["c2s_bytes_decoded"] == len(conv.data["c2s"])


# ---------------------------------------------------------------------------
# 4. capture gap
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("cut", ["inside-body", "frame-boundary", "across-frames"])
def test_capture_gap(tmp_path, cut):
    conv = opened()
    before = publish(body=b"a" * 100)
    conv.send_frames("c2s", before)
    m2, h2, b2 = publish(body=b"b" * 3000)
    after = publish(body=b"c" * 20) + [c.basic_publish(routing_key="last")]
    if cut == "inside-body":
        # segments of 1000 bytes; the second (middle of b2's body) is dropped. The hole lies
        # inside a body frame whose size the header gave: b2 is still decoded, nothing skipped.
        segs = conv.send_frames("c2s", [m2, h2, b2] + after, segment_sizes=[1000, 1000])
        dropped, first_after = segs[1], segs[2]
        tail = head = 0
        lost_frames = []
    elif cut == "frame-boundary":
        # the dropped segment holds exactly the header and body frames
        segs = conv.send_frames("c2s", [m2, h2, b2] + after,
                                segment_sizes=[len(m2), len(h2) + len(b2)])
        dropped, first_after = segs[1], segs[2]
        tail = head = 0
        lost_frames = [h2, b2]
    else:
        # the hole cuts the content header: decoding resynchronises on the next publish
        segs = conv.send_frames("c2s", [m2, h2, b2] + after, segment_sizes=[len(m2) + 10, 200])
        dropped, first_after = segs[1], segs[2]
        head = 10                                       # h2 bytes before the gap
        tail = len(h2) + len(b2) - 10 - 200             # b2 bytes after the gap
        lost_frames = [h2, b2]
    conv.ack("s2c")  # the broker got everything: the capture dropped it
    conv.send_frames("s2c", [c.basic_ack(delivery_tag=2)])
    conv.drop(dropped)
    recs = conv.timed()
    cap = write_load(tmp_path, recs)

    gap_len = len(dropped.payload)
    gaps = c.kinds(cap, "capture-gap")
    assert len(gaps) == 1, cap.anomalies.to_string()
    g = gaps.iloc[0]
    assert (g["stream"], g["direction"], g["bytes"]) == (0, "c2s", gap_len)
    assert g["packet"] == c.number(recs, first_after)
    assert g["ts"] == c.ts(first_after.time_ns)

    gap_before = cap.packets.set_index("packet")["gap_before"]
    assert gap_before[c.number(recs, first_after)] == gap_len
    assert gap_before.sum() == gap_len

    # every frame not touching the gap is decoded, nothing else
    lost = {id(f) for f in lost_frames}
    kept = [f for _, _, f in conv.frame_log if id(f) not in lost]
    assert len(cap.frames) == len(kept)
    assert list(cap.frames["method"].astype(object).fillna(cap.frames["type"].astype(object))) \
        == [f.expect.get("method", f.expect["type"]) for f in kept]
    last = cap.frames[cap.frames["direction"] == "c2s"].iloc[-1]
    assert last["routing_key"] == "last"

    skipped = c.kinds(cap, "resync-skipped")
    if tail:
        # the cut frame's bytes before the gap are reported with the bytes skipped after it
        after_gap = skipped[(skipped["direction"] == "c2s")
                            & (skipped["packet"] == c.number(recs, first_after))]
        assert list(after_gap["bytes"]) == [head + tail], cap.anomalies.to_string()
    else:
        assert skipped.empty, cap.anomalies.to_string()

    conn = cap.connections.iloc[0]
    decoded_c2s = len(c.PROTOCOL_HEADER) + sum(len(f) for d, _, f in conv.frame_log
                                               if d == "c2s" and id(f) not in lost)
    if cut == "inside-body":
        decoded_c2s -= gap_len
    assert conn["bytes_missing"] == gap_len
    assert conn["c2s_bytes_decoded"] == decoded_c2s
    assert conn["c2s_bytes_skipped"] == head + tail
    assert conn["c2s_bytes_decoded"] + conn["c2s_bytes_skipped"] + gap_len == len(conv.data["c2s"])
    assert conn["anomalies"] == len(cap.anomalies)


# ---------------------------------------------------------------------------
# 5. snaplen truncation
# ---------------------------------------------------------------------------

HEADERS = 14 + 20 + 32  # Ethernet + IPv4 + TCP with NOP NOP Timestamp


def test_truncated_record(tmp_path):
    conv = opened()
    first = conv.send_frames("c2s", publish(body=b"t" * 1000))[0]
    nxt = conv.send_frames("c2s", publish(body=b"u" * 10))[0]
    conv.ack("s2c")
    recs = conv.timed()
    first.caplen = HEADERS + 50
    cap = write_load(tmp_path, recs)

    wire = len(first.frame_bytes())
    missing = wire - first.caplen
    assert missing == len(first.payload) - 50
    tr = c.kinds(cap, "truncated-packet")
    assert len(tr) == 1, cap.anomalies.to_string()
    t = tr.iloc[0]
    assert (t["stream"], t["direction"], t["packet"], t["bytes"]) == \
        (0, "c2s", c.number(recs, first), missing)
    row = packets_row(cap, recs, first)
    assert row["frame_len"] == wire
    assert row["payload_bytes"] == len(first.payload)
    assert packets_row(cap, recs, nxt)["gap_before"] == missing
    assert cap.connections.iloc[0]["bytes_missing"] == missing
    # the 50 captured bytes hold the whole basic.publish (29) and part of the header:
    # the publish is decoded, its header and body are lost, the next message is whole
    in_first = cap.frames[cap.frames["packet"] == c.number(recs, first)]
    assert list(in_first["method"]) == ["basic.publish"]
    assert list(cap.frames[cap.frames["packet"] == c.number(recs, nxt)]["type"]) == \
        ["method", "header", "body"]
    assert c.kinds(cap, "capture-gap").empty


def test_file_snaplen(tmp_path):
    conv = opened()
    conv.send_frames("c2s", publish(body=b"s" * 400))
    conv.ack("s2c")
    recs = conv.timed()
    snaplen = 96
    cap = write_load(tmp_path, recs, snaplen=snaplen)

    long_ones = [p for p in recs if len(p.frame_bytes()) > snaplen]
    tr = c.kinds(cap, "truncated-packet")
    assert list(tr["packet"]) == [c.number(recs, p) for p in long_ones]
    assert list(tr["bytes"]) == [len(p.frame_bytes()) - snaplen for p in long_ones]
    fl = cap.packets.set_index("packet")
    for p in recs:
        assert fl.loc[c.number(recs, p), "frame_len"] == len(p.frame_bytes())
        assert fl.loc[c.number(recs, p), "payload_bytes"] == len(p.payload)
    # only frames that fit in the first 96 - HEADERS payload bytes of a packet survive
    keep = snaplen - HEADERS
    fits = [f for d, off, f in conv.frame_log
            if any(p.direction == d and p.offset is not None and p.payload
                   and p.offset <= off and off + len(f) <= p.offset + min(keep, len(p.payload))
                   for p in recs)]
    assert len(cap.frames) == len(fits)
    assert cap.connections.iloc[0]["bytes_missing"] == sum(
        len(p.frame_bytes()) - snaplen for p in long_ones)


# ---------------------------------------------------------------------------
# 6. one frame over many segments
# ---------------------------------------------------------------------------

def test_frame_split_one_byte_per_segment(tmp_path):
    conv = opened()
    pub = c.basic_publish(exchange="ex", routing_key="tiny", mandatory=True)
    segs = conv.send_frames("c2s", [pub], segment_sizes=1)
    assert len(segs) == len(pub)
    rest = conv.send_frames("c2s", c.content(1, b"payload", delivery_mode=2))[0]
    conv.ack("s2c")
    recs = conv.timed()
    cap = write_load(tmp_path, recs)

    c.assert_frames(cap.frames, c.expected_frames(recs, conv))
    row = cap.frames[cap.frames["method"] == "basic.publish"]
    assert len(row) == 1
    assert row.iloc[0]["first_packet"] == c.number(recs, segs[0])
    assert row.iloc[0]["packet"] == c.number(recs, segs[-1])
    assert row.iloc[0]["routing_key"] == "tiny"
    ended = cap.packets.set_index("packet")["frames_ended"]
    assert [ended[c.number(recs, s)] for s in segs] == [0] * (len(segs) - 1) + [1]
    assert ended[c.number(recs, rest)] == 2


# ---------------------------------------------------------------------------
# 9. port reuse
# ---------------------------------------------------------------------------

def test_port_reuse_makes_two_streams(tmp_path):
    first = opened(isn_c=1_000, isn_s=50_000)
    first.send_frames("c2s", [c.connection_close()])
    first.send_frames("s2c", [c.connection_close_ok()])
    first.close()
    second = opened(isn_c=900_000_000, isn_s=7_000)
    second.send_frames("c2s", publish(body=b"again"))
    second.close()
    recs = c.stamp(first.packets + second.packets)
    cap = write_load(tmp_path, recs)

    c.assert_frames(cap.frames, c.expected_frames(recs, [first, second], streams=[0, 1]))
    assert list(cap.connections["stream"]) == [0, 1]
    assert list(cap.connections["client_port"]) == [40000, 40000]
    assert list(cap.connections["handshake_seen"]) == [True, True]
    counts = cap.packets.groupby("stream").size().to_dict()
    assert counts == {0: len(first.packets), 1: len(second.packets)}
    # relative sequence numbers restart with the new ISN
    syn2 = cap.packets[cap.packets["packet"] == c.number(recs, second.packets[0])].iloc[0]
    assert (syn2["stream"], syn2["seq"]) == (1, 0)


# ---------------------------------------------------------------------------
# 10. sequence number wrap
# ---------------------------------------------------------------------------

def test_sequence_number_wrap(tmp_path):
    conv = opened(isn_c=2**32 - 300, isn_s=2**32 - 5)
    conv.send_frames("c2s", publish(body=b"w" * 3000))
    conv.send_frames("s2c", [c.basic_deliver(), *c.content(1, b"v" * 2000)], segment_sizes=700)
    conv.close()
    recs = conv.timed()
    assert any(p.abs_seq >= 2**32 for p in recs if p.direction == "c2s")
    assert any(p.abs_seq >= 2**32 for p in recs if p.direction == "s2c")
    cap = write_load(tmp_path, recs)

    c.assert_frames(cap.frames, c.expected_frames(recs, conv))
    assert cap.anomalies.empty, cap.anomalies.to_string()
    assert list(cap.packets["seq"]) == [p.seq for p in recs]
    assert list(cap.packets["ack"]) == [p.ack for p in recs]
    assert not cap.packets["retransmission"].any()


# ---------------------------------------------------------------------------
# 11. capture starting mid-stream, inside a frame
# ---------------------------------------------------------------------------

def test_mid_stream_start(tmp_path):
    conv = opened()
    conv.send_frames("s2c", [c.basic_deliver(delivery_tag=1), *c.content(1, b"d" * 100)])
    pub = publish(body=b"m" * 300)
    segs = conv.send_frames("c2s", pub, segment_sizes=[20])
    conv.send_frames("s2c", [c.basic_deliver(delivery_tag=2), *c.content(1, b"e" * 100)])
    conv.send_frames("c2s", [c.basic_ack(delivery_tag=2)])
    start = conv.index(segs[1])  # first captured packet: 20 bytes into basic.publish
    recs = c.stamp(conv.packets[start:])
    cap = write_load(tmp_path, recs)

    skip = len(pub[0]) - 20
    s2c_start = next(p.offset for p in recs if p.direction == "s2c" and p.payload)
    expected = c.expected_frames(recs, conv, start={"c2s": segs[1].offset + skip,
                                                    "s2c": s2c_start})
    c.assert_frames(cap.frames, expected)
    assert cap.frames.iloc[0]["type"] == "header"

    rs = c.kinds(cap, "resync-skipped")
    assert len(rs) == 1, cap.anomalies.to_string()
    assert (rs.iloc[0]["direction"], rs.iloc[0]["bytes"], rs.iloc[0]["packet"]) == ("c2s", skip, 1)
    conn = cap.connections.iloc[0]
    assert (conn["handshake_seen"], conn["protocol_header_seen"]) == (False, False)
    assert (conn["client_port"], conn["broker_port"]) == (40000, 5672)
    assert conn["c2s_bytes_skipped"] == skip
    assert conn["s2c_bytes_skipped"] == 0
    assert cap.packets.iloc[0]["seq"] == 1


