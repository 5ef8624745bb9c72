"""Interval arithmetic on whole columns: how long a stall overlaps a cause's intervals, how many events
fall in it, intervals from state steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


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
