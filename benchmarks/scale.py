#!/usr/bin/env python3
"""`amqpcap ingest` on tcpdump rings of growing size, made from a real recording: packets/s
and peak RSS at each size, in one run, to show how memory grows with the input.

    python3 benchmarks/scale.py CAPTURE --packets 2000000 10000000 [--file-packets 2000000]

For each size: `make_large_capture.py` makes one capture of that many packets from CAPTURE
(independent copies of its connections), `editcap -c` cuts it into a ring of --file-packets
per file, then `amqpcap ingest RING --out DATASET` runs as its own process (peak RSS as
/usr/bin/time measures it). Issue 13 asks for >= 1.5 M packets/s and <= 1 GB, flat from 10M to
100M packets; the figures printed say how far the current (in-memory) ingest is from that.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from rss import run_measured  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture", type=Path)
    ap.add_argument("--packets", type=int, nargs="+", default=[2_000_000, 10_000_000])
    ap.add_argument("--file-packets", type=int, default=2_000_000)
    args = ap.parse_args()
    rows = []
    for n in args.packets:
        with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/var/tmp")) as tmp:
            big, ring, dataset = Path(tmp) / "big.pcap", Path(tmp) / "ring", Path(tmp) / "dataset"
            subprocess.run([sys.executable, str(HERE / "make_large_capture.py"), str(args.capture), str(big),
                            "--packets", str(n)], check=True, stdout=subprocess.DEVNULL)
            ring.mkdir()
            subprocess.run(["editcap", "-F", "pcap", "-c", str(args.file_packets), str(big), str(ring / "ring.pcap")],
                           check=True)
            size = big.stat().st_size
            big.unlink()
            t = time.perf_counter()
            with open(Path(tmp) / "out.txt", "wb") as out, open(Path(tmp) / "err.txt", "wb") as err:
                code, rss = run_measured([sys.executable, "-m", "amqpcap", "ingest", str(ring), "--out", str(dataset)],
                                         out, err)
            seconds = time.perf_counter() - t
            if code:
                print((Path(tmp) / "err.txt").read_text(errors="replace"), file=sys.stderr)
                return 1
            files = len(list(ring.iterdir()))
            rows.append((n, files, size, seconds, rss))
    print(f"amqpcap ingest of a ring made from {args.capture} ({args.file_packets:,} packets per file):")
    for n, files, size, seconds, rss in rows:
        print(f"  {n:>12,} packets, {files:3d} files, {size / 1e9:5.2f} GB: {seconds:6.1f} s, "
              f"{n / seconds / 1e6:4.2f} M packets/s, peak RSS {rss / 2**30:5.2f} GiB")
    if len(rows) > 1:
        (n0, *_, r0), (n1, *_, r1) = rows[0], rows[-1]
        print(f"peak RSS grew {r1 / r0:.1f}x for {n1 / n0:.1f}x the packets")
    return 0


if __name__ == "__main__":
    sys.exit(main())
