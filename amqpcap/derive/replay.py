"""From one slice of a partition's time to the next: the frames still open at the cut, replayed
before the next slice's own, and the seeds the derivations count on from (docs/time-split.md
§6; the seeds: :mod:`amqpcap.derive.seeds`).

A slice's step runs the derivations on `replayed` (the slice with the rows of `Replay` at the
head of its frames), then takes the `Replay` for the next slice from them (`replay_after`).
What is replayed is what a later frame can still be matched to, each bounded by the channels or
by a protocol window:

- the deliveries not settled yet in their channel's current tag space (at most the prefetch of
  a consumer that acknowledges; AMQP 0-9-1 §1.8.3.13), with the basic.consume or basic.get each
  was matched to;
- the publishes not confirmed yet after confirm.select (the publisher's window of unconfirmed
  messages), and each current tag space's first confirm.select;
- per current tag space, the first client (and broker) settling frame with ``multiple`` that
  reached the space's highest tag: in `match_settlements` an earlier one can stand before a
  later one;
- the last basic.consume of each consumer tag of a channel (later deliveries are matched to it)
  with the basic.consume-ok it was answered by, and every basic.consume not answered yet;
- the last basic.get of each channel, the last basic.qos of each current tag space (per
  ``global``).

Unbounded only where the protocol window is: a consumer without basic.consume in the capture
that never settles is no-ack (`Ends`), so its deliveries are not kept; a publisher whose confirms
never come keeps every publish, and a channel that starts a consumer with a new tag after
another (never reusing one) keeps one basic.consume per tag.

What only the partition's end knows (whether a tag space ever settles, the last close of each
channel) comes from a first pass over the slices (`ends_of`), before the slices are analysed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..capture import Capture
from .cache import CONNECTION, derivation
from .columns import codes, counts_added, value_at
from .deliveries import (ALL_TAGS, SETTLE_METHODS, _tags, confirms, consume_frames, deliveries_with_codes,
                         last_closes)
from .methods import chan_key, methods, pick, select
from .seeds import Closes, Ends, Seeds, chan_keys, seeds_of

_NONE = np.zeros(0, np.int64)


@dataclass(frozen=True)
class Replay:
    """What a slice leaves to the next one's derivations."""

    #: the frames to replay (rows of cap.frames in whole order, text columns as text: a slice
    #: read from a dataset has categories of its own rows: docs/time-split.md §6)
    rows: pd.DataFrame
    #: per row: whole order, epoch, confirm sequence number (0: none), an item not told yet
    orders: np.ndarray
    epochs: np.ndarray
    seqs: np.ndarray
    pending: np.ndarray
    #: whole order of the next slice's first own frame
    offset: int
    #: channel.open frames per channel key so far (keys sorted)
    open_keys: np.ndarray
    open_counts: np.ndarray
    #: publishes numbered so far per current tag space (channel key, epoch; sorted)
    numbered_keys: np.ndarray
    numbered_epochs: np.ndarray
    numbered_counts: np.ndarray


#: before the first slice: nothing to replay, nothing counted
NOTHING = Replay(pd.DataFrame(), _NONE, _NONE, _NONE, np.zeros(0, bool), 0, _NONE, _NONE, _NONE, _NONE, _NONE)


def with_replay(part: Capture, replay: Replay | None, ends: Ends) -> None:
    """Give the slice `part` what the slice before left open (None: the first slice) and the
    first pass's `Ends`, for `for_derivations`."""
    part.context["replay"] = replay
    part.context["ends"] = ends


@derivation(CONNECTION)
def for_derivations(part: Capture) -> Capture:
    """The slice `part` (given `with_replay`) as the derivations see it (`replayed`); the slice
    itself when it is a whole partition. One per slice: every analyzer's step reads the same."""
    if "ends" not in part.context:
        return part
    return replayed(part, part.context["replay"], part.context["ends"])


def next_replay(part: Capture) -> Replay:
    """What the slice after `part` (given `with_replay`) replays."""
    return replay_after(for_derivations(part))


def replayed(part: Capture, replay: Replay | None, ends: Ends | None = None) -> Capture:
    """The slice `part` as its derivations see it: the rows of `replay` (None: the first slice)
    before its own frames, and the seeds on its context."""
    replay = replay or NOTHING
    frames = _with_rows(replay.rows, part.frames) if len(replay.rows) else part.frames
    cap = Capture(path=part.path, ports=part.ports, frames=frames, packets=part.packets,
                  connections=part.connections, anomalies=part.anomalies, records=part.records,
                  bodies=part.bodies, summary=part.summary)
    cap.context.update(part.context)
    cap.context["seeds"] = Seeds(
        offset=replay.offset, replayed=len(replay.rows), orders=replay.orders, epochs=replay.epochs,
        seqs=replay.seqs, pending=replay.pending, open_keys=replay.open_keys, open_counts=replay.open_counts,
        numbered_keys=replay.numbered_keys, numbered_epochs=replay.numbered_epochs,
        numbered_counts=replay.numbered_counts, ends=ends)
    return cap


def _with_rows(rows: pd.DataFrame, frames: pd.DataFrame) -> pd.DataFrame:
    """`rows` (text as text) then `frames`, the text columns categorical as in `frames`, with
    the rows' values added to their categories."""
    cat = [c for c in frames.columns if isinstance(frames[c].dtype, pd.CategoricalDtype)]
    plain = [c for c in frames.columns if c not in cat]
    out = pd.concat([rows[plain].astype(frames[plain].dtypes.to_dict()), frames[plain]], ignore_index=True)
    for c in cat:
        col = frames[c].array
        values = pd.Index(rows[c].dropna().unique())
        cats = col.categories.append(values.difference(col.categories))
        head = cats.get_indexer(rows[c].to_numpy(object))  # (missing: -1)
        out[c] = pd.Categorical.from_codes(np.r_[head, col.codes], categories=cats)
    return out[list(frames.columns)]


@derivation(CONNECTION)
def replay_after(cap: Capture) -> Replay:
    """What the next slice replays after the slice `cap` (made by `replayed`): see the module doc."""
    seeds = seeds_of(cap)
    m = methods(cap)
    key = chan_key(m)
    epoch = m["epoch"].to_numpy(np.int64)
    own = m["order"].to_numpy(np.int64) >= seeds.replayed
    (open_keys,), open_counts = counts_added(
        (seeds.open_keys,), seeds.open_counts, *_counted(key[own & select(m, "channel.open")]))
    current = _current(m, open_keys, open_counts)

    dc = deliveries_with_codes(cap)
    d = dc.table
    waiting_d = _pending_deliveries(m, d, current)
    p = confirms(cap)
    waiting_p = p["order"].to_numpy(np.int64)[
        current[_rows_of(m, p["order"])] & ~p["outcome"].isin(["ack", "nack"]).to_numpy(bool)]
    cons = consume_frames(cap)
    waiting_c = _pending_consumes(cons, current, m)
    orders = np.unique(np.r_[
        waiting_d, dc.source_order[np.isin(d["order"].to_numpy(np.int64), waiting_d) & (dc.source_order >= 0)],
        waiting_p, waiting_c, _last_consumes(cons), _last_of(m, select(m, "basic.get", "c2s"), key),
        _current_qos(cap, m, current), _first_selects(m, current),
        _highest_multiple(cap, m, current, "c2s"), _highest_multiple(cap, m, current, "s2c")]).astype(np.int64)
    pending = np.isin(orders, np.r_[waiting_d, waiting_p, waiting_c])

    seq = np.zeros(len(orders), np.int64)
    at = np.searchsorted(orders, p["order"].to_numpy(np.int64))
    mine = (at < len(orders)) & (orders[np.minimum(at, len(orders) - 1)] == p["order"].to_numpy(np.int64))
    seq[at[mine]] = p["seq"].to_numpy(np.int64)[mine]
    numbered = _numbered(p, seeds, current[_rows_of(m, p["order"])], open_keys, open_counts)
    rows = cap.frames.iloc[orders].reset_index(drop=True)
    rows = rows.astype({c: object for c in rows.columns if isinstance(rows[c].dtype, pd.CategoricalDtype)})
    return Replay(rows=rows, orders=seeds.whole_orders(orders), epochs=epoch[_rows_of(m, orders)], seqs=seq,
                  pending=pending, offset=seeds.offset + len(cap.frames) - seeds.replayed,
                  open_keys=open_keys, open_counts=open_counts, numbered_keys=numbered[0],
                  numbered_epochs=numbered[1], numbered_counts=numbered[2])


def told(cap: Capture, order, last: bool) -> np.ndarray:
    """Which rows of a table derived from the slice `cap` (their frames at positions `order`)
    the slice tells: those of its own frames and the pending replayed ones, once final (not
    replayed as pending to the next slice) or at the partition's `last` slice. Each row is told
    by one slice; a whole partition (no seeds) tells every row."""
    order = np.asarray(order, np.int64)
    seeds = seeds_of(cap)
    if seeds is None:
        return np.ones(len(order), bool)
    mine = order >= seeds.replayed
    if seeds.replayed:
        mine |= seeds.pending[np.minimum(order, seeds.replayed - 1)]
    if last:
        return mine
    later = replay_after(cap)
    return mine & ~np.isin(seeds.whole_orders(order), later.orders[later.pending])


def _counted(key: np.ndarray) -> tuple[tuple[np.ndarray], np.ndarray]:
    uniq, n = np.unique(key, return_counts=True)
    return (uniq.astype(np.int64),), n.astype(np.int64)


def _rows_of(m: pd.DataFrame, order) -> np.ndarray:
    """The rows of the method frames `m` at the frame positions `order` (method frames all)."""
    return np.searchsorted(m["order"].to_numpy(np.int64), np.asarray(order, np.int64))


def _current(m: pd.DataFrame, open_keys: np.ndarray, open_counts: np.ndarray) -> np.ndarray:
    """Whether each method frame is in its channel's current tag space (no channel.open since:
    a later frame can be matched to it)."""
    return m["epoch"].to_numpy(np.int64) == value_at(open_keys, open_counts, chan_key(m), 0)


def _pending_deliveries(m: pd.DataFrame, d: pd.DataFrame, current: np.ndarray) -> np.ndarray:
    """Orders of the deliveries a later frame may still settle: not settled, not no-ack, in
    their channel's current tag space."""
    order = d["order"].to_numpy(np.int64)
    open_ = d["settle_order"].isna().to_numpy(bool) & ~d["no_ack"].to_numpy(bool)
    return order[open_ & current[_rows_of(m, order)]]


def _pending_consumes(cons: pd.DataFrame, current: np.ndarray, m: pd.DataFrame) -> np.ndarray:
    """Orders of the basic.consume frames a later basic.consume-ok may still answer."""
    order = cons["order"].to_numpy(np.int64)
    waiting = cons["ok_order"].isna().to_numpy(bool) & ~cons["nowait"].fillna(False).to_numpy(bool)
    return order[waiting & current[_rows_of(m, order)]]


def _last_consumes(cons: pd.DataFrame) -> np.ndarray:
    """The last basic.consume of each (channel, consumer tag) with a tag, and the
    basic.consume-ok that answered it (later deliveries are matched to it by tag)."""
    named = cons[cons["consumer_tag"].notna()]
    if not len(named):
        return _NONE
    code = codes(chan_key(named), named["tag_code"].to_numpy(np.int64))
    order = named["order"].to_numpy(np.int64)
    last = _last_order(code, order)
    ok = named["ok_order"].to_numpy(np.float64)[np.isin(order, last)]
    return np.r_[last, ok[~np.isnan(ok)].astype(np.int64)]


def _last_order(group: np.ndarray, order: np.ndarray) -> np.ndarray:
    """The greatest order of each group."""
    if not len(group):
        return _NONE
    uniq, inv = np.unique(group, return_inverse=True)
    last = np.full(len(uniq), -1, np.int64)
    np.maximum.at(last, inv.ravel(), order)
    return last


def _last_of(m: pd.DataFrame, mask: np.ndarray, group: np.ndarray) -> np.ndarray:
    """The order of the last frame of `mask` in each `group` (values per method frame)."""
    return _last_order(group[mask], m["order"].to_numpy(np.int64)[mask])


def _current_qos(cap: Capture, m: pd.DataFrame, current: np.ndarray) -> np.ndarray:
    """The last basic.qos of each current tag space, per ``global`` (consumers started later
    take their prefetch from it)."""
    mask = select(m, "basic.qos", "c2s") & current
    q = pick(cap, m, mask, ["space", "global"])
    glob = q["global"].fillna(False).to_numpy(bool).astype(np.int64)
    return _last_order(q["space"].to_numpy(np.int64) * 2 + glob, m["order"].to_numpy(np.int64)[mask])


def _first_selects(m: pd.DataFrame, current: np.ndarray) -> np.ndarray:
    """The first confirm.select of each current tag space (its publishes are numbered after it)."""
    mask = select(m, "confirm.select", "c2s") & current
    space, order = m["space"].to_numpy(np.int64)[mask], m["order"].to_numpy(np.int64)[mask]
    if not len(space):
        return _NONE
    _, first = np.unique(space, return_index=True)
    return order[first]


def _highest_multiple(cap: Capture, m: pd.DataFrame, current: np.ndarray, direction: str) -> np.ndarray:
    """Per current tag space, the first settling frame with ``multiple`` (client's: c2s; the
    broker's confirms: s2c) that carries the space's highest such tag (`match_settlements`)."""
    names = SETTLE_METHODS if direction == "c2s" else ("basic.ack", "basic.nack")
    mask = select(m, names, direction) & current
    s = pick(cap, m, mask, ["space", "order", "delivery_tag", "multiple"])
    tag = _tags(s["delivery_tag"])
    s = s[(tag >= 0) & s["multiple"].fillna(False).to_numpy(bool)]
    if not len(s):
        return _NONE
    tag = _tags(s["delivery_tag"])
    tag[tag == 0] = ALL_TAGS
    space, order = s["space"].to_numpy(np.int64), s["order"].to_numpy(np.int64)
    by = np.lexsort((order, -tag, space))  # per space: highest tag first, then the first frame
    first = np.r_[True, space[by][1:] != space[by][:-1]]
    return order[by][first]


def _numbered(p: pd.DataFrame, seeds: Seeds, current: np.ndarray, open_keys: np.ndarray,
              open_counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Publishes numbered so far per current tag space (channel key, epoch): the last sequence
    number of the slice's, else the count before it."""
    cur = p[current]
    still = seeds.numbered_epochs == value_at(open_keys, open_counts, seeds.numbered_keys, 0)
    # the slices before's counts of the spaces still current, then this slice's (higher) ones
    k = np.r_[seeds.numbered_keys[still], chan_keys(cur["stream"], cur["channel"])]
    e = np.r_[seeds.numbered_epochs[still], cur["epoch"].to_numpy(np.int64)]
    n = np.r_[seeds.numbered_counts[still], cur["seq"].to_numpy(np.int64)]
    if not len(k):
        return _NONE, _NONE, _NONE
    code = codes(k, e)
    last = np.full(code.max() + 1, -1, np.int64)
    np.maximum.at(last, code, n)
    _, first = np.unique(code, return_index=True)
    return k[first], e[first], last[code[first]]


# --- the first pass: what only the end knows ------------------------------------------------------

@dataclass(frozen=True)
class _Seen:
    """The first pass's carry: the opens per channel and frames so far, the tag spaces settled
    and the last closes."""

    offset: int
    open_keys: np.ndarray
    open_counts: np.ndarray
    settled_keys: np.ndarray
    settled_epochs: np.ndarray
    closes: Closes


def ends_step(part: Capture, seen: _Seen | None) -> _Seen:
    """The first pass over the slice `part` (a `time_slice`), given what the slices before saw."""
    seen = seen or _Seen(0, _NONE, _NONE, _NONE, _NONE, Closes(_NONE, _NONE, _NONE, _NONE))
    cap = replayed(part, Replay(pd.DataFrame(), _NONE, _NONE, _NONE, np.zeros(0, bool), seen.offset,
                                seen.open_keys, seen.open_counts, _NONE, _NONE, _NONE))
    m = methods(cap)
    key = chan_key(m)
    (open_keys,), open_counts = counts_added((seen.open_keys,), seen.open_counts,
                                             *_counted(key[select(m, "channel.open")]))
    s = pick(cap, m, select(m, SETTLE_METHODS, "c2s"), ["stream", "channel", "epoch", "delivery_tag"])
    s = s[_tags(s["delivery_tag"]) >= 0]
    pairs = pd.DataFrame({"k": np.r_[seen.settled_keys, chan_key(s)],
                          "e": np.r_[seen.settled_epochs, s["epoch"].to_numpy(np.int64)]}).drop_duplicates()
    pairs = pairs.sort_values(["k", "e"])
    closes = last_closes(m)
    closes = Closes(closes.channels, closes.channel_orders + seen.offset,
                    closes.connections, closes.connection_orders + seen.offset)
    return _Seen(seen.offset + len(cap.frames), open_keys, open_counts, pairs["k"].to_numpy(np.int64),
                 pairs["e"].to_numpy(np.int64), seen.closes.joined(closes))


def ends_of(seen: _Seen) -> Ends:
    """The `Ends` of a partition from the first pass over all its slices."""
    return Ends(seen.settled_keys, seen.settled_epochs, seen.closes)
