"""The client habits RabbitMQ's documentation warns about, each told only when the wire shows it:
polling with basic.get, a transaction per message, unroutable mandatory publishes, consumers
the broker cancels, connection churn, waiting for each confirm, a channel per message.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ...analysis.registry import Finding
from ...io.load import Capture
from ...model.display_filters import filter_evidence, streams_part
from ...derive.names import connection_names, subject_namer, worst_first, worst_title
from ...model.reply_codes import NO_ROUTE, NOT_ALLOWED
from ...model.wording import reply_code
from .channels import _peak_per_s
from .constants import (
    CHANNEL_CHURN_MIN, CHANNEL_FEW_MESSAGES, CHANNEL_LEAK_SHARE, CHANNEL_WARN_OPENS_PER_S, CHURN_FEW_MESSAGES,
    CHURN_MAX_LIFETIME_S, CHURN_MIN_CONNECTIONS, CHURN_WARN_OPENS_PER_S, EXAMPLE_PACKETS, FILTER_CANCEL,
    FILTER_CHANNEL_OPEN, FILTER_CONFIRM, FILTER_GET, FILTER_OPEN, FILTER_RETURN, FILTER_TX, NO_CHANNEL_MAX,
    POLLING_EMPTY_SHARE, POLLING_MIN_GETS, POLLING_WARN_GETS_PER_S, PUBLISH_WAIT_MIN, PUBLISH_WAIT_SEQUENTIAL,
    PUBLISH_WAIT_SHARE, TX_MIN_COMMITS, TX_SMALL_BATCH, UNROUTABLE_WARN_RETURNS, UNROUTABLE_WARN_SHARE)


def _packets(examples: pd.DataFrame, stream: int, method: str) -> list[int]:
    e = examples[(examples["stream"] == stream) & (examples["method"] == method)]
    return sorted(int(p) for p in e["packet"])


def _severity(loud) -> str:
    """A client habit is a warning where it is loud (often, or costly), else worth knowing."""
    return "warning" if loud else "info"


def _where(per: pd.DataFrame, examples: pd.DataFrame, method: str, frames_filter: str) -> dict[str, Any]:
    """The evidence that locates a finding told of the connections `per` (worst first): how
    many, their streams, the worst one's first `method` packets, and the filter opening those
    connections' frames `frames_filter`."""
    return {"connections_with_this_finding": len(per), "streams": sorted(int(s) for s in per["stream"]),
            "packets": _packets(examples, int(per["stream"].iloc[0]), method),
            **filter_evidence(streams_part(per['stream']), f" && {frames_filter}")}


def _each_way(published: float, delivered: float, number: str = "g") -> str:
    """Messages with their direction, a number each way: "4.8 messages published", "1 message
    published and 1 delivered", "3 messages delivered" (delivered: basic.deliver and
    basic.get-ok). A connection that publishes and consumes the same message has it once each
    way: one number for both would count it twice."""
    ways = [(v, w) for v, w in ((published, "published"), (delivered, "delivered")) if v]
    if not ways:
        return "no messages"
    (v, w), *rest = ways
    head = f"{v:{number}} message{'' if v == 1 else 's'} {w}"
    return head + "".join(f" and {x:{number}} {y}" for x, y in rest)


def _polling_finding(cap: Capture, conns: pd.DataFrame, examples: pd.DataFrame) -> Finding | None:
    """polling-basic-get: connections that loop on basic.get, worst (most empty gets) first."""
    poll = conns[conns["gets"] >= POLLING_MIN_GETS]
    if len(poll) == 0:
        return None
    empty = poll["get_empty_share"].fillna(0.0)
    loud = (empty >= POLLING_EMPTY_SHARE) | (poll["get_rate_per_s"].fillna(0.0) >= POLLING_WARN_GETS_PER_S)
    poll = poll.assign(loud=loud, empty_part=empty).sort_values(["loud", "gets_empty", "gets"], ascending=False,
                                                             kind="stable")
    told = worst_first(cap, poll, lambda r: dict(
        gets=int(r.gets), gets_ok=int(r.gets_ok), gets_empty=int(r.gets_empty), get_empty_share=float(r.empty_part),
        get_rate_per_s=float(r.get_rate_per_s),
        get_round_trip_p50_s=None if pd.isna(r.get_round_trip_p50_s) else float(r.get_round_trip_p50_s),
        severity=_severity(r.loud)))
    w, n = told.worst, told.n
    rtt = w.get_round_trip_p50_s
    cap_note = "" if pd.isna(rtt) or rtt <= 0 else \
        f"; at {rtt * 1e3:.1f} ms a round trip, one channel gets at most {1 / rtt:,.0f} messages/s this way"
    numbers = (f"{int(w.gets):,} basic.get at {w.get_rate_per_s:.1f}/s, {w.empty_part:.0%} of them found the queue "
               f"empty{cap_note}")
    title = worst_title(n, f"{w.connection} polls with basic.get", f"{n} connections poll with basic.get",
                        w.connection, numbers)
    return Finding(
        id="polling-basic-get", severity=_severity(poll["loud"].any()), title=title,
        evidence={
            "gets": int(w.gets), "gets_ok": int(w.gets_ok), "gets_empty": int(w.gets_empty),
            "get_empty_share": float(w.empty_part), "get_rate_per_s": float(w.get_rate_per_s),
            "get_round_trip_p50_s": None if pd.isna(rtt) else float(rtt),
            "gets_total": int(poll["gets"].sum()), **_where(poll, examples, "basic.get", FILTER_GET),
        },
        advice="Consume with basic.consume and a prefetch window (basic.qos, e.g. 50-300) instead of polling: "
               "the broker pushes messages as they arrive, without a round trip per message and without "
               "asking an empty queue again and again. RabbitMQ's consumer guide calls polling with basic.get "
               "highly inefficient; prefetch does not apply to it.",
        impact=float(poll["empty_part"].max()),
        subjects=told.subjects)


def _transactions_finding(cap: Capture, conns: pd.DataFrame, examples: pd.DataFrame) -> Finding | None:
    """transactions: connections that commit AMQP transactions, smallest batches first."""
    tx = conns[conns["tx_commits"] >= TX_MIN_COMMITS]
    if len(tx) == 0:
        return None
    per = tx["publishes_per_commit"].fillna(0.0)
    loud = per <= TX_SMALL_BATCH
    tx = tx.assign(loud=loud, per_tx=per).sort_values(["loud", "tx_commits"], ascending=False, kind="stable")
    told = worst_first(cap, tx, lambda r: dict(
        tx_commits=int(r.tx_commits), tx_rollbacks=int(r.tx_rollbacks), publishes_in_tx=int(r.publishes_in_tx),
        publishes_per_commit=float(r.per_tx),
        commit_round_trip_p50_s=None if pd.isna(r.commit_round_trip_p50_s) else float(r.commit_round_trip_p50_s),
        severity=_severity(r.loud)))
    w, n = told.worst, told.n
    rtt = w.commit_round_trip_p50_s
    rate = "" if pd.isna(rtt) or rtt <= 0 else \
        f"; each commit waits {rtt * 1e3:.1f} ms for commit-ok, capping the channel at {w.per_tx / rtt:,.0f} messages/s"
    numbers = f"{int(w.tx_commits):,} tx.commit, {w.per_tx:.1f} publishes per transaction{rate}"
    title = worst_title(n, f"{w.connection} publishes in transactions", f"{n} connections publish in transactions",
                        w.connection, numbers)
    return Finding(
        id="transactions", severity=_severity(tx["loud"].any()), title=title,
        evidence={
            "tx_commits": int(w.tx_commits), "tx_rollbacks": int(w.tx_rollbacks),
            "publishes_in_tx": int(w.publishes_in_tx), "publishes_per_commit": float(w.per_tx),
            "commit_round_trip_p50_s": None if pd.isna(rtt) else float(rtt),
            **_where(tx, examples, "tx.commit", FILTER_TX),
        },
        advice="Use publisher confirms (confirm.select) instead of AMQP transactions: the broker then "
               "acknowledges publishes asynchronously while the client keeps publishing, with a window of "
               "outstanding confirms. RabbitMQ's documentation measures transactions as cutting throughput "
               "by a factor of 250. If transactions must stay, put many publishes in each.",
        impact=float(1.0 / max(float(w.per_tx), 1.0)), subjects=told.subjects)


def _unroutable_finding(cap: Capture, conns: pd.DataFrame, returns: pd.DataFrame,
                        examples: pd.DataFrame) -> Finding | None:
    """unroutable-messages: connections whose mandatory publishes came back, most returns first."""
    if len(returns) == 0:
        return None
    per = conns[conns["returns"] > 0].copy()
    per["returned_share"] = per["returns"] / per["publishes"].where(per["publishes"] > 0, 1)
    per["loud"] = (per["returns"] >= UNROUTABLE_WARN_RETURNS) & (per["returned_share"] >= UNROUTABLE_WARN_SHARE)
    per = per.sort_values(["loud", "returns"], ascending=False, kind="stable")
    told = worst_first(cap, per, lambda r: dict(returns=int(r.returns), publishes=int(r.publishes),
                                                returned_share=float(r.returned_share), severity=_severity(r.loud)))
    w, n = told.worst, told.n
    mine = returns[returns["stream"] == w.stream].sort_values("returns", ascending=False, kind="stable")
    top = mine.iloc[0]
    reply = reply_code(None if top.reply_code is None else int(top.reply_code),
                       None if top.reply_text is None else str(top.reply_text))
    numbers = (f"{int(w.returns):,} of its {int(w.publishes):,} publishes came back unroutable with {reply}, most to "
               f"exchange '{top.exchange}' with routing key '{top.routing_key}'")
    title = worst_title(n, f"{w.connection} publishes messages no queue takes",
                        f"{n} connections publish messages no queue takes", w.connection, numbers)
    dest = returns.groupby(["exchange", "routing_key"], sort=True)[["returns", "publishes"]].sum()
    dest = dest.sort_values("returns", ascending=False, kind="stable").reset_index()
    return Finding(
        id="unroutable-messages", severity=_severity(per["loud"].any()), title=title,
        evidence={
            "returns": int(w.returns), "publishes": int(w.publishes), "returned_share": float(w.returned_share),
            "exchange": str(top.exchange), "routing_key": str(top.routing_key),
            "reply_code": None if top.reply_code is None else int(top.reply_code),
            "reply_text": None if top.reply_text is None else str(top.reply_text),
            "destinations": [{"exchange": str(d.exchange), "routing_key": str(d.routing_key), "returns": int(d.returns),
                              "publishes": int(d.publishes)} for d in dest.itertuples()],
            "returns_total": int(per["returns"].sum()), **_where(per, examples, "basic.return", FILTER_RETURN),
        },
        advice=f"The broker returns these mandatory publishes with basic.return, {reply_code(NO_ROUTE)}: no queue is "
               "bound to the "
               "exchange with that routing key, so the messages are dropped. Declare and bind the queue the "
               "publisher expects (check the exchange name and routing key), or give the exchange an alternate "
               "exchange to catch what nothing takes. With publisher confirms the return comes before the ack: "
               "an acked message was not necessarily delivered to a queue.",
        impact=float(per["returned_share"].max()), subjects=told.subjects)


def _cancelled_finding(cap: Capture, cancels: pd.DataFrame) -> Finding | None:
    """consumer-cancelled: consumers the broker cancelled, those that did not subscribe again first.
    A cancel after the consumer's own connection deleted the queue is its own teardown: not told."""
    own = (cancels["deleted_by"] == cancels["stream"]).fillna(False).to_numpy(bool)
    if own.all():
        return None
    c = cancels[~own]
    c = c.assign(loud=~c["resubscribed"].to_numpy(bool))
    c = c.sort_values(["loud", "packet"], ascending=[False, True], kind="stable")
    told = worst_first(cap, c, lambda r: dict(
        channel=int(r.channel), consumer_tag=str(r.consumer_tag), queue=None if r.queue is None else str(r.queue),
        deleted_by_stream=None if r.deleted_by is None or pd.isna(r.deleted_by) else int(r.deleted_by),
        resubscribed=bool(r.resubscribed), severity=_severity(r.loud)))
    w, n = told.worst, told.n
    queue = f"queue {w.queue}" if w.queue else f"consumer {w.consumer_tag}"
    why = "" if w.deleted_by is None or pd.isna(w.deleted_by) else \
        f" after {connection_names(cap)['connection'].get(int(w.deleted_by), f'stream {int(w.deleted_by)}')} deleted the queue"
    then = "and it never subscribed again" if w.loud else "and it subscribed again"
    who = told.subjects[0]["connection"]
    title = (f"The broker cancelled the consumer of {queue} on {who}{why}, {then}" if n == 1 else
             f"The broker cancelled {n} consumers, {int(c['loud'].sum())} never subscribed again: first "
             f"{queue} on {who}{why}")
    t0 = cap.summary.get("first_ts")
    return Finding(
        id="consumer-cancelled", severity=_severity(c["loud"].any()), title=title,
        evidence={
            "cancels": n, "not_resubscribed": int(c["loud"].sum()),
            "queue": None if w.queue is None else str(w.queue), "consumer_tag": str(w.consumer_tag),
            "channel": int(w.channel), "resubscribed": bool(w.resubscribed),
            "deleted_by_stream": None if w.deleted_by is None or pd.isna(w.deleted_by) else int(w.deleted_by),
            "cancel_at_s": None if t0 is None else float((w.ts - t0).total_seconds()),
            "streams": sorted({int(s) for s in c["stream"]}),
            "packets": sorted(int(p) for p in c["packet"].head(EXAMPLE_PACKETS)),
            **filter_evidence(streams_part(c['stream']), f" && {FILTER_CANCEL}"),
        },
        advice="The broker cancelled these consumers itself (basic.cancel from the broker: their queue was deleted, "
               "or the node holding it went down). A consumer that does not handle the cancel notification "
               "silently stops receiving: subscribe again (after declaring the queue again if it was deleted), "
               "or fail loudly. Find who deletes the queue (an auto-delete or exclusive queue whose owner left, "
               "a TTL, or an operator) if it was not meant to go.",
        impact=float(c["loud"].mean()), subjects=told.subjects)


def _churn_finding(cap: Capture, conns: pd.DataFrame) -> Finding | None:
    """connection-churn: applications opening and closing many short-lived connections."""
    whole = conns[(conns["connection_opens"] > 0) & (conns["connection_close_oks"] > 0)]
    sizes = whole["application"].value_counts()
    whole = whole[whole["application"].isin(sizes.index[sizes >= CHURN_MIN_CONNECTIONS])]  # (few groups left)
    rows = []
    for app, g in whole.groupby("application", sort=True):
        if g["duration_s"].median() > CHURN_MAX_LIFETIME_S:
            continue
        opens = g["first_ts"].array.asi8
        span_s = (opens.max() - opens.min()) / 1e9
        msgs = g["publishes"] + g["deliveries"] + g["gets_ok"]
        peak = _peak_per_s(opens)
        published, delivered = float(g["publishes"].median()), float((g["deliveries"] + g["gets_ok"]).median())
        rows.append({"application": app, "connections": len(g), "opens_per_s_peak": peak,
                     "opens_per_s": (len(g) - 1) / span_s if span_s > 0 else None,
                     "lifetime_p50_s": float(g["duration_s"].median()),
                     "messages_per_connection_p50": float(msgs.median()),
                     "published_per_connection_p50": published, "delivered_per_connection_p50": delivered,
                     "loud": bool(msgs.median() <= CHURN_FEW_MESSAGES or peak >= CHURN_WARN_OPENS_PER_S),
                     "members": g.sort_values("first_ts")})
    if not rows:
        return None
    rows.sort(key=lambda r: (not r["loud"], -r["connections"]))
    w, n = rows[0], len(rows)
    rate = "" if w["opens_per_s"] is None else f" ({w['opens_per_s']:.1f}/s, at most {w['opens_per_s_peak']} in a second)"
    numbers = (f"{w['connections']:,} connections opened and closed{rate}, living {w['lifetime_p50_s'] * 1e3:,.0f} ms "
               f"and carrying {_each_way(w['published_per_connection_p50'], w['delivered_per_connection_p50'])} each "
               f"(medians)")
    title = worst_title(n, f"{w['application']} opens a connection per few messages",
                        f"{n} applications churn connections", w["application"], numbers)
    streams = sorted(int(s) for r in rows for s in r["members"]["stream"])
    # every churned connection a subject, application by application (worst first), in open order
    subject_of = subject_namer(cap)
    subjects = [subject_of(c.stream, application=r["application"], lifetime_s=float(c.duration_s),
                           messages=int(c.publishes + c.deliveries + c.gets_ok),
                           severity=_severity(r["loud"]))
                for r in rows for c in r["members"].itertuples()]
    applications = [{k: r[k] for k in ("application", "connections", "opens_per_s", "opens_per_s_peak", "lifetime_p50_s",
                                       "messages_per_connection_p50", "published_per_connection_p50",
                                       "delivered_per_connection_p50")} | {"severity": _severity(r["loud"])}
                    for r in rows]
    return Finding(
        id="connection-churn", severity=_severity(any(r["loud"] for r in rows)), title=title,
        evidence={
            "application": w["application"], "connections": w["connections"], "opens_per_s": w["opens_per_s"],
            "opens_per_s_peak": w["opens_per_s_peak"], "lifetime_p50_s": w["lifetime_p50_s"],
            "messages_per_connection_p50": w["messages_per_connection_p50"],
            "published_per_connection_p50": w["published_per_connection_p50"],
            "delivered_per_connection_p50": w["delivered_per_connection_p50"],
            "applications_with_this_finding": n, "applications": applications, "streams": streams,
            **filter_evidence(streams_part(streams), f" && {FILTER_OPEN}"),
        },
        advice="Open a connection once and keep it for the life of the process (one per application, with a "
               "channel per thread), instead of a connection per message or per task: each open costs a TCP "
               "handshake, an AMQP handshake with authentication and broker memory, and high churn loads the "
               "broker's CPU. RabbitMQ's Connections guide asks to investigate churn consistently above 100 "
               "connections/s.",
        impact=float(w["connections"]) / max(float(len(conns)), 1.0), subjects=subjects)


def _publish_wait_finding(cap: Capture, confirming: pd.DataFrame) -> Finding | None:
    """publish-and-wait: confirm-mode channels that publish one message at a time, each after the
    previous one's confirm, spending most of their time waiting; most waiting first."""
    c = confirming[(confirming["publishes"] >= PUBLISH_WAIT_MIN)
                   & (confirming["sequential_share"] >= PUBLISH_WAIT_SEQUENTIAL)
                   & (confirming["waiting_share"] >= PUBLISH_WAIT_SHARE)]
    if len(c) == 0:
        return None
    c = c.sort_values(["waiting_share", "publishes"], ascending=False, kind="stable")
    told = worst_first(cap, c, lambda r: dict(
        channel=int(r.channel), publishes=int(r.publishes), sequential_share=float(r.sequential_share),
        waiting_share=float(r.waiting_share), confirm_latency_p50_s=float(r.confirm_latency_p50_s),
        published_msgs_per_s=None if pd.isna(r.published_msgs_per_s) else float(r.published_msgs_per_s),
        severity="warning"))
    w, n = told.worst, told.n
    cap_rate = 1 / w.confirm_latency_p50_s if w.confirm_latency_p50_s > 0 else None
    limit = "" if cap_rate is None else f", which caps the channel at {cap_rate:,.0f} messages/s"
    numbers = (f"{int(w.publishes):,} publishes, each sent after the previous one's confirm ({w.sequential_share:.0%}); "
               f"{w.waiting_share:.0%} of the time goes to waiting {w.confirm_latency_p50_s * 1e3:.2f} ms per confirm"
               f"{limit}")
    who = told.subjects[0]["connection"]
    title = worst_title(n, f"{who} publishes and waits for each confirm", f"{n} channels publish and wait for each confirm",
                        who, numbers)
    return Finding(
        id="publish-and-wait", severity="warning", title=title,
        evidence={
            "publishes": int(w.publishes), "sequential_share": float(w.sequential_share),
            "waiting_share": float(w.waiting_share), "confirm_latency_p50_s": float(w.confirm_latency_p50_s),
            "max_rate_per_s": cap_rate,
            "published_msgs_per_s": None if pd.isna(w.published_msgs_per_s) else float(w.published_msgs_per_s),
            "channel": int(w.channel), "channels_with_this_finding": n,
            "streams": sorted({int(s) for s in c["stream"]}), "packets": [int(w.first_packet)],
            **filter_evidence(streams_part(c['stream']), f" && {FILTER_CONFIRM}"),
        },
        advice="Keep a window of outstanding confirms instead of waiting for each one: publish, and handle the "
               "broker's acks asynchronously (a confirm listener or callback), or publish a batch and wait for "
               "the batch's confirms. With one publish in flight the channel's rate is one message per confirm "
               "round trip; RabbitMQ's Publishers guide calls publish-and-wait an anti-pattern.",
        impact=float(c["waiting_share"].max()), subjects=told.subjects)


def _channel_churn_finding(cap: Capture, conns: pd.DataFrame, examples: pd.DataFrame) -> Finding | None:
    """channel-churn: connections opening a channel per operation (or 100 a second)."""
    msgs = conns["publishes"] + conns["deliveries"] + conns["gets_ok"]
    opened = conns["channels_opened"].where(conns["channels_opened"] > 0, 1)
    per = conns.assign(messages_per_channel=msgs / opened, published_per_channel=conns["publishes"] / opened,
                       delivered_per_channel=(conns["deliveries"] + conns["gets_ok"]) / opened)
    limit = per["channel_max"].astype("Float64").fillna(np.nan).to_numpy(float)
    limit = np.where(limit == 0, NO_CHANNEL_MAX, limit)
    per = per.assign(channel_max_share=per["channels_open_peak"] / limit)
    leak = (per["channel_max_share"] >= CHANNEL_LEAK_SHARE).to_numpy(bool)
    churn = ((per["channels_opened"] >= CHANNEL_CHURN_MIN)
             & ((per["messages_per_channel"] <= CHANNEL_FEW_MESSAGES)
                | (per["channel_opens_per_s_peak"] >= CHANNEL_WARN_OPENS_PER_S))).to_numpy(bool)
    per = per.assign(leak=leak)[churn | leak]
    if len(per) == 0:
        return None
    per = per.sort_values(["leak", "channels_opened", "stream"], ascending=[False, False, True], kind="stable")
    told = worst_first(cap, per, lambda r: dict(
        channels_opened=int(r.channels_opened), channel_opens_per_s_peak=int(r.channel_opens_per_s_peak),
        messages_per_channel=float(r.messages_per_channel),
        channel_open_round_trip_p50_s=None if pd.isna(r.channel_open_round_trip_p50_s)
        else float(r.channel_open_round_trip_p50_s), channels_open_peak=int(r.channels_open_peak),
        channel_max=None if pd.isna(r.channel_max) else int(r.channel_max), leak=bool(r.leak), severity="warning"))
    w, n = told.worst, told.n
    rtt = w.channel_open_round_trip_p50_s
    cost = "" if pd.isna(rtt) else f", each open a {rtt * 1e3:.2f} ms round trip"
    numbers = (f"{int(w.channels_opened):,} channels opened ({int(w.channel_opens_per_s_peak)} in its busiest second), "
               f"{_each_way(w.published_per_channel, w.delivered_per_channel, '.1f')} per channel{cost}")
    if w.leak:
        numbers = (f"{int(w.channels_open_peak):,} channels open at once, {w.channel_max_share:.0%} of the negotiated "
                   f"channel_max ({int(w.channel_max) or NO_CHANNEL_MAX:,}); "
                   + numbers)
    doing = "leaks channels (opens them and never closes them)" if w.leak else "opens a channel per operation"
    title = worst_title(n, f"{w.connection} {doing}",
                        f"{n} connections {'leak channels' if w.leak else 'open a channel per operation'}",
                        w.connection, numbers)
    return Finding(
        id="channel-churn", severity="warning", title=title,
        evidence={
            "channels_opened": int(w.channels_opened), "channel_opens_per_s_peak": int(w.channel_opens_per_s_peak),
            "messages_per_channel": float(w.messages_per_channel),
            "published_per_channel": float(w.published_per_channel),
            "delivered_per_channel": float(w.delivered_per_channel),
            "channel_open_round_trip_p50_s": None if pd.isna(rtt) else float(rtt),
            "channels_open_peak": int(w.channels_open_peak),
            "channel_max": None if pd.isna(w.channel_max) else int(w.channel_max), "leak": bool(w.leak),
            **_where(per, examples, "channel.open", FILTER_CHANNEL_OPEN),
        },
        advice="Open channels once and reuse them (one per thread, kept for the connection's life) instead of a "
               "channel per publish or per task: each channel.open is a round trip to the broker and a process "
               "there. RabbitMQ's Channels guide asks to investigate channel churn consistently above 100/s."
               + (" Channels opened and never closed leak: each holds a process and memory on the broker, and "
                  "once channel_max are open the next channel.open fails and RabbitMQ closes the connection "
                  f"with {reply_code(NOT_ALLOWED)}. Close every channel you open (a with-block or finally), or reuse a fixed "
                  "set." if per["leak"].any() else ""),
        impact=float(1.0 / max(float(w.messages_per_channel), 1.0)), subjects=told.subjects)
