#!/usr/bin/env python3
"""What the second round of a dataset's analysis costs on a bucket read again, against the same
steps given the bucket the first round read and derived from: the most one pass over each
bucket could save (docs/dataset.md, "What one pass over a bucket could save").

    python3 benchmarks/second_round.py DATASET [--buckets 2 5 9] [--repeat 2]

For each bucket, in this process (no cluster), through the steps `amqpcap.engine.on_dask.bucket_step`
runs: the first round (the read, the context steps, the partials of the analyzers without a
context, the tally), then the second round's steps (the analyzers with a context step) twice: on the bucket just used
("warm"), and on the bucket read again ("cold", as a second-round task does). The context is
the bucket's own, joined alone: its values differ from the whole dataset's, its work does not.
Prints each run; the first run of a bucket pays for the cold page cache and imports.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from amqpcap import AmqpcapError
from amqpcap.io import dataset
from amqpcap.engine import on_dask as engine
from amqpcap.io.kept_rows import keeping_in
from amqpcap.analysis.partition import context_for
from amqpcap.engine.partitions import joined_once
from amqpcap.engine.registered import bucket_steps


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def one_bucket(root: Path, k: int) -> str:
    facts = dataset.facts(root)
    splits = bucket_steps()  # (the tally's step too, as a bucket's tasks run it)
    second = [n for n, s in splits.items() if s.context is not None]
    with tempfile.TemporaryDirectory() as store, keeping_in(store, k):
        part, read_s = _timed(lambda: dataset.read_partition(root, [k]))
        first, first_s = _timed(lambda: engine._steps_over(part, facts, list(splits), None, splits))
        joined = joined_once(splits, {n: [first[n]] for n in second})
        given = {n: context_for(v, 0) for n, v in joined.items()}
        _, warm_s = _timed(lambda: engine._steps_over(part, facts, second, given, splits))
        again, reread_s = _timed(lambda: dataset.read_partition(root, [k]))
        _, cold_s = _timed(lambda: engine._steps_over(again, facts, second, given, splits))
    whole = read_s + first_s + reread_s + cold_s
    return (f"bucket {k}: first round {read_s + first_s:.2f} s (read {read_s:.2f}, steps {first_s:.2f}); "
            f"second round {reread_s + cold_s:.2f} s (read {reread_s:.2f}, steps {cold_s:.2f}); the same steps on "
            f"the first round's bucket {warm_s:.2f} s: one pass would save {reread_s + cold_s - warm_s:.2f} s "
            f"of {whole:.2f} s ({(reread_s + cold_s - warm_s) / whole:.0%})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--buckets", type=int, nargs="+", default=[2, 5, 9])
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    try:
        buckets = dataset.manifest(a.dataset)["buckets"]
    except AmqpcapError as e:
        sys.exit(f"second_round.py: {e}")
    if not all(0 <= k < buckets for k in a.buckets):
        sys.exit(f"second_round.py: {a.dataset} has buckets 0 to {buckets - 1}")
    for _ in range(a.repeat):
        for k in a.buckets:
            print(one_bucket(a.dataset.resolve(), k), flush=True)


if __name__ == "__main__":
    main()
