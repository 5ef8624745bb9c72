"""Who settled what, and when: deliveries matched with the acks, nacks and rejects that settled
them, publishes with the confirms that settled them, and the consumers they were delivered to.

Everything here works on whole columns of ``cap.frames`` (sorted-array operations: cumulative
sums, as-of matches per tag space), never per frame in Python. Ordering and tag spaces: see
:mod:`amqpcap.derive.methods`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..io.load import Capture
from .cache import CONNECTION, derivation
from .columns import as_object, asof, codes, group_cumsum, text_ranks
from .methods import KEY, chan_key, methods, pick, select
from .seeds import Closes, seeds_of

#: consumer tag used for basic.get-ok deliveries (they have no consumer)
GET_TAG = "(basic.get)"
SETTLE_METHODS = ("basic.ack", "basic.nack", "basic.reject")
DELIVER_METHODS = ("basic.deliver", "basic.get-ok")


#: the type of the text columns of the tables derived here
TEXT = pd.StringDtype(na_value=np.nan)


def _text(labels, code: np.ndarray):
    """``labels[code]`` (code −1: missing) as a ``str`` column (pandas' text), also when every
    value is missing: the column's type does not depend on which rows a capture, or a partition
    of it, holds. Taken from the few labels, where pandas would convert and check every one of
    the rows."""
    code = np.asarray(code, dtype=np.int64)
    arr = pd.array(np.asarray(labels, dtype=object), dtype=TEXT)
    return arr.take(code, allow_fill=True)


def _tags(s: pd.Series) -> np.ndarray:
    return s.astype("Int64").to_numpy(dtype=np.int64, na_value=-1)


def match_settlements(items: pd.DataFrame, settlers: pd.DataFrame) -> np.ndarray:
    """For each item (a delivery or a confirmed publish), the row position in ``settlers`` of the
    frame that settles it, or -1.

    ``items`` and ``settlers`` carry ``space`` (the tag space's code, see :func:`methods`), ``order`` and ``tag`` (int64); settlers
    also ``multiple`` (bool). A settler settles an item of the same key that came before it when
    its tag equals the item's, or when it has ``multiple`` and its tag is ≥ the item's (tag 0 with
    multiple means every outstanding tag): §1.8.3.13. The first such settler wins (an item
    already settled is not settled again).

    Sorted-array formulation: exact matches are a ``merge_asof`` forward on order by (key, tag).
    For ``multiple`` settlers, a frame can only name tags already delivered, so every multiple
    settler before an item has a smaller tag; the running maximum of the multiple tags per key
    is therefore sorted, and "the first multiple settler after the item with tag ≥ item tag" is
    "the first running maximum ≥ item tag": a ``merge_asof`` forward on the tag. Tag 0 with
    multiple ("everything outstanding") names the highest tag delivered before it, so that it
    too is below every later item's (as an unbounded tag it stood before every later item, and
    no later multiple settler settled anything).
    """
    n, ns = len(items), len(settlers)
    out = np.full(n, -1, dtype=np.int64)
    if n == 0 or ns == 0:
        return out
    i_key, s_key = items["space"].to_numpy(np.int64), settlers["space"].to_numpy(np.int64)
    i_order, s_order = items["order"].to_numpy(np.int64), settlers["order"].to_numpy(np.int64)
    i_tag, s_tag = items["tag"].to_numpy(np.int64), settlers["tag"].to_numpy(np.int64).copy()
    multiple = settlers["multiple"].to_numpy(dtype=bool)
    everything = multiple & (s_tag == 0)
    if everything.any():
        s_tag[everything] = _highest_before(i_key, i_order, i_tag, s_key[everything], s_order[everything])

    best_order = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)

    single = np.flatnonzero(~multiple)
    if len(single):
        # (tag space, tag) as one code; then the first single settler after the item
        kt = codes(np.r_[i_key, s_key[single]], np.r_[i_tag, s_tag[single]])
        hit = asof(kt[:n], i_order, kt[n:], s_order[single], direction="forward", allow_exact_matches=False)
        pos = np.flatnonzero(hit >= 0)
        out[pos] = single[hit[pos]]
        best_order[pos] = s_order[out[pos]]

    mult = np.flatnonzero(multiple)
    if len(mult):
        mult = mult[np.lexsort((s_order[mult], s_key[mult]))]  # by tag space, then order
        cm = pd.Series(s_tag[mult]).groupby(s_key[mult]).cummax().to_numpy(np.int64)
        first = ~pd.DataFrame({"k": s_key[mult], "cm": cm}).duplicated().to_numpy()
        mult, cm = mult[first], cm[first]  # first settler reaching each running max
        # the tags as ranks (64-bit tags would overflow the packed (key, tag) search)
        rank = np.unique(np.r_[i_tag, cm], return_inverse=True)[1].astype(np.int64)
        hit = asof(i_key, rank[:n], s_key[mult], rank[n:], direction="forward")
        pos = np.flatnonzero(hit >= 0)
        row = mult[hit[pos]]
        m_order = s_order[row]
        # after the item (a protocol-valid capture always is), and earlier than an exact match
        better = (m_order > i_order[pos]) & (m_order < best_order[pos])
        out[pos[better]] = row[better]
        best_order[pos[better]] = m_order[better]
    return out


def _highest_before(key: np.ndarray, order: np.ndarray, tag: np.ndarray, at_key: np.ndarray,
                    at_order: np.ndarray) -> np.ndarray:
    """The highest `tag` of the items of each key `at_key` before `at_order` (0: none)."""
    if not len(key):
        return np.zeros(len(at_key), np.int64)
    by = np.lexsort((order, key))
    highest = pd.Series(tag[by]).groupby(key[by]).cummax().to_numpy(np.int64)
    hit = asof(at_key, at_order, key[by], order[by])
    return np.where(hit >= 0, highest[np.maximum(hit, 0)], 0)


@derivation(CONNECTION)
def consumes(cap: Capture) -> pd.DataFrame:
    """basic.consume (client) with the tag the broker confirmed: an empty consumer tag in
    basic.consume means "broker, choose one", given back in the next basic.consume-ok on that
    channel (the broker answers a channel's methods in order). ``tag_code`` is the tag's code in
    the categories of cap.frames' consumer_tag (the codes :func:`deliveries` matches on).
    Computed once per Capture."""
    c = consume_frames(cap)
    return c[c["consumer_tag"].notna()].reset_index(drop=True)


@derivation(CONNECTION)
def consume_frames(cap: Capture) -> pd.DataFrame:
    """Every basic.consume, as :func:`consumes` (which keeps those with a tag): also one whose
    broker-chosen tag is not known yet, its basic.consume-ok not in the capture (or, in a slice
    of a partition's time, in a later slice: `amqpcap.derive.replay`)."""
    m = methods(cap)
    c = pick(cap, m, select(m, "basic.consume", "c2s"), ["stream", "channel", "epoch", "space", "order", "packet",
                                                           "ts", "consumer_tag", "no_ack", "queue", "nowait"])
    ok = pick(cap, m, select(m, "basic.consume-ok", "s2c"), ["stream", "channel", "order", "ts", "packet", "consumer_tag"])
    c["tag_code"] = c["consumer_tag"].cat.codes.astype(np.int64)
    c["queue_code"] = c["queue"].cat.codes.astype(np.int64)
    ok["ok_code"] = ok["consumer_tag"].cat.codes.astype(np.int64)
    c, ok = as_object(c, "consumer_tag", "queue"), as_object(ok, "consumer_tag")
    c = c.sort_values("order")
    ok = ok.sort_values("order").rename(
        columns={"order": "ok_order", "ts": "ok_ts", "packet": "ok_packet", "consumer_tag": "ok_tag"})
    c = pd.merge_asof(c, ok, left_on="order", right_on="ok_order", by=["stream", "channel"], direction="forward")
    nowait = c["nowait"].fillna(False).to_numpy(bool)  # no consume-ok will come for this one
    c.loc[nowait, ["ok_order", "ok_ts", "ok_packet", "ok_tag"]] = None
    named = (c["consumer_tag"].fillna("") != "").to_numpy(bool)
    tag = c["consumer_tag"].where(named, c["ok_tag"])
    c["consumer_tag"] = tag
    ok_code = c["ok_code"].fillna(-1).to_numpy(np.int64, copy=True)
    ok_code[nowait] = -1
    c["tag_code"] = np.where(named, c["tag_code"].to_numpy(np.int64), ok_code)
    c["no_ack"] = c["no_ack"].fillna(False).astype(bool)
    # the consumer exists from consume-ok (nowait: from basic.consume)
    has_ok = c["ok_ts"].notna()
    c["start_ts"] = c["ok_ts"].where(has_ok, c["ts"])
    c["start_order"] = c["ok_order"].where(has_ok, c["order"]).astype(np.int64)
    c["start_packet"] = c["ok_packet"].where(has_ok, c["packet"]).astype(np.int64)
    return c.reset_index(drop=True)


@dataclass(frozen=True)
class Deliveries:
    """:func:`deliveries`' table with the codes it was matched on, for the derivations grouping
    or joining its rows (cheaper than factorizing the text again)."""

    table: pd.DataFrame
    #: per row, its queue as a code in the categories of cap.frames' queue column (-1: none)
    queue_code: np.ndarray
    #: per row, its consumer tag as a code into ``tag_labels``: cap.frames' consumer_tag
    #: categories, then "" and GET_TAG (so :func:`consumes`' ``tag_code`` is a code into them too)
    tag_code: np.ndarray
    tag_labels: np.ndarray
    #: per row, the order of the basic.consume or basic.get it was matched to (-1: none)
    source_order: np.ndarray


def deliveries(cap: Capture) -> pd.DataFrame:
    """One row per basic.deliver / basic.get-ok, with the frame that settled it (see
    :func:`deliveries_with_codes`)."""
    return deliveries_with_codes(cap).table


@derivation(CONNECTION)
def deliveries_with_codes(cap: Capture) -> Deliveries:
    """One row per basic.deliver / basic.get-ok, with the frame that settled it.

    Columns: stream, channel, epoch, consumer_tag, delivery_tag, packet, ts, order, redelivered,
    queue (from basic.consume/basic.get; None when not in the capture), no_ack,
    no_ack_known (the basic.consume/basic.get is in the capture; otherwise no_ack is inferred:
    a channel with no client ack/nack/reject at all is taken as no-ack), settle_packet,
    settle_ts, settle_order, settle_method, settle_multiple, settle_requeue, latency_s and
    outcome (ack, nack, reject, no-ack, closed: unsettled when its channel or connection closed,
    unsettled: still outstanding at the end of the capture).

    Consumer tags and queues are matched on the category codes of cap.frames' columns (one
    category set per column, shared by all frames); their text is made once, for the table."""
    m = methods(cap)
    f = cap.frames
    d = _deliver_frames(cap, m)
    get_rows = select(d, "basic.get-ok")
    tag_labels, tc = _tag_codes(f["consumer_tag"], d["order"].to_numpy(np.int64), get_rows)
    known, no_ack, qc, source_order = _sources(cap, m, d, tc, get_rows)
    s = _settle_frames(cap, m)
    # without the basic.consume, a channel whose client never settles anything is taken as no-ack
    no_ack = np.where(known, no_ack, ~_has_settles(cap, d, s))
    srow = _settling_rows(d, s, no_ack)
    kind = _settle_kinds(s, srow)
    out = _delivery_table(d, _text(tag_labels, tc), _text(f["queue"].cat.categories, qc), no_ack, known, s, srow,
                          kind)
    out["outcome"] = _text(OUTCOMES, _outcome_codes(cap, m, d, kind, no_ack))
    return Deliveries(out, qc, tc, tag_labels, source_order)


def _deliver_frames(cap: Capture, m: pd.DataFrame) -> pd.DataFrame:
    """The basic.deliver and basic.get-ok frames with a delivery tag (``tag``, int64), in frame
    order."""
    d = pick(cap, m, select(m, DELIVER_METHODS, "s2c"), KEY + ["space", "method", "delivery_tag", "packet", "ts",
                                                               "order", "redelivered"])
    d["tag"] = _tags(d["delivery_tag"])
    return d[d["tag"] >= 0].sort_values("order").reset_index(drop=True)


def _tag_codes(consumer_tag: pd.Series, order: np.ndarray, get_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The labels and, per delivery (frames at `order` of cap.frames' `consumer_tag`), its
    consumer tag as a code into them: the frames' categories, then "" (a missing tag counts as
    the empty one) and GET_TAG (for get-ok, `get_rows`), unless they are categories already."""
    cats = consumer_tag.cat.categories
    tag_labels = np.r_[np.asarray(cats, dtype=object), np.array(["", GET_TAG], dtype=object)]
    tc = consumer_tag.cat.codes.to_numpy().astype(np.int64)[order]
    tc[tc < 0] = cats.get_loc("") if "" in cats else len(cats)
    tc[get_rows] = cats.get_loc(GET_TAG) if GET_TAG in cats else len(cats) + 1
    return tag_labels, tc


def _sources(cap: Capture, m: pd.DataFrame, d: pd.DataFrame, tc: np.ndarray, get_rows: np.ndarray):
    """What each delivery of `d` (consumer tag codes `tc`) takes from its consumer's
    basic.consume, or from the basic.get before a get-ok: (whether it is in the capture, no_ack,
    queue code, the source's order); missing: False, False, -1, -1."""
    order = d["order"].to_numpy(np.int64)
    cons = consumes(cap)
    d_chan, c_chan = chan_key(d), chan_key(cons)
    key = codes(np.r_[d_chan, c_chan], np.r_[tc, cons["tag_code"].to_numpy(np.int64)])
    a = asof(key[:len(d)], order, key[len(d):], cons["order"].to_numpy(np.int64))
    gets = pick(cap, m, select(m, "basic.get", "c2s"), ["order", "stream", "channel", "no_ack", "queue"])
    chan = pd.factorize(np.r_[d_chan, chan_key(gets)])[0]
    g = asof(chan[:len(d)], order, chan[len(d):], gets["order"].to_numpy(np.int64))
    row = np.where(get_rows, g, a)
    known = row >= 0
    # the matched basic.get / basic.consume's no_ack and queue code (missing: False / -1)
    no_ack_src = np.r_[gets["no_ack"].fillna(False).to_numpy(bool), cons["no_ack"].to_numpy(bool), False]
    queue_src = np.r_[gets["queue"].cat.codes.to_numpy().astype(np.int64), cons["queue_code"].to_numpy(np.int64), -1]
    src = np.where(known, np.where(get_rows, row, len(gets) + row), len(gets) + len(cons))
    source_order = np.r_[gets["order"].to_numpy(np.int64), cons["order"].to_numpy(np.int64), -1][src]
    return known, no_ack_src[src], queue_src[src], source_order


def _settle_frames(cap: Capture, m: pd.DataFrame) -> pd.DataFrame:
    """The settling frames: the client's ack/nack/reject (§1.8.3.13) with a delivery tag
    (``tag``, int64) and ``multiple`` (bool)."""
    s = pick(cap, m, select(m, SETTLE_METHODS, "c2s"), KEY + ["space", "method", "delivery_tag", "multiple", "requeue",
                                                             "packet", "ts", "order"])
    s["tag"] = _tags(s["delivery_tag"])
    s["multiple"] = s["multiple"].fillna(False).astype(bool)  # basic.reject has no multiple bit
    return s[s["tag"] >= 0].reset_index(drop=True)


def _settling_rows(d: pd.DataFrame, s: pd.DataFrame, no_ack: np.ndarray) -> np.ndarray:
    """The settling row of `s` per delivery of `d` (-1: none; a no-ack delivery is never
    settled). The settle_* columns are taken whole with allow_fill (-1 gives <NA>/NaT) rather
    than filled row by row."""
    acked = np.flatnonzero(~no_ack)
    row = match_settlements(d.iloc[acked], s)
    srow = np.full(len(d), -1, dtype=np.int64)
    srow[acked] = row
    return srow


def _settle_kinds(s: pd.DataFrame, srow: np.ndarray) -> np.ndarray:
    """Per delivery (its settling row of `s`: `srow`), the settle method as 0 ack, 1 nack,
    2 reject (the order of SETTLE_METHODS), -1 none."""
    has = srow >= 0
    want = s["method"].cat.categories.get_indexer(list(SETTLE_METHODS))
    s_kind = np.full(len(s["method"].cat.categories), -1, dtype=np.int64)
    s_kind[want[want >= 0]] = np.flatnonzero(want >= 0)
    return np.where(has, s_kind[s["method"].cat.codes.to_numpy()][np.where(has, srow, 0)] if len(s) else -1, -1)


def _delivery_table(d: pd.DataFrame, consumer_tag, queue, no_ack: np.ndarray, known: np.ndarray, s: pd.DataFrame,
                    srow: np.ndarray, kind: np.ndarray) -> pd.DataFrame:
    """`deliveries`' table but its outcome: the deliveries `d` with their text columns, what was
    matched to them, and their settling frames of `s` (`srow`, settle kinds `kind`)."""
    out = pd.DataFrame({
        "stream": d["stream"].to_numpy(np.int64), "channel": d["channel"].to_numpy(np.int64),
        "epoch": d["epoch"].to_numpy(np.int64), "consumer_tag": consumer_tag,
        "delivery_tag": d["delivery_tag"].array, "packet": d["packet"].array, "ts": d["ts"].array,
        "order": d["order"].to_numpy(np.int64), "redelivered": d["redelivered"].array, "queue": queue,
        "no_ack": no_ack, "no_ack_known": known,
        "settle_packet": pd.array(s["packet"].to_numpy(np.int64), dtype="Int64").take(srow, allow_fill=True),
        "settle_ts": s["ts"].array.take(srow, allow_fill=True),
        "settle_order": pd.array(s["order"].to_numpy(np.int64), dtype="Int64").take(srow, allow_fill=True),
        # (missing is NaN, as the column always had)
        "settle_method": pd.Series(np.array(list(SETTLE_METHODS) + [np.nan], dtype=object)[kind], dtype=object),
        "settle_multiple": pd.array(s["multiple"].to_numpy(bool), dtype="boolean").take(srow, allow_fill=True),
        # basic.ack never requeues; nack/reject carry the requeue bit
        "settle_requeue": pd.array(s["requeue"].fillna(False).to_numpy(bool), dtype="boolean").take(
            srow, allow_fill=True),
    })
    out["latency_s"] = (out["settle_ts"] - out["ts"]).dt.total_seconds()
    return out


#: the outcomes of a delivery, as `_outcome_codes` numbers them (the first three: SETTLE_METHODS')
OUTCOMES = ["ack", "nack", "reject", "no-ack", "closed", "unsettled"]


def _outcome_codes(cap: Capture, m: pd.DataFrame, d: pd.DataFrame, kind: np.ndarray, no_ack: np.ndarray) -> np.ndarray:
    """Each delivery's outcome as a code into OUTCOMES: the settle method (`kind`), else no-ack,
    closed or unsettled."""
    oc = np.where(kind >= 0, kind, 5)
    oc[no_ack] = 3
    oc[_closed_after(cap, m, d) & (oc == 5)] = 4
    return oc


def _has_settles(cap: Capture, d: pd.DataFrame, s: pd.DataFrame) -> np.ndarray:
    """Whether the tag space of each delivery of ``d`` has a settling frame of ``s``: anywhere
    in the partition, for a slice of its time (the first pass's `Ends`)."""
    seeds = seeds_of(cap)
    if seeds is not None and seeds.ends is not None:
        return seeds.ends.settles(chan_key(d), d["epoch"].to_numpy(np.int64))
    return np.isin(d["space"].to_numpy(), s["space"].to_numpy())


def tag_ranks(cap: Capture | None, d: pd.DataFrame) -> np.ndarray:
    """The consumer tag of each row of ``d`` as :func:`text_ranks`: from the codes
    :func:`deliveries_with_codes` matched on when ``d`` is that table of ``cap``, else by
    factorizing the text."""
    kept = deliveries_with_codes(cap) if cap is not None else None
    if kept is None or kept.table is not d:
        return pd.factorize(d["consumer_tag"].to_numpy(object), sort=True)[0].astype(np.int64)
    return text_ranks(kept.tag_labels, kept.tag_code)


#: the frames that close a channel (channel number > 0) or a connection (channel 0)
CLOSE_METHODS = ("channel.close", "channel.close-ok", "connection.close", "connection.close-ok")


def last_closes(m: pd.DataFrame) -> Closes:
    """The last close frame of each channel and connection among the method frames ``m``."""
    sel = select(m, CLOSE_METHODS)
    order = m["order"].to_numpy(np.int64)[sel]
    stream, channel = m["stream"].to_numpy(np.int64)[sel], m["channel"].to_numpy(np.int64)[sel]
    return Closes.of(stream, channel, order)


def _closed_after(cap: Capture, m: pd.DataFrame, items: pd.DataFrame) -> np.ndarray:
    """Whether the item's channel (or connection) closed after it: the broker requeues a closed
    channel's unacked deliveries and forgets its unconfirmed publishes. In a slice of a
    partition's time, after it anywhere in the partition (the first pass's `Ends`)."""
    if len(items) == 0:
        return np.zeros(0, dtype=bool)
    order = items["order"].to_numpy(np.int64)
    seeds = seeds_of(cap)
    if seeds is not None and seeds.ends is not None:
        closes, order = seeds.ends.closes, seeds.whole_orders(order)
    else:
        closes = last_closes(m)
    return closes.after(items["stream"].to_numpy(np.int64), chan_key(items), order)


def _sequence_numbers(cap: Capture, p: pd.DataFrame) -> np.ndarray:
    """The confirm sequence number of each publish of ``p`` (in frame order, after its channel's
    confirm.select): 1, 2, … per tag space; in a slice of a partition's time, a replayed
    publish's own and the others' counting on from the slices before (`Seeds`)."""
    seeds = seeds_of(cap)
    order = p["order"].to_numpy(np.int64)
    own = order >= (seeds.replayed if seeds is not None else 0)
    seq = np.empty(len(p), np.int64)
    key, epoch = chan_key(p)[own], p["epoch"].to_numpy(np.int64)[own]
    seq[own] = group_cumsum(codes(key, epoch), np.ones(len(key), np.int64))
    if seeds is not None:
        seq[~own] = seeds.replay.seqs[order[~own]]
        seq[own] += seeds.numbered_before(key, epoch)
    return seq


@derivation(CONNECTION)
def confirms(cap: Capture) -> pd.DataFrame:
    """One row per basic.publish on a channel in confirm mode, with the broker's basic.ack or
    basic.nack that confirmed it.

    RabbitMQ publisher confirms: after confirm.select on a channel, publishes are numbered 1, 2, …
    on that channel; the broker's basic.ack/basic.nack carry that number as delivery tag, with
    ``multiple`` covering every lower unconfirmed number (a nack means the broker could not take
    the message). Columns: stream, channel, epoch, seq, packet, ts, order, confirm_packet,
    confirm_ts, confirm_method, confirm_multiple, latency_s, outcome (ack, nack, closed, unconfirmed)."""
    m = methods(cap)
    sel = pick(cap, m, select(m, "confirm.select", "c2s"), KEY + ["order"])
    cols = ["stream", "channel", "epoch", "seq", "packet", "ts", "order", "confirm_packet", "confirm_ts",
            "confirm_method", "confirm_multiple", "latency_s", "outcome"]
    if len(sel) == 0:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
    first_sel = sel.groupby(KEY)["order"].min().rename("sel_order")
    p = pick(cap, m, select(m, "basic.publish", "c2s"), KEY + ["space", "order", "packet", "ts"]).join(
        first_sel, on=KEY, how="inner")
    p = p[p["order"] > p["sel_order"]].sort_values("order").copy()
    p["seq"] = _sequence_numbers(cap, p)
    p["tag"] = p["seq"]
    s = pick(cap, m, select(m, ["basic.ack", "basic.nack"], "s2c"), KEY + ["space", "order", "packet", "ts", "method",
                                                                        "delivery_tag", "multiple"])
    s["tag"] = _tags(s["delivery_tag"])
    s["multiple"] = s["multiple"].fillna(False).astype(bool)
    s = s[s["tag"] >= 0].reset_index(drop=True)
    row = match_settlements(p, s)
    hit = row >= 0
    sr = s.iloc[row[hit]]
    p["confirm_packet"] = pd.array(np.full(len(p), pd.NA), dtype="Int64")
    p.loc[p.index[hit], "confirm_packet"] = sr["packet"].to_numpy(np.int64)
    p["confirm_ts"] = pd.Series(pd.NaT, index=p.index, dtype=p["ts"].dtype)
    p.loc[p.index[hit], "confirm_ts"] = sr["ts"].array
    p["confirm_method"] = pd.Series(None, index=p.index, dtype=object)
    p.loc[p.index[hit], "confirm_method"] = sr["method"].to_numpy(object)
    p["confirm_multiple"] = pd.array(np.full(len(p), pd.NA), dtype="boolean")
    p.loc[p.index[hit], "confirm_multiple"] = sr["multiple"].to_numpy(bool)
    p["latency_s"] = (p["confirm_ts"] - p["ts"]).dt.total_seconds()
    outcome = np.full(len(p), "unconfirmed", dtype=object)
    outcome[hit] = np.where(sr["method"].to_numpy(object) == "basic.nack", "nack", "ack")
    outcome[(~hit) & _closed_after(cap, m, p)] = "closed"
    p["outcome"] = outcome
    return p[cols].reset_index(drop=True)
