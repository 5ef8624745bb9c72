"""Per channel, the rows the findings are derived from: slow refills (ack→next-deliver while messages
wait) and bouncing messages (redeliveries after a requeueing nack/reject), with each one's severity.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...derive.methods import chan_key
from ...derive.refills import waiting
from .constants import REDELIVERY_CRITICAL_SHARE, REDELIVERY_MIN, REDELIVERY_SHARE, REFILL_CRITICAL_S


def refill_severity(p50) -> np.ndarray:
    """broker-slow-refill's severity per channel as a rank (SEVERITIES): warning, critical from
    a median ack→next-deliver of REFILL_CRITICAL_S. Non-decreasing in ``p50``."""
    return np.where(np.asarray(p50, dtype=float) >= REFILL_CRITICAL_S, 2, 1)


def redelivery_severity(share) -> np.ndarray:
    """redelivery-loop's severity per channel as a rank (SEVERITIES): warning, critical from
    REDELIVERY_CRITICAL_SHARE of its deliveries bouncing. Non-decreasing in ``share``."""
    return np.where(np.asarray(share, dtype=float) >= REDELIVERY_CRITICAL_SHARE, 2, 1)


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
