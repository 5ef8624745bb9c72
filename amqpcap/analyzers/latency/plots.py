"""The latency plots: deliver→ack over time (percentile bands per time bin, raw points when few), its
distribution per consumer, and the deliver/ack raster of the busiest channels.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ...io.load import Capture
from .constants import MAX_POINTS


def _by_consumer(cap: Capture, a: pd.DataFrame):
    """The consumers of ``a`` (deliveries): (groups of row positions, labels, common queue), in
    label order. Deliveries of one (stream, channel, consumer tag) are one consumer."""
    from ...model.plotting import natural_order
    from ...derive.names import consumer_labels

    code = a.groupby(["stream", "channel", "consumer_tag"], sort=True, observed=True).ngroup().to_numpy()
    first = np.unique(code, return_index=True)[1]
    labels, queue = consumer_labels(cap, a["stream"].to_numpy()[first], a["channel"].to_numpy()[first],
                                    a["queue"].to_numpy(object)[first],
                                    a["consumer_tag"].astype(object).to_numpy()[first])
    rows = np.split(np.argsort(code, kind="stable"), np.cumsum(np.bincount(code))[:-1])
    order = natural_order(labels)
    return [rows[i] for i in order], [labels[i] for i in order], queue


def _slowest(groups, values: np.ndarray, k: int) -> list[int]:
    """Indices of the k groups with the highest median value, slowest first."""
    med = np.array([np.nanmedian(values[g]) if len(g) else -np.inf for g in groups])
    return np.argsort(-med, kind="stable")[:k].tolist()


def _binned_quantiles(x: np.ndarray, y: np.ndarray, edges: np.ndarray, qs=(0.5, 0.9)) -> pd.DataFrame:
    """Quantiles of y per time bin (rows: bins that hold values; column ``x``: the bin's middle)."""
    b = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, len(edges) - 2)
    q = pd.Series(y).groupby(b).quantile(list(qs)).unstack()
    mid = (edges[:-1] + edges[1:]) / 2
    return q.assign(x=mid[q.index.to_numpy()])


def _plot_over_time(cap: Capture, acked: pd.DataFrame, path: Path) -> None:
    """deliver→ack latency over time: per consumer (median line, band to p90) for a few; for many,
    all of them pooled plus the slowest few by median, named."""
    import matplotlib.pyplot as plt

    from ...model.plotting import MAX_NAMED, WORST_NAMED, duration_unit, plain_axis, short, time_edges

    a = acked[acked["latency_s"].notna()].reset_index(drop=True)
    t0 = cap.summary["first_ts"]
    edges = time_edges((cap.summary["last_ts"] - t0).total_seconds())
    x = (a["ts"] - t0).dt.total_seconds().to_numpy()
    factor, unit = duration_unit(a["latency_s"].quantile(0.99))
    y = a["latency_s"].to_numpy(float) * factor
    groups, labels, queue = _by_consumer(cap, a)
    fig, ax = plt.subplots(figsize=(11, 4.2), layout="constrained")
    if len(groups) <= MAX_NAMED:
        named, legend_title = range(len(groups)), None
    else:
        named = _slowest(groups, y, WORST_NAMED)
        legend_title = f"{len(groups):,} consumers: all pooled, and the {len(named)} slowest by median"
        q = _binned_quantiles(x, y, edges)
        ax.fill_between(q["x"], q[0.5], q[0.9], color="grey", alpha=0.25, lw=0)
        ax.plot(q["x"], q[0.5], "-", color="black", lw=1.4, label=f"all {len(groups):,} consumers: median (band to p90)")
    for j, i in enumerate(named):
        g = groups[i]
        if len(groups) <= MAX_NAMED and len(g) <= MAX_POINTS:
            ax.plot(x[g], y[g], ".", ms=2, alpha=0.35, color=f"C{j}")
        q = _binned_quantiles(x[g], y[g], edges)
        ax.plot(q["x"], q[0.5], "-", color=f"C{j}", lw=1.2, label=short(labels[i], 50))
        if len(groups) <= MAX_NAMED:
            ax.fill_between(q["x"], q[0.5], q[0.9], color=f"C{j}", alpha=0.15, lw=0)
    ax.set_yscale("log")
    plain_axis(ax.yaxis, log=True)
    ax.set_xlim(edges[0], edges[-1])
    ax.set_xlabel("seconds since capture start")
    ax.set_ylabel(f"deliver→ack ({unit})")
    ax.set_title((f"queue {queue}: " if queue else "") + "deliver→ack latency (line: median per time bin, band: to p90"
                 + (", dots: each delivery)" if len(groups) <= MAX_NAMED else ")"), fontsize=10, loc="left")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper right", title=legend_title, title_fontsize=7)
    fig.savefig(path, dpi=100)


def _cdf(ax, values, label, **kw):
    v = np.sort(np.asarray(values, dtype=float))
    v = v[~np.isnan(v)]
    if len(v) == 0:
        return
    if len(v) > 2000:  # the CDF drawn at 2000 quantiles looks the same and renders at once
        p = np.linspace(0, 1, 2000)
        ax.plot(np.quantile(v, p), p, label=f"{label} (n={len(v):,})", **kw)
    else:
        ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", label=f"{label} (n={len(v):,})", **kw)


def _plot_cdf(cap: Capture, acked, gaps, conf, path: Path) -> None:
    """Latency CDFs: deliver→ack per consumer (few) or pooled plus the slowest (many),
    ack→next-deliver and publish→confirm over all channels."""
    import matplotlib.pyplot as plt

    from ...model.plotting import MAX_NAMED, WORST_NAMED, duration_unit, percent_axis, plain_axis, short

    a = acked[acked["latency_s"].notna()].reset_index(drop=True)
    every = np.r_[a["latency_s"].to_numpy(float), gaps["gap_s"].to_numpy(float), conf["latency_s"].to_numpy(float)]
    factor, unit = duration_unit(np.nanquantile(every, 0.99) if np.isfinite(every).any() else [])
    fig, ax = plt.subplots(figsize=(11, 4.2), layout="constrained")
    y = a["latency_s"].to_numpy(float) * factor
    groups, labels, _ = _by_consumer(cap, a) if len(a) else ([], [], None)
    if len(groups) <= MAX_NAMED:
        for j, g in enumerate(groups):
            _cdf(ax, y[g], "deliver→ack " + short(labels[j], 44), color=f"C{j}")
    else:
        _cdf(ax, y, f"deliver→ack, all {len(groups):,} consumers", color="C0", lw=2)
        for j, i in enumerate(_slowest(groups, y, WORST_NAMED)):
            _cdf(ax, y[groups[i]], f"deliver→ack {short(labels[i], 40)} (slowest #{j + 1})", color=f"C{j + 1}", lw=1)
    _cdf(ax, gaps["gap_s"].to_numpy(float) * factor, "ack→next-deliver (all channels)", color="black", ls="--")
    if len(conf):
        _cdf(ax, conf["latency_s"].to_numpy(float) * factor, "publish→confirm (all channels)", color="grey", ls=":")
    ax.set_xscale("log")
    plain_axis(ax.xaxis, log=True)
    percent_axis(ax.yaxis)
    ax.set_xlabel(f"latency ({unit}, log scale)")
    ax.set_ylabel("share of messages ≤ x")
    ax.set_title("latency distributions (a curve further right is slower)", fontsize=10, loc="left")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="lower right")
    fig.savefig(path, dpi=100)


#: channels drawn as rows of the interleaving raster (the busiest)
RASTER_ROWS = 12


def _raster_data(events: pd.DataFrame) -> dict[str, Any]:
    """What the raster draws of a partition whose deliveries and acks are `events`
    (`_raster_events`, in frame order): per channel its deliveries and acks (``counts``: stream,
    channel, n) and, for its RASTER_ROWS busiest channels (the busiest of the whole capture are
    among the partitions' busiest), their times (``times``: {(stream, channel): (deliveries' t,
    acks' t)}, seconds since the capture's start)."""
    if not len(events):  # (nothing to draw)
        return {"counts": pd.DataFrame({"stream": pd.Series(dtype=np.int64), "channel": pd.Series(dtype=np.int64),
                                        "n": pd.Series(dtype=np.int64)}), "times": {}}
    key, n = np.unique(events["key"].to_numpy(np.int64), return_counts=True)
    counts = pd.DataFrame({"stream": key // 65536, "channel": key % 65536, "n": n.astype(np.int64)})
    times = {}
    every, deliver, t = events["key"].to_numpy(np.int64), events["is_deliver"].to_numpy(bool), events["t"].to_numpy()
    for stream, channel in _busiest(counts).itertuples(index=False):
        mine = every == stream * 65536 + channel
        times[(int(stream), int(channel))] = (t[mine & deliver], t[mine & ~deliver])
    return {"counts": counts, "times": times}


def _busiest(counts: pd.DataFrame) -> pd.DataFrame:
    """The RASTER_ROWS channels with the most deliveries and acks (ties: the first (stream, channel)),
    sorted by (stream, channel)."""
    top = counts.sort_values(["n", "stream", "channel"], ascending=[False, True, True], kind="stable")
    return top.head(RASTER_ROWS)[["stream", "channel"]].sort_values(["stream", "channel"])


def _raster_joined(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"counts": pd.concat([p["counts"] for p in parts], ignore_index=True),
            "times": {k: v for p in parts for k, v in p["times"].items()}}


def _plot_raster(cap: Capture, raster: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt

    from ...derive.names import connection_label
    from ...model.plotting import natural_order, short, shown_of

    chans = [(int(s), int(c)) for s, c in _busiest(raster["counts"]).itertuples(index=False)]
    names = [f"{short(connection_label(cap, s), 40)} ch{c}" for s, c in chans]
    order = natural_order(names)
    chans, names = [chans[i] for i in order], [names[i] for i in order]
    fig, ax = plt.subplots(figsize=(11, 1.0 + 0.45 * len(chans)), layout="constrained")
    tmax = (cap.summary["last_ts"] - cap.summary["first_ts"]).total_seconds() or 1.0
    bins = np.linspace(0, tmax, 1000 + 1)
    for row, key in enumerate(chans):
        delivered, acked = raster["times"][key]
        for t, dy, color, cmap in ((delivered, -0.18, "tab:blue", "Blues"), (acked, 0.18, "tab:orange", "Oranges")):
            if len(delivered) + len(acked) <= MAX_POINTS:
                ax.vlines(t, row + dy - 0.14, row + dy + 0.14, color=color, lw=0.5)
            else:  # density per time bin: one image row instead of millions of marks
                h, _ = np.histogram(t, bins)
                ax.imshow(h[None, :], extent=(0, tmax, row + dy + 0.14, row + dy - 0.14), aspect="auto",
                          cmap=cmap, interpolation="nearest")
    ax.set_yticks(range(len(chans)), names, fontsize=8)
    ax.set_ylim(len(chans) - 0.5, -0.5)
    ax.set_xlim(0, tmax)
    ax.set_xlabel("seconds since capture start")
    n = len(raster["counts"])
    ax.set_title(f"deliveries (blue, upper) and acks (orange, lower): {shown_of(len(chans), n, 'channel')}"
                 + (" (the busiest)" if len(chans) < n else ""), fontsize=10, loc="left")
    fig.savefig(path, dpi=100)
