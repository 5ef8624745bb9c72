"""Throughput over time: bytes, packets and messages (published, delivered, acknowledged) per time
bin and direction. Which messages an ack settled is `amqpcap.derive.acked`'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ...io.load import Capture
from ...derive.acked import ack_times_ns
from ...derive.amqp10.messages import amqp10_messages
from ...model.facts import CaptureFacts, ns
from .bins import time_bins
from .constants import DELIVER_METHODS, DIRECTIONS
from .counts import _is_method


#: the throughput timeline's quantities, summed per (time bin, direction) by `add_throughput`
THROUGHPUT_SUMS = ("wire_bytes", "payload_bytes", "packets", "published", "delivered", "acked")


def add_throughput(cap: Capture, facts: CaptureFacts, sums: dict[str, np.ndarray], last: bool = True,
                   amqp10_before: list[pd.DataFrame] | None = None) -> None:
    """Adds to `sums`, per quantity (THROUGHPUT_SUMS) an (n_bins, 2) array of sums per time bin and
    direction (column D is DIRECTIONS[D]), the packets and frames of `cap` (a partition or the
    next slice of its time; `last`: the last), and the messages acknowledged it tells
    (`ack_times_ns`: each once over the slices). Every value summed is a whole number, so sums
    of partitions and of slices add up exactly (float64 is exact below 2⁵³).

    AMQP 1.0 connections count alike (`amqp10_messages`): `amqp10_before` holds the partition's
    `amqp10_frames` of the slices before (their deliveries are settled by dispositions of later
    slices; the caller gathers them while `last` is false)."""
    p, f = cap.packets, cap.frames
    width_s, n_bins = time_bins(facts)
    w_ns = int(round(width_s * 1e9))

    def bin_key(ts_ns: np.ndarray, s2c: np.ndarray) -> np.ndarray:  # bin·2 + direction
        return np.clip((ts_ns - facts.t0_ns) // w_ns, 0, n_bins - 1) * 2 + s2c

    p_key = bin_key(ns(p["ts"]), (p["direction"] == "s2c").to_numpy())
    # Frames: only the publish and deliver rows are binned, not the whole (long) frames table.
    f_ns, f_s2c = ns(f["ts"]), (f["direction"] == "s2c").to_numpy()
    is_pub = _is_method(f, ["basic.publish"])
    is_dlv = _is_method(f, DELIVER_METHODS)
    acked_ns = ack_times_ns(cap, last)
    a_key = np.concatenate([bin_key(acked_ns[d], D) for D, d in enumerate(DIRECTIONS)])

    # One bincount per quantity on the key bin·2 + direction (no per-direction masks over the
    # million packets).
    def per_bin(key, weights=None):
        return np.bincount(key, weights=weights, minlength=2 * n_bins).astype(np.float64).reshape(n_bins, 2)

    sums["wire_bytes"] += per_bin(p_key, p["frame_len"].to_numpy(np.float64))
    sums["payload_bytes"] += per_bin(p_key, p["payload_bytes"].to_numpy(np.float64))
    sums["packets"] += per_bin(p_key)
    sums["published"] += per_bin(bin_key(f_ns[is_pub], f_s2c[is_pub]))
    sums["delivered"] += per_bin(bin_key(f_ns[is_dlv], f_s2c[is_dlv]))
    sums["acked"] += per_bin(a_key)
    if len(cap.amqp10_frames) or (last and amqp10_before):  # (no AMQP 1.0: nothing is looked at)
        pub10, dlv10, acked10 = amqp10_messages(cap, amqp10_before or [], last)
        sums["published"] += per_bin(bin_key(pub10, 0))
        sums["delivered"] += per_bin(bin_key(dlv10, 1))
        sums["acked"] += per_bin(np.concatenate([bin_key(acked10[d], D) for D, d in enumerate(DIRECTIONS)]))


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
