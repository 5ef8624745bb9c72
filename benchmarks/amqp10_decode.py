#!/usr/bin/env python3
"""AMQP 1.0 decoding against AMQP 0-9-1 decoding, per frame, in one run.

    python benchmarks/amqp10_decode.py [--scale 1.0] [--rounds 3] [--workdir /tmp/a10bench]
    python benchmarks/amqp10_decode.py --instructions [--scale 0.05]

Issue 50: "a 1.0-heavy capture decodes within 1.5x of a 0-9-1 capture's time per frame". Each
pair is two real recordings of the same traffic shape, one per protocol, made large by
`make_large_capture.py` (copies as separate connections, the AMQP bytes untouched):

- one at a time: fixtures/amqp10-credit1.pcap (a receiver granting credit 1 per message; transfer,
  flow, disposition per message) against fixtures/prefetch1.pcap (prefetch 1: deliver, ack);
- large messages: fixtures/amqp10-multiframe.pcap (64 kB and 150 kB messages in 4 kB transfer
  frames) against fixtures/large-messages.pcap (400 kB bodies in 128 KiB frames).

Each decode is a child process (the core's decode into Arrow tables, `decode_arrow(pandas=False)`,
and `amqpcap.load`, which adds the pandas tables); its CPU time (user + system, `wait4`) is
measured around the call inside the child. The rounds alternate the protocols; the best CPU of
each is kept. Printed: CPU per million frames and per million packets, and the 1.0/0-9-1 ratios.

--instructions counts instructions instead of timing (valgrind's cachegrind, `--cache-sim=no`):
the core's decode of each capture, less the same process on the capture's first 10 packets (the
interpreter, the imports, the decoder's set-up), per frame and per packet. Counts repeat to
within 1% where CPU times on a shared 2-core machine vary by 30%: the measure for comparing
two builds of the decoder. Under valgrind a decode runs ~50x slower: use --scale 0.05.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: pair name: (1.0 recording, 0-9-1 recording, packets made of each at scale 1: the large-message
#: captures are ~100 kB per packet, so 100k packets are ~1 GB)
PAIRS = {
    "one at a time": ("amqp10-credit1.pcap", "prefetch1.pcap", 2_000_000),
    "large messages": ("amqp10-multiframe.pcap", "large-messages.pcap", 100_000),
}

CHILD = r"""
import json, resource, sys
import amqpcap.io.load as L
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime
how, path = sys.argv[1], sys.argv[2]
import pyarrow  # (imported before the clock starts: the decode is timed, not the imports)
if how == "load":
    import pandas
u0, s0 = cpu()
if how == "core":
    d = L.decode_arrow(path, pandas=False)
    frames = d.tables["frames"].num_rows + d.tables["amqp10_frames"].num_rows
    packets = d.tables["packets"].num_rows
else:
    cap = L.load(path)
    frames, packets = len(cap.frames) + len(cap.amqp10_frames), len(cap.packets)
u1, s1 = cpu()
print(json.dumps({"user_s": u1 - u0, "sys_s": s1 - s0, "frames": frames, "packets": packets}))
"""


def large(source: Path, packets: int, workdir: Path) -> Path:
    out = workdir / f"{source.name.split('.')[0]}-{packets}.pcap"
    if not out.exists():
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "make_large_capture.py"), str(source), str(out),
                        "--packets", str(packets)], check=True, stdout=subprocess.DEVNULL)
    return out


def instructions(path: Path) -> tuple[int, dict]:
    """Instructions of the core's decode of `path` in a child process, by cachegrind, and the
    child's counts of packets and frames."""
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={tmp}/cg",
                            sys.executable, "-c", CHILD, "core", str(path)],
                           capture_output=True, text=True, check=True, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    refs = re.search(r"I\s+refs:\s+([\d,]+)", r.stderr)
    if not refs:
        raise SystemExit(f"no instruction count from valgrind: {r.stderr[-500:]}")
    return int(refs.group(1).replace(",", "")), json.loads(r.stdout)


def count_instructions(name: str, paths: dict[str, Path], workdir: Path) -> None:
    per: dict[str, tuple[float, float]] = {}
    print(f"{name}, instructions of the core's decode (cachegrind, less a 10-packet decode):")
    for proto, path in paths.items():
        head = workdir / f"{path.stem}-head10.pcap"
        subprocess.run(["editcap", "-r", str(path), str(head), "1-10"], check=True)
        (whole, counts), (start, _) = instructions(path), instructions(head)
        n = whole - start
        per[proto] = (n / counts["frames"], n / counts["packets"])
        print(f"  {proto:6} {path.name}: {counts['packets']:,} packets, {counts['frames']:,} frames, "
              f"{n / 1e6:,.1f} M instructions: {per[proto][0]:,.0f} per frame, {per[proto][1]:,.0f} per packet")
    a, b = per["1.0"], per["0-9-1"]
    print(f"  1.0 / 0-9-1 per frame: {a[0] / b[0]:.2f}; per packet: {a[1] / b[1]:.2f}")


def decode(how: str, path: Path) -> dict:
    r = subprocess.run([sys.executable, "-c", CHILD, how, str(path)], capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="times the packets of PAIRS")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/a10bench"))
    ap.add_argument("--instructions", action="store_true", help="count instructions (valgrind) instead of timing")
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    for name, (new, old, packets) in PAIRS.items():
        packets = int(packets * args.scale)
        paths = {"1.0": large(ROOT / "fixtures" / new, packets, args.workdir),
                 "0-9-1": large(ROOT / "fixtures" / old, packets, args.workdir)}
        if args.instructions:
            count_instructions(name, paths, args.workdir)
            continue
        for how in ("core", "load"):
            best: dict[str, dict] = {}
            for _ in range(args.rounds):
                for proto, path in paths.items():
                    r = decode(how, path)
                    r["cpu_s"] = r["user_s"] + r["sys_s"]
                    if proto not in best or r["cpu_s"] < best[proto]["cpu_s"]:
                        best[proto] = r
            print(f"{name}, {how}:")
            for proto, r in best.items():
                print(f"  {proto:6} {paths[proto].name}: {r['packets']:,} packets, {r['frames']:,} frames, CPU "
                      f"{r['cpu_s']:.2f} s (user {r['user_s']:.2f}, sys {r['sys_s']:.2f}): "
                      f"{r['cpu_s'] / r['frames'] * 1e6:.2f} s per M frames, {r['cpu_s'] / r['packets'] * 1e6:.2f} s per M packets")
            a, b = best["1.0"], best["0-9-1"]
            print(f"  1.0 / 0-9-1 per frame: {(a['cpu_s'] / a['frames']) / (b['cpu_s'] / b['frames']):.2f}; "
                  f"per packet: {(a['cpu_s'] / a['packets']) / (b['cpu_s'] / b['packets']):.2f}")


if __name__ == "__main__":
    main()
