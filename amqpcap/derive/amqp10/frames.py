"""The `amqp10_frames` table (one row per AMQP 1.0 frame, docs/tables.md), as the capture has it.

The columns are the agreed schema's; `table` types hand-written rows the same way (the tests
build scenarios with it)."""

from __future__ import annotations

import functools

import pandas as pd

from ...io.load import Capture, empty_table


@functools.lru_cache(maxsize=1)
def dtypes() -> dict[str, str]:
    """The columns and dtypes of `amqp10_frames`, in the core's order: the core's own empty
    table's (made when first asked, not on import: importing an analyzer decodes nothing)."""
    return {c: str(t) for c, t in empty_table("amqp10_frames").dtypes.items()}


def table(rows: list[dict] | pd.DataFrame) -> pd.DataFrame:
    """Rows (dicts of some columns; the rest null) as an `amqp10_frames` table, every column typed."""
    df = pd.DataFrame(rows) if not isinstance(rows, pd.DataFrame) else rows
    if "packet" in df and "first_packet" not in df:  # (a frame within one packet)
        df = df.assign(first_packet=df["packet"])
    out = {}
    for col, dtype in dtypes().items():
        if col in df:
            s = df[col]
            if dtype.startswith("datetime"):
                s = pd.to_datetime(s, utc=True)
            out[col] = s.astype(dtype) if dtype != "category" else s.astype(object).astype("category")
        else:
            out[col] = pd.Series(pd.array([None] * len(df), dtype=dtype if dtype not in ("int32", "int64") else "Int64"))
            if dtype in ("int32", "int64"):
                out[col] = out[col].fillna(0).astype(dtype)
            if dtype.startswith("datetime"):
                out[col] = pd.Series(pd.NaT, index=range(len(df)), dtype=dtype)
    return pd.DataFrame(out)


def empty() -> pd.DataFrame:
    """An `amqp10_frames` table without rows."""
    return table([])


def as_text(df: pd.DataFrame, columns: tuple[str, ...]) -> None:
    """Columns of text or None as objects: one dtype whether a partition's rows hold a text or
    none (pandas would infer a string dtype for some partitions and objects for others)."""
    for c in columns:
        df[c] = pd.Series([None if pd.isna(x) else x for x in df[c]], index=df.index, dtype=object)


def amqp10_frames(cap: Capture) -> pd.DataFrame:
    """The capture's `amqp10_frames` (empty, with its columns, without AMQP 1.0)."""
    return cap.amqp10_frames
