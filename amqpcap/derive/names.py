"""Who is who: connections and consumers named the way an operator knows them.

A RabbitMQ operator knows a connection by the name its client gave it (the `connection_name`
client property, shown in the management UI and `rabbitmqctl list_connections name`), else by
the client library, user and address; a consumer by its queue and connection. Findings, `info`,
the report and the tables take their names from here, one rule for all of them; stream and
packet numbers stay beside the names as the way into Wireshark.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any, Callable, NamedTuple

import numpy as np
import pandas as pd

from ..io.load import Capture
from . import CAPTURE, CONNECTION, derivation


def endpoint(addr: str, port: int) -> str:
    """`10.0.0.1:5672`, `[::1]:5672`."""
    return f"[{addr}]:{port}" if ":" in str(addr) else f"{addr}:{port}"


def _text(v) -> str:
    return "" if v is None or (not isinstance(v, str) and pd.isna(v)) else str(v)


def client_library(product, version, platform) -> str:
    """`RabbitMQ 5.23.0 (Java)`, `Pika Python Client Library 1.3.2 (Python 3.11.2)`; "" when the
    capture has no connection.start-ok (it started mid-connection)."""
    name = " ".join(x for x in (_text(product), _text(version)) if x)
    platform = _text(platform)
    return f"{name} ({platform})" if name and platform else name or platform


@derivation(CAPTURE)  # (labels shared by connections are told apart)
def connection_names(cap: Capture) -> pd.DataFrame:
    """One row per connection, indexed by stream: ``connection`` (the label to show: its
    connection_name, else "client library version, user@vhost, address", else the client address),
    ``connection_name``, ``client`` (library, version, platform), ``user``, ``vhost``, ``client``
    and ``broker`` addresses, ``application`` (what the connection belongs to: the label without
    the client's port, so that the connections of one process share it). A label shared by several
    connections (one application opening several with the same name) gets its stream number
    appended, so labels stay unique."""
    c = cap.connections
    # Column by column, not a dict per row: a hostile capture has a quarter million connections.
    cols: dict[str, list] = {k: [] for k in ("connection", "connection_name", "client", "user", "vhost",
                                             "client_endpoint", "broker_endpoint", "application")}
    fields = ("connection_name", "user", "vhost", "client_product", "client_version", "client_platform",
              "client_addr", "client_port", "broker_addr", "broker_port")
    # (rows as plain tuples: iterating the frame's rows costs 40 µs each through Arrow-backed text)
    Row = namedtuple("Row", fields)
    for r in map(Row._make, zip(*(c[f].astype(object).tolist() for f in fields))):  # one row per connection
        name, user, vhost = _text(r.connection_name), _text(r.user), _text(r.vhost)
        client = client_library(r.client_product, r.client_version, r.client_platform)
        src = endpoint(r.client_addr, r.client_port)
        if name:
            label = app = name
        elif client or user:  # the library without its platform: a label, not the whole record
            lib = " ".join(x for x in (_text(r.client_product), _text(r.client_version)) if x)
            who = f"{user}@{vhost}" if user and vhost else user
            label = ", ".join(x for x in (lib, who, src) if x)
            app = ", ".join(x for x in (lib, who, _text(r.client_addr)) if x)
        else:
            label, app = src, _text(r.client_addr)
        for k, v in (("connection", label), ("connection_name", name), ("client", client), ("user", user),
                     ("vhost", vhost), ("client_endpoint", src),
                     ("broker_endpoint", endpoint(r.broker_addr, r.broker_port)), ("application", app)):
            cols[k].append(v)
    streams = c["stream"].to_numpy("int64")
    out = pd.DataFrame({"stream": streams, **cols}, index=pd.Index(streams, name="stream"))
    dup = out["connection"].duplicated(keep=False)
    if dup.any():  # (never for no connection: an empty column has no text type to add to)
        out.loc[dup, "connection"] = out.loc[dup, "connection"] + " (stream " + out.loc[dup, "stream"].astype(str) + ")"
    return out


@derivation(CAPTURE)
def _labels_by_stream(cap: Capture) -> dict[int, str]:
    """`connection_names`' labels as a dict (a finding may name tens of thousands of subjects)."""
    names = connection_names(cap)
    return dict(zip(names.index.tolist(), map(str, names["connection"].tolist())))


def connection_label(cap: Capture, stream: int) -> str:
    """The label of one connection (see `connection_names`); `stream N` for an unknown stream."""
    return _label(_labels_by_stream(cap), stream)


def _label(labels: dict[int, str], stream: int) -> str:
    return labels.get(int(stream), f"stream {int(stream)}")


def consumer_label(cap: Capture, stream: int, queue, consumer_tag=None) -> str:
    """A consumer as the operator knows it: `queue orders on perf-test-consumer-0`. The consumer
    tag only when the queue is unknown (a capture started after basic.consume): server-generated
    tags (`amq.ctag-…`) mean nothing to a person."""
    q = _text(queue)
    who = connection_label(cap, stream)
    if q:
        return f"queue {q} on {who}"
    tag = _text(consumer_tag)
    return f"consumer {tag} on {who}" if tag else who


def number(v) -> float | None:
    """A subject's (or evidence's) number as JSON holds it: a float, None where it is missing."""
    return None if v is None or pd.isna(v) else float(v)


def subject(cap: Capture, stream: int, **more) -> dict:
    """A finding's subject: the connection's label first, its stream (for Wireshark), then the
    numbers given. Findings list their subjects worst first (docs/findings.md)."""
    return subject_namer(cap)(stream, **more)


def subject_namer(cap: Capture) -> Callable[..., dict]:
    """`subject` for a finding's many subjects: the labels fetched once (a finding may name a
    subject per connection: 283,770 at 100M packets, each lookup of the shared labels taking
    its lock)."""
    labels = _labels_by_stream(cap)

    def subject_of(stream: int, **more) -> dict:
        return {"connection": _label(labels, stream), "stream": int(stream), **more}

    return subject_of


class WorstFirst(NamedTuple):
    """A finding told of the rows of a table, worst first (`worst_first`)."""

    #: the first row, whose numbers the title and the evidence give
    worst: pd.Series
    #: how many rows: the finding's subjects
    n: int
    #: a subject per row, in the rows' order
    subjects: list[dict]


def worst_first(cap: Capture, rows: pd.DataFrame, numbers: Callable[[Any], dict]) -> WorstFirst:
    """What every finding over a table's rows (sorted worst first) starts from: the worst row, how
    many, and each row's subject, its connection named (`subject`) and then `numbers(row)` (the
    row as a named tuple, its columns by name)."""
    subject_of = subject_namer(cap)
    return WorstFirst(rows.iloc[0], len(rows), [subject_of(r.stream, **numbers(r)) for r in rows.itertuples()])


def worst_title(n: int, one: str, many: str, worst: str, numbers: str) -> str:
    """A finding's title over `n` subjects: `{one}: {numbers}` for one; `{many}: worst {worst},
    {numbers}` for several, `numbers` being the worst one's."""
    return f"{one}: {numbers}" if n == 1 else f"{many}: worst {worst}, {numbers}"


#: (method, direction) frames that make a connection a publisher / a consumer (`connection_roles`)
PUBLISHING = (("basic.publish", "c2s"),)
CONSUMING = (("basic.deliver", "s2c"), ("basic.get", "c2s"), ("basic.get-ok", "s2c"))


@derivation(CONNECTION)
def connection_roles(cap: Capture) -> pd.Series:
    """What each connection did (index: stream), from its frames: ``publisher`` (the client sent
    basic.publish), ``consumer`` (the broker sent it basic.deliver, or it asked basic.get),
    ``both``, ``idle`` (neither: a connection that only declared things or sent heartbeats,
    such as PerfTest's configuration connection), or ``amqp-1.0`` (its frames are AMQP 1.0's,
    which no analyzer reads yet)."""
    return roles_of(role_flags(cap))


def role_flags(cap: Capture) -> pd.DataFrame:
    """Per connection (index: stream), whether its frames publish and whether they consume
    (`PUBLISHING`, `CONSUMING`), and whether it speaks AMQP 1.0: what `connection_roles` names,
    OR-ed over slices of a connection's time (`amqpcap.derive.tally`)."""
    f = cap.frames
    streams = cap.connections["stream"].to_numpy("int64")

    def streams_with(pairs) -> pd.Series:
        mask = pd.Series(False, index=f.index)
        for method, direction in pairs:
            mask |= (f["method"] == method) & (f["direction"] == direction)
        return pd.Series(streams, index=streams).isin(f.loc[mask.to_numpy(bool), "stream"].unique())

    return pd.DataFrame({"publishes": streams_with(PUBLISHING), "consumes": streams_with(CONSUMING),
                         "amqp10": pd.Series(speaks_amqp10(cap.connections), index=streams)})


def speaks_amqp10(connections: pd.DataFrame) -> np.ndarray:
    """Which of `connections` (rows of the `connections` table) speak AMQP 1.0: a mask."""
    return (connections["protocol"] == "1.0").to_numpy(bool, na_value=False)


def amqp091_rows(cap: Capture, rows: pd.DataFrame) -> pd.DataFrame:
    """`rows` (with a `stream` column) less those of AMQP 1.0 connections: a per-connection table
    of an analyzer that reads AMQP 0-9-1 methods only has nothing true to say of them (its
    counts would read 0 where the connection's 1.0 transfers moved messages)."""
    c = cap.connections
    amqp10 = c["stream"].to_numpy(np.int64)[speaks_amqp10(c)]
    if not len(amqp10):
        return rows
    return rows[~np.isin(rows["stream"].to_numpy(np.int64), amqp10)].reset_index(drop=True)


def roles_of(flags: pd.DataFrame) -> pd.Series:
    """`connection_roles` from their `role_flags`."""
    pub, con = flags["publishes"], flags["consumes"]
    role = pd.Series("idle", index=pd.Index(flags.index.to_numpy("int64"), name="stream"), dtype=object)
    role[(pub & ~con).to_numpy(bool)] = "publisher"
    role[(con & ~pub).to_numpy(bool)] = "consumer"
    role[(pub & con).to_numpy(bool)] = "both"
    role[flags["amqp10"].to_numpy(bool)] = "amqp-1.0"
    return role


def consumer_labels(cap, stream, channel, queue, tag) -> tuple[list[str], str | None]:
    """Labels for plot rows of consumers (one per element of the arrays given) and the queue
    they all consume from, if one: then each row is named by its connection alone (the queue
    goes in the title), else as `names.consumer_label` names it. A connection with several
    consumers gets the channel appended."""
    stream, channel = np.asarray(stream, np.int64), np.asarray(channel, np.int64)
    queue = ["" if q is None or (not isinstance(q, str) and q != q) else str(q) for q in queue]
    common = queue[0] if len(set(queue)) == 1 and queue[0] else None
    if common is None:
        labels = [consumer_label(cap, s, q or None, t) for s, q, t in zip(stream.tolist(), queue, tag)]
    else:
        labels = [connection_label(cap, s) for s in stream.tolist()]
    which = np.unique(stream, return_inverse=True)[1].ravel()
    several = np.bincount(which)[which] > 1 if len(stream) else np.zeros(0, bool)
    labels = [f"{lab} ch{c}" if many else lab for lab, c, many in zip(labels, channel.tolist(), several)]
    return labels, common
