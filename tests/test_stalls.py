"""stalls analyzer on real captures. Expected values come from the recording scenarios'
parameters (fixtures/README.md) and from tshark (the committed `.tshark.json` facts), never from
amqpcap's own output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import amqpcap
from amqpcap.analyzers.stalls import CAUSES, STALL_COLUMNS, TCP_COLUMNS, stalls

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures"


def facts(name: str) -> dict:
    return json.loads((FIX / f"{name}.tshark.json").read_text())


@pytest.fixture(scope="module")
def results():
    cache: dict[str, tuple] = {}

    def get(name: str):
        if name not in cache:
            cap = amqpcap.load(FIX / name)
            cache[name] = (cap, stalls(cap))
        return cache[name]

    return get


def finding(result, fid):
    found = [f for f in result.findings if f.id == fid]
    assert len(found) == 1, [f.id for f in result.findings]
    return found[0]


def check_evidence(f):
    ev = f.evidence
    assert ev["streams"] and ev["packets"] and ev["filter"]
    assert "tcp.stream" in ev["filter"]


def test_tables_have_the_documented_columns(results):
    _, r = results("zero-window.pcap")
    assert list(r.tables["stalls"].columns) == STALL_COLUMNS
    assert list(r.tables["tcp"].columns) == TCP_COLUMNS
    assert set(r.summary["stalls"]["by_cause"]) == set(CAUSES)


def test_zero_window(results):
    # Scenario: SO_RCVBUF 4096, the consumer leaves the socket unread for 1.2 s; tshark flags 2
    # zero-window advertisements and 87 window-full segments.
    cap, r = results("zero-window.pcap")
    ta = facts("zero-window.pcap")["tcp_analysis"]
    tcp = r.tables["tcp"]
    assert tcp["zero_window_ads"].sum() == ta["zero_window"] == 2
    assert tcp["window_full_segments"].sum() == ta["window_full"]
    # The zero windows come from the client (the receiver): c2s packets.
    assert tcp.set_index("direction").loc["c2s", "zero_window_ads"] == 2
    # Its receive buffer is the advertised window the broker saw.
    assert tcp.set_index("direction").loc["s2c", "peer_window_max_bytes"] == 4096

    st = r.tables["stalls"]
    rw = st[st["cause"] == "receiver-window"]
    assert len(rw) == 1
    row = rw.iloc[0]
    assert row["direction"] == "s2c"
    assert row["duration_s"] == pytest.approx(1.2, abs=0.05)

    f = finding(r, "receiver-window")
    assert f.severity in ("warning", "critical")
    assert f.evidence["zero_window_ads"] == 2
    assert f.evidence["stalled_s2c_s"] == pytest.approx(1.2, abs=0.05)
    assert "tcp.analysis.zero_window" in f.evidence["filter"]
    check_evidence(f)
    assert r.summary["stalls"]["by_cause"]["receiver-window"]["count"] == 1


def test_zero_window_count_equals_tshark_now(results, tmp_path):
    tshark = pytest.importorskip("shutil").which("tshark")
    if not tshark:
        pytest.skip("tshark not installed")
    out = subprocess.run([tshark, "-r", str(FIX / "zero-window.pcap"), "-Y", "tcp.analysis.zero_window",
                          "-T", "fields", "-e", "frame.number"], capture_output=True, text=True, check=True).stdout
    frames = [int(x) for x in out.split()]
    cap, r = results("zero-window.pcap")
    assert r.tables["tcp"]["zero_window_ads"].sum() == len(frames)
    f = finding(r, "receiver-window")
    assert set(frames) <= set(f.evidence["packets"])


def test_memory_alarm(results):
    # Scenario: connection.blocked at frame 506 (t = 1.54 s), unblocked at frame 808 (t = 3.96 s),
    # reason from the broker's memory alarm.
    cap, r = results("memory-alarm.pcap")
    f = finding(r, "publisher-blocked")
    assert f.severity in ("warning", "critical")
    assert f.evidence["blocked_s"] == pytest.approx(3.96 - 1.54, abs=0.05)
    assert f.evidence["streams"] == [2]
    assert {506, 808} <= set(f.evidence["packets"])
    assert any("memory" in x for x in f.evidence["reasons"])
    assert "amqp.method.method == 60" in f.evidence["filter"]
    # The consumer connection got no deliveries while the publisher was blocked: that silence is
    # blamed on the broker's flow control, and lasts about as long as the block.
    st = r.tables["stalls"]
    bf = st[st["cause"] == "broker-flow"]
    assert len(bf) >= 1
    assert bf["duration_s"].max() == pytest.approx(2.42, abs=0.1)


def test_kernel_drops(results):
    cap, r = results("kernel-drops.pcap")
    gaps = cap.anomalies[cap.anomalies["kind"] == "capture-gap"]
    f = finding(r, "capture-gaps")
    assert f.evidence["gaps"] == len(gaps)
    assert f.evidence["bytes_missing"] == int(gaps["bytes"].sum())
    # Every "previous segment not captured" tshark flags is one of our gaps (we may find more:
    # gaps tshark notices only through the peer's ACK).
    assert f.evidence["gaps"] >= facts("kernel-drops.pcap")["tcp_analysis"]["lost_segment"]
    assert f.severity in ("warning", "critical")
    assert "-B" in f.advice
    check_evidence(f)
    # tshark counts the same retransmission.
    assert r.tables["tcp"]["retransmissions"].sum() == facts("kernel-drops.pcap")["tcp_analysis"]["retransmission"]


def test_healthy_has_no_warning(results):
    cap, r = results("healthy.pcap")
    assert [f.id for f in r.findings if f.severity != "info"] == []
    ta = facts("healthy.pcap")["tcp_analysis"]
    assert r.tables["tcp"]["zero_window_ads"].sum() == ta["zero_window"] == 0
    assert r.tables["tcp"]["window_full_segments"].sum() == ta["window_full"] == 0


@pytest.mark.parametrize("name", ["confirms.pcap", "dumpcap.pcapng", "midstream.pcap", "nagle-write-write-read.pcap",
                                  "slow-prefetch1.pcap", "rpc-nodelay.pcap"])
def test_other_captures_blame_nothing_on_tcp(results, name):
    # Loopback, no drops, no alarms: no stall may be blamed on windows, loss, flow control or
    # missing bytes. (dumpcap.pcapng holds every packet twice: the copies are not retransmissions.)
    cap, r = results(name)
    st = r.tables["stalls"]
    assert not st["cause"].isin(["capture-gap", "receiver-window", "retransmission", "broker-flow"]).any()
    assert [f.id for f in r.findings if f.severity != "info"] == []
    s = r.summary["stalls"]
    assert s["count"] == len(st)
    assert s["total_s"] == pytest.approx(st["duration_s"].sum())


def test_stall_bounds_are_data_packets(results):
    cap, r = results("zero-window.pcap")
    st = r.tables["stalls"]
    p = cap.packets.set_index("packet")
    for col, ts in (("first_packet", "start_ts"), ("last_packet", "end_ts")):
        assert (p.loc[st[col], "payload_bytes"].to_numpy() > 0).all()
        assert (p.loc[st[col], "ts"].to_numpy() == st[ts].to_numpy()).all()
    assert (st["duration_s"] >= st["threshold_s"]).all()
    assert (st["threshold_s"] >= 0.05).all()


def test_rtt_is_reported(results):
    cap, r = results("nagle-write-write-read.pcap")
    tcp = r.tables["tcp"].set_index("direction")
    # Write-write-read with Nagle: the broker's delayed ACK (~40 ms on Linux) holds the client's
    # ACK for many of its segments, so the c2s segment→ACK p90 is near 40 ms.
    assert 0.030 < tcp.loc["c2s", "rtt_p90_s"] < 0.060
    rtt = r.summary["stalls"]["rtt"]
    assert rtt["c2s"]["samples"] > 0 and rtt["c2s"]["p50_s"] is not None


def test_empty_capture_like_input(results):
    # A capture with AMQP connections but no stalls still yields typed, empty tables.
    cap, r = results("nack-requeue.pcap")
    st = r.tables["stalls"]
    assert list(st.columns) == STALL_COLUMNS


def test_cli_writes_tables_and_plots(tmp_path):
    out = tmp_path / "s"
    p = subprocess.run([sys.executable, "-m", "amqpcap", "stalls", str(FIX / "zero-window.pcap"), "--out", str(out)],
                       capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert {"stalls-stalls.csv", "stalls-tcp.csv", "stalls-window.png", "stalls-timeline.png"} <= {
        x.name for x in out.iterdir()}
    st = pd.read_csv(out / "stalls-stalls.csv")
    assert "receiver-window" in set(st["cause"])
    for png in ("stalls-window.png", "stalls-timeline.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_overlap_of_intervals_by_hand():
    from amqpcap.analyzers.stalls import _overlap_s

    stalls_ = pd.DataFrame({"stream": [1, 1, 2], "d": [0, 0, 0], "start": [0.0, 10.0, 0.0], "end": [4.0, 12.0, 1.0]})
    iv = pd.DataFrame({"stream": [1, 1, 1], "d": [0, 0, 0], "start": [1.0, 2.0, 11.5], "end": [3.0, 2.5, 20.0]})
    # [1,3] ∪ [2,2.5] = [1,3]: 2 s of [0,4]; [11.5,20] covers 0.5 s of [10,12]; stream 2 nothing.
    assert list(_overlap_s(stalls_, iv)) == pytest.approx([2.0, 0.5, 0.0])


def test_confirm_outstanding_by_hand():
    from amqpcap.analyzers.stalls import _confirm_outstanding

    # confirm.select at 0; publishes at 1, 2, 3 (tags 1..3); multiple ack of tag 2 at 4; single
    # ack of tag 3 at 5; a publish at 6 never confirmed (connection ends at 9).
    fr = pd.DataFrame({
        "packet": range(1, 8), "stream": 0, "d": [0, 0, 0, 0, 1, 1, 0], "t": [0.0, 1, 2, 3, 4, 5, 6], "channel": 1,
        "method": ["confirm.select", "basic.publish", "basic.publish", "basic.publish", "basic.ack", "basic.ack",
                   "basic.publish"]})
    f = pd.DataFrame({"delivery_tag": pd.array([None, None, None, None, 2, 3, None], dtype="UInt64"),
                      "multiple": pd.array([None, None, None, None, True, False, None], dtype="boolean")})
    iv = _confirm_outstanding(fr, f, pd.Series({0: 9.0}))
    iv = iv[iv["end"] > iv["start"]].sort_values("start")
    # Outstanding from 1 to 5, and from 6 to the end.
    merged = []
    for s, e in zip(iv["start"], iv["end"]):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    assert merged == [[1.0, 5.0], [6.0, 9.0]]


def test_consumer_at_prefetch_limit_is_blamed(monkeypatch):
    # The consumer-prefetch cause reads the consumers analyzer's credit series: a consumer at its
    # limit for the whole capture makes the consumer connection's silent s2c intervals its fault.
    import amqpcap.analyzers.consumers as consumers

    cap = amqpcap.load(FIX / "healthy.pcap")
    stream = int(cap.frames.loc[cap.frames["method"] == "basic.deliver", "stream"].iloc[0])
    first, last = cap.packets["ts"].min(), cap.packets["ts"].max()
    fake = pd.DataFrame({"stream": [stream], "channel": [1], "consumer_tag": ["t"], "ts": [first], "until_ts": [last],
                         "unacked": [100], "prefetch": [100], "at_limit": [True]})
    monkeypatch.setattr(consumers, "consumer_state", lambda c: fake)
    st = stalls(cap).tables["stalls"]
    mine = st[(st["stream"] == stream) & (st["direction"] == "s2c")]
    assert len(mine) and (mine["cause"] == "consumer-prefetch").all()
    assert not st.loc[st["direction"] == "c2s", "cause"].isin(["consumer-prefetch"]).any()
