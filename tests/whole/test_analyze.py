"""`amqpcap analyze` on real captures of known situations: the findings name the cause, the
healthy run has no warning, and every output is written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import amqpcap
from amqpcap.engine.registered import analyzers
from amqpcap.analysis.consequences import settled
from amqpcap.summary.build import build_summary
from tiers import one_fast

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "fixtures"

# fixture -> findings its recorded situation must produce (fixtures/README.md says how each was made)
EXPECTED = {
    "slow-prefetch1.pcap": {"consumer-bound"},  # at prefetch 1: one finding, the prefetch advice in it
    "rpc-nodelay.pcap": {"small-packets"},
    "nagle-write-write-read.pcap": {"nagle-delayed-ack"},
    "nack-requeue.pcap": {"redelivery-loop"},
    "memory-alarm.pcap": {"publisher-blocked"},
    "kernel-drops.pcap": {"capture-gaps"},
    # a no-ack consumer that stops reading: its window fills, nothing bounds what the broker sends
    "zero-window.pcap": {"receiver-window", "unlimited-prefetch"},
    "polling.pcap": {"polling-basic-get"},
    "transactions.pcap": {"transactions"},
    "unroutable.pcap": {"unroutable-messages"},
    "cancelled.pcap": {"consumer-cancelled"},
    "churn.pcap": {"connection-churn"},
    "publish-wait.pcap": {"publish-and-wait"},
    "channel-churn.pcap": {"channel-churn"},
    "heartbeats.pcap": {"heartbeat-problems"},
    "unlimited.pcap.gz": {"unlimited-prefetch"},
    "huge-messages.pcap.gz": {"large-messages"},
    "channel-leak.pcap": {"channel-churn"},
}

#: (fixture, finding) pairs that must appear at any severity: pika's RPC (rpc-nodelay) writes
#: ~400 avoidable packets/s per connection, `info` by small-packets' rate thresholds
#: (docs/analyzers/nagle.md; tests/analyzers/test_nagle.py checks the rest of that finding).
AT_ANY_SEVERITY = {("rpc-nodelay.pcap", "small-packets")}


def findings_of(name: str):
    cap = amqpcap.load(FIX / name)
    results = [fn(cap) for fn, _ in analyzers().values()]
    return cap, results, settled(results)  # what the operator is shown: consequences folded


@pytest.mark.parametrize("name", one_fast(sorted(EXPECTED), keep="slow-prefetch1.pcap"))
def test_findings_name_the_cause(name):
    _, _, findings = findings_of(name)
    ids = {f.id for f in findings if f.severity in ("warning", "critical") or (name, f.id) in AT_ANY_SEVERITY}
    assert EXPECTED[name] <= ids, [(f.id, f.severity, f.title) for f in findings]


def test_healthy_run_has_no_warning():
    _, _, findings = findings_of("healthy.pcap")
    assert not [f for f in findings if f.severity != "info"], [(f.id, f.severity, f.title) for f in findings]


@pytest.mark.slow
def test_every_finding_has_evidence_with_a_wireshark_filter():
    for name in EXPECTED:
        for f in findings_of(name)[2]:
            assert f.evidence.get("filter"), (name, f.id)
            assert f.title and f.advice and f.severity in ("info", "warning", "critical")


def test_summary_json_schema():
    cap, results, _ = findings_of("slow-prefetch1.pcap")
    s = build_summary(cap, results)
    json.dumps(s)  # serialisable as is
    assert s["methods"]["basic.deliver"] == int((cap.frames["method"] == "basic.deliver").sum())
    bins = s["packet_sizes"]["bins"]
    assert [b["range"] for b in bins][0] == "0-19" and bins[-1]["range"] == "5120 and greater"
    assert sum(b["count"] for b in bins) == cap.summary["packets"]
    for key in ("deliver_to_ack", "ack_to_next_deliver", "publish_to_confirm"):
        assert {"count", "p50_s", "p90_s", "p99_s", "max_s"} <= set(s["latency"][key]), key
    assert isinstance(s["consumers"], list) and s["consumers"]
    for f in s["findings"]:
        assert {"id", "severity", "title", "evidence"} <= set(f)


def test_analyze_writes_everything(tmp_path):
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "amqpcap", "analyze", str(FIX / "slow-prefetch1.pcap"), "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "consumer-bound" in r.stdout
    assert (out / "summary.json").is_file() and (out / "report.html").is_file()
    assert list(out.glob("*.csv")) and list(out.glob("*.png"))
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html and "consumer-bound" in html


@pytest.mark.slow
def test_every_finding_filter_is_valid_in_wireshark():
    """Each finding's `filter` is pasted into Wireshark by users: tshark must accept it and it
    must match packets of the capture it came from."""
    import shutil

    tshark = shutil.which("tshark")
    assert tshark, "tshark is installed by the README's test command"
    for name in sorted(EXPECTED):
        for f in findings_of(name)[2]:
            flt = f.evidence["filter"]
            r = subprocess.run([tshark, "-r", str(FIX / name), "-Y", flt, "-T", "fields", "-e", "frame.number"],
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, (name, f.id, flt, r.stderr)
            assert r.stdout.strip(), (name, f.id, flt, "matches no packet")


@pytest.mark.parametrize("case", ["no AMQP connection", "no packets"])
def test_analyze_captures_without_amqp(tmp_path, case):
    """Every analyzer copes with empty tables: no findings, no error."""
    if case == "no packets":
        path = tmp_path / "header-only.pcap"
        path.write_bytes((FIX / "confirms.pcap").read_bytes()[:24])
        ports = (5672,)
    else:
        path, ports = FIX / "midstream.pcap", (9999,)  # no protocol header, not on an AMQP port
    cap = amqpcap.load(path, ports=ports)
    assert len(cap.frames) == 0
    results = [fn(cap) for fn, _ in analyzers().values()]
    assert not [f for r in results for f in r.findings if f.severity != "info"]
    s = build_summary(cap, results)
    assert s["capture"]["connections"] == 0


#: Every fixture's recorded situation, from the scenario that made it (fixtures/README.md), as
#: the findings at warning or critical it must raise: these and no others. A fixture not listed
#: must raise none. Small messages written one per segment at thousands per second (PerfTest
#: without batching at `-r 3000`, or unlimited) are `small-packets` by the scenario itself.
SITUATIONS = {
    "flow-control.pcap.gz": {"broker-flow-control", "small-packets"},  # 10 unlimited producers, 64 B
    "kernel-drops.pcap": {"capture-gaps", "small-packets"},  # tcpdump dropped 1880; -r 3000 -s 32
    "memory-alarm.pcap": {"publisher-blocked"},
    "nack-requeue.pcap": {"redelivery-loop"},
    # the raw client publishes, then waits for the confirm, which Nagle holds ~44 ms: one cause,
    # the publish-and-wait folded into it (amqpcap/analysis/consequences.py)
    "nagle-write-write-read.pcap": {"nagle-delayed-ack"},
    "slow-prefetch1.pcap": {"consumer-bound"},
    "ten-consumers.pcap": {"consumer-bound", "small-packets"},  # -q 1 -L 5000 for 10; -r 3000 -s 64
    # a no-ack consumer that stops reading: its window fills, nothing bounds what the broker sends
    "zero-window.pcap": {"receiver-window", "unlimited-prefetch"},
    "polling.pcap": {"polling-basic-get"},  # basic.get every 20 ms, one message every 100 ms
    "transactions.pcap": {"transactions"},  # tx.commit after every basic.publish
    "unroutable.pcap": {"unroutable-messages"},  # 30 mandatory publishes to amq.direct, no binding
    "cancelled.pcap": {"consumer-cancelled"},  # the consumer's queue deleted under it, no new consume
    "churn.pcap": {"connection-churn"},  # 40 connections, one message each
    "publish-wait.pcap": {"publish-and-wait"},  # pika's BlockingChannel with confirms
    "channel-churn.pcap": {"channel-churn"},  # 60 channels, one message each
    "heartbeats.pcap": {"heartbeat-problems"},  # a 2 s heartbeat client blocked 9 s: the broker resets it
    "unlimited.pcap.gz": {"unlimited-prefetch"},  # no basic.qos, 2,500 messages waiting, 4 ms of work each
    "huge-messages.pcap.gz": {"large-messages"},  # 900 kB bodies against a 1 MiB limit, then 1.5 MB refused
    "channel-leak.pcap": {"channel-churn"},  # 29 channels never closed, channel_max 32
    # record.sh stage 10: pika's small segments there are the one-at-a-time pattern's, folded into it
    "transactions-busy.pcap": {"transactions"},  # 2,000 transactions of one publish each
    "unroutable-busy.pcap": {"unroutable-messages"},  # 2,000 of 2,020 mandatory publishes NO_ROUTE
    "churn-many.pcap.gz": {"connection-churn"},  # 1,500 connections, one message each
    # AMQP 1.0 (record.sh stage 9): a receiver granting link-credit 1 after each message
    "amqp10-credit1.pcap": {"credit-starved"},
    # 5 rejected and 10 released of 30; then RabbitMQ 3.10 ends the session of the one client
    # settling as modified with amqp:invalid-field
    "amqp10-outcomes.pcap": {"delivery-outcomes", "closed-with-error"},
    # credit1's tail (record.sh's amqp10-midstream cut): no attach, but the client's flows of
    # link-credit 1, the credit 0 after each of the 100 transfers and the refill gaps are all in it
    "amqp10-midstream.pcap": {"credit-starved"},
}
ALL_FIXTURES = sorted(p.name for p in FIX.iterdir()
                      if p.suffix in (".pcap", ".pcapng", ".gz") and p.name != "tls.pcap")  # tls: below


@pytest.mark.parametrize("name", one_fast(ALL_FIXTURES))
def test_warnings_are_exactly_the_recorded_situation(name):
    """No warning or critical finding fires whose mechanism the scenario did not set up, and
    each cause is told once (one finding per id, its connections as subjects)."""
    _, _, findings = findings_of(name)
    ids = [f.id for f in findings]
    assert len(ids) == len(set(ids)), ids
    loud = {f.id for f in findings if f.severity in ("warning", "critical")}
    assert loud == SITUATIONS.get(name, set()), [(f.id, f.severity, f.title) for f in findings]


def test_tls_capture_decrypted_raises_what_its_plaintext_twin_raises():
    cap = amqpcap.load(FIX / "tls.pcap", tls_keylog=FIX / "tls.keylog")
    loud = {f.id for r in (fn(cap) for fn, _ in analyzers().values()) for f in r.findings
            if f.severity in ("warning", "critical")}
    assert loud == SITUATIONS.get("tls-plaintext.pcap", set())


def test_a_findings_filter_names_a_bounded_number_of_streams_the_worst_first():
    """A finding over the 28,380 connections of a 10M-packet capture printed a filter of every
    stream number (7,900 lines of terminal): the filter names at most MAX_FILTER_STREAMS, the
    first given (subjects come worst first), in increasing order."""
    from amqpcap.model.display_filters import MAX_FILTER_STREAMS, stream_filter

    worst_first = list(range(5000, 0, -1))
    named = [int(x) for x in stream_filter(worst_first).removeprefix("tcp.stream in {").removesuffix("}").split(", ")]
    assert named == list(range(5000 - MAX_FILTER_STREAMS + 1, 5001))
    assert stream_filter([3, 3, 1]) == "tcp.stream in {1, 3}"
    assert stream_filter([7]) == "tcp.stream eq 7" and stream_filter([]) == ""
