"""The command line's two consoles: `out` (stdout: results) and `err` (stderr: progress, errors)."""

from __future__ import annotations

import os

from rich.console import Console


class _Console(Console):
    """A console whose reader may go away: `amqpcap info capture.pcap | head -3`. Rich's own
    answer is exit 1 (SystemExit); here the console goes quiet, its file descriptor is pointed at
    /dev/null (so that Python's flush at exit has somewhere to write, instead of an "Exception
    ignored" message) and the command goes on: `analyze --out DIR | head` still writes DIR, and
    ends with the exit code of its work, as if everything had been read."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        _to_devnull(self.file)


def _to_devnull(stream) -> None:
    """Point `stream`'s file descriptor at /dev/null (a stream without one is left alone)."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # (io.UnsupportedOperation is an OSError)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


out = _Console()
if not out.is_terminal:
    # files and pipes: don't squeeze tables into 80 columns. (Not even with COLUMNS: a parent
    # that loaded readline, pytest for one, exports COLUMNS=80 to its children without a terminal.)
    out.width = 120
err = _Console(stderr=True)
