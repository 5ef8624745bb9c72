"""From packets to stalls: each direction's silences, which of them are stalls (long absolutely and
against the direction's pacing and round trip), and the one cause each gets.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .constants import CAUSES, CAUSE_SHARE, DIRS, GAP_FACTOR, MIN_STALL_S, RTT_FACTOR, STALL_COLUMNS
from .tcp_state import _Seen, _slots


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
    # an AMQP 1.0 connection's states are read from its performatives (`amqp10.amqp10_states`)
    a10 = st["amqp10"].to_numpy(bool) if "amqp10" in st else np.zeros(len(st), bool)
    details = [
        st["gaps_n"].astype(str) + " capture gap(s) on this connection inside it",
        "peer advertised a zero window " + st["zero_window_n"].astype(str) + " time(s); window full or zero for "
        + r3("window_s") + " s",
        st["retrans_n"].astype(str) + " retransmitted segment(s) inside it",
        _either(a10, "AMQP 1.0 flow control: the broker gave the client's sender no link credit for "
                + r3("flow_s") + " s", "flow control (connection.blocked / channel.flow) active for " + r3("flow_s") + " s"),
        _either(a10, "a receiver out of link credit (AMQP 1.0: the broker had no credit to send) for "
                + r3("prefetch_s") + " s", "a consumer at its prefetch limit for " + r3("prefetch_s") + " s"),
        _either(a10, "deliveries awaiting the broker's disposition (AMQP 1.0 settlement) for " + r3("confirm_s") + " s",
                "publishes awaiting confirms for " + r3("confirm_s") + " s"),
        pd.Series("nothing held it back: the application sent nothing", index=st.index),
    ]
    st["detail"] = np.select(conds + [np.ones(len(st), bool)], details, default="") if len(st) else []
    return st


def _either(a10: np.ndarray, amqp10: pd.Series, amqp091: pd.Series) -> pd.Series:
    """Per stall, the AMQP 1.0 wording on the rows of a 1.0 connection (`a10`), else 0-9-1's."""
    return amqp091.where(~a10, amqp10) if a10.any() else amqp091


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
