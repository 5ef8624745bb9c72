"""How a dataset is laid out (docs/dataset.md): its tables, the bucket of each connection, where a
bucket's rows are, where the dataset is (a directory or an fsspec URL), and its manifest, written
last: a directory without it is an ingest that did not finish, and is refused."""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...model.errors import AmqpcapError

# (numpy and pandas are imported by the functions that use them: whether a path is a dataset is
# asked before a capture is decoded, which should not wait for pandas' import)
if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

FORMAT = "amqpcap-dataset"
VERSION = 1
MANIFEST = "manifest.json"
#: tables whose rows belong to one connection (`stream`), stored in `<table>/bucket=<k>/`
CONNECTION_TABLES = ("connections", "packets", "frames", "anomalies", "bodies", "amqp10_frames")
#: rows of the capture as a whole, stored in `capture/<table>.parquet`
CAPTURE_TABLES = ("records", "anomalies")
#: a bucket holds about this much of the capture (file bytes), at most `MAX_BUCKETS` buckets.
#: `ingest` holds two buckets' tables at once (`ingestion._buckets_in_turn`): 10M packets of PerfTest (1.8
#: GB) in 7 buckets peaked at 1.43 GB, in 14 at 0.88 GB, in 10.9 s against 11.0 s
BUCKET_TARGET_BYTES = 128 << 20
MAX_BUCKETS = 1024
#: how rows are put back in `load` order: the sort key, stable (ties stay in bucket order,
#: and tied rows are of one connection, so of one bucket)
ORDER = {"connections": "stream", "packets": "packet", "frames": "packet", "bodies": "last_packet",
         "amqp10_frames": "packet"}


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
    the buckets instead of filling them in turn. Defined once, in the core (rust/src/buckets/partition.rs),
    which also decodes a pass's buckets by it."""
    import numpy as np

    from ... import _core

    return _core.bucket_of(np.ascontiguousarray(stream, dtype=np.int64), buckets)


def bucket_packets(connections: pd.DataFrame, buckets: int) -> np.ndarray:
    """The packets of each bucket's connections (their `c2s_packets` and `s2c_packets`), from
    the capture's connections table."""
    import numpy as np

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


def is_dataset(path: str | os.PathLike[str] | Location) -> bool:
    """A directory (or URL) written by `write` or `ingest` (finished or not)."""
    loc = location(path)
    try:
        return loc.is_dir() and (loc.exists(MANIFEST) or loc.is_dir("capture"))
    except OSError:
        return False


def _without_manifest(loc: Location) -> str:
    """Why a directory without a manifest is refused: an ingest that did not finish (its
    `capture` table is written first, `is_dataset`), or no dataset at all."""
    if is_dataset(loc):
        return f"{loc.name} is an incomplete amqpcap dataset (no {MANIFEST}: the ingest did not finish); ingest the capture again"
    if not loc.exists():
        return f"no amqpcap dataset at {loc.name}: no such file or directory"
    return f"{loc.name} is not an amqpcap dataset (no {MANIFEST}; `amqpcap ingest CAPTURE --out DIR` writes one)"


def to_json(v: Any) -> Any:
    import numpy as np
    import pandas as pd

    if isinstance(v, pd.Timestamp):
        return {"ts_ns": int(v.value)}
    if isinstance(v, dict):
        return {k: to_json(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [to_json(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


def from_json(v: Any) -> Any:
    if isinstance(v, dict):
        if set(v) == {"ts_ns"}:
            import pandas as pd

            return pd.Timestamp(v["ts_ns"], unit="ns", tz="UTC")
        return {k: from_json(x) for k, x in v.items()}
    if isinstance(v, list):
        return [from_json(x) for x in v]
    return v


def manifest(path: str | os.PathLike[str] | Location) -> dict:
    """The dataset's manifest; an incomplete or foreign directory raises `DatasetError`."""
    loc = location(path)
    try:
        m = json.loads(loc.read_text(MANIFEST))
    except FileNotFoundError:
        raise DatasetError(_without_manifest(loc)) from None
    except (OSError, ValueError) as e:
        raise DatasetError(f"cannot read {loc.path(MANIFEST)}: {e}") from None
    if m.get("format") != FORMAT or m.get("version") != VERSION:
        raise DatasetError(f"{loc.name} is not an amqpcap dataset of version {VERSION}")
    return m
