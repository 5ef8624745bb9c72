"""How many messages were known to wait in each consumed queue, over time: publishes routed to
the queue against deliveries from it. A queue is shared by connections (one publishes, another
consumes), so this relates connections to each other: scope CAPTURE.

It is computed in two steps, so that a capture split into partitions of whole connections
(`amqpcap.partition`) gives the whole capture's backlog:

- `queue_events` (scope CONNECTION): what a partition holds of every queue's backlog: its
  `queue.bind`s, its publishes and its deliveries and requeues, each at its frame's key;
- `join_backlog`: the events of every partition as one backlog per consumed queue.

A frame's key is the pair (packet, rank): its packet (the frame number of its last byte) and its
position among that packet's frames. A whole decode orders frames by packet (docs/tables.md) and
a packet's frames are all of one connection, so one partition, where a row position in
`cap.frames` orders the frames of one partition only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..capture import Capture
from .cache import CAPTURE, CONNECTION, derivation
from .columns import group_cumsum
from .deliveries import deliveries_with_codes
from .methods import methods, pick, select


@dataclass(frozen=True)
class QueueEvents:
    """A partition's share of the queues' backlogs (`queue_events`)."""

    #: queue.bind frames: queue, exchange, routing_key (text; None where the frame had none)
    binds: pd.DataFrame
    #: client basic.publish frames: exchange, routing_key (text, "" where the frame had none),
    #: packet, rank (the frame's key), ts (int64 ns)
    publishes: pd.DataFrame
    #: deliveries from a known queue (delta -1) and their requeues by nack/reject (+1, at the
    #: settling frame): queue (text), packet, rank, ts (int64 ns), delta
    takes: pd.DataFrame


def frame_keys(cap: Capture, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The keys (packet, rank) of the frames at positions `order` of cap.frames (sorted by packet)."""
    packet = cap.frames["packet"].to_numpy(np.int64)
    p = packet[order]
    return p, order - np.searchsorted(packet, p, side="left")


def _text(col: pd.Series, missing) -> np.ndarray:
    return col.astype(object).where(col.notna(), missing).to_numpy(object)


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
    order = np.r_[d["order"].to_numpy(np.int64)[has], d["settle_order"].to_numpy(np.int64, na_value=0)[rq]]
    packet, rank = frame_keys(cap, order)
    queue = _text(d["queue"], None)
    return QueueEvents(
        binds=pd.DataFrame({c: _text(binds[c], None) for c in ("queue", "exchange", "routing_key")}),
        publishes=pd.DataFrame({"exchange": _text(pub["exchange"], ""), "routing_key": _text(pub["routing_key"], ""),
                                "packet": p_packet, "rank": p_rank, "ts": ts[p_order]}),
        takes=pd.DataFrame({"queue": np.r_[queue[has], queue[rq]], "packet": packet, "rank": rank, "ts": ts[order],
                            "delta": np.r_[-np.ones(int(has.sum()), np.int64), np.ones(int(rq.sum()), np.int64)]}))


def backlog_context(cap: Capture, facts) -> QueueEvents:
    """The context step (`amqpcap.partition.Split.context`) of the analyzers that read the
    queue backlog (consumers, latency): a partition's queue events, which `join_backlog` joins.
    One function for both, so that the backlog is joined once for them."""
    return queue_events(cap)


def join_backlog(parts: list[QueueEvents]) -> pd.DataFrame:
    """Lower bound of each consumed queue's backlog over time, from the queue events of every
    partition of a capture.

    A publish counts for queue Q when it goes to the default exchange with routing key Q, or to
    an (exchange, routing key) that a queue.bind in the capture bound Q with (exact key: direct
    exchanges; wildcards and fanout are not interpreted). Deliveries from Q subtract, nack/reject
    with requeue add back. Messages already in Q when the capture started are unknown, so the
    running sum is a lower bound of the backlog (never below 0). One row per (queue, frame) with
    an event, by queue name then frame: queue (categorical: a row per message of a busy queue),
    packet, rank (the frame's key), ts (int64 ns), backlog_min (messages, after that frame)."""
    takes = pd.concat([p.takes for p in parts], ignore_index=True)
    if not len(takes):
        return pd.DataFrame({"queue": pd.Categorical([]), "packet": pd.Series(dtype=np.int64),
                             "rank": pd.Series(dtype=np.int64), "ts": pd.Series(dtype=np.int64),
                             "backlog_min": pd.Series(dtype=np.int64)})
    names = np.unique(takes["queue"].to_numpy(object).astype(str))  # the consumed queues, sorted
    # routes (exchange, routing key) → queue to the consumed queues: the binds, and the default
    # exchange's (routing key = queue name)
    binds = pd.concat([p.binds for p in parts], ignore_index=True)
    binds = binds[binds["queue"].isin(names) & binds["exchange"].notna() & binds["routing_key"].notna()]
    routes = pd.concat([binds, pd.DataFrame({"queue": names, "exchange": "", "routing_key": names})],
                       ignore_index=True).drop_duplicates()
    routes["q"] = np.searchsorted(names, routes["queue"].to_numpy(object).astype(str))
    # each publish joined with every route of its (exchange, routing key)
    pubs = pd.concat([p.publishes for p in parts], ignore_index=True)
    hits = pubs.merge(routes[["exchange", "routing_key", "q"]], on=["exchange", "routing_key"])
    ev_q = np.r_[hits["q"].to_numpy(np.int64), np.searchsorted(names, takes["queue"].to_numpy(object).astype(str))]
    ev = {c: np.r_[hits[c].to_numpy(np.int64), takes[c].to_numpy(np.int64)] for c in ("packet", "rank", "ts")}
    delta = np.r_[np.ones(len(hits), np.int64), takes["delta"].to_numpy(np.int64)]
    # summed per (queue, frame), in (queue, frame) order
    by = np.lexsort((ev["rank"], ev["packet"], ev_q))
    q, packet, rank = ev_q[by], ev["packet"][by], ev["rank"][by]
    first = np.flatnonzero(np.r_[True, (q[1:] != q[:-1]) | (packet[1:] != packet[:-1]) | (rank[1:] != rank[:-1])])
    delta = np.add.reduceat(delta[by], first)
    q, packet, rank, ts = q[first], packet[first], rank[first], ev["ts"][by][first]
    run = group_cumsum(q, delta)
    # deliveries of messages older than the capture drive the sum negative; the true backlog is
    # at least (published − delivered) since the lowest point of the running sum. A running
    # minimum per queue in one pass: the queues are contiguous (sorted), and lowering each
    # queue's values by (queue × more than the range of run) makes every queue start below all
    # earlier ones, so the running minimum restarts at each queue
    lift = q * (int(run.max()) - int(run.min()) + 1)
    floor = np.minimum(np.minimum.accumulate(run - lift) + lift, 0)
    return pd.DataFrame({"queue": pd.Categorical.from_codes(q, names), "packet": packet, "rank": rank, "ts": ts,
                         "backlog_min": (run - floor).astype(np.int64)})


def frame_ranks(*keys: tuple[np.ndarray, np.ndarray]) -> list[np.ndarray]:
    """Frame keys (packet, rank) of several arrays as one int64 per frame, ordered as the
    frames are (for `amqpcap.derive.columns.asof`): packet × (largest rank + 1) + rank. Ranks
    count a packet's frames and packets a capture's, so this is far from overflowing."""
    ranks = [np.asarray(k[1], np.int64) for k in keys]
    width = max((int(r.max()) for r in ranks if len(r)), default=0) + 1
    return [np.asarray(k[0], np.int64) * width + r for k, r in zip(keys, ranks)]


@dataclass(frozen=True)
class Backlog:
    """:func:`queue_backlog`'s table with each row's queue as a code in the categories of
    cap.frames' queue column (the code the acks are matched to their queue's backlog on)."""

    table: pd.DataFrame
    queue_code: np.ndarray


def queue_backlog(cap: Capture) -> pd.DataFrame:
    """Lower bound of each consumed queue's backlog over time (see :func:`backlog_with_codes`)."""
    return backlog_with_codes(cap).table


@derivation(CAPTURE)
def backlog_with_codes(cap: Capture) -> Backlog:
    """Lower bound of the backlog over time of each consumed queue that `cap`'s frames name:
    `join_backlog` of the capture's queue events, or, for a partition, of every partition's
    (``cap.context["backlog"]``, joined by an analyzer's context round). Columns: queue
    (categorical), packet,
    rank (the frame's key, see the module doc; the frame may be another partition's), ts,
    backlog_min (messages, after that frame)."""
    b = cap.context.get("backlog")
    if b is None:
        b = join_backlog([queue_events(cap)])
    queue = b["queue"].array
    # the queues as codes into cap.frames' (another partition's queues: -1, no consumer or ack
    # here asks for them), mapped through the few categories, not the rows
    code = np.r_[cap.frames["queue"].cat.categories.get_indexer(queue.categories), -1][queue.codes]
    mine = code >= 0
    b = b[mine]
    table = pd.DataFrame({"queue": b["queue"].array, "packet": b["packet"].to_numpy(np.int64),
                          "rank": b["rank"].to_numpy(np.int64),
                          "ts": pd.to_datetime(b["ts"].to_numpy(np.int64), unit="ns", utc=True).array,
                          "backlog_min": b["backlog_min"].to_numpy(np.int64)})
    return Backlog(table, code[mine].astype(np.int64))
