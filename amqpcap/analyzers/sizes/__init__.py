"""Packet sizes, frames per packet and throughput over time.

Everything here is whole-column numpy/pandas work on the ingestion tables (docs/tables.md);
the only Python loops are over the two directions and the plot panels.
Documentation of every table, summary key and plot: docs/analyzers/sizes.md.

The modules, one question each: `constants`, `bins` (buckets and time bins), `counts` (counts
that add up, and their tables), `frames` (packets per frame), `throughput`, `plots`, `step` (a
partition's step over slices of its time) and `analyzer` (the merge: `SPLIT`).
"""

from .analyzer import SPLIT, sizes
from .bins import bin_width_s, plen_bucket
from .constants import PLEN_EDGES_BYTES, PLEN_LABELS
from .frames import packets_per_frame

__all__ = ["PLEN_EDGES_BYTES", "PLEN_LABELS", "SPLIT", "bin_width_s", "packets_per_frame", "plen_bucket", "sizes"]
