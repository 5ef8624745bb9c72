"""nagle analyzer on the recorded situations (fixtures/README.md): unbatched writes with
TCP_NODELAY, write-write-read with Nagle on, and a healthy run."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import amqpcap
from amqpcap.analysis.registry import SEVERITY_RANK
from amqpcap.engine.registered import in_memory, splits
from amqpcap.analyzers.nagle import (AVOIDABLE_RATE_CRITICAL, AVOIDABLE_RATE_INFO, AVOIDABLE_RATE_WARNING,
                                     analyze_segments, small_packets_finding)
from amqpcap.model.facts import ns
from amqpcap.engine.partitions import sliced_partial
from amqpcap.io.pieces import facts_of, time_slice
from amqpcap.model.facts import clean_cuts
from tiers import one_fast

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
nagle = in_memory("nagle")


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


def tshark_fields(path: Path, display_filter: str, *fields: str) -> list[list[str]]:
    """One row per packet tshark shows for the filter, the fields' values (AMQP decoded)."""
    cmd = ["tshark", "-r", str(path), "-o", "tcp.desegment_tcp_streams:TRUE", "-d", "tcp.port==5672,amqp",
           "-Y", display_filter, "-T", "fields", "-E", "occurrence=a", "-E", "separator=/t"]
    out = subprocess.run(cmd + sum((["-e", f] for f in fields), []), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [line.split("\t") for line in out.stdout.splitlines()]


def tshark_carries(path: Path, stream: int) -> dict[str, int]:
    """What the client's data segments of a connection carry, from tshark's AMQP fields alone,
    by the rule of docs/analyzers/nagle.md: one basic.ack alone (`ack`), every publish with its
    header (`message`), part of a message (`split`)."""
    out = {"ack": 0, "message": 0, "split": 0, "other": 0}
    rows = tshark_fields(path, f"tcp.stream eq {stream} && tcp.dstport == 5672 && tcp.len > 0",
                         "amqp.type", "amqp.method.class", "amqp.method.method")
    for types, classes, methods in rows:
        types = types.split(",") if types else []
        meths = list(zip(classes.split(","), methods.split(","))) if methods else []
        pubs = sum(1 for m in meths if m == ("60", "40"))
        if len(types) == 1 and meths == [("60", "80")]:
            out["ack"] += 1
        elif pubs and types.count("2") >= pubs:
            out["message"] += 1
        elif not types or pubs or "2" in types or "3" in types:
            out["split"] += 1
        else:
            out["other"] += 1
    return out


needs_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")


@needs_tshark
def test_rpc_nodelay_small_packets():
    # Story 1 of issue 12: pika RPC with TCP_NODELAY writes method, header and body separately.
    path = FIXTURES / "rpc-nodelay.pcap"
    r = run(path.name)
    f = finding(r, "small-packets")
    assert f is not None
    ev = f.evidence
    # 150 calls; three segments where one would do on the client's side: at least two avoidable
    # segments per call.
    assert ev["packets_saved"] >= 2 * 150
    assert ev["streams"] == [0, 1]
    assert ev["packets"] and ev["filter"]
    # Both connections are subjects, named by their client address (pika sets no
    # connection_name), each with the kind tshark sees most in its client segments.
    for sub in f.subjects:
        assert sub["direction"] == "c2s"  # the broker's writes are never judged
        port = tshark_fields(path, f"tcp.stream eq {sub['stream']} && tcp.flags.syn == 1 && tcp.flags.ack == 0",
                             "tcp.srcport")[0][0]
        assert sub["connection"].endswith(f":{port}")
        kinds = tshark_carries(path, sub["stream"])
        assert sub["carries"] == max(kinds, key=kinds.get) == "split"
    assert "one buffer" in f.advice and "write it once" in f.advice and "multiple=true" not in f.advice
    # Severity follows the avoidable packet rate only. The client wrote fewer than 1 000 data
    # segments per second (tshark), so fewer avoidable ones: below the warning rate.
    rows = tshark_fields(path, "tcp.stream eq 0 && tcp.dstport == 5672 && tcp.len > 0", "frame.time_relative")
    t = [float(x[0]) for x in rows]
    assert len(t) / (t[-1] - t[0]) < AVOIDABLE_RATE_WARNING
    assert f.severity == "info"
    assert finding(r, "nagle-delayed-ack") is None  # TCP_NODELAY on: nothing held
    d = r.tables["directions"].set_index(["stream", "direction"])
    assert d.loc[(0, "c2s"), "nodelay"] and d.loc[(1, "c2s"), "nodelay"]


@needs_tshark
def test_small_packets_filter_opens_the_same_segments():
    path = FIXTURES / "rpc-nodelay.pcap"
    ev = finding(run(path.name), "small-packets").evidence
    assert tshark_count(path, ev["filter"]) == ev["small_segments"]


@needs_tshark
def test_nagle_write_write_read_stalls():
    path = FIXTURES / "nagle-write-write-read.pcap"
    r = run(path.name)
    f = finding(r, "nagle-delayed-ack")
    assert f is not None and f.severity == "critical"
    ev = f.evidence
    # 40 publishes, each header+body segment held until the broker's delayed ACK (~43 ms, Linux).
    assert ev["stalls"] >= 40
    assert 0.035 <= ev["median_stall_s"] <= 0.050
    assert ev["stall_share"] > 0.5
    assert ev["streams"] == [0] and ev["packets"]
    # One connection: its own stall time, within its own duration (tshark: last packet's time).
    last = float(tshark_fields(path, "frame", "frame.time_relative")[-1][0])
    assert ev["stall_time_s"] <= last
    assert [(s["stream"], s["direction"]) for s in f.subjects] == [(0, "c2s")]
    assert f.subjects[0]["connection"] in f.title
    stalls = r.tables["stalls"]
    assert (stalls["direction"] == "c2s").all()
    assert ((stalls["ack_delay_s"] > 0.03) & (stalls["release_s"] < 0.001)).all()
    # Nagle's mechanism, checked by tshark: when each held segment waited, the only bytes in
    # flight were the previous segment's (tcp.analysis.bytes_in_flight == its tcp.len).
    prev = tshark_fields(path, "frame.number in {" + ", ".join(map(str, stalls["previous_packet"])) + "}",
                         "tcp.len", "tcp.analysis.bytes_in_flight")
    assert len(prev) == len(stalls) and all(a == b for a, b in prev)
    assert finding(r, "small-packets") is None  # 40 publishes over 1.8 s: a low rate


@needs_tshark
def test_stall_filter_opens_the_held_segments():
    path = FIXTURES / "nagle-write-write-read.pcap"
    ev = finding(run(path.name), "nagle-delayed-ack").evidence
    assert tshark_count(path, ev["filter"]) == ev["stalls"]


def test_healthy_has_no_warning():
    cap = amqpcap.load(FIXTURES / "healthy.pcap")
    for r in (nagle(cap), in_memory("sizes")(cap)):
        assert not [f for f in r.findings if f.severity in ("warning", "critical")], r.findings


@needs_tshark
def test_whole_messages_one_per_segment():
    # kernel-drops: PerfTest publishes ~3000 msg/s, each message (3 frames) in one segment, back
    # to back: the advice is to batch publishes, not to build a message into one write.
    path = FIXTURES / "kernel-drops.pcap"
    f = finding(run(path.name), "small-packets")
    assert f is not None
    assert [s["connection"] for s in f.subjects] == ["perf-test-producer-0"]  # PerfTest's connection_name
    kinds = tshark_carries(path, f.subjects[0]["stream"])
    assert f.subjects[0]["carries"] == max(kinds, key=kinds.get) == "message"
    assert "batches" in f.advice and "one buffer" not in f.advice
    rate = f.evidence["max_packets_saved_s"]
    assert f.severity == ("warning" if AVOIDABLE_RATE_WARNING <= rate < AVOIDABLE_RATE_CRITICAL else "info")


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


import crafting as c  # noqa: E402
from test_partition import assert_same_partial  # noqa: E402

MS = 1_000_000


def _write_write_read(tmp_path, ack_delay_ms: float, n: int = 10, burst=(), zero_window=()):
    """n publishes, each: method frame at t, the broker's pure ACK ack_delay_ms later, header +
    body 20 µs after that ACK, then the broker's reply frame 1 ms later. MSS 1460.

    Rounds in ``burst`` send four more publishes back to back before that ACK (five small
    segments in flight: TCP_NODELAY); in rounds in ``zero_window`` the broker advertises a zero
    window 1 ms after the method frame, acknowledging nothing new (flow control). Returns the
    capture and the packet numbers of the header+body segments of the other rounds."""
    conv = c.TcpConversation().handshake()
    conv.exchange(c.opening())
    c.stamp(conv.packets, c.T0_NS, MS)
    t = conv.packets[-1].time_ns + 100 * MS
    held = []
    for i in range(n):
        z = conv.ack("s2c") if i in zero_window else None  # acknowledges up to the method frame's start
        (p,) = conv.send_frames("c2s", [c.basic_publish()])
        p.time_ns = t
        if z is not None:
            conv.packets.remove(z)
            conv.packets.append(z)
            z.window, z.time_ns = 0, t + MS
        for k in range(4 if i in burst else 0):
            (q,) = conv.send_frames("c2s", [c.basic_publish()])
            q.time_ns = t + (k + 1) * 50_000
        a = conv.ack("s2c")
        a.time_ns = t + int(ack_delay_ms * MS)
        (s,) = conv.send_frames("c2s", c.content(body=b"x" * 10))
        s.time_ns = a.time_ns + 20_000
        (r,) = conv.send_frames("s2c", [c.basic_ack(delivery_tag=i + 1)])
        r.time_ns = s.time_ns + MS
        if i not in burst and i not in zero_window:
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


def test_crafted_several_small_segments_in_flight_are_not_nagle(tmp_path):
    # Round 5 has five small segments in flight before the delayed ACK: Nagle allows one, so the
    # segment after that ACK was not held by Nagle (issue 12: ~70 in flight, blamed on Nagle).
    # One such round in 60 is too few to mark the direction as TCP_NODELAY: the per-segment
    # check alone excludes it.
    cap, held = _write_write_read(tmp_path, 40, n=60, burst={5})
    r = nagle(cap)
    assert r.tables["stalls"]["packet"].tolist() == held
    assert not r.tables["directions"].set_index("direction").loc["c2s", "nodelay"]


def test_crafted_nodelay_direction_has_no_nagle_finding(tmp_path):
    # Every round with five small segments in flight: TCP_NODELAY is in effect, nothing is Nagle's.
    cap, _ = _write_write_read(tmp_path, 40, burst=set(range(10)))
    r = nagle(cap)
    assert r.tables["directions"].set_index("direction").loc["c2s", "nodelay"]
    assert r.tables["stalls"].empty and finding(r, "nagle-delayed-ack") is None


def test_crafted_zero_window_is_not_nagle(tmp_path):
    # In round 3 the broker's window was zero while the segment waited: flow control, not Nagle.
    cap, held = _write_write_read(tmp_path, 40, zero_window={3})
    assert nagle(cap).tables["stalls"]["packet"].tolist() == held


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
    # 800 avoidable packets/s: above the info rate, below the warning rate.
    assert f is not None and f.severity == "info"
    assert f.evidence["packets_saved"] == 800
    assert f.subjects[0]["carries"] == "split" and "one buffer" in f.advice


def test_crafted_one_segment_per_publish_is_fine(tmp_path):
    cap = _publisher(tmp_path, split=False)
    r = nagle(cap)
    d = r.tables["directions"].set_index("direction").loc["c2s"]
    assert d["packets_saved"] == 0  # 2.5 ms apart: not one batch
    assert finding(r, "small-packets") is None


def test_small_packets_severity_grows_with_the_avoidable_rate_only():
    # The same direction at rising avoidable rates, each kind of content: severity never drops
    # as the rate grows, and the kind changes only the advice (issue 12: a warning at 233/s but
    # info at 8,512/s).
    cap = amqpcap.load(FIXTURES / "kernel-drops.pcap")
    seg, d, _ = analyze_segments(cap)
    row = d[(d["stream"] == 2) & (d["direction"] == "c2s")]
    for kind in ("ack", "message", "split", "other"):
        ranks = []
        for rate in (AVOIDABLE_RATE_INFO, 233, 999, AVOIDABLE_RATE_WARNING, 8_512, AVOIDABLE_RATE_CRITICAL, 50_000):
            f = small_packets_finding(cap, seg, row.assign(packets_saved_s=float(rate), carries=kind))
            ranks.append(SEVERITY_RANK[f.severity])
        assert ranks == sorted(ranks) and ranks[0] == 0 and ranks[-1] == 2, (kind, ranks)
    assert small_packets_finding(cap, seg, row.assign(packets_saved_s=5_000.0, carries="heartbeat")) is None


@needs_tshark
def test_heartbeat_only_connection_carries_heartbeats():
    # midstream.pcap: stream 2 is the idle configuration connection, heartbeats only (tshark).
    facts = json.loads((FIXTURES / "midstream.pcap.tshark.json").read_text())
    assert set(facts["stream_frame_types"]["2"]) == {"8"}
    d = run("midstream.pcap").tables["directions"]
    assert (d.loc[d["stream"] == 2, "carries"] == "heartbeat").all()


# --- slices of a partition's time (docs/time-split.md) --------------------------------------------

def sliced_and_whole(cap, every: int):
    """The partial of `cap` cut into slices of about `every` packets, and of `cap` whole."""
    facts = facts_of(cap)
    packet, ts = cap.packets["packet"].to_numpy("int64"), ns(cap.packets["ts"])
    split = splits()["nagle"]  # (a partition's part: a list of its one partial)
    [sliced] = sliced_partial(split, cap, facts, clean_cuts(packet, ts, every))
    [whole] = split.partial(cap, facts)
    return sliced, whole


@pytest.mark.parametrize("name", one_fast(["nagle-write-write-read.pcap", "tls.pcap"], keep="tls.pcap"))
def test_a_slice_of_every_packet_gives_the_whole_partial(name):
    """Each packet a slice of its own: every stall's previous segment, the peer's delayed ACK (and
    the packet before it, whose window is read) and the held segment are in slices of their own,
    as is each segment of a coalescing run and each segment sent while a small one was
    unacknowledged; everything they read of each other is carried."""
    got, want = sliced_and_whole(amqpcap.load(FIXTURES / name), 1)
    assert name != "nagle-write-write-read.pcap" or len(want["stalls"]) == 41
    assert_same_partial(got, want, f"{name} in slices of one packet")


def test_stalls_before_a_direction_shows_tcp_nodelay_are_dropped_in_slices_too(tmp_path):
    """Sixteen rounds held by Nagle, then four with five small segments in flight: the whole
    direction shows TCP_NODELAY, so none of the sixteen is a stall, although the packets before
    the bursts, alone, have them all (their candidates wait for the direction's counts)."""
    cap, held = _write_write_read(tmp_path, 40, n=20, burst=set(range(16, 20)))
    [before_bursts] = splits()["nagle"].partial(time_slice(cap, 0, held[-1] + 1), facts_of(cap))
    assert before_bursts["stalls"]["packet"].tolist() == held
    for every in (1, 7):
        got, want = sliced_and_whole(cap, every)
        assert want["stalls"].empty and want["directions"].set_index("direction").loc["c2s", "nodelay"]
        assert_same_partial(got, want, f"cut every {every} packets")


DOCS = ROOT / "docs" / "analyzers" / "nagle.md"


def test_every_column_documented():
    doc = DOCS.read_text()
    r = run("nagle-write-write-read.pcap")
    for name, df in r.tables.items():
        assert f"`nagle-{name}`" in doc
        missing = [col for col in df.columns if f"`{col}`" not in doc]
        assert not missing, (name, missing)


# --- AMQP 1.0 connections: what their small segments carry, from the performatives -----------------

def _directions(name: str):
    d = run(name).tables["directions"]
    return d.set_index(["stream", "direction"])


def test_amqp10_receiver_settling_each_delivery_carries_dispositions():
    # amqp10-credit1 (record.sh A10_CREDIT1_*): the client receiver grants credit 1 after each of
    # the 200 deliveries and settles each with a disposition of its own (tshark's amqp10_directions:
    # 200 dispositions, all of a single delivery, 200 flows of link-credit 1). Counted by hand in
    # the capture: each disposition goes with the flow in one segment, but the last, written with
    # the close: 199 small segments carry `disposition`.
    facts = json.loads((FIXTURES / "amqp10-credit1.pcap.tshark.json").read_text())
    c2s = facts["amqp10_directions"]["0"]["c2s"]
    assert c2s["dispositions"] == c2s["dispositions_single"] == c2s["flow_link_credit"]["1"] == 200
    row = _directions("amqp10-credit1.pcap").loc[(0, "c2s")]
    assert row["carries"] == "disposition"
    assert round(row["carries_share"] * row["small_segments"]) == c2s["dispositions"] - 1


def test_amqp10_multiframe_messages_carry_transfer_parts():
    # amqp10-multiframe: max-frame-size 4096 (tshark's open), each message 27 transfer frames (54
    # transfers, 52 with `more`, each way): a segment holds part of a delivery
    facts = json.loads((FIXTURES / "amqp10-multiframe.pcap.tshark.json").read_text())
    s = facts["amqp10_directions"]["0"]
    assert s["c2s"]["open"]["max_frame_size"] == 4096 and s["c2s"]["transfers_more"] == 52
    d = _directions("amqp10-multiframe.pcap")
    assert d.loc[(0, "c2s"), "carries"] == d.loc[(0, "s2c"), "carries"] == "transfer-part"


def test_amqp10_idle_connection_carries_heartbeats():
    # amqp10-idle: idle-timeout 2000 ms, empty frames each way (tshark's empty_frames) and nothing
    # else after the opening: most small segments are 1.0 heartbeats
    facts = json.loads((FIXTURES / "amqp10-idle.pcap.tshark.json").read_text())
    s = facts["amqp10_directions"]["0"]
    assert s["c2s"]["empty_frames"] > 0 and s["s2c"]["empty_frames"] > 0
    d = _directions("amqp10-idle.pcap")
    assert (d["carries"] == "heartbeat").all()


def test_amqp10_carries_of_each_performative_pattern():
    """Hand-written 1.0 frames, one segment per pattern (packets 1..9 on stream 0), each kind
    counted by hand: flow alone, disposition with flow, two dispositions, a transfer with `more`,
    a whole delivery, its continuation ending a delivery, a segment completing no frame, an
    empty frame, an attach."""
    from types import SimpleNamespace

    from amqpcap.analyzers.nagle.constants import CARRIES
    from amqpcap.analyzers.nagle.directions import carried
    from amqpcap.derive.amqp10.frames import table
    from amqp10_scenarios import frame

    rows = [frame(1, 1, "c2s", "flow", link_credit=1),
            frame(2, 2, "c2s", "flow", link_credit=1), frame(2, 2, "c2s", "disposition", role="receiver", first=0),
            frame(3, 3, "c2s", "disposition", role="receiver", first=1),
            frame(3, 3, "c2s", "disposition", role="receiver", first=2),
            frame(4, 4, "c2s", "transfer", delivery_id=0, more=True, continuation=False),
            frame(5, 5, "c2s", "transfer", delivery_id=1, more=False, continuation=False),
            frame(6, 6, "c2s", "transfer", delivery_id=0, more=False, continuation=True),
            {**frame(8, 8, "c2s", None), "type": "empty", "performative": None},
            frame(9, 9, "c2s", "attach", role="sender")]
    cap = SimpleNamespace(frames=amqpcap.load(FIXTURES / "healthy.pcap").frames.iloc[:0], amqp10_frames=table(rows))
    packets = np.arange(1, 10, dtype=np.int64)
    ended = np.array([1, 2, 2, 1, 1, 1, 0, 1, 1])
    got = [CARRIES[k] for k in carried(cap, packets, ended, np.zeros(9, np.int64))]
    assert got == ["flow", "disposition", "other", "transfer-part", "message", "transfer-part", "transfer-part",
                   "heartbeat", "other"]
