"""Consumers and their credit: who consumed from which queue with which prefetch, and each one's
unacked count and unused credit (deficit) over time.

A consumer is (stream, channel, consumer tag) on one opening of the channel. Its unacked count
rises with each basic.deliver and falls when the client's ack/nack/reject settles a delivery
(matching in :mod:`amqpcap.derive.deliveries`). RabbitMQ sends a consumer a message only while
its unacked count is below its prefetch (basic.qos prefetch_count; global=false: per consumer,
applying to consumers started after the qos on that channel; global=true: shared by all
consumers of the channel). ``deficit = prefetch − unacked`` is the credit the broker holds for
the consumer and has not used.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..io.load import Capture
from .cache import CONNECTION, derivation
from .columns import as_object, asof, codes, group_cumsum, stable_argsort, text_ranks
from .deliveries import GET_TAG, consumes, deliveries_with_codes
from .methods import KEY, methods, pick, select
from .seeds import seeds_of

CONSUMER = ["stream", "channel", "epoch", "consumer_tag"]


@derivation(CONNECTION)
def consumer_rows(cap: Capture) -> pd.DataFrame:
    """One row per acknowledging consumer: start (consume-ok, else first delivery), end, queue,
    prefetch from basic.qos (per consumer), whether its basic.consume is in the capture.
    Computed once per Capture (consumer_state and consumer_summary both need it).

    ``start_order`` is the whole partition's order of the start frame. In a slice of a
    partition's time (`amqpcap.derive.replay`) the rows are those of the consumers seen so far
    in their channel's current tag space, and of those seen in this slice: each consumer is
    told by the slice where its tag space ends, or the last (`told_consumers`)."""
    return consumers_so_far(cap).drop(columns="ended")


@derivation(CONNECTION)
def consumers_so_far(cap: Capture) -> pd.DataFrame:
    """`consumer_rows` with ``ended``: whether its end (cancel, channel or connection close) is
    in the capture so far (else its end is the connection's last packet, for now)."""
    seeds = seeds_of(cap)
    c = with_prefetch(cap, _started(cap, seeds))
    c = c.drop(columns=["first_order", "first_ts", "first_packet"])
    if seeds is not None:
        c["start_order"] = seeds.whole_orders(c["start_order"].to_numpy(np.int64))
        c = _with_carried(c, seeds.replay.consumers)
    return _with_ends(cap, c, seeds).reset_index(drop=True)


def _started(cap: Capture, seeds) -> pd.DataFrame:
    """The consumers of `cap`'s own deliveries and basic.consume frames (a slice's replayed
    deliveries and answered basic.consume are the slices' before: `_with_carried`): keys,
    first delivery, queue, deliveries, start (basic.consume-ok, else the first delivery), as
    positions in `cap`'s frames."""
    # grouped on the consumer code of acked_deliveries (one int64, not four columns with text);
    # the keys' columns then taken from its key table
    a = acked_deliveries(cap)
    d, code, keys = a.table, a.code, a.keys
    cons = consumes(cap)
    cons = cons[~cons["no_ack"].to_numpy(bool)]
    if seeds is not None and seeds.replayed:
        own = d["order"].to_numpy(np.int64) >= seeds.replayed
        d, code = d[own], code[own]
        order = cons["order"].to_numpy(np.int64)
        cons = cons[(order >= seeds.replayed) | seeds.replay.pending[np.minimum(order, seeds.replayed - 1)]]
    first = d[["order", "ts", "packet", "queue"]].groupby(code, sort=False).agg(
        first_order=("order", "min"), first_ts=("ts", "min"), first_packet=("packet", "min"),
        queue=("queue", "first"), deliveries=("order", "size"))
    first = pd.concat([keys.iloc[first.index.to_numpy()].reset_index(drop=True), first.reset_index(drop=True)],
                      axis=1)
    cons = cons[CONSUMER + ["start_order", "start_ts", "start_packet"]]
    # a consumer with no deliveries still holds credit: keep consumers seen only by their consume
    c = as_object(first, "consumer_tag").merge(as_object(cons, "consumer_tag").drop_duplicates(CONSUMER, keep="last"),
                                            on=CONSUMER, how="outer")
    c["start_ts"] = c["start_ts"].astype(d["ts"].dtype)
    c["consume_seen"] = c["start_order"].notna()
    c["deliveries"] = c["deliveries"].fillna(0).astype(np.int64)
    c["start_ts"] = c["start_ts"].where(c["consume_seen"], c["first_ts"])
    c["start_order"] = c["start_order"].where(c["consume_seen"], c["first_order"]).astype(np.int64)
    c["start_packet"] = c["start_packet"].where(c["consume_seen"], c["first_packet"]).astype(np.int64)
    return c


def _with_carried(c: pd.DataFrame, carried: pd.DataFrame) -> pd.DataFrame:
    """The consumers `c` of a slice (`_started`, start orders whole) with those the slices
    before left (`consumers_so_far` of the slice before, still in a current tag space): their
    deliveries added, their queue and start kept unless the slice starts the consumer again
    (a basic.consume of the same tag: the last one is its start, as `_started` takes it)."""
    if not len(carried):
        return c
    before = carried.rename(columns={col: f"{col}_before" for col in carried.columns if col not in CONSUMER})
    both = as_object(c, "consumer_tag").merge(as_object(before, "consumer_tag"), on=CONSUMER, how="outer",
                                              indicator=True)
    seen_before = (both["_merge"] != "left_only").to_numpy(bool)
    seen_now = (both["_merge"] != "right_only").to_numpy(bool)
    restarted = ~seen_before | (seen_now & both["consume_seen"].fillna(False).to_numpy(bool))
    out = pd.DataFrame({k: both[k] for k in CONSUMER})
    out["queue"] = both["queue_before"].where(both["queue_before"].notna(), both["queue"])
    out["deliveries"] = (both["deliveries"].fillna(0) + both["deliveries_before"].fillna(0)).astype(np.int64)
    for col in ("start_order", "start_ts", "start_packet", "consume_seen", "qos_seen", "prefetch"):
        out[col] = both[col].where(restarted, both[f"{col}_before"])
    out["ended"] = both["ended_before"].fillna(False).to_numpy(bool) & ~restarted
    out["end_ts"] = both["end_ts_before"].where(out["ended"])
    out = out.astype({"start_order": np.int64, "start_packet": np.int64, "consume_seen": bool, "qos_seen": bool,
                      "prefetch": "Int64", "start_ts": c["start_ts"].dtype, "queue": c["queue"].dtype})
    return out.sort_values("start_order", kind="stable").reset_index(drop=True)


def _with_ends(cap: Capture, c: pd.DataFrame, seeds) -> pd.DataFrame:
    """`c` with each consumer's end: its cancel (basic.cancel or -ok), its channel's or
    connection's close, the first after its start; else the connection's last packet. In a
    slice, a consumer that ended in the slices before keeps that end (``ended``); one started
    before the slice ends at the slice's first such frame."""
    m = methods(cap)
    ended = c["ended"].to_numpy(bool) if "ended" in c else np.zeros(len(c), bool)
    end_before = c["end_ts"] if "end_ts" in c else None
    c = c.drop(columns=[col for col in ("ended", "end_ts") if col in c])
    # the start as a position in cap's frames (before the slice's own frames: -1), by which the
    # first end after it is found
    start = c["start_order"].to_numpy(np.int64)
    if seeds is not None:
        own = start >= seeds.replay.offset
        start = np.where(own, start - seeds.replay.offset + seeds.replayed, -1)
    look = as_object(pd.DataFrame({"stream": c["stream"].to_numpy(np.int64), "channel": c["channel"].to_numpy(np.int64),
                                   "consumer_tag": c["consumer_tag"], "start_order": start}), "consumer_tag")
    # (reindex, not map: map of an empty column gives float64, which no timestamp casts to)
    last = cap.connections.set_index("stream")["last_ts"].reindex(c["stream"].to_numpy())
    end_ts = pd.Series(last.array, index=c.index).astype(c["start_ts"].dtype)
    found = np.zeros(len(c), bool)
    ends = as_object(pick(cap, m, select(m, ["basic.cancel", "basic.cancel-ok"]),
                         ["stream", "channel", "consumer_tag", "order", "ts"]), "consumer_tag")
    if len(ends):
        e = pd.merge_asof(look, as_object(ends.rename(columns={"order": "e_order", "ts": "e_ts"}).sort_values("e_order"),
                                          "consumer_tag"),
                          left_on="start_order", right_on="e_order", by=["stream", "channel", "consumer_tag"],
                          direction="forward")
        hit = e["e_ts"].notna().to_numpy(bool)
        end_ts = end_ts.where(~hit, e["e_ts"].array)
        found |= hit
    closes = pick(cap, m, select(m, ["channel.close", "connection.close"]), ["stream", "channel", "order", "ts"])
    for by, rows in (("channel", closes[closes["channel"] != 0]), (None, closes[closes["channel"] == 0])):
        if len(rows) == 0:
            continue
        keys = ["stream", "channel"] if by else ["stream"]
        e = pd.merge_asof(look[keys + ["start_order"]], rows[keys + ["order", "ts"]].rename(
            columns={"order": "e_order", "ts": "e_ts"}).sort_values("e_order"),
            left_on="start_order", right_on="e_order", by=keys, direction="forward")
        hit = e["e_ts"].notna().to_numpy(bool)
        earlier = hit & (~found | (e["e_ts"].array < end_ts.array))
        end_ts.iloc[np.flatnonzero(earlier)] = e["e_ts"].array[earlier]
        found |= hit
    if end_before is not None:
        end_ts = end_ts.where(~ended, end_before.astype(end_ts.dtype))
    c["end_ts"] = pd.to_datetime(end_ts, utc=True).astype(c["start_ts"].dtype)
    c["ended"] = ended | found
    return c


def with_prefetch(cap: Capture, c: pd.DataFrame, global_: bool = False, name: str = "prefetch") -> pd.DataFrame:
    """``c`` (consumers: KEY and start_order) sorted by start_order, with ``name`` (Int64): the
    prefetch_count of the last basic.qos on the consumer's channel (same opening) before its start,
    with global=false (RabbitMQ: a limit per consumer, for consumers started after it), or with
    global=true (``global_``: one limit shared by the channel); <NA> without one. ``qos_seen``:
    such a basic.qos is in the capture."""
    m = methods(cap)
    qos = pick(cap, m, select(m, "basic.qos", "c2s"), KEY + ["order", "prefetch_count", "global"])
    wanted = qos["global"].fillna(False).to_numpy(bool) == global_
    qos = qos[wanted][KEY + ["order", "prefetch_count"]].rename(columns={"order": "q_order"})
    c = pd.merge_asof(c.sort_values("start_order"), qos.sort_values("q_order"), left_on="start_order",
                      right_on="q_order", by=KEY, direction="backward")
    c["qos_seen"] = c["q_order"].notna()
    c[name] = c["prefetch_count"].astype("Int64")
    return c.drop(columns=["q_order", "prefetch_count"])


STATE_COLUMNS = CONSUMER + ["packet", "ts", "until_ts", "duration_s", "unacked", "prefetch", "prefetch_estimated",
                            "channel_unacked", "channel_prefetch", "deficit", "at_limit"]


def _empty_state(cap: Capture) -> pd.DataFrame:
    tsd = cap.frames["ts"].dtype
    dtypes = {"stream": np.int64, "channel": np.int64, "epoch": np.int64, "consumer_tag": object, "packet": np.int64,
              "ts": tsd, "until_ts": tsd, "duration_s": float, "unacked": np.int64, "prefetch": np.int64,
              "prefetch_estimated": bool, "channel_unacked": np.int64, "channel_prefetch": "Int64",
              "deficit": "Int64", "at_limit": bool}
    return pd.DataFrame({c: pd.Series(dtype=dtypes[c]) for c in STATE_COLUMNS})


@dataclass(frozen=True)
class ConsumerState:
    """:func:`consumer_state`'s table with each row's consumer code (its row in
    ``acked_deliveries(cap).keys``), what the per-consumer summaries group on."""

    table: pd.DataFrame
    code: np.ndarray
    #: per row, the whole partition's order of its frame (its position in cap.frames, but in a
    #: slice of a partition's time: `amqpcap.derive.replay`)
    orders: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: per consumer of ``acked_deliveries(cap).keys`` (by code), the most deliveries it held
    #: unacknowledged so far (in a slice: with the slices' before, `Replay.state_maxima`)
    max_unacked: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def consumer_state(cap: Capture) -> pd.DataFrame:
    """Per consumer step series of its unacked count, prefetch and deficit (see
    :func:`consumer_state_with_codes`)."""
    return consumer_state_with_codes(cap).table


@derivation(CONNECTION)
def consumer_state_with_codes(cap: Capture) -> ConsumerState:
    """Per consumer step series of its unacked count, prefetch and deficit.

    One row per frame that changed the consumer's state (a delivery, a settling ack/nack/reject;
    a multiple ack is one row) plus a first row at consume-ok (unacked 0) when the basic.consume
    is in the capture. Each row's values hold from ``ts`` until ``until_ts`` (the next row, or
    the consumer's end: cancel, channel/connection close, or the connection's last packet).
    Consumers with no-ack and basic.get deliveries are not included (no credit applies).

    Columns: stream, channel, epoch, consumer_tag, packet, ts, until_ts, duration_s, unacked,
    prefetch (0 = unlimited), prefetch_estimated, channel_unacked, channel_prefetch (global qos;
    <NA> without one), deficit (<NA> when no limit applies), at_limit (deficit ≤ 0).
    """
    seeds = seeds_of(cap)
    c = consumer_rows(cap)
    a = acked_deliveries(cap)
    keys = a.keys
    # consumer codes follow the sorted (stream, channel, epoch, consumer_tag): the output's order
    # (in a slice, -1 for a consumer of the slices before with nothing in this one)
    c_code = code_of(keys, c)
    rows = _frame_rows(a.table, a.code, c, c_code, seeds, len(keys))
    if rows is None:
        return ConsumerState(_empty_state(cap), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64),
                             _maxima_so_far(keys, seeds))
    code, order, ts, packet, delta = rows
    by = stable_argsort(code)  # by consumer, then frame order
    unacked = group_cumsum(code, delta, by)
    channel_unacked = _channel_unacked(keys, code, order, delta)
    cp = _rows_in(c_code, len(keys))[code]  # the consumer's row in c
    max_unacked = _max_unacked(keys, code, unacked, seeds)
    estimated, prefetch = _prefetch(c, cp, max_unacked[code])
    chp_arr = _channel_prefetch(cap, keys, code, order)

    own = _own_rows(seeds, order)
    if not own.all():
        code, order, ts, packet, unacked, channel_unacked, cp, estimated, prefetch = (
            x[own] for x in (code, order, ts, packet, unacked, channel_unacked, cp, estimated, prefetch))
        chp_arr = chp_arr[own]
        by = stable_argsort(code)
    deficit, deficit_arr = _deficit(prefetch, unacked, chp_arr, channel_unacked)
    until = until_of(ts, _next_ts(code, ts, by), _i8(c["end_ts"])[cp])

    out_rows = _output_rows(code, ts, by)
    oc = code[out_rows]
    out = _state_table(keys, oc, ts[out_rows], until[out_rows], a.table["ts"].dtype, {
        "packet": packet[out_rows], "unacked": unacked[out_rows], "prefetch": prefetch[out_rows],
        "prefetch_estimated": estimated[out_rows], "channel_unacked": channel_unacked[out_rows],
        "channel_prefetch": chp_arr.take(out_rows), "deficit": deficit_arr.take(out_rows),
        "at_limit": (deficit <= 0)[out_rows]})
    whole = order[out_rows] if seeds is None else seeds.whole_orders(order[out_rows])
    return ConsumerState(out, oc, whole, max_unacked)


def _consume_oks(c: pd.DataFrame, c_code: np.ndarray, seeds) -> tuple[np.ndarray, np.ndarray]:
    """Each consumer's start as a position in the slice's frames (-1: before the slice), and
    which starts are events here: a consume-ok in the capture, of the slice's own frames (a
    consumer's start is an event of the slice holding its frame; orders: the whole's), of a
    consumer with a code."""
    start_at = c["start_order"].to_numpy(np.int64)
    if seeds is not None:
        start_at = np.where(start_at >= seeds.replay.offset, start_at - seeds.replay.offset + seeds.replayed, -1)
    return start_at, c["consume_seen"].to_numpy(bool) & (start_at >= 0) & (c_code >= 0)


def _events(d: pd.DataFrame, code: np.ndarray, c: pd.DataFrame, c_code: np.ndarray, seeds):
    """The events changing the consumers' unacked counts, as (consumer code, order, ts, packet,
    delta) columns: deliveries (+1), the frames settling them (−1), consume-oks (0), in this
    order. A slice's replayed deliveries (those the slices before left unsettled) are events
    too: its counts start from them; their rows are the slices' before (`_own_rows`)."""
    settled = d["settle_order"].notna().to_numpy()
    start_at, start = _consume_oks(c, c_code, seeds)
    return (np.r_[code, code[settled], c_code[start]],
            np.r_[d["order"].to_numpy(np.int64), d["settle_order"].to_numpy(np.int64, na_value=0)[settled],
                  start_at[start]],
            np.r_[_i8(d["ts"]), _i8(d["settle_ts"])[settled], _i8(c["start_ts"])[start]],
            np.r_[d["packet"].to_numpy(np.int64), d["settle_packet"].to_numpy(np.int64, na_value=0)[settled],
                  c["start_packet"].to_numpy(np.int64)[start]],
            np.r_[np.ones(len(d), np.int64), -np.ones(int(settled.sum()), np.int64),
                  np.zeros(int(start.sum()), np.int64)])


def _frame_rows(d: pd.DataFrame, code: np.ndarray, c: pd.DataFrame, c_code: np.ndarray, seeds, ncons: int):
    """One row per (consumer, frame) of the `_events` (a multiple ack settles many deliveries at
    once) as (code, order, ts, packet, delta): values of its first event (all of a frame's
    events have its ts and packet), deltas summed; rows by frame order, then consumer code.
    None without events. Only the order within each consumer matters to the caller (the
    channel's count is read at the end of each frame's rows; the output is sorted by consumer)."""
    # (the row per event is this function's own: let go when it returns, before the rest)
    ev_code, ev_order, ev_ts, ev_packet, ev_delta = _events(d, code, c, c_code, seeds)
    if len(ev_code) == 0:
        return None
    _, first, inv = np.unique(ev_order * ncons + ev_code, return_index=True, return_inverse=True)
    delta = np.bincount(inv.ravel(), weights=ev_delta, minlength=len(first)).astype(np.int64)
    return ev_code[first], ev_order[first], ev_ts[first], ev_packet[first], delta


def _channel_unacked(keys: pd.DataFrame, code: np.ndarray, order: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """The channel's unacked over all its consumers, as it stands after each frame (the frames
    of a tag space are contiguous runs of equal order)."""
    kcode = codes(*(keys[k].to_numpy(np.int64) for k in KEY))[code]
    ch = group_cumsum(kcode, delta)
    run_end = np.r_[np.flatnonzero(order[1:] != order[:-1]), len(order) - 1]
    return np.repeat(ch[run_end], np.diff(np.r_[-1, run_end]))


def _rows_in(c_code: np.ndarray, ncons: int) -> np.ndarray:
    """Per consumer code, the consumer's row in ``c`` (whose codes are `c_code`; -1: none)."""
    per = np.full(ncons, -1, dtype=np.int64)
    per[c_code[c_code >= 0]] = np.flatnonzero(c_code >= 0)
    return per


def _max_unacked(keys: pd.DataFrame, code: np.ndarray, unacked: np.ndarray, seeds) -> np.ndarray:
    """Per consumer code, the most deliveries it held unacknowledged so far: in these rows and
    in the slices before."""
    max_unacked = np.full(len(keys), np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(max_unacked, code, unacked)
    if seeds is not None:
        max_unacked = np.maximum(max_unacked, _maxima_before(keys, seeds.replay.state_maxima))
    return max_unacked


def _maxima_so_far(keys: pd.DataFrame, seeds) -> np.ndarray:
    """`_max_unacked` without rows of its own: the slices' before, else nothing (int64 minimum)."""
    if seeds is not None:
        return _maxima_before(keys, seeds.replay.state_maxima)
    return np.full(len(keys), np.iinfo(np.int64).min, dtype=np.int64)


def _prefetch(c: pd.DataFrame, cp: np.ndarray, row_max_unacked: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row (its consumer's row in ``c``: `cp`), whether its prefetch is estimated, and the
    prefetch. No qos: with the basic.consume in the capture RabbitMQ's default applies (0 =
    unlimited); without it the limit is unknown and estimated as the highest unacked count
    observed (`row_max_unacked`: its consumer's, per row)."""
    estimated = ~c["qos_seen"].to_numpy(bool)[cp] & ~c["consume_seen"].to_numpy(bool)[cp]
    prefetch = c["prefetch"].to_numpy(np.int64, na_value=0)[cp]
    prefetch[estimated] = row_max_unacked[estimated]
    return estimated, prefetch


def _channel_prefetch(cap: Capture, keys: pd.DataFrame, code: np.ndarray, order: np.ndarray):
    """Per row, the channel-wide limit (global=true, RabbitMQ): the prefetch_count of the last
    such basic.qos on the row's channel before its frame, as an Int64 array (<NA>: none)."""
    m = methods(cap)
    qos = pick(cap, m, select(m, "basic.qos", "c2s"), KEY + ["order", "prefetch_count", "global"])
    qos = qos[qos["global"].fillna(False).to_numpy(bool)]
    chp_arr = pd.array(np.zeros(len(order), np.int64), dtype="Int64")
    chp_arr[:] = pd.NA
    if len(qos):
        k = codes(*(np.r_[keys[c].to_numpy(np.int64)[code], qos[c].to_numpy(np.int64)] for c in KEY))
        g = asof(k[:len(order)], order, k[len(order):], qos["order"].to_numpy(np.int64))
        chp_arr = pd.array(qos["prefetch_count"].astype("Int64").to_numpy(), dtype="Int64").take(g, allow_fill=True)
    return chp_arr


def _next_ts(code: np.ndarray, ts: np.ndarray, by: np.ndarray) -> np.ndarray:
    """Each row's consumer's next row's ts (int64 ns; the int64 minimum, NaT, for its last);
    `by`: the rows by consumer, then frame order."""
    nxt = np.full(len(ts), np.iinfo(np.int64).min, dtype=np.int64)
    same = code[by][1:] == code[by][:-1]
    nxt[by[:-1][same]] = ts[by[1:][same]]
    return nxt


def _output_rows(code: np.ndarray, ts: np.ndarray, by: np.ndarray) -> np.ndarray:
    """The rows in the output's order: by consumer (sorted keys), then ts, stable. Timestamps
    mostly rise with frame order: then that is `by` already and the sort is spared."""
    ts_by, code_by = ts[by], code[by]
    if np.all((ts_by[1:] >= ts_by[:-1]) | (code_by[1:] != code_by[:-1])):
        return by
    return np.lexsort((ts, code))


def _state_table(keys: pd.DataFrame, oc: np.ndarray, ts: np.ndarray, until: np.ndarray, tsd, values: dict
                 ) -> pd.DataFrame:
    """`consumer_state`'s table from its rows' consumer codes (`oc`), times (int64 ns; `tsd`:
    the timestamps' type) and the other columns' `values`, all in the output's order."""
    ts_col = pd.Series(ts.view("M8[ns]")).dt.tz_localize("UTC").astype(tsd)
    until_col = pd.Series(until.view("M8[ns]")).dt.tz_localize("UTC").astype(tsd)
    return pd.DataFrame({
        "stream": keys["stream"].to_numpy(np.int64)[oc], "channel": keys["channel"].to_numpy(np.int64)[oc],
        "epoch": keys["epoch"].to_numpy(np.int64)[oc],
        "consumer_tag": pd.Series(keys["consumer_tag"].to_numpy(object)[oc], dtype=object),
        "packet": values["packet"], "ts": ts_col, "until_ts": until_col,
        "duration_s": (until_col - ts_col).dt.total_seconds(),
        **{col: values[col] for col in STATE_COLUMNS[STATE_COLUMNS.index("unacked"):]},
    }, copy=False)  # (the columns are new: not copied again into blocks, 0.4 GB at 3.2M rows)


def until_of(ts: np.ndarray, nxt: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Until when each state row holds (int64 ns; NaT: the int64 minimum): its consumer's next
    row (`nxt`), at most until the consumer's end, never before the row itself."""
    nat = np.iinfo(np.int64).min
    until = np.where(nxt != nat, nxt, end)
    until = np.where((until != nat) & (end != nat) & (until < end), until, end)
    return np.where((until != nat) & (until > ts), until, ts)


def with_final_prefetch(rows: pd.DataFrame, max_unacked: np.ndarray) -> pd.DataFrame:
    """State rows (`consumer_state`'s columns) whose estimated prefetch (``prefetch_estimated``:
    neither basic.qos nor basic.consume in the capture) is the most deliveries their consumer
    ever held unacknowledged (`max_unacked`, per row), with their deficit and at_limit: a slice
    of a partition's time knows only the most so far."""
    est = rows["prefetch_estimated"].to_numpy(bool)
    if not est.any():
        return rows
    rows = rows.copy()
    prefetch = rows["prefetch"].to_numpy(np.int64, copy=True)
    prefetch[est] = np.asarray(max_unacked, np.int64)[est]
    deficit, deficit_arr = _deficit(prefetch, rows["unacked"].to_numpy(np.int64), rows["channel_prefetch"].array,
                                    rows["channel_unacked"].to_numpy(np.int64))
    rows["prefetch"], rows["deficit"], rows["at_limit"] = prefetch, deficit_arr, deficit <= 0
    return rows


def _own_rows(seeds, order: np.ndarray) -> np.ndarray:
    """Which event rows (frames at `order`) are the slice's own: not a replayed delivery's."""
    if seeds is None or not seeds.replayed:
        return np.ones(len(order), bool)
    return order >= seeds.replayed


def _maxima_before(keys: pd.DataFrame, before: pd.DataFrame) -> np.ndarray:
    """The most unacked deliveries each consumer of `keys` held in the slices before (`before`:
    CONSUMER and max_unacked), the int64 minimum for one not there."""
    out = np.full(len(keys), np.iinfo(np.int64).min, dtype=np.int64)
    if len(before) and len(keys):
        at = code_of(keys, before)
        out[at[at >= 0]] = before["max_unacked"].to_numpy(np.int64)[at >= 0]
    return out


def _deficit(prefetch: np.ndarray, unacked: np.ndarray, channel_prefetch, channel_unacked: np.ndarray):
    """The credit the broker holds for a consumer (`consumer_state`'s deficit) and its Int64
    column (<NA> where no limit applies): the least of its own (prefetch − unacked, prefetch
    > 0) and its channel's (global prefetch − channel unacked)."""
    inf = np.iinfo(np.int64).max
    d1 = np.where(prefetch > 0, prefetch - unacked, inf)
    chp = pd.array(channel_prefetch, dtype="Int64").to_numpy(np.int64, na_value=0)
    d2 = np.where(chp > 0, chp - channel_unacked, inf)
    deficit = np.minimum(d1, d2)
    deficit_arr = pd.array(np.where(deficit == inf, 0, deficit), dtype="Int64")
    deficit_arr[deficit == inf] = pd.NA
    return deficit, deficit_arr


def _i8(s: pd.Series) -> np.ndarray:
    """A timestamp column as int64 nanoseconds (NaT: the int64 minimum)."""
    return s.array.asi8 if hasattr(s.array, "asi8") else pd.to_datetime(s).array.asi8


@dataclass(frozen=True)
class AckedDeliveries:
    """The deliveries of acknowledging consumers (``table``), each one's consumer ``code`` and
    the consumers' ``keys`` (row i: the consumer of code i; CONSUMER columns)."""

    table: pd.DataFrame
    code: np.ndarray
    keys: pd.DataFrame


@derivation(CONNECTION)
def acked_deliveries(cap: Capture) -> AckedDeliveries:
    """The deliveries of acknowledging consumers (not no-ack, not basic.get), with each one's
    consumer code and the consumers' key table (row i: the consumer of code i, codes in the
    sorted order of (stream, channel, epoch, consumer_tag)). The consumers of ``consumer_rows``
    are those of these deliveries plus those seen only by their basic.consume, so their keys
    are included. Computed once per Capture: consumer_state and consumer_summary both group by
    consumer, and factorizing the text tags once is cheaper than a groupby doing it each time."""
    dc = deliveries_with_codes(cap)
    full = dc.table
    keep = ~full["no_ack"].to_numpy(bool) & (full["consumer_tag"] != GET_TAG).to_numpy(bool)
    d = full[keep]
    cons = consumes(cap)
    cons = cons[~cons["no_ack"].to_numpy(bool)]
    cols = {k: np.r_[d[k].to_numpy(np.int64), cons[k].to_numpy(np.int64)] for k in KEY}
    # the tags as codes (deliveries' and consumes' share the labels)
    tag_code = np.r_[dc.tag_code[keep], cons["tag_code"].to_numpy(np.int64)]
    code = codes(*cols.values(), text_ranks(dc.tag_labels, tag_code))
    first = np.unique(code, return_index=True)[1]
    tags = np.asarray(dc.tag_labels, dtype=object)[tag_code[first]]
    keys = pd.DataFrame({k: v[first] for k, v in cols.items()})
    keys["consumer_tag"] = pd.Series(tags, dtype=object)
    return AckedDeliveries(d, code[:len(d)], keys)


def code_of(keys: pd.DataFrame, rows: pd.DataFrame) -> np.ndarray:
    """The consumer code (row in ``keys``) of each row of ``rows`` (CONSUMER columns)."""
    idx = pd.MultiIndex.from_frame(as_object(keys[CONSUMER], "consumer_tag"))
    return idx.get_indexer(pd.MultiIndex.from_frame(as_object(rows[CONSUMER], "consumer_tag"))).astype(np.int64)
