"""nagle analyzer on the recorded situations (fixtures/README.md): unbatched writes with
TCP_NODELAY, write-write-read with Nagle on, and a healthy run."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import amqpcap
from amqpcap.analyzers.nagle import nagle
from amqpcap.analyzers.sizes import sizes

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def run(name: str):
    return nagle(amqpcap.load(FIXTURES / name))


def finding(r, fid):
    hits = [f for f in r.findings if f.id == fid]
    return hits[0] if hits else None


def tshark_count(path: Path, display_filter: str) -> int:
    out = subprocess.run(["tshark", "-r", str(path), "-Y", display_filter, "-T", "fields", "-e", "frame.number"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return len(out.stdout.split())


def test_rpc_nodelay_small_packets():
    r = run("rpc-nodelay.pcap")
    f = finding(r, "small-packets")
    assert f is not None and f.severity in ("warning", "critical")
    ev = f.evidence
    # 150 calls; pika writes publish, header and body separately (three segments where one
    # would do): at least two avoidable segments per call on the client's side.
    assert ev["packets_saved"] >= 2 * 150
    assert ev["small_share"] >= 0.5
    assert ev["messages_split"] is True
    assert set(ev["streams"]) <= {0, 1} and ev["streams"]
    assert ev["packets"] and ev["filter"]
    assert all(d["direction"] == "c2s" for d in ev["directions"])  # the broker batches its frames
    assert finding(r, "nagle-delayed-ack") is None  # TCP_NODELAY on: nothing held


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")
def test_small_packets_filter_opens_the_same_segments():
    path = FIXTURES / "rpc-nodelay.pcap"
    ev = finding(run(path.name), "small-packets").evidence
    assert tshark_count(path, ev["filter"]) == ev["small_segments"]


def test_nagle_write_write_read_stalls():
    r = run("nagle-write-write-read.pcap")
    f = finding(r, "nagle-delayed-ack")
    assert f is not None and f.severity in ("warning", "critical")
    ev = f.evidence
    # 40 publishes, each header+body segment held until the broker's delayed ACK (~43 ms).
    assert ev["stalls"] >= 40
    assert 0.035 <= ev["median_stall_s"] <= 0.050
    assert ev["stall_share"] > 0.5
    assert ev["streams"] == [0] and ev["packets"]
    stalls = r.tables["stalls"]
    assert (stalls["direction"] == "c2s").all()
    assert ((stalls["ack_delay_s"] > 0.03) & (stalls["release_s"] < 0.001)).all()
    assert finding(r, "small-packets") is None  # 40 publishes over 1.8 s: a low rate


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")
def test_stall_filter_opens_the_held_segments():
    path = FIXTURES / "nagle-write-write-read.pcap"
    ev = finding(run(path.name), "nagle-delayed-ack").evidence
    assert tshark_count(path, ev["filter"]) == ev["stalls"]


def test_healthy_has_no_warning():
    cap = amqpcap.load(FIXTURES / "healthy.pcap")
    for r in (nagle(cap), sizes(cap)):
        assert not [f for f in r.findings if f.severity in ("warning", "critical")], r.findings


def test_whole_messages_not_batched_are_info():
    # kernel-drops: PerfTest publishes ~3000 msg/s, each message (3 frames) in one segment, back
    # to back: batching would save packets, but no message is split: info, not a warning.
    f = finding(run("kernel-drops.pcap"), "small-packets")
    assert f is not None and f.severity == "info"
    assert f.evidence["messages_split"] is False


@pytest.mark.parametrize("name", ["prefetch1.pcap", "confirms.pcap", "multi-ack.pcap", "nack-requeue.pcap",
                                  "slow-prefetch1.pcap", "zero-window.pcap", "midstream.pcap"])
def test_moderate_rates_are_not_small_packet_warnings(name):
    # ~100-200 messages/s, or a 30 ms burst: small packets, but too few to matter.
    r = run(name)
    assert finding(r, "small-packets") is None
    assert finding(r, "nagle-delayed-ack") is None


def test_directions_table_accounts_for_every_data_segment():
    cap = amqpcap.load(FIXTURES / "rpc-nodelay.pcap")
    d = nagle(cap).tables["directions"]
    p = cap.packets
    assert d["data_segments"].sum() == ((p["payload_bytes"] > 0) & ~p["retransmission"]).sum()
    assert (d["small_segments"] <= d["data_segments"]).all()
    assert (d["packets_saved"] < d["data_segments"]).all()
    # The SYNs carry MSS 65495 (loopback): small means below a quarter of it.
    assert set(d["mss_bytes"]) == {65495} and set(d["small_limit_bytes"]) == {16374}


def test_midstream_without_mss_uses_536():
    d = run("midstream.pcap").tables["directions"]
    assert d["mss_bytes"].isna().all() and set(d["small_limit_bytes"]) == {536}


# --- crafted conversations: the rules, with times set by hand -------------------------------------

import sys  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import crafting as c  # noqa: E402

MS = 1_000_000


def _write_write_read(tmp_path, ack_delay_ms: float, n: int = 10):
    """n publishes, each: method frame at t, the broker's pure ACK ack_delay_ms later, header +
    body 20 µs after that ACK, then the broker's reply frame 1 ms later. MSS 1460."""
    conv = c.TcpConversation().handshake()
    conv.exchange(c.opening())
    c.stamp(conv.packets, c.T0_NS, MS)
    t = conv.packets[-1].time_ns + 100 * MS
    held = []
    for i in range(n):
        (p,) = conv.send_frames("c2s", [c.basic_publish()])
        p.time_ns = t
        a = conv.ack("s2c")
        a.time_ns = t + int(ack_delay_ms * MS)
        (s,) = conv.send_frames("c2s", c.content(body=b"x" * 10))
        s.time_ns = a.time_ns + 20_000
        (r,) = conv.send_frames("s2c", [c.basic_ack(delivery_tag=i + 1)])
        r.time_ns = s.time_ns + MS
        held.append(s)
        t += 100 * MS
    path = c.write_pcap(tmp_path / "w.pcap", conv.packets)
    return c.load(path), [c.number(conv.packets, s) for s in held]


@pytest.mark.parametrize("delay_ms", [40, 200])
def test_crafted_delayed_ack_stalls(tmp_path, delay_ms):
    cap, held = _write_write_read(tmp_path, delay_ms)
    r = nagle(cap)
    st = r.tables["stalls"]
    assert st["packet"].tolist() == held
    assert st["ack_delay_s"].round(6).eq(delay_ms / 1e3).all()
    assert st["stall_s"].round(6).eq(delay_ms / 1e3 + 20e-6).all()
    f = finding(r, "nagle-delayed-ack")
    assert f is not None and f.evidence["stalls"] == 10
    # 10 stalls of delay_ms in ~1 s of connection
    assert f.severity == "critical"


def test_crafted_prompt_ack_is_no_stall(tmp_path):
    # The broker ACKs at once (5 ms): no delayed-ACK timer, nothing held.
    cap, _ = _write_write_read(tmp_path, 5)
    r = nagle(cap)
    assert r.tables["stalls"].empty and finding(r, "nagle-delayed-ack") is None


def _publisher(tmp_path, split: bool, n: int = 400, gap_ms: float = 2.5):
    """n publishes of a 10-byte body at 1 / gap_ms; each as three segments 50 µs apart (split)
    or as one segment."""
    conv = c.TcpConversation().handshake()
    conv.exchange(c.opening())
    c.stamp(conv.packets, c.T0_NS, 5 * MS)  # the opening: 5 ms apart, not a batch
    t = conv.packets[-1].time_ns + 10 * MS
    for i in range(n):
        frames = [c.basic_publish()] + c.content(body=b"x" * 10)
        segs = [conv.send_frames("c2s", [fr])[0] for fr in frames] if split else conv.send_frames("c2s", frames)
        for k, s in enumerate(segs):
            s.time_ns = t + k * 50_000
        a = conv.ack("s2c")
        a.time_ns = t + 200_000
        t += int(gap_ms * MS)
    return c.load(c.write_pcap(tmp_path / "p.pcap", conv.packets))


def test_crafted_split_publishes_are_small_packets(tmp_path):
    cap = _publisher(tmp_path, split=True)
    r = nagle(cap)
    d = r.tables["directions"].set_index("direction").loc["c2s"]
    # Each publish: 3 segments of one run merged into 1 → 2 saved; 400 publishes over 1 s.
    assert d["packets_saved"] == 2 * 400
    assert d["small_limit_bytes"] == 365  # 25 % of MSS 1460
    f = finding(r, "small-packets")
    assert f is not None and f.severity == "warning"
    assert f.evidence["packets_saved"] == 800


def test_crafted_one_segment_per_publish_is_fine(tmp_path):
    cap = _publisher(tmp_path, split=False)
    r = nagle(cap)
    d = r.tables["directions"].set_index("direction").loc["c2s"]
    assert d["packets_saved"] == 0  # 2.5 ms apart: not one batch
    assert finding(r, "small-packets") is None


DOCS = ROOT / "docs" / "analyzers" / "nagle.md"


def test_every_column_documented():
    doc = DOCS.read_text()
    r = run("nagle-write-write-read.pcap")
    for name, df in r.tables.items():
        assert f"`nagle-{name}`" in doc
        missing = [col for col in df.columns if f"`{col}`" not in doc]
        assert not missing, (name, missing)
