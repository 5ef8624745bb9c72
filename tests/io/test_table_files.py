"""Tables into CSV and Parquet files straight from Arrow: in slices as in one piece, from the
core's batches as from the whole table, the core's CSV text byte for byte pyarrow's; the checks
made before any work."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import amqpcap
import amqpcap.io.table_files as table_files
from amqpcap.model.written_values import as_written
from amqpcap.engine.registered import run_all
from tiers import one_fast

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "fixtures"


def test_output_checks_create_nothing(tmp_path, monkeypatch):
    from amqpcap.model.errors import UsageError

    table_files.check_out_dir(tmp_path / "a" / "b" / "c")  # can be made: fine, and nothing is made
    table_files.check_out_dir(tmp_path)
    assert not list(tmp_path.iterdir())
    (tmp_path / "file").write_text("x")
    for bad in (tmp_path / "file", tmp_path / "file" / "out"):
        with pytest.raises(UsageError, match="is not a directory"):
            table_files.check_out_dir(bad)
    with pytest.raises(UsageError, match="is a directory"):
        table_files.check_out_file(tmp_path)
    with pytest.raises(UsageError, match="no directory"):
        table_files.check_out_file(tmp_path / "nope" / "x.csv")
    table_files.check_out_file(tmp_path / "x.csv")
    monkeypatch.setattr(table_files.os, "access", lambda path, mode: False)  # as a user without write permission
    with pytest.raises(UsageError, match="permission denied"):
        table_files.check_out_dir(tmp_path / "out")
    with pytest.raises(UsageError, match="permission denied"):
        table_files.check_out_file(tmp_path / "x.csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_csv_written_in_slices_equals_one_piece_and_pandas_reading(tmp_path, monkeypatch):
    """The Arrow CSV writer in slices writes what it writes in one piece, and what pandas'
    own writer made of `as_written` reads back as the same table (the text differs only in
    quoting, `true`/`false` and `5` for 5.0)."""
    cap = amqpcap.load(FIX / "confirms.pcap")
    for name in ("frames", "packets", "anomalies", "connections"):
        df = getattr(cap, name)
        monkeypatch.setattr(table_files, "CSV_SLICE_ROWS", 7)  # many slices, the last one short
        sliced = table_files.write_table_file(df, tmp_path / f"{name}.csv", "csv").read_text()
        monkeypatch.setattr(table_files, "CSV_SLICE_ROWS", 10**9)
        whole = table_files.write_table_file(df, tmp_path / f"{name}-whole.csv", "csv").read_text()
        assert sliced == whole, name
        assert len(sliced.splitlines()) == len(df) + 1
        as_written(df).to_csv(tmp_path / "pandas.csv", index=False)
        pd.testing.assert_frame_equal(pd.read_csv(tmp_path / f"{name}.csv"), pd.read_csv(tmp_path / "pandas.csv"),
                                      check_dtype=False, obj=name)


@pytest.mark.slow
def test_parquet_reads_back_as_the_table(tmp_path, monkeypatch):
    cap = amqpcap.load(FIX / "confirms.pcap")
    monkeypatch.setattr(table_files, "CSV_SLICE_ROWS", 7)
    for name in ("frames", "packets", "anomalies", "connections"):
        df = getattr(cap, name)
        back = pd.read_parquet(table_files.write_table_file(df, tmp_path / f"{name}.parquet", "parquet"))
        # values compared as objects: an all-missing categorical column comes back as object
        # (Parquet keeps no empty dictionary)
        def values(d):
            return d.astype(object).where(d.notna(), None)

        pd.testing.assert_frame_equal(values(back), values(df), obj=name)
        assert list(back.dtypes.astype(str)) == [str(t) if len(getattr(t, "categories", [0])) else "object"
                                                for t in df.dtypes], name


@pytest.mark.parametrize("name", ["kernel-drops.pcap", "rpc-nodelay.pcap"])
@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_frames_written_from_the_cores_batches_are_the_frames_table(fmt, name, tmp_path, monkeypatch):
    """`amqpcap frames -o` writes the core's frames as they settle, while the capture is still
    decoded (`batches_from_sink`, `write_arrow_file` of its RecordBatchReader): with batches of
    1,000 rows, and CSV slices and Parquet row groups of 700 (cut across the batches), the file
    holds what the whole Arrow table gives (byte for byte in CSV), and the frames `load` gives.
    In rpc-nodelay.pcap a text column's dictionary outgrows 8-bit keys after the first batch
    (150 `correlation_id`s): every batch still has the first one's schema."""
    from amqpcap.io.load import decode_arrow

    path = FIX / name
    monkeypatch.setattr(table_files, "CSV_SLICE_ROWS", 700)
    monkeypatch.setattr(table_files, "PARQUET_ROW_GROUP_ROWS", 700)
    sizes = []

    def decode(sink):
        return decode_arrow(path, frames_sink=lambda b: (sizes.append(b.num_rows), sink(b)), frames_batch_rows=1000)

    batches, finished = table_files.batches_from_sink(decode)
    rows = table_files.write_arrow_file(batches, tmp_path / f"batches.{fmt}", fmt)
    assert finished().tables["frames"] is None
    whole = decode_arrow(path).tables["frames"]
    assert sizes[:-1] == [1000] * (len(sizes) - 1) and 0 < sizes[-1] <= 1000
    assert table_files.write_arrow_file(whole, tmp_path / f"whole.{fmt}", fmt) == rows == whole.num_rows > 1000
    if fmt == "csv":
        assert (tmp_path / "batches.csv").read_bytes() == (tmp_path / "whole.csv").read_bytes()
    else:
        import pyarrow.parquet as pq

        back = pq.read_table(tmp_path / "batches.parquet")
        # (the batches' text columns have 32-bit codes: the same values)
        assert back.column_names == whole.column_names
        assert all(back[c].to_pylist() == whole[c].to_pylist() for c in whole.column_names)
        # (a row group of at most 700 rows from each batch's rows in turn)
        assert pq.ParquetFile(tmp_path / "batches.parquet").num_row_groups == sum(-(-n // 700) for n in sizes) > 3
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

    reader, finished = table_files.batches_from_sink(producer(5))
    assert [b["i"][0].as_py() for b in reader] == [0, 1, 2, 3, 4] and finished() == 5
    reader, finished = table_files.batches_from_sink(producer(50))
    reader.read_next_batch()  # (then the write fails)
    assert finished() == 50
    reader, finished = table_files.batches_from_sink(producer(3, fail=True))
    assert len(list(reader)) == 3
    with pytest.raises(ValueError, match="bad bytes"):
        finished()
    with pytest.raises(ValueError, match="bad bytes"):
        table_files.batches_from_sink(producer(0, fail=True))


def _pyarrow_csv(t, header: bool = True) -> bytes:
    import pyarrow as pa
    import pyarrow.csv as pcsv

    sink = pa.BufferOutputStream()
    pcsv.write_csv(t, sink, pcsv.WriteOptions(include_header=header))
    return sink.getvalue().to_pybytes()


def _core_csv(t, header: bool = True):
    return table_files.csv_text_by_core(t, header)


@pytest.mark.parametrize("name", one_fast(["confirms.pcap", "kernel-drops.pcap", "midstream.pcap", "ten-consumers.pcap",
                                           "huge-messages.pcap.gz", "channel-churn.pcap"], keep="channel-churn.pcap"))
def test_the_cores_csv_text_is_pyarrows(name):
    """Every table `analyze --out` writes as CSV (the capture's and every analyzer's), as text
    columns (`as_csv_columns`): the core writes what pyarrow's CSV writer writes, byte for byte,
    given the text columns or the table as it is (the core makes timestamps text itself; a table
    with a column type the core does not write, the bodies' bytes, is pyarrow's)."""
    import pyarrow as pa

    cap = amqpcap.load(FIX / name, bodies=True)
    tables = {n: getattr(cap, n) for n in ("frames", "packets", "connections", "anomalies", "records", "bodies")}
    for r in run_all(cap):
        tables.update({f"{r.name}.{k}": df for k, df in r.tables.items()})
    by_core = 0
    for key, df in tables.items():
        table = table_files.arrow_table(df, pa.Schema.from_pandas(df, preserve_index=False))
        t = table_files.as_csv_columns(table)
        got = _core_csv(t)
        if got is None:
            assert key == "bodies", key
            continue
        assert got == bytes(table_files._csv_text(table, True)) == _pyarrow_csv(t), key
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
    # columns with no value in the rows written (only their commas): first, in runs, last
    runs = pa.table({"a": pa.nulls(n, pa.int32()), "b": columns["int8"], "c": pa.nulls(n),
                     "d": pa.array([None] * n, pa.string()).dictionary_encode(), "e": columns["dict"],
                     "f": pa.nulls(n, pa.bool_())})
    for part in (runs, runs.slice(6, 1), runs.slice(3, 1), runs.select(["a"]), runs.select(["a", "c"])):
        assert _core_csv(part) == _pyarrow_csv(part)
    # no rows, and a categorical with no category (the frames of a capture without AMQP 0-9-1)
    none = pa.schema([("reason", pa.dictionary(pa.int8(), pa.null())), ("n", pa.int32())]).empty_table()
    assert _core_csv(none) == b'"reason","n"\n'
    assert table_files._csv_text(none, True) == b'"reason","n"\n'


def test_the_cores_csv_timestamps_are_numpys_iso_text():
    """Nanosecond timestamps the core makes text: numpy's ISO 8601 text of each (with `Z`),
    quoted; before 1970, on leap days, at both ends of the nanosecond range, in another time
    zone (the text is UTC's); NaT and nulls an empty cell. Other units are made nanoseconds."""
    import pyarrow as pa

    rng = np.random.default_rng(7)
    ns = np.concatenate([rng.integers(np.iinfo(np.int64).min + 1, np.iinfo(np.int64).max, 2000, dtype=np.int64),
                         np.array([0, -1, 1, 951_782_400_000_000_000, 4_107_542_400_000_000_000 - 1,
                                   np.iinfo(np.int64).max, np.iinfo(np.int64).min + 1], dtype=np.int64)])
    expected = [f'"{x}Z"' for x in np.datetime_as_string(ns.view("datetime64[ns]"), unit="ns")]
    for tz in ("UTC", "Europe/Paris"):
        col = pa.array(ns, pa.timestamp("ns", tz=tz))
        text = _core_csv(pa.table({"ts": col}), header=False).decode()
        assert text.splitlines() == expected
    missing = pa.table({"ts": pa.array([0, None, np.iinfo(np.int64).min], pa.timestamp("ns", tz="UTC")),
                        "us": pa.array([1_500_000, None, 0], pa.timestamp("us"))})
    assert _core_csv(missing, header=False) == (b'"1970-01-01T00:00:00.000000000Z","1970-01-01T00:00:01.500000000Z"\n'
                                                b',\n,"1970-01-01T00:00:00.000000000Z"\n')
    assert _core_csv(missing) == _pyarrow_csv(table_files.as_csv_columns(missing))


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


def test_frames_decode_starts_before_pandas_is_imported(tmp_path):
    """What `amqpcap frames CAPTURE -o X` imports before the core decodes (the CLI's modules,
    whether the input is a dataset, `decode_arrow`, the writers) does not import pandas, whose
    import (about 0.4 s) then runs beside the decode instead of before it."""
    import subprocess
    import sys

    code = ("import sys, amqpcap.cli.frames, amqpcap.cli.loading, amqpcap.io.table_files\n"
            "from amqpcap.io.load import decode_arrow\n"
            "from amqpcap.io.dataset import is_dataset\n"
            f"assert not is_dataset({str(tmp_path)!r})\n"
            "print(sorted(m for m in ('pandas', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("capture,suffix", [("kernel-drops.pcap", ".parquet"), ("amqp10.pcap", ".csv"),
                                            ("tls.pcap", ".parquet")])
def test_frames_written_as_they_settle_never_import_pandas(tmp_path, capture, suffix):
    """`amqpcap frames CAPTURE -o X` does not import pandas at all (its import was a quarter of
    the command's CPU): the decode's summary, its warnings and the anomalies' line are read from
    Arrow (`decode_arrow(pandas=False)`). Run on captures with anomalies, AMQP 1.0 and TLS
    connections, whose warnings are the ones `amqpcap info` prints, from pandas."""
    import subprocess
    import sys

    out = tmp_path / f"frames{suffix}"
    code = ("import sys\nfrom amqpcap.cli import main\n"
            f"sys.argv = ['amqpcap', 'frames', {str(FIX / capture)!r}, '-o', {str(out)!r}]\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "print(sorted(m for m in ('pandas', 'pyarrow.pandas_compat') if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=_plain_env())
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"
    info = subprocess.run([sys.executable, "-m", "amqpcap", "info", str(FIX / capture)], capture_output=True, text=True,
                          cwd=ROOT, env=_plain_env())
    warnings = [line for line in run.stderr.splitlines() if line.startswith("warning:")]
    assert warnings and warnings == [line for line in info.stderr.splitlines() if line.startswith("warning:")]
    frames = amqpcap.load(FIX / capture).frames
    written = pd.read_parquet(out) if suffix == ".parquet" else pd.read_csv(out)
    assert len(written) == len(frames)


def _plain_env():
    import os

    return {**os.environ, "COLUMNS": "400", "NO_COLOR": "1"}


@pytest.mark.parametrize("capture", ["kernel-drops.pcap", "amqp10.pcap", "tls.pcap", "midstream.pcap",
                                     "huge-messages.pcap.gz", "zero-window.pcap"])
def test_warnings_read_from_arrow_are_those_read_from_pandas(capture):
    """The summary's warnings and the anomalies' line of a decode that leaves pandas out
    (`decode_arrow(pandas=False)`: Arrow tables, `amqpcap.model.table_columns`) are those of `load()`."""
    from amqpcap.io.load import decode_arrow
    from amqpcap.cli import anomaly_warning

    path = FIX / capture
    lean, whole = decode_arrow(path, pandas=False), amqpcap.load(path)
    assert lean.summary["warnings"] == whole.summary["warnings"]
    assert anomaly_warning(lean.tables["anomalies"]) == anomaly_warning(whole.anomalies)
    assert len(lean.connections) == len(whole.connections)
    assert lean.summary["first_ts_ns"] == whole.summary["first_ts"].value
