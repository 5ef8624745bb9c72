"""`amqpcap analyze CAPTURE` of a large capture goes through a temporary dataset on a local Dask
cluster (issue 13) and gives what the in-memory run gives: summary.json, every table, the plots
and report.html. The capture's own tables are written from the dataset bucket by bucket
(`amqpcap.io.stored_tables`) in `load()`'s row order."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import amqpcap
from amqpcap.io import dataset
from amqpcap.io import inputs
from amqpcap.io import stored_tables
from amqpcap.report.outputs import bodies_for_csv
from amqpcap.io.table_files import write_table
from tiers import large_slow

FIX = Path(__file__).resolve().parents[2] / "fixtures"
AMQPCAP = [sys.executable, "-m", "amqpcap"]


def outputs(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file()}


@pytest.mark.slow
def test_a_capture_through_a_temporary_dataset_is_the_in_memory_run(tmp_path):
    """`--scheduler local` on a capture file: what a capture over the in-memory size gets."""
    cap = FIX / "flow-control.pcap.gz"
    memory = subprocess.run([*AMQPCAP, "analyze", str(cap), "--bodies", "--out", str(tmp_path / "memory")],
                            capture_output=True, text=True)
    assert memory.returncode == 0, memory.stderr
    dask = subprocess.run([*AMQPCAP, "analyze", str(cap), "--bodies", "--scheduler", "local", "--workers", "2",
                           "--out", str(tmp_path / "dask")], capture_output=True, text=True)
    assert dask.returncode == 0, dask.stderr
    assert "temporary dataset" in dask.stderr and "Traceback" not in dask.stderr
    assert dask.stdout == memory.stdout
    got, want = outputs(tmp_path / "dask"), outputs(tmp_path / "memory")
    assert {"summary.json", "report.html", "frames.csv", "bodies.csv", "records.csv"} <= set(want)
    assert any(k.endswith(".png") for k in want)
    assert got.keys() == want.keys()
    for k in want:
        assert got[k] == want[k], k
    # the temporary dataset is gone
    assert "temporary dataset in " in dask.stderr
    tmp = dask.stderr.split("temporary dataset in ", 1)[1].split(",", 1)[0]
    assert not Path(tmp).exists()


@pytest.mark.slow
def test_a_capture_over_the_in_memory_size_goes_through_a_dataset(tmp_path, monkeypatch):
    from amqpcap.cli import app

    monkeypatch.setattr(inputs, "IN_MEMORY_MAX_BYTES", 1000)
    runner = CliRunner()
    auto = runner.invoke(app, ["analyze", str(FIX / "healthy.pcap"), "--workers", "1"])
    assert auto.exit_code == 0, auto.output
    assert "larger than" in auto.output and "temporary dataset" in auto.output
    here = runner.invoke(app, ["analyze", str(FIX / "healthy.pcap"), "--in-memory"])
    assert here.exit_code == 0 and "temporary dataset" not in here.output
    # the findings printed are the same
    assert here.stdout.strip().splitlines()[-3:] == auto.stdout.strip().splitlines()[-3:]
    # a dataset of a capture over the size is analysed on a local cluster too
    root = dataset.write(amqpcap.load(FIX / "healthy.pcap"), tmp_path / "ds", buckets=2)
    stored = runner.invoke(app, ["analyze", str(root), "--workers", "1"])
    assert stored.exit_code == 0, stored.output
    assert "Dask dashboard" in stored.output and "temporary dataset" not in stored.output
    assert stored.stdout.strip().splitlines()[-3:] == here.stdout.strip().splitlines()[-3:]
    whole = runner.invoke(app, ["analyze", str(root), "--in-memory"])
    assert whole.exit_code == 0 and "Dask dashboard" not in whole.output


def test_a_gzip_capture_weighs_its_likely_decompressed_size(tmp_path):
    plain = FIX / "healthy.pcap"
    gz = tmp_path / "healthy.pcap.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    assert inputs.capture_bytes(plain) == plain.stat().st_size
    assert inputs.capture_bytes(gz) == gz.stat().st_size * inputs.GZIP_RATIO
    assert inputs.capture_bytes([plain, gz]) == plain.stat().st_size + gz.stat().st_size * inputs.GZIP_RATIO


@pytest.mark.parametrize("name", large_slow(["flow-control.pcap.gz", "huge-messages.pcap.gz", "amqp10.pcap", "any-sll.pcap",
                                             "kernel-drops.pcap"]))
@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_stored_tables_are_written_as_the_tables_read_whole(name, fmt, tmp_path, monkeypatch):
    """Small batches, so that buckets' rows interleave across many rounds of the merge."""
    monkeypatch.setattr(stored_tables, "BATCH_ROWS", 500)
    root = dataset.write(amqpcap.load(FIX / name, bodies=True), tmp_path / "ds", buckets=5)
    whole = dataset.read(root)
    tables = stored_tables.stored_tables(str(root), ("frames", "packets", "records", "bodies"))
    assert set(tables) == {"frames", "packets", "records", "bodies"}
    for table, stored in tables.items():
        df = getattr(whole, table)
        assert stored.rows == len(df)
        want = write_table(bodies_for_csv(df) if table == "bodies" and fmt == "csv" else df, tmp_path / f"want-{table}", fmt)
        got = stored.write(tmp_path / f"got-{table}", fmt)
        if fmt == "csv":
            assert got.read_bytes() == want.read_bytes(), table
        else:  # the same rows and values (Arrow types may differ: int32 in the dataset, int64 in pandas)
            assert pq.read_table(got).to_pylist() == pq.read_table(want).to_pylist(), table
