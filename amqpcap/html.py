"""report.html: one self-contained page (plots embedded) with findings, tables and plots."""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

import pandas as pd

from .analysis import AnalyzerResult
from .capture import Capture
from .wording import counted

MAX_ROWS = 50

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;max-width:1200px;color:#222;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}
.meta{color:#555}.finding{border-left:6px solid #999;padding:.5em 1em;margin:.8em 0;background:#fafafa}
.critical{border-color:#c0392b}.warning{border-color:#e6a700}.info{border-color:#2e86c1}
.sev{font-weight:bold;text-transform:uppercase;font-size:.8em}.critical .sev{color:#c0392b}.warning .sev{color:#b07d00}.info .sev{color:#2e86c1}
code{background:#f0f0f0;padding:.1em .3em;border-radius:3px}pre{background:#f6f6f6;padding:.6em;overflow-x:auto;font-size:.85em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}td,th{border:1px solid #ddd;padding:.2em .5em;text-align:right}
th{background:#f0f0f0}.scroll{overflow-x:auto}.evidence th,.evidence td{text-align:left}.evidence th{font-weight:normal;color:#555}img{max-width:100%;border:1px solid #eee;margin:.5em 0}.note{color:#555;font-size:.9em}
"""


def _table(df: pd.DataFrame) -> str:
    shown = df.head(MAX_ROWS)
    more = f'<p class="note">first {MAX_ROWS} of {len(df):,} rows; all rows are in the CSV/Parquet files beside this report.</p>' if len(df) > MAX_ROWS else ""
    return '<div class="scroll">' + shown.to_html(index=False, na_rep="", border=0, escape=True, float_format=lambda v: f"{v:.6g}") + "</div>" + more


def _value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return ", ".join(_value(x) for x in v)
    if isinstance(v, dict):
        return "; ".join(f"{k}: {_value(x)}" for k, x in v.items())
    return str(v)


def _evidence(evidence: dict[str, Any]) -> str:
    rows = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(_value(v))}</td></tr>" for k, v in evidence.items())
    return f'<table class="evidence">{rows}</table>'


def _img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}">'


def _finding(f: dict[str, Any]) -> str:
    evidence = {k: v for k, v in f["evidence"].items() if k != "filter"}
    flt = f["evidence"].get("filter", "")
    return (
        f'<div class="finding {f["severity"]}"><span class="sev">{f["severity"]}</span> '
        f'<code>{html.escape(f["id"])}</code><h3>{html.escape(f["title"])}</h3>'
        + (f"<p>Open in Wireshark: <code>{html.escape(flt)}</code></p>" if flt else "")
        + _evidence(evidence)
        + f'<p><b>What to try:</b> {html.escape(f.get("advice", ""))}</p></div>'
    )


def _redacted(r: dict[str, Any]) -> str:
    """What this report (and every table beside it) leaves out, with the counts."""
    items = [
        f"{r['sasl_responses']:,} SASL responses (connection.start-ok, connection.secure-ok: they carry the "
        "password) and {0:,} SASL challenges (connection.secure): never decoded, only the mechanism and, "
        "for PLAIN and AMQPLAIN, the user name are shown".format(r["sasl_challenges"]),
        f"{r['update_secrets']:,} new secrets of connection.update-secret: never decoded, only the reason is shown",
    ]
    if r["bodies_kept"]:
        items.append(f"message bodies were kept on request (--bodies): {r['body_bytes_kept']:,} of "
                     f"{r['body_bytes_seen']:,} body bytes, in the bodies table beside this report (not in it)")
    else:
        items.append(f"message bodies were not kept ({r['body_bytes_seen']:,} body bytes seen): only their sizes "
                     "are shown; amqpcap analyze --bodies keeps them")
    return ("<h2>Redacted</h2><ul class='note'>" + "".join(f"<li>{html.escape(i)}</li>" for i in items) + "</ul>")


def write_report(cap: Capture, results: list[AnalyzerResult], summary: dict[str, Any], out: Path) -> Path:
    """Write out/report.html. Plots must already be in `out` (report.write_results draws them)."""
    c = summary["capture"]
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>amqpcap: {html.escape(Path(c['path']).name)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>amqpcap report: {html.escape(Path(c['path']).name)}</h1>",
        f"<p class='meta'>{c['packets']:,} packets ({c['format']}{', gzip' if c['compressed'] else ''}, "
        f"{', '.join(c['link_types'])}), {counted(c['connections'], 'AMQP connection')}, {counted(c['frames'], 'frame')}, "
        f"{c['duration_s']:.3f} s from {html.escape(str(c['first_ts']))}.</p>",
    ]
    if c["warnings"]:
        parts.append("<p><b>Warnings:</b> " + "; ".join(html.escape(w) for w in c["warnings"]) + "</p>")
    parts.append("<h2>Findings</h2>")
    if summary["findings"]:
        parts += [_finding(f) for f in summary["findings"]]
    else:
        parts.append("<p>No findings: nothing in this capture crossed a threshold (docs/findings.md).</p>")
    parts.append("<h2>Connections</h2>" + _table(cap.connections))
    methods = pd.DataFrame(list(summary["methods"].items()), columns=["method", "frames"])
    parts.append("<h2>Methods</h2>" + _table(methods))
    if len(cap.anomalies):
        parts.append("<h2>Anomalies</h2><p class='note'>What was not decoded, and why.</p>" + _table(cap.anomalies))
    for r in results:
        parts.append(f"<h2>{html.escape(r.name)}</h2>")
        for p in r.plots:
            png = out / f"{p.name}.png"
            if png.exists():
                parts.append(f"<h3>{html.escape(p.title)}</h3>{_img(png)}")
        for name, df in r.tables.items():
            parts.append(f"<h3>{html.escape(name)}</h3>{_table(df)}")
    parts.append(_redacted(summary["redacted"]))
    parts.append("</body></html>")
    path = out / "report.html"
    path.write_text("\n".join(parts), encoding="utf-8")
    return path

