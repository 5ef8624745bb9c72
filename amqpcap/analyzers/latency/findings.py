"""The latency analyzer's findings from the merged per-channel rows: broker-slow-refill and
redelivery-loop, one finding each with every such channel a subject (docs/findings.md).
"""

from __future__ import annotations

import pandas as pd

from ...analysis.registry import SEVERITIES, Finding
from ...io.load import Capture
from ...derive.labels import channels_filter
from ...model.display_filters import filter_evidence
from ...derive.names import connection_label, consumer_label, number, worst_first, worst_title


def _place(cap: Capture, stream, channel, queue) -> str:
    """A channel named for a title: `queue Q on conn` (its deliveries' queue), else `conn channel N`."""
    if queue is not None and not pd.isna(queue) and str(queue):
        return consumer_label(cap, stream, queue)
    return f"{connection_label(cap, stream)} channel {int(channel)}"


def _refill_findings(cap: Capture, per: pd.DataFrame) -> list[Finding]:
    """broker-slow-refill: one finding listing every channel of `per` (`_refill_rows` of the
    whole capture), worst first."""
    if len(per) == 0:
        return []
    per = per.sort_values(["sev_rank", "broker_share_of_cycle"], ascending=False, kind="stable")
    told = worst_first(cap, per, lambda r: dict(
        channel=int(r.channel), queue=_text(r.queue), refills=int(r.refills),
        ack_to_next_deliver_p50_s=float(r.ack_to_next_deliver_p50_s),
        ack_to_next_deliver_p90_s=float(r.ack_to_next_deliver_p90_s), deliver_to_ack_p50_s=number(r.deliver_to_ack_p50_s),
        broker_share_of_cycle=float(r.broker_share_of_cycle), backlog_min_median_msgs=float(r.backlog_min_median_msgs),
        severity=SEVERITIES[int(r.sev_rank)]))
    w, n = told.worst, told.n
    where = _place(cap, w.stream, w.channel, w.queue)
    own = "" if pd.isna(w.deliver_to_ack_p50_s) else \
        f" (the consumer's own deliver→ack median is {w.deliver_to_ack_p50_s * 1e3:.1f} ms)"
    numbers = (f"the next delivery comes a median {w.ack_to_next_deliver_p50_s * 1e3:.1f} ms after an ack although "
               f"messages were waiting{own}")
    title = worst_title(n, f"Broker slow to refill on {where}",
                        f"Broker slow to refill on {n} channels{_queues_text(per['queue'])}", where, numbers)
    return [Finding(
        id="broker-slow-refill", severity=SEVERITIES[int(per["sev_rank"].max())], title=title,
        evidence={
            "ack_to_next_deliver_p50_s": float(w.ack_to_next_deliver_p50_s),
            "ack_to_next_deliver_p90_s": float(w.ack_to_next_deliver_p90_s),
            "ack_to_next_deliver_max_s": float(w.ack_to_next_deliver_max_s), "refills": int(w.refills),
            "deliver_to_ack_p50_s": number(w.deliver_to_ack_p50_s),
            "broker_share_of_cycle": float(w.broker_share_of_cycle),
            "backlog_min_median_msgs": float(w.backlog_min_median_msgs),
            "channels_with_this_finding": n, "queues": sorted({str(q) for q in per["queue"].dropna()}),
            "streams": sorted({int(s) for s in per["stream"]}), "channel": int(w.channel),
            "packets": list(w.worst_packets),
            **filter_evidence(channels_filter(per["stream"], per["channel"]),
                              " && amqp.method.class == 60 && amqp.method.method in {60, 80, 90, 120}"),
        },
        advice="The consumer acks quickly but the broker sends the next message late although the queue has "
               "messages: check the broker's load (CPU, queue process, disk for persistent/quorum queues, "
               "memory or disk alarms), the number of queues and consumers per node, and the network "
               "between broker and consumer. A larger prefetch (e.g. 50–300) hides the refill delay by "
               "keeping messages in flight.",
        impact=float(per["broker_share_of_cycle"].max()), subjects=told.subjects)]


def _text(v) -> str | None:
    return None if v is None or pd.isna(v) else str(v)


def _queues_text(queues: pd.Series) -> str:
    """` of queue Q` / ` of 3 queues` for a grouped title ("" when no queue is known)."""
    q = queues.dropna().unique()
    return f" of queue {q[0]}" if len(q) == 1 else f" of {len(q)} queues" if len(q) else ""


def _redelivery_findings(cap: Capture, per: pd.DataFrame) -> list[Finding]:
    """redelivery-loop: one finding listing every channel of `per` (`_redelivery_rows` of the
    whole capture), worst first."""
    if len(per) == 0:
        return []
    per = per.sort_values(["sev_rank", "share"], ascending=False, kind="stable")
    told = worst_first(cap, per, lambda r: dict(
        channel=int(r.channel), queue=_text(r.queue), deliveries=int(r.deliveries), redelivered=int(r.redelivered),
        requeued_by_nack=int(r.requeued_by_nack), requeued_by_reject=int(r.requeued_by_reject),
        dropped_by_nack_or_reject=int(r.dropped), bouncing_share=float(r.share), severity=SEVERITIES[int(r.sev_rank)]))
    w, n = told.worst, told.n
    where = _place(cap, w.stream, w.channel, w.queue)
    numbers = (f"{w.redelivered} of {w.deliveries} deliveries are redeliveries and {w.requeued} were requeued by "
               "nack/reject")
    title = worst_title(n, f"Messages bouncing on {where}",
                        f"Messages bouncing on {n} channels{_queues_text(per['queue'])}", where, numbers)
    return [Finding(
        id="redelivery-loop", severity=SEVERITIES[int(per["sev_rank"].max())], title=title,
        evidence={
            "deliveries": int(w.deliveries), "redelivered": int(w.redelivered),
            "redelivered_share": float(w.redelivered / w.deliveries),
            "requeued_by_nack": int(w.requeued_by_nack), "requeued_by_reject": int(w.requeued_by_reject),
            "dropped_by_nack_or_reject": int(w.dropped),
            "channels_with_this_finding": n, "queues": sorted({str(q) for q in per["queue"].dropna()}),
            "deliveries_total": int(per["deliveries"].sum()), "redelivered_total": int(per["redelivered"].sum()),
            "streams": sorted({int(s) for s in per["stream"]}), "channel": int(w.channel),
            "packets": list(w.example_packets),
            **filter_evidence(channels_filter(per["stream"], per["channel"]),
                              " && (amqp.method.arguments.redelivered == 1 || (amqp.method.class == 60 && "
                              "amqp.method.method in {90, 120} && amqp.method.arguments.requeue == 1))"),
        },
        advice="The consumer rejects or nacks messages with requeue=true and gets them back: a poisoned "
               "message can loop forever. Requeue only transient failures, reject others with "
               "requeue=false to a dead-letter exchange (x-dead-letter-exchange), and cap retries "
               "(quorum queues: x-delivery-limit).",
        impact=float(per["share"].max()), subjects=told.subjects)]
