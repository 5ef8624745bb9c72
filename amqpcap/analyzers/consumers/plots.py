"""The consumers' unacked/prefetch plot: each consumer's state binned over time in every partition,
the bins merged, then drawn.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...io.load import Capture
from ...derive.consumers import CONSUMER
from ...derive.names import consumer_labels
from ...model.plotting import (
    MAX_NAMED, nan_stats, natural_order, percent_axis, plain, plain_axis, short, time_edges, time_per_bin)


@dataclass(frozen=True, eq=False)
class StateBins:
    """What the consumers plot draws, per consumer (a row: the consumer's state rows, which are
    one partition's) and time bin of the capture (`amqpcap.model.plotting.time_edges`): computed by
    each partition, so that the merge never reads the credit series (a row per message)."""

    #: the consumers (CONSUMER columns), sorted
    keys: pd.DataFrame
    #: seconds with a state, seconds at the prefetch limit (of the rows with a limit), unacked
    #: messages × seconds: (consumers, bins) arrays
    covered: np.ndarray
    at: np.ndarray
    unacked_s: np.ndarray
    #: per consumer: its last prefetch (NaN: none), whether any row had a limit
    prefetch: np.ndarray
    has_limit: np.ndarray

    #: the arrays above, a row per consumer
    ARRAYS = ("covered", "at", "unacked_s", "prefetch", "has_limit")

    def __eq__(self, other: object) -> bool:
        """The same consumers and numbers, exactly (a partition's, however its time was sliced)."""
        if not isinstance(other, StateBins):
            return NotImplemented
        return (self.keys.equals(other.keys) and list(self.keys.dtypes) == list(other.keys.dtypes)
                and all(np.array_equal(getattr(self, f), getattr(other, f), equal_nan=True) for f in self.ARRAYS))


def state_bins(t0: pd.Timestamp, t1: pd.Timestamp, st: pd.DataFrame) -> StateBins:
    """The consumers plot's numbers of the state rows `st` (`consumer_state`'s columns), on the
    time bins of the capture from `t0` to `t1` (its summary's first_ts and last_ts)."""
    edges = time_edges((t1 - t0).total_seconds())
    code = st.groupby(CONSUMER, sort=True, observed=True).ngroup().to_numpy()
    keys = st[CONSUMER].drop_duplicates().sort_values(CONSUMER).reset_index(drop=True)
    n = len(keys)
    start = (st["ts"] - t0).dt.total_seconds().to_numpy()
    end = (st["until_ts"] - t0).dt.total_seconds().to_numpy()
    limited = st["deficit"].notna().to_numpy()
    return StateBins(keys, time_per_bin(code, start, end, edges, n),
                     time_per_bin(code[limited], start[limited], end[limited], edges, n,
                                  st["at_limit"].to_numpy(bool)[limited].astype(float)),
                     time_per_bin(code, start, end, edges, n, st["unacked"].to_numpy(float)),
                     st.groupby(code)["prefetch"].last().to_numpy(float),
                     np.bincount(code[limited], minlength=n) > 0)


def merged_bins(parts: list[StateBins]) -> StateBins:
    """The partitions' consumers in the whole capture's order (their keys sorted as one)."""
    if len(parts) == 1:
        return parts[0]
    keys = pd.concat([b.keys for b in parts], ignore_index=True)
    order = keys.sort_values(CONSUMER, kind="stable").index.to_numpy()
    arrays = {f: np.concatenate([getattr(b, f) for b in parts])[order] for f in StateBins.ARRAYS}
    return StateBins(keys.take(order).reset_index(drop=True), **arrays)


def _plot_state(cap: Capture, b: StateBins, queues: pd.DataFrame, path) -> None:
    """Top: per consumer, the share of each time bin it spent at its prefetch limit (a heatmap:
    one row per consumer, any number of them; at prefetch 1 a step plot would be a solid block).
    Bottom: unacked messages (time-weighted mean per bin) against the prefetch: each consumer's
    line for a few, the median and 10th-90th percentile band of all of them for many."""
    import matplotlib.pyplot as plt

    edges = time_edges((cap.summary["last_ts"] - cap.summary["first_ts"]).total_seconds())
    keys, covered, at, has_limit, prefetch = b.keys, b.covered, b.at, b.has_limit, b.prefetch
    n = len(keys)
    queues = queues.set_index(CONSUMER)["queue"]  # (each consumer once: partitions hold different ones)
    labels, queue = consumer_labels(cap, keys["stream"], keys["channel"],
                                    queues.reindex(pd.MultiIndex.from_frame(keys)).to_numpy(object),
                                    keys["consumer_tag"].astype(str).tolist())
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where((covered > 0) & has_limit[:, None], at / covered, np.nan)
        overall = np.where(has_limit, at.sum(1) / covered.sum(1), np.nan)
        unacked = np.where(covered > 0, b.unacked_s / covered, np.nan)
    named = n <= 30  # rows labelled one by one, in label order; beyond, one thin row each, worst first
    order = natural_order(labels) if named else np.argsort(-np.nan_to_num(overall, nan=-1), kind="stable")
    whose = f"queue {queue}: " if queue else ""

    rows_h = 0.3 * n + 0.7 if named else 4.0
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(11, rows_h + 3.4), sharex=True, layout="constrained",
                                   gridspec_kw={"height_ratios": [rows_h, 2.6]})
    drawn = [labels[i] for i in order]
    _limit_heatmap(fig, ax1, share[order], edges, drawn, overall[order], has_limit[order], named, whose)
    _unacked_lines(ax2, edges[:-1], unacked[order], prefetch[order], drawn)
    ax2.set_ylim(0, max(float(np.nanmax(prefetch, initial=0)), float(np.nanmax(unacked, initial=0)), 1) * 1.15)
    plain_axis(ax2.yaxis)
    ax2.set_ylabel("messages")
    ax2.set_xlabel("seconds since capture start")
    ax2.legend(fontsize=7, loc="upper right")
    ax2.set_xlim(edges[0], edges[-1])
    fig.savefig(path, dpi=100, bbox_inches="tight")


def _limit_heatmap(fig, ax, share: np.ndarray, edges: np.ndarray, labels: list[str], overall: np.ndarray,
                   has_limit: np.ndarray, named: bool, whose: str) -> None:
    """The top panel: a row per consumer (in the order drawn) of the share of each time bin it
    spent at its prefetch limit, `overall` its share over its whole life."""
    import matplotlib.pyplot as plt

    n = len(share)
    cmap = plt.get_cmap("Reds").with_extremes(bad="#e8e8e8")
    img = ax.imshow(share, aspect="auto", interpolation="nearest", cmap=cmap, vmin=0, vmax=1,
                    extent=(edges[0], edges[-1], n - 0.5, -0.5))
    # the colour bar beside the heatmap alone, not taking width from it (both panels keep one x scale)
    cb = fig.colorbar(img, cax=ax.inset_axes([1.01, 0.0, 0.012, 1.0]))
    percent_axis(cb.ax.yaxis)
    cb.ax.tick_params(labelsize=7)
    if named:
        ax.set_yticks(range(n), [short(labels[i], 44) + ("  (no limit)" if not has_limit[i] else f"  {overall[i]:.0%}")
                                 for i in range(n)], fontsize=8)
        ax.set_title(f"{whose}time at the prefetch limit, per consumer (the number: over its whole life; "
                     "grey: not consuming)", fontsize=9, loc="left")
    else:
        ax.set_yticks([0, n - 1], ["worst", f"{n:,}th"], fontsize=8)
        ax.set_ylabel(f"{n:,} consumers, one row each", fontsize=8)
        worst = [f"{short(labels[i], 32)} {overall[i]:.0%}" for i in range(min(n, 2)) if overall[i] > 0]
        ax.set_title(f"{whose}time at the prefetch limit, {n:,} consumers, worst first"
                     + (f" ({'; '.join(worst)})" if worst else ": none reached its limit"), fontsize=9, loc="left")


def _unacked_lines(ax, x: np.ndarray, unacked: np.ndarray, prefetch: np.ndarray, labels: list[str]) -> None:
    """The bottom panel: unacked messages per time bin (`x`: the bins' starts) against the
    prefetch, a line per consumer (in the order drawn) for a few, the median and the 10th-90th
    percentile band for many."""
    n = len(unacked)
    if n <= MAX_NAMED:
        for j in range(n):
            ax.step(x, unacked[j], where="post", color=f"C{j}", lw=1.2, label=short(labels[j], 44))
            if prefetch[j] > 0:
                ax.axhline(prefetch[j], color=f"C{j}", ls=":", lw=1)
        ax.set_title("unacked messages, mean per time bin (dotted: prefetch)", fontsize=9, loc="left")
    else:
        lo, med, hi = nan_stats(unacked, [10, 50, 90])
        ax.fill_between(x, lo, hi, step="post", color="C0", alpha=0.25, lw=0, label="10th–90th percentile")
        ax.step(x, med, where="post", color="C0", lw=1.2, label=f"median of {n:,} consumers")
        limits = np.unique(prefetch[prefetch > 0])
        for p in {float(limits[0]), float(limits[-1])} if len(limits) else ():
            ax.axhline(p, color="grey", ls=":", lw=1)
        ax.set_title("unacked messages per consumer, mean per time bin (dotted: prefetch"
                     + (f" {plain(limits[0])} to {plain(limits[-1])}" if len(limits) > 1 else "") + ")",
                     fontsize=9, loc="left")
