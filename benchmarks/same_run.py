"""`load`, `ingest` and `analyze` of one capture by two installs of amqpcap, in one run (issue 49).

    python benchmarks/make_large_capture.py fixtures/prefetch-consumers.pcap /tmp/big10m.pcap --packets 10000000
    git worktree add /tmp/before 403a161 && python3 -m venv /tmp/venv-before \\
        && /tmp/venv-before/bin/pip install -e /tmp/before
    .venv/bin/python benchmarks/same_run.py /tmp/big10m.pcap --before /tmp/venv-before/bin/python

"before" is the Python given by --before (an install of an earlier commit, its own Rust core
compiled by its own pip install); "after" is the Python running this script. Each command runs
as a whole process tree (`python -m amqpcap ...`, its Dask scheduler and workers), in an empty
temporary directory so that no checkout on the current directory shadows the install, the two
sides alternating and their order swapped on every repeat (so that a warm page cache or a
hotter machine favours neither). For each command it prints, per side, the best wall time, the
CPU (user and system, of the process and every descendant it waited for: getrusage's
RUSAGE_CHILDREN; per million packets too when `ingest` ran, whose manifest counts them), the
peak RSS of the largest process and the sum of every process's peak, then after/before ratios (below 1: faster or smaller). It checks that both sides' outputs
agree: every Parquet file of the earlier dataset reads back equal in the later one (on the
earlier one's columns; the tables and columns the later commit added are listed), and the two
summary.json equal but for the keys the later commit added (listed). To compare two earlier
commits, run this script with the later one's Python.

Peak RSS is each process's VmHWM, read from /proc every 0.1 s (see analyze_large.py).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from analyze_large import run_tree_measured  # noqa: E402

LOAD = "import sys, amqpcap; amqpcap.load(sys.argv[1])"


@dataclass
class Run:
    wall_s: float
    user_s: float
    sys_s: float
    largest_kib: int
    total_kib: int


def measured(argv: list[str], cwd: Path) -> Run:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    code, wall, peaks = run_tree_measured(argv, cwd=cwd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if code:
        raise SystemExit(f"{' '.join(argv)} exited with {code}")
    kib = [k for k, _ in peaks.values()]
    return Run(wall, after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime, max(kib), sum(kib))


def commands(python: str, capture: Path, out: Path, limits: list[str]) -> dict[str, list[str]]:
    caps = [a for cap in limits for a in ("--limit", cap)]
    return {"load": [python, "-c", LOAD, str(capture)],
            "ingest": [python, "-m", "amqpcap", "ingest", str(capture), "--out", str(out / "dataset"), *caps],
            "analyze": [python, "-m", "amqpcap", "analyze", str(capture), "--out", str(out / "report"), *caps]}


def best(runs: list[Run]) -> Run:
    return min(runs, key=lambda r: r.wall_s)


def line(label: str, r: Run, packets: int | None) -> str:
    cpu = r.user_s + r.sys_s
    per_m = "" if not packets else (f"; per M packets {r.user_s * 1e6 / packets:.2f} s user + "
                                    f"{r.sys_s * 1e6 / packets:.2f} s system ({r.sys_s / cpu:.0%} system)")
    return (f"  {label:6} {r.wall_s:7.1f} s wall, CPU {cpu:7.1f} s ({r.user_s:.1f} user + {r.sys_s:.1f} system), "
            f"largest process {r.largest_kib / 2**20:.2f} GiB, all processes {r.total_kib / 2**20:.2f} GiB{per_m}")


def packets_of(dataset: Path) -> int | None:
    """The capture's packets, as the dataset's manifest counts them (None without one)."""
    try:
        return int(json.loads((dataset / "manifest.json").read_text())["summary"]["packets"])
    except (OSError, KeyError, ValueError):
        return None


def datasets_differ(a: Path, b: Path) -> tuple[list[str], list[str], list[str]]:
    """(Parquet files of dataset `b` that `a` lacks, columns `b`'s files add to `a`'s, files of
    `a` whose table reads back different in `b` on `a`'s columns, or is missing there), compared
    file by file so that one bucket at a time is in memory."""
    import pyarrow.parquet as pq

    fa = {p.relative_to(a) for p in a.rglob("*.parquet")}
    fb = {p.relative_to(b) for p in b.rglob("*.parquet")}
    added_columns: set[str] = set()
    differ = []
    for f in sorted(fa):
        if f not in fb:
            differ.append(f"{f} (missing)")
            continue
        ta, tb = pq.read_table(a / f), pq.read_table(b / f)
        added_columns |= {f"{f.parts[0]}.{c}" for c in tb.column_names if c not in ta.column_names}
        # (as the values read back: a column declared non-nullable on one side only is the same)
        if not set(ta.column_names) <= set(tb.column_names) or not ta.equals(tb.select(ta.column_names).cast(ta.schema)):
            differ.append(str(f))
    return sorted({str(f.parts[0]) for f in fb - fa}), sorted(added_columns), differ


def summary_diff(a: dict, b: dict, path: str = "") -> tuple[list[str], list[str]]:
    """(keys only in `b`, keys whose values differ), as dotted paths."""
    added, changed = [], []
    for k in sorted(set(a) | set(b)):
        p = f"{path}{k}"
        if k not in a:
            added.append(p)
        elif k not in b:
            changed.append(p + " (gone)")
        elif isinstance(a[k], dict) and isinstance(b[k], dict):
            x, y = summary_diff(a[k], b[k], p + ".")
            added += x
            changed += y
        elif a[k] != b[k]:
            changed.append(p)
    return added, changed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture", type=Path)
    ap.add_argument("--before", required=True, help="the Python of the earlier install")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--only", choices=("load", "ingest", "analyze"), action="append")
    ap.add_argument("--limit", action="append", default=[], metavar="NAME=VALUE",
                    help="a cap given to ingest and analyze (the 100M ring: max_streams=1000000)")
    args = ap.parse_args()
    capture = args.capture.resolve()
    sides = {"before": args.before, "after": sys.executable}
    steps = args.only or ["load", "ingest", "analyze"]
    print(f"{capture}: {capture.stat().st_size / 1e9:.2f} GB; before = {args.before}, after = {sys.executable}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        runs: dict[tuple[str, str], list[Run]] = {}
        for i in range(args.repeat):
            order = list(sides) if i % 2 == 0 else list(reversed(sides))
            for step in steps:
                for side in order:
                    out = tmp / side
                    work = tmp / "cwd"
                    work.mkdir(exist_ok=True)
                    argv = commands(sides[side], capture, out, args.limit)[step]
                    target = {"ingest": out / "dataset", "analyze": out / "report"}.get(step)
                    if target is not None and target.exists():
                        shutil.rmtree(target)  # each run writes afresh; the last repeat's stay, to compare
                    r = measured(argv, work)
                    runs.setdefault((step, side), []).append(r)
                    print(f"{step} {side} (repeat {i + 1}): {r.wall_s:.1f} s", flush=True)
        print()
        packets = packets_of(tmp / "after" / "dataset")
        for step in steps:
            b, a = best(runs[(step, "before")]), best(runs[(step, "after")])
            print(f"{step} (best of {args.repeat}):")
            print(line("before", b, packets))
            print(line("after", a, packets))
            print(f"  after/before: wall {a.wall_s / b.wall_s:.2f}x, CPU "
                  f"{(a.user_s + a.sys_s) / (b.user_s + b.sys_s):.2f}x, largest process "
                  f"{a.largest_kib / b.largest_kib:.2f}x, all processes {a.total_kib / b.total_kib:.2f}x")
        ok = True
        if "ingest" in steps:
            tables, columns, differ = datasets_differ(tmp / "before" / "dataset", tmp / "after" / "dataset")
            print(f"dataset: tables added after: {', '.join(tables) or 'none'}; columns added after: "
                  f"{', '.join(columns) or 'none'}; files reading back different on the earlier columns: "
                  f"{', '.join(differ) or 'none'}")
            ok &= not differ
        if "analyze" in steps:
            ja = json.loads((tmp / "before" / "report" / "summary.json").read_text())
            jb = json.loads((tmp / "after" / "report" / "summary.json").read_text())
            added, changed = summary_diff(ja, jb)
            print(f"summary.json: keys added after: {', '.join(added) or 'none'}; values differing: {', '.join(changed) or 'none'}")
            ok &= not changed
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
