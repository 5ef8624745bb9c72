"""latency analyzer: delivery/ack and publish/confirm matching against hand-made captures and
against an independent computation from tshark's fields (tests/tshark_reference.py)."""

from __future__ import annotations

import json
import shutil
import statistics
import sys
from pathlib import Path

import numpy as np
import pytest

import amqpcap
from amqpcap.analysis.registry import SEVERITY_RANK
from amqpcap.engine.registered import in_memory
from amqpcap.derive.refills import ack_gaps
from amqpcap.derive import deliveries as D

import crafting as c
from tshark_reference import reference
from tiers import one_fast

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
latency = in_memory("latency")
CAPTURES = sorted(p.name for p in FIXTURES.iterdir() if p.suffix in (".pcap", ".pcapng", ".gz"))


def load(name):
    return amqpcap.load(FIXTURES / name)


# -- hand-made conversation: every settling rule -------------------------------------------------

def _get(ch, queue="q", no_ack=False):
    args = c.short(0) + c.shortstr(queue) + c.bits(no_ack)
    return c.method_frame(ch, 60, 70, args, "basic.get", queue=queue, no_ack=no_ack)


def _get_ok(ch, tag, redelivered=False):
    args = c.longlong(tag) + c.bits(redelivered) + c.shortstr("") + c.shortstr("q") + c.long_(0)
    return c.method_frame(ch, 60, 71, args, "basic.get-ok", delivery_tag=tag)


def _deliver(ch, tag, ctag="ctag-1", redelivered=False):
    return [c.basic_deliver(ch, consumer_tag=ctag, delivery_tag=tag, redelivered=redelivered),
            *c.content(ch, b"x")]


@pytest.fixture(scope="module")
def crafted(tmp_path_factory):
    conv = c.TcpConversation().handshake()
    items = c.opening() + [
        ("c2s", c.basic_qos(1, prefetch_count=3)), ("s2c", c.basic_qos_ok(1)),
        ("c2s", c.basic_consume(1, queue="q", consumer_tag="")), ("s2c", c.basic_consume_ok(1, "ctag-1")),
        ("s2c", _deliver(1, 1)), ("s2c", _deliver(1, 2)), ("s2c", _deliver(1, 3)),
        ("c2s", c.basic_ack(1, 2)),                      # settles 2 only
        ("c2s", c.basic_ack(1, 3, multiple=True)),       # settles 1 and 3 (2 already settled)
        ("s2c", _deliver(1, 4, redelivered=True)), ("s2c", _deliver(1, 5)),
        ("c2s", c.basic_nack(1, 5, requeue=True)),
        ("c2s", c.basic_reject(1, 4, requeue=False)),
        ("s2c", _deliver(1, 6)), ("s2c", _deliver(1, 7)),
        ("c2s", c.basic_ack(1, 0, multiple=True)),       # tag 0 + multiple: everything outstanding
        ("s2c", _deliver(1, 8)),                         # never settled
        # confirms on channel 2
        ("c2s", c.channel_open(2)), ("s2c", c.channel_open_ok(2)),
        ("c2s", c.confirm_select(2)), ("s2c", c.confirm_select_ok(2)),
        ("c2s", [c.basic_publish(2), *c.content(2, b"a")]), ("c2s", [c.basic_publish(2), *c.content(2, b"b")]),
        ("c2s", [c.basic_publish(2), *c.content(2, b"c")]), ("c2s", [c.basic_publish(2), *c.content(2, b"d")]),
        ("s2c", c.basic_ack(2, 2, multiple=True)), ("s2c", c.basic_nack(2, 3, requeue=False)),
        ("s2c", c.basic_ack(2, 4)),
        # basic.get on channel 3, and a no-ack get
        ("c2s", c.channel_open(3)), ("s2c", c.channel_open_ok(3)),
        ("c2s", _get(3)), ("s2c", [_get_ok(3, 1), *c.content(3, b"g")]), ("c2s", c.basic_ack(3, 1)),
        ("c2s", _get(3, no_ack=True)), ("s2c", [_get_ok(3, 2), *c.content(3, b"h")]),
        # channel 4: a delivery lost to a channel close, then the tag space starts again
        ("c2s", c.channel_open(4)), ("s2c", c.channel_open_ok(4)),
        ("c2s", c.basic_consume(4, consumer_tag="ctag-A")), ("s2c", c.basic_consume_ok(4, "ctag-A")),
        ("s2c", _deliver(4, 1, "ctag-A")),
        ("c2s", c.channel_close(4, 200, "bye", 0, 0)), ("s2c", c.channel_close_ok(4)),
        ("c2s", c.channel_open(4)), ("s2c", c.channel_open_ok(4)),
        ("c2s", c.basic_consume(4, consumer_tag="ctag-A")), ("s2c", c.basic_consume_ok(4, "ctag-A")),
        ("s2c", _deliver(4, 1, "ctag-A")), ("c2s", c.basic_ack(4, 1)),
        # a no-ack consumer on channel 5
        ("c2s", c.channel_open(5)), ("s2c", c.channel_open_ok(5)),
        ("c2s", c.basic_consume(5, consumer_tag="fast", no_ack=True)), ("s2c", c.basic_consume_ok(5, "fast")),
        ("s2c", _deliver(5, 1, "fast")), ("s2c", _deliver(5, 2, "fast")),
    ]
    conv.exchange(items)
    recs = conv.timed()
    path = c.write_pcap(tmp_path_factory.mktemp("lat") / "settle.pcap", recs)
    return amqpcap.load(path), path


def test_crafted_deliveries(crafted):
    cap, _ = crafted
    d = D.deliveries(cap).set_index(["channel", "epoch", "delivery_tag", "consumer_tag"])
    ch1 = d.xs(1, level="channel").droplevel(["epoch", "consumer_tag"])
    assert ch1["outcome"].to_dict() == {1: "ack", 2: "ack", 3: "ack", 4: "reject", 5: "nack", 6: "ack", 7: "ack",
                                        8: "unsettled"}
    # 1 and 3 settled by the same multiple ack, 2 by the single one before it
    assert ch1.loc[1, "settle_packet"] == ch1.loc[3, "settle_packet"] != ch1.loc[2, "settle_packet"]
    assert bool(ch1.loc[1, "settle_multiple"]) and not bool(ch1.loc[2, "settle_multiple"])
    assert ch1.loc[6, "settle_packet"] == ch1.loc[7, "settle_packet"]
    assert bool(ch1.loc[5, "settle_requeue"]) and not bool(ch1.loc[4, "settle_requeue"])
    assert (ch1["latency_s"].dropna() > 0).all()
    # the consumer tag came from consume-ok (basic.consume had an empty tag)
    assert set(d.xs(1, level="channel").index.get_level_values("consumer_tag")) == {"ctag-1"}
    ch3 = d.xs(3, level="channel").droplevel(["epoch", "consumer_tag"])
    assert ch3["outcome"].to_dict() == {1: "ack", 2: "no-ack"}
    ch4 = d.xs(4, level="channel").reset_index().sort_values("packet")
    assert ch4["outcome"].tolist() == ["closed", "ack"]
    assert ch4["epoch"].nunique() == 2
    assert d.xs(5, level="channel")["outcome"].tolist() == ["no-ack", "no-ack"]


def test_crafted_confirms(crafted):
    cap, _ = crafted
    p = D.confirms(cap)
    assert p["seq"].tolist() == [1, 2, 3, 4]
    assert p["outcome"].tolist() == ["ack", "ack", "nack", "ack"]
    assert p["confirm_packet"].iloc[0] == p["confirm_packet"].iloc[1]


def test_crafted_summary_and_interleaving(crafted):
    cap, _ = crafted
    r = latency(cap)
    s = r.summary["latency"]
    assert s["deliver_to_ack"]["count"] == 9  # 7 settled on ch1, the get-ok, the second ch4 delivery
    assert s["deliver_to_ack"]["unsettled_at_end"] == 1
    assert s["deliver_to_ack"]["unsettled_at_close"] == 1
    assert s["deliver_to_ack"]["no_ack_excluded"] == 3
    assert s["publish_to_confirm"]["count"] == 4 and s["publish_to_confirm"]["nacked"] == 1
    inter = r.tables["interleaving"].set_index("channel").loc[1]
    # D D D A A D D N R D D A D
    assert inter["max_deliver_run"] == 3 and inter["max_ack_run"] == 2 and inter["runs"] == 7
    assert inter["alternation_ratio"] == pytest.approx(6 / 12)


def test_crafted_unacked_after_each_settling_frame(crafted):
    # channel 1: D1 D2 D3, ack 2 (1 and 3 left), ack 3 multiple (none), D4 D5, nack 5 (4 left),
    # reject 4 (none), D6 D7, ack 0 multiple (none), D8; channel 3: get-ok 1, ack 1 (the no-ack
    # get after it is never settled and not counted); channel 4: D1 after the reopening, ack 1
    cap, _ = crafted
    g = ack_gaps(cap)
    assert g.loc[g["channel"] == 1, "unacked_after"].tolist() == [2, 0, 1, 0, 0]
    assert g.loc[g["channel"] == 3, "unacked_after"].tolist() == [0]
    assert g.loc[g["channel"] == 4, "unacked_after"].tolist() == [0]


def test_crafted_against_reference(crafted):
    if not shutil.which("tshark"):
        pytest.skip("tshark not installed (bash scripts/test.sh installs it)")
    cap, path = crafted
    ref = reference(str(path))
    d = D.deliveries(cap)
    assert len(d["latency_s"].dropna()) == len(ref["deliver_to_ack"])
    assert len(D.confirms(cap)["latency_s"].dropna()) == len(ref["publish_to_confirm"])


# -- real captures against tshark ------------------------------------------------------------

@pytest.mark.parametrize("name", one_fast(CAPTURES))
def test_matches_tshark_reference(name):
    if not shutil.which("tshark"):
        pytest.skip("tshark not installed (bash scripts/test.sh installs it)")
    if name == "dumpcap.pcapng":
        pytest.skip("every packet twice on two interfaces; tshark dissects a mix of the copies (fixtures/README.md)")
    ref = reference(str(FIXTURES / name))
    if not ref["deliver_to_ack"] and not ref["publish_to_confirm"] and not ref["deliveries"]:
        pytest.skip("no deliveries or confirms")
    cap = load(name)
    s = latency(cap).summary["latency"]
    for key in ("deliver_to_ack", "publish_to_confirm"):
        assert s[key]["count"] == len(ref[key]), key
        if ref[key]:
            assert s[key]["p50_s"] == pytest.approx(statistics.median(ref[key]), rel=0.01, abs=2e-6), key
    assert s["deliver_to_ack"]["unsettled_at_end"] + s["deliver_to_ack"]["unsettled_at_close"] == ref["unsettled"]
    assert s["deliver_to_ack"]["no_ack_excluded"] == ref["no_ack"]


def test_dumpcap_one_interface_counts():
    # the same conversation on each interface: amqpcap sees it once (duplicates are retransmissions)
    s = latency(load("dumpcap.pcapng")).summary["latency"]
    facts = json.loads((FIXTURES / "dumpcap.pcapng.tshark.json").read_text())
    assert s["deliver_to_ack"]["count"] == facts["per_interface"]["0"]["methods"]["60.80"]


# -- fixture scenarios -------------------------------------------------------------------------

def test_auto_ack_has_no_deliver_to_ack_pairs():
    s = latency(load("auto-ack.pcap")).summary["latency"]["deliver_to_ack"]
    assert s["count"] == 0 and s["no_ack_excluded"] == 454 and s["unsettled_at_end"] == 0


def test_confirms_count_equals_publishes_confirmed():
    cap = load("confirms.pcap")
    s = latency(cap).summary["latency"]["publish_to_confirm"]
    facts = json.loads((FIXTURES / "confirms.pcap.tshark.json").read_text())
    # every publish on the producer connection was confirmed before the capture ended
    producer = max(facts["streams"].values(), key=lambda m: m.get("60.40", 0))
    assert s["count"] == s["publishes"] == producer["60.40"]
    assert s["unconfirmed_at_end"] == 0 and s["nacked"] == 0


def test_nack_requeue_is_a_redelivery_loop():
    r = latency(load("nack-requeue.pcap"))
    facts = json.loads((FIXTURES / "nack-requeue.pcap.tshark.json").read_text())
    f = [x for x in r.findings if x.id == "redelivery-loop"]
    assert len(f) == 1 and f[0].severity in ("warning", "critical")
    ev = f[0].evidence
    assert ev["redelivered"] == facts["flags"]["60.60.redelivered"] == 11
    assert ev["requeued_by_nack"] == 11 and ev["dropped_by_nack_or_reject"] == 4
    assert ev["streams"] == [1] and ev["packets"] and "tcp.stream eq 1" in ev["filter"]


def test_healthy_has_no_warning():
    r = latency(load("healthy.pcap"))
    assert not [f for f in r.findings if SEVERITY_RANK[f.severity] >= 1]
    s = r.summary["latency"]["interleaving"]
    assert s["max_ack_run"] == 1 and s["max_deliver_run"] >= 50  # acks every 50, multiple


def test_slow_prefetch1_strict_alternation():
    s = latency(load("slow-prefetch1.pcap")).summary["latency"]
    assert s["interleaving"]["alternation_ratio"] == 1.0
    # PerfTest -L 5000: 5 ms of work per message
    assert 0.005 <= s["deliver_to_ack"]["p50_s"] < 0.007
    assert s["ack_to_next_deliver"]["p50_s"] < 0.001


def test_summary_keys_and_plots(tmp_path):
    from amqpcap.report.outputs import write_result

    r = latency(load("multi-ack.pcap"))
    s = r.summary["latency"]
    for key in ("deliver_to_ack", "ack_to_next_deliver", "publish_to_confirm"):
        assert {"count", "p50_s", "p90_s", "p99_s", "max_s"} <= set(s[key])
    files = write_result(r, tmp_path)
    names = {p.name for p in files}
    assert {"latency-over-time.png", "latency-cdf.png", "interleaving-raster.png", "latency-deliveries.csv"} <= names
    assert all(p.stat().st_size > 0 for p in files)


def test_cli(tmp_path):
    from typer.testing import CliRunner

    from amqpcap.cli import app

    res = CliRunner().invoke(app, ["latency", str(FIXTURES / "nack-requeue.pcap"), "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "redelivery-loop" in res.output
    assert (tmp_path / "latency-ack-gaps.csv").exists()


def test_no_deliveries_capture():
    r = latency(load("nagle-write-write-read.pcap"))
    s = r.summary["latency"]
    assert s["deliver_to_ack"]["count"] == 0 and s["deliver_to_ack"]["p50_s"] is None
    assert s["publish_to_confirm"]["count"] == 40
    assert np.isfinite(s["publish_to_confirm"]["p50_s"])


def test_no_slow_refill_from_independent_copies_merged_in_time(tmp_path):
    """35 copies of prefetch-consumers.pcap merged in time (each copy its own connections, the
    same queue name): each copy alone raises no broker-slow-refill, so together they must not
    either. A message of one copy waiting at another copy's ack is delivered to a consumer of
    its own the next moment; only a backlog that stays for the whole gap is the broker's delay."""
    import subprocess

    big = tmp_path / "copies.pcap"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "make_large_capture.py"), str(FIXTURES / "prefetch-consumers.pcap"),
                    str(big), "--packets", "60000"], check=True, capture_output=True)
    one = amqpcap.load(FIXTURES / "prefetch-consumers.pcap")
    assert "broker-slow-refill" not in {f.id for f in latency(one).findings}
    cap = amqpcap.load(big)
    assert len(cap.connections) > 100
    assert "broker-slow-refill" not in {f.id for f in latency(cap).findings}


# -- the partition step over slices of its time ----------------------------------------------------

def _sliced_everywhere(path: Path) -> tuple[dict, dict]:
    """The latency partial of the capture crafted at `path` whole, and cut before every packet
    (`clean_cuts` every 1), each given the capture's backlog (the context round)."""
    from amqpcap.engine.registered import splits
    from amqpcap.model.facts import ns
    from amqpcap.analysis.partition import context_for
    from amqpcap.engine.partitions import sliced_partial
    from amqpcap.io.pieces import facts_of
    from amqpcap.model.facts import clean_cuts

    SPLIT = splits()["latency"]  # (a partition's part: a list of its one partial)
    cap = amqpcap.load(path)
    facts = facts_of(cap)
    context = context_for(SPLIT.join_context([SPLIT.context(cap, facts)]), 0)
    cuts = clean_cuts(cap.packets["packet"].to_numpy(), ns(cap.packets["ts"]), 1)
    assert len(cuts) == len(cap.packets) - 1
    return SPLIT.partial_with(cap, facts, context)[0], sliced_partial(SPLIT, cap, facts, cuts, context)[0]


def _frames(conv, *sent) -> None:
    """Each (direction, frames) sent in packets of its own."""
    for direction, frames in sent:
        conv.send_frames(direction, frames if isinstance(frames, list) else [frames])


@pytest.mark.slow
def test_runs_acks_and_consumers_going_on_across_slices_are_the_wholes(tmp_path):
    """Cut before every packet: runs of deliveries and of acks over several slices, two acks in
    one packet, acks waiting slices for their next delivery (each read at the queue's backlog),
    a channel opened again (its first tag space final) with a consumer whose tag sorts before the
    first one's, a delivery settled after a later one: the partial is the whole's."""
    from test_partition import assert_same_partial

    conv = c.TcpConversation().handshake()
    _frames(conv, *c.opening(), ("c2s", c.channel_open(2)), ("s2c", c.channel_open_ok(2)))
    for body in (b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"h"):  # 8 messages waiting in queue q
        _frames(conv, ("c2s", [c.basic_publish(2, exchange="", routing_key="q"), *c.content(2, body)]))
    _frames(conv, ("c2s", c.basic_qos(1, prefetch_count=3)), ("s2c", c.basic_qos_ok(1)),
            ("c2s", c.basic_consume(1, consumer_tag="zeta")), ("s2c", c.basic_consume_ok(1, "zeta")),
            ("s2c", _deliver(1, 1, "zeta")), ("s2c", _deliver(1, 2, "zeta")), ("s2c", _deliver(1, 3, "zeta")),
            ("c2s", c.basic_ack(1, 1)), ("c2s", c.basic_ack(1, 2)), ("c2s", c.basic_ack(1, 3)),
            ("c2s", c.heartbeat()), ("s2c", c.heartbeat()),  # (the last ack waits two slices for the next delivery)
            ("s2c", _deliver(1, 4, "zeta")), ("s2c", _deliver(1, 5, "zeta")),
            ("c2s", [c.basic_ack(1, 4), c.basic_ack(1, 5)]), ("s2c", _deliver(1, 6, "zeta")),
            ("c2s", c.channel_close(1, 200, "bye", 0, 0)), ("s2c", c.channel_close_ok(1)),
            ("c2s", c.channel_open(1)), ("s2c", c.channel_open_ok(1)),
            ("c2s", c.basic_consume(1, consumer_tag="alpha")), ("s2c", c.basic_consume_ok(1, "alpha")),
            ("s2c", _deliver(1, 1, "alpha")), ("s2c", _deliver(1, 2, "alpha")),
            ("c2s", c.basic_ack(1, 2)), ("c2s", c.basic_ack(1, 1)),  # (the second delivery told first)
            ("s2c", _deliver(1, 3, "alpha")), ("c2s", c.basic_ack(1, 3, multiple=True)))
    c.write_pcap(tmp_path / "runs.pcap", conv.close().timed())
    whole, sliced = _sliced_everywhere(tmp_path / "runs.pcap")
    inter = whole["interleaving"].iloc[0]  # (the first opening, D D D A A A D D AA D: 11 events, the second 6)
    assert (inter["delivers"], inter["acks"], inter["runs"], inter["max_deliver_run"], inter["max_ack_run"],
            inter["packets_multi_ack"]) == (6, 5, 5, 3, 3, 1)
    assert whole["consumers"]["consumer_tag"].tolist() == ["alpha", "zeta"]
    assert whole["gaps"]["backlog_min"].notna().sum() >= 5
    assert_same_partial(sliced, whole, "cut before every packet")
