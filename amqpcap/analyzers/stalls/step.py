"""A partition's step over slices of its time (docs/time-split.md §2.9): what a slice finds and what
it carries to the next (`_Carry`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...io.load import Capture
from ...model.facts import CaptureFacts
from .causes import (
    _block_publishes, _blocked, _channel_flow, _confirm_outstanding, _deliveries_in, _flow_events, _frames,
    _prefetch_limited)
from .amqp10 import amqp10_states
from .constants import DUPLICATE_S, WINDOW_FULL_PACKETS, ZERO_WINDOW_PACKETS
from .context import StallsContext, _origin
from .carry import COUNTED, COVERED, _Carry
from .intervals import _count_in, _overlap_s, _unions
from .plots import _plot_bins, _plot_columns
from .silences import _gap_rows, _limited
from .tcp_state import _Seen, _packets, _real_retransmissions, _rtt, _slots


def stalls_slice(part: Capture, facts: CaptureFacts, carry: _Carry | None, last: bool, context: StallsContext):
    """A slice of a partition's time (the partition itself: its one slice): (what the next slice
    needs, the slice's piece for `stalls_pieces_joined`).
    `context`: every partition's connection.blocked intervals, the lifetime maxima of the
    partition's consumers with an estimated prefetch (the context round: `StallsContext`)."""
    t0 = _origin(facts)
    blocks = context.blocks
    c = carry if carry is not None else _Carry.nothing(part)
    seen = c.seen
    pk = _packets(part, facts.packets_t0_ns, seen)
    stream_end = _held_until(c, pk, last)
    rtt = _rtt(pk, seen)
    data_t, data_ts = seen.data_t.copy(), seen.data_ts.copy()
    gaps, cand = _gap_rows(pk, seen)
    moved = ~(np.isnan(seen.data_t) | (seen.data_t == data_t))  # slots whose silence starts here
    lim = _limited(pk, seen, last)
    cand_slot = _slots(seen, cand["stream"].to_numpy(np.int64), cand["d"].to_numpy(np.int64))
    carried = cand["carried"].to_numpy(bool)

    anomalies = part.anomalies[part.anomalies["kind"] == "capture-gap"]
    _count_events(c, cand, cand_slot, carried, moved, _counted_events(c, pk, anomalies, t0))
    fr, f, blocked, states = _cause_states(part, t0, c, lim, stream_end, last, context)
    _cover_states(c, cand, cand_slot, carried, moved, states)
    # A silent consumer direction during a block of any partition: blamed on the alarm too, when
    # its connection carries deliveries (the join knows: `_Carry.delivers`).
    cand["xb_s"] = _overlap_s(cand.assign(stream=0), blocks[["start", "end"]].assign(stream=0, d=1)) \
        if len(blocks) else 0.0

    # The blocks (each told once, when lifted or at the last slice) and what the window findings
    # read of them.
    blocked = _block_publishes(blocked, fr, t0, part)
    blocked = _blocks_so_far(c, blocked, pk, lim, seen, last)
    pubs = fr.loc[(fr["method"] == "basic.publish").to_numpy() & (fr["d"] == 0).to_numpy(), "stream"]
    c.publishes += np.bincount(np.searchsorted(seen.stream, pubs.to_numpy(np.int64)), minlength=len(seen.stream))
    piece = {"rtt": rtt, "gaps": gaps, "cand": cand, "blocked": blocked,
             "deliveries_while_blocked": _deliveries_in(blocks, part, t0),
             "capture_gaps": _capture_gap_rows(anomalies, pk, seen, data_t, data_ts),
             "cited": _cited(pk, c, seen)}
    if carry is None and last:  # the partition is its one slice: the join gathers the drawn points
        piece["plot_columns"] = _plot_columns(pk)
    else:
        c.plot = _plot_bins(pk, part.connections, facts.packets_t0_ns, c.plot)
    # the window-limited intervals with their time outside connection.blocked: the join makes
    # them into episodes (`_episodes`), which may run on from one slice into the next
    piece["limited"] = lim[["stream", "d", "start", "end", "outside_s"]]
    if last:
        piece["carry"], piece["connections"], piece["has_blocks"] = c, part.connections, bool(len(blocks))
        piece["t0_ns"] = facts.packets_t0_ns
        piece["amqp10"] = None
        if len(part.amqp10_frames) or c.amqp10:  # (no AMQP 1.0: nothing is derived)
            piece["amqp10"] = amqp10_states(part, c.amqp10, facts.packets_t0_ns, stream_end)
    elif len(part.amqp10_frames):
        c.amqp10.append(part.amqp10_frames)
    return c, piece


def _capture_gap_rows(anomalies: pd.DataFrame, pk: dict, seen, data_t: np.ndarray, data_ts: np.ndarray) -> pd.DataFrame:
    """The slice's capture gaps (stream, bytes, packet) with when their bytes were lost: after
    ``after_ts``, the latest new-data segment of the gap's direction before its packet (here, else
    the slices' before: `data_t`, `data_ts`, as `seen` held them before this slice; -1: none, so
    after the connection's first packet), and before ``ts``, the gap's packet (ns). The
    capture-gaps finding tells a ring's missing file from drops by that interval."""
    stream = anomalies["stream"].to_numpy(np.int64, na_value=-1)
    d = (anomalies["direction"] == "s2c").to_numpy(np.int64)
    packet = anomalies["packet"].to_numpy(np.int64, na_value=-1)
    pos = np.minimum(np.searchsorted(seen.stream, stream), max(len(seen.stream) - 1, 0))
    known = (seen.stream[pos] == stream) if len(seen.stream) else np.zeros(len(stream), bool)
    slot = pos * 2 + d
    # new-data rows keyed (slot, packet): the one before each gap's packet is a searchsorted away
    nd = np.flatnonzero(pk["new_data"])
    key = _slots(seen, pk["stream"][nd], pk["d"][nd].astype(np.int64)) << 32 | pk["packet"][nd].astype(np.int64)
    order = np.argsort(key, kind="stable")
    key, nd_ts = key[order], pk["ts"][nd][order]
    at = np.searchsorted(key, slot << 32 | packet) - 1
    if len(key):
        here = (at >= 0) & ((key[np.maximum(at, 0)] >> 32) == slot)
        in_slice = nd_ts[np.maximum(at, 0)]
    else:
        here, in_slice = np.zeros(len(slot), bool), np.zeros(len(slot), np.int64)
    if len(seen.stream):
        before = np.where(np.isnan(data_t[slot]), -1, data_ts[slot])
    else:
        before = np.full(len(slot), -1)
    after_ts = np.where(known, np.where(here, in_slice, before), -1)
    return anomalies[["stream", "bytes", "packet"]].reset_index(drop=True).assign(
        after_ts=after_ts.astype(np.int64), ts=anomalies["ts"].array.asi8)


def _held_until(c: _Carry, pk: dict, last: bool) -> pd.Series:
    """Until when a state still holding at the slice's end lasts, per connection (by stream): to
    a time a later slice tells (inf); at the partition's `last` slice, to its connection's last
    packet. Keeps each connection's latest packet time in the carry."""
    stream, t = pk["stream"], pk["t"]
    tails = np.flatnonzero(pk["last"])
    c.last_t[np.searchsorted(c.seen.stream, stream[tails])] = t[tails]
    return pd.Series(c.last_t if last else np.inf, index=c.seen.stream)


def _counted_events(c: _Carry, pk: dict, anomalies: pd.DataFrame, t0: pd.Timestamp) -> dict[str, pd.DataFrame]:
    """The events counted inside each silence (stream, d, t), by COUNTED's column: capture gaps
    (`anomalies`), zero windows, real retransmissions. Keeps the segments a later slice's copy
    may repeat in the carry."""
    gap_ev = pd.DataFrame({"stream": anomalies["stream"].to_numpy(np.int64),
                           "t": (anomalies["ts"] - t0).dt.total_seconds().to_numpy()})
    # A gap in either direction hides what the window and ACKs did: both directions uncertain.
    gap_ev = pd.concat([gap_ev.assign(d=0), gap_ev.assign(d=1)], ignore_index=True)
    stream, d, t = pk["stream"], pk["d"], pk["t"]
    zw = pk["zero_window"]
    zw_ev = pd.DataFrame({"stream": stream[zw], "d": 1 - d[zw], "t": t[zw]})
    retrans = _real_retransmissions(pk, c.recent)
    c.recent = _recent_originals(pk, c.recent)
    return {"gaps_n": gap_ev, "zero_window_n": zw_ev, "retrans_n": retrans}


def _count_events(c: _Carry, cand: pd.DataFrame, cand_slot: np.ndarray, carried: np.ndarray, moved: np.ndarray,
                  events: dict[str, pd.DataFrame]) -> None:
    """Add to the silences `cand` the `events` counted inside each: those of the slices before
    (after its start), and here; carry the count since each open silence's start."""
    for col, closed in COUNTED:
        cand[col] = _count_in(cand, events[col], closed) + _counted_before(c, col, closed, cand_slot, carried,
                                                                             cand["end"].to_numpy(float))
        _count_since(c, col, events[col], moved)


def _cause_states(part: Capture, t0: pd.Timestamp, c: _Carry, lim: pd.DataFrame, stream_end: pd.Series, last: bool,
                  context: StallsContext):
    """The cause states as intervals (stream, d, start, end; an end not known yet: inf), by
    COVERED's column, with the frames they were read from and the slice's blocks: (fr, f,
    blocked, states). Carries what a later slice needs of them."""
    fr, f, deliver_streams = _frames(part, t0)
    c.delivers[np.searchsorted(c.seen.stream, deliver_streams)] = True
    blocked = _blocked(part, fr, f, stream_end, c.open_blocks)
    flows = _flow_events(fr, f, c.flows)
    latest = flows.groupby(["stream", "d", "channel"]).tail(1)  # a channel's stop holds to its next channel.flow
    c.flows = None if last else latest[latest["stop"].to_numpy(bool)]
    conf = _confirm_outstanding(part, t0, stream_end, last, c)
    states = {
        "window_s": _window_limited_intervals(c.seen, lim),
        "flow_s": pd.concat([blocked.assign(d=0)[["stream", "d", "start", "end"]], _channel_flow(flows, stream_end)],
                            ignore_index=True),
        "prefetch_s": _prefetch_limited(part, t0, last, context.maxima).assign(d=1),
        "confirm_s": conf.assign(d=0),
    }
    return fr, f, blocked, states


def _window_limited_intervals(seen: _Seen, lim: pd.DataFrame) -> pd.DataFrame:
    """The window-limited intervals: those ended here (`lim`), and those still open at the
    slice's end (`_Seen.limited_from`; end inf)."""
    pending = np.flatnonzero(~np.isnan(seen.limited_from))
    return pd.concat([lim[["stream", "d", "start", "end"]],
                      pd.DataFrame({"stream": seen.stream[pending // 2], "d": pending % 2,
                                    "start": seen.limited_from[pending], "end": np.inf})], ignore_index=True)


def _cover_states(c: _Carry, cand: pd.DataFrame, cand_slot: np.ndarray, carried: np.ndarray, moved: np.ndarray,
                  states: dict[str, pd.DataFrame]) -> None:
    """Add to the silences `cand` each cause state's time inside them (covered at the end less
    covered at the start: the slices' before for one carried); carry each direction's covered
    time at the start of its open silence (restarted where one starts here, `moved`)."""
    seen = c.seen
    open_slots = np.flatnonzero(moved)
    for col in COVERED:
        iv = states[col]
        seed = c.covers[col].before.copy()
        u = _unions(_slots(seen, iv["stream"].to_numpy(np.int64), iv["d"].to_numpy(np.int64)),
                    iv["start"].to_numpy(float), iv["end"].to_numpy(float), c.covers[col])
        at_end = u.covered(cand_slot, cand["end"].to_numpy(float), seed[cand_slot])
        at_start = np.where(carried, c.at_start[col][cand_slot],
                            u.covered(cand_slot, cand["start"].to_numpy(float), seed[cand_slot]))
        cand[col] = at_end - at_start
        c.at_start[col][open_slots] = u.covered(open_slots, seen.data_t[open_slots], seed[open_slots])


def _counted_before(c: _Carry, col: str, closed: bool, slot: np.ndarray, carried: np.ndarray,
                    end: np.ndarray) -> np.ndarray:
    """The events the slices before counted inside the silences that began there (`carried`):
    all after its start, but those at its end when it is open there."""
    n = np.where(carried, c.since[col][slot], 0)
    if not closed:
        n = n - np.where(carried & (c.since_t[col][slot] == end), c.since_at_t[col][slot], 0)
    return n


def _count_since(c: _Carry, col: str, ev: pd.DataFrame, moved: np.ndarray) -> None:
    """Count the events `ev` after the start of each direction's open silence (restarted where
    a silence starts in this slice, `moved`), with the latest one's time and how many at it."""
    seen = c.seen
    since, since_t, at_t = c.since[col], c.since_t[col], c.since_at_t[col]
    since[moved], since_t[moved], at_t[moved] = 0, np.nan, 0
    if not len(ev):
        return
    slot = _slots(seen, ev["stream"].to_numpy(np.int64), ev["d"].to_numpy(np.int64))
    et = ev["t"].to_numpy(float)
    after = et > seen.data_t[slot]  # (NaN: no silence open yet, nothing counted)
    slot, et = slot[after], et[after]
    if not len(slot):
        return
    since += np.bincount(slot, minlength=len(since))
    latest = np.full(len(since), -np.inf)
    np.maximum.at(latest, slot, et)
    here = latest > -np.inf
    at_latest = np.bincount(slot[et == latest[slot]], minlength=len(since))
    same = here & (since_t == latest)
    at_t[:] = np.where(same, at_t + at_latest, np.where(here, at_latest, at_t))
    since_t[:] = np.where(here, latest, since_t)


def _recent_originals(pk: dict[str, np.ndarray], before: pd.DataFrame | None) -> pd.DataFrame:
    """The first copies of data segments a later slice's copy may repeat within DUPLICATE_S
    (`_real_retransmissions`): those of the last 2·DUPLICATE_S (a margin over float seconds)."""
    cols = ["stream", "d", "seq", "payload", "t"]
    since = pk["t"].max() - 2 * DUPLICATE_S if len(pk["t"]) else -np.inf
    om = np.flatnonzero(pk["data"] & ~pk["retrans"] & (pk["t"] >= since))
    now = pd.DataFrame({c_: pk[c_][om] for c_ in cols})
    if before is None or not len(before):
        return now
    before = before[before["t"].to_numpy(float) >= since]
    return pd.concat([before, now], ignore_index=True) if len(before) else now


def _blocks_so_far(c: _Carry, blocked: pd.DataFrame, pk: dict, lim: pd.DataFrame, seen: _Seen,
                   last: bool) -> pd.DataFrame:
    """The blocks this slice tells (lifted here, or all at the `last` slice), with what the
    slices before counted of them; those still holding carried (`_Carry.open_blocks`, their
    connection.blocked row). Adds to the carry what the window findings read of the blocks:
    zero windows the broker advertised inside them, and the window-limited time outside them."""
    before = c.open_blocks
    if before is not None and len(before):
        prior = before.set_index(["stream", "packet"])[["publishes", "publish_body_bytes"]]
        at = pd.MultiIndex.from_arrays([blocked["stream"].to_numpy(np.int64), blocked["blocked_packet"].to_numpy(np.int64)])
        add = prior.reindex(at).fillna(0).to_numpy(np.int64)
        blocked = blocked.assign(publishes=blocked["publishes"].to_numpy() + add[:, 0],
                                 publish_body_bytes=blocked["publish_body_bytes"].to_numpy() + add[:, 1])
    biv = blocked.assign(d=0)[["stream", "d", "start", "end"]].reset_index(drop=True)
    zw = pk["zero_window"]  # the peer's zero window holds the other direction: d flipped
    zw_ev = pd.DataFrame({"stream": pk["stream"][zw], "d": 1 - pk["d"][zw], "t": pk["t"][zw]})
    c.zw_in_block += np.bincount(np.searchsorted(seen.stream, biv["stream"].to_numpy(np.int64)),
                                 weights=_count_in(biv, zw_ev), minlength=len(seen.stream)).astype(np.int64)
    # window-limited time outside the blocks, each limited interval's added one after the other
    seed = c.covers["block"].before.copy()
    u = _unions(_slots(seen, biv["stream"].to_numpy(np.int64), 0), biv["start"].to_numpy(float),
                biv["end"].to_numpy(float), c.covers["block"])
    ls = _slots(seen, lim["stream"].to_numpy(np.int64), lim["d"].to_numpy(np.int64))
    at_start = np.where(lim["carried"].to_numpy(bool), c.block_at_limited[ls],
                        u.covered(ls, lim["start"].to_numpy(float), seed[ls]))
    dur = np.maximum((lim["end"] - lim["start"]).to_numpy(float)
                     - (u.covered(ls, lim["end"].to_numpy(float), seed[ls]) - at_start), 0.0)
    n = len(c.outside)
    c.outside = np.bincount(np.r_[np.arange(n), ls], weights=np.r_[c.outside, dur], minlength=n)
    lim["outside_s"] = dur  # (each interval's own part of it: the window findings' episodes, `_episodes`)
    pending = np.flatnonzero(~np.isnan(seen.limited_from))
    c.block_at_limited[pending] = u.covered(pending, seen.limited_from[pending], seed[pending])
    told = np.isfinite(blocked["end"].to_numpy(float)) | last
    c.open_blocks = None if last else pd.DataFrame({
        "packet": blocked["blocked_packet"].to_numpy()[~told], "stream": blocked["stream"].to_numpy()[~told],
        "d": np.int8(1), "t": blocked["start"].to_numpy()[~told], "channel": 0, "method": "connection.blocked",
        "reason": blocked["reason"].to_numpy()[~told], "publishes": blocked["publishes"].to_numpy()[~told],
        "publish_body_bytes": blocked["publish_body_bytes"].to_numpy()[~told]})
    return blocked[told].reset_index(drop=True)


def _cited(pk: dict, c: _Carry, seen: _Seen) -> pd.DataFrame:
    """The packets a window finding may cite (`_window_packets`): per direction the first
    ZERO_WINDOW_PACKETS zero windows its peer advertised and the first WINDOW_FULL_PACKETS
    window-full segments it sent, counted on from the slices before. Columns: stream, held,
    kind, rank, packet, and the row's time (``_t``: their order across slices)."""
    out = []
    for kind, rows, held, n in (("zero-window", pk["zero_window"], 1 - pk["d"], ZERO_WINDOW_PACKETS),
                                ("window-full", pk["wfull"], pk["d"], WINDOW_FULL_PACKETS)):
        r = np.flatnonzero(rows)
        key = pk["stream"][r].astype(np.int64) * 2 + held[r]
        slot = _slots(seen, key // 2, key % 2)
        rank = pd.Series(key).groupby(key).cumcount().to_numpy() + c.cited[kind][slot]  # (rows stay in pk order)
        c.cited[kind] += np.bincount(slot, minlength=len(c.cited[kind]))
        keep = rank < n
        out.append(pd.DataFrame({"stream": key[keep] // 2, "held": key[keep] % 2, "kind": kind, "rank": rank[keep],
                                 "packet": pk["packet"][r[keep]].astype(np.int64), "_t": pk["t"][r[keep]]}))
    return pd.concat(out, ignore_index=True)
