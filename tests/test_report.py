"""Writing the outputs: timestamps as ISO 8601 text, and tables and plots shared between forked
writer processes with the same bytes as when one process writes them all."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import amqpcap
import amqpcap.report as report
from amqpcap.analysis import run_all

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures"


def numpy_iso(arr: np.ndarray) -> np.ndarray:
    """The reference: numpy's own formatter, one value at a time."""
    text = np.char.add(np.datetime_as_string(arr, unit="ns"), "Z").astype(object)
    text[np.isnat(arr)] = ""
    return text


def test_iso_timestamps_equal_numpys_formatter():
    rng = np.random.default_rng(7)
    spread = rng.integers(-(2**62), 2**62, 20_000, dtype=np.int64)
    near_now = np.int64(1_763_000_000_000_000_000) + rng.integers(0, 10**14, 20_000)
    values = np.concatenate([spread, near_now]).view("datetime64[ns]")
    values[::37] = np.datetime64("NaT")
    edges = np.array(["1677-09-22T00:12:43.145224193", "1969-12-31T23:59:59.999999999", "1970-01-01",
                      "2000-02-29T12:00:00.5", "2262-04-11T23:47:16.854775807", "NaT"], dtype="datetime64[ns]")
    for arr in (values, edges, values[:0]):
        assert list(report.iso_utc_ns(arr)) == list(numpy_iso(arr))


def test_balance_puts_every_job_in_one_group_largest_first():
    costs = [5, 1, 9, 3, 3, 7]
    groups = report._balance(costs, 2)
    assert sorted(i for g in groups for i in g) == list(range(len(costs)))
    assert max(sum(costs[i] for i in g) for g in groups) <= 15  # optimum 14; LPT is within 4/3 of it
    assert report._balance([4, 8, 4], 2) == [[1], [0, 2]]
    assert report._balance([4], 3) == [[0]]


def written_bytes(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


@pytest.mark.skipif("fork" not in __import__("multiprocessing").get_all_start_methods(), reason="needs fork")
def test_fresh_jobs_go_where_the_load_is_lightest_and_the_others_stay_here():
    def job(cost, fresh):
        return report._Job(cost, lambda: None, fresh=fresh)

    # here: 10 of jobs that cannot leave; fresh 100, 60, 50, 5 over this process and one spawned
    jobs = [job(10, False), job(100, True), job(60, True), job(5, True), job(50, True)]
    groups = report._share_fresh(jobs, [1, 2, 3, 4], 2)
    # largest first into the lighter: 100 away (0), 60 here (10), 50 here (70 < 100), 5 away
    assert groups == [[2, 4], [1, 3]]
    assert sorted(i for g in groups for i in g) == [1, 2, 3, 4]


def test_forked_writers_write_the_same_files_as_one_process(tmp_path, monkeypatch):
    assert report.can_fork(), "a thread left running by an earlier test: the writers would not fork"
    cap = amqpcap.load(FIX / "prefetch-consumers.pcap", bodies=True)
    results = run_all(cap)
    serial = report.write_results(results, tmp_path / "serial", plots=True, bodies=cap.bodies, workers=1)
    monkeypatch.setattr(report, "PARALLEL_MIN_CELLS", 0)  # this capture is small: fork anyway
    forked = report.write_results(results, tmp_path / "forked", plots=True, bodies=cap.bodies, workers=3)
    assert [p.name for p in forked] == [p.name for p in serial]
    assert all(p.parent == tmp_path / "forked" for p in forked)
    assert any(p.suffix == ".png" for p in serial) and serial[-1].name == "bodies.csv"
    assert written_bytes(tmp_path / "forked") == written_bytes(tmp_path / "serial")


def _told(calls: list[tuple], written: list[Path]) -> None:
    """`write_results`' progress: each written file told once, counted 1..N of N."""
    assert sorted(name for name, _, _ in calls) == sorted(p.name for p in written)
    assert [done for _, done, _ in calls] == list(range(1, len(written) + 1))
    assert {total for _, _, total in calls} == {len(written)}


@pytest.mark.parametrize("workers", [1, 3])
def test_each_file_written_is_told_as_it_is_here_or_in_a_forked_writer(workers, tmp_path, monkeypatch):
    assert report.can_fork()
    cap = amqpcap.load(FIX / "prefetch-consumers.pcap", bodies=True)
    monkeypatch.setattr(report, "PARALLEL_MIN_CELLS", 0)
    calls: list[tuple] = []
    written = report.write_results(run_all(cap), tmp_path, plots=True, bodies=cap.bodies, workers=workers,
                                   base=report.base_tables(cap), progress=lambda *a: calls.append(a))
    assert len(written) > 20 and all(p.is_file() for p in written)
    _told(calls, written)


def test_each_file_written_is_told_as_it_is_beside_spawned_writers(tmp_path):
    """A dataset's stored tables go to spawned writers (`_run_beside_fresh`)."""
    from amqpcap import dataset, stored_tables

    root = dataset.write(amqpcap.load(FIX / "flow-control.pcap.gz"), tmp_path / "ds", buckets=3)
    base = stored_tables.stored_tables(str(root), ("frames", "packets", "records"))
    calls: list[tuple] = []
    written = report.write_results(run_all(dataset.read(root)), tmp_path / "out", plots=False, workers=2, base=base,
                                   progress=lambda *a: calls.append(a))
    assert {"frames.csv", "packets.csv", "records.csv"} <= {p.name for p in written}
    _told(calls, written)


def test_a_write_error_in_a_forked_writer_reaches_the_caller(tmp_path, monkeypatch):
    assert report.can_fork()
    results = run_all(amqpcap.load(FIX / "prefetch-consumers.pcap"))
    (tmp_path / "latency-deliveries.csv").mkdir()  # the file cannot be written, whichever process tries
    monkeypatch.setattr(report, "PARALLEL_MIN_CELLS", 0)
    with pytest.raises(OSError, match="(?i)is a directory"):
        report.write_results(results, tmp_path, plots=False, workers=2)


def test_writers_are_not_forked_beside_another_thread(tmp_path, monkeypatch):
    results = run_all(amqpcap.load(FIX / "prefetch-consumers.pcap"))
    monkeypatch.setattr(report, "PARALLEL_MIN_CELLS", 0)
    monkeypatch.setattr(report, "ProcessPoolExecutor", None)  # any attempt to fork fails
    gate = threading.Event()
    other = threading.Thread(target=gate.wait)
    other.start()
    try:
        assert not report.can_fork()
        assert report.write_results(results, tmp_path, plots=False, workers=2)
    finally:
        gate.set()
        other.join()


def test_analyze_says_in_one_line_that_it_cannot_write(tmp_path):
    (tmp_path / "latency-deliveries.csv").mkdir()
    p = subprocess.run([sys.executable, "-m", "amqpcap", "analyze", str(FIX / "prefetch-consumers.pcap"),
                        "--out", str(tmp_path), "--no-plots"], capture_output=True, text=True)
    assert p.returncode != 0
    assert "Traceback" not in p.stderr
    assert f"cannot write into {tmp_path}" in p.stderr


def test_clean_floats_round_like_pythons_decimal_formatting():
    """The whole-column rounding against Python's own correctly rounded %g and round(): the
    same value except where the 13th digit is a tie (numpy rounds the scaled binary value half
    to even), and every result prints with no more digits than kept."""
    rng = np.random.default_rng(3)
    values = rng.standard_normal(50_000) * 10.0 ** rng.integers(-30, 30, 50_000)
    values[::101] = np.nan
    values[::103] = 0.0
    got = report.clean_floats(values, "rate_per_s")
    want = np.array([float(f"{v:.12g}") for v in values])
    differ = ~((got == want) | (np.isnan(got) & np.isnan(want)))
    assert differ.sum() < 10
    assert np.allclose(got[differ], want[differ], rtol=2e-12, atol=0)
    finite = got[np.isfinite(got)]
    assert all(float(f"{v:.12g}") == v for v in finite)
    seconds = np.abs(rng.standard_normal(50_000)) * 10.0 ** rng.integers(-9, 6, 50_000)
    assert list(report.clean_floats(seconds, "latency_s")) == [round(v, 9) for v in seconds]
    assert report.clean_floats(np.array([0.008651480000000001]), "p99_s")[0] == 0.00865148
    assert repr(report.clean_float(0.1 + 0.2, "share")) == "0.3"


def test_is_seconds_reads_the_unit_from_the_name():
    for name in ("latency_s", "p50_s", "deliver_to_ack_p99_s", "stall_time_s", "bin_s", "connection_s"):
        assert report.is_seconds(name) and not report.is_rate(name), name
    for name in ("rate_per_s", "mbit_s", "peak_mbit_s", "packets_s", "published_msgs_s", "small_segments_s",
                 "packets_saved_s", "max_rate_msgs_per_s"):
        assert report.is_rate(name) and not report.is_seconds(name), name


def test_summary_json_values(tmp_path):
    import datetime as dt

    import pandas as pd

    doc = report._jsonable({"first_ts": pd.Timestamp("2026-11-21 21:28:45.173855+00:00"),
                            "naive": dt.datetime(2026, 1, 2, 3, 4, 5, 6),
                            "none": pd.NaT, "p99_s": np.float64(0.008651480000000001), "n": np.int64(3),
                            "rates": [1 / 3], "nan": float("nan")})
    assert doc == {"first_ts": "2026-11-21T21:28:45.173855000Z", "naive": "2026-01-02T03:04:05.000006000Z",
                   "none": None, "p99_s": 0.00865148, "n": 3, "rates": [0.333333333333], "nan": None}


def test_output_checks_create_nothing(tmp_path, monkeypatch):
    from amqpcap.errors import UsageError

    report.check_out_dir(tmp_path / "a" / "b" / "c")  # can be made: fine, and nothing is made
    report.check_out_dir(tmp_path)
    assert not list(tmp_path.iterdir())
    (tmp_path / "file").write_text("x")
    for bad in (tmp_path / "file", tmp_path / "file" / "out"):
        with pytest.raises(UsageError, match="is not a directory"):
            report.check_out_dir(bad)
    with pytest.raises(UsageError, match="is a directory"):
        report.check_out_file(tmp_path)
    with pytest.raises(UsageError, match="no directory"):
        report.check_out_file(tmp_path / "nope" / "x.csv")
    report.check_out_file(tmp_path / "x.csv")
    monkeypatch.setattr(report.os, "access", lambda path, mode: False)  # as a user without write permission
    with pytest.raises(UsageError, match="permission denied"):
        report.check_out_dir(tmp_path / "out")
    with pytest.raises(UsageError, match="permission denied"):
        report.check_out_file(tmp_path / "x.csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_csv_written_in_slices_equals_one_piece_and_pandas_reading(tmp_path, monkeypatch):
    """The Arrow CSV writer in slices writes what it writes in one piece, and what pandas'
    own writer made of `as_written` reads back as the same table (the text differs only in
    quoting, `true`/`false` and `5` for 5.0)."""
    cap = amqpcap.load(FIX / "confirms.pcap")
    for name in ("frames", "packets", "anomalies", "connections"):
        df = getattr(cap, name)
        monkeypatch.setattr(report, "CSV_SLICE_ROWS", 7)  # many slices, the last one short
        sliced = report.write_table_file(df, tmp_path / f"{name}.csv", "csv").read_text()
        monkeypatch.setattr(report, "CSV_SLICE_ROWS", 10**9)
        whole = report.write_table_file(df, tmp_path / f"{name}-whole.csv", "csv").read_text()
        assert sliced == whole, name
        assert len(sliced.splitlines()) == len(df) + 1
        report.as_written(df).to_csv(tmp_path / "pandas.csv", index=False)
        pd.testing.assert_frame_equal(pd.read_csv(tmp_path / f"{name}.csv"), pd.read_csv(tmp_path / "pandas.csv"),
                                      check_dtype=False, obj=name)


def test_parquet_reads_back_as_the_table(tmp_path, monkeypatch):
    cap = amqpcap.load(FIX / "confirms.pcap")
    monkeypatch.setattr(report, "CSV_SLICE_ROWS", 7)
    for name in ("frames", "packets", "anomalies", "connections"):
        df = getattr(cap, name)
        back = pd.read_parquet(report.write_table_file(df, tmp_path / f"{name}.parquet", "parquet"))
        # values compared as objects: an all-missing categorical column comes back as object
        # (Parquet keeps no empty dictionary)
        def values(d):
            return d.astype(object).where(d.notna(), None)

        pd.testing.assert_frame_equal(values(back), values(df), obj=name)
        assert list(back.dtypes.astype(str)) == [str(t) if len(getattr(t, "categories", [0])) else "object"
                                                for t in df.dtypes], name

@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_frames_written_from_the_cores_batches_are_the_frames_table(fmt, tmp_path, monkeypatch):
    """`amqpcap frames -o` writes the core's frames as they settle, while the capture is still
    decoded (`batches_from_sink`, `write_arrow_file` of its RecordBatchReader): with batches of
    1,000 rows, and CSV slices and Parquet row groups of 700 (cut across the batches), the file
    holds what the whole Arrow table gives (byte for byte in CSV), and the frames `load` gives."""
    from amqpcap.capture import decode_arrow

    path = FIX / "kernel-drops.pcap"
    monkeypatch.setattr(report, "CSV_SLICE_ROWS", 700)
    monkeypatch.setattr(report, "PARQUET_ROW_GROUP_ROWS", 700)
    sizes = []

    def decode(sink):
        return decode_arrow(path, frames_sink=lambda b: (sizes.append(b.num_rows), sink(b)), frames_batch_rows=1000)

    batches, finished = report.batches_from_sink(decode)
    rows = report.write_arrow_file(batches, tmp_path / f"batches.{fmt}", fmt)
    assert finished().tables["frames"] is None
    whole = decode_arrow(path).tables["frames"]
    assert sizes[:-1] == [1000] * (len(sizes) - 1) and 0 < sizes[-1] <= 1000
    assert report.write_arrow_file(whole, tmp_path / f"whole.{fmt}", fmt) == rows == whole.num_rows > 3000
    if fmt == "csv":
        assert (tmp_path / "batches.csv").read_bytes() == (tmp_path / "whole.csv").read_bytes()
    else:
        import pyarrow.parquet as pq

        back = pq.read_table(tmp_path / "batches.parquet")
        # (the batches' text columns have 32-bit codes: the same values)
        assert back.column_names == whole.column_names
        assert all(back[c].to_pylist() == whole[c].to_pylist() for c in whole.column_names)
        assert pq.ParquetFile(tmp_path / "batches.parquet").num_row_groups > 4
    frames = amqpcap.load(path).frames
    read = pd.read_csv(tmp_path / "batches.csv") if fmt == "csv" else pd.read_parquet(tmp_path / "batches.parquet")
    assert len(read) == len(frames) and (read["packet"].to_numpy() == frames["packet"].to_numpy()).all()


def test_batches_from_a_sink_end_with_the_producers_result_or_error():
    """`batches_from_sink`: the batches in order, then what the producer returned; a reader
    given up early lets the producer run to its end; the producer's error is raised, before the
    first batch at once."""
    import pyarrow as pa

    def producer(n: int, fail: bool = False):
        def produce(sink):
            for i in range(n):
                sink(pa.record_batch({"i": [i]}))
            if fail:
                raise ValueError("bad bytes")
            return n
        return produce

    reader, finished = report.batches_from_sink(producer(5))
    assert [b["i"][0].as_py() for b in reader] == [0, 1, 2, 3, 4] and finished() == 5
    reader, finished = report.batches_from_sink(producer(50))
    reader.read_next_batch()  # (then the write fails)
    assert finished() == 50
    reader, finished = report.batches_from_sink(producer(3, fail=True))
    assert len(list(reader)) == 3
    with pytest.raises(ValueError, match="bad bytes"):
        finished()
    with pytest.raises(ValueError, match="bad bytes"):
        report.batches_from_sink(producer(0, fail=True))


def _pyarrow_csv(t, header: bool = True) -> bytes:
    import pyarrow as pa
    import pyarrow.csv as pcsv

    sink = pa.BufferOutputStream()
    pcsv.write_csv(t, sink, pcsv.WriteOptions(include_header=header))
    return sink.getvalue().to_pybytes()


def _core_csv(t, header: bool = True):
    return report.csv_text_by_core(t, header)


@pytest.mark.parametrize("name", ["confirms.pcap", "kernel-drops.pcap", "midstream.pcap", "ten-consumers.pcap",
                                  "huge-messages.pcap.gz", "channel-churn.pcap"])
def test_the_cores_csv_text_is_pyarrows(name):
    """Every table `analyze --out` writes as CSV (the capture's and every analyzer's), as text
    columns (`as_csv_columns`): the core writes what pyarrow's CSV writer writes, byte for byte
    (a table with a column type the core does not write, the bodies' bytes, is pyarrow's)."""
    import pyarrow as pa

    cap = amqpcap.load(FIX / name, bodies=True)
    tables = {n: getattr(cap, n) for n in ("frames", "packets", "connections", "anomalies", "records", "bodies")}
    for r in run_all(cap):
        tables.update({f"{r.name}.{k}": df for k, df in r.tables.items()})
    by_core = 0
    for key, df in tables.items():
        t = report.as_csv_columns(report.arrow_table(df, pa.Schema.from_pandas(df, preserve_index=False)))
        got = _core_csv(t)
        if got is None:
            assert key == "bodies", key
            continue
        assert got == _pyarrow_csv(t), key
        by_core += 1
    assert by_core >= len(tables) - 1 > 10


def test_the_cores_csv_text_quotes_and_leaves_empty_as_pyarrow_does():
    """Text with quotes, commas, line breaks and non-ASCII letters, empty text and missing
    values, every integer width at its extremes, booleans, dictionary text with missing keys
    (plain and large text), a column of nulls, a quote in a column's name. (A categorical
    with no category, a dictionary of nulls, is in the fixtures' frames above.)"""
    import pyarrow as pa

    texts = ['plain', 'a "quoted" word', 'comma, here', 'line\nbreak', 'cr\r\nlf', '', None, 'çà ✓', '"', '""']
    n = len(texts)
    columns = {"text": pa.array(texts), "large": pa.array(texts, pa.large_string()),
               "dict": pa.array(texts).dictionary_encode(), "null": pa.nulls(n),
               "large dict": pa.array(texts, pa.large_string()).dictionary_encode(),
               'say "x"': pa.array([True, False, None] * 3 + [True])}
    for t in (pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()):
        info = np.iinfo(t.to_pandas_dtype())
        values = [int(info.min), int(info.max), 0, None, -1 if info.min < 0 else 1] * 2
        columns[str(t)] = pa.array(values, t)
    table = pa.table(columns)
    assert _core_csv(table) == _pyarrow_csv(table)
    assert _core_csv(table.slice(3, 4), header=False) == _pyarrow_csv(table.slice(3, 4), header=False)
    empty = table.slice(0, 0)
    assert _core_csv(empty) == _pyarrow_csv(empty) == _pyarrow_csv(table).split(b"\n")[0] + b"\n"
    # no rows, and a categorical with no category (the frames of a capture without AMQP 0-9-1)
    none = pa.schema([("reason", pa.dictionary(pa.int8(), pa.null())), ("n", pa.int32())]).empty_table()
    assert _core_csv(none) == b'"reason","n"\n'
    assert report._csv_text(none, True) == b'"reason","n"\n'


def test_the_cores_csv_doubles_are_pyarrows():
    """Doubles of every magnitude (random bits: subnormals, extremes, both signs), the decimal
    values analyzers round to (`clean_floats`), and the edges of Arrow's decimal range."""
    import pyarrow as pa

    rng = np.random.default_rng(13)
    bits = rng.integers(0, 2**64, 200_000, dtype=np.uint64).view(np.float64)
    rounded = np.array([round(v, int(d)) for v, d in zip(rng.lognormal(0, 8, 20_000), rng.integers(0, 12, 20_000))])
    edges = np.array([10.0**e * m for e in range(-12, 24) for m in (1, 1.5, 9.999999, -2.25)])
    values = np.concatenate([bits[np.isfinite(bits)], rounded, edges, [0.0, -0.0, np.inf, -np.inf]])
    table = pa.table({"x": pa.array(values), "y": pa.array(values[::-1], mask=rng.random(len(values)) < 0.1)})
    assert _core_csv(table) == _pyarrow_csv(table)
