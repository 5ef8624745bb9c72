"""A real tcpdump ring (fixtures/ring/: `tcpdump -C 2 -W 8` over a PerfTest run, recorded by
fixtures/record/record.sh, scenario ring) read as a set: the same tables and summary.json as
the file `mergecap` makes of it, also when the set mixes pcap, pcapng and gzip. Connections
cross the file boundaries (checked with tshark on each file)."""

from __future__ import annotations

import dataclasses
import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import amqpcap
from amqpcap.engine.registered import run_all
from amqpcap.io.inputs import capture_files
from amqpcap.summary.build import build_summary

RING = Path(__file__).resolve().parents[2] / "fixtures" / "ring"
TABLES = ("packets", "frames", "connections", "anomalies")
#: what summary.json says of the files themselves, which differ between a set and its merge
FILE_KEYS = ("path", "format", "compressed", "file_bytes", "files")

pytestmark = pytest.mark.skipif(not all(shutil.which(t) for t in ("editcap", "mergecap", "tshark")),
                                reason="needs Wireshark's editcap, mergecap and tshark (scripts/test.sh installs them)")


def run(*cmd) -> str:
    return subprocess.run([str(c) for c in cmd], check=True, capture_output=True, text=True).stdout


def ring_files() -> list[Path]:
    return [Path(p) for p in capture_files(RING)]


@pytest.fixture(scope="module")
def merged(tmp_path_factory) -> amqpcap.Capture:
    out = tmp_path_factory.mktemp("ring") / "merged.pcap"
    run("mergecap", "-F", "pcap", "-w", out, *ring_files())
    return amqpcap.load(out)


def summary_without_files(cap: amqpcap.Capture) -> dict:
    s = json.loads(json.dumps(build_summary(cap, run_all(cap)), default=str))
    for key in FILE_KEYS:
        s["capture"].pop(key)
    return s


def assert_same(a: amqpcap.Capture, b: amqpcap.Capture) -> None:
    for name in TABLES:
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), obj=name)
    own = ["source_file", "source_packet"]
    pd.testing.assert_frame_equal(a.records.drop(columns=own), b.records.drop(columns=own), obj="records")
    assert summary_without_files(a) == summary_without_files(b)


@pytest.mark.slow
def test_the_ring_is_several_files_with_connections_across_them():
    files = ring_files()
    assert [f.name for f in files] == [f"perftest-ring.pcap{i}" for i in range(len(files))]
    assert len(files) >= 3
    files_of_port: dict[str, int] = {}
    for f in files:
        ports = set(run("tshark", "-r", f, "-T", "fields", "-e", "tcp.srcport", "-e", "tcp.dstport").split())
        for port in ports - {"5672"}:
            files_of_port[port] = files_of_port.get(port, 0) + 1
    # PerfTest's configuration, producer and two consumer connections live through the run
    assert sum(n >= 3 for n in files_of_port.values()) >= 3, files_of_port


@pytest.mark.slow
def test_the_ring_read_as_a_set_is_the_merged_file(merged):
    ring = amqpcap.load(RING)
    assert_same(merged, ring)
    assert ring.summary["packets"] == merged.summary["packets"]
    assert not ring.warnings  # nothing missing, nothing skipped
    # every packet's file and number there, as tshark numbers the file alone
    for i, f in enumerate(ring_files()):
        numbers = run("tshark", "-r", f, "-T", "fields", "-e", "frame.number").split()
        mine = ring.records[ring.records["source_file"] == str(f)]["source_packet"]
        assert mine.tolist() == [int(n) for n in numbers], f


@pytest.mark.slow
def test_the_ring_ingested_bucket_by_bucket_is_the_merged_file(merged, tmp_path):
    """`amqpcap ingest RING` reading the set once, spilling it into five buckets and decoding
    each alone: the dataset holds the merged file's capture."""
    r = subprocess.run([sys.executable, "-m", "amqpcap", "ingest", str(RING), "--out", str(tmp_path / "ds"),
                        "--buckets", "5"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr.strip().endswith("in 5 buckets"), r.stderr
    stored = amqpcap.load(tmp_path / "ds")
    # the anomalies' row order is not kept (docs/dataset.md)
    canonical = lambda c: dataclasses.replace(c, anomalies=c.anomalies.sort_values(  # noqa: E731
        ["packet", "stream"], kind="stable", na_position="first", ignore_index=True))
    assert_same(canonical(merged), canonical(stored))


@pytest.mark.slow
def test_a_ring_of_pcap_pcapng_and_gzip_is_the_same_capture(merged, tmp_path):
    files = ring_files()
    mixed = []
    for i, f in enumerate(files):
        if i % 3 == 0:
            out = tmp_path / f"{f.name}.pcapng"
            run("editcap", "-F", "pcapng", f, out)
        elif i % 3 == 1:
            out = tmp_path / f"{f.name}.gz"
            out.write_bytes(gzip.compress(f.read_bytes()))
        else:
            out = tmp_path / f.name
            shutil.copy(f, out)
        mixed.append(out)
    cap = amqpcap.load(mixed)
    assert cap.summary["format"] == "mixed"
    assert_same(merged, cap)


def test_a_ring_missing_a_middle_file_says_so(tmp_path):
    files = ring_files()
    for f in files[:1] + files[2:]:
        shutil.copy(f, tmp_path / f.name)
    cap = amqpcap.load(tmp_path)
    assert any(f"file number 1 of 0-{len(files) - 1} is missing" in w for w in cap.warnings), cap.warnings
    # the connections that crossed the hole miss bytes there: capture gaps on them
    gaps = cap.anomalies[cap.anomalies["kind"] == "capture-gap"]
    assert gaps["stream"].nunique() >= 3
