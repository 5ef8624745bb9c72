"""The overview (top of report.html, `overview` in summary.json) against independent sources:
tshark's method counts per stream (fixtures/*.tshark.json), the scenarios' own parameters
(fixtures/README.md: PerfTest -r, -q, -y) and what the README says each capture shows."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import amqpcap
from amqpcap.engine.registered import run_all
from amqpcap.engine.registered import in_memory
from amqpcap.summary.overview import overview, rate_bins

FIX = Path(__file__).resolve().parents[2] / "fixtures"


def facts(name: str) -> dict:
    return json.loads((FIX / f"{name}.tshark.json").read_text())


def load(name: str):
    cap = amqpcap.load(FIX / name)
    return cap, (cap.summary["last_ts"] - cap.summary["first_ts"]).total_seconds()


def tshark_roles(f: dict) -> dict[str, int]:
    """Connections by role from tshark's per-stream method counts: basic.publish (60.40) makes a
    publisher, basic.deliver (60.60) or basic.get-ok (60.71) a consumer."""
    roles = {"publisher": 0, "consumer": 0, "both": 0}
    for methods in f["streams"].values():
        pub, con = "60.40" in methods, "60.60" in methods or "60.71" in methods
        if pub or con:
            roles["both" if pub and con else "publisher" if pub else "consumer"] += 1
    return roles


@pytest.mark.parametrize("name", ["slow-prefetch1.pcap", "prefetch-consumers.pcap", "multi-ack.pcap",
                                  "nack-requeue.pcap", "rpc-nodelay.pcap", "midstream.pcap", "confirms.pcap"])
def test_counts_rates_and_roles_equal_tsharks(name):
    cap, duration = load(name)
    f = facts(name)
    o = overview(cap, [])
    published, delivered = f["methods"].get("60.40", 0), f["methods"].get("60.60", 0) + f["methods"].get("60.71", 0)
    assert (o["published"], o["delivered"]) == (published, delivered)
    assert o["published_msgs_per_capture_s"] == pytest.approx(published / duration)
    assert o["delivered_msgs_per_capture_s"] == pytest.approx(delivered / duration)
    roles = tshark_roles(f)
    assert {k: o["connections"][k] for k in roles} == roles
    assert o["connections"]["idle"] == len(cap.connections) - sum(roles.values())
    # the consumers listed (all of them here: fewer than 10) share out the deliveries
    assert o["consumers_total"] == len(o["consumers"])
    assert sum(c["delivered"] for c in o["consumers"]) == delivered


@pytest.mark.parametrize("name, acked", [
    ("slow-prefetch1.pcap", 453),  # one basic.ack per delivery (tshark: 453 acks, none multiple)
    ("multi-ack.pcap", 450),  # README: 453 deliveries, acks with multiple=1 every 10, 3 unacked at the end
    ("nack-requeue.pcap", 36),  # README: 36 acks, the nacked and rejected ones are not acked
    ("auto-ack.pcap", 0),  # no-ack: no basic.ack at all
])
def test_acked_counts_messages_not_frames(name, acked):
    cap, _ = load(name)
    assert overview(cap, [])["acked"] == acked


@pytest.mark.parametrize("name", ["amqp10.pcap", "amqp10-multiframe.pcap", "amqp10-outcomes.pcap",
                                  "amqp10-presettled.pcap", "amqp10-credit1.pcap"])
def test_amqp10_messages_are_counted_as_tshark_counts_them(name):
    """AMQP 1.0 deliveries count in the overview as 0-9-1's publishes, deliveries and acks do:
    a delivery per transfer without a transfer with `more` before it (tshark: transfers less
    those with `more`), the client's published, the broker's delivered; acked, the broker's the
    client's dispositions accepted; pre-settled ones from the broker are no-ack. A healthy 1.0
    capture's verdict says its rates, not 0."""
    cap, duration = load(name)
    f = facts(name)
    o = overview(cap, [])
    directions = f["amqp10_directions"].values()

    def each(d: str, count) -> int:
        return sum(count(x[d]) for x in directions)

    published = f["methods"].get("60.40", 0) + each("c2s", lambda x: x["transfers"] - x["transfers_more"])
    delivered = f["methods"].get("60.60", 0) + each("s2c", lambda x: x["transfers"] - x["transfers_more"])
    # 0-9-1 acks of amqp10.pcap: one per delivery (tshark: no multiple), the confirms apart
    acked = f["methods"].get("60.60", 0) + each("c2s", lambda x: x["disposition_outcome_deliveries"]["accepted"])
    assert (o["published"], o["delivered"], o["acked"]) == (published, delivered, acked)
    assert o["no_ack_delivered"] == each("s2c", lambda x: x["transfers_settled"])
    assert o["published_msgs_per_capture_s"] == pytest.approx(published / duration)
    _, bins = rate_bins(cap)  # (the plot at the top of the report, drawn for 1.0 alone too)
    assert [int(bins[k].sum()) for k in ("published", "delivered", "acked")] == [published, delivered, acked]
    # the story gives no side a rate of 0: a consumer-only capture has no publishers' sentence
    assert ("Publishers sent" in o["story"]) == (published > 0), o["story"]
    assert ("none was delivered in the capture" in o["story"]) == (published > 0 and delivered == 0), o["story"]
    n = len(cap.connections)
    said = f"no problem found: {n} connection{'s' if n != 1 else ''}, "
    text = o["verdict"]["text"]  # (no results given: no finding)
    assert text.startswith(said) and text.startswith(said + "0 msgs/s published") == (published == 0), text


def test_sample_story_publish_deliver_and_growth():
    """slow-prefetch1 (the sample): PerfTest -r 200, one consumer at prefetch 1 that falls
    behind: 606 published, 454 delivered (tshark), so the queue grew by 152 at least."""
    cap, duration = load("slow-prefetch1.pcap")
    o = overview(cap, [in_memory("consumers")(cap)])
    (q,) = o["queues"]
    assert q["queue"] == "amqpcap-slow-prefetch1"
    assert q["routed_by"] == "queue.bind"  # PerfTest publishes to exchange "direct", bound in the capture
    assert (q["published"], q["delivered"], q["growth_msgs"]) == (606, 454, 606 - 454)
    assert 0.8 * 200 <= q["published_msgs_per_capture_s"] <= 200  # -r 200 over a capture that also holds the setup
    (c,) = o["consumers"]
    assert c["prefetch"] == 1 and c["consumer"] == "queue amqpcap-slow-prefetch1 on perf-test-consumer-0"
    assert "grew by at least 152 messages" in o["story"]
    assert "1 publisher, 1 consumer, 1 idle" in o["story"]


def test_prefetch_per_consumer_from_perftest_q():
    cap, _ = load("prefetch-consumers.pcap")  # PerfTest -y 3 -q 20
    o = overview(cap, [in_memory("consumers")(cap)])
    assert o["consumers_total"] == 3
    assert [c["prefetch"] for c in o["consumers"]] == [20, 20, 20]


def test_requeued_messages_go_back_into_the_queue():
    """nack-requeue: 40 published, 51 delivered, 11 of them requeued by nack (README): net 0."""
    cap, _ = load("nack-requeue.pcap")
    (q,) = overview(cap, [])["queues"]
    assert (q["published"], q["delivered"], q["growth_msgs"]) == (40, 51, 40 - 51 + 11)
    assert q["routed_by"] == "default exchange"


@pytest.mark.parametrize("name, reason", [
    ("memory-alarm.pcap", "held back"),  # connection.blocked on the producer (README, frame 506)
    ("kernel-drops.pcap", "lost bytes"),  # tcpdump dropped packets: deliveries and publishes missing
])
def test_no_growth_claimed_when_publishes_may_not_have_reached_the_queue(name, reason):
    cap, _ = load(name)
    (q,) = overview(cap, [])["queues"]
    assert q["published"] > 0 and q["growth_msgs"] is None and reason in q["growth_basis"]


def test_direct_reply_to_is_not_a_queue_that_grows():
    """rpc-nodelay: replies go to amq.rabbitmq.reply-to.<id> on the default exchange."""
    cap, _ = load("rpc-nodelay.pcap")
    qs = {q["queue"]: q for q in overview(cap, [])["queues"]}
    assert set(qs) == {"amq.rabbitmq.reply-to", "amqpcap-rpc"}
    assert qs["amq.rabbitmq.reply-to"]["growth_msgs"] is None
    assert (qs["amqpcap-rpc"]["published"], qs["amqpcap-rpc"]["growth_msgs"]) == (150, 0)


def test_publishes_without_a_route_stay_per_exchange_and_key():
    """midstream: no queue.bind and no basic.consume in the capture: nothing is mapped to a queue."""
    cap, _ = load("midstream.pcap")
    o = overview(cap, [])
    assert o["queues"] == []
    (p,) = o["publishes"]
    assert (p["exchange"], p["published"], p["queues"]) == ("direct", 382, [])
    (c,) = o["consumers"]
    assert c["consumer"].startswith("consumer amq.ctag-")  # no queue known: the tag names it


def test_verdict_is_the_worst_finding_or_no_problem_with_the_numbers():
    cap, duration = load("slow-prefetch1.pcap")
    results = run_all(cap)
    findings = [f for r in results for f in r.findings]
    v = overview(cap, results)["verdict"]
    problems = [f for f in findings if f.severity != "info"]
    assert problems and v["problems"] == len(problems) and v["notes"] == len(findings) - len(problems)
    worst = max(problems, key=lambda f: ({"warning": 1, "critical": 2}[f.severity], f.impact))
    assert (v["severity"], v["text"]) == (worst.severity, worst.title)
    quiet = [dataclasses.replace(r, findings=[]) for r in results]
    assert overview(cap, quiet)["verdict"] == {
        "severity": None, "finding": None, "problems": 0, "notes": 0,
        "text": f"no problem found: 3 connections, {606 / duration:,.0f} msgs/s published, "
                f"{454 / duration:,.0f} delivered"}


def test_summary_json_has_the_overview():
    from amqpcap.summary.build import build_summary

    cap, _ = load("prefetch1.pcap")
    s = build_summary(cap, run_all(cap))
    assert s["overview"]["published"] == facts("prefetch1.pcap")["methods"]["60.40"]
    json.dumps(s)  # JSON-ready


@pytest.mark.skipif(not (FIX / "flow-control.pcap.gz").exists() and not (FIX / "flow-control.pcap").exists(),
                    reason="fixtures/flow-control.pcap(.gz) not recorded yet")
def test_flow_control_publishes_are_not_counted_into_queues_as_growth():
    """The broker advertised zero windows to the publishers: what it had not read yet was in its
    socket buffers, not in the queues, so no growth is claimed."""
    name = "flow-control.pcap.gz" if (FIX / "flow-control.pcap.gz").exists() else "flow-control.pcap"
    cap, _ = load(name)
    o = overview(cap, [])
    assert o["queues"] and all(q["growth_msgs"] is None for q in o["queues"] if q["published"])
