#!/usr/bin/env python3
"""How fast `amqpcap ingest` could be on this machine, from the work it cannot skip (issue 51:
"≥ 1.5 M packets/s on 2 cores").

    python benchmarks/ingest_floor.py CAPTURE [--repeat 2]

Measures in one run, per million packets of CAPTURE:
- **ingest**: `amqpcap ingest CAPTURE` as a whole process (wall, user and system CPU);
- **encode**: the CPU of writing every Parquet file of that dataset again, from memory, with
  amqpcap's options (`table_files.parquet_options`), one file after another in one thread: the
  encoding any design that writes these tables with pyarrow pays;
- **decode**: the CPU of one decode of the whole capture in one process, without a spill: the
  frames handed to a sink and dropped as they settle (the frame cap lifted, so that every frame
  is made), the other tables kept. A design that reads the capture once pays this.

Then the floors on two cores: encode + decode spread perfectly over both (`(encode + decode) / 2`),
and, since the decode is one thread, never below the decode alone; the packets per second each
allows. CPU is `time.process_time` of the step (every thread of its process) or getrusage of the
child process; the best of --repeat runs of each.
"""

from __future__ import annotations

import argparse
import io
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DECODE = """
import json, sys, time
from dataclasses import replace
from amqpcap.io.load import Limits, decode_arrow
start = time.process_time()
d = decode_arrow(sys.argv[1], limits=replace(Limits(), max_frames=1 << 40), records_sink=lambda b: None,
                 frames_sink=lambda b: None, pandas=False)
print(json.dumps({"cpu_s": time.process_time() - start, "packets": d.summary["packets"]}))
"""


def ingest(capture: Path, out: Path) -> tuple[float, float, float]:
    """`amqpcap ingest` as a whole process: wall, user and system seconds."""
    shutil.rmtree(out, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "amqpcap", "ingest", str(capture), "-o", str(out)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime


def encode(dataset: Path) -> float:
    """CPU seconds of writing every Parquet file of `dataset` again from memory (read first)."""
    import pyarrow.parquet as pq

    from amqpcap.io.table_files import parquet_options

    tables = [pq.read_table(p, partitioning=None) for p in sorted(dataset.rglob("*.parquet"))]
    start = time.process_time()
    for t in tables:
        pq.write_table(t, io.BytesIO(), **parquet_options(t.schema))
    return time.process_time() - start


def decode(capture: Path) -> tuple[float, int]:
    """CPU seconds of a whole decode without a spill (in a process of its own), and the packets."""
    out = subprocess.run([sys.executable, "-c", DECODE, str(capture)], check=True, capture_output=True, text=True)
    r = json.loads(out.stdout)
    return r["cpu_s"], r["packets"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("capture", type=Path)
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        out = Path(tmp, "dataset")
        runs = [ingest(a.capture, out) for _ in range(a.repeat)]
        wall, user, system = min(runs)
        enc = min(encode(out) for _ in range(a.repeat))
    dec, packets = min(decode(a.capture) for _ in range(a.repeat))
    m = packets / 1e6

    def rate(seconds: float) -> str:
        return f"{m / seconds:.2f} M packets/s"

    print(f"{a.capture}: {packets:,} packets; per M packets:")
    print(f"  ingest  {wall / m:.3f} s wall, {(user + system) / m:.3f} s CPU ({user / m:.3f} user + {system / m:.3f} "
          f"system, {system / (user + system):.0%} system): {rate(wall)}")
    print(f"  encode  {enc / m:.3f} s CPU (every table file again, from memory, one thread)")
    print(f"  decode  {dec / m:.3f} s CPU (the whole capture in one process, no spill)")
    floor = max((enc + dec) / 2, dec)
    print(f"  floor on 2 cores: {floor / m:.3f} s wall = {rate(floor)} (encode + decode spread over both, "
          f"at least the decode's one thread); the ingest's CPU spread over both: {rate((user + system) / 2)}")


if __name__ == "__main__":
    main()
