"""Packet sizes, frames per packet and throughput over time.

Everything here is whole-column numpy/pandas work on the ingestion tables (docs/tables.md);
the only Python loops are over the two directions and the plot panels.
Documentation of every table, summary key and plot: docs/analyzers/sizes.md.

The modules, one question each: `constants`, `bins` (buckets and time bins), `counts` (counts
that add up, and their tables), `frames` (packets per frame), `throughput`, `plots`, `step` (the
state carried over rows and its step) and `analyzer` (the analyzer: `Sizes`).
"""

from .analyzer import Sizes
from .bins import bin_width_s, plen_bucket
from .constants import PLEN_EDGES_BYTES, PLEN_LABELS
from .frames import packets_per_frame

__all__ = ["PLEN_EDGES_BYTES", "PLEN_LABELS", "Sizes", "bin_width_s", "packets_per_frame", "plen_bucket"]
