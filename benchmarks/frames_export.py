#!/usr/bin/env python3
"""`amqpcap frames CAPTURE -o X.parquet` and `-o X.csv` against tshark exporting the same
method fields, end to end as a user runs them (start-up, decoding and writing), in one run.

    python3 benchmarks/frames_export.py CAPTURE [--repeat 3] [--baseline DIR]

tshark:  tshark -r CAPTURE -Y amqp -T fields -e frame.number -e amqp.method.class
         -e amqp.method.method > file
Prints the best of --repeat wall times of each (and that run's CPU per million packets, user
and system), frames per packet, and tshark's time divided by each of amqpcap's (the goal:
30x). --baseline DIR also times the amqpcap package in DIR (an earlier commit with its core
built, as for `benchmarks/scale.py --baseline`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Timed:
    """One run: wall seconds, and the CPU of its process and children (getrusage)."""
    wall_s: float
    user_s: float
    sys_s: float

    def cpu_line(self, packets: int) -> str:
        per = 1e6 / packets
        return (f"CPU {self.user_s + self.sys_s:.2f} s: {self.user_s * per:.2f} s user + "
                f"{self.sys_s * per:.2f} s system per M packets")


def best(cmd: list[str], repeat: int, cwd: str, stdout=subprocess.DEVNULL, env: dict | None = None) -> Timed:
    """The run of `cmd` in `cwd` with the best wall time: not the repository's root, whose
    amqpcap/ `python -m` would import before the one of PYTHONPATH (the baseline)."""
    runs = []
    for _ in range(repeat):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=stdout, stderr=subprocess.DEVNULL, env=env, cwd=cwd)
        wall = time.perf_counter() - t
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        runs.append(Timed(wall, r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime))
    return min(runs, key=lambda r: r.wall_s)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline", type=Path, help="also time the amqpcap package in this directory")
    args = ap.parse_args()
    args.capture = args.capture.resolve()  # (the commands run in a temporary directory)
    if not shutil.which("tshark"):
        raise SystemExit("needs tshark (Debian: apt-get install tshark)")
    counts = json.loads(subprocess.run(
        [sys.executable, "-c", "import sys, json, amqpcap; c = amqpcap.load(sys.argv[1]); "
         "print(json.dumps([c.summary['packets'], len(c.frames)]))", str(args.capture)],
        check=True, capture_output=True, text=True).stdout)
    amqpcap = [sys.executable, "-m", "amqpcap", "frames", str(args.capture), "-o"]
    with tempfile.TemporaryDirectory() as d:
        parquet = best([*amqpcap, f"{d}/frames.parquet"], args.repeat, d)
        csv = best([*amqpcap, f"{d}/frames.csv"], args.repeat, d)
        if args.baseline:
            env = {**os.environ, "PYTHONPATH": str(args.baseline)}
            base = (best([*amqpcap, f"{d}/base.parquet"], args.repeat, d, env=env),
                    best([*amqpcap, f"{d}/base.csv"], args.repeat, d, env=env))
        with open(f"{d}/tshark.txt", "w") as out:
            tshark = best(["tshark", "-r", str(args.capture), "-Y", "amqp", "-T", "fields", "-e", "frame.number",
                           "-e", "amqp.method.class", "-e", "amqp.method.method"], args.repeat, d, stdout=out).wall_s
    packets, frames = counts
    print(f"{args.capture}: {packets:,} packets, {frames:,} frames ({frames / packets:.2f} per packet)")
    print(f"  tshark fields      {tshark:7.2f} s")
    for name, run in (("parquet", parquet), ("csv", csv)):
        print(f"  amqpcap -o {name:7} {run.wall_s:7.2f} s   tshark / amqpcap = {tshark / run.wall_s:5.1f}x   "
              f"{run.cpu_line(packets)}")
    if args.baseline:
        print(f"  baseline {args.baseline}: -o parquet {base[0].wall_s:.2f} s ({base[0].cpu_line(packets)}), "
              f"-o csv {base[1].wall_s:.2f} s ({base[1].cpu_line(packets)}); this one takes "
              f"{parquet.wall_s / base[0].wall_s:.2f}x and {csv.wall_s / base[1].wall_s:.2f}x their time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
