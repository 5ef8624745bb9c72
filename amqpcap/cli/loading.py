"""Reading what the user named: ports, resource caps, captures or a dataset (with progress), the
warnings about what was not decoded, and the one-line refusals of a capture without AMQP.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

from ..model.errors import NoAmqpError, UsageError
from ..model.wording import counted, frames_counted
from .consoles import err

if TYPE_CHECKING:
    from ..io.load import Capture, Limits


#: byte counts of these anomaly kinds are stream bytes not decoded (skipped or missing)
_BYTE_KINDS = {"capture-gap", "truncated-packet", "reassembly-overflow", "resync-skipped", "incomplete-frame",
               "frame-limit", "out-of-window", "tls-encrypted"}
_SUFFIX = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_limits(items: Optional[List[str]]) -> Optional[Limits]:
    """`--limit NAME=VALUE` options as amqpcap.Limits (None when there are none)."""
    if not items:
        return None
    from ..io.load import Limits

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
    from ..io.table_files import check_format, check_out_dir

    check_format(fmt)
    if out_dir is not None:
        check_out_dir(out_dir)


def _warn(text: str) -> None:
    err.print("[yellow]warning:[/yellow] ", end="", highlight=False)
    err.print(text, highlight=False, markup=False, soft_wrap=True)


def anomaly_warning(a) -> Optional[str]:
    """One line saying what was not decoded (the anomalies table by kind: a pandas frame, or an
    Arrow table read without pandas), or None."""
    if not len(a):
        return None
    parts = []
    for kind, rows, size, no_stream, details in _anomaly_kinds(a):
        text = f"{kind} {rows:,}"
        if kind in _BYTE_KINDS and size:
            text += f" ({size:,} bytes)"
        elif no_stream and rows <= 2 and kind != "capture-truncated":  # that one has its own warning
            text += " (" + "; ".join(str(d) for d in details()) + ")"
        parts.append(text)
    return (f"not everything in the capture was decoded ({len(a):,} row{'s' if len(a) > 1 else ''} in the anomalies "
            f"table): " + ", ".join(parts))


def _anomaly_kinds(a):
    """Per anomaly kind, in the order the kinds first appear in the anomalies table `a`: (kind,
    rows, their bytes, whether none has a stream, a function giving their details)."""
    from ..model.table_columns import is_arrow

    if not is_arrow(a):
        for kind, rows in a.groupby(a["kind"].astype(str), sort=False):
            yield kind, len(rows), int(rows["bytes"].sum()), bool(rows["stream"].isna().all()), rows["detail"].tolist
        return
    import pyarrow as pa
    import pyarrow.compute as pc

    # (the kinds are a short fixed list: each one's rows picked out in turn. `group_by` would
    # import pyarrow's query engine, and a scalar made of a Python value pandas: each kind is
    # compared as the scalar `unique` gives)
    kinds = pc.cast(a.column("kind"), pa.string())
    for scalar in pc.unique(kinds):  # (in the order they first appear)
        kind, mine = scalar.as_py(), pc.equal(kinds, scalar)
        size = pc.sum(a.column("bytes").filter(mine)).as_py()
        yield (kind, pc.sum(mine).as_py(), int(size or 0), pc.count(a.column("stream").filter(mine)).as_py() == 0,
               lambda mine=mine: a.column("detail").filter(mine).to_pylist())


def ports_of(port: Optional[List[int]], add_port: Optional[List[int]] = None) -> tuple[int, ...]:
    """The AMQP ports: --port replaces the defaults, --add-port adds to them (or to --port)."""
    from ..io.load import DEFAULT_PORTS

    return tuple(dict.fromkeys([*(port or DEFAULT_PORTS), *(add_port or [])]))


def _load(capture: List[str], port: Optional[List[int]], limit: Optional[List[str]] = None, bodies: bool = False,
          tls_keylog: Optional[Path] = None, add_port: Optional[List[int]] = None, strict: bool = False,
          arrow: bool = False, frames_sink=None):
    """The capture, loaded (a `Capture`), its warnings told; with ``arrow``, a capture file's
    tables are left in Arrow as the core made them (`amqpcap.io.load.decode_arrow`: a
    `Decoded`, its frames given to ``frames_sink`` when given, in batches of
    `STREAMED_FRAMES_BATCH_ROWS`),
    for a command that only writes them; with a ``frames_sink`` (and no key log), pandas is
    not imported (``pandas=False``)."""
    from ..io.dataset import is_dataset

    capture = _one_name(capture)
    arrow = arrow and (isinstance(capture, list) or not is_dataset(capture))  # a dataset is read back whole
    with _reading_progress() as progress:
        args = dict(ports=ports_of(port, add_port), limits=parse_limits(limit), bodies=bodies, tls_keylog=tls_keylog,
                    strict=strict, progress=progress)
        if arrow:
            from ..io.load import decode_arrow

            from ..io.table_files import STREAMED_FRAMES_BATCH_ROWS

            cap = decode_arrow(capture, frames_sink=frames_sink, frames_batch_rows=STREAMED_FRAMES_BATCH_ROWS,
                               pandas=frames_sink is None, **args)
        else:
            from ..io.load import load

            cap = load(capture, **args)
    for w in cap.summary.get("warnings", []):
        _warn(w)
    w = anomaly_warning(cap.tables["anomalies"] if arrow else cap.anomalies)
    if w:
        _warn(w)
    return cap


def _load_outline(path: Path | str):
    """A dataset's outline (`amqpcap.io.dataset.read_outline`: its connections, anomalies and
    summary), its warnings told as `_load` tells them."""
    from ..io.dataset import read_outline

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
    from ..io.dataset import is_url

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
    from ..derive.tally import frame_count

    if frame_count(cap) or not len(cap.connections):
        return None
    c, n = cap.connections, len(cap.connections)
    if (c["protocol"] == "1.0").all():
        # their frames were decoded and analysed, and the capture's warnings already say which
        # analyzers read them (`load.protocol_warnings`): said once
        return None
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
    from ..summary.build import capture_summary

    c = capture_summary(cap)
    return (f"[bold]{c['path']}[/bold]: {counted(c['packets'], 'packet')}, "
            f"{counted(c['connections'], 'AMQP connection')}, {frames_counted(c)} "
            f"over {c['duration_s']:.3f} s")
