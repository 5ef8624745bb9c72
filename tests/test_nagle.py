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
