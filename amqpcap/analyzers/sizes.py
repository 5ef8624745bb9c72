"""Packet sizes, frames per packet and throughput over time.

Everything here is whole-column numpy/pandas work on the ingestion tables (docs/tables.md);
the only Python loops are over the two directions and the plot panels.
Documentation of every table, summary key and plot: docs/analyzers/sizes.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..analysis import AnalyzerResult, Plot, analyzer
from ..capture import Capture
from ..partition import CaptureFacts, Split, merge_rows, run_whole

#: Wireshark's `-z plen,tree` bucket lower bounds (bytes); the last bucket is open-ended.
#: Spelled exactly as tshark prints them so `packet_sizes.bins` compares 1:1 with tshark.
PLEN_EDGES_BYTES = (0, 20, 40, 80, 160, 320, 640, 1280, 2560, 5120)
PLEN_LABELS = tuple(
    [f"{lo}-{hi - 1}" for lo, hi in zip(PLEN_EDGES_BYTES[:-1], PLEN_EDGES_BYTES[1:])] + [f"{PLEN_EDGES_BYTES[-1]} and greater"]
)
#: tshark prints bucket percentages with two decimals (`%.2f%%`).
PERCENT_DECIMALS = 2

#: The throughput timeline aims at about this many time bins over the capture: enough to see
#: bursts and stalls, few enough that a plot and a CSV stay small for any capture length.
TARGET_TIME_BINS = 200
#: Bin widths are picked from a 1-2-5 series (1 µs ... ) so bin edges are round numbers.
_NICE_STEPS = (1, 2, 5)

DIRECTIONS = ("c2s", "s2c")
DELIVER_METHODS = ("basic.deliver", "basic.get-ok")


def _ns(ts: pd.Series) -> np.ndarray:
    """Timestamps as int64 nanoseconds since the epoch (whole column, no per-row objects)."""
    return np.asarray(ts.dt.as_unit("ns").array.asi8, dtype=np.int64)


def bin_width_s(duration_s: float, target_bins: int = TARGET_TIME_BINS) -> float:
    """Smallest round (1-2-5) width giving at most ``target_bins`` bins over ``duration_s``."""
    want = max(duration_s / target_bins, 1e-6)
    exp = int(np.floor(np.log10(want)))
    for e in (exp, exp + 1):
        for step in _NICE_STEPS:
            w = step * 10.0**e
            if w >= want * (1 - 1e-9):
                return float(w)
    return float(10.0 ** (exp + 1))


#: plen bucket of every length below the last edge; longer lengths are clipped to it (last bucket).
_PLEN_LUT = np.searchsorted(np.asarray(PLEN_EDGES_BYTES), np.arange(PLEN_EDGES_BYTES[-1] + 1), side="right") - 1


def plen_bucket(frame_len: pd.Series | np.ndarray) -> np.ndarray:
    """Wireshark plen bucket index of on-wire lengths: one table lookup per row (a searchsorted
    over the edges costs several times more on a million rows)."""
    return _PLEN_LUT[np.minimum(np.asarray(frame_len), PLEN_EDGES_BYTES[-1])]


def plen_counts(frame_len: pd.Series | np.ndarray) -> np.ndarray:
    """Counts per Wireshark plen bucket for on-wire lengths."""
    return np.bincount(plen_bucket(frame_len), minlength=len(PLEN_EDGES_BYTES))


def _percent(counts: np.ndarray, total: int) -> np.ndarray:
    return np.round(counts * 100.0 / total, PERCENT_DECIMALS) if total else np.zeros(len(counts))


def _gk(df: pd.DataFrame) -> np.ndarray:
    """(stream, direction) as one int64: stream * 2 + (direction == s2c). Integer keys keep the
    per-row work in numpy; strings appear only in the (small) output tables."""
    return df["stream"].to_numpy(np.int64) * 2 + (df["direction"] == "s2c").to_numpy()


def _count_pairs(key: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(key, value, count) for every (key, value) pair that occurs: one `np.unique` on int64."""
    if not len(key):
        z = np.zeros(0, np.int64)
        return z, z, z
    key, value = np.asarray(key, np.int64), np.asarray(value, dtype=np.int64)
    n_v = int(value.max()) + 1
    if value.min() >= 0 and key.min() >= 0 and (int(key.max()) + 1) * n_v <= 4 * len(key) + 4096:
        # Few distinct (key, value) cells (the usual case: small keys, small counts): a dense
        # bincount instead of sorting every row; its nonzero cells come in the same (key, value) order.
        counts = np.bincount(key * n_v + value)
        kv = np.flatnonzero(counts)
        return kv // n_v, kv % n_v, counts[kv].astype(np.int64)
    kv, counts = np.unique((key << 32) | value, return_counts=True)
    return kv >> 32, kv & 0xFFFFFFFF, counts.astype(np.int64)


def _is_method(frames: pd.DataFrame, methods) -> np.ndarray:
    """Rows whose method is one of ``methods``, compared on the categorical's codes (small
    ints) instead of its values."""
    m = frames["method"].array
    # One gather from a per-category table; code -1 (missing) reads the appended False.
    return np.r_[m.categories.isin(list(methods)), False][m.codes]


def _stream_direction(gk: np.ndarray) -> dict[str, np.ndarray]:
    return {"stream": (gk // 2).astype(np.int32), "direction": np.where(gk % 2 == 1, "s2c", "c2s")}


def stream_size_rows(p: pd.DataFrame, gk: np.ndarray | None = None) -> pd.DataFrame:
    """plen bucket counts per stream and direction, only the buckets it uses (a capture of a
    million short connections would otherwise get ten rows each): stream, direction, b (bucket
    index), count, percent (of the stream direction). `gk`: _gk(p), when the caller has it."""
    n_b = len(PLEN_LABELS)
    if not len(p):
        return pd.DataFrame({"stream": pd.array([], dtype="Int32"), "direction": np.array([], dtype=object),
                             "b": np.zeros(0, np.int64), "count": np.zeros(0, np.int64), "percent": np.zeros(0)})
    gk = _gk(p) if gk is None else gk
    bucket = plen_bucket(p["frame_len"].to_numpy())
    cell, n = np.unique(gk * n_b + bucket, return_counts=True)  # (group × bucket) counts
    group = cell // n_b
    totals = np.bincount(group, weights=n)[group]
    return pd.DataFrame({
        "stream": pd.array((group // 2).astype(np.int32), dtype="Int32"),
        "direction": pd.Categorical.from_codes((group % 2).astype(np.int8), categories=["c2s", "s2c"]).astype(object),
        "b": cell % n_b,
        "count": n.astype(np.int64), "percent": np.round(n * 100.0 / totals, PERCENT_DECIMALS),
    })


def packet_size_table(whole: np.ndarray, streams: pd.DataFrame) -> pd.DataFrame:
    """plen buckets for the whole capture (stream <NA>, direction `all`; every bucket; `whole`:
    plen_counts of the records) then per stream and direction (`streams`: stream_size_rows)."""
    n_b = len(PLEN_LABELS)
    lo = np.asarray(PLEN_EDGES_BYTES)
    hi = pd.array(np.r_[lo[1:] - 1, 0], dtype="Int64")
    hi[n_b - 1] = pd.NA
    parts = [pd.DataFrame({"stream": pd.array([pd.NA] * n_b, dtype="Int32"), "direction": "all", "b": np.arange(n_b),
                           "count": whole, "percent": _percent(whole, int(whole.sum()))})]
    if len(streams):
        parts.append(streams)
    out = pd.concat(parts, ignore_index=True)
    b = out.pop("b").to_numpy()
    out.insert(2, "range", np.asarray(PLEN_LABELS)[b])
    out.insert(3, "min_bytes", lo[b])
    out.insert(4, "max_bytes", hi.take(b))
    out["count"] = out["count"].astype(np.int64)
    return out


def payload_size_table(gk: np.ndarray, size: np.ndarray) -> pd.DataFrame:
    """Distribution of TCP payload sizes of data segments per stream and direction."""
    cols = ["stream", "direction", "segments", "payload_bytes", "mean_bytes", "min_bytes", "p10_bytes", "p50_bytes",
            "p90_bytes", "p99_bytes", "max_bytes"]
    if not len(gk):
        return pd.DataFrame(columns=cols)
    # Sorted by (group, size) in one int64 sort: quantiles are positions inside each group's slice.
    key = np.sort((gk << 32) | size)
    gk, size = key >> 32, key & 0xFFFFFFFF
    start = np.flatnonzero(np.r_[True, gk[1:] != gk[:-1]])
    n = np.diff(np.r_[start, len(gk)])
    out = pd.DataFrame({"stream": (gk[start] // 2).astype(np.int32), "direction": np.where(gk[start] % 2 == 1, "s2c", "c2s"),
                        "segments": n, "payload_bytes": np.add.reduceat(size, start)})
    out["mean_bytes"] = out["payload_bytes"] / n
    out["min_bytes"] = size[start]
    for q in (10, 50, 90, 99):
        # Linear interpolation between order statistics, as numpy/pandas quantile does.
        # The position within the group, not within the array: the value must not depend on
        # where the group sits (which other connections share the partition).
        pos = (n - 1) * (q / 100)
        below = np.floor(pos)
        lo_i = start + below.astype(np.int64)
        hi_i = np.minimum(lo_i + 1, start + n - 1)
        out[f"p{q}_bytes"] = size[lo_i] + (size[hi_i] - size[lo_i]) * (pos - below)
    out["max_bytes"] = size[start + n - 1]
    return out[cols]


def frames_per_packet_table(gk: np.ndarray, frames_ended: np.ndarray) -> pd.DataFrame:
    """How many AMQP frames each data packet completes (`frames_ended`), per stream and direction."""
    gk, v, n = _count_pairs(gk, frames_ended)
    return pd.DataFrame({**_stream_direction(gk), "frames_per_packet": v, "packets": n})


def _rank_in_group(gk: np.ndarray) -> np.ndarray:
    """Each row's number of earlier rows with the same non-negative key (a groupby cumcount):
    its position in the stable sort by key minus where its key's run starts there (the counts
    of the smaller keys). Keys below 2¹⁶ sort as uint16, for which numpy's stable sort is a
    radix sort."""
    if not len(gk):
        return np.zeros(0, np.int64)
    o = np.argsort(gk.astype(np.uint16) if gk.max() < 1 << 16 else gk, kind="stable")
    counts = np.bincount(gk)
    run_start = np.cumsum(counts) - counts
    rank = np.empty(len(gk), np.int64)
    rank[o] = np.arange(len(gk))
    rank -= run_start[gk]
    return rank


def packets_per_frame(frames: pd.DataFrame, gk: np.ndarray, pkt: np.ndarray) -> np.ndarray:
    """For each frame, the data packets of its stream direction from `first_packet` to `packet`.

    Both ends are data packets of the frame's own stream direction, so the span is the
    difference of their running counts within that direction, found by binary search in the
    data packets' numbers (unique across the file, in order; a lookup indexed by packet number
    would be as long as the whole capture for a partition's few)."""
    if not len(frames):
        return np.zeros(0, np.int64)
    # data is in packet order, so a running count per group is each packet's rank in its group.
    rank = _rank_in_group(gk)

    def rank_of(packets: np.ndarray) -> np.ndarray:
        return rank[np.searchsorted(pkt, packets)]

    return rank_of(frames["packet"].to_numpy(np.int64)) - rank_of(frames["first_packet"].to_numpy(np.int64)) + 1


def packets_per_frame_table(frames: pd.DataFrame, span: np.ndarray) -> pd.DataFrame:
    """Frames by the number of data packets they span, per stream, direction and frame type."""
    # The frame type rides in the key as its category code (4 types: 3 bits are enough).
    code = frames["type"].cat.codes.to_numpy(np.int64)
    key, v, n = _count_pairs(_gk(frames) * 8 + code, span)
    types = np.asarray(frames["type"].cat.categories, dtype=object)
    return pd.DataFrame({**_stream_direction(key // 8), "type": types[key % 8], "packets_per_frame": v, "frames": n})


def settled_by_ack(frames: pd.DataFrame) -> pd.DataFrame:
    """basic.ack frames with the number of delivery tags each one settles (`settled`).

    A single ack settles one tag; `multiple` settles every tag up to its own that no earlier ack
    of the same (stream, channel, direction) settled: its tag minus the highest tag acked before
    (a running max). The first ack of a channel counts from tag 0 when the channel was opened in
    the capture, else it counts as settling one tag (we do not know where the tags started).
    Limit: a single ack out of order above a later multiple ack's base is not subtracted.
    """
    # Only the columns needed: the frames table is wide, a row filter would copy all of it.
    rows = np.flatnonzero(_is_method(frames, ["basic.ack"]))
    acks = pd.DataFrame({c: frames[c].array.take(rows) for c in ("ts", "stream", "channel", "direction", "delivery_tag",
                                                                   "multiple")}, index=frames.index[rows])
    if not len(acks):
        return acks.assign(settled=np.zeros(0, dtype=np.int64))
    # (stream, channel, direction) as one int64 key (channel < 2¹⁶; the direction's category
    # code + 1, so a missing direction is a group of its own): grouping on one integer column
    # costs a fraction of grouping on three. (direction stays categorical in the result.)
    key = ((acks["stream"].to_numpy(np.int64) << 18) | (acks["channel"].to_numpy(np.int64) << 2)
           | (acks["direction"].array.codes.astype(np.int64) + 1))
    tag = acks["delivery_tag"].astype("float64").fillna(0).to_numpy()
    multiple = acks["multiple"].fillna(False).to_numpy(bool)
    prev_max = pd.Series(tag, index=acks.index).groupby(key).cummax().groupby(key).shift(1)
    # Where a channel's tags start: channel.open seen (both directions share it) → tag 0.
    opened = frames.loc[_is_method(frames, ["channel.open"]), ["stream", "channel"]].drop_duplicates()
    opened_key = set(zip(opened["stream"].tolist(), opened["channel"].tolist())) if len(opened) else set()
    first = prev_max.isna().to_numpy()
    if first.any():
        sc = list(zip(acks["stream"].to_numpy()[first].tolist(), acks["channel"].to_numpy()[first].tolist()))
        base = np.array([0.0 if k in opened_key else np.nan for k in sc])  # one entry per channel, not per frame
        pm = prev_max.to_numpy().copy()
        pm[first] = np.where(np.isnan(base), tag[first] - 1, base)
    else:
        pm = prev_max.to_numpy()
    settled = np.where(multiple, np.clip(tag - pm, 0, None), 1).astype(np.int64)
    return acks.assign(settled=settled)


#: the throughput timeline's quantities, summed per (time bin, direction) by `throughput_bins`
THROUGHPUT_SUMS = ("wire_bytes", "payload_bytes", "packets", "published", "delivered", "acked")


def throughput_bins(cap: Capture, t0_ns: int, width_s: float, n_bins: int) -> dict[str, np.ndarray]:
    """Per quantity (THROUGHPUT_SUMS) an (n_bins, 2) array of sums per time bin and direction
    (column D is DIRECTIONS[D]). Every value summed is a whole number, so sums of partitions
    add up exactly (float64 is exact below 2⁵³)."""
    p, f = cap.packets, cap.frames
    w_ns = int(round(width_s * 1e9))

    def bin_key(ts_ns: np.ndarray, s2c: np.ndarray) -> np.ndarray:  # bin·2 + direction
        return np.clip((ts_ns - t0_ns) // w_ns, 0, n_bins - 1) * 2 + s2c

    p_key = bin_key(_ns(p["ts"]), (p["direction"] == "s2c").to_numpy())
    # Frames: only the publish and deliver rows are binned, not the whole (long) frames table.
    f_ns, f_s2c = _ns(f["ts"]), (f["direction"] == "s2c").to_numpy()
    is_pub = _is_method(f, ["basic.publish"])
    is_dlv = _is_method(f, DELIVER_METHODS)
    acks = settled_by_ack(f)

    # One bincount per quantity on the key bin·2 + direction (no per-direction masks over the
    # million packets).
    def per_bin(key, weights=None):
        return np.bincount(key, weights=weights, minlength=2 * n_bins).astype(np.float64).reshape(n_bins, 2)

    return {
        "wire_bytes": per_bin(p_key, p["frame_len"].to_numpy(np.float64)),
        "payload_bytes": per_bin(p_key, p["payload_bytes"].to_numpy(np.float64)),
        "packets": per_bin(p_key),
        "published": per_bin(bin_key(f_ns[is_pub], f_s2c[is_pub])),
        "delivered": per_bin(bin_key(f_ns[is_dlv], f_s2c[is_dlv])),
        "acked": per_bin(bin_key(_ns(acks["ts"]), (acks["direction"] == "s2c").to_numpy()),
                         acks["settled"].to_numpy(np.float64)),
    }


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


# --------------------------------------------------------------------------------------------- plots


def _plot_packet_sizes(whole: pd.DataFrame, amqp: pd.DataFrame):
    def draw(path: Path) -> None:
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(9, 4.5))
        x = np.arange(len(PLEN_LABELS))
        ax.bar(x, whole["count"], color="#cccccc", label="whole capture", width=0.8)
        for i, d in enumerate(DIRECTIONS):
            c = amqp[amqp["direction"] == d].groupby("range", sort=False)["count"].sum().reindex(PLEN_LABELS, fill_value=0)
            ax.bar(x + (i - 0.5) * 0.36, c.to_numpy(), width=0.36, label=f"AMQP {d}", color=("#1f77b4", "#ff7f0e")[i])
        for xi, (n, pc) in enumerate(zip(whole["count"], whole["percent"])):
            if n:
                ax.annotate(f"{n:,}\n{pc:.2f}%", (xi, n), ha="center", va="bottom", fontsize=8)
        ax.set_xticks(x, PLEN_LABELS, rotation=30, ha="right")
        ax.set_xlabel("on-wire packet length (bytes, Wireshark plen buckets)")
        ax.set_ylabel("packets")
        ax.set_ylim(0, max(1, whole["count"].max()) * 1.2)
        ax.set_title(f"Packet sizes ({int(whole['count'].sum()):,} packets)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=110)

    return draw


def _plot_frames_per_packet(fpp: pd.DataFrame):
    def draw(path: Path) -> None:
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 4.5))
        t = fpp.groupby(["frames_per_packet", "direction"])["packets"].sum().unstack("direction", fill_value=0)
        t = t.reindex(columns=list(DIRECTIONS), fill_value=0)
        # Beyond 30 frames per packet the bars are unreadable: lump the tail into one bar.
        cap_at = 30
        if len(t) and t.index.max() > cap_at:
            tail = t[t.index > cap_at].sum()
            t = t[t.index <= cap_at]
            t.loc[cap_at + 1] = tail
        labels = [str(i) if i <= cap_at else f">{cap_at}" for i in t.index]
        x = np.arange(len(t))
        for i, d in enumerate(DIRECTIONS):
            bars = ax.bar(x + (i - 0.5) * 0.4, t[d].to_numpy(), width=0.4, label=d)
            ax.bar_label(bars, labels=[f"{v:,}" if v else "" for v in t[d].to_numpy()], fontsize=7)
        ax.set_xticks(x, labels)
        ax.set_xlabel("AMQP frames completed in the packet (data packets only)")
        ax.set_ylabel("packets")
        ax.set_title("AMQP frames per TCP data packet")
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=110)

    return draw


def _plot_throughput(tp: pd.DataFrame, width_s: float):
    def draw(path: Path) -> None:
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(3, 1, figsize=(10, 8), sharex=True)
        for d in DIRECTIONS:
            t = tp[tp["direction"] == d]
            axes[0].step(t["start_s"], t["mbit_s"], where="post", label=d)
            axes[1].step(t["start_s"], t["packets_s"], where="post", label=d)
        c2s, s2c = tp[tp["direction"] == "c2s"], tp[tp["direction"] == "s2c"]
        for t, col, label in ((c2s, "published_msgs_s", "published (c2s)"), (s2c, "delivered_msgs_s", "delivered (s2c)"),
                              (c2s, "acked_msgs_s", "acked by consumers (c2s)"), (s2c, "acked_msgs_s", "confirmed (s2c)")):
            if t[col].any():
                axes[2].step(t["start_s"], t[col], where="post", label=label)
        axes[0].set_ylabel("Mbit/s (on wire)")
        axes[1].set_ylabel("packets/s")
        axes[2].set_ylabel("messages/s")
        axes[2].set_xlabel(f"time since capture start (s), {width_s * 1e3:g} ms bins")
        for ax in axes:
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(loc="upper right", fontsize=8)
        axes[0].set_title("Throughput per direction")
        fig.tight_layout()
        fig.savefig(path, dpi=110)

    return draw


#: the segment-size plot's payload axis: quarter-octave bins from 1 byte to 4 GiB, fixed so that
#: the histograms of partitions add up (the plot shows the rows that hold segments)
SEGMENT_SIZE_EDGES = 2.0 ** (np.arange(0, 32 * 4 + 1) / 4)


def segment_time_edges(duration_s: float) -> np.ndarray:
    # Half the timeline resolution: each cell then holds enough segments for the colour to mean something.
    return np.linspace(0, max(duration_s, 1e-6), TARGET_TIME_BINS // 2 + 1)


def segment_histograms(ts_ns: np.ndarray, size: np.ndarray, s2c: np.ndarray, facts: CaptureFacts) -> np.ndarray:
    """Data segments per (direction, time cell, payload size cell): a (2, time cells, size cells)
    array of counts, the time axis over the whole capture."""
    t_s = (ts_ns - facts.t0_ns) / 1e9
    x_edges = segment_time_edges(facts.duration_s)
    return np.stack([np.histogram2d(t_s[s2c == (d == "s2c")], size[s2c == (d == "s2c")].astype(np.float64),
                                    bins=(x_edges, SEGMENT_SIZE_EDGES))[0] for d in DIRECTIONS])


def _plot_segment_sizes(hist: np.ndarray, segments: np.ndarray, duration_s: float):
    """`hist`: segment_histograms (summed over partitions); `segments`: data segments per direction."""
    # A 2D histogram (time × payload size) per direction: any number of segments renders as one image.
    def draw(path: Path) -> None:
        import matplotlib.pyplot as plt
        from matplotlib.colors import LogNorm

        x_edges = segment_time_edges(duration_s)
        used = np.flatnonzero(hist.sum(axis=(0, 1)))
        lo, hi = (int(used[0]), int(used[-1]) + 1) if len(used) else (0, 4)
        y_edges = SEGMENT_SIZE_EDGES[lo:hi + 1]
        fig, axes = plt.subplots(2, 1, figsize=(10, 7), sharex=True, sharey=True)
        mesh = None
        for D, (ax, d) in enumerate(zip(axes, DIRECTIONS)):
            h = hist[D][:, lo:hi]
            if h.any():
                mesh = ax.pcolormesh(x_edges, y_edges, np.ma.masked_equal(h.T, 0), norm=LogNorm(vmin=1, vmax=max(h.max(), 2)),
                                     cmap="viridis", shading="flat")
            ax.set_yscale("log")
            ax.set_ylabel("TCP payload (bytes)")
            ax.set_title(f"{d}: {int(segments[D]):,} data segments")
            ax.grid(alpha=0.3)
        axes[1].set_xlabel("time since capture start (s)")
        if mesh is not None:
            from ..plotting import log_colorbar

            log_colorbar(fig, mesh, axes, "segments per cell")
        from ..plotting import plain_axis

        for ax in axes:
            plain_axis(ax.yaxis, log=True)
        fig.suptitle("TCP segment sizes over time")
        fig.savefig(path, dpi=110)

    return draw


# ------------------------------------------------------------------------------------------ analyzer


def time_bins(facts: CaptureFacts) -> tuple[float, int]:
    """The throughput timeline's bin width (s) and number of bins over the whole capture."""
    width_s = bin_width_s(facts.duration_s)
    return width_s, int(np.floor(facts.duration_s / width_s)) + 1


def sizes_partial(cap: Capture, facts: CaptureFacts) -> dict[str, Any]:
    """What a partition of whole connections contributes: its connections' rows of the per-stream
    tables (with their sort keys), throughput sums per time bin, segment-size histograms."""
    p, f = cap.packets, cap.frames
    # Data packets (TCP payload > 0) as plain arrays: filtering the whole table would copy every column.
    payload = p["payload_bytes"].to_numpy()
    is_data = payload > 0
    gk = _gk(p)
    d_gk = gk[is_data]
    # Rows first, then the int64 conversion: only the data rows are converted.
    d_pkt = p["packet"].to_numpy()[is_data].astype(np.int64)
    d_size = payload[is_data].astype(np.int64)
    span = packets_per_frame(f, d_gk, d_pkt)
    ppf = packets_per_frame_table(f, span)
    ppf.insert(0, "_type", f["type"].cat.categories.get_indexer(ppf["type"]))
    width_s, n_bins = time_bins(facts)
    s2c = d_gk % 2 == 1
    return {
        "streams": stream_size_rows(p, gk),
        "payload": payload_size_table(d_gk, d_size),
        "fpp": frames_per_packet_table(d_gk, p["frames_ended"].to_numpy()[is_data].astype(np.int64)),
        "ppf": ppf,
        "throughput": throughput_bins(cap, facts.t0_ns, width_s, n_bins),
        "segment_hist": segment_histograms(_ns(p["ts"])[is_data], d_size, s2c, facts),
        "segments": np.array([int((~s2c).sum()), int(s2c.sum())]),
    }


def sizes_records(records: pd.DataFrame, facts: CaptureFacts) -> np.ndarray:
    """plen bucket counts of every packet in the file (AMQP or not)."""
    return plen_counts(records["frame_len"])


def sizes_merge(partials: list[dict[str, Any]], whole: np.ndarray, facts: CaptureFacts, cap: Capture) -> AnalyzerResult:
    """The result from the partitions' partials and the records' plen counts (`whole`)."""
    def rows(name: str, key: list[str]) -> pd.DataFrame:
        return merge_rows([q[name] for q in partials], key)

    sizes_t = packet_size_table(whole, rows("streams", ["stream", "direction", "b"]))
    whole_t = sizes_t[sizes_t["direction"] == "all"]
    amqp = sizes_t[sizes_t["direction"] != "all"]
    payload_t = rows("payload", ["stream", "direction"])
    fpp = rows("fpp", ["stream", "direction", "frames_per_packet"])
    ppf = rows("ppf", ["stream", "direction", "_type", "packets_per_frame"])
    width_s, n_bins = time_bins(facts)
    bins = {k: np.sum([q["throughput"][k] for q in partials], axis=0) for k in THROUGHPUT_SUMS}
    tp = throughput_table(bins, facts.t0_ns, width_s, n_bins)

    total = int(whole_t["count"].sum())
    fpp_all = fpp.groupby("frames_per_packet")["packets"].sum() if len(fpp) else pd.Series(dtype=np.int64)
    # Frames per span from the (small) table, not a value_counts over every frame.
    ppf_all = ppf.groupby("packets_per_frame")["frames"].sum() if len(ppf) else pd.Series(dtype=np.int64)
    summary = {
        "packet_sizes": {
            "bins": [{"range": r, "count": int(c), "percent": float(pc)}
                     for r, c, pc in zip(whole_t["range"], whole_t["count"], whole_t["percent"])],
            "total": total,
        },
        "frames_per_packet": {str(int(k)): int(v) for k, v in fpp_all.items()},
        "packets_per_frame": {str(int(k)): int(v) for k, v in ppf_all.items()},
        "throughput": throughput_summary(tp, facts.duration_s, width_s),
    }
    hist = np.sum([q["segment_hist"] for q in partials], axis=0)
    segments = np.sum([q["segments"] for q in partials], axis=0)
    plots = [
        Plot("sizes-packet-sizes", "Packet sizes (Wireshark plen buckets)", _plot_packet_sizes(whole_t, amqp)),
        Plot("sizes-frames-per-packet", "AMQP frames per TCP data packet", _plot_frames_per_packet(fpp)),
        Plot("sizes-throughput", "Throughput per direction over time", _plot_throughput(tp, width_s)),
        Plot("sizes-segment-sizes", "TCP segment sizes over time", _plot_segment_sizes(hist, segments, facts.duration_s)),
    ]
    tables = {
        "packet-sizes": sizes_t,
        "payload-sizes": payload_t,
        "frames-per-packet": fpp,
        "packets-per-frame": ppf,
        "throughput": tp,
    }
    return AnalyzerResult("sizes", tables=tables, summary=summary, findings=[], plots=plots)


SPLIT = Split(partial=sizes_partial, merge=sizes_merge, records=sizes_records, records_columns=("frame_len",))


@analyzer("sizes", split=SPLIT)
def sizes(cap: Capture) -> AnalyzerResult:
    """Packet sizes (Wireshark plen buckets), frames per packet and throughput over time."""
    return run_whole(SPLIT, cap)
