"""Each data segment with what it reads of its peer's packets (cumulative ACK, data, last packet
before it), whole-column: one `searchsorted` on the peer's (group, packet number) keys.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...capture import Capture
from ...derive.stream_order import HI_SHIFT as _HI_SHIFT
from ...derive.stream_order import running_last as _running_last
from ...derive.stream_order import stream_order
from .carry import _Carry, _advance
from .constants import FLAG_ACK, FLAG_FIN, FLAG_RST, FLAG_SYN


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
