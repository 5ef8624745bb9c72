"""The TCP-level findings (nagle-delayed-ack, small-packets, receiver-window,
broker-flow-control) on every fixture: each one that fires is backed by the mechanism it blames,
checked with tshark (an independent dissector), and its numbers are per connection, never a sum
over connections beyond the capture's duration (issue 12).

fixtures/flow-control.pcap.gz (10 PerfTest producers without a rate limit, the broker applying
credit-based flow control; its notes give the connection states rabbitmqctl reported) must be
blamed on the broker's flow control and never on Nagle."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import amqpcap
from amqpcap.engine.registered import in_memory
from tiers import one_fast

nagle, stalls = in_memory("nagle"), in_memory("stalls")

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "fixtures"
CAPTURES = sorted([*FIX.glob("*.pcap"), *FIX.glob("*.pcapng"), *FIX.glob("*.pcap.gz"),
                   ROOT / "amqpcap" / "data" / "sample.pcap"])
FLOW = FIX / "flow-control.pcap.gz"
MINE = ("nagle-delayed-ack", "small-packets", "receiver-window", "broker-flow-control")

pytestmark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")

_cache: dict[Path, tuple] = {}


def run(path: Path):
    if path not in _cache:
        # 5671 too: tls.pcap's listener. Without its key log nothing there is AMQP.
        cap = amqpcap.load(path)
        _cache[path] = (cap, {f.id: f for r in (nagle(cap), stalls(cap)) for f in r.findings})
    return _cache[path]


@functools.lru_cache(maxsize=None)
def tshark(path: Path, display_filter: str, *fields: str) -> list[list[str]]:
    cmd = ["tshark", "-r", str(path), "-Y", display_filter, "-T", "fields", "-E", "separator=/t"]
    out = subprocess.run(cmd + sum((["-e", f] for f in fields), []), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return [line.split("\t") for line in out.stdout.splitlines()]


def streams(path: Path, display_filter: str) -> set[int]:
    return {int(r[0]) for r in tshark(path, display_filter, "tcp.stream")}


def stream_spans(path: Path) -> dict[int, tuple[float, float]]:
    """First and last packet time of every tcp.stream, from tshark."""
    spans: dict[int, tuple[float, float]] = {}
    for s, t in tshark(path, "tcp", "tcp.stream", "frame.time_relative"):
        a, b = spans.get(int(s), (float(t), float(t)))
        spans[int(s)] = (min(a, float(t)), max(b, float(t)))
    return spans


@pytest.mark.parametrize("path", one_fast(CAPTURES), ids=[p.name for p in CAPTURES])
def test_every_tcp_finding_rests_on_its_mechanism(path):
    cap, found = run(path)
    mine = {k: v for k, v in found.items() if k in MINE}
    if not mine:
        return
    spans = stream_spans(path)
    port = "{" + ", ".join(str(int(p)) for p in sorted(set(cap.connections["broker_port"]))) + "}"
    for fid, f in mine.items():
        # One finding per cause, its subjects named, worst first in the title.
        assert f.subjects and f.subjects[0]["connection"] in f.title, fid
        assert f.evidence["streams"] == sorted({s["stream"] for s in f.subjects})
        for sub in f.subjects:  # a subject's own time fits in its own connection (tshark's span)
            a, b = spans[sub["stream"]]
            for key in ("stall_time_s", "window_limited_s", "stalled_s"):
                if key in sub:
                    assert sub[key] <= b - a + 1e-6, (fid, sub)
    if "nagle-delayed-ack" in mine:
        # Nagle allows one small segment in flight: at every previous segment P of a held
        # segment, tshark's bytes in flight are P's own bytes.
        st = nagle(cap).tables["stalls"]
        rows = tshark(path, "frame.number in {" + ", ".join(map(str, st["previous_packet"])) + "}",
                      "tcp.len", "tcp.analysis.bytes_in_flight")
        assert len(rows) == len(st) and all(a == b for a, b in rows)
    if "receiver-window" in mine:  # the client advertised a zero window, or the broker filled it
        seen = streams(path, f"(tcp.analysis.zero_window && tcp.dstport in {port}) || "
                             f"(tcp.analysis.window_full && tcp.srcport in {port})")
        assert {s["stream"] for s in mine["receiver-window"].subjects} <= seen
    if "broker-flow-control" in mine:  # the broker advertised a zero window, or a client filled it
        seen = streams(path, f"(tcp.analysis.zero_window && tcp.srcport in {port}) || "
                             f"(tcp.analysis.window_full && tcp.dstport in {port})")
        assert {s["stream"] for s in mine["broker-flow-control"].subjects} <= seen
    if "small-packets" in mine:  # the client's segments of each subject are mostly small (tshark)
        subs = mine["small-packets"].subjects
        rows = tshark(path, f"tcp.stream in {{{', '.join(str(x['stream']) for x in subs)}}} && tcp.dstport in {port} "
                            "&& tcp.len > 0 && !tcp.analysis.retransmission", "tcp.stream", "tcp.len")
        for sub in subs:
            lens = [int(n) for s, n in rows if int(s) == sub["stream"]]
            assert sum(n < sub["small_limit_bytes"] for n in lens) >= 0.5 * len(lens)


# --- the flow-control capture ---------------------------------------------------------------------

needs_flow = pytest.mark.skipif(not FLOW.exists(), reason="fixtures/flow-control.pcap.gz not recorded")


def broker_view() -> dict[int, tuple[str, str]]:
    """{client port: (connection name, state)} as rabbitmqctl list_connections reported them
    during the recording (fixtures/flow-control.notes.txt): the broker's own view."""
    text = FLOW.with_name("flow-control.notes.txt").read_text()
    return {int(port): (name, state) for name, port, state in re.findall(r"^\s+(\S+) \(client port (\d+)\): (\w+)",
                                                                          text, re.M)}


def client_ports(path: Path) -> dict[int, int]:
    """{tcp.stream: client port} from tshark (the SYN's source port)."""
    return {int(s): int(p) for s, p in tshark(path, "tcp.flags.syn == 1 && tcp.flags.ack == 0", "tcp.stream",
                                              "tcp.srcport")}


@pytest.mark.slow
@needs_flow
def test_flow_control_is_blamed_on_the_broker_not_on_nagle():
    cap, found = run(FLOW)
    # Not one segment held by Nagle: the producers have TCP_NODELAY (the Java client sets it) and
    # keep many small segments in flight. Without the mechanism checks 6 segments of 3 producers
    # counted: 4 came after several small segments in flight, 2 on connections that send small
    # segments while others are unacknowledged most of the time.
    assert "nagle-delayed-ack" not in found and nagle(cap).tables["stalls"].empty
    f = found["broker-flow-control"]
    # Exactly the connections tshark sees the broker (port 5672) advertise a zero window to ...
    zero = streams(FLOW, "tcp.analysis.zero_window && tcp.srcport == 5672")
    assert zero and {s["stream"] for s in f.subjects} == zero
    # ... named as the broker named them: the producers, each in state "flow" (rabbitmqctl).
    view, port = broker_view(), client_ports(FLOW)
    for sub in f.subjects:
        name, state = view[port[sub["stream"]]]
        assert sub["connection"] == name and name.startswith("perf-test-producer-") and state == "flow"
        assert sub["direction"] == "c2s" and sub["publishes"] > 0
    assert {n for n, st in view.values() if st == "flow"} == {s["connection"] for s in f.subjects}
    assert "flow" in f.title.lower() and "perf-test-producer-" in f.title
    assert "flow-control" in f.advice and "receiver-window" not in found


@pytest.mark.slow
@needs_flow
def test_flow_control_time_at_zero_window_per_connection():
    # tshark's own account: from each zero window the broker advertised to the next broker packet
    # with an open window (or the connection's last packet). amqpcap's window-limited time also
    # counts full (not only zero) windows, so it is at least that, and at most the connection.
    cap, found = run(FLOW)
    f = found["broker-flow-control"]
    spans = stream_spans(FLOW)
    zero_s: dict[int, float] = {}
    opened: dict[int, float] = {}
    for s, t, w in tshark(FLOW, "tcp.srcport == 5672 && tcp.flags.syn == 0", "tcp.stream", "frame.time_relative",
                          "tcp.window_size"):
        s, t, w = int(s), float(t), int(w)
        if w == 0 and s not in opened:
            opened[s] = t
        elif w > 0 and s in opened:
            zero_s[s] = zero_s.get(s, 0.0) + t - opened.pop(s)
    for s, t in opened.items():
        zero_s[s] = zero_s.get(s, 0.0) + spans[s][1] - t
    for sub in f.subjects:
        a, b = spans[sub["stream"]]
        assert zero_s[sub["stream"]] - 1e-3 <= sub["window_limited_s"] <= b - a + 1e-6
        assert sub["window_limited_share"] == pytest.approx(sub["window_limited_s"] / (b - a), abs=1e-3)
    shares = [s["window_limited_share"] for s in f.subjects]
    assert shares == sorted(shares, reverse=True)  # worst first
    worst = max(zero_s[s] / (spans[s][1] - spans[s][0]) for s in zero_s)
    assert f.severity == ("critical" if worst >= 0.25 else "warning")


@pytest.mark.slow
@needs_flow
def test_flow_control_consumers_ack_one_message_per_segment():
    # PerfTest consumers ack every message (no --multi-ack-every): small-packets names them with
    # the ack advice; tshark: their client segments each carry one basic.ack (class 60, method 80).
    cap, found = run(FLOW)
    f = found.get("small-packets")
    assert f is not None and "multiple=true" in f.advice
    view, port = broker_view(), client_ports(FLOW)
    acks = [s for s in f.subjects if s["carries"] == "ack"]
    assert acks and all(view[port[s["stream"]]][0].startswith("perf-test-consumer-") for s in acks)
    cmd = ["tshark", "-r", str(FLOW), "-d", "tcp.port==5672,amqp", "-Y",
           f"tcp.stream eq {acks[0]['stream']} && tcp.dstport == 5672 && tcp.len > 0", "-T", "fields",
           "-E", "occurrence=a", "-e", "amqp.method.class", "-e", "amqp.method.method"]
    rows = [r.split("\t") for r in subprocess.run(cmd, capture_output=True, text=True, check=True,
                                                  timeout=300).stdout.splitlines()]
    one_ack = sum(1 for c, m in rows if c == "60" and m == "80")
    assert one_ack > 0.5 * len(rows)
