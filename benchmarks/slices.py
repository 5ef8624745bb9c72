#!/usr/bin/env python3
"""A dataset analysed with its largest bucket in one task and as chains of tasks over slices of
its time (`amqpcap.engine.slices`), every analyzer, both rounds, on a local Dask cluster of one
worker process started afresh for each way, in one run.

    python3 benchmarks/slices.py DATASET [--every 250000 1000000]

DATASET: written by `amqpcap ingest CAPTURE --out DATASET` (e.g. the long PerfTest connection of
`fixtures/record/record.sh long-connection`). Each way is `amqpcap.engine.on_dask.analyze` (what
`amqpcap analyze DATASET --scheduler ... --slice-packets N` runs, without the writing): the
buckets of more than N packets in slices of about N packets; "one task" gives N above every
bucket. Prints, for each way, the wall time (starting the cluster not included) and the
worker's peak RSS, and each way's peak and time against the one task's: what analysing a
connection too large for a worker costs. The results' equality is the tests' business
(`tests/engine/test_distributed.py`), not timed here.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from amqpcap.io import dataset
from amqpcap.engine import on_dask as engine
from amqpcap.engine.registered import bucket_steps
from amqpcap.engine.slices import runs_in_slices


def _worker_peak_rss_mib() -> float:
    """The worker process's peak resident set (VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _one_way(root: str, every: int) -> tuple[float, float]:
    """Wall time (s) and the worker's peak RSS (MiB) of every analyzer on the dataset, the buckets
    of more than `every` packets in slices, on a fresh one-worker cluster with no memory limit."""
    from distributed import Client, LocalCluster

    outline = dataset.read_outline(root)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                      memory_limit=0) as cluster, Client(cluster) as c:
        start = time.perf_counter()
        engine.analyze(root, outline, c, slice_packets=every)
        wall = time.perf_counter() - start
        [peak] = c.run(_worker_peak_rss_mib).values()
    return wall, peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset")
    ap.add_argument("--every", type=int, nargs="+", default=[250_000, 1_000_000])
    args = ap.parse_args()
    root = str(Path(args.dataset).resolve())
    buckets = dataset.manifest(root)["buckets"]
    sizes = dataset.bucket_packets(dataset.read_outline(root).connections, buckets)
    if not any(runs_in_slices(s, first) for s in bucket_steps().values() for first in (True, False)):
        raise SystemExit("no step can run over slices of time: the engine would cut no bucket")
    print(f"{buckets} buckets, the largest {int(sizes.argmax())} of {sizes.max():,} packets")
    wall_one, base = _one_way(root, int(sizes.max()) + 1)
    print(f"one task per bucket  {wall_one:7.1f} s  worker peak {base:7.0f} MiB")
    for every in args.every:
        wall, peak = _one_way(root, every)
        print(f"slices of {every:>9,} {wall:7.1f} s  worker peak {peak:7.0f} MiB  (buckets cut: "
              f"{int((sizes > every).sum())}; time {wall / wall_one:.2f}x, peak {peak / base:.2f}x the one task's)")


if __name__ == "__main__":
    main()
