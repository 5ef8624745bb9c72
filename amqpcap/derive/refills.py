"""How soon the broker refills a consumer: for each client ack/nack/reject, the next delivery on
its channel and the gap (`ack_gaps`), and the channels where that gap is the broker's slowness
(`slow_refills`, broker-slow-refill's detection, read by the latency and consumers analyzers).

"Messages known to be waiting" come from the queue's backlog (amqpcap.derive.backlog), which
relates publishing and consuming connections: scope CAPTURE.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..io.load import Capture
from ..analysis.contract import Need, Steps
from .backlog import BacklogAnswers, BacklogQuestions, QueueEvents, queue_events, text_codes
from .backlog_join import BACKLOG_JOIN, BacklogShares, answers_of, shares_of
from .cache import CAPTURE, derivation
from .columns import value_at
from .consumers import consumer_rows
from .deliveries import GET_TAG, deliveries
from .methods import chan_key
from .ack_rows import ack_rows
from .replay import for_derivations, replay_after, told, told_consumers
from .seeds import seeds_of
from ..model.facts import ns

_NONE = np.zeros(0, np.int64)


#: broker-slow-refill: median ack→next-deliver (with messages known to be waiting) above this is
#: slow. On one host or a LAN RabbitMQ dispatches the next message well under a millisecond after
#: the ack arrives; 5 ms is several round trips, and at prefetch 1 it caps a consumer at 200 msg/s.
REFILL_SLOW_S = 0.005
#: ... and only when the broker's share is at least this multiple of the consumer's deliver→ack
#: median: if the consumer's own work takes longer, raising the broker's speed would not help much
REFILL_RATIO = 1.0
#: ... with at least this many measured refills (fewer is anecdotal)
MIN_REFILLS = 20


def backlog_context(cap: Capture, facts) -> BacklogShares:
    """What a partition tells the others of the queue backlog (`BACKLOG`'s first round): its
    queue events, and where its acks and consumers read the backlog, cut into the capture's cells
    (`amqpcap.derive.backlog_join`; one cell without `facts`)."""
    return BACKLOG.context(cap, facts)


@dataclass(frozen=True)
class AnswerRows:
    """Where a slice's acks are in the partition's backlog answers (`BacklogAnswers`: row i is
    the partition's i-th client ack/nack/reject frame), carried from a slice of its time to the
    next (`told_ack_gaps`). Bounded by the acks replayed (those waiting for a next delivery)."""

    #: the acks (own frames) of the slices before
    before: int = 0
    #: the row of each ack replayed to the next slice, by its whole order (sorted)
    waiting_orders: np.ndarray = field(default_factory=lambda: _NONE)
    waiting_rows: np.ndarray = field(default_factory=lambda: _NONE)


def told_ack_gaps(view: Capture, answers: BacklogAnswers, before: AnswerRows | None,
                  last: bool) -> tuple[pd.DataFrame, AnswerRows]:
    """The acks that the slice `view` (as `for_derivations` gives it; a whole partition tells
    every ack) tells, as `ack_gaps` rows with ``_order`` (their whole order), the backlog read at
    each from the partition's `answers`; and where the next slice's acks are in them."""

    rows = ack_rows(view).table
    order = rows["order"].to_numpy(np.int64)
    seeds = seeds_of(view)
    whole = seeds.whole_orders(order) if seeds is not None else order
    before = before or AnswerRows()
    own = order >= (seeds.replayed if seeds is not None else 0)
    at = np.full(len(order), -1, np.int64)
    at[own] = before.before + np.arange(int(own.sum()), dtype=np.int64)
    at[~own] = value_at(before.waiting_orders, before.waiting_rows, whole[~own], -1)
    keep = told(view, order, last)
    if (at[keep] < 0).any():
        raise ValueError("an ack told without its row in the backlog answers")
    after = AnswerRows(before.before + int(own.sum()))
    if seeds is not None and not last:
        later = replay_after(view)
        waiting = np.isin(whole, later.orders[later.pending]) & (at >= 0)
        after = AnswerRows(after.before, whole[waiting], at[waiting])
    at, s = at[keep], rows[keep].reset_index(drop=True)
    return s.assign(backlog_min=answers.backlog_min.take(at), backlog_min_gap=answers.backlog_min_gap.take(at),
                    _order=whole[keep])[GAP_COLUMNS + ["_order"]], after


@dataclass(frozen=True)
class QuestionsTold:
    """What a slice of a partition's time tells of the partition's `BacklogQuestions`
    (`backlog_context_slice`): its own queue.bind and basic.publish frames, the takes of the
    deliveries it tells, the acks and consumers it tells. Each told row keeps its whole order
    (``taken_orders``, ``_order``, ``start_order``): a row told late goes back to its place in
    the join."""

    events: QueueEvents
    #: each take's delivery's whole order
    taken_orders: np.ndarray
    #: `BacklogQuestions.acks` with ``_order``; `BacklogQuestions.consumers` with ``start_order``
    acks: pd.DataFrame
    consumers: pd.DataFrame
    #: the capture's records (`CaptureFacts.records`; 0 without facts)
    records: int


def questions_told(part: Capture, facts, last: bool) -> QuestionsTold:
    """What a slice of a partition's time (a whole partition is its own one slice) tells of the
    partition's questions to the backlog. Nothing is carried: what the rows need of the slices
    before, the derivations replay."""

    view = for_derivations(part)
    seeds = seeds_of(view)
    replayed = seeds.replayed if seeds is not None else 0

    def whole(order: np.ndarray) -> np.ndarray:
        return seeds.whole_orders(order) if seeds is not None else order

    ev = queue_events(view)
    own = ev.published >= replayed  # (a replayed publish, unconfirmed at the cut, is the slice's before)
    d_order = deliveries(view)["order"].to_numpy(np.int64)[ev.taken]
    keep = told(view, d_order, last)
    events = QueueEvents(binds=ev.binds, publishes=_rows(ev.publishes, own), takes=_rows(ev.takes, keep),
                         published=ev.published[own], taken=ev.taken[keep])
    rows = ack_rows(view)
    order = rows.table["order"].to_numpy(np.int64)
    acks = told(view, order, last)
    c = _rows(consumer_rows(view), told_consumers(view, last))
    consumers = pd.DataFrame({"queue": text_codes(c["queue"]), "start_ts": ns(c["start_ts"]),
                              "end_ts": ns(c["end_ts"]), "start_order": c["start_order"].to_numpy(np.int64)})
    told_acks = _rows(rows.questions, acks).assign(_order=whole(order[acks]))
    return QuestionsTold(events, whole(d_order[keep]), told_acks, consumers, facts.records if facts is not None else 0)


def _rows(table: pd.DataFrame, keep: np.ndarray) -> pd.DataFrame:
    """The rows `keep` of `table` (the table itself when all are kept: a whole partition's)."""
    return table if keep.all() else table[keep].reset_index(drop=True)


def backlog_context_join(pieces: list[QuestionsTold]) -> BacklogShares:
    """The partition's context from what its slices told (`questions_told`), in their
    order: its `BacklogQuestions` in the whole's row order (takes as the deliveries' order,
    requeues after the takes; acks in frame order; consumers by their start), cut into cells."""
    takes = _rows_told([p.events.takes for p in pieces], np.concatenate([p.taken_orders for p in pieces]),
                       first=np.concatenate([p.events.takes["delta"].to_numpy(np.int64) for p in pieces]) < 0)
    acks = _rows_told([p.acks for p in pieces], np.concatenate([p.acks["_order"].to_numpy(np.int64) for p in pieces]))
    consumers = _rows_told([p.consumers for p in pieces],
                           np.concatenate([p.consumers["start_order"].to_numpy(np.int64) for p in pieces]))
    events = QueueEvents(binds=_rows_told([p.events.binds for p in pieces]),
                         publishes=_rows_told([p.events.publishes for p in pieces]), takes=takes,
                         published=_NONE, taken=_NONE)
    questions = BacklogQuestions(events, acks.drop(columns="_order"), consumers.drop(columns="start_order"))
    return shares_of(questions, pieces[-1].records)


def _rows_told(tables: list[pd.DataFrame], order: np.ndarray | None = None,
               first: np.ndarray | None = None) -> pd.DataFrame:
    """The rows of `tables` (of the slices, in their order) as one table: by `order` when given
    (stable; rows with `first` before the others), its categorical text columns with the
    categories the whole's would have (those of the values left, sorted: `text_codes`)."""
    if len(tables) == 1 and (order is None or _in_order(order, first)):
        return tables[0]
    text = [col for col, t in tables[0].dtypes.items() if isinstance(t, pd.CategoricalDtype)]
    out = pd.concat([t.drop(columns=text) for t in tables], ignore_index=True)
    for col in text:  # (missing values stay missing: those `text_codes` made so)
        out[col] = pd.Categorical(np.concatenate([np.asarray(t[col], dtype=object) for t in tables]))
    out = out[tables[0].columns]
    if order is not None:
        by = np.lexsort((order, ~first)) if first is not None else np.argsort(order, kind="stable")
        out = out.iloc[by].reset_index(drop=True)
    return out


def _in_order(order: np.ndarray, first: np.ndarray | None) -> bool:
    """Whether rows with these `order` (and `first`: `_rows_told`) are in the order the join sorts them."""
    if first is not None:
        if (np.diff(first.astype(np.int8)) > 0).any():
            return False
        return all(bool((np.diff(order[mask]) >= 0).all()) for mask in (first, ~first))
    return bool((np.diff(order) >= 0).all())


class BacklogRound(Steps[list, BacklogShares]):
    """The queue backlog's first round: what each slice tells of the partition's questions
    (`questions_told`), the partition's `BacklogShares` at its end."""

    reads_derivations = True

    def start(self, facts) -> list[QuestionsTold]:
        return []

    def step(self, told: list[QuestionsTold], rows: Capture, facts, last: bool) -> list[QuestionsTold]:
        return [*told, questions_told(rows, facts, last)]

    def close(self, told: list[QuestionsTold], rows: Capture, facts) -> BacklogShares:
        return backlog_context_join(told)


#: the queue backlog, what an analyzer that reads it at its acks names (``uses = BACKLOG``): each
#: partition's queue events, joined in cells into the backlog read at that partition's acks and
#: consumers, the `BacklogPieces` its step is given
BACKLOG = Need("queue backlog", BacklogRound(), BACKLOG_JOIN)


@derivation(CAPTURE)
def backlog_answers(cap: Capture) -> BacklogAnswers:
    """The backlog read at `cap`'s acks and consumers (`BacklogAnswers`): a partition's, given by
    the context round (``cap.context.backlog``), or those of the capture as one partition."""
    got = cap.context.backlog
    if got is None:
        got = BACKLOG_JOIN([backlog_context(cap, None)]).values[0]
    return answers_of(got)


#: `ack_gaps`' columns
GAP_COLUMNS = ["stream", "channel", "epoch", "packet", "ts", "order", "method", "multiple", "settled", "unacked_after",
               "queue", "backlog_min", "backlog_min_gap", "next_deliver_packet", "next_deliver_ts", "gap_s"]


@derivation(CAPTURE)
def ack_gaps(cap: Capture) -> pd.DataFrame:
    """One row per client ack/nack/reject: the next delivery on its channel and the gap.

    Columns: stream, channel, epoch, packet, ts, order, method, multiple, settled (deliveries it
    settled), queue, backlog_min (messages known to be waiting in that queue right after the ack,
    see amqpcap.derive.backlog), backlog_min_gap (the least of it until the next delivery),
    next_deliver_packet, next_deliver_ts, gap_s."""
    rows = ack_rows(cap)
    a = backlog_answers(cap)
    if len(a.backlog_min) != len(rows.table):
        raise ValueError(f"the backlog was read at {len(a.backlog_min):,} acks, the partition has {len(rows.table):,}")
    s = rows.table.assign(backlog_min=a.backlog_min, backlog_min_gap=a.backlog_min_gap)
    return s[GAP_COLUMNS].reset_index(drop=True)


def waiting(gaps: pd.DataFrame) -> pd.DataFrame:
    """The refills broker-slow-refill measures: acks that settled the client's last unsettled
    delivery on the channel (``unacked_after`` 0: from then on it had nothing to work on) while
    messages were known to wait in the queue for the whole gap (backlog_min_gap > 0), with a
    next delivery. The gap is then time the consumer waited for the broker although the broker
    held a message it could have sent. A message waiting only at the ack may go to another
    consumer of the queue the next moment (round-robin between consumers with credit), which
    is no delay at all. After an ack that leaves deliveries in hand (prefetch > 1) the consumer
    keeps working, and a late refill costs it nothing."""
    return gaps.loc[gaps["gap_s"].notna() & (gaps["backlog_min_gap"].fillna(0) > 0) & (gaps["settled"] > 0)
                    & (gaps["unacked_after"] == 0),
                    ["stream", "channel", "packet", "gap_s", "backlog_min", "queue", "next_deliver_packet"]]


@derivation(CAPTURE)
def slow_refills(cap: Capture) -> pd.DataFrame:
    """broker-slow-refill's detection: the channels (index: `amqpcap.derive.methods.chan_key`) with
    at least MIN_REFILLS refills (`waiting`) whose median ack→next-deliver is ≥ REFILL_SLOW_S and ≥
    REFILL_RATIO × the channel's deliver→ack median, among channels with basic.deliver (a
    consumer). Columns: refills, ack_to_next_deliver_p50_s, deliver_to_ack_p50_s,
    broker_share_of_cycle. The latency analyzer tells them (broker-slow-refill); the consumers
    analyzer reads it too (a prefetch-1 consumer on such a channel is told about in that finding,
    not in prefetch-one)."""
    return slow_refills_of(deliveries(cap), ack_gaps(cap))


def slow_refills_of(d: pd.DataFrame, gaps: pd.DataFrame) -> pd.DataFrame:
    """`slow_refills` from a capture's deliveries and ack gaps (its tables, or the rows of any
    set of whole channels: every number is a channel's own)."""
    w = waiting(gaps)
    lat = d["latency_s"].to_numpy(float)
    has = ~np.isnan(lat)
    dta = pd.Series(lat[has]).groupby(chan_key(d)[has]).median()
    per = w["gap_s"].groupby(chan_key(w)).agg(["size", "median"])
    cons = dta.reindex(per.index)
    # channels a consumer was delivered to: after a basic.get-ok the next delivery waits for the
    # client's next basic.get, not for the broker
    pushed = np.unique(chan_key(d)[(d["consumer_tag"] != GET_TAG).to_numpy(bool, na_value=False)])
    slow = per[(per["size"] >= MIN_REFILLS) & (per["median"] >= REFILL_SLOW_S)
               & (per["median"] >= REFILL_RATIO * cons.fillna(np.inf)) & per.index.isin(pushed)]
    c50 = cons.reindex(slow.index)
    return pd.DataFrame({"refills": slow["size"].astype(np.int64), "ack_to_next_deliver_p50_s": slow["median"],
                         "deliver_to_ack_p50_s": c50,
                         # the broker's part of one deliver→ack→deliver cycle (all of it when the
                         # consumer's own time is unknown)
                         "broker_share_of_cycle": (slow["median"] / (slow["median"] + c50)).fillna(1.0)})
