#!/usr/bin/env python3
"""Benchmark amqpcap's ingestion against tshark on the same capture, in one run.

    python benchmarks/bench.py CAPTURE [--repeat 3]

Runs, each in its own process (so peak memory is per tool):
  amqpcap:  amqpcap.load(CAPTURE) — all four tables (frames, packets, connections, anomalies)
  tshark:   tshark -r CAPTURE -Y amqp -T fields -e frame.number -e amqp.method.class -e amqp.method.method
and prints wall time, packets/s, MB/s, peak RSS (and its ratio to the file size) and the
tshark/amqpcap time ratio. The best of --repeat runs is reported for each tool.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

AMQPCAP_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import amqpcap
t1 = time.perf_counter()
cap = amqpcap.load(sys.argv[1])
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "packets": cap.summary["packets"],
                  "frames": len(cap.frames), "connections": len(cap.connections),
                  "anomalies": len(cap.anomalies)}))
"""


def run(cmd: list[str], stdout=subprocess.PIPE) -> tuple[float, int, bytes]:
    """Wall seconds, peak RSS bytes and stdout of one child process."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.DEVNULL)
    out = p.stdout.read() if p.stdout else b""
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        sys.exit(f"{cmd[0]} failed (status {status})")
    return wall, usage.ru_maxrss * 1024, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("capture")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-tshark", action="store_true")
    args = ap.parse_args()
    size = os.path.getsize(args.capture)

    best = None
    for _ in range(args.repeat):
        wall, rss, out = run([sys.executable, "-c", AMQPCAP_CHILD, args.capture])
        info = json.loads(out)
        if best is None or info["load_s"] < best[1]["load_s"]:
            best = (wall, info, rss)
    wall, info, rss = best
    n = info["packets"]
    print(f"capture: {args.capture} ({size / 1e6:.1f} MB, {n:,} packets)")
    print(f"amqpcap: load {info['load_s']:.3f} s (process {wall:.3f} s incl. Python start and imports), "
          f"{n / info['load_s'] / 1e6:.2f} M packets/s, {size / info['load_s'] / 1e6:.0f} MB/s, "
          f"peak RSS {rss / 1e6:.0f} MB = {rss / size:.2f} x file; "
          f"{info['frames']:,} frames, {info['connections']:,} connections, {info['anomalies']:,} anomalies")
    if args.no_tshark:
        return
    tshark = shutil.which("tshark")
    if not tshark:
        sys.exit("tshark not found (apt-get install tshark)")
    cmd = [tshark, "-r", args.capture, "-Y", "amqp", "-T", "fields", "-e", "frame.number",
           "-e", "amqp.method.class", "-e", "amqp.method.method"]
    tbest = None
    for _ in range(max(1, min(args.repeat, 2))):
        twall, trss, _ = run(cmd, stdout=subprocess.DEVNULL)
        if tbest is None or twall < tbest[0]:
            tbest = (twall, trss)
    twall, trss = tbest
    print(f"tshark:  {twall:.3f} s, {n / twall / 1e3:.0f} k packets/s, peak RSS {trss / 1e6:.0f} MB = {trss / size:.2f} x file")
    print(f"ratio:   amqpcap is {twall / info['load_s']:.1f}x faster than tshark "
          f"({twall / wall:.1f}x counting amqpcap's whole process)")


if __name__ == "__main__":
    main()
