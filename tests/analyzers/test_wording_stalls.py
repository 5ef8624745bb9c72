"""Durations with their count and typical length (issue 48): a finding that adds many intervals
into one duration says how many there were, the median and the longest, and the total, never
the total alone ("stopped reading 0.43 s" for hundreds of sub-millisecond windows). The windows
are counted independently here, from tshark's own TCP fields; the crafted captures' from their
scenario's parameters."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
from pathlib import Path

import pytest

import amqpcap
from amqpcap.engine.registered import in_memory
from amqpcap.analyzers.stalls.constants import WINDOW_MIN_S

stalls = in_memory("stalls")

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "fixtures"
from test_stalls import _publisher_held_by_broker  # noqa: E402

needs_tshark = pytest.mark.skipif(not shutil.which("tshark"), reason="needs tshark (scripts/test.sh installs it)")


def tshark_client_windows(path: Path) -> dict[int, list[float]]:
    """Per tcp.stream, from tshark alone, each time the client's window held the broker back, in
    seconds: from a broker segment tshark flags tcp.analysis.window_full (or a zero window the
    client advertised) to the client's next packet whose ACK plus window (tcp.window_size, scaled)
    reaches past that segment's end: the window open again."""
    fields = ["tcp.stream", "frame.time_relative", "tcp.srcport", "tcp.seq", "tcp.len", "tcp.ack", "tcp.window_size",
              "tcp.analysis.window_full", "tcp.analysis.zero_window"]
    out = subprocess.run(["tshark", "-r", str(path), "-Y", "tcp", "-T", "fields", "-E", "separator=/t",
                          *[x for f in fields for x in ("-e", f)]], capture_output=True, text=True, check=True).stdout
    held: dict[int, tuple[float, int | None]] = {}
    windows: dict[int, list[float]] = {}
    for line in out.splitlines():
        stream, t, sport, seq, length, ack, window, full, zero = line.split("\t")
        stream, t = int(stream), float(t)
        if sport == "5672":
            if full and stream not in held:
                held[stream] = (t, int(seq) + int(length))
        elif zero:
            held.setdefault(stream, (t, None))
        elif stream in held and int(window) > 0:
            since, end = held[stream]
            if end is None or int(ack) + int(window) > end:
                windows.setdefault(stream, []).append(t - since)
                del held[stream]
    return windows


@needs_tshark
@pytest.mark.parametrize("name, words", [
    # a consumer leaving its 4096-byte socket buffer unread 1.2 s (fixtures/README.md)
    ("zero-window.pcap", "87 times, median 0.076 ms, longest 1.20 s, 1.21 s in all = 99% of the connection's time"),
    # a consumer without prefetch, 4 ms of work per message, 2,475 messages pushed at once
    ("unlimited.pcap.gz", "29 times, median 5.7 ms, longest 22.6 ms, 0.17 s in all = 2% of the connection's time"),
])
def test_a_stopped_reader_is_told_how_often_and_how_long(name, words):
    """receiver-window's title and evidence: the client's windows as tshark counts them, how
    many, the median, the longest and their total, not the total alone."""
    f = next(x for x in stalls(amqpcap.load(FIX / name)).findings if x.id == "receiver-window")
    (windows,) = tshark_client_windows(FIX / name).values()
    ev = f.evidence
    assert ev["window_limited_episodes"] == len(windows)
    assert ev["window_limited_p50_s"] == pytest.approx(statistics.median(windows), abs=2e-6)
    assert ev["window_limited_longest_s"] == pytest.approx(max(windows), abs=2e-6)
    assert ev["window_limited_s"] == pytest.approx(sum(windows), abs=1e-5)
    assert f"zero or full TCP receive window {words}" in f.title, f.title
    sub = f.subjects[0]
    assert (sub["window_limited_episodes"], sub["window_limited_longest_s"]) == (
        ev["window_limited_episodes"], ev["window_limited_longest_s"])


@needs_tshark
def test_a_client_reading_large_messages_is_not_a_stopped_reader():
    """large-messages.pcap: the consumer advertises zero windows while PerfTest's 400 kB
    messages arrive at loopback speed, but each of its full windows is shorter than a message
    takes to arrive, and all of them add up to less than WINDOW_MIN_S: TCP pacing the broker to
    a reader that keeps reading. No receiver-window finding (the tcp table still counts the zero
    windows, as tshark does)."""
    path = FIX / "large-messages.pcap"
    (windows,) = tshark_client_windows(path).values()
    # tshark: how long each s2c message took to arrive, its content header to its last body frame
    out = subprocess.run(["tshark", "-r", str(path), "-Y", "amqp && tcp.srcport == 5672", "-T", "fields",
                          "-E", "occurrence=a", "-E", "aggregator=|", "-e", "frame.time_relative", "-e", "amqp.type"],
                         capture_output=True, text=True, check=True).stdout
    transfers, start, last = [], None, None
    for line in out.splitlines():
        t, types = line.split("\t")
        for ty in types.split("|"):
            if ty == "2":
                if start is not None:
                    transfers.append(last - start)
                start = last = float(t)
            elif ty == "3" and start is not None:
                last = float(t)
    transfers.append(last - start)
    assert len(windows) == 7 and max(windows) < min(transfers) and sum(windows) < WINDOW_MIN_S
    r = stalls(amqpcap.load(path))
    assert "receiver-window" not in {x.id for x in r.findings}, [x.title for x in r.findings]
    facts = json.loads((FIX / "large-messages.pcap.tshark.json").read_text())
    assert r.tables["tcp"]["zero_window_ads"].sum() == facts["tcp_analysis"]["zero_window"] == 4


def test_the_broker_window_twice_is_told_each(tmp_path):
    """Crafted: the broker's zero window holds a publisher 20 ms, later 300 ms (re-advertised
    every 50 ms, still one window): "twice, 0.30 s and 20.0 ms, 0.32 s in all", not a median
    of the two (160 ms, a length neither had) nor 0.32 s alone."""
    cap = _publisher_held_by_broker(tmp_path, 300, n=30, early_ms=20, probe_ms=50)
    f = next(x for x in stalls(cap).findings if x.id == "broker-flow-control")
    assert "was zero or full twice, 0.30 s and 20.0 ms, 0.32 s in all = " in f.title, f.title
    assert f.evidence["window_limited_episodes"] == 2
    assert f.evidence["window_limited_longest_s"] == pytest.approx(0.300, abs=1e-6)


def test_two_blocks_are_told_each(tmp_path):
    """Crafted: connection.blocked around both of the broker's holds (20 ms, then 500 ms): the
    title counts the blocks and tells each, not the longest as if it were the only one."""
    cap = _publisher_held_by_broker(tmp_path, 500, blocked=True, n=20, early_ms=20)
    f = next(x for x in stalls(cap).findings if x.id == "publisher-blocked")
    assert "The broker blocked crafted-publisher twice, 0.50 s and 20.1 ms, 0.52 s in all (resource alarm" in f.title, \
        f.title
    assert f.evidence["blocks"] == 2
    assert f.evidence["blocked_p50_s"] == pytest.approx((0.500 + 0.020) / 2, abs=2e-4)
