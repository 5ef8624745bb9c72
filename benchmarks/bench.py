#!/usr/bin/env python3
"""Benchmark amqpcap's ingestion against tshark on the same capture, in one run.

    python benchmarks/bench.py CAPTURE [--repeat 3] [--analyze]

Runs, each in its own process (so peak memory is per tool):
  amqpcap:  amqpcap.load(CAPTURE) — all four tables (frames, packets, connections, anomalies)
  tshark:   tshark -r CAPTURE -Y amqp -T fields -e frame.number -e amqp.method.class -e amqp.method.method
and prints wall time, packets/s, MB/s, peak RSS (and its ratio to the file size) and the
tshark/amqpcap time ratio. The best of --repeat runs is reported for each tool.

With --analyze the amqpcap child then does what `amqpcap analyze` does: every analyzer
(`analysis.run_all`) and the summary, timed against the load ("analyze without plots"), and then
writes the report with plots (tables as CSV, PNGs, report.html, summary.json) into a temporary
directory, timed on its own.
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
import amqpcap.io.load, pandas  # (imported by load() on first use: timed as imports, not load)
t1 = time.perf_counter()
cap = amqpcap.load(sys.argv[1])
t2 = time.perf_counter()
info = {"import_s": t1 - t0, "load_s": t2 - t1, "packets": cap.summary["packets"],
        "frames": len(cap.frames), "connections": len(cap.connections), "anomalies": len(cap.anomalies)}
if "--analyze" in sys.argv:
    import tempfile
    from pathlib import Path
    from amqpcap.analysis.registry import rank
    from amqpcap.engine.registered import run_all
    from amqpcap.report.outputs import write_outputs
    from amqpcap.summary.prepared import prepare
    results = run_all(cap)
    findings = rank([f for r in results for f in r.findings])
    t3 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        write_outputs(cap, results, prepare(cap, results), Path(d))
    t4 = time.perf_counter()
    info.update(analyze_s=t3 - t2, report_s=t4 - t3, findings=len(findings))
print(json.dumps(info))
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
    ap.add_argument("--analyze", action="store_true", help="also time the analyzers and the report (issue 3's targets)")
    args = ap.parse_args()
    size = os.path.getsize(args.capture)

    # what the process holds before any capture: the interpreter with amqpcap and pandas imported
    base_rss = min(run([sys.executable, "-c", "import amqpcap, amqpcap.analysis.registry"])[1] for _ in range(2))
    best = None
    for _ in range(args.repeat):
        wall, rss, out = run([sys.executable, "-c", AMQPCAP_CHILD, args.capture] + (["--analyze"] if args.analyze else []))
        info = json.loads(out)
        if best is None or info["load_s"] < best[1]["load_s"]:
            best = (wall, info, rss)
    wall, info, rss = best
    # the process as a user loading the capture sees it: start-up, imports and load, without the
    # analysis and report that --analyze adds
    wall -= info.get("analyze_s", 0.0) + info.get("report_s", 0.0)
    n = info["packets"]
    print(f"capture: {args.capture} ({size / 1e6:.1f} MB, {n:,} packets)")
    print(f"amqpcap: load {info['load_s']:.3f} s (process {wall:.3f} s incl. Python start and imports{', without the analysis' if args.analyze else ''}), "
          f"{n / info['load_s'] / 1e6:.2f} M packets/s, {size / info['load_s'] / 1e6:.0f} MB/s, "
          f"peak RSS {rss / 1e6:.0f} MB = {rss / size:.2f} x file{' (load and analyze)' if args.analyze else ''}, "
          f"{(rss - base_rss) / 1e6:.0f} MB = {(rss - base_rss) / size:.2f} x file above the {base_rss / 1e6:.0f} MB "
          f"of Python with amqpcap, numpy and pandas imported; "
          f"{info['frames']:,} frames, {info['connections']:,} connections, {info['anomalies']:,} anomalies")
    if args.analyze:
        load, an = info["load_s"], info["analyze_s"]
        # Three ways to read "analyze without plots takes at most 2x the ingestion time": the
        # analysis alone against the load; load and analysis against the load (in-process); and
        # the whole process, start-up and imports included, against a process that only loads.
        print(f"analyze: analyzers and summary {an:.3f} s = {an / load:.2f} x load; load + analyzers "
              f"{load + an:.3f} s = {(load + an) / load:.2f} x load; as processes "
              f"{wall + an:.3f} s = {(wall + an) / wall:.2f} x the load-only process; {info['findings']} findings; "
              f"report with plots +{info['report_s']:.2f} s")
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
