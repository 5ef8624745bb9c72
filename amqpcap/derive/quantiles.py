"""Exact percentiles of a column spread over many parts, in bounded memory (issue 13).

A merge that reports the percentiles of every delivery's latency (or every RTT sample) used to
read the column whole into one process: 8 bytes a value, about 2 GB of the merging process at
100M packets. Here the values stay in their parts (`amqpcap.io.kept_rows`: the buckets' files, or
the frame itself in one process) and are read a part at a time, once per pass:

- few values (`GATHER_MAX` at most): gathered, and numpy computes the percentiles itself;
- more: each order statistic a percentile needs is found by a radix selection over the values'
  bits (a float's bits, sign-adjusted, sort as the float does), 16 bits a pass: a histogram of
  the candidates' next 16 bits tells which slice holds the k-th value, until the slice is small
  enough to gather (in practice two or three passes). Memory: one part, a 65,536-bin histogram
  per order statistic, and at most `GATHER_MAX` candidates.

The results are numpy's own (`np.percentile`'s linear interpolation, `np.median`), bit for bit,
whatever the parts: `tests/derive/test_quantiles.py` checks them against numpy on values concatenated.
The mean is the correctly rounded sum (`math.fsum`) over the count, so that it does not depend on
how the values are cut into parts either.
"""

from __future__ import annotations

import itertools
import math
from typing import Callable, Iterable, Iterator

import numpy as np

#: a column's values, part by part: called once per pass, each part a float64 array without NaN
Chunks = Callable[[], Iterable[np.ndarray]]

#: values gathered into one array at the most (8 MiB); more are narrowed down by passes first
GATHER_MAX = 1 << 20

_SIGN = np.uint64(1 << 63)
_DIGIT_BITS = 16


def _keys(v: np.ndarray) -> np.ndarray:
    """Unsigned integers that sort as the floats `v` do (negative floats' bits inverted, the
    sign bit of the others set)."""
    bits = np.ascontiguousarray(v, dtype=np.float64).view(np.uint64)
    return np.where(bits & _SIGN, ~bits, bits | _SIGN)


def _value(key: int) -> float:
    """The float of a key (`_keys` undone)."""
    k = np.uint64(key)
    bits = (k & ~_SIGN) if k & _SIGN else ~k
    return float(np.array([bits], dtype=np.uint64).view(np.float64)[0])


class _Search:
    """One order statistic being looked for: the `rank`-th smallest (0-based) of the values
    whose key starts with the `bits` bits of `prefix`, `count` of them (None: not counted yet)."""

    def __init__(self, rank: int) -> None:
        self.prefix, self.bits, self.rank, self.count = 0, 0, rank, None
        self.found: float | None = None

    def matches(self, keys: np.ndarray) -> np.ndarray | slice:
        return slice(None) if self.bits == 0 else (keys >> np.uint64(64 - self.bits)) == np.uint64(self.prefix)

    def narrow(self, histogram: np.ndarray) -> None:
        """Down to the slice of the next 16 bits holding the rank."""
        below = np.cumsum(histogram)
        digit = int(np.searchsorted(below, self.rank, side="right"))
        self.rank -= int(below[digit - 1]) if digit else 0
        self.count = int(histogram[digit])
        self.prefix, self.bits = (self.prefix << _DIGIT_BITS) | digit, self.bits + _DIGIT_BITS
        if self.bits == 64:  # (every candidate has this key: one value)
            self.found = _value(self.prefix)


def order_statistics(chunks: Chunks, ranks: Iterable[int]) -> dict[int, float]:
    """{rank: the rank-th smallest value (0-based)} of the values of `chunks`, as
    ``np.sort(np.concatenate(list(chunks())))[rank]`` gives it, reading a part at a time."""
    searches = {r: _Search(r) for r in set(ranks)}
    while any(s.found is None for s in searches.values()):
        _one_pass([s for s in searches.values() if s.found is None], chunks)
    return {r: s.found for r, s in searches.items()}


def _one_pass(searches: list[_Search], chunks: Chunks) -> None:
    """Read every part once: gather the candidates of the searches narrowed enough, count the
    next 16 bits of the others' candidates."""
    gather = [s for s in searches if s.count is not None and s.count <= GATHER_MAX]
    count = [s for s in searches if s not in gather]
    gathered: list[list[np.ndarray]] = [[] for _ in gather]
    histograms = [np.zeros(1 << _DIGIT_BITS, dtype=np.int64) for _ in count]
    for part in chunks():
        keys = _keys(part)
        for s, into in zip(gather, gathered):
            into.append(part[s.matches(keys)])
        for s, h in zip(count, histograms):
            digits = (keys[s.matches(keys)] >> np.uint64(64 - _DIGIT_BITS - s.bits)) & np.uint64(0xFFFF)
            h += np.bincount(digits.astype(np.int64), minlength=1 << _DIGIT_BITS)
    for s, into in zip(gather, gathered):
        s.found = float(np.partition(np.concatenate(into), s.rank)[s.rank])
    for s, h in zip(count, histograms):
        s.narrow(h)


def _lerp(a: float, b: float, t: float) -> float:
    """numpy's linear interpolation of a quantile between its neighbours, step for step (so the
    same float)."""
    a, b, t = np.float64(a), np.float64(b), np.float64(t)
    diff = b - a
    return float(b - diff * (1 - t)) if t >= 0.5 else float(a + diff * t)


def _neighbours(n: int, q: float) -> tuple[int, int, float]:
    """The ranks either side of percentile `q` of `n` values, and the weight between them, as
    `np.percentile` computes them (method "linear")."""
    virtual = (n - 1) * np.true_divide(np.float64(q), 100)
    if virtual >= n - 1:
        return n - 1, n - 1, float(virtual - (-1))  # (numpy's gamma here; a == b, so unused)
    below = int(np.floor(virtual))
    return below, below + 1, float(virtual - below)


def percentiles(chunks: Chunks, n: int, qs: Iterable[float]) -> list[float]:
    """``np.percentile(values, qs)`` of the `n` values of `chunks`."""
    return _exact(chunks, n, list(qs), with_median=False)[1]


def median(chunks: Chunks, n: int) -> float:
    """``np.median(values)`` of the `n` values of `chunks`."""
    return _exact(chunks, n, [], with_median=True)[0]


def median_and_percentiles(chunks: Chunks, n: int, qs: Iterable[float]) -> tuple[float, list[float]]:
    """Both, their order statistics found in the same passes."""
    return _exact(chunks, n, list(qs), with_median=True)


def _exact(chunks: Chunks, n: int, qs: list[float], with_median: bool) -> tuple[float | None, list[float]]:
    """The median (the middle value, or the mean of the middle two) and the percentiles `qs`, as
    numpy gives them, of the `n` values of `chunks`."""
    if n <= GATHER_MAX:
        v = _gathered(chunks)
        return (float(np.median(v)) if with_median else None), [float(x) for x in np.percentile(v, qs)]
    sides = [_neighbours(n, q) for q in qs]
    middle = ((n - 1) // 2, n // 2) if with_median else ()
    at = order_statistics(chunks, {*middle, *(r for lo, hi, _ in sides for r in (lo, hi))})
    mid = float(np.mean(np.array([at[middle[0]], at[middle[1]]]))) if with_median else None
    return mid, [_lerp(at[lo], at[hi], t) for lo, hi, t in sides]


def _gathered(chunks: Chunks) -> np.ndarray:
    parts = list(chunks())
    return np.concatenate(parts) if parts else np.zeros(0)


def count_max_mean(chunks: Chunks) -> tuple[int, float, float]:
    """(count, max, mean) of the values of `chunks`, in one pass (NaN max and mean of none); the
    mean from the correctly rounded sum (`math.fsum` over every value, part after part), the
    same however the values are cut into parts."""
    n, top = 0, -math.inf

    def lists() -> Iterator[list]:
        nonlocal n, top
        for part in chunks():
            if len(part):
                n, top = n + len(part), max(top, float(part.max()))
                yield part.tolist()

    total = math.fsum(itertools.chain.from_iterable(lists()))
    return (n, top, total / n) if n else (0, math.nan, math.nan)
