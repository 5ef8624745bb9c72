"""Test-wide setting: Dask's offload thread off (`amqpcap.engine.on_dask._no_offload_thread`) before any
test imports `distributed`, so that a test using a Dask client in this process leaves no thread
behind for the report tests, which fork writers only from a process without one."""

import os

os.environ.setdefault("DASK_DISTRIBUTED__COMM__OFFLOAD", "False")
