"""Per-message tables kept where they were made: on the worker that analysed a bucket (issue 13).

An analyzer's partition step makes tables of a row per message (deliveries, ack gaps, consumer
state), which its merge used to gather from every bucket into the calling process: about 100 MB
per 740k-packet bucket, 20 GB for a 100M-packet dataset. Instead, the step `keep`s such a table:

- in one process (`amqpcap.engine.partitions.run_whole`, tests, notebooks) it stays the DataFrame;
- in a bucket task on a Dask worker that was given a store (`keeping_in`), it is written to
  ``STORE/<table>/bucket=<k>.arrow`` and the partial carries a `KeptPart` (its path and row
  count) instead.

The parts are Arrow IPC files (LZ4-compressed buffers, `_write_part`): they
live only as long as one analysis, and are written and read back once or twice each. Against
Parquet on one 100M-packet bucket's parts (104 files): written in 0.16 s instead of 0.38 s and
read back into frames in 0.17 s instead of 0.23 s, at the same size (32 MB).

The merge joins the parts with `rows_table`: a DataFrame (`amqpcap.io.rows.merge_rows`) when
they are frames, else a `KeptRows`, which reads only the columns asked of it (`columns`, in the
whole capture's row order) and writes itself bucket by bucket (`write`, the capture's own tables'
k-way merge: `amqpcap.io.stored_tables`), so that no process holds the whole table.

The store is a directory beside the dataset's buckets (``DATASET/_kept-<run>``: the leading
underscore makes Arrow, Spark and DuckDB dataset readers skip it), made and removed by the caller
of the analysis (`store`), visible to the workers as the dataset is.
"""

from __future__ import annotations

import os
import shutil
import uuid
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Union

import numpy as np
import pandas as pd

#: (store directory, bucket) of the bucket step running in this worker thread, None elsewhere
_STORE: ContextVar[tuple[str, int] | None] = ContextVar("amqpcap_kept_store", default=None)


@dataclass(frozen=True)
class KeptPart:
    """One bucket's rows of a kept table, in its Arrow IPC file."""

    path: str
    rows: int
    #: the column that orders the buckets' rows into the whole table's (`rows_table`)
    key: str
    columns: tuple[str, ...]
    #: the text columns held as Python str objects in the frame (read back as such: `_frame_of`)
    object_columns: tuple[str, ...] = ()


@contextmanager
def keeping_in(store: str | None, bucket: int) -> Iterator[None]:
    """Within it, `keep` writes to `store` as bucket `bucket`'s (nothing is kept with no store)."""
    token = _STORE.set(None if store is None else (store, bucket))
    try:
        yield
    finally:
        _STORE.reset(token)


def keep(df: pd.DataFrame, table: str, key: str, bucket: int | None = None) -> Union[pd.DataFrame, KeptPart]:
    """`df` (a partition's rows of a per-message table, in the whole table's order within the
    partition; `key`: the column ordering the partitions' rows between them, one value belonging
    to one partition) kept where it was made: written to the store as its bucket's part (or as
    `bucket`'s, for a step that makes rows of several buckets: the backlog's cells), or the
    frame itself where there is no store or no row."""
    where = _STORE.get()
    if where is None or not len(df):
        return df
    from .table_files import arrow_table

    df = _without_helpers(df)
    return _kept(arrow_table(df), _Columns.of(df), table, key, where[1] if bucket is None else bucket)


def keep_each(df: pd.DataFrame, part: np.ndarray, n: int, key: str,
              place: Callable[[int], tuple[str, int | None]]) -> list:
    """`df`'s rows of each of `n` pieces (`part`: each row's, 0 to n − 1), in their order, piece
    `i` kept as `keep(rows, *place(i))` keeps it: ``place(i)`` is its (table, bucket), the bucket
    None for this step's own. The rows are made an Arrow table once and cut: a cell of the queue
    backlogs keeps its answers as every bucket's, and making each bucket's rows a table of its
    own was half of a cell's time (40 buckets of the 100M-packet dataset: 2.2 s of 26 cells'
    4.7 s); a bucket's context step keeps its events as every cell's."""
    if n == 1:
        table, bucket = place(0)
        return [keep(df, table, key, bucket)]
    order = np.argsort(part, kind="stable")
    bounds = np.searchsorted(part[order], np.arange(n + 1))
    df = df.iloc[order].reset_index(drop=True)
    where = _STORE.get()
    if where is None:
        return [df.iloc[lo:hi].reset_index(drop=True) for lo, hi in zip(bounds[:-1], bounds[1:])]
    from .table_files import arrow_table

    empty = df.iloc[:0]
    df = _without_helpers(df)
    t, columns = arrow_table(df), _Columns.of(df)

    def kept(i: int, lo: int, hi: int) -> KeptPart:
        table, bucket = place(i)
        return _kept(t.slice(lo, hi - lo), columns, table, key, where[1] if bucket is None else bucket)

    return [kept(i, lo, hi) if hi > lo else empty for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:]))]


def _without_helpers(df: pd.DataFrame) -> pd.DataFrame:
    """`df` without the helper columns of `merge_rows`' key (named ``_…``): not kept."""
    helpers = [c for c in df.columns if c.startswith("_")]
    return df.drop(columns=helpers) if helpers else df


@dataclass(frozen=True)
class _Columns:
    """A kept frame's columns, and those of them that hold text as str objects."""

    names: tuple[str, ...]
    objects: tuple[str, ...]

    @staticmethod
    def of(df: pd.DataFrame) -> "_Columns":
        return _Columns(tuple(df.columns), tuple(c for c in df.columns if df[c].dtype == object))


def _kept(t, columns: _Columns, table: str, key: str, bucket: int) -> KeptPart:
    """The Arrow table `t` (rows of a frame of `columns`, made by the report's own conversion, so
    that the part reads back as the frame would have been written: categoricals as dictionaries,
    tz-aware timestamps, nullable ints) written to the store as `bucket`'s part of `table`."""
    store, _ = _STORE.get()
    folder = os.path.join(store, table)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"bucket={bucket}.arrow")
    # under another name first, so that a task run again after its worker died replaces a
    # whole file, never a half-written one
    partial = f"{path}.{uuid.uuid4().hex[:8]}.partial"
    _write_part(t, partial)
    os.replace(partial, path)
    return KeptPart(path, t.num_rows, key, columns.names, columns.objects)


def rows_table(parts: list, key: list[str]) -> Union[pd.DataFrame, "KeptRows"]:
    """The partitions' rows of one table as the whole capture's: a DataFrame when no part was
    kept on a worker (`merge_rows` by `key`), else the `KeptRows` of the parts (merged by the
    column each was kept with, `keep`'s `key`; a partition's empty frame holds no row)."""
    from ..io.rows import merge_rows

    kept = [p for p in parts if isinstance(p, KeptPart)]
    if not kept:
        return merge_rows(parts, key)
    if any(isinstance(p, pd.DataFrame) and len(p) for p in parts):  # `keep` keeps every non-empty one
        raise ValueError("a table's rows are both kept on the workers and held here")
    return KeptRows(kept)


@dataclass(frozen=True)
class KeptRows:
    """A per-message table whose rows stay in the buckets' files (`keep`)."""

    parts: list[KeptPart]

    def __len__(self) -> int:
        return sum(p.rows for p in self.parts)

    @property
    def columns(self) -> list[str]:
        return list(self.parts[0].columns)

    @property
    def size(self) -> int:
        """Cells, what a writer job is weighed by (`amqpcap.report.outputs`)."""
        return len(self) * len(self.parts[0].columns)

    def read(self, columns: list[str] | None = None) -> pd.DataFrame:
        """The table (or only `columns` of it) as the whole capture's, in its row order."""
        import pyarrow as pa
        import pyarrow.compute as pc

        from .stored_tables import _common_schema

        key = self.parts[0].key
        wanted = list(self.parts[0].columns) if columns is None else list(columns)
        read = wanted if key in wanted else [*wanted, key]
        tables = [_read_part(p.path, read) for p in self.parts]
        # (pandas' metadata kept: it gives back the frame's nullable integers)
        schema = _common_schema([x.schema for x in tables]).with_metadata(tables[0].schema.metadata)
        t = pa.concat_tables([x.cast(schema) for x in tables])
        del tables
        order = np.argsort(pc.fill_null(t.column(key).cast("int64"), -1).to_numpy(), kind="stable")
        return _frame_of(t.take(order).select(wanted), self.parts[0].object_columns)

    def write(self, path_no_ext: Path, fmt: str) -> Path:
        """As `amqpcap.io.table_files.write_table` writes the table held in memory (same text, same
        values), a batch per bucket in memory at a time."""
        from .table_files import write_slices
        from .stored_tables import _common_schema, _merged

        files = [_PartFile(p.path) for p in self.parts]
        # (pandas' metadata kept, as the frame written from memory has it: readers get back its
        # nullable integers)
        schema = _common_schema([f.schema_arrow for f in files]).with_metadata(files[0].schema_arrow.metadata)
        return write_slices(_merged(files, self.parts[0].key, schema), schema, path_no_ext.with_suffix("." + fmt), fmt)


def part_frame(part: Union[pd.DataFrame, KeptPart]) -> pd.DataFrame:
    """One part as it was kept (`keep`): the frame itself, or its file read back."""
    if isinstance(part, pd.DataFrame):
        return part
    return _frame_of(_read_part(part.path), part.object_columns)


def _write_part(t, path: str) -> None:
    """The Arrow table `t` as a kept part's file (Arrow IPC, LZ4-compressed buffers), in record
    batches of the rows `KeptRows.write` reads of a bucket at a time (`stored_tables.BATCH_ROWS`,
    as it reads the capture's own tables)."""
    import pyarrow as pa

    from .stored_tables import BATCH_ROWS

    options = pa.ipc.IpcWriteOptions(compression="lz4")
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, t.schema, options=options) as writer:
        writer.write_table(t, max_chunksize=BATCH_ROWS)


class _PartFile:
    """A kept part's file read a batch at a time, as `amqpcap.io.stored_tables` reads a bucket's
    Parquet file (``schema_arrow``, ``iter_batches``)."""

    def __init__(self, path: str) -> None:
        import pyarrow as pa

        self._reader = pa.ipc.open_file(pa.memory_map(path))
        self.schema_arrow = self._reader.schema

    def iter_batches(self, rows: int) -> Iterator:
        for i in range(self._reader.num_record_batches):
            batch = self._reader.get_batch(i)
            for start in range(0, batch.num_rows, rows):
                yield batch.slice(start, rows)


def parts_together(parts: list) -> tuple[pd.DataFrame, np.ndarray]:
    """Several partitions' parts of one kept table (each a frame or a `KeptPart`, in partition
    order) as one frame, their rows in that order, a categorical over every part's categories;
    and each part's row count. The parts are joined as Arrow tables and made a frame once: a cell
    of the queue backlogs reads three parts of every bucket, and making each its own frame took
    0.9 ms (half of the cells' reading, on 40 buckets of the 100M-packet dataset)."""
    import pyarrow as pa

    from .table_files import arrow_table

    rows = np.array([len(p) if isinstance(p, pd.DataFrame) else p.rows for p in parts], np.int64)
    full = [p for p, n in zip(parts, rows) if n]
    if not full:  # (only an empty frame: `keep` writes no file of no row)
        return parts[0], rows
    if len(full) == 1 and isinstance(full[0], pd.DataFrame):
        return full[0].reset_index(drop=True), rows
    tables = [arrow_table(p) if isinstance(p, pd.DataFrame) else _read_part(p.path) for p in full]
    # "permissive": a part's dictionary keys are as wide as its own categories needed
    t = pa.concat_tables(tables, promote_options="permissive").unify_dictionaries().combine_chunks()
    first = full[0]
    return _frame_of(t, _Columns.of(first).objects if isinstance(first, pd.DataFrame) else first.object_columns), rows


def _read_part(path: str, columns: list[str] | None = None):
    """A kept part's file as an Arrow table (only `columns` of it when given: the others are
    not decompressed)."""
    import pyarrow as pa

    source = pa.memory_map(path)
    if columns is None:
        return pa.ipc.open_file(source).read_all()
    names = pa.ipc.open_file(source).schema.names
    fields = [names.index(c) for c in columns]
    t = pa.ipc.open_file(source, options=pa.ipc.IpcReadOptions(included_fields=sorted(fields))).read_all()
    return t.select(columns)


def _frame_of(t, object_columns: tuple[str, ...]) -> pd.DataFrame:
    """Kept rows read back (an Arrow table) as the frame they were kept from: its pandas
    metadata gives back nullable integers, categoricals and time zones, and the text columns
    held as str objects are made so again (pandas would make them its own string dtype)."""
    df = t.to_pandas()
    if not any(c in df.columns for c in object_columns):
        return df
    # (a frame made anew: assigning an object column to a frame lets pandas make it its str dtype)
    return pd.DataFrame({c: pd.Series(t.column(c).to_numpy(zero_copy_only=False), dtype=object, index=df.index)
                         if c in object_columns else df[c] for c in df.columns}, index=df.index)


def top_rows(table: Union[pd.DataFrame, KeptRows], n: int, by: str | None = None, largest: bool = True) -> pd.DataFrame:
    """The first `n` rows of a merged table, or the `n` with the largest (smallest) `by` (ties:
    the earlier row), as pandas' head / nlargest / nsmallest give them on the whole table. Of
    kept rows, each bucket's own `n` are the candidates (a row among the whole's first `n` is
    among its bucket's), read a bucket at a time."""
    def pick(df: pd.DataFrame) -> pd.DataFrame:
        if by is None:
            return df.head(n)
        return df.nlargest(n, by) if largest else df.nsmallest(n, by)

    if isinstance(table, pd.DataFrame):
        return pick(table)
    key = table.parts[0].key
    found = pd.concat([pick(part_frame(p)) for p in table.parts], ignore_index=True)
    return pick(found.sort_values(key, kind="stable").reset_index(drop=True))


def columns(table: Union[pd.DataFrame, KeptRows], names: list[str]) -> pd.DataFrame:
    """`names` of a merged table (`rows_table`), whether held here or kept on the workers."""
    return table[names] if isinstance(table, pd.DataFrame) else table.read(names)


def part_columns(table: Union[pd.DataFrame, KeptRows], names: list[str]) -> Iterator[pd.DataFrame]:
    """`names` of a merged table a part at a time, the parts in no particular order: the frame
    held here, or each bucket's kept file (what a sum or `amqpcap.derive.quantiles` reads, never the
    whole column at once)."""
    if isinstance(table, pd.DataFrame):
        yield table[names]
        return
    for p in table.parts:
        yield _frame_of(_read_part(p.path, names), p.object_columns)


def frame(table: Union[pd.DataFrame, KeptRows]) -> pd.DataFrame:
    """The whole table as a DataFrame (what a notebook or a test reads)."""
    return table if isinstance(table, pd.DataFrame) else table.read()


@contextmanager
def store(dataset_path: str | os.PathLike[str]) -> Iterator[str | None]:
    """A store for the kept rows of one analysis of the dataset at `dataset_path`, removed on
    exit; None (rows come back to the merge, as in one process) when the dataset is not a local
    directory this process can write into (an fsspec URL, a read-only directory)."""
    from .dataset import is_url

    if is_url(dataset_path):
        yield None
        return
    path = Path(dataset_path).resolve() / f"_kept-{uuid.uuid4().hex[:12]}"
    try:
        path.mkdir()
    except OSError:
        yield None
        return
    try:
        yield str(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)
