"""Each data segment with what it reads of its peer's packets (cumulative ACK, data, last packet
before it), whole-column: one `searchsorted` on the peer's (group, packet number) keys.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from ...io.load import Capture
from ...derive.stream_order import HI_SHIFT as _HI_SHIFT
from ...derive.stream_order import running_last as _running_last
from ...derive.stream_order import stream_order
from .carry import _Carry, _advance
from .constants import FLAG_ACK, FLAG_FIN, FLAG_RST, FLAG_SYN


class _SegmentRows(NamedTuple):
    """The slice's data segments that are not retransmissions, in (stream, direction, packet)
    order, and their directions (`_segment_rows`)."""

    #: each segment's row in stream order
    idx: np.ndarray
    #: its stream·2 + s2c (sorted)
    g: np.ndarray
    #: each direction's segments (in g order) and its g
    lens: np.ndarray
    g_first: np.ndarray
    #: each direction's peer's row in `_directions`, and each segment's own direction's row
    peer_k_g: np.ndarray
    k: np.ndarray


class _PeerLast(NamedTuple):
    """Where each segment reads its peer's last packet before it (`_peer_last`)."""

    #: the peer's last row before the segment, in stream order (-1: none), and that clipped at 0
    peer_last: np.ndarray
    pl: np.ndarray
    #: the peer's last packet is here (not the carry's)
    valid: np.ndarray
    #: the segments whose peer's last packet is the carry's, and the carry's row of that peer
    away: np.ndarray
    away_peer: np.ndarray
    #: the peer's half of acked and data_cnt, and its row there at its last packet
    half: np.ndarray
    at: np.ndarray


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
    acked, data_cnt = _running_state(so)
    run_start = _run_starts(so["s2c"])
    r = _segment_rows(so, streams)
    seg_s2c = (r.g & 1).astype(bool)
    seg_stream = r.g >> 1
    seg_hi = seg_stream << _HI_SHIFT
    p = _peer_last(so, run_start, r, seg_s2c, seg_stream)
    peer_acked, peer_acked_before = _peer_acked(acked, p, r, seg_hi, carry)

    def peer(column: str, rows: np.ndarray, moved: np.ndarray, kept: np.ndarray) -> np.ndarray:  # (`_peer_column`)
        return _peer_column(so, carry, column, rows, moved, kept)

    last_packet = peer("packet", p.pl, p.away, p.away_peer)
    pl_flags = peer("flags", p.pl, p.away, p.away_peer)
    pure_ack = ((last_packet >= 0) & (peer("payload_bytes", p.pl, p.away, p.away_peer) == 0)
                & ((pl_flags & FLAG_ACK) != 0) & ((pl_flags & (FLAG_SYN | FLAG_FIN | FLAG_RST)) == 0))
    ppc, pp_away, pp_kept, pp_ok = _peer_previous(so, carry, run_start, p, r.k, seg_stream)
    idx = r.idx
    seg_payload = so["payload_bytes"][idx]
    out = {
        "g": r.g, "k": r.k, "stream": seg_stream, "s2c": seg_s2c, "packet": so["packet"][idx], "ts_ns": so["ts"][idx],
        "payload_bytes": seg_payload, "end": so["seq"][idx] + seg_payload, "frames": so["frames_ended"][idx],
        "peer_acked": peer_acked,
        "peer_last_packet": last_packet,
        "peer_last_ts_ns": peer("ts", p.pl, p.away, p.away_peer),
        "peer_last_pure_ack": pure_ack,
        "peer_last_ack": peer("ack", p.pl, p.away, p.away_peer),
        "peer_acked_before_last": peer_acked_before,
        # The peer's window before its last packet (-1: unknown) and the ACK it came with.
        "peer_prev_window": np.where(pp_ok, peer("window", ppc, pp_away, pp_kept), -1),
        "peer_prev_ack": np.where(pp_ok, peer("ack", ppc, pp_away, pp_kept), -1),
        # Only equality between a direction's consecutive segments is read: no peer data between.
        "peer_data_count": _peer_data_count(so["stream"], data_cnt, r, p.half, carry),
    }
    if not last:
        _advance(carry, so, acked, data_cnt, streams)
    return out


def _running_state(so) -> tuple[np.ndarray, np.ndarray]:
    """Each direction's state at each packet row (`so`, in stream order): rows [0, n_all) that of
    c2s, rows [n_all, 2·n_all) that of s2c, so one gather reads either side.

    acked: the direction's highest ACK so far in the row's stream (stream in the high bits,
    see stream_order.running_max_keyed); data_cnt: its data packets so far (differences are
    read; int32: fewer than 2³¹ packets in a partition, half the memory traffic of int64)."""
    s2c, ack, hi = so["s2c"], so["ack"], so["hi"]
    n_all = len(so["stream"])
    data = so["payload_bytes"] > 0
    acked = np.empty(2 * n_all, np.int64)
    keyed_ack = ack + hi
    np.maximum.accumulate(np.where(s2c, -1, keyed_ack), out=acked[:n_all])
    np.maximum.accumulate(np.where(s2c, keyed_ack, -1), out=acked[n_all:])
    data_cnt = np.empty(2 * n_all, np.int32)
    np.cumsum(data & ~s2c, dtype=np.int32, out=data_cnt[:n_all])
    np.cumsum(data & s2c, dtype=np.int32, out=data_cnt[n_all:])
    return acked, data_cnt


def _run_starts(s2c: np.ndarray) -> np.ndarray:
    """The row where each row's run of same-direction rows starts: the peer's last packet before
    a row is the one just before its run (file-wide, like the stream check in `_peer_last`)."""
    turn = np.empty(len(s2c), bool)
    turn[:1] = True
    np.not_equal(s2c[1:], s2c[:-1], out=turn[1:])
    return _running_last(turn)


def _segment_rows(so, streams: np.ndarray) -> _SegmentRows:
    """The data segments that are not retransmissions, sorted by (stream, direction, packet),
    with their directions' rows in `_directions` (whose connections are `streams`)."""
    stream, s2c = so["stream"], so["s2c"]
    idx = np.flatnonzero((so["payload_bytes"] > 0) & ~so["retransmission"])
    g = stream[idx].astype(np.int64) * 2 + s2c[idx]
    # (stream, direction, packet): a stable sort on g; radix sort when g fits 16 bits.
    o = np.argsort(g.astype(np.uint16) if len(g) and g.max() < 1 << 16 else g, kind="stable")
    idx, g = idx[o], g[o]
    # A direction's segments are consecutive rows: what depends on the direction alone (its row
    # k in the carry, its peer's) is found once per direction and spread over its rows.
    gs = np.flatnonzero(np.r_[True, g[1:] != g[:-1]]) if len(g) else np.zeros(0, np.int64)
    lens = np.diff(np.r_[gs, len(g)])
    g_first = g[gs]
    k_g = 2 * np.searchsorted(streams, g_first >> 1) + (g_first & 1)  # (every stream has its connections row)
    return _SegmentRows(idx, g, lens, g_first, k_g ^ 1, np.repeat(k_g, lens))


def _peer_last(so, run_start: np.ndarray, r: _SegmentRows, seg_s2c: np.ndarray, seg_stream: np.ndarray) -> _PeerLast:
    """Where each segment reads its peer's last packet before it: the row before its run of
    same-direction rows when that row is of its stream, else the carry's."""
    peer_last = run_start[r.idx] - 1
    pl = np.maximum(peer_last, 0)
    valid = (peer_last >= 0) & (so["stream"][pl] == seg_stream)  # the peer's last packet is here
    away = np.flatnonzero(~valid)  # (each direction's first rows, before the peer's first packet here)
    away_peer = r.k[away] ^ 1
    half = np.where(seg_s2c, 0, len(so["stream"]))  # the peer's half of acked and data_cnt
    at = pl + half  # the peer's direction at its last row
    return _PeerLast(peer_last, pl, valid, away, away_peer, half, at)


def _peer_acked(acked: np.ndarray, p: _PeerLast, r: _SegmentRows, seg_hi: np.ndarray,
                carry: _Carry) -> tuple[np.ndarray, np.ndarray]:
    """What the peer had acknowledged at its last packet before each segment, and before that
    last packet (-1: nothing), with its packets of earlier slices (the carry's maxima)."""
    # The rows of the directions whose peer had packets in earlier slices.
    seen = np.flatnonzero(np.repeat(carry.max_ack[r.peer_k_g] >= 0, r.lens))
    seen_peer = r.k[seen] ^ 1
    # pl is a peer row of the stream when valid, so its running max includes itself (>= 0); the
    # peer's packets of earlier slices are in the carry's maximum.
    peer_acked = np.where(p.valid, acked[p.at] - seg_hi, -1)
    peer_acked[seen] = np.maximum(peer_acked[seen], carry.max_ack[seen_peer])
    # What the peer had acknowledged before that last packet (one row earlier; an earlier
    # stream's maximum is below this stream's key), with its packets of earlier slices; when
    # its last packet is the carry's, what the carry had before it.
    before = acked[np.maximum(p.at - 1, 0)]
    peer_acked_before = np.where(p.valid & (p.peer_last >= 1) & (before >= seg_hi), before - seg_hi, -1)
    peer_acked_before[seen] = np.maximum(peer_acked_before[seen], carry.max_ack[seen_peer])
    peer_acked_before[p.away] = carry.max_ack_before_last[p.away_peer]
    return peer_acked, peer_acked_before


def _peer_column(so, carry: _Carry, column: str, rows: np.ndarray, moved: np.ndarray, kept: np.ndarray) -> np.ndarray:
    """A column of the peer's packet: at `rows` (in stream order `so`), but the carry's packets
    `kept` at the segments `moved`."""
    out = so[column][rows]
    out[moved] = carry.packets[column][kept]
    return out


def _peer_previous(so, carry: _Carry, run_start: np.ndarray, p: _PeerLast, k: np.ndarray,
                   seg_stream: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The peer's packet before its last one, where the window it advertised there is the one in
    force while the segment waited: (its row in stream order clipped at 0, the segments where it
    is the carry's, the carry's rows of those, whether its window is usable).

    It is the row before pl when that row is the peer's too, else the row before the sender's
    run that precedes pl; when not here, the carry's last packet of the peer (pl is its first
    here) or the one before that (the peer has no packet here yet). A SYN's window is never
    scaled: not used."""
    pl, valid = p.pl, p.valid
    pp = np.where(run_start[pl] < pl, pl - 1, run_start[np.maximum(pl - 1, 0)] - 1)
    ppc = np.maximum(pp, 0)
    pp_here = valid & (pp >= 0) & (so["stream"][ppc] == seg_stream)
    pp_away = np.flatnonzero(~pp_here)
    pp_kept = (k[pp_away] ^ 1) + np.where(valid[pp_away], 0, len(carry.max_ack))
    pp_ok = pp_here.copy()
    pp_ok[pp_away] = carry.packets["packet"][pp_kept] >= 0
    pp_ok &= (_peer_column(so, carry, "flags", ppc, pp_away, pp_kept) & FLAG_SYN) == 0
    return ppc, pp_away, pp_kept, pp_ok


def _peer_data_count(stream: np.ndarray, data_cnt: np.ndarray, r: _SegmentRows, half: np.ndarray,
                     carry: _Carry) -> np.ndarray:
    """The peer's data packets up to each segment: the carry's, and its stream's rows here up to
    the segment's (each direction's stream starts here at row `first`)."""
    n_all = len(stream)
    first = np.searchsorted(stream, r.g_first >> 1)
    half_g = np.where(r.g_first & 1, 0, n_all)
    base_g = carry.data_count[r.peer_k_g] - np.where(first > 0, data_cnt[np.maximum(first - 1, 0) + half_g], 0)
    return data_cnt[r.idx + half] + np.repeat(base_g, r.lens)


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
