"""Every consumer the capture shows, cheaply (no delivery matched): `amqpcap info`'s consumer list."""

from __future__ import annotations

import pandas as pd

from ...io.load import Capture
from ...derive.columns import as_object
from ...derive.consumers import with_prefetch
from ...derive.deliveries import consumes
from ...derive.labels import connection_labels
from ...derive.methods import KEY, methods, pick, select
from ...derive.tally import CONSUMER_KEY


def consumer_list(cap: Capture) -> pd.DataFrame:
    """Every consumer the capture shows (`amqpcap info`), cheap: no delivery is matched.

    From each basic.consume (with the tag the broker confirmed): its queue, no-ack, ``prefetch``
    (the per-consumer basic.qos in force at its start; 0 = unlimited, also when no qos came
    before it: RabbitMQ's default) and ``channel_prefetch`` (a global qos in force; <NA> without
    one). A capture started after the basic.consume shows the consumer only by its deliveries'
    tags: queue, no-ack and prefetch unknown (<NA>). Columns: connection, LISTED; by queue, connection, channel."""
    c = _consume_rows(cap, consumes(cap))[LISTED]
    m = methods(cap)
    seen = as_object(pick(cap, m, select(m, "basic.deliver", "s2c"), CONSUMER_KEY).drop_duplicates(), "consumer_tag")
    known = pd.MultiIndex.from_frame(as_object(c[CONSUMER_KEY], "consumer_tag"))
    seen = seen[~pd.MultiIndex.from_frame(seen).isin(known)]  # (consumers seen only by their deliveries)
    unknown = pd.array([pd.NA] * len(seen), dtype="Int64")
    seen = seen.assign(queue=None, prefetch=unknown, channel_prefetch=unknown,
                       no_ack=pd.array([pd.NA] * len(seen), dtype="boolean"), consume_seen=False)
    out = pd.concat([c, seen[LISTED]], ignore_index=True) if len(seen) else c.reset_index(drop=True)
    out.insert(0, "connection", connection_labels(cap, out["stream"]))
    out["queue"] = out["queue"].astype(object)
    return out.sort_values(["queue", "connection", "channel"], na_position="last", kind="stable").reset_index(drop=True)


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

