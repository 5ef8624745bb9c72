"""Writing a dataset's files: a decoded capture's Arrow tables into their buckets (Parquet, written
by threads), the rows of no connection, a table a batch at a time as the core hands it over, and
the manifest, last; a failed write (a full disk) is one error."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

from ..._core import __version__
from ..load import Capture
from ..table_files import parquet_options
from .layout import FORMAT, MANIFEST, VERSION, DatasetError, bucket_file, bucket_of, default_buckets, to_json

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


def capture_tables(cap: Capture) -> dict[str, pd.DataFrame]:
    """The capture's tables of connections (`CONNECTION_TABLES`: its bodies when it kept them)."""
    out = {"connections": cap.connections, "packets": cap.packets, "frames": cap.frames, "anomalies": cap.anomalies,
           "amqp10_frames": cap.amqp10_frames}
    if cap.bodies is not None:
        out["bodies"] = cap.bodies
    return out


def _arrow(df: pd.DataFrame):
    import pyarrow as pa

    return pa.Table.from_pandas(df, preserve_index=False)


def new_directory(out: str | os.PathLike[str]) -> Path:
    """`out`, where a dataset is about to be written: new, or an empty directory."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DatasetError(f"cannot write the dataset into {out}: it exists and is not an empty directory")
    return out


@contextmanager
def writing_into(out: Path):
    """A failed write (a full disk) is one error; the directory stays without a manifest."""
    try:
        yield
    except OSError as e:
        raise DatasetError(f"cannot write the dataset into {out}: {e.strerror or e} (it is left incomplete: "
                           f"no {MANIFEST})") from None


def write_connections(tables: dict, out: Path, buckets: int, kept: list[int]) -> tuple[dict[str, int], dict]:
    """Write the rows of connections of the Arrow `tables` into the `kept` buckets. Returns the
    rows written per table and the rows of no connection per table (written once, by
    `write_loose`)."""
    import pyarrow.compute as pc

    rows: dict[str, int] = {}
    loose: dict = {}
    writes = []
    with ThreadPoolExecutor(WRITE_THREADS, thread_name_prefix="amqpcap-parquet") as pool:
        for name in list(tables):
            t = tables.pop(name)  # (released once its writes are done)
            own = pc.is_valid(t.column("stream"))
            n_own = pc.sum(own).as_py() or 0
            if n_own < t.num_rows:
                loose[name] = t.filter(pc.invert(own))
                t = t.filter(own)
            writes += _write_buckets(t, buckets, kept, out / name, pool)
            rows[name] = n_own
            del t
        for w in writes:
            w.result()  # (a write's error, a full disk, is raised here)
    return rows, loose


def write_loose(out: Path, loose: dict[str, list]) -> dict[str, int]:
    """Write the rows of no connection of each table (`capture/<table>.parquet`), if any."""
    import pyarrow as pa

    rows = {}
    for name, parts in loose.items():
        t = pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else parts[0]
        if t.num_rows:
            _write_arrow(t, out / "capture" / f"{name}.parquet")
            rows[name] = t.num_rows
    return rows


def write_manifest(out: Path, buckets: int, ports, rows: dict[str, int], summary: dict) -> None:
    manifest = {"format": FORMAT, "version": VERSION, "amqpcap": __version__, "buckets": buckets,
                "ports": list(ports), "rows": rows, "summary": to_json(summary)}
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, out / MANIFEST)  # last: only a finished dataset has a manifest


def add_rows(total: dict[str, int], rows: dict[str, int]) -> None:
    """Count the rows a step wrote (per table) into the dataset's `total`."""
    for name, n in rows.items():
        total[name] = total.get(name, 0) + n


def write(cap: Capture, out: str | os.PathLike[str], buckets: int | None = None) -> Path:
    """Store `cap` as a dataset in the directory `out` (new, or empty). Returns its path."""
    out = new_directory(out)
    buckets = buckets or default_buckets(int(cap.summary.get("file_bytes") or 0))
    with writing_into(out):
        # capture/ first: from then on the directory is recognised as a dataset (`is_dataset`),
        # unfinished until the manifest is written
        (out / "capture").mkdir(parents=True)
        _write_arrow(_arrow(cap.records), out / "capture" / "records.parquet")
        rows, loose = write_connections({name: _arrow(df) for name, df in capture_tables(cap).items()}, out, buckets,
                                         list(range(buckets)))
        rows["records"] = len(cap.records)
        add_rows(rows, write_loose(out, {name: [df] for name, df in loose.items()}))
        write_manifest(out, buckets, cap.ports, rows, cap.summary)
    return out


class BatchFile:
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
