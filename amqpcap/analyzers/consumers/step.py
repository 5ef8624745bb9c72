"""The consumers analyzer's step over rows (a partition, or a slice of its time): what each slice
tells (`_Piece`), and the pieces joined into the partition's partial (state rows, summary,
findings' inputs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ...io.load import Capture
from ...derive.backlog import BacklogAnswers
from ...derive.backlog_join import BacklogPieces, answers_of
from ...derive.consumers import (
    CONSUMER, acked_deliveries, code_of, consumer_rows, consumer_state, with_final_prefetch)
from ...derive.deliveries import consumes, deliveries
from ...derive.methods import KEY
from ...derive.refills import AnswerRows, backlog_answers, slow_refills_of, told_ack_gaps
from ...derive.replay import for_derivations, state_maxima, told, told_consumers, told_state
from ...derive.seeds import seeds_of
from ...derive.tally import CONSUMER_KEY
from ...io.kept_rows import keep
from .constants import NOT_A_WINDOW
from .findings import _limit_rows, _unlimited
from .listing import LISTED, _consume_rows
from .plots import state_bins
from .summary import _no_ack_rows, _runs, _summary


#: the ack gaps' columns a piece keeps (those `_summary` and `slow_refills_of` read)
GAPS = KEY + ["packet", "settled", "unacked_after", "queue", "next_deliver_packet", "gap_s", "backlog_min",
              "backlog_min_gap"]


@dataclass
class _Piece:
    """What a slice tells (`consumers_slice`), each row once: the partition's partial is made
    from the pieces of all its slices (`consumers_join`). Per message rows, which the join needs
    (the state rows are the partial's own table; medians need every value)."""

    #: state rows (`consumer_state`'s columns): of a partition in one step, in order and final;
    #: of a slice, told out of order with their frame's whole order (``_order``: `replay.told_state`)
    state: pd.DataFrame
    #: consumer rows (`consumer_rows`), with their start's whole order
    consumers: pd.DataFrame
    #: deliveries of acknowledging consumers: code (row of `acked_keys`), ts, latency_s,
    #: settle_order (whole; -1: not settled), settle_multiple
    acked: pd.DataFrame
    acked_keys: pd.DataFrame
    #: every delivery: stream, channel, consumer_tag, ts, latency_s, no_ack
    deliveries: pd.DataFrame
    #: ack gaps (`ack_gaps`: the columns `_summary` and `slow_refills_of` read)
    gaps: pd.DataFrame
    #: consumer_list's rows of the basic.consume frames (`_consume_rows`)
    consumes: pd.DataFrame
    #: the slice's zero-window packets (`_zero_windows`)
    zero: pd.DataFrame
    #: the last slice's: the most unacked per consumer over the partition (None: a partition in
    #: one step, whose state rows have it already), the consumers' backlog growth (by whole
    #: consumer row)
    maxima: pd.DataFrame | None = None
    growth: Any = None


def consumers_slice(part: Capture, answer_rows: AnswerRows | None, last: bool,
                    backlog: BacklogPieces | None) -> tuple[AnswerRows, _Piece]:
    """A slice of a partition's time (a whole partition is its own one slice): the rows it tells
    of the derivations (`amqpcap.derive.replay.told`), its own zero-window packets; the last
    slice also what only the end knows."""
    view = for_derivations(part)
    seeds = seeds_of(view)
    answers = _answers(view, backlog)
    gaps, answer_rows = told_ack_gaps(view, answers, answer_rows, last)
    d = deliveries(view)
    told_d = told(view, d["order"].to_numpy(np.int64), last)
    a = acked_deliveries(view)
    told_a = told(view, a.table["order"].to_numpy(np.int64), last)
    cons = consumes(view)
    listed = _consume_rows(view, cons[told(view, cons["order"].to_numpy(np.int64), last)])
    piece = _Piece(state=consumer_state(view) if seeds is None else told_state(view, last),
                   consumers=consumer_rows(view)[told_consumers(view, last)],
                   acked=pd.DataFrame({"code": a.code[told_a], "ts": a.table["ts"].array[told_a],
                                       "latency_s": a.table["latency_s"].to_numpy(float)[told_a],
                                       "settle_order": _whole(view, a.table["settle_order"])[told_a],
                                       "settle_multiple": a.table["settle_multiple"].to_numpy(bool, na_value=False)[told_a]}),
                   acked_keys=a.keys,
                   deliveries=d.loc[told_d, CONSUMER_KEY + ["ts", "latency_s", "no_ack"]],
                   gaps=gaps[GAPS].reset_index(drop=True),
                   consumes=listed.assign(start_order=_whole(view, listed["start_order"])),
                   zero=_zero_windows(part))
    if last:
        piece.maxima = state_maxima(view) if seeds is not None else None
        piece.growth = answers.growth_msgs
    return answer_rows, piece


def _answers(view: Capture, backlog: BacklogPieces | None) -> BacklogAnswers:
    """The partition's backlog answers (`backlog_answers`): of the whole partition, shared with
    the other readers of `ack_gaps`; in a slice, read from the context (row i: the partition's
    i-th ack, or consumer)."""
    if seeds_of(view) is None:
        view.context.backlog = backlog
        return backlog_answers(view)
    return answers_of(backlog) if backlog is not None else backlog_answers(view)


def _whole(view: Capture, order: pd.Series) -> np.ndarray:
    """Frame positions in `view` (Int64, <NA>: none) as the whole partition's (-1: none)."""
    at = order.to_numpy(np.int64, na_value=-1)
    seeds = seeds_of(view)
    if seeds is None or not len(at):
        return at
    return np.where(at >= 0, seeds.whole_orders(np.maximum(at, 0)), -1)


def _zero_windows(part: Capture) -> pd.DataFrame:
    """The packets of `part` in which a client advertised a zero receive window (not a SYN, FIN
    or RST: NOT_A_WINDOW): stream, ts (ns), packet, in packet order."""
    p = part.packets
    zero = (p["direction"] == "c2s").to_numpy(bool) & (p["window"].to_numpy(np.int64) == 0) \
        & ((p["flags"].to_numpy(np.int64) & NOT_A_WINDOW) == 0)
    return pd.DataFrame({"stream": p["stream"].to_numpy(np.int64)[zero], "ts": p["ts"].array.asi8[zero],
                         "packet": p["packet"].to_numpy(np.int64)[zero]})


def consumers_join(pieces: list[_Piece], summary: dict) -> dict[str, Any]:
    """The partition's partial (consumers, credit series, no-ack consumers, the unlimited ones
    that fell behind, their example packets and queues, its slowly refilled channels) from its
    slices' pieces (`consumers_slice`); `summary`: the capture's (its first and last ts)."""
    st = _state_of(pieces)
    c = _rows_of([p.consumers for p in pieces], "start_order")
    acked = _acked_of(pieces, _runs(st)[1])
    d = _joined([p.deliveries for p in pieces])
    gaps = _joined([p.gaps for p in pieces])
    s = _summary(st, c, acked, gaps, pieces[-1].growth)
    listed = _rows_of([p.consumes for p in pieces], "start_order")[LISTED]
    return {"summary": s, "state": keep(st, "consumers-state", "stream"),
            "plotted": state_bins(summary["first_ts"], summary["last_ts"], st) if len(st) else None,
            "no_ack": _no_ack_rows(d),
            "slow": slow_refills_of(d, gaps).index.to_numpy(), "limits": _limit_rows(st),
            "unlimited": _unlimited(listed, s, d, _joined([p.zero for p in pieces])) if len(d) else None,
            "queues": c.drop_duplicates(CONSUMER)[CONSUMER + ["queue"]]}


def _joined(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """The pieces' rows of one table, in slice order (a slice without a row may give untyped
    columns: left out)."""
    if len(tables) == 1:
        return tables[0].reset_index(drop=True)
    return pd.concat([t for t in tables if len(t)] or tables[:1], ignore_index=True)


def _rows_of(tables: list[pd.DataFrame], order: str) -> pd.DataFrame:
    """The pieces' rows of a table in the whole's order, by the whole frame order `order`."""
    rows = _joined(tables)
    return rows if len(tables) == 1 else rows.sort_values(order, kind="stable").reset_index(drop=True)


def _state_of(pieces: list[_Piece]) -> pd.DataFrame:
    """The partition's state rows (`consumer_state`) from the rows its slices told: each
    consumer's by time, then frame; an estimated prefetch the most of the consumer's whole
    life (`with_final_prefetch`)."""
    maxima = pieces[-1].maxima
    if maxima is None:
        return pieces[0].state
    st = _joined([p.state for p in pieces]).sort_values(CONSUMER + ["ts", "_order"], kind="stable")
    at = code_of(maxima, st) if len(maxima) else np.full(len(st), -1)
    st = with_final_prefetch(st, np.where(at >= 0, maxima["max_unacked"].to_numpy()[np.maximum(at, 0)], 0))
    return st.drop(columns="_order").reset_index(drop=True)


def _acked_of(pieces: list[_Piece], keys: pd.DataFrame) -> pd.DataFrame:
    """The pieces' deliveries of acknowledging consumers with their consumer's code in `keys`
    (`_runs` of the state rows; -1: a consumer without state rows)."""
    out = []
    for p in pieces:
        to_keys = code_of(keys, p.acked_keys) if len(p.acked_keys) else np.zeros(0, np.int64)
        code = p.acked["code"].to_numpy(np.int64)
        out.append(p.acked.assign(code=to_keys[code] if len(code) else code))
    return _joined(out)
