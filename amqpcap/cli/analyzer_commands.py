"""Each analyzer's own subcommand (`amqpcap latency capture.pcap`), made when it is run or listed,
and what it shares with `amqpcap analyze`: telling no findings, writing into --out."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

import typer

from ..model.errors import UsageError
from .consoles import err, out
from .loading import _capture_line, _check_outputs, _load, require_amqp, undecoded_note
from .options import (
    AddPortOpt, CapturesArg, FormatOpt, KeylogOpt, LimitOpt, OutOpt, PlotsOpt, PortOpt, RowsOpt, StrictOpt)

if TYPE_CHECKING:
    from ..io.load import Capture


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


def _no_findings(cap: Capture, names: list[str], notes: int = 0) -> str:
    from ..report.console import no_findings_line
    from ..derive.tally import packet_count

    return no_findings_line(len(cap.connections), packet_count(cap), names, notes)


def _analyzer_command(name: str, fn, help_text: str):
    def command(capture: List[str] = CapturesArg, port: Optional[List[int]] = PortOpt,
                add_port: Optional[List[int]] = AddPortOpt, out_dir: Optional[Path] = OutOpt,
                fmt: str = FormatOpt, plots: bool = PlotsOpt, rows: int = RowsOpt,
                limit: Optional[List[str]] = LimitOpt, tls_keylog: Optional[Path] = KeylogOpt,
                strict: bool = StrictOpt) -> None:
        from ..analysis.registry import rank
        from ..report.console import print_result
        from ..report.outputs import write_result

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


def _analyzer_click_command(name: str):
    """The subcommand of the analyzer `name` (`_Commands`), as typer makes it."""
    from ..engine.registered import analyzers

    fn, help_text = analyzers()[name]
    one = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    one.command(name=name, help=help_text)(_analyzer_command(name, fn, help_text))
    return typer.main.get_command(one)
