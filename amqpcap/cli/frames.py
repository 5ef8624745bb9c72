"""`amqpcap frames`: the decoded frames as a table (terminal, CSV or Parquet)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import List, Optional

import typer

from ..model.errors import UsageError
from ..model.wording import counted
from .app import app
from .consoles import err
from .loading import _load, _one_name, _refuse_unless_amqp, require_amqp
from .options import AddPortOpt, CapturesArg, KeylogOpt, LimitOpt, PortOpt, StrictOpt


@app.command()
def frames(
    capture: List[str] = CapturesArg,
    output: Path = typer.Option(..., "--output", "-o", help="output file: .csv or .parquet"),
    port: Optional[List[int]] = PortOpt,
    add_port: Optional[List[int]] = AddPortOpt,
    limit: Optional[List[str]] = LimitOpt,
    tls_keylog: Optional[Path] = KeylogOpt,
    strict: bool = StrictOpt,
    amqp10: bool = typer.Option(False, "--amqp10", help="write the AMQP 1.0 frames instead (the amqp10_frames table: "
                                "one row per frame, its performative's fields; docs/tables.md)"),
) -> None:
    """Write the frames table (one row per AMQP 0-9-1 frame, or per AMQP 1.0 frame) to CSV or Parquet."""
    from ..io.dataset import is_dataset
    from ..io.table_files import batches_from_sink, check_format, check_out_file, write_arrow_file

    suffix = output.suffix.lower()
    if suffix not in (".csv", ".parquet"):
        raise UsageError(f"cannot write {output}: the output must end in .csv or .parquet")
    check_format(suffix[1:])
    check_out_file(output)
    load = functools.partial(_load, capture, port, limit, tls_keylog=tls_keylog, add_port=add_port, strict=strict)
    fmt = suffix[1:]
    try:
        name = _one_name(capture)
        if amqp10:
            cap, rows = _write_amqp10_frames(load, output, fmt)
        elif tls_keylog is not None or (not isinstance(name, list) and is_dataset(name)):  # (decoded twice; read whole)
            from ..io.load import Capture

            cap = load(arrow=True)
            require_amqp(cap)
            rows = _write_whole(cap.frames if isinstance(cap, Capture) else cap.tables["frames"], output, fmt)
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
    what = "AMQP 1.0 frame" if amqp10 else ("AMQP 0-9-1 frame" if _amqp10_rows(cap) else "frame")
    err.print(f"{counted(rows, what)} from {counted(len(cap.connections), 'connection')} written to {output}",
              highlight=False)
    if not amqp10 and _amqp10_rows(cap):
        err.print(f"the capture's {counted(_amqp10_rows(cap), 'AMQP 1.0 frame')} are written by --amqp10",
                  highlight=False)


def _amqp10_rows(cap) -> int:
    """The capture's AMQP 1.0 frames: a `Capture`'s, or a `Decoded`'s Arrow table's."""
    from ..io.load import Capture

    return len(cap.amqp10_frames) if isinstance(cap, Capture) else cap.tables["amqp10_frames"].num_rows


def _write_amqp10_frames(load, output: Path, fmt: str):
    """The capture's amqp10_frames table into `output`, as `amqpcap analyze --out` writes it (a
    capture file's straight from the core's Arrow table); the capture and the rows written."""
    from ..io.load import Capture

    cap = load(arrow=True)
    require_amqp(cap)
    # (a dataset, or a capture decrypted with a key log, is read whole: a Capture)
    return cap, _write_whole(cap.amqp10_frames if isinstance(cap, Capture) else cap.tables["amqp10_frames"], output, fmt)


def _write_whole(table, output: Path, fmt: str) -> int:
    """A whole table, pandas or Arrow, into `output`; the rows written."""
    import pandas as pd

    from ..io.table_files import write_arrow_file, write_table_file

    if isinstance(table, pd.DataFrame):
        write_table_file(table, output, fmt)
        return len(table)
    return write_arrow_file(table, output, fmt)
