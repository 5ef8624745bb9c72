"""Per client ack, nack or reject: the deliveries it settled, the next delivery on its channel, and
where it reads its queue's backlog (`ack_rows`): what the refills (`amqpcap.derive.refills`) are
measured from, and what a slice of time replays of an ack still waiting for its next delivery
(`amqpcap.derive.replay`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..io.load import Capture
from .backlog import frame_keys, text_codes
from .cache import CONNECTION, derivation
from .columns import asof, group_cumsum
from .deliveries import SETTLE_METHODS, deliveries_with_codes
from .methods import methods, pick, select
from .seeds import seeds_of


@dataclass(frozen=True)
class AckRows:
    """`ack_gaps`' rows before the backlog is read at them, and where to read it."""

    #: ack_gaps' columns but backlog_min and backlog_min_gap
    table: pd.DataFrame
    #: the points where the acks read their queue's backlog (`BacklogQuestions.acks`)
    questions: pd.DataFrame


@derivation(CONNECTION)
def ack_rows(cap: Capture) -> AckRows:
    """One row per client ack/nack/reject with the next delivery on its channel (see
    `ack_gaps`), and the backlog's questions at them: a partition's own."""
    m = methods(cap)
    s = pick(cap, m, select(m, SETTLE_METHODS, "c2s"), ["stream", "channel", "epoch", "space", "packet", "ts",
                                                               "order", "method", "multiple"])
    s["method"] = s["method"].astype(object)  # a table column: text, as documented
    s["multiple"] = s["multiple"].fillna(False).astype(bool)
    s_order = s["order"].to_numpy(np.int64)  # in frame order (as m)
    dc = deliveries_with_codes(cap)
    d = dc.table
    d_order = d["order"].to_numpy(np.int64)

    # per settling frame: the deliveries it settled, and the queue of the first of them (in
    # delivery order) that has one; found by the frame's position among the settling frames
    settled_by = d["settle_order"].to_numpy(np.int64, na_value=-1)
    has = settled_by >= 0
    srow = np.where(has, np.searchsorted(s_order, settled_by), -1)
    s["settled"] = np.bincount(srow[has], minlength=len(s)).astype(np.int64)
    qc = dc.queue_code
    with_q = np.flatnonzero(has & (qc >= 0))
    first_rows, first = np.unique(srow[with_q], return_index=True)
    q_row = np.full(len(s), -1, dtype=np.int64)  # the delivery giving each frame's queue
    q_row[first_rows] = with_q[first]
    s["queue"] = d["queue"].array.take(q_row, allow_fill=True)

    # the next delivery on the same tag space (space codes of the deliveries by their frames'
    # rows in m, which is in frame order)
    d_space = m["space"].to_numpy()[np.searchsorted(m["order"].to_numpy(), d_order)]
    nxt = asof(s["space"].to_numpy(), s_order, d_space, d_order, direction="forward", allow_exact_matches=False)
    s["next_deliver_packet"] = pd.array(d["packet"].to_numpy(np.int64), dtype="Int64").take(nxt, allow_fill=True)
    s["next_deliver_ts"] = d["ts"].array.take(nxt, allow_fill=True)
    s["gap_s"] = (s["next_deliver_ts"] - s["ts"]).dt.total_seconds()
    s["unacked_after"] = _unacked_after(d, d_space, s["space"].to_numpy(), s_order)
    _as_told_before(cap, s)

    # the queue's backlog is read right after the ack's frame and until the next delivery's
    # (frames named by key: the backlog's rows are of every partition's frames)
    s_packet, s_rank = frame_keys(cap, s_order)
    # (no delivery at all: acks of deliveries outside the capture, or of an earlier slice's)
    n_packet, n_rank = frame_keys(cap, np.where(nxt >= 0, d_order[np.maximum(nxt, 0)] if len(d_order) else 0, 0))
    questions = pd.DataFrame({"queue": text_codes(s["queue"]), "packet": s_packet, "rank": s_rank,
                              "next_packet": np.where(nxt >= 0, n_packet, -1), "next_rank": np.where(nxt >= 0, n_rank, 0)})
    return AckRows(s, questions)


def _as_told_before(cap: Capture, s: pd.DataFrame) -> None:
    """In a slice of a partition's time, a replayed ack (one that waited for the next delivery)
    keeps what the slice before said of it: the deliveries it settled are not replayed
    (`amqpcap.derive.replay`). Only its next delivery is this slice's to find."""
    seeds = seeds_of(cap)
    if seeds is None or not seeds.replayed:
        return
    order = s["order"].to_numpy(np.int64)
    again = np.flatnonzero(order < seeds.replayed)
    again = again[seeds.replay.acks["settled"].to_numpy(np.int64)[order[again]] >= 0]  # (-1: not such an ack)
    told = seeds.replay.acks.iloc[order[again]]
    s.iloc[again, s.columns.get_loc("settled")] = told["settled"].to_numpy(np.int64)
    s.iloc[again, s.columns.get_loc("unacked_after")] = told["unacked_after"].to_numpy(np.int64)
    queue = s["queue"].astype(object).to_numpy(copy=True)
    queue[again] = told["queue"].to_numpy(object)
    s["queue"] = pd.array(queue, dtype=s["queue"].dtype)


def _unacked_after(d: pd.DataFrame, d_space: np.ndarray, space: np.ndarray, order: np.ndarray) -> np.ndarray:
    """For each settling frame (tag space ``space``, frame ``order``): the deliveries of its tag
    space (acknowledging ones: no-ack deliveries are never settled) still unsettled right after
    it. 0 means the client had nothing left to work on: it waited for the broker's next delivery.
    A running count of +1 per delivery and −1 per settled delivery, by tag space and frame order,
    read at the last event up to the frame (its own settlements included)."""
    keep = ~d["no_ack"].to_numpy(bool)
    settled = keep & d["settle_order"].notna().to_numpy()
    ev_space = np.r_[d_space[keep], d_space[settled]]
    ev_order = np.r_[d["order"].to_numpy(np.int64)[keep], d["settle_order"].to_numpy(np.int64, na_value=0)[settled]]
    delta = np.r_[np.ones(int(keep.sum()), np.int64), -np.ones(int(settled.sum()), np.int64)]
    by = np.lexsort((ev_order, ev_space))
    ev_space, ev_order = ev_space[by], ev_order[by]
    run = group_cumsum(ev_space, delta[by])  # (in tag space order: no sort)
    hit = asof(space, order, ev_space, ev_order)  # (stable: the last event of the frame's order)
    out = np.zeros(len(order), dtype=np.int64)
    out[hit >= 0] = run[hit[hit >= 0]]
    return out
