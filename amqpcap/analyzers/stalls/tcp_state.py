"""Per-packet TCP state of each connection direction: the packets' columns the stalls need, counts,
advertised windows, real retransmissions and segment→ACK round trips; what a slice carries of it
to the next (`_Seen`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...io.load import Capture
from ...derive.stream_order import running_last, running_max_keyed, seconds, stream_order
from .constants import ACK, DUPLICATE_S, FIN_SYN_RST, SYN


@dataclass
class _Seen:
    """What a partition's packets so far tell of each connection direction: carried from one
    slice of the partition's time to the next (docs/time-split.md §2.9), or made from the
    partition at once. Arrays have a slot per connection and sender direction D: the sorted
    connections' position · 2 + D (`_slots`). Bounded by the connections, but for `unacked`
    (bytes in flight)."""

    #: the connections' streams, sorted (cap.connections: whole in every slice)
    stream: np.ndarray
    #: D's highest sequence number sent and the highest ACK its peer sent, keyed (the stream in
    #: the high bits: running_max_keyed; -1: none yet)
    sent: np.ndarray
    peer_ack: np.ndarray
    #: the window the peer last advertised on a packet without SYN, and whether there was one
    win: np.ndarray
    win_ok: np.ndarray
    #: the time of the connection's last row so far when D was window-limited there (NaN: it
    #: was not): that interval ends at the connection's next packet, in a later slice
    limited_from: np.ndarray
    #: the tcp table's counts and sums so far; ``rows``: the packets D sent (a tcp row per slot
    #: with any); window_limited_s adds the limited intervals one after the other (`_limited_s`)
    rows: np.ndarray
    data_packets: np.ndarray
    data_bytes: np.ndarray
    retransmissions: np.ndarray
    zero_window_ads: np.ndarray
    window_full_segments: np.ndarray
    window_limited_s: np.ndarray
    #: D's largest bytes in flight on its data segments, the smallest and largest window its
    #: peer offered it (NaN: none yet)
    inflight_max: np.ndarray
    peer_win_min: np.ndarray
    peer_win_max: np.ndarray
    #: D's latest new-data segment: its time (NaN: none yet), packet and ts (ns)
    data_t: np.ndarray
    data_packet: np.ndarray
    data_ts: np.ndarray
    #: D's new-data segments no later ACK of the peer has covered yet (`_rtt`): stream, t,
    #: keyed_end, packet, per D
    unacked: dict
    #: whether any direction was window-limited so far (none: window_limited_s is int64 zeros,
    #: as np.bincount of no rows gives)
    limited_any: bool = False

    @classmethod
    def nothing(cls, stream: np.ndarray) -> "_Seen":
        n = 2 * len(stream)

        def full(value, dtype):
            return np.full(n, value, dtype)

        none = {D: {"stream": np.zeros(0, np.int32), "t": np.zeros(0), "keyed_end": np.zeros(0, np.int64),
                    "packet": np.zeros(0, np.int64)} for D in (0, 1)}
        return cls(stream, full(-1, np.int64), full(-1, np.int64), full(0, np.int64), full(False, bool),
                   full(np.nan, float), *(full(0, np.int64) for _ in range(6)), full(0.0, float),
                   full(np.nan, float), full(np.nan, float), full(np.nan, float),
                   full(np.nan, float), full(0, np.int64), full(0, np.int64), none)


def _seen_before(cap: Capture, seen: "_Seen | None") -> _Seen:
    """`seen` (None: the partition's first slice, or the partition whole: nothing seen yet)."""
    return seen if seen is not None else _Seen.nothing(np.sort(cap.connections["stream"].to_numpy(np.int64)))


def _slots(seen: _Seen, stream: np.ndarray, d) -> np.ndarray:
    """The slot of each (stream, sender direction d) in `seen`'s arrays."""
    return np.searchsorted(seen.stream, stream) * 2 + d


def _packets(cap: Capture, t0_ns: int, seen: _Seen) -> dict[str, np.ndarray]:
    """Packets sorted by (stream, time, packet) with the state of both directions at each one:
    for sender direction D, its highest sequence sent, the peer's latest ACK and window, each
    continued from what the slices before saw (`seen`, updated to the end of these packets).

    Plain numpy columns (a dict): a DataFrame of a million rows and twenty columns costs more to
    build than all the work on it. Per-stream state is a running max/last over rows sorted by
    stream, with the stream folded into the key so nothing carries over between streams."""
    so = stream_order(cap)  # shared with the nagle analyzer
    pk = _packet_columns(so, t0_ns)
    # rows continuing the stream of the row before (the time sort below moves no row across streams)
    same = pk["stream"][1:] == pk["stream"][:-1]
    pk = _in_time_order(pk, same)
    stream, flags = pk["stream"], pk["flags"]
    ctl = _add_segment_facts(pk, _scaled(cap, stream))
    _add_stream_runs(pk, same)
    # each row's slot of sender direction 0 in `seen` (+ D: direction D's), found per stream run
    starts = np.flatnonzero(pk["first"])  # each stream's run of rows
    run_slot = _slots(seen, stream[starts], 0)
    slot0 = np.repeat(run_slot, np.diff(np.r_[starts, len(stream)]))
    # Running maxima keep the stream in the high bits (running_max_keyed): a value is
    # present when the maximum is at least the row's own key, and differences of two keyed
    # values of a row are plain differences; no decoding over all rows.
    hi = so["hi"]  # the in-stream time sort never moves rows across streams
    pk.update(hi=hi, keyed_end=pk["end_seq"] + hi, keyed_ack=pk["ack"] + hi)
    stream_start = running_last(pk["first"])  # row where each row's stream begins
    pk["run_stream"] = stream[starts]
    ack_flag, no_syn = (flags & ACK) != 0, (flags & SYN) == 0
    full = pk["data"] & ~ctl & pk["scaled"]
    wfull = np.zeros(len(stream), bool)
    for D in (0, 1):
        mine = pk["d"] == D
        state = _direction_state(pk, seen, slot0 + D, stream_start, mine, ack_flag, no_syn)
        acked = state[1] >= hi
        pk[f"state{D}"] = state
        pk[f"limited{D}"] = _window_limited(pk, state, acked)
        wfull |= full & mine & _at_window_edge(pk, state, acked)
        if len(starts):
            _fold_run_extremes(pk, seen, run_slot + D, starts, state, acked, mine)
            _carry_run_ends(seen, run_slot + D, state, np.flatnonzero(pk["last"]))
    pk["wfull"] = wfull  # each row's own direction
    _count(pk, seen, slot0)
    return pk


def _packet_columns(so: dict[str, np.ndarray], t0_ns: int) -> dict[str, np.ndarray]:
    """The columns of the stream-ordered packets `so` the stalls read, under their names here
    (``t``: seconds since `t0_ns`; ``d``: the sender direction)."""
    return {"stream": so["stream"], "packet": so["packet"], "ts": so["ts"], "t": seconds(so["ts"] - t0_ns),
            "d": so["s2c"].astype(np.int8), "payload": so["payload_bytes"], "seq": so["seq"], "ack": so["ack"],
            "flags": so["flags"], "window": so["window"], "retrans": so["retransmission"]}


def _in_time_order(pk: dict[str, np.ndarray], same: np.ndarray) -> dict[str, np.ndarray]:
    """`pk` sorted by (stream, time, packet) (`same`: the rows continuing their stream).

    File order is not always time order (several interfaces): sort by time within a stream.
    Stream order keeps the file's (packet) order inside a stream, which already is the
    (stream, time, packet) order when each stream's packets are in time order: then no sort."""
    stream, t, packet = pk["stream"], pk["t"], pk["packet"]
    if np.all(~same | ((t[1:] >= t[:-1]) & (packet[1:] > packet[:-1]))):
        return pk
    o = np.lexsort((packet, t, stream))
    return {k: v[o] for k, v in pk.items()}


def _scaled(cap: Capture, stream: np.ndarray) -> np.ndarray:
    """Whether each row's window field is scaled as the connection agreed: without both SYNs
    the window field may be unscaled, and only zero windows are trustworthy then."""
    c = cap.connections
    scaled = np.zeros(int(max(stream.max(initial=-1), c["stream"].max() if len(c) else -1)) + 1, bool)
    scaled[c["stream"].to_numpy(np.int64)] = c["handshake_seen"].fillna(False).to_numpy(bool)
    return scaled[stream]


def _add_segment_facts(pk: dict[str, np.ndarray], scaled: np.ndarray) -> np.ndarray:
    """Add each row's own facts to `pk`: scaled, data, new_data, end_seq, zero_window. Returns
    which rows carry FIN, SYN or RST."""
    payload, flags = pk["payload"], pk["flags"]
    data = payload > 0
    ctl = (flags & FIN_SYN_RST) != 0
    pk.update(scaled=scaled, data=data, new_data=data & ~pk["retrans"], end_seq=pk["seq"] + payload,
              zero_window=(pk["window"] == 0) & ~ctl)  # Wireshark's tcp.analysis.zero_window
    return ctl


def _add_stream_runs(pk: dict[str, np.ndarray], same: np.ndarray) -> None:
    """Add to `pk` the rows where each stream begins and ends (first, last; `same`: the rows
    continuing their stream), and each row's next packet time in its stream (next_t; the last
    row's own time: the stream's end)."""
    t = pk["t"]
    n = len(pk["stream"])
    first = np.r_[True, ~same] if n else np.zeros(0, bool)
    last = np.r_[~same, True] if n else np.zeros(0, bool)
    pk.update(first=first, last=last, next_t=np.where(last, t, np.r_[t[1:], 0.0]))


def _direction_state(pk: dict[str, np.ndarray], seen: _Seen, slot: np.ndarray, stream_start: np.ndarray,
                     mine: np.ndarray, ack_flag: np.ndarray, no_syn: np.ndarray) -> tuple:
    """Sender direction D's state at each row (`mine`: D's rows; `slot`: each row's slot of D in
    `seen`): (its highest keyed sequence sent, the peer's highest keyed ACK, the peer's latest
    window, whether there is one), each continued from the slices before."""
    # (running maxima continued from the slices before: the larger of the two)
    sent = np.maximum(running_max_keyed(pk["keyed_end"], mine & pk["data"]), seen.sent[slot])  # < hi: nothing sent yet
    peer_ack = np.maximum(running_max_keyed(pk["keyed_ack"], ~mine & ack_flag), seen.peer_ack[slot])  # < hi: no ACK yet
    # The peer's latest window; SYN windows are never scaled: skip them. Kept as integers
    # with a validity mask (lw = -1 reads the last row, masked): the float columns with NaN
    # for "unknown" are built by _window_state only for the rows the table and plot read.
    # Before the stream's first such row here: the window the slices before saw last.
    lw = running_last(~mine & no_syn)
    here = lw >= stream_start
    win = np.where(here, pk["window"][lw], seen.win[slot])
    win_ok = here | seen.win_ok[slot]
    return sent, peer_ack, win, win_ok


def _window_limited(pk: dict[str, np.ndarray], state: tuple, acked: np.ndarray) -> np.ndarray:
    """Whether the sender (direction D, its `state`; `acked`: an ACK of the peer known) may not
    send: the peer's window is zero, or what is unacknowledged (both ends known) fills it; with
    a window > 0, max(in flight, 0) ≥ window is in flight ≥ window."""
    sent, peer_ack, win, win_ok = state
    return win_ok & ((win == 0) | (pk["scaled"] & (sent >= pk["hi"]) & acked & (sent - peer_ack >= win)))


def _at_window_edge(pk: dict[str, np.ndarray], state: tuple, acked: np.ndarray) -> np.ndarray:
    """Wireshark's tcp.analysis.window_full, but for which rows it applies to: the segment
    reaches the right edge of the window the peer last advertised (its ACK + window; on a row
    of D these are the peer's latest). Keyed values on both sides: end + stream key == keyed
    ACK + window."""
    _, peer_ack, win, win_ok = state
    return acked & win_ok & (pk["keyed_end"] == peer_ack + win)


def _fold_run_extremes(pk: dict[str, np.ndarray], seen: _Seen, slot: np.ndarray, starts: np.ndarray, state: tuple,
                       acked: np.ndarray, mine: np.ndarray) -> None:
    """For the tcp table, per stream (a reduceat over its run of rows from `starts`, `slot`: its
    slot of D; NaN when nothing is known), fold into `seen` D's largest in flight on its data
    segments, and the smallest and largest window the peer offered it, seen on D's rows."""
    sent, peer_ack, win, win_ok = state
    inflight = np.where(mine & pk["data"] & (sent >= pk["hi"]) & acked, np.maximum(sent - peer_ack, 0), np.nan)
    peer_win = np.where(mine & win_ok, win, np.nan)
    seen.inflight_max[slot] = np.fmax(seen.inflight_max[slot], np.fmax.reduceat(inflight, starts))
    seen.peer_win_min[slot] = np.fmin(seen.peer_win_min[slot], np.fmin.reduceat(peer_win, starts))
    seen.peer_win_max[slot] = np.fmax(seen.peer_win_max[slot], np.fmax.reduceat(peer_win, starts))


def _carry_run_ends(seen: _Seen, slot: np.ndarray, state: tuple, ends: np.ndarray) -> None:
    """Keep in `seen` D's state at each stream's last row (`ends`; `slot`: its slot of D),
    where the next slice goes on from."""
    sent, peer_ack, win, win_ok = state
    seen.sent[slot], seen.peer_ack[slot] = sent[ends], peer_ack[ends]
    seen.win[slot], seen.win_ok[slot] = win[ends], win_ok[ends]


def _count(pk: dict[str, np.ndarray], seen: _Seen, slot0: np.ndarray) -> None:
    """Add the tcp table's counts of the packets `pk` to `seen`: per slot of the row's own
    direction (`slot0`: each row's direction 0 slot)."""
    g = slot0 + pk["d"]
    n = len(seen.rows)

    def count(x):  # integer bincount of the rows where x holds (no float weights over every row)
        return np.bincount(g[x], minlength=n).astype(np.int64)

    data = pk["data"]
    seen.rows += np.bincount(g, minlength=n).astype(np.int64)
    seen.data_packets += count(data)
    seen.data_bytes += np.bincount(g, weights=pk["payload"], minlength=n).astype(np.int64)
    seen.retransmissions += count(pk["retrans"] & data)
    seen.zero_window_ads += count(pk["zero_window"])
    seen.window_full_segments += count(pk["wfull"])


def _window_state(pk: dict[str, np.ndarray], D: int, rows) -> tuple[np.ndarray, np.ndarray]:
    """Sender direction D's bytes in flight and the peer's latest advertised window at ``rows``
    (a slice: one stream for the window plot), as float with NaN where unknown (nothing sent or
    acknowledged yet; no peer packet in the stream yet)."""
    sent, peer_ack, win, win_ok = (x[rows] for x in pk[f"state{D}"])
    hi = pk["hi"][rows]
    inflight = np.where((sent >= hi) & (peer_ack >= hi), np.maximum(sent - peer_ack, 0), np.nan)
    return inflight, np.where(win_ok, win, np.nan)


def _real_retransmissions(pk: dict[str, np.ndarray], recent: pd.DataFrame | None = None) -> pd.DataFrame:
    """Retransmitted data segments (stream, d, t), without the capture's own duplicates: a copy of
    a segment (same seq and length) within DUPLICATE_S of another copy is the same packet seen on
    two interfaces, not TCP loss recovery. `recent`: the first copies of the slices before that
    a copy here may repeat (`_recent_originals`)."""
    cols = ["stream", "d", "seq", "payload", "t"]
    data, retrans = pk["data"], pk["retrans"]
    rt = pd.DataFrame({c: pk[c][retrans & data] for c in cols})
    # Only originals that can match a retransmission (its seq) go into the merge, not every segment.
    om = data & ~retrans & np.isin(pk["seq"], rt["seq"].to_numpy())
    orig = pd.DataFrame({c: pk[c][om] for c in cols})
    if recent is not None and len(recent):
        orig = pd.concat([recent[recent["seq"].isin(rt["seq"])], orig], ignore_index=True)
    m = rt.reset_index().merge(
        orig, on=["stream", "d", "seq", "payload"], suffixes=("", "_orig"))
    dup = m.loc[(m["t"] - m["t_orig"]).abs() < DUPLICATE_S, "index"].unique()
    return rt.drop(index=dup)[["stream", "d", "t"]]


def _rtt(pk: dict[str, np.ndarray], seen: _Seen) -> pd.DataFrame:
    """Segment→ACK time samples: each new-data segment to the first later peer packet whose ACK
    covers its last byte (retransmitted segments excluded, Karn). Rows by (d, stream, segment);
    the segments of the slices before that no ACK covered yet (`_Seen.unacked`) first, each
    (d, stream)'s before the slice's own. Those of these packets no later ACK here covers are
    left in `seen.unacked`."""
    stream, t, d = pk["stream"], pk["t"], pk["d"]
    ackf = (pk["flags"] & ACK) != 0
    keyed_end = pk["keyed_end"]  # stream in the high bits
    out_s, out_d, out_r, out_t, out_p = [], [], [], [], []
    for D in (0, 1):
        seg = np.flatnonzero(pk["new_data"] & (d == D))
        is_ack = ackf & (d != D)
        acks = np.flatnonzero(is_ack)
        before = seen.unacked[D]
        # The peer's cumulative ACK (running max per stream, from the slices before too),
        # increasing over all streams.
        cm = pk[f"state{D}"][1][acks]
        # First peer ACK at or beyond the segment's end, and after the segment itself.
        # (The peer ACKs at or before each segment's row: a running count, not a second search.)
        k = np.maximum(np.searchsorted(cm, keyed_end[seg], side="left"), np.cumsum(is_ack)[seg])
        kb = np.searchsorted(cm, before["keyed_end"], side="left")  # (every ACK here is later)
        rows = {"stream": stream[seg], "t": t[seg], "keyed_end": keyed_end[seg], "packet": pk["packet"][seg]}
        if len(kb):  # the slices' before first in each stream's rows (a stable sort by stream)
            rows = {c: np.r_[before[c], v].astype(v.dtype) for c, v in rows.items()}
            by = np.argsort(rows["stream"], kind="stable")
            rows, k = {c: v[by] for c, v in rows.items()}, np.r_[kb, k][by]
        ok = k < len(acks)
        ok[ok] = stream[acks[k[ok]]] == rows["stream"][ok]  # ... of the same connection
        seen.unacked[D] = {c: v[~ok] for c, v in rows.items()}
        if not len(k) or not len(acks):
            continue
        out_s.append(rows["stream"][ok])
        out_d.append(np.full(int(ok.sum()), D, np.int8))
        out_r.append(t[acks[k[ok]]] - rows["t"][ok])
        out_t.append(rows["t"][ok])
        out_p.append(rows["packet"][ok])
    return pd.DataFrame({
        "stream": np.concatenate(out_s) if out_s else np.zeros(0, np.int64),
        "d": np.concatenate(out_d) if out_d else np.zeros(0, np.int8),
        "rtt_s": np.concatenate(out_r) if out_r else np.zeros(0),
        # the segment's time and packet: the rows' order across slices
        "_t": np.concatenate(out_t) if out_t else np.zeros(0),
        "_packet": np.concatenate(out_p) if out_p else np.zeros(0, np.int64),
    })
