#!/usr/bin/env python3
"""How much memory `amqpcap analyze CAPTURE --out DIR` takes, against the capture's size and its
packet count: the figures README.md and amqpcap/io/inputs.py quote ("Memory" in docs/speed.md).

    python benchmarks/memory_factor.py CAPTURE [CAPTURE ...]
    python benchmarks/memory_factor.py --made          # the captures below, made from fixtures

Each capture is analysed in a child process of its own (`--in-memory`, so a large one is not
sent to Dask); its peak RSS is the kernel's (wait4's ru_maxrss). Printed per capture: bytes,
packets, peak RSS, RSS / capture bytes, and RSS above the bare interpreter's per packet. --made
builds, with benchmarks/make_large_capture.py, a capture of small PerfTest messages (copies of
fixtures/prefetch-consumers.pcap, ~75 MB) and one of 1-4 MiB messages (copies of
fixtures/huge-messages.pcap.gz, ~250 MB), in a temporary directory.
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MADE = (("small-messages", "prefetch-consumers.pcap", 300_000), ("large-messages", "huge-messages.pcap.gz", 60_000))


# Linux carries the resident high-water mark of the process that calls exec into the new program's
# ru_maxrss (exec_mmap records the old address space's hiwater_rss), so a command started straight
# from a large process (a pytest worker at 1.2 GB) reports at least that process's size. A small
# launcher in between is what the command inherits instead: its ~10 MB is below any measured figure.
_LAUNCHER = ("import os, subprocess, sys\n"
             "p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
             "_, status, usage = os.wait4(p.pid, 0)\n"
             "print(os.waitstatus_to_exitcode(status), usage.ru_maxrss * 1024)\n")


def peak_rss(cmd: list[str]) -> int:
    """The kernel's peak RSS of `cmd`, in bytes, not counting the size of the process measuring it."""
    launched = subprocess.run([sys.executable, "-c", _LAUNCHER, *cmd], capture_output=True, text=True, check=True)
    code, rss = (int(word) for word in launched.stdout.split())
    if code != 0:
        sys.exit(f"{' '.join(cmd)} failed (exit code {code})")
    return rss


def own_peak_rss_mib() -> float:
    """This process's peak resident set (a Dask worker's, when run there; VmHWM: ru_maxrss would
    count what a forked process inherited)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def packets(capture: Path) -> int:
    import amqpcap

    return int(amqpcap.load(capture).summary["packets"])


def make(tmp: Path) -> list[Path]:
    made = []
    for name, source, n in MADE:
        src = ROOT / "fixtures" / source
        if source.endswith(".gz"):
            plain = tmp / source[:-3]
            plain.write_bytes(gzip.decompress(src.read_bytes()))
            src = plain
        out = tmp / f"{name}.pcap"
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "make_large_capture.py"), str(src), str(out),
                        "--packets", str(n)], check=True, stderr=subprocess.DEVNULL)
        made.append(out)
    return made


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("captures", nargs="*", type=Path)
    ap.add_argument("--made", action="store_true", help="also the two captures made from fixtures (module doc)")
    a = ap.parse_args()
    base = peak_rss([sys.executable, "-c", "import amqpcap, amqpcap.analysis.registry, pandas, pyarrow"])
    print(f"bare interpreter with amqpcap imported: {base / 2**20:.0f} MiB")
    with tempfile.TemporaryDirectory(prefix="amqpcap-memory-") as tmp:
        caps = list(a.captures) + (make(Path(tmp)) if a.made else [])
        for cap in caps:
            rss = peak_rss([sys.executable, "-m", "amqpcap", "analyze", str(cap), "--in-memory", "--out",
                            str(Path(tmp) / f"out-{cap.name}")])
            size, n = cap.stat().st_size, packets(cap)
            print(json.dumps({"capture": cap.name, "capture_mb": round(size / 1e6, 1), "packets": n,
                              "peak_rss_mb": round(rss / 1e6), "rss_per_capture_byte": round(rss / size, 2),
                              "rss_above_bare_per_packet_bytes": round((rss - base) / n)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
