"""docs/writing-an-analyzer.md: the analyzer it builds (tests/channel_counts.py) is the doc's code,
and gives the same result in memory, bucket by bucket on a real local Dask cluster, and over
slices of the buckets' time; an analyzer that cannot run over slices runs over its bucket whole
while the others of that bucket still run in slices."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import amqpcap
from amqpcap.analysis.contract import split_of
from amqpcap.engine.partitions import run_in_memory
from amqpcap.engine.partitions import sliced_partial
from amqpcap.io.pieces import facts_of
from amqpcap.model.facts import clean_cuts
from amqpcap.model.facts import ns
from amqpcap.io import dataset

import channel_counts
from channel_counts import ChannelCounts

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "fixtures"
DOC = ROOT / "docs" / "writing-an-analyzer.md"
#: connections that open channels: 12 connections, each consumer's two channels (ten-consumers),
#: and one connection that opens 29 at once (channel-leak)
CAPTURES = ["ten-consumers.pcap", "channel-leak.pcap"]


class WholeOnly(ChannelCounts):
    """The same counts, by a step that says it cannot run over slices of time (and checks it is
    given whole partitions: every packet of its rows' connections)."""

    slices = False

    def step(self, seen, rows, facts, last):
        c = rows.connections
        assert len(rows.packets) == int((c["c2s_packets"] + c["s2c_packets"]).sum()), "given a slice"
        return super().step(seen, rows, facts, last)


def assert_same(got, want, where: str) -> None:
    assert got.summary == want.summary, where
    assert list(got.tables) == list(want.tables), where
    for name, table in want.tables.items():
        pd.testing.assert_frame_equal(got.tables[name], table, check_exact=True, obj=f"{name}, {where}")


def test_the_docs_code_is_the_tests_analyzer_and_it_is_short():
    """Every Python block of the doc is a piece of tests/channel_counts.py, in the file's order,
    so that the doc cannot drift from the code the tests run; the analyzer is under 150 lines."""
    source = Path(channel_counts.__file__).read_text()
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 5
    at = 0
    for block in blocks:
        found = source.find(block.rstrip("\n"), at)
        assert found >= 0, f"not in tests/channel_counts.py (in this order):\n{block}"
        at = found
    assert len(source.splitlines()) < 150


@pytest.mark.parametrize("name", CAPTURES)
def test_in_process_slices_give_the_partitions_part(name):
    """The step over slices of several sizes (about 40 slices, about 7), the state carried, closes
    as the step over the whole."""
    cap = amqpcap.load(FIX / name)
    facts, split = facts_of(cap), split_of(ChannelCounts())
    packet, ts = cap.packets["packet"].to_numpy(np.int64), ns(cap.packets["ts"])
    [whole] = split.partial(cap, facts)
    for every in (max(len(packet) // 40, 1), len(packet) // 7):
        [sliced] = sliced_partial(split, cap, facts, clean_cuts(packet, ts, every))
        pd.testing.assert_frame_equal(sliced, whole, check_exact=True, obj=f"cut every {every} packets")


@pytest.fixture(scope="module")
def local_cluster():
    """A real local Dask cluster of two worker processes (`amqpcap.engine.on_dask.client`), which
    unpickle the tests' analyzers by value (they cannot import the tests' modules by name)."""
    import cloudpickle

    from amqpcap.engine.on_dask import client

    for module in (channel_counts, sys.modules[__name__]):
        cloudpickle.register_pickle_by_value(module)
    with client(workers=2) as c:
        yield c
    for module in (channel_counts, sys.modules[__name__]):
        cloudpickle.unregister_pickle_by_value(module)


def on_dask(c, root: Path, analyzers: dict, slice_packets: int) -> tuple[dict, set[str]]:
    """`analyzers` run alone on the dataset at `root` by the cluster of client `c`: their results,
    and the kinds of the tasks run (``amqpcap-bucket``, ``amqpcap-slice``...)."""
    from distributed import get_task_stream

    from amqpcap.engine.on_dask import merged, submit_steps
    from amqpcap.engine.registered import steps_of

    with get_task_stream(c) as tasks:
        steps = submit_steps(root, c, slice_packets=slice_packets, given=steps_of(analyzers))
        results = merged(steps, dataset.read_outline(root))
    kinds = {re.sub(r"-\d.*$", "", str(t["key"]).strip("()',")) for t in tasks.data}
    return results, kinds


@pytest.mark.slow
@pytest.mark.parametrize("name", CAPTURES)
def test_in_memory_on_a_local_dask_cluster_and_in_slices_the_same(name, local_cluster, tmp_path):
    """The doc's analyzer, in memory; on the cluster, a task per bucket of a 3-bucket dataset; and
    with the buckets cut in slices (about 5 per bucket), chains of tasks carrying its state: one
    result."""
    cap = amqpcap.load(FIX / name)
    want = run_in_memory(ChannelCounts(), cap)
    root = dataset.write(cap, tmp_path / "ds", buckets=3)
    buckets, kinds = on_dask(local_cluster, root, {"channels": ChannelCounts()}, slice_packets=10**9)
    assert "amqpcap-bucket" in kinds and "amqpcap-slice" not in kinds, kinds
    assert_same(buckets["channels"], want, "bucket by bucket on Dask")
    every = max(len(cap.packets) // 15, 50)
    sliced, kinds = on_dask(local_cluster, root, {"channels": ChannelCounts()}, slice_packets=every)
    assert "amqpcap-slice" in kinds, kinds  # (an empty bucket, or one of `every` packets at most, is one task)
    assert_same(sliced["channels"], want, f"in slices of {every} packets on Dask")


def test_an_analyzer_that_cannot_slice_does_not_stop_the_others(local_cluster, tmp_path):
    """A bucket cut in slices: the analyzer that can runs as a chain of slice tasks, the one that
    cannot (`slices = False`) over the bucket whole, in a task of its own; both results exact."""
    cap = amqpcap.load(FIX / "ten-consumers.pcap")
    want = run_in_memory(ChannelCounts(), cap)
    root = dataset.write(cap, tmp_path / "ds", buckets=2)
    got, kinds = on_dask(local_cluster, root, {"sliced": ChannelCounts(), "whole": WholeOnly()},
                         slice_packets=len(cap.packets) // 10)
    assert {"amqpcap-slice", "amqpcap-bucket"} <= kinds, kinds
    assert_same(got["sliced"], want, "the analyzer that slices")
    assert_same(got["whole"], want, "the analyzer that does not")
    assert split_of(WholeOnly()).slicing is None and split_of(ChannelCounts()).slicing is not None


@pytest.mark.slow
def test_an_analyzer_that_uses_the_backlog_keeps_its_rows_on_the_workers_in_slices_too(local_cluster, tmp_path):
    """latency (``uses = BACKLOG``) run alone on the cluster, its buckets cut in slices: its step
    is given the queue backlog read at its acks, its per-message tables stay in the store on the
    workers (closed by the last slice's task), and the result is the in-memory one."""
    from amqpcap.engine.registered import contract_analyzers, in_memory
    from amqpcap.engine.on_dask import merged, submit_steps
    from amqpcap.engine.registered import steps_of
    from amqpcap.io.kept_rows import KeptRows, frame

    cap = amqpcap.load(FIX / "ten-consumers.pcap")
    want = in_memory("latency")(cap)
    root = dataset.write(cap, tmp_path / "ds", buckets=3)
    store = tmp_path / "kept"
    store.mkdir()
    steps = submit_steps(root, local_cluster, str(store), slice_packets=len(cap.packets) // 6,
                         given=steps_of({"latency": contract_analyzers()["latency"]}))
    assert steps.sliced, "no bucket is cut in slices: the test would not test them"
    got = merged(steps, dataset.read_outline(root))["latency"]
    assert isinstance(got.tables["deliveries"], KeptRows)
    assert got.summary == want.summary
    for name, table in want.tables.items():
        pd.testing.assert_frame_equal(frame(got.tables[name]), table, check_exact=True, obj=name)
