"""The core's column tuples (`_core.decode` without ``arrow``: numpy arrays and a kind) as the
pandas columns of `amqpcap.load`'s tables (docs/tables.md): nullable integers, categoricals, UTC
timestamps, wrapped without per-row Python work."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

_NAT = np.iinfo(np.int64).min

_UTC = pd.DatetimeTZDtype(unit="ns", tz="UTC")


def _timestamps(values: np.ndarray, missing: np.ndarray | None = None) -> pd.arrays.DatetimeArray:
    if missing is not None and missing.any():
        values[missing] = _NAT
    try:
        # Wraps the int64 nanoseconds without a copy (the public constructors copy).
        return pd.arrays.DatetimeArray._simple_new(values.view("M8[ns]"), dtype=_UTC)
    except (AttributeError, TypeError):  # pragma: no cover - other pandas versions
        return pd.array(values.view("M8[ns]"), dtype="M8[ns]").tz_localize("UTC")


def _categorical(codes: np.ndarray, categories: list[str]) -> pd.Categorical:
    return pd.Categorical.from_codes(codes, categories=pd.Index(categories, dtype=object), validate=False)


def _column(col: tuple) -> Any:
    kind = col[0]
    if kind in ("i8", "i16", "i32", "i64", "bool"):
        return col[1]
    if kind == "ts":
        return _timestamps(col[1])
    # nullable columns come as (values, missing mask), the layout pandas keeps as is
    if kind in ("null_u8", "null_i16", "null_i32", "null_u32", "null_i64", "null_u64"):
        return pd.arrays.IntegerArray(col[1], col[2])
    if kind == "null_bool":
        return pd.arrays.BooleanArray(col[1], col[2])
    if kind == "null_ts":
        return _timestamps(col[1], col[2])
    if kind in ("str", "cat"):
        return _categorical(col[1], col[2])
    if kind == "bytes":
        return pd.array(col[1], dtype=object)
    if kind == "text":
        # dictionary codes (-1 = missing) into str objects shared between rows
        lookup = np.empty(len(col[2]) + 1, dtype=object)
        lookup[: len(col[2])] = col[2]
        return pd.array(lookup[col[1]], dtype=object)
    raise ValueError(f"unknown column encoding {kind!r}")


def pandas_frame(table: list[tuple[str, tuple]]) -> pd.DataFrame:
    """Columns are taken out of ``table`` one by one so each raw array is released as soon as
    pandas holds it (peak memory stays near one copy of the tables)."""
    columns = {}
    table.reverse()
    while table:
        name, col = table.pop()
        columns[name] = _column(col)
    return pd.DataFrame(columns, copy=False)
