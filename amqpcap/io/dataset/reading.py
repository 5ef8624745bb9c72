"""Reading a dataset back as `amqpcap.load` gives a capture: all of it, some buckets (a
partition), a slice of their time, or only what a merge needs (the outline, the records, the
facts of the whole capture); each column in `load`'s dtype."""

from __future__ import annotations

import os
from functools import lru_cache

import numpy as np
import pandas as pd

from ..load import Capture, empty_capture
from ...model.errors import CaptureError
from ...model.facts import CaptureFacts, clean_cuts, facts_from_ts
from .layout import CONNECTION_TABLES, ORDER, Location, bucket_file, from_json, location, manifest
from .writing import capture_tables

#: columns of the connections' tables that no partition step reads (no analyzer's, derivation's
#: or the tally's): a bucket is read for its steps without them (`dataset.read_partition`). On a
#: bucket of one connection of 2.1M packets they are 310 MB of its 1.05 GB of frames and packets,
#: and every selection of rows would copy them. A step that starts reading one fails on every
#: fixture of the tests that compare the merged partitions with the whole capture, which read
#: partitions this way: take the column out of this list then.
UNREAD_COLUMNS: dict[str, tuple[str, ...]] = {
    "frames": ("class_id", "method_id", "mandatory", "prefetch_size", "frame_max", "mechanism", "server_product",
               "message_count", "consumer_count", "delivery_mode", "priority", "content_type", "correlation_id",
               "reply_to", "expiration", "message_id", "message_timestamp"),
    "packets": ("tsval", "tsecr", "sack_blocks", "gap_before"),
}


@lru_cache(maxsize=1)
def _template() -> dict[str, pd.DataFrame]:
    """Empty tables with `load`'s dtypes (`amqpcap.io.load.empty_capture`'s)."""
    cap = empty_capture()
    return {**capture_tables(cap), "records": cap.records}


def _restore(df: pd.DataFrame, template: pd.DataFrame, categories: dict[str, list] | None = None) -> pd.DataFrame:
    """`load`'s dtypes: a fixed vocabulary's categories as the core lists them, observed
    strings' categories in order of first appearance (as the core interns them), or those
    given in `categories`."""
    for col in template.columns:
        want = template[col].dtype
        if isinstance(want, pd.CategoricalDtype):
            df[col] = _categories(df[col], categories[col] if categories and col in categories else want.categories)
        elif want != object and df[col].dtype != want:  # object: text, whose dtype pandas infers
            df[col] = df[col].astype(want)
    # (a selection of columns copies them all: only when they are in another order)
    return df if list(df.columns) == list(template.columns) else df[list(template.columns)]


def _categories(s: pd.Series, fixed) -> pd.Series:
    """`s` as a categorical with the `fixed` categories, or, when none are fixed, with those it
    uses in order of first appearance. Parquet dictionary columns arrive categorical already:
    only the categories are re-labelled, no value is converted."""
    if not isinstance(s.dtype, pd.CategoricalDtype):
        s = s.astype("category")
    if len(fixed):
        return s.cat.set_categories(pd.Index(fixed, dtype=object))
    codes = s.cat.codes.to_numpy()
    used = pd.unique(codes[codes >= 0])
    return s.cat.set_categories(pd.Index(s.cat.categories.to_numpy(dtype=object)[used], dtype=object))


def _to_pandas(t, template: pd.DataFrame) -> pd.DataFrame:
    """The Arrow table `t` as pandas, each column in `template`'s kind, whether or not the file
    says so (a table written by the core carries no pandas metadata): a column nullable there
    (pandas' nullable integers and booleans) is converted to that dtype directly (its integers
    with nulls would otherwise become floats, inexact past 2**53), and text to str objects with
    None for missing values, given to pandas as `load` gives them (its inference decides).

    Each column leaves `t` as it is converted, so its Arrow buffers are freed then (unless the
    pandas column shares them): a caller that keeps no reference to `t` holds the table about
    once, not twice (a bucket of one connection of 2.1M packets: its read ended with 2.3 GiB
    resident, now 1.2 GiB)."""
    import pyarrow as pa

    if t.schema.pandas_metadata is not None:
        return t.to_pandas(self_destruct=True, split_blocks=True)
    cols = {}
    while t.num_columns:
        name, col = t.column_names[0], t.column(0)
        t = t.remove_column(0)
        want = template[name].dtype if name in template else None
        if isinstance(want, (pd.core.arrays.integer.IntegerDtype, pd.BooleanDtype)):
            cols[name] = col.to_pandas(types_mapper=lambda _, want=want: want)
        elif want == object and (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
            cols[name] = pd.array(col.to_numpy(zero_copy_only=False), dtype=object)  # as `load` makes it
        else:
            cols[name] = col.to_pandas()
        del col
    pa.default_memory_pool().release_unused()  # (the freed columns, which pandas' allocator cannot reuse)
    # (not copied again: the columns are new; pandas' default copies a dict of Series)
    return pd.DataFrame(cols, copy=False)


def _read_arrow(loc: Location, name: str, buckets, loose: bool = True, columns: list[str] | None = None,
                packets: tuple[int, int | None] | None = None):
    """The table's rows in `buckets` (and, with `loose`, its rows of no connection) as one Arrow
    table, in `ORDER`, or None when no file holds any; only `columns` of it when given; only the
    rows of the packets `packets` (first, end) when given (`packet_filter`).

    The buckets are joined and sorted as Arrow tables, converted to pandas once: concatenating
    and sorting the pandas frames cost three times the Parquet read (2M packets)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    paths = [(name, *bucket_file(k)) for k in buckets]
    if loose and loc.exists("capture", f"{name}.parquet"):
        paths.append(("capture", f"{name}.parquet"))
    if not paths:
        return None
    # "permissive": a dictionary's keys are as wide as each pass's dictionary needed (int8 or
    # int16), and a table written from pandas may have text columns of Arrow type null (empty)
    where = packet_filter(name, packets)
    t = pa.concat_tables([loc.read_parquet(*p, columns=columns, filters=where) for p in paths],
                         promote_options="permissive")
    # anomalies: the order of `load` is not kept (it is neither packet nor stream order);
    # rows come back by packet, file-wide rows (no packet) first (keys are >= 0: a missing one
    # sorts as -1). A stable sort: tied rows are of one connection, so of one bucket.
    key = ORDER.get(name, "packet")
    if len(paths) > 1 and t.num_rows:
        k = pc.fill_null(t.column(key).cast("int64"), -1).to_numpy()
        t = t.unify_dictionaries().combine_chunks().take(np.argsort(k, kind="stable"))
    return t


def packet_filter(name: str, packets: tuple[int, int | None] | None):
    """The rows of table `name` that a slice of time from packet `first` up to `end` (excluded;
    None: to the end) holds, as a pyarrow filter (None: every row): those of its packets (its
    bodies: by their last packet; a row without a packet, in the first slice), as
    `amqpcap.io.pieces.time_slice` cuts a partition in memory. The files are sorted by that
    column, with its statistics (`amqpcap.io.table_files.PARQUET_STATISTICS_COLUMNS`): the row groups of
    other packets are skipped, not read."""
    if packets is None or name == "connections":
        return None
    import pyarrow.compute as pc

    first, end = packets
    column = pc.field(ORDER.get(name, "packet"))
    keep = column >= first if end is None else (column >= first) & (column < end)
    return keep | column.is_null() if first <= 0 else keep


def _read_table(loc: Location, name: str, buckets, template: pd.DataFrame, loose: bool = True,
                without: tuple[str, ...] = (), packets: tuple[int, int | None] | None = None) -> pd.DataFrame:
    """The table's rows in `buckets` (and, with `loose`, its rows of no connection), as `load`
    gives them; without the columns named in `without`; of the packets `packets` when given."""
    if without:
        template = template.drop(columns=list(without))
    held = [_read_arrow(loc, name, buckets, loose, list(template.columns) if without else None, packets)]
    if held[0] is None:
        return template.copy()
    # handed over, not kept in a name here: `_to_pandas` frees the Arrow table column by column,
    # which a reference held by this frame would prevent (a 2.1M-packet bucket's read peaked at
    # 1.54 GiB with `t = …` here, 1.28 GiB without)
    return _restore(_to_pandas(held.pop(), template), template)


def read(path: str | os.PathLike[str] | Location, buckets: list[int] | None = None,
         without: dict[str, tuple[str, ...]] | None = None, packets: tuple[int, int | None] | None = None) -> Capture:
    """The capture stored at `path`, with the tables and summary `load` gave.

    With `buckets`, only those buckets' connections (a partition of whole connections,
    `amqpcap.analysis.partition`): their tables, no `records` and none of the file's own anomalies;
    the summary stays the whole capture's. `without`: columns of each table left unread.
    `packets` (first, end), with `buckets`: a slice of their time (`packet_filter`)."""
    loc = location(path)
    m = manifest(loc)
    t = _template()
    part = buckets is not None
    if packets is not None and not part:
        raise ValueError("a slice of time is read of some buckets")
    tables = {name: _read_table(loc, name, buckets if part else range(m["buckets"]), t[name], loose=not part,
                                without=(without or {}).get(name, ()), packets=packets)
              for name in CONNECTION_TABLES if name in m["rows"]}
    for name, df in tables.items():
        if not part and len(df) != m["rows"][name]:
            raise CaptureError(f"{loc.name}: {name} has {len(df):,} rows, its manifest says {m['rows'][name]:,}")
    summary = from_json(m["summary"])
    records = t["records"].copy() if part else _records(loc, summary)
    return Capture(path=summary["path"], ports=tuple(m["ports"]), frames=tables["frames"], packets=tables["packets"],
                   connections=tables["connections"], anomalies=tables["anomalies"], records=records,
                   bodies=tables.get("bodies"), summary=summary,
                   # (a dataset written before AMQP 1.0's frames were a table has none)
                   amqp10_frames=tables["amqp10_frames"] if "amqp10_frames" in tables else t["amqp10_frames"].copy())


def read_partition(path: str | os.PathLike[str] | Location, buckets: list[int],
                   packets: tuple[int, int | None] | None = None) -> Capture:
    """The buckets' connections as the partition steps read them (`engine.bucket_step`): without
    the columns none of them reads (`UNREAD_COLUMNS`); with `packets` (first, end),
    the slice of their time from packet `first` up to `end` (`amqpcap.io.pieces.time_slice`)."""
    return read(path, buckets, without=UNREAD_COLUMNS, packets=packets)


def bucket_cuts(path: str | os.PathLike[str] | Location, bucket: int, every: int) -> list[int]:
    """Where the bucket's time may be cut into slices of about `every` of its packets
    (`amqpcap.model.facts.clean_cuts`), from its packets' packet and ts columns alone."""
    t = _read_arrow(location(path), "packets", [bucket], loose=False, columns=["packet", "ts"])
    if t is None:
        return []
    return clean_cuts(t.column("packet").to_numpy().astype(np.int64), t.column("ts").cast("int64").to_numpy(), every)


def read_outline(path: str | os.PathLike[str] | Location) -> Capture:
    """The capture's connections and anomalies tables and its summary, without packets, frames,
    bodies or records: what a merge of partition steps needs to name connections
    (`amqpcap.analysis.partition`), and what `amqpcap analyze` shows of a dataset besides the merged
    results and the buckets' tally (`amqpcap.derive.tally`). An anomaly is a row per malformed thing,
    at most `max_anomalies` per bucket."""
    loc = location(path)
    cap = read(loc, [])
    everything = range(manifest(loc)["buckets"])
    cap.connections = _read_table(loc, "connections", everything, _template()["connections"], loose=False)
    cap.anomalies = _read_table(loc, "anomalies", everything, _template()["anomalies"])
    return cap


def read_records(path: str | os.PathLike[str] | Location, columns: list[str] | None = None) -> pd.DataFrame:
    """The dataset's `records` table (every packet of the file), as `load` gave it; only
    `columns` of it when given (a row per packet: all of them take gigabytes at 100M packets)."""
    loc = location(path)
    return _records(loc, from_json(manifest(loc)["summary"]), columns)


def _records(loc: Location, summary: dict, columns: list[str] | None = None) -> pd.DataFrame:
    # source_file's categories are the capture's files, in the summary's order
    template = _template()["records"]
    if columns is not None:
        template = template[list(columns)]
    return _restore(_to_pandas(loc.read_parquet("capture", "records.parquet", columns=columns), template), template,
                    {"source_file": [f["name"] for f in summary["files"]]})


def facts(path: str | os.PathLike[str] | Location) -> CaptureFacts:
    """What every partition's step needs to know of the whole capture, read from the records' and
    the packets' timestamp columns alone (`amqpcap.io.pieces.facts_of` for an in-memory capture)."""
    import pyarrow.compute as pc

    loc = location(path)
    m = manifest(loc)
    ts = loc.read_parquet("capture", "records.parquet", columns=["ts"])["ts"]
    # the packets' first time: each bucket's ts column read alone (8 bytes a packet, one bucket at a time)
    firsts = [pc.min(loc.read_parquet("packets", *bucket_file(k), columns=["ts"])["ts"].cast("int64"))
              for k in range(m["buckets"])]
    firsts = [v.as_py() for v in firsts if v.is_valid]
    return facts_from_ts(ts.cast("int64").to_numpy(), min(firsts) if firsts else 0)
