"""The nagle analyzer's plots: delayed-ACK stalls over time, and each direction's share of small
segments.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ...io.load import Capture
from .constants import STALL_ACK_DELAY_MAX_S


def _plot_stalls(stalls: pd.DataFrame):
    def draw(path: Path) -> None:
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 4.5))
        bins = np.arange(0, STALL_ACK_DELAY_MAX_S * 1e3 + 20, 5)
        for d in ("c2s", "s2c"):
            x = stalls.loc[stalls["direction"] == d, "stall_s"].to_numpy() * 1e3
            if len(x):
                ax.hist(x, bins=bins, alpha=0.7, label=f"{d} ({len(x)})")
        ax.set_ylim(0, ax.get_ylim()[1] * 1.3)  # headroom for the marker labels
        for ms, lbl in ((40, "Linux delayed ACK\n(40 ms)"), (200, "delayed ACK\n200 ms")):
            ax.axvline(ms, color="grey", ls="--", lw=1)
            ax.text(ms + 3, ax.get_ylim()[1] * 0.97, lbl, fontsize=8, color="dimgrey", va="top",
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8})
        ax.set_xlabel("stall: previous segment → held segment (ms), 5 ms bins")
        ax.set_ylabel("stalls")
        ax.set_title("Nagle / delayed-ACK stalls")
        ax.legend(loc="center right")
        fig.tight_layout()
        fig.savefig(path, dpi=110)

    return draw


def _plot_small_share(cap: Capture, d: pd.DataFrame):
    top = d.sort_values("data_segments", ascending=False).head(20)

    def draw(path: Path) -> None:
        import matplotlib.pyplot as plt

        from ...derive.names import connection_label
        from ...model.plotting import plain_axis, short, shown_of

        fig, ax = plt.subplots(figsize=(11, max(2.5, 0.3 * len(top) + 1.3)), layout="constrained")
        labels = [f"{short(connection_label(cap, s), 44)} {dr}" for s, dr in zip(top["stream"], top["direction"])]
        y = np.arange(len(top))
        n = top["data_segments"].to_numpy()
        # Nested bars of decreasing height, so each stays visible when it equals the one behind.
        ax.barh(y, n, height=0.8, color="#cccccc", label="data segments")
        ax.barh(y, top["small_segments"].to_numpy(), height=0.55, color="#ff7f0e", label="small (< 25% of MSS)")
        ax.barh(y, top["packets_saved"].to_numpy(), height=0.3, color="#d62728", label="avoidable by coalescing")
        ax.set_yticks(y, labels, fontsize=8)
        ax.invert_yaxis()
        plain_axis(ax.xaxis)
        ax.set_xlabel("segments")
        ax.set_title(f"Small segments per connection direction ({shown_of(len(top), len(d), 'direction')}, "
                     "most segments first)", fontsize=10, loc="left")
        ax.legend(loc="lower right", fontsize=8)
        fig.savefig(path, dpi=100)

    return draw
