"""`amqpcap info`: what a capture holds: its connections, consumers and what was not decoded."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

from rich.console import Group
from rich.table import Table

from ..model.wording import counted, frames_counted
from .app import app
from .consoles import out
from .loading import _load
from .options import (
    AddPortOpt, AllConnectionsOpt, CapturesArg, INFO_CONNECTIONS, KeylogOpt, LimitOpt, PortOpt, StrictOpt)

if TYPE_CHECKING:
    from ..io.load import Capture


def _fmt_ts(ts) -> str:
    from ..model.written_values import iso_utc

    return "" if ts is None else iso_utc(ts)


@app.command()
def info(capture: List[str] = CapturesArg, port: Optional[List[int]] = PortOpt, limit: Optional[List[str]] = LimitOpt,
         tls_keylog: Optional[Path] = KeylogOpt, all_connections: bool = AllConnectionsOpt,
         add_port: Optional[List[int]] = AddPortOpt, strict: bool = StrictOpt) -> None:
    """Print the capture summary, the AMQP connections (name, client, user@vhost, role) and the consumers in it."""
    cap = _load(capture, port, limit, tls_keylog=tls_keylog, add_port=add_port, strict=strict)
    s = cap.summary
    head = Table(show_header=False, box=None, pad_edge=False)
    head.add_column(style="bold", no_wrap=True)
    head.add_column(overflow="fold")  # (a path without spaces longer than the console folds, never cut)
    duration = (s["last_ts"] - s["first_ts"]).total_seconds() if s["first_ts"] is not None else 0.0
    head.add_row("file", f"{s['path']} ({s['file_bytes']:,} bytes, {s['format']}{', gzip' if s['compressed'] else ''})")
    if len(s["files"]) > 1:
        read = [f for f in s["files"] if f["error"] is None]
        head.add_row("files", f"{len(read):,} read as one capture, merged by time ({read[0]['name']} … {read[-1]['name']})"
                     + (f"; {len(s['files']) - len(read):,} skipped" if len(read) < len(s["files"]) else ""))
    head.add_row("link types", ", ".join(s["link_types"]))
    head.add_row("packets", f"{s['packets']:,} ({s['tcp_packets']:,} TCP, {len(cap.packets):,} in AMQP connections)")
    if s["first_ts"] is not None:
        head.add_row("time", f"{_fmt_ts(s['first_ts'])} → {_fmt_ts(s['last_ts'])} ({duration:.3f} s)")
    head.add_row("AMQP", f"{counted(len(cap.connections), 'connection')}, {_frames_words(cap)}")
    brokers = sorted({_endpoint(a, p) for a, p in zip(cap.connections["broker_addr"], cap.connections["broker_port"])})
    if brokers:
        head.add_row("broker" if len(brokers) == 1 else "brokers", ", ".join(brokers))
    head.add_row("anomalies", f"{len(cap.anomalies)}" + (f" ({_kinds(cap)})" if len(cap.anomalies) else ""))
    out.print(head)

    if len(cap.connections):
        out.print(_connections_table(cap, all_connections))
        consumers = _consumers_table(cap, all_connections)
        if consumers is not None:
            out.print(consumers)
        for title, kind, column in (("Methods", "method", cap.frames["method"]),
                                    ("AMQP 1.0 performatives", "performative", cap.amqp10_frames["performative"])):
            counts = _counts_table(title, kind, column)
            if counts is not None:
                out.print(counts)


def _frames_words(cap: Capture) -> str:
    """The capture's frames, each protocol's when it has AMQP 1.0 ones ("104 AMQP 0-9-1 frames,
    84 AMQP 1.0 frames"): one count is not both protocols' sum."""
    from ..derive.tally import amqp10_frame_count, frame_count

    return frames_counted({"frames": frame_count(cap), "amqp10_frames": amqp10_frame_count(cap)})


def _counts_table(title: str, kind: str, column) -> Optional[Table]:
    """Frames per value of `column` (a method, a performative), most first; None when it has none."""
    counts = column.value_counts()
    counts = counts[counts > 0]
    if not len(counts):
        return None
    t = Table(title=title, title_justify="left")
    t.add_column(kind)
    t.add_column("frames", justify="right")
    for name, n in counts.items():
        t.add_row(str(name), f"{n:,}")
    return t


#: what the line under a table of `info` says of the columns it left out to fit
_WHOLE = "a wider terminal (COLUMNS=N) shows them"


def _connections_table(cap: Capture, all_connections: bool) -> Group:
    """The connections as the operator knows them (amqpcap.derive.names): label, client library and
    version, user@vhost and role first; addresses, the stream (Wireshark's tcp.stream), packets
    and frames after; missing bytes and anomalies only when the capture has any. As many as fit
    the console whole (`amqpcap.report.console.fitted_table`): the label and the stream always, a label
    longer than the console folds onto several lines rather than being cut."""
    from ..derive.names import connection_names, connection_roles
    from ..report.console import fitted_table, left_out_note

    shown = _connections_shown(cap.connections, all_connections)
    more = len(cap.connections) - len(shown)
    names, roles = connection_names(cap), connection_roles(cap)
    damaged = bool(len(cap.anomalies)) or bool(cap.connections["bytes_missing"].sum())
    # one broker address for all (the usual case) is said once, above the table
    one_broker = names["broker_endpoint"].nunique() == 1
    cols = ["connection", "client", "user@vhost", "role", "address" if one_broker else "client → broker", "stream",
            "packets", "frames"] + (["anomalies"] if damaged else [])
    columns = [(col, dict(justify="right" if col in ("stream", "packets", "frames", "anomalies") else "left",
                          overflow="fold")) for col in cols]
    rows = []
    for r in shown.itertuples(index=False):
        n = names.loc[r.stream]
        library = " ".join(x for x in (r.client_product, r.client_version) if isinstance(x, str))
        client = library or ("(TLS, encrypted)" if r.tls and not r.tls_decrypted
                             else "(AMQP 1.0)" if r.protocol == "1.0"
                             else "(capture started mid-connection)" if not r.protocol_header_seen else "")
        row = [n["connection"], client, "@".join(x for x in (n["user"], n["vhost"]) if x), roles.loc[r.stream],
               n["client_endpoint"] if one_broker else f"{n['client_endpoint']} → {n['broker_endpoint']}",
               str(r.stream), f"{r.c2s_packets + r.s2c_packets:,}", f"{r.frames:,}"]
        if damaged:
            row.append(str(r.anomalies))
        rows.append(row)
    t, fitted = fitted_table(out, lambda: Table(title_justify="left", caption_justify="left"), columns, rows,
                             keep=[cols.index("connection"), cols.index("stream")])
    t.title = "AMQP connections" + (f" (the {len(shown)} with the most packets)" if more else "")
    t.caption = f"… and {counted(more, 'more connection')}: --all lists every one" if more else None
    note = left_out_note(cols, fitted, out, _WHOLE)
    return Group(t, *([note] if note else []))


def _consumers_table(cap: Capture, all_connections: bool) -> Optional[Group]:
    """The consumers (queue, connection, prefetch, consumer tag), at most INFO_CONNECTIONS rows
    unless --all, as many columns as fit (the queue and the connection always); None when the
    capture shows none."""
    from ..analyzers.consumers import consumer_list
    from ..report.console import fitted_table, left_out_note

    c = consumer_list(cap)
    if not len(c):
        return None
    shown = c if all_connections else c.head(INFO_CONNECTIONS)
    more = len(c) - len(shown)
    cols = ["queue", "connection", "prefetch", "consumer tag", "stream", "channel"]
    columns = [(col, dict(justify="right" if col in ("prefetch", "stream", "channel") else "left", overflow="fold"))
               for col in cols]
    rows = [["?" if _isna(r.queue) else str(r.queue), r.connection, _prefetch_text(r), str(r.consumer_tag),
             str(r.stream), str(r.channel)] for r in shown.itertuples(index=False)]
    # the consumer tag (the broker's random amq.ctag, mostly) only when all else fits
    t, fitted = fitted_table(out, lambda: Table(title_justify="left", caption_justify="left"), columns, rows,
                             keep=[0, 1], then=[2, 4, 5, 3])
    t.title = "Consumers" + (f" (the first {len(shown)})" if more else "")
    t.caption = f"… and {counted(more, 'more consumer')}: --all lists every one" if more else None
    note = left_out_note(cols, fitted, out, _WHOLE)
    return Group(t, *([note] if note else []))


def _prefetch_text(r) -> str:
    """A consumer's prefetch as `info` shows it: the count, `unlimited`, `no-ack`, `N (channel)`
    for a global qos, `?` when its basic.consume is not in the capture."""
    if not r.consume_seen:
        return "?"
    if r.no_ack:
        return "no-ack"
    per = "unlimited" if r.prefetch == 0 else str(r.prefetch)
    if _isna(r.channel_prefetch):
        return per
    return f"{r.channel_prefetch} (channel)" if r.prefetch == 0 else f"{per}, {r.channel_prefetch} (channel)"


def _connections_shown(connections, all_connections: bool):
    """The connections `info` lists: all of them, or the INFO_CONNECTIONS with the most packets
    (ties: the lower stream), in stream order."""
    if all_connections or len(connections) <= INFO_CONNECTIONS:
        return connections
    packets = connections["c2s_packets"] + connections["s2c_packets"]
    busiest = packets.sort_values(ascending=False, kind="mergesort").index[:INFO_CONNECTIONS]
    return connections.loc[sorted(busiest)]


def _isna(v) -> bool:
    import pandas as pd

    return bool(pd.isna(v))


def _endpoint(addr: str, port: int) -> str:
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def _kinds(cap: Capture) -> str:
    counts = cap.anomalies["kind"].value_counts()
    return ", ".join(f"{k} {n}" for k, n in counts.items() if n)
