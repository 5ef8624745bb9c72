"""Terminal rendering of analyzer results (rich): summary numbers, findings, table rows."""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any, Callable, Iterable

import pandas as pd
from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from ..analysis.registry import AnalyzerResult, Finding
from ..model.written_values import is_rate, is_seconds, iso_utc
from ..model.wording import counted

SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


def findings_table(findings: list[Finding], title: str = "Findings") -> Table:
    """The findings, worst first. The id never breaks (it is what docs/findings.md is searched
    for); the free text and the filter wrap, folding a word longer than its column rather than
    cutting it."""
    t = Table(title=title, title_justify="left", show_lines=True)
    t.add_column("severity", no_wrap=True)
    t.add_column("id", no_wrap=True)
    t.add_column("finding", overflow="fold")
    t.add_column("open in Wireshark", overflow="fold")
    for f in findings:
        t.add_row(
            f"[{SEVERITY_STYLE[f.severity]}]{f.severity}[/]",
            f.id,
            f"{f.title}\n[dim]{f.advice}[/dim]" + "".join(
                f"\n[dim]Also explains {e['finding']} (not a separate problem): {e['why']}.[/dim]"
                for e in f.evidence.get("explains", [])),
            str(f.evidence.get("filter", ""))
            + (f"\n[dim]filter: {f.evidence['filter_covers']}[/dim]" if "filter_covers" in f.evidence else ""),
        )
    return t


# -- tables that fit the console by leaving columns out ----------------------------------------

#: wider than any console: a table measured within it is as wide as its cells make it
_MEASURE_WIDTH = 1 << 20


def fit_columns(console: Console, new_table: Callable[[], Table], columns: list[tuple[str, dict[str, Any]]],
                rows: list[list[str]], keep: Iterable[int], then: Iterable[int]) -> list[int]:
    """Which of `columns` (header, `Table.add_column` keywords) a table of `rows` (text cells)
    shows within the console's width with every header and cell whole, in their order: those
    of `keep` (the columns that say what a row is about) always, then each of `then`, tried in
    that order, that still fits. `new_table()` makes an empty table of the style printed
    (borders and padding count). Only each column's widest cell is measured: a column is as
    wide as it."""
    widest = [max((row[i] for row in rows), key=_text_width, default="") for i in range(len(columns))]

    def width(chosen: list[int]) -> int:
        t = new_table()
        for i in chosen:
            t.add_column(columns[i][0], **columns[i][1])
        t.add_row(*(Text(widest[i]) for i in chosen))
        return table_width(console, t)

    chosen = sorted(keep)
    for i in then:
        if i not in chosen and width(sorted([*chosen, i])) <= console.width:
            chosen = sorted([*chosen, i])
    return chosen


def fitted_table(console: Console, new_table: Callable[[], Table], columns: list[tuple[str, dict[str, Any]]],
                 rows: list[list[str]], keep: Iterable[int], then: Iterable[int] | None = None) -> tuple[Table, list[int]]:
    """A table of `rows` with the columns `fit_columns` chooses (`then`: all, in order), and
    their indexes. The cells are text, never markup: a queue named `[x]` is shown as it is."""
    shown = fit_columns(console, new_table, columns, rows, keep, range(len(columns)) if then is None else then)
    t = new_table()
    for i in shown:
        t.add_column(columns[i][0], **columns[i][1])
    for row in rows:
        t.add_row(*(Text(row[i]) for i in shown))
    return t, shown


def table_width(console: Console, table: Table) -> int:
    """The width `table` takes with every header and cell whole, on one line each."""
    return Measurement.get(console, console.options.update_width(_MEASURE_WIDTH), table).maximum


def _text_width(text: str) -> int:
    return max((cell_len(line) for line in text.splitlines()), default=0)


def left_out_note(columns: list[str], shown: list[int], console: Console, whole: str) -> Text | None:
    """The line under a table that says which of its `columns` were left out to fit, and where
    the table is `whole`; None when none was."""
    left_out = [c for i, c in enumerate(columns) if i not in shown]
    if not left_out:
        return None
    return Text(f"{counted(len(left_out), 'column')} left out to fit {console.width} columns: "
                f"{', '.join(left_out)}; {whole}", style="dim")


def dataframe_table(name: str, df: pd.DataFrame, max_rows: int, console: Console) -> Group:
    """The first rows of a table (`--rows N`) and as many of its columns as fit the console
    whole, in the table's order: those that name what a row is about (`_key_columns`), then the
    others while they fit, in order (a consumer tag named by its connection last); a line under
    it names those left out. The files written with --out have all of it."""
    shown_rows = df.head(max_rows)
    names = [str(c) for c in df.columns]
    columns = [(c, dict(justify="right" if pd.api.types.is_numeric_dtype(df[c]) else "left", overflow="fold"))
               for c in df.columns]
    cells = [[_fmt(v) for v in row] for row in shown_rows.itertuples(index=False)]
    keys, _, deferred = _list_order(names)
    keep = [names.index(k) for k in keys]
    then = [i for i, c in enumerate(names) if c not in deferred] + [names.index(k) for k in deferred]
    t, shown = fitted_table(console, Table, columns, cells, keep, then)
    title = f"{name} (first {len(shown_rows):,} of {len(df):,} rows)" if len(df) > max_rows else name
    note = left_out_note(names, shown, console, "--out DIR writes the whole table")
    return Group(Text(title, style="italic"), t, *([note] if note else []))


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
ALL_IN_SUMMARY = "summary.json (analyze --out DIR) has them all"
#: keys that name the object a row is about: shown first, whatever the width (`_key_columns`)
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


def _grid(header: bool = True) -> Table:
    return Table(box=None, pad_edge=False, padding=(0, 2, 0, 0), show_header=header)


def _titled(title: str, table: Table, *notes: RenderableType | None) -> Group:
    # a title of its own line: a table's title wraps to the table's (narrow) width
    return Group(Text(title, style="bold"), table, *(n for n in notes if n is not None))


def _pairs(title: str, values: dict[str, Any]) -> Group:
    shown = list(values.items())[:SUMMARY_ROWS]
    more = len(values) - len(shown)
    t = _grid(header=False)
    t.add_column(overflow="fold")
    t.add_column(justify="right", overflow="fold")
    for k, v in shown:
        t.add_row(label(k), fmt_value(k, v))
    # (under the table, not its caption: that would wrap to the table's narrow width)
    return _titled(title, t, Text(f"… and {more:,} more: {ALL_IN_SUMMARY}", style="dim") if more else None)


def _matrix(title: str, group: list[tuple[str, dict]]) -> Group:
    """Sibling mappings with the same keys (deliver_to_ack, ack_to_next_deliver, …) side by
    side: the longer of the two dimensions down the page."""
    names, rows = [k for k, _ in group], _union(d for _, d in group)
    t = _grid()
    if len(rows) >= len(names):
        t.add_column("", overflow="fold")
        for n in names:
            t.add_column(label(n), justify="right", overflow="fold")
        for k in rows:
            t.add_row(label(k), *(fmt_value(k, d.get(k)) if k in d else "" for _, d in group))
    else:
        t.add_column("", overflow="fold")
        for k in rows:
            t.add_column(label(k), justify="right", overflow="fold")
        for n, d in group:
            t.add_row(label(n), *(fmt_value(k, d[k]) if k in d else "" for k in rows))
    return _titled(title, t)


def _records(title: str, items: list[dict], console: Console) -> Group:
    """A list of objects (consumers, size bins): one column per object when there are few and
    they fit the console whole, else one row per object with its names and headline numbers."""
    if len(items) <= TRANSPOSE_MAX:
        t = _transposed(items)
        if table_width(console, t) <= console.width:
            return _titled(title, t)
    return _titled(title, *_rows(items, console))


def _transposed(items: list[dict]) -> Table:
    t = _grid(header=len(items) > 1)
    t.add_column("", overflow="fold")
    for item in items:
        name = next((item[k] for k in _NAME_KEYS if isinstance(item.get(k), str)), None)
        t.add_column(str(name) if name and len(items) > 1 else "", justify="right", overflow="fold")
    for k in _union(items):
        t.add_row(label(k), *(fmt_value(k, item.get(k)) if k in item else "" for item in items))
    return t


def _list_order(keys: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(name columns, the others, the names left to the end) of a table or list: the columns
    that say what a row is about (`_NAME_KEYS`, in that order) are shown whatever the width.
    A consumer is named as the operator knows it, by its connection's label when there is one:
    the broker's random amq.ctag then adds nothing, and is shown only when all else fits."""
    deferred = ["consumer_tag"] if "connection" in keys and "consumer_tag" in keys else []
    names = [k for k in _NAME_KEYS if k in keys and k not in deferred]
    return names, [k for k in keys if k not in names and k not in deferred], deferred


def _list_columns(keys: list[str]) -> tuple[list[str], list[str]]:
    """(name columns, every column in the order they are shown while they fit): names first,
    then percentiles, rates, shares, other times, the others, a deferred name (`_list_order`)."""
    names, others, deferred = _list_order(keys)
    measured = sorted((k for k in others if is_seconds(k) or is_rate(k) or _is_share(k)), key=_headline)
    return names, names + measured + [k for k in others if k not in measured] + deferred


def _rows(items: list[dict], console: Console) -> tuple[Table, Text | None]:
    """One row per object, as many columns as fit the console whole (`fit_columns`), and the
    line that says which rows and columns were left out."""
    names, order = _list_columns(_union(items))
    shown = items[:SUMMARY_ROWS]
    columns = [(label(k), dict(justify="left" if k in names else "right", overflow="fold")) for k in order]
    cells = [[fmt_value(k, item.get(k)) if k in item else "" for k in order] for item in shown]
    t, chosen = fitted_table(console, _grid, columns, cells, range(len(names)))
    left_out = left_out_note([label(k) for k in order], chosen, console, ALL_IN_SUMMARY)
    if len(shown) < len(items):
        rows_note = Text(f"first {len(shown)} of {len(items):,} rows: {ALL_IN_SUMMARY}", style="dim")
        left_out = rows_note if left_out is None else Text("\n").join([rows_note, left_out])
    return t, left_out


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


def _section(title: str, key: str, value: Any, console: Console) -> list[RenderableType]:
    if _is_records(value):
        return [_records(title, value, console)]
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
            out += _section(f"{title} › {label(k)}", k, v, console)
    return out


def summary_renderables(summary: dict[str, Any], console: Console) -> list[RenderableType]:
    """An analyzer's summary numbers (`AnalyzerResult.summary`: the keys of summary.json,
    docs/summary.md) as small tables, each value in its unit, each fitting the console's width."""
    out: list[RenderableType] = []
    for key, value in summary.items():
        out += _section(label(key), key, value, console)
    return out


def no_findings_line(connections: int, packets: int, analyzer_names: list[str], notes: int = 0) -> str:
    """What was checked when nothing crossed a threshold: "No findings" alone reads like a
    clean bill of health whatever was looked at. With info notes (not problems on their own),
    "no problem found", and how many notes follow."""
    by = f"{len(analyzer_names)} analyzers" if len(analyzer_names) > 1 else f"the {analyzer_names[0]} analyzer"
    checked = f"{counted(connections, 'AMQP connection')}, {counted(packets, 'packet')} checked by {by}"
    if notes:
        return (f"No problem found: {checked}; nothing crossed a warning threshold (docs/findings.md); "
                f"{counted(notes, 'note')} below.")
    return f"No findings: {checked}; nothing crossed a threshold (docs/findings.md)."


def print_result(console: Console, result: AnalyzerResult, rows: int = 0, no_findings: str = "No findings.") -> None:
    """An analyzer's summary numbers, then its findings (or `no_findings`), then the first
    `rows` rows of each of its tables; with rows=0 the tables are only named."""
    for part in summary_renderables(result.summary, console):
        console.print(part)
        console.print()
    console.print(findings_table(result.findings) if result.findings else no_findings, highlight=False)
    if rows > 0:
        for name, df in result.tables.items():
            console.print(dataframe_table(f"{result.name}: {name}", df, rows, console))
    elif result.tables:
        listed = ", ".join(f"{name} ({counted(len(df), 'row')})" for name, df in result.tables.items())
        console.print(f"Tables: {listed}. --rows N prints the first N rows of each; --out DIR writes them whole.",
                      style="dim", highlight=False)
