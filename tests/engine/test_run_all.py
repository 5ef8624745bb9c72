"""`analysis.run_all`: the analyzers in threads give what they give one after the other, and
what they share is computed once."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

import amqpcap
from amqpcap.analysis.registry import AnalyzerResult
from amqpcap.engine.registered import run_all
from amqpcap.io.load import computed_once
from tiers import one_fast

FIX = Path(__file__).resolve().parents[2] / "fixtures"
CAPTURES = sorted(p.name for p in FIX.iterdir() if p.name.endswith((".pcap", ".pcapng", ".pcap.gz")))


def fresh(cap: amqpcap.Capture) -> amqpcap.Capture:
    """The same tables with nothing derived yet."""
    return dataclasses.replace(cap, derived={})  # (and new derivation locks: not an init field)


def as_json(v) -> str:
    return json.dumps(v, sort_keys=True, default=str)


def assert_same(a: AnalyzerResult, b: AnalyzerResult) -> None:
    assert a.name == b.name
    # as JSON text, where NaN equals NaN (summary.json writes it as null)
    assert as_json(a.summary) == as_json(b.summary)
    assert as_json([(f.to_json(), f.impact) for f in a.findings]) == as_json([(f.to_json(), f.impact) for f in b.findings])
    assert [p.name for p in a.plots] == [p.name for p in b.plots]
    assert list(a.tables) == list(b.tables)
    for name in a.tables:
        pd.testing.assert_frame_equal(a.tables[name], b.tables[name], check_exact=True, obj=f"{a.name}.{name}")


@pytest.mark.parametrize("name", one_fast(CAPTURES))
def test_threads_equal_serial(name):
    cap = amqpcap.load(FIX / name)
    serial = run_all(fresh(cap), workers=1)
    # more threads than cores: the analyzers interleave as much as they can
    threaded = run_all(fresh(cap), workers=4)
    assert [r.name for r in threaded] == [r.name for r in serial]
    for a, b in zip(serial, threaded):
        assert_same(a, b)


def test_a_shared_derivation_is_computed_once():
    cap = amqpcap.load(FIX / "healthy.pcap")
    calls = []

    @computed_once
    def slow_derivation(c):
        if "slow" in c.derived:
            return c.derived["slow"]
        calls.append(threading.get_ident())
        time.sleep(0.2)  # long enough for every thread to arrive while the first computes
        c.derived["slow"] = len(c.frames)
        return c.derived["slow"]

    results = []
    threads = [threading.Thread(target=lambda: results.append(slow_derivation(cap))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [len(cap.frames)] * 4
    assert len(calls) == 1


def test_progress_is_called_once_per_analyzer_in_run_order_and_results_come_in_name_order():
    from amqpcap.engine.registered import RUN_FIRST, analyzers, run_order

    calls = []
    results = run_all(amqpcap.load(FIX / "healthy.pcap"), progress=lambda *a: calls.append(a))
    names = list(analyzers())
    # the analyzers with the largest working sets first (a renamed one would silently drop out)
    assert set(RUN_FIRST) <= set(names)
    ran = run_order(names)
    assert ran[:len(RUN_FIRST)] == list(RUN_FIRST) and sorted(ran) == sorted(names)
    assert calls == [(name, i + 1, len(names)) for i, name in enumerate(ran)]
    assert [r.name for r in results] == names
