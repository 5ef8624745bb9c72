"""Memory freed by this process given back to the system."""

from __future__ import annotations

import os


def release_freed_memory() -> None:
    """Give the memory freed by a merge back to the system: Arrow's pool (text columns are Arrow
    arrays) and glibc's heap (`malloc_trim`) otherwise keep it for this process, whose resident
    size then counts the partials merged as well as the merged tables. Nothing where there is no
    glibc."""
    import ctypes
    import ctypes.util

    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def resident_bytes() -> int | None:
    """This process's resident size now (Linux: /proc/self/statm), None where it cannot be read."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def release_freed_memory_above(limit_bytes: int) -> None:
    """`release_freed_memory` only when this process holds more than `limit_bytes` resident (or
    its size cannot be read): below, what was freed stays for the next allocations to reuse
    instead of being faulted in again, zeroed by the kernel."""
    held = resident_bytes()
    if held is None or held > limit_bytes:
        release_freed_memory()
