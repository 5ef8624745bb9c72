"""Test-wide settings.

Dask's offload thread off (`amqpcap.engine.on_dask._no_offload_thread`) before any test imports
`distributed`, so that a test using a Dask client in this process leaves no thread behind for the
report tests, which fork writers only from a process without one.

The tests sit in one folder per layer of `amqpcap/` (tests/README.md); what they share sits in
tests/ itself (crafting.py, tshark_reference.py, accounting.py, ...), and a few borrow another
test module's assertions (`from test_partition import assert_same_partial`). So tests/ and each
of its test folders are importable by module name, from whichever folder the importing test is
in, and whatever order pytest imports the files in. The repository's tools/ too (the doc
generators and the core's file graph, which the tests run as the README says to run them).
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("DASK_DISTRIBUTED__COMM__OFFLOAD", "False")

TESTS = Path(__file__).resolve().parent
for folder in [TESTS.parent / "tools", TESTS, *sorted(p for p in TESTS.iterdir() if p.is_dir() and any(p.glob("test_*.py")))]:
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
