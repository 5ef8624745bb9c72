"""Counts per connection direction that add up over partitions and slices (`Counts`): packet and
payload sizes, frames per packet; the tables made from them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...derive.columns import counts_added
from .bins import _percent, plen_bucket
from .constants import PERCENT_DECIMALS, PLEN_EDGES_BYTES, PLEN_LABELS


def _gk(df: pd.DataFrame) -> np.ndarray:
    """(stream, direction) as one int64: stream * 2 + (direction == s2c). Integer keys keep the
    per-row work in numpy; strings appear only in the (small) output tables."""
    return df["stream"].to_numpy(np.int64) * 2 + (df["direction"] == "s2c").to_numpy()


def _count_pairs(key: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(key, value, count) for every (key, value) pair that occurs: one `np.unique` on int64."""
    if not len(key):
        z = np.zeros(0, np.int64)
        return z, z, z
    key, value = np.asarray(key, np.int64), np.asarray(value, dtype=np.int64)
    n_v = int(value.max()) + 1
    if value.min() >= 0 and key.min() >= 0 and (int(key.max()) + 1) * n_v <= 4 * len(key) + 4096:
        # Few distinct (key, value) cells (the usual case: small keys, small counts): a dense
        # bincount instead of sorting every row; its nonzero cells come in the same (key, value) order.
        counts = np.bincount(key * n_v + value)
        kv = np.flatnonzero(counts)
        return kv // n_v, kv % n_v, counts[kv].astype(np.int64)
    kv, counts = np.unique((key << 32) | value, return_counts=True)
    return kv >> 32, kv & 0xFFFFFFFF, counts.astype(np.int64)


def _is_method(frames: pd.DataFrame, methods) -> np.ndarray:
    """Rows whose method is one of ``methods``, compared on the categorical's codes (small
    ints) instead of its values."""
    m = frames["method"].array
    # One gather from a per-category table; code -1 (missing) reads the appended False.
    return np.r_[m.categories.isin(list(methods)), False][m.codes]


def _stream_direction(gk: np.ndarray) -> dict[str, np.ndarray]:
    return {"stream": (gk // 2).astype(np.int32), "direction": np.where(gk % 2 == 1, "s2c", "c2s")}


#: counts of (key, value) pairs, as `_count_pairs` gives them: (key, value, count), sorted by
#: (key, value), each pair once
Counts = tuple[np.ndarray, np.ndarray, np.ndarray]


def _no_counts() -> Counts:
    z = np.zeros(0, np.int64)
    return z, z, z


def _added(counts: Counts, more: Counts) -> Counts:
    """`counts` with `more` added: the counts of a partition's slices so far, then of its next
    one (both sorted by (key, value) and each pair once, as is the result)."""
    (key, value), n = counts_added(counts[:2], counts[2], more[:2], more[2])
    return key, value, n


def size_cells(p: pd.DataFrame, gk: np.ndarray) -> Counts:
    """(stream·2 + direction, plen bucket index, packets) of the packets `p` (`gk`: _gk(p))."""
    return _count_pairs(gk, plen_bucket(p["frame_len"].to_numpy()))


def stream_size_rows(cells: Counts) -> pd.DataFrame:
    """plen bucket counts per stream and direction, only the buckets it uses (a capture of a
    million short connections would otherwise get ten rows each): stream, direction, b (bucket
    index), count, percent (of the stream direction). `cells`: size_cells of the packets."""
    group, b, n = cells
    if not len(group):
        return pd.DataFrame({"stream": pd.array([], dtype="Int32"), "direction": np.array([], dtype=object),
                             "b": np.zeros(0, np.int64), "count": np.zeros(0, np.int64), "percent": np.zeros(0)})
    totals = np.bincount(group, weights=n)[group]
    return pd.DataFrame({
        "stream": pd.array((group // 2).astype(np.int32), dtype="Int32"),
        "direction": pd.Categorical.from_codes((group % 2).astype(np.int8), categories=["c2s", "s2c"]).astype(object),
        "b": b,
        "count": n, "percent": np.round(n * 100.0 / totals, PERCENT_DECIMALS),
    })


def packet_size_table(whole: np.ndarray, streams: pd.DataFrame) -> pd.DataFrame:
    """plen buckets for the whole capture (stream <NA>, direction `all`; every bucket; `whole`:
    plen_counts of the records) then per stream and direction (`streams`: stream_size_rows)."""
    n_b = len(PLEN_LABELS)
    lo = np.asarray(PLEN_EDGES_BYTES)
    hi = pd.array(np.r_[lo[1:] - 1, 0], dtype="Int64")
    hi[n_b - 1] = pd.NA
    parts = [pd.DataFrame({"stream": pd.array([pd.NA] * n_b, dtype="Int32"), "direction": "all", "b": np.arange(n_b),
                           "count": whole, "percent": _percent(whole, int(whole.sum()))})]
    if len(streams):
        parts.append(streams)
    out = pd.concat(parts, ignore_index=True)
    b = out.pop("b").to_numpy()
    out.insert(2, "range", np.asarray(PLEN_LABELS)[b])
    out.insert(3, "min_bytes", lo[b])
    out.insert(4, "max_bytes", hi.take(b))
    out["count"] = out["count"].astype(np.int64)
    return out


def payload_size_table(sizes: Counts) -> pd.DataFrame:
    """Distribution of TCP payload sizes of data segments per stream and direction, from how many
    segments had each size (`sizes`: (stream·2 + direction, payload bytes, segments)): a size
    histogram gives the quantiles of the segments themselves, and adds up over slices of time."""
    cols = ["stream", "direction", "segments", "payload_bytes", "mean_bytes", "min_bytes", "p10_bytes", "p50_bytes",
            "p90_bytes", "p99_bytes", "max_bytes"]
    gk, size, count = sizes
    if not len(gk):
        return pd.DataFrame(columns=cols)
    # The segments sorted by (group, size), each size `count` times: `end` is where each size's
    # run ends in that (virtual) sorted array, `first` where each group's segments start.
    start = np.flatnonzero(np.r_[True, gk[1:] != gk[:-1]])
    n = np.add.reduceat(count, start)
    end = np.cumsum(count)
    first = end[start] - count[start]

    def nth(i: np.ndarray) -> np.ndarray:  # the size of the i-th segment of the sorted array
        return size[np.searchsorted(end, i, side="right")]

    out = pd.DataFrame({"stream": (gk[start] // 2).astype(np.int32), "direction": np.where(gk[start] % 2 == 1, "s2c", "c2s"),
                        "segments": n, "payload_bytes": np.add.reduceat(size * count, start)})
    out["mean_bytes"] = out["payload_bytes"] / n
    out["min_bytes"] = size[start]
    for q in (10, 50, 90, 99):
        # Linear interpolation between order statistics, as numpy/pandas quantile does.
        # The position within the group, not within the array: the value must not depend on
        # where the group sits (which other connections share the partition).
        pos = (n - 1) * (q / 100)
        below = np.floor(pos)
        lo_i = first + below.astype(np.int64)
        hi_i = np.minimum(lo_i + 1, first + n - 1)
        out[f"p{q}_bytes"] = nth(lo_i) + (nth(hi_i) - nth(lo_i)) * (pos - below)
    out["max_bytes"] = nth(first + n - 1)
    return out[cols]


def frames_per_packet_table(counts: Counts) -> pd.DataFrame:
    """How many AMQP frames each data packet completes, per stream and direction (`counts`:
    _count_pairs of stream·2 + direction and frames_ended over the data packets)."""
    gk, v, n = counts
    return pd.DataFrame({**_stream_direction(gk), "frames_per_packet": v, "packets": n})
