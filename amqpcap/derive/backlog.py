"""How many messages were known to wait in each consumed queue, over time: publishes routed to
the queue against deliveries from it. A queue is shared by connections (one publishes, another
consumes), so this relates connections to each other: scope CAPTURE.

It is computed in two steps, so that a capture split into partitions of whole connections
(`amqpcap.analysis.partition`) gives the whole capture's backlog:

- `queue_events` (scope CONNECTION): what a partition holds of every queue's backlog: its
  `queue.bind`s, its publishes and its deliveries and requeues, each at its frame's key; with
  the points where its acks and consumers read the backlog, its `BacklogQuestions`;
- `amqpcap.derive.backlog_join`: the events of every partition joined into one backlog per
  consumed queue and read at every partition's points, in cells of the capture's packets, so
  that no process holds the whole capture's events (and no partition searches the whole
  backlog), each partition given its `BacklogAnswers`.

A frame's key is the pair (packet, rank): its packet (the frame number of its last byte) and its
position among that packet's frames. A whole decode orders frames by packet (docs/tables.md) and
a packet's frames are all of one connection, so one partition, where a row position in
`cap.frames` orders the frames of one partition only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..io.load import Capture
from .cache import CONNECTION, derivation
from .deliveries import deliveries_with_codes
from .methods import methods, pick, select
from .seeds import seeds_of


@dataclass(frozen=True)
class QueueEvents:
    """A partition's share of the queues' backlogs (`queue_events`); its text columns are
    categoricals (`text_codes`)."""

    #: queue.bind frames: queue, exchange, routing_key (text; None where the frame had none)
    binds: pd.DataFrame
    #: client basic.publish frames: exchange, routing_key (text, "" where the frame had none),
    #: packet, rank (the frame's key), ts (int64 ns)
    publishes: pd.DataFrame
    #: deliveries from a known queue (delta -1) and their requeues by nack/reject (+1, at the
    #: settling frame): queue (text), packet, rank, ts (int64 ns), delta
    takes: pd.DataFrame
    #: each publish's frame (its position in cap.frames), and each take's delivery (its row in
    #: `deliveries`): what a slice of a partition's time tells of them
    #: (`amqpcap.derive.refills.backlog_context_slice`)
    published: np.ndarray
    taken: np.ndarray


def frame_keys(cap: Capture, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The keys (packet, rank) of the frames at positions `order` of cap.frames (sorted by packet).
    In a slice of a partition's time, a replayed frame's rank is its own (`Seeds.ranks`): the
    other frames of its packet are not there (`amqpcap.derive.replay`)."""
    packet = cap.frames["packet"].to_numpy(np.int64)
    order = np.asarray(order, np.int64)
    p = packet[order]
    rank = order - np.searchsorted(packet, p, side="left")
    seeds = seeds_of(cap)
    if seeds is not None and seeds.replayed:
        again = order < seeds.replayed
        rank[again] = seeds.replay.ranks[order[again]]
    return p, rank


def text_codes(col: pd.Series, missing=None) -> pd.Categorical:
    """A text column of the questions as a categorical (missing values as `missing`; None:
    missing): a partition's questions travel to the join, where a queue name repeated on every
    message's row would be most of their size (measured: 23 of 40 MB per 740k-packet bucket)."""
    return pd.Categorical(col.astype(object).where(col.notna(), missing).to_numpy(object))


@derivation(CONNECTION)
def queue_events(cap: Capture) -> QueueEvents:
    """The queue events of `cap`'s connections (see `QueueEvents`)."""
    m = methods(cap)
    dc = deliveries_with_codes(cap)
    d = dc.table
    ts = cap.frames["ts"].array.asi8
    binds = pick(cap, m, select(m, "queue.bind"), ["queue", "exchange", "routing_key"])
    pub = pick(cap, m, select(m, "basic.publish", "c2s"), ["order", "exchange", "routing_key"])
    p_order = pub["order"].to_numpy(np.int64)
    p_packet, p_rank = frame_keys(cap, p_order)
    # events: deliveries from a queue −1, their requeues (nack/reject with requeue) +1
    has = dc.queue_code >= 0
    rq = has & d["settle_requeue"].fillna(False).to_numpy(bool)
    taken = np.r_[np.flatnonzero(has), np.flatnonzero(rq)]
    order = np.r_[d["order"].to_numpy(np.int64)[has], d["settle_order"].to_numpy(np.int64, na_value=0)[rq]]
    packet, rank = frame_keys(cap, order)
    queue = d["queue"].astype(object).where(d["queue"].notna(), None).to_numpy(object)
    return QueueEvents(
        binds=pd.DataFrame({c: text_codes(binds[c]) for c in ("queue", "exchange", "routing_key")}),
        publishes=pd.DataFrame({"exchange": text_codes(pub["exchange"], ""),
                                "routing_key": text_codes(pub["routing_key"], ""),
                                "packet": p_packet, "rank": p_rank, "ts": ts[p_order]}),
        takes=pd.DataFrame({"queue": pd.Categorical(np.r_[queue[has], queue[rq]]), "packet": packet, "rank": rank,
                            "ts": ts[order],
                            "delta": np.r_[-np.ones(int(has.sum()), np.int64), np.ones(int(rq.sum()), np.int64)]}),
        published=p_order, taken=taken)


@dataclass(frozen=True)
class BacklogQuestions:
    """What a partition adds to the queues' backlogs and what it asks of them: its queue events,
    and the points where its acks and consumers read their queue's backlog (a partition's
    context step: `amqpcap.derive.refills.backlog_context`)."""

    events: QueueEvents
    #: per client ack/nack/reject, in `ack_gaps`' row order: queue (categorical; missing: unknown),
    #: packet, rank (the ack's frame key), next_packet, next_rank (the frame key of the next
    #: delivery on its channel; -1 and 0 when there is none)
    acks: pd.DataFrame
    #: per acknowledging consumer, in `consumer_rows`' order: queue (categorical; missing: unknown),
    #: start_ts, end_ts (int64 ns)
    consumers: pd.DataFrame


@dataclass(frozen=True)
class BacklogAnswers:
    """The backlog read at one partition's points (`BacklogQuestions`), row for row."""

    #: per ack: the least number of messages known to wait in its queue right after it, and
    #: until the next delivery (Int64; <NA> without a queue or a backlog row before)
    backlog_min: pd.api.extensions.ExtensionArray
    backlog_min_gap: pd.api.extensions.ExtensionArray
    #: per consumer: growth of its queue's backlog from its start to its end, in messages
    #: (Int64; <NA> without a known queue, or when no queue has a backlog)
    growth_msgs: pd.api.extensions.ExtensionArray
