#!/usr/bin/env python3
"""Generate docs/cli.md, the command-line reference, from the typer app in amqpcap/cli/.

Usage: python tools/gen_cli_docs.py            # rewrite docs/cli.md
       python tools/gen_cli_docs.py --check    # exit 1 if docs/cli.md is out of date

It walks the click command tree typer builds (``typer.main.get_command``): every subcommand
(analyzers register theirs automatically), argument and option, with its type, default and
help. The exit codes come from the exception classes in amqpcap/model/errors.py (each carries its
``exit_code``) plus the few codes ``amqpcap.cli.main`` sets itself, written below by hand;
tests/cli/test_cli_docs.py checks both against the real command. Run it after changing the CLI and
commit docs/cli.md with the change (the test fails otherwise).
"""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "cli.md"

# Exit codes amqpcap.cli.main sets itself (not from an AmqpcapError): (code, when). The test
# checks every `sys.exit(<number>)` in amqpcap/cli/ is listed here or comes from errors.py.
OTHER_EXIT_CODES = [
    (0, "success, including `--help` and `--version`"),
    (1, "`amqpcap verify` found a difference from Wireshark that no known Wireshark limit explains"),
    (2, "the command line itself is wrong (missing argument, unknown option or command, no "
        "command at all): typer/click prints the usage and the error"),
    (70, "internal error (a bug): one line on stderr; `AMQPCAP_DEBUG=1` shows the traceback"),
    (130, "interrupted (Ctrl-C)"),
    (141, "stdout was closed by its reader (`| head -3`) during a write that did not go through the "
          "console (which goes quiet instead: the command finishes, writes its files and exits with its usual "
          "code: Output on stdout, above)"),
]

TYPE_NAMES = {Path: "PATH", int: "INTEGER", str: "TEXT", float: "FLOAT", bool: "BOOLEAN"}


def _md(text: str) -> str:
    """One table cell: no line breaks, no bare pipes."""
    return " ".join((text or "").split()).replace("|", "\\|")


def _annotation_type(annotation) -> str | None:
    # Optional[List[int]] -> int: the type of one value (repetition is shown separately).
    while typing.get_origin(annotation) in (typing.Union, types.UnionType, list, tuple):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if not args:
            break
        annotation = args[0]
    if annotation in TYPE_NAMES:
        return TYPE_NAMES[annotation]
    return getattr(annotation, "__name__", None)


def _type(param) -> str:
    if getattr(param, "is_flag", False):
        return "flag"
    # typer >= 0.20 keeps the annotation (its own click has no `type` objects); older typer
    # versions give click's ParamType, whose name is the same word in lower case.
    descriptor = getattr(param, "type_descriptor", None)
    name = _annotation_type(descriptor.annotation) if descriptor is not None else None
    if name is None and getattr(param, "type", None) is not None:
        name = str(getattr(param.type, "name", param.type)).upper()
    name = name or "TEXT"
    if getattr(param, "multiple", False):
        name += ", repeatable"
    return name


def _default(param) -> str:
    if param.required:
        return "required"
    default = param.default
    if getattr(param, "is_flag", False) and param.secondary_opts:
        return f"`{param.opts[0] if default else param.secondary_opts[0]}`"
    if default is None or default is False or (isinstance(default, (list, tuple)) and not default):
        return ""
    if isinstance(default, (list, tuple)):
        return ", ".join(f"`{d}`" for d in default)
    return f"`{default}`"


def _names(param) -> str:
    opts = sorted(param.opts, key=lambda o: (not o.startswith("--"), o))
    return " / ".join(f"`{o}`" for o in opts + list(param.secondary_opts))


def _visible(params, kind: str):
    return [p for p in params if p.param_type_name == kind and not getattr(p, "hidden", False)]


def _usage(path: str, cmd) -> str:
    parts = [path, "[OPTIONS]"]  # every command has at least --help
    for a in _visible(cmd.params, "argument"):
        meta = a.metavar or a.name.upper()
        parts.append(meta if a.required else f"[{meta}]")
    if hasattr(cmd, "list_commands"):
        parts.append("COMMAND [ARGS]...")
    return " ".join(parts)


def _command_section(level: str, path: str, cmd) -> list[str]:
    out = [f"{level} `{path}`", ""]
    help_text = (cmd.help or "").strip()
    if help_text:
        out += [p.strip() for p in help_text.split("\n\n")]
        out = out[:2] + [" ".join(p.split()) for p in out[2:]]
        out.append("")
    out += ["```", _usage(path, cmd), "```", ""]
    args = _visible(cmd.params, "argument")
    if args:
        out += ["| argument | type | required | help |", "|---|---|---|---|"]
        for a in args:
            meta = a.metavar or a.name.upper()
            out.append(f"| `{meta}` | {_type(a)} | {'yes' if a.required else 'no'} | {_md(getattr(a, 'help', '') or '')} |")
        out.append("")
    opts = _visible(cmd.params, "option")
    out += ["| option | type | default | help |", "|---|---|---|---|"]
    for o in opts:
        out.append(f"| {_names(o)} | {_type(o)} | {_default(o)} | {_md(o.help or '')} |")
    out.append("| `--help` | flag | | show the help and exit |")
    out.append("")
    return out


def _error_classes():
    from amqpcap.model import errors

    seen, order = set(), []

    def walk(cls, depth):
        if cls in seen:
            return
        seen.add(cls)
        order.append((cls, depth))
        for sub in sorted(cls.__subclasses__(), key=lambda c: c.__name__):
            if sub.__module__ == errors.__name__:
                walk(sub, depth + 1)

    walk(errors.AmqpcapError, 0)
    return order


def exit_codes() -> list[tuple[int, str]]:
    """(code, meaning) for every code the CLI can exit with, in the order documented."""
    rows = list(OTHER_EXIT_CODES)
    for cls, _ in _error_classes():
        doc = " ".join((cls.__doc__ or "").split())
        rows.append((cls.exit_code, f"`{cls.__name__}`: {doc}"))
    return sorted(rows, key=lambda r: r[0])  # stable: within a code, hand-written rows first


def render() -> str:
    import typer.main

    from amqpcap.cli import app

    root = typer.main.get_command(app)
    ctx = typer.Context(root, info_name="amqpcap")
    lines = [
        "# Command-line reference",
        "",
        "<!-- Generated by `python tools/gen_cli_docs.py` from the typer app in amqpcap/cli/; do not",
        "     edit by hand: tests/cli/test_cli_docs.py fails when this file is out of date. -->",
        "",
        "Every command reads one capture (pcap or pcapng, optionally gzip-compressed; all but `verify`",
        "also a set of files, a glob or a directory such as a tcpdump ring, read as one capture merged",
        "by time as `mergecap` merges them: [tables.md](tables.md#records-one-row-per-record-of-the-file)) and prints to",
        "stdout; warnings and errors go to stderr as one line each. `amqpcap COMMAND --help` prints",
        "the same help. See the [README](../README.md) for what to run first and",
        "[findings.md](findings.md), [tables.md](tables.md), [summary.md](summary.md) and",
        "[metrics.md](metrics.md) for what the output means.",
        "",
        "Commands:",
        "",
    ]
    # sorted: the order list_commands gives differs between typer versions
    names = sorted(n for n in root.list_commands(ctx) if not root.get_command(ctx, n).hidden)
    for n in names:
        c = root.get_command(ctx, n)
        lines.append(f"- [`amqpcap {n}`](#amqpcap-{n}): {_md(c.get_short_help_str(limit=200))}")
    lines.append("")
    lines += _command_section("##", "amqpcap", root)
    for n in names:
        lines += _command_section("##", f"amqpcap {n}", root.get_command(ctx, n))

    lines += [
        "## Output on stdout",
        "",
        "- `analyze`: one line about the capture (packets, AMQP connections, frames, duration), then",
        "  the findings, worst first. When none crossed its threshold it says what was checked: `No",
        "  findings: 3 AMQP connections, 1,829 packets checked by 6 analyzers; nothing crossed a",
        "  threshold`. When AMQP connections were found but no frame was decoded in any (all",
        "  encrypted, another protocol, cut by the snaplen) a line says only TCP was analysed.",
        "- An analyzer subcommand (`clients`, `latency`, `consumers`, `nagle`, `sizes`, `stalls`): the capture",
        "  line, the analyzer's summary numbers (the keys of [summary.json](summary.md): seconds in",
        "  ms below one second, rates per second, shares as percent, counts with thousands",
        "  separators, `–` where there was nothing to measure), its findings (or what was checked),",
        "  then its tables by name and size. `--rows N` prints the first N rows of each table;",
        "  `--out DIR` writes them whole.",
        "- Tables fit the width of the terminal (or `COLUMNS`; 120 columns when stdout is a file or",
        "  a pipe) by leaving columns out, never by cutting a header or a value short: the columns that",
        "  name what a row is about (connection, queue, consumer tag, stream, channel, …) are always",
        "  shown, then every other column, in order, that still fits whole; a line under the table",
        "  names the columns left out (`--out DIR` writes the table whole). The findings' free text",
        "  wraps onto more lines.",
        "- A reader that goes away (`amqpcap info capture.pcap | head -3`) ends the output quietly: no",
        "  message, and the command finishes its work (`--out DIR` is still written) and exits with",
        "  its usual code.",
        "- A capture with no AMQP connection (no packets, no TCP, nothing on the AMQP ports nor a",
        "  connection opened with the AMQP protocol header) is not analysed: one line on stderr says",
        "  which, and the exit code is 3 (`analyze`, the analyzer subcommands and `frames`; `info`",
        "  still shows what the file holds).",
        "",
        "## Files and formats",
        "",
        "`analyze --out DIR` writes `summary.json`, the capture's own tables (`connections`,",
        "`frames`, `packets`, `anomalies`, `records`: [tables.md](tables.md)) as `<table>.csv`, each",
        "analyzer's tables as `<analyzer>-<table>.csv`, the plots as PNG and `report.html`;",
        "`--format parquet` writes the tables as Parquet. An analyzer subcommand's `--out DIR` writes",
        "that analyzer's tables and plots. Output options are checked before the capture is read:",
        "an unknown format, Parquet without pyarrow, or an `--out` that is a file or cannot be",
        "created fails at once (exit 64), and nothing is written.",
        "",
        "Timestamps are written one way everywhere (terminal, CSV, `summary.json`): ISO 8601 UTC with",
        "nanoseconds and `Z`, e.g. `2026-11-21T21:28:45.173855000Z`. Floats in CSV and",
        "`summary.json` carry no binary noise: durations (names ending in `_s`, rates such as",
        "`packets_s` or `rate_per_s` excepted) are rounded to 9 decimals, the whole nanoseconds they",
        "are computed from; other floats to 12 significant digits. Parquet keeps the float64 values",
        "and the timestamps as timestamps.",
        "",
        "## Output on stderr",
        "",
        "Everything the user should know about the input goes to stderr, one line each:",
        "",
        "- `warning: …` when a usable capture was not read or decoded in full: reading stopped early",
        "  (file cut in a record, corrupt block, gzip stream damaged or cut: the packets before are",
        "  decoded), no packets at all, TLS connections skipped for want of a key log, bodies or",
        "  anomalies over their caps, and one line naming what the `anomalies` table holds (kinds,",
        "  counts, bytes skipped or missing). The command still succeeds.",
        "- `amqpcap: error: …` when the command cannot do its job; nothing else is printed and the",
        "  exit code says why.",
        "",
        "## Secrets and bodies",
        "",
        "SASL responses and challenges (the password of PLAIN and AMQPLAIN logins) and the new secret",
        "of `connection.update-secret` are never decoded into any table, report, plot or message.",
        "Message bodies are kept only with `analyze --out DIR --bodies` (written to `DIR/bodies.csv`",
        "or `.parquet`, at most `max_body_bytes` in all); the report's \"Redacted\" section and",
        "`summary.json`'s `redacted` say what was left out.",
        "",
        "## Exit codes",
        "",
        "Errors a user can cause print one line, `amqpcap: error: …`, on stderr, never a traceback.",
        "The codes of the error classes come from `amqpcap/model/errors.py` (an `AmqpcapError` subclass",
        "inherits its parent's code); the Python API raises the same classes.",
        "",
        "| code | when |",
        "|---|---|",
    ]
    for code, when in exit_codes():
        lines.append(f"| {code} | {_md(when)} |")
    lines += [
        "",
        "Anything odd *inside* a usable capture (gaps, bad frames, truncated packets) is not an",
        "error: it is a row of the `anomalies` table and the command exits 0.",
        "",
        "## Environment",
        "",
        "| variable | effect |",
        "|---|---|",
        "| `AMQPCAP_DEBUG=1` | show the Python traceback of an internal error instead of one line |",
        "| `COLUMNS=N` | on a terminal, the width tables are fitted to (default: the terminal's); a file or a pipe gets 120 columns |",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    text = render()
    if "--check" in argv:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT.relative_to(ROOT)} is out of date: run python tools/gen_cli_docs.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
