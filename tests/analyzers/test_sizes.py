"""sizes analyzer: packet-length buckets against tshark's `-z plen,tree`, frame/packet accounting,
throughput totals against tshark's method counts and the recording scenarios, CLI output."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import amqpcap
from amqpcap.engine.registered import in_memory
from amqpcap.analyzers.sizes import PLEN_LABELS

sizes = in_memory("sizes")

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
SHARED_MIDSTREAM = ROOT.parent / "shared" / "captures" / "ndpi-amqp-celery-midstream.pcap"


def _fixture_pairs():
    pairs = [(FIXTURES / j.name[: -len(".tshark.json")], j) for j in sorted(FIXTURES.glob("*.tshark.json"))]
    if SHARED_MIDSTREAM.exists():
        pairs.append((SHARED_MIDSTREAM, SHARED_MIDSTREAM.with_name("ndpi-amqp-celery-midstream.tshark.json")))
    return pairs


PAIRS = _fixture_pairs()
_results: dict[Path, tuple] = {}


def result(path: Path):
    if path not in _results:
        cap = amqpcap.load(path)
        _results[path] = (cap, sizes(cap))
    return _results[path]


@pytest.mark.parametrize("cap_path,facts_path", PAIRS, ids=[p.name for p, _ in PAIRS])
def test_packet_size_bins_equal_tshark_plen(cap_path, facts_path):
    plen = json.loads(facts_path.read_text())["plen"]
    _, r = result(cap_path)
    bins = r.summary["packet_sizes"]["bins"]
    assert [b["range"] for b in bins] == list(plen)  # same buckets, same spelling, same order
    assert {b["range"]: b["count"] for b in bins} == plen
    total = sum(plen.values())
    assert r.summary["packet_sizes"]["total"] == total
    # tshark prints each bucket's share of all packets with two decimals.
    assert [b["percent"] for b in bins] == [round(100 * plen[k] / total, 2) for k in plen]


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")
def test_percent_as_tshark_prints_it():
    cap_path = FIXTURES / "rpc-nodelay.pcap"
    out = subprocess.run(["tshark", "-r", str(cap_path), "-q", "-z", "plen,tree"], capture_output=True, text=True,
                         timeout=120).stdout
    printed = {}
    for line in out.splitlines():
        m = re.match(r"^\s(\d+-\d+|\d+ and greater)\s+(\d+)\s.*?(\d+\.\d+)%", line)
        if m:
            printed[m.group(1)] = (int(m.group(2)), float(m.group(3)))
    assert list(printed) == list(PLEN_LABELS)
    _, r = result(cap_path)
    assert {b["range"]: (b["count"], b["percent"]) for b in r.summary["packet_sizes"]["bins"]} == printed


@pytest.mark.parametrize("cap_path,facts_path", PAIRS, ids=[p.name for p, _ in PAIRS])
def test_per_connection_buckets_add_up(cap_path, facts_path):
    cap, r = result(cap_path)
    t = r.tables["packet-sizes"]
    per = t[t["direction"] != "all"]
    # Every AMQP packet is in exactly one bucket of its stream direction.
    assert per["count"].sum() == len(cap.packets)
    n = per.groupby(["stream", "direction"])["count"].sum()
    expect = cap.packets.groupby(["stream", cap.packets["direction"].astype(str)]).size()
    assert n.sort_index().tolist() == expect.sort_index().tolist()


@pytest.mark.parametrize("cap_path,facts_path", PAIRS, ids=[p.name for p, _ in PAIRS])
def test_frames_per_packet_sum_to_frames(cap_path, facts_path):
    # Frames of both protocols, as tshark counts them: 0-9-1 frames by type, 1.0 frames per stream.
    facts = json.loads(facts_path.read_text())
    frames = sum(facts["frame_types"].values()) + sum(s["frames"] for s in facts.get("amqp10_streams", {}).values())
    cap, r = result(cap_path)
    fpp = r.tables["frames-per-packet"]
    assert (fpp["frames_per_packet"] * fpp["packets"]).sum() == frames
    assert fpp["packets"].sum() == (cap.packets["payload_bytes"] > 0).sum()
    ppf = r.tables["packets-per-frame"]
    assert ppf["frames"].sum() == frames
    assert (ppf["packets_per_frame"] >= 1).all()
    assert sum(int(k) * v for k, v in r.summary["frames_per_packet"].items()) == frames
    assert sum(r.summary["packets_per_frame"].values()) == frames


def test_a_1_0_frame_keeps_its_type_in_packets_per_frame():
    # amqp10-multiframe: 1.0 transfers of messages larger than the frame size (fixtures/README.md);
    # tshark counts SASL frames apart from performatives (facts: `sasl`).
    path = FIXTURES / "amqp10-multiframe.pcap"
    facts = json.loads(Path(f"{path}.tshark.json").read_text())
    _, r = result(path)
    by_type = r.tables["packets-per-frame"].groupby("type", observed=True)["frames"].sum()
    assert by_type["sasl"] == sum(sum(s["sasl"].values()) for s in facts["amqp10_streams"].values())
    assert by_type["amqp"] == sum(sum(s["performatives"].values()) for s in facts["amqp10_streams"].values())
    assert not set(by_type.index) & {"method", "header", "body", "heartbeat"}


def test_rpc_nodelay_frames_per_packet_as_recorded():
    # fixtures/README.md: pika sends publish, header and body as three segments (1088 packets
    # carry exactly one AMQP frame); the broker sends each delivery as one segment (300 with 3).
    _, r = result(FIXTURES / "rpc-nodelay.pcap")
    assert r.summary["frames_per_packet"]["1"] == 1088
    assert r.summary["frames_per_packet"]["3"] == 300


def test_large_frames_span_several_packets():
    # large-messages: 400 kB bodies in 128 KiB frames over 64 KiB segments: a body frame cannot
    # fit in fewer packets than its size over the largest segment of its direction.
    path = FIXTURES / "large-messages.pcap"
    if not path.exists():
        pytest.skip("large-messages fixture not present")
    cap, r = result(path)
    ppf = r.tables["packets-per-frame"]
    assert ppf.loc[ppf["type"] == "body", "packets_per_frame"].max() >= 2
    body = cap.frames[cap.frames["type"] == "body"]
    largest = cap.packets.groupby(cap.packets["direction"].astype(str))["payload_bytes"].max()
    from amqpcap.analyzers.sizes import packets_per_frame

    data = cap.packets[cap.packets["payload_bytes"] > 0]
    span = packets_per_frame(cap.frames, data["stream"].to_numpy(np.int64) * 2 + (data["direction"] == "s2c").to_numpy(), data["packet"].to_numpy(np.int64))[(cap.frames["type"] == "body").to_numpy()]
    lower = np.ceil((body["size_bytes"].to_numpy() + 8) / largest.reindex(body["direction"].astype(str)).to_numpy())
    assert (span >= lower).all()


@pytest.mark.parametrize("cap_path,facts_path", PAIRS, ids=[p.name for p, _ in PAIRS])
def test_throughput_totals(cap_path, facts_path):
    facts = json.loads(facts_path.read_text())
    cap, r = result(cap_path)
    tp = r.tables["throughput"]
    w = r.summary["throughput"]["bin_s"]
    assert len(tp) <= 2 * 201
    assert tp["packets"].sum() == len(cap.packets)
    assert tp["bytes"].sum() == cap.packets["frame_len"].sum()
    if "dumpcap" in cap_path.name:
        return  # tshark counts each duplicated packet once there (fixtures/README.md)
    methods = facts["methods"]
    # AMQP 1.0: a delivery is its transfer frames, all but the last with `more` (Part 2 §2.7.5):
    # the client's deliveries are published, the broker's delivered (tshark's amqp10_directions)
    a10 = facts.get("amqp10_directions", {}).values()
    starts = {d: sum(s[d]["transfers"] - s[d]["transfers_more"] for s in a10) for d in ("c2s", "s2c")}
    assert round((tp["published_msgs_s"] * w).sum()) == methods.get("60.40", 0) + starts["c2s"]
    assert round((tp["delivered_msgs_s"] * w).sum()) == (methods.get("60.60", 0) + methods.get("60.71", 0)
                                                         + starts["s2c"])


def test_acked_counts_the_deliveries_multiple_acks_settled():
    # healthy: PerfTest -A 50 acks every 50th delivery with multiple=1; 12 acks settle 600
    # deliveries, every one in the capture.
    _, r = result(FIXTURES / "healthy.pcap")
    tp = r.tables["throughput"]
    w = r.summary["throughput"]["bin_s"]
    acked = (tp.loc[tp["direction"] == "c2s", "acked_msgs_s"] * w).sum()
    assert math.isclose(acked, 12 * 50)


def test_acked_s2c_counts_the_publishes_confirmed_by_a_broker_ack():
    # confirms: PerfTest -c 10 publishes 303 messages after confirm.select (tshark: 85.10 once,
    # 60.40 303 times); the broker's basic.ack frames (tshark, tcp.srcport == 5672: 294, 4 of
    # them multiple=1) reach tag 303, and no basic.nack (60.120) is in the capture.
    _, r = result(FIXTURES / "confirms.pcap")
    tp = r.tables["throughput"]
    w = r.summary["throughput"]["bin_s"]
    assert round((tp.loc[tp["direction"] == "s2c", "acked_msgs_s"] * w).sum()) == 303


def test_acked_counts_the_captured_deliveries_an_ack_settled():
    # kernel-drops: the kernel dropped 1,880 packets, among them segments holding basic.deliver
    # frames. Counted with tshark 4.0.17:
    #   tshark -r fixtures/kernel-drops.pcap -Y 'amqp.method.class == 60 && amqp.method.method == 80'
    #     -T fields -e tcp.stream -e amqp.channel -e amqp.method.arguments.delivery_tag
    #     -e amqp.method.arguments.multiple
    # 60 basic.ack, all multiple=1, all on stream 1 channel 1 (opened at frame 37, after its
    # first opening's channel.close), the last with tag 3300: they settle tags 1..3300;
    #   ... -Y 'amqp.method.class == 60 && amqp.method.method == 60' ... -e amqp.method.arguments.delivery_tag
    # 2,492 basic.deliver decoded on that channel, tags 1..3339 with 847 missing: 2,453 of them
    # have a tag <= 3300. No basic.nack, basic.reject or basic.get-ok (the facts' methods).
    # The acked count is those 2,453 deliveries, not the 3,300 tags (847 of whose deliveries
    # were lost), as the delivered count is the 2,492 captured deliveries.
    _, r = result(FIXTURES / "kernel-drops.pcap")
    tp = r.tables["throughput"]
    w = r.summary["throughput"]["bin_s"]
    assert round((tp.loc[tp["direction"] == "c2s", "acked_msgs_s"] * w).sum()) == 2453
    assert round((tp.loc[tp["direction"] == "s2c", "delivered_msgs_s"] * w).sum()) == 2492


def _acked(path: Path) -> dict[str, int]:
    _, r = result(path)
    tp, w = r.tables["throughput"], r.summary["throughput"]["bin_s"]
    return {d: round((tp.loc[tp["direction"] == d, "acked_msgs_s"] * w).sum()) for d in ("c2s", "s2c")}


def test_acked_counts_the_amqp10_deliveries_a_receiver_accepted():
    # amqp10.pcap (fixtures/README.md): stream 0 is pika's workload, 10 confirmed publishes
    # consumed and acked one by one (tshark: 60.40 ×10, 60.80 ×20); stream 1 is AMQP 1.0, 20
    # transfers each way, accepted by the receiving end's dispositions (tshark's amqp10_directions:
    # disposition_outcome_deliveries accepted 20 from each side). Acked: 10 + 20 each way.
    facts = json.loads((FIXTURES / "amqp10.pcap.tshark.json").read_text())
    a10 = facts["amqp10_directions"]["1"]
    assert a10["c2s"]["disposition_outcome_deliveries"]["accepted"] == a10["s2c"]["disposition_outcome_deliveries"]["accepted"] == 20
    assert _acked(FIXTURES / "amqp10.pcap") == {"c2s": 10 + 20, "s2c": 10 + 20}


def test_amqp10_acked_counts_accepted_not_rejected_released_or_modified():
    # amqp10-outcomes (record.sh A10_OUTCOMES_*): the client's dispositions settle 25 deliveries
    # accepted, 5 rejected, 10 released, and 1 modified on its second connection (tshark's
    # disposition_outcome_deliveries): acked, as basic.ack alone in 0-9-1, is the 25 accepted.
    facts = json.loads((FIXTURES / "amqp10-outcomes.pcap.tshark.json").read_text())
    accepted = sum(s["c2s"]["disposition_outcome_deliveries"]["accepted"] for s in facts["amqp10_directions"].values())
    assert accepted == 25
    assert _acked(FIXTURES / "amqp10-outcomes.pcap") == {"c2s": accepted, "s2c": 0}


def test_amqp10_presettled_publishes_are_published_never_acked():
    # amqp10-presettled: 50 transfers sent settled (tshark: transfers_settled 50), no disposition
    facts = json.loads((FIXTURES / "amqp10-presettled.pcap.tshark.json").read_text())
    assert facts["amqp10_directions"]["0"]["c2s"]["transfers_settled"] == 50
    assert _acked(FIXTURES / "amqp10-presettled.pcap") == {"c2s": 0, "s2c": 0}


def test_bin_width_gives_about_200_bins():
    from amqpcap.analyzers.sizes import bin_width_s

    for duration in (0.001, 0.37, 1.1, 3.2, 60, 86400):
        w = bin_width_s(duration)
        assert 80 <= duration / w <= 200 + 1e-9, (duration, w)


def test_cli_writes_tables_and_pngs(tmp_path):
    out = tmp_path / "x"
    r = subprocess.run([sys.executable, "-m", "amqpcap", "sizes", str(FIXTURES / "rpc-nodelay.pcap"), "--out", str(out)],
                       capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    names = {p.name for p in out.iterdir()}
    for t in ("packet-sizes", "payload-sizes", "frames-per-packet", "packets-per-frame", "throughput"):
        assert f"sizes-{t}.csv" in names
    for p in ("sizes-packet-sizes", "sizes-frames-per-packet", "sizes-throughput", "sizes-segment-sizes"):
        png = out / f"{p}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_every_column_and_summary_key_documented():
    doc = (ROOT / "docs" / "analyzers" / "sizes.md").read_text()
    _, r = result(FIXTURES / "rpc-nodelay.pcap")
    for name, df in r.tables.items():
        assert f"`sizes-{name}`" in doc
        missing = [col for col in df.columns if f"`{col}`" not in doc]
        assert not missing, (name, missing)
    for key in r.summary:
        assert f"`{key}" in doc, key


# -- slices of a partition's time (amqpcap.analysis.partition.Slicing) --------------------------------------

def _sliced_everywhere(path: Path):
    """The capture's sizes partial whole, and cut before every packet (`clean_cuts` every 1)."""
    from amqpcap.engine.registered import splits
    from amqpcap.model.facts import ns
    from amqpcap.engine.partitions import sliced_partial
    from amqpcap.io.pieces import facts_of
    from amqpcap.model.facts import clean_cuts

    cap = amqpcap.load(path)
    facts = facts_of(cap)
    cuts = clean_cuts(cap.packets["packet"].to_numpy(np.int64), ns(cap.packets["ts"]), 1)
    assert len(cuts) == len(cap.packets) - 1
    split = splits()["sizes"]
    return cap, split.partial(cap, facts), sliced_partial(split, cap, facts, cuts)


def test_acked_over_slices_counts_the_captured_deliveries_each_ack_settled(tmp_path):
    """Acked messages are the captured deliveries settled by a basic.ack, at the ack's time,
    wherever the slices are cut: a multiple ack over a lost delivery counts the captured ones;
    after the channel is opened again its tags start over (a multiple ack there settles only
    the new opening's deliveries); a nack settles without acking."""
    import crafting as c
    from test_partition import assert_same_partial

    conv = c.TcpConversation().handshake()
    conv.exchange(c.opening())
    conv.send_frames("c2s", [c.basic_consume()])
    conv.send_frames("s2c", [c.basic_consume_ok()])

    def deliver(tag):
        return conv.send_frames("s2c", [c.basic_deliver(delivery_tag=tag), *c.content(body=b"m")])

    deliver(1)
    lost = deliver(2)
    deliver(3)
    conv.send_frames("c2s", [c.basic_ack(delivery_tag=3, multiple=True)])  # settles 1, 2, 3: 2 captured
    conv.send_frames("c2s", [c.channel_close(channel=1, reply_code=200, reply_text="", class_id=0, method_id=0)])
    conv.send_frames("s2c", [c.channel_close_ok()])
    conv.send_frames("c2s", [c.channel_open()])
    conv.send_frames("s2c", [c.channel_open_ok()])
    conv.send_frames("c2s", [c.basic_consume()])
    conv.send_frames("s2c", [c.basic_consume_ok()])
    for tag in (1, 2, 3):
        deliver(tag)
    conv.send_frames("c2s", [c.basic_ack(delivery_tag=2, multiple=True)])  # 1, 2 of the new opening
    conv.send_frames("c2s", [c.basic_nack(delivery_tag=3)])  # settled, not acked
    conv.drop(*lost)
    c.write_pcap(tmp_path / "acks.pcap", conv.close().timed())
    cap, whole, sliced = _sliced_everywhere(tmp_path / "acks.pcap")
    assert (cap.frames["method"] == "basic.deliver").sum() == 5  # (the lost one is not decoded)
    acked = whole.partials[0]["throughput"]["acked"]
    assert acked[:, 0].sum() == 2 + 2 and acked[:, 1].sum() == 0
    assert_same_partial(sliced, whole, "cut before every packet")


def test_a_frame_that_starts_in_a_segment_received_early_spans_the_slices_as_the_whole(tmp_path):
    """Segments out of order: the one holding the end of a frame and the start of the next comes
    before the one that completes the first frame, so the next frame starts in a packet before
    the last frame-completing one; its span is the whole's wherever the slices are cut."""
    import crafting as c
    from test_partition import assert_same_partial

    conv = c.TcpConversation().handshake()
    frames = [c.basic_publish(), c.content_header(body_size=3000), c.body_frame(data=b"x" * 3000)]
    segs = conv.send_frames("c2s", frames, segment_sizes=[20, 200, 1000, 1000])
    conv.swap(segs[0], segs[1])
    c.write_pcap(tmp_path / "reordered.pcap", conv.close().timed())
    cap, whole, sliced = _sliced_everywhere(tmp_path / "reordered.pcap")
    f = cap.frames
    assert (f["first_packet"].to_numpy()[1:] < f["packet"].to_numpy()[:-1]).any()  # (the hazard is there)
    assert_same_partial(sliced, whole, "cut before every packet")


def test_amqp10_messages_over_slices_are_the_whole_partitions():
    """amqp10-multiframe: each of the 2 messages each way spans 27 transfer frames (tshark: 54
    transfers, 52 with `more`), accepted by a disposition after its last frame: cut before every
    packet, each message is published (delivered) once, by its first frame's slice, and acked
    once, by the last slice (which has every frame before it), as the whole partition counts."""
    from test_partition import assert_same_partial

    cap, whole, sliced = _sliced_everywhere(FIXTURES / "amqp10-multiframe.pcap")
    t = whole.partials[0]["throughput"]
    assert t["published"][:, 0].sum() == 2 and t["delivered"][:, 1].sum() == 2
    assert t["acked"][:, 0].sum() == 2 and t["acked"][:, 1].sum() == 2
    assert_same_partial(sliced, whole, "cut before every packet")
