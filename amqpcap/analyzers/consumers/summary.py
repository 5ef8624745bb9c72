"""One row per consumer: an acknowledging consumer's deliveries, prefetch, time at its limit,
latencies and its queue's backlog growth (the `consumers` table); a no-ack consumer's deliveries.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ...derive.columns import as_object, codes
from ...derive.consumers import CONSUMER, code_of
from ...derive.deliveries import tag_ranks
from ...derive.methods import KEY
from ...derive.rates import msgs_per_s_active


def _summary(st: pd.DataFrame, c: pd.DataFrame, acked: pd.DataFrame, gaps: pd.DataFrame,
             growth: pd.api.extensions.ExtensionArray) -> pd.DataFrame:
    """`consumer_summary` of a partition but its connections' labels (given in the finish) from
    its tables: state rows `st` (in the whole's order, by consumer), consumer rows `c` (in the
    whole's order), the acknowledging consumers' deliveries `acked` (``code``: the consumer's run
    in `st`, `_runs`), the ack gaps and each consumer's backlog `growth` (by row of `c`)."""
    cols = ["stream", "channel", "consumer_tag", "queue", "deliveries", "start_ts", "end_ts",
            "duration_s", "delivered_msgs_per_s", "prefetch", "prefetch_estimated", "channel_prefetch", "max_unacked", "mean_unacked",
            "share_at_limit", "utilisation", "share_idle", "mean_deficit", "acks", "acks_multiple",
            "messages_per_ack", "deliver_to_ack_p50_s", "ack_to_next_deliver_p50_s", "backlog_growth_msgs"]
    if len(st) == 0:
        return pd.DataFrame({k: pd.Series(dtype=object) for k in cols})
    st_code, keys = _runs(st)
    agg = _time_shares(st, st_code)
    per = _delivery_numbers(acked, len(keys))

    # the consumers with a state (inner join of c and agg), in c's order
    c_code = code_of(keys, c)
    keep = c_code >= 0
    out = as_object(c.loc[keep].drop(columns=["prefetch"]), "consumer_tag").reset_index(drop=True)
    oc = c_code[keep]
    agg = agg.reindex(oc)
    for col in agg:
        out[col] = agg[col].array
    for col in ("deliver_to_ack_p50_s", "acks", "acks_multiple", "messages_per_ack"):
        out[col] = per[col][oc]
    # the tag space's ack→next-deliver median, grouped on one int64 code of (stream, channel,
    # epoch) numbered over the gaps' and the consumers' keys together (then a lookup per consumer)
    ng = len(gaps)
    kc = codes(*(np.r_[gaps[k].to_numpy(np.int64), out[k].to_numpy(np.int64)] for k in KEY))
    a2d = pd.Series(gaps["gap_s"].to_numpy(float)).groupby(kc[:ng]).median()
    out["ack_to_next_deliver_p50_s"] = a2d.reindex(kc[ng:]).to_numpy(float)
    # per second active: between the consumer's first and last delivery (amqpcap.derive.rates)
    out["delivered_msgs_per_s"] = msgs_per_s_active(out["deliveries"], per["first_ns"][oc], per["last_ns"][oc])
    # growth of the consumer's queue backlog (lower bound) from its start to its end, in messages
    out["backlog_growth_msgs"] = growth[keep]
    out = out.sort_values(["stream", "channel", "start_ts"], kind="stable").reset_index(drop=True)
    return out[cols]


def _time_shares(st: pd.DataFrame, st_code: np.ndarray) -> pd.DataFrame:
    """Per consumer code (the state rows' `_runs`): its life (``duration_s``, the state rows'
    durations' sum), prefetch and most unacked, and the time-weighted means and shares of its
    state: unacked, at its limit, idle, deficit."""
    dur = st["duration_s"].to_numpy(float)
    w = st.assign(_d=dur, _u=dur * st["unacked"].to_numpy(float),
                  _lim=dur * st["at_limit"].to_numpy(bool), _idle=dur * (st["unacked"].to_numpy() == 0),
                  _def=dur * st["deficit"].astype(float).fillna(0).to_numpy(),
                  _has_def=dur * st["deficit"].notna().to_numpy())
    # grouped on the int64 consumer code (one cheap factorization per GroupBy object, where the
    # four key columns with text cost one per call); float sums stay pandas' (compensated) sums,
    # over the whole partition's rows in its order however many slices told them
    agg = w.groupby(st_code, sort=False).agg(
        duration_s=("_d", "sum"), U=("_u", "sum"), L=("_lim", "sum"), I=("_idle", "sum"), DF=("_def", "sum"),
        HD=("_has_def", "sum"), max_unacked=("unacked", "max"), prefetch=("prefetch", "last"),
        prefetch_estimated=("prefetch_estimated", "last"), channel_prefetch=("channel_prefetch", "last"))
    T = agg["duration_s"].where(agg["duration_s"] > 0)
    agg["mean_unacked"] = agg["U"] / T
    agg["share_at_limit"] = agg["L"] / T
    # wire-level utilisation: the share of the consumer's life in which the broker was allowed
    # to send it another message (deficit > 0, or no limit): RabbitMQ's "consumer utilisation"
    # seen from the wire
    agg["utilisation"] = 1 - agg["share_at_limit"]
    agg["share_idle"] = agg["I"] / T
    agg["mean_deficit"] = agg["DF"] / agg["HD"].where(agg["HD"] > 0)
    return agg


def _delivery_numbers(acked: pd.DataFrame, ncons: int) -> dict[str, np.ndarray]:
    """Per consumer code (row i: code i, of `ncons`) of the acknowledged deliveries `acked`: the
    deliver→ack median, the ack frames (distinct settling frames), those with multiple set,
    messages per ack frame, and its first and last delivery's ts (ns; the int64 maximum and
    minimum when none: `msgs_per_s_active` reads both as none)."""
    code = acked["code"].to_numpy(np.int64)
    ts = pd.to_datetime(acked["ts"], utc=True).array.asi8 if len(acked) else np.zeros(0, np.int64)
    mine = code >= 0
    first, last = np.full(ncons, np.iinfo(np.int64).max), np.full(ncons, np.iinfo(np.int64).min)
    np.minimum.at(first, code[mine], ts[mine])
    np.maximum.at(last, code[mine], ts[mine])
    lat = pd.Series(acked["latency_s"].to_numpy(float)).groupby(code).median().reindex(range(ncons))
    s_order = acked["settle_order"].to_numpy(np.int64)
    settled = s_order >= 0
    s_code, s_order = code[settled], s_order[settled]
    frame = np.unique(s_code * (int(s_order.max(initial=0)) + 1) + s_order, return_index=True)[1]
    acks = np.bincount(s_code[frame], minlength=ncons).astype(np.int64)
    acks_mult = np.bincount(s_code[frame], weights=acked["settle_multiple"].to_numpy(bool)[settled][frame],
                            minlength=ncons).astype(np.int64)
    mpa = np.where(acks > 0, np.bincount(s_code, minlength=ncons) / np.maximum(acks, 1), np.nan)
    return {"deliver_to_ack_p50_s": lat.to_numpy(), "acks": acks, "acks_multiple": acks_mult, "messages_per_ack": mpa,
            "first_ns": first, "last_ns": last}


def _runs(st: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    """Each state row's consumer as a code, and the consumers (CONSUMER columns; row i: code i):
    the rows are by consumer, so that a consumer is a run of rows and its code the run's number."""
    first = np.zeros(len(st), bool)
    first[:1] = True
    for k in CONSUMER:
        v = st[k].to_numpy(object if k == "consumer_tag" else np.int64)
        first[1:] |= v[1:] != v[:-1]
    keys = as_object(st.loc[first, CONSUMER], "consumer_tag").reset_index(drop=True)
    return np.cumsum(first) - 1, keys


def _no_ack_rows(d: pd.DataFrame) -> list[dict[str, Any]]:
    """summary.json's row of each no-ack consumer: deliveries counted per (stream, channel, tag)
    code (sorted as the keys) by bincount; its connection named in the merge."""
    na = np.flatnonzero(d["no_ack"].to_numpy(bool))
    if not len(na):
        return []
    stream, channel = d["stream"].to_numpy(np.int64)[na], d["channel"].to_numpy(np.int64)[na]
    code = codes(stream, channel, tag_ranks(None, d.iloc[na]))
    first = np.unique(code, return_index=True)[1]
    tags = d["consumer_tag"].array.take(na[first])
    return [{"stream": st_, "channel": ch_, "consumer_tag": tag, "no_ack": True, "deliveries": n}
            for st_, ch_, tag, n in zip(stream[first].tolist(), channel[first].tolist(), tags,
                                        np.bincount(code).tolist())]
