"""The sizes analyzer's plots: packet sizes, frames per packet, throughput, segment sizes over time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .bins import SEGMENT_SIZE_EDGES, segment_time_edges
from .constants import DIRECTIONS, PLEN_LABELS


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
            from ...model.plotting import log_colorbar

            log_colorbar(fig, mesh, axes, "segments per cell")
        from ...model.plotting import plain_axis

        for ax in axes:
            plain_axis(ax.yaxis, log=True)
        fig.suptitle("TCP segment sizes over time")
        fig.savefig(path, dpi=110)

    return draw
