"""Small segments, unbatched writes and Nagle/delayed-ACK stalls, per connection and direction.

All per-segment work is whole-column numpy: segments of every (stream, direction) are laid out
in one array sorted by a group key, and everything that needs the *peer's* packets (its
cumulative ACK, its data, its last packet before ours) is found with one `searchsorted` on the
peer's (group, packet number) keys. Documentation: docs/analyzers/nagle.md.

A partition's packets may come in slices of its time (the analyzer's step, docs/time-split.md), the
partition whole being its one slice: what a segment reads of the packets before its slice (the
peer's last two packets and highest ACK, the direction's last segment and last small one, its
open coalescing run, its counts) is carried per direction (`_Carry`). Whether a direction shows
TCP_NODELAY needs all its segments, so its stalls are told once the last slice has counted them
(`nagle_join`).

The modules, one question each: `constants` (every threshold), `segments` (each data segment
with what it reads of its peer), `carry` (what a slice leaves to the next), `directions` (a
slice's per-direction rows, coalescing runs and stall candidates; the slices joined),
`findings`, `plots`, and `analyzer` (the analyzer: `Nagle`).
"""

from .analyzer import Nagle
from .constants import AVOIDABLE_RATE_CRITICAL, AVOIDABLE_RATE_INFO, AVOIDABLE_RATE_WARNING, CARRIES
from .directions import DIRECTION_COLUMNS, analyze_segments
from .findings import nagle_finding, small_packets_finding

__all__ = ["AVOIDABLE_RATE_CRITICAL", "AVOIDABLE_RATE_INFO", "AVOIDABLE_RATE_WARNING", "CARRIES", "DIRECTION_COLUMNS",
           "Nagle", "analyze_segments", "nagle_finding", "small_packets_finding"]
