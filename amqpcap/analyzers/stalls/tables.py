"""The merged tables and summary: per direction TCP numbers, round-trip samples, the summary's
stalls object, each direction's window evidence.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...io.kept_rows import part_frame
from ...derive.quantiles import Chunks, median_and_percentiles
from .constants import (
    CAUSES, CAUSE_SHARE, DIRS, GAP_FACTOR, MIN_STALL_S, RECEIVER_WINDOW_CRITICAL_SHARE, RTT_FACTOR, TCP_COLUMNS,
    WINDOW_MIN_S)
from .intervals import _direction_key, _sum_per_key
from .carry import _Carry
from .tcp_state import _Seen, _slots


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


def _episodes(limited: pd.DataFrame) -> pd.DataFrame:
    """Per connection direction (index stream·2 + d) its window-limited episodes: a run of
    window-limited intervals (`_limited`: each limited packet to the connection's next one),
    each starting where the one before ended, is one time the peer's window was zero or full,
    from the packet that closed it to the one that opened it again. Its length is its time
    outside connection.blocked (``outside_s``); an episode of none (inside a block, or at the
    connection's last packet) is not counted. Columns: window_limited_episodes,
    window_limited_p50_s (the median episode), window_limited_longest_s. The intervals come in
    any order of slices: sorted here, an episode running on from one slice into the next is one."""
    cols = ["window_limited_episodes", "window_limited_p50_s", "window_limited_longest_s"]
    if not len(limited):
        return pd.DataFrame({c: [] for c in cols}, index=pd.Index([], dtype=np.int64))
    key = limited["stream"].to_numpy(np.int64) * 2 + limited["d"].to_numpy(np.int64)
    start, end = limited["start"].to_numpy(float), limited["end"].to_numpy(float)
    o = np.lexsort((end, start, key))
    key, start, end, outside = key[o], start[o], end[o], limited["outside_s"].to_numpy(float)[o]
    # a new episode: another direction, or a gap since the interval before (an unlimited moment)
    new = np.r_[True, (key[1:] != key[:-1]) | (start[1:] > end[:-1])]
    first = np.flatnonzero(new)
    ep = pd.DataFrame({"key": key[first], "s": np.add.reduceat(outside, first)})
    g = ep[ep["s"] > 0].groupby("key")["s"]
    return pd.DataFrame({"window_limited_episodes": g.size(), "window_limited_p50_s": g.median(),
                         "window_limited_longest_s": g.max()})


def _window_sides(connections: pd.DataFrame, c: _Carry, tcp: pd.DataFrame, stalls_tbl: pd.DataFrame,
                  episodes: pd.DataFrame) -> pd.DataFrame:
    """Per connection direction held back by its peer's TCP window: c2s rows are held by the
    broker's window, s2c rows by the client's. Columns: stream, d, window_limited_s (time with a
    zero or full peer window; for c2s without the time inside connection.blocked, the resource
    alarm's own finding), window_limited_share (of the connection's duration), zero_window_ads
    (advertised by the peer, outside connection.blocked for c2s), window_full_segments, stalls /
    stalled_s / longest_stall_s (its receiver-window stalls), window_limited_episodes /
    window_limited_p50_s / window_limited_longest_s (`episodes`: `_episodes`), peer_window_min_bytes,
    peer_window_max_bytes, connection_s, publishes (basic.publish frames it carried). Only the
    directions that are subjects are kept (`_held_back`). The times and counts are those the
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
        "window_limited_episodes": episodes["window_limited_episodes"].reindex(key, fill_value=0).to_numpy(np.int64),
        "window_limited_p50_s": episodes["window_limited_p50_s"].reindex(key).to_numpy(float),
        "window_limited_longest_s": episodes["window_limited_longest_s"].reindex(key, fill_value=0.0).to_numpy(float),
        "peer_window_min_bytes": t["peer_window_min_bytes"].to_numpy(),
        "peer_window_max_bytes": t["peer_window_max_bytes"].to_numpy(),
        "connection_s": conn_s.reindex(key // 2).to_numpy(),
        "publishes": c.publishes[pos] * (key % 2 == 0),
    })
    cs = out["connection_s"].to_numpy(float)
    out["window_limited_share"] = np.where(cs > 0, out["window_limited_s"] / np.where(cs > 0, cs, 1.0), 0.0)
    return out[_held_back(out)].sort_values(["window_limited_share", "window_limited_s", "stream"],
                                 ascending=[False, False, True]).reset_index(drop=True)


def _held_back(sides: pd.DataFrame) -> np.ndarray:
    """Which directions of `sides` (`_window_sides`' rows) its peer's window held back long
    enough to matter, the window findings' subjects: window-limited for WINDOW_MIN_S (= a stall's
    floor, MIN_STALL_S) in all, or for RECEIVER_WINDOW_CRITICAL_SHARE of a connection too short
    for that, or with a `receiver-window` stall. A zero window the broker advertised (c2s held)
    is always one: RabbitMQ's reader stops reading the socket only under flow control. A zero
    window of a client is not by itself: a client reading a large message at loopback speed
    fills its receive buffer for moments shorter than the message takes to arrive
    (large-messages.pcap: 7 windows of 0.32 ms median, 0.90 ms at most, while each 400 kB
    message takes 2.4 ms, 3.0 ms in all, 0.15% of the connection) and TCP paces the broker to
    its reads: the window at work, not a reader that stopped (docs/analyzers/stalls.md)."""
    limited = sides["window_limited_s"].to_numpy(float)
    return ((limited >= WINDOW_MIN_S) | (sides["window_limited_share"].to_numpy(float) >= RECEIVER_WINDOW_CRITICAL_SHARE)
            | (sides["stalls"].to_numpy() > 0) | ((sides["d"].to_numpy() == 0) & (sides["zero_window_ads"].to_numpy() > 0)))
