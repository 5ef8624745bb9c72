"""docs/cli.md is generated from the typer app (tools/gen_cli_docs.py): it must be up to date,
mention every option `--help` shows, and its exit codes must be the ones the CLI really uses."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import gen_cli_docs  # (tools/, on the path: tests/conftest.py)
from amqpcap.cli import app

ROOT = Path(__file__).resolve().parents[2]
DOC_PATH = ROOT / "docs" / "cli.md"
FIXTURES = ROOT / "fixtures"


def test_cli_md_is_up_to_date():
    assert DOC_PATH.read_text() == gen_cli_docs.render(), (
        "docs/cli.md is out of date: run `python tools/gen_cli_docs.py` and commit docs/cli.md"
    )


def _commands() -> list[str]:
    import typer.main

    root = typer.main.get_command(app)
    ctx = typer.Context(root, info_name="amqpcap")
    return root.list_commands(ctx)


@pytest.mark.parametrize("command", [None] + _commands())
def test_every_option_in_help_is_documented(command):
    """Independent of the generator's walk: whatever `--help` prints must be in docs/cli.md."""
    doc = DOC_PATH.read_text()
    args = ([command] if command else []) + ["--help"]
    r = CliRunner().invoke(app, args, env={"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"})
    assert r.exit_code == 0, r.output
    heading = f"## `amqpcap {command}`" if command else "## `amqpcap`"
    assert heading in doc
    start = doc.index(heading)
    end = doc.find("\n## ", start + 1)
    section = doc[start:end]
    options = set(re.findall(r"(?<![\w-])(--?[a-z][a-z0-9-]*)", r.output))
    assert options, r.output
    missing = sorted(o for o in options if f"`{o}`" not in section)
    assert not missing, f"options shown by --help but not in docs/cli.md ({heading}): {missing}"


def _doc_exit_codes() -> set[int]:
    doc = DOC_PATH.read_text()
    section = doc[doc.index("## Exit codes") :]
    section = section[: section.find("\n## ", 1)]
    return {int(c) for c in re.findall(r"^\| (\d+) \|", section, re.M)}


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "amqpcap", *args], capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.mark.slow
def test_documented_exit_codes_are_the_real_ones(tmp_path):
    documented = _doc_exit_codes()
    not_a_capture = tmp_path / "notes.txt"
    not_a_capture.write_text("hello\n")
    cases = {
        "success": (_run("info", str(FIXTURES / "prefetch1.pcap")), 0),
        "missing argument (click usage)": (_run("analyze"), 2),
        "unknown option (click usage)": (_run("info", "--bogus", str(FIXTURES / "prefetch1.pcap")), 2),
        "not a capture": (_run("info", str(not_a_capture)), 2),
        "unusable option value": (_run("analyze", str(FIXTURES / "prefetch1.pcap"), "--format", "xlsx"), 64),
    }
    for what, (r, expected) in cases.items():
        assert r.returncode == expected, (what, r.returncode, r.stderr)
        assert expected in documented, what


def test_every_exit_code_in_the_code_is_documented():
    documented = _doc_exit_codes()
    cli_src = "".join(p.read_text() for p in sorted((ROOT / "amqpcap" / "cli").glob("*.py")))
    errors_src = (ROOT / "amqpcap" / "model" / "errors.py").read_text()
    in_code = {int(c) for c in re.findall(r"sys\.exit\((\d+)\)", cli_src)}
    in_code |= {int(c) for c in re.findall(r"exit_code = (\d+)", errors_src)}
    assert {70, 130, 2, 64} <= in_code  # the patterns still find what they should
    assert in_code <= documented, f"exit codes used in the code but not in docs/cli.md: {sorted(in_code - documented)}"
