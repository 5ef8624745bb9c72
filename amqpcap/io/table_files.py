"""Tables into files, CSV or Parquet, straight from Arrow (pandas' writers are not used): a
pandas frame or Arrow batches as they come (the core's rows as they settle), a slice at a time;
the checks made before any work; how every Parquet file amqpcap writes is encoded."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..model.errors import UsageError

# (numpy, pandas and the text formats are imported where used: `amqpcap frames -o X.parquet`
# starts its decode without waiting for pandas' import)
if TYPE_CHECKING:
    import pandas as pd

FORMATS = ("csv", "parquet")

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

#: rows of a batch of frames that the core hands to `amqpcap frames -o` while it decodes (each
#: a row group of its Parquet file, a run of CSV slices): the writer starts once that many rows
#: are decoded, and after the decode ends only the last batch is left to write. On 7 copies of
#: `fixtures/flow-control.pcap.gz` (2.9M frames), `frames -o X.parquet` took 2.5-2.9 s and
#: peaked at 0.36 GB in batches of 2^18 rows, against 3.2-3.7 s and 0.66 GB in batches of
#: 2^20 (four runs each, alternating); writing that table took as long in row groups of 2^18
#: rows as of 2^20 (1.12 s; 2^17: 1.18 s) into a 1% larger file.
STREAMED_FRAMES_BATCH_ROWS = 1 << 18

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
    import numpy as np
    import pyarrow as pa

    from ..model.written_values import iso_utc_arrow

    t = _clean_floats(t)
    columns = list(t.columns)
    for i, col in enumerate(t.columns):
        if pa.types.is_timestamp(col.type):
            ns = _nanoseconds(col).cast(pa.int64()).fill_null(np.iinfo(np.int64).min)
            columns[i] = iso_utc_arrow(ns.to_numpy().view("datetime64[ns]"))  # the minimum is NaT: null
    return pa.table(columns, names=t.column_names)


def _nanoseconds(col):
    """A timestamp column in nanoseconds (in its time zone)."""
    import pyarrow as pa

    return col.cast(pa.timestamp("ns", tz=col.type.tz))


def _clean_floats(t):
    """The Arrow table `t` with its float columns as every text output writes them (`clean_floats`)."""
    import numpy as np
    import pyarrow as pa

    if not any(pa.types.is_floating(f.type) for f in t.schema):
        # (`written_values` imports pandas: `amqpcap frames -o X.csv` does not need it)
        return t if isinstance(t, pa.Table) else pa.Table.from_batches([t])
    from ..model.written_values import clean_floats

    columns = list(t.columns)
    for i, (name, col) in enumerate(zip(t.column_names, t.columns)):
        if pa.types.is_floating(col.type):
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
    return write_slices(slices, schema, path, fmt)


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
            # (the file still has its columns: a CSV header; `Schema.empty_table` imports pandas)
            yield pa.Table.from_batches([], schema=t.schema)

    write_slices(slices(), t.schema, path, fmt)
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
    written by the core (`rust/src/output/csv_out.rs`: pyarrow's text, in a third of its time on the
    frames table), or by pyarrow when a column is of a type the core does not write."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    text = csv_text_by_core(_clean_floats(t), header)
    if text is not None:
        return text
    sink = pa.BufferOutputStream()
    pcsv.write_csv(as_csv_columns(t), sink, pcsv.WriteOptions(include_header=header))
    return sink.getvalue()


def csv_text_by_core(t, header: bool) -> bytes | None:
    """The CSV text of the Arrow table `t` of text, integer, boolean, float and timestamp
    columns, as pyarrow's CSV writer writes it once `as_csv_columns` has made timestamps text,
    written by the core (`rust/src/output/csv_out.rs`, which makes them text itself); None when a
    column is of another type. Floats are made text by Arrow's own cast, which writes what its
    CSV writer writes (the core writes that text unquoted)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from .. import _core

    raw = [i for i, f in enumerate(t.schema) if pa.types.is_floating(f.type)]
    for i in raw:
        t = t.set_column(i, t.field(i).name, pc.cast(t.column(i), pa.string()))
    for i, f in enumerate(t.schema):
        if pa.types.is_timestamp(f.type) and f.type.unit != "ns":
            t = t.set_column(i, f.name, _nanoseconds(t.column(i)))
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


def write_slices(slices, schema, path: Path, fmt: str) -> Path:
    """The Arrow tables or record batches `slices`, all of `schema`, one after the other into the
    file `path`: CSV (`_csv_texts`) or Parquet (`parquet_options`)."""
    import pyarrow.parquet as pq

    check_format(fmt)
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


def body_text(bodies) -> list[str]:
    """Message bodies (bytes) as CSV writes them: UTF-8, other bytes escaped (\\xNN)."""
    return [b.decode("utf-8", "backslashreplace") for b in bodies]
