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
) -> None:
    """Write the frames table (one row per AMQP frame) to CSV or Parquet."""
    from ..io.dataset import is_dataset
    from ..io.table_files import batches_from_sink, check_format, check_out_file, write_arrow_file, write_table_file

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
            from ..io.load import Capture

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
