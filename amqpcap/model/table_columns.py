"""A column of a pandas frame or of an Arrow table read the same way, so that what is said of a
table (the summary's warnings, the anomalies' one-line account) is written once for both, and an
Arrow table is read without importing pandas (`amqpcap frames -o` never imports it: pyarrow's
own conversions to numpy import it, its `to_pylist` does not)."""

from __future__ import annotations

from typing import Any


def is_arrow(table: Any) -> bool:
    """Whether `table` is a pyarrow Table (else a pandas frame)."""
    return hasattr(table, "column_names")


def has_column(table: Any, name: str) -> bool:
    return name in (table.column_names if is_arrow(table) else table.columns)


def column_list(table: Any, name: str) -> list:
    """The column `name` as a list of Python values (None where a value is missing; a text of a
    dictionary or categorical column as its text)."""
    if is_arrow(table):
        return table.column(name).to_pylist()
    column = table[name]
    return [None if missing else value for value, missing in zip(column.tolist(), column.isna().tolist())]
