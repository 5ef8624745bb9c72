"""Consumer and latency findings told once, grouped, and everyone named as the operator knows them.

Expected names come from tshark (Wireshark's AMQP dissector: the `connection_name` client
property of connection.start-ok, the queue of basic.consume, the prefetch of basic.qos) or from
the scenario's own parameters (PerfTest `-y 10 -q 1`: ten consumers at prefetch 1; crafted
captures: the names and timings written into them), never from amqpcap's output.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import amqpcap
from amqpcap.analysis.registry import SEVERITY_RANK
from amqpcap.engine.registered import in_memory
from amqpcap.analyzers import consumers as C
from amqpcap.analyzers import latency as L
from amqpcap.analyzers.consumers.findings import _findings, _limit_rows
from amqpcap.derive.consumers import consumer_state
from amqpcap.derive.refills import ack_gaps
from amqpcap.derive.names import connection_label

import crafting as c

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "fixtures"
SAMPLE = ROOT / "amqpcap" / "data" / "sample.pcap"
consumers, latency = in_memory("consumers"), in_memory("latency")
CONSUMER_IDS = {"prefetch-one", "consumer-bound"}
needs_tshark = pytest.mark.skipif(not shutil.which("tshark"), reason="tshark not installed (scripts/test.sh installs it)")


# -- tshark: what Wireshark says the capture holds ------------------------------------------------

@lru_cache(maxsize=None)
def tshark_facts(path: Path) -> dict:
    """{"names": {stream: connection_name}, "consumes": [(stream, channel, queue)],
    "qos": [(stream, channel, prefetch_count, global)]} from tshark's PDML of the
    connection.start-ok, basic.consume and basic.qos frames (one <proto name="amqp"> per AMQP frame)."""
    flt = ("(amqp.method.class == 10 && amqp.method.method == 11) || "
           "(amqp.method.class == 60 && (amqp.method.method == 10 || amqp.method.method == 20))")
    xml = subprocess.run(["tshark", "-r", str(path), "-o", "tcp.desegment_tcp_streams:TRUE", "-d",
                          "tcp.port==5672,amqp", "-Y", flt, "-T", "pdml"], capture_output=True, check=True).stdout
    out = {"names": {}, "consumes": [], "qos": []}
    for packet in ET.fromstring(xml).iter("packet"):
        stream = int(packet.find(".//field[@name='tcp.stream']").get("show"))
        for proto in packet.iter("proto"):
            if proto.get("name") != "amqp":
                continue
            show = {f.get("name"): f.get("show") for f in proto.iter("field")}
            method = (show.get("amqp.method.class"), show.get("amqp.method.method"))
            channel = int(show.get("amqp.channel", 0))
            if method == ("10", "11"):
                for f in proto.iter("field"):
                    m = re.match(r"connection_name \(string\): (.*)$", f.get("showname") or "")
                    if f.get("name") == "amqp.field" and m:
                        out["names"][stream] = m.group(1)
            elif method == ("60", "20"):
                out["consumes"].append((stream, channel, show["amqp.method.arguments.queue"]))
            elif method == ("60", "10"):
                out["qos"].append((stream, channel, int(show["amqp.method.arguments.prefetch_count"]),
                                   show["amqp.method.arguments.global"] in ("1", "True")))
    return out


def consumer_findings(path: Path):
    cap = amqpcap.load(path)
    return cap, [f for f in consumers(cap).findings + latency(cap).findings if f.id in CONSUMER_IDS]


# -- the sample: one consumer, one finding, named -------------------------------------------------

@needs_tshark
def test_sample_has_one_consumer_finding_named_by_queue_and_connection():
    facts = tshark_facts(SAMPLE)
    (stream, channel, queue), = facts["consumes"]
    (q_stream, _, prefetch, _), = facts["qos"]
    # PerfTest -q 1 on the consumer's connection, named perf-test-consumer-0 by PerfTest
    assert (q_stream, prefetch) == (stream, 1) and facts["names"][stream] == "perf-test-consumer-0"
    assert queue == "amqpcap-slow-prefetch1"

    _, found = consumer_findings(SAMPLE)
    assert len(found) == 1, [(f.id, f.title) for f in found]
    f = found[0]
    assert f.id == "consumer-bound"  # prefetch 1 and the bottleneck: one card, the prefetch advice in it
    assert "prefetch 1" in f.advice.lower()
    (s,) = f.subjects
    assert (s["connection"], s["stream"], s["channel"], s["queue"]) == (facts["names"][stream], stream, channel, queue)
    assert s["prefetch_msgs"] == prefetch and s["consumer_tag"].startswith("amq.ctag-")
    assert f"queue {queue} on {facts['names'][stream]}" in f.title
    assert "amq.ctag" not in f.title and "stream" not in f.title


@needs_tshark
def test_prefetch_consumers_raise_no_prefetch_one():
    # PerfTest -y 3 -q 20: three consumers at prefetch 20
    path = FIX / "prefetch-consumers.pcap"
    facts = tshark_facts(path)
    assert sorted(p for _, _, p, _ in facts["qos"]) == [20, 20, 20]
    _, found = consumer_findings(path)
    assert not [f for f in found if f.id == "prefetch-one"]


def test_estimated_prefetch_of_one_is_not_prefetch_one():
    # midstream.pcap: PerfTest -q 20, the capture starts after basic.qos; a fast consumer never
    # has more than one unacked, so the estimate is 1: no evidence that prefetch 1 was set
    cap, found = consumer_findings(FIX / "midstream.pcap")
    row = C.consumer_summary(cap).iloc[0]
    assert row["prefetch_estimated"] and row["prefetch"] == 1
    assert not found


# -- ten consumers: one grouped finding -----------------------------------------------------------

TEN = FIX / "ten-consumers.pcap"


@needs_tshark
@pytest.mark.skipif(not TEN.exists(), reason="fixtures/ten-consumers.pcap not recorded yet")
def test_ten_consumers_are_one_finding_listing_them():
    facts = tshark_facts(TEN)
    consumer_streams = sorted({s for s, _, _ in facts["consumes"]})
    # the scenario: PerfTest -y 10 -q 1, one queue
    assert len(consumer_streams) == 10 and len({q for _, _, q in facts["consumes"]}) == 1
    assert {p for s, _, p, _ in facts["qos"] if s in consumer_streams} == {1}
    expected = {facts["names"][s] for s in consumer_streams}
    assert expected == {f"perf-test-consumer-{i}" for i in range(10)}
    queue = facts["consumes"][0][2]

    _, found = consumer_findings(TEN)
    assert len(found) == 1, [(f.id, f.title) for f in found]
    f = found[0]
    assert {s["connection"] for s in f.subjects} == expected and len(f.subjects) == 10
    assert {s["queue"] for s in f.subjects} == {queue} and {s["prefetch_msgs"] for s in f.subjects} == {1}
    # worst first: severities, then shares at the limit, never rising
    ranks = [SEVERITY_RANK[s["severity"]] for s in f.subjects]
    assert ranks == sorted(ranks, reverse=True) and f.severity == f.subjects[0]["severity"]
    if f.id == "consumer-bound":
        shares = [(SEVERITY_RANK[s["severity"]], s["share_at_limit"]) for s in f.subjects]
        assert shares == sorted(shares, reverse=True)
    assert f"10 consumers on queue {queue}" in f.title and f.subjects[0]["connection"] in f.title
    # the queue grew: PerfTest -r 3000 against ten consumers of 5 ms work each; its growth over
    # what they took is tshark's (publishes − deliveries) / deliveries, and makes it critical
    m = json.loads(TEN.with_name(TEN.name + ".tshark.json").read_text())["methods"]
    assert f.evidence["backlog_growth_ratio"] == pytest.approx((m["60.40"] - m["60.60"]) / m["60.60"], rel=0.05)
    assert f.severity == "critical"
    assert "amq.ctag" not in f.title and f.evidence["consumers_with_this_finding"] == 10
    assert f.evidence["streams"] == consumer_streams and f.evidence["filter"].startswith("tcp.stream in {")


FLOW = next((p for p in (FIX / "flow-control.pcap", FIX / "flow-control.pcap.gz") if p.exists()), None)


@pytest.mark.slow
@needs_tshark
@pytest.mark.skipif(FLOW is None, reason="fixtures/flow-control.pcap not recorded yet")
def test_flow_control_does_not_blame_the_consumers():
    """10 PerfTest producers without a rate limit and 10 consumers at prefetch 100 (-q 100): the
    broker applies flow control to the producers (rabbitmqctl showed them in state `flow`, the
    consumers `running`: flow-control.notes.txt). The consumers' prefetch is not 1, and nothing
    says they or the broker's refill held the deliveries back: no consumer or latency finding."""
    facts = tshark_facts(FLOW)
    consumer_streams = sorted({s for s, _, _ in facts["consumes"]})
    assert len(consumer_streams) == 10
    assert {p for s, _, p, _ in facts["qos"] if s in consumer_streams} == {100}
    cap = amqpcap.load(FLOW)
    findings = consumers(cap).findings + latency(cap).findings
    assert not findings, [(f.id, f.title) for f in findings]


# -- severity: monotonic in the numbers it comes from ---------------------------------------------

shares = st.floats(0, 1, allow_nan=False)
growths = st.one_of(st.just(float("nan")), st.floats(-1000, 100_000, allow_nan=False))  # messages (NaN: not known)
ratios = st.one_of(st.just(float("nan")), st.floats(0, 5, allow_nan=False))


def _ordered(a, b):
    """(low, high); NaN (not known) counts as the lowest."""
    return (a, b) if np.isnan(a) or (not np.isnan(b) and a <= b) else (b, a)


@settings(max_examples=300, deadline=None)
@given(growths, growths, ratios, ratios, st.booleans())
def test_consumer_bound_severity_never_falls_as_the_queue_grows_more(g1, g2, r1, r2, estimated):
    lo_g, hi_g = _ordered(g1, g2)
    lo_r, hi_r = _ordered(r1, r2)
    base = C.consumer_bound_severity(lo_g, lo_r, estimated)
    assert C.consumer_bound_severity(hi_g, lo_r, estimated) >= base
    assert C.consumer_bound_severity(lo_g, hi_r, estimated) >= base


@settings(max_examples=200, deadline=None)
@given(shares, shares)
def test_other_severities_never_fall_as_their_number_rises(a, b):
    lo, hi = sorted((a, b))
    assert C.prefetch_one_severity(hi) >= C.prefetch_one_severity(lo)
    assert L.redelivery_severity(hi) >= L.redelivery_severity(lo)
    assert L.refill_severity(hi) >= L.refill_severity(lo)  # (seconds; the same step at 50 ms)


@pytest.fixture(scope="module")
def sample():
    cap = amqpcap.load(SAMPLE)
    return cap, C.consumer_summary(cap)


def consumer_findings_of(cap, s):
    """The consumers analyzer's consumer-bound and prefetch-one findings for the rows `s`."""
    from amqpcap.derive.refills import slow_refills

    return _findings(cap, s, slow_refills(cap).index.to_numpy(), _limit_rows(consumer_state(cap)))


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0.5, 1.0), st.integers(-50, 500)), min_size=1, max_size=3),
       st.integers(0, 2), st.floats(0, 0.5), st.integers(0, 400))
def test_raising_a_subjects_numbers_never_lowers_the_finding(sample, rows, which, more_share, more_growth):
    """The sample's consumer copied onto the capture's three connections with other shares at the
    limit and queue growths: one consumer-bound finding listing them worst first; raising one
    subject's share or its queue's growth never lowers the finding's severity, nor removes a
    subject."""
    cap, s = sample
    base = s.iloc[[0] * len(rows)].reset_index(drop=True)
    base["stream"] = np.arange(len(rows))  # streams 0, 1, 2: the sample's three connections
    base["share_at_limit"] = [r[0] for r in rows]
    base["backlog_growth_msgs"] = [r[1] for r in rows]
    before = consumer_findings_of(cap, base)
    i = which % len(rows)
    up = base.copy()
    up.loc[i, "share_at_limit"] = min(1.0, up.loc[i, "share_at_limit"] + more_share)
    up.loc[i, "backlog_growth_msgs"] += more_growth
    after = consumer_findings_of(cap, up)
    assert [f.id for f in before] == [f.id for f in after] == ["consumer-bound"]
    assert SEVERITY_RANK[after[0].severity] >= SEVERITY_RANK[before[0].severity]
    assert len(after[0].subjects) == len(before[0].subjects) == len(rows)
    ranked = [(SEVERITY_RANK[x["severity"]], x["share_at_limit"]) for x in after[0].subjects]
    assert ranked == sorted(ranked, reverse=True)
    assert after[0].severity == after[0].subjects[0]["severity"]
    assert {x["connection"] for x in after[0].subjects} == {connection_label(cap, k) for k in range(len(rows))}


# -- latency findings grouped, on crafted captures -----------------------------------------------

def _conversation(port: int, name: str, body) -> list:
    conv = c.TcpConversation(client=("10.0.0.1", port)).handshake()
    conv.exchange(c.opening(connection_name=name) + body)
    return conv.packets


def _refill_body(n: int, refill_packets: int, kept: bool = False) -> list:
    """prefetch 1 on queue `orders`; n messages published first (default exchange, routing key =
    queue: the backlog is known), then each delivery acked in the next packet and the next
    delivery `refill_packets` packets after the ack (heartbeats in between: 1 ms each). With
    ``kept``: prefetch 2 and a first delivery the consumer keeps unacked throughout."""
    body = [("c2s", c.basic_qos(1, prefetch_count=2 if kept else 1)), ("s2c", c.basic_qos_ok(1)),
            ("c2s", c.basic_consume(1, queue="orders", consumer_tag="ctag-1")), ("s2c", c.basic_consume_ok(1, "ctag-1"))]
    body += [("c2s", [c.basic_publish(1, exchange="", routing_key="orders"), *c.content(1, b"m")]) for _ in range(n)]
    if kept:
        body += [("s2c", [c.basic_deliver(1, consumer_tag="ctag-1", delivery_tag=n + 1), *c.content(1, b"m")])]
    for tag in range(1, n + 1):
        body += [("s2c", [c.basic_deliver(1, consumer_tag="ctag-1", delivery_tag=tag), *c.content(1, b"m")]),
                 ("c2s", c.basic_ack(1, tag))] + [("s2c", c.heartbeat())] * refill_packets
    return body


def _bounce_body(plain: int, bounced: int) -> list:
    """prefetch 10 on queue `jobs`: `bounced` deliveries nacked with requeue and delivered again
    (redelivered=1) then acked, and `plain` deliveries acked at once."""
    body = [("c2s", c.basic_qos(1, prefetch_count=10)), ("s2c", c.basic_qos_ok(1)),
            ("c2s", c.basic_consume(1, queue="jobs", consumer_tag="w")), ("s2c", c.basic_consume_ok(1, "w"))]
    tag = 0
    for i in range(bounced + plain):
        tag += 1
        body += [("s2c", [c.basic_deliver(1, consumer_tag="w", delivery_tag=tag), *c.content(1, b"j")])]
        if i < bounced:
            body += [("c2s", c.basic_nack(1, tag, requeue=True))]
            tag += 1
            body += [("s2c", [c.basic_deliver(1, consumer_tag="w", delivery_tag=tag, redelivered=True),
                              *c.content(1, b"j")])]
        body += [("c2s", c.basic_ack(1, tag))]
    return body


def _write(tmp_path, name, conversations) -> Path:
    records = [p for conv in conversations for p in conv]
    return c.write_pcap(tmp_path / name, c.stamp(records, step_ns=1_000_000))


@pytest.mark.slow
def test_slow_refill_is_one_finding_per_cause_and_takes_prefetch_one_with_it(tmp_path):
    path = _write(tmp_path, "refill.pcap", [
        _conversation(40001, "slow-worker-1", _refill_body(60, 6)),     # next delivery 7 ms after the ack
        _conversation(40002, "slow-worker-2", _refill_body(60, 60)),    # 61 ms: critical
        _conversation(40003, "fast-worker", _refill_body(60, 0)),       # 1 ms: not slow
    ])
    cap = amqpcap.load(path)
    (refill,) = [f for f in latency(cap).findings if f.id == "broker-slow-refill"]
    assert [s["connection"] for s in refill.subjects] == ["slow-worker-2", "slow-worker-1"]
    assert [s["severity"] for s in refill.subjects] == ["critical", "warning"] and refill.severity == "critical"
    assert [round(s["ack_to_next_deliver_p50_s"], 4) for s in refill.subjects] == [0.061, 0.007]
    assert {s["queue"] for s in refill.subjects} == {"orders"}
    assert "on 2 channels of queue orders" in refill.title and "slow-worker-2" in refill.title
    assert refill.evidence["channels_with_this_finding"] == 2 and refill.evidence["streams"] == [0, 1]
    assert refill.evidence["filter"] == ("tcp.stream in {0, 1} && amqp.channel == 1 && amqp.method.class == 60 && "
                                         "amqp.method.method in {60, 80, 90, 120}")
    # the slow-refill channels' prefetch 1 is told in that finding; the fast one's in prefetch-one
    found = {f.id: f for f in consumers(cap).findings}
    assert set(found) == {"prefetch-one"}
    assert [s["connection"] for s in found["prefetch-one"].subjects] == ["fast-worker"]
    assert found["prefetch-one"].title.startswith("Prefetch 1 with one ack per message: queue orders on fast-worker")


@pytest.mark.slow
def test_slow_refill_counts_only_acks_that_left_the_consumer_without_work(tmp_path):
    # slow-worker-2's 61 ms refills, but the consumer keeps one other message unacked all along:
    # after each ack it still had a message in hand, so no wait for the broker is proven
    cap = amqpcap.load(_write(tmp_path, "kept.pcap", [_conversation(40001, "busy-worker", _refill_body(60, 60, kept=True))]))
    g = ack_gaps(cap)
    assert (g["unacked_after"] == 1).all() and g["gap_s"].median() > 0.05
    assert not [f for f in latency(cap).findings if f.id == "broker-slow-refill"]


def test_basic_get_waits_are_not_the_brokers(tmp_path):
    # a client polling with basic.get 10 ms after each ack: the next get-ok waits for its next
    # basic.get, the broker answers each at once
    body = [("c2s", [c.basic_publish(1, exchange="", routing_key="orders"), *c.content(1, b"m")]) for _ in range(40)]
    for tag in range(1, 41):
        get = c.method_frame(1, 60, 70, c.short(0) + c.shortstr("orders") + c.bits(False), "basic.get",
                             queue="orders", no_ack=False)
        get_ok = c.method_frame(1, 60, 71, c.longlong(tag) + c.bits(False) + c.shortstr("") + c.shortstr("orders")
                                + c.long_(40 - tag), "basic.get-ok", delivery_tag=tag)
        body += [("c2s", get), ("s2c", [get_ok, *c.content(1, b"m")]), ("c2s", c.basic_ack(1, tag))]
        body += [("s2c", c.heartbeat())] * 10
    cap = amqpcap.load(_write(tmp_path, "get.pcap", [_conversation(40001, "poller", body)]))
    g = ack_gaps(cap)
    assert g["gap_s"].median() >= 0.01 and (g["backlog_min"].dropna() > 0).sum() >= 20
    assert not [f for f in latency(cap).findings if f.id == "broker-slow-refill"]


def test_redelivery_loops_are_one_finding_worst_first(tmp_path):
    path = _write(tmp_path, "bounce.pcap", [
        _conversation(40001, "retry-worker-a", _bounce_body(plain=10, bounced=10)),  # 10 of 30 bounce
        _conversation(40002, "retry-worker-b", _bounce_body(plain=0, bounced=10)),   # 10 of 20: half
    ])
    (f,) = [f for f in latency(amqpcap.load(path)).findings if f.id == "redelivery-loop"]
    assert [(s["connection"], s["deliveries"], s["redelivered"], s["requeued_by_nack"]) for s in f.subjects] == [
        ("retry-worker-b", 20, 10, 10), ("retry-worker-a", 30, 10, 10)]
    assert [s["severity"] for s in f.subjects] == ["critical", "warning"] and f.severity == "critical"
    assert f.title.startswith("Messages bouncing on 2 channels of queue jobs: worst queue jobs on retry-worker-b")
    ev = f.evidence
    assert (ev["deliveries"], ev["redelivered"], ev["deliveries_total"], ev["redelivered_total"]) == (20, 10, 50, 20)
    assert ev["channels_with_this_finding"] == 2 and ev["queues"] == ["jobs"]


# -- tables and info lead with names -------------------------------------------------------------

@needs_tshark
def test_per_consumer_tables_lead_with_the_connection_name():
    facts = tshark_facts(SAMPLE)
    cap = amqpcap.load(SAMPLE)
    for table in (consumers(cap).tables["consumers"], latency(cap).tables["consumers"]):
        assert table.columns[0] == "connection"
        assert dict(zip(table["stream"], table["connection"])) == {s: facts["names"][s] for s, _, _ in facts["consumes"]}


@needs_tshark
def test_info_names_connections_roles_and_consumers():
    import json

    r = subprocess.run([sys.executable, "-m", "amqpcap", "info", str(SAMPLE)], capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    facts = tshark_facts(SAMPLE)
    methods = json.loads((FIX / "slow-prefetch1.pcap.tshark.json").read_text())["streams"]  # (sample = this capture)
    text = r.stdout
    conns = text[text.index("AMQP connections"):text.index("Consumers")]
    rows = {}
    for line in conns.splitlines():
        cells = [x.strip() for x in line.strip("│").split("│")]
        if line.startswith("│") and cells[0]:
            rows[cells[0]] = cells
    for stream, name in facts["names"].items():
        m = methods[str(stream)]
        role = {(True, True): "both", (True, False): "publisher", (False, True): "consumer",
                (False, False): "idle"}[("60.40" in m, "60.60" in m or "60.70" in m)]
        cells = rows[name]  # the label leads the row
        assert cells[3] == role and cells[5] == str(stream) and cells[1] == "RabbitMQ 5.23.0" and cells[2] == "guest@/"
    consumers = text[text.index("Consumers"):text.index("Methods")]
    (stream, _, queue), = facts["consumes"]
    line = next(x for x in consumers.splitlines() if queue in x)
    cells = [x.strip() for x in line.strip("│").split("│")]
    assert cells[:3] == [queue, facts["names"][stream], "1"] and cells[3].startswith("amq.ctag-")
