"""The command line starts no BLAS thread pool (issue 51): numpy's OpenBLAS would start one thread
per core at import, which spin while the command decodes and writes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

#: a process that imports the command line, then numpy (as every subcommand that reads a capture
#: does), and prints how many threads it has
THREADS_AFTER_IMPORT = "import amqpcap.cli, numpy, os; print(len(os.listdir('/proc/self/task')))"


@pytest.mark.skipif(not os.path.isdir("/proc/self/task") or (os.cpu_count() or 1) < 2,
                    reason="needs Linux's /proc and two cores (on one core OpenBLAS starts no thread)")
def test_the_command_line_process_has_one_thread_after_numpy():
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", THREADS_AFTER_IMPORT], env=env, capture_output=True, text=True, check=True)
    assert int(out.stdout) == 1


def test_a_value_the_user_set_is_kept():
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "2"}
    out = subprocess.run([sys.executable, "-c", "import amqpcap.cli, os; print(os.environ['OPENBLAS_NUM_THREADS'])"],
                         env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "2"
