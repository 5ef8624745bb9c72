"""Which consumers each finding is about, and how severe: consumer-bound (at its limit, its own
processing the slow part), prefetch-one (one message and one ack per round trip).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...derive.methods import chan_key
from ...derive.rates import msgs_per_span_s
from .constants import (
    BACKLOG_GROWTH_MSGS, BACKLOG_GROWTH_RATIO, CONSUMER_BOUND_SHARE, CONSUMER_DOMINANCE, MIN_DELIVERIES,
    ONE_ACK_PER_MESSAGE_SHARE, PREFETCH_ONE_MIN_RATE_PER_S, PREFETCH_ONE_WARNING_SHARE_AT_LIMIT)


def consumer_bound_severity(growth, growth_ratio, estimated) -> np.ndarray:
    """consumer-bound's severity per consumer as a rank (SEVERITIES): warning; critical when its
    queue grew by at least BACKLOG_GROWTH_MSGS messages and BACKLOG_GROWTH_RATIO times the rate
    its consumers took messages (unknown growth counts as none); info when the prefetch is an
    estimate. Non-decreasing in ``growth`` and ``growth_ratio`` (tests/test_grouping.py)."""
    growth = np.nan_to_num(np.asarray(growth, dtype=float), nan=-np.inf)
    ratio = np.nan_to_num(np.asarray(growth_ratio, dtype=float), nan=-np.inf)
    critical = (growth >= BACKLOG_GROWTH_MSGS) & (ratio >= BACKLOG_GROWTH_RATIO)
    return np.where(np.asarray(estimated, dtype=bool), 0, np.where(critical, 2, 1))


def _growth_ratio(s: pd.DataFrame) -> np.ndarray:
    """Per consumer: its queue's backlog growth per second of its life over the summed delivery
    rates of all the queue's consumers, each per second of its life too (`msgs_per_span_s`: the
    growth and what was taken compared over one span, not `delivered_msgs_per_s`, which leaves
    idle time out; a consumer without a known queue: its own rate)."""
    life = (s["end_ts"] - s["start_ts"]).dt.total_seconds().to_numpy(float)
    rate = pd.Series(msgs_per_span_s(s["deliveries"].to_numpy(float), life), index=s.index).fillna(0)
    queue = s["queue"].astype(object)
    taken = rate.groupby(queue.fillna("")).transform("sum").where(queue.notna(), rate).to_numpy(float)
    growth = s["backlog_growth_msgs"].astype("Float64").to_numpy(float, na_value=np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((life > 0) & (taken > 0), growth / life / taken, np.nan)


def prefetch_one_severity(share) -> np.ndarray:
    """prefetch-one's severity per consumer as a rank (SEVERITIES): warning when at the limit
    ≥ PREFETCH_ONE_WARNING_SHARE_AT_LIMIT of the time (prefetch 1 then limits its throughput),
    else info. Non-decreasing in ``share``."""
    return np.where(np.asarray(share, dtype=float) >= PREFETCH_ONE_WARNING_SHARE_AT_LIMIT, 1, 0)


def _flags(s: pd.DataFrame, slow: np.ndarray) -> pd.DataFrame:
    """Per consumer (the rows of consumer_summary), on whole columns: whether it is a subject of
    consumer-bound (``bound``) or prefetch-one (``one``), with its severity rank and impact there.

    A consumer is the subject of one consumer finding at most, so that one cause is told once:
    - consumer-bound wins over prefetch-one. The consumer's own work (deliver→ack) is then at
      least twice the refill, so the round trip prefetch 1 adds is the smaller part of each cycle;
      consumer-bound's advice says how much a larger prefetch would gain (``one_ack`` marks the
      consumers at prefetch 1 with one ack per message).
    - prefetch-one gives way to latency's broker-slow-refill on the same channel (`slow`: the
      channels of `slow_refills`, as `chan_key`): the broker's refill is then the slow part (its
      advice says a larger prefetch hides it)."""
    share = s["share_at_limit"].astype(float).fillna(0).to_numpy()
    dta = s["deliver_to_ack_p50_s"].astype(float).to_numpy()
    a2d = s["ack_to_next_deliver_p50_s"].astype(float).to_numpy()
    mpa = s["messages_per_ack"].astype(float).to_numpy()
    rate = s["delivered_msgs_per_s"].astype(float).fillna(0).to_numpy()
    growth = s["backlog_growth_msgs"].astype("Float64").to_numpy(float, na_value=np.nan)
    ratio = _growth_ratio(s)
    estimated = s["prefetch_estimated"].astype(bool).to_numpy()
    prefetch = s["prefetch"].astype("Int64").to_numpy(np.int64, na_value=0)
    acks = s["acks"].to_numpy(np.int64)
    single_share = np.where(acks > 0, 1 - s["acks_multiple"].to_numpy(np.int64) / np.maximum(acks, 1), 0)
    enough = ((s["deliveries"].to_numpy(np.int64) >= MIN_DELIVERIES)
              & (s["duration_s"].astype(float).fillna(0) > 0).to_numpy())
    # prefetch 1 as the client asked for it in basic.qos: an estimate of 1 (capture started after
    # the qos) only says the consumer acked each message before the next came (midstream.pcap:
    # PerfTest -q 20, never more than 1 unacked), not that the broker was held back
    one_ack = (prefetch == 1) & ~estimated & (acks > 0) & (single_share >= ONE_ACK_PER_MESSAGE_SHARE) & (mpa < 1.5)
    # Who holds deliveries back at the limit? At prefetch > 1 the consumer still has deliveries in
    # hand after each ack, so a slow refill would leave its credit unused (deficit > 0): being at
    # the limit most of the time is itself the proof that it acks slower than the broker refills.
    # At prefetch 1 it is at the limit exactly while it works on its one message: its own time
    # (deliver→ack) must be the larger part of each deliver→ack→deliver cycle
    dominant = (prefetch > 1) | (~np.isnan(dta) & (np.isnan(a2d) | (dta >= CONSUMER_DOMINANCE * a2d)))
    bound = enough & (share >= CONSUMER_BOUND_SHARE) & dominant & (prefetch > 0)
    refill = np.isin(chan_key(s), slow)
    one = enough & one_ack & (rate >= PREFETCH_ONE_MIN_RATE_PER_S) & ~bound & ~refill
    return pd.DataFrame({"bound": bound, "one": one, "one_ack": one_ack,
                         "bound_rank": consumer_bound_severity(growth, ratio, estimated),
                         "bound_impact": share, "growth_ratio": ratio,
                         "one_rank": prefetch_one_severity(share),
                         "one_impact": np.minimum(1.0, share + rate / 10_000)}, index=s.index)
