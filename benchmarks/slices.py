#!/usr/bin/env python3
"""One bucket analysed in one task and as a chain of tasks over slices of its time
(`amqpcap.slice_chain`), by the steps that run over slices today, on a local Dask cluster of one
worker process started afresh for each way, in one run.

    python3 benchmarks/slices.py DATASET [--bucket K] [--every 250000 1000000]

DATASET: written by `amqpcap ingest CAPTURE --out DATASET` (e.g. the long PerfTest connection of
`fixtures/record/record.sh long-connection`). --bucket: the bucket to analyse (default: the one
of the most packets). Prints, for each way, the wall time (reading the bucket included, starting
the cluster not) and the worker's peak RSS, and each chain's peak against the one task's: what a
connection too large for a worker will cost once every analyzer runs over slices
(docs/time-split.md). The partials' equality is the tests' business
(`tests/test_distributed.py`), not timed here.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from amqpcap import dataset, engine
from amqpcap.slice_chain import submit_in_slices


def _worker_peak_rss_mib() -> float:
    """The worker process's peak resident set (VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _one_way(root: str, bucket: int, names: list[str], every: int | None) -> tuple[float, float, int]:
    """Wall time (s), the worker's peak RSS (MiB) and slices of the bucket's steps, one task
    (`every` None) or slices of about `every` packets, on a fresh one-worker cluster."""
    from distributed import Client, LocalCluster

    facts = dataset.facts(root)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                      memory_limit=0) as cluster, Client(cluster) as c:
        start = time.perf_counter()
        if every is None:
            slices = 1
            c.submit(engine.bucket_step, root, bucket, facts, names, pure=False).result()
        else:
            cuts = dataset.bucket_cuts(root, bucket, every)
            slices = len(cuts) + 1
            submit_in_slices(c, root, bucket, cuts, facts, names, f"bench-{every}").result()
        wall = time.perf_counter() - start
        [peak] = c.run(_worker_peak_rss_mib).values()
    return wall, peak, slices


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset")
    ap.add_argument("--bucket", type=int)
    ap.add_argument("--every", type=int, nargs="+", default=[250_000, 1_000_000])
    args = ap.parse_args()
    root = str(Path(args.dataset).resolve())
    buckets = dataset.manifest(root)["buckets"]
    sizes = dataset.bucket_packets(dataset.read_outline(root).connections, buckets)
    bucket = int(sizes.argmax()) if args.bucket is None else args.bucket
    names = [n for n, s in engine._steps().items() if s.slicing is not None and s.context is None]
    print(f"bucket {bucket}: {sizes[bucket]:,} packets; steps that run over slices: {', '.join(names)}")
    wall, base, _ = _one_way(root, bucket, names, None)
    print(f"one task             {wall:7.1f} s  worker peak {base:7.0f} MiB")
    for every in args.every:
        wall, peak, slices = _one_way(root, bucket, names, every)
        print(f"slices of {every:>9,} {wall:7.1f} s  worker peak {peak:7.0f} MiB  ({slices} slices; "
              f"peak {peak / base:.2f}x the one task's)")


if __name__ == "__main__":
    main()
