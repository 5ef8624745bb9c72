"""How values are written in every output (CSV, summary.json, report.html, the terminal):
floats without binary noise, durations and rates told by their names, timestamps as ISO 8601
UTC text with nanoseconds."""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any

import numpy as np
import pandas as pd

#: Durations are computed from nanosecond timestamps, so they are whole nanoseconds: 9
#: decimals keep every digit they have and drop the binary noise float arithmetic adds
#: (0.008651480000000001 s is written 0.00865148).
SECONDS_DECIMALS = 9
#: Other floats (rates, shares, means) keep 12 significant digits: more than any of them is
#: measured to, fewer than the 15-17 at which a double's representation error shows.
SIGNIFICANT_DIGITS = 12
#: `_s` names a time in seconds, except in rates: `rate_per_s`, `mbit_s` (Mbit/s),
#: `packets_s`, `published_msgs_s`, `small_segments_s`, `packets_saved_s` (per second),
#: `delivered_msgs_per_capture_s` (per second of the capture: `amqpcap.derive.rates`)
_RATE = re.compile(r"(?:_per_s|_per_capture_s|(?:^|_)(?:mbit|packets|msgs|messages|segments|saved|frames|bytes)_s)$")


#: the columns and keys holding a rate per second active (`amqpcap.derive.rates`; report.html's
#: headers say "active"; those per second of capture end in ``_per_capture_s``)
PER_S_ACTIVE = frozenset({"delivered_msgs_per_s", "delivered_msgs_per_s_total", "published_msgs_per_s"})


def is_rate(name: str) -> bool:
    """Whether a column or key holds a rate per second (`packets_s`, `rate_per_s`)."""
    return bool(_RATE.search(name))


def is_seconds(name: str) -> bool:
    """Whether a column or key holds a duration in seconds (`latency_s`, `p50_s`)."""
    return name.endswith("_s") and not is_rate(name)


def clean_float(v: float, name: str = "") -> float:
    """One float as written: durations (`is_seconds`) to 9 decimals, anything else to 12
    significant digits. Python's round and %g round the decimal value exactly."""
    if is_seconds(name):
        return round(v, SECONDS_DECIMALS)
    return float(f"{v:.{SIGNIFICANT_DIGITS}g}")


def clean_floats(values: np.ndarray, name: str = "") -> np.ndarray:
    """`clean_float` on a whole float column (NaN stays NaN).

    np.round(x, d) is rint(x * 10**d) / 10**d: for d <= 22 the power of ten is exact and the
    division correctly rounded, so the result is the double nearest the rounded decimal and
    prints with no more digits than were kept. Values needing a larger shift (below 1e-11 or
    above 1e22 at 12 digits) are rare and rounded one by one through %g."""
    v = np.asarray(values, dtype=np.float64)
    if is_seconds(name):
        return np.round(v, SECONDS_DECIMALS)
    out = v.copy()
    nonzero = np.isfinite(v) & (v != 0)
    if not nonzero.any():
        return out
    exponent = np.floor(np.log10(np.abs(v[nonzero]))).astype(np.int64)
    decimals = SIGNIFICANT_DIGITS - 1 - exponent
    rounded = out[nonzero]
    for d in np.unique(decimals):
        at = decimals == d
        if abs(d) <= 22:
            rounded[at] = np.round(rounded[at], int(d))
        else:
            rounded[at] = [clean_float(float(x)) for x in rounded[at]]
    out[nonzero] = rounded
    return out


def iso_utc(ts: Any) -> str:
    """One timestamp (pd.Timestamp, datetime, np.datetime64) in the one format every output
    uses: ISO 8601 UTC with nanoseconds and `Z` (`iso_utc_ns`). Naive values are taken as UTC;
    NaT is ""."""
    t = pd.Timestamp(ts)
    if t is pd.NaT:
        return ""
    if t.tzinfo is not None:
        t = t.tz_convert("UTC").tz_localize(None)
    return str(iso_utc_ns(np.array([t.to_datetime64()], dtype="datetime64[ns]"))[0])


NS_PER_DAY = 86_400_000_000_000
ISO_NS_CHARS = len("YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ")


def iso_utc_ns(arr: np.ndarray) -> np.ndarray:
    """datetime64[ns] as ISO 8601 UTC text with nanoseconds (`2024-05-01T12:00:00.123456789Z`),
    NaT as "", in an object array of str (`iso_utc_matrix`)."""
    out, nat = iso_utc_matrix(arr)
    text = out.view(f"S{ISO_NS_CHARS}").ravel().astype(f"U{ISO_NS_CHARS}").astype(object)
    text[nat] = ""
    return text


def iso_utc_arrow(arr: np.ndarray):
    """The same text as an Arrow string array (NaT: null), made from the byte matrix without
    a Python string per value: 1M timestamps in ~0.2 s, where Arrow's strftime takes 1.3 s."""
    import pyarrow as pa

    out, nat = iso_utc_matrix(arr)
    n = len(out)
    offsets = np.arange(0, (n + 1) * ISO_NS_CHARS, ISO_NS_CHARS, dtype=np.int32)
    validity = pa.array(~nat).buffers()[1] if nat.any() else None
    return pa.Array.from_buffers(pa.string(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(out)],
                                 null_count=int(nat.sum()))


def iso_utc_matrix(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """datetime64[ns] as ISO 8601 UTC text with nanoseconds, one row of `ISO_NS_CHARS` bytes
    per value (NaT rows hold the epoch), and the NaT mask.

    Same text as np.datetime_as_string(unit="ns") + "Z", built 3x faster: the date part is
    formatted once per distinct day and the time digits are filled into a byte matrix column by
    column. datetime64[ns] spans 1677-2262, so the year always has four digits."""
    arr = np.asarray(arr, dtype="datetime64[ns]")
    nat = np.isnat(arr)
    ns = np.where(nat, 0, arr.view(np.int64))
    days, in_day = np.divmod(ns, NS_PER_DAY)
    unique_days, which_day = np.unique(days, return_inverse=True)
    day_text = np.datetime_as_string(unique_days.astype("datetime64[D]"), unit="D").astype("S10")
    out = np.empty((len(arr), ISO_NS_CHARS), dtype=np.uint8)
    out[:, :10] = day_text.view(np.uint8).reshape(-1, 10)[which_day.ravel()]
    out[:, 10] = ord("T")
    out[:, 13] = out[:, 16] = ord(":")
    out[:, 19] = ord(".")
    out[:, 29] = ord("Z")
    seconds, fraction_ns = np.divmod(in_day, 1_000_000_000)
    hours, rest = np.divmod(seconds, 3600)
    minutes, secs = np.divmod(rest, 60)
    for col, value in ((11, hours), (14, minutes), (17, secs)):
        out[:, col] = value // 10 + ord("0")
        out[:, col + 1] = value % 10 + ord("0")
    for col in range(28, 19, -1):
        fraction_ns, digit = np.divmod(fraction_ns, 10)
        out[:, col] = digit + ord("0")
    return out, nat


def as_written(df: pd.DataFrame) -> pd.DataFrame:
    """The table as every text output writes it (CSV; report.html and the terminal should
    too): timestamps as ISO 8601 UTC text made in whole columns (pandas formats datetimes one
    value at a time, which dominated writing million-row tables), floats without binary noise
    (`clean_floats`)."""
    times = [c for c in df.columns if isinstance(df[c].dtype, pd.DatetimeTZDtype) or df[c].dtype.kind == "M"]
    floats = [c for c in df.columns if c not in times and pd.api.types.is_float_dtype(df[c].dtype)]
    if not times and not floats:
        return df
    out = df.copy(deep=False)
    for c in times:
        values = out[c].dt.tz_convert("UTC").dt.tz_localize(None) if isinstance(out[c].dtype, pd.DatetimeTZDtype) else out[c]
        out[c] = iso_utc_ns(values.to_numpy(dtype="datetime64[ns]"))
    for c in floats:  # nullable Float64 too: NA becomes NaN, written as an empty cell like NA
        out[c] = clean_floats(out[c].to_numpy(dtype=np.float64, na_value=np.nan), str(c))
    return out


def jsonable(v: Any, key: str = "") -> Any:
    """`v` as JSON values: floats rounded as in the CSV files (`clean_float`, by the key that
    holds them), timestamps as ISO 8601 UTC text (`iso_utc`), NaN and NA as null."""
    if isinstance(v, dict):
        return {str(k): jsonable(x, str(k)) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x, key) for x in v]
    if v is pd.NA or v is pd.NaT:
        return None
    if isinstance(v, (np.bool_,)):
        return bool(v)
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        return None if math.isnan(v) or math.isinf(v) else clean_float(float(v), key)
    if isinstance(v, (dt.datetime, np.datetime64)):
        return iso_utc(v) or None
    return v
