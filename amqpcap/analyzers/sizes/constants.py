"""The sizes analyzer's fixed numbers, in one place: Wireshark's packet-length buckets, the time bins'
target count and steps, the directions (docs/analyzers/sizes.md).
"""

from __future__ import annotations


#: Wireshark's `-z plen,tree` bucket lower bounds (bytes); the last bucket is open-ended.
#: Spelled exactly as tshark prints them so `packet_sizes.bins` compares 1:1 with tshark.
PLEN_EDGES_BYTES = (0, 20, 40, 80, 160, 320, 640, 1280, 2560, 5120)
PLEN_LABELS = tuple(
    [f"{lo}-{hi - 1}" for lo, hi in zip(PLEN_EDGES_BYTES[:-1], PLEN_EDGES_BYTES[1:])] + [f"{PLEN_EDGES_BYTES[-1]} and greater"]
)
#: tshark prints bucket percentages with two decimals (`%.2f%%`).
PERCENT_DECIMALS = 2

#: The throughput timeline aims at about this many time bins over the capture: enough to see
#: bursts and stalls, few enough that a plot and a CSV stay small for any capture length.
TARGET_TIME_BINS = 200
#: Bin widths are picked from a 1-2-5 series (1 µs ... ) so bin edges are round numbers.
_NICE_STEPS = (1, 2, 5)

DIRECTIONS = ("c2s", "s2c")
DELIVER_METHODS = ("basic.deliver", "basic.get-ok")
