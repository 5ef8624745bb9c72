"""Command line: one subcommand per question (`amqpcap --help`).

Every error the user can cause prints one line on stderr and exits nonzero; a traceback is
shown only with AMQPCAP_DEBUG=1.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

import typer
from rich.console import Console
from rich.table import Table
from typer.core import TyperGroup

from . import __version__
from .analyzers import names as analyzer_names
from .errors import AmqpcapError, NoAmqpError, UsageError
from .inputs import IN_MEMORY_MAX_BYTES
from .sample import sample_path
from .wording import counted

if TYPE_CHECKING:
    import pandas as pd

    from .capture import Capture, Limits


class _Commands(TyperGroup):
    """The subcommands; an analyzer's is made when it is run or listed (`amqpcap --help`), not
    when the command line starts: the analyzers import pandas and numpy (0.4 s) that `amqpcap
    frames`, `ingest` and `--version` do without. Listed after the others, by name."""

    def list_commands(self, ctx) -> list[str]:
        names = analyzer_names()
        return [*(n for n in super().list_commands(ctx) if n not in names), *names]

    def get_command(self, ctx, cmd_name: str):
        if cmd_name not in self.commands and cmd_name in analyzer_names():
            self.commands[cmd_name] = _analyzer_click_command(cmd_name)
        return super().get_command(ctx, cmd_name)

    def resolve_command(self, ctx, args: list[str]):
        if args and args[0] not in self.commands and args[0] not in analyzer_names():
            for name in analyzer_names():  # (a name not known: its "did you mean" looks among them all)
                self.get_command(ctx, name)
        return super().resolve_command(ctx, args)


app = typer.Typer(
    cls=_Commands,
    name="amqpcap",
    help="AMQP 0-9-1 traffic analysis from pcap/pcapng captures.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console()
if not out.is_terminal:
    out.width = 120  # files and pipes: don't squeeze tables into 80 columns
err = Console(stderr=True)

CaptureArg = typer.Argument(..., metavar="CAPTURE", help="pcap or pcapng file, optionally gzip-compressed", show_default=False)
CapturesArg = typer.Argument(
    ..., metavar="CAPTURE...", show_default=False,
    help="pcap or pcapng files, optionally gzip-compressed; several files, a glob or a directory (a tcpdump ring) "
         "are read as one capture, merged by time as mergecap merges them; or a dataset written by `amqpcap ingest` "
         "(its directory, or an fsspec URL such as s3://bucket/ring.dataset)")
StrictOpt = typer.Option(False, "--strict", help="stop at a file of the set that cannot be read (default: skip it with a warning)")
PortOpt = typer.Option(
    None, "--port", "-p", metavar="PORT",
    help="AMQP port, replacing the defaults 5672 and 5671 (AMQPS) (repeat for several; --add-port keeps them)")
AddPortOpt = typer.Option(
    None, "--add-port", metavar="PORT",
    help="AMQP port in addition to the defaults 5672 and 5671 (or to --port) (repeat for several)")
KeylogOpt = typer.Option(None, "--tls-keylog", metavar="FILE",
                         help="TLS key log (NSS format, e.g. Python's SSLContext.keylog_filename) to decrypt AMQPS with tshark")
LimitOpt = typer.Option(
    None, "--limit", metavar="NAME=VALUE",
    help="set a resource cap, e.g. max_streams=5000 or max_frames=50M (K/M/G: ×1024ⁿ; repeat for "
         "several; names and defaults: docs/tables.md, Resource caps)")
#: byte counts of these anomaly kinds are stream bytes not decoded (skipped or missing)
_BYTE_KINDS = {"capture-gap", "truncated-packet", "reassembly-overflow", "resync-skipped", "incomplete-frame",
               "frame-limit", "out-of-window", "tls-encrypted"}
_SUFFIX = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
#: `info` lists at most this many connections unless --all: a capture of many short connections
#: would otherwise print thousands of rows (and rich takes ~1.5 s to lay out 1,100 of them).
INFO_CONNECTIONS = 20
AllConnectionsOpt = typer.Option(
    False, "--all", help=f"list every AMQP connection and consumer (default: the {INFO_CONNECTIONS} connections with "
                         f"the most packets and the first {INFO_CONNECTIONS} consumers)")


def parse_limits(items: Optional[List[str]]) -> Optional[Limits]:
    """`--limit NAME=VALUE` options as amqpcap.Limits (None when there are none)."""
    if not items:
        return None
    from .capture import Limits

    names = list(Limits.__dataclass_fields__)
    given = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in names:
            raise UsageError(f"--limit {item!r}: expected NAME=VALUE with NAME one of {', '.join(names)}")
        v = value.strip().replace("_", "").lower()
        scale = _SUFFIX.get(v[-1:], 1)
        if scale > 1:
            v = v[:-1]
        if not v.isdigit():
            raise UsageError(f"--limit {item!r}: the value must be a whole number, optionally with K, M or G")
        given[name] = int(v) * scale
    return Limits(**given)


def _check_outputs(fmt: str, out_dir: Optional[Path]) -> None:
    """Output options are checked before the capture is read: a format that cannot be written
    or a directory that cannot be made fails at once, never after the work or half-way through
    writing."""
    from .report import check_format, check_out_dir

    check_format(fmt)
    if out_dir is not None:
        check_out_dir(out_dir)


def _warn(text: str) -> None:
    err.print("[yellow]warning:[/yellow] ", end="", highlight=False)
    err.print(text, highlight=False, markup=False, soft_wrap=True)


def anomaly_warning(a: pd.DataFrame) -> Optional[str]:
    """One line saying what was not decoded (the anomalies table by kind), or None."""
    if not len(a):
        return None
    kinds = a["kind"].astype(str)
    parts = []
    for kind, rows in a.groupby(kinds, sort=False):
        text = f"{kind} {len(rows):,}"
        if kind in _BYTE_KINDS and rows["bytes"].sum():
            text += f" ({int(rows['bytes'].sum()):,} bytes)"
        elif rows["stream"].isna().all() and len(rows) <= 2 and kind != "capture-truncated":  # that one has its own warning
            text += " (" + "; ".join(str(d) for d in rows["detail"]) + ")"
        parts.append(text)
    return (f"not everything in the capture was decoded ({len(a):,} row{'s' if len(a) > 1 else ''} in the anomalies "
            f"table): " + ", ".join(parts))


def ports_of(port: Optional[List[int]], add_port: Optional[List[int]] = None) -> tuple[int, ...]:
    """The AMQP ports: --port replaces the defaults, --add-port adds to them (or to --port)."""
    from .capture import DEFAULT_PORTS

    return tuple(dict.fromkeys([*(port or DEFAULT_PORTS), *(add_port or [])]))


SchedulerOpt = typer.Option(
    None, "--scheduler", metavar="ADDRESS",
    help="analyse on Dask: the scheduler's address (tcp://HOST:PORT; for a dataset, which the workers must see at "
         "the same path or read from the same URL), or `local` for a cluster of this machine's cores (a capture "
         "file goes through a temporary dataset)")
IngestSchedulerOpt = typer.Option(
    None, "--scheduler", metavar="ADDRESS",
    help="decode the buckets on Dask: the scheduler's address (tcp://HOST:PORT; the workers must see the "
         "dataset directory at the same path), or `local` for a cluster of this machine's cores")
WorkersOpt = typer.Option(None, "--workers", min=1, max=256,
                          help="with --scheduler local: worker processes (default: one per core)")
SlicePacketsOpt = typer.Option(
    None, "--slice-packets", min=1, metavar="N",
    help="on Dask: a bucket of more than N packets is analysed in slices of its time of about N packets, one after "
         "the other (default: as many as half a worker's memory limit holds, about 1.6 KB a packet)")


def _load(capture: List[str], port: Optional[List[int]], limit: Optional[List[str]] = None, bodies: bool = False,
          tls_keylog: Optional[Path] = None, add_port: Optional[List[int]] = None, strict: bool = False,
          arrow: bool = False, frames_sink=None):
    """The capture, loaded (a `Capture`), its warnings told; with ``arrow``, a capture file's
    tables are left in Arrow as the core made them (`amqpcap.capture.decode_arrow`: a
    `Decoded`, its frames given to ``frames_sink`` when given, in Parquet row groups' batches),
    for a command that only writes them."""
    from .dataset import is_dataset

    capture = _one_name(capture)
    arrow = arrow and (isinstance(capture, list) or not is_dataset(capture))  # a dataset is read back whole
    with _reading_progress() as progress:
        args = dict(ports=ports_of(port, add_port), limits=parse_limits(limit), bodies=bodies, tls_keylog=tls_keylog,
                    strict=strict, progress=progress)
        if arrow:
            from .capture import decode_arrow

            from .report import PARQUET_ROW_GROUP_ROWS

            cap = decode_arrow(capture, frames_sink=frames_sink, frames_batch_rows=PARQUET_ROW_GROUP_ROWS, **args)
        else:
            from .capture import load

            cap = load(capture, **args)
    for w in cap.summary.get("warnings", []):
        _warn(w)
    anomalies = cap.anomaly_rows() if arrow else cap.anomalies
    w = anomaly_warning(anomalies)
    if w:
        _warn(w)
    return cap


def _load_outline(path: Path | str):
    """A dataset's outline (`amqpcap.dataset.read_outline`: its connections, anomalies and
    summary), its warnings told as `_load` tells them."""
    from .dataset import read_outline

    cap = read_outline(path)
    for w in cap.summary.get("warnings", []):
        _warn(w)
    w = anomaly_warning(cap.anomalies)
    if w:
        _warn(w)
    return cap


def _one_name(capture: List[str]) -> Path | str | List[Path | str]:
    """One name (a file, a directory, a glob, a dataset's path or URL) names the capture;
    several are a set. Paths are Paths; a URL (a dataset read through fsspec) stays text."""
    from .dataset import is_url

    names = [c if is_url(c) else Path(c) for c in capture]
    return names[0] if len(names) == 1 else names


@contextmanager
def _reading_progress():
    """On a terminal: a progress bar on stderr while the capture is read (bytes of bytes,
    packets/s, time left), gone when reading ends; elsewhere nothing (None)."""
    if not err.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(TextColumn("reading"), BarColumn(), DownloadColumn(), TextColumn("{task.fields[rate]}"),
                   TimeRemainingColumn(), console=err, transient=True)
    task = bar.add_task("reading", total=None, rate="")
    started = time.monotonic()

    def update(done: int, total: int, packets: int) -> None:
        rate = packets / max(time.monotonic() - started, 1e-3)
        bar.update(task, completed=done, total=total or None, rate=f"{rate / 1e6:.2f}M packets/s")

    with bar:
        yield update


@contextmanager
def _analyzing_progress(label: str = "analysing"):
    """On a terminal: which analyzers (or tasks) have run, or which files are written (a
    transient bar on stderr); else None."""
    if not err.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                   TimeElapsedColumn(), console=err, transient=True)
    task = bar.add_task("", total=None)

    def update(name: str, done: int, total: int) -> None:
        bar.update(task, completed=done, total=total, description=f"{name} done")

    with bar:
        yield update


def require_amqp(cap) -> None:
    """A capture (a `Capture`, or a `Decoded` one) with no AMQP connection has nothing to
    analyse: say why in one line and exit 3 (NoAmqpError) instead of "No findings", which reads
    like a healthy capture."""
    if len(cap.connections):
        return
    s = cap.summary
    name = os.path.basename(getattr(cap, "path", None) or s["path"])
    if not s["packets"]:
        raise NoAmqpError(f"no AMQP connection in {name}: it holds no packets")
    if not s["tcp_packets"]:
        raise NoAmqpError(f"no AMQP connection in {name}: none of its {counted(s['packets'], 'packet')} is TCP")
    ports = " or ".join(map(str, cap.ports))
    raise NoAmqpError(
        f"no AMQP connection in {name}: none of its {counted(s['tcp_packets'], 'TCP packet')} is on port {ports} "
        f"or in a connection opened with the AMQP protocol header; if the broker listens on another port, "
        f"add it: --add-port PORT")


def undecoded_note(cap: Capture) -> Optional[str]:
    """When AMQP connections were found but no frame was decoded in any (all encrypted, cut by
    the snaplen, another protocol), only TCP was analysed: say so next to the findings."""
    from .tally import frame_count

    if frame_count(cap) or not len(cap.connections):
        return None
    c, n = cap.connections, len(cap.connections)
    if (c["protocol"] == "1.0").all():
        return (f"The {'connection speaks' if n == 1 else f'{n:,} connections speak'} AMQP 1.0, which amqpcap "
                "frames but does not analyse yet, so only TCP was analysed.")
    encrypted = int((c["tls"] & ~c["tls_decrypted"]).sum()) if "tls" in c else 0
    why = (f"encrypted with TLS: --tls-keylog FILE decrypts {'it' if n == 1 else 'them'}" if encrypted == n
           else "see the warnings above")
    return f"No AMQP frame was decoded in {counted(n, 'AMQP connection')} ({why}), so only TCP was analysed."


def _refuse_unless_amqp(cap, written: Path) -> None:
    """`require_amqp`, the file `written` from the capture removed when it fails."""
    try:
        require_amqp(cap)
    except NoAmqpError:
        written.unlink(missing_ok=True)
        raise


def _capture_line(cap: Capture) -> str:
    from .report import capture_summary

    c = capture_summary(cap)
    return (f"[bold]{c['path']}[/bold]: {counted(c['packets'], 'packet')}, "
            f"{counted(c['connections'], 'AMQP connection')}, {counted(c['frames'], 'frame')} "
            f"over {c['duration_s']:.3f} s")


@app.command()
def frames(
    capture: List[str] = CapturesArg,
    output: Path = typer.Option(..., "--output", "-o", help="output file: .csv or .parquet"),
    port: Optional[List[int]] = PortOpt,
    add_port: Optional[List[int]] = AddPortOpt,
    limit: Optional[List[str]] = LimitOpt,
    tls_keylog: Optional[Path] = KeylogOpt,
    strict: bool = StrictOpt,
) -> None:
    """Write the frames table (one row per AMQP frame) to CSV or Parquet."""
    from .dataset import is_dataset
    from .report import batches_from_sink, check_format, check_out_file, write_arrow_file, write_table_file

    suffix = output.suffix.lower()
    if suffix not in (".csv", ".parquet"):
        raise UsageError(f"cannot write {output}: the output must end in .csv or .parquet")
    check_format(suffix[1:])
    check_out_file(output)
    load = functools.partial(_load, capture, port, limit, tls_keylog=tls_keylog, add_port=add_port, strict=strict)
    fmt = suffix[1:]
    try:
        name = _one_name(capture)
        if tls_keylog is not None or (not isinstance(name, list) and is_dataset(name)):  # (decoded twice; read whole)
            from .capture import Capture

            cap = load(arrow=True)
            require_amqp(cap)
            frames = cap.frames if isinstance(cap, Capture) else cap.tables["frames"]
            rows = (write_table_file if isinstance(cap, Capture) else write_arrow_file)(frames, output, fmt)
        else:
            # the core's frame batches go to the file as they settle, written here while the
            # capture is still decoded, without pandas
            reader, finished = batches_from_sink(lambda sink: load(arrow=True, frames_sink=sink))
            try:
                rows = write_arrow_file(reader, output, fmt)
            finally:
                cap = finished()  # (after a failed write: once the decode has ended, its batches dropped)
            _refuse_unless_amqp(cap, output)
    except OSError as e:
        raise UsageError(f"cannot write {output}: {e.strerror or e}") from None
    err.print(f"{counted(rows, 'frame')} from {counted(len(cap.connections), 'connection')} written to {output}",
              highlight=False)


def _fmt_ts(ts) -> str:
    from .report import iso_utc

    return "" if ts is None else iso_utc(ts)


@app.command()
def info(capture: List[str] = CapturesArg, port: Optional[List[int]] = PortOpt, limit: Optional[List[str]] = LimitOpt,
         tls_keylog: Optional[Path] = KeylogOpt, all_connections: bool = AllConnectionsOpt,
         add_port: Optional[List[int]] = AddPortOpt, strict: bool = StrictOpt) -> None:
    """Print the capture summary, the AMQP connections (name, client, user@vhost, role) and the consumers in it."""
    cap = _load(capture, port, limit, tls_keylog=tls_keylog, add_port=add_port, strict=strict)
    s = cap.summary
    head = Table(show_header=False, box=None, pad_edge=False)
    head.add_column(style="bold")
    head.add_column()
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
    head.add_row("AMQP", f"{len(cap.connections)} connections, {len(cap.frames):,} frames")
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
        methods = cap.frames["method"].value_counts()
        methods = methods[methods > 0]
        if len(methods):
            m = Table(title="Methods", title_justify="left")
            m.add_column("method")
            m.add_column("frames", justify="right")
            for name, n in methods.items():
                m.add_row(str(name), f"{n:,}")
            out.print(m)


def _connections_table(cap: Capture, all_connections: bool) -> Table:
    """The connections as the operator knows them (amqpcap.names): label, client library and
    version, user@vhost and role first; addresses, the stream (Wireshark's tcp.stream), packets
    and frames after; missing bytes and anomalies only when the capture has any. Long names fold
    onto several lines rather than being cut."""
    from .names import connection_names, connection_roles

    shown = _connections_shown(cap.connections, all_connections)
    more = len(cap.connections) - len(shown)
    names, roles = connection_names(cap), connection_roles(cap)
    t = Table(title="AMQP connections" + (f" (the {len(shown)} with the most packets)" if more else ""),
              title_justify="left",
              caption=f"… and {counted(more, 'more connection')}: --all lists every one" if more else None,
              caption_justify="left")
    damaged = bool(len(cap.anomalies)) or bool(cap.connections["bytes_missing"].sum())
    # one broker address for all (the usual case) is said once, above the table
    one_broker = names["broker_endpoint"].nunique() == 1
    cols = ["connection", "client", "user@vhost", "role", "address" if one_broker else "client → broker", "stream",
            "packets", "frames"] + (["anomalies"] if damaged else [])
    for col in cols:
        numeric = col in ("stream", "packets", "frames", "anomalies")
        # rich narrows the widest columns first: a name of a usual length is kept on one line
        whole = (col == "connection" and out.width >= 100
                 and names.loc[shown["stream"], "connection"].str.len().max() <= 32)
        t.add_column(col, justify="right" if numeric else "left", overflow="fold", no_wrap=bool(whole))
    for r in shown.itertuples(index=False):
        n = names.loc[r.stream]
        library = " ".join(x for x in (r.client_product, r.client_version) if isinstance(x, str))
        client = library or ("(TLS, encrypted)" if r.tls and not r.tls_decrypted
                             else "(AMQP 1.0, not analysed)" if r.protocol == "1.0"
                             else "(capture started mid-connection)" if not r.protocol_header_seen else "")
        row = [n["connection"], client, "@".join(x for x in (n["user"], n["vhost"]) if x), roles.loc[r.stream],
               n["client_endpoint"] if one_broker else f"{n['client_endpoint']} → {n['broker_endpoint']}",
               str(r.stream), f"{r.c2s_packets + r.s2c_packets:,}", f"{r.frames:,}"]
        if damaged:
            row.append(str(r.anomalies))
        t.add_row(*row)
    return t


def _consumers_table(cap: Capture, all_connections: bool) -> Optional[Table]:
    """The consumers (queue, connection, prefetch, consumer tag), at most INFO_CONNECTIONS rows
    unless --all; None when the capture shows none."""
    from .analyzers.consumers import consumer_list

    c = consumer_list(cap)
    if not len(c):
        return None
    shown = c if all_connections else c.head(INFO_CONNECTIONS)
    more = len(c) - len(shown)
    t = Table(title="Consumers" + (f" (the first {len(shown)})" if more else ""), title_justify="left",
              caption=f"… and {counted(more, 'more consumer')}: --all lists every one" if more else None,
              caption_justify="left")
    for col in ("queue", "connection", "prefetch", "consumer tag", "stream", "channel"):
        t.add_column(col, justify="right" if col in ("prefetch", "stream", "channel") else "left", overflow="fold")
    for r in shown.itertuples(index=False):
        t.add_row("?" if _isna(r.queue) else str(r.queue), r.connection, _prefetch_text(r), str(r.consumer_tag),
                  str(r.stream), str(r.channel))
    return t


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


OutOpt = typer.Option(None, "--out", "-o", help="directory for tables, plots (and summary.json, report.html)")
RowsOpt = typer.Option(
    0, "--rows", min=0, metavar="N",
    help="also print the first N rows of each of the analyzer's tables (default: its summary numbers and findings only)")
FormatOpt = typer.Option("csv", "--format", help="table format: csv or parquet")
PlotsOpt = typer.Option(True, "--plots/--no-plots", help="draw PNG plots into --out")
BodiesOpt = typer.Option(
    False, "--bodies", help="keep message bodies and write them to --out as the bodies table (off by default: "
                            "bodies may hold personal data; at most max_body_bytes are kept)")


class _Writing:
    """Turns a failure to write into `--out` into one line (exit 64), not an internal error."""

    def __init__(self, where: Path):
        self.where = where

    def __enter__(self):
        return self

    def __exit__(self, kind, e, tb):
        if isinstance(e, OSError):
            raise UsageError(f"cannot write into {self.where}: {e.strerror or e}") from None
        return False


def _no_findings(cap: Capture, names: list[str]) -> str:
    from .render import no_findings_line
    from .tally import packet_count

    return no_findings_line(len(cap.connections), packet_count(cap), names)


def _analyzer_command(name: str, fn, help_text: str):
    def command(capture: List[str] = CapturesArg, port: Optional[List[int]] = PortOpt,
                add_port: Optional[List[int]] = AddPortOpt, out_dir: Optional[Path] = OutOpt,
                fmt: str = FormatOpt, plots: bool = PlotsOpt, rows: int = RowsOpt,
                limit: Optional[List[str]] = LimitOpt, tls_keylog: Optional[Path] = KeylogOpt,
                strict: bool = StrictOpt) -> None:
        from .analysis import rank
        from .render import print_result
        from .report import write_result

        _check_outputs(fmt, out_dir)
        cap = _load(capture, port, limit, tls_keylog=tls_keylog, add_port=add_port, strict=strict)
        require_amqp(cap)
        result = fn(cap)
        result.findings = rank(result.findings)
        out.print(_capture_line(cap), highlight=False)
        print_result(out, result, rows=rows, no_findings=_no_findings(cap, [name]))
        note = undecoded_note(cap)
        if note:
            out.print(note, highlight=False)
        if out_dir is not None:
            with _Writing(out_dir):
                written = write_result(result, out_dir, fmt, plots=plots)
            err.print(f"{len(written)} files written to {out_dir}", highlight=False, soft_wrap=True)

    command.__doc__ = help_text
    return command


InMemoryOpt = typer.Option(False, "--in-memory",
                           help="decode the capture in this process whatever its size (by default one larger than "
                                f"{IN_MEMORY_MAX_BYTES >> 20} MB goes through a temporary dataset on a local Dask cluster)")


@app.command()
def analyze(capture: List[str] = CapturesArg, port: Optional[List[int]] = PortOpt,
            add_port: Optional[List[int]] = AddPortOpt, out_dir: Optional[Path] = OutOpt,
            fmt: str = FormatOpt, plots: bool = PlotsOpt, limit: Optional[List[str]] = LimitOpt,
            bodies: bool = BodiesOpt, tls_keylog: Optional[Path] = KeylogOpt, strict: bool = StrictOpt,
            scheduler: Optional[str] = SchedulerOpt, workers: Optional[int] = WorkersOpt,
            in_memory: bool = InMemoryOpt, slice_packets: Optional[int] = SlicePacketsOpt) -> None:
    """Run every analyzer: findings first (who is to blame, with evidence), then the numbers.

    A capture larger than the in-memory size (--in-memory to decode it in this process anyway)
    is decoded into a temporary dataset and analysed on a local Dask cluster, so that no
    process holds the whole capture; so is a dataset (`amqpcap ingest`) of such a capture,
    without the temporary copy. With --scheduler, on the cluster given."""
    if bodies and out_dir is None:
        raise UsageError("--bodies needs --out DIR: the bodies are written there, never printed")
    _check_outputs(fmt, out_dir)
    if in_memory and scheduler is not None:
        raise UsageError("--in-memory and --scheduler exclude each other")
    dataset_path = _dataset_for(capture, scheduler)
    if dataset_path is None and scheduler is None and not in_memory:
        dataset_path = _large_dataset(capture)
        scheduler = "local" if dataset_path is not None else None
    if dataset_path is not None:
        _analyze_dataset(dataset_path, scheduler, workers, out_dir, fmt, plots, slice_packets=slice_packets)
    elif scheduler is not None or (not in_memory and _is_large(capture)):
        why = ("" if scheduler is not None else
               f"the capture is larger than {IN_MEMORY_MAX_BYTES >> 20} MB (--in-memory: decode it here): ")
        ingest_args = dict(ports=ports_of(port, add_port), limits=parse_limits(limit), bodies=bodies,
                           tls_keylog=tls_keylog, strict=strict)
        with _temporary_directory(why) as tmp:
            _analyze_dataset(tmp / "dataset", "local", workers, out_dir, fmt, plots, ingest=(capture, ingest_args),
                             slice_packets=slice_packets)
    else:
        from .analysis import run_all

        cap = _load(capture, port, limit, bodies=bodies, tls_keylog=tls_keylog, add_port=add_port, strict=strict)
        require_amqp(cap)
        with _analyzing_progress() as progress:
            results = run_all(cap, progress=progress)
        _tell_analysis(cap, results, out_dir, fmt, plots)


def _analyze_dataset(path: Path | str, scheduler: str, workers: Optional[int], out_dir: Optional[Path], fmt: str,
                     plots: bool, ingest: Optional[tuple] = None, slice_packets: Optional[int] = None) -> None:
    """`analyze` of a dataset on Dask: its outline here (`amqpcap.dataset.read_outline`), its
    buckets on the cluster, the capture's own tables written from the dataset bucket by bucket.
    With `ingest` (capture, ingest arguments), the capture is first ingested into `path` on the
    same cluster: this process reads the capture once and spills it, the workers decode it."""
    from .engine import analyze as analyze_on_dask
    from .kept_rows import store
    from .stored_tables import stored_tables

    # the per-message tables stay where the workers made them (`kept`) until they are written,
    # after the cluster is let go; the cluster first: an address that does not answer fails
    # before the dataset is read
    with ExitStack() as stack, _dask_client(scheduler, workers) as client:
        if ingest is not None:
            from .engine import ingest as ingest_on_dask

            with _analyzing_progress("decoding") as progress:
                ingest_on_dask(_one_name(ingest[0]), path, client, progress=progress, **ingest[1])
        cap = _load_outline(path)
        require_amqp(cap)
        rows_at = stack.enter_context(store(path))
        with _analyzing_progress() as progress:
            results = analyze_on_dask(path, cap, client, progress=progress, store=rows_at, slice_packets=slice_packets,
                                      tell=lambda line: err.print(line, highlight=False, soft_wrap=True))
        kept = stack.pop_all()  # (removed after the writing, below)
    with kept:
        base = {"connections": cap.connections, **stored_tables(str(path), ("frames", "packets")),
                "anomalies": cap.anomalies, **stored_tables(str(path), ("records", "bodies"))}
        _tell_analysis(cap, results, out_dir, fmt, plots, base)


def _tell_analysis(cap: Capture, results, out_dir: Optional[Path], fmt: str, plots: bool, base=None) -> None:
    """The findings on stdout, and with --out every output (`amqpcap.report.write_outputs`)."""
    from .analysis import rank
    from .render import findings_table
    from .report import build_summary, write_outputs

    summary = build_summary(cap, results)
    findings = rank([f for r in results for f in r.findings])
    out.print(_capture_line(cap), highlight=False)
    if findings:
        out.print(findings_table(findings))
    else:
        out.print(_no_findings(cap, [r.name for r in results]), highlight=False)
    note = undecoded_note(cap)
    if note:
        out.print(note, highlight=False)
    if out_dir is not None:
        from .partition import release_freed_memory

        # what the analysis freed goes back to the system before the writing allocates its own:
        # kept by the allocators it counted in the peak (million-connections.pcap of the hostile
        # corpus: 904-913 MiB instead of 1013-1025 MiB)
        release_freed_memory()
        with _Writing(out_dir), _analyzing_progress("writing") as progress:
            written = write_outputs(cap, results, summary, out_dir, fmt, plots, base=base, progress=progress)
        err.print(f"{len(written)} files written to {out_dir}", highlight=False, soft_wrap=True)


def _large_dataset(capture: List[str]) -> Optional[Path | str]:
    """The dataset named, when its capture was larger than the in-memory size: analysed on a
    local cluster, as that capture would be."""
    from .dataset import is_dataset, manifest
    from .inputs import too_large_for_memory

    name = _one_name(capture)
    if isinstance(name, list) or not is_dataset(name):
        return None
    return name if too_large_for_memory(manifest(name)["summary"]["file_bytes"]) else None


def _is_large(capture: List[str]) -> bool:
    from .dataset import is_dataset
    from .inputs import is_large

    name = _one_name(capture)
    return not (isinstance(name, (str, Path)) and is_dataset(name)) and is_large(name)


@contextmanager
def _temporary_directory(why: str):
    """A temporary directory for a capture's dataset (removed after; $TMPDIR chooses where),
    for `analyze` on a local cluster. The dataset's warnings are told once, from its outline."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="amqpcap-") as tmp:
        err.print(f"{why}decoding it into a temporary dataset in {tmp}, then analysing it on a local Dask cluster",
                  highlight=False, soft_wrap=True)
        yield Path(tmp)


def _dataset_for(capture: List[str], scheduler: Optional[str]) -> Optional[Path | str]:
    """The dataset (a path, or an fsspec URL) to analyse on Dask when --scheduler is given and
    names one; None for a capture (with --scheduler local: through a temporary dataset)."""
    if scheduler is None:
        return None
    from .dataset import is_dataset

    name = _one_name(capture)
    if not isinstance(name, list) and is_dataset(name):
        return name
    if scheduler != "local":
        raise UsageError("--scheduler ADDRESS analyses a dataset its workers can read: write one first with "
                         "`amqpcap ingest CAPTURE... --out DATASET`, then `amqpcap analyze DATASET --scheduler ...` "
                         "(`--scheduler local` takes a capture through a temporary dataset)")
    return None


@contextmanager
def _dask_client(scheduler: str, workers: Optional[int]):
    """A client of the cluster --scheduler names (`local`: one started for the run); its
    dashboard's link on stderr."""
    from . import engine

    with engine.client(None if scheduler == "local" else scheduler, workers) as client:
        link = getattr(client, "dashboard_link", None)
        if link:
            err.print(f"Dask dashboard: {link}", highlight=False, soft_wrap=True)
        yield client


@app.command()
def ingest(capture: List[str] = CapturesArg,
           out_dir: Path = typer.Option(..., "--out", "-o", metavar="DATASET",
                                        help="the dataset directory to write (new, or empty)"),
           buckets: Optional[int] = typer.Option(
               None, "--buckets", min=1, max=1024,
               help="connection buckets (partitions); default: one per 128 MB of capture"),
           port: Optional[List[int]] = PortOpt, add_port: Optional[List[int]] = AddPortOpt,
           limit: Optional[List[str]] = LimitOpt, bodies: bool = BodiesOpt,
           tls_keylog: Optional[Path] = KeylogOpt, strict: bool = StrictOpt,
           scheduler: Optional[str] = IngestSchedulerOpt, workers: Optional[int] = WorkersOpt) -> None:
    """Decode a capture (one file or a set, e.g. a tcpdump ring) into a Parquet dataset partitioned by connection; every command reads it back.

    The capture is read once: each connection's packets are spilled into its bucket's file
    (inside DATASET while it runs), then each bucket is decoded on its own, so that memory
    holds one bucket's share, not the whole capture; with --scheduler the buckets are decoded
    on Dask workers, side by side."""
    from .dataset import ingest as ingest_dataset

    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise UsageError(f"cannot write the dataset into {out_dir}: it exists and is not an empty directory")
    args = dict(buckets=buckets, ports=ports_of(port, add_port), limits=parse_limits(limit),
                bodies=bodies, tls_keylog=tls_keylog, strict=strict)
    if scheduler is not None:
        from .engine import ingest as ingest_on_dask

        with _dask_client(scheduler, workers) as client, _analyzing_progress("decoding") as progress:
            done = ingest_on_dask(_one_name(capture), out_dir, client, progress=progress, **args)
    else:
        with _reading_progress() as progress:
            done = ingest_dataset(_one_name(capture), out_dir, progress=progress, **args)
    for w in done.summary["warnings"]:
        _warn(w)
    w = anomaly_warning(done.anomalies)
    if w:
        _warn(w)
    err.print(f"{counted(done.summary['packets'], 'packet')} and {counted(done.connections, 'connection')} "
              f"written to the dataset {done.path} in {counted(done.buckets, 'bucket')}", highlight=False, soft_wrap=True)


@app.command()
def verify(capture: Path = CaptureArg, port: Optional[List[int]] = PortOpt,
           add_port: Optional[List[int]] = AddPortOpt, tls_keylog: Optional[Path] = KeylogOpt,
           json_out: Optional[Path] = typer.Option(None, "--json", help="also write the comparison as JSON here")) -> None:
    """Compare with Wireshark's AMQP dissector (pyshark): per-stream method counts and frame types.

    Exit 0 when they agree or differ only where Wireshark is known wrong (each explained), 1 when
    an unexplained difference remains."""
    import json

    from .verify import render, verify as run_verify

    v = run_verify(capture, ports=ports_of(port, add_port), tls_keylog=tls_keylog)
    render(out, v)
    if json_out is not None:
        doc = {"path": v.path, "exit_code": v.exit_code, "wireshark_packets": v.wireshark_packets,
               "wireshark_s": v.wireshark_s, "amqpcap_s": v.amqpcap_s, "notes": v.notes,
               "streams": [{"stream": s.stream, "filter": s.filter, "amqpcap": dict(s.amqpcap),
                            "wireshark": dict(s.wireshark)} for s in v.streams],
               "differences": [d.to_json() for d in v.differences]}
        try:
            json_out.write_text(json.dumps(doc, indent=2) + "\n")
        except OSError as e:
            raise UsageError(f"cannot write {json_out}: {e.strerror or e}") from None
    if v.exit_code:
        raise typer.Exit(v.exit_code)


@app.command()
def sample() -> None:
    """Print the path of the sample capture shipped with amqpcap."""
    out.print(sample_path(), highlight=False, soft_wrap=True)


def _analyzer_click_command(name: str):
    """The subcommand of the analyzer `name` (`_Commands`), as typer makes it."""
    from .analysis import analyzers

    fn, help_text = analyzers()[name]
    one = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    one.command(name=name, help=help_text)(_analyzer_command(name, fn, help_text))
    return typer.main.get_command(one)


def _version(value: bool) -> None:
    if value:
        out.print(f"amqpcap {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version and exit."),
) -> None:
    """AMQP 0-9-1 traffic analysis from pcap/pcapng captures."""


def main() -> None:
    """Entry point: run the app; errors become one line on stderr and an exit code."""
    try:
        app(standalone_mode=False)
    except AmqpcapError as e:
        err.print(f"amqpcap: error: {e}", highlight=False, markup=False, soft_wrap=True)
        sys.exit(e.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        err.print("amqpcap: interrupted", highlight=False)
        sys.exit(130)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except SystemExit:
        raise
    except Exception as e:  # noqa: BLE001 - last resort: never show a traceback by default
        # Usage errors of typer's (vendored) click: they print their own message.
        if callable(getattr(e, "show", None)) and isinstance(getattr(e, "exit_code", None), int):
            e.show()
            sys.exit(e.exit_code)
        if os.environ.get("AMQPCAP_DEBUG"):
            raise
        err.print(
            f"amqpcap: internal error: {type(e).__name__}: {e} (set AMQPCAP_DEBUG=1 for the traceback and please report it)",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
        sys.exit(70)


if __name__ == "__main__":
    main()
