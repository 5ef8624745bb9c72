"""Terminal rendering of analyzer results (rich)."""

from __future__ import annotations

import pandas as pd
from rich.console import Console
from rich.table import Table

from .analysis import AnalyzerResult, Finding

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
    """The first rows and columns of a table; the files written with --out have all of it."""
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
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def print_result(console: Console, result: AnalyzerResult, max_rows: int = 15) -> None:
    if result.findings:
        console.print(findings_table(result.findings))
    for name, df in result.tables.items():
        console.print(dataframe_table(f"{result.name}: {name}", df, max_rows))
