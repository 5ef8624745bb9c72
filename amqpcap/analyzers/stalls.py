"""stalls: intervals where a connection direction went silent, and who is to blame.

A *stall* is a silence of one direction of one connection (no new data segment) that is long
both absolutely and relative to that direction's normal pacing and the connection's round trip.
Each stall gets exactly one cause, the first of `CAUSES` whose evidence holds over the interval:
what the capture cannot tell (a gap), TCP (receive window, loss), the broker (flow control), the
consumer's credit (prefetch), the publisher's confirm window, and otherwise the application.
Per direction it also reports the TCP numbers that separate "TCP's fault" from "broker's fault":
segment→ACK times, retransmissions, zero windows, window-full segments, bytes in flight.

Method and limits: docs/analyzers/stalls.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..analysis import AnalyzerResult, Finding, Plot, analyzer
from ..capture import Capture
from ..derive import consumers as credit
from ..derive.columns import as_object
from ..derive.labels import who
from ..derive.deliveries import confirms
from ..derive.replay import for_derivations, told, told_state
from ..derive.seeds import seeds_of
from ..derive.stream_order import ns, running_last, running_max_keyed, seconds, stream_order
from ..display_filters import stream_filter
from ..kept_rows import keep, part_frame
from ..names import subject_namer
from ..partition import CaptureFacts, PerPartition, Slicing, Split, merge_rows, run_whole, taken
from ..quantiles import Chunks, median_and_percentiles
from ..wording import counted

# --- stall detection thresholds -------------------------------------------------------------
#: A silence shorter than this is never a stall: below ~50 ms users do not notice, and Linux's
#: 40 ms delayed ACK alone produces silences up to that length (the nagle analyzer's subject).
MIN_STALL_S = 0.050
#: ... and it must be this many times the direction's median gap between new-data segments,
#: so a direction that normally talks every 200 ms (a slow, steady publisher, heartbeats) is not
#: "stalled" each time it pauses as usual.
GAP_FACTOR = 10.0
#: ... and this many path round trips: a silence of a couple of RTTs is one request/response
#: exchange on a long path, not a stall.
RTT_FACTOR = 4.0
#: Two copies of one segment (same seq and length) closer than this are the capture seeing the
#: packet twice (several interfaces), not a retransmission: TCP cannot detect a loss that fast
#: (Linux's minimum RTO is 200 ms; fast retransmit waits for three duplicate ACKs).
DUPLICATE_S = 0.001
#: A state (window full, blocked, at prefetch, confirms outstanding) is the cause of a stall only
#: when it held for at least this share of the stall: a stall is blamed on what kept the
#: direction silent for most of it, not on a coincidence at one end.
CAUSE_SHARE = 0.5

#: Causes, in the order they are checked (the first that holds wins).
CAUSES = (
    "capture-gap",  # the capture lost bytes of this connection inside the interval: unknowable
    "receiver-window",  # peer advertised a zero window, or bytes in flight filled its window
    "retransmission",  # segments of this direction were retransmitted inside it: TCP loss recovery
    "broker-flow",  # connection.blocked / channel.flow active=false (also: publishers blocked)
    "consumer-prefetch",  # s2c: a consumer of the connection had unacked == prefetch
    "publisher-confirms",  # c2s: publishes awaiting a confirm were outstanding
    "idle",  # none of the above: the application had nothing to send (or did not send it)
)

# --- finding thresholds ---------------------------------------------------------------------
#: receiver-window (a client's window) and broker-flow-control (the broker's window towards a
#: client): a direction is a subject when its peer advertised a zero window (the peer's receive
#: buffer was full: it had stopped reading), or when the direction was window-limited (zero
#: window, or bytes in flight filling the peer's window) for at least this long. Shorter
#: window-full moments without a zero window are TCP pacing a bulk transfer to a reader that
#: keeps reading, not a reader that stopped (the stall threshold's floor, MIN_STALL_S).
WINDOW_MIN_S = MIN_STALL_S
#: Severity, from the worst subject: warning from this much window-limited time (a few
#: window-full moments that cost no noticeable time are only info) ...
RECEIVER_WINDOW_WARNING_S = 0.2
#: ... critical from this share of that connection's own duration (first to last packet).
RECEIVER_WINDOW_CRITICAL_SHARE = 0.25
#: RabbitMQ's page on credit-based flow control, named in broker-flow-control's advice.
FLOW_CONTROL_DOC = "https://www.rabbitmq.com/docs/flow-control"
#: publisher-blocked: any block is at least a warning (a resource alarm fired); a block this long
#: (or one still active when the capture ends) is critical: publishers waited for seconds.
PUBLISHER_BLOCKED_CRITICAL_S = 1.0
#: capture-gaps: at most this many gaps missing less than WARNING_SHARE of the affected streams'
#: bytes is info (a rare drop does not change conclusions); beyond, a warning; a capture
#: missing CRITICAL_SHARE of the bytes cannot support conclusions about those streams.
CAPTURE_GAPS_INFO_MAX = 2
CAPTURE_GAPS_WARNING_SHARE = 0.001
CAPTURE_GAPS_CRITICAL_SHARE = 0.10

#: Plots: connections/directions drawn in the window plot, rows in the timeline, and the number
#: of time bins a long series is aggregated into (so millions of packets draw in seconds).
PLOT_MAX_DIRECTIONS = 12
PLOT_MAX_TIMELINE_ROWS = 40
PLOT_BINS = 2000
#: the window plot's finer bins over a connection's life, each slice of time adding its points
#: to them (`_plot_bins`), from which a series of more than PLOT_BINS points is binned over its
#: own time range: a direction busy for a moment of a long connection keeps its detail
PLOT_FINE_BINS = 16 * PLOT_BINS

DIRS = np.array(["c2s", "s2c"])
FIN_SYN_RST = 0x07
SYN = 0x02
ACK = 0x10

STALL_COLUMNS = ["stream", "direction", "start_ts", "end_ts", "duration_s", "cause", "first_packet", "last_packet",
                 "threshold_s", "detail"]
TCP_COLUMNS = ["stream", "direction", "data_packets", "data_bytes", "retransmissions", "zero_window_ads",
               "window_full_segments", "window_limited_s", "bytes_in_flight_max", "peer_window_min_bytes", "peer_window_max_bytes",
               "rtt_samples", "rtt_min_s", "rtt_p50_s", "rtt_p90_s", "path_rtt_s", "median_gap_s", "stall_count",
               "stall_total_s"]
CAUSE_COLORS = {"capture-gap": "#7f7f7f", "receiver-window": "#d62728", "retransmission": "#ff7f0e",
                "broker-flow": "#9467bd", "consumer-prefetch": "#1f77b4", "publisher-confirms": "#17becf",
                "idle": "#bcbd22"}


# --- interval helpers -------------------------------------------------------------------------


def _lex_count(ak: np.ndarray, av: np.ndarray, qk: np.ndarray, qv: np.ndarray, side: str) -> np.ndarray:
    """For each query (qk, qv), the number of rows of (ak, av), sorted by (ak, av), that come before
    it: ak < qk, or ak == qk and av <= qv (side "right") / av < qv ("left"). A searchsorted on the
    pair, done as one stable lexsort of rows and queries together (exact for float values)."""
    na = len(ak)
    is_q = np.r_[np.zeros(na, bool), np.ones(len(qk), bool)]
    # side right: a row equal to a query sorts before it (counted); left: after it.
    order = np.lexsort((is_q if side == "right" else ~is_q, np.r_[av, qv], np.r_[ak, qk]))
    q = is_q[order]
    out = np.empty(len(qk), np.int64)
    out[order[q] - na] = np.cumsum(~q)[q]
    return out


def _cumsum_by_segment(x: np.ndarray, first: np.ndarray) -> np.ndarray:
    """np.cumsum restarted at each row where `first` holds, bit-identical to a cumsum per segment
    (float sums depend on their order, so no global cumsum minus an offset). Short segments are
    summed position by position across all of them at once; long ones (few) one by one."""
    out = x.astype(np.float64)
    starts = np.flatnonzero(first)
    n = np.diff(np.r_[starts, len(x)])
    long = n > 32
    short_starts, short_n = starts[~long], n[~long]
    for i in range(1, int(short_n.max(initial=1))):
        rows = short_starts[short_n > i] + i
        out[rows] += out[rows - 1]
    for s0, k in zip(starts[long].tolist(), n[long].tolist()):
        out[s0:s0 + k] = np.cumsum(x[s0:s0 + k])
    return out


@dataclass
class _Cover:
    """The time a kind of intervals covered per key (a `_Seen` slot), from one slice of a
    partition's time to the next: the unions' time before the key's last union (added one after
    the other, as `_cumsum_by_segment` adds them), and that last union (NaN: none yet), which a
    later interval may still extend. Bounded by the keys."""

    before: np.ndarray
    start: np.ndarray
    end: np.ndarray

    @classmethod
    def nothing(cls, n: int) -> "_Cover":
        return cls(np.zeros(n), np.full(n, np.nan), np.full(n, np.nan))


@dataclass
class _Unions:
    """Merged intervals, sorted by (key, start), with the time their key's unions covered before
    each (`_unions`)."""

    key: np.ndarray
    start: np.ndarray
    end: np.ndarray
    before: np.ndarray

    def covered(self, qk: np.ndarray, x: np.ndarray, seed: np.ndarray) -> np.ndarray:
        """The covered time of each query's key in (-inf, x]; `seed`: a query's key's time
        before any union here."""
        uk, s, e = self.key, self.start, self.end
        j = _lex_count(uk, s, qk, x, "right") - 1  # the last interval of the key starting at or before x
        jj = np.maximum(j, 0)
        ok = (j >= 0) & (uk[jj] == qk) if len(uk) else np.zeros(len(qk), bool)
        if not len(uk):
            return np.asarray(seed, float) + np.zeros(len(qk))
        return np.where(ok, self.before[jj] + np.clip(x - s[jj], 0.0, e[jj] - s[jj]), seed)


def _unions(key: np.ndarray, start: np.ndarray, end: np.ndarray, cover: _Cover | None = None) -> _Unions:
    """Merge overlapping intervals per key (end inf: an interval whose end a later slice tells,
    at or after every time here), with the time each one's key covered before it: a cumsum
    restarting at every key, from what `cover` carried (the key's last union is one of the
    intervals, its time before the first). `cover` (None: nothing before) is left with each
    key's last union."""
    key, start, end = np.asarray(key, np.int64), np.asarray(start, float), np.asarray(end, float)
    if cover is not None:
        carried = np.flatnonzero(~np.isnan(cover.start))
        key, start, end = np.r_[carried, key], np.r_[cover.start[carried], start], np.r_[cover.end[carried], end]
    keep = end > start
    key, start, end = key[keep], start[keep], end[keep]
    o = np.lexsort((start, key))
    key, start, end = key[o], start[o], end[o]
    first = np.r_[True, key[1:] != key[:-1]] if len(key) else np.zeros(0, bool)
    # An interval starts a new union when it begins after every earlier interval of its key ended.
    prev_end = pd.Series(end).groupby(key).cummax().groupby(key).shift().to_numpy()
    new = first | (start > prev_end)
    gs = np.flatnonzero(new)
    uk, us = key[gs], start[gs]
    ue = np.maximum.reduceat(end, gs) if len(gs) else end[gs]
    ufirst = np.r_[True, uk[1:] != uk[:-1]] if len(uk) else np.zeros(0, bool)
    # Time covered before each union of its key: a cumsum restarting at every key, from the
    # key's time before (the seed, a row of its own ahead of the key's unions).
    heads = np.flatnonzero(ufirst)
    seed = cover.before[uk[heads]] if cover is not None else np.zeros(len(heads))
    x = np.insert(ue - us, heads, seed)
    at = heads + np.arange(len(heads))  # the seeds' rows in x
    xfirst = np.zeros(len(x), bool)
    xfirst[at] = True
    cum = _cumsum_by_segment(x, xfirst)
    rows = np.arange(len(uk)) + np.cumsum(ufirst)  # each union's row in x
    before = cum[rows - 1]
    if cover is not None:
        last = np.r_[uk[1:] != uk[:-1], True] if len(uk) else np.zeros(0, bool)
        k = uk[last]
        # (an end not told yet: the union goes on; keep the ends known, or none)
        known = np.maximum.reduceat(np.where(np.isinf(end), -np.inf, end), gs)[last] if len(gs) else ue[last]
        cover.before[k], cover.start[k], cover.end[k] = before[last], us[last], np.maximum(known, us[last])
    return _Unions(uk, us, ue, before)


def _overlap_s(stalls: pd.DataFrame, iv: pd.DataFrame) -> np.ndarray:
    """Seconds of each stall [start, end] covered by the intervals of the same (stream, d)."""
    out = np.zeros(len(stalls))
    if stalls.empty or iv.empty:
        return out
    u = _unions(iv["stream"].to_numpy(np.int64) * 2 + iv["d"].to_numpy(np.int64), iv["start"].to_numpy(float),
                iv["end"].to_numpy(float))
    if not len(u.key):
        return out
    qk = stalls["stream"].to_numpy(np.int64) * 2 + stalls["d"].to_numpy(np.int64)
    # Both ends of every stall in one search (one lexsort), then end minus start.
    c = u.covered(np.r_[qk, qk], np.r_[stalls["end"].to_numpy(float), stalls["start"].to_numpy(float)], 0.0)
    return c[:len(qk)] - c[len(qk):]


def _count_in(stalls: pd.DataFrame, ev: pd.DataFrame, closed_end: bool = True) -> np.ndarray:
    """Events (stream, d, t) inside each stall: start < t <= end (or < end)."""
    if stalls.empty or ev.empty:
        return np.zeros(len(stalls), dtype=np.int64)
    ek = ev["stream"].to_numpy(np.int64) * 2 + ev["d"].to_numpy(np.int64)
    et = ev["t"].to_numpy(float)
    o = np.lexsort((et, ek))
    ek, et = ek[o], et[o]
    qk = stalls["stream"].to_numpy(np.int64) * 2 + stalls["d"].to_numpy(np.int64)
    hi = _lex_count(ek, et, qk, stalls["end"].to_numpy(float), "right" if closed_end else "left")
    lo = _lex_count(ek, et, qk, stalls["start"].to_numpy(float), "right")
    return hi - lo


def _direction_key(rows: pd.DataFrame) -> np.ndarray:
    """A connection direction's key, stream·2 + d (d: 1 for s2c), of rows with stream and
    direction columns: one int64 to group, count and look up by (the peer's: key ^ 1)."""
    return rows["stream"].to_numpy(np.int64) * 2 + (rows["direction"] == "s2c").to_numpy(dtype=np.int64)


def _sum_per_key(key: np.ndarray, values, keys: np.ndarray) -> np.ndarray:
    """The sum of `values` per `key`, at `keys` (0 for a key without rows). Each key's values
    are added in row order, one after the other (np.bincount): the sum of a connection
    direction is the same whichever other rows are beside it, in a partition or in the whole
    capture (pandas' grouped sum picks its algorithm by the whole column, so it is not).
    Keys are non-negative."""
    key = np.asarray(key, np.int64)
    if not len(keys):
        return np.zeros(0)
    n = int(max(key.max(initial=-1), np.max(keys))) + 1
    # (float even without rows: np.bincount of no rows is int64, weights or not)
    return np.bincount(key, weights=np.asarray(values, float), minlength=n)[keys].astype(float)


def _empty_iv(cols: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=float if c in ("start", "end") else np.int64) for c in cols})


def _steps_to_intervals(df: pd.DataFrame, group: list[str], state: str, stream_end: pd.Series) -> pd.DataFrame:
    """A step function (rows sorted by t within `group`; `state` holds from a row's t until the
    next row's) as intervals where the state is true; the last step lasts to the stream's end."""
    nxt = df.groupby(group, sort=False)["t"].shift(-1)
    nxt = nxt.fillna(df["stream"].map(stream_end))
    on = df[state].to_numpy(dtype=bool)
    return pd.DataFrame({"stream": df["stream"].to_numpy()[on], "start": df["t"].to_numpy()[on],
                         "end": nxt.to_numpy()[on]})


# --- per-packet TCP state -------------------------------------------------------------------


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
    pk = {"stream": so["stream"], "packet": so["packet"], "ts": so["ts"], "t": seconds(so["ts"] - t0_ns),
          "d": so["s2c"].astype(np.int8), "payload": so["payload_bytes"], "seq": so["seq"], "ack": so["ack"],
          "flags": so["flags"], "window": so["window"], "retrans": so["retransmission"]}
    # File order is not always time order (several interfaces): sort by time within a stream.
    # Stream order keeps the file's (packet) order inside a stream, which already is the
    # (stream, time, packet) order when each stream's packets are in time order: then no sort.
    stream, t, packet = pk["stream"], pk["t"], pk["packet"]
    same = stream[1:] == stream[:-1]
    if not np.all(~same | ((t[1:] >= t[:-1]) & (packet[1:] > packet[:-1]))):
        o = np.lexsort((packet, t, stream))
        pk = {k: v[o] for k, v in pk.items()}
        stream = pk["stream"]
    c = cap.connections
    # Without both SYNs the window field may be unscaled: only zero windows are trustworthy then.
    scaled = np.zeros(int(max(stream.max(initial=-1), c["stream"].max() if len(c) else -1)) + 1, bool)
    scaled[c["stream"].to_numpy(np.int64)] = c["handshake_seen"].fillna(False).to_numpy(bool)
    scaled = scaled[stream]
    d, payload, flags, window, ack = pk["d"], pk["payload"], pk["flags"], pk["window"], pk["ack"]
    data = payload > 0
    end_seq = pk["seq"] + payload
    ack_flag = (flags & ACK) != 0
    ctl = (flags & FIN_SYN_RST) != 0
    no_syn = (flags & SYN) == 0
    pk.update(scaled=scaled, data=data, new_data=data & ~pk["retrans"], end_seq=end_seq,
              zero_window=(window == 0) & ~ctl)  # Wireshark's tcp.analysis.zero_window
    # Rows where each stream begins, and each row's next packet time in its stream (the last
    # row's own time: the stream's end).
    first = np.r_[True, ~same] if len(stream) else np.zeros(0, bool)
    last = np.r_[~same, True] if len(stream) else np.zeros(0, bool)
    pk.update(first=first, last=last, next_t=np.where(last, t, np.r_[t[1:], 0.0]))
    # each row's slot of sender direction 0 in `seen` (+ D: direction D's), found per stream run
    starts = np.flatnonzero(first)  # each stream's run of rows
    run_slot = _slots(seen, stream[starts], 0)
    slot0 = np.repeat(run_slot, np.diff(np.r_[starts, len(stream)]))
    # Running maxima keep the stream in the high bits (running_max_keyed): a value is
    # present when the maximum is at least the row's own key, and differences of two keyed
    # values of a row are plain differences; no decoding over all rows.
    hi = so["hi"]  # the in-stream time sort above never moves rows across streams
    keyed_end, keyed_ack = end_seq + hi, ack + hi
    stream_start = running_last(first)  # row where each row's stream begins
    pk.update(hi=hi, keyed_end=keyed_end, keyed_ack=keyed_ack)
    wfull = np.zeros(len(stream), bool)
    full = data & ~ctl & scaled
    pk["run_stream"] = stream[starts]
    for D in (0, 1):
        mine = d == D
        # (running maxima continued from the slices before: the larger of the two)
        sent = np.maximum(running_max_keyed(keyed_end, mine & data), seen.sent[slot0 + D])  # < hi: nothing sent yet
        peer_ack = np.maximum(running_max_keyed(keyed_ack, ~mine & ack_flag), seen.peer_ack[slot0 + D])  # < hi: no ACK yet
        # The peer's latest window; SYN windows are never scaled: skip them. Kept as integers
        # with a validity mask (lw = -1 reads the last row, masked): the float columns with NaN
        # for "unknown" are built by _window_state only for the rows the table and plot read.
        # Before the stream's first such row here: the window the slices before saw last.
        lw = running_last(~mine & no_syn)
        here = lw >= stream_start
        win = np.where(here, window[lw], seen.win[slot0 + D])
        win_ok = here | seen.win_ok[slot0 + D]
        acked = peer_ack >= hi
        pk[f"state{D}"] = (sent, peer_ack, win, win_ok)
        # The sender may not send: the peer's window is zero, or what is unacknowledged (both
        # ends known) fills it; with a window > 0, max(in flight, 0) ≥ window is in flight ≥ window.
        pk[f"limited{D}"] = win_ok & ((win == 0) | (scaled & (sent >= hi) & acked & (sent - peer_ack >= win)))
        # Wireshark's tcp.analysis.window_full: the segment reaches the right edge of the window
        # the peer last advertised (its ACK + window; on a row of D these are the peer's latest).
        # Keyed values on both sides: end + stream key == keyed ACK + window.
        wfull |= full & mine & acked & win_ok & (keyed_end == peer_ack + win)
        # For the tcp table, per stream (a reduceat over its run of rows, NaN when nothing is
        # known): D's largest in flight on its data segments, and the smallest and largest
        # window the peer offered it, seen on D's rows.
        inflight = np.where(mine & data & (sent >= hi) & acked, np.maximum(sent - peer_ack, 0), np.nan)
        peer_win = np.where(mine & win_ok, win, np.nan)
        if len(starts):
            slot = run_slot + D
            seen.inflight_max[slot] = np.fmax(seen.inflight_max[slot], np.fmax.reduceat(inflight, starts))
            seen.peer_win_min[slot] = np.fmin(seen.peer_win_min[slot], np.fmin.reduceat(peer_win, starts))
            seen.peer_win_max[slot] = np.fmax(seen.peer_win_max[slot], np.fmax.reduceat(peer_win, starts))
            # the state at each stream's last row, where the next slice goes on from
            ends = np.flatnonzero(last)
            seen.sent[slot], seen.peer_ack[slot] = sent[ends], peer_ack[ends]
            seen.win[slot], seen.win_ok[slot] = win[ends], win_ok[ends]
    pk["wfull"] = wfull  # each row's own direction
    _count(pk, seen, slot0)
    return pk


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


# --- cause states as intervals --------------------------------------------------------------


#: The only methods the cause states read (flow control; the publishes: a block's, and each
#: connection's count). Of basic.deliver only the streams that carry one are needed (_frames
#: returns them), not the rows. The confirms come from their derivation (`_awaited`).
FRAME_METHODS = ["connection.blocked", "connection.unblocked", "channel.flow", "basic.publish"]


def _frames(cap: Capture, t0: pd.Timestamp, methods=FRAME_METHODS) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray]:
    """Frames of `methods` (fr: packet, stream, d, t, channel, method) and, row for row, the
    fields the cause states read (f); and the streams with a basic.deliver (sorted). Only those
    rows and columns are taken: the frames table is wide and long."""
    f = cap.frames
    # Selected on the categorical's codes (small ints), then every column taken at those rows.
    method = f["method"].array
    cats = pd.Index(method.categories)
    if "basic.deliver" in cats:
        stream_col = f["stream"].to_numpy()
        deliver_streams = np.flatnonzero(np.bincount(stream_col[method.codes == cats.get_loc("basic.deliver")]))
    else:
        deliver_streams = np.zeros(0, np.int64)
    # (one gather from a per-category table; code -1, missing, reads the appended False)
    keep = np.flatnonzero(np.r_[cats.isin(methods), False][method.codes])
    fr = pd.DataFrame({  # rows taken first, then converted: only the kept rows are
        "packet": f["packet"].to_numpy()[keep].astype(np.int64),
        "stream": f["stream"].to_numpy()[keep].astype(np.int64),
        "d": (f["direction"].array.take(keep) == "s2c").astype(np.int8),
        "t": (f["ts"].take(keep) - t0).dt.total_seconds().to_numpy(),
        "channel": f["channel"].to_numpy()[keep].astype(np.int64),
        "method": method.take(keep),  # categorical: comparisons stay cheap
    })
    return (fr, pd.DataFrame({c: f[c].array.take(keep) for c in ("reason", "active")}),
            deliver_streams)


def _blocked(cap: Capture, fr: pd.DataFrame, f: pd.DataFrame, stream_end: pd.Series,
             before: pd.DataFrame | None = None) -> pd.DataFrame:
    """connection.blocked → connection.unblocked intervals per stream (broker → client), with the
    reason and the packets; a block never lifted lasts to the connection's last packet (inf in a
    slice of time before the last: its end is not known yet). `before`: the connection.blocked
    rows of the blocks a slice before left open (`_open_blocks`), ahead of these frames."""
    m = fr["method"].isin(["connection.blocked", "connection.unblocked"]) & (fr["d"] == 1)
    ev = fr[m].assign(reason=f["reason"].array[m.to_numpy()].astype(object))  # only those rows converted
    if before is not None and len(before):
        ev = pd.concat([before, ev], ignore_index=True)
    ev = ev.sort_values(["stream", "t"], kind="mergesort")
    ev["blocked"] = ev["method"] == "connection.blocked"
    # Only state changes matter (a repeated connection.blocked does not restart the block).
    ev = ev[ev["blocked"] != ev.groupby("stream")["blocked"].shift().fillna(False).astype(bool)]
    start = ev[ev["blocked"]]
    nxt = ev.groupby("stream")[["t", "packet"]].shift(-1)
    out = pd.DataFrame({
        "stream": start["stream"].to_numpy(),
        "start": start["t"].to_numpy(),
        "end": nxt.loc[start.index, "t"].fillna(start["stream"].map(stream_end)).to_numpy(),
        "blocked_packet": start["packet"].to_numpy(),
        "unblocked_packet": nxt.loc[start.index, "packet"].to_numpy(),
        "reason": start["reason"].to_numpy(),
    })
    out["lifted"] = out["unblocked_packet"].notna()
    return out


def _flow_events(fr: pd.DataFrame, f: pd.DataFrame, before: pd.DataFrame | None = None) -> pd.DataFrame:
    """The channel.flow frames (with ``stop``: active=false), sorted by (stream, d, channel, t),
    after `before` (each channel's last one of the slices before, when it stopped the flow)."""
    m = (fr["method"] == "channel.flow").to_numpy()
    ev = fr[m].assign(stop=~f["active"].to_numpy()[m].astype(bool))
    if before is not None and len(before):
        ev = pd.concat([before, ev], ignore_index=True)
    return ev.sort_values(["stream", "d", "channel", "t"], kind="mergesort")


def _channel_flow(ev: pd.DataFrame, stream_end: pd.Series) -> pd.DataFrame:
    """channel.flow active=false → active=true (`_flow_events`): the receiving side must stop
    sending content, so the stopped direction is the opposite of the frame's sender."""
    if not len(ev):
        return _empty_iv(["stream", "d", "start", "end"])
    iv = _steps_to_intervals(ev, ["stream", "d", "channel"], "stop", stream_end)
    iv["d"] = 1 - ev.loc[ev["stop"], "d"].to_numpy()
    return iv


def _confirm_outstanding(cap: Capture, t0: pd.Timestamp, stream_end: pd.Series, last: bool = True,
                         carry: _Carry | None = None) -> pd.DataFrame:
    """Intervals (stream, start, end) where a publish on a channel in confirm mode awaited its
    basic.ack/nack: each publish from its time to its confirm's, or to its connection's end
    (`stream_end`) when none came (`_awaited`).

    In a slice of a partition's time, a publish still awaited past the slice lasts to inf, and
    the next slice gives it again from its own time (it is replayed there: the union of the
    intervals is the same, `_unions`). A publish whose channel opened again before its confirm
    came is awaited to its connection's end, but no later slice replays it: `carry` keeps the
    earliest of them per connection (`_Carry.confirms`), given again in every later slice."""
    pubs = _awaited(cap, t0, last)
    before = carry.confirms if carry is not None and carry.confirms is not None else _NO_STREAMS
    if carry is not None and not last:
        carry.confirms = _earliest(before, pubs[pubs["ended"].to_numpy(bool)])
    confirmed = pubs["confirmed"].to_numpy(float)
    return pd.DataFrame({
        "stream": np.r_[before.index.to_numpy(np.int64), pubs["stream"].to_numpy(np.int64)],
        "start": np.r_[before.to_numpy(float), pubs["t"].to_numpy(float)],
        "end": np.r_[before.index.map(stream_end).to_numpy(float),
                     np.where(np.isnan(confirmed), pubs["stream"].map(stream_end).to_numpy(float), confirmed)]})


def _awaited(cap: Capture, t0: pd.Timestamp, last: bool) -> pd.DataFrame:
    """The publishes on a channel in confirm mode that the slice `cap` holds (its own, and those
    still awaited before it: `amqpcap.derive.replay.told`; a whole partition: all), from the
    `confirms` derivation: stream, t, confirmed (its confirm's time; NaN: none) and ended (told
    without a confirm: no later slice awaits it, its channel was opened again or this is the
    partition's `last` slice). Seconds from `t0`. The derivation numbers a channel's publishes
    from 1 after the confirm.select of each opening of the channel and settles each by a later
    confirm of that opening only (RabbitMQ's publisher confirms: a channel opened again, AMQP
    0-9-1 §4.2.4, is a new sequence): the one matching rule of every analyzer."""
    view = for_derivations(cap)
    c = confirms(view)
    if not len(c):
        return pd.DataFrame({"stream": np.zeros(0, np.int64), "t": np.zeros(0), "confirmed": np.zeros(0),
                             "ended": np.zeros(0, bool)})
    c = c[told(view, c["order"].to_numpy(np.int64), True)]  # (a replayed publish not awaited was told)
    confirmed = (pd.to_datetime(c["confirm_ts"], utc=True) - t0).dt.total_seconds().to_numpy(float)
    final = told(view, c["order"].to_numpy(np.int64), last)
    return pd.DataFrame({"stream": c["stream"].to_numpy(np.int64),
                         "t": (c["ts"] - t0).dt.total_seconds().to_numpy(float), "confirmed": confirmed,
                         "ended": final & np.isnan(confirmed)})


def _earliest(before: pd.Series, ended: pd.DataFrame) -> pd.Series:
    """Per connection (index: stream), the earliest time of `before` and of the publishes
    `ended` (stream, t)."""
    earliest = ended["t"].groupby(ended["stream"].to_numpy(np.int64)).min()
    if not len(ended) or not len(before):
        return earliest if len(ended) else before
    return pd.concat([before, earliest]).groupby(level=0).min()


#: no connection's publish left without a confirm (`_Carry.confirms`)
_NO_STREAMS = pd.Series(np.zeros(0), index=pd.Index(np.zeros(0, np.int64)))


def _prefetch_limited(cap: Capture, t0: pd.Timestamp, last: bool, maxima: pd.DataFrame) -> pd.DataFrame:
    """Intervals (stream, start, end) where a consumer was at its prefetch limit: the steps of its
    credit series (amqpcap.derive.consumers) with ``at_limit`` (unacked ≥ prefetch, channel
    (global) limit included), each holding until ``until_ts``. No rows without consumers. In a
    slice of a partition's time, the rows it tells (`amqpcap.derive.replay.told_state`), and
    those whose next row a later slice tells, to inf. An estimated prefetch is the most its
    consumer held over its whole life (`maxima`: the context round's), not the most so far."""
    view = for_derivations(cap)
    if seeds_of(view) is None:
        st = credit.consumer_state(view)  # (looked up on the module: tests stand in a series of their own)
        waiting = st.iloc[:0]
    else:
        st = told_state(view, last)
        waiting = told_state(view, True).iloc[len(st):] if not last else st.iloc[:0]
    out = []
    for rows, until in ((_final_prefetch(st, maxima), None), (_final_prefetch(waiting, maxima), np.inf)):
        at_limit = rows["at_limit"].to_numpy(bool)
        start = (rows["ts"] - t0).dt.total_seconds().to_numpy()
        end = (rows["until_ts"] - t0).dt.total_seconds().to_numpy() if until is None else np.full(len(rows), until)
        out.append(pd.DataFrame({"stream": rows["stream"].to_numpy(np.int64)[at_limit], "start": start[at_limit],
                                 "end": end[at_limit]}))
    return pd.concat(out, ignore_index=True) if len(out[1]) else out[0]


def _final_prefetch(rows: pd.DataFrame, maxima: pd.DataFrame) -> pd.DataFrame:
    """Consumer state rows whose estimated prefetch is the most deliveries their consumer held
    over its whole life (`maxima`, `StallsContext`), with their deficit and at_limit
    (`consumers.with_final_prefetch`): a slice of a partition's time judges them on the most so
    far. The rows themselves when they have it already (a whole partition's)."""
    if not len(maxima):
        return rows
    est = np.flatnonzero(rows["prefetch_estimated"].to_numpy(bool))
    if not len(est):
        return rows
    at = credit.code_of(maxima, rows.iloc[est])
    prefetch = rows["prefetch"].to_numpy(np.int64)
    most = prefetch.copy()
    most[est[at >= 0]] = maxima["max_unacked"].to_numpy(np.int64)[at[at >= 0]]
    if np.array_equal(most, prefetch):
        return rows
    return credit.with_final_prefetch(rows, most)


# --- the analyzer: a context round, a step per partition of whole connections, a merge --------


#: connection.blocked / unblocked: what the context round reads of each partition
BLOCK_METHODS = ["connection.blocked", "connection.unblocked"]
#: the window findings cite at most this many zero-window packets of the peer, and window-full
#: segments of the held direction (the first ones, in stream order)
ZERO_WINDOW_PACKETS = 10
WINDOW_FULL_PACKETS = 5


def _origin(facts: CaptureFacts) -> pd.Timestamp:
    """Time zero of the analyzer's seconds: the capture's first AMQP packet, one for every
    partition, so that their float seconds are those of the whole capture."""
    return pd.Timestamp(facts.packets_t0_ns, unit="ns", tz="UTC")


def _stream_ends(cap: Capture, t0_ns: int, streams: np.ndarray) -> pd.Series:
    """Seconds of each stream's last packet in time (index: stream): the last row of the stream
    in `_packets` (seconds grow with the nanoseconds they are made from)."""
    s = cap.packets["stream"].to_numpy(np.int64)
    mine = np.isin(s, streams)
    last = pd.Series(ns(cap.packets["ts"])[mine]).groupby(s[mine]).max()
    return pd.Series(seconds(last.to_numpy(np.int64) - t0_ns), index=last.index)


@dataclass(frozen=True)
class StallsContext:
    """What a partition's stalls step needs to know beyond its own slice of time (the context
    round: `stalls_context`, `stalls_join`)."""

    #: connection.blocked intervals (start, end: seconds from `_origin`): a partition's own, in
    #: its context; every partition's, once joined. A resource alarm blocks the publishers, and
    #: starves the consumers of every other connection.
    blocks: pd.DataFrame
    #: the partition's consumers whose prefetch is estimated (neither basic.qos nor basic.consume
    #: in the capture: started before it) with the most deliveries each held unacknowledged over
    #: its whole life (CONSUMER, max_unacked), their prefetch (`consumers.with_final_prefetch`):
    #: a slice of the partition's time knows only the most so far
    maxima: pd.DataFrame


#: the columns of the blocks in a context; the maxima of no consumer
_BLOCK_COLUMNS = ["start", "end"]
_NO_MAXIMA = pd.DataFrame({"stream": pd.Series(dtype=np.int64), "channel": pd.Series(dtype=np.int64),
                           "epoch": pd.Series(dtype=np.int64), "consumer_tag": pd.Series(dtype=object),
                           "max_unacked": pd.Series(dtype=np.int64)})


@dataclass(frozen=True)
class _ContextCarry:
    """What the context step over one slice of a partition's time leaves to the next
    (`stalls_context_slice`). Bounded by the connections and their consumers."""

    #: the connection.blocked rows of the blocks not lifted yet (`_blocked`'s ``before``), and
    #: the seconds of the latest packet so far of their connections (a block never lifted ends
    #: at its connection's last packet)
    open_blocks: pd.DataFrame | None = None
    last_t: pd.Series = field(default_factory=lambda: pd.Series(dtype=float))
    #: the consumers with an estimated prefetch so far and the most each held unacknowledged
    maxima: pd.DataFrame = field(default_factory=lambda: _NO_MAXIMA)


def stalls_context(cap: Capture, facts: CaptureFacts) -> StallsContext:
    """What every partition needs of this one: its connections' connection.blocked intervals,
    and what its own step needs of its whole time: the lifetime maxima of its consumers with an
    estimated prefetch (`StallsContext`). The partition is the one slice of its time
    (`stalls_context_slice`)."""
    return stalls_context_join([stalls_context_slice(cap, facts, None, True)[1]])


def stalls_context_slice(part: Capture, facts: CaptureFacts, carry: _ContextCarry | None,
                         last: bool) -> tuple[_ContextCarry, dict]:
    """The context step over a slice of a partition's time (`amqpcap.partition.Slicing`; a
    whole partition is its own one slice): the blocks it tells (lifted here, or every one at the
    `last` slice) with their stream and connection.blocked packet (their place in the whole's
    order), and at the last slice the consumers' maxima."""
    carry = carry or _ContextCarry()
    blocks, open_blocks, last_t = _blocks_told(part, facts, carry, last)
    maxima = _estimated_maxima(part, carry.maxima)
    return _ContextCarry(open_blocks, last_t, maxima), {"blocks": blocks, "maxima": maxima if last else None}


def stalls_context_join(pieces: list[dict]) -> StallsContext:
    """The partition's context from its slices' pieces (`stalls_context_slice`), in their order:
    the blocks in the whole's order (by stream, start, then frame: as `_blocked` gives them)."""
    told = [p["blocks"] for p in pieces if len(p["blocks"])]
    if not told:
        return StallsContext(_empty_iv(_BLOCK_COLUMNS), pieces[-1]["maxima"])
    b = pd.concat(told, ignore_index=True)
    by = np.lexsort((b["blocked_packet"].to_numpy(np.int64), b["start"].to_numpy(float), b["stream"].to_numpy(np.int64)))
    return StallsContext(b[_BLOCK_COLUMNS].iloc[by].reset_index(drop=True), pieces[-1]["maxima"])


def _blocks_told(part: Capture, facts: CaptureFacts, carry: _ContextCarry,
                 last: bool) -> tuple[pd.DataFrame, pd.DataFrame | None, pd.Series]:
    """The blocks the slice `part` tells (stream, blocked_packet, start, end), the
    connection.blocked rows of those still holding at its end and their connections' latest
    packet time so far (`_ContextCarry`)."""
    fr, f, _ = _frames(part, _origin(facts), BLOCK_METHODS)
    before = carry.open_blocks
    if fr.empty and before is None:
        return _empty_iv(["stream", "blocked_packet", *_BLOCK_COLUMNS]), None, carry.last_t
    streams = np.union1d(fr["stream"].to_numpy(np.int64),
                         before["stream"].to_numpy(np.int64) if before is not None else np.zeros(0, np.int64))
    # (seconds grow with the nanoseconds they are made from: the latest of the slices' latest)
    last_t = pd.concat([carry.last_t, _stream_ends(part, facts.packets_t0_ns, streams)]).groupby(level=0).max()
    # a block not lifted at the slice's end lasts to a time a later slice tells (inf), at the
    # partition's last slice to its connection's last packet
    blocked = _blocked(part, fr, f, last_t if last else pd.Series(np.inf, index=last_t.index), before)
    told = np.isfinite(blocked["end"].to_numpy(float)) | last
    still = blocked[~told]
    open_blocks = None if not len(still) else pd.DataFrame({
        "packet": still["blocked_packet"].to_numpy(np.int64), "stream": still["stream"].to_numpy(np.int64),
        "d": np.int8(1), "t": still["start"].to_numpy(float), "channel": 0, "method": "connection.blocked",
        "reason": still["reason"].to_numpy(object)})
    return (blocked.loc[told, ["stream", "blocked_packet", *_BLOCK_COLUMNS]].reset_index(drop=True), open_blocks,
            last_t[last_t.index.isin(still["stream"].to_numpy())])


def _estimated_maxima(part: Capture, before: pd.DataFrame) -> pd.DataFrame:
    """The consumers of the slice `part` (as the derivations see it) whose prefetch is estimated,
    with the most deliveries each held unacknowledged so far (`consumer_state_with_codes`' own
    maxima: with the slices' before), and those the slices `before` found (CONSUMER and
    max_unacked, sorted by consumer). The consumer state is computed only when there is one."""
    view = for_derivations(part)
    c = credit.consumer_rows(view)
    est = c[~c["qos_seen"].to_numpy(bool) & ~c["consume_seen"].to_numpy(bool)]
    if not len(est):
        return before
    at = credit.code_of(credit.acked_deliveries(view).keys, est)
    most = credit.consumer_state_with_codes(view).max_unacked
    known = at >= 0  # (not: a consumer the slices before saw, with nothing of it in this one)
    known[known] = most[at[known]] > np.iinfo(np.int64).min
    now = est.loc[known, credit.CONSUMER].assign(max_unacked=most[at[known]])
    both = pd.concat([t for t in (before, as_object(now, "consumer_tag")) if len(t)] or [_NO_MAXIMA], ignore_index=True)
    out = both.groupby(credit.CONSUMER, as_index=False, sort=True)["max_unacked"].max()
    return out.astype(_NO_MAXIMA.dtypes.to_dict())


def stalls_join(contexts: list[StallsContext]) -> PerPartition:
    """Each partition's context joined: every partition's blocks, as one table, and its own
    consumers' maxima."""
    told = [x.blocks for x in contexts if len(x.blocks)]
    blocks = pd.concat(told, ignore_index=True) if told else _empty_iv(_BLOCK_COLUMNS)
    return PerPartition([StallsContext(blocks, x.maxima) for x in contexts])


#: the context step over slices of a partition's time (`amqpcap.partition.Split.context_slicing`)
CONTEXT_SLICING = Slicing(stalls_context_slice, stalls_context_join, replays=True)


def _rtt_stats(rtt: pd.DataFrame, n_streams: int) -> tuple[pd.DataFrame, np.ndarray]:
    """Per direction (index stream·2 + d) the RTT samples' count, minimum, median and 90th
    percentile; and per stream (index) the path RTT: each direction's minimum segment→ACK time is
    the part of the round trip on one side of the capture point; together they make one RTT."""
    # (rows grouped by (d, stream): key d·2³² + stream increases, grouping is cheap)
    rg = rtt["rtt_s"].groupby(rtt["d"].to_numpy(np.int64) << 32 | rtt["stream"].to_numpy(np.int64))
    rtt_stats = pd.DataFrame({"rtt_samples": rg.size(), "rtt_min_s": rg.min(), "rtt_p50_s": rg.median(),
                              "rtt_p90_s": rg.quantile(0.9)})
    rk = rtt_stats.index.to_numpy(np.int64)
    rtt_stats.index = (rk & 0xFFFFFFFF) * 2 + (rk >> 32)  # → stream·2 + d
    # Both directions' minimum: NaN unless both are known.
    path_rtt = np.full(n_streams, np.nan)
    mins = rtt_stats["rtt_min_s"]
    mi = mins.index.to_numpy(np.int64)
    both = np.intersect1d(mi[mi % 2 == 0] // 2, mi[mi % 2 == 1] // 2)
    path_rtt[both] = mins.loc[both * 2].to_numpy() + mins.loc[both * 2 + 1].to_numpy()
    return rtt_stats, path_rtt


def _gap_rows(pk: dict[str, np.ndarray], seen: _Seen) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Silences: gaps between consecutive new-data segments of a direction, each direction's
    first segment here following its latest of the slices before (`seen`, then left with each
    direction's latest). Returns every gap (key d·2³² + stream, gap; NaN: a direction's first
    segment), the values of its median, and the candidate stalls: the gaps of at least
    MIN_STALL_S (the threshold's floor), the table's columns so far, with ``carried`` (the
    silence began in a slice before), in (stream, time) row order."""
    stream, d, t = pk["stream"], pk["d"], pk["t"]
    # Rows of one direction, in (stream, time) order, then the other's: each connection
    # direction is one contiguous run.
    nd = np.r_[np.flatnonzero(pk["new_data"] & (d == 0)), np.flatnonzero(pk["new_data"] & (d == 1))]
    nd_stream, nd_d, nd_t = stream[nd], d[nd], t[nd]
    cont = np.r_[False, (nd_stream[1:] == nd_stream[:-1]) & (nd_d[1:] == nd_d[:-1])] if len(nd) else np.zeros(0, bool)
    prev = np.where(cont, np.r_[0, nd[:-1]], 0) if len(nd) else nd
    start_t, start_packet, start_ts = t[prev], pk["packet"][prev].astype(np.int64), pk["ts"][prev]
    # a direction's first segment here: the silence since its latest segment before
    slot = _slots(seen, nd_stream, nd_d)
    carried = ~cont & ~np.isnan(seen.data_t[slot])
    start_t = np.where(carried, seen.data_t[slot], start_t)
    start_packet = np.where(carried, seen.data_packet[slot], start_packet)
    start_ts = np.where(carried, seen.data_ts[slot], start_ts)
    gap = np.where(cont | carried, nd_t - start_t, np.nan)
    tail = np.r_[~cont[1:], True] if len(nd) else np.zeros(0, bool)
    seen.data_t[slot[tail]], seen.data_packet[slot[tail]], seen.data_ts[slot[tail]] = \
        nd_t[tail], pk["packet"][nd[tail]], pk["ts"][nd[tail]]
    gaps = pd.DataFrame({"key": nd_d.astype(np.int64) << 32 | nd_stream, "gap": gap})
    # Candidates in (stream, time) row order, as the table's tie-breaking expects.
    hit = np.flatnonzero(gap >= MIN_STALL_S)
    hit = hit[np.argsort(nd[hit], kind="stable")]
    last_row = nd[hit]
    cand = pd.DataFrame({
        "stream": stream[last_row], "d": d[last_row],
        "start": start_t[hit], "end": t[last_row],
        "first_packet": start_packet[hit], "last_packet": pk["packet"][last_row],
        "start_ts": start_ts[hit], "end_ts": pk["ts"][last_row], "carried": carried[hit],
    })
    return gaps, cand


def _median_gap(gaps: pd.DataFrame) -> pd.Series:
    """The median gap per connection direction (index stream·2 + d; NaN: one segment only)."""
    # grouped on a key increasing along the rows (d·2³² + stream)
    med = gaps["gap"].groupby(gaps["key"].to_numpy(np.int64)).median()
    mk = med.index.to_numpy(np.int64)
    return pd.Series(med.to_numpy(), index=(mk & 0xFFFFFFFF) * 2 + (mk >> 32))


def _stalls_of(cand: pd.DataFrame, median_gap: pd.Series, path_rtt: np.ndarray) -> pd.DataFrame:
    """The candidate silences long enough to be stalls, with their threshold: MIN_STALL_S, and
    GAP_FACTOR times the direction's median gap, and RTT_FACTOR path round trips."""
    n_streams = len(path_rtt)
    mg = np.zeros(2 * n_streams)
    mg[median_gap.index.to_numpy()] = np.nan_to_num(median_gap.to_numpy(), nan=0.0)
    rtt_term = RTT_FACTOR * np.nan_to_num(np.repeat(path_rtt, 2), nan=0.0)
    key = cand["stream"].to_numpy(np.int64) * 2 + cand["d"].to_numpy(np.int64)
    threshold = np.maximum(np.maximum(MIN_STALL_S, GAP_FACTOR * mg), rtt_term)[key]
    st = cand.assign(threshold_s=threshold)
    st = st[(st["end"] - st["start"]).to_numpy() >= threshold].reset_index(drop=True)
    st["start_ts"] = pd.to_datetime(st["start_ts"].to_numpy(np.int64), unit="ns", utc=True).array
    st["end_ts"] = pd.to_datetime(st["end_ts"].to_numpy(np.int64), unit="ns", utc=True).array
    st["duration_s"] = st["end"] - st["start"]
    return st


def _limited(pk: dict[str, np.ndarray], seen: _Seen, last: bool) -> pd.DataFrame:
    """Intervals (stream, d, start, end) where direction d could not send: each window-limited
    row to the stream's next packet (disjoint per (stream, d)); window_limited_s of `seen` added
    up. A stream's last row here ends at its next packet, in a later slice: carried
    (`_Seen.limited_from`) and put first in the slice that has that packet, but at the
    partition's `last` slice, where it ends at its own time (the stream's end)."""
    stream, t = pk["stream"], pk["t"]
    heads = np.flatnonzero(pk["first"])
    head_slot = _slots(seen, stream[heads], 0)
    lim = []
    for D in (0, 1):
        on = pk[f"limited{D}"]
        carried = seen.limited_from[head_slot + D]
        ends = ~np.isnan(carried)  # the intervals of the slices before that end here
        if ends.any():
            lim.append(pd.DataFrame({"stream": stream[heads][ends], "d": D, "start": carried[ends],
                                     "end": t[heads][ends], "carried": True}))
        seen.limited_from[head_slot + D] = np.nan
        if last:
            gone = np.flatnonzero(~np.isnan(seen.limited_from[D::2]))  # streams without packets since
            if len(gone):
                at = seen.limited_from[gone * 2 + D]
                lim.append(pd.DataFrame({"stream": seen.stream[gone].astype(stream.dtype), "d": D, "start": at,
                                         "end": at, "carried": True}))
                seen.limited_from[gone * 2 + D] = np.nan
        else:
            tail = np.flatnonzero(pk["last"])
            seen.limited_from[head_slot + D] = np.where(on[tail], t[tail], np.nan)
            on = on & ~pk["last"]
        lim.append(pd.DataFrame({"stream": stream[on], "d": D, "start": t[on], "end": pk["next_t"][on],
                                 "carried": False}))
    lim = pd.concat(lim, ignore_index=True)
    _limited_s(lim, seen)
    return lim


def _limited_s(lim: pd.DataFrame, seen: _Seen) -> None:
    """Add the lengths of the limited intervals `lim` to `seen.window_limited_s`, after the sum
    so far and one after the other, in `lim`'s order (np.bincount: the whole partition's sum,
    bit for bit, however its time is sliced)."""
    n = len(seen.window_limited_s)
    seen.limited_any |= bool(len(lim))
    slot = _slots(seen, lim["stream"].to_numpy(np.int64), lim["d"].to_numpy(np.int64))
    seen.window_limited_s = np.bincount(np.r_[np.arange(n), slot],
                                        weights=np.r_[seen.window_limited_s, (lim["end"] - lim["start"]).to_numpy(float)],
                                        minlength=n)


def _causes(st: pd.DataFrame) -> pd.DataFrame:
    """Each stall's cause and detail from its evidence columns: the first of CAUSES that holds."""
    share = lambda col: st[col] >= CAUSE_SHARE * st["duration_s"]  # noqa: E731
    # A full broker window during connection.blocked / channel.flow on c2s is the block's doing
    # (the broker stops reading a blocked publisher): blamed on broker-flow, not the window.
    window_cause = (share("window_s") | (st["zero_window_n"] > 0)) & ~((st["d"] == 0) & share("flow_s"))
    conds = [st["gaps_n"] > 0, window_cause, st["retrans_n"] > 0,
             share("flow_s"), share("prefetch_s") & (st["d"] == 1), share("confirm_s") & (st["d"] == 0)]
    st["cause"] = np.select(conds, list(CAUSES[:-1]), default=CAUSES[-1]) if len(st) else []
    r3 = lambda col: st[col].round(3).astype(str)  # noqa: E731
    details = [
        st["gaps_n"].astype(str) + " capture gap(s) on this connection inside it",
        "peer advertised a zero window " + st["zero_window_n"].astype(str) + " time(s); window full or zero for "
        + r3("window_s") + " s",
        st["retrans_n"].astype(str) + " retransmitted segment(s) inside it",
        "flow control (connection.blocked / channel.flow) active for " + r3("flow_s") + " s",
        "a consumer at its prefetch limit for " + r3("prefetch_s") + " s",
        "publishes awaiting confirms for " + r3("confirm_s") + " s",
        pd.Series("nothing held it back: the application sent nothing", index=st.index),
    ]
    st["detail"] = np.select(conds + [np.ones(len(st), bool)], details, default="") if len(st) else []
    return st


def _stalls_table(st: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        "stream": st["stream"].astype(np.int32),
        "direction": pd.Categorical(DIRS[st["d"].to_numpy(int)], categories=list(DIRS)),
        "start_ts": st["start_ts"],
        "end_ts": st["end_ts"],
        "duration_s": st["duration_s"],
        "cause": pd.Categorical(st["cause"], categories=list(CAUSES)),
        "first_packet": st["first_packet"].astype(np.int32),
        "last_packet": st["last_packet"].astype(np.int32),
        "threshold_s": st["threshold_s"],
        "detail": st["detail"].astype(object),
    }, columns=STALL_COLUMNS).sort_values(["start_ts", "stream"], kind="mergesort").reset_index(drop=True)


#: the cause states whose time inside a stall is its evidence (each a `_Cover` carried from one
#: slice of time to the next), and the events counted inside it (closed at its end, or not)
COVERED = ("window_s", "flow_s", "prefetch_s", "confirm_s")
COUNTED = (("gaps_n", True), ("zero_window_n", True), ("retrans_n", False))


@dataclass
class _Carry:
    """What one slice of a partition's time leaves to the next (docs/time-split.md §2.9): the
    TCP state (`_Seen`), and per connection direction (slots) the cause states' covered time so
    far (`covers`, and ``block``: connection.blocked, for the window findings), each at the start
    of the direction's open silence (`at_start`), the events since that start (`since`, with the
    latest one's time and how many at it); per connection its latest packet's time, whether it
    carried a basic.deliver, its publishes, the earliest publish its channel opened again left
    unconfirmed; the open blocks, the channel.flow stops, the segments of the last moments
    (retransmissions' first copies). The publishes awaiting a confirm are not here: the
    derivations replay them (`amqpcap.derive.replay`). Bounded by the connections and channels,
    but for the protocol window `_Seen.unacked` and the segments of 2·DUPLICATE_S."""

    seen: _Seen
    covers: dict
    at_start: dict
    since: dict
    since_t: dict
    since_at_t: dict
    last_t: np.ndarray
    delivers: np.ndarray
    publishes: np.ndarray
    zw_in_block: np.ndarray
    open_blocks: pd.DataFrame | None
    flows: pd.DataFrame | None
    #: per connection, the earliest publish left without a confirm when its channel opened
    #: again (`_confirm_outstanding`: awaited to the connection's end)
    confirms: pd.Series | None
    recent: pd.DataFrame | None
    #: per slot: window-limited time outside connection.blocked so far, and the blocked time
    #: covered at the start of the limited interval `_Seen.limited_from`
    outside: np.ndarray
    block_at_limited: np.ndarray
    #: per slot: the zero windows its peer advertised and the window-full segments it sent, so
    #: far (the findings cite the first ones)
    cited: dict
    #: the window plot's points so far (`_plot_bins`): at most PLOT_FINE_BINS per direction
    plot: "_PlotPoints | None" = None

    @classmethod
    def nothing(cls, part: Capture) -> "_Carry":
        seen = _seen_before(part, None)
        n, m = 2 * len(seen.stream), len(seen.stream)
        return cls(seen, {k: _Cover.nothing(n) for k in (*COVERED, "block")}, {k: np.zeros(n) for k in COVERED},
                   {k: np.zeros(n, np.int64) for k, _ in COUNTED}, {k: np.full(n, np.nan) for k, _ in COUNTED},
                   {k: np.zeros(n, np.int64) for k, _ in COUNTED}, np.full(m, np.nan), np.zeros(m, bool),
                   np.zeros(m, np.int64), np.zeros(m, np.int64), None, None, None, None, np.zeros(n), np.zeros(n),
                   {"zero-window": np.zeros(n, np.int64), "window-full": np.zeros(n, np.int64)})


def stalls_slice(part: Capture, facts: CaptureFacts, carry: _Carry | None, last: bool, context: StallsContext):
    """A slice of a partition's time (`amqpcap.partition.Slicing`; the partition itself: its one
    slice): (what the next slice needs, the slice's piece for `stalls_pieces_joined`).
    `context`: every partition's connection.blocked intervals, the lifetime maxima of the
    partition's consumers with an estimated prefetch (the context round: `StallsContext`)."""
    t0 = _origin(facts)
    blocks = context.blocks
    c = carry if carry is not None else _Carry.nothing(part)
    seen = c.seen
    pk = _packets(part, facts.packets_t0_ns, seen)
    stream, d, t = pk["stream"], pk["d"], pk["t"]
    tails = np.flatnonzero(pk["last"])
    c.last_t[np.searchsorted(seen.stream, stream[tails])] = t[tails]
    # a state still holding at the slice's end lasts to a time a later slice tells (inf); at the
    # partition's last slice, to its connection's last packet
    stream_end = pd.Series(c.last_t if last else np.inf, index=seen.stream)
    rtt = _rtt(pk, seen)
    data_t = seen.data_t.copy()
    gaps, cand = _gap_rows(pk, seen)
    moved = ~(np.isnan(seen.data_t) | (seen.data_t == data_t))  # slots whose silence starts here
    lim = _limited(pk, seen, last)
    cand_slot = _slots(seen, cand["stream"].to_numpy(np.int64), cand["d"].to_numpy(np.int64))
    carried = cand["carried"].to_numpy(bool)

    # Events counted inside each silence: those of the slices before (after its start), and here.
    anomalies = part.anomalies[part.anomalies["kind"] == "capture-gap"]
    gap_ev = pd.DataFrame({"stream": anomalies["stream"].to_numpy(np.int64),
                           "t": (anomalies["ts"] - t0).dt.total_seconds().to_numpy()})
    # A gap in either direction hides what the window and ACKs did: both directions uncertain.
    gap_ev = pd.concat([gap_ev.assign(d=0), gap_ev.assign(d=1)], ignore_index=True)
    zw = pk["zero_window"]
    zw_ev = pd.DataFrame({"stream": stream[zw], "d": 1 - d[zw], "t": t[zw]})
    retrans = _real_retransmissions(pk, c.recent)
    c.recent = _recent_originals(pk, c.recent)
    events = {"gaps_n": gap_ev, "zero_window_n": zw_ev, "retrans_n": retrans}
    for col, closed in COUNTED:
        cand[col] = _count_in(cand, events[col], closed) + _counted_before(c, col, closed, cand_slot, carried,
                                                                             cand["end"].to_numpy(float))
        _count_since(c, col, events[col], moved)

    # The cause states as intervals (an end not known yet: inf), their time inside each silence.
    fr, f, deliver_streams = _frames(part, t0)
    c.delivers[np.searchsorted(seen.stream, deliver_streams)] = True
    blocked = _blocked(part, fr, f, stream_end, c.open_blocks)
    flows = _flow_events(fr, f, c.flows)
    latest = flows.groupby(["stream", "d", "channel"]).tail(1)  # a channel's stop holds to its next channel.flow
    c.flows = None if last else latest[latest["stop"].to_numpy(bool)]
    conf = _confirm_outstanding(part, t0, stream_end, last, c)
    pending = np.flatnonzero(~np.isnan(seen.limited_from))
    states = {
        "window_s": pd.concat([lim[["stream", "d", "start", "end"]],
                               pd.DataFrame({"stream": seen.stream[pending // 2], "d": pending % 2,
                                             "start": seen.limited_from[pending], "end": np.inf})], ignore_index=True),
        "flow_s": pd.concat([blocked.assign(d=0)[["stream", "d", "start", "end"]], _channel_flow(flows, stream_end)],
                            ignore_index=True),
        "prefetch_s": _prefetch_limited(part, t0, last, context.maxima).assign(d=1),
        "confirm_s": conf.assign(d=0),
    }
    open_slots = np.flatnonzero(moved)
    for col in COVERED:
        iv = states[col]
        seed = c.covers[col].before.copy()
        u = _unions(_slots(seen, iv["stream"].to_numpy(np.int64), iv["d"].to_numpy(np.int64)),
                    iv["start"].to_numpy(float), iv["end"].to_numpy(float), c.covers[col])
        at_end = u.covered(cand_slot, cand["end"].to_numpy(float), seed[cand_slot])
        at_start = np.where(carried, c.at_start[col][cand_slot],
                            u.covered(cand_slot, cand["start"].to_numpy(float), seed[cand_slot]))
        cand[col] = at_end - at_start
        c.at_start[col][open_slots] = u.covered(open_slots, seen.data_t[open_slots], seed[open_slots])
    # A silent consumer direction during a block of any partition: blamed on the alarm too, when
    # its connection carries deliveries (the join knows: `_Carry.delivers`).
    cand["xb_s"] = _overlap_s(cand.assign(stream=0), blocks[["start", "end"]].assign(stream=0, d=1)) \
        if len(blocks) else 0.0

    # The blocks (each told once, when lifted or at the last slice) and what the window findings
    # read of them.
    blocked = _block_publishes(blocked, fr, t0, part)
    blocked = _blocks_so_far(c, blocked, pk, lim, seen, last)
    pubs = fr.loc[(fr["method"] == "basic.publish").to_numpy() & (fr["d"] == 0).to_numpy(), "stream"]
    c.publishes += np.bincount(np.searchsorted(seen.stream, pubs.to_numpy(np.int64)), minlength=len(seen.stream))
    piece = {"rtt": rtt, "gaps": gaps, "cand": cand, "blocked": blocked,
             "deliveries_while_blocked": _deliveries_in(blocks, part, t0),
             "capture_gaps": anomalies[["stream", "bytes", "packet"]].reset_index(drop=True),
             "cited": _cited(pk, c, seen)}
    c.plot = _plot_bins(pk, part.connections, facts.packets_t0_ns, c.plot)
    if last:
        piece["carry"], piece["connections"], piece["has_blocks"] = c, part.connections, bool(len(blocks))
        piece["t0_ns"] = facts.packets_t0_ns
    return c, piece


def _counted_before(c: _Carry, col: str, closed: bool, slot: np.ndarray, carried: np.ndarray,
                    end: np.ndarray) -> np.ndarray:
    """The events the slices before counted inside the silences that began there (`carried`):
    all after its start, but those at its end when it is open there."""
    n = np.where(carried, c.since[col][slot], 0)
    if not closed:
        n = n - np.where(carried & (c.since_t[col][slot] == end), c.since_at_t[col][slot], 0)
    return n


def _count_since(c: _Carry, col: str, ev: pd.DataFrame, moved: np.ndarray) -> None:
    """Count the events `ev` after the start of each direction's open silence (restarted where
    a silence starts in this slice, `moved`), with the latest one's time and how many at it."""
    seen = c.seen
    since, since_t, at_t = c.since[col], c.since_t[col], c.since_at_t[col]
    since[moved], since_t[moved], at_t[moved] = 0, np.nan, 0
    if not len(ev):
        return
    slot = _slots(seen, ev["stream"].to_numpy(np.int64), ev["d"].to_numpy(np.int64))
    et = ev["t"].to_numpy(float)
    after = et > seen.data_t[slot]  # (NaN: no silence open yet, nothing counted)
    slot, et = slot[after], et[after]
    if not len(slot):
        return
    since += np.bincount(slot, minlength=len(since))
    latest = np.full(len(since), -np.inf)
    np.maximum.at(latest, slot, et)
    here = latest > -np.inf
    at_latest = np.bincount(slot[et == latest[slot]], minlength=len(since))
    same = here & (since_t == latest)
    at_t[:] = np.where(same, at_t + at_latest, np.where(here, at_latest, at_t))
    since_t[:] = np.where(here, latest, since_t)


def _recent_originals(pk: dict[str, np.ndarray], before: pd.DataFrame | None) -> pd.DataFrame:
    """The first copies of data segments a later slice's copy may repeat within DUPLICATE_S
    (`_real_retransmissions`): those of the last 2·DUPLICATE_S (a margin over float seconds)."""
    cols = ["stream", "d", "seq", "payload", "t"]
    since = pk["t"].max() - 2 * DUPLICATE_S if len(pk["t"]) else -np.inf
    om = np.flatnonzero(pk["data"] & ~pk["retrans"] & (pk["t"] >= since))
    now = pd.DataFrame({c_: pk[c_][om] for c_ in cols})
    if before is None or not len(before):
        return now
    before = before[before["t"].to_numpy(float) >= since]
    return pd.concat([before, now], ignore_index=True) if len(before) else now


def _blocks_so_far(c: _Carry, blocked: pd.DataFrame, pk: dict, lim: pd.DataFrame, seen: _Seen,
                   last: bool) -> pd.DataFrame:
    """The blocks this slice tells (lifted here, or all at the `last` slice), with what the
    slices before counted of them; those still holding carried (`_Carry.open_blocks`, their
    connection.blocked row). Adds to the carry what the window findings read of the blocks:
    zero windows the broker advertised inside them, and the window-limited time outside them."""
    before = c.open_blocks
    if before is not None and len(before):
        prior = before.set_index(["stream", "packet"])[["publishes", "publish_body_bytes"]]
        at = pd.MultiIndex.from_arrays([blocked["stream"].to_numpy(np.int64), blocked["blocked_packet"].to_numpy(np.int64)])
        add = prior.reindex(at).fillna(0).to_numpy(np.int64)
        blocked = blocked.assign(publishes=blocked["publishes"].to_numpy() + add[:, 0],
                                 publish_body_bytes=blocked["publish_body_bytes"].to_numpy() + add[:, 1])
    biv = blocked.assign(d=0)[["stream", "d", "start", "end"]].reset_index(drop=True)
    zw = pk["zero_window"]  # the peer's zero window holds the other direction: d flipped
    zw_ev = pd.DataFrame({"stream": pk["stream"][zw], "d": 1 - pk["d"][zw], "t": pk["t"][zw]})
    c.zw_in_block += np.bincount(np.searchsorted(seen.stream, biv["stream"].to_numpy(np.int64)),
                                 weights=_count_in(biv, zw_ev), minlength=len(seen.stream)).astype(np.int64)
    # window-limited time outside the blocks, each limited interval's added one after the other
    seed = c.covers["block"].before.copy()
    u = _unions(_slots(seen, biv["stream"].to_numpy(np.int64), 0), biv["start"].to_numpy(float),
                biv["end"].to_numpy(float), c.covers["block"])
    ls = _slots(seen, lim["stream"].to_numpy(np.int64), lim["d"].to_numpy(np.int64))
    at_start = np.where(lim["carried"].to_numpy(bool), c.block_at_limited[ls],
                        u.covered(ls, lim["start"].to_numpy(float), seed[ls]))
    dur = np.maximum((lim["end"] - lim["start"]).to_numpy(float)
                     - (u.covered(ls, lim["end"].to_numpy(float), seed[ls]) - at_start), 0.0)
    n = len(c.outside)
    c.outside = np.bincount(np.r_[np.arange(n), ls], weights=np.r_[c.outside, dur], minlength=n)
    pending = np.flatnonzero(~np.isnan(seen.limited_from))
    c.block_at_limited[pending] = u.covered(pending, seen.limited_from[pending], seed[pending])
    told = np.isfinite(blocked["end"].to_numpy(float)) | last
    c.open_blocks = None if last else pd.DataFrame({
        "packet": blocked["blocked_packet"].to_numpy()[~told], "stream": blocked["stream"].to_numpy()[~told],
        "d": np.int8(1), "t": blocked["start"].to_numpy()[~told], "channel": 0, "method": "connection.blocked",
        "reason": blocked["reason"].to_numpy()[~told], "publishes": blocked["publishes"].to_numpy()[~told],
        "publish_body_bytes": blocked["publish_body_bytes"].to_numpy()[~told]})
    return blocked[told].reset_index(drop=True)


def _cited(pk: dict, c: _Carry, seen: _Seen) -> pd.DataFrame:
    """The packets a window finding may cite (`_window_packets`): per direction the first
    ZERO_WINDOW_PACKETS zero windows its peer advertised and the first WINDOW_FULL_PACKETS
    window-full segments it sent, counted on from the slices before. Columns: stream, held,
    kind, rank, packet, and the row's time (``_t``: their order across slices)."""
    out = []
    for kind, rows, held, n in (("zero-window", pk["zero_window"], 1 - pk["d"], ZERO_WINDOW_PACKETS),
                                ("window-full", pk["wfull"], pk["d"], WINDOW_FULL_PACKETS)):
        r = np.flatnonzero(rows)
        key = pk["stream"][r].astype(np.int64) * 2 + held[r]
        slot = _slots(seen, key // 2, key % 2)
        rank = pd.Series(key).groupby(key).cumcount().to_numpy() + c.cited[kind][slot]  # (rows stay in pk order)
        c.cited[kind] += np.bincount(slot, minlength=len(c.cited[kind]))
        keep = rank < n
        out.append(pd.DataFrame({"stream": key[keep] // 2, "held": key[keep] % 2, "kind": kind, "rank": rank[keep],
                                 "packet": pk["packet"][r[keep]].astype(np.int64), "_t": pk["t"][r[keep]]}))
    return pd.concat(out, ignore_index=True)


def stalls_pieces_joined(pieces: list[dict]) -> dict[str, Any]:
    """The partition's partial from its slices' pieces (`stalls_slice`): the thresholds from
    every gap and RTT sample, the stalls among the candidate silences, the tables."""
    c = pieces[-1]["carry"]
    seen = c.seen

    def joined(name: str, order: list[str] | None = None) -> pd.DataFrame:
        parts = [q[name] for q in pieces]
        df = pd.concat([x for x in parts if len(x)] or parts[:1], ignore_index=True)
        if order and len(pieces) > 1:  # (a stable sort: each slice's rows are in order already)
            df = df.iloc[np.lexsort([df[k].to_numpy() for k in reversed(order)])].reset_index(drop=True)
        return df

    rtt = joined("rtt", ["d", "stream", "_t", "_packet"])
    rtt_stats, path_rtt = _rtt_stats(rtt, int(seen.stream.max(initial=-1)) + 1)
    median_gap = _median_gap(joined("gaps"))
    st = _stalls_of(joined("cand", ["stream", "end", "last_packet"]), median_gap, path_rtt)
    consumers = np.isin(st["stream"].to_numpy(np.int64), seen.stream[c.delivers])
    xb = (st["d"].to_numpy() == 1) & consumers & pieces[-1]["has_blocks"]
    st["flow_s"] = np.where(xb, np.maximum(st["flow_s"].to_numpy(), st["xb_s"].to_numpy(float)), st["flow_s"])
    stalls_tbl = _stalls_table(_causes(st))
    tcp = _tcp_table(seen, rtt_stats, path_rtt, median_gap, st)
    sides = _window_sides(pieces[-1]["connections"], c, tcp, stalls_tbl)
    cited = joined("cited", ["stream", "_t", "packet"])
    return {"stalls": stalls_tbl, "tcp": tcp,
            # (the samples stay where they were made: only their percentiles are merged)
            "rtt": keep(rtt[["stream", "d", "rtt_s"]], "stalls-rtt", "stream"),
            "sides": sides, "window_packets": _window_packets(cited, sides),
            "blocked": joined("blocked", ["stream", "start", "blocked_packet"]),
            "deliveries_while_blocked": sum(q["deliveries_while_blocked"] for q in pieces),
            # (by packet: the anomalies' own order is the order the reassembly found them in)
            "gaps": joined("capture_gaps").sort_values("packet", kind="stable", ignore_index=True),
            "window_series": _window_series(c.plot, _life_s(pieces[-1]["connections"], pieces[-1]["t0_ns"]),
                                            _window_directions(tcp, stalls_tbl).head(PLOT_MAX_DIRECTIONS))}


def stalls_partial(cap: Capture, facts: CaptureFacts, context: StallsContext) -> dict[str, Any]:
    """A partition's stalls with their causes, its tcp rows, RTT samples, window-held directions
    (with the packets a finding cites and the plot's series), blocks and capture gaps: the
    partition as its one slice of time. `context`: the context round's (`StallsContext`)."""
    return stalls_pieces_joined([stalls_slice(cap, facts, None, True, context)[1]])


def stalls_merge(partials: list[dict[str, Any]], records: None, facts: CaptureFacts, cap: Capture) -> AnalyzerResult:
    """Every partition's stalls and directions; the summary, findings and plots from them."""
    t0 = _origin(facts)
    stalls_tbl = merge_rows(taken(partials, "stalls"), ["start_ts", "stream", "end_ts", "last_packet"])
    tcp = merge_rows(taken(partials, "tcp"), ["stream", "direction"])
    rtt = taken(partials, "rtt")
    summary = _summary(stalls_tbl, tcp, [_rtt_values(rtt, D) for D in (0, 1)])
    sides = pd.concat([q["sides"] for q in partials], ignore_index=True).sort_values(
        ["window_limited_share", "window_limited_s", "stream", "d"], ascending=[False, False, True, True],
        kind="stable", ignore_index=True)
    wp = pd.concat([q["window_packets"] for q in partials], ignore_index=True)
    blocked = pd.concat([q["blocked"] for q in partials], ignore_index=True).sort_values(
        ["stream", "start", "blocked_packet"], kind="stable", ignore_index=True)
    findings = [x for x in (_receiver_window(cap, wp, sides, stalls_tbl),
                            _broker_flow_control(cap, wp, sides, stalls_tbl),
                            _publisher_blocked(blocked, sum(q["deliveries_while_blocked"] for q in partials), cap),
                            _capture_gaps(pd.concat([q["gaps"] for q in partials], ignore_index=True), cap, stalls_tbl))
                if x is not None]
    plots = []  # only plots with something to show: held-back windows, stalls other than idle
    if len(_window_directions(tcp, stalls_tbl)):
        series = {k: v for q in partials for k, v in q["window_series"].items()}
        plots.append(Plot("stalls-window", "Receiver windows that held senders back",
                          lambda path: _plot_window(path, cap, series, tcp, stalls_tbl, t0)))
    if (stalls_tbl["cause"] != "idle").any():
        plots.append(Plot("stalls-timeline", "Stalls by cause",
                          lambda path: _plot_timeline(path, cap, stalls_tbl, t0)))
    return AnalyzerResult("stalls", tables={"stalls": stalls_tbl, "tcp": tcp}, summary=summary, findings=findings,
                          plots=plots)


SPLIT = Split(partial=stalls_partial, merge=stalls_merge, context=stalls_context, join_context=stalls_join,
              slicing=Slicing(stalls_slice, join=stalls_pieces_joined, replays=True), context_slicing=CONTEXT_SLICING)


@analyzer("stalls", split=SPLIT)
def stalls(cap: Capture) -> AnalyzerResult:
    """Silent intervals per connection direction and their cause; RTT, retransmissions, windows."""
    return run_whole(SPLIT, cap)


def _tcp_table(seen: _Seen, rtt_stats, path_rtt, median_gap, st) -> pd.DataFrame:
    """Per (stream, direction) of the packets: the counts, window maxima/minima and
    window-limited time `seen` added up over them."""
    slots = np.flatnonzero(seen.rows)  # sorted: stream, d
    keys = seen.stream[slots // 2] * 2 + slots % 2

    def per_key(values):  # as nullable integers
        return pd.array(values[slots], dtype="Float64").astype("Int64")

    rs = rtt_stats.reindex(keys)
    sg = st.assign(g=st["stream"].to_numpy(np.int64) * 2 + st["d"].to_numpy(np.int64)).groupby("g")["duration_s"]
    out = pd.DataFrame({
        "stream": (keys // 2).astype(np.int32),
        "direction": pd.Categorical(DIRS[keys % 2], categories=list(DIRS)),
        "data_packets": seen.data_packets[slots],
        "data_bytes": seen.data_bytes[slots],
        "retransmissions": seen.retransmissions[slots],
        "zero_window_ads": seen.zero_window_ads[slots],
        "window_full_segments": seen.window_full_segments[slots],
        "window_limited_s": seen.window_limited_s[slots].astype(float if seen.limited_any else np.int64),
        "bytes_in_flight_max": per_key(seen.inflight_max),
        "peer_window_min_bytes": per_key(seen.peer_win_min),
        "peer_window_max_bytes": per_key(seen.peer_win_max),
        "rtt_samples": pd.array(rs["rtt_samples"].to_numpy(float), dtype="Float64").astype("Int64"),
        "rtt_min_s": rs["rtt_min_s"].to_numpy(float),
        "rtt_p50_s": rs["rtt_p50_s"].to_numpy(float),
        "rtt_p90_s": rs["rtt_p90_s"].to_numpy(float),
        "path_rtt_s": path_rtt[keys // 2] if len(keys) else np.zeros(0),
        "median_gap_s": median_gap.reindex(keys).to_numpy(float),
        "stall_count": sg.size().reindex(keys, fill_value=0).to_numpy(np.int64),
        "stall_total_s": _sum_per_key(st["stream"].to_numpy(np.int64) * 2 + st["d"].to_numpy(np.int64),
                                      st["duration_s"].to_numpy(float), keys),
    }, columns=TCP_COLUMNS)
    return out


def _rtt_values(parts: list, d: int) -> Chunks:
    """The segment→ACK samples of direction `d` of every partition's kept RTT rows, a part at a
    time."""
    def chunks():
        for p in parts:
            df = part_frame(p)
            yield df["rtt_s"].to_numpy(float)[df["d"].to_numpy() == d]
    return chunks


def _summary(stalls_tbl: pd.DataFrame, tcp: pd.DataFrame, rtt: list[Chunks]) -> dict:
    """summary.json's stalls; `rtt`: every segment→ACK sample of each direction (c2s, s2c), a
    part at a time (their median and 90th percentile are exact, from all of them)."""
    by = stalls_tbl.groupby("cause", observed=False)["duration_s"]
    rtt_dir = {}
    for D, name in enumerate(DIRS):
        n = sum(len(v) for v in rtt[D]())
        # numpy's median and percentile, as pandas' median and quantile(0.9) compute them
        # (the latter as np.percentile at 0.9 * 100.0), without the Series around them.
        p50, (p90,) = median_and_percentiles(rtt[D], n, [0.9 * 100.0]) if n else (None, [None])
        rtt_dir[str(name)] = {"samples": n, "p50_s": p50, "p90_s": p90}
    return {"stalls": {
        "count": int(len(stalls_tbl)),
        "total_s": float(stalls_tbl["duration_s"].sum()),
        "by_cause": {c: {"count": int(by.size().get(c, 0)), "total_s": float(by.sum().get(c, 0.0))} for c in CAUSES},
        # every cause is checked: kept (empty) for readers of earlier summaries
        "causes_skipped": {},
        "thresholds": {"min_stall_s": MIN_STALL_S, "gap_factor": GAP_FACTOR, "rtt_factor": RTT_FACTOR,
                       "cause_share": CAUSE_SHARE},
        "rtt": rtt_dir,
        "retransmissions": int(tcp["retransmissions"].sum()),
        "zero_window_ads": int(tcp["zero_window_ads"].sum()),
        "window_full_segments": int(tcp["window_full_segments"].sum()),
        "bytes_in_flight_max": int(tcp["bytes_in_flight_max"].max()) if tcp["bytes_in_flight_max"].notna().any() else None,
    }}


def _window_sides(connections: pd.DataFrame, c: _Carry, tcp: pd.DataFrame, stalls_tbl: pd.DataFrame) -> pd.DataFrame:
    """Per connection direction held back by its peer's TCP window: c2s rows are held by the
    broker's window, s2c rows by the client's. Columns: stream, d, window_limited_s (time with a
    zero or full peer window; for c2s without the time inside connection.blocked, the resource
    alarm's own finding), window_limited_share (of the connection's duration), zero_window_ads
    (advertised by the peer, outside connection.blocked for c2s), window_full_segments, stalls /
    stalled_s / longest_stall_s (its receiver-window stalls), peer_window_min_bytes,
    peer_window_max_bytes, connection_s, publishes (basic.publish frames it carried). Only the
    directions that are subjects (WINDOW_MIN_S) are kept. The times and counts are those the
    slices of time added up (`_Carry`)."""
    key = _direction_key(tcp)
    t = tcp.set_index(key)
    slot = _slots(c.seen, key // 2, key % 2)
    pos = slot // 2
    rw = stalls_tbl[stalls_tbl["cause"] == "receiver-window"]
    rg = rw["duration_s"].groupby(_direction_key(rw))
    conn = connections.set_index("stream")
    conn_s = (conn["last_ts"] - conn["first_ts"]).dt.total_seconds()
    out = pd.DataFrame({
        "stream": key // 2, "d": key % 2,
        "window_limited_s": c.outside[slot].astype(float),
        "zero_window_ads": (t["zero_window_ads"].reindex(key ^ 1, fill_value=0).to_numpy()
                            - np.where(key % 2 == 0, c.zw_in_block[pos], 0)),
        "window_full_segments": t["window_full_segments"].to_numpy(),
        "stalls": rg.size().reindex(key, fill_value=0).to_numpy(),
        "stalled_s": _sum_per_key(_direction_key(rw), rw["duration_s"].to_numpy(float), key),
        "longest_stall_s": rg.max().reindex(key, fill_value=0.0).to_numpy(),
        "peer_window_min_bytes": t["peer_window_min_bytes"].to_numpy(),
        "peer_window_max_bytes": t["peer_window_max_bytes"].to_numpy(),
        "connection_s": conn_s.reindex(key // 2).to_numpy(),
        "publishes": c.publishes[pos] * (key % 2 == 0),
    })
    cs = out["connection_s"].to_numpy(float)
    out["window_limited_share"] = np.where(cs > 0, out["window_limited_s"] / np.where(cs > 0, cs, 1.0), 0.0)
    keep = (out["zero_window_ads"] > 0) | (out["window_limited_s"] >= WINDOW_MIN_S) | (out["stalls"] > 0)
    return out[keep].sort_values(["window_limited_share", "window_limited_s", "stream"],
                                 ascending=[False, False, True]).reset_index(drop=True)


def _duration(x: float) -> str:
    """`1.21 s`, `3.0 ms`: a title's duration in a unit that shows it."""
    return f"{x:.2f} s" if x >= 0.1 else f"{x * 1e3:.1f} ms"


def _window_packets(cited: pd.DataFrame, sides: pd.DataFrame) -> pd.DataFrame:
    """For each direction of `sides` (stream, held: the direction its peer's window held back),
    the packets a window finding cites (`_cited`): the first ZERO_WINDOW_PACKETS zero windows its
    peer advertised and the first WINDOW_FULL_PACKETS window-full segments it sent, in row order
    (stream, time). Columns: stream, held, kind (`zero-window`, `window-full`), rank, packet."""
    wanted = sides["stream"].to_numpy(np.int64) * 2 + sides["d"].to_numpy(np.int64)
    mine = cited[np.isin(cited["stream"].to_numpy(np.int64) * 2 + cited["held"].to_numpy(np.int64), wanted)]
    out = [mine[mine["kind"] == kind].drop(columns="_t") for kind in ("zero-window", "window-full")]
    return pd.concat(out, ignore_index=True)


def _window_finding_parts(cap: Capture, wp: pd.DataFrame, g: pd.DataFrame, stalls_tbl: pd.DataFrame,
                          peer_filter: str):
    """What receiver-window and broker-flow-control share: (severity, subjects, evidence) for the
    directions ``g`` (rows of _window_sides, worst first). Severity from the worst: critical when
    a connection spent RECEIVER_WINDOW_CRITICAL_SHARE of its time window-limited, warning from
    RECEIVER_WINDOW_WARNING_S of it, else info; monotonic in both numbers."""
    share, limited = float(g["window_limited_share"].max()), float(g["window_limited_s"].max())
    severity = ("critical" if share >= RECEIVER_WINDOW_CRITICAL_SHARE
                else "warning" if limited >= RECEIVER_WINDOW_WARNING_S else "info")
    subject_of = subject_namer(cap)
    subjects = [subject_of(int(r.stream), direction=str(DIRS[r.d]),
                           window_limited_s=round(float(r.window_limited_s), 6),
                           window_limited_share=round(float(r.window_limited_share), 4),
                           zero_window_ads=int(r.zero_window_ads), window_full_segments=int(r.window_full_segments),
                           stalls=int(r.stalls), stalled_s=round(float(r.stalled_s), 6),
                           **({"publishes": int(r.publishes)} if r.d == 0 else {}))
                for r in g.itertuples()]
    streams = sorted(int(x) for x in g["stream"])
    w = g.iloc[0]
    wmin, wmax = g["peer_window_min_bytes"].dropna(), g["peer_window_max_bytes"].dropna()
    held = int(g["d"].iloc[0])
    # The way into Wireshark: the peer's zero windows, the held direction's window-full
    # segments (the first of each, in stream order), and the bounds of its longest window
    # stalls (a few of each).
    rw = stalls_tbl[(stalls_tbl["cause"] == "receiver-window") & stalls_tbl["stream"].isin(streams)
                    & (stalls_tbl["direction"] == DIRS[held])].nlargest(3, "duration_s")
    mine = wp[wp["stream"].isin(streams) & (wp["held"] == held)].sort_values(["stream", "rank"], kind="stable")

    def first(kind: str, n: int) -> list[int]:
        return mine.loc[mine["kind"] == kind, "packet"].head(n).tolist()

    packets = sorted(set(first("zero-window", ZERO_WINDOW_PACKETS) + first("window-full", WINDOW_FULL_PACKETS)
                         + rw["first_packet"].tolist() + rw["last_packet"].tolist()))
    evidence = {
        "connections": len(g),
        "window_limited_s": round(float(w["window_limited_s"]), 6),
        "window_limited_share": round(float(w["window_limited_share"]), 4),
        "stalled_s": round(float(w["stalled_s"]), 6),
        "longest_stall_s": round(float(g["longest_stall_s"].max()), 6),
        "stalls": int(g["stalls"].sum()),
        "zero_window_ads": int(g["zero_window_ads"].sum()),
        "window_full_segments": int(g["window_full_segments"].sum()),
        "peer_window_min_bytes": int(wmin.min()) if len(wmin) else None,
        "peer_window_max_bytes": int(wmax.max()) if len(wmax) else None,
        "streams": streams,
        "packets": [int(x) for x in packets],
        "filter": f"{stream_filter(streams)} && {peer_filter}",
    }
    return severity, subjects, evidence


def _port_match(cap: Capture, streams) -> str:
    """The broker port(s) of these connections as a filter comparison: `== 5672`, `in {5671, 5672}`."""
    ports = sorted({int(p) for p in cap.connections.loc[cap.connections["stream"].isin(list(streams)), "broker_port"]})
    return f"== {ports[0]}" if len(ports) == 1 else "in {" + ", ".join(map(str, ports)) + "}"


def _receiver_window(cap: Capture, wp: pd.DataFrame, sides: pd.DataFrame, stalls_tbl: pd.DataFrame) -> Finding | None:
    """Clients that stopped reading: the broker's traffic to them (s2c) waited on their zero or
    full receive window. One finding, every such connection a subject, worst first."""
    g = sides[sides["d"] == 1]
    if g.empty:
        return None
    port = _port_match(cap, g["stream"])
    severity, subjects, ev = _window_finding_parts(
        cap, wp, g, stalls_tbl, f"((tcp.analysis.zero_window && tcp.dstport {port}) || "
                                f"(tcp.analysis.window_full && tcp.srcport {port}))")
    w = subjects[0]
    title = (f"{who([x['connection'] for x in subjects])} stopped reading: the broker's data waited on "
             f"{'its' if len(subjects) == 1 else 'their'} zero or full TCP receive window"
             f"{'' if len(subjects) == 1 else ', the first'} {_duration(w['window_limited_s'])}, "
             f"{w['window_limited_share']:.0%} of the connection's time "
             f"({counted(w['zero_window_ads'], 'zero-window advertisement')})")
    advice = ("The client application, or its socket receive buffer, does not keep up: it left the socket unread "
              "while the broker had data for it. Do not do slow work on the connection's I/O thread (blocking "
              "callbacks, synchronous DB calls, long GC pauses); hand messages to a worker pool. Do not pin a small "
              "SO_RCVBUF (let kernel autotuning grow it; see peer_window_max_bytes). Lower the prefetch (basic.qos) "
              "so less data piles up unread.")
    return Finding("receiver-window", severity, title, ev, advice, impact=min(float(g["window_limited_share"].max()), 1.0),
                   subjects=subjects)


def _broker_flow_control(cap: Capture, wp: pd.DataFrame, sides: pd.DataFrame, stalls_tbl: pd.DataFrame) -> Finding | None:
    """The broker stopped reading clients: their traffic (c2s) waited on the broker's zero or full
    receive window, outside any connection.blocked (that is publisher-blocked's resource alarm).
    RabbitMQ does this to publishers under credit-based flow control. One finding, every such
    connection a subject, worst first."""
    g = sides[sides["d"] == 0]
    if g.empty:
        return None
    port = _port_match(cap, g["stream"])
    severity, subjects, ev = _window_finding_parts(
        cap, wp, g, stalls_tbl, f"((tcp.analysis.zero_window && tcp.srcport {port}) || "
                                f"(tcp.analysis.window_full && tcp.dstport {port}))")
    ev["publishes"] = int(g["publishes"].sum())
    w = subjects[0]
    whom = "publishers" if (g["publishes"] > 0).all() else "connections"
    title = (f"Broker flow control: the broker stopped reading {'its ' + whom[:-1] if len(subjects) == 1 else whom} "
             f"{who([x['connection'] for x in subjects])}; its TCP receive window towards "
             f"{'it' if len(subjects) == 1 else 'them'} was zero or full {_duration(w['window_limited_s'])}"
             f"{'' if len(subjects) == 1 else ' for the first'}, {w['window_limited_share']:.0%} of the connection's "
             f"time ({counted(w['zero_window_ads'], 'zero-window advertisement')})")
    advice = ("RabbitMQ stopped reading these connections' sockets, so its TCP receive buffer filled and it advertised a "
              "zero or full window: credit-based flow control (" + FLOW_CONTROL_DOC + "), which throttles "
              "publishers that publish faster than the queues (or the channel and connection processes in front "
              "of them) can take the messages; the management UI shows these connections in state 'flow' "
              "(rabbitmqctl list_connections name state). Time under connection.blocked (a resource alarm, see "
              "publisher-blocked) is not counted here. "
              "The publishers are not at fault; the broker is at capacity for this load: spread the publishes over "
              "more queues (one queue is one Erlang process, one core), keep the queues short (consumers that keep "
              "up), use publisher confirms to bound what each publisher has in flight, or publish at a lower rate. "
              "If the connections are not in 'flow', the broker is short of CPU.")
    return Finding("broker-flow-control", severity, title, ev, advice,
                   impact=min(float(g["window_limited_share"].max()), 1.0), subjects=subjects)


def _block_publishes(blocked: pd.DataFrame, fr: pd.DataFrame, t0: pd.Timestamp, cap: Capture) -> pd.DataFrame:
    """`blocked` with, per block (start < t <= end): publishes (`basic.publish` the client still
    wrote on the blocked connection: they wait in socket buffers) and publish_body_bytes (the body
    sizes their content headers announce)."""
    pubs = fr[(fr["method"] == "basic.publish") & (fr["d"] == 0)]
    iv = blocked.assign(d=0)[["stream", "d", "start", "end"]].reset_index(drop=True)
    f = cap.frames
    head = np.flatnonzero((f["type"] == "header").to_numpy(dtype=bool, na_value=False)
                          & (f["direction"] == "c2s").to_numpy(dtype=bool, na_value=False)
                          & np.isin(f["stream"].to_numpy(np.int64), iv["stream"].to_numpy(np.int64)))
    # body bytes per block: a running sum over the headers sorted by (stream, t), read at each
    # block's bounds (one search for all blocks, not a pass over the headers per block)
    h_stream, h_t = f["stream"].to_numpy(np.int64)[head], (f["ts"].take(head) - t0).dt.total_seconds().to_numpy()
    by = np.lexsort((h_t, h_stream))
    h_stream, h_t = h_stream[by], h_t[by]
    run = np.r_[0.0, np.cumsum(f["body_size"].to_numpy(float, na_value=0)[head][by])]
    qk = iv["stream"].to_numpy(np.int64)
    body = run[_lex_count(h_stream, h_t, qk, iv["end"].to_numpy(float), "right")] \
        - run[_lex_count(h_stream, h_t, qk, iv["start"].to_numpy(float), "right")]
    return blocked.assign(publishes=_count_in(iv, pubs[["stream", "d", "t"]]),
                          publish_body_bytes=np.rint(body).astype(np.int64))


def _deliveries_in(blocks: pd.DataFrame, cap: Capture, t0: pd.Timestamp) -> int:
    """The `basic.deliver` frames of `cap` inside the union of the blocks' spans (any
    partition's: one alarm blocks several connections at once, and consumers starve while it
    holds)."""
    if blocks.empty:
        return 0
    f = cap.frames
    dlv = np.flatnonzero((f["method"] == "basic.deliver").to_numpy(dtype=bool, na_value=False))
    dlv_t = np.sort((f["ts"].take(dlv) - t0).dt.total_seconds().to_numpy())
    spans = blocks[["start", "end"]].sort_values("start").to_numpy(float)
    new = np.r_[True, spans[1:, 0] > np.maximum.accumulate(spans[:-1, 1])]
    lo = spans[new, 0]
    hi = np.maximum.reduceat(spans[:, 1], np.flatnonzero(new))
    return int((np.searchsorted(dlv_t, hi, "right") - np.searchsorted(dlv_t, lo, "right")).sum())


def _publisher_blocked(blocked: pd.DataFrame, deliveries: int, cap: Capture) -> Finding | None:
    """publisher-blocked: one finding, every blocked connection a subject (longest block first),
    with the alarm's reason, how long, and what was published (`_block_publishes`) and delivered
    (`_deliveries_in`) meanwhile."""
    if blocked.empty:
        return None
    blocked = blocked.assign(dur=blocked["end"] - blocked["start"])
    dur = blocked["dur"]
    total, longest = float(dur.sum()), float(dur.max())
    open_end = bool((~blocked["lifted"]).any())
    severity = "critical" if longest >= PUBLISHER_BLOCKED_CRITICAL_S or open_end else "warning"
    streams = sorted(blocked["stream"].unique().tolist())
    reasons = sorted({str(r) for r in blocked["reason"] if isinstance(r, str)})
    per = blocked.groupby("stream").agg(blocked_s=("dur", "sum"), longest=("dur", "max"), blocks=("dur", "size"),
                                        publishes=("publishes", "sum"), body=("publish_body_bytes", "sum"),
                                        open_end=("lifted", lambda x: bool((~x).any())),
                                        reason=("reason", lambda x: ", ".join(sorted({str(v) for v in x
                                                                                      if isinstance(v, str)}))))
    per = per.sort_values(["longest", "publishes"], ascending=False, kind="stable").reset_index()
    subject_of = subject_namer(cap)
    subjects = [subject_of(r.stream, blocks=int(r.blocks), blocked_s=float(r.blocked_s),
                           longest_blocked_s=float(r.longest), reason=r.reason or None,
                           still_blocked_at_end=bool(r.open_end), publishes_while_blocked=int(r.publishes),
                           publish_bytes_while_blocked=int(r.body),
                           severity="critical" if r.longest >= PUBLISHER_BLOCKED_CRITICAL_S or r.open_end
                                    else "warning")
                for r in per.itertuples()]
    packets = blocked["blocked_packet"].tolist() + blocked["unblocked_packet"].dropna().astype(int).tolist()
    evidence = {
        "blocks": int(len(blocked)),
        "blocked_s": total,
        "longest_blocked_s": longest,
        "first_blocked_at_s": float(blocked["start"].min()),
        "reasons": reasons,
        "still_blocked_at_end": open_end,
        "publishes_while_blocked": int(blocked["publishes"].sum()),
        "publish_bytes_while_blocked": int(blocked["publish_body_bytes"].sum()),
        "deliveries_while_blocked": deliveries,
        "connections_with_this_finding": len(per),
        "streams": streams,
        "packets": sorted(int(x) for x in packets)[:20],
        "filter": f"{stream_filter(streams)} && amqp.method.class == 10 && "
                  "(amqp.method.method == 60 || amqp.method.method == 61)",
    }
    what = ", ".join(reasons) if reasons else "no reason given"
    w = subjects[0]
    whom = w["connection"] if len(per) == 1 else f"{len(per)} publishing connections (longest: {w['connection']})"
    title = (f"The broker blocked {whom} for {longest:.2f} s (resource alarm: {what})"
             + ("" if not evidence["publishes_while_blocked"] else
                f"; {evidence['publishes_while_blocked']:,} publishes "
                f"({evidence['publish_bytes_while_blocked']:,} body bytes) were written into the blocked "
                f"connection{'s' if len(per) > 1 else ''} meanwhile")
             + ("; no consumer got a delivery meanwhile" if evidence["deliveries_while_blocked"] == 0 else
                f"; consumers got {evidence['deliveries_while_blocked']:,} deliveries meanwhile"))
    advice = ("A broker resource alarm blocked every publishing connection ('low on memory': memory above "
              "vm_memory_high_watermark; 'low on disk': free disk below disk_free_limit). Find why the broker ran "
              "short: queues growing because consumers are slower than publishers (see the consumer findings), "
              "large messages or long queues held in memory (use lazy or quorum queues, set max-length), or "
              "too little RAM/disk for the load. Raise the limits only with the resources to back them. Make "
              "publishers handle connection.blocked (Java BlockedListener, pika "
              "add_on_connection_blocked_callback) instead of timing out: what they write while blocked waits "
              "in socket buffers and client memory, unread by the broker.")
    return Finding("publisher-blocked", severity, title, evidence, advice, impact=min(total / 10.0, 1.0),
                   subjects=subjects)


def _capture_gaps(gaps: pd.DataFrame, cap: Capture, stalls_tbl: pd.DataFrame) -> Finding | None:
    if gaps.empty:
        return None
    n, missing = int(len(gaps)), int(gaps["bytes"].sum())
    streams = sorted(int(s) for s in gaps["stream"].dropna().unique())
    c = cap.connections[cap.connections["stream"].isin(streams)]
    span = int((c["c2s_stream_bytes"] + c["s2c_stream_bytes"]).sum())
    share = missing / span if span else 1.0
    if share >= CAPTURE_GAPS_CRITICAL_SHARE:
        severity = "critical"
    elif n > CAPTURE_GAPS_INFO_MAX or share >= CAPTURE_GAPS_WARNING_SHARE:
        severity = "warning"
    else:
        severity = "info"
    per_stream = gaps.groupby("stream", observed=True)["bytes"].agg(["size", "sum"])
    evidence = {
        "gaps": n,
        "bytes_missing": missing,
        "missing_share": share,
        "stalls_uncertain": int((stalls_tbl["cause"] == "capture-gap").sum()),
        "gaps_by_stream": {int(s): int(r["size"]) for s, r in per_stream.iterrows()},
        "bytes_missing_by_stream": {int(s): int(r["sum"]) for s, r in per_stream.iterrows()},
        "streams": streams,
        "packets": sorted(gaps["packet"].dropna().astype(int))[:10],  # the first ten, whatever the rows' order
        "filter": f"{stream_filter(streams)} && (tcp.analysis.lost_segment || tcp.analysis.ack_lost_segment)",
    }
    title = (f"The capture lost {missing:,} bytes in {n} gaps ({share:.1%} of those connections' bytes): "
             "conclusions about those intervals are uncertain")
    advice = ("The capture, not the network, dropped packets (the peer acknowledged bytes the capture never "
              "saw), so what happened inside those gaps (windows, frames, timing) cannot be known. Capture "
              "again with a bigger kernel buffer (tcpdump -B 65536, in KiB), full packets or a snaplen that keeps "
              "the AMQP frame headers (-s 0), a narrow capture filter ('tcp port 5672') rather than display "
              "filtering later, writing to a fast local disk, and rotating files (-C/-G) on long captures. "
              "tcpdump's 'packets dropped by kernel' line confirms it.")
    return Finding("capture-gaps", severity, title, evidence, advice, impact=min(share, 1.0))


# --- plots ------------------------------------------------------------------------------------


@dataclass
class _PlotPoints:
    """The window plot's points so far (`_plot_bins`), two series per connection direction:
    the window its peer advertised (series 0) and its bytes in flight (series 1, stored negated
    so that one minimum keeps the window's dips and the in-flight peaks). Each series is keyed
    (stream·2 + sender direction)·2 + series. Per series: its points while it has at most
    PLOT_BINS (`raw`: key, t, y, in time order), its points' count and time range (`extent`:
    count, t_min, t_max), and its points' minimum per PLOT_FINE_BINS bin of its connection's
    life (`fine`, index key·PLOT_FINE_BINS + bin): bounded by the directions, not the packets."""

    raw: pd.DataFrame
    extent: pd.DataFrame
    fine: pd.Series


def _plot_bins(pk: dict, connections: pd.DataFrame, t0_ns: int, before: _PlotPoints | None) -> _PlotPoints:
    """The window plot's points of the slices before (`before`) with this slice's packets
    added (`_PlotPoints`; min, max, count: exact in any order, so each slice adds its share)."""
    life = _life_s(connections, t0_ns)
    parts = []
    for D in (0, 1):
        inflight, peer_win = _window_state(pk, D, slice(None))
        base = (pk["stream"].astype(np.int64) * 2 + D) * 2
        w, m = ~np.isnan(peer_win), (pk["d"] == D) & pk["data"] & ~np.isnan(inflight)
        parts += [pd.DataFrame({"key": base[w], "t": pk["t"][w], "y": peer_win[w]}),
                  pd.DataFrame({"key": base[m] + 1, "t": pk["t"][m], "y": -inflight[m]})]
    now = pd.concat(parts, ignore_index=True)
    now = now.iloc[np.argsort(now["key"].to_numpy(), kind="stable")]  # (time order within each series)
    stream = now["key"].to_numpy() // 4
    lo, hi = (life[k].reindex(stream).to_numpy() for k in ("lo", "hi"))
    span = np.where(hi > lo, hi - lo, 1.0)
    b = np.clip(np.floor((now["t"].to_numpy() - lo) / span * PLOT_FINE_BINS), 0, PLOT_FINE_BINS - 1)
    fine = now["y"].groupby(now["key"].to_numpy() * PLOT_FINE_BINS + b.astype(np.int64)).min()
    g = now.groupby("key")
    extent = pd.DataFrame({"count": g.size(), "t_min": g["t"].min(), "t_max": g["t"].max()})
    raw = now
    if before is not None:
        fine = pd.concat([before.fine, fine]).groupby(level=0).min()
        both = pd.concat([before.extent, extent])
        g = both.groupby(level=0)
        extent = pd.DataFrame({"count": g["count"].sum(), "t_min": g["t_min"].min(), "t_max": g["t_max"].max()})
        raw = pd.concat([before.raw, now], ignore_index=True)
        raw = raw.iloc[np.argsort(raw["key"].to_numpy(), kind="stable")]
    few = extent.index[extent["count"].to_numpy() <= PLOT_BINS]
    return _PlotPoints(raw[raw["key"].isin(few)].reset_index(drop=True), extent, fine)


def _life_s(connections: pd.DataFrame, t0_ns: int) -> pd.DataFrame:
    """Each connection's first and last packet (index: stream; columns lo, hi), seconds from
    `t0_ns`: the time range of the window plot's finer bins (`_plot_bins`)."""
    return pd.DataFrame({"lo": seconds(ns(connections["first_ts"]) - t0_ns),
                         "hi": seconds(ns(connections["last_ts"]) - t0_ns)},
                        index=connections["stream"].to_numpy(np.int64))


def _series_points(plot: _PlotPoints, life: pd.DataFrame, key: int) -> tuple[np.ndarray, np.ndarray]:
    """One series of the window plot (`_PlotPoints`' key): its points when at most PLOT_BINS,
    else at most PLOT_BINS points, the extreme of each bin of its own time range (the finer
    bins' minima gathered by their start), at the bin's start."""
    sign = -1.0 if key % 2 else 1.0
    if key not in plot.extent.index:
        return np.zeros(0), np.zeros(0)
    n, t_min, t_max = plot.extent.loc[key, ["count", "t_min", "t_max"]]
    if n <= PLOT_BINS:
        r = plot.raw[plot.raw["key"].to_numpy() == key]
        return r["t"].to_numpy(), sign * r["y"].to_numpy()
    idx = plot.fine.index.to_numpy(np.int64)
    at = slice(*np.searchsorted(idx, [key * PLOT_FINE_BINS, (key + 1) * PLOT_FINE_BINS]))
    lo, hi = life.at[key // 4, "lo"], life.at[key // 4, "hi"]
    t = lo + (idx[at] % PLOT_FINE_BINS) * ((hi - lo) / PLOT_FINE_BINS)
    edges = np.linspace(t_min, t_max, PLOT_BINS + 1)
    b = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, PLOT_BINS - 1)
    v = pd.Series(plot.fine.to_numpy()[at]).groupby(b).min()
    return edges[v.index.to_numpy()], sign * v.to_numpy()


def _window_directions(tcp: pd.DataFrame, stalls_tbl: pd.DataFrame) -> pd.DataFrame:
    """The directions the window plot shows: those the receiver's window held back (window-full
    segments, a zero window from the peer, or a receiver-window stall), at most
    PLOT_MAX_DIRECTIONS of them, the most held back first. Others would be near-empty panels:
    a window far above what was ever in flight."""
    t = tcp.dropna(subset=["bytes_in_flight_max"])
    if t.empty:
        return t.assign(rw=pd.Series(dtype=np.int64), peer_zero=pd.Series(dtype=np.int64))
    key = _direction_key(t)
    rw = _direction_key(stalls_tbl[stalls_tbl["cause"] == "receiver-window"])
    zw = pd.Series(tcp["zero_window_ads"].to_numpy(), index=_direction_key(tcp))
    t = t.assign(rw=np.bincount(rw, minlength=int(key.max()) + 1)[key].astype(np.int64),
                 peer_zero=zw.reindex(key ^ 1).fillna(0).to_numpy(np.int64))
    held = (t["window_full_segments"] > 0) | (t["peer_zero"] > 0) | (t["rw"] > 0)
    # a total order (ties by stream, direction): the first PLOT_MAX_DIRECTIONS of the whole
    # capture are among each partition's first ones
    return t[held].sort_values(["rw", "peer_zero", "window_full_segments", "stream", "direction"],
                               ascending=[False, False, False, True, True], kind="stable")


def _window_series(plot: _PlotPoints, life: pd.DataFrame,
                   cand: pd.DataFrame) -> dict[tuple[int, str], tuple[np.ndarray, ...]]:
    """What the window plot draws of each direction of `cand` (rows of _window_directions):
    {(stream, direction): (t, receiver's window, t, bytes in flight)}, from the points gathered
    slice by slice (`_plot_bins`; `life`: `_life_s`), each series binned (`_series_points`)."""
    out = {}
    for stream, direction in zip(cand["stream"].astype(int), cand["direction"].astype(str)):
        key = (stream * 2 + (0 if direction == "c2s" else 1)) * 2
        out[(stream, direction)] = (*_series_points(plot, life, key), *_series_points(plot, life, key + 1))
    return out


def _plot_window(path: Path, cap: Capture, series: dict, tcp: pd.DataFrame, stalls_tbl: pd.DataFrame, t0) -> None:
    """Small multiples, one per held-back direction in connection-label order: the peer's
    advertised window and the bytes in flight (KiB, `series`: _window_series), stalls other
    than idle shaded by cause."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    from ..names import connection_label
    from ..plotting import natural_order, plain_axis, short, shown_of

    held = _window_directions(tcp, stalls_tbl)
    cand = held.head(PLOT_MAX_DIRECTIONS)
    names = [f"{short(connection_label(cap, s), 50)} {d}" for s, d in zip(cand["stream"], cand["direction"].astype(str))]
    order = natural_order(names)
    off = (t0 - cap.summary["first_ts"]).total_seconds()  # pk's times count from t0
    n = len(cand)
    fig, axes = plt.subplots(n, 1, figsize=(11, 1.7 * n + 0.9), squeeze=False, sharex=True, layout="constrained")
    causes = set()
    for ax, i in zip(axes[:, 0], order):
        r = cand.iloc[i]
        tw, yw, ti, yi = series[(int(r["stream"]), str(r["direction"]))]
        ax.step(tw + off, yw / 1024, where="post", color="#2ca02c", lw=1, label="receiver's window")
        ax.plot(ti + off, yi / 1024, ".", ms=2.5, color="#d62728", label="bytes in flight")
        mine = stalls_tbl[(stalls_tbl["stream"] == r["stream"]) & (stalls_tbl["direction"] == r["direction"])
                          & (stalls_tbl["cause"] != "idle")]
        for a, b, c in zip((mine["start_ts"] - cap.summary["first_ts"]).dt.total_seconds(),
                           (mine["end_ts"] - cap.summary["first_ts"]).dt.total_seconds(), mine["cause"].astype(str)):
            ax.axvspan(a, b, color=CAUSE_COLORS[c], alpha=0.2, lw=0)
            causes.add(c)
        ax.set_ylim(bottom=0)
        plain_axis(ax.yaxis)
        ax.set_ylabel("KiB", fontsize=8)
        ax.set_title(f"{names[i]}: {int(r['window_full_segments'])} window-full segments, receiver advertised a "
                     f"zero window {int(r['peer_zero'])} times", fontsize=9, loc="left")
    handles = axes[0, 0].get_legend_handles_labels()[0]
    handles += [Patch(color=CAUSE_COLORS[c], alpha=0.3, label=f"stall: {c}") for c in CAUSES if c in causes]
    axes[0, 0].legend(handles=handles, fontsize=7, loc="upper right", ncols=2)
    axes[-1, 0].set_xlabel("seconds since capture start (min window and max in flight per time bin)")
    fig.suptitle(f"Receiver windows that held the sender back: {shown_of(n, len(held), 'connection direction')}",
                 fontsize=10, x=0.01, ha="left")
    fig.savefig(path, dpi=100)


def _plot_timeline(path: Path, cap: Capture, stalls_tbl: pd.DataFrame, t0) -> None:
    """One row per connection direction with a stall, in connection-label order; idle stalls
    (nothing to send) in light grey so the causes that held traffic back stand out."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    from ..names import connection_label
    from ..plotting import natural_order, short, shown_of

    colors = {**CAUSE_COLORS, "idle": "#dddddd"}
    st = stalls_tbl.assign(key=stalls_tbl["stream"].astype(np.int64) * 2 + (stalls_tbl["direction"] == "s2c"))
    busy = st[st["cause"] != "idle"].groupby("key")["duration_s"].sum()
    every = st.groupby("key")["duration_s"].sum()
    # the rows with stalls that held traffic back first, then the longest idle ones
    keys = pd.concat([busy.nlargest(PLOT_MAX_TIMELINE_ROWS),
                      every.drop(busy.index).nlargest(PLOT_MAX_TIMELINE_ROWS)]).index[:PLOT_MAX_TIMELINE_ROWS]
    names = [f"{short(connection_label(cap, k // 2), 44)} {'s2c' if k % 2 else 'c2s'}" for k in keys]
    order = natural_order(names)
    rows = {int(keys[i]): row for row, i in enumerate(order)}
    fig, ax = plt.subplots(figsize=(11, 1.3 + 0.28 * max(len(rows), 1)), layout="constrained")
    st = st[st["key"].isin(list(rows))]
    start = (st["start_ts"] - cap.summary["first_ts"]).dt.total_seconds().to_numpy()
    ax.barh(st["key"].map(rows).to_numpy(), st["duration_s"].to_numpy(), left=start, height=0.7,
            color=[colors[c] for c in st["cause"].astype(str)])
    ax.set_yticks(range(len(rows)), [names[i] for i in order], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(0, (cap.summary["last_ts"] - cap.summary["first_ts"]).total_seconds())
    ax.set_xlabel("seconds since capture start")
    ax.set_title(f"{len(stalls_tbl):,} stalls on {shown_of(len(rows), len(every), 'connection direction')}, "
                 "coloured by cause (grey: idle, nothing to send)", loc="left", fontsize=10)
    used = [c for c in CAUSES if (st["cause"] == c).any()]
    ax.legend(handles=[Patch(color=colors[c], label=c) for c in used], fontsize=7, loc="upper left",
              bbox_to_anchor=(1.0, 1.0))
    fig.savefig(path, dpi=100)
