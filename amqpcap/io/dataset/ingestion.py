"""`ingest`: a capture decoded into a dataset reading it once: `split` spills each connection's
packets into its bucket's file, then each bucket is decoded and written on its own (here, one
bucket decoded ahead of the one being written, or as Dask tasks), so memory holds a bucket's rows,
not the capture's."""

from __future__ import annotations

import functools
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from ...io.memory import release_freed_memory_above
from .layout import BUCKET_TARGET_BYTES, CONNECTION_TABLES, bucket_file, default_buckets
from .writing import BatchFile, add_rows, new_directory, write_connections, write_loose, write_manifest, writing_into

#: where `ingest` spills the capture's packets by bucket while it runs (removed at the end)
SPILL_DIR = ".spill"

#: Resident bytes under which the memory a bucket freed is kept for the next bucket to reuse,
#: above which it is given back to the system. A bucket holds about the same whatever the
#: capture (`BUCKET_TARGET_BYTES` of it), so the process stays near this after each. The
#: 10M-packet ingest (14 buckets) kept 0.55-0.74 GiB after each bucket and peaked at 0.74-0.80
#: GiB without giving any back, against 0.64-0.67 GiB giving it all back after each bucket;
#: its page faults fell from 1.06M to 0.38M and its system CPU from 3.9-4.2 s to 1.9-2.4 s.
KEEP_FREED_BYTES = 768 << 20


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
    from ... import _core

    return Path(_core.spill_path(str(Path(out) / SPILL_DIR), k))


def split(capture, out: str | os.PathLike[str], buckets: int, load_args: dict,
          progress: Callable[[int, int, int], None] | None = None) -> StepResult:
    """The first step of `ingest`: read the capture once, write the rows of no connection
    (`capture/records.parquet` a batch at a time as the core reads, the file's anomalies kept
    for the end), and spill every TCP packet of a possible AMQP connection into its bucket's
    spill file (`rust/src/buckets/spill.rs`), numbered as a whole decode numbers packets and streams."""
    d = _decode_writing_records(capture, Path(out), load_args, progress, spill=(str(Path(out) / SPILL_DIR), buckets))
    return _store(d, out, buckets, [])


def ingest_bucket(out: str | os.PathLike[str], buckets: int, k: int, capture_records: int, load_args: dict,
                  packets: int = 0) -> StepResult:
    """Decode bucket `k` from its spill file (in this process or on a Dask worker) and write its
    tables; the spill file is removed once they are written. `packets`: the packets spilled into
    it, which decide how its frames are written (`FRAMES_STREAM_MIN_PACKETS`; 0: not known)."""
    return _store_bucket(_decode_bucket(out, buckets, k, capture_records, load_args, packets), out, buckets, k)


#: a bucket of more packets than this has its frames written to its Parquet file as they
#: settle, while it is still decoded in another thread (`amqpcap.io.load.decode_spilled`'s
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
    from ..load import decode_spilled
    from ..table_files import batches_from_sink, write_arrow_file

    decode = functools.partial(decode_spilled, spill_path(out, k), capture_records, packets=packets, **load_args)
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
    # a 135-bucket ring grew by about 3.7 MB a bucket, to 1.5 GiB, without giving it back), and
    # given back after every bucket, the next one faults it in again (KEEP_FREED_BYTES)
    release_freed_memory_above(KEEP_FREED_BYTES)
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
    from ..load import decode_arrow

    records = BatchFile(out / "capture" / "records.parquet")
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
    rows, loose = write_connections(tables, Path(out), buckets, kept)
    rows.update(d.written)
    return StepResult(rows, loose, d.summary, d.ports, d.connections[["stream", "tls", "tls_decrypted", "protocol"]],
                      anomalies, spilled)


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

    The buckets are decoded one after the other here, or through `run_buckets` (`amqpcap.engine.on_dask`
    runs them as Dask tasks); `progress(done, total, packets)` is `load`'s, here counting the
    bytes of the files read and then of the spill files decoded.
    """
    from ..inputs import capture_files

    out = new_directory(out)
    file_bytes = sum(_size(f) for f in capture_files(capture))
    buckets = buckets or default_buckets(file_bytes)
    try:
        return _ingest(capture, out, buckets, progress, run_buckets, load_args, file_bytes)
    finally:
        # (gone after a finished ingest; after a failed one, e.g. a full disk, not left behind)
        shutil.rmtree(out / SPILL_DIR, ignore_errors=True)


def _ingest(capture, out: Path, buckets: int, progress, run_buckets, load_args: dict, file_bytes: int) -> Ingested:
    from ..load import protocol_warnings, tls_warnings

    with writing_into(out):
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
            add_rows(rows, r.rows)
            for name, df in r.loose.items():
                loose.setdefault(name, []).append(df)
            warnings += [w for w in r.summary["warnings"] if w not in warnings]
        add_rows(rows, write_loose(out, loose))
        summary = first.summary
        if len(results) > 1:
            connections = pd.concat([r.connections for r in results], ignore_index=True).sort_values("stream")
            summary["warnings"] = warnings + tls_warnings(connections, None, None) + protocol_warnings(connections)
        write_manifest(out, buckets, first.ports, rows, summary)
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
