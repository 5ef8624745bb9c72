"""Whole-column tools the derivations and analyzers group, match and count with: dense codes
for tuples of columns, grouped running sums, an as-of match on one int64 key, the least value
of many ranges of a column. numpy and pandas
kernels only, no loop over rows; nothing here knows a Capture.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def codes(*cols) -> np.ndarray:
    """One dense int64 code per distinct tuple of ``cols`` (arrays of equal length), numbered in
    the sorted order of the tuples (as a groupby's keys); a missing value in any column gives -1.

    A groupby or merge on several columns (worse, on text) factorizes them again every time;
    a code computed once is one int64 column, cheap to sort, search and reduce on."""
    cols = [np.asarray(c) for c in cols]
    if cols and all(c.dtype.kind in "iu" and (len(c) == 0 or c.min() >= 0) for c in cols):
        # non-negative ints: packed into one int64 (lexicographic, so sorted as the tuples) and
        # factorized once, when the ranges allow it
        packed, size = np.zeros(len(cols[0]), dtype=np.int64), 1
        for c in cols:
            r = int(c.max(initial=0)) + 1
            if size > (2 ** 62) // r:
                break
            packed, size = packed * r + c, size * r
        else:
            return pd.factorize(packed, sort=True)[0].astype(np.int64)
    out = None
    for col in cols:
        c, uniq = pd.factorize(col, sort=True)
        c = c.astype(np.int64)
        if out is None:
            out = c
        else:
            missing = (out < 0) | (c < 0)
            out, _ = pd.factorize(out * len(uniq) + c, sort=True)
            out = out.astype(np.int64)
            out[missing] = -1
    if out is not None and (out < 0).any():  # keep codes dense over the present tuples
        ok = out >= 0
        out[ok] = pd.factorize(out[ok], sort=True)[0]
    return out


def stable_argsort(code: np.ndarray) -> np.ndarray:
    """``np.argsort(code, kind="stable")`` for non-negative int codes. numpy sorts integers of
    at most 16 bits stably by radix sort (linear), several times faster than its merge sort of
    int64: codes of fewer than 65536 groups (tag spaces, consumers) are sorted as uint16."""
    if len(code) and 0 <= code.min() and code.max() < 2 ** 16:
        return np.argsort(code.astype(np.uint16), kind="stable")
    return np.argsort(code, kind="stable")


def group_cumsum(code: np.ndarray, values: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
    """Running sum of ``values`` within each group of ``code``, in row order
    (``Series.groupby(code).cumsum()`` without the groupby). ``idx``: the caller's
    ``np.argsort(code, kind="stable")``, when it has one."""
    if len(code) == 0:
        return np.zeros(0, dtype=np.int64)
    if idx is None:
        if (code[1:] >= code[:-1]).all():
            return _sorted_group_cumsum(code, values)
        idx = stable_argsort(code)
    run = _sorted_group_cumsum(code[idx], values[idx])
    out = np.empty_like(run)
    out[idx] = run
    return out


def _sorted_group_cumsum(code: np.ndarray, values: np.ndarray) -> np.ndarray:
    """`group_cumsum` of rows already in group order (`code` non-decreasing: the backlog join's
    events, sorted by queue): the running sum less the sum before each group's first row, no
    sort and no gather (4.7M events of 7 copies of flow-control.pcap.gz: 0.04 s instead of 0.34 s)."""
    run = np.cumsum(values)
    start, rows = _sorted_groups(code)
    run -= np.repeat(run[start] - values[start], rows)
    return run


def _sorted_groups(code: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first row and the number of rows of each group of ``code`` (non-decreasing, not empty)."""
    start = np.flatnonzero(np.r_[True, code[1:] != code[:-1]])
    return start, np.diff(np.r_[start, len(code)])


def sorted_group_cummin(code: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Running minimum of int ``values`` within each group of ``code``, rows already in group
    order (``code`` non-decreasing), as ``Series.groupby(code).cummin()``: one
    ``np.minimum.accumulate`` with each group shifted below every group before it (so the
    minimum starts afresh at each group), then shifted back; pandas' groupby where the shifts
    would not fit in an int64. On the backlog join's 4.7M rows of 7 copies of
    flow-control.pcap.gz: 0.05 s instead of pandas' 0.33 s."""
    values = np.asarray(values, np.int64)
    if len(values) == 0:
        return np.zeros(0, np.int64)
    start, rows = _sorted_groups(code)
    lo = int(values.min())
    span = int(values.max()) - lo + 1
    if span * len(start) >= 2**62:
        return pd.Series(values).groupby(code, sort=False).cummin().to_numpy(np.int64)
    shift = np.repeat(np.arange(len(start), dtype=np.int64) * span, rows)
    # (in place: every new array of these sizes is memory the kernel clears first)
    low = np.subtract(values, lo)  # (from 0: no shift below it overflows)
    low -= shift
    np.minimum.accumulate(low, out=low)
    low += shift
    low += lo
    return low


def asof(left_key: np.ndarray, left_on: np.ndarray, right_key: np.ndarray, right_on: np.ndarray,
         direction: str = "backward", allow_exact_matches: bool = True) -> np.ndarray:
    """``pd.merge_asof`` on one int64 ``by`` key, as row positions: for each left row, the
    position in the right arrays of the last right row of the same key with ``right_on`` ≤
    ``left_on`` (backward) or the first with ``right_on`` ≥ ``left_on`` (forward; strict
    inequalities without exact matches); -1 when there is none, or when the key is < 0.

    Keys are small codes (see :func:`codes`) and ``on`` values ints (frame orders, frame keys,
    nanoseconds), so (key, on) packs into one sortable int64 and the match is a
    ``searchsorted``; this avoids the merge's copies of both frames and its hashing of the keys.
    The ``on`` values are packed relative to their least; only when keys × their range would
    not fit in an int64 are they replaced by their ranks (a sort of both sides)."""
    n, nr = len(left_key), len(right_key)
    out = np.full(n, -1, dtype=np.int64)
    if n == 0 or nr == 0:
        return out
    left_on, right_on = _packable(np.asarray(left_on, np.int64), np.asarray(right_on, np.int64),
                                  max(int(np.abs(left_key).max()), int(np.abs(right_key).max())) + 1)
    span = int(max(left_on.max(), right_on.max())) + 1
    rk = right_key.astype(np.int64)
    r = rk * span + right_on
    ridx = np.argsort(r, kind="stable")  # among equal (key, on): right order, as merge_asof
    r = r[ridx]
    lk = left_key.astype(np.int64)
    q = lk * span + left_on
    if direction == "backward":
        j = np.searchsorted(r, q, side="right" if allow_exact_matches else "left") - 1
    else:
        j = np.searchsorted(r, q, side="left" if allow_exact_matches else "right")
    ok = (j >= 0) & (j < nr) & (lk >= 0)
    j = np.where(ok, j, 0)
    ok &= rk[ridx[j]] == lk
    out[ok] = ridx[j[ok]]
    return out


def _packable(left_on: np.ndarray, right_on: np.ndarray, keys: int) -> tuple[np.ndarray, np.ndarray]:
    """`asof`'s ``on`` values from 0 up, ordered as given, small enough that ``keys`` of them
    side by side (with one key's room for the negative codes) fit in an int64: shifted to start
    at 0, or, when their range is too wide for that, their ranks among both sides."""
    lo = min(int(left_on.min()), int(right_on.min()))
    span = max(int(left_on.max()), int(right_on.max())) - lo + 1
    if (2 * keys + 1) * span < 2**63:
        return left_on - lo, right_on - lo
    rank = np.unique(np.r_[left_on, right_on], return_inverse=True)[1].ravel().astype(np.int64)
    return rank[:len(left_on)], rank[len(left_on):]


def text_ranks(labels, code: np.ndarray) -> np.ndarray:
    """``labels[code]`` as int64 numbered in the sorted order of the text (equal text, equal
    number), as a groupby on the text would order them; only the few labels in use are sorted."""
    code = np.asarray(code, dtype=np.int64)
    used = np.unique(code)
    rank = np.zeros(len(labels), dtype=np.int64)
    rank[used] = pd.factorize(np.asarray(labels, dtype=object)[used], sort=True)[0]
    return rank[code]


def as_object(df: pd.DataFrame, *cols: str) -> pd.DataFrame:
    """Text merge keys as object dtype on both sides (pandas 3 infers `str` from arrays)."""
    return df.assign(**{c: df[c].astype(object) for c in cols})


#: `range_min`'s block: a query's ends are read within their blocks, the blocks between them
#: from a table of block minima
_RANGE_BLOCK = 64


def range_min(values: np.ndarray, lo: np.ndarray, hi: np.ndarray, empty: int) -> np.ndarray:
    """The least of ``values[lo:hi]`` for each query (`empty` for an empty range), int64.

    Each query costs the same however long its range (a busy queue's range between an ack and
    its channel's next delivery can hold every other consumer's rows: `minimum.reduceat` over
    the ranges took time in their summed length). Values are cut in blocks of `_RANGE_BLOCK`: a
    range spanning blocks is the least of its first block's suffix, its last block's prefix and
    the blocks between (a sparse table of block minima, two lookups); a range within one block
    is reduced directly (at most a block's length each)."""
    values = np.asarray(values, np.int64)
    lo, hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
    out = np.full(len(lo), empty, np.int64)
    ok = np.flatnonzero(hi > lo)
    if not len(ok):
        return out
    n, width = len(values), _RANGE_BLOCK
    blocks = np.full(-(-n // width) * width, np.iinfo(np.int64).max, np.int64)
    blocks[:n] = values
    blocks = blocks.reshape(-1, width)
    prefix = np.minimum.accumulate(blocks, axis=1).ravel()
    suffix = np.minimum.accumulate(blocks[:, ::-1], axis=1)[:, ::-1].ravel()
    table = [blocks.min(axis=1)]  # table[k][b]: the least of blocks b .. b + 2**k - 1
    while 2 ** len(table) <= len(table[0]):
        half = 2 ** (len(table) - 1)
        table.append(np.minimum(table[-1][:-half], table[-1][half:]))

    first, last = lo[ok], hi[ok] - 1
    first_block, last_block = first // width, last // width
    within = first_block == last_block
    res = np.empty(len(ok), np.int64)
    # within one block: reduced in order of their starts, so that `reduceat`'s in-between
    # segments (from one query's end to the next one's start) cover each value at most once
    w = np.flatnonzero(within)
    w = w[np.argsort(first[w], kind="stable")]
    bounds = np.empty(2 * len(w), np.int64)
    bounds[0::2], bounds[1::2] = first[w], last[w] + 1
    if len(w):
        res[w] = np.minimum.reduceat(np.append(values, 0), bounds)[0::2]  # (an end may be one past the last value)
    # across blocks: the ends' partial blocks, and the whole blocks between them
    x = np.flatnonzero(~within)
    res[x] = np.minimum(suffix[first[x]], prefix[last[x]])
    inner, count = first_block[x] + 1, last_block[x] - first_block[x] - 1
    level = np.zeros(len(x), np.int64)
    has = count > 0
    level[has] = np.floor(np.log2(count[has])).astype(np.int64)
    for k in np.unique(level[has]):
        at = np.flatnonzero(has & (level == k))
        t = table[k]
        res[x[at]] = np.minimum(res[x[at]], np.minimum(t[inner[at]], t[inner[at] + count[at] - 2 ** k]))
    out[ok] = res
    return out


def value_at(keys: np.ndarray, values: np.ndarray, wanted: np.ndarray, default) -> np.ndarray:
    """`values` of the sorted unique `keys` at each of `wanted`, `default` where a key is absent
    (a lookup in counts carried from one slice of a partition to the next)."""
    if not len(keys):
        return np.full(len(wanted), default, dtype=np.result_type(values, type(default)))
    i = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
    return np.where(keys[i] == wanted, values[i], default)


def counts_added(keys: tuple[np.ndarray, ...], counts: np.ndarray,
                 more_keys: tuple[np.ndarray, ...], more_counts: np.ndarray) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """Counts per composite key (a tuple of int64 columns) with more counts added: the keys
    sorted (first column first) and each once, as are both inputs' (the counts of a partition's
    slices so far, then of its next one)."""
    cols = tuple(np.concatenate([a, b]).astype(np.int64) for a, b in zip(keys, more_keys))
    n = np.concatenate([counts, more_counts]).astype(np.int64)
    if not len(n):
        return cols, n
    order = np.lexsort(cols[::-1])
    cols, n = tuple(c[order] for c in cols), n[order]
    new = np.zeros(len(n), bool)
    new[0] = True
    for c in cols:
        new[1:] |= c[1:] != c[:-1]
    start = np.flatnonzero(new)
    return tuple(c[start] for c in cols), np.add.reduceat(n, start)
