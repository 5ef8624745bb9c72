"""A capture stored as a Parquet dataset partitioned by connection (docs/dataset.md).

`write` stores a decoded capture; `read` gives back the same `Capture` as `amqpcap.load`
gave. Each connection's rows (its `connections` row, packets, frames, anomalies and bodies)
are in one bucket, `bucket_of(stream)`, so that a bucket can be analysed on its own; rows of
no connection (`records`, anomalies of the file) are in `capture/`. `manifest.json` is written
last, atomically: a directory without it is an ingest that did not finish, and is refused.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import shutil
import struct
import tempfile
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from . import __version__
from .capture import Capture
from .errors import AmqpcapError, CaptureError
from .partition import UNREAD_COLUMNS, CaptureFacts, clean_cuts, facts_from_ts, release_freed_memory
from .table_files import parquet_options

FORMAT = "amqpcap-dataset"
VERSION = 1
MANIFEST = "manifest.json"
#: tables whose rows belong to one connection (`stream`), stored in `<table>/bucket=<k>/`
CONNECTION_TABLES = ("connections", "packets", "frames", "anomalies", "bodies")
#: rows of the capture as a whole, stored in `capture/<table>.parquet`
CAPTURE_TABLES = ("records", "anomalies")
#: a bucket holds about this much of the capture (file bytes), at most `MAX_BUCKETS` buckets.
#: `ingest` holds two buckets' tables at once (`_buckets_in_turn`): 10M packets of PerfTest (1.8
#: GB) in 7 buckets peaked at 1.43 GB, in 14 at 0.88 GB, in 10.9 s against 11.0 s
BUCKET_TARGET_BYTES = 128 << 20
MAX_BUCKETS = 1024
#: where `ingest` spills the capture's packets by bucket while it runs (removed at the end)
SPILL_DIR = ".spill"
#: how rows are put back in `load` order: the sort key, stable (ties stay in bucket order,
#: and tied rows are of one connection, so of one bucket)
ORDER = {"connections": "stream", "packets": "packet", "frames": "packet", "bodies": "last_packet"}


class DatasetError(AmqpcapError):
    """The dataset cannot be written or read (incomplete, another format, disk full)."""

    exit_code = 2


def bucket_file(k: int) -> tuple[str, str]:
    """Where a table's rows of bucket `k` are, under the table's directory (docs/dataset.md)."""
    return f"bucket={k}", "part-0.parquet"


def default_buckets(file_bytes: int) -> int:
    return max(1, min(MAX_BUCKETS, math.ceil(file_bytes / BUCKET_TARGET_BYTES)))


def bucket_of(stream: np.ndarray, buckets: int) -> np.ndarray:
    """The bucket of each stream number: Fibonacci hashing (the golden-ratio multiplier, top
    32 bits), so that a run of consecutive streams (a burst of short connections) spreads over
    the buckets instead of filling them in turn. Defined once, in the core (rust/src/partition.rs),
    which also decodes a pass's buckets by it."""
    from . import _core

    return _core.bucket_of(np.ascontiguousarray(stream, dtype=np.int64), buckets)


def bucket_packets(connections: pd.DataFrame, buckets: int) -> np.ndarray:
    """The packets of each bucket's connections (their `c2s_packets` and `s2c_packets`), from
    the capture's connections table."""
    bucket = bucket_of(connections["stream"].to_numpy(), buckets)
    packets = (connections["c2s_packets"] + connections["s2c_packets"]).to_numpy(np.int64)
    return np.bincount(bucket, weights=packets, minlength=buckets).astype(np.int64)


def is_url(path: str | os.PathLike[str]) -> bool:
    """`path` is a URL (``scheme://...``: an fsspec filesystem), not a local path."""
    return re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", os.fspath(path)) is not None


@dataclass(frozen=True)
class Location:
    """Where a dataset is read from: a local (or mounted) directory, or an fsspec URL
    (``s3://bucket/ring.dataset``, ``file:///shared/ring.dataset``, any filesystem fsspec has an
    implementation of, installed), so that the workers of a cluster sharing no directory read
    it there. Written datasets are local: `ingest` writes a directory (copy it up after)."""

    #: the fsspec filesystem, None for a local path
    fs: Any
    root: str
    #: how it was named (the URL or the path), for messages and for the workers
    name: str

    def path(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts]) if self.fs is not None else os.path.join(self.root, *parts)

    def exists(self, *parts: str) -> bool:
        return self.fs.exists(self.path(*parts)) if self.fs is not None else os.path.exists(self.path(*parts))

    def is_dir(self, *parts: str) -> bool:
        return self.fs.isdir(self.path(*parts)) if self.fs is not None else os.path.isdir(self.path(*parts))

    def read_text(self, *parts: str) -> str:
        if self.fs is None:
            return Path(self.path(*parts)).read_text()
        with self.fs.open(self.path(*parts), "rt") as f:
            return f.read()

    def read_parquet(self, *parts: str, columns: list[str] | None = None, filters=None):
        import pyarrow.parquet as pq

        return pq.read_table(self.path(*parts), columns=columns, partitioning=None, filesystem=self.fs,
                             filters=filters)

    def stamp(self) -> str:
        """What changes when the dataset is written again: its manifest's identity."""
        if self.fs is None:
            return str(os.stat(self.path(MANIFEST)).st_mtime_ns)
        return str(self.fs.ukey(self.path(MANIFEST)))


def location(path: str | os.PathLike[str] | Location) -> Location:
    """The `Location` of a dataset named by a local path or an fsspec URL."""
    if isinstance(path, Location):
        return path
    name = os.fspath(path)
    if not is_url(name):
        return Location(None, name, name)
    try:
        import fsspec

        fs, root = fsspec.core.url_to_fs(name)
    except (ImportError, ValueError) as e:  # no implementation of the scheme, a bad URL
        raise DatasetError(f"cannot read {name}: {e}") from None
    return Location(fs, root, name)


def is_dataset(path: str | os.PathLike[str]) -> bool:
    """A directory (or URL) written by `write` or `ingest` (finished or not)."""
    loc = location(path)
    try:
        return loc.is_dir() and (loc.exists(MANIFEST) or loc.is_dir("capture"))
    except OSError:
        return False


# --- writing ---------------------------------------------------------------------------------


def _json_value(v: Any) -> Any:
    if isinstance(v, pd.Timestamp):
        return {"ts_ns": int(v.value)}
    if isinstance(v, dict):
        return {k: _json_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_value(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


def _from_json(v: Any) -> Any:
    if isinstance(v, dict):
        if set(v) == {"ts_ns"}:
            return pd.Timestamp(v["ts_ns"], unit="ns", tz="UTC")
        return {k: _from_json(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_from_json(x) for x in v]
    return v


#: Parquet files written at once (pyarrow releases the GIL while encoding). Two: on the 2-core
#: machine four were slower (7.6 s against 5.8 s for 2M packets) and held more buckets at once
WRITE_THREADS = 2


def _write_arrow(t, path: Path) -> None:
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(t, path, **parquet_options(t.schema))


def _write_buckets(t, buckets: int, kept: list[int], root: Path, pool) -> list:
    """Submit the writes of the Arrow table `t`'s rows of connections to `pool`, bucket by bucket
    for the `kept` buckets (every bucket has every table, empty or not: a reader needs no
    listing). The writing threads share `t` (immutable); each write selects its bucket's rows
    itself, so only the buckets being written are copied at a time (ordering the whole table by
    bucket first cost 50% more peak memory)."""
    b = bucket_of(t.column("stream").to_numpy(), buckets)
    return [pool.submit(_write_bucket, t, b, k, root.joinpath(*bucket_file(k))) for k in kept]


def _write_bucket(t, bucket: np.ndarray, k: int, path: Path) -> None:
    mine = bucket == k
    _write_arrow(t if mine.all() else t.filter(mine), path)  # (one bucket: no copy)


def _tables(cap: Capture) -> dict[str, pd.DataFrame]:
    out = {"connections": cap.connections, "packets": cap.packets, "frames": cap.frames, "anomalies": cap.anomalies}
    if cap.bodies is not None:
        out["bodies"] = cap.bodies
    return out


def _arrow(df: pd.DataFrame):
    import pyarrow as pa

    return pa.Table.from_pandas(df, preserve_index=False)


def _new_directory(out: str | os.PathLike[str]) -> Path:
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DatasetError(f"cannot write the dataset into {out}: it exists and is not an empty directory")
    return out


@contextmanager
def _writing(out: Path):
    """A failed write (a full disk) is one error; the directory stays without a manifest."""
    try:
        yield
    except OSError as e:
        raise DatasetError(f"cannot write the dataset into {out}: {e.strerror or e} (it is left incomplete: "
                           f"no {MANIFEST})") from None


def _write_connections(tables: dict, out: Path, buckets: int, kept: list[int]) -> tuple[dict[str, int], dict]:
    """Write the rows of connections of the Arrow `tables` into the `kept` buckets. Returns the
    rows written per table and the rows of no connection per table (written once, by
    `_write_loose`)."""
    import pyarrow.compute as pc

    rows: dict[str, int] = {}
    loose: dict = {}
    with ThreadPoolExecutor(WRITE_THREADS, thread_name_prefix="amqpcap-parquet") as pool:
        for name in list(tables):
            t = tables.pop(name)  # (released once written: one table's copies alive at once)
            own = pc.is_valid(t.column("stream"))
            n_own = pc.sum(own).as_py() or 0
            if n_own < t.num_rows:
                loose[name] = t.filter(pc.invert(own))
                t = t.filter(own)
            for w in _write_buckets(t, buckets, kept, out / name, pool):
                w.result()  # (a write's error, a full disk, is raised here)
            rows[name] = n_own
    return rows, loose


def _write_loose(out: Path, loose: dict[str, list]) -> dict[str, int]:
    """Write the rows of no connection of each table (`capture/<table>.parquet`), if any."""
    import pyarrow as pa

    rows = {}
    for name, parts in loose.items():
        t = pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else parts[0]
        if t.num_rows:
            _write_arrow(t, out / "capture" / f"{name}.parquet")
            rows[name] = t.num_rows
    return rows


def _write_manifest(out: Path, buckets: int, ports, rows: dict[str, int], summary: dict) -> None:
    manifest = {"format": FORMAT, "version": VERSION, "amqpcap": __version__, "buckets": buckets,
                "ports": list(ports), "rows": rows, "summary": _json_value(summary)}
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, out / MANIFEST)  # last: only a finished dataset has a manifest


def _add(total: dict[str, int], rows: dict[str, int]) -> None:
    for name, n in rows.items():
        total[name] = total.get(name, 0) + n


def write(cap: Capture, out: str | os.PathLike[str], buckets: int | None = None) -> Path:
    """Store `cap` as a dataset in the directory `out` (new, or empty). Returns its path."""
    out = _new_directory(out)
    buckets = buckets or default_buckets(int(cap.summary.get("file_bytes") or 0))
    with _writing(out):
        # capture/ first: from then on the directory is recognised as a dataset (`is_dataset`),
        # unfinished until the manifest is written
        (out / "capture").mkdir(parents=True)
        _write_arrow(_arrow(cap.records), out / "capture" / "records.parquet")
        rows, loose = _write_connections({name: _arrow(df) for name, df in _tables(cap).items()}, out, buckets,
                                         list(range(buckets)))
        rows["records"] = len(cap.records)
        _add(rows, _write_loose(out, {name: [df] for name, df in loose.items()}))
        _write_manifest(out, buckets, cap.ports, rows, cap.summary)
    return out


@dataclass
class Ingested:
    """What `ingest` wrote: the dataset, its summary (as `load` gives it), its connections'
    count, the anomalies of every step (kind, stream, bytes, detail) and its buckets."""

    path: Path
    summary: dict
    connections: int
    anomalies: pd.DataFrame
    buckets: int


@dataclass
class StepResult:
    """What one step of `ingest` wrote (the split, or the decode of a bucket) and what the end
    of the ingest needs from it."""

    rows: dict[str, int]
    #: its rows of no connection, per table, as Arrow tables (written once all steps are done)
    loose: dict
    summary: dict
    ports: tuple[int, ...]
    #: its connections' `stream`, `tls`, `tls_decrypted` and `protocol` (the summary's warnings
    #: about TLS and AMQP 1.0 count all connections)
    connections: pd.DataFrame
    #: its anomalies' kind, stream, bytes and detail (for the command's one-line account)
    anomalies: pd.DataFrame
    #: the split only: each bucket's spilled (packets, captured bytes)
    spilled: list[tuple[int, int]] | None = None


def spill_path(out: str | os.PathLike[str], k: int) -> Path:
    """The spill file of bucket `k` of the dataset being written at `out` (named by the core,
    which writes it)."""
    from . import _core

    return Path(_core.spill_path(str(Path(out) / SPILL_DIR), k))


def split(capture, out: str | os.PathLike[str], buckets: int, load_args: dict,
          progress: Callable[[int, int, int], None] | None = None) -> StepResult:
    """The first step of `ingest`: read the capture once, write the rows of no connection
    (`capture/records.parquet` a batch at a time as the core reads, the file's anomalies kept
    for the end), and spill every TCP packet of a possible AMQP connection into its bucket's
    spill file (`rust/src/spill.rs`), numbered as a whole decode numbers packets and streams."""
    d = _decode_writing_records(capture, Path(out), load_args, progress, spill=(str(Path(out) / SPILL_DIR), buckets))
    return _store(d, out, buckets, [])


def ingest_bucket(out: str | os.PathLike[str], buckets: int, k: int, capture_records: int, load_args: dict,
                  packets: int = 0) -> StepResult:
    """Decode bucket `k` from its spill file (in this process or on a Dask worker) and write its
    tables; the spill file is removed once they are written. `packets`: the packets spilled into
    it, which decide how its frames are written (`FRAMES_STREAM_MIN_PACKETS`; 0: not known)."""
    return _store_bucket(_decode_bucket(out, buckets, k, capture_records, load_args, packets), out, buckets, k)


#: a bucket of more packets than this has its frames written to its Parquet file as they
#: settle, while it is still decoded in another thread (`amqpcap.capture.decode_spilled`'s
#: ``frames_sink``, `table_files.batches_from_sink`): the decode never holds a long connection's frames
#: whole. The ingest of the long-connection recording of `fixtures/record/record.sh` (its
#: consumer's bucket: 2.13M packets, 6.4M frames) peaked at 0.54-0.57 GiB in 5.9-6.9 s, against
#: 0.93-0.94 GiB in 9.4-10.9 s with the frames made into Arrow a batch at a time after the decode
#: (4dc7b7c; three runs each, alternating). A smaller bucket's frames are made whole, as its other tables: the next
#: bucket's decode, ahead, then includes them (`_buckets_in_turn`); with every bucket's frames
#: written as they settle (in the decoding thread), the 10M-packet ingest (15 buckets of about
#: 0.7M packets) took 19.1-19.9 s against 13.0-13.6 s.
FRAMES_STREAM_MIN_PACKETS = 1 << 20

#: rows of a batch of those frames, and of a row group of their file. Three batches are held at
#: once (being made, waiting, being written): in batches of 2^20 rows the recording's ingest
#: peaked at 0.98-0.99 GiB instead of 0.55-0.59 GiB (two runs each).
FRAMES_BATCH_ROWS = 1 << 18


def _decode_bucket(out, buckets: int, k: int, capture_records: int, load_args: dict, packets: int):
    """Bucket `k` (of `packets` packets) decoded from its spill file; a large bucket's frames
    written to their file while it decodes (in this thread; the decode runs in another), counted
    in ``written``."""
    from .capture import decode_spilled
    from .table_files import batches_from_sink, write_arrow_file

    decode = functools.partial(decode_spilled, spill_path(out, k), capture_records, **load_args)
    if packets <= FRAMES_STREAM_MIN_PACKETS:
        return decode()
    reader, finished = batches_from_sink(lambda sink: decode(frames_sink=sink, frames_batch_rows=FRAMES_BATCH_ROWS))
    path = Path(out, "frames").joinpath(*bucket_file(k))
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        rows = write_arrow_file(reader, path, "parquet")
    finally:
        d = finished()  # (after a failed write: once the decode has ended, its batches dropped)
    d.written = {"frames": rows}
    return d


def _store_bucket(d, out, buckets: int, k: int) -> StepResult:
    """Write the decoded bucket `k`'s tables and remove its spill file."""
    result = _store(d, out, buckets, [k])
    spill_path(out, k).unlink()
    # the tables were allocated by a decoding thread and freed after the writers' threads were
    # done with them: glibc keeps such memory in its per-thread arenas (measured: the ingest of
    # a 135-bucket ring grew by about 3.7 MB a bucket, to 1.5 GiB, without this)
    release_freed_memory()
    return result


def _ingest_whole(capture, out: Path, buckets: int, load_args: dict, progress) -> StepResult:
    """`ingest` of a capture of one bucket, or with a TLS key log: one decode of the whole
    capture, nothing spilled (a spill would only be read back whole; with a key log, tshark
    decrypts the connections of a decode and the capture is decoded again with their plaintext,
    so its records are written at the end)."""
    d = _decode_writing_records(capture, out, load_args, progress)
    return _store(d, out, buckets, list(range(buckets)))


def _decode_writing_records(capture, out: Path, load_args: dict, progress, **decode_args):
    """`decode_arrow` of the capture, its `records` written to `capture/records.parquet` a batch
    at a time while the core reads (with a key log, where the capture is decoded twice: at the
    end). Returns the decode (its ``written`` counts the records)."""
    from .capture import decode_arrow

    records = _BatchFile(out / "capture" / "records.parquet")
    streamed = load_args.get("tls_keylog") is None
    try:
        d = decode_arrow(capture, progress=progress, **load_args, records_sink=records.write if streamed else None,
                         **decode_args)
        records.write(d.tables.pop("records"))
    finally:
        records.close()
    d.written = {"records": records.rows}
    return d


def _store(d, out, buckets: int, kept: list[int]) -> StepResult:
    """Write the connections' tables of the decode `d` into the `kept` buckets of `out` (its rows
    of no connection are kept for the end; its tables written while it decoded are counted in
    ``d.written``); what the end of the ingest needs of the step."""
    anomalies = d.anomaly_rows()
    spilled = d.tables.pop("spilled", None)
    tables = {name: d.tables[name] for name in CONNECTION_TABLES if d.tables.get(name) is not None}
    d.tables.clear()
    rows, loose = _write_connections(tables, Path(out), buckets, kept)
    rows.update(d.written)
    return StepResult(rows, loose, d.summary, d.ports, d.connections[["stream", "tls", "tls_decrypted", "protocol"]],
                      anomalies, spilled)


class _BatchFile:
    """A Parquet file written a batch (a row group) at a time, as the core hands the rows over
    (`decode_arrow`'s ``records_sink``); a file of no batch is not written."""

    def __init__(self, path: Path):
        self.path, self.rows, self._writer = path, 0, None

    def write(self, batch) -> None:
        import pyarrow.parquet as pq

        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(self.path, batch.schema, **parquet_options(batch.schema))
        if batch.num_rows:
            self._writer.write(batch)
            self.rows += batch.num_rows

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


#: runs `ingest_bucket` over a list of argument tuples, giving the results in any order
BucketRunner = Callable[[Callable[..., StepResult], list[tuple]], list[StepResult]]


def ingest(capture, out: str | os.PathLike[str], *, buckets: int | None = None,
           progress: Callable[[int, int, int], None] | None = None, run_buckets: BucketRunner | None = None,
           **load_args: Any) -> Ingested:
    """Decode `capture` (what `amqpcap.load` accepts) into a dataset at `out`, reading it once:
    `split` numbers its packets and connections and spills each connection's packets into its
    bucket's file, then each bucket is decoded on its own (`ingest_bucket`), so memory holds one
    bucket's rows, not the whole capture's. A capture of one bucket, or with a TLS key log, is
    decoded whole, without a spill. `load(out)` then gives the capture `load(capture)` gives.
    `load_args` go to `load`.

    The buckets are decoded one after the other here, or through `run_buckets` (`amqpcap.engine`
    runs them as Dask tasks); `progress(done, total, packets)` is `load`'s, here counting the
    bytes of the files read and then of the spill files decoded.
    """
    from .inputs import capture_files

    out = _new_directory(out)
    file_bytes = sum(_size(f) for f in capture_files(capture))
    buckets = buckets or default_buckets(file_bytes)
    try:
        return _ingest(capture, out, buckets, progress, run_buckets, load_args, file_bytes)
    finally:
        # (gone after a finished ingest; after a failed one, e.g. a full disk, not left behind)
        shutil.rmtree(out / SPILL_DIR, ignore_errors=True)


def _ingest(capture, out: Path, buckets: int, progress, run_buckets, load_args: dict, file_bytes: int) -> Ingested:
    from .capture import protocol_warnings, tls_warnings

    with _writing(out):
        # capture/ first: from then on the directory is recognised as a dataset (`is_dataset`),
        # unfinished until the manifest is written
        (out / "capture").mkdir(parents=True)
        if buckets == 1 or load_args.get("tls_keylog") is not None:
            first = _ingest_whole(capture, out, buckets, load_args, progress)
            results = [first]
        else:
            first = _split_with_progress(capture, out, buckets, load_args, progress)
            spilled = first.spilled or [(0, 0)] * buckets
            args = [(out, buckets, k, first.summary["packets"], load_args, spilled[k][0]) for k in range(buckets)]
            if run_buckets is None:
                spilled = [b for _, b in spilled]
                done = _BucketProgress(progress, file_bytes, first)
                results = [first] + list(_buckets_in_turn(args, done, spilled))
            else:
                results = [first] + run_buckets(ingest_bucket, args)
        rows: dict[str, int] = {}
        loose: dict[str, list] = {}
        warnings = list(first.summary["warnings"])
        for r in results:
            _add(rows, r.rows)
            for name, df in r.loose.items():
                loose.setdefault(name, []).append(df)
            warnings += [w for w in r.summary["warnings"] if w not in warnings]
        _add(rows, _write_loose(out, loose))
        summary = first.summary
        if len(results) > 1:
            connections = pd.concat([r.connections for r in results], ignore_index=True).sort_values("stream")
            summary["warnings"] = warnings + tls_warnings(connections, None, None) + protocol_warnings(connections)
        _write_manifest(out, buckets, first.ports, rows, summary)
    return Ingested(out, summary, rows.get("connections", 0), pd.concat([r.anomalies for r in results], ignore_index=True),
                    buckets)


#: captured bytes of two buckets' spills, together, up to which the next bucket is decoded while
#: the one before is written (`_buckets_in_turn`): three buckets of the default size
#: (`BUCKET_TARGET_BYTES` of capture each, their spills a little less). Past it, a bucket
#: holding a long connection is decoded on its own. The two connections of an 80 s PerfTest run
#: (2.1M and 1.7M packets, in two buckets): peak 1.20-1.26 GB before, 1.14-1.15 GB with it (two
#: runs each, as fast); the bucket of the 2.1M-packet connection alone holds about 1.1 GB.
DECODE_AHEAD_MAX_BYTES = 3 * BUCKET_TARGET_BYTES


def _buckets_in_turn(args: list[tuple], done: Callable[[StepResult, int], StepResult], spilled: list[int]):
    """`ingest_bucket` over `args` in this process, the next bucket decoded (by the core, without
    the GIL) while the one before is written (by pyarrow's writer threads), when their spills
    (`spilled`: captured bytes per bucket) add up to at most `DECODE_AHEAD_MAX_BYTES`: two
    buckets' tables are then held at once. On 10M packets of PerfTest (14 buckets) on the 2-core
    dev machine the whole ingest took 13.7 s with the buckets in turn, 10.9 s overlapped."""
    def size(i: int) -> int:
        return spilled[args[i][2]]

    with ThreadPoolExecutor(1, thread_name_prefix="amqpcap-decode") as ahead:
        pending = ahead.submit(_decode_bucket, *args[0]) if args else None
        for i, (out, buckets, k, *_) in enumerate(args):
            decoded = pending.result() if pending is not None else _decode_bucket(*args[i])
            pending = None
            if i + 1 < len(args) and size(i) + size(i + 1) <= DECODE_AHEAD_MAX_BYTES:
                pending = ahead.submit(_decode_bucket, *args[i + 1])
            stored = _store_bucket(decoded, out, buckets, k)
            del decoded  # (its tables, before the next bucket is decoded here)
            yield done(stored, k)


def _split_with_progress(capture, out: Path, buckets: int, load_args: dict, progress) -> StepResult:
    """`split`, its progress counted as the first part of the ingest's: the files' bytes of a
    total that adds the spill files' (known only once they are written: the files' size until then)."""
    if progress is None:
        return split(capture, out, buckets, load_args)
    return split(capture, out, buckets, load_args, lambda done, total, packets: progress(done, 2 * total, packets))


class _BucketProgress:
    """The ingest's progress while the buckets are decoded one after another: the files' bytes
    (read) and each decoded bucket's spilled bytes, of both."""

    def __init__(self, progress, file_bytes: int, first: StepResult):
        self.progress = progress
        self.spilled = first.spilled or []
        self.first_packets = first.summary["packets"]
        self.total = file_bytes + sum(b for _, b in self.spilled)
        self.done = file_bytes

    def __call__(self, result: StepResult, k: int) -> StepResult:
        if self.progress is not None:
            self.done += self.spilled[k][1]
            # (packets: the capture's, so that the rate is the whole ingest's so far)
            self.progress(self.done, self.total, self.first_packets)
        return result


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0  # the core names the file and why


# --- reading ---------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _template() -> dict[str, pd.DataFrame]:
    """Empty tables with `load`'s dtypes (categories of the fixed vocabularies included): the
    core's own output for a capture without packets, so the dtypes have one source."""
    from .capture import load

    with tempfile.TemporaryDirectory() as d:
        empty = Path(d) / "empty.pcap"
        empty.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        cap = load(empty, bodies=True)
    return {**_tables(cap), "records": cap.records}


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
    `amqpcap.partition.time_slice` cuts a partition in memory. The files are sorted by that
    column, with its statistics (`amqpcap.table_files.PARQUET_STATISTICS_COLUMNS`): the row groups of
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


def manifest(path: str | os.PathLike[str] | Location) -> dict:
    """The dataset's manifest; an incomplete or foreign directory raises `DatasetError`."""
    loc = location(path)
    try:
        m = json.loads(loc.read_text(MANIFEST))
    except FileNotFoundError:
        raise DatasetError(f"{loc.name} is an incomplete amqpcap dataset (no {MANIFEST}: the ingest did not finish); "
                           "ingest the capture again") from None
    except (OSError, ValueError) as e:
        raise DatasetError(f"cannot read {loc.path(MANIFEST)}: {e}") from None
    if m.get("format") != FORMAT or m.get("version") != VERSION:
        raise DatasetError(f"{loc.name} is not an amqpcap dataset of version {VERSION}")
    return m


def read(path: str | os.PathLike[str] | Location, buckets: list[int] | None = None,
         without: dict[str, tuple[str, ...]] | None = None, packets: tuple[int, int | None] | None = None) -> Capture:
    """The capture stored at `path`, with the tables and summary `load` gave.

    With `buckets`, only those buckets' connections (a partition of whole connections,
    `amqpcap.partition`): their tables, no `records` and none of the file's own anomalies;
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
    summary = _from_json(m["summary"])
    records = t["records"].copy() if part else _records(loc, summary)
    return Capture(path=summary["path"], ports=tuple(m["ports"]), frames=tables["frames"], packets=tables["packets"],
                   connections=tables["connections"], anomalies=tables["anomalies"], records=records,
                   bodies=tables.get("bodies"), summary=summary)


def read_partition(path: str | os.PathLike[str] | Location, buckets: list[int],
                   packets: tuple[int, int | None] | None = None) -> Capture:
    """The buckets' connections as the partition steps read them (`engine.bucket_step`): without
    the columns none of them reads (`partition.UNREAD_COLUMNS`); with `packets` (first, end),
    the slice of their time from packet `first` up to `end` (`amqpcap.partition.time_slice`)."""
    return read(path, buckets, without=UNREAD_COLUMNS, packets=packets)


def bucket_cuts(path: str | os.PathLike[str] | Location, bucket: int, every: int) -> list[int]:
    """Where the bucket's time may be cut into slices of about `every` of its packets
    (`amqpcap.partition.clean_cuts`), from its packets' packet and ts columns alone."""
    t = _read_arrow(location(path), "packets", [bucket], loose=False, columns=["packet", "ts"])
    if t is None:
        return []
    return clean_cuts(t.column("packet").to_numpy().astype(np.int64), t.column("ts").cast("int64").to_numpy(), every)


def read_outline(path: str | os.PathLike[str] | Location) -> Capture:
    """The capture's connections and anomalies tables and its summary, without packets, frames,
    bodies or records: what a merge of partition steps needs to name connections
    (`amqpcap.partition`), and what `amqpcap analyze` shows of a dataset besides the merged
    results and the buckets' tally (`amqpcap.tally`). An anomaly is a row per malformed thing,
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
    return _records(loc, _from_json(manifest(loc)["summary"]), columns)


def _records(loc: Location, summary: dict, columns: list[str] | None = None) -> pd.DataFrame:
    # source_file's categories are the capture's files, in the summary's order
    template = _template()["records"]
    if columns is not None:
        template = template[list(columns)]
    return _restore(_to_pandas(loc.read_parquet("capture", "records.parquet", columns=columns), template), template,
                    {"source_file": [f["name"] for f in summary["files"]]})


def facts(path: str | os.PathLike[str] | Location) -> CaptureFacts:
    """What every partition's step needs to know of the whole capture, read from the records' and
    the packets' timestamp columns alone (`amqpcap.partition.facts_of` for an in-memory capture)."""
    import pyarrow.compute as pc

    loc = location(path)
    m = manifest(loc)
    ts = loc.read_parquet("capture", "records.parquet", columns=["ts"])["ts"]
    # the packets' first time: each bucket's ts column read alone (8 bytes a packet, one bucket at a time)
    firsts = [pc.min(loc.read_parquet("packets", *bucket_file(k), columns=["ts"])["ts"].cast("int64"))
              for k in range(m["buckets"])]
    firsts = [v.as_py() for v in firsts if v.is_valid]
    return facts_from_ts(ts.cast("int64").to_numpy(), min(firsts) if firsts else 0)
