"""Deliver/ack interleaving: per channel and tag space (a channel opened again starts a new one), the
runs of deliveries and of acks (a healthy consumer interleaves them; a starved one shows long
runs of acks with no delivery between), carried across slices of time.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...io.load import Capture
from ...derive.columns import codes, stable_argsort, value_at
from ...derive.deliveries import DELIVER_METHODS, SETTLE_METHODS
from ...derive.methods import chan_key, methods, select
from ...derive.seeds import seeds_of


#: the interleaving table's columns
INTERLEAVING = ["stream", "channel", "delivers", "acks", "runs", "mean_deliver_run", "max_deliver_run", "mean_ack_run",
                "max_ack_run", "alternation_ratio", "packets_multi_deliver", "max_delivers_per_packet",
                "packets_multi_ack", "max_acks_per_packet"]
#: what a tag space's deliveries and settling frames so far tell of their runs (`_spaces`): counts
#: and maxima, and its last run (its kind, True for deliveries, and its length so far), which
#: the space's next event may go on
SPACE = ["stream", "channel", "epoch", "delivers", "acks", "deliver_runs", "ack_runs", "max_deliver_run",
         "max_ack_run", "packets_multi_deliver", "max_delivers_per_packet", "packets_multi_ack",
         "max_acks_per_packet", "last_kind", "last_run"]


def interleaving(spaces: pd.DataFrame) -> pd.DataFrame:
    """Per channel with deliveries and acks: runs of consecutive deliveries and of consecutive
    settling frames (in frame order), and packets carrying several of either; from the rows of
    its tag spaces (`_spaces`, sorted by stream, channel and epoch).

    alternation_ratio = (runs − 1) / (events − 1): 1 when deliveries and acks strictly alternate,
    near 0 when they come in long runs."""
    if len(spaces) == 0:
        return pd.DataFrame({c: pd.Series(dtype=float if "mean" in c or "ratio" in c else np.int64)
                             for c in INTERLEAVING})
    out = spaces.drop(columns=["deliver_runs", "ack_runs", "last_kind", "last_run"]).reset_index(drop=True)
    d_runs, a_runs = spaces["deliver_runs"].to_numpy(np.int64), spaces["ack_runs"].to_numpy(np.int64)
    # a mean of integer run lengths is their (exact) sum over their count, as groupby's mean
    with np.errstate(invalid="ignore", divide="ignore"):
        out["mean_deliver_run"] = np.where(d_runs > 0, out["delivers"].to_numpy() / d_runs, np.nan)
        out["mean_ack_run"] = np.where(a_runs > 0, out["acks"].to_numpy() / a_runs, np.nan)
    out["runs"] = d_runs + a_runs
    events = out["delivers"] + out["acks"]
    out["alternation_ratio"] = np.where(events > 1, (out["runs"] - 1) / (events - 1).clip(lower=1), np.nan)
    # channels reopened: report per (stream, channel), keeping the opening with the most events
    # (an unstable sort, as ever: the rows of every space, in the same order, give the same pick)
    out = out.assign(_n=events).sort_values("_n", ascending=False).drop_duplicates(["stream", "channel"])
    return out.sort_values(["stream", "channel"])[INTERLEAVING].reset_index(drop=True)


def _spaces(view: Capture, before: pd.DataFrame) -> pd.DataFrame:
    """Per tag space (stream, channel, epoch; columns SPACE, sorted): the runs and packets of its
    deliveries and settling frames up to the end of the slice `view` (as `for_derivations` gives
    it: its own frames after the replayed ones), going on from `before` (the slices before's)."""
    ev = _own_events(view)
    if ev is None:
        return before
    space = ev["space"].to_numpy()
    kind = select(ev, DELIVER_METHODS)  # True: delivery, False: settling frame
    new_group = np.r_[True, space[1:] != space[:-1]]
    eg = np.cumsum(new_group) - 1  # each event's space as 0, 1, … (sorted order)
    first = np.flatnonzero(new_group)
    n = len(first)
    out = pd.DataFrame({c: ev[c].to_numpy(np.int64)[first] for c in ("stream", "channel", "epoch")})
    was = _space_rows(before, out)  # each space's row before (-1: a space new in the slice)
    carried = _carried_from(before, was)
    out["delivers"] = carried("delivers") + _total(eg, kind, n)
    out["acks"] = carried("acks") + _total(eg, ~kind, n)
    _add_runs(out, carried, was, kind, new_group, eg)
    _add_packets(out, carried, view, ev, eg, kind)
    if not len(before):
        return out[SPACE]
    untouched = before.drop(index=before.index[was[was >= 0]])
    both = pd.concat([untouched, out[SPACE]], ignore_index=True)
    return both.sort_values(["stream", "channel", "epoch"], kind="stable", ignore_index=True)


def _own_events(view: Capture) -> pd.DataFrame | None:
    """The slice's own deliveries (s2c) and settling frames (c2s), not the replayed ones, as rows
    of `methods`, by tag space (its code is sorted as (stream, channel, epoch)) then frame order;
    None when there is none."""
    m = methods(view)
    own = m["order"].to_numpy(np.int64) >= _replayed(view)
    rows = np.flatnonzero((select(m, DELIVER_METHODS, "s2c") | select(m, SETTLE_METHODS, "c2s")) & own)
    if len(rows) == 0:
        return None
    # m is in frame order, so a stable sort on the code keeps that order within each space
    rows = rows[stable_argsort(m["space"].to_numpy()[rows])]
    return m.iloc[rows]


def _carried_from(before: pd.DataFrame, was: np.ndarray):
    """`carried(col, default=0)`: each space's `col` before (its row of `before` in `was`;
    `default` for a space new in the slice)."""
    n = len(was)
    old = before.iloc[np.maximum(was, 0)] if len(before) else None  # (None: nothing before)

    def carried(col: str, default=0) -> np.ndarray:
        return np.where(was >= 0, old[col].to_numpy(), default) if old is not None else np.full(n, default)

    return carried


def _total(g: np.ndarray, w: np.ndarray, n: int) -> np.ndarray:
    """Per space (`g`: each row's, of `n`), the sum of the whole numbers `w`."""
    return np.bincount(g, weights=w, minlength=n).astype(np.int64)


def _max_of(g: np.ndarray, v: np.ndarray, sel: np.ndarray, n: int) -> np.ndarray:
    """Per space (of `n`), the maximum of ``v`` over the rows ``sel`` (0 without any); ``g`` is
    sorted, so each space's rows are one segment and one reduceat takes every maximum."""
    out = np.zeros(n, dtype=np.int64)
    g, v = g[sel], v[sel]
    if len(g):
        seg = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
        out[g[seg]] = np.maximum.reduceat(v, seg)
    return out


def _add_runs(out: pd.DataFrame, carried, was: np.ndarray, kind: np.ndarray, new_group: np.ndarray,
              eg: np.ndarray) -> None:
    """The spaces' runs of deliveries and of acks (`kind`, by space `eg`, a new space at
    `new_group`) added to `out`: their counts and longest, and each space's last run."""
    n = len(out)
    # runs: a new one at each new space or change of kind; per run its space, kind and length
    starts = np.flatnonzero(new_group | np.r_[True, kind[1:] != kind[:-1]])
    length = np.diff(np.r_[starts, len(kind)])
    r_kind, r_g = kind[starts], eg[starts]
    # a space's first run goes on with its last run before when of the same kind
    run_first = np.flatnonzero(np.r_[True, r_g[1:] != r_g[:-1]])
    goes_on = (was >= 0) & (carried("last_kind", False).astype(bool) == r_kind[run_first])
    length[run_first[goes_on]] += carried("last_run")[goes_on]
    run_last = np.r_[run_first[1:] - 1, len(starts) - 1]
    out["deliver_runs"] = carried("deliver_runs") + _total(r_g, r_kind, n) - (goes_on & r_kind[run_first])
    out["ack_runs"] = carried("ack_runs") + _total(r_g, ~r_kind, n) - (goes_on & ~r_kind[run_first])
    out["max_deliver_run"] = np.maximum(carried("max_deliver_run"), _max_of(r_g, length, r_kind, n))
    out["max_ack_run"] = np.maximum(carried("max_ack_run"), _max_of(r_g, length, ~r_kind, n))
    out["last_kind"], out["last_run"] = r_kind[run_last], length[run_last].astype(np.int64)


def _add_packets(out: pd.DataFrame, carried, view: Capture, ev: pd.DataFrame, eg: np.ndarray,
                 kind: np.ndarray) -> None:
    """The spaces' packets carrying several deliveries or several acks added to `out`: their
    counts and the most in one packet. A packet is in one slice: its counts are the slice's own."""
    n = len(out)
    # events per (space, kind, packet): (space, kind, packet) packed into one int64 (space < n,
    # packet numbers < the frames' count), sorted; the runs of equal values are the counts, and
    # each run's value gives back its space and kind (no factorization, no inverse needed).
    packet = view.frames["packet"].to_numpy(np.int64)[ev["order"].to_numpy()]
    npk = int(packet.max()) + 1
    packed = np.sort((eg * 2 + kind) * npk + packet)
    run = np.flatnonzero(np.r_[True, packed[1:] != packed[:-1]])
    cnt = np.diff(np.r_[run, len(packed)])
    p_g, p_kind = packed[run] // (2 * npk), (packed[run] // npk) % 2 == 1
    multi = cnt > 1
    out["packets_multi_deliver"] = carried("packets_multi_deliver") + _total(p_g, multi & p_kind, n)
    out["max_delivers_per_packet"] = np.maximum(carried("max_delivers_per_packet"), _max_of(p_g, cnt, p_kind, n))
    out["packets_multi_ack"] = carried("packets_multi_ack") + _total(p_g, multi & ~p_kind, n)
    out["max_acks_per_packet"] = np.maximum(carried("max_acks_per_packet"), _max_of(p_g, cnt, ~p_kind, n))


def _no_spaces() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=bool if c == "last_kind" else np.int64) for c in SPACE})


def _space_rows(before: pd.DataFrame, spaces: pd.DataFrame) -> np.ndarray:
    """The row of `before` (SPACE rows, sorted) of each of `spaces` (stream, channel, epoch), -1
    where it has none."""
    if not len(before):
        return np.full(len(spaces), -1, np.int64)
    code = codes(np.r_[chan_key(before), chan_key(spaces)],
                 np.r_[before["epoch"].to_numpy(np.int64), spaces["epoch"].to_numpy(np.int64)])
    return value_at(code[:len(before)], np.arange(len(before), dtype=np.int64), code[len(before):], -1)


def _current(spaces: pd.DataFrame) -> np.ndarray:
    """Whether each of `spaces` (SPACE rows, sorted) is its channel's latest: the others are
    final (a channel's frames come in a newer tag space once it is opened again)."""
    key = chan_key(spaces)
    return np.r_[key[1:] != key[:-1], True] if len(key) else np.zeros(0, bool)


def _replayed(view: Capture) -> int:
    """How many rows at the head of the view's frames are replayed (0: a whole partition)."""
    seeds = seeds_of(view)
    return seeds.replayed if seeds is not None else 0
