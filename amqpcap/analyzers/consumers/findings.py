"""The consumers analyzer's findings, each told only when its mechanism was at work: consumer-bound,
prefetch-one, unlimited-prefetch (docs/findings.md); which consumers each is about and how severe
(`_flags`), and the frames that show them (`_limit_rows`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...analysis.registry import SEVERITIES, Finding
from ...io.load import Capture
from ...derive.columns import as_object, codes
from ...derive.labels import channels_filter
from ...derive.methods import chan_key
from ...derive.rates import msgs_per_span_s
from ...model.display_filters import covered_filter, filter_evidence, stream_filter
from ...derive.names import connection_label, consumer_label, number, worst_first
from ...derive.tally import CONSUMER_KEY
from .constants import (
    BACKLOG_GROWTH_MSGS, BACKLOG_GROWTH_RATIO, CONSUMER_BOUND_SHARE, CONSUMER_DOMINANCE, EXAMPLE_SUBJECTS,
    MIN_DELIVERIES, ONE_ACK_PER_MESSAGE_SHARE, PREFETCH_ONE_MIN_RATE_PER_S, PREFETCH_ONE_WARNING_SHARE_AT_LIMIT,
    UNLIMITED_UNACKED)
from .summary import _runs


def consumer_bound_severity(growth, growth_ratio, estimated) -> np.ndarray:
    """consumer-bound's severity per consumer as a rank (SEVERITIES): warning; critical when its
    queue grew by at least BACKLOG_GROWTH_MSGS messages and BACKLOG_GROWTH_RATIO times the rate
    its consumers took messages (unknown growth counts as none); info when the prefetch is an
    estimate. Non-decreasing in ``growth`` and ``growth_ratio`` (tests/analyzers/test_grouping.py)."""
    growth = np.nan_to_num(np.asarray(growth, dtype=float), nan=-np.inf)
    ratio = np.nan_to_num(np.asarray(growth_ratio, dtype=float), nan=-np.inf)
    critical = (growth >= BACKLOG_GROWTH_MSGS) & (ratio >= BACKLOG_GROWTH_RATIO)
    return np.where(np.asarray(estimated, dtype=bool), 0, np.where(critical, 2, 1))


def _growth_ratio(s: pd.DataFrame, growth: np.ndarray) -> np.ndarray:
    """Per consumer: its queue's backlog `growth` per second of its life over the summed delivery
    rates of all the queue's consumers, each per second of its life too (`msgs_per_span_s`: the
    growth and what was taken compared over one span, not `delivered_msgs_per_s`, which leaves
    idle time out; a consumer without a known queue: its own rate)."""
    life = (s["end_ts"] - s["start_ts"]).dt.total_seconds().to_numpy(float)
    rate = pd.Series(msgs_per_span_s(s["deliveries"].to_numpy(float), life), index=s.index).fillna(0)
    queue = s["queue"].astype(object)
    taken = rate.groupby(queue.fillna("")).transform("sum").where(queue.notna(), rate).to_numpy(float)
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
    ratio = _growth_ratio(s, growth)
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


def _limit_rows(st: pd.DataFrame) -> pd.DataFrame:
    """Example packets of every consumer of the state rows `st`: the first 5 frames at which it
    was at its limit (any epoch of its channel), found on the state rows' consumer codes
    (`_runs`). Columns: stream, channel, consumer_tag, packet."""
    st_code, keys = _runs(st)
    k3_code = codes(*(keys[k].to_numpy() for k in CONSUMER_KEY))  # (equal across epochs)
    rows = np.flatnonzero(st["at_limit"].to_numpy(bool))
    c = k3_code[st_code[rows]]
    rows = rows[pd.Series(c).groupby(c).cumcount().to_numpy() < 5]
    return as_object(st[CONSUMER_KEY].iloc[rows], "consumer_tag").assign(packet=st["packet"].to_numpy(np.int64)[rows])


def _findings(cap: Capture, s: pd.DataFrame, slow: np.ndarray, limits: pd.DataFrame) -> list[Finding]:
    """One consumer-bound and one prefetch-one finding at most, each listing its consumers as
    subjects, worst first (severity, then impact). `slow`: see `_flags`; `limits`: `_limit_rows`."""
    if len(s) == 0:
        return []
    fl = _flags(s, slow)
    out = []
    for flag, told in (("bound", _bound), ("one", _prefetch_one)):
        sel = fl[flag].to_numpy(bool)
        if not sel.any():
            continue
        # worst first; ties in capture order (stream, channel: the order of s)
        g = s.loc[sel].assign(sev_rank=fl.loc[sel, f"{flag}_rank"], impact=fl.loc[sel, f"{flag}_impact"],
                              one_ack=fl.loc[sel, "one_ack"], growth_ratio=fl.loc[sel, "growth_ratio"])
        g = g.sort_values(["sev_rank", "impact"], ascending=False, kind="stable")
        out.append(told(cap, g, worst_first(cap, g, _numbers).subjects, limits))
    return out


def _numbers(r) -> dict:
    """A consumer's subject (a flagged row of consumer_summary): where it is, then its numbers."""
    return dict(
        channel=int(r.channel), queue=None if pd.isna(r.queue) else str(r.queue), consumer_tag=str(r.consumer_tag),
        prefetch_msgs=int(r.prefetch), prefetch_estimated=bool(r.prefetch_estimated), deliveries=int(r.deliveries),
        delivered_msgs_per_s=number(r.delivered_msgs_per_s), share_at_limit=number(r.share_at_limit),
        deliver_to_ack_p50_s=number(r.deliver_to_ack_p50_s), ack_to_next_deliver_p50_s=number(r.ack_to_next_deliver_p50_s),
        messages_per_ack=number(r.messages_per_ack), backlog_growth_msgs=_count(r.backlog_growth_msgs),
        backlog_growth_ratio=number(r.growth_ratio), severity=SEVERITIES[int(r.sev_rank)])


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


#: the worst consumer's numbers (of its subject, `_numbers`) that every consumer finding's evidence gives
WORST = ("channel", "consumer_tag", "prefetch_msgs", "prefetch_estimated", "deliveries", "delivered_msgs_per_s",
         "share_at_limit", "deliver_to_ack_p50_s", "ack_to_next_deliver_p50_s")


def _common_evidence(g: pd.DataFrame, worst: dict, methods: str, limits: pd.DataFrame) -> dict:
    """Evidence every consumer finding carries: the worst consumer's numbers (its subject),
    totals over all subjects, the streams, example packets (`limits`) and the filter."""
    examples = pd.MultiIndex.from_frame(as_object(g.head(EXAMPLE_SUBJECTS)[CONSUMER_KEY], "consumer_tag"))
    packets = limits["packet"].to_numpy(np.int64)[pd.MultiIndex.from_frame(limits[CONSUMER_KEY]).isin(examples)]
    return {"streams": sorted({int(x) for x in g["stream"]}), **{k: worst[k] for k in WORST},
            "consumers_with_this_finding": int(len(g)),
            "queues": sorted({str(q) for q in g["queue"].dropna()}),
            "deliveries_total": int(g["deliveries"].sum()),
            "delivered_msgs_per_s_total": float(g["delivered_msgs_per_s"].astype(float).fillna(0).sum()),
            "packets": sorted(int(p) for p in packets),
            **filter_evidence(channels_filter(g["stream"], g["channel"]),
                              f" && amqp.method.class == 60 && amqp.method.method in {methods}")}


def _count(v) -> int | None:
    return None if pd.isna(v) else int(v)


def _ms(v) -> str:
    return "?" if v is None or pd.isna(v) else f"{float(v) * 1e3:.1f} ms"


def _bound(cap: Capture, g: pd.DataFrame, subjects: list[dict], limits: pd.DataFrame) -> Finding:
    """consumer-bound of the consumers `g` (worst first)."""
    w = g.iloc[0]
    who, worst = _who(cap, g)
    growth = _count(g["backlog_growth_msgs"].astype("Float64").max())  # (a lower bound per consumer's life)
    # (the refill time matters, and is said, only at prefetch 1: see _flags)
    holds = f"holds each message a median {_ms(w.deliver_to_ack_p50_s)}" + (
        f" while the broker refills in {_ms(w.ack_to_next_deliver_p50_s)}" if w.prefetch == 1 else "")
    limit = (f"the highest unacked count seen ({w.prefetch}; no basic.qos in the capture)" if w.prefetch_estimated
             else f"its prefetch limit ({w.prefetch})")
    if len(g) == 1:
        title = f"The consumer is the bottleneck: {who} sat at {limit} {w.share_at_limit:.0%} of the time; it {holds}"
    else:
        sh = g["share_at_limit"].astype(float)
        lo, hi = f"{sh.min():.0%}", f"{sh.max():.0%}"
        span = lo if lo == hi else f"{lo}–{hi}"
        title = (f"{who} are the bottleneck, at their prefetch limit {span} of the time "
                 f"(worst: {worst}, {w.share_at_limit:.0%} at prefetch {w.prefetch}; it {holds})")
    if growth and growth > 0:
        title += f"; {'its' if len(g) == 1 else 'the'} queue grew by at least {growth:,} messages"
    whose = "this consumer's" if len(g) == 1 else "these consumers'"
    advice = (f"The broker waits for {whose} acks: look at the work per message (slow handlers, synchronous "
              "I/O, locks), add consumers or threads, and raise the prefetch if the work is I/O-bound. A growing "
              "queue means the consumers cannot keep up with the publish rate.")
    one = g[g["one_ack"].to_numpy(bool)]
    d50, a50 = (number(one[k].iloc[0]) if len(one) else None
                for k in ("deliver_to_ack_p50_s", "ack_to_next_deliver_p50_s"))
    if d50 and a50 is not None:
        # the consumer's rate is at most 1 / (d50 + a50) now, 1 / d50 with the refill hidden
        which = "" if len(g) == 1 else f" ({len(one)} of these consumers; numbers of the worst)"
        advice += (f" At prefetch 1 with one ack per message{which}, each message also waits for the ack's round "
                   f"trip and the broker's refill ({_ms(a50)} of each {_ms(d50 + a50)} cycle): a larger prefetch "
                   f"(e.g. 50–300) with multiple=true acks saves that, at most {a50 / d50:.0%} more messages per "
                   "second; the consumer's own work is the larger part.")
    ev = _common_evidence(g, subjects[0], "{60, 80, 90, 120}", limits)
    ev.update(mean_unacked_msgs=number(w.mean_unacked), utilisation=number(w.utilisation),
              backlog_growth_msgs=_count(w.backlog_growth_msgs), backlog_growth_ratio=number(w.growth_ratio),
              prefetch_one_consumers=len(one))
    return Finding("consumer-bound", SEVERITIES[int(g["sev_rank"].max())], title, ev, advice,
                   impact=float(g["impact"].max()), subjects=subjects)


def _prefetch_one(cap: Capture, g: pd.DataFrame, subjects: list[dict], limits: pd.DataFrame) -> Finding:
    """prefetch-one of the consumers `g` (worst first)."""
    w = g.iloc[0]
    who, worst = _who(cap, g)
    d50, a50 = number(w.deliver_to_ack_p50_s), number(w.ack_to_next_deliver_p50_s)
    cycle = (d50 or 0) + (a50 or 0)
    if len(g) == 1:
        title = (f"Prefetch 1 with one ack per message: {who} gets {w.delivered_msgs_per_s:.0f} msg/s while active, "
                 f"one at a time, each waiting for the previous ack ({w.share_at_limit:.0%} of its time at the limit)")
    else:
        title = (f"Prefetch 1 with one ack per message: {who} get their messages one at a time, each waiting "
                 f"for the previous ack (worst: {worst}, {w.delivered_msgs_per_s:.0f} msg/s while active, "
                 f"{w.share_at_limit:.0%} of its time at the limit)")
    advice = ("Raise the prefetch (basic.qos prefetch_count, e.g. 50–300) so the broker keeps messages "
              "in flight while the consumer works, and ack with multiple=true every few messages; "
              "keep prefetch 1 only where strict one-at-a-time fairness between slow consumers matters.")
    ev = _common_evidence(g, subjects[0], "{10, 60, 80}", limits)
    ev.update(acks=int(w.acks), messages_per_ack=number(w.messages_per_ack), cycle_s=cycle,
              max_rate_msgs_per_s=(1 / cycle) if cycle > 0 else None)
    return Finding("prefetch-one", SEVERITIES[int(g["sev_rank"].max())], title, ev, advice,
                   impact=float(g["impact"].max()), subjects=subjects)


def _unlimited(c: pd.DataFrame, s: pd.DataFrame, d: pd.DataFrame, zero: pd.DataFrame) -> pd.DataFrame:
    """The consumers without a prefetch limit (consumer_list: prefetch 0 and no global qos, or
    no-ack; a consumer whose basic.consume is not in the capture is unknown, never unlimited)
    with at least MIN_DELIVERIES deliveries: `c` (consumer_list's rows of the basic.consume
    frames) with their deliveries, first and last (ts_first, ts_last), max_unacked (acking ones,
    of the summary `s`), deliver_to_ack_p50_s (of the deliveries `d`), zero_windows (packets of
    the consumer's connection advertising a zero receive window between its first and last
    delivery, of `zero`: `_zero_windows`) and zero_window_packet (the first)."""
    unl = c["consume_seen"].to_numpy(bool) & (c["no_ack"].to_numpy(bool, na_value=False) | (
        (c["prefetch"].to_numpy(float, na_value=-1) == 0) & (c["channel_prefetch"].fillna(0).to_numpy(float) == 0)))
    c = as_object(c[unl], "consumer_tag", "queue")
    per = as_object(d[CONSUMER_KEY + ["ts", "latency_s"]], "consumer_tag").groupby(CONSUMER_KEY, sort=False).agg(
        deliveries=("ts", "size"), ts_first=("ts", "min"), ts_last=("ts", "max"),
        deliver_to_ack_p50_s=("latency_s", "median")).reset_index()
    c = c.merge(per, on=CONSUMER_KEY, how="inner")
    c = c[c["deliveries"] >= MIN_DELIVERIES]
    acking = as_object(s[CONSUMER_KEY + ["max_unacked"]], "consumer_tag").groupby(CONSUMER_KEY)["max_unacked"].max()
    c = c.merge(acking.reset_index(), on=CONSUMER_KEY, how="left").reset_index(drop=True)
    # per consumer, its connection's zero windows between its first and last delivery: two
    # binary searches of (connection, time) among the zero-window packets
    z = zero.sort_values(["stream", "ts"], kind="stable")
    zs, zt, zp = (z[k].to_numpy(np.int64) for k in ("stream", "ts", "packet"))
    cs = c["stream"].to_numpy(np.int64)
    first, end = np.searchsorted(zs, cs, "left"), np.searchsorted(zs, cs, "right")

    def at(col: str, side: str) -> np.ndarray:  # (among its connection's zero windows, by time)
        t = pd.to_datetime(c[col], utc=True).array.asi8
        return np.array([a + np.searchsorted(zt[a:b], x, side) for a, b, x in zip(first, end, t)], dtype=np.int64)

    lo = at("ts_first", "left")
    n = at("ts_last", "right") - lo
    return c.assign(zero_windows=n, zero_window_packet=[int(zp[i]) if k else None for i, k in zip(lo, n)])


def _unlimited_finding(cap: Capture, c: pd.DataFrame) -> Finding | None:
    """unlimited-prefetch: consumers without a prefetch limit that fell behind (UNLIMITED_UNACKED
    unacked, or a zero receive window), most unacked first, ties in `consumer_list`'s order (by
    queue, connection, channel). `c`: every partition's `_unlimited` rows, named."""
    unacked = c["max_unacked"].astype("Float64").fillna(0).to_numpy(float)
    c = c.assign(unacked_peak=unacked)[(unacked >= UNLIMITED_UNACKED) | (c["zero_windows"].to_numpy() > 0)]
    if not len(c):
        return None
    c = c.sort_values(["queue", "connection", "channel"], na_position="last", kind="stable").sort_values(
        ["unacked_peak", "zero_windows", "deliveries"], ascending=False, kind="stable")
    w, _, subjects = worst_first(cap, c, lambda r: dict(
        channel=int(r.channel), queue=None if pd.isna(r.queue) else str(r.queue), consumer_tag=str(r.consumer_tag),
        no_ack=bool(r.no_ack), deliveries=int(r.deliveries), max_unacked_msgs=None if r.no_ack else int(r.unacked_peak),
        deliver_to_ack_p50_s=None if r.no_ack else number(r.deliver_to_ack_p50_s),
        zero_window_packets=int(r.zero_windows), severity="warning"))
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
    part = channels_filter(c["stream"], c["channel"])
    flt = part.text + " && amqp.method.class == 60 && amqp.method.method in {10, 20, 60, 80}"
    if c["zero_windows"].any():  # (its streams are some of part's: part's coverage tells)
        flt = f"({flt}) || ({stream_filter(c.loc[c['zero_windows'] > 0, 'stream'])} && tcp.analysis.zero_window)"
    worst = subjects[0]  # (its numbers, and the prefetch it had)
    evidence = {"streams": sorted({int(x) for x in c["stream"]}),
                **{k: worst[k] for k in ("channel", "consumer_tag", "queue", "no_ack")},
                "prefetch_msgs": None if w.no_ack else 0,
                **{k: worst[k] for k in ("deliveries", "max_unacked_msgs", "deliver_to_ack_p50_s", "zero_window_packets")},
                "consumers_with_this_finding": int(len(c)), "packets": packets, **covered_filter(flt, part)}
    return Finding(
        id="unlimited-prefetch", severity="warning", title=title, evidence=evidence,
        advice="Set a prefetch limit (basic.qos prefetch_count; RabbitMQ's Consumer Prefetch guide finds 100-300 "
               "usually optimal) and ack manually: without one the broker pushes the whole queue into the "
               "client, whose memory grows with it, messages wait in the client instead of in the queue where "
               "other consumers could take them, and a crash redelivers all of them at once. With no-ack there "
               "is no limit at all: the client's TCP buffers are the only brake.",
        impact=float(min(1.0, max(unacked.max(initial=0) / (10 * UNLIMITED_UNACKED), 0.5))), subjects=subjects)
