"""A dataset's big tables written out in `load()`'s row order without being read whole (issue 13).

`amqpcap analyze DATASET --out DIR` writes the capture's own tables (`frames.csv`, `packets.csv`,
...) beside the analyzers'. Read whole, the frames of a 10M-packet capture take gigabytes; here
each bucket's Parquet file is read a batch at a time and the buckets' rows are merged by their
order key (`amqpcap.io.dataset.ORDER`: packet for packets and frames, last packet for bodies). A
packet's rows are one connection's, so of one bucket: the merge is the stable sort `read` does
of all the rows at once, and memory holds a batch per bucket.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from . import dataset

#: rows read from a bucket's file at a time
BATCH_ROWS = 65_536


@dataclass(frozen=True)
class StoredTable:
    """One table of a dataset, to be written as `amqpcap.report.outputs.write_outputs` writes a table
    held in memory (same text, same values)."""

    root: str
    name: str
    rows: int

    @property
    def size(self) -> int:
        """Cells, what a writer job is weighed by (`amqpcap.report.outputs`): a guess of 20 columns."""
        return self.rows * 20

    def write(self, path_no_ext: Path, fmt: str) -> Path:
        from .table_files import write_slices

        schema, slices = table_slices(self.root, self.name)
        if self.name == "bodies" and fmt == "csv":  # CSV holds text (`amqpcap.report.outputs.bodies_for_csv`)
            schema, slices = _bodies_as_text(schema, slices)
        return write_slices(slices, schema, path_no_ext.with_suffix("." + fmt), fmt)


def _bodies_as_text(schema, slices):
    import pyarrow as pa

    from .table_files import body_text

    i = schema.get_field_index("body")
    text = schema.set(i, pa.field("body", pa.string()))
    return text, (t.set_column(i, "body", pa.array(body_text(t.column(i).to_pylist()), pa.string())) for t in slices)


def stored_tables(root: str, names: tuple[str, ...]) -> dict[str, StoredTable]:
    """The tables `names` of the dataset at `root` that it holds, as StoredTables."""
    rows = dataset.manifest(root)["rows"]
    return {name: StoredTable(root, name, rows[name]) for name in names if name in rows}


def table_slices(root: str, name: str):
    """(schema, iterator of Arrow tables): the rows of table `name` in the order `read` gives
    them; the records table is one file, read as it is."""
    loc = dataset.location(root)
    if name == "records":
        f = _parquet(loc, "capture", "records.parquet")
        return f.schema_arrow, (_as_table(b) for b in f.iter_batches(BATCH_ROWS))
    m = dataset.manifest(loc)
    files = [_parquet(loc, name, *dataset.bucket_file(k)) for k in range(m["buckets"])]
    if loc.exists("capture", f"{name}.parquet"):
        files.append(_parquet(loc, "capture", f"{name}.parquet"))
    schema = _common_schema([f.schema_arrow for f in files])
    return schema, _merged(files, dataset.ORDER.get(name, "packet"), schema)


def _parquet(loc: dataset.Location, *parts: str):
    import pyarrow.parquet as pq

    path = loc.path(*parts)
    return pq.ParquetFile(path if loc.fs is None else loc.fs.open(path, "rb"), pre_buffer=False)


def _as_table(batch):
    import pyarrow as pa

    return pa.Table.from_batches([batch])


def _common_schema(schemas: list):
    """One schema for every bucket's rows: a text column dictionary-encoded in one bucket and
    empty (type null) in another is dictionary text in both, with 32-bit indices (a bucket's
    dictionary may need more than another's 8 bits)."""
    import pyarrow as pa

    unified = pa.unify_schemas(schemas, promote_options="permissive")
    fields = [f.with_type(pa.dictionary(pa.int32(), f.type.value_type)) if pa.types.is_dictionary(f.type) else f
              for f in unified]
    return pa.schema(fields)


class _Cursor:
    """A bucket's rows, a batch at a time: `rows` are read and not yet written."""

    def __init__(self, file, key: str, schema):
        self.batches = file.iter_batches(BATCH_ROWS)
        self.key, self.schema = key, schema
        self.rows, self.exhausted = None, False
        self.read_more()

    def read_more(self) -> None:
        import pyarrow as pa

        batch = next(self.batches, None)
        if batch is None:
            self.exhausted = True
            return
        t = pa.Table.from_batches([batch]).cast(self.schema)
        self.rows = t if self.rows is None or not self.rows.num_rows else pa.concat_tables([self.rows, t])

    def keys(self) -> np.ndarray:
        import pyarrow.compute as pc

        return pc.fill_null(self.rows.column(self.key).cast("int64"), -1).to_numpy()

    def last_key(self) -> int:
        """The key of the last row read (one value, not the column)."""
        v = self.rows.column(self.key)[-1].as_py()
        return -1 if v is None else int(v)

    def take_below(self, bound: float):
        """The rows whose key is below `bound` (a prefix: a bucket's rows are in key order)."""
        if self.rows is None:
            return None
        cut = int(np.searchsorted(self.keys(), bound, side="left")) if np.isfinite(bound) else self.rows.num_rows
        taken, self.rows = self.rows.slice(0, cut), self.rows.slice(cut)
        return taken


def _merged(files: list, key: str, schema) -> Iterator:
    """The files' rows merged by `key`: each round writes every row below the smallest last key
    read of the buckets not read to the end (rows below it are all read), then reads on in the
    bucket that set it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    cursors = [_Cursor(f, key, schema) for f in files]
    cursors = [c for c in cursors if c.rows is not None and c.rows.num_rows]
    while cursors:
        open_ = [c for c in cursors if not c.exhausted and c.rows.num_rows]
        bound = min((c.last_key() for c in open_), default=np.inf)
        pieces = [p for p in (c.take_below(bound) for c in cursors) if p is not None and p.num_rows]
        if pieces:
            t = pa.concat_tables(pieces).unify_dictionaries().combine_chunks() if len(pieces) > 1 else pieces[0]
            if len(pieces) > 1:
                k = pc.fill_null(t.column(key).cast("int64"), -1).to_numpy()
                t = t.take(np.argsort(k, kind="stable"))
            yield t
        for c in open_:
            if not c.rows.num_rows or c.last_key() == bound:
                c.read_more()
        cursors = [c for c in cursors if not (c.exhausted and not c.rows.num_rows)]
