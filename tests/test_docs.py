"""docs/tables.md is the contract: every column of every table, with its dtype, and every
anomaly kind must be documented there — and nothing documented may be missing."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

import amqpcap
from amqpcap import _core

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "tables.md").read_text()
TABLES = ("frames", "packets", "connections", "anomalies", "records")


def documented(table: str) -> dict[str, str]:
    """{column: dtype} from the markdown table under "## `table`"."""
    start = DOC.index(f"## `{table}`")
    end = DOC.find("\n## ", start + 1)
    section = DOC[start : end if end > 0 else None]
    cols: dict[str, str] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        for name in re.findall(r"`([a-z0-9_]+)`", cells[0]):
            cols[name] = cells[1]
    return cols


def dtype_ok(actual, doc: str) -> bool:
    if doc == "str":
        return actual == object or pd.api.types.is_string_dtype(actual)
    return str(actual) == doc


@pytest.fixture(scope="module")
def cap():
    # a capture with gaps, so that every table has rows
    return amqpcap.load(ROOT / "fixtures" / "kernel-drops.pcap")


@pytest.mark.parametrize("table", TABLES)
def test_every_column_documented_with_its_dtype(cap, table):
    df = getattr(cap, table)
    doc = documented(table)
    assert set(df.columns) == set(doc), f"undocumented: {set(df.columns) - set(doc)}, documented but absent: {set(doc) - set(df.columns)}"
    wrong = {c: (str(df[c].dtype), doc[c]) for c in df.columns if not dtype_ok(df[c].dtype, doc[c])}
    assert not wrong


def test_every_anomaly_kind_documented():
    start = DOC.index("Kinds:")
    end = DOC.index("\n## ", start)
    kinds = set(re.findall(r"^\| `([a-z-]+)` \|", DOC[start:end], re.M))
    assert kinds == set(_core.ANOMALY_KINDS)


def test_every_limit_documented():
    start = DOC.index("## Resource caps")
    caps = set(re.findall(r"^\| `([a-z_]+)` \|", DOC[start:], re.M))
    assert caps == set(amqpcap.Limits.__dataclass_fields__)
