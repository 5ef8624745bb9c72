"""`amqpcap ingest`: captures into a Parquet dataset."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ..model.errors import UsageError
from ..model.wording import counted
from .app import app
from .consoles import err
from .cluster import _dask_client
from .loading import (
    _analyzing_progress, _one_name, _reading_progress, _warn, anomaly_warning, parse_limits, ports_of)
from .options import (
    AddPortOpt, BodiesOpt, CapturesArg, IngestSchedulerOpt, KeylogOpt, LimitOpt, PortOpt, StrictOpt,
    WorkersOpt)


@app.command()
def ingest(capture: List[str] = CapturesArg,
           out_dir: Path = typer.Option(..., "--out", "-o", metavar="DATASET",
                                        help="the dataset directory to write (new, or empty)"),
           buckets: Optional[int] = typer.Option(
               None, "--buckets", min=1, max=1024,
               help="connection buckets (partitions); default: one per 128 MB of capture"),
           port: Optional[List[int]] = PortOpt, add_port: Optional[List[int]] = AddPortOpt,
           limit: Optional[List[str]] = LimitOpt, bodies: bool = BodiesOpt,
           tls_keylog: Optional[Path] = KeylogOpt, strict: bool = StrictOpt,
           scheduler: Optional[str] = IngestSchedulerOpt, workers: Optional[int] = WorkersOpt) -> None:
    """Decode a capture (one file or a set, e.g. a tcpdump ring) into a Parquet dataset partitioned by connection; every command reads it back.

    The capture is read once: each connection's packets are spilled into its bucket's file
    (inside DATASET while it runs), then each bucket is decoded on its own, so that memory
    holds one bucket's share, not the whole capture; with --scheduler the buckets are decoded
    on Dask workers, side by side."""
    from ..io.dataset import ingest as ingest_dataset

    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise UsageError(f"cannot write the dataset into {out_dir}: it exists and is not an empty directory")
    args = dict(buckets=buckets, ports=ports_of(port, add_port), limits=parse_limits(limit),
                bodies=bodies, tls_keylog=tls_keylog, strict=strict)
    if scheduler is not None:
        from ..engine.on_dask import ingest as ingest_on_dask

        with _dask_client(scheduler, workers) as client, _analyzing_progress("decoding") as progress:
            done = ingest_on_dask(_one_name(capture), out_dir, client, progress=progress, **args)
    else:
        with _reading_progress() as progress:
            done = ingest_dataset(_one_name(capture), out_dir, progress=progress, **args)
    for w in done.summary["warnings"]:
        _warn(w)
    w = anomaly_warning(done.anomalies)
    if w:
        _warn(w)
    err.print(f"{counted(done.summary['packets'], 'packet')} and {counted(done.connections, 'connection')} "
              f"written to the dataset {done.path} in {counted(done.buckets, 'bucket')}", highlight=False, soft_wrap=True)
