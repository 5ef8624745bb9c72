#!/usr/bin/env python3
"""Reading a tcpdump ring as one capture, against the single file and against what a user did
before (mergecap the ring, then read the merged file), in one run.

    python3 benchmarks/ring.py CAPTURE [--files 10] [--repeat 3]

Cuts CAPTURE into --files files with editcap (a ring: same packets, consecutive times), then
runs, each as its own process (peak RSS per process, as /usr/bin/time measures it):
  single:    amqpcap.load(CAPTURE)
  ring:      amqpcap.load(RING_DIR)                  the files merged by time in the core
  mergecap:  mergecap -w merged.pcap RING_FILES...   (then the single file's load)
  ingest:    amqpcap ingest RING_DIR --out DATASET   (decode + Parquet dataset by connection)
and prints the best of --repeat wall times, packets/s, peak RSS and the ratios.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from rss import run_measured  # noqa: E402


def timed(cmd: list[str]) -> tuple[float, int]:
    t = time.perf_counter()
    with open(os.devnull, "wb") as null:
        code, rss = run_measured(cmd, null, null)
    if code:
        raise SystemExit(f"failed ({code}): {' '.join(cmd)}")
    return time.perf_counter() - t, rss


def best(cmd: list[str], repeat: int, before=None) -> tuple[float, int]:
    runs = []
    for _ in range(repeat):
        if before:
            before()
        runs.append(timed(cmd))
    return min(r[0] for r in runs), max(r[1] for r in runs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture", type=Path)
    ap.add_argument("--files", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    for tool in ("editcap", "mergecap", "capinfos"):
        if not shutil.which(tool):
            raise SystemExit(f"needs {tool} (Debian: apt-get install wireshark-common)")
    packets = int(subprocess.run(["capinfos", "-M", "-c", "-T", "-r", str(args.capture)], capture_output=True,
                                 text=True, check=True).stdout.split()[-1])
    with tempfile.TemporaryDirectory() as tmp:
        ring = Path(tmp) / "ring"
        ring.mkdir()
        per_file = -(-packets // args.files)
        subprocess.run(["editcap", "-F", "pcap", "-c", str(per_file), str(args.capture), str(ring / "ring.pcap")],
                       check=True)
        files = sorted(str(p) for p in ring.iterdir())
        py = [sys.executable, "-c", "import sys, amqpcap; amqpcap.load(sys.argv[1])"]
        dataset = Path(tmp) / "dataset"
        results = {
            "single": best([*py, str(args.capture)], args.repeat),
            "ring": best([*py, str(ring)], args.repeat),
            "mergecap": best(["mergecap", "-F", "pcap", "-w", str(Path(tmp) / "merged.pcap"), *files], args.repeat),
            "ingest": best([sys.executable, "-m", "amqpcap", "ingest", str(ring), "--out", str(dataset)], args.repeat,
                           before=lambda: shutil.rmtree(dataset, ignore_errors=True)),
        }
    print(f"{args.capture}: {packets:,} packets; ring of {len(files)} files (editcap -c {per_file})")
    for name, (s, rss) in results.items():
        print(f"  {name:9s} {s:7.2f} s  {packets / s / 1e6:5.2f} M packets/s  peak RSS {rss / 2**20:6.0f} MiB")
    single, ring_s, merge = results["single"][0], results["ring"][0], results["mergecap"][0]
    print(f"ring / single file: {ring_s / single:.2f}x the time, "
          f"{results['ring'][1] / results['single'][1]:.2f}x the peak RSS")
    print(f"mergecap + load / ring read as a set: {(merge + single) / ring_s:.2f}x")
    print(f"ingest (decode + dataset) / load: {results['ingest'][0] / ring_s:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
