"""The stalls' plots: each direction's advertised window and bytes in flight over time (bounded:
binned points per series, `_PlotPoints`), and the stalls' timeline.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ...io.load import Capture
from ...derive.stream_order import seconds
from ...model.facts import ns
from .constants import CAUSES, CAUSE_COLORS, PLOT_BINS, PLOT_FINE_BINS, PLOT_MAX_DIRECTIONS, PLOT_MAX_TIMELINE_ROWS
from .intervals import _direction_key
from .tcp_state import _window_state


@dataclass
class _PlotPoints:
    """The window plot's points so far (`_plot_bins`), two series per connection direction:
    the window its peer advertised (series 0) and its bytes in flight (series 1, stored negated
    so that one minimum keeps the window's dips and the in-flight peaks). Each series is keyed
    (stream·2 + sender direction)·2 + series. Per series: its points while it has at most
    PLOT_BINS (`raw`: key, t, y, in time order), its points' count and time range (`extent`:
    count, t_min, t_max), and its points' minimum per PLOT_FINE_BINS bin of its connection's
    life (`fine`, index key·PLOT_FINE_BINS + bin): bounded by the directions, not the packets."""

    raw: pd.DataFrame
    extent: pd.DataFrame
    fine: pd.Series


def _plot_bins(pk: dict, connections: pd.DataFrame, t0_ns: int, before: _PlotPoints | None) -> _PlotPoints:
    """The window plot's points of the slices before (`before`) with this slice's packets
    added (`_PlotPoints`; min, max, count: exact in any order, so each slice adds its share)."""
    life = _life_s(connections, t0_ns)
    parts = []
    for D in (0, 1):
        inflight, peer_win = _window_state(pk, D, slice(None))
        base = (pk["stream"].astype(np.int64) * 2 + D) * 2
        w, m = ~np.isnan(peer_win), (pk["d"] == D) & pk["data"] & ~np.isnan(inflight)
        parts += [pd.DataFrame({"key": base[w], "t": pk["t"][w], "y": peer_win[w]}),
                  pd.DataFrame({"key": base[m] + 1, "t": pk["t"][m], "y": -inflight[m]})]
    now = pd.concat(parts, ignore_index=True)
    now = now.iloc[np.argsort(now["key"].to_numpy(), kind="stable")]  # (time order within each series)
    stream = now["key"].to_numpy() // 4
    lo, hi = (life[k].reindex(stream).to_numpy() for k in ("lo", "hi"))
    span = np.where(hi > lo, hi - lo, 1.0)
    b = np.clip(np.floor((now["t"].to_numpy() - lo) / span * PLOT_FINE_BINS), 0, PLOT_FINE_BINS - 1)
    fine = now["y"].groupby(now["key"].to_numpy() * PLOT_FINE_BINS + b.astype(np.int64)).min()
    g = now.groupby("key")
    extent = pd.DataFrame({"count": g.size(), "t_min": g["t"].min(), "t_max": g["t"].max()})
    raw = now
    if before is not None:
        fine = pd.concat([before.fine, fine]).groupby(level=0).min()
        both = pd.concat([before.extent, extent])
        g = both.groupby(level=0)
        extent = pd.DataFrame({"count": g["count"].sum(), "t_min": g["t_min"].min(), "t_max": g["t_max"].max()})
        raw = pd.concat([before.raw, now], ignore_index=True)
        raw = raw.iloc[np.argsort(raw["key"].to_numpy(), kind="stable")]
    few = extent.index[extent["count"].to_numpy() <= PLOT_BINS]
    return _PlotPoints(raw[raw["key"].isin(few)].reset_index(drop=True), extent, fine)


#: the packets' columns the window plot reads (`_window_state`, `_plot_bins`)
PLOT_COLUMNS = ("stream", "t", "d", "data", "hi", "state0", "state1")


def _plot_columns(pk: dict) -> dict:
    """The columns of `pk` the window plot reads (views, no copy): what a partition that is its
    one slice keeps for its join, which gathers the points of the directions it draws only
    (`_drawn_points`)."""
    return {k: pk[k] for k in PLOT_COLUMNS}


def _drawn_points(cols: dict, streams: np.ndarray, connections: pd.DataFrame, t0_ns: int) -> _PlotPoints:
    """`_plot_bins` of the rows of `streams` in `cols` (`_plot_columns`). A series' points come
    from its own stream's rows only, so its points here are those `_plot_bins` of every row
    gives it; the directions the plot does not draw cost nothing (all of them, gathered: 0.84 GB
    of a 2.78 GB peak at 2M packets, docs/time-split.md)."""
    rows = np.flatnonzero(np.isin(cols["stream"], streams))
    taken = {k: tuple(x[rows] for x in v) if isinstance(v, tuple) else v[rows] for k, v in cols.items()}
    return _plot_bins(taken, connections, t0_ns, None)


def _life_s(connections: pd.DataFrame, t0_ns: int) -> pd.DataFrame:
    """Each connection's first and last packet (index: stream; columns lo, hi), seconds from
    `t0_ns`: the time range of the window plot's finer bins (`_plot_bins`)."""
    return pd.DataFrame({"lo": seconds(ns(connections["first_ts"]) - t0_ns),
                         "hi": seconds(ns(connections["last_ts"]) - t0_ns)},
                        index=connections["stream"].to_numpy(np.int64))


def _series_points(plot: _PlotPoints, life: pd.DataFrame, key: int) -> tuple[np.ndarray, np.ndarray]:
    """One series of the window plot (`_PlotPoints`' key): its points when at most PLOT_BINS,
    else at most PLOT_BINS points, the extreme of each bin of its own time range (the finer
    bins' minima gathered by their start), at the bin's start."""
    sign = -1.0 if key % 2 else 1.0
    if key not in plot.extent.index:
        return np.zeros(0), np.zeros(0)
    n, t_min, t_max = plot.extent.loc[key, ["count", "t_min", "t_max"]]
    if n <= PLOT_BINS:
        r = plot.raw[plot.raw["key"].to_numpy() == key]
        return r["t"].to_numpy(), sign * r["y"].to_numpy()
    idx = plot.fine.index.to_numpy(np.int64)
    at = slice(*np.searchsorted(idx, [key * PLOT_FINE_BINS, (key + 1) * PLOT_FINE_BINS]))
    lo, hi = life.at[key // 4, "lo"], life.at[key // 4, "hi"]
    t = lo + (idx[at] % PLOT_FINE_BINS) * ((hi - lo) / PLOT_FINE_BINS)
    edges = np.linspace(t_min, t_max, PLOT_BINS + 1)
    b = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, PLOT_BINS - 1)
    v = pd.Series(plot.fine.to_numpy()[at]).groupby(b).min()
    return edges[v.index.to_numpy()], sign * v.to_numpy()


def _window_directions(tcp: pd.DataFrame, stalls_tbl: pd.DataFrame) -> pd.DataFrame:
    """The directions the window plot shows: those the receiver's window held back (window-full
    segments, a zero window from the peer, or a receiver-window stall), at most
    PLOT_MAX_DIRECTIONS of them, the most held back first. Others would be near-empty panels:
    a window far above what was ever in flight."""
    t = tcp.dropna(subset=["bytes_in_flight_max"])
    if t.empty:
        return t.assign(rw=pd.Series(dtype=np.int64), peer_zero=pd.Series(dtype=np.int64))
    key = _direction_key(t)
    rw = _direction_key(stalls_tbl[stalls_tbl["cause"] == "receiver-window"])
    zw = pd.Series(tcp["zero_window_ads"].to_numpy(), index=_direction_key(tcp))
    t = t.assign(rw=np.bincount(rw, minlength=int(key.max()) + 1)[key].astype(np.int64),
                 peer_zero=zw.reindex(key ^ 1).fillna(0).to_numpy(np.int64))
    held = (t["window_full_segments"] > 0) | (t["peer_zero"] > 0) | (t["rw"] > 0)
    # a total order (ties by stream, direction): the first PLOT_MAX_DIRECTIONS of the whole
    # capture are among each partition's first ones
    return t[held].sort_values(["rw", "peer_zero", "window_full_segments", "stream", "direction"],
                               ascending=[False, False, False, True, True], kind="stable")


def _window_series(plot: _PlotPoints, life: pd.DataFrame,
                   cand: pd.DataFrame) -> dict[tuple[int, str], tuple[np.ndarray, ...]]:
    """What the window plot draws of each direction of `cand` (rows of _window_directions):
    {(stream, direction): (t, receiver's window, t, bytes in flight)}, from the points gathered
    slice by slice (`_plot_bins`; `life`: `_life_s`), each series binned (`_series_points`)."""
    out = {}
    for stream, direction in zip(cand["stream"].astype(int), cand["direction"].astype(str)):
        key = (stream * 2 + (0 if direction == "c2s" else 1)) * 2
        out[(stream, direction)] = (*_series_points(plot, life, key), *_series_points(plot, life, key + 1))
    return out


def _plot_window(path: Path, cap: Capture, series: dict, tcp: pd.DataFrame, stalls_tbl: pd.DataFrame, t0) -> None:
    """Small multiples, one per held-back direction in connection-label order: the peer's
    advertised window and the bytes in flight (KiB, `series`: _window_series), stalls other
    than idle shaded by cause."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    from ...derive.names import connection_label
    from ...model.plotting import natural_order, plain_axis, short, shown_of

    held = _window_directions(tcp, stalls_tbl)
    cand = held.head(PLOT_MAX_DIRECTIONS)
    names = [f"{short(connection_label(cap, s), 50)} {d}" for s, d in zip(cand["stream"], cand["direction"].astype(str))]
    order = natural_order(names)
    off = (t0 - cap.summary["first_ts"]).total_seconds()  # pk's times count from t0
    n = len(cand)
    fig, axes = plt.subplots(n, 1, figsize=(11, 1.7 * n + 0.9), squeeze=False, sharex=True, layout="constrained")
    causes = set()
    for ax, i in zip(axes[:, 0], order):
        r = cand.iloc[i]
        tw, yw, ti, yi = series[(int(r["stream"]), str(r["direction"]))]
        ax.step(tw + off, yw / 1024, where="post", color="#2ca02c", lw=1, label="receiver's window")
        ax.plot(ti + off, yi / 1024, ".", ms=2.5, color="#d62728", label="bytes in flight")
        mine = stalls_tbl[(stalls_tbl["stream"] == r["stream"]) & (stalls_tbl["direction"] == r["direction"])
                          & (stalls_tbl["cause"] != "idle")]
        for a, b, c in zip((mine["start_ts"] - cap.summary["first_ts"]).dt.total_seconds(),
                           (mine["end_ts"] - cap.summary["first_ts"]).dt.total_seconds(), mine["cause"].astype(str)):
            ax.axvspan(a, b, color=CAUSE_COLORS[c], alpha=0.2, lw=0)
            causes.add(c)
        ax.set_ylim(bottom=0)
        plain_axis(ax.yaxis)
        ax.set_ylabel("KiB", fontsize=8)
        ax.set_title(f"{names[i]}: {int(r['window_full_segments'])} window-full segments, receiver advertised a "
                     f"zero window {int(r['peer_zero'])} times", fontsize=9, loc="left")
    handles = axes[0, 0].get_legend_handles_labels()[0]
    handles += [Patch(color=CAUSE_COLORS[c], alpha=0.3, label=f"stall: {c}") for c in CAUSES if c in causes]
    axes[0, 0].legend(handles=handles, fontsize=7, loc="upper right", ncols=2)
    axes[-1, 0].set_xlabel("seconds since capture start (min window and max in flight per time bin)")
    fig.suptitle(f"Receiver windows that held the sender back: {shown_of(n, len(held), 'connection direction')}",
                 fontsize=10, x=0.01, ha="left")
    fig.savefig(path, dpi=100)


def _plot_timeline(path: Path, cap: Capture, stalls_tbl: pd.DataFrame, t0) -> None:
    """One row per connection direction with a stall, in connection-label order; idle stalls
    (nothing to send) in light grey so the causes that held traffic back stand out."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    from ...derive.names import connection_label
    from ...model.plotting import natural_order, short, shown_of

    colors = {**CAUSE_COLORS, "idle": "#dddddd"}
    st = stalls_tbl.assign(key=stalls_tbl["stream"].astype(np.int64) * 2 + (stalls_tbl["direction"] == "s2c"))
    busy = st[st["cause"] != "idle"].groupby("key")["duration_s"].sum()
    every = st.groupby("key")["duration_s"].sum()
    # the rows with stalls that held traffic back first, then the longest idle ones
    keys = pd.concat([busy.nlargest(PLOT_MAX_TIMELINE_ROWS),
                      every.drop(busy.index).nlargest(PLOT_MAX_TIMELINE_ROWS)]).index[:PLOT_MAX_TIMELINE_ROWS]
    names = [f"{short(connection_label(cap, k // 2), 44)} {'s2c' if k % 2 else 'c2s'}" for k in keys]
    order = natural_order(names)
    rows = {int(keys[i]): row for row, i in enumerate(order)}
    fig, ax = plt.subplots(figsize=(11, 1.3 + 0.28 * max(len(rows), 1)), layout="constrained")
    st = st[st["key"].isin(list(rows))]
    start = (st["start_ts"] - cap.summary["first_ts"]).dt.total_seconds().to_numpy()
    ax.barh(st["key"].map(rows).to_numpy(), st["duration_s"].to_numpy(), left=start, height=0.7,
            color=[colors[c] for c in st["cause"].astype(str)])
    ax.set_yticks(range(len(rows)), [names[i] for i in order], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(0, (cap.summary["last_ts"] - cap.summary["first_ts"]).total_seconds())
    ax.set_xlabel("seconds since capture start")
    ax.set_title(f"{len(stalls_tbl):,} stalls on {shown_of(len(rows), len(every), 'connection direction')}, "
                 "coloured by cause (grey: idle, nothing to send)", loc="left", fontsize=10)
    used = [c for c in CAUSES if (st["cause"] == c).any()]
    ax.legend(handles=[Patch(color=colors[c], label=c) for c in used], fontsize=7, loc="upper left",
              bbox_to_anchor=(1.0, 1.0))
    fig.savefig(path, dpi=100)
