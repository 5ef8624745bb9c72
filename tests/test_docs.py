"""docs/tables.md is the contract: every column of every table, with its dtype, and every
anomaly kind must be documented there — and nothing documented may be missing."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pandas as pd
import pytest

import amqpcap
from amqpcap import _core

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "tables.md").read_text()
TABLES = ("frames", "packets", "connections", "anomalies", "records", "bodies")


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
    # a capture with gaps, so that every table has rows; bodies kept so that table is there
    return amqpcap.load(ROOT / "fixtures" / "kernel-drops.pcap", bodies=True)


@pytest.mark.parametrize("table", TABLES)
def test_every_column_documented_with_its_dtype(cap, table):
    df = getattr(cap, table)
    doc = documented(table)
    assert set(df.columns) == set(doc), f"undocumented: {set(df.columns) - set(doc)}, documented but absent: {set(doc) - set(df.columns)}"
    wrong = {c: (str(df[c].dtype), doc[c]) for c in df.columns if not dtype_ok(df[c].dtype, doc[c])}
    assert not wrong


def test_every_anomaly_kind_documented():
    start = DOC.index("Kinds (")
    end = DOC.index("\n## ", start)
    kinds = set(re.findall(r"^\| `([a-z-]+)` \|", DOC[start:end], re.M))
    assert kinds == set(_core.ANOMALY_KINDS)


def test_accounting_column_is_what_the_check_uses():
    sys.path.insert(0, str(ROOT / "tests"))
    from accounting import MISSING_KINDS, SKIPPED_KINDS

    rows = dict(re.findall(r"^\| `([a-z-]+)` \| (\w*) \|", DOC[DOC.index("Kinds ("):], re.M))
    assert {k for k, v in rows.items() if v == "skipped"} == SKIPPED_KINDS
    assert {k for k, v in rows.items() if v == "missing"} == MISSING_KINDS


def test_every_limit_documented():
    start = DOC.index("## Resource caps")
    caps = set(re.findall(r"^\| `([a-z_]+)` \|", DOC[start:], re.M))
    assert caps == set(amqpcap.Limits.__dataclass_fields__)


# --- findings and summary.json ---------------------------------------------------------------

FINDINGS_DOC = (ROOT / "docs" / "findings.md").read_text()
SUMMARY_DOC = (ROOT / "docs" / "summary.md").read_text()


def finding_ids_in_code() -> set[str]:
    """Finding ids written in the analyzers' source (as `Finding("id"` or `id="id"`)."""
    src = "\n".join(p.read_text() for p in (ROOT / "amqpcap" / "analyzers").glob("*.py"))
    return set(re.findall(r'Finding\(\s*"([a-z-]+)"', src)) | set(re.findall(r'\bid="([a-z-]+)"', src))


def test_every_finding_id_documented():
    documented_ids = set(re.findall(r"^\| `([a-z-]+)` \|", FINDINGS_DOC, re.M))
    assert finding_ids_in_code() == documented_ids
    for required in ("small-packets", "nagle-delayed-ack", "prefetch-one", "consumer-bound", "broker-slow-refill",
                     "redelivery-loop", "publisher-blocked", "receiver-window", "capture-gaps"):
        assert required in documented_ids


@pytest.mark.parametrize("name", ["memory-alarm.pcap", "kernel-drops.pcap", "slow-prefetch1.pcap"])
def test_emitted_findings_and_summary_keys_documented(name):
    from amqpcap.analysis import analyzers
    from amqpcap.report import build_summary

    cap = amqpcap.load(ROOT / "fixtures" / name)
    s = build_summary(cap, [fn(cap) for fn, _ in analyzers().values()])
    for f in s["findings"]:
        assert f"`{f['id']}`" in FINDINGS_DOC
    for key, value in s.items():
        assert f"`{key}`" in SUMMARY_DOC, key
    for key in s["capture"]:
        assert f"`{key}`" in SUMMARY_DOC, key
