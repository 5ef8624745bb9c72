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
  ``global``);
- the client acks waiting for the next delivery of their tag space, with what their slice said
  of them (`Replay.acks`: the deliveries they settled are not replayed).

Rows that are not frames are carried as rows: each consumer's row until its tag space ends
(`Replay.consumers`), each consumer's last state row until its next row or its end
(`Replay.state_rows`; a start at a basic.consume awaiting its consume-ok: until its next row, or
dropped when the consume-ok starts the consumer), the most deliveries each consumer held
unacknowledged (`Replay.state_maxima`: an estimated prefetch is the most of its whole life).

Unbounded only where the protocol window is: a consumer without basic.consume in the capture
that never settles is no-ack (`Ends`), so its deliveries are not kept; a publisher whose confirms
never come keeps every publish, and a channel that starts a consumer with a new tag after
another (never reusing one) keeps one basic.consume per tag.

What only the partition's end knows (whether a tag space ever settles, the last close of each
channel) comes from a first pass over the slices (`ends_of`), before the slices are analysed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..io.load import Capture
from .cache import CONNECTION, derivation
from .columns import as_object, codes, counts_added, value_at
from .consumers import (CONSUMER, acked_deliveries, code_of, consumer_rows, consumer_state_with_codes,
                        consumers_so_far, until_of)
from .deliveries import (SETTLE_METHODS, _tags, confirms, consume_frames, deliveries_with_codes,
                         last_closes)
from .backlog import frame_keys
from .methods import chan_key, methods, pick, select
from .ack_rows import ack_rows
from .seeds import Closes, Ends, Replay, Seeds, chan_keys, last_per_key, seeds_of

_NONE = np.zeros(0, np.int64)


def with_replay(part: Capture, replay: Replay | None, ends: Ends) -> None:
    """Give the slice `part` what the slice before left open (None: the first slice) and the
    first pass's `Ends`, for `for_derivations`."""
    part.context.replay = replay
    part.context.ends = ends


def for_derivations(part: Capture) -> Capture:
    """The slice `part` (given `with_replay`) as the derivations see it (`replayed`); the slice
    itself when it is a whole partition. One per slice: every analyzer's step reads the same."""
    if part.context.ends is None:
        # (not kept in part.derived: a capture holding itself is a reference cycle, freed only
        # by the garbage collector, so a worker held several buckets it was done with: 2.5 GiB
        # where it needs 1)
        return part
    return _replayed_slice(part)


@derivation(CONNECTION)
def _replayed_slice(part: Capture) -> Capture:
    """`for_derivations` of a slice given its replay (a capture of its own, kept once)."""
    return replayed(part, part.context.replay, part.context.ends)


def next_replay(part: Capture) -> Replay:
    """What the slice after `part` (given `with_replay`) replays."""
    return replay_after(for_derivations(part))


def replayed(part: Capture, replay: Replay | None, ends: Ends | None = None) -> Capture:
    """The slice `part` as its derivations see it: the rows of `replay` (None: the first slice)
    before its own frames, and the seeds on its context."""
    replay = replay or Replay()
    frames = _with_rows(replay.rows, part.frames) if len(replay.rows) else part.frames
    cap = Capture(path=part.path, ports=part.ports, frames=frames, packets=part.packets,
                  connections=part.connections, anomalies=part.anomalies, records=part.records,
                  bodies=part.bodies, summary=part.summary, amqp10_frames=part.amqp10_frames)
    cap.context = dataclasses.replace(part.context, seeds=Seeds(replay, ends))
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
    spaces = _spaces(cap)
    open_keys, open_counts, current = spaces.open_keys, spaces.open_counts, spaces.current

    dc = deliveries_with_codes(cap)
    d = dc.table
    waiting_d = _pending_deliveries(m, d, current)
    p = confirms(cap)
    waiting_p = p["order"].to_numpy(np.int64)[
        current[_rows_of(m, p["order"])] & ~p["outcome"].isin(["ack", "nack"]).to_numpy(bool)]
    cons = consume_frames(cap)
    waiting_c = _pending_consumes(cons, current, m)
    acks = ack_rows(cap).table
    waiting_a = _pending_acks(m, acks, current, seeds)
    orders = np.unique(np.r_[
        waiting_d, dc.source_order[np.isin(d["order"].to_numpy(np.int64), waiting_d) & (dc.source_order >= 0)],
        waiting_p, waiting_c, waiting_a, _last_consumes(cons), _last_of(m, select(m, "basic.get", "c2s"), key),
        _current_qos(cap, m, current), _first_selects(m, current),
        _highest_multiple(cap, m, current, "c2s"), _highest_multiple(cap, m, current, "s2c")]).astype(np.int64)
    pending = np.isin(orders, np.r_[waiting_d, waiting_p, waiting_c, waiting_a])

    seq = np.zeros(len(orders), np.int64)
    at = np.searchsorted(orders, p["order"].to_numpy(np.int64))
    mine = at < len(orders)  # (nothing replayed at all: a publish left unconfirmed by its channel opened again)
    mine[mine] = orders[at[mine]] == p["order"].to_numpy(np.int64)[mine]
    seq[at[mine]] = p["seq"].to_numpy(np.int64)[mine]
    numbered = _numbered(p, seeds, current[_rows_of(m, p["order"])], open_keys, open_counts)
    rows = cap.frames.iloc[orders].reset_index(drop=True)
    rows = rows.astype({c: object for c in rows.columns if isinstance(rows[c].dtype, pd.CategoricalDtype)})
    consumers = consumers_so_far(cap)
    current_consumers = _in_current_space(consumers, open_keys, open_counts)
    state = _state_split(cap)
    return Replay(rows=rows, orders=seeds.whole_orders(orders), epochs=epoch[_rows_of(m, orders)], seqs=seq,
                  pending=pending, ranks=frame_keys(cap, orders)[1], acks=_told_acks(acks, orders, waiting_a),
                  consumers=as_object(consumers[current_consumers].reset_index(drop=True), "consumer_tag"),
                  state_rows=state.withheld, state_maxima=state.maxima,
                  offset=seeds.replay.offset + len(cap.frames) - seeds.replayed,
                  open_keys=open_keys, open_counts=open_counts, numbered_keys=numbered[0],
                  numbered_epochs=numbered[1], numbered_counts=numbered[2])


@dataclass(frozen=True)
class _Spaces:
    """The tag spaces of a slice's channels at its end (`_spaces`)."""

    #: channel.open frames per channel key so far (keys sorted)
    open_keys: np.ndarray
    open_counts: np.ndarray
    #: per method frame, whether it is in its channel's current tag space (a later frame can be
    #: matched to it)
    current: np.ndarray


@derivation(CONNECTION)
def _spaces(cap: Capture) -> _Spaces:
    seeds = seeds_of(cap)
    m = methods(cap)
    own = m["order"].to_numpy(np.int64) >= seeds.replayed
    (open_keys,), open_counts = counts_added(
        (seeds.replay.open_keys,), seeds.replay.open_counts, *_counted(chan_key(m)[own & select(m, "channel.open")]))
    return _Spaces(open_keys, open_counts, _in_current_space(m, open_keys, open_counts))


def told(cap: Capture, order, last: bool) -> np.ndarray:
    """Which rows of a table derived from the slice `cap` (their frames at positions `order`)
    the slice tells: those of its own frames and the pending replayed ones, once final (not
    replayed as pending to the next slice) or at the partition's `last` slice. Each row is told
    by one slice; a whole partition (no seeds) tells every row."""
    order = np.asarray(order, np.int64)
    seeds = seeds_of(cap)
    if seeds is None:
        return np.ones(len(order), bool)
    mine = _own_or_pending(seeds, order)
    if last:
        return mine
    later = replay_after(cap)
    return mine & ~np.isin(seeds.whole_orders(order), later.orders[later.pending])


def _own_or_pending(seeds: Seeds, order: np.ndarray) -> np.ndarray:
    """Whether each frame (at positions `order` of a slice) is the slice's own or a replayed
    pending one: the rows a slice may tell (a replayed frame that is not pending was told)."""
    mine = order >= seeds.replayed
    if seeds.replayed:
        mine |= seeds.replay.pending[np.minimum(order, seeds.replayed - 1)]
    return mine


def told_consumers(cap: Capture, last: bool) -> np.ndarray:
    """Which rows of `consumer_rows` of the slice `cap` the slice tells: those not carried to the
    next slice (their tag space ended), or all at the partition's `last` slice."""
    rows = consumer_rows(cap)
    if seeds_of(cap) is None or last:
        return np.ones(len(rows), bool)
    later = replay_after(cap).consumers
    if not len(later):
        return np.ones(len(rows), bool)
    carried = pd.MultiIndex.from_frame(as_object(later[CONSUMER], "consumer_tag"))
    return ~pd.MultiIndex.from_frame(as_object(rows[CONSUMER], "consumer_tag")).isin(carried)


@dataclass(frozen=True)
class _StateSplit:
    """A slice's `consumer_state` rows split by what is known of them (`_state_split`)."""

    #: rows now final (with ``_order``): the slices' before whose next row or end came, and the
    #: slice's own but each consumer's last (unless it ended)
    final: pd.DataFrame
    #: rows whose next row or end is not known yet: the slices' before still waiting, and each
    #: not ended consumer's last own row (with ``_order``)
    withheld: pd.DataFrame
    #: the most deliveries each consumer held unacknowledged so far (CONSUMER, max_unacked)
    maxima: pd.DataFrame


def state_maxima(cap: Capture) -> pd.DataFrame:
    """The most deliveries each consumer held unacknowledged up to the end of the slice `cap`
    (CONSUMER, max_unacked): at the last slice, what `consumers.with_final_prefetch` needs."""
    return _state_split(cap).maxima


def told_state(cap: Capture, last: bool) -> pd.DataFrame:
    """The `consumer_state` rows the slice `cap` tells, with ``_order`` (their frame's whole
    order): each row once, when its next row or its consumer's end is known, or at the last
    slice (then until the consumer's end, or the connection's last packet). An estimated
    prefetch is the most so far: `consumers.with_final_prefetch` makes it the whole's."""
    split = _state_split(cap)
    if not last:
        return split.final
    return pd.concat([t for t in (split.final, split.withheld) if len(t)] or [split.final], ignore_index=True)


@derivation(CONNECTION)
def _state_split(cap: Capture) -> _StateSplit:
    seeds = seeds_of(cap)
    st = consumer_state_with_codes(cap)
    rows = st.table.assign(_order=st.orders)
    cons = consumers_so_far(cap)
    ended = _per_row(rows, cons, "ended", False).astype(bool)
    # each consumer's last own row, by frame order, waits for its next row or its end; a start
    # at a basic.consume still awaiting its basic.consume-ok, for its next row (`_awaiting_ok`)
    last_row = np.zeros(len(rows), bool)
    if len(rows):
        by = np.lexsort((st.orders, st.code))
        last_row[by[np.r_[st.code[by][1:] != st.code[by][:-1], True]]] = True
    awaiting = _awaiting_ok(cap)
    wait = last_row & (~ended | np.isin(st.orders, awaiting))
    before = seeds.replay.state_rows if seeds is not None else pd.DataFrame()
    if len(before):
        before = before[~_answered_starts(cap, before)].reset_index(drop=True)
    done_before, waiting_before = _resolved(cap, before, rows, st.orders, cons, awaiting)
    final = [t for t in (done_before, rows[~wait]) if len(t)]
    waiting = [t for t in (waiting_before, rows[wait]) if len(t)]
    maxima = _maxima(acked_deliveries(cap).keys, st.max_unacked,
                     seeds.replay.state_maxima if seeds is not None else pd.DataFrame())
    return _StateSplit(pd.concat(final, ignore_index=True) if final else rows.iloc[:0],
                       as_object(pd.concat(waiting, ignore_index=True), "consumer_tag") if waiting else rows.iloc[:0],
                       maxima)


def _per_row(rows: pd.DataFrame, cons: pd.DataFrame, column: str, default):
    """`cons`' `column` (per consumer, CONSUMER keys) at each row's consumer."""
    if not len(rows):
        return np.zeros(0, dtype=object)
    at = code_of(cons, rows) if len(cons) else np.full(len(rows), -1)
    values = cons[column].to_numpy(object) if len(cons) else np.zeros(0, object)
    return np.where(at >= 0, values[np.maximum(at, 0)] if len(values) else default, default)


def _awaiting_ok(cap: Capture) -> np.ndarray:
    """The whole orders of the basic.consume frames of the slice `cap` still awaiting their
    basic.consume-ok, which the next slice replays (`_pending_consumes`); none in a whole
    partition. A consumer's state row at one is its start known only so far: a later slice may
    start it at the consume-ok (`_answered_starts`), even after its cancel or channel.close (a
    client need not wait for the consume-ok to send those)."""
    seeds = seeds_of(cap)
    if seeds is None:
        return _NONE
    return seeds.whole_orders(_pending_consumes(consume_frames(cap), _spaces(cap).current, methods(cap)))


def _answered_starts(cap: Capture, before: pd.DataFrame) -> np.ndarray:
    """Which rows the slices before withheld (`before`) are a consumer's start at its
    basic.consume whose basic.consume-ok is one of the slice's own frames. The consumer exists
    from its consume-ok (AMQP 0-9-1 §1.8.3.3/.4; `deliveries.consume_frames`): a slice where the
    basic.consume is not answered yet starts it there, but only so far (the basic.consume is
    replayed, pending); the slice that answers it starts it at the consume-ok
    (`consumers._with_carried`), as the whole partition does, and that row goes."""
    seeds = seeds_of(cap)
    cons = consume_frames(cap)
    order = cons["order"].to_numpy(np.int64)
    ok = cons["ok_order"].to_numpy(np.float64, na_value=np.nan)
    answered = (order < seeds.replayed) & (ok >= seeds.replayed)
    return np.isin(before["_order"].to_numpy(np.int64), seeds.whole_orders(order[answered]))


def _resolved(cap: Capture, before: pd.DataFrame, rows: pd.DataFrame, orders: np.ndarray,
              cons: pd.DataFrame, awaiting: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows the slices before withheld (`before`), split into those now resolved (their
    consumer's next row is among the slice's `rows` (frames at whole `orders`), or its end is
    known, unless the row is at a basic.consume `awaiting` its consume-ok) and those still
    waiting, both with their until_ts and duration_s as known so far."""
    if not len(before):
        return before, before
    nat = np.iinfo(np.int64).min
    # the consumer's first row of this slice, by frame order
    nxt = np.full(len(before), nat, dtype=np.int64)
    if len(rows):
        first = rows.assign(_o=orders).sort_values("_o", kind="stable").drop_duplicates(CONSUMER)
        at = code_of(first, before)
        hit = at >= 0
        nxt[hit] = first["ts"].array.asi8[at[hit]]
    ended = _per_row(before, cons, "ended", False).astype(bool)
    # its end: its consumer's (known or not yet: the connection's last packet), or the
    # connection's last packet for a consumer no longer carried (its tag space ended unseen)
    last = cap.connections.set_index("stream")["last_ts"].reindex(before["stream"].to_numpy())
    end = pd.Series(_per_row(before, cons, "end_ts", pd.NaT))
    end_ns = pd.to_datetime(end.where(end.notna(), pd.Series(last.array)), utc=True).array.asi8
    ts = before["ts"].array.asi8
    until = until_of(ts, nxt, end_ns)
    done = (nxt != nat) | (ended & ~np.isin(before["_order"].to_numpy(np.int64), awaiting))
    out = before.copy()
    tsd = before["ts"].dtype
    out["until_ts"] = pd.Series(until.view("M8[ns]")).dt.tz_localize("UTC").astype(tsd).array
    out["duration_s"] = (out["until_ts"] - out["ts"]).dt.total_seconds()
    return out[done].reset_index(drop=True), out[~done].reset_index(drop=True)


def _maxima(keys: pd.DataFrame, max_unacked: np.ndarray, before: pd.DataFrame) -> pd.DataFrame:
    """Each consumer's most unacked deliveries so far: this slice's (`keys`: its consumers, with
    the slices' before: `consumer_state_with_codes`) and those only the slices before saw."""
    now = as_object(keys[CONSUMER].assign(max_unacked=max_unacked), "consumer_tag")
    now = now[now["max_unacked"].to_numpy() > np.iinfo(np.int64).min]
    if not len(before):
        return now.reset_index(drop=True)
    both = pd.concat([as_object(before, "consumer_tag"), now], ignore_index=True)
    return both.groupby(CONSUMER, as_index=False, sort=True)["max_unacked"].max()


def _counted(key: np.ndarray) -> tuple[tuple[np.ndarray], np.ndarray]:
    uniq, n = np.unique(key, return_counts=True)
    return (uniq.astype(np.int64),), n.astype(np.int64)


def _rows_of(m: pd.DataFrame, order) -> np.ndarray:
    """The rows of the method frames `m` at the frame positions `order` (method frames all)."""
    return np.searchsorted(m["order"].to_numpy(np.int64), np.asarray(order, np.int64))


def _in_current_space(rows: pd.DataFrame, open_keys: np.ndarray, open_counts: np.ndarray) -> np.ndarray:
    """Whether each row (stream, channel, epoch) is in its channel's current tag space."""
    return rows["epoch"].to_numpy(np.int64) == value_at(open_keys, open_counts, chan_key(rows), 0)


def _pending_deliveries(m: pd.DataFrame, d: pd.DataFrame, current: np.ndarray) -> np.ndarray:
    """Orders of the deliveries a later frame may still settle: not settled, not no-ack, in
    their channel's current tag space."""
    order = d["order"].to_numpy(np.int64)
    open_ = d["settle_order"].isna().to_numpy(bool) & ~d["no_ack"].to_numpy(bool)
    return order[open_ & current[_rows_of(m, order)]]


def _pending_acks(m: pd.DataFrame, acks: pd.DataFrame, current: np.ndarray, seeds: Seeds) -> np.ndarray:
    """Orders of the client acks/nacks/rejects still waiting for the next delivery of their tag
    space (`amqpcap.derive.ack_rows.ack_rows`): at most as many as the deliveries outstanding when
    the last delivery came. Not a replayed ack that was told (a multiple ack replayed for
    `match_settlements`: its next delivery, told with it, is not replayed)."""
    order = acks["order"].to_numpy(np.int64)
    waiting = acks["next_deliver_packet"].isna().to_numpy(bool) & current[_rows_of(m, order)]
    return order[waiting & _own_or_pending(seeds, order)]


def _told_acks(acks: pd.DataFrame, orders: np.ndarray, waiting: np.ndarray) -> pd.DataFrame:
    """Per replayed row (`orders`), what `ack_rows` says of it when it is a waiting ack
    (`waiting`), settled -1 for the others (`Replay.acks`)."""
    at = np.searchsorted(acks["order"].to_numpy(np.int64), orders)
    is_ack = np.isin(orders, waiting)
    at = np.where(is_ack, at, 0)
    return pd.DataFrame({
        "settled": np.where(is_ack, acks["settled"].to_numpy(np.int64)[at] if len(acks) else -1, -1),
        "queue": np.where(is_ack, acks["queue"].astype(object).to_numpy()[at] if len(acks) else None, None),
        "unacked_after": np.where(is_ack, acks["unacked_after"].to_numpy(np.int64)[at] if len(acks) else 0, 0)})


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
    last = last_per_key(code, order)[1]
    ok = named["ok_order"].to_numpy(np.float64)[np.isin(order, last)]
    return np.r_[last, ok[~np.isnan(ok)].astype(np.int64)]


def _last_of(m: pd.DataFrame, mask: np.ndarray, group: np.ndarray) -> np.ndarray:
    """The order of the last frame of `mask` in each `group` (values per method frame)."""
    return last_per_key(group[mask], m["order"].to_numpy(np.int64)[mask])[1]


def _current_qos(cap: Capture, m: pd.DataFrame, current: np.ndarray) -> np.ndarray:
    """The last basic.qos of each current tag space, per ``global`` (consumers started later
    take their prefetch from it)."""
    mask = select(m, "basic.qos", "c2s") & current
    q = pick(cap, m, mask, ["space", "global"])
    glob = q["global"].fillna(False).to_numpy(bool).astype(np.int64)
    return last_per_key(q["space"].to_numpy(np.int64) * 2 + glob, m["order"].to_numpy(np.int64)[mask])[1]


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
    # (tag 0, "everything outstanding", names only tags delivered before it: never a later one's)
    s = s[(tag > 0) & s["multiple"].fillna(False).to_numpy(bool)]
    if not len(s):
        return _NONE
    tag = _tags(s["delivery_tag"])
    space, order = s["space"].to_numpy(np.int64), s["order"].to_numpy(np.int64)
    by = np.lexsort((order, -tag, space))  # per space: highest tag first, then the first frame
    first = np.r_[True, space[by][1:] != space[by][:-1]]
    return order[by][first]


def _numbered(p: pd.DataFrame, seeds: Seeds, current: np.ndarray, open_keys: np.ndarray,
              open_counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Publishes numbered so far per current tag space (channel key, epoch): the last sequence
    number of the slice's, else the count before it."""
    cur = p[current]
    still = seeds.replay.numbered_epochs == value_at(open_keys, open_counts, seeds.replay.numbered_keys, 0)
    # the slices before's counts of the spaces still current, then this slice's (higher) ones
    k = np.r_[seeds.replay.numbered_keys[still], chan_keys(cur["stream"], cur["channel"])]
    e = np.r_[seeds.replay.numbered_epochs[still], cur["epoch"].to_numpy(np.int64)]
    n = np.r_[seeds.replay.numbered_counts[still], cur["seq"].to_numpy(np.int64)]
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
    cap = replayed(part, Replay(offset=seen.offset, open_keys=seen.open_keys, open_counts=seen.open_counts))
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
