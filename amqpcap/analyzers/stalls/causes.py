"""The causes' evidence as intervals per connection: blocked by the broker (connection.blocked),
channel.flow, publishes awaiting their confirm, consumers at their prefetch limit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ...io.load import Capture
from ...derive import consumers as credit
from ...derive.deliveries import confirms
from ...derive.replay import for_derivations, told, told_state
from ...derive.seeds import seeds_of
from .intervals import _count_in, _empty_iv, _lex_count, _steps_to_intervals

if TYPE_CHECKING:  # only the annotations name the carry
    from .carry import _Carry


#: The only methods the cause states read (flow control; the publishes: a block's, and each
#: connection's count). Of basic.deliver only the streams that carry one are needed (_frames
#: returns them), not the rows. The confirms come from their derivation (`_awaited`).
FRAME_METHODS = ["connection.blocked", "connection.unblocked", "channel.flow", "basic.publish"]


def _frames(cap: Capture, t0: pd.Timestamp, methods=FRAME_METHODS) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray]:
    """Frames of `methods` (fr: packet, stream, d, t, channel, method) and, row for row, the
    fields the cause states read (f); and the streams with a basic.deliver (sorted). Only those
    rows and columns are taken: the frames table is wide and long."""
    f = cap.frames
    # Selected on the categorical's codes (small ints), then every column taken at those rows.
    method = f["method"].array
    cats = pd.Index(method.categories)
    if "basic.deliver" in cats:
        stream_col = f["stream"].to_numpy()
        deliver_streams = np.flatnonzero(np.bincount(stream_col[method.codes == cats.get_loc("basic.deliver")]))
    else:
        deliver_streams = np.zeros(0, np.int64)
    # (one gather from a per-category table; code -1, missing, reads the appended False)
    keep = np.flatnonzero(np.r_[cats.isin(methods), False][method.codes])
    fr = pd.DataFrame({  # rows taken first, then converted: only the kept rows are
        "packet": f["packet"].to_numpy()[keep].astype(np.int64),
        "stream": f["stream"].to_numpy()[keep].astype(np.int64),
        "d": (f["direction"].array.take(keep) == "s2c").astype(np.int8),
        "t": (f["ts"].take(keep) - t0).dt.total_seconds().to_numpy(),
        "channel": f["channel"].to_numpy()[keep].astype(np.int64),
        "method": method.take(keep),  # categorical: comparisons stay cheap
    })
    return (fr, pd.DataFrame({c: f[c].array.take(keep) for c in ("reason", "active")}),
            deliver_streams)


def _blocked(cap: Capture, fr: pd.DataFrame, f: pd.DataFrame, stream_end: pd.Series,
             before: pd.DataFrame | None = None) -> pd.DataFrame:
    """connection.blocked → connection.unblocked intervals per stream (broker → client), with the
    reason and the packets; a block never lifted lasts to the connection's last packet (inf in a
    slice of time before the last: its end is not known yet). `before`: the connection.blocked
    rows of the blocks a slice before left open (`_open_blocks`), ahead of these frames."""
    m = fr["method"].isin(["connection.blocked", "connection.unblocked"]) & (fr["d"] == 1)
    ev = fr[m].assign(reason=f["reason"].array[m.to_numpy()].astype(object))  # only those rows converted
    if before is not None and len(before):
        ev = pd.concat([before, ev], ignore_index=True)
    ev = ev.sort_values(["stream", "t"], kind="mergesort")
    ev["blocked"] = ev["method"] == "connection.blocked"
    # Only state changes matter (a repeated connection.blocked does not restart the block).
    ev = ev[ev["blocked"] != ev.groupby("stream")["blocked"].shift().fillna(False).astype(bool)]
    start = ev[ev["blocked"]]
    nxt = ev.groupby("stream")[["t", "packet"]].shift(-1)
    out = pd.DataFrame({
        "stream": start["stream"].to_numpy(),
        "start": start["t"].to_numpy(),
        "end": nxt.loc[start.index, "t"].fillna(start["stream"].map(stream_end)).to_numpy(),
        "blocked_packet": start["packet"].to_numpy(),
        "unblocked_packet": nxt.loc[start.index, "packet"].to_numpy(),
        "reason": start["reason"].to_numpy(),
    })
    out["lifted"] = out["unblocked_packet"].notna()
    return out


def _flow_events(fr: pd.DataFrame, f: pd.DataFrame, before: pd.DataFrame | None = None) -> pd.DataFrame:
    """The channel.flow frames (with ``stop``: active=false), sorted by (stream, d, channel, t),
    after `before` (each channel's last one of the slices before, when it stopped the flow)."""
    m = (fr["method"] == "channel.flow").to_numpy()
    ev = fr[m].assign(stop=~f["active"].to_numpy()[m].astype(bool))
    if before is not None and len(before):
        ev = pd.concat([before, ev], ignore_index=True)
    return ev.sort_values(["stream", "d", "channel", "t"], kind="mergesort")


def _channel_flow(ev: pd.DataFrame, stream_end: pd.Series) -> pd.DataFrame:
    """channel.flow active=false → active=true (`_flow_events`): the receiving side must stop
    sending content, so the stopped direction is the opposite of the frame's sender."""
    if not len(ev):
        return _empty_iv(["stream", "d", "start", "end"])
    iv = _steps_to_intervals(ev, ["stream", "d", "channel"], "stop", stream_end)
    iv["d"] = 1 - ev.loc[ev["stop"], "d"].to_numpy()
    return iv


def _confirm_outstanding(cap: Capture, t0: pd.Timestamp, stream_end: pd.Series, last: bool = True,
                         carry: _Carry | None = None) -> pd.DataFrame:
    """Intervals (stream, start, end) where a publish on a channel in confirm mode awaited its
    basic.ack/nack: each publish from its time to its confirm's, or to its connection's end
    (`stream_end`) when none came (`_awaited`).

    In a slice of a partition's time, a publish still awaited past the slice lasts to inf, and
    the next slice gives it again from its own time (it is replayed there: the union of the
    intervals is the same, `_unions`). A publish whose channel opened again before its confirm
    came is awaited to its connection's end, but no later slice replays it: `carry` keeps the
    earliest of them per connection (`_Carry.confirms`), given again in every later slice."""
    pubs = _awaited(cap, t0, last)
    before = carry.confirms if carry is not None and carry.confirms is not None else _NO_STREAMS
    if carry is not None and not last:
        carry.confirms = _earliest(before, pubs[pubs["ended"].to_numpy(bool)])
    confirmed = pubs["confirmed"].to_numpy(float)
    return pd.DataFrame({
        "stream": np.r_[before.index.to_numpy(np.int64), pubs["stream"].to_numpy(np.int64)],
        "start": np.r_[before.to_numpy(float), pubs["t"].to_numpy(float)],
        "end": np.r_[before.index.map(stream_end).to_numpy(float),
                     np.where(np.isnan(confirmed), pubs["stream"].map(stream_end).to_numpy(float), confirmed)]})


def _awaited(cap: Capture, t0: pd.Timestamp, last: bool) -> pd.DataFrame:
    """The publishes on a channel in confirm mode that the slice `cap` holds (its own, and those
    still awaited before it: `amqpcap.derive.replay.told`; a whole partition: all), from the
    `confirms` derivation: stream, t, confirmed (its confirm's time; NaN: none) and ended (told
    without a confirm: no later slice awaits it, its channel was opened again or this is the
    partition's `last` slice). Seconds from `t0`. The derivation numbers a channel's publishes
    from 1 after the confirm.select of each opening of the channel and settles each by a later
    confirm of that opening only (RabbitMQ's publisher confirms: a channel opened again, AMQP
    0-9-1 §4.2.4, is a new sequence): the one matching rule of every analyzer."""
    view = for_derivations(cap)
    c = confirms(view)
    if not len(c):
        return pd.DataFrame({"stream": np.zeros(0, np.int64), "t": np.zeros(0), "confirmed": np.zeros(0),
                             "ended": np.zeros(0, bool)})
    c = c[told(view, c["order"].to_numpy(np.int64), True)]  # (a replayed publish not awaited was told)
    confirmed = (pd.to_datetime(c["confirm_ts"], utc=True) - t0).dt.total_seconds().to_numpy(float)
    final = told(view, c["order"].to_numpy(np.int64), last)
    return pd.DataFrame({"stream": c["stream"].to_numpy(np.int64),
                         "t": (c["ts"] - t0).dt.total_seconds().to_numpy(float), "confirmed": confirmed,
                         "ended": final & np.isnan(confirmed)})


def _earliest(before: pd.Series, ended: pd.DataFrame) -> pd.Series:
    """Per connection (index: stream), the earliest time of `before` and of the publishes
    `ended` (stream, t)."""
    earliest = ended["t"].groupby(ended["stream"].to_numpy(np.int64)).min()
    if not len(ended) or not len(before):
        return earliest if len(ended) else before
    return pd.concat([before, earliest]).groupby(level=0).min()


#: no connection's publish left without a confirm (`_Carry.confirms`)
_NO_STREAMS = pd.Series(np.zeros(0), index=pd.Index(np.zeros(0, np.int64)))


def _prefetch_limited(cap: Capture, t0: pd.Timestamp, last: bool, maxima: pd.DataFrame) -> pd.DataFrame:
    """Intervals (stream, start, end) where a consumer was at its prefetch limit: the steps of its
    credit series (amqpcap.derive.consumers) with ``at_limit`` (unacked ≥ prefetch, channel
    (global) limit included), each holding until ``until_ts``. No rows without consumers. In a
    slice of a partition's time, the rows it tells (`amqpcap.derive.replay.told_state`), and
    those whose next row a later slice tells, to inf. An estimated prefetch is the most its
    consumer held over its whole life (`maxima`: the context round's), not the most so far."""
    view = for_derivations(cap)
    if seeds_of(view) is None:
        st = credit.consumer_state(view)  # (looked up on the module: tests stand in a series of their own)
        waiting = st.iloc[:0]
    else:
        st = told_state(view, last)
        waiting = told_state(view, True).iloc[len(st):] if not last else st.iloc[:0]
    out = []
    for rows, until in ((_final_prefetch(st, maxima), None), (_final_prefetch(waiting, maxima), np.inf)):
        at_limit = rows["at_limit"].to_numpy(bool)
        start = (rows["ts"] - t0).dt.total_seconds().to_numpy()
        end = (rows["until_ts"] - t0).dt.total_seconds().to_numpy() if until is None else np.full(len(rows), until)
        out.append(pd.DataFrame({"stream": rows["stream"].to_numpy(np.int64)[at_limit], "start": start[at_limit],
                                 "end": end[at_limit]}))
    return pd.concat(out, ignore_index=True) if len(out[1]) else out[0]


def _final_prefetch(rows: pd.DataFrame, maxima: pd.DataFrame) -> pd.DataFrame:
    """Consumer state rows whose estimated prefetch is the most deliveries their consumer held
    over its whole life (`maxima`, `StallsContext`), with their deficit and at_limit
    (`consumers.with_final_prefetch`): a slice of a partition's time judges them on the most so
    far. The rows themselves when they have it already (a whole partition's)."""
    if not len(maxima):
        return rows
    est = np.flatnonzero(rows["prefetch_estimated"].to_numpy(bool))
    if not len(est):
        return rows
    at = credit.code_of(maxima, rows.iloc[est])
    prefetch = rows["prefetch"].to_numpy(np.int64)
    most = prefetch.copy()
    most[est[at >= 0]] = maxima["max_unacked"].to_numpy(np.int64)[at[at >= 0]]
    if np.array_equal(most, prefetch):
        return rows
    return credit.with_final_prefetch(rows, most)


def _block_publishes(blocked: pd.DataFrame, fr: pd.DataFrame, t0: pd.Timestamp, cap: Capture) -> pd.DataFrame:
    """`blocked` with, per block (start < t <= end): publishes (`basic.publish` the client still
    wrote on the blocked connection: they wait in socket buffers) and publish_body_bytes (the body
    sizes their content headers announce)."""
    pubs = fr[(fr["method"] == "basic.publish") & (fr["d"] == 0)]
    iv = blocked.assign(d=0)[["stream", "d", "start", "end"]].reset_index(drop=True)
    f = cap.frames
    head = np.flatnonzero((f["type"] == "header").to_numpy(dtype=bool, na_value=False)
                          & (f["direction"] == "c2s").to_numpy(dtype=bool, na_value=False)
                          & np.isin(f["stream"].to_numpy(np.int64), iv["stream"].to_numpy(np.int64)))
    # body bytes per block: a running sum over the headers sorted by (stream, t), read at each
    # block's bounds (one search for all blocks, not a pass over the headers per block)
    h_stream, h_t = f["stream"].to_numpy(np.int64)[head], (f["ts"].take(head) - t0).dt.total_seconds().to_numpy()
    by = np.lexsort((h_t, h_stream))
    h_stream, h_t = h_stream[by], h_t[by]
    run = np.r_[0.0, np.cumsum(f["body_size"].to_numpy(float, na_value=0)[head][by])]
    qk = iv["stream"].to_numpy(np.int64)
    body = run[_lex_count(h_stream, h_t, qk, iv["end"].to_numpy(float), "right")] \
        - run[_lex_count(h_stream, h_t, qk, iv["start"].to_numpy(float), "right")]
    return blocked.assign(publishes=_count_in(iv, pubs[["stream", "d", "t"]]),
                          publish_body_bytes=np.rint(body).astype(np.int64))


def _deliveries_in(blocks: pd.DataFrame, cap: Capture, t0: pd.Timestamp) -> int:
    """The `basic.deliver` frames of `cap` inside the union of the blocks' spans (any
    partition's: one alarm blocks several connections at once, and consumers starve while it
    holds)."""
    if blocks.empty:
        return 0
    f = cap.frames
    dlv = np.flatnonzero((f["method"] == "basic.deliver").to_numpy(dtype=bool, na_value=False))
    dlv_t = np.sort((f["ts"].take(dlv) - t0).dt.total_seconds().to_numpy())
    spans = blocks[["start", "end"]].sort_values("start").to_numpy(float)
    new = np.r_[True, spans[1:, 0] > np.maximum.accumulate(spans[:-1, 1])]
    lo = spans[new, 0]
    hi = np.maximum.reduceat(spans[:, 1], np.flatnonzero(new))
    return int((np.searchsorted(dlv_t, hi, "right") - np.searchsorted(dlv_t, lo, "right")).sum())
