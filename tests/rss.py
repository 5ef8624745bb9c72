"""Peak memory of one command, measured the way /usr/bin/time does.

`ru_maxrss` of a child started straight from a large process is not the child's own peak: Linux
keeps the high-water mark of the memory a process replaces at exec, and a child of (v)fork
starts from its parent's. So the command runs as the grandchild of a small launcher, which
forks it afresh and reports its `ru_maxrss` alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

LAUNCHER = r"""
import os, sys
out, argv = sys.argv[1], sys.argv[2:]
pid = os.fork()
if pid == 0:
    try:
        os.execvp(argv[0], argv)
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
with open(out, "w") as f:
    f.write(str(usage.ru_maxrss * 1024))
sys.exit(os.waitstatus_to_exitcode(status) % 256)
"""


def run_measured(cmd: list[str], stdout, stderr, env: dict | None = None, timeout_s: float | None = None,
                 cwd: str | None = None) -> tuple[int, int]:
    """Run `cmd` (in `cwd`) with stdout/stderr going to the given files; return (exit code, peak
    RSS in bytes). A command still running after `timeout_s` is killed (exit code -9)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "maxrss"
        p = subprocess.Popen([sys.executable, "-S", "-c", LAUNCHER, str(report), *cmd], stdout=stdout, stderr=stderr,
                             env=env, start_new_session=True, cwd=cwd)
        timer = threading.Timer(timeout_s, lambda: os.killpg(p.pid, 9)) if timeout_s else None
        if timer:
            timer.start()
        try:
            code = p.wait()
        finally:
            if timer:
                timer.cancel()
        rss = int(report.read_text()) if report.exists() else 0
    return code, rss
