"""What every analyzer returns, and the decorator that registers it.

An analyzer is a module in `amqpcap/analyzers/` with one class decorated `@analyzer("name")`, a
`~amqpcap.analysis.contract.Analyzer` (a carried state, a step over rows, a merge, a finish:
docs/writing-an-analyzer.md) returning an :class:`AnalyzerResult`. It reads only the ingestion
tables (docs/tables.md) and works on whole columns. The engine finds every registered analyzer
and runs it (`amqpcap.engine.registered`); the CLI gets a subcommand of the same name, and
`amqpcap analyze` runs every analyzer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

import pandas as pd

from .contract import Analyzer

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


#: every analyzer class registered so far, as one instance: {name: analyzer}
_REGISTERED: dict[str, Analyzer] = {}


def analyzer(name: str) -> Callable[[type[Analyzer]], type[Analyzer]]:
    """Register an `~amqpcap.analysis.contract.Analyzer` class under ``name`` (also its CLI
    subcommand; its docstring's first line is the subcommand's help), as one instance. The engine
    finds it (`amqpcap.engine.registered.analyzers`) and derives its runs from it
    (`amqpcap.analysis.contract.split_of`)."""

    def wrap(cls: type[Analyzer]) -> type[Analyzer]:
        if not (isinstance(cls, type) and issubclass(cls, Analyzer)):
            raise TypeError(f"@analyzer({name!r}) registers a subclass of amqpcap.analysis.contract.Analyzer")
        cls.name = name
        _REGISTERED[name] = cls()
        return cls

    return wrap


def registered() -> dict[str, Analyzer]:
    """The analyzers registered so far (those whose module was imported): {name: analyzer}, by name."""
    return dict(sorted(_REGISTERED.items()))


def rank(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (-SEVERITY_RANK[f.severity], -f.impact, f.id))


