"""Writing results: tables (CSV/Parquet), plots (PNG), summary.json and report.html."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .analysis import AnalyzerResult, Finding, rank
from .capture import Capture
from .errors import UsageError

FORMATS = ("csv", "parquet")


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        return None if math.isnan(v) or math.isinf(v) else float(v)
    if isinstance(v, (np.bool_,)):
        return bool(v)
    if isinstance(v, pd.Timestamp):
        return v.isoformat()
    if v is pd.NA or v is pd.NaT:
        return None
    return v


def _csv_ready(df: pd.DataFrame) -> pd.DataFrame:
    """Timestamps as ISO 8601 text made by numpy in one call: pandas formats datetimes one
    value at a time, which dominated writing million-row tables."""
    cols = [c for c in df.columns if isinstance(df[c].dtype, pd.DatetimeTZDtype) or df[c].dtype.kind == "M"]
    if not cols:
        return df
    out = df.copy(deep=False)
    for c in cols:
        values = out[c].dt.tz_convert("UTC").dt.tz_localize(None) if isinstance(out[c].dtype, pd.DatetimeTZDtype) else out[c]
        arr = values.to_numpy(dtype="datetime64[ns]")
        text = np.datetime_as_string(arr, unit="ns")
        text = np.char.add(text, "Z").astype(object)
        text[np.isnat(arr)] = ""
        out[c] = text
    return out


def write_table(df: pd.DataFrame, path_no_ext: Path, fmt: str) -> Path:
    if fmt not in FORMATS:
        raise UsageError(f"unknown table format {fmt!r}: use csv or parquet")
    path = path_no_ext.with_suffix("." + fmt)
    if fmt == "csv":
        _csv_ready(df).to_csv(path, index=False)
    else:
        try:
            df.to_parquet(path, index=False)
        except ImportError:
            raise UsageError("writing Parquet needs pyarrow: pip install 'amqpcap[parquet]'") from None
    return path


def write_result(result: AnalyzerResult, out: Path, fmt: str = "csv", plots: bool = True) -> list[Path]:
    """An analyzer's tables as `<analyzer>-<table>.<fmt>` and its plots as `<plot>.png`."""
    out.mkdir(parents=True, exist_ok=True)
    written = [write_table(df, out / f"{result.name}-{name}", fmt) for name, df in result.tables.items()]
    if plots:
        written += draw_plots(result, out)
    return written


def draw_plots(result: AnalyzerResult, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for p in result.plots:
        path = out / f"{p.name}.png"
        p.draw(path)
        plt.close("all")
        paths.append(path)
    return paths


def capture_summary(cap: Capture) -> dict[str, Any]:
    s = cap.summary
    return {
        "path": s["path"],
        "format": s["format"],
        "compressed": s["compressed"],
        "file_bytes": s["file_bytes"],
        "packets": s["packets"],
        "tcp_packets": s["tcp_packets"],
        "first_ts": s["first_ts"],
        "last_ts": s["last_ts"],
        "duration_s": (s["last_ts"] - s["first_ts"]).total_seconds() if s["first_ts"] is not None else 0.0,
        "link_types": s["link_types"],
        "connections": len(cap.connections),
        "frames": len(cap.frames),
        "anomalies": {str(k): int(n) for k, n in cap.anomalies["kind"].value_counts().items() if n},
        "warnings": s["warnings"],
        "tls": _tls_summary(cap),
    }


def _tls_summary(cap: Capture) -> dict[str, Any]:
    c = cap.connections
    tls = c["tls"] if "tls" in c else pd.Series([], dtype=bool)
    decrypted = c["tls_decrypted"] if "tls_decrypted" in c else pd.Series([], dtype=bool)
    return {"connections": int(tls.sum()), "decrypted": int(decrypted.sum()),
            "skipped": int((tls & ~decrypted).sum()), "keylog": cap.summary.get("tls_keylog")}


def redaction_summary(cap: Capture) -> dict[str, Any]:
    """What the outputs leave out on purpose: SASL responses and challenges (passwords),
    connection.update-secret secrets, and message bodies unless asked for (docs/summary.md)."""
    counts = cap.frames["method"].value_counts()
    n = lambda *methods: int(sum(counts.get(m, 0) for m in methods))  # noqa: E731
    body = cap.frames["type"] == "body"
    seen = int(cap.frames.loc[body, "size_bytes"].sum())
    kept = 0 if cap.bodies is None else int(cap.bodies["body"].map(len).sum())
    return {
        "sasl_responses": n("connection.start-ok", "connection.secure-ok"),
        "sasl_challenges": n("connection.secure"),
        "update_secrets": n("connection.update-secret"),
        "bodies_kept": cap.bodies is not None,
        "body_bytes_seen": seen,
        "body_bytes_kept": kept,
    }


def bodies_for_csv(bodies: pd.DataFrame) -> pd.DataFrame:
    """CSV holds text: bodies as UTF-8, other bytes escaped (\\xNN). Parquet keeps the bytes."""
    out = bodies.copy(deep=False)
    out["body"] = [b.decode("utf-8", "backslashreplace") for b in bodies["body"]]
    return out


def write_bodies(bodies: pd.DataFrame, out: Path, fmt: str) -> Path:
    """The bodies table, written only when asked for (`analyze --bodies`)."""
    out.mkdir(parents=True, exist_ok=True)
    return write_table(bodies_for_csv(bodies) if fmt == "csv" else bodies, out / "bodies", fmt)


def method_counts(cap: Capture) -> dict[str, int]:
    counts = cap.frames["method"].value_counts()
    return {str(k): int(n) for k, n in counts.items() if n}


def build_summary(cap: Capture, results: list[AnalyzerResult]) -> dict[str, Any]:
    """summary.json (schema: docs/summary.md)."""
    summary: dict[str, Any] = {"capture": capture_summary(cap), "methods": method_counts(cap),
                               "redacted": redaction_summary(cap)}
    for r in results:
        summary.update(r.summary)
    findings: list[Finding] = rank([f for r in results for f in r.findings])
    summary["findings"] = [f.to_json() for f in findings]
    return _jsonable(summary)


def write_summary(summary: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "summary.json"
    path.write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    return path
