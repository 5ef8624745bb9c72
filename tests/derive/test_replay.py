"""The derivations over slices of a partition's time (amqpcap.derive.replay, docs/time-split.md
§6): the rows each slice tells, put together, are the whole partition's tables."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import amqpcap
from amqpcap.derive import tally
from amqpcap.derive.backlog import frame_keys
from amqpcap.derive.consumers import CONSUMER, code_of, consumer_rows, consumer_state, with_final_prefetch
from amqpcap.derive.deliveries import confirms, consumes, deliveries
from amqpcap.derive.ack_rows import ack_rows
from amqpcap.derive.replay import (ends_of, ends_step, replay_after, replayed, state_maxima, told, told_consumers,
                                   told_state)
from amqpcap.derive.seeds import seeds_of
from amqpcap.model.facts import ns
from amqpcap.analysis.contract import split_of
from amqpcap.engine.partitions import sliced_partial
from amqpcap.io.pieces import facts_of, time_slice
from amqpcap.model.facts import clean_cuts
from amqpcap.derive.tally import Tally, tally_of

import crafting as c
from slicing import slice_sizes
from tiers import one_fast

FIX = Path(__file__).resolve().parents[2] / "fixtures"
FIXTURES = sorted(p.name for p in FIX.iterdir() if p.name.endswith((".pcap", ".pcapng", ".pcap.gz")))

#: per derived table: its function, and its columns of frame positions in the slice (made the
#: whole's to compare; the others compare as they are)
TABLES = {
    "deliveries": (deliveries, ["order", "settle_order"]),
    "confirms": (confirms, ["order"]),
    # (its codes are dense over, or in the categories of, each slice's own frames: not compared)
    "consumes": (lambda cap: consumes(cap).drop(columns=["space", "tag_code", "queue_code", "ok_code"]),
                 ["order", "ok_order", "start_order"]),
    "acks": (lambda cap: _acks(cap), ["order"]),
    # (its start orders are the whole's already)
    "consumers": (consumer_rows, []),
}
#: the tables whose rows are told per consumer, not per frame (`told_consumers`), by their
#: consumer's start
BY_CONSUMER = {"consumers": "start_order"}


def _acks(cap) -> pd.DataFrame:
    """`ack_rows`' table with the frame keys of its backlog questions beside each row."""
    rows = ack_rows(cap)
    q = rows.questions.assign(queue=rows.questions["queue"].astype(object)).add_prefix("q_")
    return pd.concat([rows.table.drop(columns="space").reset_index(drop=True), q.reset_index(drop=True)], axis=1)


def _whole(cap, table: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """`table` with its frame positions in the slice `cap` made the whole partition's."""
    out = table.copy()
    seeds = seeds_of(cap)
    for name in columns:
        col = out[name]
        known = col.notna().to_numpy(bool)
        values = col.to_numpy(np.float64, na_value=np.nan, copy=True) if col.dtype.kind == "f" else None
        if values is not None:  # (float with NaN: a missing basic.consume-ok)
            values[known] = seeds.whole_orders(values[known].astype(np.int64))
            out[name] = values
        elif isinstance(col.dtype, pd.Int64Dtype):
            arr = col.to_numpy(np.int64, na_value=0)
            out[name] = pd.array(np.where(known, seeds.whole_orders(arr), 0), dtype="Int64")
            out.loc[~known, name] = pd.NA
        else:
            out[name] = seeds.whole_orders(col.to_numpy(np.int64)) if len(col) else col
    return out


def sliced_tables(cap, cuts: list[int]) -> dict[str, pd.DataFrame]:
    """Each table of TABLES told by the slices of `cap` cut at `cuts`, in the whole's row order."""
    bounds = [0, *cuts, None]
    slices = list(zip(bounds, bounds[1:]))
    seen = None
    for first, end in slices:
        seen = ends_step(time_slice(cap, first, end), seen)
    ends = ends_of(seen)
    parts = {name: [] for name in TABLES}
    states, replay = [], None
    for first, end in slices:
        part = replayed(time_slice(cap, first, end), replay, ends)
        # every frame of the slice, replayed or its own, keeps its key (packet, rank) in the whole
        at = np.arange(len(part.frames))
        np.testing.assert_array_equal(np.c_[frame_keys(part, at)], np.c_[frame_keys(cap, seeds_of(part).whole_orders(at))])
        for name, (fn, columns) in TABLES.items():
            table = fn(part)
            keep = (told_consumers(part, end is None) if name in BY_CONSUMER
                    else told(part, table["order"].to_numpy(np.int64), end is None))
            parts[name].append(_whole(part, table[keep], columns))
        states.append(told_state(part, end is None))
        if end is None:
            maxima = state_maxima(part)
        replay = replay_after(part) if end is not None else None
    # each consumer's state rows by its start, then time, then frame; an estimated prefetch the
    # most of the consumer's whole life
    state = pd.concat([t for t in states if len(t)] or states[:1], ignore_index=True).sort_values(
        CONSUMER + ["ts", "_order"], kind="stable")
    at = code_of(maxima, state)
    state = with_final_prefetch(state, np.where(at >= 0, maxima["max_unacked"].to_numpy()[np.maximum(at, 0)], 0))
    parts["state"] = [state.drop(columns="_order")]
    TABLES_SORT = {**BY_CONSUMER, "state": None}
    # (a slice without a row of a table may give it untyped columns: left out, as merges do)
    out = {}
    for name, p in parts.items():
        table = pd.concat([t for t in p if len(t)] or p[:1], ignore_index=True)
        by = TABLES_SORT.get(name, "order")
        out[name] = (table.sort_values(by, kind="stable") if by else table).reset_index(drop=True)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", FIXTURES)
def test_the_derivations_of_the_slices_are_the_whole_partitions(name):
    """Deliveries with what settled them, confirms, consumers started: each row told by one
    slice, the same as the whole partition's (cut into 7 slices and into finer slices:
    `slicing.slice_sizes`)."""
    cap = amqpcap.load(FIX / name)
    packet, ts = cap.packets["packet"].to_numpy(np.int64), ns(cap.packets["ts"])
    for every in slice_sizes(len(packet)):
        cuts = clean_cuts(packet, ts, every)
        got = sliced_tables(cap, cuts)
        for table, fn in {**{n: f for n, (f, _) in TABLES.items()}, "state": consumer_state}.items():
            want = fn(cap)
            pd.testing.assert_frame_equal(got[table], want.reset_index(drop=True), check_exact=True,
                                          check_dtype=len(want) > 0, obj=f"{table} cut every {every} packets")


def assert_same_tally(got: Tally, want: Tally, where: str) -> None:
    for field in fields(Tally):
        a, b = getattr(got, field.name), getattr(want, field.name)
        what = f"{where}: {field.name}"
        if isinstance(b, pd.DataFrame):
            pd.testing.assert_frame_equal(a, b, check_exact=True, check_dtype=len(b) > 0, obj=what)
        elif isinstance(b, pd.Series):
            pd.testing.assert_series_equal(a, b, check_exact=True, check_dtype=len(b) > 0, obj=what)
        elif isinstance(b, dict):
            assert a.keys() == b.keys(), what
            for k in b:
                np.testing.assert_array_equal(a[k], b[k], err_msg=f"{what}[{k}]")
        elif isinstance(b, np.ndarray):
            np.testing.assert_array_equal(a, b, err_msg=what)
        else:
            assert a == b, what


@pytest.mark.parametrize("name", one_fast(FIXTURES))
def test_the_tally_of_the_slices_is_the_whole_partitions(name):
    """summary.json's and the overview's counts: of a partition cut into 7 slices and into
    finer slices (`slicing.slice_sizes`), each delivery counted by the slice that tells it."""
    cap = amqpcap.load(FIX / name)
    facts = facts_of(cap)
    packet, ts = cap.packets["packet"].to_numpy(np.int64), ns(cap.packets["ts"])
    for every in slice_sizes(len(packet)):
        cuts = clean_cuts(packet, ts, every)
        [sliced] = sliced_partial(split_of(tally.TallyCounts()), cap, facts, cuts)
        assert_same_tally(sliced, tally_of(cap), f"cut every {every} packets")


def _deliver(channel, tag, ctag="ctag-1"):
    return [c.basic_deliver(channel, consumer_tag=ctag, delivery_tag=tag), *c.content(channel, b"x")]


@pytest.fixture(scope="module")
def settles(tmp_path_factory):
    """A consumer settling as the fixtures do not: tag 0 with multiple ("everything outstanding")
    and a later multiple ack; a multiple ack naming a tag not delivered yet (a client bug the
    broker closes the channel for; the whole capture's rule, the first multiple ack reaching a
    tag, must hold across cuts as well); several deliveries in one packet."""
    conv = c.TcpConversation().handshake()
    conv.exchange(c.opening() + [
        ("c2s", c.basic_qos(1, prefetch_count=10)), ("s2c", c.basic_qos_ok(1)),
        ("c2s", c.basic_consume(1, queue="q", consumer_tag="ctag-1")), ("s2c", c.basic_consume_ok(1, "ctag-1")),
        ("s2c", [*_deliver(1, 1), *_deliver(1, 2)]), ("s2c", _deliver(1, 3)),
        ("c2s", c.basic_ack(1, 0, multiple=True)),       # settles 1, 2 and 3
        ("s2c", [*_deliver(1, 4), *_deliver(1, 5), *_deliver(1, 6)]),
        ("c2s", c.basic_ack(1, 5, multiple=True)),       # settles 4 and 5 (the tag 0 above is not in the way)
        ("c2s", c.basic_ack(1, 50, multiple=True)),      # names tags not delivered yet
        ("s2c", _deliver(1, 7)), ("s2c", _deliver(1, 8)),
        ("c2s", c.basic_ack(1, 8, multiple=True)),       # 7 and 8: the ack of 50 came first
        ("s2c", _deliver(1, 51)),
        ("c2s", c.basic_ack(1, 51)),
    ])
    return amqpcap.load(c.write_pcap(tmp_path_factory.mktemp("settles") / "settles.pcap", conv.timed()))


def test_tag_0_with_multiple_settles_what_was_delivered_before_it_and_no_more(settles):
    d = deliveries(settles).set_index("delivery_tag")
    settler = d["settle_packet"]
    assert settler[1] == settler[2] == settler[3] and d.loc[[1, 2, 3], "settle_multiple"].all()
    assert settler[4] == settler[5] != settler[3]
    assert d.loc[6, "outcome"] == "ack" and settler[6] > settler[5]  # by the ack of 50
    assert d.loc[[7, 8], "outcome"].eq("unsettled").all()  # the ack of 50 stands before them
    assert d.loc[51, "outcome"] == "ack"


@pytest.mark.slow
def test_the_derivations_of_crafted_settles_cut_at_every_packet_are_the_whole(settles):
    packet, ts = settles.packets["packet"].to_numpy(np.int64), ns(settles.packets["ts"])
    got = sliced_tables(settles, clean_cuts(packet, ts, 1))
    pd.testing.assert_frame_equal(got["deliveries"], deliveries(settles), check_exact=True)
    pd.testing.assert_frame_equal(got["acks"], _acks(settles), check_exact=True)


@pytest.mark.slow
def test_consumers_whose_consume_ok_comes_slices_after_their_basic_consume_start_there(tmp_path):
    """Every packet a slice: a basic.consume answered two slices later (another channel's
    basic.consume between), one whose tag the broker names in its basic.consume-ok (AMQP 0-9-1
    §1.8.3.3/.4), one whose channel.close the client sent before the consume-ok came, one whose
    consume-ok the capture lost before its deliveries, one never answered. Each consumer starts
    at its consume-ok (the last two at their basic.consume) in the slices as in the whole: its
    consumer and state rows are the whole partition's."""
    conv = c.TcpConversation().handshake()
    send = lambda *items: conv.exchange(list(items))  # noqa: E731
    send(*c.opening())
    for ch in (2, 3, 4, 5):
        send(("c2s", c.channel_open(ch)), ("s2c", c.channel_open_ok(ch)))
    send(("c2s", c.basic_qos(1, prefetch_count=2)), ("s2c", c.basic_qos_ok(1)))
    send(("c2s", c.basic_consume(1, queue="q", consumer_tag="ctag-1")),
         ("c2s", c.basic_consume(2, queue="r", consumer_tag="")),
         ("s2c", c.basic_consume_ok(1, "ctag-1")), ("s2c", c.basic_consume_ok(2, "amq.ctag-2")))
    send(("s2c", _deliver(1, 1)), ("s2c", _deliver(2, 1, "amq.ctag-2")), ("c2s", c.basic_ack(1, 1)),
         ("c2s", c.basic_ack(2, 1)), ("s2c", _deliver(1, 2)), ("c2s", c.basic_ack(1, 2)))
    send(("c2s", [c.basic_consume(4, queue="t", consumer_tag="closing"), c.channel_close(4, 200, "bye", 0, 0)]),
         ("s2c", c.basic_consume_ok(4, "closing")), ("s2c", c.channel_close_ok(4)))
    send(("c2s", c.basic_consume(5, queue="u", consumer_tag="lost")), ("s2c", _deliver(5, 1, "lost")),
         ("s2c", _deliver(5, 2, "lost")), ("c2s", c.basic_ack(5, 2, multiple=True)))
    send(("c2s", c.basic_consume(3, queue="s", consumer_tag="late")))
    cap = amqpcap.load(c.write_pcap(tmp_path / "consumes.pcap", conv.close().timed()))
    packet, ts = cap.packets["packet"].to_numpy(np.int64), ns(cap.packets["ts"])
    cuts = clean_cuts(packet, ts, 1)
    assert len(cuts) == len(packet) - 1
    got = sliced_tables(cap, cuts)
    rows = consumer_rows(cap).set_index("consumer_tag")
    assert list(rows.index) == ["ctag-1", "amq.ctag-2", "closing", "lost", "late"] and rows["consume_seen"].all()
    pd.testing.assert_frame_equal(got["consumers"], consumer_rows(cap), check_exact=True)
    pd.testing.assert_frame_equal(got["state"], consumer_state(cap).reset_index(drop=True), check_exact=True)
