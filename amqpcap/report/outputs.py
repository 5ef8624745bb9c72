"""Writing results: tables (CSV/Parquet: `amqpcap.io.table_files`), plots (PNG), summary.json and
report.html, shared between forked writer processes."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from ..io.memory import release_freed_memory
from ..analysis.registry import AnalyzerResult, Plot
from ..io.load import Capture
from ..io.table_files import body_text, check_format, write_table
from ..model.plotting import agg_pyplot
from ..summary.prepared import Prepared
from .file_names import finding_streams_file


#: the capture's own tables (docs/tables.md) that `analyze --out` writes as `<name>.<fmt>`
BASE_TABLES = ("connections", "frames", "packets", "anomalies", "records")


def base_tables(cap: Capture) -> dict[str, pd.DataFrame]:
    """`BASE_TABLES`, and AMQP 1.0's frames when the capture has some (`amqp10_frames`)."""
    out = {name: getattr(cap, name) for name in BASE_TABLES}
    if len(cap.amqp10_frames):
        out["amqp10_frames"] = cap.amqp10_frames
    return out


def write_outputs(cap: Capture, results: list[AnalyzerResult], prepared: Prepared, out: Path,
                  fmt: str = "csv", plots: bool = True, base: dict[str, Any] | None = None,
                  progress: Progress | None = None) -> list[Path]:
    """What `amqpcap analyze --out DIR` writes: summary.json, the capture's tables
    (`BASE_TABLES`), every analyzer's tables and plots (and the bodies, when the capture kept
    them), and report.html when the plots are drawn; what they show is `prepared`
    (`amqpcap.summary.prepared.prepare`). ``base``: the capture's tables and bodies when `cap`
    does not hold them (a dataset's outline: `amqpcap.io.stored_tables`). ``progress``: see
    `write_results`."""
    written = [write_summary(prepared.summary, out)] + write_finding_streams(prepared, out)
    if base is None:
        written += write_results(results, out, fmt, plots=plots, bodies=cap.bodies, base=base_tables(cap),
                                 progress=progress)
    else:
        written += write_results(results, out, fmt, plots=plots, base=base, progress=progress)
    if plots:
        from .html import write_report  # it embeds the PNGs written above

        written.append(write_report(prepared, results, out))
    return written


def write_finding_streams(prepared: Prepared, out: Path) -> list[Path]:
    """Each finding's every connection, where its display filter names only some of them
    (`Prepared.finding_streams`), as `finding_streams_file`."""
    written = []
    for finding_id, rows in prepared.finding_streams.items():
        path = out / finding_streams_file(finding_id)
        rows.to_csv(path, index=False)
        written.append(path)
    return written


def write_result(result: AnalyzerResult, out: Path, fmt: str = "csv", plots: bool = True) -> list[Path]:
    """An analyzer's tables as `<analyzer>-<table>.<fmt>` and its plots as `<plot>.png`."""
    return write_results([result], out, fmt, plots)


#: ``progress(name, done, total)``: file `name` is written, `done` of the `total` files so far
Progress = Callable[[str, int, int], None]


def write_results(results: list[AnalyzerResult], out: Path, fmt: str = "csv", plots: bool = True,
                  bodies: pd.DataFrame | None = None, workers: int | None = None,
                  base: dict[str, Any] | None = None, progress: Progress | None = None) -> list[Path]:
    """Every result's tables and plots (and the `base` tables, DataFrames or tables a dataset
    writes itself (`amqpcap.io.stored_tables.StoredTable`), and the bodies table when given)
    into `out`, in `workers` processes (default: one per core, at most WRITE_WORKERS_MAX).
    Returns the paths in a fixed order: the base tables, then the results in order, each its
    tables then its plots, then the bodies. ``progress`` is told of each file as it is written,
    in whichever process (a dataset of 10M packets writes 6.3 GB of CSV in about a minute)."""
    check_format(fmt)
    out.mkdir(parents=True, exist_ok=True)
    jobs = [_Job(df.size, partial(write_table, df, out / name, fmt)) if isinstance(df, pd.DataFrame)
            else _Job(df.size, partial(df.write, out / name, fmt), fresh=True) for name, df in (base or {}).items()]
    for r in results:
        for name, df in r.tables.items():  # (rows kept on the workers write themselves: `amqpcap.io.kept_rows`)
            path = out / f"{r.name}-{name}"
            jobs.append(_Job(df.size, partial(write_table, df, path, fmt)) if isinstance(df, pd.DataFrame)
                        else _Job(df.size, partial(df.write, path, fmt), fresh=True))
        if plots:
            jobs += [_Job(PLOT_COST_CELLS, partial(_draw_plot, p, out / f"{p.name}.png")) for p in r.plots]
    if bodies is not None:
        table = bodies_for_csv(bodies) if fmt == "csv" else bodies
        jobs.append(_Job(table.size, partial(write_table, table, out / "bodies", fmt)))
    if plots and any(r.plots for r in results):
        agg_pyplot()  # imported once here, not once per forked writer
    return _run_jobs(jobs, _write_workers() if workers is None else workers, _Written(progress, len(jobs)))


#: Writing tables and drawing plots is CPU work, much of it holding the GIL (matplotlib, the
#: tables' slices made Arrow), so it is shared between forked processes, not threads. A fork
#: costs tens of milliseconds, so small outputs are written in this process: below
#: `PARALLEL_MIN_CELLS` (about 0.35 s of CSV; without plots, the tables of ten-consumers.pcap,
#: 2.9M cells, took 0.25 s in this process and 0.26-0.30 s shared with a forked writer; those of
#: flow-control.pcap.gz, 27M cells, 1.04 s and 0.59-0.72 s). Forked writers inherit the tables
#: (copy-on-write): nothing is pickled but the paths they return.
WRITE_WORKERS_MAX = 4
PARALLEL_MIN_CELLS = 10_000_000
#: what a plot costs, in table cells written to CSV in the same time: a plot takes 0.3-2.2 s
#: (on average 0.4 s on ten-consumers.pcap, 0.8 s on flow-control.pcap.gz, 0.9 s on 7 copies of
#: it), a CSV cell 26-46 ns since the core writes CSV. At 800,000 (a cell was 0.45 us when pandas
#: wrote CSV) the frames table of those 7 copies (147M cells, 3.7 s) outweighed their 11 plots:
#: this process wrote it alone while one forked writer drew every plot. `write_outputs` with 2
#: writers took 15.0-16.1 s then, 9.9-10.4 s at 25M (flow-control.pcap.gz: 11.2-12.8 s, 7.4-8.0 s)
PLOT_COST_CELLS = 25_000_000


@dataclass
class _Job:
    cost_cells: int
    write: Callable[[], Path]
    #: the job reads what it writes itself (a dataset's table: `amqpcap.io.stored_tables`), so it
    #: runs in a fresh process (spawned, not forked: it needs none of this process's memory)
    fresh: bool = False


_FORKED_JOBS: list[_Job] = []  # what forked writers run, by index: inherited, never pickled


def _run_forked_job(i: int) -> str:
    return str(_FORKED_JOBS[i].write())


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


class _Written:
    """Counts the files written for a `Progress`: called here as this process writes one, and
    by the writer pools' thread as another process has written one (`_written_away`)."""

    def __init__(self, progress: Progress | None, total: int):
        self.progress, self.total, self.done = progress, total, 0
        self.lock = threading.Lock()

    def __call__(self, path: Path | str) -> Path:
        path = Path(path)
        if self.progress is not None:
            with self.lock:
                self.done += 1
                self.progress(path.name, self.done, self.total)
        return path


def _written_away(future, written: _Written) -> None:
    """Tell `written` of the file a writer process's `future` wrote, as it ends (a failed one
    is written again here, and told then)."""
    def told(f) -> None:
        if not f.cancelled() and f.exception() is None:
            written(f.result())

    future.add_done_callback(told)


def _run_jobs(jobs: list[_Job], workers: int, written: _Written) -> list[Path]:
    fresh = [i for i, j in enumerate(jobs) if j.fresh]
    if workers < 2 or not fresh:
        return _run_here_or_forked(jobs, workers, written)
    return _run_beside_fresh(jobs, fresh, workers, written)


def _run_beside_fresh(jobs: list[_Job], fresh: list[int], workers: int, written: _Written) -> list[Path]:
    """The jobs shared between this process and `workers` - 1 spawned ones: the others here
    (not forked: this process may hold a large analysis' merged tables, which every forked
    writer's resident size would count again), the fresh ones wherever the load is lightest,
    here included (`_share_fresh`). The spawned writers take the jobs sent away one at a time,
    largest first (so that each written file is told to `written` as it is)."""
    groups = _share_fresh(jobs, fresh, workers)
    paths: dict[int, Path] = {}
    away = [g for g in groups[1:] if g]
    with ProcessPoolExecutor(max_workers=max(len(away), 1), mp_context=mp.get_context("spawn")) as pool:
        sent = sorted((i for g in away for i in g), key=lambda i: -jobs[i].cost_cells)
        spawned = [(i, pool.submit(jobs[i].write)) for i in sent]
        for _, future in spawned:
            _written_away(future, written)
        here = groups[0] + [i for i in range(len(jobs)) if not jobs[i].fresh]
        paths.update((i, written(jobs[i].write())) for i in sorted(here))
        for i, future in spawned:
            try:
                paths[i] = Path(future.result())
            except BrokenProcessPool:  # a writer died (killed, out of memory): write its job here
                paths[i] = written(jobs[i].write())
    return [paths[i] for i in range(len(jobs))]


def _share_fresh(jobs: list[_Job], fresh: list[int], workers: int) -> list[list[int]]:
    """The fresh jobs in `workers` groups of near-equal load, the first this process's, which
    also runs every job that is not fresh: the largest job first into the lightest group
    (`_balance`'s rule). The tables kept by a dataset's workers (`amqpcap.io.kept_rows`) are fresh
    and this process holds little, so it takes its share of them."""
    groups: list[list[int]] = [[] for _ in range(workers)]
    load = [sum(j.cost_cells for j in jobs if not j.fresh)] + [0] * (workers - 1)
    for i in sorted(fresh, key=lambda i: -jobs[i].cost_cells):
        lightest = load.index(min(load))
        groups[lightest].append(i)
        load[lightest] += jobs[i].cost_cells
    return groups


def _run_here_or_forked(jobs: list[_Job], workers: int, written: _Written) -> list[Path]:
    """The jobs in this process, or shared with forked writers: this process's share by
    `_balance`, the others' taken one at a time by the forked writers, largest first (so that
    each written file is told to `written` as it is)."""
    global _FORKED_JOBS
    costs = [j.cost_cells for j in jobs]
    groups = _balance(costs, workers) if workers >= 2 else []
    if len(groups) < 2 or sum(costs) < PARALLEL_MIN_CELLS or not can_fork():  # (one job: nothing to share)
        return [written(j.write()) for j in jobs]
    # the memory the analysis freed given back first: a forked writer's resident size starts as
    # this process's (the million-connection hostile capture: 1,030 MB before, 694 MB after)
    release_freed_memory()
    paths: dict[int, Path] = {}
    _FORKED_JOBS = jobs
    try:
        with ProcessPoolExecutor(max_workers=len(groups) - 1, mp_context=mp.get_context("fork")) as pool:
            away = sorted((i for g in groups[1:] for i in g), key=lambda i: -costs[i])
            forked = [(i, pool.submit(_run_forked_job, i)) for i in away]
            for _, future in forked:
                _written_away(future, written)
            paths.update((i, written(jobs[i].write())) for i in groups[0])  # this process's share
            for i, future in forked:
                try:
                    paths[i] = Path(future.result())
                except BrokenProcessPool:  # a writer died (killed, out of memory): write its job here
                    paths[i] = written(jobs[i].write())
    finally:
        _FORKED_JOBS = []
    return [paths[i] for i in range(len(jobs))]


def _draw_plot(plot: Plot, path: Path) -> Path:
    plot.draw(path)
    agg_pyplot().close("all")
    return path


def bodies_for_csv(bodies: pd.DataFrame) -> pd.DataFrame:
    """CSV holds text: bodies as UTF-8, other bytes escaped (\\xNN). Parquet keeps the bytes."""
    out = bodies.copy(deep=False)
    out["body"] = body_text(bodies["body"])
    return out


def write_summary(summary: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "summary.json"
    path.write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    return path
