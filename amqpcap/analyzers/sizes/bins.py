"""Buckets and bins: a packet length's Wireshark bucket, the time bins' width, the segment-size
histograms' edges.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...model.facts import CaptureFacts
from .constants import DIRECTIONS, PERCENT_DECIMALS, PLEN_EDGES_BYTES, TARGET_TIME_BINS, _NICE_STEPS


def bin_width_s(duration_s: float, target_bins: int = TARGET_TIME_BINS) -> float:
    """Smallest round (1-2-5) width giving at most ``target_bins`` bins over ``duration_s``."""
    want = max(duration_s / target_bins, 1e-6)
    exp = int(np.floor(np.log10(want)))
    for e in (exp, exp + 1):
        for step in _NICE_STEPS:
            w = step * 10.0**e
            if w >= want * (1 - 1e-9):
                return float(w)
    return float(10.0 ** (exp + 1))


#: plen bucket of every length below the last edge; longer lengths are clipped to it (last bucket).
_PLEN_LUT = np.searchsorted(np.asarray(PLEN_EDGES_BYTES), np.arange(PLEN_EDGES_BYTES[-1] + 1), side="right") - 1


def plen_bucket(frame_len: pd.Series | np.ndarray) -> np.ndarray:
    """Wireshark plen bucket index of on-wire lengths: one table lookup per row (a searchsorted
    over the edges costs several times more on a million rows)."""
    return _PLEN_LUT[np.minimum(np.asarray(frame_len), PLEN_EDGES_BYTES[-1])]


def plen_counts(frame_len: pd.Series | np.ndarray) -> np.ndarray:
    """Counts per Wireshark plen bucket for on-wire lengths."""
    return np.bincount(plen_bucket(frame_len), minlength=len(PLEN_EDGES_BYTES))


def _percent(counts: np.ndarray, total: int) -> np.ndarray:
    return np.round(counts * 100.0 / total, PERCENT_DECIMALS) if total else np.zeros(len(counts))


def time_bins(facts: CaptureFacts) -> tuple[float, int]:
    """The throughput timeline's bin width (s) and number of bins over the whole capture."""
    width_s = bin_width_s(facts.duration_s)
    return width_s, int(np.floor(facts.duration_s / width_s)) + 1


#: the segment-size plot's payload axis: quarter-octave bins from 1 byte to 4 GiB, fixed so that
#: the histograms of partitions add up (the plot shows the rows that hold segments)
SEGMENT_SIZE_EDGES = 2.0 ** (np.arange(0, 32 * 4 + 1) / 4)


def segment_time_edges(duration_s: float) -> np.ndarray:
    # Half the timeline resolution: each cell then holds enough segments for the colour to mean something.
    return np.linspace(0, max(duration_s, 1e-6), TARGET_TIME_BINS // 2 + 1)


def segment_histograms(ts_ns: np.ndarray, size: np.ndarray, s2c: np.ndarray, facts: CaptureFacts) -> np.ndarray:
    """Data segments per (direction, time cell, payload size cell): a (2, time cells, size cells)
    array of counts, the time axis over the whole capture."""
    t_s = (ts_ns - facts.t0_ns) / 1e9
    x_edges = segment_time_edges(facts.duration_s)
    return np.stack([np.histogram2d(t_s[s2c == (d == "s2c")], size[s2c == (d == "s2c")].astype(np.float64),
                                    bins=(x_edges, SEGMENT_SIZE_EDGES))[0] for d in DIRECTIONS])
