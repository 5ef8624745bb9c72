"""Small segments, unbatched writes and Nagle/delayed-ACK stalls, per connection and direction.

All per-segment work is whole-column numpy: segments of every (stream, direction) are laid out
in one array sorted by a group key, and everything that needs the *peer's* packets (its
cumulative ACK, its data, its last packet before ours) is found with one `searchsorted` on the
peer's (group, packet number) keys. Documentation: docs/analyzers/nagle.md.

A partition's packets may come in slices of its time (`nagle_slice`, docs/time-split.md), the
partition whole being its one slice: what a segment reads of the packets before its slice (the
peer's last two packets and highest ACK, the direction's last segment and last small one, its
open coalescing run, its counts) is carried per direction (`_Carry`). Whether a direction shows
TCP_NODELAY needs all its segments, so its stalls are told once the last slice has counted them
(`nagle_join`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..analysis import AnalyzerResult, Finding, Plot, analyzer
from ..capture import Capture
from ..names import subject_namer
from ..derive.labels import who
from ..derive.stream_order import HI_SHIFT as _HI_SHIFT
from ..derive.stream_order import running_last as _running_last
from ..derive.stream_order import stream_order
from ..partition import CaptureFacts, Slicing, Split, merge_rows, run_whole

# ----------------------------------------------------------------------------------- definitions

#: A data segment is "small" when its payload is below this share of the MSS: far from full,
#: so packets (syscalls, wake-ups, headers) are spent on little data.
SMALL_MSS_FRACTION = 0.25
#: Without an MSS option in the capture (no SYN seen), "small" means below the minimum MSS
#: every IPv4 host must accept (RFC 1122): such a segment is small on any path.
SMALL_BYTES_UNKNOWN_MSS = 536
#: Without an MSS, coalesced segments are assumed to be limited by Ethernet's 1460-byte MSS.
MERGE_MSS_UNKNOWN_BYTES = 1460

#: Consecutive small segments of a direction could have been one write when they left within
#: this interval with no data from the peer in between (the application was not waiting for an
#: answer). 1 ms is far longer than the microseconds between writes of one batch, and far
#: shorter than any round trip an application would wait on between unrelated writes.
COALESCE_WINDOW_S = 0.001

#: Delayed-ACK stall: the peer's pure ACK of the previous (small, unacknowledged) segment came
#: this long after it. Linux delays an ACK at least 40 ms (TCP_DELACK_MIN), Windows and BSDs
#: up to 200 ms; the window brackets both with margin for timer granularity.
STALL_ACK_DELAY_MIN_S = 0.030
STALL_ACK_DELAY_MAX_S = 0.250
#: ... and the held segment left at most this long after that ACK: Nagle releases it as soon
#: as the ACK arrives (microseconds on the sender; one path delay when captured at the peer).
STALL_RELEASE_MAX_S = 0.010
#: A direction where more than this share of the small segments left while an earlier small
#: segment was unacknowledged (`small_while_unacked`) is not under Nagle: Nagle allows none
#: (RFC 896, RFC 1122 4.2.3.4; Linux checks the last small segment, Minshall's variant), so
#: it shows TCP_NODELAY and none of its segments is counted as held by Nagle. The margin
#: absorbs capture artefacts (an ACK the capture missed makes a segment look unacknowledged).
NAGLE_UNACKED_SHARE_MAX = 0.05

# ------------------------------------------------------------------------------------ thresholds

#: `small-packets` looks at avoidable packets: how many fewer data segments the direction would
#: need if the runs of small back-to-back segments had been written at once. A direction is
#: reported when most of its segments are small, coalescing would remove a good share of them,
#: and the avoidable packets are both numerous and frequent:
SMALL_SHARE_MIN = 0.5
AVOIDABLE_SHARE_MIN = 0.25
AVOIDABLE_MIN_PACKETS = 200
#: Rates are over the direction's active span (first to last data segment), at least
#: RATE_MIN_SPAN_S, so a burst of a hundred packets in 30 ms is not a "high rate".
RATE_MIN_SPAN_S = 1.0
#: Severity grows with the worst direction's avoidable packets per second, and only with it.
#: Each avoidable packet costs a send system call at the client, a wake-up and a read at the
#: broker (one more pass of its connection reader) and ~66 bytes of headers: of the order of
#: 10 µs of CPU at the two ends together. `info` from 200/s (a fraction of a percent of a core:
#: worth knowing, not a fault); `warning` from 1 000/s (about 1 % of a core per connection, and
#: hundreds of connections like it add up); `critical` from 10 000/s, where the per-packet cost
#: (about a tenth of a core per connection) limits the connection's throughput.
AVOIDABLE_RATE_INFO = 200.0
AVOIDABLE_RATE_WARNING = 1_000.0
AVOIDABLE_RATE_CRITICAL = 10_000.0

#: What a small segment carries, from the AMQP frames it completes (`frames.packet`), so that
#: the advice fits the cause; a direction is labelled by what most of its small segments carry:
#: `ack` one basic.ack/nack/reject alone (a consumer acknowledging each message);
#: `message` whole messages (each content method with its header in the segment: batching
#: across messages would save packets); `split` part of a message (a content method, header or
#: body without the rest, or no complete frame: one write per frame); `heartbeat` heartbeats
#: only (tiny by design, never reported); `other` anything else (other methods, several acks).
CARRIES = ("ack", "message", "split", "heartbeat", "other")
ACK_METHODS = ("basic.ack", "basic.nack", "basic.reject")
CONTENT_METHODS = ("basic.publish", "basic.deliver", "basic.get-ok", "basic.return")

#: `nagle-delayed-ack`: repeated stalls (one may be chance) that cost a share of the
#: connection's time: warning from 2 %, critical from 20 % (every fifth second spent waiting
#: for a delayed ACK).
STALL_MIN_COUNT = 5
STALL_SHARE_WARNING = 0.02
STALL_SHARE_CRITICAL = 0.20

#: At most this many packet numbers in a finding's example list and frame-number filters.
EXAMPLE_PACKETS = 10
FILTER_PACKETS = 100

FLAG_FIN, FLAG_SYN, FLAG_RST, FLAG_ACK = 0x01, 0x02, 0x04, 0x10


# ------------------------------------------------------------------- carried across slices of time

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
    (`amqpcap.partition.Slicing`), empty for the first slice or the partition analysed whole.
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


def _segments(cap: Capture, carry: _Carry, streams: np.ndarray, last: bool) -> dict[str, np.ndarray]:
    """Every data segment that is not a retransmission, sorted by (stream, direction, packet),
    with what the analysis needs from the peer's side, as plain numpy columns (`k`: the
    direction's row in `_directions`, whose connections are `streams`). The peer's packets
    before the first one here are those `carry` has seen (earlier slices of the partition's
    time); `carry` is then moved past these packets, unless this is the `last` slice (nothing
    reads them after it).

    All packets are first put in (stream, packet) order (shared with the stalls analyzer, see
    amqpcap.derive.stream_order). There, a segment's peer-side state is read at one row: the peer's last packet
    before it, which is the row just before the segment's run of same-direction rows (or the
    carry's, when the stream has no packet of the peer here before it). The peer's cumulative
    ACK and data count there are running maxima/sums per direction, both directions in one array
    so a single gather reads the peer's side of every segment. The carry is read only where it
    matters: at the few rows whose peer packet is not here, and on the directions whose peer
    had packets in earlier slices (none when the partition is analysed whole)."""
    so = stream_order(cap)
    stream, s2c, pkt = so["stream"], so["s2c"], so["packet"]
    payload, ack = so["payload_bytes"], so["ack"]
    frames, retr, hi = so["frames_ended"], so["retransmission"], so["hi"]
    n_all = len(stream)
    data = payload > 0

    # Rows [0, n_all): state of c2s, rows [n_all, 2·n_all): of s2c, at each packet row.
    # acked: the direction's highest ACK so far in the row's stream (stream in the high bits,
    # see stream_order.running_max_keyed); data_cnt: its data packets so far (differences are
    # read; int32: fewer than 2³¹ packets in a partition, half the memory traffic of int64).
    acked = np.empty(2 * n_all, np.int64)
    keyed_ack = ack + hi
    np.maximum.accumulate(np.where(s2c, -1, keyed_ack), out=acked[:n_all])
    np.maximum.accumulate(np.where(s2c, keyed_ack, -1), out=acked[n_all:])
    data_cnt = np.empty(2 * n_all, np.int32)
    np.cumsum(data & ~s2c, dtype=np.int32, out=data_cnt[:n_all])
    np.cumsum(data & s2c, dtype=np.int32, out=data_cnt[n_all:])
    # The row where each run of same-direction rows starts: the peer's last packet before a row
    # is the one just before its run (file-wide, like the stream check below).
    turn = np.empty(n_all, bool)
    turn[:1] = True
    np.not_equal(s2c[1:], s2c[:-1], out=turn[1:])
    run_start = _running_last(turn)

    idx = np.flatnonzero(data & ~retr)
    g = stream[idx].astype(np.int64) * 2 + s2c[idx]
    # (stream, direction, packet): a stable sort on g; radix sort when g fits 16 bits.
    o = np.argsort(g.astype(np.uint16) if len(g) and g.max() < 1 << 16 else g, kind="stable")
    idx, g = idx[o], g[o]
    seg_s2c = (g & 1).astype(bool)
    seg_stream = g >> 1
    seg_hi = seg_stream << _HI_SHIFT
    # A direction's segments are consecutive rows: what depends on the direction alone (its row
    # k in the carry, its peer's) is found once per direction and spread over its rows.
    gs = np.flatnonzero(np.r_[True, g[1:] != g[:-1]]) if len(g) else np.zeros(0, np.int64)
    lens = np.diff(np.r_[gs, len(g)])
    g_first = g[gs]
    k_g = 2 * np.searchsorted(streams, g_first >> 1) + (g_first & 1)  # (every stream has its connections row)
    peer_k_g = k_g ^ 1
    k = np.repeat(k_g, lens)
    nk = len(carry.max_ack)

    peer_last = run_start[idx] - 1
    pl = np.maximum(peer_last, 0)
    valid = (peer_last >= 0) & (stream[pl] == seg_stream)  # the peer's last packet is here
    away = np.flatnonzero(~valid)  # (each direction's first rows, before the peer's first packet here)
    away_peer = k[away] ^ 1
    half = np.where(seg_s2c, 0, n_all)  # the peer's half of acked and data_cnt
    at = pl + half  # the peer's direction at its last row
    # The rows of the directions whose peer had packets in earlier slices.
    seen = np.flatnonzero(np.repeat(carry.max_ack[peer_k_g] >= 0, lens))
    seen_peer = k[seen] ^ 1
    # pl is a peer row of the stream when valid, so its running max includes itself (>= 0); the
    # peer's packets of earlier slices are in the carry's maximum.
    peer_acked = np.where(valid, acked[at] - seg_hi, -1)
    peer_acked[seen] = np.maximum(peer_acked[seen], carry.max_ack[seen_peer])
    # What the peer had acknowledged before that last packet (one row earlier; an earlier
    # stream's maximum is below this stream's key), with its packets of earlier slices; when
    # its last packet is the carry's, what the carry had before it.
    before = acked[np.maximum(at - 1, 0)]
    peer_acked_before = np.where(valid & (peer_last >= 1) & (before >= seg_hi), before - seg_hi, -1)
    peer_acked_before[seen] = np.maximum(peer_acked_before[seen], carry.max_ack[seen_peer])
    peer_acked_before[away] = carry.max_ack_before_last[away_peer]

    def peer(column: str, rows: np.ndarray, moved: np.ndarray, kept: np.ndarray) -> np.ndarray:
        """A column of the peer's packet: at `rows` (in stream order), but the carry's packets
        `kept` at the segments `moved`."""
        out = so[column][rows]
        out[moved] = carry.packets[column][kept]
        return out

    last_packet = peer("packet", pl, away, away_peer)
    pl_flags = peer("flags", pl, away, away_peer)
    pure_ack = ((last_packet >= 0) & (peer("payload_bytes", pl, away, away_peer) == 0) & ((pl_flags & FLAG_ACK) != 0)
                & ((pl_flags & (FLAG_SYN | FLAG_FIN | FLAG_RST)) == 0))
    # The peer's packet before that last one: the window it advertised there is the one in force
    # while the segment waited. It is the row before pl when that row is the peer's too, else the
    # row before the sender's run that precedes pl; when not here, the carry's last packet of the
    # peer (pl is its first here) or the one before that (the peer has no packet here yet). A
    # SYN's window is never scaled: not used.
    pp = np.where(run_start[pl] < pl, pl - 1, run_start[np.maximum(pl - 1, 0)] - 1)
    ppc = np.maximum(pp, 0)
    pp_here = valid & (pp >= 0) & (stream[ppc] == seg_stream)
    pp_away = np.flatnonzero(~pp_here)
    pp_kept = (k[pp_away] ^ 1) + np.where(valid[pp_away], 0, nk)
    pp_ok = pp_here.copy()
    pp_ok[pp_away] = carry.packets["packet"][pp_kept] >= 0
    pp_ok &= (peer("flags", ppc, pp_away, pp_kept) & FLAG_SYN) == 0
    # The peer's data packets up to the segment: the carry's, and its stream's rows here up to
    # the segment's (each direction's stream starts here at row `first`).
    first = np.searchsorted(stream, g_first >> 1)
    half_g = np.where(g_first & 1, 0, n_all)
    base_g = carry.data_count[peer_k_g] - np.where(first > 0, data_cnt[np.maximum(first - 1, 0) + half_g], 0)
    peer_data = data_cnt[idx + half] + np.repeat(base_g, lens)
    seg_payload = payload[idx]
    out = {
        "g": g, "k": k, "stream": seg_stream, "s2c": seg_s2c, "packet": pkt[idx], "ts_ns": so["ts"][idx],
        "payload_bytes": seg_payload, "end": so["seq"][idx] + seg_payload, "frames": frames[idx],
        "peer_acked": peer_acked,
        "peer_last_packet": last_packet,
        "peer_last_ts_ns": peer("ts", pl, away, away_peer),
        "peer_last_pure_ack": pure_ack,
        "peer_last_ack": peer("ack", pl, away, away_peer),
        "peer_acked_before_last": peer_acked_before,
        # The peer's window before its last packet (-1: unknown) and the ACK it came with.
        "peer_prev_window": np.where(pp_ok, peer("window", ppc, pp_away, pp_kept), -1),
        "peer_prev_ack": np.where(pp_ok, peer("ack", ppc, pp_away, pp_kept), -1),
        # Only equality between a direction's consecutive segments is read: no peer data between.
        "peer_data_count": peer_data,
    }
    if not last:
        _advance(carry, so, acked, data_cnt, streams)
    return out


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


def _directions(cap: Capture) -> pd.DataFrame:
    """Both directions of each connection, in (stream, direction) order (row 2·i + s2c for the
    i-th connection by stream: the index of the carry's arrays), with `g` = stream·2 + s2c and
    the effective MSS: the smaller of the two SYN options (a sender uses min(peer's MSS, its
    own)); NaN when neither SYN is in the capture."""
    c = cap.connections
    streams = c["stream"].to_numpy(np.int64)
    o = np.argsort(streams, kind="stable")
    mss = np.fmin(c["mss_c2s"].to_numpy(dtype="float64", na_value=np.nan), c["mss_s2c"].to_numpy(dtype="float64", na_value=np.nan))

    def each(x: np.ndarray) -> np.ndarray:  # a connection's value on both its directions, by stream
        return np.repeat(x[o], 2)

    return pd.DataFrame({
        "g": (streams[o, None] * 2 + np.arange(2)).ravel(),
        "mss": each(mss),
        "broker_port": each(c["broker_port"].to_numpy(np.int64)),
        "connection_s": each((c["last_ts"] - c["first_ts"]).dt.total_seconds().to_numpy()),
        # Both SYNs seen: windows are scaled (docs/tables.md), so "full" can be judged, not only zero.
        "scaled": each(c["handshake_seen"].fillna(False).to_numpy(bool)),
    })


def _shifted(x: np.ndarray) -> np.ndarray:
    """x one row down: row i holds x[i - 1] (row 0 keeps x[0]). The previous segment's value
    by a copy, not a gather."""
    out = np.empty_like(x)
    out[:1] = x[:1]
    out[1:] = x[:-1]
    return out


def _ns(seconds: float) -> int:
    """A threshold in whole nanoseconds. For integer ns x and a threshold c that is a whole
    number of ns, x / 1e9 >= c exactly when x >= c·1e9 (the division is monotonic and exact at
    x = c·1e9), so the per-segment comparisons stay in int64 without a float column."""
    return int(round(seconds * 1e9))


def _in(col: pd.Series, values) -> np.ndarray:
    """Rows of a categorical column whose value is one of ``values`` (one gather on the codes;
    code -1, missing, reads the appended False)."""
    a = col.array
    return np.r_[a.categories.isin(list(values)), False][a.codes]


def carried(cap: Capture, packets: np.ndarray, frames_ended: np.ndarray) -> np.ndarray:
    """What each of these data segments carries (an index into CARRIES), from the frames each
    completes: counts per segment of heartbeats, acks, content methods, headers and bodies,
    each frame's segment found once by binary search on the packet numbers (a partition's
    packets are spread over the whole capture's numbers: a count per packet number would be as
    long as the capture)."""
    f = cap.frames
    if not len(packets):
        return np.zeros(0, np.int8)
    by = np.argsort(packets, kind="stable")
    fp = f["packet"].to_numpy(np.int64)
    seg = np.minimum(np.searchsorted(packets[by], fp), len(packets) - 1)
    at = np.flatnonzero(packets[by][seg] == fp)  # (the frames completed by these segments)
    seg = by[seg[at]]

    def count(mask):
        return np.bincount(seg[mask[at]], minlength=len(packets))

    hb = count(_in(f["type"], ["heartbeat"]))
    ack = count(_in(f["method"], ACK_METHODS))
    content = count(_in(f["method"], CONTENT_METHODS))
    header, body = count(_in(f["type"], ["header"])), count(_in(f["type"], ["body"]))
    whole = (content >= 1) & (header >= content)  # every content method with its header
    part = (frames_ended == 0) | (content + header + body > 0)
    return np.select([(frames_ended > 0) & (hb == frames_ended), (frames_ended == 1) & (ack == 1), whole, part],
                     [CARRIES.index("heartbeat"), CARRIES.index("ack"), CARRIES.index("message"),
                      CARRIES.index("split")], CARRIES.index("other")).astype(np.int8)


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


def _slice(cap: Capture, carry: _Carry | None, last: bool) -> tuple[dict[str, np.ndarray], _Carry, dict[str, Any]]:
    """A partition's packets after those `carry` has seen (None: none), analysed: (segment
    columns with per-segment flags, the carry moved past them, their piece of the partial: the
    stall candidates, the coalesced segments a finding may cite, and on the `last` slice the
    per-direction table without its stall columns; see `nagle_join`)."""
    conn = _directions(cap)
    carry = carry or _Carry.nothing(cap, len(conn))
    s = _again(_segments(cap, carry, conn["g"].to_numpy()[::2] >> 1, last), carry, conn)
    n, nk = len(s["g"]), len(conn)
    g, k, payload, ts, end = s["g"], s["k"], s["payload_bytes"], s["ts_ns"], s["end"]
    # The rows put again (one per direction at most, its first row: a run start): their own
    # values were counted in their slice, so they are adjusted on these rows alone.
    head = np.flatnonzero(s["again"])
    head_k = k[head]
    # Rows are grouped by direction (g): group sums are `add.reduceat` over the group starts.
    same = np.zeros(n, bool)  # previous row: same stream direction
    np.equal(g[1:], g[:-1], out=same[1:])
    gs = np.flatnonzero(~same)
    mss_k = conn["mss"].to_numpy()
    small_limit_k = np.ceil(np.where(np.isnan(mss_k), SMALL_BYTES_UNKNOWN_MSS, SMALL_MSS_FRACTION * mss_k)).astype(np.int64)
    merge_mss_k = np.where(np.isnan(mss_k), MERGE_MSS_UNKNOWN_BYTES, mss_k)
    small = payload < small_limit_k[k]

    prev_ts = _shifted(ts)
    prev_small = same & _shifted(small)

    # Unbatched writes: a small segment sent while an earlier small segment of the direction
    # was still unacknowledged by the peer (Nagle would have held it; with TCP_NODELAY it goes).
    # Before the direction's first small segment here, the last small one is the carry's.
    latest_small = _running_last(small)
    last_small = _shifted(latest_small)
    last_small[:1] = -1
    ls = np.maximum(last_small, 0)
    here = (last_small >= 0) & (g[ls] == g)
    small_while_unacked = small & here & (s["peer_acked"] < end[ls])
    first_small = np.flatnonzero(small & ~here)  # (the direction's first small segment here)
    kept_end = carry.small_end[k[first_small]]
    small_while_unacked[first_small] = (kept_end != _NONE) & (s["peer_acked"][first_small] < kept_end)

    # Coalescing: runs of small segments, each within COALESCE_WINDOW_S of the previous one
    # and with no peer data in between, could have been written (and sent) together. A segment
    # put again stands for its run so far; a direction's last run may go on in the next slice:
    # its packets saved are counted once it ends.
    pdc = s["peer_data_count"]
    joins = prev_small & small & (ts - prev_ts <= _ns(COALESCE_WINDOW_S)) & (pdc == _shifted(pdc))
    start = np.flatnonzero(~joins)  # every group start is a run start (joins needs `same`)
    if n:
        run_k = k[start]
        run_segments = np.diff(np.r_[start, n])
        # (sums of whole numbers below 2**53: exact in float64, in any order)
        run_bytes = np.add.reduceat(payload, start, dtype=np.float64)
        head_run = np.searchsorted(start, head)
        run_segments[head_run] += carry.run_segments[head_k] - 1
        run_bytes[head_run] += carry.run_bytes[head_k] - payload[head]
        run_saved = np.maximum(run_segments - np.maximum(np.ceil(run_bytes / merge_mss_k[run_k]), 1), 0)
        open_run = np.r_[run_k[1:] != run_k[:-1], True] & (not last)
        carry.run_segments[run_k[open_run]] = run_segments[open_run]
        carry.run_bytes[run_k[open_run]] = run_bytes[open_run].astype(np.int64)
        carry.totals["packets_saved"] += np.bincount(run_k[~open_run], weights=run_saved[~open_run],
                                                     minlength=nk).astype(np.int64)
    joined = joins.copy()
    joined[head] = carry.joined[head_k]
    in_run = joined.copy()
    in_run[:-1] |= joins[1:]
    # Whether a direction's last segment here is in a run is told by its next segment.
    group_last = np.r_[~same[1:], True] if n else same
    told = ~group_last | last

    _count(cap, s, carry, gs, head, small, small_while_unacked)
    stall, candidates = _stall_candidates(s, small, prev_small, conn["scaled"].to_numpy(bool))
    piece = {"stalls": candidates, "runs": _examples(s, in_run & told, carry), "directions": None}

    if last:
        piece["directions"] = _direction_rows(conn, carry, small_limit_k)
    else:  # what the next slice reads of each direction's segments here: the last one, the last small one
        gl = np.flatnonzero(group_last)
        for c in _SEGMENT_COLUMNS:
            carry.segment[c][k[gl]] = s[c][gl]
        carry.joined[k[gl]] = joined[gl]
        last_small = latest_small[gl]
        mine = (last_small >= 0) & (g[np.maximum(last_small, 0)] == g[gl])
        carry.small_end[k[gl][mine]] = end[last_small[mine]]
    s.update(small=small, in_run=in_run, stall=stall)
    return s, carry, piece


def _count(cap: Capture, s: dict[str, np.ndarray], carry: _Carry, gs: np.ndarray, head: np.ndarray,
           small: np.ndarray, small_while_unacked: np.ndarray) -> None:
    """The segments here added to the carry's per-direction counts (`gs`: the rows where each
    direction's segments start), but for those put again (`head`, counted in their slice): all
    rows are summed, then the rows put again taken off."""
    if not len(gs):
        return
    k = s["k"]
    kg, kh = k[gs], k[head]

    def add(name: str, x: np.ndarray) -> None:  # integer sums per direction
        carry.totals[name][kg] += np.add.reduceat(x, gs, dtype=np.int64)
        carry.totals[name][kh] -= x[head]

    carry.totals["data_segments"][kg] += np.diff(np.r_[gs, len(k)])
    carry.totals["data_segments"][kh] -= 1
    add("payload_bytes", s["payload_bytes"])
    add("small_segments", small)
    add("frames", s["frames"])
    add("single_frame_segments", s["frames"] == 1)
    add("small_while_unacked", small_while_unacked)
    # A segment put again is one of the earlier slices': its ts is within the carry's span already.
    ts = s["ts_ns"]
    carry.first_ts[kg] = np.minimum(carry.first_ts[kg], np.minimum.reduceat(ts, gs))
    carry.last_ts[kg] = np.maximum(carry.last_ts[kg], np.maximum.reduceat(ts, gs))
    # What the small segments carry: counts per (direction, kind).
    sm = np.flatnonzero(small)
    sm = sm[~s["again"][sm]]
    kind = carried(cap, s["packet"][sm].astype(np.int64), s["frames"][sm])
    carry.kinds += np.bincount(k[sm] * len(CARRIES) + kind, minlength=carry.kinds.size).reshape(carry.kinds.shape)


def _stall_candidates(s: dict[str, np.ndarray], small: np.ndarray, prev_small: np.ndarray,
                      scaled_k: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Nagle/delayed-ACK stalls but for the TCP_NODELAY test, which needs the whole direction
    (`nagle_join`): the flag per segment, and the stalls' columns."""
    ts, end, payload, packet, k = s["ts_ns"], s["end"], s["payload_bytes"], s["packet"], s["k"]
    # This small segment S left right after the peer's pure ACK of the previous small segment P,
    # and that ACK was itself delayed by a delayed-ACK timer. The cheap flags pick the
    # candidates; the rest is checked on those rows only (`c - 1`: previous row).
    c = np.flatnonzero(prev_small & small & s["peer_last_pure_ack"])
    t_ack = s["peer_last_ts_ns"][c]
    ack_delay, release = t_ack - ts[c - 1], ts[c] - t_ack
    prev_end = end[c - 1]
    win, edge = s["peer_prev_window"][c], s["peer_prev_ack"][c] + s["peer_prev_window"][c]
    ok = ((s["peer_last_packet"][c] > packet[c - 1])
          & (s["peer_last_ack"][c] >= prev_end)
          # Nagle's mechanism: P was the only unacknowledged data (the peer had acknowledged
          # everything up to P's first byte, and not P), so S waited for P's ACK alone ...
          & (s["peer_acked_before_last"][c] == prev_end - payload[c - 1])
          # ... and not for the peer's window: it was open, with room for S (when windows are
          # scaled; else only "not zero" can be told). A zero or full window is flow control.
          & (win > 0) & (~scaled_k[k[c]] | (edge >= end[c]))
          & (ack_delay >= _ns(STALL_ACK_DELAY_MIN_S)) & (ack_delay <= _ns(STALL_ACK_DELAY_MAX_S))
          & (release >= 0) & (release <= _ns(STALL_RELEASE_MAX_S)))
    st = c[ok]
    stall = np.zeros(len(ts), bool)
    stall[st] = True
    return stall, {"g": s["g"][st], "stream": s["stream"][st], "s2c": s["s2c"][st], "packet": packet[st],
                   "ts_ns": ts[st], "previous_packet": packet[st - 1], "ack_packet": s["peer_last_packet"][st],
                   "stall_ns": ts[st] - ts[st - 1], "ack_delay_ns": ack_delay[ok], "release_ns": release[ok],
                   "payload_bytes": payload[st]}


def _examples(s: dict[str, np.ndarray], in_run: np.ndarray, carry: _Carry) -> dict[str, np.ndarray]:
    """The segments in coalescable runs that a finding may cite: the first EXAMPLE_PACKETS of
    each direction, in segment order, with their rank (counted on from the carry's)."""
    rows = np.flatnonzero(in_run)
    k = s["k"][rows]
    first = np.r_[True, k[1:] != k[:-1]] if len(k) else np.zeros(0, bool)
    at = np.arange(len(k))
    rank = carry.in_run[k] + at - np.maximum.accumulate(np.where(first, at, 0))
    carry.in_run += np.bincount(k, minlength=len(carry.in_run))
    keep = rank < EXAMPLE_PACKETS
    return {"g": s["g"][rows[keep]], "packet": s["packet"][rows[keep]], "_rank": rank[keep]}


def _direction_rows(conn: pd.DataFrame, carry: _Carry, small_limit_k: np.ndarray) -> pd.DataFrame:
    """The per-direction table from the counts of all the partition's segments (`carry` after
    the last slice), without the stall columns (`_with_stalls`)."""
    kk = np.flatnonzero(carry.totals["data_segments"] > 0)
    groups = conn["g"].to_numpy()[kk]
    t = {name: v[kk] for name, v in carry.totals.items()}
    mss_g = conn["mss"].to_numpy()[kk]
    # Per direction: does it show TCP_NODELAY? Nagle (Minshall's variant, Linux) never sends a
    # small segment while an earlier small one is unacknowledged (RFC 896; RFC 1122 4.2.3.4),
    # so a direction that does so often is not under Nagle, and nothing of it was held by Nagle.
    n_small_g = t["small_segments"]
    nodelay_g = t["small_while_unacked"] > NAGLE_UNACKED_SHARE_MAX * n_small_g
    # What the small segments carry, per direction: the most common kind and its share of the
    # direction's small segments.
    kinds = carry.kinds[kk]
    top = kinds.argmax(axis=1) if len(kk) else np.zeros(0, np.int64)
    n_small_safe = np.maximum(n_small_g, 1)
    d = pd.DataFrame({
        "stream": (groups // 2).astype(np.int32),
        "direction": np.where(groups % 2 == 1, "s2c", "c2s"),
        "mss_bytes": pd.array(mss_g, dtype="Float64").astype("Int64"),
        "small_limit_bytes": small_limit_k[kk],
        "data_segments": t["data_segments"],
        "payload_bytes": t["payload_bytes"],
        "small_segments": n_small_g,
        "frames": t["frames"],
        "single_frame_segments": t["single_frame_segments"],
        "small_while_unacked": t["small_while_unacked"],
        "nodelay": nodelay_g,
        "carries": np.where(n_small_g > 0, np.asarray(CARRIES, dtype=object)[top], None),
        "carries_share": np.where(n_small_g > 0, kinds[np.arange(len(kk)), top] / n_small_safe, np.nan),
        "packets_saved": t["packets_saved"],
        "active_s": (carry.last_ts[kk] - carry.first_ts[kk]) / 1e9,
    })
    d["connection_s"] = conn["connection_s"].to_numpy()[kk]
    d["broker_port"] = conn["broker_port"].to_numpy()[kk]
    span = np.maximum(d["active_s"].to_numpy(), RATE_MIN_SPAN_S)
    d["small_share"] = d["small_segments"] / d["data_segments"]
    d["frames_per_segment"] = d["frames"] / d["data_segments"]
    d["small_segments_s"] = d["small_segments"] / span
    d["small_while_unacked_share"] = d["small_while_unacked"] / d["data_segments"]
    d["packets_saved_share"] = d["packets_saved"] / d["data_segments"]
    d["packets_saved_s"] = d["packets_saved"] / span
    return d


def _with_stalls(d: pd.DataFrame, candidates: dict[str, np.ndarray]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The per-direction table with its stall columns, and the stalls table: the candidates of
    the directions that do not show TCP_NODELAY, in (stream, direction, segment) order."""
    dg = d["stream"].to_numpy(np.int64) * 2 + (d["direction"] == "s2c").to_numpy(bool)
    at = np.searchsorted(dg, candidates["g"])
    held = np.flatnonzero(~d["nodelay"].to_numpy(bool)[at])
    o = held[np.argsort(candidates["g"][held], kind="stable")]
    c = {name: v[o] for name, v in candidates.items()}
    stall_s = c["stall_ns"] / 1e9
    stalls = pd.DataFrame({
        "stream": c["stream"].astype(np.int32),
        "direction": np.where(c["s2c"], "s2c", "c2s"),
        "packet": c["packet"].astype(np.int32),
        "ts": pd.to_datetime(c["ts_ns"], utc=True),
        "previous_packet": c["previous_packet"].astype(np.int32),
        "ack_packet": c["ack_packet"].astype(np.int32),
        "stall_s": stall_s,
        "ack_delay_s": c["ack_delay_ns"] / 1e9,
        "release_s": c["release_ns"] / 1e9,
        "payload_bytes": c["payload_bytes"].astype(np.int64),
    })
    st_group = at[o]
    d = d.copy()
    d["stalls"] = np.bincount(st_group, minlength=len(d)).astype(np.int64)
    # Summed in row order, as a per-row sum with zeros elsewhere would be.
    d["stall_time_s"] = np.bincount(st_group, weights=stall_s, minlength=len(d)).astype(np.float64)
    med = stalls.assign(g=stalls["stream"].astype(np.int64) * 2 + (stalls["direction"] == "s2c")).groupby("g")["stall_s"].median()
    d["median_stall_s"] = med.reindex(dg).to_numpy()
    cs = d["connection_s"].to_numpy()
    d["stall_share"] = np.where(cs > 0, d["stall_time_s"] / np.where(cs > 0, cs, 1), 0.0)
    return d[DIRECTION_COLUMNS], stalls


#: the per-direction table's columns
DIRECTION_COLUMNS = [
    "stream", "direction", "mss_bytes", "small_limit_bytes", "data_segments", "payload_bytes", "small_segments",
    "small_share", "small_segments_s", "frames_per_segment", "single_frame_segments", "small_while_unacked",
    "small_while_unacked_share", "nodelay", "carries", "carries_share", "packets_saved", "packets_saved_share",
    "packets_saved_s", "stalls", "stall_time_s", "median_stall_s", "stall_share", "active_s", "connection_s",
    "broker_port"]


def analyze_segments(cap: Capture) -> tuple[dict[str, np.ndarray], pd.DataFrame, pd.DataFrame]:
    """(segment columns with per-segment flags, per-direction table, stalls table) of a
    partition analysed whole."""
    s, _, piece = _slice(cap, None, True)
    part = nagle_join([piece])
    d = part["directions"]
    # a candidate of a direction that shows TCP_NODELAY is no stall
    dg = d["stream"].to_numpy(np.int64) * 2 + (d["direction"] == "s2c").to_numpy(bool)
    s["stall"] &= ~d["nodelay"].to_numpy(bool)[np.searchsorted(dg, s["g"])]
    return s, d, part["stalls"]


# -------------------------------------------------------------------------------------- findings


def _frames_filter(packets) -> str:
    # Comma-separated: Wireshark >= 4.0 rejects whitespace-separated set members.
    return "frame.number in {" + ", ".join(str(int(x)) for x in sorted(set(packets))) + "}"


def _dir_clause(stream: int, direction: str, port: int, extra: str) -> str:
    side = "tcp.dstport" if direction == "c2s" else "tcp.srcport"
    return f"(tcp.stream eq {stream} && {side} == {port}{extra})"


#: What each kind of small segment says, and what to do about it (small-packets' advice).
CARRIES_TITLE = {
    "ack": "one basic.ack per TCP segment",
    "message": "one small message per TCP segment",
    "split": "each message's frames (method, header, body) in separate TCP segments",
    "other": "many small TCP segments back to back",
}
CARRIES_ADVICE = {
    "ack": ("Consumers acknowledge every message on its own, one segment each: acknowledge in batches "
            "(basic.ack with multiple=true every N messages or every few milliseconds; PerfTest "
            "--multi-ack-every N), which also cuts the broker's work per message."),
    "message": ("Publishers send each message in its own segment, back to back: publish in batches (several "
                "publishes in one write: a buffered output flushed once per batch), or let the kernel coalesce "
                "a batch with TCP_CORK / MSG_MORE."),
    "split": ("The client writes the method, header and body frames of each message in separate send calls "
              "with TCP_NODELAY on, one segment per frame: build all frames of a message into one buffer and "
              "write it once (a buffered writer flushed per message or per batch, writev). Leaving Nagle on "
              "instead would hold the second write for the peer's delayed ACK (see nagle-delayed-ack)."),
    "other": ("Many small writes leave back to back: coalesce them into one write per batch (a buffered "
              "output flushed once), or use TCP_CORK / MSG_MORE while a batch is written."),
}


def small_packets_finding(cap: Capture, seg: dict[str, np.ndarray], d: pd.DataFrame) -> Finding | None:
    """The client's writes (c2s) that waste packets, one subject per connection, worst first.
    Only c2s: the broker's writes are RabbitMQ's own (its writer already coalesces the frames
    queued together), and the client's patterns behind them have findings of their own."""
    hit = d[(d["direction"] == "c2s") & (d["carries"] != "heartbeat")
            & (d["small_share"] >= SMALL_SHARE_MIN) & (d["packets_saved_share"] >= AVOIDABLE_SHARE_MIN)
            & (d["packets_saved"] >= AVOIDABLE_MIN_PACKETS) & (d["packets_saved_s"] >= AVOIDABLE_RATE_INFO)]
    if not len(hit):
        return None
    hit = hit.sort_values(["packets_saved_s", "stream"], ascending=[False, True])
    w = hit.iloc[0]
    worst = float(w["packets_saved_s"])
    severity = ("critical" if worst >= AVOIDABLE_RATE_CRITICAL else "warning" if worst >= AVOIDABLE_RATE_WARNING
                else "info")
    hit_g = hit["stream"].to_numpy(np.int64) * 2 + (hit["direction"] == "s2c").to_numpy()
    examples = seg["packet"][seg["in_run"] & np.isin(seg["g"], hit_g)][:EXAMPLE_PACKETS].tolist()
    clauses = [_dir_clause(int(r.stream), r.direction, int(r.broker_port), f" && tcp.len > 0 && tcp.len < {int(r.small_limit_bytes)}")
               for r in hit.head(10).itertuples()]
    subject_of = subject_namer(cap)
    subjects = [subject_of(int(r.stream), direction=r.direction, carries=r.carries,
                           carries_share=round(float(r.carries_share), 3), data_segments=int(r.data_segments),
                           small_segments=int(r.small_segments), small_while_unacked=int(r.small_while_unacked),
                           packets_saved=int(r.packets_saved), packets_saved_s=round(float(r.packets_saved_s), 1),
                           small_limit_bytes=int(r.small_limit_bytes))
                for r in hit.itertuples()]
    kinds = list(dict.fromkeys(hit["carries"]))  # worst subject's kind first
    n_data, saved = int(hit["data_segments"].sum()), int(hit["packets_saved"].sum())
    if len(kinds) == 1:
        what = CARRIES_TITLE[kinds[0]]
    else:
        what = "; ".join(f"{CARRIES_TITLE[k]} ({int((hit['carries'] == k).sum())} connections)" for k in kinds)
    rate = f"{worst:,.0f} avoidable packets/s" if len(subjects) == 1 else f"up to {worst:,.0f} avoidable packets/s (the first)"
    return Finding(
        id="small-packets",
        severity=severity,
        title=(f"Small TCP segments from {who([x['connection'] for x in subjects])}: {what}; {rate}, "
               f"{float(w['packets_saved_share']):.0%} of its segments could have been written together"),
        evidence={
            "max_packets_saved_s": round(worst, 1),
            "carries": {k: int((hit["carries"] == k).sum()) for k in kinds},
            "directions": len(hit),
            "data_segments": n_data,
            "small_segments": int(hit["small_segments"].sum()),
            "small_while_unacked": int(hit["small_while_unacked"].sum()),
            "packets_saved": saved,
            "packets_saved_share": round(saved / n_data, 3),
            "streams": sorted({int(s) for s in hit["stream"]}),
            "packets": examples,
            "filter": " || ".join(clauses),
        },
        advice=" ".join(CARRIES_ADVICE[k] for k in kinds),
        impact=min(1.0, worst / AVOIDABLE_RATE_CRITICAL),
        subjects=subjects,
    )


def nagle_finding(cap: Capture, d: pd.DataFrame, stalls: pd.DataFrame) -> Finding | None:
    """Directions whose writes Nagle held until the peer's delayed ACK (every stall passed the
    mechanism checks of analyze_segments), one subject per connection direction, worst first;
    severity from the worst one's share of its own connection's time."""
    if not len(stalls):
        return None
    hit = d[(d["stalls"] >= STALL_MIN_COUNT) & (d["stall_share"] >= STALL_SHARE_WARNING)]
    if not len(hit):
        return None
    hit = hit.sort_values(["stall_share", "stream"], ascending=[False, True])
    w = hit.iloc[0]
    worst = float(w["stall_share"])
    severity = "critical" if worst >= STALL_SHARE_CRITICAL else "warning"
    key = stalls["stream"].astype(np.int64) * 2 + (stalls["direction"] == "s2c")
    st = stalls[key.isin(hit["stream"].to_numpy(np.int64) * 2 + (hit["direction"] == "s2c").to_numpy())]
    subject_of = subject_namer(cap)
    subjects = [subject_of(int(r.stream), direction=r.direction, stalls=int(r.stalls),
                           median_stall_s=float(r.median_stall_s), stall_time_s=float(r.stall_time_s),
                           stall_share=round(float(r.stall_share), 4), connection_s=float(r.connection_s))
                for r in hit.itertuples()]
    writer = {"c2s": "the client's", "s2c": "the broker's"}[w["direction"]] if hit["direction"].nunique() == 1 else "the"
    peer = {"c2s": "the broker's", "s2c": "the client's"}[w["direction"]] if hit["direction"].nunique() == 1 else "the peer's"
    worst_of = "" if len(subjects) == 1 else f" on {subjects[0]['connection']}"
    return Finding(
        id="nagle-delayed-ack",
        severity=severity,
        title=(f"Nagle held {writer} small writes on {who([x['connection'] for x in subjects])} until {peer} delayed "
               f"ACK: {int(w['stalls'])} times{worst_of}, median {float(w['median_stall_s']) * 1e3:.0f} ms, "
               f"{float(w['stall_time_s']):.2f} s = {worst:.0%} of the connection's time"),
        evidence={
            "stalls": int(len(st)),
            "median_stall_s": float(np.median(st["stall_s"])),
            "max_stall_s": float(st["stall_s"].max()),
            "median_ack_delay_s": float(np.median(st["ack_delay_s"])),
            "stall_time_s": float(w["stall_time_s"]),
            "stall_share": round(worst, 4),
            "directions": len(hit),
            "streams": sorted({int(s) for s in hit["stream"]}),
            "packets": st[["previous_packet", "ack_packet", "packet"]].head(3).to_numpy().ravel().tolist(),
            "filter": _frames_filter(st["packet"].head(FILTER_PACKETS).tolist()),
        },
        advice=("Write-write-read with Nagle on: each small write after the first waited until the first was "
                "acknowledged, while only that one small segment was in flight and the receive window was open "
                "(Nagle, RFC 896), and the peer delays that ACK (~40 ms on Linux, up to 200 ms elsewhere). Write "
                "the whole message (method, header and body frames) in one send call, or set TCP_NODELAY on the "
                "socket (most AMQP clients do by default); with TCP_NODELAY, still write a message's frames "
                "together so as not to trade the stall for small-packets."),
        impact=min(1.0, worst),
        subjects=subjects,
    )


# ------------------------------------------------------------------------------------------ plots


def _plot_stalls(stalls: pd.DataFrame):
    def draw(path: Path) -> None:
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 4.5))
        bins = np.arange(0, STALL_ACK_DELAY_MAX_S * 1e3 + 20, 5)
        for d in ("c2s", "s2c"):
            x = stalls.loc[stalls["direction"] == d, "stall_s"].to_numpy() * 1e3
            if len(x):
                ax.hist(x, bins=bins, alpha=0.7, label=f"{d} ({len(x)})")
        ax.set_ylim(0, ax.get_ylim()[1] * 1.3)  # headroom for the marker labels
        for ms, lbl in ((40, "Linux delayed ACK\n(40 ms)"), (200, "delayed ACK\n200 ms")):
            ax.axvline(ms, color="grey", ls="--", lw=1)
            ax.text(ms + 3, ax.get_ylim()[1] * 0.97, lbl, fontsize=8, color="dimgrey", va="top",
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8})
        ax.set_xlabel("stall: previous segment → held segment (ms), 5 ms bins")
        ax.set_ylabel("stalls")
        ax.set_title("Nagle / delayed-ACK stalls")
        ax.legend(loc="center right")
        fig.tight_layout()
        fig.savefig(path, dpi=110)

    return draw


def _plot_small_share(cap: Capture, d: pd.DataFrame):
    top = d.sort_values("data_segments", ascending=False).head(20)

    def draw(path: Path) -> None:
        import matplotlib.pyplot as plt

        from ..names import connection_label
        from ..plotting import plain_axis, short, shown_of

        fig, ax = plt.subplots(figsize=(11, max(2.5, 0.3 * len(top) + 1.3)), layout="constrained")
        labels = [f"{short(connection_label(cap, s), 44)} {dr}" for s, dr in zip(top["stream"], top["direction"])]
        y = np.arange(len(top))
        n = top["data_segments"].to_numpy()
        # Nested bars of decreasing height, so each stays visible when it equals the one behind.
        ax.barh(y, n, height=0.8, color="#cccccc", label="data segments")
        ax.barh(y, top["small_segments"].to_numpy(), height=0.55, color="#ff7f0e", label="small (< 25% of MSS)")
        ax.barh(y, top["packets_saved"].to_numpy(), height=0.3, color="#d62728", label="avoidable by coalescing")
        ax.set_yticks(y, labels, fontsize=8)
        ax.invert_yaxis()
        plain_axis(ax.xaxis)
        ax.set_xlabel("segments")
        ax.set_title(f"Small segments per connection direction ({shown_of(len(top), len(d), 'direction')}, "
                     "most segments first)", fontsize=10, loc="left")
        ax.legend(loc="lower right", fontsize=8)
        fig.savefig(path, dpi=100)

    return draw


# ---------------------------------------------------------------------------------------- analyzer


def nagle_slice(part: Capture, facts: CaptureFacts, carry: _Carry | None, last: bool) -> tuple[_Carry, dict[str, Any]]:
    """A slice of a partition's time (`amqpcap.partition.Slicing`): the carry moved past its
    packets, and its piece of the partial (`nagle_join`)."""
    _, carry, piece = _slice(part, carry, last)
    return carry, piece


def nagle_join(pieces: list[dict[str, Any]]) -> dict[str, Any]:
    """The partition's directions and stalls from its slices' pieces (the last one holds the
    directions' counts over all of them: a direction's stall candidates are its stalls unless
    the direction shows TCP_NODELAY), and the segments in coalescable runs that a finding may
    cite (the first EXAMPLE_PACKETS of each direction: a finding cites the first ones of the
    directions it names, in segment order)."""
    d, stalls = _with_stalls(pieces[-1]["directions"], {c: np.concatenate([q["stalls"][c] for q in pieces])
                                                       for c in pieces[0]["stalls"]})
    runs = {c: np.concatenate([q["runs"][c] for q in pieces]) for c in ("g", "packet", "_rank")}
    o = np.argsort(runs["g"], kind="stable")  # (a direction's examples of later slices after its earlier ones)
    return {"directions": d, "stalls": stalls, "runs": {c: v[o] for c, v in runs.items()}}


def nagle_partial(cap: Capture, facts: CaptureFacts) -> dict[str, Any]:
    """A partition's directions and stalls, and the segments in coalescable runs that a finding
    may cite: the partition as its one slice of time."""
    return nagle_join([nagle_slice(cap, facts, None, True)[1]])


def nagle_merge(partials: list[dict[str, Any]], records: None, facts: CaptureFacts, cap: Capture) -> AnalyzerResult:
    """Directions and stalls of all partitions; the findings and summary from them."""
    d = merge_rows([q["directions"] for q in partials], ["stream", "direction"])
    stalls = merge_rows([q["stalls"] for q in partials], ["stream", "direction", "packet"])
    runs = pd.DataFrame({k: np.concatenate([q["runs"][k] for q in partials]) for k in ("g", "packet", "_rank")})
    runs = runs.sort_values(["g", "_rank"], kind="stable")
    seg = {"g": runs["g"].to_numpy(), "packet": runs["packet"].to_numpy(), "in_run": np.ones(len(runs), bool)}
    findings = [f for f in (small_packets_finding(cap, seg, d), nagle_finding(cap, d, stalls)) if f is not None]
    summary: dict[str, Any] = {
        "nagle": {
            "data_segments": int(d["data_segments"].sum()),
            "small_segments": int(d["small_segments"].sum()),
            "small_while_unacked": int(d["small_while_unacked"].sum()),
            "packets_saved": int(d["packets_saved"].sum()),
            "stalls": int(len(stalls)),
            "stall_time_s": float(stalls["stall_s"].sum()) if len(stalls) else 0.0,
            "median_stall_s": float(stalls["stall_s"].median()) if len(stalls) else None,
        }
    }
    plots = [Plot("nagle-small-segments", "Small segments per connection direction", _plot_small_share(cap, d))]
    if len(stalls):
        plots.append(Plot("nagle-stalls", "Nagle / delayed-ACK stalls", _plot_stalls(stalls)))
    return AnalyzerResult("nagle", tables={"directions": d.drop(columns=["broker_port"]), "stalls": stalls},
                          summary=summary, findings=findings, plots=plots)


SPLIT = Split(partial=nagle_partial, merge=nagle_merge, slicing=Slicing(nagle_slice, nagle_join))


@analyzer("nagle", split=SPLIT)
def nagle(cap: Capture) -> AnalyzerResult:
    """Small TCP segments, unbatched writes and Nagle/delayed-ACK stalls per connection direction."""
    return run_whole(SPLIT, cap)
