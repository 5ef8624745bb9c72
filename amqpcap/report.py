"""Writing results: tables (CSV/Parquet), plots (PNG), summary.json and report.html."""

from __future__ import annotations

import datetime as dt
import json
import math
import multiprocessing as mp
import os
import re
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from .analysis import AnalyzerResult, Finding, Plot, rank
from .capture import Capture
from .errors import UsageError
from .tally import capture_tally, frame_count, method_counts

FORMATS = ("csv", "parquet")


def _jsonable(v: Any, key: str = "") -> Any:
    """`v` as JSON values: floats rounded as in the CSV files (`clean_float`, by the key that
    holds them), timestamps as ISO 8601 UTC text (`iso_utc`), NaN and NA as null."""
    if isinstance(v, dict):
        return {str(k): _jsonable(x, str(k)) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x, key) for x in v]
    if v is pd.NA or v is pd.NaT:
        return None
    if isinstance(v, (np.bool_,)):
        return bool(v)
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        return None if math.isnan(v) or math.isinf(v) else clean_float(float(v), key)
    if isinstance(v, (dt.datetime, np.datetime64)):
        return iso_utc(v) or None
    return v


# -- numbers and timestamps as written (CSV, summary.json, the terminal) ---------------------

#: Durations are computed from nanosecond timestamps, so they are whole nanoseconds: 9
#: decimals keep every digit they have and drop the binary noise float arithmetic adds
#: (0.008651480000000001 s is written 0.00865148).
SECONDS_DECIMALS = 9
#: Other floats (rates, shares, means) keep 12 significant digits: more than any of them is
#: measured to, fewer than the 15-17 at which a double's representation error shows.
SIGNIFICANT_DIGITS = 12
#: `_s` names a time in seconds, except in rates: `rate_per_s`, `mbit_s` (Mbit/s),
#: `packets_s`, `published_msgs_s`, `small_segments_s`, `packets_saved_s` (per second)
_RATE = re.compile(r"(?:_per_s|(?:^|_)(?:mbit|packets|msgs|messages|segments|saved|frames|bytes)_s)$")


def is_rate(name: str) -> bool:
    """Whether a column or key holds a rate per second (`packets_s`, `rate_per_s`)."""
    return bool(_RATE.search(name))


def is_seconds(name: str) -> bool:
    """Whether a column or key holds a duration in seconds (`latency_s`, `p50_s`)."""
    return name.endswith("_s") and not is_rate(name)


def clean_float(v: float, name: str = "") -> float:
    """One float as written: durations (`is_seconds`) to 9 decimals, anything else to 12
    significant digits. Python's round and %g round the decimal value exactly."""
    if is_seconds(name):
        return round(v, SECONDS_DECIMALS)
    return float(f"{v:.{SIGNIFICANT_DIGITS}g}")


def clean_floats(values: np.ndarray, name: str = "") -> np.ndarray:
    """`clean_float` on a whole float column (NaN stays NaN).

    np.round(x, d) is rint(x * 10**d) / 10**d: for d <= 22 the power of ten is exact and the
    division correctly rounded, so the result is the double nearest the rounded decimal and
    prints with no more digits than were kept. Values needing a larger shift (below 1e-11 or
    above 1e22 at 12 digits) are rare and rounded one by one through %g."""
    v = np.asarray(values, dtype=np.float64)
    if is_seconds(name):
        return np.round(v, SECONDS_DECIMALS)
    out = v.copy()
    nonzero = np.isfinite(v) & (v != 0)
    if not nonzero.any():
        return out
    exponent = np.floor(np.log10(np.abs(v[nonzero]))).astype(np.int64)
    decimals = SIGNIFICANT_DIGITS - 1 - exponent
    rounded = out[nonzero]
    for d in np.unique(decimals):
        at = decimals == d
        if abs(d) <= 22:
            rounded[at] = np.round(rounded[at], int(d))
        else:
            rounded[at] = [clean_float(float(x)) for x in rounded[at]]
    out[nonzero] = rounded
    return out


def iso_utc(ts: Any) -> str:
    """One timestamp (pd.Timestamp, datetime, np.datetime64) in the one format every output
    uses: ISO 8601 UTC with nanoseconds and `Z` (`iso_utc_ns`). Naive values are taken as UTC;
    NaT is ""."""
    t = pd.Timestamp(ts)
    if t is pd.NaT:
        return ""
    if t.tzinfo is not None:
        t = t.tz_convert("UTC").tz_localize(None)
    return str(iso_utc_ns(np.array([t.to_datetime64()], dtype="datetime64[ns]"))[0])


NS_PER_DAY = 86_400_000_000_000
ISO_NS_CHARS = len("YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ")


def iso_utc_ns(arr: np.ndarray) -> np.ndarray:
    """datetime64[ns] as ISO 8601 UTC text with nanoseconds (`2024-05-01T12:00:00.123456789Z`),
    NaT as "", in an object array of str (`iso_utc_matrix`)."""
    out, nat = iso_utc_matrix(arr)
    text = out.view(f"S{ISO_NS_CHARS}").ravel().astype(f"U{ISO_NS_CHARS}").astype(object)
    text[nat] = ""
    return text


def iso_utc_arrow(arr: np.ndarray):
    """The same text as an Arrow string array (NaT: null), made from the byte matrix without
    a Python string per value: 1M timestamps in ~0.2 s, where Arrow's strftime takes 1.3 s."""
    import pyarrow as pa

    out, nat = iso_utc_matrix(arr)
    n = len(out)
    offsets = np.arange(0, (n + 1) * ISO_NS_CHARS, ISO_NS_CHARS, dtype=np.int32)
    validity = pa.array(~nat).buffers()[1] if nat.any() else None
    return pa.Array.from_buffers(pa.string(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(out)],
                                 null_count=int(nat.sum()))


def iso_utc_matrix(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """datetime64[ns] as ISO 8601 UTC text with nanoseconds, one row of `ISO_NS_CHARS` bytes
    per value (NaT rows hold the epoch), and the NaT mask.

    Same text as np.datetime_as_string(unit="ns") + "Z", built 3x faster: the date part is
    formatted once per distinct day and the time digits are filled into a byte matrix column by
    column. datetime64[ns] spans 1677-2262, so the year always has four digits."""
    arr = np.asarray(arr, dtype="datetime64[ns]")
    nat = np.isnat(arr)
    ns = np.where(nat, 0, arr.view(np.int64))
    days, in_day = np.divmod(ns, NS_PER_DAY)
    unique_days, which_day = np.unique(days, return_inverse=True)
    day_text = np.datetime_as_string(unique_days.astype("datetime64[D]"), unit="D").astype("S10")
    out = np.empty((len(arr), ISO_NS_CHARS), dtype=np.uint8)
    out[:, :10] = day_text.view(np.uint8).reshape(-1, 10)[which_day.ravel()]
    out[:, 10] = ord("T")
    out[:, 13] = out[:, 16] = ord(":")
    out[:, 19] = ord(".")
    out[:, 29] = ord("Z")
    seconds, fraction_ns = np.divmod(in_day, 1_000_000_000)
    hours, rest = np.divmod(seconds, 3600)
    minutes, secs = np.divmod(rest, 60)
    for col, value in ((11, hours), (14, minutes), (17, secs)):
        out[:, col] = value // 10 + ord("0")
        out[:, col + 1] = value % 10 + ord("0")
    for col in range(28, 19, -1):
        fraction_ns, digit = np.divmod(fraction_ns, 10)
        out[:, col] = digit + ord("0")
    return out, nat


def as_written(df: pd.DataFrame) -> pd.DataFrame:
    """The table as every text output writes it (CSV; report.html and the terminal should
    too): timestamps as ISO 8601 UTC text made in whole columns (pandas formats datetimes one
    value at a time, which dominated writing million-row tables), floats without binary noise
    (`clean_floats`)."""
    times = [c for c in df.columns if isinstance(df[c].dtype, pd.DatetimeTZDtype) or df[c].dtype.kind == "M"]
    floats = [c for c in df.columns if c not in times and pd.api.types.is_float_dtype(df[c].dtype)]
    if not times and not floats:
        return df
    out = df.copy(deep=False)
    for c in times:
        values = out[c].dt.tz_convert("UTC").dt.tz_localize(None) if isinstance(out[c].dtype, pd.DatetimeTZDtype) else out[c]
        out[c] = iso_utc_ns(values.to_numpy(dtype="datetime64[ns]"))
    for c in floats:  # nullable Float64 too: NA becomes NaN, written as an empty cell like NA
        out[c] = clean_floats(out[c].to_numpy(dtype=np.float64, na_value=np.nan), str(c))
    return out


#: rows formatted and written at a time (`write_table_file`): with `CSV_THREADS` slices being
#: formatted and one being written, as few rows are held as by one slice of 100,000 rows (the
#: size before the threads: 1M connections analysed with --out peaked 150 MB higher with three
#: of those; as fast either way)
CSV_SLICE_ROWS = 25_000

#: rows of an Arrow table written as one Parquet row group (`write_arrow_file`): pyarrow's
#: largest. In row groups of `CSV_SLICE_ROWS`, the frames of 7 copies of
#: `fixtures/flow-control.pcap.gz` (2.9M rows, 118 row groups) took 0.77 s to write and 8.3 MB,
#: in 3 row groups 0.67 s and 7.4 MB.
PARQUET_ROW_GROUP_ROWS = 1 << 20

#: threads formatting CSV slices side by side (pyarrow's formatting runs without the GIL); as
#: many slices' text wait to be written, in order, at the most
CSV_THREADS = 2

def check_format(fmt: str) -> None:
    """Before any work: the table format is known. Raises UsageError otherwise."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown table format {fmt!r}: use {' or '.join(FORMATS)}")


def _nearest_existing(path: Path) -> Path:
    return next(p for p in (path, *path.parents) if os.path.lexists(p))


def check_out_dir(out: Path) -> None:
    """Before any work: `out` is a directory we can write into, or one we can create (its
    nearest existing ancestor is a writable directory). Creates nothing; raises UsageError."""
    out = Path(out).absolute()
    existing = _nearest_existing(out)
    if not existing.is_dir():
        what = "a broken symbolic link" if existing.is_symlink() and not existing.exists() else "not a directory"
        raise UsageError(f"cannot write into {out}: {existing} is {what}")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write into {out}: permission denied on {existing}")


def check_out_file(path: Path) -> None:
    """Before any work: the file `path` can be written (its directory exists and is writable,
    and it is not itself a directory). Creates nothing; raises UsageError."""
    path = Path(path).absolute()
    if path.is_dir():
        raise UsageError(f"cannot write {path}: it is a directory")
    if not path.parent.is_dir():
        raise UsageError(f"cannot write {path}: no directory {path.parent}")
    target = path if path.exists() else path.parent
    if not os.access(target, os.W_OK):
        raise UsageError(f"cannot write {path}: permission denied on {target}")


def write_table(df: pd.DataFrame, path_no_ext: Path, fmt: str) -> Path:
    """`df` as `<path_no_ext>.<fmt>`."""
    return write_table_file(df, path_no_ext.with_suffix("." + fmt), fmt)


def arrow_table(df: pd.DataFrame, schema=None):
    """`df` as a pyarrow Table: numeric columns without a copy, categoricals as dictionary
    arrays, nullable columns with their validity, tz-aware timestamps as timestamp[ns, UTC]."""
    import pyarrow as pa

    return pa.Table.from_pandas(df, schema=schema, preserve_index=False)


def as_csv_columns(t):
    """The Arrow table as every text output writes it (the CSV twin of `as_written`):
    timestamps as ISO 8601 UTC text (Arrow's strftime gives `iso_utc_ns`'s text: nanoseconds,
    `Z`), floats without binary noise (`clean_floats`). Nulls stay null: empty cells.
    Categories stay dictionaries: both CSV writers write a dictionary's text as its value."""
    import pyarrow as pa
    import pyarrow.compute as pc

    columns = list(t.columns)
    for i, (name, col) in enumerate(zip(t.column_names, t.columns)):
        kind = col.type
        if pa.types.is_timestamp(kind):
            ns = pc.fill_null(col.cast(pa.timestamp("ns", tz=kind.tz)).cast(pa.int64()), np.iinfo(np.int64).min)
            columns[i] = iso_utc_arrow(ns.to_numpy().view("datetime64[ns]"))  # the minimum is NaT: null
        elif pa.types.is_floating(kind):
            values = col.to_numpy(zero_copy_only=False)  # nulls as NaN
            columns[i] = pa.array(clean_floats(values, str(name)), mask=np.isnan(values))
    return pa.table(columns, names=t.column_names)


def write_table_file(df: pd.DataFrame, path: Path, fmt: str) -> Path:
    """`df` into the file `path` straight from Arrow (pandas' writers are not used), converted
    a slice of `CSV_SLICE_ROWS` rows at a time so the batches made stay bounded whatever the
    table's length (`write_arrow_file`)."""
    import pyarrow as pa

    # one schema for every slice, from the whole table (a slice of an object column may hold
    # only missing values, from which no type can be told)
    schema = pa.Schema.from_pandas(df, preserve_index=False)
    slices = (arrow_table(df.iloc[start:start + CSV_SLICE_ROWS], schema)
              for start in range(0, max(len(df), 1), CSV_SLICE_ROWS))
    return _write_slices(slices, schema, path, fmt)


def write_arrow_file(t, path: Path, fmt: str) -> int:
    """The Arrow table `t`, or the batches of the `pyarrow.RecordBatchReader` `t` (e.g. the
    core's frames as they settle: `batches_from_sink`), into the file `path`, as
    `write_table_file` writes a pandas frame: Parquet as it is (row groups of at most
    `PARQUET_ROW_GROUP_ROWS`), CSV through `as_csv_columns`, `CSV_SLICE_ROWS` rows at a time
    (slices, not copies). Returns the rows written."""
    import pyarrow as pa

    step = CSV_SLICE_ROWS if fmt == "csv" else PARQUET_ROW_GROUP_ROWS
    batches = t if isinstance(t, pa.RecordBatchReader) else [t]
    rows = 0

    def slices():
        nonlocal rows
        for b in batches:
            rows += b.num_rows
            yield from (b.slice(start, step) for start in range(0, b.num_rows, step))
        if not rows:
            yield t.schema.empty_table()  # (the file still has its columns: a CSV header)

    _write_slices(slices(), t.schema, path, fmt)
    return rows


def batches_from_sink(produce: Callable[[Callable[[Any], None]], Any], waiting: int = 1):
    """Run ``produce(sink)`` in a thread (a decode with a batch sink: the core runs without the
    GIL) and read what it gives `sink` here as a `pyarrow.RecordBatchReader`, at most `waiting`
    batches held between the two; ``finished()`` waits for `produce` to end and returns what it
    returned, or raises its error (an error before the first batch is raised here at once).
    Called before the reader is read to its end (a failed write), it lets `produce` run on with
    its batches dropped. Returns (reader, finished)."""
    import itertools
    import queue

    import pyarrow as pa

    handed: queue.Queue = queue.Queue(maxsize=waiting)
    end, outcome, stop = object(), {}, threading.Event()

    def put(item) -> None:
        while not stop.is_set():
            try:
                return handed.put(item, timeout=0.1)
            except queue.Full:
                continue

    def run() -> None:
        try:
            outcome["value"] = produce(put)
        except BaseException as e:  # (raised in the reading thread)
            outcome["error"] = e
        put(end)

    thread = threading.Thread(target=run, name="amqpcap-produce", daemon=True)
    thread.start()

    def finished():
        stop.set()
        thread.join()
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]

    def rest():
        try:
            while (b := handed.get()) is not end:
                yield b
        finally:
            stop.set()

    first = handed.get()
    if first is end:
        finished()  # (its error)
        raise ValueError("the producer gave no batch")
    return pa.RecordBatchReader.from_batches(first.schema, itertools.chain([first], rest())), finished


def _csv_text(t, header: bool):
    """The CSV text of the Arrow table `t` (`as_csv_columns`), with the header line or not:
    written by the core (`rust/src/csv_out.rs`: pyarrow's text, in a third of its time on the
    frames table), or by pyarrow when a column is of a type the core does not write."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    c = as_csv_columns(t)
    text = csv_text_by_core(c, header)
    if text is not None:
        return text
    sink = pa.BufferOutputStream()
    pcsv.write_csv(c, sink, pcsv.WriteOptions(include_header=header))
    return sink.getvalue()


def csv_text_by_core(t, header: bool) -> bytes | None:
    """The CSV text of the Arrow table `t` of text, integer, boolean and float columns, as
    pyarrow's CSV writer writes it, written by the core (`rust/src/csv_out.rs`); None when a
    column is of another type. Floats are made text by Arrow's own cast, which writes what its
    CSV writer writes (the core writes that text unquoted)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from . import _core

    raw = [i for i, f in enumerate(t.schema) if pa.types.is_floating(f.type)]
    for i in raw:
        t = t.set_column(i, t.field(i).name, pc.cast(t.column(i), pa.string()))
    # (a table of no rows may have no batch: one empty batch, for the header)
    batches = t.to_batches() or [pa.record_batch([pa.nulls(0, f.type) for f in t.schema], schema=t.schema)]
    texts = [_core.csv_text(*b.__arrow_c_array__(), header and i == 0, raw) for i, b in enumerate(batches)]
    return None if None in texts else b"".join(texts)


def _csv_texts(slices):
    """The CSV text of each table of `slices` in order, the header with the first, formatted by
    `CSV_THREADS` threads ahead of the writer (a 2.9M-row frames table on the 2-core dev machine,
    with pyarrow's CSV writer: formatted and written in 2.1 s instead of 2.8 s by one thread)."""
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(CSV_THREADS, thread_name_prefix="amqpcap-csv") as pool:
        ahead: deque = deque()
        for i, t in enumerate(slices):
            ahead.append(pool.submit(_csv_text, t, i == 0))
            if len(ahead) > CSV_THREADS:
                yield ahead.popleft().result()
        while ahead:
            yield ahead.popleft().result()


def _write_slices(slices, schema, path: Path, fmt: str) -> Path:
    import pyarrow.parquet as pq

    if fmt not in FORMATS:
        raise UsageError(f"unknown table format {fmt!r}: use csv or parquet")
    if fmt == "csv":
        with open(path, "wb") as f:
            for text in _csv_texts(slices):
                f.write(text)
    else:
        with pq.ParquetWriter(path, schema, **parquet_options(schema)) as w:
            for t in slices:
                w.write(t)  # (a table or a record batch)
    return path


#: columns whose Parquet min/max statistics are written: what readers filter on (DuckDB,
#: Polars, pyarrow skip row groups with them). Statistics of every column cost 60% more write
#: time on the frames table (50 columns, most of them rarely set).
PARQUET_STATISTICS_COLUMNS = ("stream", "packet", "ts", "last_packet")


def parquet_statistics(columns) -> list[str]:
    """The columns among `columns` to write Parquet statistics for (``write_statistics=``)."""
    return [c for c in PARQUET_STATISTICS_COLUMNS if c in columns]


def parquet_options(schema) -> dict:
    """How every Parquet file amqpcap writes is encoded (pyarrow's writer's options) for the
    Arrow `schema`: statistics of `PARQUET_STATISTICS_COLUMNS`; a dictionary for the dictionary
    columns only; integers and timestamps DELTA_BINARY_PACKED (standard Parquet, read by pyarrow,
    DuckDB, Polars, Spark). On a 10M-packet ingest's bucket (1.3M frames, 0.7M packets) this
    wrote the frames in 0.37 s instead of 0.43 s (pyarrow's default: a dictionary tried on every
    column, given up on the numbers) into 9.7 MB instead of 18.0 MB, and read back as fast."""
    import pyarrow as pa

    def is_number(t) -> bool:
        return pa.types.is_integer(t) or pa.types.is_timestamp(t)

    return {"write_statistics": parquet_statistics(schema.names),
            "use_dictionary": [f.name for f in schema if pa.types.is_dictionary(f.type)],
            "column_encoding": {f.name: "DELTA_BINARY_PACKED" for f in schema if is_number(f.type)}}


#: the capture's own tables (docs/tables.md) that `analyze --out` writes as `<name>.<fmt>`
BASE_TABLES = ("connections", "frames", "packets", "anomalies", "records")


def base_tables(cap: Capture) -> dict[str, pd.DataFrame]:
    return {name: getattr(cap, name) for name in BASE_TABLES}


def write_outputs(cap: Capture, results: list[AnalyzerResult], summary: dict[str, Any], out: Path,
                  fmt: str = "csv", plots: bool = True, base: dict[str, Any] | None = None,
                  progress: Progress | None = None) -> list[Path]:
    """What `amqpcap analyze --out DIR` writes: summary.json, the capture's tables
    (`BASE_TABLES`), every analyzer's tables and plots (and the bodies, when the capture kept
    them), and report.html when the plots are drawn. ``base``: the capture's tables and bodies
    when `cap` does not hold them (a dataset's outline: `amqpcap.stored_tables`). ``progress``:
    see `write_results`."""
    written = [write_summary(summary, out)]
    if base is None:
        written += write_results(results, out, fmt, plots=plots, bodies=cap.bodies, base=base_tables(cap),
                                 progress=progress)
    else:
        written += write_results(results, out, fmt, plots=plots, base=base, progress=progress)
    if plots:
        from .html import write_report  # it embeds the PNGs written above

        written.append(write_report(cap, results, summary, out))
    return written


def write_result(result: AnalyzerResult, out: Path, fmt: str = "csv", plots: bool = True) -> list[Path]:
    """An analyzer's tables as `<analyzer>-<table>.<fmt>` and its plots as `<plot>.png`."""
    return write_results([result], out, fmt, plots)


#: ``progress(name, done, total)``: file `name` is written, `done` of the `total` files so far
Progress = Callable[[str, int, int], None]


def write_results(results: list[AnalyzerResult], out: Path, fmt: str = "csv", plots: bool = True,
                  bodies: pd.DataFrame | None = None, workers: int | None = None,
                  base: dict[str, Any] | None = None, progress: Progress | None = None) -> list[Path]:
    """Every result's tables and plots (and the `base` tables, DataFrames or tables a dataset
    writes itself (`amqpcap.stored_tables.StoredTable`), and the bodies table when given)
    into `out`, in `workers` processes (default: one per core, at most WRITE_WORKERS_MAX).
    Returns the paths in a fixed order: the base tables, then the results in order, each its
    tables then its plots, then the bodies. ``progress`` is told of each file as it is written,
    in whichever process (a dataset of 10M packets writes 6.3 GB of CSV in about a minute)."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown table format {fmt!r}: use csv or parquet")
    out.mkdir(parents=True, exist_ok=True)
    jobs = [_Job(df.size, partial(write_table, df, out / name, fmt)) if isinstance(df, pd.DataFrame)
            else _Job(df.size, partial(df.write, out / name, fmt), fresh=True) for name, df in (base or {}).items()]
    for r in results:
        for name, df in r.tables.items():  # (rows kept on the workers write themselves: `amqpcap.kept_rows`)
            path = out / f"{r.name}-{name}"
            jobs.append(_Job(df.size, partial(write_table, df, path, fmt)) if isinstance(df, pd.DataFrame)
                        else _Job(df.size, partial(df.write, path, fmt), fresh=True))
        if plots:
            jobs += [_Job(PLOT_COST_CELLS, partial(_draw_plot, p, out / f"{p.name}.png")) for p in r.plots]
    if bodies is not None:
        table = bodies_for_csv(bodies) if fmt == "csv" else bodies
        jobs.append(_Job(table.size, partial(write_table, table, out / "bodies", fmt)))
    if plots and any(r.plots for r in results):
        _matplotlib()  # imported once here, not once per forked writer
    return _run_jobs(jobs, _write_workers() if workers is None else workers, _Written(progress, len(jobs)))


#: Writing tables and drawing plots is CPU work that holds the GIL (pandas' CSV writer,
#: matplotlib), so it is shared between forked processes, not threads. A fork costs tens of
#: milliseconds, so small outputs are written in this process. Forked writers inherit the
#: tables (copy-on-write): nothing is pickled but the paths they return.
WRITE_WORKERS_MAX = 4
PARALLEL_MIN_CELLS = 2_000_000
#: what a plot costs, in table cells written to CSV in the same time (measured on 1M-packet
#: captures: a plot takes 0.15-0.8 s, a CSV cell ~0.45 us)
PLOT_COST_CELLS = 800_000


@dataclass
class _Job:
    cost_cells: int
    write: Callable[[], Path]
    #: the job reads what it writes itself (a dataset's table: `amqpcap.stored_tables`), so it
    #: runs in a fresh process (spawned, not forked: it needs none of this process's memory)
    fresh: bool = False


_FORKED_JOBS: list[_Job] = []  # what forked writers run, by index: inherited, never pickled


def _run_forked_job(i: int) -> str:
    return str(_FORKED_JOBS[i].write())


def _write_workers() -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, WRITE_WORKERS_MAX))


def can_fork() -> bool:
    """Writers are forked only from a process with no other Python thread (the CLI: run_all's
    threads have ended). A thread holding a lock at the fork (a Jupyter kernel's I/O threads)
    could leave the child waiting for it forever, so there the outputs are written here."""
    return "fork" in mp.get_all_start_methods() and threading.active_count() == 1


def _balance(costs: list[int], bins: int) -> list[list[int]]:
    """Job indices in `bins` groups of near-equal cost: the largest job first into the lightest
    group (longest-processing-time-first scheduling)."""
    groups: list[list[int]] = [[] for _ in range(bins)]
    load = [0] * bins
    for i in sorted(range(len(costs)), key=lambda i: -costs[i]):
        lightest = load.index(min(load))
        groups[lightest].append(i)
        load[lightest] += costs[i]
    return [g for g in groups if g]


class _Written:
    """Counts the files written for a `Progress`: called here as this process writes one, and
    by the writer pools' thread as another process has written one (`_written_away`)."""

    def __init__(self, progress: Progress | None, total: int):
        self.progress, self.total, self.done = progress, total, 0
        self.lock = threading.Lock()

    def __call__(self, path: Path | str) -> Path:
        path = Path(path)
        if self.progress is not None:
            with self.lock:
                self.done += 1
                self.progress(path.name, self.done, self.total)
        return path


def _written_away(future, written: _Written) -> None:
    """Tell `written` of the file a writer process's `future` wrote, as it ends (a failed one
    is written again here, and told then)."""
    def told(f) -> None:
        if not f.cancelled() and f.exception() is None:
            written(f.result())

    future.add_done_callback(told)


def _run_jobs(jobs: list[_Job], workers: int, written: _Written) -> list[Path]:
    fresh = [i for i, j in enumerate(jobs) if j.fresh]
    if workers < 2 or not fresh:
        return _run_here_or_forked(jobs, workers, written)
    return _run_beside_fresh(jobs, fresh, workers, written)


def _run_beside_fresh(jobs: list[_Job], fresh: list[int], workers: int, written: _Written) -> list[Path]:
    """The jobs shared between this process and `workers` - 1 spawned ones: the others here
    (not forked: this process may hold a large analysis' merged tables, which every forked
    writer's resident size would count again), the fresh ones wherever the load is lightest,
    here included (`_share_fresh`). The spawned writers take the jobs sent away one at a time,
    largest first (so that each written file is told to `written` as it is)."""
    groups = _share_fresh(jobs, fresh, workers)
    paths: dict[int, Path] = {}
    away = [g for g in groups[1:] if g]
    with ProcessPoolExecutor(max_workers=max(len(away), 1), mp_context=mp.get_context("spawn")) as pool:
        sent = sorted((i for g in away for i in g), key=lambda i: -jobs[i].cost_cells)
        spawned = [(i, pool.submit(jobs[i].write)) for i in sent]
        for _, future in spawned:
            _written_away(future, written)
        here = groups[0] + [i for i in range(len(jobs)) if not jobs[i].fresh]
        paths.update((i, written(jobs[i].write())) for i in sorted(here))
        for i, future in spawned:
            try:
                paths[i] = Path(future.result())
            except BrokenProcessPool:  # a writer died (killed, out of memory): write its job here
                paths[i] = written(jobs[i].write())
    return [paths[i] for i in range(len(jobs))]


def _share_fresh(jobs: list[_Job], fresh: list[int], workers: int) -> list[list[int]]:
    """The fresh jobs in `workers` groups of near-equal load, the first this process's, which
    also runs every job that is not fresh: the largest job first into the lightest group
    (`_balance`'s rule). The tables kept by a dataset's workers (`amqpcap.kept_rows`) are fresh
    and this process holds little, so it takes its share of them."""
    groups: list[list[int]] = [[] for _ in range(workers)]
    load = [sum(j.cost_cells for j in jobs if not j.fresh)] + [0] * (workers - 1)
    for i in sorted(fresh, key=lambda i: -jobs[i].cost_cells):
        lightest = load.index(min(load))
        groups[lightest].append(i)
        load[lightest] += jobs[i].cost_cells
    return groups


def _run_here_or_forked(jobs: list[_Job], workers: int, written: _Written) -> list[Path]:
    """The jobs in this process, or shared with forked writers: this process's share by
    `_balance`, the others' taken one at a time by the forked writers, largest first (so that
    each written file is told to `written` as it is)."""
    global _FORKED_JOBS
    costs = [j.cost_cells for j in jobs]
    if workers < 2 or sum(costs) < PARALLEL_MIN_CELLS or not can_fork():
        return [written(j.write()) for j in jobs]
    groups = _balance(costs, workers)
    paths: dict[int, Path] = {}
    _FORKED_JOBS = jobs
    try:
        with ProcessPoolExecutor(max_workers=len(groups) - 1, mp_context=mp.get_context("fork")) as pool:
            away = sorted((i for g in groups[1:] for i in g), key=lambda i: -costs[i])
            forked = [(i, pool.submit(_run_forked_job, i)) for i in away]
            for _, future in forked:
                _written_away(future, written)
            paths.update((i, written(jobs[i].write())) for i in groups[0])  # this process's share
            for i, future in forked:
                try:
                    paths[i] = Path(future.result())
                except BrokenProcessPool:  # a writer died (killed, out of memory): write its job here
                    paths[i] = written(jobs[i].write())
    finally:
        _FORKED_JOBS = []
    return [paths[i] for i in range(len(jobs))]


def _matplotlib():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _draw_plot(plot: Plot, path: Path) -> Path:
    plot.draw(path)
    _matplotlib().close("all")
    return path


def capture_summary(cap: Capture) -> dict[str, Any]:
    s = cap.summary
    return {
        "path": s["path"],
        "format": s["format"],
        "compressed": s["compressed"],
        "file_bytes": s["file_bytes"],
        "packets": s["packets"],
        "tcp_packets": s["tcp_packets"],
        "first_ts": s["first_ts"],
        "last_ts": s["last_ts"],
        "duration_s": (s["last_ts"] - s["first_ts"]).total_seconds() if s["first_ts"] is not None else 0.0,
        "link_types": s["link_types"],
        "connections": len(cap.connections),
        "frames": frame_count(cap),
        "anomalies": {str(k): int(n) for k, n in cap.anomalies["kind"].value_counts().items() if n},
        "warnings": s["warnings"],
        "tls": _tls_summary(cap),
        # the files read as this capture (one, or a set merged by time: docs/tables.md)
        "files": [{"name": f["name"], "format": f.get("format"), "compressed": f.get("compressed"),
                   "packets": f.get("packets"), "file_bytes": f["file_bytes"], "first_ts": f["first_ts"],
                   "last_ts": f["last_ts"], "skipped": f["error"][1] if f["error"] else None}
                  for f in s.get("files", [])],
    }


def _tls_summary(cap: Capture) -> dict[str, Any]:
    c = cap.connections
    tls = c["tls"] if "tls" in c else pd.Series([], dtype=bool)
    decrypted = c["tls_decrypted"] if "tls_decrypted" in c else pd.Series([], dtype=bool)
    return {"connections": int(tls.sum()), "decrypted": int(decrypted.sum()),
            "skipped": int((tls & ~decrypted).sum()), "keylog": cap.summary.get("tls_keylog")}


def redaction_summary(cap: Capture) -> dict[str, Any]:
    """What the outputs leave out on purpose: SASL responses and challenges (passwords),
    connection.update-secret secrets, and message bodies unless asked for (docs/summary.md)."""
    t = capture_tally(cap)
    n = lambda *methods: int(sum(t.methods.get(m, 0) for m in methods))  # noqa: E731
    return {
        "sasl_responses": n("connection.start-ok", "connection.secure-ok"),
        "sasl_challenges": n("connection.secure"),
        "update_secrets": n("connection.update-secret"),
        "bodies_kept": cap.bodies is not None,
        "body_bytes_seen": t.body_bytes_seen,
        "body_bytes_kept": t.body_bytes_kept,
    }


def bodies_for_csv(bodies: pd.DataFrame) -> pd.DataFrame:
    """CSV holds text: bodies as UTF-8, other bytes escaped (\\xNN). Parquet keeps the bytes."""
    out = bodies.copy(deep=False)
    out["body"] = body_text(bodies["body"])
    return out


def body_text(bodies) -> list[str]:
    """Message bodies (bytes) as CSV writes them: UTF-8, other bytes escaped (\\xNN)."""
    return [b.decode("utf-8", "backslashreplace") for b in bodies]


def build_summary(cap: Capture, results: list[AnalyzerResult]) -> dict[str, Any]:
    """summary.json (schema: docs/summary.md)."""
    summary: dict[str, Any] = {"capture": capture_summary(cap), "methods": method_counts(cap),
                               "redacted": redaction_summary(cap)}
    for r in results:
        summary.update(r.summary)
    findings: list[Finding] = rank([f for r in results for f in r.findings])
    summary["findings"] = [f.to_json() for f in findings]
    from .overview import overview

    summary["overview"] = overview(cap, results)
    return _jsonable(summary)


def write_summary(summary: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "summary.json"
    path.write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    return path
