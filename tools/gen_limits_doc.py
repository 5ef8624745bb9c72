#!/usr/bin/env python3
"""Generate the table of docs/tables.md, "Resource caps", from the caps the core declares.

Usage: python tools/gen_limits_doc.py            # rewrite the table in docs/tables.md
       python tools/gen_limits_doc.py --check    # exit 1 if the table is out of date

The caps are declared once, in rust/src/limits.rs (name, default, unit, meaning), and handed to
Python by the built core (`amqpcap._core.limits()`): build it first (tools/dev-build.sh). Only
the table is generated; the prose above it is written by hand. tests/whole/test_docs.py fails when the
docs and the core disagree.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "tables.md"
SECTION = "## Resource caps"
HEADER = "| cap | default | what happens past it |\n|---|---|---|\n"

PER_DIRECTION = "bytes per direction"


def default_text(default: int, unit: str) -> str:
    """A byte cap in the largest binary unit that divides it ("16 MiB per direction"), a count
    with thousands separators ("250,000")."""
    if not unit.startswith("bytes"):
        return f"{default:,}"
    for name, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if default and default % size == 0:
            text = f"{default // size} {name}"
            break
    else:
        text = f"{default:,} bytes"
    return text + (" per direction" if unit == PER_DIRECTION else "")


def render_table(limits: list[tuple[str, int, str, str]]) -> str:
    rows = "".join(f"| `{name}` | {default_text(default, unit)} | {meaning} |\n" for name, default, unit, meaning in limits)
    return HEADER + rows


def core_limits() -> list[tuple[str, int, str, str]]:
    sys.path.insert(0, str(ROOT))
    from amqpcap import _core

    return list(_core.limits())


def table_span(doc: str) -> tuple[int, int]:
    """Where the caps' table is in the docs: from its header line to the first line after it
    that is not a table row."""
    start = doc.index(HEADER, doc.index(SECTION))
    end = start + len(HEADER)
    while doc.startswith("| ", end):
        end = doc.index("\n", end) + 1
    return start, end


def render(doc: str) -> str:
    start, end = table_span(doc)
    return doc[:start] + render_table(core_limits()) + doc[end:]


def main(argv: list[str]) -> int:
    doc = DOC.read_text()
    new = render(doc)
    if "--check" in argv:
        if new != doc:
            print("docs/tables.md's Resource caps table is out of date: run python tools/gen_limits_doc.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
