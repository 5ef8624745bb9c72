"""Every registered analyzer, found and made runnable: in memory (what its command runs), as the
engine's steps (`amqpcap.analysis.contract.split_of`), and all of them on one capture (`run_all`).

An analyzer registers itself with ``@analyzer(name)`` (`amqpcap.analysis.registry`) when its module
in `amqpcap/analyzers/` is imported; `analyzers` imports them all, once.
"""

from __future__ import annotations

import functools
import importlib
import itertools
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from .. import analyzers as package
from ..analysis.contract import Analyzer, split_of
from ..analysis.partition import Split
from ..analysis.registry import AnalyzerResult, registered
from ..derive.tally import TallyCounts
from ..io.load import Capture
from .partitions import run_whole

AnalyzerFn = Callable[[Capture], AnalyzerResult]


def contract_analyzers() -> dict[str, Analyzer]:
    """Every analyzer module in amqpcap/analyzers, imported once: {name: its `Analyzer`}, by name."""
    for name in package.names():
        importlib.import_module(f"{package.__name__}.{name}")
    found = registered()
    for name in package.names():
        if name not in found:  # (the command line knows an analyzer by its module's name)
            raise RuntimeError(f"the module amqpcap.analyzers.{name} registers no analyzer named {name!r}")
    return found


def splits() -> dict[str, Split]:
    """Every analyzer as the engine runs it (`amqpcap.analysis.contract.split_of`): {name: Split}."""
    return {name: _split(name) for name in contract_analyzers()}


@functools.cache
def _split(name: str) -> Split:
    """One `Split` per registered analyzer, made once: the engine knows a context round that
    analyzers share by its steps."""
    return split_of(registered()[name])


def analyzers() -> dict[str, tuple[AnalyzerFn, str]]:
    """Every analyzer: {name: (its in-memory run, its help: the class docstring's first line)}."""
    return {name: (_in_memory(name), (type(a).__doc__ or name).strip().splitlines()[0])
            for name, a in contract_analyzers().items()}


@functools.cache
def _in_memory(name: str) -> AnalyzerFn:
    """The analyzer `name` on a capture in memory: its split over the one partition that is all of it."""
    split = _split(name)

    def run(cap: Capture) -> AnalyzerResult:
        return run_whole(split, cap)

    run.__name__ = run.__qualname__ = name
    return run


def in_memory(name: str) -> AnalyzerFn:
    """The analyzer `name` as a function of a capture in memory (what its command runs)."""
    return analyzers()[name][0]


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


#: the name of the summary's analyzer beside the others (`amqpcap.derive.tally.TallyCounts`: what
#: summary.json and the report count), which no analyzer module can have (a module name has no "(")
TALLY = "(tally)"


def bucket_steps(given: dict[str, Split] | None = None) -> dict[str, Split]:
    """What runs per bucket: every analyzer, and the summary's (the tally), as the engine runs
    them (`amqpcap.analysis.contract.split_of`); or the steps `given` (`steps_of`: some analyzers,
    not necessarily registered ones)."""
    return given if given is not None else {**splits(), TALLY: _tally_split()}


def steps_of(analyzers: dict[str, Analyzer]) -> dict[str, Split]:
    """The engine's steps of `analyzers` ({name: analyzer}), to run them alone (`submit_steps`'s
    ``given``): a new analyzer on a dataset before it is registered, say. Sent with every task,
    so that workers run analyzers they could not import by name."""
    return {name: split_of(a) for name, a in analyzers.items()}


@functools.cache
def _tally_split() -> Split:
    return split_of(TallyCounts())
