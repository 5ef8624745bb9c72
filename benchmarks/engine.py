#!/usr/bin/env python3
"""The analyzers (every one splits), run partition by partition on a local Dask cluster of 1 and
of 2 worker processes, against the same analyzers in one process, in one run.

    python3 benchmarks/engine.py DATASET [--repeat 3] [--no-whole] [--workers 1 2] [--baseline DIR]
                                 [--ingest CAPTURE]

DATASET: written by `amqpcap ingest CAPTURE --out DATASET --buckets N` (e.g. a capture made by
make_large_capture.py). Prints, for each way, the best of --repeat wall times of the split
analyzers (partition steps, records step and merge; reading the dataset included, starting
the cluster not), the peak RSS of each worker process, and the speed-up of 2 workers over 1.

What it does not time: writing the overview, report and tables (`benchmarks/analyze_large.py`
times `amqpcap analyze` whole). --no-whole skips the run in one process, for a dataset too
large to read whole in this process. --baseline DIR times the clusters with the amqpcap package in
DIR too (an earlier commit with its core built), in the same run, and prints this one's speed-up
over it. --ingest CAPTURE first makes DATASET (a new directory) from CAPTURE (a file or a
ring) as `amqpcap ingest` does, timed as its own process (`scale.py`'s measure), and prints each
cluster's time against the ingest's (issue 13: the analysis within 2 times the ingest).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import amqpcap
from amqpcap.io import dataset
from amqpcap.engine import on_dask as engine
from amqpcap.io import kept_rows
from amqpcap.engine.registered import splits
from amqpcap.engine.partitions import run_whole
from memory_factor import own_peak_rss_mib
import cloudpickle  # noqa: E402  (Dask's pickler: the workers cannot import this folder's modules,
import memory_factor  # noqa: E402  so the function run on them travels by value)
cloudpickle.register_pickle_by_value(memory_factor)


class Phases:
    """When each phase of a run on the cluster ended, from the engine's progress: the first
    round of bucket tasks (and the records step), the queue backlogs' cells, the second round,
    and the merges after the last task."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.ends: dict[str, float] = {}

    def __call__(self, what: str, done: int, total: int) -> None:
        phase = ("cells" if what.startswith("queue backlogs") else "second round" if "second round" in what
                 else "first round")
        self.ends[phase] = time.perf_counter() - self.start

    def line(self, total_s: float) -> str:
        marks, last = [], 0.0
        for phase, end in self.ends.items():
            marks.append(f"{phase} {end - last:.1f} s")
            last = end
        return ", ".join([*marks, f"merges {total_s - last:.1f} s"])


def split_results_on(c, root: Path, phases: Phases | None = None) -> None:
    """engine.analyze's split part: the partition and records steps on the cluster, the merge
    here with the dataset's outline; the per-message tables kept by the workers beside the
    dataset, as `amqpcap analyze` keeps them (`amqpcap.io.kept_rows`)."""
    with kept_rows.store(root) as store:
        engine.merged(engine.submit_steps(root, c, store), dataset.read_outline(root), phases)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-whole", action="store_true",
                    help="skip the run in one process (a dataset too large to read whole here)")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2],
                    help="the local clusters' sizes to time (default: 1 and 2; the speed-up needs both)")
    ap.add_argument("--baseline", type=Path, help="also time the clusters with the amqpcap package in this directory")
    ap.add_argument("--times-to", type=Path, help=argparse.SUPPRESS)  # (the baseline's run writes its times here)
    ap.add_argument("--ingest", type=Path, metavar="CAPTURE",
                    help="first ingest CAPTURE into DATASET (a new directory), timed, and compare the analysis with it")
    a = ap.parse_args()
    ingest_s = ingest_first(a.ingest, a.dataset) if a.ingest else None
    root = a.dataset.resolve()
    m = dataset.manifest(root)
    print(f"dataset {root}: {m['summary']['packets']:,} packets, {m['rows']['connections']:,} connections, "
          f"{m['buckets']} buckets; split analyzers: {', '.join(splits())}")

    whole_s = None
    if not a.no_whole:
        # in one process: the capture read whole, each split analyzer as run_whole (what `analyze` does)
        t = time.perf_counter()
        cap = amqpcap.load(root)
        read_s = time.perf_counter() - t
        best_whole = float("inf")
        for _ in range(a.repeat):
            cap.derived.clear()
            t = time.perf_counter()
            for split in splits().values():
                run_whole(split, cap)
            best_whole = min(best_whole, time.perf_counter() - t)
        del cap
        whole_s = read_s + best_whole
        print(f"{'in one process':>16}: {read_s + best_whole:7.2f} s  (read {read_s:.2f} s + analyzers {best_whole:.2f} s)"
              f"  peak RSS {own_peak_rss_mib():,.0f} MiB")

    times = {}
    for workers in a.workers:
        with engine.client(workers=workers) as c:
            best, best_phases = float("inf"), ""
            for _ in range(a.repeat):
                t, phases = time.perf_counter(), Phases()
                split_results_on(c, root, phases)
                took = time.perf_counter() - t
                if took < best:
                    best, best_phases = took, phases.line(took)
            rss = sorted(c.run(own_peak_rss_mib).values())
        times[workers] = best
        print(f"{f'{workers} worker' + 's' * (workers > 1):>16}: {best:7.2f} s  peak RSS per worker "
              + ", ".join(f"{r:,.0f} MiB" for r in rss) + f"\n{'':>18}({best_phases})")
    if a.times_to:
        a.times_to.write_text(json.dumps(times))
    if a.baseline:
        base = baseline_times(a)
        for workers, took in times.items():
            print(f"{f'{workers} worker' + 's' * (workers > 1):>16}: baseline {a.baseline}: {base[str(workers)]:7.2f} s, "
                  f"this one {base[str(workers)] / took:.2f}x as fast")
    if ingest_s:
        for workers, took in times.items():
            print(f"{f'{workers} worker' + 's' * (workers > 1):>16}: the analysis took {took / ingest_s:.2f}x the "
                  f"ingest's {ingest_s:.1f} s")
    if {1, 2} <= times.keys():
        print(f"speed-up, 2 workers over 1: {times[1] / times[2]:.2f}x"
              + (f"; 2 workers against one process: {whole_s / times[2]:.2f}x" if whole_s else ""))
    print(f"this process ({'the run in one process and ' if whole_s else ''}the merges): peak RSS {own_peak_rss_mib():,.0f} MiB")


def ingest_first(capture: Path, out: Path) -> float:
    """`amqpcap ingest CAPTURE --out OUT` as its own process (`scale.ingest_measured`); its wall
    seconds, printed with its rate and peak RSS."""
    from scale import ingest_measured

    with tempfile.TemporaryDirectory() as d:
        seconds, rss = ingest_measured(capture, out, Path(d))
    packets = dataset.manifest(out)["summary"]["packets"]
    print(f"ingest {capture}: {seconds:.1f} s, {packets / seconds / 1e6:.2f} M packets/s, "
          f"peak RSS {rss / 2**30:.2f} GiB", flush=True)
    return seconds


def baseline_times(a: argparse.Namespace) -> dict[str, float]:
    """The same clusters' times with the amqpcap package in `a.baseline`, this script run again
    as its own process (its output shown as it goes)."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "times.json"
        print(f"baseline {a.baseline}:", flush=True)
        subprocess.run([sys.executable, __file__, str(a.dataset), "--no-whole", "--repeat", str(a.repeat),
                        "--workers", *map(str, a.workers), "--times-to", str(out)],
                       env={**os.environ, "PYTHONPATH": str(a.baseline)}, check=True)
        return json.loads(out.read_text())


if __name__ == "__main__":
    main()
