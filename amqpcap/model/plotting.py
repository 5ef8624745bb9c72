"""Helpers the analyzers' plots share, so every plot reads the same way: plain tick labels
(``20,000``, ``0.5``; never ``6 × 10^0``), durations in ms when they are short, time per bin
of step series, and at most a few named series with the rest said, never dropped silently.

Everything here works on whole arrays; matplotlib is imported only when a plot is drawn."""

from __future__ import annotations

import math
import re

import numpy as np

#: time bins of the over-time plots: enough for shape, few enough that each bin means something
TIME_BINS = 120
#: durations below this many seconds are shown in ms
MS_BELOW_S = 2.0
#: series named one by one in a legend; more are drawn as an aggregate (plus the worst few)
MAX_NAMED = 6
#: the worst series named beside an aggregate
WORST_NAMED = 3


def plain(v: float, _pos=None) -> str:
    """A tick label without exponents: 20,000 / 0.5 / 0.002 (at most 3 significant digits)."""
    if v == 0 or not math.isfinite(v):
        return "0" if v == 0 else ""
    digits = max(0, 2 - math.floor(math.log10(abs(v))))
    text = f"{v:,.{min(digits, 9)}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def plain_axis(axis, log: bool = False) -> None:
    """Plain numbers on an axis (``ax.xaxis``/``ax.yaxis``/a colour bar's axis). On a log axis the
    ticks go at 1, 2, 5 × 10ⁿ (or every decade when the range spans many)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    if log:
        lo, hi = sorted(abs(x) for x in axis.get_view_interval())
        decades = math.log10(hi / lo) if lo > 0 and hi > 0 else 99
        subs = np.arange(1.0, 10.0) if decades <= 1 else (1.0, 2.0, 5.0) if decades <= 4 else (1.0,)
        axis.set_major_locator(LogLocator(base=10, subs=subs))
        axis.set_minor_formatter(NullFormatter())
    axis.set_major_formatter(FuncFormatter(plain))


def percent_axis(axis) -> None:
    from matplotlib.ticker import PercentFormatter

    axis.set_major_formatter(PercentFormatter(1.0, decimals=0))


def log_colorbar(fig, mappable, ax, label: str):
    """A colour bar for a LogNorm image with plain labels at 1, 2, 5 × 10ⁿ."""
    cb = fig.colorbar(mappable, ax=ax, label=label)
    cb.ax.minorticks_off()
    plain_axis(cb.ax.yaxis, log=True)
    return cb


def duration_unit(seconds) -> tuple[float, str]:
    """(factor, unit) for showing durations like ``seconds``: ms when the largest is short."""
    finite = np.asarray(seconds, dtype=float)
    finite = finite[np.isfinite(finite)]
    return (1e3, "ms") if len(finite) == 0 or finite.max() < MS_BELOW_S else (1.0, "s")


def time_edges(duration_s: float, bins: int = TIME_BINS) -> np.ndarray:
    """Bin edges over [0, duration] (seconds since the capture's start)."""
    return np.linspace(0.0, max(float(duration_s), 1e-6), bins + 1)


def time_per_bin(code: np.ndarray, start: np.ndarray, end: np.ndarray, edges: np.ndarray, n_codes: int,
                 weight: np.ndarray | None = None) -> np.ndarray:
    """Seconds (times ``weight``) of each interval [start, end) inside each time bin, summed per
    code: an (n_codes, bins) array. Each interval adds its partial first and last bins directly
    and its full bins in between through a difference array, so the cost is O(intervals + codes
    × bins) whatever the intervals' lengths."""
    nb = len(edges) - 1
    width = edges[1] - edges[0]
    s = np.clip(np.asarray(start, float), edges[0], edges[-1])
    e = np.clip(np.asarray(end, float), edges[0], edges[-1])
    w = np.ones(len(s)) if weight is None else np.asarray(weight, float)
    keep = e > s
    code, s, e, w = np.asarray(code, np.int64)[keep], s[keep], e[keep], w[keep]
    b0 = np.clip(((s - edges[0]) // width).astype(np.int64), 0, nb - 1)
    b1 = np.clip(((e - edges[0]) // width).astype(np.int64), 0, nb - 1)
    same = b0 == b1
    size = n_codes * (nb + 1)
    part = np.bincount(code * (nb + 1) + b0, weights=np.where(same, e - s, edges[b0 + 1] - s) * w, minlength=size)
    part += np.bincount((code * (nb + 1) + b1)[~same], weights=((e - edges[b1]) * w)[~same], minlength=size)
    full = ~same & (b1 > b0 + 1)
    diff = np.bincount((code * (nb + 1) + b0 + 1)[full], weights=(w * width)[full], minlength=size)
    diff -= np.bincount((code * (nb + 1) + b1)[full], weights=(w * width)[full], minlength=size)
    out = part.reshape(n_codes, nb + 1) + np.cumsum(diff.reshape(n_codes, nb + 1), axis=1)
    return out[:, :nb]


def natural_key(label: str) -> tuple:
    """Sort key that orders `consumer-2 (stream 40)` before `consumer-2 (stream 1004)`: digit runs
    compare as numbers."""
    return tuple(int(x) if x.isdigit() else x for x in re.split(r"(\d+)", str(label)))


def natural_order(labels) -> np.ndarray:
    """Positions of ``labels`` in natural order (`natural_key`)."""
    return np.array(sorted(range(len(labels)), key=lambda i: natural_key(labels[i])), dtype=np.int64)


def short(label: str, n: int = 48) -> str:
    """A label cut in the middle to ``n`` characters (both ends tell connections apart)."""
    label = str(label)
    if len(label) <= n:
        return label
    head = (n - 1) * 2 // 3
    return label[:head] + "…" + label[-(n - 1 - head):]


def shown_of(shown: int, total: int, what: str) -> str:
    """``3 consumers`` or ``12 of 1,704 consumers`` for titles; ``what`` singular (an s is added)."""
    noun = what if total == 1 else what + "s"
    return f"{total:,} {noun}" if shown >= total else f"{shown:,} of {total:,} {noun}"


def nan_stats(a: np.ndarray, percentiles) -> np.ndarray:
    """Percentiles over the rows of ``a`` per column, ignoring NaN (a column of NaN gives NaN
    without numpy's "All-NaN slice" warning)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanpercentile(a, percentiles, axis=0)


def agg_pyplot():
    """matplotlib's pyplot with the Agg backend (files, no display), imported when first drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
