"""Messages per second, each rate named by the span it divides by: one definition per rate, read by
every table, finding and the overview (issue 48: a consumer had four delivery rates, each over a
different span and none saying which).

Two spans, two names:

- ``<what>_msgs_per_s``, **per second active**: over the span of the messages themselves, from
  the first to the last (of a consumer: its first and last ``basic.deliver``/``basic.get-ok``;
  of a connection: its first and last). n messages in that span are n − 1 intervals, so the rate
  is ``(n − 1) / (last − first)``: the inverse of the mean time between two messages, the rate
  at which messages came while they came. Idle time before the first and after the last (a
  consumer subscribed before its publisher started, or after its queue drained) is left out:
  what an operator asks of a consumer is how fast it took messages, which idle time would hide.
  None (NaN) below two messages or for a zero span.
- ``<what>_msgs_per_capture_s``, **per second of capture**: ``n / capture duration`` (first to
  last record of the capture). One window for every rate, so a queue's consumers' rates add up
  to the queue's and publish, deliver and ack rates compare directly (the overview).

Timestamps are nanoseconds since the epoch (int64), or anything `pandas.to_datetime` reads as
UTC times (Timestamp columns); spans are taken as whole nanoseconds, then seconds.
"""

from __future__ import annotations

import numpy as np
import pandas as pd




def _ns(ts) -> np.ndarray:
    """Timestamps as int64 nanoseconds since the epoch (NaT: the int64 minimum)."""
    a = ts.array if isinstance(ts, (pd.Series, pd.Index)) else ts
    if isinstance(a, pd.arrays.DatetimeArray):
        return a.as_unit("ns").asi8
    a = np.asarray(a)
    return a.astype("M8[ns]").view(np.int64) if a.dtype.kind == "M" else a.astype(np.int64)


def active_span_s(first_ts, last_ts) -> np.ndarray:
    """Seconds from each first to its last timestamp (the span of `msgs_per_s_active`); NaN
    where either is missing (NaT, or the int64 minimum or maximum: nothing seen)."""
    first, last = _ns(first_ts), _ns(last_ts)
    none = np.iinfo(np.int64)
    nat = np.isin(first, (none.min, none.max)) | np.isin(last, (none.min, none.max))
    return np.where(nat, np.nan, (np.where(nat, 0, last) - np.where(nat, 0, first)) / 1e9)


def msgs_per_s_active(count, first_ts, last_ts) -> np.ndarray:
    """Per second active (the module doc): ``(count − 1) / (last_ts − first_ts)`` per row, NaN
    below two messages or without a span; `count` messages, the first at `first_ts`, the last at
    `last_ts`."""
    n = np.asarray(count, dtype=float)
    span = active_span_s(first_ts, last_ts)
    ok = (n >= 2) & (span > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(ok, (n - 1) / np.where(ok, span, 1.0), np.nan)


def msgs_per_capture_s(count, capture_s: float):
    """Per second of capture (the module doc): ``count / capture_s``; None (a scalar) or NaN (an
    array) for a capture without a duration."""
    if np.ndim(count) == 0:
        return float(count) / capture_s if capture_s > 0 else None
    n = np.asarray(count, dtype=float)
    return n / capture_s if capture_s > 0 else np.full(len(n), np.nan)


def msgs_per_span_s(count, span_s) -> np.ndarray:
    """``count / span_s`` per row (NaN for no span): per second of a span the caller names, for
    a number compared with another over that same span (the consumers analyzer's backlog growth
    ratio: a queue's growth over a consumer's life against what its consumers took in it).
    Not a rate shown as such: those are `msgs_per_s_active` and `msgs_per_capture_s`."""
    n, span = np.asarray(count, dtype=float), np.asarray(span_s, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(span > 0, n / np.where(span > 0, span, 1.0), np.nan)


def capture_s(summary: dict) -> float:
    """The capture's duration in seconds, first to last record (0 without records): the span of
    `msgs_per_capture_s`."""
    if summary.get("first_ts") is None:
        return 0.0
    return (summary["last_ts"] - summary["first_ts"]).total_seconds()
