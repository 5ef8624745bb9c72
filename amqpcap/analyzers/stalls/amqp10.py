"""AMQP 1.0's cause states: what held a 1.0 connection direction back, read from its performatives
(derived once by `amqpcap.derive.amqp10`, never re-derived here), as intervals of the cause states
the 0-9-1 methods give (docs/analyzers/stalls.md):

- a link whose sender had no credit (Part 2 §2.6.7: credit 0 after a transfer used the last one,
  or a grant of none): the broker could not send to a client receiver (s2c, `prefetch_s`: the
  receiver's credit is its prefetch), or the broker gave a client sender none (c2s, `flow_s`:
  RabbitMQ's flow control of 1.0 publishers is credit withheld);
- a client's deliveries awaiting the broker's disposition (Part 2 §2.6.12; c2s, `confirm_s`: the
  1.0 twin of publishes awaiting their confirm), from the delivery's last frame to the
  disposition that settled it (or the connection's end).

The states are told at the partition's last slice, from the partition's 1.0 frames (the slices
gather them: `_Carry.amqp10`), so they are the same whatever the slicing; without AMQP 1.0
nothing is derived.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...derive.amqp10.credit import Credit, credit, credit_of
from ...derive.amqp10.deliveries import Deliveries, deliveries, deliveries_of
from ...derive.amqp10.handles import links, links_of
from ...derive.amqp10.sessions import sessions_of
from ...io.load import Capture

#: the cause state each 1.0 state adds its intervals to (a 1.0 connection has no 0-9-1 state)
STATES = ("flow_s", "prefetch_s", "confirm_s")


def amqp10_states(part: Capture, before: list[pd.DataFrame], t0_ns: int, stream_end: pd.Series
                  ) -> tuple[dict[str, pd.DataFrame], np.ndarray]:
    """The 1.0 cause states of the partition (`part`, its last slice, after the slices' frames
    `before`), as intervals (stream, d, start, end; seconds from `t0_ns`), by STATES' column; a
    state still holding at the end lasts to its connection's last packet (`stream_end`). And the
    connections that speak AMQP 1.0 (their streams)."""
    f = part.amqp10_frames
    if not before:  # the partition whole: the derivations every reader of it shares
        cred, table, dl = credit(part), links(part).table, deliveries(part)
    else:
        f = pd.concat([*before, f], ignore_index=True)
        s = sessions_of(f)
        h = links_of(f, s.of_frame)
        dl = deliveries_of(f, s.of_frame, h.of_frame)
        cred, table = credit_of(f, s.of_frame, h.table, h.of_frame, dl.table), h.table
    no_credit = _no_credit(cred, table, t0_ns, stream_end)
    return ({"flow_s": no_credit[no_credit["d"] == 0], "prefetch_s": no_credit[no_credit["d"] == 1],
             "confirm_s": _awaiting_disposition(dl, t0_ns, stream_end)}, np.unique(f["stream"].to_numpy(np.int64)))


def _no_credit(cred: Credit, table: pd.DataFrame, t0_ns: int, stream_end: pd.Series) -> pd.DataFrame:
    """Per link, the times its sender held no credit (credit ≤ 0 after an event, to the link's
    next event or its connection's end), d the sender's direction. A credit not known (a link
    attached before the capture, before a flow told it) is no evidence."""
    ev = cred.events
    if not len(ev):
        return _no_intervals()
    stream, link = ev["stream"].to_numpy(np.int64), ev["link"].to_numpy(np.int64)
    o = np.lexsort((np.arange(len(ev)), link, stream))  # (each link's events in frame order)
    stream, link = stream[o], link[o]
    t = (ev["ts"].array.asi8[o] - t0_ns) / 1e9
    cr = ev["credit"].to_numpy(np.float64, na_value=np.nan)[o]
    same_next = np.r_[(stream[1:] == stream[:-1]) & (link[1:] == link[:-1]), False]
    end = np.where(same_next, np.r_[t[1:], 0.0], stream_end.reindex(stream).to_numpy(float))
    sender = table.set_index(["stream", "link"])["sender_direction"]
    d = sender.reindex(pd.MultiIndex.from_arrays([stream, link])).to_numpy(object)
    on = (cr <= 0) & np.isin(d, ["c2s", "s2c"])  # (NaN credit compares false)
    return pd.DataFrame({"stream": stream[on], "d": (d[on] == "s2c").astype(np.int64), "start": t[on],
                         "end": end[on]})


def _awaiting_disposition(dl: Deliveries, t0_ns: int, stream_end: pd.Series) -> pd.DataFrame:
    """The client's deliveries not sent settled, each from its last frame to the disposition that
    settled it, or to its connection's end when none did (c2s)."""
    t = dl.table
    mine = np.flatnonzero((t["direction"] == "c2s").to_numpy(bool) & ~t["settled_at_send"].to_numpy(bool))
    if not len(mine):
        return _no_intervals()
    stream = t["stream"].to_numpy(np.int64)[mine]
    settled = t["settle_packet"].notna().to_numpy(bool)[mine]
    start = (t["last_ts"].array.asi8[mine] - t0_ns) / 1e9
    end = np.where(settled, (t["settle_ts"].array.asi8[mine] - t0_ns) / 1e9, stream_end.reindex(stream).to_numpy(float))
    return pd.DataFrame({"stream": stream, "d": np.zeros(len(mine), np.int64), "start": start, "end": end})


def _no_intervals() -> pd.DataFrame:
    return pd.DataFrame({"stream": np.zeros(0, np.int64), "d": np.zeros(0, np.int64), "start": np.zeros(0),
                         "end": np.zeros(0)})
