"""The summary's numbers of a latency: count, percentiles, max and mean over every partition's rows."""

from __future__ import annotations

import numpy as np

from ...io.kept_rows import part_columns
from ...derive.quantiles import Chunks, count_max_mean, percentiles


def stats(values: Chunks) -> dict:
    """count, p50_s, p90_s, p99_s, max_s, mean_s of a latency column's values (`_values`), read
    a part at a time: the percentiles exact (`amqpcap.derive.quantiles`), the mean from the correctly
    rounded sum."""
    n, top, mean = count_max_mean(values)
    if n == 0:
        return {"count": 0, "p50_s": None, "p90_s": None, "p99_s": None, "max_s": None, "mean_s": None}
    p50, p90, p99 = percentiles(values, n, [50, 90, 99])
    return {"count": n, "p50_s": p50, "p90_s": p90, "p99_s": p99, "max_s": top, "mean_s": mean}


def _values(table, column: str, unless: str | None = None) -> Chunks:
    """The values of `column` of a merged table (`rows_table`) but NaN, and those of rows whose
    `unless` column is set, a part at a time (`kept_rows.part_columns`)."""
    def chunks():
        for df in part_columns(table, [column] + ([unless] if unless else [])):
            v = df[column].to_numpy(float)
            keep = ~np.isnan(v)
            if unless:
                keep &= ~df[unless].to_numpy(bool)
            yield v[keep]
    return chunks


def _wmean(df, col):
    v = df[col].dropna()
    return float(v.mean()) if len(v) else None


def _imax(df, col):
    return int(df[col].max()) if len(df) else None
