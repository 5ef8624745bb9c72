"""The sizes analyzer's state and step (docs/time-split.md §2.1): what the packets so far leave
to the next slice of time (`_Seen`), and the partition's partial at its end (`_partial`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ...derive.frame_spans import frame_spans
from ...io.load import Capture
from ...model.facts import CaptureFacts, ns
from .bins import SEGMENT_SIZE_EDGES, segment_histograms, segment_time_edges, time_bins
from .constants import DIRECTIONS
from .counts import (
    Counts, _added, _count_pairs, _gk, _no_counts, frames_per_packet_table, payload_size_table, size_cells,
    stream_size_rows)
from .frames import _Ranks, _ranks_after, packets_per_frame, packets_per_frame_table
from .throughput import THROUGHPUT_SUMS, add_throughput


@dataclass
class _Seen:
    """What a partition's packets and frames so far give (sizes): carried from one slice of its
    time to the next, or made from the partition at once (the analyzer's state). Counts per stream direction
    and value, sums per time bin: its size grows with the connections, not with their packets."""

    #: (stream·2 + direction, value, count): packets per plen bucket, data packets per payload size
    #: and per frames completed, frames (stream·2 + direction, ·8 + type code) per packets spanned
    streams: Counts
    payload: Counts
    fpp: Counts
    ppf: Counts
    #: the frames' types (the categories whose codes are in `ppf`)
    types: pd.Index
    ranks: _Ranks
    #: THROUGHPUT_SUMS per time bin and direction; data segments per (direction, time cell, size
    #: cell) and per direction
    throughput: dict[str, np.ndarray]
    segment_hist: np.ndarray
    segments: np.ndarray
    #: the AMQP 1.0 frames of the slices so far (none without AMQP 1.0): a disposition of a later
    #: slice settles deliveries of these (`add_throughput`). Grows with the partition's 1.0
    #: frames, as the amqp10 analyzer's state does.
    amqp10: list = field(default_factory=list)

    @classmethod
    def nothing(cls, facts: CaptureFacts) -> "_Seen":
        n_bins = time_bins(facts)[1]
        hist_shape = (len(DIRECTIONS), len(segment_time_edges(facts.duration_s)) - 1, len(SEGMENT_SIZE_EDGES) - 1)
        return cls(_no_counts(), _no_counts(), _no_counts(), _no_counts(), pd.Index([], dtype=object),
                   _Ranks.nothing(), {k: np.zeros((n_bins, 2)) for k in THROUGHPUT_SUMS},
                   np.zeros(hist_shape), np.zeros(len(DIRECTIONS), np.int64))


def _seen(cap: Capture, facts: CaptureFacts, seen: _Seen | None, last: bool = True) -> _Seen:
    """`seen` (None: nothing yet) with the packets and frames of `cap` (the partition, or its next
    slice of time; `last`: the last one) added."""
    seen = seen or _Seen.nothing(facts)
    p, f = cap.packets, frame_spans(cap)
    # Data packets (TCP payload > 0) as plain arrays: filtering the whole table would copy every column.
    payload = p["payload_bytes"].to_numpy()
    is_data = payload > 0
    gk = _gk(p)
    d_gk = gk[is_data]
    # Rows first, then the int64 conversion: only the data rows are converted.
    d_pkt = p["packet"].to_numpy()[is_data].astype(np.int64)
    d_size = payload[is_data].astype(np.int64)
    seen.streams = _added(seen.streams, size_cells(p, gk))
    seen.payload = _added(seen.payload, _count_pairs(d_gk, d_size))
    seen.fpp = _added(seen.fpp, _count_pairs(d_gk, p["frames_ended"].to_numpy()[is_data].astype(np.int64)))
    span = packets_per_frame(f, d_gk, d_pkt, seen.ranks)
    # The frame type rides in the key as its category code (4 types: 3 bits are enough).
    seen.ppf = _added(seen.ppf, _count_pairs(_gk(f) * 8 + f["type"].cat.codes.to_numpy(np.int64), span))
    seen.types = f["type"].cat.categories
    if not last:  # (only frames that end in a later slice need them)
        seen.ranks = _ranks_after(p, is_data, gk, seen.ranks, cap.connections)
    add_throughput(cap, facts, seen.throughput, last, seen.amqp10)
    if not last and len(cap.amqp10_frames):
        seen.amqp10.append(cap.amqp10_frames)
    s2c = d_gk % 2 == 1
    seen.segment_hist += segment_histograms(ns(p["ts"])[is_data], d_size, s2c, facts)
    seen.segments += np.array([int((~s2c).sum()), int(s2c.sum())])
    return seen


def _partial(seen: _Seen) -> dict[str, Any]:
    """A partition's partial from what its packets and frames gave (`_seen`)."""
    ppf = packets_per_frame_table(seen.ppf, seen.types)
    ppf.insert(0, "_type", seen.types.get_indexer(ppf["type"]))
    return {
        "streams": stream_size_rows(seen.streams),
        "payload": payload_size_table(seen.payload),
        "fpp": frames_per_packet_table(seen.fpp),
        "ppf": ppf,
        "throughput": seen.throughput,
        "segment_hist": seen.segment_hist,
        "segments": seen.segments,
    }
