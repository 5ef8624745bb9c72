"""docs/tables.md is the contract: every column of every table, with its dtype, and every
anomaly kind must be documented there — and nothing documented may be missing."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

import amqpcap
from amqpcap import _core
import gen_limits_doc  # (tools/, on the path: tests/conftest.py)
from tiers import one_fast

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "tables.md").read_text()
TABLES = ("frames", "packets", "connections", "anomalies", "records", "bodies", "amqp10_frames")


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
    from accounting import MISSING_KINDS, SKIPPED_KINDS

    rows = dict(re.findall(r"^\| `([a-z-]+)` \| (\w*) \|", DOC[DOC.index("Kinds ("):], re.M))
    assert {k for k, v in rows.items() if v == "skipped"} == SKIPPED_KINDS
    assert {k for k, v in rows.items() if v == "missing"} == MISSING_KINDS


def test_every_limit_documented():
    """The caps' table in the docs is the one generated from the core's declaration
    (rust/src/limits.rs, through `_core.limits()`): same caps, defaults and meanings."""
    assert DOC == gen_limits_doc.render(DOC), "docs/tables.md's Resource caps table is out of date: run python tools/gen_limits_doc.py"
    start = DOC.index("## Resource caps")
    caps = re.findall(r"^\| `([a-z_]+)` \|", DOC[start:], re.M)
    assert caps == [name for name, *_ in _core.limits()] == list(amqpcap.Limits.__dataclass_fields__)


def test_the_limits_check_fails_when_the_docs_and_the_core_disagree():
    changed = DOC.replace("| `max_streams` | 250,000 |", "| `max_streams` | 100,000 |")
    assert changed != DOC and gen_limits_doc.render(changed) != changed
    dropped = re.sub(r"^\| `max_frames` \|.*\n", "", DOC, flags=re.M)
    assert gen_limits_doc.render(dropped) == DOC


# --- findings and summary.json ---------------------------------------------------------------

FINDINGS_DOC = (ROOT / "docs" / "findings.md").read_text()
SUMMARY_DOC = (ROOT / "docs" / "summary.md").read_text()


def finding_ids_in_code() -> set[str]:
    """Finding ids written in the analyzers' source (as `Finding("id"` or `id="id"`)."""
    src = "\n".join(p.read_text() for p in (ROOT / "amqpcap" / "analyzers").rglob("*.py"))
    return set(re.findall(r'Finding\(\s*"([a-z-]+)"', src)) | set(re.findall(r'\bid="([a-z-]+)"', src))


def test_every_finding_id_documented():
    documented_ids = set(re.findall(r"^\| `([a-z-]+)` \|", FINDINGS_DOC, re.M))
    assert finding_ids_in_code() == documented_ids
    for required in ("small-packets", "nagle-delayed-ack", "prefetch-one", "consumer-bound", "broker-slow-refill",
                     "redelivery-loop", "publisher-blocked", "receiver-window", "capture-gaps",
                     "polling-basic-get", "transactions", "unroutable-messages",
                     "consumer-cancelled", "connection-churn", "publish-and-wait",
                     "channel-churn"):
        assert required in documented_ids


@pytest.mark.parametrize("name", one_fast(["memory-alarm.pcap", "kernel-drops.pcap", "slow-prefetch1.pcap"], keep="slow-prefetch1.pcap"))
def test_emitted_findings_and_summary_keys_documented(name):
    from amqpcap.engine.registered import analyzers
    from amqpcap.summary.build import build_summary

    cap = amqpcap.load(ROOT / "fixtures" / name)
    s = build_summary(cap, [fn(cap) for fn, _ in analyzers().values()])
    for f in s["findings"]:
        assert f"`{f['id']}`" in FINDINGS_DOC
    for key, value in s.items():
        assert f"`{key}`" in SUMMARY_DOC, key
    for key in s["capture"]:
        assert f"`{key}`" in SUMMARY_DOC, key


# --- analyzer pages: every table column, summary key and evidence key --------------------------

# Together these produce every finding the fixtures can show, rows in every analyzer table and
# every branch of the summaries (confirms, no-ack, mid-stream, gaps, stalls of each cause).
ANALYZER_FIXTURES = ("healthy.pcap", "slow-prefetch1.pcap", "confirms.pcap", "auto-ack.pcap", "midstream.pcap",
                     "nack-requeue.pcap", "rpc-nodelay.pcap", "nagle-write-write-read.pcap", "memory-alarm.pcap",
                     "kernel-drops.pcap", "zero-window.pcap", "polling.pcap", "transactions.pcap",
                     "unroutable.pcap", "cancelled.pcap", "churn.pcap",
                     "publish-wait.pcap", "channel-churn.pcap", "heartbeats.pcap", "unlimited.pcap.gz",
                     "huge-messages.pcap.gz", "channel-leak.pcap")


@pytest.fixture(scope="module")
def analyzer_runs():
    """[(fixture, capture, [AnalyzerResult...])] for every analyzer on every fixture above."""
    from amqpcap.engine.registered import analyzers

    runs = []
    for name in ANALYZER_FIXTURES:
        cap = amqpcap.load(ROOT / "fixtures" / name)
        runs.append((name, cap, [fn(cap) for fn, _ in analyzers().values()]))
    return runs


def _page(analyzer: str) -> str:
    path = ROOT / "docs" / "analyzers" / f"{analyzer}.md"
    assert path.exists(), f"analyzer {analyzer!r} has no page docs/analyzers/{analyzer}.md"
    return path.read_text()


def _mentions(doc: str, word: str) -> bool:
    return re.search(r"(?<![\w])" + re.escape(word) + r"(?![\w])", doc) is not None


def _table_section(doc: str, heading_name: str) -> str:
    m = re.search(r"^#{2,4} `" + re.escape(heading_name) + r"`.*$", doc, re.M)
    assert m, f"no heading for table `{heading_name}`"
    end = re.search(r"^#{2,3} ", doc[m.end():], re.M)
    return doc[m.start(): m.end() + end.start() if end else None]


@pytest.mark.slow
def test_every_analyzer_table_column_documented(analyzer_runs):
    """Each table `<analyzer>-<table>` (its CSV name) has a heading on the analyzer's page, and
    every column is named, in backticks, in that section."""
    missing = {}
    for _, _, results in analyzer_runs:
        for r in results:
            doc = _page(r.name)
            for table, df in r.tables.items():
                section = _table_section(doc, f"{r.name}-{table}")
                cols = [c for c in df.columns if f"`{c}`" not in section]
                if cols:
                    missing.setdefault(f"{r.name}-{table}", set()).update(cols)
    assert not missing, f"columns not documented in their table's section: {missing}"


def _keys(value, path=()):
    """Every (path, key) of nested dicts; list items share the path with a [] step."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield path, str(k)
            yield from _keys(v, path + (str(k),))
    elif isinstance(value, list):
        for v in value:
            yield from _keys(v, path + ("[]",))


@pytest.mark.slow
def test_every_summary_key_documented(analyzer_runs):
    """Top-level summary.json keys in docs/summary.md; every key under an analyzer's part of
    summary.json on that analyzer's page (keys that are data, e.g. the counts of
    `frames_per_packet` by number, are exempt: they are numbers)."""
    from amqpcap.summary.build import build_summary

    missing = set()
    for name, cap, results in analyzer_runs:
        s = build_summary(cap, results)
        missing |= {f"summary.json: {k}" for k in s if f"`{k}`" not in SUMMARY_DOC}
        missing |= {f"summary.json capture.{k}" for k in s["capture"] if f"`{k}`" not in SUMMARY_DOC}
        for r in results:
            doc = _page(r.name)
            for path, key in _keys(r.summary):
                if key.isdigit() or _mentions(doc, key):
                    continue
                missing.add(f"{r.name}.md: {'.'.join(path + (key,))}")
    assert not missing, sorted(missing)


def test_every_finding_evidence_key_documented(analyzer_runs):
    """Evidence keys (summary.json findings[].evidence) of every finding the fixtures produce
    are named on the page of the analyzer that raised it."""
    missing = set()
    for _, _, results in analyzer_runs:
        for r in results:
            doc = _page(r.name)
            for f in r.findings:
                missing |= {f"{r.name}.md: {f.id}.{k}" for k in f.evidence if not _mentions(doc, k)}
    assert not missing, sorted(missing)


def test_every_evidence_key_in_the_source_documented():
    """The same for findings no fixture produces: the string keys of evidence dicts written in
    the analyzers' source (dict literals with a `streams` or `filter` key, or passed as
    `evidence=`, in functions that build a Finding)."""
    import ast

    missing = set()
    analyzers = ROOT / "amqpcap" / "analyzers"
    for path in sorted(analyzers.rglob("*.py")):
        if path.name.startswith("_"):
            continue
        doc = _page(path.relative_to(analyzers).parts[0].removesuffix(".py"))  # (a package's: its analyzer's page)
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if not any(isinstance(n, ast.Call) and getattr(n.func, "id", None) == "Finding" for n in ast.walk(fn)):
                continue
            dicts = [n.value for n in ast.walk(fn) if isinstance(n, ast.keyword) and n.arg == "evidence"]
            dicts += [n for n in ast.walk(fn) if isinstance(n, ast.Dict)
                      and {"streams", "filter"} & {k.value for k in n.keys if isinstance(k, ast.Constant)}]
            for d in dicts:
                if isinstance(d, ast.Dict):
                    for k in d.keys:
                        if isinstance(k, ast.Constant) and isinstance(k.value, str) and not _mentions(doc, k.value):
                            missing.add(f"{path.stem}.md: {k.value}")
    assert not missing, sorted(missing)


def test_every_analyzer_has_a_page_and_every_finding_a_link():
    from amqpcap.engine.registered import analyzers

    for name in analyzers():
        _page(name)
    for fid in finding_ids_in_code():
        row = re.search(r"^\| `" + re.escape(fid) + r"` \|.*$", FINDINGS_DOC, re.M).group(0)
        links = re.findall(r"\]\((analyzers/[a-z0-9]+\.md)(#[a-z0-9-]+)?\)", row)  # (amqp10.md: a digit)
        assert links, f"findings.md: `{fid}` links to no analyzer page"
        for page, anchor in links:
            text = (ROOT / "docs" / page).read_text()
            if anchor:
                slugs = {re.sub(r"[^a-z0-9 -]", "", h.lower()).strip().replace(" ", "-")
                         for h in re.findall(r"^#+ (.+)$", text, re.M)}
                assert anchor[1:] in slugs, f"findings.md: `{fid}` links to {page}{anchor}, no such heading"


def test_relative_links_resolve():
    """Every relative link in README.md, docs/ and the notebooks' markdown points to a file that
    exists (and, for a #anchor into a markdown page, to one of its headings)."""
    import json

    def slugs(text: str) -> set[str]:
        return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
                for h in re.findall(r"^#+ (.+)$", text, re.M)}

    sources = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    texts = {p: p.read_text() for p in sources}
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        texts[nb] = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    broken = []
    for path, text in texts.items():
        text = re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", text, flags=re.S))  # not in code
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                broken.append(f"{path.relative_to(ROOT)}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in slugs(dest.read_text()):
                broken.append(f"{path.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, broken
