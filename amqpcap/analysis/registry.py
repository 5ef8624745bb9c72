"""What every analyzer returns, and the registry the CLI and `analyze` are built from.

An analyzer is a module in `amqpcap/analyzers/` with one class decorated `@analyzer("name")`, a
`~amqpcap.analysis.contract.Analyzer` (a carried state, a step over rows, a merge, a finish:
docs/writing-an-analyzer.md) returning an :class:`AnalyzerResult`. It reads only the ingestion
tables (docs/tables.md) and works on whole columns. The CLI gets a subcommand of the same name
automatically, and `amqpcap analyze` runs every analyzer.
"""

from __future__ import annotations

import importlib
import itertools
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

import pandas as pd

from ..io.load import Capture
from .contract import Analyzer, split_of
from .partition import Split, run_whole

Severity = Literal["info", "warning", "critical"]
SEVERITY_RANK = {"critical": 2, "warning": 1, "info": 0}
#: each severity by its rank, for analyzers that grade their rows by rank (info 0, warning 1, critical 2)
SEVERITIES = {rank: name for name, rank in SEVERITY_RANK.items()}


@dataclass
class Finding:
    """One diagnosis, with the numbers that prove it.

    ``evidence`` holds the numbers (units in the key names, e.g. ``median_latency_s``), the
    ``streams`` and a few ``packets`` concerned, and ``filter``: a Wireshark display filter
    that opens the same packets. ``impact`` (0..1) ranks findings of the same severity.

    One finding per cause: every connection or consumer that shows it is one of its
    ``subjects`` (worst first), each a dict made by `amqpcap.derive.names.subject` (the connection's
    label, its stream, then that subject's own numbers), never a finding of its own.
    """

    id: str
    severity: Severity
    title: str
    evidence: dict[str, Any]
    advice: str
    impact: float = 0.0
    subjects: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "severity": self.severity, "title": self.title, "subjects": self.subjects,
                "evidence": self.evidence, "advice": self.advice}


@dataclass
class Plot:
    """A plot an analyzer can draw: ``draw(path)`` writes a PNG there."""

    name: str
    title: str
    draw: Callable[[Path], None]


@dataclass
class AnalyzerResult:
    name: str
    #: tables written as CSV/Parquet (documented in docs/analyzers.md)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    #: JSON-ready numbers for summary.json (documented in docs/summary.md)
    summary: dict[str, Any] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    plots: list[Plot] = field(default_factory=list)


AnalyzerFn = Callable[[Capture], AnalyzerResult]
_REGISTRY: dict[str, tuple[AnalyzerFn, str]] = {}
_SPLITS: dict[str, Split] = {}
_CONTRACT: dict[str, Analyzer] = {}


def analyzer(name: str) -> Callable[[type[Analyzer]], type[Analyzer]]:
    """Register an `~amqpcap.analysis.contract.Analyzer` class under ``name`` (also its CLI
    subcommand; its docstring's first line is the subcommand's help), as one instance. The engine
    derives its runs from it (`amqpcap.analysis.contract.split_of`); `analyzers` gives its
    in-memory run as the function ``(capture) -> AnalyzerResult``."""

    def wrap(cls: type[Analyzer]) -> type[Analyzer]:
        if not (isinstance(cls, type) and issubclass(cls, Analyzer)):
            raise TypeError(f"@analyzer({name!r}) registers a subclass of amqpcap.analysis.contract.Analyzer")
        cls.name = name
        _CONTRACT[name] = cls()
        _SPLITS[name] = split_of(_CONTRACT[name])
        _REGISTRY[name] = (_in_memory(_SPLITS[name], name), (cls.__doc__ or name).strip().splitlines()[0])
        return cls

    return wrap


def _in_memory(split: Split, name: str) -> AnalyzerFn:
    """The analyzer `name` on a capture in memory: its split over the one partition that is all of it."""
    def run(cap: Capture) -> AnalyzerResult:
        return run_whole(split, cap)

    run.__name__ = run.__qualname__ = name
    return run


def in_memory(name: str) -> AnalyzerFn:
    """The analyzer `name` as a function of a capture in memory (what its command runs)."""
    return analyzers()[name][0]


def contract_analyzers() -> dict[str, Analyzer]:
    """Every analyzer, as registered: {name: its `Analyzer`}."""
    analyzers()
    return dict(sorted(_CONTRACT.items()))


def splits() -> dict[str, Split]:
    """Every analyzer as the engine runs it (`amqpcap.analysis.contract.split_of`): {name: Split}."""
    analyzers()
    return dict(sorted(_SPLITS.items()))


def analyzers() -> dict[str, tuple[AnalyzerFn, str]]:
    """Every analyzer module in amqpcap/analyzers, imported once: {name: (function, help)}."""
    from .. import analyzers as pkg

    for name in pkg.names():
        importlib.import_module(f"{pkg.__name__}.{name}")
        if name not in _REGISTRY:  # (the command line knows an analyzer by its module's name)
            raise RuntimeError(f"the module amqpcap.analyzers.{name} registers no analyzer named {name!r}")
    return dict(sorted(_REGISTRY.items()))


#: The analyzers whose working set is largest, run first (the others follow in name order): the
#: results of those run before stay in memory while each runs, so the peak is least when the
#: largest working sets meet the fewest results. Measured as the rise of resident memory above
#: the results held when each started (`amqpcap analyze`, in name order): on the hostile
#: capture of a million connections (tests/hostile) clients +261 MiB, nagle +240, stalls +217,
#: the others at most +32; on 7 copies of fixtures/flow-control.pcap.gz consumers +816, stalls
#: +213, messages +167, clients +117, nagle +85. Peak RSS of the analysis in this order rather
#: than by name: 995 -> 819 MiB on the first (`analyze --out`, writing included: 1,005-1,014 ->
#: 880-889 MiB), 1,410 -> 1,402 MiB on the second (consumers' rise is mostly what it derives for
#: the others, kept).
RUN_FIRST = ("consumers", "stalls", "nagle", "clients", "messages")


def run_order(names: list[str]) -> list[str]:
    """`names` in the order `run_all` runs them: `RUN_FIRST`, then the others as given."""
    first = [n for n in RUN_FIRST if n in names]
    return first + [n for n in names if n not in first]


def run_all(cap: Capture, workers: int = 1,
            progress: Callable[[str, int, int], None] | None = None) -> list[AnalyzerResult]:
    """Every analyzer on ``cap``, results in `analyzers` order (what ``amqpcap analyze`` runs).

    One after the other by default, in `run_order` (the largest working sets first). With
    ``workers`` > 1 they run in that many threads: nearly all of their time is in numpy and
    pandas kernels, which release the GIL, and what they share (matched deliveries, consumer
    state, stream-ordered packets) is computed once (`amqpcap.io.load.computed_once`), so the
    results equal those of the serial run.

    Serial is the default because the threads' working sets add up while the time saved is
    small: on the 1M-packet benchmark (2 cores) five threads took 1.23-1.32 s against 1.39-1.89 s
    serial, but on the hostile million-connection capture (tests/hostile) they raised
    `analyze --out`'s peak RSS from 749 MiB to 970 MiB, for the same wall time (12.6 s).

    ``progress(name, done, total)`` is called as each analyzer ends."""
    registry = analyzers()
    workers = min(max(workers, 1), len(registry))
    done = itertools.count(1)

    def run(name: str, fn: AnalyzerFn) -> AnalyzerResult:
        result = fn(cap)
        if progress:
            progress(name, next(done), len(registry))
        return result

    if workers == 1:
        results = {name: run(name, registry[name][0]) for name in run_order(list(registry))}
        return [results[name] for name in registry]
    with ThreadPoolExecutor(workers, thread_name_prefix="amqpcap-analyzer") as pool:
        return list(pool.map(lambda item: run(item[0], item[1][0]), registry.items()))


def rank(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (-SEVERITY_RANK[f.severity], -f.impact, f.id))


