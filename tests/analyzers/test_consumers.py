"""consumers analyzer: prefetch, unacked, deficit over time and the consumer findings."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import amqpcap
from amqpcap.analysis.registry import SEVERITY_RANK
from amqpcap.engine.registered import in_memory
from amqpcap.derive.consumers import consumer_rows, consumer_state
from tiers import one_fast

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
consumers = in_memory("consumers")


def load(name):
    return amqpcap.load(FIXTURES / name)


# prefetch per fixture, from the recording parameters (fixtures/README.md: PerfTest -q N, pika qos 10)
PREFETCH = {
    "slow-prefetch1.pcap": [1], "prefetch1.pcap": [1], "healthy.pcap": [100], "multi-ack.pcap": [50],
    "confirms.pcap": [50], "prefetch-consumers.pcap": [20, 20, 20], "nack-requeue.pcap": [10],
    "gzipped.pcap.gz": [5], "kernel-drops.pcap": [500], "memory-alarm.pcap": [20], "ipv6.pcap": [20],
}


@pytest.mark.parametrize("name", one_fast(sorted(PREFETCH)))
def test_prefetch_from_basic_qos(name):
    r = consumers(load(name))
    rows = [c for c in r.summary["consumers"] if not c["no_ack"]]
    assert [c["prefetch"] for c in rows] == PREFETCH[name]
    assert not any(c["prefetch_estimated"] for c in rows)


def test_midstream_prefetch_is_estimated():
    # capture started after basic.qos/basic.consume: PerfTest -q 20, estimated from max unacked
    rows = consumers(load("midstream.pcap")).summary["consumers"]
    assert len(rows) == 1 and rows[0]["prefetch_estimated"]
    assert 1 <= rows[0]["prefetch"] <= 20
    r = consumers(load("midstream.pcap"))
    assert not [f for f in r.findings if SEVERITY_RANK[f.severity] >= 1]  # estimates never warn


def test_auto_ack_consumer_has_no_credit():
    r = consumers(load("auto-ack.pcap"))
    assert len(r.tables["state"]) == 0
    # (PerfTest names its consumer connections perf-test-consumer-N: the connection_name property)
    assert r.summary["consumers"] == [{"connection": "perf-test-consumer-0", "stream": 1, "channel": 1,
                                       "consumer_tag": r.summary["consumers"][0]["consumer_tag"],
                                       "no_ack": True, "deliveries": 454}]


@pytest.mark.parametrize("name", one_fast(["slow-prefetch1.pcap", "healthy.pcap", "prefetch-consumers.pcap", "multi-ack.pcap",
                                           "nack-requeue.pcap", "kernel-drops.pcap", "midstream.pcap"]))
def test_state_invariants(name):
    cap = load(name)
    st = consumer_state(cap)
    assert len(st)
    assert (st["unacked"] >= 0).all()
    assert (st["until_ts"] >= st["ts"]).all()
    limited = st["prefetch"] > 0
    assert (st.loc[limited, "deficit"] == st.loc[limited, "prefetch"] - st.loc[limited, "unacked"]).all()
    assert (st["at_limit"] == (st["deficit"].fillna(1) <= 0)).all()
    # the unacked count steps by the deliveries and settlements of the latency tables
    d = cap.frames[cap.frames["method"].isin(["basic.deliver"])]
    assert st.groupby(["stream", "consumer_tag"])["unacked"].max().max() <= len(d)
    for _, g in st.groupby(["stream", "channel", "epoch", "consumer_tag"]):
        assert (g["unacked"] <= g["prefetch"]).all() or g["prefetch"].iloc[0] == 0


def test_state_steps_one_per_frame():
    st = consumer_state(load("healthy.pcap"))
    # one consume-ok row, one row per delivery frame and one per multiple ack (12 acks)
    assert len(st) == 1 + 607 + 12
    assert st["unacked"].iloc[0] == 0 and st["unacked"].max() <= 100


def test_slow_prefetch1_findings():
    # one consumer at prefetch 1 that is also the bottleneck: one finding (consumer-bound), the
    # prefetch-1 advice folded into it, not a second prefetch-one card for the same consumer
    r = consumers(load("slow-prefetch1.pcap"))
    assert [f.id for f in r.findings] == ["consumer-bound"]
    f = r.findings[0]
    assert f.severity in ("warning", "critical")
    ev = f.evidence
    assert ev["streams"] == [1] and ev["prefetch_msgs"] == 1 and ev["share_at_limit"] > 0.5
    assert ev["deliver_to_ack_p50_s"] > 5 * ev["ack_to_next_deliver_p50_s"]
    assert ev["packets"] and ev["filter"].startswith("tcp.stream eq 1")
    assert ev["prefetch_one_consumers"] == 1 and "At prefetch 1 with one ack per message" in f.advice
    row = r.summary["consumers"][0]
    assert row["share_at_limit"] == pytest.approx(1 - row["utilisation"])


def test_healthy_has_no_warning():
    r = consumers(load("healthy.pcap"))
    assert not [f for f in r.findings if SEVERITY_RANK[f.severity] >= 1]
    row = r.summary["consumers"][0]
    assert row["share_at_limit"] == 0 and row["messages_per_ack"] == pytest.approx(50, rel=0.05)


def test_prefetch1_fast_consumer_is_only_info():
    # prefetch 1 at 100 msg/s with a fast consumer: the pattern is noted, nothing is blocked
    r = consumers(load("prefetch1.pcap"))
    assert [(f.id, f.severity) for f in r.findings] == [("prefetch-one", "info")]


def test_global_qos_limits_the_channel(tmp_path):
    import crafting as c

    conv = c.TcpConversation().handshake()
    deliver = lambda tag, ctag: [c.basic_deliver(1, consumer_tag=ctag, delivery_tag=tag), *c.content(1, b"x")]  # noqa: E731
    conv.exchange(c.opening() + [
        ("c2s", c.basic_qos(1, prefetch_count=2, global_=True)), ("s2c", c.basic_qos_ok(1)),
        ("c2s", c.basic_consume(1, consumer_tag="a")), ("s2c", c.basic_consume_ok(1, "a")),
        ("c2s", c.basic_consume(1, consumer_tag="b")), ("s2c", c.basic_consume_ok(1, "b")),
        ("s2c", deliver(1, "a")), ("s2c", deliver(2, "b")),
        ("c2s", c.basic_ack(1, 2, multiple=True)),
    ])
    cap = amqpcap.load(c.write_pcap(tmp_path / "g.pcap", conv.timed()))
    st = consumer_state(cap)
    assert (st["prefetch"] == 0).all()  # no per-consumer limit
    full = st[st["channel_unacked"] == 2]
    # the frame that filled the channel's shared limit (consumer b's delivery) is at the limit
    # (known limit: consumer a gets no row of its own at that frame, see docs/analyzers/consumers.md)
    assert full["consumer_tag"].tolist() == ["b"] and full["at_limit"].all() and (full["deficit"] == 0).all()
    assert st.groupby("consumer_tag")["unacked"].last().tolist() == [0, 0]


def test_plots_and_tables(tmp_path):
    from amqpcap.report.outputs import write_result

    files = write_result(consumers(load("slow-prefetch1.pcap")), tmp_path)
    names = {p.name for p in files}
    assert {"consumers-consumers.csv", "consumers-state.csv", "consumers-unacked-deficit.png"} <= names
    s = pd.read_csv(tmp_path / "consumers-consumers.csv")
    assert s.loc[0, "prefetch"] == 1


def test_summary_is_json_ready():
    from amqpcap.model.written_values import jsonable

    r = consumers(load("prefetch-consumers.pcap"))
    text = json.dumps(jsonable(r.summary))
    assert len(json.loads(text)["consumers"]) == 3
    assert all(np.isfinite(c["mean_unacked"]) for c in r.summary["consumers"])


def _tshark_unlimited(path: Path, consumer_stream: int) -> dict:
    """From tshark alone, on the consumer's connection: basic.qos frames, deliveries, the most
    deliveries outstanding (delivered, not yet acked: +1 per basic.deliver, -1 per tag an ack
    settles), and zero-window packets (tcp.analysis.zero_window) between its first and last
    delivery."""
    import subprocess
    from tshark_reference import tshark_methods
    frames = [f for f in tshark_methods(str(path)) if f["stream"] == consumer_stream]
    outstanding: set = set()
    peak = qos = n = 0
    times = []
    for f in frames:
        if f["method"] == (60, 10):
            qos += 1
        elif f["method"] == (60, 60) and f["s2c"]:
            n += 1
            outstanding.add(f["tag"])
            times.append(f["t"])
        elif f["method"] == (60, 80) and not f["s2c"]:
            outstanding -= {t for t in outstanding if t <= f["tag"]} if f.get("multiple") else {f["tag"]}
        peak = max(peak, len(outstanding))
    out = subprocess.run(["tshark", "-r", str(path), "-Y", f"tcp.stream eq {consumer_stream} && tcp.analysis.zero_window",
                          "-T", "fields", "-e", "frame.time_epoch"], capture_output=True, text=True, check=True).stdout
    zeros = [float(t) for t in out.split() if times and times[0] <= float(t) <= times[-1]]
    return {"qos": qos, "deliveries": n, "peak_unacked": peak, "zero_windows": len(zeros)}


@pytest.mark.skipif(not __import__("shutil").which("tshark"), reason="needs tshark")
@pytest.mark.parametrize("name", one_fast(["unlimited.pcap.gz", "zero-window.pcap"], keep="zero-window.pcap"))
def test_an_unlimited_consumer_that_fell_behind_is_named_with_tsharks_numbers(name):
    """unlimited.pcap.gz (record.sh stage 8): 2,500 messages waiting, then a pika consumer with
    manual acks and no basic.qos working 4 ms on each; zero-window.pcap: a no-ack consumer that
    stops reading. Both fell behind with no prefetch limit: the finding's numbers are tshark's."""
    path = FIXTURES / name
    f = [f for f in consumers(load(name)).findings if f.id == "unlimited-prefetch"]
    assert len(f) == 1 and f[0].severity == "warning"
    ev = f[0].evidence
    ref = _tshark_unlimited(path, ev["streams"][0])
    assert ref["qos"] == 0  # the scenario set no prefetch
    assert ev["deliveries"] == ref["deliveries"]
    assert ev["zero_window_packets"] == ref["zero_windows"] > 0
    if ev["no_ack"]:
        assert ev["max_unacked_msgs"] is None and name == "zero-window.pcap"
    else:
        assert ev["max_unacked_msgs"] == ref["peak_unacked"] >= 1000
        assert f[0].subjects[0]["connection"] == "amqpcap-unlimited-consumer"


def test_unlimited_consumers_that_keep_up_are_not_told():
    """auto-ack.pcap: PerfTest's no-ack consumer at 150 msg/s keeps up (no zero window); the
    consumers with a prefetch limit are never unlimited."""
    for name in ("auto-ack.pcap", "healthy.pcap", "prefetch-consumers.pcap", "slow-prefetch1.pcap"):
        assert "unlimited-prefetch" not in {f.id for f in consumers(load(name)).findings}, name


# -- slices of a partition's time (amqpcap.analysis.partition.Slicing) --------------------------------------

def _sliced_everywhere(path: Path) -> tuple[dict, dict]:
    """The consumers partial of the capture crafted at `path` whole, and cut before every packet
    (`clean_cuts` every 1; also between each basic.consume and its basic.consume-ok), each given
    the partition's backlog (as `run_whole` gives it)."""
    from dataclasses import replace

    from amqpcap.engine.registered import splits
    from amqpcap.analyzers.consumers.step import consumers_join, consumers_slice
    from amqpcap.model.facts import ns
    from amqpcap.analysis.partition import context_for
    from amqpcap.engine.partitions import sliced_partial
    from amqpcap.io.pieces import facts_of
    from amqpcap.model.facts import clean_cuts

    SPLIT = splits()["consumers"]
    cap = amqpcap.load(path)
    facts = facts_of(cap)
    backlog = context_for(SPLIT.join_context([SPLIT.context(cap, facts)]), 0)
    cuts = clean_cuts(cap.packets["packet"].to_numpy(), ns(cap.packets["ts"]), 1)
    assert len(cuts) == len(cap.packets) - 1
    [whole] = SPLIT.partial_with(cap, facts, backlog)

    def slices_told(slices: list) -> list:  # (what each slice told, in slice order, not closed)
        return [piece for told in slices for piece in told.pieces]

    # the acks' gaps the slices told, with the backlog read at each (which the partial shows only
    # through slow refills): the whole's, by packet
    pieces = sliced_partial(replace(SPLIT, slicing=replace(SPLIT.slicing, join=slices_told)), cap, facts, cuts, backlog)
    told = pd.concat([p.gaps for p in pieces], ignore_index=True).sort_values("packet", kind="stable")
    pd.testing.assert_frame_equal(told.reset_index(drop=True), consumers_slice(cap, None, True, backlog)[1].gaps)
    return whole, consumers_join(pieces, cap.summary)


def _deliveries(c, channel, tags, ctag):
    """basic.deliver frames (with their content) of `tags`, in one packet."""
    return [f for tag in tags for f in (c.basic_deliver(channel, consumer_tag=ctag, delivery_tag=tag),
                                        *c.content(channel, b"x"))]


@pytest.mark.slow
def test_consumers_cut_before_every_packet_are_the_whole_partitions(tmp_path):
    """Consumers whose every packet is a slice of its own: acks waiting slices for their next
    delivery (their backlog read from the partition's answers), a consumer without basic.qos
    that falls behind while its client advertises a zero window, a no-ack consumer, a consumer
    of a global qos, and one whose basic.consume is not in the capture (its prefetch estimated
    at the end: the most it ever held)."""

    import crafting as c
    from test_partition import assert_same_partial

    conv = c.TcpConversation().handshake()
    send = lambda *items: conv.exchange(list(items))  # noqa: E731
    send(*c.opening())
    for ch in (2, 3, 4, 5):
        send(("c2s", c.channel_open(ch)), ("s2c", c.channel_open_ok(ch)))
    # channel 1: prefetch 3
    send(("c2s", c.basic_qos(1, prefetch_count=3)), ("s2c", c.basic_qos_ok(1)),
         ("c2s", c.basic_consume(1, queue="q", consumer_tag="ctag-1")), ("s2c", c.basic_consume_ok(1, "ctag-1")))
    # channel 4: a global limit; channel 5: deliveries of a consumer started before the capture
    send(("c2s", c.basic_qos(4, prefetch_count=2, global_=True)), ("s2c", c.basic_qos_ok(4)),
         ("c2s", c.basic_consume(4, queue="g", consumer_tag="g-1")), ("s2c", c.basic_consume_ok(4, "g-1")))
    send(("s2c", _deliveries(c, 5, [1], "old")), ("s2c", _deliveries(c, 1, [1], "ctag-1")),
         ("s2c", _deliveries(c, 1, [2], "ctag-1")), ("s2c", _deliveries(c, 4, [1, 2], "g-1")),
         ("c2s", c.basic_ack(1, 1)), ("s2c", _deliveries(c, 5, [2, 3], "old")), ("c2s", c.basic_ack(4, 2, multiple=True)),
         ("c2s", c.basic_ack(5, 1)), ("s2c", _deliveries(c, 1, [3], "ctag-1")), ("s2c", _deliveries(c, 4, [3], "g-1")),
         ("c2s", c.basic_ack(1, 3, multiple=True)), ("c2s", c.basic_ack(5, 3, multiple=True)),
         ("s2c", _deliveries(c, 1, [4], "ctag-1")), ("c2s", c.basic_ack(1, 4)), ("c2s", c.basic_ack(4, 3)))
    # channel 2: no basic.qos (unlimited), 60 deliveries unacked while the client's window is
    # zero; channel 3: no-ack
    send(("c2s", c.basic_consume(2, queue="big", consumer_tag="u-1")), ("s2c", c.basic_consume_ok(2, "u-1")),
         ("c2s", c.basic_consume(3, queue="auto", consumer_tag="n-1", no_ack=True)), ("s2c", c.basic_consume_ok(3, "n-1")))
    for first in range(1, 61, 15):
        send(("s2c", _deliveries(c, 2, range(first, first + 15), "u-1")), ("s2c", _deliveries(c, 3, [first], "n-1")))
        if first == 31:
            conv.window = 0
            conv.ack("c2s")
            conv.window = 502
    send(("c2s", c.basic_ack(2, 60, multiple=True)))
    c.write_pcap(tmp_path / "consumers.pcap", conv.close().timed())
    whole, sliced = _sliced_everywhere(tmp_path / "consumers.pcap")

    s = whole["summary"].set_index("consumer_tag")
    assert s.loc["ctag-1", "prefetch"] == 3 and s.loc["g-1", "channel_prefetch"] == 2
    assert s.loc["old", "prefetch_estimated"] and s.loc["old", "prefetch"] == 3  # (tags 1 to 3 held at once)
    assert s.loc["ctag-1", "acks"] == 3 and s.loc["u-1", "max_unacked"] == 60
    u = whole["unlimited"].set_index("consumer_tag")
    assert u.loc["u-1", "zero_windows"] == 1 and u.loc["u-1", "deliveries"] == 60
    assert [(r["consumer_tag"], r["deliveries"]) for r in whole["no_ack"]] == [("n-1", 4)]
    assert_same_partial(sliced, whole, "cut before every packet")


@pytest.mark.parametrize("name", one_fast(["prefetch-consumers.pcap", "rpc-nodelay.pcap"], keep="rpc-nodelay.pcap"))
def test_a_cut_between_basic_consume_and_its_consume_ok_gives_the_whole_partitions(name):
    """Each basic.consume of a fixture in one slice and its basic.consume-ok in the next: the
    consumer starts at its consume-ok (AMQP 0-9-1 §1.8.3.4) in the slices as in the whole, not at
    the basic.consume the slice before saw unanswered (rpc-nodelay.pcap: tags the client names;
    prefetch-consumers.pcap: tags the broker names in the consume-ok). The derivations' consumers
    and state rows and every sliced analyzer's partial are the whole partition's."""

    from test_partition import SLICED, _context_of, assert_same_partial
    from test_replay import sliced_tables

    from amqpcap.engine.registered import splits
    from amqpcap.derive.deliveries import consume_frames
    from amqpcap.model.facts import ns
    from amqpcap.engine.partitions import sliced_partials
    from amqpcap.io.pieces import facts_of
    from amqpcap.model.facts import clean_cuts

    cap = load(name)
    cons = consume_frames(cap)
    packet, ts = cap.packets["packet"].to_numpy(np.int64), ns(cap.packets["ts"])
    consume, ok = cons["packet"].to_numpy(np.int64), cons["ok_packet"].to_numpy(np.int64)
    # the first clean cut after each basic.consume, at its consume-ok's packet at the latest
    cuts = sorted({c for c in clean_cuts(packet, ts, 1) for a, b in zip(consume, ok) if a < c <= b})
    assert len(cuts) == len(cons) > 0
    got = sliced_tables(cap, cuts)
    pd.testing.assert_frame_equal(got["consumers"], consumer_rows(cap), check_exact=True)
    pd.testing.assert_frame_equal(got["state"], consumer_state(cap).reset_index(drop=True), check_exact=True)
    facts = facts_of(cap)
    sliced = {a: splits()[a] for a in SLICED}
    joined: dict = {}
    contexts = {a: _context_of(s, cap, facts, joined) for a, s in sliced.items()}
    partials = sliced_partials(sliced, cap, facts, cuts, contexts)
    for a, split in sliced.items():
        assert_same_partial(partials[a], split.partial_with(cap, facts, contexts[a]), f"{a} cut after each basic.consume")
