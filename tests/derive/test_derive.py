"""amqpcap.derive: analyzers share derivations through it, never through each other, and its one
cache (`derivation`) computes each value once per capture."""

from __future__ import annotations

import ast
import dataclasses
import threading
import time
from pathlib import Path

import pytest

import amqpcap
from amqpcap.engine.registered import analyzers, in_memory
from amqpcap.derive import CAPTURE, CONNECTION, derivation
from tiers import one_fast

stalls = in_memory("stalls")

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "amqpcap"
FIX = ROOT / "fixtures"


def imported_modules(path: Path, source: str | None = None) -> set[str]:
    """Every module ``path`` imports (or `source`, read as that module), anywhere in it (also
    inside functions), as an absolute name (``from . import x`` gives ``amqpcap.analyzers.x``)."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    out = set()
    for node in ast.walk(ast.parse(path.read_text() if source is None else source)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            mod = ".".join(x for x in (base, node.module) if x)
            out.add(mod)
            out |= {f"{mod}.{a.name}" for a in node.names}  # (`from . import x` imports module x)
    return out


ANALYZERS = PKG / "analyzers"


def analyzer_of(path: Path) -> str:
    """The analyzer a module of amqpcap/analyzers/ belongs to: its own (`nagle.py`), or the
    package it is in (`stalls/step.py`)."""
    return path.relative_to(ANALYZERS).parts[0].removesuffix(".py")


def other_analyzers(path: Path, source: str | None = None) -> set[str]:
    """What the module at `path` (or `source`, read as that module) imports of analyzers other
    than its own."""
    own = f"amqpcap.analyzers.{analyzer_of(path)}"
    return {m for m in imported_modules(path, source)
            if m.startswith("amqpcap.analyzers.") and m != own and not m.startswith(own + ".")}


@pytest.mark.parametrize("path", sorted(ANALYZERS.rglob("*.py")), ids=lambda p: str(p.relative_to(ANALYZERS)))
def test_analyzers_do_not_import_each_other(path):
    sibling = other_analyzers(path)
    assert not sibling, f"{path.name} imports {sorted(sibling)}: shared derivations belong in amqpcap.derive"


def test_a_package_module_importing_another_analyzer_is_caught():
    # relative imports inside an analyzer's package resolve to the analyzer they name: one of
    # another analyzer's is caught, one of its own package is not
    module = ANALYZERS / "stalls" / "_probe.py"  # (not written: its source is given)
    source = "from ..consumers.step import consumers_slice\nfrom .constants import CAUSES\n"
    assert other_analyzers(module, source) == {"amqpcap.analyzers.consumers.step",
                                               "amqpcap.analyzers.consumers.step.consumers_slice"}


def test_every_module_in_analyzers_is_an_analyzer():
    # (no helper module beside them: what two analyzers share lives in amqpcap.derive; an
    # analyzer too long for one module is a package of its own)
    modules = {p.stem for p in ANALYZERS.glob("*.py")} - {"__init__"}
    packages = {p.parent.name for p in ANALYZERS.glob("*/__init__.py")}
    assert modules | packages == set(analyzers())


def test_only_the_cache_touches_cap_derived():
    touching = sorted(str(p.relative_to(PKG)) for p in PKG.rglob("*.py")
                      if any(isinstance(n, ast.Attribute) and n.attr == "derived"
                             for n in ast.walk(ast.parse(p.read_text()))))
    assert touching == ["derive/cache.py"]


@pytest.fixture()
def cap():
    return amqpcap.load(FIX / "healthy.pcap")


def test_a_derivation_is_computed_once_per_capture_and_tables(cap):
    calls = []

    @derivation(CONNECTION)
    def n_frames(c):
        calls.append(1)
        return [len(c.frames)]

    first = n_frames(cap)
    assert n_frames(cap) is first and len(calls) == 1
    # another capture, or this one with a table replaced (not edited in place), is derived anew
    other = dataclasses.replace(cap, derived={})
    assert n_frames(other) == first and len(calls) == 2
    cap.frames = cap.frames.iloc[:10]
    assert n_frames(cap) == [10] and len(calls) == 3


def test_concurrent_first_calls_compute_once(cap):
    calls = []

    @derivation(CONNECTION)
    def slow(c):
        calls.append(threading.get_ident())
        time.sleep(0.2)  # long enough for every thread to arrive while the first computes
        return object()

    results = []
    threads = [threading.Thread(target=lambda: results.append(slow(cap))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and all(r is results[0] for r in results)


def test_a_connection_derivation_cannot_be_built_from_a_capture_one(cap):
    @derivation(CAPTURE)
    def everyone(c):
        return len(c.connections)

    @derivation(CONNECTION)
    def mine(c):
        return everyone(c)

    @derivation(CAPTURE)
    def ours(c):
        return everyone(c)

    assert everyone(cap) == ours(cap) == len(cap.connections)  # (also when it is kept already)
    with pytest.raises(TypeError, match="everyone"):
        mine(cap)


def test_a_failing_credit_series_fails_stalls(cap, monkeypatch):
    # No longer skipped with a warning: an error in a derivation is an error of the analyzer.
    import amqpcap.derive.consumers as credit

    def broken(c):
        raise ValueError("broken")

    monkeypatch.setattr(credit, "consumer_state", broken)
    with pytest.raises(ValueError, match="broken"):
        stalls(cap)


def test_stalls_without_consumers_checks_every_cause():
    cap = amqpcap.load(FIX / "nagle-write-write-read.pcap")
    assert not (cap.frames["method"] == "basic.deliver").any()
    s = stalls(cap).summary["stalls"]
    assert s["causes_skipped"] == {} and s["by_cause"]["consumer-prefetch"]["count"] == 0


@pytest.mark.parametrize("keys, low, high", [
    (3, 1_700_000_000_000_000_000, 1_700_000_100_000_000_000),  # nanoseconds: packed from their least
    (40, -2**62, 2**62),  # keys × range past an int64: packed as ranks
])
@pytest.mark.parametrize("direction", ["backward", "forward"])
@pytest.mark.parametrize("exact", [True, False])
def test_asof_is_merge_asof(keys, low, high, direction, exact):
    """`columns.asof` gives the rows pandas' merge_asof matches (by key, on int64 values of any
    range), as positions in the right arrays; -1 for none and for a negative key."""
    import numpy as np
    import pandas as pd

    from amqpcap.derive.columns import asof

    rng = np.random.default_rng(keys)
    n = 2_000
    pool = rng.integers(low, high, 300, dtype=np.int64)  # (few values: many exact ties)
    left = pd.DataFrame({"key": rng.integers(-1, keys, n), "on": rng.choice(pool, n)})
    right = pd.DataFrame({"key": rng.integers(-1, keys, n), "on": rng.choice(pool, n), "row": np.arange(n)})
    got = asof(left["key"].to_numpy(), left["on"].to_numpy(), right["key"].to_numpy(), right["on"].to_numpy(),
               direction=direction, allow_exact_matches=exact)
    m = pd.merge_asof(left.reset_index().sort_values("on", kind="stable"), right.sort_values("on", kind="stable"),
                      on="on", by="key", direction=direction, allow_exact_matches=exact).set_index("index").sort_index()
    want = np.where(left["key"].to_numpy() >= 0, m["row"].fillna(-1).to_numpy(np.int64), -1)
    assert (got == want).all()


@pytest.mark.parametrize("n", [1, 63, 64, 65, 1_000, 20_000])
def test_range_min_is_the_least_of_each_slice(n):
    """`columns.range_min` gives ``values[lo:hi].min()`` of every query, `empty` for an empty
    range: ranges within a block, across blocks, from the start, to the end, empty and reversed."""
    import numpy as np

    from amqpcap.derive.columns import range_min

    rng = np.random.default_rng(n)
    values = rng.integers(-2**62, 2**62, n)
    lo, hi = rng.integers(0, n + 1, 3_000), rng.integers(0, n + 1, 3_000)
    lo[:3], hi[:3] = [0, 0, n], [n, 1, n]
    want = np.array([values[a:b].min() if b > a else 7 for a, b in zip(lo, hi)], np.int64)
    assert (range_min(values, lo, hi, 7) == want).all()


@pytest.mark.parametrize("in_order", [False, True])
def test_group_cumsum_is_pandas_grouped_cumsum(in_order):
    """`columns.group_cumsum` gives pandas' ``groupby(code).cumsum()``, rows in any order or
    already in group order (its path without a sort), one row groups and negative values too."""
    import numpy as np
    import pandas as pd

    from amqpcap.derive.columns import group_cumsum

    rng = np.random.default_rng(11)
    code = rng.integers(0, 70_000, 50_000)  # (past 16 bits: not the radix sort's codes either)
    if in_order:
        code = np.sort(code)
    values = rng.integers(-1_000, 1_000, len(code))
    want = pd.Series(values).groupby(code).cumsum().to_numpy()
    assert (group_cumsum(code, values) == want).all()
    assert (group_cumsum(code[:1], values[:1]) == values[:1]).all()
    assert len(group_cumsum(code[:0], values[:0])) == 0


def test_sorted_group_cummin_is_pandas_grouped_cummin():
    """`columns.sorted_group_cummin` gives pandas' ``groupby(code).cummin()`` on rows in group
    order: one-row groups, negative values, a group whose first row is its least, and values
    whose range times the groups would not fit in an int64 (pandas' path)."""
    import numpy as np
    import pandas as pd

    from amqpcap.derive.columns import sorted_group_cummin

    rng = np.random.default_rng(12)
    code = np.sort(rng.integers(0, 5_000, 50_000))
    for values in (rng.integers(-1_000, 1_000, len(code)), rng.integers(-2**61, 2**61, len(code))):
        want = pd.Series(values).groupby(code).cummin().to_numpy()
        assert (sorted_group_cummin(code, values) == want).all()
    assert (sorted_group_cummin(np.array([3, 3, 4]), np.array([-5, 7, 9])) == [-5, -5, 9]).all()
    assert len(sorted_group_cummin(code[:0], code[:0])) == 0


def test_publishes_routed_to_queues_are_the_merge_of_their_pairs():
    """`backlog_join._routed` gives the rows of pandas' merge of publishes with routes on their
    (exchange, routing key) pair, by queue, each route's rows in order: pairs no route takes,
    missing codes (negative), a pair routed to several queues and a queue with several pairs."""
    import numpy as np
    import pandas as pd

    from amqpcap.derive.backlog_join import _routed

    rng = np.random.default_rng(13)
    pair = rng.integers(-3, 40, 20_000)
    route_pair = np.array([5, 5, 7, 9, 30, 7, 41])
    route_q = np.array([2, 0, 0, 1, 2, 3, 1])
    row, q = _routed(pair, route_pair, route_q)
    want = pd.DataFrame({"pair": pair, "row": np.arange(len(pair))}).merge(
        pd.DataFrame({"pair": route_pair, "q": route_q}), on="pair")
    got = pd.DataFrame({"row": row, "q": q})
    assert (np.diff(q) >= 0).all()
    pd.testing.assert_frame_equal(got.sort_values(["q", "row"], ignore_index=True),
                                  want[["row", "q"]].sort_values(["q", "row"], ignore_index=True))
    assert [len(a) for a in _routed(pair[:0], route_pair, route_q)] == [0, 0]


def test_events_ordered_by_queue_and_frame_as_lexsort_orders_them():
    """`backlog_join._by_queue_and_frame` is `np.lexsort((key, q))`, equal pairs in row order,
    also when (queue, key) does not fit in an int64."""
    import numpy as np

    from amqpcap.derive.backlog_join import _by_queue_and_frame

    rng = np.random.default_rng(14)
    q = rng.integers(0, 12, 30_000)
    for key in (rng.integers(0, 5_000, len(q)), rng.integers(0, 2**62, len(q))):
        assert (_by_queue_and_frame(q, key) == np.lexsort((key, q))).all()
    assert len(_by_queue_and_frame(q[:0], q[:0])) == 0


@pytest.mark.parametrize("fixture", one_fast(["prefetch-consumers.pcap", "confirms.pcap"], keep="prefetch-consumers.pcap"))
def test_a_partition_is_freed_when_its_steps_are_done(fixture):
    """Every analyzer's partition step leaves no reference cycle through the capture: a Dask
    worker frees a bucket when its task returns, not when the garbage collector next runs (a
    capture keeping itself among its derivations held several buckets per worker: 2.5 GiB where
    1 was needed on a 10M-packet dataset)."""
    import gc
    import weakref

    from amqpcap.engine.registered import bucket_steps as _steps
    from amqpcap.io.pieces import facts_of

    cap = amqpcap.load(FIX / fixture)
    facts = facts_of(cap)
    gc.collect()
    gc.disable()
    try:
        for name, split in _steps().items():
            part = amqpcap.load(FIX / fixture)
            out = split.partial(part, facts) if split.context is None else split.context(part, facts)
            freed = weakref.ref(part)
            del part, out
            assert freed() is None, f"{name}'s step left the capture in a reference cycle"
    finally:
        gc.enable()
