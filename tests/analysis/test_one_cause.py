"""A verdict only for a problem, and one finding per cause (amqpcap/analysis/consequences.py,
docs/findings.md): info notes are never the verdict; a finding whose mechanism is another
finding's consequence on the same connection is folded into that one, on real captures whose
scenario says what the cause is (fixtures/README.md, fixtures/record/record.sh)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import amqpcap
from amqpcap.analysis.registry import AnalyzerResult, Finding
from amqpcap.engine.registered import run_all
from amqpcap.analysis.consequences import settled
from amqpcap.summary.overview import overview

FIX = Path(__file__).resolve().parents[2] / "fixtures"


def _analyze(name: str, out: Path) -> tuple[dict, str, str]:
    r = subprocess.run([sys.executable, "-m", "amqpcap", "analyze", str(FIX / name), "--out", str(out)],
                       capture_output=True, text=True, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    return json.loads((out / "summary.json").read_text()), (out / "report.html").read_text(), r.stdout


@pytest.mark.slow
def test_a_capture_with_only_an_info_note_gets_no_problem_found(tmp_path):
    """prefetch-consumers.pcap: PerfTest at 150 msg/s with three prefetch-20 consumers keeping up
    (fixtures/README.md); its 1 s heartbeat is below the 5 s RabbitMQ advises, an info note."""
    summary, page, stdout = _analyze("prefetch-consumers.pcap", tmp_path)
    severities = [f["severity"] for f in summary["findings"]]
    assert severities and set(severities) == {"info"}  # the note is there...
    v = summary["overview"]["verdict"]
    assert (v["severity"], v["finding"], v["problems"], v["notes"]) == (None, None, 0, len(severities))
    assert v["text"].startswith("no problem found: 5 connections")  # ... but it is not the verdict
    assert '<div class="verdict ok"><span class="sev">ok</span> no problem found' in page
    assert "<h2>Findings (0)</h2>" in page and f"<h2>Notes ({len(severities)})</h2>" in page
    assert stdout.index("No problem found") < stdout.index("Notes")


@pytest.mark.slow
def test_the_nagle_capture_has_one_finding_for_its_44_ms(tmp_path):
    """nagle-write-write-read.pcap: a raw client writes method, header and body separately with
    Nagle on and waits for each confirm; tshark shows the broker's delayed ACK ~40 ms after each
    first write, and the confirm after it (fixtures/README.md). One cause: nagle-delayed-ack,
    which explains the publish-and-wait the same wait would otherwise raise."""
    summary, page, stdout = _analyze("nagle-write-write-read.pcap", tmp_path)
    problems = [f for f in summary["findings"] if f["severity"] != "info"]
    assert [f["id"] for f in problems] == ["nagle-delayed-ack"]
    (explained,) = problems[0]["evidence"]["explains"]
    assert explained["finding"] == "publish-and-wait" and explained["streams"] == [0]
    assert "publish-and-wait" not in [f["id"] for f in summary["findings"]]
    assert "Also explains" in page and "Also explains publish-and-wait" in stdout


def _finding(id_, severity, *subjects):
    return Finding(id_, severity, f"{id_} title", {"streams": [s["stream"] for s in subjects]}, "advice",
                   subjects=list(subjects))


def _settled(*findings):
    return settled([AnalyzerResult("x", findings=list(findings))])


def test_small_packets_of_one_message_per_segment_fold_into_transactions_on_the_same_connection():
    tx = _finding("transactions", "warning", {"stream": 3})
    small = _finding("small-packets", "warning", {"stream": 3, "direction": "c2s", "carries": "message"},
                     {"stream": 7, "direction": "c2s", "carries": "message"})
    out = _settled(small, tx)
    left = next(f for f in out if f.id == "small-packets")
    assert [s["stream"] for s in left.subjects] == [7]  # another connection: still its own problem
    assert left.evidence["explained_in_part"] == [{"by": "transactions", "streams": [3]}]
    (e,) = next(f for f in out if f.id == "transactions").evidence["explains"]
    assert (e["finding"], e["streams"], e["title"]) == ("small-packets", [3], None)


def test_a_consequence_is_folded_only_where_the_causes_mechanism_made_it():
    """Acks one per segment fold into prefetch-one, not into transactions; frames split over
    segments are a consumer's own writes, not prefetch 1's."""
    tx = _finding("transactions", "warning", {"stream": 3})
    split = _finding("small-packets", "info", {"stream": 3, "direction": "c2s", "carries": "split"})
    assert [f.id for f in _settled(split, _finding("prefetch-one", "info", {"stream": 3}))] == [
        "prefetch-one", "small-packets"]
    acks = _finding("small-packets", "info", {"stream": 3, "direction": "c2s", "carries": "ack"})
    assert [f.id for f in _settled(acks, tx)] == ["transactions", "small-packets"]
    one = _finding("prefetch-one", "info", {"stream": 3, "channel": 1})
    assert [f.id for f in _settled(acks, one)] == ["prefetch-one"]
    wait = _finding("publish-and-wait", "warning", {"stream": 0, "confirm_latency_p50_s": 0.044})
    short = _finding("nagle-delayed-ack", "critical", {"stream": 0, "direction": "c2s", "median_stall_s": 0.005})
    assert [f.id for f in _settled(wait, short)] == ["nagle-delayed-ack", "publish-and-wait"]


def test_settling_leaves_the_analyzers_results_as_they_were():
    cap = amqpcap.load(FIX / "nagle-write-write-read.pcap")
    results = run_all(cap)
    before = [(f.id, len(f.subjects), sorted(f.evidence)) for r in results for f in r.findings]
    settled(results)
    overview(cap, results)
    assert [(f.id, len(f.subjects), sorted(f.evidence)) for r in results for f in r.findings] == before


@pytest.mark.slow
@pytest.mark.parametrize("name, cause", [("transactions-busy.pcap", "transactions"),
                                         ("unroutable-busy.pcap", "unroutable-messages")])
def test_small_packets_of_a_message_at_a_time_are_evidence_of_the_pattern(tmp_path, name, cause):
    """fixtures/record/record.sh stage 10: pika, 2,000 transactions of one publish each / 2,020
    mandatory publishes of which 2,000 come back NO_ROUTE, as fast as the client goes."""
    summary, page, _ = _analyze(name, tmp_path)
    assert [f["id"] for f in summary["findings"]] == [cause]
    (explained,) = summary["findings"][0]["evidence"]["explains"]
    assert explained["finding"] == "small-packets" and explained["streams"] == [0]


@pytest.mark.slow
def test_the_healthy_heartbeat_capture_has_no_problem(tmp_path):
    """fixtures/record/record.sh stage 10: a pika publisher and consumer at 50 msg/s, prefetch 50,
    a multiple ack every 10, heartbeat 2 s: nothing wrong but the short heartbeat (a note)."""
    summary, page, stdout = _analyze("healthy-heartbeat.pcap", tmp_path)
    v = summary["overview"]["verdict"]
    assert (v["severity"], v["problems"], v["notes"]) == (None, 0, 1)
    assert v["text"].startswith("no problem found: 2 connections")
    assert '<div class="verdict ok">' in page
