"""A finding over more connections than its Wireshark filter may name says what the filter covers
("first 100 of N connections") in its evidence, the console and the report, and lists every
connection in a file beside the report. The capture is crafted here: CHURNED short connections of
one application, each opened and closed (connection.open .. connection.close-ok), so that
connection-churn is told about all of them; N is counted by tshark."""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
import crafting as c  # noqa: E402

pytestmark = pytest.mark.skipif(not shutil.which("tshark"), reason="needs tshark (scripts/test.sh installs it)")

#: connections crafted: more than MAX_FILTER_STREAMS (100), as a production capture has
CHURNED = 150


def run(*cmd, env=None) -> str:
    return subprocess.run([str(x) for x in cmd], check=True, capture_output=True, text=True, env=env).stdout


@pytest.fixture(scope="module")
def churn(tmp_path_factory) -> Path:
    """CHURNED connections from one client (pika), one after the other, each living 20 ms with
    one publish, the way an application opening a connection per message does."""
    packets = []
    for i in range(CHURNED):
        conv = c.TcpConversation(client=("10.0.0.1", 40000 + i), isn_c=1_000_000 + i, isn_s=3_000_000_000 + i)
        conv.handshake()
        conv.exchange(c.opening())
        conv.send_frames("c2s", [c.basic_publish(), *c.content(body=b"x")])
        conv.exchange([("c2s", c.connection_close()), ("s2c", c.connection_close_ok())])
        conv.close()
        packets += conv.timed(c.T0_NS + i * 50_000_000, 1_000_000)
    return c.write_pcap(tmp_path_factory.mktemp("churn") / "churn-150.pcap", packets)


def tshark_streams(path: Path) -> list[int]:
    """The TCP connections of the capture as tshark numbers them
    (`tshark -r X -T fields -e tcp.stream | sort -u`)."""
    return sorted({int(s) for s in run("tshark", "-r", path, "-T", "fields", "-e", "tcp.stream").split()})


def test_a_filter_that_cannot_name_every_connection_says_so(churn, tmp_path):
    streams = tshark_streams(churn)
    n = len(streams)
    assert n == CHURNED
    env = {**os.environ, "COLUMNS": "200"}
    out = tmp_path / "out"
    console = run(sys.executable, "-m", "amqpcap", "analyze", churn, "--out", out, env=env)
    import json

    summary = json.loads((out / "summary.json").read_text())
    (f,) = [x for x in summary["findings"] if x["id"] == "connection-churn"]
    ev = f["evidence"]
    note = f"first 100 of {n:,} connections"
    assert ev["filter_covers"] == note
    assert (ev["filter_streams"], ev["streams_total"]) == (100, n)
    # the filter names 100 streams; the evidence lists every one
    named = [int(x) for x in re.search(r"tcp\.stream in \{([^}]*)\}", ev["filter"]).group(1).split(", ")]
    assert len(named) == 100 and set(named) <= set(streams)
    assert ev["streams"] == streams
    # the console and the report's card say it; the file beside the report lists every connection
    assert f"filter: {note}" in re.sub(r"[│\s]+", " ", console)
    report = (out / "report.html").read_text()
    assert f"filter: {note}" in report and 'href="findings-connection-churn-streams.csv"' in report
    with open(out / "findings-connection-churn-streams.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["stream"]) for r in rows] == streams
    assert all(r["connection"] for r in rows)


def test_a_filter_naming_every_connection_says_nothing_more():
    """A filter that names every connection adds no key (what analyze writes is unchanged); one
    more connection than fits is told."""
    from amqpcap.model.display_filters import covered_filter, streams_part

    assert covered_filter("x", streams_part(range(40))) == {"filter": "x"}
    ev = covered_filter("x", streams_part(range(101)))
    assert ev["filter_covers"] == "first 100 of 101 connections"


def test_the_coverage_keys_are_documented():
    from amqpcap.model.display_filters import COVERED

    doc = (ROOT / "docs" / "findings.md").read_text()
    keys = ["filter_covers"] + [k for stem, _ in COVERED.values() for k in (f"filter_{stem}", f"{stem}_total")]
    assert [k for k in keys if f"`{k}`" not in doc] == []
    assert "findings-<id>-streams.csv" in doc
