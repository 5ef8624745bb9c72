"""The command line's application: the subcommands (an analyzer's made only when it is run or listed),
`--version`, and `main`, where every error the user can cause becomes one line.
"""

from __future__ import annotations

import os
import sys

import typer
from typer.core import TyperGroup

from ..analyzers import names as analyzer_names
from ..model.errors import AmqpcapError
from .consoles import _to_devnull, err, out


class _Commands(TyperGroup):
    """The subcommands; an analyzer's is made when it is run or listed (`amqpcap --help`), not
    when the command line starts: the analyzers import pandas and numpy (0.4 s) that `amqpcap
    frames`, `ingest` and `--version` do without. Listed after the others, by name."""

    def list_commands(self, ctx) -> list[str]:
        names = analyzer_names()
        return [*(n for n in super().list_commands(ctx) if n not in names), *names]

    def get_command(self, ctx, cmd_name: str):
        if cmd_name not in self.commands and cmd_name in analyzer_names():
            from .analyzer_commands import _analyzer_click_command

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
    help="AMQP 0-9-1 and AMQP 1.0 traffic analysis from pcap/pcapng captures.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
def _version(value: bool) -> None:
    if value:
        from .._core import __version__

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
    except BrokenPipeError:  # a write to the closed pipe that did not go through a console
        _to_devnull(sys.stdout)
        sys.exit(141)  # (128 + SIGPIPE: what a shell reports of a command its reader went away from)
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
