"""Writing results: tables (CSV/Parquet), plots (PNG), summary.json and report.html."""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from .analysis import AnalyzerResult, Finding, Plot, rank
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


NS_PER_DAY = 86_400_000_000_000
ISO_NS_CHARS = len("YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ")


def iso_utc_ns(arr: np.ndarray) -> np.ndarray:
    """datetime64[ns] as ISO 8601 UTC text with nanoseconds (`2024-05-01T12:00:00.123456789Z`),
    NaT as "", in an object array of str.

    Same text as np.datetime_as_string(unit="ns") + "Z", built 3x faster: the date part is
    formatted once per distinct day and the time digits are filled into a byte matrix column by
    column. datetime64[ns] spans 1677-2262, so the year always has four digits."""
    arr = np.asarray(arr, dtype="datetime64[ns]")
    nat = np.isnat(arr)
    ns = np.where(nat, 0, arr.view(np.int64))
    days, in_day = np.divmod(ns, NS_PER_DAY)
    unique_days, which_day = np.unique(days, return_inverse=True)
    day_text = np.datetime_as_string(unique_days.astype("datetime64[D]"), unit="D").astype("S10")
    out = np.empty((len(arr), ISO_NS_CHARS), dtype=np.uint8)
    out[:, :10] = day_text.view(np.uint8).reshape(-1, 10)[which_day.ravel()]
    out[:, 10] = ord("T")
    out[:, 13] = out[:, 16] = ord(":")
    out[:, 19] = ord(".")
    out[:, 29] = ord("Z")
    seconds, fraction_ns = np.divmod(in_day, 1_000_000_000)
    hours, rest = np.divmod(seconds, 3600)
    minutes, secs = np.divmod(rest, 60)
    for col, value in ((11, hours), (14, minutes), (17, secs)):
        out[:, col] = value // 10 + ord("0")
        out[:, col + 1] = value % 10 + ord("0")
    for col in range(28, 19, -1):
        fraction_ns, digit = np.divmod(fraction_ns, 10)
        out[:, col] = digit + ord("0")
    text = out.view(f"S{ISO_NS_CHARS}").ravel().astype(f"U{ISO_NS_CHARS}").astype(object)
    text[nat] = ""
    return text


def _csv_ready(df: pd.DataFrame) -> pd.DataFrame:
    """Timestamps as ISO 8601 text made in whole columns: pandas formats datetimes one value at
    a time, which dominated writing million-row tables."""
    cols = [c for c in df.columns if isinstance(df[c].dtype, pd.DatetimeTZDtype) or df[c].dtype.kind == "M"]
    if not cols:
        return df
    out = df.copy(deep=False)
    for c in cols:
        values = out[c].dt.tz_convert("UTC").dt.tz_localize(None) if isinstance(out[c].dtype, pd.DatetimeTZDtype) else out[c]
        out[c] = iso_utc_ns(values.to_numpy(dtype="datetime64[ns]"))
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


def write_outputs(cap: Capture, results: list[AnalyzerResult], summary: dict[str, Any], out: Path,
                  fmt: str = "csv", plots: bool = True) -> list[Path]:
    """What `amqpcap analyze --out DIR` writes: summary.json, every table and plot (and the
    bodies, when the capture kept them), and report.html when the plots are drawn."""
    written = [write_summary(summary, out)]
    written += write_results(results, out, fmt, plots=plots, bodies=cap.bodies)
    if plots:
        from .html import write_report  # it embeds the PNGs written above

        written.append(write_report(cap, results, summary, out))
    return written


def write_result(result: AnalyzerResult, out: Path, fmt: str = "csv", plots: bool = True) -> list[Path]:
    """An analyzer's tables as `<analyzer>-<table>.<fmt>` and its plots as `<plot>.png`."""
    return write_results([result], out, fmt, plots)


def write_results(results: list[AnalyzerResult], out: Path, fmt: str = "csv", plots: bool = True,
                  bodies: pd.DataFrame | None = None, workers: int | None = None) -> list[Path]:
    """Every result's tables and plots (and the bodies table when given) into `out`, in
    `workers` processes (default: one per core, at most WRITE_WORKERS_MAX). Returns the paths
    in a fixed order: results in order, each its tables then its plots, then the bodies."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown table format {fmt!r}: use csv or parquet")
    out.mkdir(parents=True, exist_ok=True)
    jobs = []
    for r in results:
        for name, df in r.tables.items():
            jobs.append(_Job(df.size, partial(write_table, df, out / f"{r.name}-{name}", fmt)))
        if plots:
            jobs += [_Job(PLOT_COST_CELLS, partial(_draw_plot, p, out / f"{p.name}.png")) for p in r.plots]
    if bodies is not None:
        table = bodies_for_csv(bodies) if fmt == "csv" else bodies
        jobs.append(_Job(table.size, partial(write_table, table, out / "bodies", fmt)))
    if plots and any(r.plots for r in results):
        _matplotlib()  # imported once here, not once per forked writer
    return _run_jobs(jobs, _write_workers() if workers is None else workers)


#: Writing tables and drawing plots is CPU work that holds the GIL (pandas' CSV writer,
#: matplotlib), so it is shared between forked processes, not threads. A fork costs tens of
#: milliseconds, so small outputs are written in this process. Forked writers inherit the
#: tables (copy-on-write): nothing is pickled but the paths they return.
WRITE_WORKERS_MAX = 4
PARALLEL_MIN_CELLS = 2_000_000
#: what a plot costs, in table cells written to CSV in the same time (measured on 1M-packet
#: captures: a plot takes 0.15-0.8 s, a CSV cell ~0.45 us)
PLOT_COST_CELLS = 800_000


@dataclass
class _Job:
    cost_cells: int
    write: Callable[[], Path]


_FORKED_JOBS: list[_Job] = []  # what forked writers run, by index: inherited, never pickled


def _run_forked_jobs(indices: list[int]) -> list[str]:
    return [str(_FORKED_JOBS[i].write()) for i in indices]


def _write_workers() -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, WRITE_WORKERS_MAX))


def can_fork() -> bool:
    """Writers are forked only from a process with no other Python thread (the CLI: run_all's
    threads have ended). A thread holding a lock at the fork (a Jupyter kernel's I/O threads)
    could leave the child waiting for it forever, so there the outputs are written here."""
    return "fork" in mp.get_all_start_methods() and threading.active_count() == 1


def _balance(costs: list[int], bins: int) -> list[list[int]]:
    """Job indices in `bins` groups of near-equal cost: the largest job first into the lightest
    group (longest-processing-time-first scheduling)."""
    groups: list[list[int]] = [[] for _ in range(bins)]
    load = [0] * bins
    for i in sorted(range(len(costs)), key=lambda i: -costs[i]):
        lightest = load.index(min(load))
        groups[lightest].append(i)
        load[lightest] += costs[i]
    return [g for g in groups if g]


def _run_jobs(jobs: list[_Job], workers: int) -> list[Path]:
    global _FORKED_JOBS
    costs = [j.cost_cells for j in jobs]
    if workers < 2 or sum(costs) < PARALLEL_MIN_CELLS or not can_fork():
        return [j.write() for j in jobs]
    groups = _balance(costs, workers)
    written: dict[int, Path] = {}
    _FORKED_JOBS = jobs
    try:
        with ProcessPoolExecutor(max_workers=len(groups) - 1, mp_context=mp.get_context("fork")) as pool:
            forked = [(g, pool.submit(_run_forked_jobs, g)) for g in groups[1:]]
            written.update((i, jobs[i].write()) for i in groups[0])  # this process's share
            for g, future in forked:
                try:
                    written.update(zip(g, map(Path, future.result())))
                except BrokenProcessPool:  # a writer died (killed, out of memory): write its share here
                    written.update((i, jobs[i].write()) for i in g)
    finally:
        _FORKED_JOBS = []
    return [written[i] for i in range(len(jobs))]


def _matplotlib():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _draw_plot(plot: Plot, path: Path) -> Path:
    plot.draw(path)
    _matplotlib().close("all")
    return path


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
    from .overview import overview

    summary["overview"] = overview(cap, results)
    return _jsonable(summary)


def write_summary(summary: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "summary.json"
    path.write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    return path
