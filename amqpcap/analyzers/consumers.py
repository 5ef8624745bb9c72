"""consumers: unacked messages, prefetch and the broker's unused credit (deficit) per consumer.

A consumer is (stream, channel, consumer tag) on one opening of the channel. Its unacked count
rises with each basic.deliver and falls when the client's ack/nack/reject settles a delivery.
RabbitMQ sends a consumer a message only while its unacked count is below its prefetch
(basic.qos prefetch_count; global=false: per consumer, applying to consumers started after the
qos on that channel; global=true: shared by all consumers of the channel).
``deficit = prefetch − unacked`` is the credit the broker holds for the consumer and has not used.
The credit series itself is derived in ``amqpcap.derive.consumers`` (the stalls analyzer reads it
too); this module summarises it per consumer and tells the findings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..analysis import SEVERITY_RANK, AnalyzerResult, Finding, Plot, analyzer
from ..capture import Capture
from ..derive.backlog import BacklogAnswers
from ..derive.backlog_join import BacklogPieces, answers_of
from ..derive.columns import as_object, codes
from ..derive.consumers import (CONSUMER, acked_deliveries, code_of, consumer_rows, consumer_state, with_final_prefetch,
                                with_prefetch)
from ..derive.deliveries import GET_TAG, consumes, deliveries, tag_ranks
from ..derive.labels import channels_filter, connection_labels
from ..derive.methods import KEY, chan_key, methods, pick, select
from ..derive.refills import (BACKLOG_CONTEXT_SLICING, AnswerRows, backlog_answers, backlog_context,
                              join_backlog_context, slow_refills_of, told_ack_gaps)
from ..derive.replay import for_derivations, state_maxima, told, told_consumers, told_state
from ..derive.seeds import seeds_of
from ..display_filters import stream_filter
from ..kept_rows import keep, rows_table
from ..names import connection_label, consumer_label, number, subject_namer
from ..partition import CaptureFacts, Slicing, Split, facts_of, merge_rows, run_whole, taken


def consumer_list(cap: Capture) -> pd.DataFrame:
    """Every consumer the capture shows (`amqpcap info`), cheap: no delivery is matched.

    From each basic.consume (with the tag the broker confirmed): its queue, no-ack, ``prefetch``
    (the per-consumer basic.qos in force at its start; 0 = unlimited, also when no qos came
    before it: RabbitMQ's default) and ``channel_prefetch`` (a global qos in force; <NA> without
    one). A capture started after the basic.consume shows the consumer only by its deliveries'
    tags: queue, no-ack and prefetch unknown (<NA>). Columns: connection, queue, prefetch,
    channel_prefetch, no_ack, consume_seen, consumer_tag, stream, channel; by queue, connection."""
    c = _consume_rows(cap, consumes(cap))
    m = methods(cap)
    seen = as_object(pick(cap, m, select(m, "basic.deliver", "s2c"), ["stream", "channel", "consumer_tag"])
                  .drop_duplicates(), "consumer_tag")
    seen = seen.merge(as_object(c[["stream", "channel", "consumer_tag"]], "consumer_tag"), how="left", indicator=True)
    seen = seen[seen["_merge"] == "left_only"].drop(columns="_merge")
    seen = seen.assign(queue=None, prefetch=pd.array([pd.NA] * len(seen), dtype="Int64"),
                       channel_prefetch=pd.array([pd.NA] * len(seen), dtype="Int64"),
                       no_ack=pd.array([pd.NA] * len(seen), dtype="boolean"), consume_seen=False)
    out = pd.concat([c[LISTED], seen[LISTED]], ignore_index=True) if len(seen) else c[LISTED].reset_index(drop=True)
    return _listed(out, connection_labels(cap, out["stream"]))


#: consumer_list's columns but the connection
LISTED = ["stream", "channel", "consumer_tag", "queue", "prefetch", "channel_prefetch", "no_ack", "consume_seen"]


def _consume_rows(cap: Capture, cons: pd.DataFrame) -> pd.DataFrame:
    """consumer_list's rows (LISTED, and start_order) of the basic.consume rows `cons` of
    `consumes(cap)`, by start_order."""
    cons = cons[KEY + ["consumer_tag", "queue", "no_ack", "start_order"]]
    c = with_prefetch(cap, with_prefetch(cap, cons, global_=True, name="channel_prefetch"))
    c["prefetch"] = c["prefetch"].fillna(0)
    c["no_ack"] = c["no_ack"].astype("boolean")
    c["consume_seen"] = True
    return c[LISTED + ["start_order"]]


def _listed(out: pd.DataFrame, connection: np.ndarray) -> pd.DataFrame:
    """consumer_list's rows (LISTED) with their `connection`, by queue, connection, channel."""
    out = out.reset_index(drop=True)
    out.insert(0, "connection", connection)
    out["queue"] = out["queue"].astype(object)
    return out.sort_values(["queue", "connection", "channel"], na_position="last", kind="stable").reset_index(drop=True)



# -- the analyzer ------------------------------------------------------------------------------

#: prefetch-one: a consumer at prefetch 1 receiving at least this rate (msg/s). Each message then
#: costs a full deliver→ack→deliver round trip; below a few messages per second nobody notices.
PREFETCH_ONE_MIN_RATE_PER_S = 10.0
#: ... "one ack per message": at least this share of its settled deliveries were settled one per
#: ack frame (with multiple=1 acks the per-message cost is shared)
ONE_ACK_PER_MESSAGE_SHARE = 0.9
#: ... warning (not info) when the consumer is also held at its limit at least this share of time:
#: then prefetch 1 is what limits its throughput, not just a cost
PREFETCH_ONE_WARNING_SHARE_AT_LIMIT = 0.5
#: consumer-bound: at its prefetch limit at least this share of its time (the broker could not
#: send it more for most of the capture)...
CONSUMER_BOUND_SHARE = 0.5
#: ... and its deliver→ack median at least this multiple of the channel's ack→next-deliver median
#: (the consumer's processing, not the broker's refill, takes most of each cycle)
CONSUMER_DOMINANCE = 2.0
#: ... critical when its queue's backlog (lower bound) grew during the consumer's life by at least
#: BACKLOG_GROWTH_MSGS messages and at least BACKLOG_GROWTH_RATIO times as fast as all the queue's
#: consumers took messages (growth / life over their summed delivery rates): the publishers
#: outpace the consumers by that much, the queue only grows. A ratio, not a share of time at the
#: limit, so that a queue growing faster is never less severe (ten-consumers.pcap: 5,275 messages
#: in 3 s against 1,280 msg/s consumed, ratio 1.4; slow-prefetch1.pcap: 152 against 150 msg/s, 0.33)
BACKLOG_GROWTH_MSGS = 100
BACKLOG_GROWTH_RATIO = 0.1
#: unlimited-prefetch: a consumer without a prefetch limit (basic.qos prefetch_count 0, or no
#: basic.qos before its basic.consume: RabbitMQ's default; or no-ack) has fallen behind when its
#: unacked messages reached this many: over three times the 100-300 RabbitMQ's "Consumer
#: Prefetch" guide finds usually optimal, all held in the client's memory ...
UNLIMITED_UNACKED = 1000
#: ... or when its connection advertised a zero TCP receive window while it received deliveries
#: (the broker had pushed more than the client read; for a no-ack consumer the only sign on the
#: wire): TCP flag bits that make a zero window not a window (docs/tables.md, `flags`)
NOT_A_WINDOW = 0x01 | 0x02 | 0x04  # FIN, SYN, RST
#: findings need at least this many deliveries to the consumer (fewer is anecdotal)
MIN_DELIVERIES = 50
#: a finding's example packets (frames where a consumer reached its limit, 5 each) come from this
#: many of its subjects, the worst first: a way into Wireshark, not an inventory
EXAMPLE_SUBJECTS = 4
#: plots: step series longer than this are drawn as per-bin min/max envelopes
MAX_STEPS = 20_000
TIME_BINS = 400


def consumer_summary(cap: Capture) -> pd.DataFrame:
    """One row per acknowledging consumer (see docs/analyzers/consumers.md)."""
    return consumers_partial(cap, facts_of(cap), cap.context.get("backlog"))["summary"]


def _summary(st: pd.DataFrame, c: pd.DataFrame, acked: pd.DataFrame, gaps: pd.DataFrame,
             growth: pd.api.extensions.ExtensionArray, labels: pd.Series) -> pd.DataFrame:
    """`consumer_summary` of a partition from its tables: state rows `st` (in the whole's order,
    by consumer), consumer rows `c` (in the whole's order), the acknowledging consumers'
    deliveries `acked` (``code``: the consumer's run in `st`, `_runs`), the ack gaps, each
    consumer's backlog `growth` (by row of `c`) and the connections' `labels` (by stream)."""
    cols = ["connection", "stream", "channel", "consumer_tag", "queue", "deliveries", "start_ts", "end_ts",
            "duration_s", "rate_per_s", "prefetch", "prefetch_estimated", "channel_prefetch", "max_unacked", "mean_unacked",
            "share_at_limit", "utilisation", "share_idle", "mean_deficit", "acks", "acks_multiple",
            "messages_per_ack", "deliver_to_ack_p50_s", "ack_to_next_deliver_p50_s", "backlog_growth_msgs"]
    if len(st) == 0:
        return pd.DataFrame({k: pd.Series(dtype=object) for k in cols})
    st_code, keys = _runs(st)
    dur = st["duration_s"].to_numpy(float)
    w = st.assign(_d=dur, _u=dur * st["unacked"].to_numpy(float),
                  _lim=dur * st["at_limit"].to_numpy(bool), _idle=dur * (st["unacked"].to_numpy() == 0),
                  _def=dur * st["deficit"].astype(float).fillna(0).to_numpy(),
                  _has_def=dur * st["deficit"].notna().to_numpy())
    # grouped on the int64 consumer code (one cheap factorization per GroupBy object, where the
    # four key columns with text cost one per call); float sums stay pandas' (compensated) sums,
    # over the whole partition's rows in its order however many slices told them
    g = w.groupby(st_code, sort=False)
    agg = g.agg(T=("_d", "sum"), U=("_u", "sum"), L=("_lim", "sum"), I=("_idle", "sum"), DF=("_def", "sum"),
                HD=("_has_def", "sum"), max_unacked=("unacked", "max"), prefetch=("prefetch", "last"),
                prefetch_estimated=("prefetch_estimated", "last"), channel_prefetch=("channel_prefetch", "last"))
    T = agg["T"].where(agg["T"] > 0)
    agg["mean_unacked"] = agg["U"] / T
    agg["share_at_limit"] = agg["L"] / T
    # wire-level utilisation: the share of the consumer's life in which the broker was allowed
    # to send it another message (deficit > 0, or no limit): RabbitMQ's "consumer utilisation"
    # seen from the wire
    agg["utilisation"] = 1 - agg["share_at_limit"]
    agg["share_idle"] = agg["I"] / T
    agg["mean_deficit"] = agg["DF"] / agg["HD"].where(agg["HD"] > 0)
    agg["duration_s"] = agg["T"]

    # per consumer code: deliver→ack median, ack frames (distinct settling frames), multiple ones
    ncons = len(keys)
    code = acked["code"].to_numpy(np.int64)
    lat = pd.Series(acked["latency_s"].to_numpy(float)).groupby(code).median().reindex(range(ncons))
    s_order = acked["settle_order"].to_numpy(np.int64)
    settled = s_order >= 0
    s_code, s_order = code[settled], s_order[settled]
    frame = np.unique(s_code * (int(s_order.max(initial=0)) + 1) + s_order, return_index=True)[1]
    acks = np.bincount(s_code[frame], minlength=ncons).astype(np.int64)
    acks_mult = np.bincount(s_code[frame], weights=acked["settle_multiple"].to_numpy(bool)[settled][frame],
                            minlength=ncons).astype(np.int64)
    n_settled = np.bincount(s_code, minlength=ncons)
    mpa = np.where(acks > 0, n_settled / np.maximum(acks, 1), np.nan)

    # the consumers with a state (inner join of c and agg), in c's order
    c_code = code_of(keys, c)
    keep = c_code >= 0
    out = as_object(c.loc[keep].drop(columns=["prefetch"]), "consumer_tag").reset_index(drop=True)
    oc = c_code[keep]
    agg = agg.reindex(oc)
    for col in agg:
        out[col] = agg[col].array
    out["deliver_to_ack_p50_s"] = lat.to_numpy()[oc]
    out["acks"], out["acks_multiple"], out["messages_per_ack"] = acks[oc], acks_mult[oc], mpa[oc]
    # the tag space's ack→next-deliver median, grouped on one int64 code of (stream, channel,
    # epoch) numbered over the gaps' and the consumers' keys together (then a lookup per consumer)
    ng = len(gaps)
    kc = codes(*(np.r_[gaps[k].to_numpy(np.int64), out[k].to_numpy(np.int64)] for k in KEY))
    a2d = pd.Series(gaps["gap_s"].to_numpy(float)).groupby(kc[:ng]).median()
    out["ack_to_next_deliver_p50_s"] = a2d.reindex(kc[ng:]).to_numpy(float)
    span = (out["end_ts"] - out["start_ts"]).dt.total_seconds()
    out["rate_per_s"] = out["deliveries"] / span.where(span > 0)
    # growth of the consumer's queue backlog (lower bound) from its start to its end, in messages
    out["backlog_growth_msgs"] = growth[keep]
    out = out.sort_values(["stream", "channel", "start_ts"], kind="stable").reset_index(drop=True)
    out["connection"] = _labelled(labels, out["stream"])
    return out[cols]


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


def _labelled(labels: pd.Series, streams) -> np.ndarray:
    """The connection label of each of `streams` (`connection_labels`), from the partition's."""
    return labels.reindex(np.asarray(streams, np.int64)).to_numpy(object)


#: severity by its rank (analysis.SEVERITY_RANK: info 0, warning 1, critical 2)
SEVERITIES = {rank: name for name, rank in SEVERITY_RANK.items()}


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
    rates of all the queue's consumers (a consumer without a known queue: its own rate)."""
    life = (s["end_ts"] - s["start_ts"]).dt.total_seconds().to_numpy(float)
    rate = s["rate_per_s"].astype(float).fillna(0)
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
    rate = s["rate_per_s"].astype(float).fillna(0).to_numpy()
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


def _findings(cap: Capture, s: pd.DataFrame, slow: np.ndarray, limits: pd.DataFrame) -> list[Finding]:
    """One consumer-bound and one prefetch-one finding at most, each listing its consumers as
    subjects, worst first (severity, then impact). `slow`: see `_flags`; `limits`: `_limit_rows`."""
    if len(s) == 0:
        return []
    fl = _flags(s, slow)
    out = []
    for fid, build in (("bound", _bound_finding), ("one", _prefetch_one_finding)):
        sel = fl[fid].to_numpy(bool)
        if sel.any():
            # worst first; ties in capture order (stream, channel: the order of s)
            g = s.loc[sel].assign(sev_rank=fl.loc[sel, f"{fid}_rank"], impact=fl.loc[sel, f"{fid}_impact"],
                                  one_ack=fl.loc[sel, "one_ack"], growth_ratio=fl.loc[sel, "growth_ratio"])
            g = g.sort_values(["sev_rank", "impact"], ascending=False, kind="stable")
            out.append(build(cap, g, limits))
    return out


def _subjects(cap: Capture, g: pd.DataFrame) -> list[dict]:
    """One subject per consumer of ``g`` (flagged rows of consumer_summary, worst first): its
    connection, channel, queue and consumer tag, then its own numbers."""
    subject_of = subject_namer(cap)
    return [subject_of(r.stream, channel=int(r.channel), queue=None if pd.isna(r.queue) else str(r.queue),
                       consumer_tag=str(r.consumer_tag), prefetch_msgs=int(r.prefetch),
                       prefetch_estimated=bool(r.prefetch_estimated), deliveries=int(r.deliveries),
                       rate_msgs_per_s=number(r.rate_per_s), share_at_limit=number(r.share_at_limit),
                       deliver_to_ack_p50_s=number(r.deliver_to_ack_p50_s),
                       ack_to_next_deliver_p50_s=number(r.ack_to_next_deliver_p50_s),
                       messages_per_ack=number(r.messages_per_ack),
                       backlog_growth_msgs=None if pd.isna(r.backlog_growth_msgs) else int(r.backlog_growth_msgs),
                       backlog_growth_ratio=number(r.growth_ratio), severity=SEVERITIES[int(r.sev_rank)])
            for r in g.itertuples(index=False)]


def _who(cap: Capture, g: pd.DataFrame) -> tuple[str, str]:
    """(the subjects as a title names them, the worst one's name): `queue Q on conn` for one
    consumer; `10 consumers on queue Q` and the worst one's connection for several."""
    w = g.iloc[0]
    worst = consumer_label(cap, w.stream, w.queue, w.consumer_tag)
    if len(g) == 1:
        return worst, worst
    queues = g["queue"].dropna().unique()
    if len(queues) == 1 and g["queue"].notna().all():
        return f"{len(g)} consumers on queue {queues[0]}", connection_label(cap, w.stream)
    where = f" on {len(queues)} queues" if len(queues) > 1 else ""
    return f"{len(g)} consumers{where}", worst


def _common_evidence(cap: Capture, g: pd.DataFrame, methods: str, limits: pd.DataFrame) -> dict:
    """Evidence every consumer finding carries: the worst consumer's numbers (the first subject),
    totals over all subjects, the streams, example packets and the filter."""
    w = g.iloc[0]
    return {"streams": sorted({int(x) for x in g["stream"]}), "channel": int(w.channel),
            "consumer_tag": str(w.consumer_tag), "prefetch_msgs": int(w.prefetch),
            "prefetch_estimated": bool(w.prefetch_estimated), "deliveries": int(w.deliveries),
            "rate_msgs_per_s": number(w.rate_per_s), "share_at_limit": number(w.share_at_limit),
            "deliver_to_ack_p50_s": number(w.deliver_to_ack_p50_s),
            "ack_to_next_deliver_p50_s": number(w.ack_to_next_deliver_p50_s),
            "consumers_with_this_finding": int(len(g)),
            "queues": sorted({str(q) for q in g["queue"].dropna()}),
            "deliveries_total": int(g["deliveries"].sum()),
            "rate_msgs_per_s_total": float(g["rate_per_s"].astype(float).fillna(0).sum()),
            "packets": _limit_packets(limits, g.head(EXAMPLE_SUBJECTS)),
            "filter": channels_filter(g["stream"], g["channel"])
                      + f" && amqp.method.class == 60 && amqp.method.method in {methods}"}


def _ms(v) -> str:
    return "?" if v is None or pd.isna(v) else f"{float(v) * 1e3:.1f} ms"


def _bound_finding(cap: Capture, g: pd.DataFrame, limits: pd.DataFrame) -> Finding:
    w = g.iloc[0]
    who, worst = _who(cap, g)
    growth = g["backlog_growth_msgs"].astype("Float64").max()  # (a lower bound per consumer's life)
    growth = None if pd.isna(growth) else int(growth)
    sh = g["share_at_limit"].astype(float)
    # (the refill time matters, and is said, only at prefetch 1: see _flags)
    holds = f"holds each message a median {_ms(w.deliver_to_ack_p50_s)}" + (
        f" while the broker refills in {_ms(w.ack_to_next_deliver_p50_s)}" if w.prefetch == 1 else "")
    limit = (f"the highest unacked count seen ({w.prefetch}; no basic.qos in the capture)" if w.prefetch_estimated
             else f"its prefetch limit ({w.prefetch})")
    if len(g) == 1:
        title = (f"The consumer is the bottleneck: {who} sat at {limit} "
                 f"{w.share_at_limit:.0%} of the time; it {holds}")
    else:
        span = f"{sh.min():.0%}" if f"{sh.min():.0%}" == f"{sh.max():.0%}" else f"{sh.min():.0%}–{sh.max():.0%}"
        title = (f"{who} are the bottleneck, at their prefetch limit {span} of the time "
                 f"(worst: {worst}, {w.share_at_limit:.0%} at prefetch {w.prefetch}; it {holds})")
    if growth and growth > 0:
        title += f"; {'its' if len(g) == 1 else 'the'} queue grew by at least {growth} messages"
    n_one = int(g["one_ack"].sum())
    whose = "this consumer's" if len(g) == 1 else "these consumers'"
    advice = (f"The broker waits for {whose} acks: look at the "
              "work per message (slow handlers, synchronous I/O, locks), add consumers or threads, and raise the "
              "prefetch if the work is I/O-bound. A growing queue means the consumers cannot keep up with the "
              "publish rate.")
    one = g[g["one_ack"].to_numpy(bool)]
    d50, a50 = (number(one["deliver_to_ack_p50_s"].iloc[0]), number(one["ack_to_next_deliver_p50_s"].iloc[0])) if n_one \
        else (None, None)
    if d50 and a50 is not None:
        # the consumer's rate is at most 1 / (d50 + a50) now, 1 / d50 with the refill hidden
        which = "" if len(g) == 1 else f" ({n_one} of these consumers; numbers of the worst)"
        advice += (f" At prefetch 1 with one ack per message{which}, each message also waits for the ack's round "
                   f"trip and the broker's refill ({_ms(a50)} of each {_ms(d50 + a50)} cycle): a larger prefetch "
                   f"(e.g. 50–300) with multiple=true acks saves that, at most {a50 / d50:.0%} more messages per "
                   "second; the consumer's own work is the larger part.")
    ev = _common_evidence(cap, g, "{60, 80, 90, 120}", limits)
    ev.update(mean_unacked_msgs=number(w.mean_unacked), utilisation=number(w.utilisation),
              backlog_growth_msgs=None if pd.isna(w.backlog_growth_msgs) else int(w.backlog_growth_msgs),
              backlog_growth_ratio=number(w.growth_ratio), prefetch_one_consumers=n_one)
    return Finding(id="consumer-bound", severity=SEVERITIES[int(g["sev_rank"].max())], title=title, evidence=ev,
                   advice=advice, impact=float(g["impact"].max()), subjects=_subjects(cap, g))


def _prefetch_one_finding(cap: Capture, g: pd.DataFrame, limits: pd.DataFrame) -> Finding:
    w = g.iloc[0]
    who, worst = _who(cap, g)
    d50, a50 = number(w.deliver_to_ack_p50_s), number(w.ack_to_next_deliver_p50_s)
    cycle = (d50 or 0) + (a50 or 0)
    if len(g) == 1:
        title = (f"Prefetch 1 with one ack per message: {who} gets {w.rate_per_s:.0f} msg/s one at a time, "
                 f"each waiting for the previous ack ({w.share_at_limit:.0%} of its time at the limit)")
    else:
        title = (f"Prefetch 1 with one ack per message: {who} get their messages one at a time, each waiting "
                 f"for the previous ack (worst: {worst}, {w.rate_per_s:.0f} msg/s, {w.share_at_limit:.0%} of its "
                 f"time at the limit)")
    ev = _common_evidence(cap, g, "{10, 60, 80}", limits)
    ev.update(acks=int(w.acks), messages_per_ack=number(w.messages_per_ack), cycle_s=cycle,
              max_rate_msgs_per_s=(1 / cycle) if cycle > 0 else None)
    return Finding(
        id="prefetch-one", severity=SEVERITIES[int(g["sev_rank"].max())], title=title, evidence=ev,
        advice="Raise the prefetch (basic.qos prefetch_count, e.g. 50–300) so the broker keeps messages "
               "in flight while the consumer works, and ack with multiple=true every few messages; "
               "keep prefetch 1 only where strict one-at-a-time fairness between slow consumers matters.",
        impact=float(g["impact"].max()), subjects=_subjects(cap, g))


def _unlimited(c: pd.DataFrame, s: pd.DataFrame, d: pd.DataFrame, zero: pd.DataFrame) -> pd.DataFrame:
    """The consumers without a prefetch limit (consumer_list: prefetch 0 and no global qos, or
    no-ack; a consumer whose basic.consume is not in the capture is unknown, never unlimited)
    with at least MIN_DELIVERIES deliveries: connection, stream, channel, consumer_tag, queue,
    no_ack, deliveries, first and last delivery (ts_first, ts_last), max_unacked (acking ones),
    deliver_to_ack_p50_s, zero_windows (packets of the consumer's connection advertising a zero
    receive window between its first and last delivery) and zero_window_packet (the first).
    `c`: consumer_list's rows of the basic.consume frames; `s`: consumer_summary; `d`: the
    deliveries; `zero`: the zero-window packets (`_zero_windows`)."""
    unl = c["consume_seen"].to_numpy(bool) & (c["no_ack"].to_numpy(bool, na_value=False) | (
        (c["prefetch"].to_numpy(float, na_value=-1) == 0) & (c["channel_prefetch"].fillna(0).to_numpy(float) == 0)))
    c = as_object(c[unl], "consumer_tag")
    key = ["stream", "channel", "consumer_tag"]
    dd = as_object(d[key + ["ts", "latency_s"]], "consumer_tag")
    g = dd.groupby(key, sort=False)
    per = g.agg(deliveries=("ts", "size"), ts_first=("ts", "min"), ts_last=("ts", "max"),
                deliver_to_ack_p50_s=("latency_s", "median")).reset_index()
    c = c.merge(per, on=key, how="inner")
    c = c[c["deliveries"] >= MIN_DELIVERIES]
    acking = as_object(s[key + ["max_unacked"]], "consumer_tag").groupby(key)["max_unacked"].max().reset_index()
    c = c.merge(acking, on=key, how="left").reset_index(drop=True)
    # per consumer, its connection's zero windows between its first and last delivery: two
    # binary searches of (connection, time) among the zero-window packets
    zs, zt, zp = (zero[k].to_numpy(np.int64) for k in ("stream", "ts", "packet"))
    by = np.lexsort((zt, zs))
    zs, zt, zp = zs[by], zt[by], zp[by]
    cs = c["stream"].to_numpy(np.int64)
    first = np.searchsorted(zs, cs, "left")
    end = np.searchsorted(zs, cs, "right")
    lo = np.array([first[i] + np.searchsorted(zt[first[i]:end[i]], t, "left")
                   for i, t in enumerate(pd.to_datetime(c["ts_first"], utc=True).array.asi8)], dtype=np.int64)
    hi = np.array([first[i] + np.searchsorted(zt[first[i]:end[i]], t, "right")
                   for i, t in enumerate(pd.to_datetime(c["ts_last"], utc=True).array.asi8)], dtype=np.int64)
    n = hi - lo
    return c.assign(zero_windows=n, zero_window_packet=[int(zp[i]) if k else None for i, k in zip(lo, n)])


def _unlimited_finding(cap: Capture, c: pd.DataFrame) -> Finding | None:
    """unlimited-prefetch: consumers without a prefetch limit that fell behind (UNLIMITED_UNACKED
    unacked, or a zero receive window), most unacked first. `c`: `_unlimited`'s rows, in
    `consumer_list` order."""
    if not len(c):
        return None
    unacked = c["max_unacked"].astype("Float64").fillna(0).to_numpy(float)
    c = c.assign(unacked_peak=unacked)[(unacked >= UNLIMITED_UNACKED) | (c["zero_windows"].to_numpy() > 0)]
    if not len(c):
        return None
    c = c.sort_values(["unacked_peak", "zero_windows", "deliveries"], ascending=False, kind="stable")
    w = c.iloc[0]
    who = consumer_label(cap, w.stream, w.queue, w.consumer_tag)
    how = "consumes with no-ack (auto-ack)" if w.no_ack else "has no prefetch limit (no basic.qos: unlimited)"
    held = [] if w.no_ack else [f"the broker pushed {int(w.unacked_peak):,} unacknowledged messages at once"]
    if w.zero_windows:
        held.append(f"its connection's TCP receive window filled ({int(w.zero_windows)} zero-window packets)")
    if not w.no_ack and pd.notna(w.deliver_to_ack_p50_s):
        held.append(f"each message waited a median {w.deliver_to_ack_p50_s:.2f} s in the client before its ack")
    title = f"{who} {how} and fell behind: " + "; ".join(held)
    if len(c) > 1:
        title += f" ({len(c) - 1} more such consumer{'s' if len(c) > 2 else ''})"
    packets = sorted({int(x) for x in c["zero_window_packet"].dropna()})[:EXAMPLE_SUBJECTS]
    flt = (channels_filter(c["stream"], c["channel"]) + " && amqp.method.class == 60 && amqp.method.method in "
           "{10, 20, 60, 80}")
    if c["zero_windows"].any():
        flt = f"({flt}) || ({stream_filter(c.loc[c['zero_windows'] > 0, 'stream'])} && tcp.analysis.zero_window)"
    evidence = {"streams": sorted({int(x) for x in c["stream"]}), "channel": int(w.channel),
                "consumer_tag": str(w.consumer_tag), "queue": None if pd.isna(w.queue) else str(w.queue),
                "no_ack": bool(w.no_ack), "prefetch_msgs": None if w.no_ack else 0, "deliveries": int(w.deliveries),
                "max_unacked_msgs": None if w.no_ack else int(w.unacked_peak),
                "deliver_to_ack_p50_s": None if w.no_ack else number(w.deliver_to_ack_p50_s),
                "zero_window_packets": int(w.zero_windows), "consumers_with_this_finding": int(len(c)),
                "packets": packets, "filter": flt}
    subject_of = subject_namer(cap)
    subjects = [subject_of(r.stream, channel=int(r.channel), queue=None if pd.isna(r.queue) else str(r.queue),
                           consumer_tag=str(r.consumer_tag), no_ack=bool(r.no_ack), deliveries=int(r.deliveries),
                           max_unacked_msgs=None if r.no_ack else int(r.unacked_peak),
                           deliver_to_ack_p50_s=None if r.no_ack else number(r.deliver_to_ack_p50_s),
                           zero_window_packets=int(r.zero_windows), severity="warning")
                for r in c.itertuples()]
    return Finding(
        id="unlimited-prefetch", severity="warning", title=title, evidence=evidence,
        advice="Set a prefetch limit (basic.qos prefetch_count; RabbitMQ's Consumer Prefetch guide finds 100-300 "
               "usually optimal) and ack manually: without one the broker pushes the whole queue into the "
               "client, whose memory grows with it, messages wait in the client instead of in the queue where "
               "other consumers could take them, and a crash redelivers all of them at once. With no-ack there "
               "is no limit at all: the client's TCP buffers are the only brake.",
        impact=float(min(1.0, max(unacked.max(initial=0) / (10 * UNLIMITED_UNACKED), 0.5))), subjects=subjects)


def _limit_rows(cap: Capture) -> pd.DataFrame:
    """`_limit_rows_of` the capture's state rows."""
    return _limit_rows_of(consumer_state(cap))


def _limit_rows_of(st: pd.DataFrame) -> pd.DataFrame:
    """Example packets of every consumer: the first 5 frames at which it was at its limit (any
    epoch of its channel), found on the state rows' consumer codes (`_runs`). Columns: stream,
    channel, consumer_tag, packet."""
    st_code, keys = _runs(st)
    key = ["stream", "channel", "consumer_tag"]
    k3_code = codes(*(keys[k].to_numpy() for k in key))  # (equal across epochs)
    rows = np.flatnonzero(st["at_limit"].to_numpy(bool))
    c = k3_code[st_code[rows]]
    rows = rows[pd.Series(c).groupby(c).cumcount().to_numpy() < 5]
    return as_object(st[key].iloc[rows], "consumer_tag").assign(packet=st["packet"].to_numpy(np.int64)[rows])


def _limit_packets(limits: pd.DataFrame, g: pd.DataFrame) -> list[int]:
    """The example packets (`_limit_rows`) of the consumers of ``g``."""
    key = ["stream", "channel", "consumer_tag"]
    wanted = pd.MultiIndex.from_frame(limits[key]).isin(pd.MultiIndex.from_frame(as_object(g[key], "consumer_tag")))
    return sorted(int(p) for p in limits["packet"].to_numpy(np.int64)[wanted])


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


def consumers_partial(cap: Capture, facts: CaptureFacts, backlog: BacklogPieces | None) -> dict[str, Any]:
    """A partition's consumers (summary rows, credit series, no-ack consumers, the unlimited
    ones that fell behind, their example packets and queues) and its slowly refilled channels,
    with the whole capture's `backlog` read at its acks and consumers."""
    return consumers_join([consumers_slice(cap, facts, None, True, backlog)[1]])


#: the ack gaps' columns a piece keeps (those `_summary` and `slow_refills_of` read)
GAPS = KEY + ["packet", "settled", "unacked_after", "queue", "next_deliver_packet", "gap_s", "backlog_min",
              "backlog_min_gap"]


@dataclass
class _Piece:
    """What a slice tells (`consumers_slice`), each row once: the partition's partial is made
    from the pieces of all its slices (`consumers_join`). Per message rows, which the join needs
    (the state rows are the partial's own table; medians need every value)."""

    #: state rows (`consumer_state`'s columns), by consumer and time when `state_in_order`, else
    #: told out of order with their frame's whole order (``_order``: `replay.told_state`)
    state: pd.DataFrame
    state_in_order: bool
    #: consumer rows (`consumer_rows`), with their start's whole order
    consumers: pd.DataFrame
    #: deliveries of acknowledging consumers: code (row of `acked_keys`), latency_s,
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
    #: the last slice's: the most unacked per consumer over the partition (None: every state row
    #: has it already), the consumers' backlog growth (by whole consumer row), the connections'
    #: labels (by stream), the capture's first and last ts
    maxima: pd.DataFrame | None = None
    growth: Any = None
    labels: pd.Series | None = None
    span: tuple | None = None


def consumers_slice(part: Capture, facts: CaptureFacts, answer_rows: AnswerRows | None, last: bool,
                    backlog: BacklogPieces | None) -> tuple[AnswerRows, _Piece]:
    """A slice of a partition's time (`amqpcap.partition.Slicing`; a whole partition is its own
    one slice): the rows it tells of the derivations (`amqpcap.derive.replay.told`), its own
    zero-window packets; the last slice also what only the end knows."""
    view = for_derivations(part)
    seeds = seeds_of(view)
    answers = _answers(view, backlog)
    gaps, answer_rows = told_ack_gaps(view, answers, answer_rows, last)
    d = deliveries(view)
    told_d = told(view, d["order"].to_numpy(np.int64), last)
    a = acked_deliveries(view)
    told_a = told(view, a.table["order"].to_numpy(np.int64), last)
    if seeds is None:
        state, in_order = consumer_state(view), True
    else:
        state, in_order = told_state(view, last), False
    cons = consumes(view)
    told_c = told(view, cons["order"].to_numpy(np.int64), last)
    piece = _Piece(state=state, state_in_order=in_order,
                   consumers=consumer_rows(view)[told_consumers(view, last)],
                   acked=pd.DataFrame({"code": a.code[told_a],
                                       "latency_s": a.table["latency_s"].to_numpy(float)[told_a],
                                       "settle_order": _whole(view, a.table["settle_order"])[told_a],
                                       "settle_multiple": a.table["settle_multiple"].to_numpy(bool, na_value=False)[told_a]}),
                   acked_keys=a.keys,
                   deliveries=d.loc[told_d, ["stream", "channel", "consumer_tag", "ts", "latency_s", "no_ack"]],
                   gaps=gaps[GAPS].reset_index(drop=True),
                   consumes=_whole_start(view, _consume_rows(view, cons[told_c])),
                   zero=_zero_windows(part))
    if last:
        piece.maxima = state_maxima(view) if seeds is not None else None
        piece.growth = answers.growth_msgs
        stream = part.connections["stream"].to_numpy(np.int64)
        piece.labels = pd.Series(connection_labels(part, stream), index=stream, dtype=object)
        piece.span = (part.summary["first_ts"], part.summary["last_ts"])
    return answer_rows, piece


def _answers(view: Capture, backlog: BacklogPieces | None) -> BacklogAnswers:
    """The partition's backlog answers (`backlog_answers`): of the whole partition, shared with
    the other readers of `ack_gaps`; in a slice, read from the context (row i: the partition's
    i-th ack, or consumer)."""
    if seeds_of(view) is None:
        view.context["backlog"] = backlog
        return backlog_answers(view)
    return answers_of(backlog) if backlog is not None else backlog_answers(view)


def _whole(view: Capture, order: pd.Series) -> np.ndarray:
    """Frame positions in `view` (Int64, <NA>: none) as the whole partition's (-1: none)."""
    at = order.to_numpy(np.int64, na_value=-1)
    seeds = seeds_of(view)
    if seeds is None or not len(at):
        return at
    return np.where(at >= 0, seeds.whole_orders(np.maximum(at, 0)), -1)


def _whole_start(view: Capture, rows: pd.DataFrame) -> pd.DataFrame:
    """`rows` with their start_order the whole partition's."""
    seeds = seeds_of(view)
    if seeds is None or not len(rows):
        return rows
    return rows.assign(start_order=seeds.whole_orders(rows["start_order"].to_numpy(np.int64)))


def _zero_windows(part: Capture) -> pd.DataFrame:
    """The packets of `part` in which a client advertised a zero receive window (not a SYN, FIN
    or RST: NOT_A_WINDOW): stream, ts (ns), packet, in packet order."""
    p = part.packets
    zero = (p["direction"] == "c2s").to_numpy(bool) & (p["window"].to_numpy(np.int64) == 0) \
        & ((p["flags"].to_numpy(np.int64) & NOT_A_WINDOW) == 0)
    return pd.DataFrame({"stream": p["stream"].to_numpy(np.int64)[zero], "ts": p["ts"].array.asi8[zero],
                         "packet": p["packet"].to_numpy(np.int64)[zero]})


def consumers_join(pieces: list[_Piece]) -> dict[str, Any]:
    """The partition's partial (`consumers_partial`) from its slices' pieces (`consumers_slice`)."""
    final = pieces[-1]
    st = _state_of(pieces)
    c = _rows_of([p.consumers for p in pieces], "start_order")
    acked = _acked_of(pieces, _runs(st)[1])
    d = _joined([p.deliveries for p in pieces])
    gaps = _joined([p.gaps for p in pieces])
    s = _summary(st, c, acked, gaps, final.growth, final.labels)
    listed = _rows_of([p.consumes for p in pieces], "start_order")
    # (text, as consumer_list's labels are when it has a row: a basic.consume or a basic.deliver)
    connection = _labelled(final.labels, listed["stream"])
    if len(listed) or (d["consumer_tag"] != GET_TAG).to_numpy(bool).any():
        connection = pd.array(connection, dtype="str")
    listed = _listed(listed[LISTED], connection)
    return {"summary": s, "state": keep(st, "consumers-state", "stream"),
            "plotted": state_bins(*final.span, st) if len(st) else None,
            "no_ack": _no_ack_rows(d),
            "slow": slow_refills_of(d, gaps).index.to_numpy(), "limits": _limit_rows_of(st),
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
    if len(pieces) == 1 and pieces[0].state_in_order:
        return pieces[0].state
    st = _joined([p.state for p in pieces]).sort_values(CONSUMER + ["ts", "_order"], kind="stable")
    maxima = pieces[-1].maxima
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


def consumers_merge(partials: list[dict[str, Any]], records: None, facts: CaptureFacts, cap: Capture) -> AnalyzerResult:
    """Every partition's consumers, in the whole capture's order (by stream and channel, a
    channel's consumers being one partition's); the findings and the plot from them."""
    s = merge_rows(taken(partials, "summary"), ["stream", "channel"])
    s["connection"] = connection_labels(cap, s["stream"])
    # (a consumer's state rows are its channel's, of one partition: merged by stream; the plot
    # is drawn from each partition's numbers per consumer and time bin, `StateBins`)
    st = rows_table(taken(partials, "state"), ["stream", "channel", "epoch", "consumer_tag"])
    rows = s.drop(columns=["start_ts", "end_ts"]).to_dict(orient="records")
    no_ack = sorted((r for q in partials for r in q["no_ack"]), key=lambda r: (r["stream"], r["channel"], r["consumer_tag"]))
    for r, who in zip(no_ack, connection_labels(cap, [r["stream"] for r in no_ack])):
        rows.append({"connection": who, **r})
    for r in rows:
        r.setdefault("no_ack", False)
    plots = []
    if len(st):
        queues = pd.concat([q["queues"] for q in partials], ignore_index=True)
        bins = merged_bins([q["plotted"] for q in partials if q["plotted"] is not None])
        plots.append(Plot("consumers-unacked-deficit", "Consumers at their prefetch limit, and their unacked messages",
                          lambda path: _plot_state(cap, bins, queues, path)))
    slow = np.concatenate([q["slow"] for q in partials])
    limits = pd.concat([q["limits"] for q in partials], ignore_index=True)
    findings = _findings(cap, s, slow, limits)
    behind = [q["unlimited"] for q in partials if q["unlimited"] is not None and len(q["unlimited"])]
    if behind:  # in consumer_list's order (by queue, connection, channel), the connections named here
        c = pd.concat(behind, ignore_index=True)
        c["connection"] = connection_labels(cap, c["stream"])
        unlimited = _unlimited_finding(cap, c.sort_values(["queue", "connection", "channel"], na_position="last",
                                                          kind="stable"))
        findings += [unlimited] if unlimited else []
    return AnalyzerResult("consumers", tables={"consumers": s, "state": st}, summary={"consumers": rows},
                          findings=findings, plots=plots)


SPLIT = Split(partial=consumers_partial, merge=consumers_merge, context=backlog_context, join_context=join_backlog_context,
              slicing=Slicing(consumers_slice, consumers_join, replays=True), context_slicing=BACKLOG_CONTEXT_SLICING)


@analyzer("consumers", split=SPLIT)
def consumers(cap: Capture) -> AnalyzerResult:
    """Per consumer: unacked messages, prefetch, deficit (unused credit), utilisation, time at the limit."""
    return run_whole(SPLIT, cap)


@dataclass(frozen=True, eq=False)
class StateBins:
    """What the consumers plot draws, per consumer (a row: the consumer's state rows, which are
    one partition's) and time bin of the capture (`amqpcap.plotting.time_edges`): computed by
    each partition, so that the merge never reads the credit series (a row per message)."""

    #: the consumers (CONSUMER columns), sorted
    keys: pd.DataFrame
    #: seconds with a state, seconds at the prefetch limit (of the rows with a limit), unacked
    #: messages × seconds: (consumers, bins) arrays
    covered: np.ndarray
    at: np.ndarray
    unacked_s: np.ndarray
    #: per consumer: its last prefetch (NaN: none), whether any row had a limit
    prefetch: np.ndarray
    has_limit: np.ndarray

    def __eq__(self, other: object) -> bool:
        """The same consumers and numbers, exactly (a partition's, however its time was sliced)."""
        if not isinstance(other, StateBins):
            return NotImplemented
        return (self.keys.equals(other.keys) and list(self.keys.dtypes) == list(other.keys.dtypes)
                and all(np.array_equal(getattr(self, f), getattr(other, f), equal_nan=True)
                        for f in ("covered", "at", "unacked_s", "prefetch", "has_limit")))


def state_bins(t0: pd.Timestamp, t1: pd.Timestamp, st: pd.DataFrame) -> StateBins:
    """The consumers plot's numbers of the state rows `st` (`consumer_state`'s columns), on the
    time bins of the capture from `t0` to `t1` (its summary's first_ts and last_ts)."""
    from ..plotting import time_edges, time_per_bin

    edges = time_edges((t1 - t0).total_seconds())
    code = st.groupby(CONSUMER, sort=True, observed=True).ngroup().to_numpy()
    keys = st[CONSUMER].drop_duplicates().sort_values(CONSUMER).reset_index(drop=True)
    n = len(keys)
    start = (st["ts"] - t0).dt.total_seconds().to_numpy()
    end = (st["until_ts"] - t0).dt.total_seconds().to_numpy()
    limited = st["deficit"].notna().to_numpy()
    return StateBins(keys, time_per_bin(code, start, end, edges, n),
                     time_per_bin(code[limited], start[limited], end[limited], edges, n,
                                  st["at_limit"].to_numpy(bool)[limited].astype(float)),
                     time_per_bin(code, start, end, edges, n, st["unacked"].to_numpy(float)),
                     st.groupby(code)["prefetch"].last().to_numpy(float),
                     np.bincount(code[limited], minlength=n) > 0)


def merged_bins(parts: list[StateBins]) -> StateBins:
    """The partitions' consumers in the whole capture's order (their keys sorted as one)."""
    if len(parts) == 1:
        return parts[0]
    keys = pd.concat([b.keys for b in parts], ignore_index=True)
    order = keys.sort_values(CONSUMER, kind="stable").index.to_numpy()
    arrays = {f: np.concatenate([getattr(b, f) for b in parts])[order]
              for f in ("covered", "at", "unacked_s", "prefetch", "has_limit")}
    return StateBins(keys.take(order).reset_index(drop=True), **arrays)


def _plot_state(cap: Capture, b: StateBins, queues: pd.DataFrame, path) -> None:
    """Top: per consumer, the share of each time bin it spent at its prefetch limit (a heatmap:
    one row per consumer, any number of them; at prefetch 1 a step plot would be a solid block).
    Bottom: unacked messages (time-weighted mean per bin) against the prefetch: each consumer's
    line for a few, the median and 10th-90th percentile band of all of them for many."""
    import matplotlib.pyplot as plt

    from ..plotting import (MAX_NAMED, consumer_labels, nan_stats, natural_order, percent_axis, plain, plain_axis,
                            short, time_edges)

    t0 = cap.summary["first_ts"]
    edges = time_edges((cap.summary["last_ts"] - t0).total_seconds())
    keys, covered, at, has_limit, prefetch = b.keys, b.covered, b.at, b.has_limit, b.prefetch
    n = len(keys)
    queues = queues.drop_duplicates(CONSUMER).set_index(CONSUMER)["queue"]
    labels, queue = consumer_labels(cap, keys["stream"], keys["channel"],
                                    queues.reindex(pd.MultiIndex.from_frame(keys)).to_numpy(object),
                                    keys["consumer_tag"].astype(str).tolist())
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where((covered > 0) & has_limit[:, None], at / covered, np.nan)
        overall = np.where(has_limit, at.sum(1) / covered.sum(1), np.nan)
        unacked = np.where(covered > 0, b.unacked_s / covered, np.nan)
    named = n <= 30  # rows labelled one by one, in label order; beyond, one thin row each, worst first
    order = (natural_order(labels) if named
             else np.argsort(-np.nan_to_num(overall, nan=-1), kind="stable"))
    whose = f"queue {queue}: " if queue else ""

    rows_h = 0.3 * n + 0.7 if named else 4.0
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(11, rows_h + 3.4), sharex=True, layout="constrained",
                                   gridspec_kw={"height_ratios": [rows_h, 2.6]})
    cmap = plt.get_cmap("Reds").with_extremes(bad="#e8e8e8")
    img = ax1.imshow(share[order], aspect="auto", interpolation="nearest", cmap=cmap, vmin=0, vmax=1,
                     extent=(edges[0], edges[-1], n - 0.5, -0.5))
    # the colour bar beside the heatmap alone, not taking width from it (both panels keep one x scale)
    cb = fig.colorbar(img, cax=ax1.inset_axes([1.01, 0.0, 0.012, 1.0]))
    percent_axis(cb.ax.yaxis)
    cb.ax.tick_params(labelsize=7)
    if named:
        ax1.set_yticks(range(n), [short(labels[i], 44) + ("  (no limit)" if not has_limit[i] else f"  {overall[i]:.0%}")
                                  for i in order], fontsize=8)
        ax1.set_title(f"{whose}time at the prefetch limit, per consumer (the number: over its whole life; "
                      "grey: not consuming)", fontsize=9, loc="left")
    else:
        ax1.set_yticks([0, n - 1], ["worst", f"{n:,}th"], fontsize=8)
        ax1.set_ylabel(f"{n:,} consumers, one row each", fontsize=8)
        worst = [f"{short(labels[i], 32)} {overall[i]:.0%}" for i in order[:2] if overall[i] > 0]
        ax1.set_title(f"{whose}time at the prefetch limit, {n:,} consumers, worst first"
                      + (f" ({'; '.join(worst)})" if worst else ": none reached its limit"), fontsize=9, loc="left")

    x = edges[:-1]
    if n <= MAX_NAMED:
        for j, i in enumerate(order):
            ax2.step(x, unacked[i], where="post", color=f"C{j}", lw=1.2, label=short(labels[i], 44))
            if prefetch[i] > 0:
                ax2.axhline(prefetch[i], color=f"C{j}", ls=":", lw=1)
        ax2.set_title("unacked messages, mean per time bin (dotted: prefetch)", fontsize=9, loc="left")
    else:
        lo, med, hi = nan_stats(unacked, [10, 50, 90])
        ax2.fill_between(x, lo, hi, step="post", color="C0", alpha=0.25, lw=0, label="10th–90th percentile")
        ax2.step(x, med, where="post", color="C0", lw=1.2, label=f"median of {n:,} consumers")
        limits = np.unique(prefetch[prefetch > 0])
        for p in {float(limits[0]), float(limits[-1])} if len(limits) else ():
            ax2.axhline(p, color="grey", ls=":", lw=1)
        ax2.set_title("unacked messages per consumer, mean per time bin (dotted: prefetch"
                      + (f" {plain(limits[0])} to {plain(limits[-1])}" if len(limits) > 1 else "") + ")",
                      fontsize=9, loc="left")
    ax2.set_ylim(0, max(float(np.nanmax(prefetch, initial=0)), float(np.nanmax(unacked, initial=0)), 1) * 1.15)
    plain_axis(ax2.yaxis)
    ax2.set_ylabel("messages")
    ax2.set_xlabel("seconds since capture start")
    ax2.legend(fontsize=7, loc="upper right")
    ax2.set_xlim(edges[0], edges[-1])
    fig.savefig(path, dpi=100, bbox_inches="tight")
