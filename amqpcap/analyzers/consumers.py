"""consumers: unacked messages, prefetch and the broker's unused credit (deficit) per consumer.

A consumer is (stream, channel, consumer tag) on one opening of the channel. Its unacked count
rises with each basic.deliver and falls when the client's ack/nack/reject settles a delivery
(matching in ``_deliveries``). RabbitMQ sends a consumer a message only while its unacked count is
below its prefetch (basic.qos prefetch_count; global=false: per consumer, applying to consumers
started after the qos on that channel; global=true: shared by all consumers of the channel).
``deficit = prefetch − unacked`` is the credit the broker holds for the consumer and has not used.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..analysis import AnalyzerResult, Finding, Plot, analyzer, packets_filter, stream_filter
from ..capture import Capture
from . import _deliveries as D

CONSUMER = ["stream", "channel", "epoch", "consumer_tag"]


def _consumer_rows(cap: Capture) -> pd.DataFrame:
    """One row per acknowledging consumer: start (consume-ok, else first delivery), end, queue,
    prefetch from basic.qos (per consumer), whether its basic.consume is in the capture."""
    m = D.methods(cap)
    d = D.deliveries(cap)
    d = d[~d["no_ack"].to_numpy(bool) & (d["consumer_tag"] != D.GET_TAG)]
    first = d.groupby(CONSUMER, sort=False).agg(first_order=("order", "min"), first_ts=("ts", "min"),
                                                first_packet=("packet", "min"), queue=("queue", "first"),
                                                deliveries=("order", "size")).reset_index()
    cons = D.consumes(m)
    cons = cons[~cons["no_ack"].to_numpy(bool)][CONSUMER + ["start_order", "start_ts", "start_packet"]]
    # a consumer with no deliveries still holds credit: keep consumers seen only by their consume
    c = D._obj(first, "consumer_tag").merge(D._obj(cons, "consumer_tag").drop_duplicates(CONSUMER, keep="last"),
                                            on=CONSUMER, how="outer")
    c["start_ts"] = c["start_ts"].astype(d["ts"].dtype)
    c["consume_seen"] = c["start_order"].notna()
    c["deliveries"] = c["deliveries"].fillna(0).astype(np.int64)
    c["start_ts"] = c["start_ts"].where(c["consume_seen"], c["first_ts"])
    c["start_order"] = c["start_order"].where(c["consume_seen"], c["first_order"]).astype(np.int64)
    c["start_packet"] = c["start_packet"].where(c["consume_seen"], c["first_packet"]).astype(np.int64)

    # per-consumer prefetch: the last basic.qos global=false on the channel before the consumer
    qos = m[(m["method"] == "basic.qos") & (m["direction"] == "c2s")].copy()
    qos["global"] = qos["global"].fillna(False).astype(bool)
    per = qos[~qos["global"]][D.KEY + ["order", "prefetch_count"]].rename(columns={"order": "q_order"})
    c = c.sort_values("start_order")
    c = pd.merge_asof(c, per.sort_values("q_order"), left_on="start_order", right_on="q_order", by=D.KEY,
                      direction="backward")
    c["qos_seen"] = c["q_order"].notna()
    c["prefetch"] = c["prefetch_count"].astype("Int64")

    # the consumer ends at its cancel, its channel's or connection's close, else with the connection
    ends = m[m["method"].isin(["basic.cancel", "basic.cancel-ok"])][["stream", "channel", "consumer_tag", "order", "ts"]]
    c["end_ts"] = c["stream"].map(cap.connections.set_index("stream")["last_ts"]).astype(c["start_ts"].dtype)
    if len(ends):
        e = pd.merge_asof(D._obj(c[["stream", "channel", "consumer_tag", "start_order"]], "consumer_tag"),
                          D._obj(ends.rename(columns={"order": "e_order", "ts": "e_ts"}).sort_values("e_order"), "consumer_tag"),
                          left_on="start_order", right_on="e_order", by=["stream", "channel", "consumer_tag"],
                          direction="forward")
        c["end_ts"] = c["end_ts"].where(e["e_ts"].isna().to_numpy(), e["e_ts"].to_numpy())
    closes = m[m["method"].isin(["channel.close", "connection.close"])][["stream", "channel", "order", "ts"]]
    for by, rows in (("channel", closes[closes["channel"] != 0]), (None, closes[closes["channel"] == 0])):
        if len(rows) == 0:
            continue
        keys = ["stream", "channel"] if by else ["stream"]
        e = pd.merge_asof(c[keys + ["start_order"]], rows[keys + ["order", "ts"]].rename(
            columns={"order": "e_order", "ts": "e_ts"}).sort_values("e_order"),
            left_on="start_order", right_on="e_order", by=keys, direction="forward")
        earlier = e["e_ts"].notna().to_numpy() & (e["e_ts"].to_numpy() < c["end_ts"].to_numpy())
        c.loc[c.index[earlier], "end_ts"] = e["e_ts"].to_numpy()[earlier]
    return c.drop(columns=["q_order", "prefetch_count", "first_order", "first_ts", "first_packet"]).reset_index(drop=True)


STATE_COLUMNS = CONSUMER + ["packet", "ts", "until_ts", "duration_s", "unacked", "prefetch", "prefetch_estimated",
                            "channel_unacked", "channel_prefetch", "deficit", "at_limit"]


def _empty_state(cap: Capture) -> pd.DataFrame:
    tsd = cap.frames["ts"].dtype
    dtypes = {"stream": np.int64, "channel": np.int64, "epoch": np.int64, "consumer_tag": object, "packet": np.int64,
              "ts": tsd, "until_ts": tsd, "duration_s": float, "unacked": np.int64, "prefetch": np.int64,
              "prefetch_estimated": bool, "channel_unacked": np.int64, "channel_prefetch": "Int64",
              "deficit": "Int64", "at_limit": bool}
    return pd.DataFrame({c: pd.Series(dtype=dtypes[c]) for c in STATE_COLUMNS})


def consumer_state(cap: Capture) -> pd.DataFrame:
    """Per consumer step series of its unacked count, prefetch and deficit.

    One row per frame that changed the consumer's state (a delivery, a settling ack/nack/reject;
    a multiple ack is one row) plus a first row at consume-ok (unacked 0) when the basic.consume
    is in the capture. Each row's values hold from ``ts`` until ``until_ts`` (the next row, or
    the consumer's end: cancel, channel/connection close, or the connection's last packet).
    Consumers with no-ack and basic.get deliveries are not included (no credit applies).

    Columns: stream, channel, epoch, consumer_tag, packet, ts, until_ts, duration_s, unacked,
    prefetch (0 = unlimited), prefetch_estimated, channel_unacked, channel_prefetch (global qos;
    <NA> without one), deficit (<NA> when no limit applies), at_limit (deficit ≤ 0).
    """
    cached = getattr(cap, "_amqpcap_consumer_state", None)
    if cached is not None:
        return cached
    c = _consumer_rows(cap)
    d = D.deliveries(cap)
    d = d[~d["no_ack"].to_numpy(bool) & (d["consumer_tag"] != D.GET_TAG)]
    settled = d[d["settle_order"].notna()]
    ev = pd.concat([
        d[CONSUMER + ["order", "ts", "packet"]].assign(delta=1),
        pd.DataFrame({**{k: settled[k].to_numpy() for k in CONSUMER},
                      "order": settled["settle_order"].to_numpy(np.int64), "ts": settled["settle_ts"].to_numpy(),
                      "packet": settled["settle_packet"].to_numpy(np.int64), "delta": -1}),
        c.loc[c["consume_seen"], CONSUMER + ["start_order", "start_ts", "start_packet"]].rename(
            columns={"start_order": "order", "start_ts": "ts", "start_packet": "packet"}).assign(delta=0),
    ], ignore_index=True)
    ev["consumer_tag"] = ev["consumer_tag"].astype(object)
    if len(ev) == 0:
        return _empty_state(cap)
    ev = ev.groupby(CONSUMER + ["order"], sort=False).agg(ts=("ts", "first"), packet=("packet", "first"),
                                                         delta=("delta", "sum")).reset_index()
    ev = ev.sort_values("order", kind="stable").reset_index(drop=True)
    ev["unacked"] = ev.groupby(CONSUMER, sort=False)["delta"].cumsum().astype(np.int64)
    # the channel's unacked over all its consumers, as it stands after each frame
    ch = ev.groupby(D.KEY, sort=False)["delta"].cumsum()
    ev["channel_unacked"] = ch.groupby([ev[k] for k in D.KEY] + [ev["order"]]).transform("last").astype(np.int64)

    cols = CONSUMER + ["prefetch", "qos_seen", "consume_seen", "end_ts"]
    ev = ev.merge(D._obj(c[cols], "consumer_tag"), on=CONSUMER, how="left")
    # no qos: with the basic.consume in the capture RabbitMQ's default applies (0 = unlimited);
    # without it the limit is unknown and estimated as the highest unacked count observed
    max_unacked = ev.groupby(CONSUMER, sort=False)["unacked"].transform("max")
    estimated = ~ev["qos_seen"].to_numpy(bool) & ~ev["consume_seen"].to_numpy(bool)
    prefetch = ev["prefetch"].fillna(0).to_numpy(np.int64)
    prefetch[estimated] = max_unacked.to_numpy(np.int64)[estimated]
    ev["prefetch"] = prefetch
    ev["prefetch_estimated"] = estimated

    # channel-wide limit (global=true, RabbitMQ): the last one before each frame
    m = D.methods(cap)
    qos = m[(m["method"] == "basic.qos") & (m["direction"] == "c2s") & m["global"].fillna(False).astype(bool)]
    ev["channel_prefetch"] = pd.array(np.full(len(ev), pd.NA), dtype="Int64")
    if len(qos):
        g = pd.merge_asof(ev[D.KEY + ["order"]].assign(pos=np.arange(len(ev))),
                          qos[D.KEY + ["order", "prefetch_count"]].rename(columns={"order": "q_order"}).sort_values("q_order"),
                          left_on="order", right_on="q_order", by=D.KEY, direction="backward")
        ev.loc[g["pos"].to_numpy(), "channel_prefetch"] = g["prefetch_count"].astype("Int64").to_numpy()

    inf = np.iinfo(np.int64).max
    d1 = np.where(prefetch > 0, prefetch - ev["unacked"].to_numpy(np.int64), inf)
    chp = ev["channel_prefetch"].fillna(0).to_numpy(np.int64)
    d2 = np.where(chp > 0, chp - ev["channel_unacked"].to_numpy(np.int64), inf)
    deficit = np.minimum(d1, d2)
    ev["deficit"] = pd.array(np.where(deficit == inf, 0, deficit), dtype="Int64")
    ev.loc[deficit == inf, "deficit"] = pd.NA
    ev["at_limit"] = deficit <= 0

    nxt = ev.groupby(CONSUMER, sort=False)["ts"].shift(-1)
    until = nxt.where(nxt.notna(), ev["end_ts"])
    until = until.where(until < ev["end_ts"], ev["end_ts"])
    ev["until_ts"] = until.where(until > ev["ts"], ev["ts"])
    ev["duration_s"] = (ev["until_ts"] - ev["ts"]).dt.total_seconds()
    out = ev[STATE_COLUMNS]
    out = out.sort_values(["stream", "channel", "epoch", "consumer_tag", "ts"], kind="stable").reset_index(drop=True)
    out["packet"] = out["packet"].astype(np.int64)
    try:
        cap._amqpcap_consumer_state = out
    except AttributeError:
        pass
    return out
