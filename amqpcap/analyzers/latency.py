"""latency: deliver→ack, ack→next-deliver, publish→confirm and deliver/ack interleaving.

Who is slow? deliver→ack is the consumer's time (work plus the way back); ack→next-deliver is the
broker's time to use the credit an ack freed ("assigning blame": a healthy consumer connection
interleaves deliveries and acks, a starved one shows long runs of acks with no delivery between).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..analysis import SEVERITY_RANK, AnalyzerResult, Finding, Plot, analyzer
from ..capture import Capture
from ..derive.backlog import BacklogAnswers
from ..derive.columns import codes, stable_argsort, text_ranks, value_at
from ..derive.deliveries import DELIVER_METHODS, SETTLE_METHODS, Deliveries, confirms, deliveries_with_codes
from ..derive.labels import channels_filter, connection_labels
from ..derive.methods import chan_key, methods, pick, select
from ..derive.refills import (BACKLOG_CONTEXT_SLICING, AnswerRows, backlog_answers, backlog_context,
                              join_backlog_context, slow_refills_of, told_ack_gaps, waiting)
from ..derive.replay import for_derivations, told
from ..derive.seeds import seeds_of
from ..kept_rows import columns as kept_columns
from ..kept_rows import keep, part_columns, rows_table
from ..names import connection_label, consumer_label, number, subject_namer
from ..partition import CaptureFacts, Slicing, Split, merge_rows, run_whole, taken
from ..quantiles import Chunks, count_max_mean, percentiles

#: broker-slow-refill (detected by amqpcap.derive.refills.slow_refills) is critical when the median
#: ack→next-deliver is above this: a consumer at prefetch 1 then gets < 20 msg/s whatever it does
REFILL_CRITICAL_S = 0.050
#: redelivery-loop: at least this many redelivered deliveries or requeueing nack/reject...
REDELIVERY_MIN = 10
#: ... making at least this share of a channel's deliveries (a few redeliveries after a consumer
#: restart are normal; one in twenty bounced messages costs real broker and consumer work)
REDELIVERY_SHARE = 0.05
#: ... critical from this share (most of the traffic is the same messages going round)
REDELIVERY_CRITICAL_SHARE = 0.5
#: plots: time bins for the percentile bands, and raw points drawn below this count
TIME_BINS = 200
MAX_POINTS = 20_000

FILTER_DELIVER = "amqp.method.class == 60 && amqp.method.method in {60, 71}"
FILTER_SETTLE = "amqp.method.class == 60 && amqp.method.method in {80, 90, 120}"


def stats(values: Chunks) -> dict:
    """count, p50_s, p90_s, p99_s, max_s, mean_s of a latency column's values (`_values`), read
    a part at a time: the percentiles exact (`amqpcap.quantiles`), the mean from the correctly
    rounded sum."""
    n, top, mean = count_max_mean(values)
    if n == 0:
        return {"count": 0, "p50_s": None, "p90_s": None, "p99_s": None, "max_s": None, "mean_s": None}
    p50, p90, p99 = percentiles(values, n, [50, 90, 99])
    return {"count": n, "p50_s": p50, "p90_s": p90, "p99_s": p99, "max_s": top, "mean_s": mean}


def _values(table, column: str, unless: str | None = None) -> Chunks:
    """The values of `column` of a merged table (`rows_table`) but NaN, and those of rows whose
    `unless` column is set, a part at a time (`kept_rows.part_columns`)."""
    def chunks():
        for df in part_columns(table, [column] + ([unless] if unless else [])):
            v = df[column].to_numpy(float)
            keep = ~np.isnan(v)
            if unless:
                keep &= ~df[unless].to_numpy(bool)
            yield v[keep]
    return chunks



_NONE = np.zeros(0, np.int64)
#: the interleaving table's columns
INTERLEAVING = ["stream", "channel", "delivers", "acks", "runs", "mean_deliver_run", "max_deliver_run", "mean_ack_run",
                "max_ack_run", "alternation_ratio", "packets_multi_deliver", "max_delivers_per_packet",
                "packets_multi_ack", "max_acks_per_packet"]
#: what a tag space's deliveries and settling frames so far tell of their runs (`_spaces`): counts
#: and maxima, and its last run (its kind, True for deliveries, and its length so far), which
#: the space's next event may go on
SPACE = ["stream", "channel", "epoch", "delivers", "acks", "deliver_runs", "ack_runs", "max_deliver_run",
         "max_ack_run", "packets_multi_deliver", "max_delivers_per_packet", "packets_multi_ack",
         "max_acks_per_packet", "last_kind", "last_run"]


def interleaving(spaces: pd.DataFrame) -> pd.DataFrame:
    """Per channel with deliveries and acks: runs of consecutive deliveries and of consecutive
    settling frames (in frame order), and packets carrying several of either; from the rows of
    its tag spaces (`_spaces`, sorted by stream, channel and epoch).

    alternation_ratio = (runs − 1) / (events − 1): 1 when deliveries and acks strictly alternate,
    near 0 when they come in long runs."""
    if len(spaces) == 0:
        return pd.DataFrame({c: pd.Series(dtype=float if "mean" in c or "ratio" in c else np.int64)
                             for c in INTERLEAVING})
    out = spaces.drop(columns=["deliver_runs", "ack_runs", "last_kind", "last_run"]).reset_index(drop=True)
    d_runs, a_runs = spaces["deliver_runs"].to_numpy(np.int64), spaces["ack_runs"].to_numpy(np.int64)
    # a mean of integer run lengths is their (exact) sum over their count, as groupby's mean
    with np.errstate(invalid="ignore", divide="ignore"):
        out["mean_deliver_run"] = np.where(d_runs > 0, out["delivers"].to_numpy() / d_runs, np.nan)
        out["mean_ack_run"] = np.where(a_runs > 0, out["acks"].to_numpy() / a_runs, np.nan)
    out["runs"] = d_runs + a_runs
    events = out["delivers"] + out["acks"]
    out["alternation_ratio"] = np.where(events > 1, (out["runs"] - 1) / (events - 1).clip(lower=1), np.nan)
    # channels reopened: report per (stream, channel), keeping the opening with the most events
    # (an unstable sort, as ever: the rows of every space, in the same order, give the same pick)
    out = out.assign(_n=events).sort_values("_n", ascending=False).drop_duplicates(["stream", "channel"])
    return out.sort_values(["stream", "channel"])[INTERLEAVING].reset_index(drop=True)


def _spaces(view: Capture, before: pd.DataFrame) -> pd.DataFrame:
    """Per tag space (stream, channel, epoch; columns SPACE, sorted): the runs and packets of its
    deliveries and settling frames up to the end of the slice `view` (as `for_derivations` gives
    it: its own frames after the replayed ones), going on from `before` (the slices before's)."""
    m = methods(view)
    own = m["order"].to_numpy(np.int64) >= _replayed(view)
    rows = np.flatnonzero((select(m, DELIVER_METHODS, "s2c") | select(m, SETTLE_METHODS, "c2s")) & own)
    if len(rows) == 0:
        return before
    # by tag space (its code is sorted as (stream, channel, epoch)), then frame order: m is in
    # frame order, so a stable sort on the code keeps that order within each space
    rows = rows[stable_argsort(m["space"].to_numpy()[rows])]
    ev = m.iloc[rows]
    space = ev["space"].to_numpy()
    kind = select(ev, DELIVER_METHODS)  # True: delivery, False: settling frame
    new_group = np.r_[True, space[1:] != space[:-1]]
    eg = np.cumsum(new_group) - 1  # each event's space as 0, 1, … (sorted order)
    first = np.flatnonzero(new_group)
    n = len(first)
    out = pd.DataFrame({c: ev[c].to_numpy(np.int64)[first] for c in ("stream", "channel", "epoch")})
    was = _space_rows(before, out)  # each space's row before (-1: a space new in the slice)
    old = before.iloc[np.maximum(was, 0)] if len(before) else None  # (None: nothing before)

    def carried(col: str, default=0) -> np.ndarray:
        """Each space's `col` before (`default` for a space new in the slice)."""
        return np.where(was >= 0, old[col].to_numpy(), default) if old is not None else np.full(n, default)

    # runs: a new one at each new space or change of kind; per run its space, kind and length
    starts = np.flatnonzero(new_group | np.r_[True, kind[1:] != kind[:-1]])
    length = np.diff(np.r_[starts, len(kind)])
    r_kind, r_g = kind[starts], eg[starts]
    # a space's first run goes on with its last run before when of the same kind
    run_first = np.flatnonzero(np.r_[True, r_g[1:] != r_g[:-1]])
    goes_on = (was >= 0) & (carried("last_kind", False).astype(bool) == r_kind[run_first])
    length[run_first[goes_on]] += carried("last_run")[goes_on]
    run_last = np.r_[run_first[1:] - 1, len(starts) - 1]

    def total(g, w):
        return np.bincount(g, weights=w, minlength=n).astype(np.int64)

    def max_of(g, v, sel):
        """Per space, the maximum of ``v`` over the rows ``sel`` (0 without any); ``g`` is sorted,
        so each space's rows are one segment and one reduceat takes every maximum."""
        out = np.zeros(n, dtype=np.int64)
        g, v = g[sel], v[sel]
        if len(g):
            seg = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
            out[g[seg]] = np.maximum.reduceat(v, seg)
        return out

    # events per (space, kind, packet): (space, kind, packet) packed into one int64 (space < n,
    # packet numbers < the frames' count), sorted; the runs of equal values are the counts, and
    # each run's value gives back its space and kind (no factorization, no inverse needed). A
    # packet is in one slice: its counts are the slice's own.
    packet = view.frames["packet"].to_numpy(np.int64)[ev["order"].to_numpy()]
    npk = int(packet.max()) + 1
    packed = np.sort((eg * 2 + kind) * npk + packet)
    run = np.flatnonzero(np.r_[True, packed[1:] != packed[:-1]])
    cnt = np.diff(np.r_[run, len(packed)])
    p_g, p_kind = packed[run] // (2 * npk), (packed[run] // npk) % 2 == 1
    multi = cnt > 1

    out["delivers"] = carried("delivers") + total(eg, kind)
    out["acks"] = carried("acks") + total(eg, ~kind)
    out["deliver_runs"] = carried("deliver_runs") + total(r_g, r_kind) - (goes_on & r_kind[run_first])
    out["ack_runs"] = carried("ack_runs") + total(r_g, ~r_kind) - (goes_on & ~r_kind[run_first])
    out["max_deliver_run"] = np.maximum(carried("max_deliver_run"), max_of(r_g, length, r_kind))
    out["max_ack_run"] = np.maximum(carried("max_ack_run"), max_of(r_g, length, ~r_kind))
    out["packets_multi_deliver"] = carried("packets_multi_deliver") + total(p_g, multi & p_kind)
    out["max_delivers_per_packet"] = np.maximum(carried("max_delivers_per_packet"), max_of(p_g, cnt, p_kind))
    out["packets_multi_ack"] = carried("packets_multi_ack") + total(p_g, multi & ~p_kind)
    out["max_acks_per_packet"] = np.maximum(carried("max_acks_per_packet"), max_of(p_g, cnt, ~p_kind))
    out["last_kind"], out["last_run"] = r_kind[run_last], length[run_last].astype(np.int64)
    if old is None:
        return out[SPACE]
    untouched = before.drop(index=before.index[was[was >= 0]])
    both = pd.concat([untouched, out[SPACE]], ignore_index=True)
    return both.sort_values(["stream", "channel", "epoch"], kind="stable", ignore_index=True)


def _no_spaces() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=bool if c == "last_kind" else np.int64) for c in SPACE})


def _space_rows(before: pd.DataFrame, spaces: pd.DataFrame) -> np.ndarray:
    """The row of `before` (SPACE rows, sorted) of each of `spaces` (stream, channel, epoch), -1
    where it has none."""
    if not len(before):
        return np.full(len(spaces), -1, np.int64)
    code = codes(np.r_[chan_key(before), chan_key(spaces)],
                 np.r_[before["epoch"].to_numpy(np.int64), spaces["epoch"].to_numpy(np.int64)])
    return value_at(code[:len(before)], np.arange(len(before), dtype=np.int64), code[len(before):], -1)


def _current(spaces: pd.DataFrame) -> np.ndarray:
    """Whether each of `spaces` (SPACE rows, sorted) is its channel's latest: the others are
    final (a channel's frames come in a newer tag space once it is opened again)."""
    key = chan_key(spaces)
    return np.r_[key[1:] != key[:-1], True] if len(key) else np.zeros(0, bool)


def consumer_latency(d: pd.DataFrame, gaps: pd.DataFrame, tags: np.ndarray, labels: "_Labels") -> pd.DataFrame:
    """Per consumer: its connection's label (`labels`), deliveries, outcomes and deliver→ack /
    ack→next-deliver percentiles; ``tags``: each delivery's consumer tag as a number in the
    sorted order of the text (`_tag_numbers`)."""
    cons = ["connection", "stream", "channel", "consumer_tag"]
    if len(d) == 0:
        return pd.DataFrame(columns=cons + ["deliveries"])
    # one int64 code per consumer (sorted as the keys): pandas factorizes a single int64 column
    # once per GroupBy object, where three key columns (one of text) cost a factorization per call
    code = codes(d["stream"].to_numpy(np.int64), d["channel"].to_numpy(np.int64), tags)
    n = int(code.max()) + 1
    first = np.unique(code, return_index=True)[1]
    # text made into Python objects only for the consumers' rows; outcomes compared whole-column
    # (on the string array itself, not on a copy as objects)
    tag_text = np.asarray(d["consumer_tag"].array.take(first), dtype=object)

    def count(mask):
        return np.bincount(code[mask], minlength=n).astype(np.int64)

    def outcome(value):
        return (d["outcome"] == value).to_numpy(dtype=bool, na_value=False)

    g = pd.DataFrame({"latency_s": d["latency_s"].to_numpy(float), "ts": d["ts"].array}).groupby(code)
    lat = g["latency_s"]
    stream = d["stream"].to_numpy(np.int64)[first]
    out = pd.DataFrame({
        "connection": labels.of(stream), "stream": stream,
        "channel": d["channel"].to_numpy(np.int64)[first], "consumer_tag": tag_text,
        "deliveries": count(slice(None)),
        "redelivered": count(d["redelivered"].fillna(False).to_numpy(bool)),
        "no_ack": count(~d["no_ack"].to_numpy(bool)) == 0,
        "acked": count(outcome("ack")), "nacked": count(outcome("nack")), "rejected": count(outcome("reject")),
        "unsettled_at_end": count(outcome("unsettled")), "unsettled_at_close": count(outcome("closed")),
        "deliver_to_ack_p50_s": lat.median().to_numpy(), "deliver_to_ack_p90_s": lat.quantile(0.9).to_numpy(),
        "deliver_to_ack_p99_s": lat.quantile(0.99).to_numpy(), "deliver_to_ack_max_s": lat.max().to_numpy(),
    })
    span = (g["ts"].max() - g["ts"].min()).dt.total_seconds().to_numpy()
    out["rate_per_s"] = np.where(span > 0, (out["deliveries"] - 1) / np.where(span > 0, span, 1), np.nan)
    # ack→next-deliver is per channel; attach it to the channel's consumers
    gg = gaps["gap_s"].groupby(chan_key(gaps))
    ch = pd.DataFrame({"ack_to_next_deliver_p50_s": gg.median(), "ack_to_next_deliver_p90_s": gg.quantile(0.9),
                       "ack_to_next_deliver_max_s": gg.max()})
    ch = ch.reindex(chan_key(out))
    for col in ch:
        out[col] = ch[col].to_numpy()
    return out


def latency_partial(cap: Capture, facts: CaptureFacts, backlog: BacklogAnswers) -> dict[str, Any]:
    """A partition's deliveries, ack gaps (with the whole capture's backlog read at them) and
    confirms, kept where they were made (`amqpcap.kept_rows`); what the merge needs of them,
    each number a consumer's or a channel's own (its consumers, its channels' slow refills and
    bouncing messages, its counts); its interleaving rows and the raster's data. The partition
    is the one slice of its time (`latency_slice`)."""
    return latency_join([latency_slice(cap, facts, None, True, backlog)[1]])


# -- a partition's step, over slices of its time ------------------------------------------------

@dataclass
class _Carry:
    """What the slices so far leave to the next one (`latency_slice`), besides what the
    derivations replay (`amqpcap.derive.replay`): bounded by the channels and by the acks
    waiting for their next delivery (at most the deliveries outstanding in their tag space)."""

    #: where the next slice's acks are in the partition's backlog answers
    answer_rows: AnswerRows
    #: each channel's latest tag space with deliveries or settling frames (SPACE rows): the runs
    #: its next frames go on
    spaces: pd.DataFrame


@dataclass
class _Labels:
    """The partition's connections (stream, sorted) and each one's label
    (`amqpcap.derive.labels.connection_labels`): connections are whole in every slice."""

    streams: np.ndarray
    labels: np.ndarray

    def of(self, streams) -> np.ndarray:
        """The label of each of `streams` (`stream N` for a stream that is no connection)."""
        streams = np.asarray(streams, np.int64)
        label = connection_labels(None, streams)
        at = np.minimum(np.searchsorted(self.streams, streams), max(len(self.streams) - 1, 0))
        known = (self.streams[at] == streams) if len(self.streams) else np.zeros(len(streams), bool)
        label[known] = self.labels[at[known]]
        return label


@dataclass
class _Piece:
    """What a slice tells (`latency_slice`); the partition's partial is made of the pieces of all
    its slices (`latency_join`). Each row is told by one slice (`amqpcap.derive.replay.told`)
    and holds its frame's whole order (``_order``): a row told late goes back to its place."""

    #: the deliveries, ack gaps and confirms told (`deliveries`, `ack_gaps`, `confirms`), the
    #: deliveries with ``_tag``: their consumer tag's number among `tags`, the slice's tag text
    #: in sorted order
    deliveries: pd.DataFrame
    gaps: pd.DataFrame
    confirms: pd.DataFrame
    tags: np.ndarray
    #: the tag spaces whose runs are final (SPACE rows): a channel opened again, or the last slice
    spaces: pd.DataFrame
    #: the slice's own deliveries and settling frames for the raster (`_raster_events`)
    raster: pd.DataFrame
    #: the last slice's: the connections' labels
    labels: _Labels | None = None


def latency_slice(part: Capture, facts: CaptureFacts, carry: _Carry | None, last: bool,
                  backlog: BacklogAnswers) -> tuple[_Carry, _Piece]:
    """A slice of a partition's time (`amqpcap.partition.Slicing`; a whole partition is its own
    one slice): the rows it tells, with what the slices before left in `carry`, and the carry for
    the next slice."""
    carry = carry or _Carry(AnswerRows(), _no_spaces())
    part.context["backlog"] = backlog
    view = for_derivations(part)
    dc = deliveries_with_codes(view)
    tag, tags = _tag_ranks(dc)
    d = _told(view, dc.table.assign(_tag=tag), last)
    conf = _told(view, confirms(view), last)
    gaps, answer_rows = told_ack_gaps(view, backlog_answers(part), carry.answer_rows, last)
    spaces = _spaces(view, carry.spaces)
    final = np.ones(len(spaces), bool) if last else ~_current(spaces)
    carry = _Carry(answer_rows, spaces[~final].reset_index(drop=True))
    piece = _Piece(deliveries=d, gaps=gaps, confirms=conf, tags=tags,
                   spaces=spaces[final].reset_index(drop=True), raster=_raster_events(view))
    if last:
        stream = part.connections["stream"].to_numpy(np.int64)
        piece.labels = _Labels(stream, connection_labels(part, stream))
    return carry, piece


def _replayed(view: Capture) -> int:
    """How many rows at the head of the view's frames are replayed (0: a whole partition)."""
    seeds = seeds_of(view)
    return seeds.replayed if seeds is not None else 0


def _whole_orders(view: Capture, order) -> np.ndarray:
    """The whole partition's order of the view's frames at `order`."""
    seeds = seeds_of(view)
    order = np.asarray(order, np.int64)
    return seeds.whole_orders(order) if seeds is not None else order


def _told(view: Capture, table: pd.DataFrame, last: bool) -> pd.DataFrame:
    """The rows of a table derived from the view (with ``order``) that the slice tells, with
    ``_order``: their frame's whole order."""
    if not len(table):
        return table.assign(_order=_NONE)
    rows = told(view, table["order"].to_numpy(np.int64), last)
    table = table if rows.all() else table[rows]
    return table.assign(_order=_whole_orders(view, table["order"].to_numpy(np.int64)))


def _tag_ranks(dc: Deliveries) -> tuple[np.ndarray, np.ndarray]:
    """Each delivery's consumer tag as a number in the sorted order of the text (`tag_ranks`),
    and the text of each number."""
    rank = text_ranks(dc.tag_labels, dc.tag_code)
    if not len(rank):
        return rank, np.zeros(0, object)
    number, first = np.unique(rank, return_index=True)
    text = np.zeros(int(number.max()) + 1, object)
    text[number] = np.asarray(dc.tag_labels, dtype=object)[dc.tag_code[first]]
    return rank, text


def _raster_events(view: Capture) -> pd.DataFrame:
    """The slice's own deliveries and settling frames as the raster draws them: channel key
    (``key``), ``is_deliver``, ``t`` (seconds since the capture's start)."""
    m = methods(view)
    own = m["order"].to_numpy(np.int64) >= _replayed(view)
    ev = pick(view, m, (select(m, DELIVER_METHODS, "s2c") | select(m, SETTLE_METHODS, "c2s")) & own,
              ["stream", "channel", "ts", "method"])
    if not len(ev):  # (a capture without packets has no start either)
        return pd.DataFrame({"key": _NONE, "is_deliver": np.zeros(0, bool), "t": np.zeros(0, float)})
    return pd.DataFrame({"key": chan_key(ev), "is_deliver": ev["method"].isin(DELIVER_METHODS).to_numpy(bool),
                         "t": (ev["ts"] - view.summary["first_ts"]).dt.total_seconds().to_numpy()})


def latency_join(pieces: list[_Piece]) -> dict[str, Any]:
    """The partition's partial from the pieces of its slices (`latency_slice`), in their order."""
    # consumer tags numbered in the sorted order of their text (each slice's are numbered among its own)
    text = np.concatenate([p.tags for p in pieces])
    number = pd.factorize(text, sort=True)[0].astype(np.int64)
    start = np.cumsum([0] + [len(p.tags) for p in pieces])
    d = _in_whole_order([_tag_numbers(p, number[start[i]:]) for i, p in enumerate(pieces)])
    gaps = _in_whole_order([p.gaps for p in pieces])
    conf = _in_whole_order([p.confirms for p in pieces])
    tags = d["_tag"].to_numpy(np.int64) if len(d) else _NONE
    d, gaps, conf = (t.drop(columns=[c for c in t.columns if c.startswith("_")]) for t in (d, gaps, conf))
    counts = {"unsettled_at_end": int((d["outcome"] == "unsettled").sum()),
              "unsettled_at_close": int((d["outcome"] == "closed").sum()),
              "no_ack_excluded": int(d["no_ack"].sum()), "deliveries": int(len(d)), "publishes": int(len(conf)),
              "nacked": int((conf["outcome"] == "nack").sum()),
              "unconfirmed_at_end": int((conf["outcome"] == "unconfirmed").sum()),
              "unconfirmed_at_close": int((conf["outcome"] == "closed").sum())}
    spaces = pd.concat([p.spaces for p in pieces if len(p.spaces)] or [pieces[0].spaces], ignore_index=True)
    if len(spaces):  # (each slice's rows are sorted: the final ones of all slices, together)
        spaces = spaces.sort_values(["stream", "channel", "epoch"], kind="stable", ignore_index=True)
    # (a frame's position in the frames table is a partition's own: the tables name frames by packet)
    return {"deliveries": keep(d.drop(columns=["order", "settle_order", "epoch"]), "latency-deliveries", "packet"),
            "gaps": keep(gaps.drop(columns=["order", "epoch"]), "latency-ack-gaps", "packet"),
            "confirms": keep(conf.drop(columns=["order"]), "latency-confirms", "packet"),
            "consumers": consumer_latency(d, gaps, tags, pieces[-1].labels), "counts": counts,
            "refills": _refill_rows(gaps, slow_refills_of(d, gaps)), "redeliveries": _redelivery_rows(d),
            "interleaving": interleaving(spaces),
            "raster": _raster_data(pd.concat([p.raster for p in pieces], ignore_index=True))}


def _in_whole_order(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """The slices' rows of a table, in the whole partition's order (their frames', ``_order``):
    a row told by a later slice than its frame's goes back to its place."""
    kept = [p for p in parts if len(p)] or parts[:1]  # (an empty table's columns may be of object dtype)
    out = pd.concat(kept, ignore_index=True) if len(kept) > 1 else kept[0].reset_index(drop=True)
    order = out["_order"].to_numpy(np.int64)
    if len(order) > 1 and (order[1:] < order[:-1]).any():
        out = out.take(np.argsort(order, kind="stable")).reset_index(drop=True)
    return out


def _tag_numbers(piece: _Piece, number: np.ndarray) -> pd.DataFrame:
    """The piece's deliveries with ``_tag`` made the number of their consumer tag's text among
    those of all slices (`number`: per tag text of the slices' `_Piece.tags`, from this piece's)."""
    d = piece.deliveries
    return d.assign(_tag=number[d["_tag"].to_numpy(np.int64)]) if len(d) else d


#: what summary.json counts of the deliveries (deliver_to_ack) and of the confirms (publish_to_confirm)
DELIVERY_COUNTS = ("unsettled_at_end", "unsettled_at_close", "no_ack_excluded", "deliveries")
CONFIRM_COUNTS = ("publishes", "nacked", "unconfirmed_at_end", "unconfirmed_at_close")


def latency_merge(partials: list[dict[str, Any]], records: None, facts: CaptureFacts, cap: Capture) -> AnalyzerResult:
    """The partitions' rows in the whole capture's order (frame order: by packet, a packet's
    frames being one partition's); the summary, findings and plots from them: the percentiles
    from the latency columns alone, read whole (exact), the rest from the partitions' own
    numbers."""
    d = rows_table(taken(partials, "deliveries"), ["packet"])
    gaps = rows_table(taken(partials, "gaps"), ["packet"])
    conf = rows_table(taken(partials, "confirms"), ["packet"])
    inter = merge_rows(taken(partials, "interleaving"), ["stream", "channel"])
    # a consumer's rows are its channel's, of one partition: in the whole's order by stream
    per_consumer = merge_rows(taken(partials, "consumers"), ["stream"])
    if len(per_consumer):
        per_consumer["connection"] = connection_labels(cap, per_consumer["stream"])
    counts = {k: sum(q["counts"][k] for q in partials) for k in DELIVERY_COUNTS + CONFIRM_COUNTS}

    dta = stats(_values(d, "latency_s", unless="no_ack"))
    dta.update({k: counts[k] for k in DELIVERY_COUNTS})
    a2d = stats(_values(gaps, "gap_s"))
    p2c = stats(_values(conf, "latency_s"))
    p2c.update({k: counts[k] for k in CONFIRM_COUNTS})
    summary_inter = {
        "channels": int(len(inter)),
        "mean_deliver_run": _wmean(inter, "mean_deliver_run"), "max_deliver_run": _imax(inter, "max_deliver_run"),
        "mean_ack_run": _wmean(inter, "mean_ack_run"), "max_ack_run": _imax(inter, "max_ack_run"),
        "alternation_ratio": float(((inter["runs"] - 1).sum() / max((inter["delivers"] + inter["acks"] - 1).sum(), 1)))
        if len(inter) else None,
        "packets_multi_deliver": int(inter["packets_multi_deliver"].sum()) if len(inter) else 0,
        "packets_multi_ack": int(inter["packets_multi_ack"].sum()) if len(inter) else 0,
    }
    summary = {"latency": {"deliver_to_ack": dta, "ack_to_next_deliver": a2d, "publish_to_confirm": p2c,
                           "interleaving": summary_inter,
                           "consumers": per_consumer.to_dict(orient="records")}}
    findings = (_refill_findings(cap, _by_channel([q["refills"] for q in partials]))
                + _redelivery_findings(cap, _by_channel([q["redeliveries"] for q in partials])))
    tables = {"consumers": per_consumer, "deliveries": d, "ack-gaps": gaps, "confirms": conf, "interleaving": inter}
    plots = []
    measured = dta["count"] > 0
    if measured:
        plots.append(Plot("latency-over-time", "deliver→ack latency over time per consumer",
                          lambda path: _plot_over_time(cap, _acked(d), path)))
    if measured or counts["publishes"] or a2d["count"]:
        plots.append(Plot("latency-cdf", "latency CDF per consumer (deliver→ack), ack→next-deliver, publish→confirm",
                          lambda path: _plot_cdf(cap, _acked(d), kept_columns(gaps, ["gap_s"]),
                                                 kept_columns(conf, ["latency_s"]), path)))
    if len(inter):
        raster = _raster_joined([q["raster"] for q in partials])
        plots.append(Plot("interleaving-raster", "deliveries and acks over time per channel",
                          lambda path: _plot_raster(cap, raster, path)))
    return AnalyzerResult("latency", tables=tables, summary=summary, findings=findings, plots=plots)


#: the deliveries' columns the plots draw
PLOTTED = ["stream", "channel", "consumer_tag", "queue", "ts", "latency_s", "no_ack"]


def _acked(d) -> pd.DataFrame:
    """The acknowledged deliveries' plotted columns (read from the workers' files when kept there)."""
    a = kept_columns(d, PLOTTED)
    return a[~a["no_ack"].to_numpy(bool)]


def _by_channel(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """The partitions' per-channel rows (index: `chan_key`) in the whole capture's channel order."""
    kept = [p for p in parts if len(p)]
    if not kept:
        return parts[0]
    return pd.concat(kept).sort_index(kind="stable")


SPLIT = Split(partial=latency_partial, merge=latency_merge, context=backlog_context, join_context=join_backlog_context,
              slicing=Slicing(latency_slice, latency_join, replays=True), context_slicing=BACKLOG_CONTEXT_SLICING)


@analyzer("latency", split=SPLIT)
def latency(cap: Capture) -> AnalyzerResult:
    """Deliver→ack, ack→next-deliver and publish→confirm latencies; deliver/ack interleaving."""
    return run_whole(SPLIT, cap)


def _wmean(df, col):
    v = df[col].dropna()
    return float(v.mean()) if len(v) else None


def _imax(df, col):
    return int(df[col].max()) if len(df) else None


#: severity by its rank (analysis.SEVERITY_RANK: info 0, warning 1, critical 2)
SEVERITIES = {rank: name for name, rank in SEVERITY_RANK.items()}


def refill_severity(p50) -> np.ndarray:
    """broker-slow-refill's severity per channel as a rank (SEVERITIES): warning, critical from
    a median ack→next-deliver of REFILL_CRITICAL_S. Non-decreasing in ``p50``."""
    return np.where(np.asarray(p50, dtype=float) >= REFILL_CRITICAL_S, 2, 1)


def redelivery_severity(share) -> np.ndarray:
    """redelivery-loop's severity per channel as a rank (SEVERITIES): warning, critical from
    REDELIVERY_CRITICAL_SHARE of its deliveries bouncing. Non-decreasing in ``share``."""
    return np.where(np.asarray(share, dtype=float) >= REDELIVERY_CRITICAL_SHARE, 2, 1)



def _place(cap: Capture, stream, channel, queue) -> str:
    """A channel named for a title: `queue Q on conn` (its deliveries' queue), else `conn channel N`."""
    if queue is not None and not pd.isna(queue) and str(queue):
        return consumer_label(cap, stream, queue)
    return f"{connection_label(cap, stream)} channel {int(channel)}"


def _first_queue(keys: np.ndarray, queue: pd.Series) -> pd.Series:
    """Per key (of the rows), the first queue of its rows that has one."""
    q = pd.Series(queue.to_numpy(object), dtype=object)
    return q.groupby(keys).first()


def _refill_rows(gaps: pd.DataFrame, slow: pd.DataFrame) -> pd.DataFrame:
    """broker-slow-refill's row per channel of `slow` (`slow_refills_of`; index: `chan_key`):
    its numbers, its queue, its severity and the packets of its 5 longest refills (and of the
    deliveries that ended them)."""
    if len(slow) == 0:
        return slow.assign(stream=pd.Series(dtype=np.int64), channel=pd.Series(dtype=np.int64))
    refills = waiting(gaps)
    key = chan_key(refills)
    sel = np.isin(key, slow.index.to_numpy())
    g, key = refills[sel], key[sel]
    gap = g["gap_s"].groupby(key)
    # each channel's 5 longest gaps (ties: the earlier ack, as nlargest takes them), by one sort
    # (every channel of a large capture may be slow)
    by = np.lexsort((np.arange(len(g)), -g["gap_s"].to_numpy(float), key))
    top = by[_first_of_each(key[by], 5)]
    packets = np.r_[g["packet"].to_numpy(np.int64)[top], g["next_deliver_packet"].to_numpy(np.int64, na_value=0)[top]]
    worst = _sets_by(np.r_[key[top], key[top]], packets, slow.index)
    return slow.assign(
        stream=slow.index.to_numpy() // 65536, channel=slow.index.to_numpy() % 65536,
        ack_to_next_deliver_p90_s=gap.quantile(0.9), ack_to_next_deliver_max_s=gap.max(),
        backlog_min_median_msgs=g["backlog_min"].astype(float).groupby(key).median(),
        queue=_first_queue(key, g["queue"]),
        sev_rank=refill_severity(slow["ack_to_next_deliver_p50_s"]),
        worst_packets=pd.Series(worst, index=slow.index, dtype=object))


def _refill_findings(cap: Capture, per: pd.DataFrame) -> list[Finding]:
    """broker-slow-refill: one finding listing every channel of `per` (`_refill_rows` of the
    whole capture), worst first."""
    if len(per) == 0:
        return []
    per = per.sort_values(["sev_rank", "broker_share_of_cycle"], ascending=False, kind="stable")
    w = per.iloc[0]
    where, n = _place(cap, w.stream, w.channel, w.queue), len(per)
    own = "" if pd.isna(w.deliver_to_ack_p50_s) else \
        f" (the consumer's own deliver→ack median is {w.deliver_to_ack_p50_s * 1e3:.1f} ms)"
    numbers = (f"the next delivery comes a median {w.ack_to_next_deliver_p50_s * 1e3:.1f} ms after an ack although "
               f"messages were waiting{own}")
    title = (f"Broker slow to refill on {where}: {numbers}" if n == 1 else
             f"Broker slow to refill on {n} channels{_queues_text(per['queue'])}: worst {where}, {numbers}")
    subject_of = subject_namer(cap)
    subjects = [subject_of(r.stream, channel=int(r.channel), queue=_text(r.queue), refills=int(r.refills),
                           ack_to_next_deliver_p50_s=float(r.ack_to_next_deliver_p50_s),
                           ack_to_next_deliver_p90_s=float(r.ack_to_next_deliver_p90_s),
                           deliver_to_ack_p50_s=number(r.deliver_to_ack_p50_s),
                           broker_share_of_cycle=float(r.broker_share_of_cycle),
                           backlog_min_median_msgs=float(r.backlog_min_median_msgs),
                                                   severity=SEVERITIES[int(r.sev_rank)])
                for r in per.itertuples()]
    return [Finding(
        id="broker-slow-refill", severity=SEVERITIES[int(per["sev_rank"].max())], title=title,
        evidence={
            "ack_to_next_deliver_p50_s": float(w.ack_to_next_deliver_p50_s),
            "ack_to_next_deliver_p90_s": float(w.ack_to_next_deliver_p90_s),
            "ack_to_next_deliver_max_s": float(w.ack_to_next_deliver_max_s), "refills": int(w.refills),
            "deliver_to_ack_p50_s": number(w.deliver_to_ack_p50_s),
            "broker_share_of_cycle": float(w.broker_share_of_cycle),
            "backlog_min_median_msgs": float(w.backlog_min_median_msgs),
            "channels_with_this_finding": n, "queues": sorted({str(q) for q in per["queue"].dropna()}),
            "streams": sorted({int(s) for s in per["stream"]}), "channel": int(w.channel),
            "packets": list(w.worst_packets),
            "filter": channels_filter(per["stream"], per["channel"])
                      + " && amqp.method.class == 60 && amqp.method.method in {60, 80, 90, 120}",
        },
        advice="The consumer acks quickly but the broker sends the next message late although the queue has "
               "messages: check the broker's load (CPU, queue process, disk for persistent/quorum queues, "
               "memory or disk alarms), the number of queues and consumers per node, and the network "
               "between broker and consumer. A larger prefetch (e.g. 50–300) hides the refill delay by "
               "keeping messages in flight.",
        impact=float(per["broker_share_of_cycle"].max()), subjects=subjects)]


def _text(v) -> str | None:
    return None if v is None or pd.isna(v) else str(v)


def _queues_text(queues: pd.Series) -> str:
    """` of queue Q` / ` of 3 queues` for a grouped title ("" when no queue is known)."""
    q = queues.dropna().unique()
    return f" of queue {q[0]}" if len(q) == 1 else f" of {len(q)} queues" if len(q) else ""


REDELIVERY_COLUMNS = ["stream", "channel", "deliveries", "redelivered", "requeued", "requeued_by_nack",
                      "requeued_by_reject", "dropped", "share", "queue", "sev_rank", "example_packets"]


def _redelivery_rows(d: pd.DataFrame) -> pd.DataFrame:
    """redelivery-loop's row per channel with many redelivered deliveries or requeueing
    nack/reject (index: `chan_key`): its counts, queue, severity and example packets (its first
    5 redeliveries and first 5 requeueing settlements)."""
    if len(d) == 0:
        return pd.DataFrame(columns=REDELIVERY_COLUMNS)
    # (compared on the text column itself, not on an object copy of it)
    by_nack, by_reject = ((d["outcome"] == v).to_numpy(bool, na_value=False) for v in ("nack", "reject"))
    requeue = d["settle_requeue"].to_numpy(bool, na_value=False)
    requeued = requeue & (by_nack | by_reject)
    red = d["redelivered"].to_numpy(bool, na_value=False)
    # per channel (one int64 key, sorted as (stream, channel)): counts by bincount
    key = chan_key(d)
    chans, ch = np.unique(key, return_inverse=True)
    ch = ch.ravel()

    def count(mask):
        return np.bincount(ch, weights=mask, minlength=len(chans)).astype(np.int64)

    per = pd.DataFrame({"stream": chans // 65536, "channel": chans % 65536, "deliveries": np.bincount(ch),
                        "redelivered": count(red), "requeued": count(requeued),
                        "requeued_by_nack": count(requeue & by_nack), "requeued_by_reject": count(requeue & by_reject),
                        "dropped": count((by_nack | by_reject) & ~requeue)}, index=chans)
    worst_count = per[["redelivered", "requeued"]].max(axis=1)
    per["share"] = worst_count / per["deliveries"]
    per = per[(worst_count >= REDELIVERY_MIN) & (per["share"] >= REDELIVERY_SHARE)]
    if len(per) == 0:
        return pd.DataFrame(columns=REDELIVERY_COLUMNS)
    rows = np.isin(key, per.index.to_numpy())
    per["queue"] = _first_queue(key[rows], d.loc[rows, "queue"]).reindex(per.index)
    per["sev_rank"] = redelivery_severity(per["share"])
    # each channel's first 5 redeliveries and first 5 requeueing settlements (rows of `key` are
    # in frame order; a stable sort by channel keeps it within each)
    told = np.isin(key, per.index.to_numpy())
    ex_key, ex_packet = [], []
    for rows, packets in ((np.flatnonzero(told & red), d["packet"].to_numpy(np.int64)),
                          (np.flatnonzero(told & requeued), d["settle_packet"].to_numpy(np.int64, na_value=0))):
        rows = rows[np.argsort(key[rows], kind="stable")]
        rows = rows[_first_of_each(key[rows], 5)]
        ex_key.append(key[rows])
        ex_packet.append(packets[rows])
    examples = _sets_by(np.concatenate(ex_key), np.concatenate(ex_packet), per.index)
    return per.assign(example_packets=examples)


def _first_of_each(sorted_keys: np.ndarray, n: int) -> np.ndarray:
    """Positions of the first `n` rows of each run of equal `sorted_keys`."""
    if not len(sorted_keys):
        return np.zeros(0, dtype=np.int64)
    start = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    rank = np.arange(len(sorted_keys)) - np.repeat(start, np.diff(np.r_[start, len(sorted_keys)]))
    return np.flatnonzero(rank < n)


def _sets_by(keys: np.ndarray, packets: np.ndarray, index: pd.Index) -> pd.Series:
    """Per key of `index`, the sorted distinct positive `packets` of its rows (a list)."""
    got = pd.Series(packets).groupby(keys).agg(lambda v: sorted({int(x) for x in v if x > 0}))
    return pd.Series([got.get(k, []) for k in index], index=index, dtype=object)


def _redelivery_findings(cap: Capture, per: pd.DataFrame) -> list[Finding]:
    """redelivery-loop: one finding listing every channel of `per` (`_redelivery_rows` of the
    whole capture), worst first."""
    if len(per) == 0:
        return []
    per = per.sort_values(["sev_rank", "share"], ascending=False, kind="stable")
    w, n = per.iloc[0], len(per)
    where = _place(cap, w.stream, w.channel, w.queue)
    numbers = (f"{w.redelivered} of {w.deliveries} deliveries are redeliveries and {w.requeued} were requeued by "
               "nack/reject")
    title = (f"Messages bouncing on {where}: {numbers}" if n == 1 else
             f"Messages bouncing on {n} channels{_queues_text(per['queue'])}: worst {where}, {numbers}")
    subject_of = subject_namer(cap)
    subjects = [subject_of(r.stream, channel=int(r.channel), queue=_text(r.queue), deliveries=int(r.deliveries),
                           redelivered=int(r.redelivered), requeued_by_nack=int(r.requeued_by_nack),
                           requeued_by_reject=int(r.requeued_by_reject), dropped_by_nack_or_reject=int(r.dropped),
                           bouncing_share=float(r.share), severity=SEVERITIES[int(r.sev_rank)])
                for r in per.itertuples()]
    return [Finding(
        id="redelivery-loop", severity=SEVERITIES[int(per["sev_rank"].max())], title=title,
        evidence={
            "deliveries": int(w.deliveries), "redelivered": int(w.redelivered),
            "redelivered_share": float(w.redelivered / w.deliveries),
            "requeued_by_nack": int(w.requeued_by_nack), "requeued_by_reject": int(w.requeued_by_reject),
            "dropped_by_nack_or_reject": int(w.dropped),
            "channels_with_this_finding": n, "queues": sorted({str(q) for q in per["queue"].dropna()}),
            "deliveries_total": int(per["deliveries"].sum()), "redelivered_total": int(per["redelivered"].sum()),
            "streams": sorted({int(s) for s in per["stream"]}), "channel": int(w.channel),
            "packets": list(w.example_packets),
            "filter": channels_filter(per["stream"], per["channel"])
                      + " && (amqp.method.arguments.redelivered == 1 || (amqp.method.class == 60 && "
                        "amqp.method.method in {90, 120} && amqp.method.arguments.requeue == 1))",
        },
        advice="The consumer rejects or nacks messages with requeue=true and gets them back: a poisoned "
               "message can loop forever. Requeue only transient failures, reject others with "
               "requeue=false to a dead-letter exchange (x-dead-letter-exchange), and cap retries "
               "(quorum queues: x-delivery-limit).",
        impact=float(per["share"].max()), subjects=subjects)]


# -- plots ------------------------------------------------------------------------------------

def _by_consumer(cap: Capture, a: pd.DataFrame):
    """The consumers of ``a`` (deliveries): (groups of row positions, labels, common queue), in
    label order. Deliveries of one (stream, channel, consumer tag) are one consumer."""
    from ..plotting import consumer_labels, natural_order

    code = a.groupby(["stream", "channel", "consumer_tag"], sort=True, observed=True).ngroup().to_numpy()
    first = np.unique(code, return_index=True)[1]
    labels, queue = consumer_labels(cap, a["stream"].to_numpy()[first], a["channel"].to_numpy()[first],
                                    a["queue"].to_numpy(object)[first],
                                    a["consumer_tag"].astype(object).to_numpy()[first])
    rows = np.split(np.argsort(code, kind="stable"), np.cumsum(np.bincount(code))[:-1])
    order = natural_order(labels)
    return [rows[i] for i in order], [labels[i] for i in order], queue


def _slowest(groups, values: np.ndarray, k: int) -> list[int]:
    """Indices of the k groups with the highest median value, slowest first."""
    med = np.array([np.nanmedian(values[g]) if len(g) else -np.inf for g in groups])
    return np.argsort(-med, kind="stable")[:k].tolist()


def _binned_quantiles(x: np.ndarray, y: np.ndarray, edges: np.ndarray, qs=(0.5, 0.9)) -> pd.DataFrame:
    """Quantiles of y per time bin (rows: bins that hold values; column ``x``: the bin's middle)."""
    b = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, len(edges) - 2)
    q = pd.Series(y).groupby(b).quantile(list(qs)).unstack()
    mid = (edges[:-1] + edges[1:]) / 2
    return q.assign(x=mid[q.index.to_numpy()])


def _plot_over_time(cap: Capture, acked: pd.DataFrame, path: Path) -> None:
    """deliver→ack latency over time: per consumer (median line, band to p90) for a few; for many,
    all of them pooled plus the slowest few by median, named."""
    import matplotlib.pyplot as plt

    from ..plotting import MAX_NAMED, WORST_NAMED, duration_unit, plain_axis, short, time_edges

    a = acked[acked["latency_s"].notna()].reset_index(drop=True)
    t0 = cap.summary["first_ts"]
    edges = time_edges((cap.summary["last_ts"] - t0).total_seconds())
    x = (a["ts"] - t0).dt.total_seconds().to_numpy()
    factor, unit = duration_unit(a["latency_s"].quantile(0.99))
    y = a["latency_s"].to_numpy(float) * factor
    groups, labels, queue = _by_consumer(cap, a)
    fig, ax = plt.subplots(figsize=(11, 4.2), layout="constrained")
    if len(groups) <= MAX_NAMED:
        named, legend_title = range(len(groups)), None
    else:
        named = _slowest(groups, y, WORST_NAMED)
        legend_title = f"{len(groups):,} consumers: all pooled, and the {len(named)} slowest by median"
        q = _binned_quantiles(x, y, edges)
        ax.fill_between(q["x"], q[0.5], q[0.9], color="grey", alpha=0.25, lw=0)
        ax.plot(q["x"], q[0.5], "-", color="black", lw=1.4, label=f"all {len(groups):,} consumers: median (band to p90)")
    for j, i in enumerate(named):
        g = groups[i]
        if len(groups) <= MAX_NAMED and len(g) <= MAX_POINTS:
            ax.plot(x[g], y[g], ".", ms=2, alpha=0.35, color=f"C{j}")
        q = _binned_quantiles(x[g], y[g], edges)
        ax.plot(q["x"], q[0.5], "-", color=f"C{j}", lw=1.2, label=short(labels[i], 50))
        if len(groups) <= MAX_NAMED:
            ax.fill_between(q["x"], q[0.5], q[0.9], color=f"C{j}", alpha=0.15, lw=0)
    ax.set_yscale("log")
    plain_axis(ax.yaxis, log=True)
    ax.set_xlim(edges[0], edges[-1])
    ax.set_xlabel("seconds since capture start")
    ax.set_ylabel(f"deliver→ack ({unit})")
    ax.set_title((f"queue {queue}: " if queue else "") + "deliver→ack latency (line: median per time bin, band: to p90"
                 + (", dots: each delivery)" if len(groups) <= MAX_NAMED else ")"), fontsize=10, loc="left")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper right", title=legend_title, title_fontsize=7)
    fig.savefig(path, dpi=100)


def _cdf(ax, values, label, **kw):
    v = np.sort(np.asarray(values, dtype=float))
    v = v[~np.isnan(v)]
    if len(v) == 0:
        return
    if len(v) > 2000:  # the CDF drawn at 2000 quantiles looks the same and renders at once
        p = np.linspace(0, 1, 2000)
        ax.plot(np.quantile(v, p), p, label=f"{label} (n={len(v):,})", **kw)
    else:
        ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", label=f"{label} (n={len(v):,})", **kw)


def _plot_cdf(cap: Capture, acked, gaps, conf, path: Path) -> None:
    """Latency CDFs: deliver→ack per consumer (few) or pooled plus the slowest (many),
    ack→next-deliver and publish→confirm over all channels."""
    import matplotlib.pyplot as plt

    from ..plotting import MAX_NAMED, WORST_NAMED, duration_unit, percent_axis, plain_axis, short

    a = acked[acked["latency_s"].notna()].reset_index(drop=True)
    every = np.r_[a["latency_s"].to_numpy(float), gaps["gap_s"].to_numpy(float), conf["latency_s"].to_numpy(float)]
    factor, unit = duration_unit(np.nanquantile(every, 0.99) if np.isfinite(every).any() else [])
    fig, ax = plt.subplots(figsize=(11, 4.2), layout="constrained")
    y = a["latency_s"].to_numpy(float) * factor
    groups, labels, _ = _by_consumer(cap, a) if len(a) else ([], [], None)
    if len(groups) <= MAX_NAMED:
        for j, g in enumerate(groups):
            _cdf(ax, y[g], "deliver→ack " + short(labels[j], 44), color=f"C{j}")
    else:
        _cdf(ax, y, f"deliver→ack, all {len(groups):,} consumers", color="C0", lw=2)
        for j, i in enumerate(_slowest(groups, y, WORST_NAMED)):
            _cdf(ax, y[groups[i]], f"deliver→ack {short(labels[i], 40)} (slowest #{j + 1})", color=f"C{j + 1}", lw=1)
    _cdf(ax, gaps["gap_s"].to_numpy(float) * factor, "ack→next-deliver (all channels)", color="black", ls="--")
    if len(conf):
        _cdf(ax, conf["latency_s"].to_numpy(float) * factor, "publish→confirm (all channels)", color="grey", ls=":")
    ax.set_xscale("log")
    plain_axis(ax.xaxis, log=True)
    percent_axis(ax.yaxis)
    ax.set_xlabel(f"latency ({unit}, log scale)")
    ax.set_ylabel("share of messages ≤ x")
    ax.set_title("latency distributions (a curve further right is slower)", fontsize=10, loc="left")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="lower right")
    fig.savefig(path, dpi=100)


#: channels drawn as rows of the interleaving raster (the busiest)
RASTER_ROWS = 12


def _raster_data(events: pd.DataFrame) -> dict[str, Any]:
    """What the raster draws of a partition whose deliveries and acks are `events`
    (`_raster_events`, in frame order): per channel its deliveries and acks (``counts``: stream,
    channel, n) and, for its RASTER_ROWS busiest channels (the busiest of the whole capture are
    among the partitions' busiest), their times (``times``: {(stream, channel): (deliveries' t,
    acks' t)}, seconds since the capture's start)."""
    if not len(events):  # (nothing to draw)
        return {"counts": pd.DataFrame({"stream": pd.Series(dtype=np.int64), "channel": pd.Series(dtype=np.int64),
                                        "n": pd.Series(dtype=np.int64)}), "times": {}}
    key, n = np.unique(events["key"].to_numpy(np.int64), return_counts=True)
    counts = pd.DataFrame({"stream": key // 65536, "channel": key % 65536, "n": n.astype(np.int64)})
    times = {}
    every, deliver, t = events["key"].to_numpy(np.int64), events["is_deliver"].to_numpy(bool), events["t"].to_numpy()
    for stream, channel in _busiest(counts).itertuples(index=False):
        mine = every == stream * 65536 + channel
        times[(int(stream), int(channel))] = (t[mine & deliver], t[mine & ~deliver])
    return {"counts": counts, "times": times}


def _busiest(counts: pd.DataFrame) -> pd.DataFrame:
    """The RASTER_ROWS channels with the most deliveries and acks (ties: the first (stream, channel)),
    sorted by (stream, channel)."""
    top = counts.sort_values(["n", "stream", "channel"], ascending=[False, True, True], kind="stable")
    return top.head(RASTER_ROWS)[["stream", "channel"]].sort_values(["stream", "channel"])


def _raster_joined(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"counts": pd.concat([p["counts"] for p in parts], ignore_index=True),
            "times": {k: v for p in parts for k, v in p["times"].items()}}


def _plot_raster(cap: Capture, raster: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt

    from ..names import connection_label
    from ..plotting import natural_order, short, shown_of

    chans = [(int(s), int(c)) for s, c in _busiest(raster["counts"]).itertuples(index=False)]
    names = [f"{short(connection_label(cap, s), 40)} ch{c}" for s, c in chans]
    order = natural_order(names)
    chans, names = [chans[i] for i in order], [names[i] for i in order]
    fig, ax = plt.subplots(figsize=(11, 1.0 + 0.45 * len(chans)), layout="constrained")
    tmax = (cap.summary["last_ts"] - cap.summary["first_ts"]).total_seconds() or 1.0
    bins = np.linspace(0, tmax, 1000 + 1)
    for row, key in enumerate(chans):
        delivered, acked = raster["times"][key]
        for t, dy, color, cmap in ((delivered, -0.18, "tab:blue", "Blues"), (acked, 0.18, "tab:orange", "Oranges")):
            if len(delivered) + len(acked) <= MAX_POINTS:
                ax.vlines(t, row + dy - 0.14, row + dy + 0.14, color=color, lw=0.5)
            else:  # density per time bin: one image row instead of millions of marks
                h, _ = np.histogram(t, bins)
                ax.imshow(h[None, :], extent=(0, tmax, row + dy + 0.14, row + dy - 0.14), aspect="auto",
                          cmap=cmap, interpolation="nearest")
    ax.set_yticks(range(len(chans)), names, fontsize=8)
    ax.set_ylim(len(chans) - 0.5, -0.5)
    ax.set_xlim(0, tmax)
    ax.set_xlabel("seconds since capture start")
    n = len(raster["counts"])
    ax.set_title(f"deliveries (blue, upper) and acks (orange, lower): {shown_of(len(chans), n, 'channel')}"
                 + (" (the busiest)" if len(chans) < n else ""), fontsize=10, loc="left")
    fig.savefig(path, dpi=100)
