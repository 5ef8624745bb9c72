"""AMQP 1.0 messages as the throughput timeline and the overview count them, the twins of 0-9-1's
basic.publish, basic.deliver and basic.ack: a message is a delivery (Part 2 §2.6.12), one or
more transfer frames, counted at its first frame (a continuation frame, after a transfer with
`more`, starts none: Part 2 §2.7.5); published when the client sent it, delivered when the
broker did; acked when the receiving end's first settling disposition accepted it
(`amqp10_acked_ns`). One definition, read by the `sizes` analyzer and the capture's tally
(`amqpcap.derive.tally`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...io.load import Capture
from ...model.facts import ns
from .deliveries import Deliveries, deliveries, deliveries_of
from .frames import amqp10_frames
from .handles import links_of
from .sessions import sessions_of

DIRECTIONS = ("c2s", "s2c")


def amqp10_messages(cap: Capture, before: list[pd.DataFrame], last: bool
                    ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """The AMQP 1.0 messages of `cap` (a partition, or a slice of its time after the slices
    `before`' frames; `last`: the partition's last), as times (int64 ns since the epoch):
    published, the client's transfers that start a delivery (`continuation`: starts none);
    delivered, the broker's; and per direction acked (`amqp10_acked_ns`), told at the `last`
    slice alone (a disposition may settle deliveries of every slice before)."""
    f = amqp10_frames(cap)
    starts = delivery_starts(f)
    s2c = (f["direction"] == "s2c").to_numpy(bool)
    t_ns = ns(f["ts"])
    if not last:
        acked = {d: np.zeros(0, np.int64) for d in DIRECTIONS}
    elif not before:  # the partition whole: its deliveries, shared with every reader of them
        acked = amqp10_acked_ns(deliveries(cap))
    else:
        whole = pd.concat([*before, f], ignore_index=True)
        s = sessions_of(whole)
        acked = amqp10_acked_ns(deliveries_of(whole, s.of_frame, links_of(whole, s.of_frame).of_frame))
    return t_ns[starts & ~s2c], t_ns[starts & s2c], acked


def delivery_starts(f: pd.DataFrame) -> np.ndarray:
    """Which rows of an amqp10_frames table start a delivery: a transfer that is not the
    continuation of one sent with `more` (Part 2 §2.7.5). A mask."""
    return ((f["performative"] == "transfer").to_numpy(bool, na_value=False)
            & ~f["continuation"].to_numpy(bool, na_value=False))


def amqp10_acked_ns(d: Deliveries) -> dict[str, np.ndarray]:
    """Per direction, the time (int64 ns since the epoch) of the disposition that settled each
    AMQP 1.0 delivery its receiver accepted: "c2s", the broker's deliveries a client receiver
    settled (the consumer's ack); "s2c", the client's deliveries the broker settled (a publish
    confirmed). A delivery settled with another outcome (rejected, released, modified: a nack or
    reject), settled at send (pre-settled, never acknowledged) or by its own sender is not
    counted, as 0-9-1 counts basic.ack alone (`amqpcap.derive.acked`)."""
    t = d.table
    acked = ((t["settled_by"] == "receiver").to_numpy(bool) & (t["outcome"] == "accepted").to_numpy(bool))
    sent_by = t["direction"].to_numpy(object)
    settle = ns(t["settle_ts"]) if len(t) else np.zeros(0, np.int64)
    # a receiver's disposition travels the other way: c2s settles what the broker sent (s2c)
    return {"c2s": settle[acked & (sent_by == "s2c")], "s2c": settle[acked & (sent_by == "c2s")]}
