"""Memory freed by this process given back to the system."""

from __future__ import annotations


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
