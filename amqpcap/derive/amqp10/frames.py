"""The `amqp10_frames` table (one row per AMQP 1.0 frame, docs/tables.md): read from the capture,
or an empty table of its columns while a capture has none (a core without the table, a slice of
time, a dataset bucket).

The columns are the agreed schema's; `table` types hand-written rows the same way (the tests
build scenarios with it)."""

from __future__ import annotations

import pandas as pd

from ...io.load import Capture

_U32 = "UInt32"
#: the columns and dtypes of `amqp10_frames`, in the core's order
DTYPES: dict[str, str] = {
    "packet": "int32", "first_packet": "int32", "ts": "datetime64[ns, UTC]", "stream": "int32",
    "direction": "category", "channel": "int32", "type": "category", "size_bytes": "int64",
    "performative": "category", "handle": _U32, "remote_channel": "Int32", "delivery_id": _U32,
    "continuation": "boolean", "delivery_tag": "category", "message_format": _U32, "settled": "boolean",
    "more": "boolean", "aborted": "boolean", "resume": "boolean", "batchable": "boolean", "role": "category",
    "first": _U32, "last": _U32, "state": "category", "delivery_failed": "boolean",
    "undeliverable_here": "boolean", "next_incoming_id": _U32, "incoming_window": _U32,
    "next_outgoing_id": _U32, "outgoing_window": _U32, "handle_max": _U32, "delivery_count": _U32,
    "link_credit": _U32, "available": _U32, "drain": "boolean", "echo": "boolean", "name": "category",
    "source_address": "category", "target_address": "category", "snd_settle_mode": "category",
    "rcv_settle_mode": "category", "initial_delivery_count": _U32, "max_message_size": "UInt64",
    "closed": "boolean", "error_condition": "category", "error_description": "category",
    "container_id": "category", "hostname": "category", "max_frame_size": _U32, "channel_max": "Int32",
    "idle_timeout_ms": _U32, "mechanisms": "category", "mechanism": "category", "sasl_outcome": "category",
    "payload_bytes": "Int64", "message_bytes": "Int64", "durable": "boolean", "first_acquirer": "boolean",
    "priority": "UInt8", "ttl_ms": _U32, "header_delivery_count": _U32, "message_id": "category",
    "correlation_id": "category", "to": "category", "subject": "category", "reply_to": "category",
    "content_type": "category",
}


def table(rows: list[dict] | pd.DataFrame) -> pd.DataFrame:
    """Rows (dicts of some columns; the rest null) as an `amqp10_frames` table, every column typed."""
    df = pd.DataFrame(rows) if not isinstance(rows, pd.DataFrame) else rows
    if "packet" in df and "first_packet" not in df:  # (a frame within one packet)
        df = df.assign(first_packet=df["packet"])
    out = {}
    for col, dtype in DTYPES.items():
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


EMPTY = table([])


def amqp10_frames(cap: Capture) -> pd.DataFrame:
    """The capture's `amqp10_frames`, or an empty table of its columns when it has none.

    Read with getattr until the core's table reaches this branch (issue 50): a capture loaded by a
    core without it has no such attribute."""
    f = getattr(cap, "amqp10_frames", None)
    return EMPTY if f is None else f
