"""Terminal rendering of analyzer results (rich): summary numbers, findings, table rows."""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any

import pandas as pd
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from .analysis import AnalyzerResult, Finding
from .written_values import is_rate, is_seconds, iso_utc
from .wording import counted

SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


def findings_table(findings: list[Finding]) -> Table:
    t = Table(title="Findings", title_justify="left", show_lines=True)
    t.add_column("severity")
    t.add_column("id")
    t.add_column("finding")
    t.add_column("open in Wireshark")
    for f in findings:
        t.add_row(
            f"[{SEVERITY_STYLE[f.severity]}]{f.severity}[/]",
            f.id,
            f"{f.title}\n[dim]{f.advice}[/dim]",
            str(f.evidence.get("filter", "")),
        )
    return t


MAX_COLUMNS = 10
MAX_CELL = 40


def dataframe_table(name: str, df: pd.DataFrame, max_rows: int = 15) -> Table:
    """The first rows and columns of a table (`--rows N`); the files written with --out have all of it."""
    cols = list(df.columns[:MAX_COLUMNS])
    notes = []
    if len(df) > max_rows:
        notes.append(f"{len(df):,} rows")
    if len(df.columns) > MAX_COLUMNS:
        notes.append(f"{len(cols)} of {len(df.columns)} columns")
    t = Table(title=f"{name} ({', '.join(notes)})" if notes else name, title_justify="left")
    for col in cols:
        t.add_column(str(col), justify="right" if pd.api.types.is_numeric_dtype(df[col]) else "left",
                     max_width=MAX_CELL, overflow="ellipsis", no_wrap=True)
    for row in df[cols].head(max_rows).itertuples(index=False):
        t.add_row(*(_fmt(v) for v in row))
    return t


def _fmt(v) -> str:
    if v is None or (not isinstance(v, (list, dict, str)) and pd.isna(v)):
        return ""
    if isinstance(v, (dt.datetime, pd.Timestamp)):
        return iso_utc(v)
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


# -- summary numbers (AnalyzerResult.summary, the same numbers as summary.json) --------------

#: at most this many objects of a list (consumers, size bins) and entries of a mapping are
#: shown; summary.json has them all
SUMMARY_ROWS = 12
#: a list of at most this many objects is shown one column per object, its keys as rows
TRANSPOSE_MAX = 3
#: at most this many columns of a list of more than TRANSPOSE_MAX objects (names first, then
#: times, rates and shares): more would squeeze the names into a few letters at 120 columns
LIST_COLUMNS = 9
NAME_WIDTH = 24
ALL_IN_SUMMARY = "summary.json (analyze --out DIR) has them all"
#: keys that name the object a row is about: first when a list's columns are cut
_NAME_KEYS = ("connection", "queue", "consumer_tag", "stream", "channel", "direction", "range")


def _sig(v: float, digits: int = 3) -> str:
    """`v` with `digits` significant digits (no fewer integer digits), thousands separated."""
    if isinstance(v, int) or (float(v).is_integer() and abs(v) < 1e15):
        return f"{int(v):,}"
    a = abs(v)
    if a >= 10 ** (digits - 1):
        return f"{v:,.0f}"
    return f"{v:,.{digits - 1 - math.floor(math.log10(a))}f}"


def fmt_seconds(v: float) -> str:
    """A duration: milliseconds below one second (`5.40 ms`), else seconds (`10.13 s`)."""
    if v == 0:
        return "0 s"
    return f"{_sig(v, 4)} s" if abs(v) >= 1 else f"{_sig(v * 1000)} ms"


def _is_share(key: str) -> bool:
    return key.startswith("share") or key.endswith("_share") or "_share_" in key or key.endswith("utilisation")


def fmt_value(key: str, v: Any) -> str:
    """One summary value, read by its key's unit: `_s` seconds, rates per second, shares
    (0..1) as percent, counts with thousands separators; None (nothing measured) as a dash."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (list, tuple)):
        return ", ".join(fmt_value(key, x) for x in v) or "–"
    if isinstance(v, (dt.datetime, pd.Timestamp)):
        return iso_utc(v)
    if not isinstance(v, (int, float)):
        return str(v)
    if is_seconds(key):
        return fmt_seconds(v)
    if is_rate(key):
        return f"{_sig(v)} Mbit/s" if "mbit" in key else f"{_sig(v)}/s"
    if _is_share(key):
        return f"{_sig(v * 100)} %"
    if key == "percent" or key.endswith("_percent"):
        return f"{_sig(v)} %"
    return _sig(v)


def label(key: str) -> str:
    """A summary key as a label: its unit moves to the value (`p50_s` → `p50`)."""
    if key.endswith("_per_capture_s"):  # (its value says /s: "delivered msgs over the capture: 144.3/s")
        key = key[: -len("_per_capture_s")] + "_over_the_capture"
    elif key.endswith("_per_s"):
        key = key[: -len("_per_s")]
    elif key.endswith("_s"):
        key = key[:-2]
    return key.replace("_", " ")


def _is_scalar(v: Any) -> bool:
    return not isinstance(v, (dict, list, tuple)) or (isinstance(v, (list, tuple)) and all(_is_scalar(x) and not isinstance(x, (list, tuple)) for x in v))


def _is_records(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


def _is_flat(v: Any) -> bool:
    return isinstance(v, dict) and bool(v) and all(_is_scalar(x) for x in v.values())


def _union(dicts) -> list[str]:
    return list(dict.fromkeys(k for d in dicts for k in d))


def _grid(caption: str | None = None, header: bool = True) -> Table:
    return Table(caption=caption, caption_justify="left", box=None, pad_edge=False, padding=(0, 2, 0, 0),
                 show_header=header)


def _titled(title: str, table: Table) -> Group:
    # a title of its own line: a table's title wraps to the table's (narrow) width
    return Group(Text(title, style="bold"), table)


def _pairs(title: str, values: dict[str, Any]) -> Group:
    shown = list(values.items())[:SUMMARY_ROWS]
    more = len(values) - len(shown)
    t = _grid(f"… and {more:,} more: {ALL_IN_SUMMARY}" if more else None, header=False)
    t.add_column()
    t.add_column(justify="right")
    for k, v in shown:
        t.add_row(label(k), fmt_value(k, v))
    return _titled(title, t)


def _matrix(title: str, group: list[tuple[str, dict]]) -> Group:
    """Sibling mappings with the same keys (deliver_to_ack, ack_to_next_deliver, …) side by
    side: the longer of the two dimensions down the page."""
    names, rows = [k for k, _ in group], _union(d for _, d in group)
    t = _grid()
    if len(rows) >= len(names):
        t.add_column("")
        for n in names:
            t.add_column(label(n), justify="right")
        for k in rows:
            t.add_row(label(k), *(fmt_value(k, d.get(k)) if k in d else "" for _, d in group))
    else:
        t.add_column("")
        for k in rows:
            t.add_column(label(k), justify="right")
        for n, d in group:
            t.add_row(label(n), *(fmt_value(k, d[k]) if k in d else "" for k in rows))
    return _titled(title, t)


def _records(title: str, items: list[dict]) -> Group:
    """A list of objects (consumers, size bins): one column per object when there are few,
    else one row per object with its names and headline numbers."""
    return _titled(title, _transposed(items) if len(items) <= TRANSPOSE_MAX else _rows(items))


def _transposed(items: list[dict]) -> Table:
    t = _grid(header=len(items) > 1)
    t.add_column("")
    for item in items:
        name = next((item[k] for k in _NAME_KEYS if isinstance(item.get(k), str)), None)
        t.add_column(str(name) if name and len(items) > 1 else "", justify="right")
    for k in _union(items):
        t.add_row(label(k), *(fmt_value(k, item.get(k)) if k in item else "" for item in items))
    return t


def _list_columns(keys: list[str]) -> tuple[list[str], list[str]]:
    """(name columns, columns shown): names first, then percentiles, rates, shares, times."""
    # named as the operator knows it (a connection label), the broker's random amq.ctag adds nothing
    hidden = {"consumer_tag"} if "connection" in keys else set()
    names = [k for k in _NAME_KEYS if k in keys and k not in hidden]
    measured = sorted((k for k in keys if k not in names and (is_seconds(k) or is_rate(k) or _is_share(k))),
                      key=_headline)
    rest = [k for k in keys if k not in names and k not in measured and k not in hidden]
    return names, (names + measured + rest)[:LIST_COLUMNS]


def _rows(items: list[dict]) -> Table:
    keys = _union(items)
    names, columns = _list_columns(keys)
    shown = items[:SUMMARY_ROWS]
    notes = [f"first {len(shown)} of {len(items):,} rows"] if len(shown) < len(items) else []
    notes += [f"{len(columns)} of {len(keys)} columns"] if len(columns) < len(keys) else []
    t = _grid(f"{', '.join(notes)}: {ALL_IN_SUMMARY}" if notes else None)
    for k in columns:  # names get their width (up to NAME_WIDTH) and fold rather than being cut: they say who
        widest = max((len(fmt_value(k, item.get(k))) for item in shown), default=0)
        t.add_column(label(k), justify="left" if k in names else "right", overflow="fold" if k in names else "ellipsis",
                     min_width=min(widest, NAME_WIDTH) if k in names else None)
    for item in shown:
        t.add_row(*(fmt_value(k, item.get(k)) if k in item else "" for k in columns))
    return t


def _headline(key: str) -> int:
    """Which measured columns of a list come first: percentiles, then rates, shares, other times."""
    return 0 if re.search(r"(^|_)p\d\d(_|$)", key) else 1 if is_rate(key) else 2 if _is_share(key) else 3


def _groups(items: list[tuple[str, Any]]) -> list[list[tuple[str, Any]]]:
    """Consecutive flat mappings that start with the same key belong together."""
    groups: list[list[tuple[str, Any]]] = []
    for k, v in items:
        prev = groups[-1][-1][1] if groups else None
        if _is_flat(v) and _is_flat(prev) and next(iter(v)) == next(iter(prev)):
            groups[-1].append((k, v))
        else:
            groups.append([(k, v)])
    return groups


def _section(title: str, key: str, value: Any) -> list[RenderableType]:
    if _is_records(value):
        return [_records(title, value)]
    if not isinstance(value, dict):
        return [_pairs(title, {key: value})]
    scalars = {k: v for k, v in value.items() if _is_scalar(v)}
    out: list[RenderableType] = [_pairs(title, scalars)] if scalars else []
    nested = [(k, v) for k, v in value.items() if not _is_scalar(v) and v]
    for group in _groups(nested):
        if len(group) > 1:
            out.append(_matrix(title, group))
        else:
            k, v = group[0]
            out += _section(f"{title} › {label(k)}", k, v)
    return out


def summary_renderables(summary: dict[str, Any]) -> list[RenderableType]:
    """An analyzer's summary numbers (`AnalyzerResult.summary`: the keys of summary.json,
    docs/summary.md) as small tables, each value in its unit."""
    out: list[RenderableType] = []
    for key, value in summary.items():
        out += _section(label(key), key, value)
    return out


def no_findings_line(connections: int, packets: int, analyzer_names: list[str]) -> str:
    """What was checked when nothing crossed a threshold: "No findings" alone reads like a
    clean bill of health whatever was looked at."""
    by = f"{len(analyzer_names)} analyzers" if len(analyzer_names) > 1 else f"the {analyzer_names[0]} analyzer"
    return (f"No findings: {counted(connections, 'AMQP connection')}, {counted(packets, 'packet')} checked by {by}; "
            f"nothing crossed a threshold (docs/findings.md).")


def print_result(console: Console, result: AnalyzerResult, rows: int = 0, no_findings: str = "No findings.") -> None:
    """An analyzer's summary numbers, then its findings (or `no_findings`), then the first
    `rows` rows of each of its tables; with rows=0 the tables are only named."""
    for part in summary_renderables(result.summary):
        console.print(part)
        console.print()
    console.print(findings_table(result.findings) if result.findings else no_findings, highlight=False)
    if rows > 0:
        for name, df in result.tables.items():
            console.print(dataframe_table(f"{result.name}: {name}", df, rows))
    elif result.tables:
        listed = ", ".join(f"{name} ({counted(len(df), 'row')})" for name, df in result.tables.items())
        console.print(f"Tables: {listed}. --rows N prints the first N rows of each; --out DIR writes them whole.",
                      style="dim", highlight=False)
