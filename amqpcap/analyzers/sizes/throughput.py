"""Throughput over time: bytes, packets and messages (published, delivered, acknowledged) per time
bin and direction; which acks settle which deliveries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ...io.load import Capture
from ...derive.columns import value_at
from ...model.facts import CaptureFacts
from .bins import _ns, time_bins
from .constants import DELIVER_METHODS, DIRECTIONS
from .counts import _is_method


@dataclass
class _Acks:
    """What `settled_by_ack` carries from a partition's slices so far to the next one."""

    #: the highest delivery tag acked so far per (stream, channel, direction) key (sorted)
    key: np.ndarray
    highest: np.ndarray
    #: the channels opened (stream·2¹⁶ + channel, sorted)
    opened: np.ndarray
    #: the first acks of a channel with `multiple` set whose channel.open was not seen yet: it
    #: may come in a later slice, and decide where their tags started (stream·2¹⁶ + channel,
    #: throughput bin key, delivery tag); one per key at most
    undecided_channel: np.ndarray
    undecided_bin: np.ndarray
    undecided_tag: np.ndarray

    @classmethod
    def nothing(cls) -> "_Acks":
        z = np.zeros(0, np.int64)
        return cls(z, np.zeros(0), z, z, z, np.zeros(0))


def _channel_key(df: pd.DataFrame) -> np.ndarray:
    return (df["stream"].to_numpy(np.int64) << 16) | df["channel"].to_numpy(np.int64)


def settled_by_ack(frames: pd.DataFrame, seen: _Acks | None = None, last: bool = True) -> pd.DataFrame:
    """basic.ack frames with the number of delivery tags each one settles (`settled`).

    A single ack settles one tag; `multiple` settles every tag up to its own that no earlier ack
    of the same (stream, channel, direction) settled: its tag minus the highest tag acked before
    (a running max). The first ack of a channel counts from tag 0 when the channel was opened in
    the capture, else it counts as settling one tag (we do not know where the tags started).
    Limit: a single ack out of order above a later multiple ack's base is not subtracted.

    Over slices of time: `seen` (updated) holds the slices before; a first multiple ack whose
    channel.open is in none of them nor in this one may yet find it in a later slice: unless
    this is the `last` slice, it is `undecided` (settled 0 here; `_decided` counts it at the end).
    """
    seen = seen or _Acks.nothing()
    # Where a channel's tags start: channel.open seen (both directions share it) → tag 0.
    seen.opened = np.union1d(seen.opened, _channel_key(frames.loc[_is_method(frames, ["channel.open"])]))
    # Only the columns needed: the frames table is wide, a row filter would copy all of it.
    rows = np.flatnonzero(_is_method(frames, ["basic.ack"]))
    acks = pd.DataFrame({c: frames[c].array.take(rows) for c in ("ts", "stream", "channel", "direction", "delivery_tag",
                                                                   "multiple")}, index=frames.index[rows])
    if not len(acks):
        return acks.assign(settled=np.zeros(0, dtype=np.int64), undecided=np.zeros(0, bool))
    # (stream, channel, direction) as one int64 key (channel < 2¹⁶; the direction's category
    # code + 1, so a missing direction is a group of its own): grouping on one integer column
    # costs a fraction of grouping on three. (direction stays categorical in the result.)
    key = ((acks["stream"].to_numpy(np.int64) << 18) | (acks["channel"].to_numpy(np.int64) << 2)
           | (acks["direction"].array.codes.astype(np.int64) + 1))
    tag = acks["delivery_tag"].astype("float64").fillna(0).to_numpy()
    multiple = acks["multiple"].fillna(False).to_numpy(bool)
    prev_max = pd.Series(tag, index=acks.index).groupby(key).cummax().groupby(key).shift(1).to_numpy()
    pm = np.fmax(prev_max, value_at(seen.key, seen.highest, key, np.nan))  # (and the slices' before)
    first = np.isnan(pm)
    opened = np.isin(_channel_key(acks), seen.opened)
    pm[first] = np.where(opened[first], 0.0, tag[first] - 1)
    settled = np.where(multiple, np.clip(tag - pm, 0, None), 1).astype(np.int64)
    undecided = first & multiple & ~opened & (not last)
    settled[undecided] = 0
    highest = pd.Series(tag).groupby(key).max()
    k = np.r_[seen.key, highest.index.to_numpy(np.int64)]
    v = np.r_[seen.highest, highest.to_numpy()]
    seen.key, i = np.unique(k, return_inverse=True)
    seen.highest = np.full(len(seen.key), -np.inf)
    np.maximum.at(seen.highest, i, v)
    return acks.assign(settled=settled, undecided=undecided)


def _decided(seen: _Acks) -> tuple[np.ndarray, np.ndarray]:
    """The throughput bin keys and tags settled of the first multiple acks left undecided by
    earlier slices (`settled_by_ack`), now that every channel.open is known."""
    opened = np.isin(seen.undecided_channel, seen.opened)
    tag = seen.undecided_tag
    pm = np.where(opened, 0.0, tag - 1)
    return seen.undecided_bin, np.clip(tag - pm, 0, None).astype(np.int64).astype(np.float64)


#: the throughput timeline's quantities, summed per (time bin, direction) by `add_throughput`
THROUGHPUT_SUMS = ("wire_bytes", "payload_bytes", "packets", "published", "delivered", "acked")


def add_throughput(cap: Capture, facts: CaptureFacts, sums: dict[str, np.ndarray], acks_seen: _Acks,
                   last: bool = True) -> None:
    """Adds to `sums`, per quantity (THROUGHPUT_SUMS) an (n_bins, 2) array of sums per time bin and
    direction (column D is DIRECTIONS[D]), the packets and frames of `cap` (a partition or the
    next slice of its time, with `acks_seen` of those before; `last`: the last). Every value
    summed is a whole number, so sums of partitions and of slices add up exactly (float64 is
    exact below 2⁵³)."""
    p, f = cap.packets, cap.frames
    width_s, n_bins = time_bins(facts)
    w_ns = int(round(width_s * 1e9))

    def bin_key(ts_ns: np.ndarray, s2c: np.ndarray) -> np.ndarray:  # bin·2 + direction
        return np.clip((ts_ns - facts.t0_ns) // w_ns, 0, n_bins - 1) * 2 + s2c

    p_key = bin_key(_ns(p["ts"]), (p["direction"] == "s2c").to_numpy())
    # Frames: only the publish and deliver rows are binned, not the whole (long) frames table.
    f_ns, f_s2c = _ns(f["ts"]), (f["direction"] == "s2c").to_numpy()
    is_pub = _is_method(f, ["basic.publish"])
    is_dlv = _is_method(f, DELIVER_METHODS)
    acks = settled_by_ack(f, acks_seen, last)
    a_key = bin_key(_ns(acks["ts"]), (acks["direction"] == "s2c").to_numpy())
    undecided = acks["undecided"].to_numpy(bool)
    acks_seen.undecided_channel = np.r_[acks_seen.undecided_channel, _channel_key(acks)[undecided]]
    acks_seen.undecided_bin = np.r_[acks_seen.undecided_bin, a_key[undecided]]
    acks_seen.undecided_tag = np.r_[acks_seen.undecided_tag,
                                    acks["delivery_tag"].astype("float64").fillna(0).to_numpy()[undecided]]

    # One bincount per quantity on the key bin·2 + direction (no per-direction masks over the
    # million packets).
    def per_bin(key, weights=None):
        return np.bincount(key, weights=weights, minlength=2 * n_bins).astype(np.float64).reshape(n_bins, 2)

    sums["wire_bytes"] += per_bin(p_key, p["frame_len"].to_numpy(np.float64))
    sums["payload_bytes"] += per_bin(p_key, p["payload_bytes"].to_numpy(np.float64))
    sums["packets"] += per_bin(p_key)
    sums["published"] += per_bin(bin_key(f_ns[is_pub], f_s2c[is_pub]))
    sums["delivered"] += per_bin(bin_key(f_ns[is_dlv], f_s2c[is_dlv]))
    sums["acked"] += per_bin(a_key, acks["settled"].to_numpy(np.float64))
    if last:
        sums["acked"] += per_bin(*_decided(acks_seen))


def throughput_table(bins: dict[str, np.ndarray], t0_ns: int, width_s: float, n_bins: int) -> pd.DataFrame:
    """Per direction and time bin: Mbit/s on the wire, payload Mbit/s, packets/s and messages/s."""
    w_ns = int(round(width_s * 1e9))
    out = []
    start_s = np.arange(n_bins) * width_s
    for D, d in enumerate(DIRECTIONS):
        wire, pay, pk = bins["wire_bytes"][:, D], bins["payload_bytes"][:, D], bins["packets"][:, D]
        pub, dlv, ack = bins["published"][:, D], bins["delivered"][:, D], bins["acked"][:, D]
        out.append(pd.DataFrame({
            "start_s": start_s,
            "ts": pd.to_datetime(t0_ns + np.arange(n_bins, dtype=np.int64) * w_ns, utc=True),
            "direction": d,
            "bytes": wire.astype(np.int64),
            "packets": pk.astype(np.int64),
            "mbit_s": wire * 8 / 1e6 / width_s,
            "payload_mbit_s": pay * 8 / 1e6 / width_s,
            "packets_s": pk / width_s,
            "published_msgs_s": pub / width_s,
            "delivered_msgs_s": dlv / width_s,
            "acked_msgs_s": ack / width_s,
        }))
    return pd.concat(out, ignore_index=True)


def throughput_summary(tp: pd.DataFrame, duration_s: float, width_s: float) -> dict[str, Any]:
    out: dict[str, Any] = {"bin_s": width_s, "duration_s": duration_s}
    span = max(duration_s, width_s)
    for d in DIRECTIONS:
        t = tp[tp["direction"] == d]
        row: dict[str, Any] = {}
        for col in ("mbit_s", "packets_s", "published_msgs_s", "delivered_msgs_s", "acked_msgs_s"):
            total = float((t[col] * width_s).sum())  # back to a count (bits/1e6, packets, messages)
            row[f"peak_{col}"] = float(t[col].max()) if len(t) else 0.0
            row[f"mean_{col}"] = total / span
        out[d] = row
    return out
