"""Analyzers that split (amqpcap.analysis.partition): on every fixture, the partition steps over a
dataset's buckets merged give exactly what the analyzer gives on the capture in memory (tables,
summary, plots' data), for several bucket counts; the engine's run on a local Dask cluster
gives the in-process run's summary.json and tables."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import amqpcap
from amqpcap.io import dataset
from amqpcap.engine.registered import analyzers, splits
from amqpcap.io.kept_rows import KeptRows, frame
from amqpcap.report.rates_plot import rates_png
from amqpcap.summary.overview import rate_bins
from amqpcap.model.facts import ns
from amqpcap.analysis.partition import context_for
from amqpcap.engine.partitions import partials_of, sliced_context, sliced_partials
from amqpcap.io.pieces import facts_of
from amqpcap.model.facts import clean_cuts
from amqpcap.report.outputs import _draw_plot as draw_plot
from amqpcap.summary.build import build_summary
from amqpcap.derive.tally import Tally, tally_of

from slicing import slice_sizes
from tiers import one_fast

FIX = Path(__file__).resolve().parents[2] / "fixtures"
FIXTURES = sorted(p.name for p in FIX.iterdir() if p.name.endswith((".pcap", ".pcapng", ".pcap.gz")))


#: the tables each analyzer keeps on the workers (`amqpcap.io.kept_rows`)
KEEPING = {"latency": ("deliveries", "ack-gaps", "confirms"), "consumers": ("state",)}


def test_some_analyzer_splits():
    # the registry is what the engine distributes: an empty one would make the tests below vacuous
    assert {"sizes", "nagle", "stalls"} <= set(splits())


def as_json(summary: dict) -> str:
    """A summary as summary.json holds it (a missing number, NaN, equals itself there)."""
    return json.dumps(summary, sort_keys=True, default=str)


def assert_same_result(got, want):
    assert as_json(got.summary) == as_json(want.summary)
    assert list(got.tables) == list(want.tables)
    for name in want.tables:
        pd.testing.assert_frame_equal(frame(got.tables[name]), want.tables[name], check_exact=True, obj=name)
    assert [p.name for p in got.plots] == [p.name for p in want.plots]
    assert [f.to_json() for f in got.findings] == [f.to_json() for f in want.findings]
    assert [f.impact for f in got.findings] == [f.impact for f in want.findings]


def records_step(root: Path, split, facts):
    """The split's records step over the dataset's records, the columns it names alone (as a
    worker reads them)."""
    if split.records is None:
        return None
    cols = split.records_columns
    return split.records(dataset.read_records(root, None if cols is None else list(cols)), facts)


def merged_on(root: Path, parts: list, store: Path | None = None) -> dict:
    """Every split analyzer's steps over `parts` (buckets of the dataset at `root`), merged with
    the dataset's outline alone (connections table, summary): what names connections. With a
    `store`, per-message tables are kept there, as the engine's workers keep them."""
    facts = dataset.facts(root)
    merged = {}
    for an, split in splits().items():
        rec = records_step(root, split, facts)
        kept = partials_of(split, parts, facts, None if store is None else str(store))
        merged[an] = split.merge(kept, rec, facts, dataset.read_outline(root))
    return merged


def assert_same_plots(got, want, tmp: Path) -> None:
    """The plots drawn from the merged result are the whole capture's, pixel for pixel."""
    for g, w in zip(got.plots, want.plots):
        drawn = draw_plot(g, tmp / f"got-{g.name}.png").read_bytes()
        assert drawn == draw_plot(w, tmp / f"want-{w.name}.png").read_bytes(), g.name


def assert_buckets_merged_are_the_whole(cap, root: Path, buckets: int, kept: bool = False) -> list:
    """`kept`: per-message tables kept in files, as on workers (`amqpcap.io.kept_rows`), the plots
    drawn from them compared too."""
    parts = [dataset.read_partition(root, [k]) for k in range(buckets)]
    merged = merged_on(root, parts, root.parent / "kept" if kept else None)
    whole = {an: fn(cap) for an, (fn, _) in analyzers().items()}
    for an, got in merged.items():
        assert_same_result(got, whole[an])
        if kept and an in KEEPING:
            assert any(isinstance(t, KeptRows) for t in got.tables.values()) == any(
                len(t) for name, t in whole[an].tables.items() if name in KEEPING[an])
            assert_same_plots(got, whole[an], root.parent)
    # summary.json and the report's rates plot from the outline and the buckets' tallies added
    outline = dataset.read_outline(root)
    assert len(outline.frames) == 0 and len(outline.packets) == 0
    outline.context.tally = Tally.joined([tally_of(p) for p in parts])
    results = [merged[an] for an in analyzers()]
    assert as_json(build_summary(outline, results)) == as_json(build_summary(cap, list(whole.values())))
    assert rates_png(rate_bins(outline)) == rates_png(rate_bins(cap))
    return parts


@pytest.mark.parametrize("name", one_fast(FIXTURES))
def test_partitions_merged_are_the_whole_capture(name, tmp_path):
    cap = amqpcap.load(FIX / name)
    root = dataset.write(cap, tmp_path / "ds", buckets=4)
    assert dataset.facts(root) == facts_of(cap)
    parts = assert_buckets_merged_are_the_whole(cap, root, 4, kept=True)
    # the partitions hold every connection once
    assert sorted(s for p in parts for s in p.connections["stream"]) == sorted(cap.connections["stream"])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["flow-control.pcap.gz", "memory-alarm.pcap", "kernel-drops.pcap"])
def test_many_small_partitions_merged_are_the_whole_capture(name, tmp_path):
    """24 buckets, most holding one connection: sums of floats per connection direction (the
    stalls analyzer's) must not depend on which other connections share the partition."""
    cap = amqpcap.load(FIX / name)
    assert_buckets_merged_are_the_whole(cap, dataset.write(cap, tmp_path / "ds", buckets=24), 24)


@pytest.mark.slow
def test_a_shared_connection_name_split_over_partitions_is_labelled_as_in_the_whole(tmp_path):
    """churn.pcap: 40 connections share the connection_name amqpcap-churner, so each is labelled
    with its stream number. In 64 buckets most are alone in theirs, where the name is not shared:
    the labels must still be the whole capture's (given in the merge, from the outline)."""
    cap = amqpcap.load(FIX / "churn.pcap")
    parts = assert_buckets_merged_are_the_whole(cap, dataset.write(cap, tmp_path / "ds", buckets=64), 64)
    assert len([p for p in parts if len(p.connections) == 1]) >= 10  # the case this test is about


@pytest.mark.slow
@pytest.mark.parametrize("name", ["prefetch-consumers.pcap", "memory-alarm.pcap"])
def test_a_partition_order_does_not_matter(name, tmp_path):
    # memory-alarm.pcap: the blocks of one partition's publishers reach the other partitions'
    # consumers through the stalls analyzer's context round, joined in either order
    cap = amqpcap.load(FIX / name)
    root = dataset.write(cap, tmp_path / "ds", buckets=5)
    facts = dataset.facts(root)
    parts = [dataset.read_partition(root, [k]) for k in range(5)]
    for an, split in splits().items():
        rec = records_step(root, split, facts)
        forward = split.merge(partials_of(split, parts, facts), rec, facts, cap)
        backward = split.merge(partials_of(split, parts[::-1], facts), rec, facts, cap)
        assert_same_result(backward, forward)


def test_segment_histogram_counts_every_data_segment():
    cap = amqpcap.load(FIX / "flow-control.pcap.gz")
    split = splits()["sizes"]
    [partial] = split.partial(cap, facts_of(cap)).partials  # (sizes' part: its partitions' partials)
    data = cap.packets["payload_bytes"].to_numpy() > 0
    s2c = (cap.packets["direction"] == "s2c").to_numpy()
    assert partial["segment_hist"][0].sum() == (data & ~s2c).sum()
    assert partial["segment_hist"][1].sum() == (data & s2c).sum()
    assert list(partial["segments"]) == [(data & ~s2c).sum(), (data & s2c).sum()]


@pytest.mark.slow
def test_analyze_on_a_local_cluster_gives_the_in_process_files(tmp_path):
    # as a user types it, in processes of its own (a Dask client leaves a thread in the process
    # that used it, and the report tests need a process without one)
    import subprocess

    root = dataset.write(amqpcap.load(FIX / "prefetch-consumers.pcap"), tmp_path / "ds", buckets=6)
    runs = {}
    for how, extra in (("local", []), ("dask", ["--scheduler", "local", "--workers", "2"])):
        r = subprocess.run([sys.executable, "-m", "amqpcap", "analyze", str(root), "--out", str(tmp_path / how), *extra],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        runs[how] = (r.stdout, {p.name: p.read_bytes() for p in sorted((tmp_path / how).iterdir())})
    assert runs["dask"][0] == runs["local"][0]
    assert runs["dask"][1].keys() == runs["local"][1].keys() and "sizes-throughput.csv" in runs["local"][1]
    for name, content in runs["local"][1].items():
        assert runs["dask"][1][name] == content, name


def assert_same_partial(got, want, where: str) -> None:
    """Two partials (frames, arrays, dicts, lists and dataclasses of them, numbers) exactly equal."""
    import dataclasses

    assert type(got) is type(want), where
    if dataclasses.is_dataclass(want):
        for f in dataclasses.fields(want):
            assert_same_partial(getattr(got, f.name), getattr(want, f.name), f"{where}.{f.name}")
    elif isinstance(want, pd.DataFrame):
        pd.testing.assert_frame_equal(got, want, check_exact=True, obj=where)
    elif isinstance(want, np.ndarray):
        np.testing.assert_array_equal(got, want, err_msg=where)
    elif isinstance(want, dict):
        assert list(got) == list(want), where
        for k in want:
            assert_same_partial(got[k], want[k], f"{where}[{k!r}]")
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same_partial(g, w, f"{where}[{i}]")
    else:
        assert got == want or (got != got and want != want), where


#: the analyzers whose partition step also runs over slices of the partition's time
SLICED = sorted(n for n, s in splits().items() if s.slicing is not None)


def test_clean_cuts_fall_where_no_packet_before_is_later_than_one_after():
    packet = np.arange(1, 11)
    ts = np.array([1, 2, 3, 9, 4, 5, 10, 11, 11, 12])  # packet 4 is later than 5 and 6
    assert clean_cuts(packet, ts, 1) == [2, 3, 4, 7, 8, 9, 10]
    assert clean_cuts(packet, ts, 4) == [7, 9]  # (rows 4 and 8: the first clean cut at or after each)
    assert clean_cuts(packet, ts, 20) == [] and clean_cuts(packet[:1], ts[:1], 1) == []


@pytest.mark.slow
@pytest.mark.parametrize("name", FIXTURES)
def test_a_partition_cut_in_slices_of_time_gives_the_partitions_partial(name):
    """Every analyzer that runs over slices of time gives the partial of the whole partition,
    all in one chain of slices (as a worker runs them), cut into 7 slices and into finer slices
    (`slicing.slice_sizes`; no cut inside a time back-step: three fixtures have some)."""
    assert {"heartbeats", "consumers", "latency", "stalls"} <= set(SLICED)
    cap = amqpcap.load(FIX / name)
    facts = facts_of(cap)
    packet, ts = cap.packets["packet"].to_numpy(np.int64), ns(cap.packets["ts"])
    sliced = {a: splits()[a] for a in SLICED}
    joined: dict = {}  # (a context step shared by analyzers: joined once, as a run joins it)
    contexts = {a: _context_of(s, cap, facts, joined) for a, s in sliced.items()}
    for every in slice_sizes(len(packet)):
        cuts = clean_cuts(packet, ts, every)
        assert cuts or len(packet) <= every
        got = sliced_partials(sliced, cap, facts, cuts, contexts)
        for a, split in sliced.items():
            assert_same_partial(got[a], split.partial_with(cap, facts, contexts[a]), f"{a} cut every {every} packets")


#: the context steps that also run over slices of the partition's time, one per step (consumers
#: and latency share the queue backlog's)
CONTEXTS_SLICED = {s.context_slicing: n for n, s in sorted(splits().items(), reverse=True)
                   if s.context_slicing is not None}


@pytest.mark.slow
@pytest.mark.parametrize("name", FIXTURES)
def test_a_context_step_cut_in_slices_of_time_gives_the_partitions_context(name, monkeypatch):
    """Every context step that runs over slices of time (the queue backlog's questions: its
    events, acks and consumers) gives the whole partition's context, cut into 7 slices and
    into finer slices (`slicing.slice_sizes`), with the capture's records cut into 3 cells."""
    from dataclasses import fields

    from amqpcap.derive import backlog_join

    assert "consumers" in CONTEXTS_SLICED.values()
    cap = amqpcap.load(FIX / name)
    facts = facts_of(cap)
    monkeypatch.setattr(backlog_join, "CELL_PACKETS", max(1, facts.records // 3))
    packet, ts = cap.packets["packet"].to_numpy(np.int64), ns(cap.packets["ts"])
    for every in slice_sizes(len(packet)):
        cuts = clean_cuts(packet, ts, every)
        for a in CONTEXTS_SLICED.values():
            split = splits()[a]
            got, want = sliced_context(split, cap, facts, cuts), split.context(cap, facts)
            for field in fields(want):
                assert_same_partial(getattr(got, field.name), getattr(want, field.name),
                                    f"{a}'s context cut every {every} packets: {field.name}")


def _context_of(split, cap, facts, joined: dict):
    """The joined context a partition that is the whole capture is given (None: the split has no
    context step), as `run_whole` gives it (joined once per context step, in `joined`)."""
    if split.context is None:
        return None
    key = (split.context, split.join_context)
    if key not in joined:
        joined[key] = context_for(split.join_context([split.context(cap, facts)]), 0)
    return joined[key]


@pytest.mark.parametrize("name", one_fast(["any-sll.pcap", "flow-control.pcap.gz", "ten-consumers.pcap", "nack-requeue.pcap",
                                           "prefetch-consumers.pcap"]))
def test_queue_backlogs_read_in_cells_of_a_few_packets_are_the_whole_captures(name, tmp_path, monkeypatch):
    """The backlog join cut into cells of a thirtieth of the capture each (an ack's next delivery in
    a later cell, a consumer's start and end in different ones), over buckets kept in files as on
    workers, gives the consumers and latency results of the capture read whole in one cell."""
    from amqpcap.derive import backlog_join
    from amqpcap.derive.refills import ack_gaps

    cap = amqpcap.load(FIX / name)
    records = facts_of(cap).records
    assert backlog_join.cells_for(records) == 1
    whole = {an: analyzers()[an][0](cap) for an in ("consumers", "latency")}
    monkeypatch.setattr(backlog_join, "CELL_PACKETS", max(1, records // 30))
    gaps = ack_gaps(cap).dropna(subset=["backlog_min_gap"])
    cell = [backlog_join.cell_of(gaps[c].to_numpy("int64"), backlog_join.cells_for(records), records)
            for c in ("packet", "next_deliver_packet")]
    assert (cell[0] != cell[1]).any()  # (acks answered in a later cell than their own)
    root = dataset.write(cap, tmp_path / "ds", buckets=3)
    parts = [dataset.read_partition(root, [k]) for k in range(3)]
    facts = dataset.facts(root)
    for an, want in whole.items():
        split = splits()[an]
        kept = partials_of(split, parts, facts, str(tmp_path / "kept"))
        assert_same_result(split.merge(kept, records_step(root, split, facts), facts, dataset.read_outline(root)), want)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["flow-control.pcap.gz", "ten-consumers.pcap", "nack-requeue.pcap",
                                  "prefetch-consumers.pcap", "memory-alarm.pcap"])
def test_queue_events_of_the_partitions_joined_are_the_whole_backlog(name, tmp_path, monkeypatch):
    """The queue backlog relates connections (publishes on one, deliveries on another): each
    partition's queue events, keyed by frame (packet, rank) rather than by row position, joined
    give the backlog of the whole capture, row for row; so do they cut into cells of a few
    packets each, joined one cell after the other (`amqpcap.derive.backlog_join`)."""
    from amqpcap.derive import backlog_join
    from amqpcap.derive.backlog import queue_events
    from amqpcap.derive.refills import backlog_context

    cap = amqpcap.load(FIX / name)
    whole = backlog_join.backlog_rows([backlog_context(cap, None)])
    assert len(whole) and whole["backlog_min"].max() > 0  # (a backlog to compare)
    root = dataset.write(cap, tmp_path / "ds", buckets=24)
    parts = [dataset.read_partition(root, [k]) for k in range(24)]
    facts = facts_of(cap)
    monkeypatch.setattr(backlog_join, "CELL_PACKETS", max(1, facts.records // 7))
    shares = [backlog_context(p, facts) for p in parts]
    assert len(shares[0].cells) >= 7
    # publishes and the deliveries they are counted against are in different partitions
    events = [queue_events(p) for p in parts]
    assert any(bool(len(e.publishes)) != bool(len(e.takes)) for e in events)
    pd.testing.assert_frame_equal(backlog_join.backlog_rows(shares[::-1]), whole, check_exact=True)
