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


def plen_counts(frame_len: pd.Series | np.ndarray) -> np.ndarray:
    """Counts per Wireshark plen bucket for on-wire lengths."""
    idx = np.searchsorted(np.asarray(PLEN_EDGES_BYTES), np.asarray(frame_len, dtype=np.int64), side="right") - 1
    return np.bincount(idx, minlength=len(PLEN_EDGES_BYTES))


def _percent(counts: np.ndarray, total: int) -> np.ndarray:
    return np.round(counts * 100.0 / total, PERCENT_DECIMALS) if total else np.zeros(len(counts))


def packet_size_table(cap: Capture) -> pd.DataFrame:
    """plen buckets for the whole capture (stream <NA>, direction `all`) and per stream and direction."""
    whole = plen_counts(cap.records["frame_len"])
    n_b = len(PLEN_LABELS)
    lo = np.asarray(PLEN_EDGES_BYTES)
    hi = np.append(lo[1:] - 1, -1)
    rows = [pd.DataFrame({
        "stream": pd.array([pd.NA] * n_b, dtype="Int32"),
        "direction": "all",
        "range": PLEN_LABELS,
        "min_bytes": lo,
        "max_bytes": pd.array(np.where(hi < 0, 0, hi), dtype="Int64"),
        "count": whole,
        "percent": _percent(whole, int(whole.sum())),
    })]
    rows[0].loc[n_b - 1, "max_bytes"] = pd.NA
    p = cap.packets
    if len(p):
        bucket = np.searchsorted(lo, p["frame_len"].to_numpy(np.int64), side="right") - 1
        counts = (
            pd.DataFrame({"stream": p["stream"].to_numpy(), "direction": p["direction"].astype(str).to_numpy(), "b": bucket})
            .groupby(["stream", "direction", "b"]).size()
            .unstack("b", fill_value=0)
            .reindex(columns=range(n_b), fill_value=0)
        )
        totals = counts.sum(axis=1).to_numpy()
        long = counts.stack().rename("count").reset_index()
        tot_long = np.repeat(totals, n_b)
        long["range"] = np.asarray(PLEN_LABELS)[long["b"].to_numpy()]
        long["min_bytes"] = lo[long["b"].to_numpy()]
        mx = hi[long["b"].to_numpy()]
        long["max_bytes"] = pd.array(np.where(mx < 0, 0, mx), dtype="Int64")
        long.loc[mx < 0, "max_bytes"] = pd.NA
        long["percent"] = np.round(long["count"].to_numpy() * 100.0 / tot_long, PERCENT_DECIMALS)
        long["stream"] = long["stream"].astype("Int32")
        rows.append(long[["stream", "direction", "range", "min_bytes", "max_bytes", "count", "percent"]])
    out = pd.concat(rows, ignore_index=True)
    out["count"] = out["count"].astype(np.int64)
    return out


def payload_size_table(data: pd.DataFrame) -> pd.DataFrame:
    """Distribution of TCP payload sizes of data segments per stream and direction."""
    cols = ["stream", "direction", "segments", "payload_bytes", "mean_bytes", "min_bytes", "p10_bytes", "p50_bytes",
            "p90_bytes", "p99_bytes", "max_bytes"]
    if not len(data):
        return pd.DataFrame(columns=cols)
    g = data.groupby(["stream", "direction"], observed=True)["payload_bytes"]
    out = g.agg(segments="size", payload_bytes="sum", mean_bytes="mean", min_bytes="min", max_bytes="max")
    q = g.quantile([0.1, 0.5, 0.9, 0.99]).unstack()
    q.columns = ["p10_bytes", "p50_bytes", "p90_bytes", "p99_bytes"]
    out = out.join(q).reset_index()
    out["direction"] = out["direction"].astype(str)
    return out[cols]


def frames_per_packet_table(data: pd.DataFrame) -> pd.DataFrame:
    """How many AMQP frames each data packet completes (`frames_ended`), per stream and direction."""
    if not len(data):
        return pd.DataFrame(columns=["stream", "direction", "frames_per_packet", "packets"])
    out = (
        data.groupby(["stream", "direction", "frames_ended"], observed=True).size().rename("packets").reset_index()
        .rename(columns={"frames_ended": "frames_per_packet"})
    )
    out["direction"] = out["direction"].astype(str)
    return out[out["packets"] > 0].reset_index(drop=True)


def _group_key(stream: pd.Series, direction: pd.Series, packet: pd.Series | np.ndarray) -> np.ndarray:
    """One sortable int64 per (stream, direction, packet): packets of a stream direction are contiguous."""
    g = stream.to_numpy(np.int64) * 2 + (direction.to_numpy() == "s2c")
    return (g << 32) | np.asarray(packet, dtype=np.int64)


def packets_per_frame(frames: pd.DataFrame, data: pd.DataFrame) -> np.ndarray:
    """For each frame, the data packets of its stream direction from `first_packet` to `packet`."""
    keys = np.sort(_group_key(data["stream"], data["direction"], data["packet"]))
    first = _group_key(frames["stream"], frames["direction"], frames["first_packet"])
    last = _group_key(frames["stream"], frames["direction"], frames["packet"])
    return np.searchsorted(keys, last, side="right") - np.searchsorted(keys, first, side="left")


def packets_per_frame_table(frames: pd.DataFrame, span: np.ndarray) -> pd.DataFrame:
    cols = ["stream", "direction", "type", "packets_per_frame", "frames"]
    if not len(frames):
        return pd.DataFrame(columns=cols)
    out = (
        pd.DataFrame({"stream": frames["stream"].to_numpy(), "direction": frames["direction"].astype(str).to_numpy(),
                      "type": frames["type"].astype(str).to_numpy(), "packets_per_frame": span})
        .groupby(cols[:-1]).size().rename("frames").reset_index()
    )
    return out


def settled_by_ack(frames: pd.DataFrame) -> pd.DataFrame:
    """basic.ack frames with the number of delivery tags each one settles (`settled`).

    A single ack settles one tag; `multiple` settles every tag up to its own that no earlier ack
    of the same (stream, channel, direction) settled: its tag minus the highest tag acked before
    (a running max). The first ack of a channel counts from tag 0 when the channel was opened in
    the capture, else it counts as settling one tag (we do not know where the tags started).
    Limit: a single ack out of order above a later multiple ack's base is not subtracted.
    """
    acks = frames[frames["method"] == "basic.ack"]
    if not len(acks):
        return acks.assign(settled=np.zeros(0, dtype=np.int64))
    acks = acks.assign(direction=acks["direction"].astype(str))
    tag = acks["delivery_tag"].astype("float64").fillna(0).to_numpy()
    multiple = acks["multiple"].fillna(False).to_numpy(bool)
    keys = ["stream", "channel", "direction"]
    prev_max = (
        pd.Series(tag, index=acks.index).groupby([acks[k] for k in keys]).cummax()
        .groupby([acks[k] for k in keys]).shift(1)
    )
    # Where a channel's tags start: channel.open seen (both directions share it) → tag 0.
    opened = frames.loc[frames["method"] == "channel.open", ["stream", "channel"]].drop_duplicates()
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


def throughput_table(cap: Capture, t0_ns: int, width_s: float, n_bins: int) -> pd.DataFrame:
    """Per direction and time bin: Mbit/s on the wire, payload Mbit/s, packets/s and messages/s."""
    p, f = cap.packets, cap.frames
    w_ns = int(round(width_s * 1e9))

    def bins(ts: pd.Series) -> np.ndarray:
        return np.clip((_ns(ts) - t0_ns) // w_ns, 0, n_bins - 1)

    p_bin, p_dir = bins(p["ts"]), p["direction"].to_numpy()
    f_dir = f["direction"].to_numpy()
    method = f["method"]
    acks = settled_by_ack(f)
    a_bin, a_dir = bins(acks["ts"]), acks["direction"].to_numpy()
    f_bin = bins(f["ts"])
    out = []
    start_s = np.arange(n_bins) * width_s
    for d in DIRECTIONS:
        m = p_dir == d
        wire = np.bincount(p_bin[m], weights=p["frame_len"].to_numpy(np.float64)[m], minlength=n_bins)
        pay = np.bincount(p_bin[m], weights=p["payload_bytes"].to_numpy(np.float64)[m], minlength=n_bins)
        pk = np.bincount(p_bin[m], minlength=n_bins)
        fd = f_dir == d
        pub = np.bincount(f_bin[fd & (method == "basic.publish").to_numpy()], minlength=n_bins)
        dlv = np.bincount(f_bin[fd & method.isin(DELIVER_METHODS).to_numpy()], minlength=n_bins)
        am = a_dir == d
        ack = np.bincount(a_bin[am], weights=acks["settled"].to_numpy(np.float64)[am], minlength=n_bins)
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
            ax.bar(x + (i - 0.5) * 0.4, t[d].to_numpy(), width=0.4, label=d)
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


def _plot_segment_sizes(data: pd.DataFrame, t0_ns: int, duration_s: float):
    # A 2D histogram (time × payload size) per direction: any number of segments renders as one image.
    t_s = (_ns(data["ts"]) - t0_ns) / 1e9
    size = data["payload_bytes"].to_numpy(np.float64)
    dirs = data["direction"].to_numpy()

    def draw(path: Path) -> None:
        import matplotlib.pyplot as plt
        from matplotlib.colors import LogNorm

        fig, axes = plt.subplots(2, 1, figsize=(10, 7), sharex=True, sharey=True)
        # Half the timeline resolution: each cell then holds enough segments for the colour to mean something.
        x_edges = np.linspace(0, max(duration_s, 1e-6), TARGET_TIME_BINS // 2 + 1)
        y_edges = np.logspace(0, np.log10(max(2.0, size.max() * 1.05 if len(size) else 2.0)), 60)
        mesh = None
        for ax, d in zip(axes, DIRECTIONS):
            m = dirs == d
            h, _, _ = np.histogram2d(t_s[m], size[m], bins=(x_edges, y_edges))
            if h.any():
                mesh = ax.pcolormesh(x_edges, y_edges, np.ma.masked_equal(h.T, 0), norm=LogNorm(vmin=1, vmax=max(h.max(), 2)),
                                     cmap="viridis", shading="flat")
            ax.set_yscale("log")
            ax.set_ylabel("TCP payload (bytes)")
            ax.set_title(f"{d}: {int(m.sum()):,} data segments")
            ax.grid(alpha=0.3)
        axes[1].set_xlabel("time since capture start (s)")
        if mesh is not None:
            fig.colorbar(mesh, ax=axes, label="segments per cell")
        fig.suptitle("TCP segment sizes over time")
        fig.savefig(path, dpi=110)

    return draw


# ------------------------------------------------------------------------------------------ analyzer


@analyzer("sizes")
def sizes(cap: Capture) -> AnalyzerResult:
    """Packet sizes (Wireshark plen buckets), frames per packet and throughput over time."""
    p, f = cap.packets, cap.frames
    data = p[p["payload_bytes"] > 0]

    sizes_t = packet_size_table(cap)
    whole = sizes_t[sizes_t["direction"] == "all"]
    amqp = sizes_t[sizes_t["direction"] != "all"]
    payload_t = payload_size_table(data)
    fpp = frames_per_packet_table(data)
    span = packets_per_frame(f, data)
    ppf = packets_per_frame_table(f, span)

    rec_ts = cap.records["ts"]
    if len(rec_ts):
        t0_ns, t1_ns = int(_ns(rec_ts).min()), int(_ns(rec_ts).max())
    else:
        t0_ns = t1_ns = 0
    duration_s = (t1_ns - t0_ns) / 1e9
    width_s = bin_width_s(duration_s)
    n_bins = int(np.floor(duration_s / width_s)) + 1
    tp = throughput_table(cap, t0_ns, width_s, n_bins)

    total = int(whole["count"].sum())
    fpp_all = fpp.groupby("frames_per_packet")["packets"].sum() if len(fpp) else pd.Series(dtype=np.int64)
    ppf_all = pd.Series(span).value_counts().sort_index() if len(span) else pd.Series(dtype=np.int64)
    summary = {
        "packet_sizes": {
            "bins": [{"range": r, "count": int(c), "percent": float(pc)}
                     for r, c, pc in zip(whole["range"], whole["count"], whole["percent"])],
            "total": total,
        },
        "frames_per_packet": {str(int(k)): int(v) for k, v in fpp_all.items()},
        "packets_per_frame": {str(int(k)): int(v) for k, v in ppf_all.items()},
        "throughput": throughput_summary(tp, duration_s, width_s),
    }
    plots = [
        Plot("sizes-packet-sizes", "Packet sizes (Wireshark plen buckets)", _plot_packet_sizes(whole, amqp)),
        Plot("sizes-frames-per-packet", "AMQP frames per TCP data packet", _plot_frames_per_packet(fpp)),
        Plot("sizes-throughput", "Throughput per direction over time", _plot_throughput(tp, width_s)),
        Plot("sizes-segment-sizes", "TCP segment sizes over time", _plot_segment_sizes(data, t0_ns, duration_s)),
    ]
    tables = {
        "packet-sizes": sizes_t,
        "payload-sizes": payload_t,
        "frames-per-packet": fpp,
        "packets-per-frame": ppf,
        "throughput": tp,
    }
    return AnalyzerResult("sizes", tables=tables, summary=summary, findings=[], plots=plots)
