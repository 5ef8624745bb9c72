"""How many messages were known to wait in each consumed queue, over time: publishes routed to
the queue against deliveries from it. A queue is shared by connections (one publishes, another
consumes), so this relates connections to each other: scope CAPTURE.

It is computed in two steps, so that a capture split into partitions of whole connections
(`amqpcap.partition`) gives the whole capture's backlog:

- `queue_events` (scope CONNECTION): what a partition holds of every queue's backlog: its
  `queue.bind`s, its publishes and its deliveries and requeues, each at its frame's key;
- `join_backlog`: the events of every partition as one backlog per consumed queue;
- `answer_backlog`: that backlog read at the points every partition asks about (its acks, its
  consumers' start and end), all partitions' points in one search, so that no partition needs
  the whole backlog (one busy queue shared by every partition would otherwise be searched once
  per partition).

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
from .cache import CONNECTION, derivation
from .columns import asof, group_cumsum
from .deliveries import deliveries_with_codes
from .methods import methods, pick, select


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


def frame_keys(cap: Capture, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The keys (packet, rank) of the frames at positions `order` of cap.frames (sorted by packet)."""
    packet = cap.frames["packet"].to_numpy(np.int64)
    p = packet[order]
    return p, order - np.searchsorted(packet, p, side="left")


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
                            "delta": np.r_[-np.ones(int(has.sum()), np.int64), np.ones(int(rq.sum()), np.int64)]}))


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
    # the partitions' text columns are categoricals of their own categories: joined as codes
    # into their categories together (a queue name per message of a 100M-packet capture, made
    # text objects, took gigabytes here)
    take_code, take_names = _joined_codes([p.takes["queue"] for p in parts])
    if not len(take_code):
        return pd.DataFrame({"queue": pd.Categorical([]), "packet": pd.Series(dtype=np.int64),
                             "rank": pd.Series(dtype=np.int64), "ts": pd.Series(dtype=np.int64),
                             "backlog_min": pd.Series(dtype=np.int64)})
    used = np.unique(take_code[take_code >= 0])
    names = np.unique(take_names[used].astype(str))  # the consumed queues, sorted
    to_q = np.full(len(take_names), -1, np.int64)
    to_q[used] = np.searchsorted(names, take_names[used].astype(str))
    # routes (exchange, routing key) → queue to the consumed queues: the binds, and the default
    # exchange's (routing key = queue name)
    binds = _as_text(pd.concat([p.binds for p in parts], ignore_index=True))
    binds = binds[binds["queue"].isin(names) & binds["exchange"].notna() & binds["routing_key"].notna()]
    routes = pd.concat([binds, pd.DataFrame({"queue": names, "exchange": "", "routing_key": names})],
                       ignore_index=True).drop_duplicates()
    routes["q"] = np.searchsorted(names, routes["queue"].to_numpy(object).astype(str))
    # each publish joined with every route of its (exchange, routing key), on the pair's codes
    ex_code, ex_names = _joined_codes([p.publishes["exchange"] for p in parts])
    rk_code, rk_names = _joined_codes([p.publishes["routing_key"] for p in parts])
    r_ex = pd.Index(ex_names).get_indexer(routes["exchange"].to_numpy(object))
    r_rk = pd.Index(rk_names).get_indexer(routes["routing_key"].to_numpy(object))
    seen = (r_ex >= 0) & (r_rk >= 0)  # (a route no publish took)
    width = len(rk_names) + 1
    hits = pd.DataFrame({"pair": ex_code * width + rk_code, "row": np.arange(len(ex_code))}).merge(
        pd.DataFrame({"pair": r_ex[seen] * width + r_rk[seen], "q": routes["q"].to_numpy(np.int64)[seen]}), on="pair")
    hit_row = hits["row"].to_numpy(np.int64)
    ev_q = np.r_[hits["q"].to_numpy(np.int64), to_q[take_code]]
    ev = {c: np.r_[np.concatenate([p.publishes[c].to_numpy(np.int64) for p in parts])[hit_row],
                   np.concatenate([p.takes[c].to_numpy(np.int64) for p in parts])] for c in ("packet", "rank", "ts")}
    delta = np.r_[np.ones(len(hits), np.int64), np.concatenate([p.takes["delta"].to_numpy(np.int64) for p in parts])]
    del hits, hit_row
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


def _joined_codes(columns: list) -> tuple[np.ndarray, np.ndarray]:
    """Categorical columns of several partitions as one: each row's code (-1: missing) into
    the returned categories (text objects), those of every partition; no row made text."""
    names = pd.Index(pd.unique(np.concatenate([np.asarray(c.cat.categories, dtype=object) for c in columns]
                                              or [np.zeros(0, object)])))
    codes = [_codes_into(names, c) for c in columns]
    return (np.concatenate(codes) if codes else np.zeros(0, np.int64)), np.asarray(names, dtype=object)


def _codes_into(names: pd.Index, col: pd.Series) -> np.ndarray:
    """A categorical column's rows as codes into `names` (-1: missing, or not among them): its
    categories are looked up, not its rows."""
    to_names = names.get_indexer(np.asarray(col.cat.categories, dtype=object)).astype(np.int64)
    own = col.cat.codes.to_numpy(np.int64)
    return np.where(own >= 0, to_names[np.maximum(own, 0)] if len(to_names) else -1, -1)


def _as_text(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with its categorical columns (`text_codes`) as text objects, None where missing."""
    cat = [c for c in df.columns if isinstance(df[c].dtype, pd.CategoricalDtype)]
    return df.assign(**{c: df[c].astype(object).where(df[c].notna(), None) for c in cat})


def frame_ranks(*keys: tuple[np.ndarray, np.ndarray]) -> list[np.ndarray]:
    """Frame keys (packet, rank) of several arrays as one int64 per frame, ordered as the
    frames are (for `amqpcap.derive.columns.asof`): packet × (largest rank + 1) + rank. Ranks
    count a packet's frames and packets a capture's, so this is far from overflowing."""
    ranks = [np.asarray(k[1], np.int64) for k in keys]
    width = max((int(r.max()) for r in ranks if len(r)), default=0) + 1
    return [np.asarray(k[0], np.int64) * width + r for k, r in zip(keys, ranks)]


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


def answer_backlog(parts: list[BacklogQuestions]) -> list[BacklogAnswers]:
    """Every partition's questions answered from the backlog their events make together
    (`join_backlog`), in one pass over it: the partitions' points are searched together, so the
    backlog is sorted once, however many partitions read a busy shared queue."""
    b = join_backlog([p.events for p in parts])
    names = b["queue"].array.categories
    b_q = b["queue"].array.codes.astype(np.int64)
    b_min = b["backlog_min"].to_numpy(np.int64)
    # the partitions' rows joined column by column, each queue as a code into the backlog's
    # (a row per ack: no text made)
    acks = {c: np.concatenate([p.acks[c].to_numpy(np.int64) for p in parts])
            for c in ("packet", "rank", "next_packet", "next_rank")}
    acks["q"] = np.concatenate([_queue_codes(names, p.acks["queue"]) for p in parts])
    cons = pd.concat([p.consumers for p in parts], ignore_index=True)
    at, gap = _at_acks(b, b_q, b_min, acks)
    growth = _growth(b, names, b_q, b_min, cons)
    out, i, j = [], 0, 0
    for p in parts:
        n, m = len(p.acks), len(p.consumers)
        out.append(BacklogAnswers(at[i:i + n], gap[i:i + n], growth[j:j + m]))
        i, j = i + n, j + m
    return out


def _queue_codes(names: pd.Index, queue: pd.Series) -> np.ndarray:
    """Each row's queue as a code into the backlog's queues (-1: unknown, or not consumed):
    a categorical's categories are looked up, not its rows."""
    if isinstance(queue.dtype, pd.CategoricalDtype):
        return _codes_into(names, queue)
    return names.get_indexer(queue.astype(object).where(queue.notna(), None)).astype(np.int64)


def _at_acks(b, b_q, b_min, acks: dict[str, np.ndarray]) -> tuple:
    """The backlog right after each ack (the last row of its queue at or before the ack's frame)
    and its least value until the next delivery (up to the last row before that frame). `acks`:
    the columns of `BacklogQuestions.acks`, the queue as a code into the backlog's (``q``)."""
    q = acks["q"]
    s_key, nxt_key, b_key = frame_ranks((acks["packet"], acks["rank"]), (acks["next_packet"], acks["next_rank"]),
                                        (b["packet"].to_numpy(np.int64), b["rank"].to_numpy(np.int64)))
    hit = asof(q, s_key, b_q, b_key)
    at = pd.array(b_min, dtype="Int64").take(hit, allow_fill=True) if len(b) else pd.array([pd.NA] * len(q), "Int64")
    has_next = acks["next_packet"] >= 0
    last = np.where(has_next, asof(q, nxt_key, b_q, b_key, allow_exact_matches=False), -1)
    return at, _range_min(b_min, b_q, b_key, hit, last)


def _growth(b, names, b_q, b_min, cons) -> pd.api.extensions.ExtensionArray:
    """merge_asof by queue on ts of each consumer's start and end against the backlog's rows,
    sorted on ts stably: among a queue's rows of equal ts, the last frame's is taken."""
    res = pd.array(np.full(len(cons), pd.NA), dtype="Int64")
    ok = cons["queue"].notna().to_numpy()
    if len(b) == 0 or not ok.any():
        return res
    b_ts = b["ts"].to_numpy(np.int64)
    by_ts = np.argsort(b_ts, kind="stable")
    q = _queue_codes(names, cons["queue"])[ok]
    n = len(q)
    # starts and ends in one search (the backlog rows sorted once)
    hit = asof(np.r_[q, q], np.r_[cons["start_ts"].to_numpy(np.int64)[ok], cons["end_ts"].to_numpy(np.int64)[ok]],
               b_q[by_ts], b_ts[by_ts])
    val = np.where(hit >= 0, b_min[by_ts][np.maximum(hit, 0)], 0)
    res[ok] = val[n:] - val[:n]
    return res


def _range_min(values: np.ndarray, key: np.ndarray, order: np.ndarray, first: np.ndarray, last: np.ndarray):
    """Per query, the least of ``values`` over the rows ``first``..``last`` (row positions, -1:
    none) of one key, those rows taken in (key, order) order; <NA> where either end is missing.
    One `minimum.reduceat` over the rows sorted by (key, order), no loop."""
    out = pd.array(np.zeros(len(first), np.int64), dtype="Int64")
    ok = (first >= 0) & (last >= 0)
    out[~ok] = pd.NA
    if not ok.any():
        return out
    by = np.lexsort((order, key))
    rank = np.empty_like(by)
    rank[by] = np.arange(len(by))
    lo, hi = rank[first[ok]], rank[last[ok]]
    hi = np.maximum(hi, lo)  # (the same key: last comes at or after first)
    bounds = np.empty(2 * len(lo), np.int64)
    bounds[0::2], bounds[1::2] = lo, hi + 1
    sorted_values = np.append(values[by], 0)  # a sentinel: hi + 1 may be one past the end
    out[ok] = np.minimum.reduceat(sorted_values, bounds)[0::2]
    return out
