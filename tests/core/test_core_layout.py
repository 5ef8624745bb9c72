"""The Rust core's house rules (docs/core.md): no circle between its files, the pipeline names no
protocol folder and has no function longer than 80 lines. Reads the sources only (no build)."""

from __future__ import annotations

import re
from pathlib import Path

import rust_modules  # (tools/, on the path: tests/conftest.py)

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "rust" / "src"


def test_no_circle_between_core_files():
    assert rust_modules.circles(rust_modules.graph()) == []


def test_the_circle_check_finds_a_circle():
    a, b, c, d = (SRC / f"{n}.rs" for n in "abcd")
    assert rust_modules.circles({a: {b}, b: {c}, c: {a}, d: {a}}) == [sorted([a, b, c])]
    # and reads uses as the core writes them: `crate::` paths, groups, `super::`
    uses = rust_modules.uses(SRC / "proto" / "amqp091" / "session.rs")
    assert SRC / "proto" / "sink.rs" in uses and SRC / "proto" / "amqp091" / "decoder.rs" in uses


def test_the_pipeline_reaches_protocols_only_through_the_seam():
    for f in (SRC / "pipeline").glob("*.rs"):
        if f.name == "tests.rs":
            continue
        protocol_files = {u for u in rust_modules.uses(f) if {"amqp091", "amqp10"} & set(u.relative_to(SRC).parts)}
        assert not protocol_files, f"{f.name} uses {sorted(map(str, protocol_files))}"


def function_lengths(path: Path) -> list[tuple[str, int]]:
    """(name, lines) of each function written in rustfmt's layout: from its `fn` line to the
    closing brace at the same indentation."""
    lines = path.read_text().splitlines()
    out = []
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)(?:pub(?:\([a-z]+\))?\s+)?fn\s+(\w+)", line)
        if not m or line.rstrip().endswith(";"):
            continue
        indent = m.group(1)
        end = next((j for j in range(i, len(lines)) if lines[j] == indent + "}" or (j == i and line.rstrip().endswith("}"))), i)
        out.append((m.group(2), end - i + 1))
    return out


def test_no_pipeline_function_over_80_lines():
    long = [(f.name, name, n) for f in (SRC / "pipeline").glob("*.rs") for name, n in function_lengths(f) if n > 80]
    assert not long, long
