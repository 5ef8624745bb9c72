"""Sessions (Part 2 §2.5): a session is a pair of channels, one per direction. The side that begins
it sends begin without remote-channel on its channel; the other answers with begin on a channel of
its own, remote-channel naming the first one. Every session-scoped frame (begin, attach, flow,
transfer, disposition, detach, end) on a channel belongs to the session that channel carries in
that direction at the time; end releases the channel in its direction (it may be begun again).

A capture that starts after a begin sees frames on a channel no begin opened: those open an
implicit session (`begun` false), which the other direction's frames on the same channel number
join when that direction has no session there either (RabbitMQ and common clients use the same
number both ways; the pairing is then a guess, and said so by `begun`)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from ...io.load import Capture
from ..cache import CONNECTION, derivation
from .frames import amqp10_frames, as_text

SCOPED = frozenset({"begin", "attach", "flow", "transfer", "disposition", "detach", "end"})
OTHER = {"c2s": "s2c", "s2c": "c2s"}
COLUMNS = ["stream", "session", "client_channel", "broker_channel", "begun", "begun_by", "begin_packet",
           "begin_ts", "client_end_packet", "broker_end_packet", "end_error_condition", "end_error_description",
           "end_error_side"]


class Sessions(NamedTuple):
    #: one row per session (COLUMNS)
    table: pd.DataFrame
    #: per row of the frames table: its session (numbered per stream from 0 in begin order; −1: a
    #: frame of no session: open, close, SASL, empty)
    of_frame: np.ndarray


def sessions_of(f: pd.DataFrame) -> Sessions:
    """The sessions of the frames `f` (an `amqp10_frames` table), and each frame's."""
    n = len(f)
    of_frame = np.full(n, -1, np.int64)
    perf = f["performative"].to_numpy(object)
    scoped = np.flatnonzero(pd.Series(perf).isin(SCOPED).to_numpy(bool))
    stream = f["stream"].to_numpy(np.int64)
    direction = f["direction"].to_numpy(object)
    channel = f["channel"].to_numpy(np.int64)
    remote = f["remote_channel"].to_numpy(np.float64, na_value=np.nan)
    packet = f["packet"].to_numpy(np.int64)
    ts = f["ts"].to_numpy()
    cond = f["error_condition"].to_numpy(object)
    desc = f["error_description"].to_numpy(object)
    rows: dict[tuple[int, int], dict] = {}
    counter: dict[int, int] = {}
    #: (stream, direction, channel) -> session open there now
    open_on: dict[tuple[int, str, int], int] = {}

    def new(s: int, i: int, begun: bool) -> int:
        k = counter.get(s, 0)
        counter[s] = k + 1
        rows[(s, k)] = {"stream": s, "session": k, "client_channel": None, "broker_channel": None, "begun": begun,
                        "begun_by": None, "begin_packet": None, "begin_ts": ts[i], "client_end_packet": None,
                        "broker_end_packet": None, "end_error_condition": None, "end_error_description": None,
                        "end_error_side": None}
        return k

    def side(d: str) -> str:
        return "client" if d == "c2s" else "broker"

    for i in scoped.tolist():
        s, d, ch, p = int(stream[i]), direction[i], int(channel[i]), perf[i]
        here = (s, d, ch)
        if p == "begin":
            if not np.isnan(remote[i]) and (s, OTHER[d], int(remote[i])) in open_on:
                k = open_on[(s, OTHER[d], int(remote[i]))]
            else:
                k = new(s, i, True)
                rows[(s, k)].update(begun_by=side(d), begin_packet=int(packet[i]))
            open_on[here] = k
            rows[(s, k)][f"{side(d)}_channel"] = ch
        elif here in open_on:
            k = open_on[here]
        else:  # a session begun before the capture: join the other direction's on this number
            there = (s, OTHER[d], ch)
            k = open_on[there] if there in open_on and not rows[(s, open_on[there])]["begun"] \
                and rows[(s, open_on[there])][f"{side(d)}_channel"] is None else new(s, i, False)
            open_on[here] = k
            rows[(s, k)][f"{side(d)}_channel"] = ch
        of_frame[i] = k
        if p == "end":
            r = rows[(s, k)]
            r[f"{side(d)}_end_packet"] = int(packet[i])
            if cond[i] is not None and cond[i] == cond[i] and r["end_error_condition"] is None:
                r.update(end_error_condition=cond[i], end_error_description=None if pd.isna(desc[i]) else desc[i],
                         end_error_side=side(d))
            del open_on[here]
    table = pd.DataFrame([rows[k] for k in sorted(rows)], columns=COLUMNS)
    for c in ("client_channel", "broker_channel", "begin_packet", "client_end_packet", "broker_end_packet"):
        table[c] = pd.array(table[c].to_list(), dtype="Int64")
    table["begin_ts"] = pd.to_datetime(table["begin_ts"], utc=True)
    table["begun"] = table["begun"].astype(bool)
    as_text(table, ("end_error_condition", "end_error_description", "end_error_side"))
    return Sessions(table, of_frame)


@derivation(CONNECTION)
def sessions(cap: Capture) -> Sessions:
    """`sessions_of` the capture's `amqp10_frames`."""
    return sessions_of(amqp10_frames(cap))
