"""Messages acknowledged: the deliveries a consumer's basic.ack settled (c2s) and the publishes a
broker's basic.ack confirmed (s2c), each at the time of its ack. The one answer to "which
messages an ack settles" (issue 49): the matching of `amqpcap.derive.deliveries`
(`match_settlements`), read by the tally (overview, per queue, per consumer, the rates plot) and
by the sizes analyzer's throughput table.

An ack counts the messages of the capture it settled, not the delivery tags it names: an ack
with ``multiple`` whose earlier deliveries the capture lost (kernel drops, a capture started
mid-connection) counts only those captured, as the delivered count counts only the
basic.deliver frames captured: over the capture, acked never exceeds delivered.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..io.load import Capture
from .deliveries import confirms, deliveries
from .replay import for_derivations, told
from ..model.facts import ns


def settled_by_ack(d: pd.DataFrame) -> np.ndarray:
    """Which deliveries of `d` (rows of `deliveries`) a basic.ack settled (not a nack, a reject,
    nor none)."""
    return d["settle_method"].eq("basic.ack").to_numpy(bool, na_value=False)


def ack_times_ns(rows: Capture, last: bool = True) -> dict[str, np.ndarray]:
    """Per direction, the time (int64 ns since the epoch) of the basic.ack that settled each
    message the rows tell: "c2s", deliveries settled by a consumer's ack (their ``settle_ts``);
    "s2c", publishes confirmed by the broker's ack (publisher confirms: ``confirm_ts`` of the
    `confirms` with outcome ack, on channels whose confirm.select is in the capture).

    ``rows`` is a partition (every message) or a slice of its time (`last`: the partition's
    last): then each message once, by the slice that tells it (`amqpcap.derive.replay.told`),
    so the slices' times together are the partition's."""
    view = for_derivations(rows)
    d = deliveries(view)
    d = d[told(view, d["order"].to_numpy(np.int64), last) & settled_by_ack(d)]
    c = confirms(view)
    if len(c):
        c = c[told(view, c["order"].to_numpy(np.int64), last) & (c["outcome"] == "ack").to_numpy(bool)]
    # (no confirm.select: `confirms` is an empty table of no type)
    return {"c2s": ns(d["settle_ts"]), "s2c": ns(c["confirm_ts"]) if len(c) else np.zeros(0, np.int64)}
