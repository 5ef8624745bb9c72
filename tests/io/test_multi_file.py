"""Several capture files read as one capture, checked against Wireshark's own tools: `editcap`
cuts a real fixture into files, `mergecap` merges files into the reference capture, tshark
numbers the packets of each file. The set must decode exactly like the one file."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import amqpcap
from amqpcap.model.errors import CaptureError
from amqpcap.io.inputs import capture_files, missing_ring_files

FIX = Path(__file__).resolve().parents[2] / "fixtures"
SOURCE = FIX / "prefetch-consumers.pcap"  # 5 connections of PerfTest, 1,762 packets
TABLES = ("packets", "frames", "connections", "anomalies")

pytestmark = pytest.mark.skipif(not all(shutil.which(t) for t in ("editcap", "mergecap", "tshark")),
                                reason="needs Wireshark's editcap, mergecap and tshark (scripts/test.sh installs them)")


def run(*cmd) -> str:
    return subprocess.run([str(c) for c in cmd], check=True, capture_output=True, text=True).stdout


def assert_same_capture(a: amqpcap.Capture, b: amqpcap.Capture) -> None:
    for name in TABLES:
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), obj=name)
    own = ["source_file", "source_packet"]
    pd.testing.assert_frame_equal(a.records.drop(columns=own), b.records.drop(columns=own), obj="records")


#: what summary.json says of the files themselves, which differ between a set and its merge
FILE_KEYS = ("path", "format", "file_bytes", "files")


def summary_without_files(cap: amqpcap.Capture) -> str:
    from amqpcap.engine.registered import run_all
    from amqpcap.summary.build import build_summary

    s = build_summary(cap, run_all(cap))
    for key in FILE_KEYS:
        s["capture"].pop(key)
    return json.dumps(s, indent=1, ensure_ascii=False)


@pytest.fixture(scope="module")
def cut(tmp_path_factory) -> list[Path]:
    """The fixture cut by editcap into files of 400 packets, in order."""
    d = tmp_path_factory.mktemp("cut")
    run("editcap", "-F", "pcap", "-c", "400", SOURCE, d / "part.pcap")
    return sorted(d.iterdir())


@pytest.fixture(scope="module")
def interleaved(tmp_path_factory) -> tuple[list[Path], Path]:
    """Two files whose packets interleave in time (the fixture's connections split by
    tcp.stream, as two capture points would see them), and mergecap's merge of them."""
    d = tmp_path_factory.mktemp("interleaved")
    a, b, merged = d / "a.pcap", d / "b.pcap", d / "merged.pcap"
    run("tshark", "-r", SOURCE, "-Y", "tcp.stream in {0, 2, 4}", "-w", a, "-F", "pcap")
    run("tshark", "-r", SOURCE, "-Y", "not tcp.stream in {0, 2, 4}", "-w", b, "-F", "pcap")
    run("mergecap", "-F", "pcap", "-w", merged, a, b)
    return [a, b], merged


def test_a_cut_capture_decodes_like_the_whole(cut):
    assert len(cut) == 5
    whole, parts = amqpcap.load(SOURCE), amqpcap.load(cut)
    assert_same_capture(whole, parts)
    assert parts.summary["packets"] == whole.summary["packets"]
    assert [f["name"] for f in parts.summary["files"]] == [str(p) for p in cut]
    assert summary_without_files(parts) == summary_without_files(whole)


def test_each_packet_names_its_file_and_number_there_as_tshark_does(cut):
    cap = amqpcap.load(cut)
    r = cap.records
    for i, part in enumerate(cut):
        # tshark, reading the file alone: its frame numbers and timestamps
        rows = [line.split("\t") for line in run("tshark", "-r", part, "-T", "fields", "-e", "frame.number",
                                                  "-e", "frame.time_epoch").split("\n") if line]
        mine = r[r["source_file"] == str(part)]
        assert mine["source_packet"].tolist() == [int(n) for n, _ in rows]
        ns = mine["ts"].astype("int64").to_numpy()
        assert np.array_equal(ns // 1000, [int(t.replace(".", "")[:-3]) for _, t in rows])


@pytest.mark.slow
def test_interleaved_files_merge_as_mergecap_merges_them(interleaved):
    files, merged = interleaved
    a, b = amqpcap.load(files), amqpcap.load(merged)
    assert_same_capture(b, a)
    assert summary_without_files(a) == summary_without_files(b)
    assert a.summary["packets"] == 1762
    # packets of both files alternate somewhere: the merge was not a concatenation
    assert (np.diff(a.records["source_file"].cat.codes.to_numpy()) != 0).sum() > 10


def test_a_set_mixing_pcap_pcapng_and_gzip_is_the_same_capture(interleaved, tmp_path):
    (a, b), merged = interleaved
    ng = tmp_path / "a.pcapng"
    run("editcap", "-F", "pcapng", a, ng)
    gz = tmp_path / "b.pcap.gz"
    gz.write_bytes(gzip.compress(b.read_bytes()))
    mixed = amqpcap.load([ng, gz])
    assert_same_capture(amqpcap.load(merged), mixed)
    assert mixed.summary["format"] == "mixed"
    assert [f["format"] for f in mixed.summary["files"]] == ["pcapng", "pcap"]
    assert [f["compressed"] for f in mixed.summary["files"]] == [False, True]


def test_a_directory_and_a_glob_are_read_in_ring_order(tmp_path, cut):
    # tcpdump -C without -W: ring.pcap, ring.pcap1, ... ring.pcap10 (numbers not padded)
    names = ["ring.pcap", *[f"ring.pcap{i}" for i in range(1, 12)]]
    for n in names:
        (tmp_path / n).write_bytes(cut[0].read_bytes())
    (tmp_path / "notes.txt").write_text("not a capture")
    expected = [str(tmp_path / n) for n in names]
    assert capture_files(tmp_path) == expected
    assert capture_files(str(tmp_path / "ring.pcap*")) == expected
    with pytest.raises(CaptureError, match="no file matches"):
        capture_files(str(tmp_path / "nothing*"))


def test_a_missing_ring_file_is_named(tmp_path, cut):
    ring = [tmp_path / f"ring.pcap{i}" for i in range(5)]
    for p, part in zip(ring, cut):
        p.write_bytes(part.read_bytes())
    ring[2].unlink()
    files = capture_files(tmp_path)
    assert missing_ring_files(files) == [
        "ring ring.pcapN: file number 2 of 0-4 is missing; connections that crossed it have a capture gap there"]
    cap = amqpcap.load(tmp_path)
    assert any("file number 2 of 0-4 is missing" in w for w in cap.warnings)
    # and TCP shows the hole: bytes the peers acknowledged are missing from the capture
    assert (cap.anomalies["kind"] == "capture-gap").any()
    assert missing_ring_files([str(p) for p in (ring[0], ring[1], ring[3])]) != []
    assert missing_ring_files([str(p) for p in ring]) == []


def tshark_epochs_ns(path: Path) -> list[int]:
    """Each packet's time in the file, as tshark prints it (9 decimals), in nanoseconds."""
    return [int(t.replace(".", "")) for t in run("tshark", "-r", path, "-T", "fields", "-e", "frame.time_epoch").split()]


def test_a_missing_ring_file_is_the_cause_of_its_gaps_not_the_kernel(tmp_path, cut):
    """A tcpdump ring of the fixture's editcap split with its middle file removed: capture-gaps
    blames the missing file (its name, where it was, the bytes it held) and not the capture
    tool's kernel buffer; what the file held is read from the file itself, by tshark."""
    from amqpcap.engine.registered import run_all

    ring = [tmp_path / f"ring.pcap{i}" for i in range(5)]
    for p, part in zip(ring, cut):
        p.write_bytes(part.read_bytes())
    # what the middle file holds: every sender direction's TCP payload (none retransmitted)
    held = [line.split("\t") for line in run("tshark", "-r", ring[2], "-Y", "tcp.len > 0", "-T", "fields",
                                               "-e", "tcp.srcport", "-e", "tcp.dstport", "-e", "tcp.len",
                                               "-e", "tcp.analysis.retransmission").splitlines()]
    assert held and not any(r[3] for r in held)
    lost_bytes, directions = sum(int(r[2]) for r in held), {(r[0], r[1]) for r in held}
    ring[2].unlink()
    cap = amqpcap.load(tmp_path)
    f = next(x for r in run_all(cap) for x in r.findings if x.id == "capture-gaps")
    assert f.evidence["by_cause"]["missing-file"]["bytes_missing"] == lost_bytes == f.evidence["bytes_missing"]
    # each direction that sent data inside the file has one hole (they all go on after it)
    assert f.evidence["by_cause"]["missing-file"]["gaps"] == len(directions)
    assert list(f.evidence["by_cause"]) == ["missing-file"]
    (hole,) = f.evidence["missing_files"]
    assert (hole["files"], hole["after"], hole["before"]) == (["ring.pcap2"], "ring.pcap1", "ring.pcap3")
    assert pd.Timestamp(hole["from_ts"]).value == tshark_epochs_ns(ring[1])[-1]
    assert pd.Timestamp(hole["to_ts"]).value == tshark_epochs_ns(ring[3])[0]
    assert "ring.pcap2" in f.title and "ring.pcap2" in f.advice
    assert "-B" not in f.advice and "kernel buffer" not in f.advice
    assert f.severity == "warning"  # worth saying; no capture tool to fix


def test_a_capture_cut_at_both_ends_has_no_gap(tmp_path):
    """Connections open before the capture began and after it ended lose no bytes to it: a
    direction's bytes count from its first packet, and the peer's ACKs of bytes sent before it
    are old ones (editcap keeps the fixture's packets 500-1200, inside all its connections)."""
    mid = tmp_path / "mid.pcap"
    run("editcap", "-r", SOURCE, mid, "500-1200")
    cap = amqpcap.load(mid)
    # every connection was open before the capture's first packet and after its last
    assert run("tshark", "-r", mid, "-Y", "tcp.flags.syn == 1 || tcp.flags.fin == 1 || tcp.flags.reset == 1") == ""
    assert not (cap.anomalies["kind"] == "capture-gap").any()


def test_an_unreadable_file_of_a_set_is_skipped_with_a_warning_or_stops_strict(cut, tmp_path):
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"\xd4\xc3\xb2\xa1 not a real header")
    cap = amqpcap.load([cut[0], bad, cut[1]])
    assert cap.summary["packets"] == 800
    skipped = [w for w in cap.warnings if str(bad) in w]
    assert len(skipped) == 1 and skipped[0].endswith("the file is skipped (--strict stops instead)")
    assert [f["error"] is not None for f in cap.summary["files"]] == [False, True, False]
    with pytest.raises(CaptureError, match="bad.pcap"):
        amqpcap.load([cut[0], bad, cut[1]], strict=True)
    with pytest.raises(CaptureError, match="none of the 2 files can be read"):
        amqpcap.load([bad, tmp_path / "absent.pcap"])


@pytest.mark.slow
def test_the_cli_reads_a_set_as_one_capture(cut, tmp_path):
    import sys

    one = subprocess.run([sys.executable, "-m", "amqpcap", "info", str(SOURCE)], capture_output=True, text=True)
    many = subprocess.run([sys.executable, "-m", "amqpcap", "info", *map(str, cut)], capture_output=True, text=True)
    assert many.returncode == 0, many.stderr
    assert "5 read as one capture, merged by time" in many.stdout
    line = [x for x in one.stdout.splitlines() if x.startswith("packets")]
    assert line and line[0] in many.stdout


@pytest.mark.slow
def test_the_report_says_the_capture_is_a_set(cut, tmp_path):
    import sys

    r = subprocess.run([sys.executable, "-m", "amqpcap", "analyze", *map(str, cut), "--out", str(tmp_path / "out")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [f["name"] for f in summary["capture"]["files"]] == [str(p) for p in cut]
    assert [f["packets"] for f in summary["capture"]["files"]] == [400, 400, 400, 400, 162]
    assert f"read from 5 files merged by time ({cut[0].name} … {cut[-1].name})" in (
        tmp_path / "out" / "report.html").read_text()


def test_ring_holes_are_told_only_for_a_ring_sequence():
    ring = [f"/c/ring.pcap{i}" for i in (0, 1, 3, 4)]
    assert len(missing_ring_files(ring)) == 1
    # converted or compressed files keep their place in the ring: no hole
    assert missing_ring_files(["/c/r.pcap0.pcapng", "/c/r.pcap1.gz", "/c/r.pcap2", "/c/r.pcap3.pcapng.gz"]) == []
    # tcpdump -G names (strftime): sparse numbers, not a sequence with holes
    assert missing_ring_files([f"/c/cap-20261123-{t}.pcap" for t in ("2350", "2355", "2400", "2405")]) == []
    # tcpdump -C without -W: the first file has no number
    assert missing_ring_files(["/c/ring.pcap", "/c/ring.pcap1", "/c/ring.pcap2"]) == []


def test_more_files_than_the_cap_is_one_error(tmp_path):
    from amqpcap import _core

    names = [str(tmp_path / f"ring.pcap{i}") for i in range(_core.MAX_FILES + 1)]
    with pytest.raises(CaptureError, match=f"{_core.MAX_FILES + 1} files given; at most {_core.MAX_FILES}"):
        amqpcap.load(names)
