"""`amqpcap analyze BIG.pcap` as a user types it, against the in-memory path (issue 13).

    python benchmarks/make_large_capture.py fixtures/prefetch-consumers.pcap /tmp/big10m.pcap --packets 10000000
    python benchmarks/analyze_large.py /tmp/big10m.pcap

Runs, in one go, on the same capture:

1. ``amqpcap analyze BIG``, as a user types it: a capture over the in-memory size goes through a
   temporary dataset and a local Dask cluster;
2. ``amqpcap analyze BIG --out A``: the same, writing every output (tables, plots, report.html);
3. ``amqpcap analyze BIG --in-memory --limit max_frames=N --out B``: decoded in one process,
   with the frame cap raised so that every frame is decoded there too.

and prints each one's wall time and the peak RSS of every process it started (the command, the
Dask scheduler's and workers' processes), whether path 1 decoded every frame (no `frame-limit`
anomaly), and whether the two summary.json are equal.

Peak RSS per process is each process's VmHWM (Linux's high-water mark of its resident set),
read from /proc every 0.1 s until the process ends: what it grew in its last 0.1 s is not seen.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    return kids


def _hwm_kib(pid: int) -> tuple[int, str] | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            status = f.read()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]), cmd
    return None


def run_tree_measured(argv: list[str], env: dict | None = None, cwd: str | Path | None = None
                      ) -> tuple[int, float, dict[int, tuple[int, str]]]:
    """(exit code, seconds, {pid: (peak RSS in KiB, command line)}) of `argv` and its descendants
    (run with `env` in `cwd`, when given)."""
    peaks: dict[int, tuple[int, str]] = {}
    t = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            kids, todo = _children(), [proc.pid]
            while todo:
                pid = todo.pop()
                got = _hwm_kib(pid)
                if got:
                    peaks[pid] = max(peaks.get(pid, (0, "")), got)
                todo += kids.get(pid, [])
            done.wait(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = proc.communicate()
    seconds = time.perf_counter() - t
    done.set()
    sampler.join()
    if proc.returncode:
        print(err, file=sys.stderr)
    return proc.returncode, seconds, peaks


def _role(cmd: str) -> str:
    if "amqpcap" in cmd and ("analyze" in cmd):
        return "amqpcap analyze"
    if "spawn_main" in cmd or "multiprocessing" in cmd:
        return "spawned process (a Dask worker, or the writer of the capture's tables)"
    return cmd[:60]


def report(label: str, seconds: float, peaks: dict[int, tuple[int, str]]) -> float:
    biggest = max(kib for kib, _ in peaks.values())
    print(f"{label}: {seconds:.1f} s, peak RSS of its largest process {biggest / 2**20:.2f} GiB")
    for pid, (kib, cmd) in sorted(peaks.items(), key=lambda kv: -kv[1][0])[:6]:
        print(f"    {kib / 2**20:6.2f} GiB  {_role(cmd)} (pid {pid})")
    return biggest


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture", type=Path)
    ap.add_argument("--max-frames", type=int, default=100_000_000, help="the in-memory run's frame cap")
    args = ap.parse_args()
    amqpcap = [sys.executable, "-m", "amqpcap", "analyze", str(args.capture)]
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp) / "dask", Path(tmp) / "memory"
        print(f"{args.capture}: {args.capture.stat().st_size / 1e9:.2f} GB")
        code, st, pt = run_tree_measured(amqpcap)
        if code:
            return code
        code, sa, pa = run_tree_measured([*amqpcap, "--out", str(a)])
        if code:
            return code
        code, sb, pb = run_tree_measured([*amqpcap, "--in-memory", "--limit", f"max_frames={args.max_frames}",
                                          "--out", str(b)])
        if code:
            return code
        report("as typed, through a dataset on a local cluster (no --out)", st, pt)
        ra = report("the same with --out (every table, plot and report.html written)", sa, pa)
        rb = report(f"in memory, --out (--in-memory --limit max_frames={args.max_frames:,})", sb, pb)
        ja, jb = json.loads((a / "summary.json").read_text()), json.loads((b / "summary.json").read_text())
        limited = ja["capture"]["anomalies"].get("frame-limit", 0)
        print(f"frames decoded: {ja['capture']['frames']:,} (frame-limit anomalies: {limited:,}); "
              f"in memory: {jb['capture']['frames']:,}")
        print(f"summary.json equal: {ja == jb}")
        print(f"ratios, dataset path over in-memory: time {sa / sb:.2f}x, largest process's peak RSS {ra / rb:.2f}x")
        return 0 if ja == jb else 1


if __name__ == "__main__":
    sys.exit(main())
