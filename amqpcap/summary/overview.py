"""What happened, in the numbers an operator reads first: how long, who published and who
consumed, messages per second per queue and per consumer, whether a queue grew, and the verdict.

`overview(cap, results)` is the top of report.html and ``overview`` in summary.json
(docs/summary.md). Rates are `amqpcap.derive.rates`' and named by their span: ``…_per_capture_s``
(the count over the capture's duration: one window for every rate, so a queue's publish,
deliver and ack rates compare directly and consumers' rates add up to their queue's) and, per
consumer, also ``delivered_msgs_per_s`` (per second active: between its first and last
delivery, the number its consumers and latency tables show).

Publishes name an exchange and a routing key, not a queue. A publish is counted for a queue
only where the capture shows the route (AMQP 0-9-1 §3.1.3):

- the default exchange ``""`` routes to the queue named by the routing key; a routing key
  ``amq.rabbitmq.reply-to.…`` is RabbitMQ's direct reply-to, delivered to the consumer of
  the pseudo-queue ``amq.rabbitmq.reply-to`` (it holds no messages: no growth for it);
- a ``queue.bind`` in the capture (exchange, binding key without the topic wildcards ``*`` and
  ``#``, queue) routes publishes with that routing key, when the exchange is direct, topic or
  fanout (the capture does not show exchange types; a headers exchange ignores the key).

Every other publish stays under its exchange and routing key (``publishes``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..analysis.registry import AnalyzerResult
from ..io.load import Capture
from ..analysis.consequences import settled
from ..derive.rates import capture_s, msgs_per_capture_s, msgs_per_s_active
from ..derive.names import consumer_label
from ..derive.tally import Tally, amqp10_frame_count, capture_tally, frame_count, lossy_streams, rate_edges
from ..model.wording import counted

#: rows of the per queue, per publish destination and per consumer lists (the busiest)
MAX_ROWS = 10
REPLY_TO = "amq.rabbitmq.reply-to"
ROLES = ("publisher", "consumer", "both", "idle", "amqp-1.0")


def overview(cap: Capture, results: list[AnalyzerResult]) -> dict[str, Any]:
    """JSON-ready overview of the capture (see the module doc and docs/summary.md), from its
    tally (`amqpcap.derive.tally`: counted per partition and added)."""
    duration = capture_s(cap.summary)
    rate = _rate(duration)
    t = capture_tally(cap)
    pubs = t.publishes
    routed = _routed(pubs, _routes(t))
    lossy = lossy_streams(cap)
    roles = t.roles.value_counts()
    published = int(pubs["published"].sum()) + t.amqp10_published
    delivered, acked = t.delivered + t.amqp10_delivered, t.acked + t.amqp10_acked
    out: dict[str, Any] = {
        "duration_s": duration,
        "connections": {"total": int(len(cap.connections)), **{r: int(roles.get(r, 0)) for r in ROLES}},
        # AMQP 1.0's messages counted in as 0-9-1's (`amqpcap.derive.amqp10.messages`): one count
        # of messages whatever the protocol, the same as the throughput timeline's
        "published": published, "published_msgs_per_capture_s": rate(published),
        "delivered": delivered, "delivered_msgs_per_capture_s": rate(delivered),
        "acked": acked, "acked_msgs_per_capture_s": rate(acked),
        "no_ack_delivered": t.no_ack_delivered + t.amqp10_presettled_delivered,
        "queues": _queues(t, routed, lossy, rate),
        "connections_with_lost_bytes": int(len(lossy)),
    }
    out["publish_destinations"], out["publishes"] = _destinations(pubs, routed, rate)
    out["consumers_total"], out["consumers"] = _consumers(cap, t.consumers, results, rate)
    out["verdict"] = _verdict(results, out)
    out["story"] = story(out)
    return out


def _rate(duration: float):
    """Per second of capture (`msgs_per_capture_s`) over `duration`."""
    return lambda n: msgs_per_capture_s(n, duration)


def _routes(t: Tally) -> pd.DataFrame:
    """(exchange, routing key, queue, routed_by) for the binds the capture shows (see module doc),
    less any unbound in it; the default exchange and direct reply-to are added per publish."""
    cols = ["exchange", "routing_key", "queue"]
    b = t.binds[~t.binds["routing_key"].str.contains(r"[*#]", regex=True)].drop_duplicates()
    b = b.merge(t.unbinds.drop_duplicates(), how="left", indicator=True)
    return b[b["_merge"] == "left_only"][cols].assign(routed_by="queue.bind")


def _routed(pubs: pd.DataFrame, binds: pd.DataFrame) -> pd.DataFrame:
    """Every (publish destination, queue) pair the capture justifies: published, returned."""
    default = pubs[pubs["exchange"] == ""]
    reply = default["routing_key"].str.startswith(REPLY_TO + ".")
    by_name = default.assign(queue=default["routing_key"].where(~reply, REPLY_TO),
                             routed_by=np.where(reply, "direct reply-to", "default exchange"))
    bound = pubs.merge(binds, on=["exchange", "routing_key"])  # each publish stream × each bound queue
    return pd.concat([by_name, bound], ignore_index=True)


def _queues(t: Tally, routed: pd.DataFrame, lossy: np.ndarray, rate) -> list[dict[str, Any]]:
    """Per queue: publishes routed to it, deliveries and acks from it, and its growth."""
    into = routed.assign(n=routed["published"] - routed["returned"], held=routed["stream"].isin(t.held_back),
                         lossy_in=routed["stream"].isin(lossy)).groupby("queue")
    out = t.queues.join(pd.DataFrame({"published": into["n"].sum(), "held": into["held"].sum(),
                                      "lossy_in": into["lossy_in"].sum()}), how="outer")
    out = out.fillna(0).astype(np.int64)
    out["routed_by"] = into["routed_by"].agg(lambda x: " and ".join(sorted(set(x))))  # per queue: few
    out = out.sort_values(["published", "delivered"], ascending=False, kind="stable")
    unattributed = t.unattributed
    rows = []
    for name, r in out.head(MAX_ROWS).iterrows():  # at most MAX_ROWS queues
        growth, basis = _growth(str(name), r, unattributed)
        rows.append({"queue": str(name), "published": int(r["published"]),
                     "published_msgs_per_capture_s": rate(r["published"]),
                     "routed_by": r["routed_by"] if isinstance(r["routed_by"], str) else None,
                     "delivered": int(r["delivered"]), "delivered_msgs_per_capture_s": rate(r["delivered"]),
                     "acked": int(r["acked"]), "acked_msgs_per_capture_s": rate(r["acked"]),
                     "growth_msgs": growth, "growth_basis": basis})
    return rows


def _growth(queue: str, r: pd.Series, unattributed: int) -> tuple[int | None, str]:
    """A queue's growth over the capture (published into it − delivered + requeued), stated only
    when the capture shows its publishers and every delivery's queue."""
    if queue == REPLY_TO:
        return None, "direct reply-to holds no messages"
    if r["published"] == 0:
        return None, "no publish routed to this queue is in the capture"
    if r["lossy_in"] or r["lossy_out"]:
        return None, ("the capture lost bytes of a connection publishing to or consuming from this queue: its "
                      "publishes or deliveries there are not all counted")
    if r["held"]:
        return None, ("the broker held back reading this queue's publishers (zero window or connection.blocked): "
                      "publishes it had not read yet at the end of the capture were not in the queue")
    if unattributed:
        return None, f"{unattributed:,} deliveries from queues the capture does not name (their basic.consume is not in it)"
    return int(r["published"] - r["delivered"] + r["requeued"]), (
        "published into the queue (" + str(r["routed_by"]) + ") minus delivered from it, requeued added back: "
        "at least this much if no consumer outside this capture took messages from it and none expired or "
        "overflowed")


def _destinations(pubs: pd.DataFrame, routed: pd.DataFrame, rate) -> tuple[int, list[dict[str, Any]]]:
    """(how many, the busiest): publish destinations (exchange, routing key) and the queues they reach."""
    key = ["exchange", "routing_key"]
    queues = routed.groupby(key)["queue"].agg(lambda x: sorted(set(x)))  # per destination routed: few
    per = pubs.groupby(key, as_index=False)[["published", "returned"]].sum()
    top = per.sort_values("published", ascending=False, kind="stable").head(MAX_ROWS)
    return int(len(per)), [
        {"exchange": e, "routing_key": k, "published": int(n), "published_msgs_per_capture_s": rate(n),
         "returned": int(ret),
         "queues": queues.get((e, k), [])}
        for e, k, n, ret in top[key + ["published", "returned"]].itertuples(index=False)]


def _consumers(cap: Capture, per_consumer: pd.DataFrame, results: list[AnalyzerResult],
               rate) -> tuple[int, list[dict[str, Any]]]:
    """(consumers in all, the busiest MAX_ROWS): deliveries per second of capture and per second
    active (`amqpcap.derive.rates`), acks per second of capture and prefetch each, named as
    names.consumer_label names them. A consumer is (stream, channel, consumer tag); basic.get
    deliveries count as one consumer per channel."""
    key = ["stream", "channel", "consumer_tag"]
    c = per_consumer.merge(_prefetch(results), on=key, how="left").sort_values(["delivered", "stream"],
                                                                                ascending=[False, True])
    c = c.head(MAX_ROWS)  # at most MAX_ROWS consumers
    active = msgs_per_s_active(c["delivered"], c["first_ts"], c["last_ts"])
    rows = [{"consumer": consumer_label(cap, s, q, t), "stream": int(s), "channel": int(ch), "consumer_tag": t, "queue": q,
             "delivered": int(n), "delivered_msgs_per_capture_s": rate(n),
             "delivered_msgs_per_s": None if np.isnan(act) else float(act),
             "acked": int(a), "acked_msgs_per_capture_s": rate(a),
             "no_ack": bool(na), "prefetch": None if na or pd.isna(p) else int(p)}
            for (s, ch, t, n, a, na, q, p), act in zip(c[key + ["delivered", "acked", "no_ack", "queue", "prefetch"]]
                                                       .itertuples(index=False), active)]
    return int(len(c)), rows


def _prefetch(results: list[AnalyzerResult]) -> pd.DataFrame:
    """Each consumer's prefetch as the consumers analyzer found it (one source of truth)."""
    key = ["stream", "channel", "consumer_tag"]
    for r in results:
        t = r.tables.get("consumers") if r.name == "consumers" else None
        if t is not None and set(key + ["prefetch"]) <= set(t.columns):
            t = t[key + ["prefetch"]].astype({"consumer_tag": object})
            return t.drop_duplicates(key, keep="last")
    return pd.DataFrame({"stream": pd.Series(dtype=np.int64), "channel": pd.Series(dtype=np.int64),
                         "consumer_tag": pd.Series(dtype=object), "prefetch": pd.Series(dtype="Int64")})


def _verdict(results: list[AnalyzerResult], o: dict[str, Any]) -> dict[str, Any]:
    """The worst problem's title (a warning or critical finding), or "no problem found" with the
    capture's main numbers; info findings are notes, counted but never the verdict."""
    findings = settled(results)
    problems = [f for f in findings if f.severity != "info"]
    notes = len(findings) - len(problems)
    if problems:
        w = problems[0]
        return {"severity": w.severity, "finding": w.id, "problems": len(problems), "notes": notes, "text": w.title}
    return {"severity": None, "finding": None, "problems": 0, "notes": notes,
            "text": f"no problem found: {counted(o['connections']['total'], 'connection')}, "
                    f"{_num(o['published_msgs_per_capture_s'])} msgs/s published, "
                    f"{_num(o['delivered_msgs_per_capture_s'])} delivered"}


def _num(v: float | None) -> str:
    """A rate for a sentence: 193, 12.5, 0.33."""
    if v is None:
        return "n/a"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def story(o: dict[str, Any]) -> str:
    """The overview in a few sentences (report.html's first paragraph)."""
    c = o["connections"]
    # "2 consumers", "1 idle", "3 publishing and consuming", "1 speaking AMQP 1.0"
    said = {"both": "publishing and consuming", "amqp-1.0": "speaking AMQP 1.0"}
    who = ", ".join(counted(c[r], r) if r in ("publisher", "consumer") else
                    f"{c[r]:,} {said.get(r, r)}" for r in ROLES if c[r])
    dur = f"{o['duration_s']:.1f} s" if o["duration_s"] >= 1 else f"{o['duration_s'] * 1e3:.0f} ms"
    text = [f"{dur}, {c['total']:,} connection{'s' if c['total'] != 1 else ''}"
            + (f" ({who})" if who else "") + "."]
    if o["published"] or o["delivered"]:
        # (a side with no message is not given a rate of 0: "Publishers sent 0 msg/s" reads as a stop)
        said = [f"Publishers sent {_num(o['published_msgs_per_capture_s'])} msg/s ({o['published']:,} messages)"
                ] if o["published"] else []
        if o["delivered"]:
            said.append(f"{'consumers' if said else 'Consumers'} were delivered "
                        f"{_num(o['delivered_msgs_per_capture_s'])} msg/s ({o['delivered']:,}) "
                        f"and acked {_num(o['acked_msgs_per_capture_s'])} msg/s"
                        + (f" ({o['no_ack_delivered']:,} deliveries were no-ack)" if o["no_ack_delivered"] else ""))
        else:
            said.append("none was delivered in the capture")
        text.append("; ".join(said) + ".")
    if o["connections_with_lost_bytes"]:
        text.append(f"The capture lost bytes of {counted(o['connections_with_lost_bytes'], 'connection')}: "
                    "their counts here are lower bounds.")
    for q in o["queues"][:3]:
        if q["growth_msgs"] is not None and q["growth_msgs"] > 0:
            text.append(f"Queue {q['queue']} took in {_num(q['published_msgs_per_capture_s'])} msg/s and gave out "
                        f"{_num(q['delivered_msgs_per_capture_s'])} msg/s: it grew by at least {q['growth_msgs']:,} "
                        "messages.")
    return " ".join(text)


def rate_bins(cap: Capture) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
    """Messages published, delivered and acked per time bin over the capture: (the bins' edges in
    seconds since the capture's start, {"published"|"delivered"|"acked": count per bin}), for the
    plot at the top of the report. None without packets, AMQP frames, publishes or deliveries."""
    edges = rate_edges(cap)
    if edges is None or not (frame_count(cap) or amqp10_frame_count(cap)):  # no packets, or no AMQP frame
        return None
    counts = capture_tally(cap).rates
    if not (counts["published"].any() or counts["delivered"].any()):
        return None
    return edges, counts
