#!/usr/bin/env python3
"""`amqpcap ingest` on tcpdump rings of growing size, made from a real recording: packets/s
and peak RSS at each size, in one run, to show how time and memory grow with the input; and the
same ingest with its buckets decoded on a local Dask cluster of --workers processes (wall time
without the cluster's start, peak RSS of each worker; this process reads the capture and
spills it).

    python3 benchmarks/scale.py CAPTURE --packets 2000000 10000000 [--file-packets 2000000] [--workers 2]
                                [--baseline DIR] [--tshark]

For each size: `make_large_capture.py` makes one capture of that many packets from CAPTURE
(independent copies of its connections), `editcap -c` cuts it into a ring of --file-packets
per file, then `amqpcap ingest RING --out DATASET` runs as its own process (peak RSS as
/usr/bin/time measures it). Issue 13 asks for >= 1.5 M packets/s and <= 1 GB, flat from 10M to
100M packets; the figures printed say how far the ingest is from that.

--baseline DIR runs the same ingest of each ring with another amqpcap too, the package in
DIR (a checkout of an earlier commit whose core is built into DIR/amqpcap, e.g. `git worktree
add /tmp/old COMMIT`, `cargo build --release` in its rust/, lib_core.so copied to
amqpcap/_core.abi3.so), and prints this one's time and peak RSS against it. --tshark times
tshark on the ring's first file, for contrast (the AMQP method fields of every frame, as
`frames_export.py` asks it): packets/s and peak RSS.
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

sys.path.insert(0, str(HERE))
from memory_factor import own_peak_rss_mib  # noqa: E402
import cloudpickle  # noqa: E402  (Dask's pickler: the workers cannot import this folder's modules,
import memory_factor  # noqa: E402  so the function run on them travels by value)
cloudpickle.register_pickle_by_value(memory_factor)


#: conversations a ring may hold before the rest is skipped (`--limit max_streams`): a 100M
#: packet ring made from the PerfTest recording holds about 284,000, over the default 250,000,
#: and the conversations past the cap would not be decoded (a stream-limit anomaly)
MAX_STREAMS = 1_000_000


def on_dask(ring: Path, dataset: Path, workers: int) -> tuple[float, list[float]]:
    """`amqpcap ingest RING --scheduler local --workers N`'s work, timed once the cluster is up:
    wall seconds and each worker's peak RSS (MiB)."""
    from amqpcap.engine import on_dask as engine
    from amqpcap.io.load import Limits

    with engine.client(workers=workers) as c:
        t = time.perf_counter()
        engine.ingest(ring, dataset, c, limits=Limits(max_streams=MAX_STREAMS))
        seconds = time.perf_counter() - t
        return seconds, sorted(c.run(own_peak_rss_mib).values())


def ingest_measured(ring: Path, dataset: Path, tmp: Path, baseline: Path | None = None) -> tuple[float, int]:
    """`amqpcap ingest RING --out DATASET` as its own process (with `baseline`: the amqpcap
    package in that directory): wall seconds and peak RSS (bytes)."""
    env = {**os.environ, "PYTHONPATH": str(baseline)} if baseline else None
    t = time.perf_counter()
    with open(tmp / "out.txt", "wb") as out, open(tmp / "err.txt", "wb") as err:
        code, rss = run_measured([sys.executable, "-m", "amqpcap", "ingest", str(ring.resolve()),
                                  "--out", str(dataset.resolve()),
                                  "--limit", f"max_streams={MAX_STREAMS}"],
                                 out, err, env=env, cwd=tmp)  # (not the repository's root: see frames_export)
    seconds = time.perf_counter() - t
    if code:
        sys.exit((tmp / "err.txt").read_text(errors="replace"))
    return seconds, rss


def tshark_measured(capture: Path, tmp: Path) -> tuple[int, float, int]:
    """tshark exporting the AMQP method fields of `capture` (as `frames_export.py`): its
    packets, wall seconds and peak RSS (bytes)."""
    packets = int(subprocess.run(["capinfos", "-c", "-M", "-T", str(capture)], check=True, capture_output=True,
                                 text=True).stdout.split()[-1])
    t = time.perf_counter()
    with open(tmp / "tshark.txt", "wb") as out, open(tmp / "tshark-err.txt", "wb") as err:
        code, rss = run_measured(["tshark", "-r", str(capture), "-Y", "amqp", "-T", "fields", "-e", "frame.number",
                                  "-e", "amqp.method.class", "-e", "amqp.method.method"], out, err)
    if code:
        sys.exit((tmp / "tshark-err.txt").read_text(errors="replace"))
    return packets, time.perf_counter() - t, rss


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture", type=Path)
    ap.add_argument("--packets", type=int, nargs="+", default=[2_000_000, 10_000_000])
    ap.add_argument("--file-packets", type=int, default=2_000_000)
    ap.add_argument("--workers", type=int, default=2, help="workers of the local Dask cluster (0: skip it)")
    ap.add_argument("--baseline", type=Path, help="also ingest with the amqpcap package in this directory")
    ap.add_argument("--tshark", action="store_true", help="also time tshark on the ring's first file")
    args = ap.parse_args()
    rows, tshark = [], None
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
            seconds, rss = ingest_measured(ring, dataset, Path(tmp))
            base = ingest_measured(ring, Path(tmp) / "dataset-baseline", Path(tmp), args.baseline) if args.baseline else None
            files = len(list(ring.iterdir()))
            if args.tshark and n == args.packets[0]:
                tshark = tshark_measured(sorted(ring.iterdir())[0], Path(tmp))
            dask = on_dask(ring, Path(tmp) / "dataset-dask", args.workers) if args.workers else None
            rows.append((n, files, size, seconds, rss, dask, base))
    print(f"amqpcap ingest of a ring made from {args.capture} ({args.file_packets:,} packets per file):")
    for n, files, size, seconds, rss, dask, base in rows:
        print(f"  {n:>12,} packets, {files:3d} files, {size / 1e9:5.2f} GB: {seconds:6.1f} s, "
              f"{n / seconds / 1e6:4.2f} M packets/s, peak RSS {rss / 2**30:5.2f} GiB")
        if base:
            print(f"  {'':>12}  baseline {args.baseline}: {base[0]:6.1f} s, peak RSS {base[1] / 2**30:5.2f} GiB; "
                  f"this one takes {seconds / base[0]:.2f}x its time and {rss / base[1]:.2f}x its peak RSS")
        if dask:
            d_seconds, d_rss = dask
            print(f"  {'':>12}  on {args.workers} Dask workers: {d_seconds:6.1f} s, {n / d_seconds / 1e6:4.2f} M packets/s "
                  f"({seconds / d_seconds:.2f}x), peak RSS per worker " + ", ".join(f"{r / 1024:.2f} GiB" for r in d_rss))
    if tshark:
        packets, seconds, rss = tshark
        print(f"tshark on one file of the ring ({packets:,} packets): {seconds:.1f} s, {packets / seconds / 1e3:.0f} k packets/s, "
              f"peak RSS {rss / 2**30:.2f} GiB")
    if len(rows) > 1:
        (n0, *_, r0, _, _), (n1, *_, r1, _, _) = rows[0], rows[-1]
        print(f"peak RSS grew {r1 / r0:.1f}x for {n1 / n0:.1f}x the packets")
    return 0


if __name__ == "__main__":
    sys.exit(main())
