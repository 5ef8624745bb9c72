"""AMQP 1.0 beside AMQP 0-9-1 on one port (fixtures/amqp10.pcap: RabbitMQ's rabbitmq_amqp1_0
plugin, a qpid-proton client that sends 20 messages and takes them back, and the pika workload
at the same time; record.sh stage 9). Expected values come from tshark's AMQP 1.0 dissector
(`amqp10_streams` of the facts file) and from the scenario.

The core chooses each direction's decoder by its protocol header, or by frame structure in a
capture cut after the connection started (`rust/src/proto/dispatch.rs`, `detect.rs`): the AMQP 1.0
connection is framed by AMQP 1.0's decoder, not resynchronised over as broken 0-9-1, and only the
amqp10 analyzer speaks of it (from the core's `amqp10_frames`).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import amqpcap
from amqpcap.engine.registered import run_all
from amqpcap.model.wording import AMQP10_READERS

from accounting import assert_byte_accounting

FIX = Path(__file__).resolve().parents[2] / "fixtures"
CAPTURE = FIX / "amqp10.pcap"


@pytest.fixture(scope="module")
def cap():
    return amqpcap.load(CAPTURE)


@pytest.fixture(scope="module")
def facts():
    return json.loads((FIX / "amqp10.pcap.tshark.json").read_text())


def test_the_amqp10_connection_has_tsharks_frames_and_nothing_skipped(cap, facts):
    amqp10 = facts["amqp10_streams"]
    assert list(amqp10) == ["1"], "the recording has one AMQP 1.0 connection"
    # the scenario: SASL PLAIN (mechanisms, init, outcome), 20 transfers each way
    assert amqp10["1"]["sasl"] == {"64": 1, "65": 1, "68": 1}
    assert amqp10["1"]["performatives"]["20"] == 40
    c = cap.connections.set_index("stream")
    for stream, f in amqp10.items():
        row = c.loc[int(stream)]
        assert row["protocol"] == "1.0"
        assert row["frames"] == f["frames"]
        assert row["protocol_header_seen"]
        for d in ("c2s", "s2c"):
            assert row[f"{d}_bytes_skipped"] == 0
            assert row[f"{d}_bytes_decoded"] == row[f"{d}_stream_bytes"] > 0
    assert len(cap.anomalies) == 0
    assert_byte_accounting(cap)


def test_the_0_9_1_connection_beside_it_is_decoded_as_tshark_decodes_it(cap, facts):
    c = cap.connections.set_index("stream")
    assert c.loc[0, "protocol"] == "0-9-1"
    assert c.loc[0, "connection_name"] == "amqpcap-workload"
    # AMQP 1.0 frames are no rows of the 0-9-1 frames table
    assert set(cap.frames["stream"]) == {0}
    methods = cap.frames[cap.frames["type"] == "method"].groupby(["class_id", "method_id"]).size()
    assert {f"{a}.{b}": int(n) for (a, b), n in methods.items()} == facts["streams"]["0"]


def test_only_the_amqp10_readers_speak_of_the_amqp10_connection_and_find_it_healthy(cap):
    """The analyzers outside AMQP10_READERS read no 1.0 frame; the amqp10 analyzer reads them (from
    the core's `amqp10_frames`) and finds the scenario's send/receive healthy: no warning, nothing
    unsettled; no analyzer warns of it."""
    for result in run_all(cap):
        for f in result.findings:
            if result.name in AMQP10_READERS:
                assert f.severity == "info", (f.id, f.title)
                continue
            assert 1 not in f.evidence.get("streams", []), (f.id, f.evidence)
            assert all(s.get("stream") != 1 for s in f.subjects), f.id
    [a10] = [r for r in run_all(cap) if r.name == "amqp10"]
    # the scenario: 20 messages sent (settled by the broker's dispositions), 20 received and accepted
    assert a10.summary["amqp10"]["deliveries"] == 40
    assert a10.summary["amqp10"]["unsettled_at_end"] == 0
    assert a10.findings == []


def test_the_0_9_1_readers_tables_list_the_0_9_1_connections_only(cap, facts):
    """A per-connection table of an analyzer that reads 0-9-1 methods only has no row for the 1.0
    connection: its counts there would say 0 messages of a connection that moved 40."""
    amqp10 = {int(s) for s in facts["amqp10_streams"]}
    results = {r.name: r for r in run_all(cap)}
    for name in ("clients", "heartbeats", "messages"):
        assert name not in AMQP10_READERS
        streams = set(results[name].tables["connections"]["stream"])
        assert streams == {0} and not streams & amqp10, (name, streams)
    assert results["clients"].summary["clients"]["connections"] == 1


def test_the_user_is_told_once_which_connection_is_not_analysed():
    r = subprocess.run([sys.executable, "-m", "amqpcap", "analyze", str(CAPTURE)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    said = [line for line in (r.stdout + r.stderr).splitlines() if "speaks AMQP 1.0" in line]
    assert len(said) == 1, said
    assert "(tcp.stream eq 1)" in said[0] and "read by the amqp10, nagle, sizes and stalls analyzers" in said[0]
    # no 0-9-1 decoding noise about it
    assert "resync" not in r.stderr and "protocol-header" not in r.stderr


@pytest.mark.parametrize("streams", [[0, 1], list(range(12))])
def test_the_warnings_filter_is_one_wireshark_accepts(streams):
    """tshark parses the warning's filter and opens those connections' packets (a filter of
    space-separated members, `{0 1}`, is a syntax error since Wireshark 4.0)."""
    import re

    from amqpcap.io.load import NAMED_STREAMS, protocol_warnings

    conns = pd.DataFrame({"stream": streams, "protocol": ["1.0"] * len(streams)})
    [said] = protocol_warnings(conns)
    flt = re.search(r"\((tcp\.stream [^)]*?)(, the first \d+)?\)", said)
    assert flt and (flt.group(2) is not None) == (len(streams) > NAMED_STREAMS), said
    r = subprocess.run(["tshark", "-r", str(CAPTURE), "-Y", flt.group(1), "-T", "fields", "-e", "tcp.stream"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert {int(x) for x in r.stdout.split()} == {0, 1}


def test_the_summary_counts_it_as_an_amqp10_connection(cap):
    from amqpcap.summary.overview import overview, story

    o = overview(cap, run_all(cap))
    assert o["connections"]["total"] == 2 and o["connections"]["amqp-1.0"] == 1
    assert "1 speaking AMQP 1.0" in story(o)


def test_a_capture_of_amqp10_only_says_what_was_analysed(tmp_path):
    """The AMQP 1.0 connection alone (tshark writes its packets to a file of their own): no
    0-9-1 frame, and the user is told once which analyzers read it (not "no frame was decoded")."""
    import shutil

    if shutil.which("tshark") is None:
        pytest.skip("tshark is installed by scripts/test.sh")
    alone = tmp_path / "amqp10-only.pcap"
    subprocess.run(["tshark", "-r", str(CAPTURE), "-Y", "tcp.stream == 1", "-F", "pcap", "-w", str(alone)], check=True,
                   capture_output=True)
    r = subprocess.run([sys.executable, "-m", "amqpcap", "analyze", str(alone)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    told = " ".join((r.stdout + r.stderr).split())  # (the console wraps lines)
    assert told.count("speaks AMQP 1.0") == 1, told
    assert ("1 connection speaks AMQP 1.0 (tcp.stream eq 0): its frames are read by the amqp10, nagle, sizes and "
            "stalls analyzers; the others read AMQP 0-9-1 only") in told
    assert ": 93 packets, 1 AMQP connection, 84 AMQP 1.0 frames over" in told
    assert "No AMQP frame was decoded" not in r.stdout
    c = amqpcap.load(alone).connections
    assert c["protocol"].tolist() == ["1.0"] and c["frames"].tolist() == [84]


def test_info_lists_it_as_amqp10():
    r = subprocess.run([sys.executable, "-m", "amqpcap", "info", str(CAPTURE)], capture_output=True, text=True,
                       timeout=120, env={**__import__("os").environ, "COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    row = next(line for line in r.stdout.splitlines() if "127.0.0.1:" in line and "│      1 │" in line)
    assert "(AMQP 1.0)" in row and "amqp-1.0" in row


def test_info_counts_each_protocols_frames_and_the_performatives_as_tshark_does(facts):
    """The summary's frame count is each protocol's, and the performatives table has tshark's
    counts of the 1.0 connection's performatives and SASL frames (by code: Part 2 §2.7, Part 5 §5.3.3)."""
    r = subprocess.run([sys.executable, "-m", "amqpcap", "info", str(CAPTURE)], capture_output=True, text=True,
                       timeout=120, env={**__import__("os").environ, "COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    a10 = facts["amqp10_streams"]["1"]
    n091 = sum(facts["frame_types"].values())  # (tshark's amqp.type of the 0-9-1 connection's frames)
    assert f"2 connections, {n091} AMQP 0-9-1 frames, {a10['frames']} AMQP 1.0 frames" in r.stdout
    names = {16: "open", 17: "begin", 18: "attach", 19: "flow", 20: "transfer", 21: "disposition", 22: "detach",
             23: "end", 24: "close", 64: "sasl-mechanisms", 65: "sasl-init", 66: "sasl-challenge",
             67: "sasl-response", 68: "sasl-outcome"}
    table = r.stdout.split("AMQP 1.0 performatives", 1)[1]
    shown = {m.group(1): int(m.group(2).replace(",", "")) for m in re.finditer(r"│ ([a-z-]+) +│ +([\d,]+) │", table)}
    assert shown == {names[int(code)]: n for code, n in {**a10["performatives"], **a10["sasl"]}.items()}


@pytest.mark.parametrize("name", ["amqp10-credit1", "amqp10-multiframe", "amqp10-outcomes", "amqp10-idle"])
def test_the_analyzers_said_to_read_amqp10_are_those_whose_results_it_changes(name):
    """AMQP10_READERS (what the user is told) against what each analyzer does: taking a capture's
    1.0 frames away changes no result of an analyzer outside it, and every reader's but stalls'
    (no recorded 1.0 connection has a silence; tests/analyzers/test_stalls.py's amqp10 tests
    show its causes read from 1.0 frames)."""
    import dataclasses

    cap = amqpcap.load(FIX / f"{name}.pcap")
    bare = dataclasses.replace(cap, amqp10_frames=cap.amqp10_frames.iloc[:0], derived={})

    def said(results):
        return {r.name: json.dumps([r.summary, [f.title for f in r.findings],
                                    {k: t.to_csv() for k, t in r.tables.items()}], default=str) for r in results}

    with_, without = said(run_all(cap)), said(run_all(bare))
    assert {n for n in with_ if with_[n] != without[n]} == set(AMQP10_READERS) - {"stalls"}
