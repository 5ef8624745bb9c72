"""How many messages were known to wait in each consumed queue, over time: publishes routed to
the queue against deliveries from it. A queue is shared by connections (one publishes, another
consumes), so this relates connections to each other: scope CAPTURE.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..capture import Capture
from .cache import CAPTURE, derivation
from .columns import group_cumsum
from .deliveries import deliveries_with_codes
from .methods import methods, pick, select

def _codes_in(cats: pd.Index, col: pd.Series, missing_as_empty: bool) -> np.ndarray:
    """A categorical column's values as codes into ``cats`` (the categories of the same column of
    cap.frames). The empty text has a code even when no frame has it (len(cats)); with
    ``missing_as_empty`` a missing value counts as the empty text, otherwise it stays -1."""
    empty = cats.get_loc("") if "" in cats else len(cats)
    c = col.cat.codes.to_numpy().astype(np.int64) if len(col) else np.zeros(0, np.int64)
    if missing_as_empty:
        c[c < 0] = empty
    return c


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
    """Lower bound of each consumed queue's backlog over time, from what the capture shows.

    A publish counts for queue Q when it goes to the default exchange with routing key Q, or to
    an (exchange, routing key) that a queue.bind in the capture bound Q with (exact key: direct
    exchanges; wildcards and fanout are not interpreted). Deliveries from Q subtract, nack/reject
    with requeue add back. Messages already in Q when the capture started are unknown, so the
    running sum is a lower bound of the backlog (never below 0). Columns: queue, order, ts,
    backlog_min (messages, after that frame).

    Queues, exchanges and routing keys are matched as codes into the categories of cap.frames'
    columns (a missing publish exchange or routing key counts as "", a missing one in a bind
    matches nothing); the queues' text is made once, for the table."""
    m = methods(cap)
    dc = deliveries_with_codes(cap)
    d, qc = dc.table, dc.queue_code
    f = cap.frames
    empty = pd.DataFrame({"queue": pd.Series(dtype=object), "order": pd.Series(dtype=np.int64),
                          "ts": pd.Series(dtype=f["ts"].dtype), "backlog_min": pd.Series(dtype=np.int64)})
    has = qc >= 0
    if not has.any():
        return Backlog(empty, np.zeros(0, dtype=np.int64))
    qcats, ecats, rcats = (f[c].cat.categories for c in ("queue", "exchange", "routing_key"))
    uq = np.unique(qc[has])  # the consumed queues
    # routes (exchange, routing key, queue) to the consumed queues: the binds, and the default
    # exchange's (routing key = queue name; a name that is no frame's routing key gets no publish)
    binds = pick(cap, m, select(m, "queue.bind"), ["queue", "exchange", "routing_key"])
    b_q = _codes_in(qcats, binds["queue"], False)
    b_e, b_r = _codes_in(ecats, binds["exchange"], False), _codes_in(rcats, binds["routing_key"], False)
    ok = np.isin(b_q, uq) & (b_e >= 0) & (b_r >= 0)
    d_r = rcats.get_indexer(qcats[uq])
    d_r[(d_r < 0) & (qcats[uq] == "")] = len(rcats)  # (the empty routing key's own code, see _codes_in)
    r_e = np.r_[b_e[ok], np.full(len(uq), ecats.get_loc("") if "" in ecats else len(ecats))]
    r_r, r_q = np.r_[b_r[ok], d_r], np.r_[b_q[ok], uq]
    keep = r_r >= 0
    nr = len(rcats) + 1
    route = np.unique(np.c_[r_e[keep] * nr + r_r[keep], r_q[keep]], axis=0)  # sorted by (exchange, key), deduplicated
    # each publish joined with every route of its (exchange, routing key)
    pub = pick(cap, m, select(m, "basic.publish", "c2s"), ["order", "exchange", "routing_key"])
    p_key = _codes_in(ecats, pub["exchange"], True) * nr + _codes_in(rcats, pub["routing_key"], True)
    lo = np.searchsorted(route[:, 0], p_key, side="left")
    n_hit = np.searchsorted(route[:, 0], p_key, side="right") - lo
    hit_start = np.repeat(lo, n_hit)
    within = np.arange(len(hit_start)) - np.repeat(np.cumsum(n_hit) - n_hit, n_hit)
    p_q, p_order = route[hit_start + within, 1], np.repeat(pub["order"].to_numpy(np.int64), n_hit)
    # events (queue code, frame order, delta): publishes +1, deliveries −1, requeues +1
    rq = has & d["settle_requeue"].fillna(False).to_numpy(bool)
    ev_q = np.r_[p_q, qc[has], qc[rq]]
    ev_order = np.r_[p_order, d["order"].to_numpy(np.int64)[has], d["settle_order"].to_numpy(np.int64, na_value=0)[rq]]
    ev_delta = np.r_[np.ones(len(p_q), np.int64), -np.ones(int(has.sum()), np.int64), np.ones(int(rq.sum()), np.int64)]
    # queues numbered in the sorted order of their names (the table's order), summed per
    # (queue, frame); the frame's ts is cap.frames' (every event of a frame has that ts)
    by_name = uq[np.argsort(np.asarray(qcats[uq], dtype=object))]  # queue codes, by name
    rank = np.full(len(qcats) + 1, -1, dtype=np.int64)
    rank[by_name] = np.arange(len(uq))
    span = int(ev_order.max()) + 1
    key, inv = np.unique(rank[ev_q] * span + ev_order, return_inverse=True)
    delta = np.bincount(inv.ravel(), weights=ev_delta, minlength=len(key)).astype(np.int64)
    q, order = key // span, key % span
    run = group_cumsum(q, delta)
    # deliveries of messages older than the capture drive the sum negative; the true backlog is
    # at least (published − delivered) since the lowest point of the running sum. A running
    # minimum per queue in one pass: the queues are contiguous (sorted), and lowering each
    # queue's values by (queue × more than the range of run) makes every queue start below all
    # earlier ones, so the running minimum restarts at each queue
    lift = q * (int(run.max()) - int(run.min()) + 1)
    floor = np.minimum(np.minimum.accumulate(run - lift) + lift, 0)
    out = pd.DataFrame({"queue": pd.Series(np.asarray(qcats, dtype=object)[by_name[q]], dtype=object),
                        "order": order, "ts": f["ts"].array.take(order),
                        "backlog_min": (run - floor).astype(np.int64)})
    return Backlog(out, by_name[q])
