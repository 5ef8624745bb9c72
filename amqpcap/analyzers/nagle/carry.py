"""What a partition's packets so far leave to the analysis of the packets after them, per direction
of each connection (`_Carry`), and how a slice's packets move it on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...io.load import Capture
from ...derive.stream_order import running_last as _running_last
from .constants import CARRIES


#: "none" in the carry's int64 columns of times and sequence numbers
_NONE = np.iinfo(np.int64).min
#: what is kept of a direction's last two packets: what the peer's next segments read of them
_PEER_COLUMNS = ("packet", "ts", "flags", "payload_bytes", "ack", "window")
#: what is kept of a direction's last segment: what its next segment reads of it
_SEGMENT_COLUMNS = ("packet", "ts_ns", "payload_bytes", "end", "peer_data_count")
#: per-direction counts summed over the slices
_TOTALS = ("data_segments", "payload_bytes", "small_segments", "frames", "single_frame_segments",
           "small_while_unacked", "packets_saved")


@dataclass
class _Carry:
    """What a partition's packets so far leave to the analysis of the packets after them, per
    direction of each connection (arrays indexed as the rows of `_directions`, two per
    connection): carried from one slice of the partition's time to the next
    (`amqpcap.analysis.partition.Slicing`), empty for the first slice or the partition analysed whole.
    Its size is the number of connections, whatever the number of packets."""

    #: the direction's last packet (rows [0, 2n)) and the one before it (rows [2n, 4n)), read by
    #: the other direction's segments as their peer's (_PEER_COLUMNS; packet -1: none)
    packets: dict[str, np.ndarray]
    #: the highest ACK of its packets, and of those before its last one (-1: none)
    max_ack: np.ndarray
    max_ack_before_last: np.ndarray
    #: its data packets
    data_count: np.ndarray
    #: its last segment (_SEGMENT_COLUMNS; packet -1: none), put again at the head of the
    #: direction's segments in the next slice (the previous segment of the first one there), and
    #: whether it joined the segment before it (whether it is in a run is told by the next one)
    segment: dict[str, np.ndarray]
    joined: np.ndarray
    #: the end of its last small segment (_NONE: none)
    small_end: np.ndarray
    #: the run its last segment ends, which the next segment may continue: segments and bytes
    run_segments: np.ndarray
    run_bytes: np.ndarray
    #: _TOTALS; small segments per kind (n × CARRIES); the earliest and latest segment ts; the
    #: segments told to be in a run (the rank of the next example packet)
    totals: dict[str, np.ndarray]
    kinds: np.ndarray
    first_ts: np.ndarray
    last_ts: np.ndarray
    in_run: np.ndarray

    @classmethod
    def nothing(cls, cap: Capture, n: int) -> "_Carry":
        """Nothing seen yet of `n` directions (columns in the dtypes of `cap`'s)."""
        p = cap.packets

        def full(value, dtype=np.int64, size=n):
            return np.full(size, value, dtype)

        packets = {c: full(-1 if c in ("packet", "ack", "window") else 0, np.int64 if c == "ts" else p[c].dtype, 2 * n)
                   for c in _PEER_COLUMNS}
        segment = {"packet": full(-1, p["packet"].dtype), "ts_ns": full(0),
                   "payload_bytes": full(0, p["payload_bytes"].dtype), "end": full(0), "peer_data_count": full(0)}
        return cls(packets, full(-1), full(-1), full(0), segment, full(False, bool), full(_NONE), full(0), full(0),
                   {t: full(0) for t in _TOTALS}, np.zeros((n, len(CARRIES)), np.int64),
                   full(np.iinfo(np.int64).max), full(_NONE), full(0))


def _advance(carry: _Carry, so, acked: np.ndarray, data_cnt: np.ndarray, streams: np.ndarray) -> None:
    """`carry`'s packets moved past this slice's (`so`, in stream order; `acked` and `data_cnt`
    as `_segments` makes them): per direction of each of its streams, its last two packets, the
    highest ACK of all its packets and of those before the last one, its data packets."""
    stream, s2c, hi = so["stream"], so["s2c"], so["hi"]
    n_all, n = len(stream), len(carry.max_ack)
    if not n_all:
        return
    starts = np.flatnonzero(np.r_[True, stream[1:] != stream[:-1]])
    ends = np.r_[starts[1:], n_all] - 1
    for side in (0, 1):  # c2s, s2c: their halves of acked and data_cnt
        latest = _running_last(s2c == bool(side))
        last = latest[ends]
        here = last >= starts  # (the stream has packets of this side here)
        first, end, last = starts[here], ends[here], last[here]
        k = 2 * np.searchsorted(streams, stream[first]) + side
        h, half = hi[first], side * n_all
        prev = latest[np.maximum(last - 1, 0)]
        prev_here = (last >= 1) & (prev >= first)
        before = acked[half + np.maximum(last - 1, 0)]
        before_here = np.where((last >= 1) & (before >= h), before - h, -1)
        for c in _PEER_COLUMNS:
            col = so[c]
            carry.packets[c][n + k] = np.where(prev_here, col[np.maximum(prev, 0)], carry.packets[c][k])
            carry.packets[c][k] = col[last]
        carry.max_ack_before_last[k] = np.maximum(carry.max_ack[k], before_here)
        carry.max_ack[k] = np.maximum(carry.max_ack[k], acked[half + end] - h)
        carry.data_count[k] += data_cnt[half + end] - np.where(first > 0, data_cnt[half + np.maximum(first - 1, 0)], 0)


def _again(s: dict[str, np.ndarray], carry: _Carry, conn: pd.DataFrame) -> dict[str, np.ndarray]:
    """The segments `s` with each direction's last segment of the earlier slices (`carry`) put
    again at the head of the direction's (`again`): the previous segment of its first one here.
    Its own flags were counted in its slice; only its columns that a next segment reads are
    kept, the peer's side of it is left empty."""
    kept = np.flatnonzero(carry.segment["packet"] >= 0)
    s["again"] = np.zeros(len(s["g"]), bool)
    if not len(kept):
        return s
    empty = {"peer_acked": -1, "peer_last_packet": -1, "peer_last_ack": -1, "peer_acked_before_last": -1,
             "peer_prev_window": -1, "peer_prev_ack": -1}
    head = {c: np.full(len(kept), empty.get(c, 0), v.dtype) for c, v in s.items()}
    head.update({c: carry.segment[c][kept] for c in _SEGMENT_COLUMNS})
    g = conn["g"].to_numpy()[kept]
    head.update(g=g, k=kept, stream=g >> 1, s2c=(g & 1).astype(bool), again=np.ones(len(kept), bool))
    o = np.argsort(np.r_[kept, s["k"]], kind="stable")  # (each direction's kept segment first)
    return {c: np.concatenate([head[c], v])[o] for c, v in s.items()}
