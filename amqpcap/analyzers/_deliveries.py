"""Shared helpers for the latency and consumers analyzers: who settled what, and when.

Everything here works on whole columns of ``cap.frames`` (sorted-array operations: cumulative
sums, ``merge_asof`` per channel group), never per frame in Python.

Ordering. Frames are compared by their position in ``cap.frames`` (``order``: the order in which
the capture completed them), not by timestamp: files with out-of-order timestamps (pcapng with
per-interface batches) still give a consistent "before/after". Latencies are differences of the
frames' ``ts``.

Tag spaces. Delivery tags are per channel and count from 1 (AMQP 0-9-1 §1.8.3.13 ``basic.ack``;
§4.2.4 channels); publish sequence numbers count from 1 after ``confirm.select`` on a channel
(RabbitMQ publisher confirms). Both restart when the channel is opened again, so every frame gets
an ``epoch``: the number of ``channel.open`` frames seen on that (stream, channel) so far. The key
of a tag space is (stream, channel, epoch).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..analysis import stream_filter
from ..capture import Capture, computed_once
from ..names import connection_names

KEY = ["stream", "channel", "epoch"]
#: consumer tag used for basic.get-ok deliveries (they have no consumer)
GET_TAG = "(basic.get)"
#: delivery tag standing for "everything outstanding" (tag 0 with multiple=1, §1.8.3.13)
ALL_TAGS = np.iinfo(np.int64).max

SETTLE_METHODS = ("basic.ack", "basic.nack", "basic.reject")
DELIVER_METHODS = ("basic.deliver", "basic.get-ok")

_TEXT = ("consumer_tag", "queue", "exchange", "routing_key")


@computed_once
def methods(cap: Capture) -> pd.DataFrame:
    """Method frames: stream, channel, epoch (see module doc), space (dense code of the tag space
    (stream, channel, epoch), in sorted order), order (position in cap.frames), method, direction.

    Only these few columns: the others are needed on small subsets (a few thousand basic.qos or
    basic.consume rows) or as codes, so :func:`pick` takes them from cap.frames for the selected
    rows only, where copying 18 columns of every method frame cost more than all the matching.
    ``method`` and ``direction`` stay categorical (as in cap.frames): compared on their codes."""
    cached = cap.derived.get("methods")
    if cached is not None:
        return cached
    f = cap.frames
    order = np.flatnonzero((f["type"] == "method").to_numpy(dtype=bool, na_value=False))
    stream = f["stream"].to_numpy(np.int64)[order]
    channel = f["channel"].to_numpy(np.int64)[order]
    m = pd.DataFrame({"stream": stream, "channel": channel, "order": order.astype(np.int64),
                      "method": f["method"].array.take(order), "direction": f["direction"].array.take(order)})
    m["epoch"] = _epochs(stream * 65536 + channel, select(m, "channel.open"))
    m["space"] = codes(stream, channel, m["epoch"].to_numpy())
    cap.derived["methods"] = m
    return m


def _epochs(chan: np.ndarray, opened: np.ndarray) -> np.ndarray:
    """Per row, the number of ``opened`` rows on its channel ``chan`` up to and including it.

    channel.open frames are few: counting them by a search of (chan, row) among them is much
    cheaper than a grouped running sum, which sorts every row."""
    n = len(chan)
    op = np.flatnonzero(opened)
    if len(op) == 0:
        return np.zeros(n, dtype=np.int64)
    if chan.max(initial=0) >= (2 ** 62) // max(n, 1):  # (chan, row) would not pack into an int64
        return group_cumsum(pd.factorize(chan)[0], opened.astype(np.int64))
    opens = np.sort(chan[op] * n + op)
    base = chan * n
    return (np.searchsorted(opens, base + np.arange(n), side="right")
            - np.searchsorted(opens, base, side="left")).astype(np.int64)


def pick(cap: Capture, m: pd.DataFrame, mask: np.ndarray, cols) -> pd.DataFrame:
    """The rows ``mask`` of ``m`` (index: their positions in ``m``) with columns ``cols``: those of
    ``m`` from ``m``, the others taken from cap.frames at these frames. Text columns stay
    categorical, as in cap.frames (``.astype(object)`` where the text is needed)."""
    idx = np.flatnonzero(mask)
    order = m["order"].to_numpy()[idx]
    f = cap.frames
    return pd.DataFrame({c: (m[c].array.take(idx) if c in m.columns else f[c].array.take(order)) for c in cols},
                        index=idx)


def _text(labels, code: np.ndarray):
    """``labels[code]`` (code −1: missing) as the column pandas infers from that object array:
    ``str`` when any value is present, else object (all missing). Taken from the few labels,
    where pandas would convert and check every one of the rows."""
    code = np.asarray(code, dtype=np.int64)
    if (code >= 0).any():
        arr = pd.array(np.asarray(labels, dtype=object), dtype=pd.StringDtype(na_value=np.nan))
        return arr.take(code, allow_fill=True)
    return np.full(len(code), np.nan, dtype=object)


def connection_labels(cap: Capture | None, streams) -> np.ndarray:
    """The connection label (`amqpcap.names.connection_names`: its connection_name, else client
    library, user@vhost and address) of each stream in ``streams``, as an object array: the first
    column of the per-consumer tables. `stream N` for a stream that is no connection (or without
    ``cap``)."""
    streams = np.asarray(streams, dtype=np.int64)
    fallback = np.array([f"stream {s}" for s in streams.tolist()], dtype=object)
    if cap is None or len(streams) == 0:
        return fallback
    label = connection_names(cap)["connection"].reindex(streams).to_numpy(object)
    missing = pd.isna(label)
    label[missing] = fallback[missing]
    return label


def channels_filter(streams, channels) -> str:
    """Wireshark display filter for the (stream, channel) pairs of a finding's subjects: the
    streams (`analysis.stream_filter`), and the channel when they all share one. Channels of
    different streams cannot be paired in one short filter; the methods a finding adds narrow it."""
    chans = {int(c) for c in channels}
    flt = stream_filter(streams)
    return flt + (f" && amqp.channel == {chans.pop()}" if len(chans) == 1 else "")


def chan_key(df: pd.DataFrame) -> np.ndarray:
    """(stream, channel) as one int64 (channel numbers are 16-bit, AMQP 0-9-1 §4.2.3)."""
    return df["stream"].to_numpy(np.int64) * 65536 + df["channel"].to_numpy(np.int64)


def codes(*cols) -> np.ndarray:
    """One dense int64 code per distinct tuple of ``cols`` (arrays of equal length), numbered in
    the sorted order of the tuples (as a groupby's keys); a missing value in any column gives -1.

    A groupby or merge on several columns (worse, on text) factorizes them again every time;
    a code computed once is one int64 column, cheap to sort, search and reduce on."""
    cols = [np.asarray(c) for c in cols]
    if cols and all(c.dtype.kind in "iu" and (len(c) == 0 or c.min() >= 0) for c in cols):
        # non-negative ints: packed into one int64 (lexicographic, so sorted as the tuples) and
        # factorized once, when the ranges allow it
        packed, size = np.zeros(len(cols[0]), dtype=np.int64), 1
        for c in cols:
            r = int(c.max(initial=0)) + 1
            if size > (2 ** 62) // r:
                break
            packed, size = packed * r + c, size * r
        else:
            return pd.factorize(packed, sort=True)[0].astype(np.int64)
    out = None
    for col in cols:
        c, uniq = pd.factorize(col, sort=True)
        c = c.astype(np.int64)
        if out is None:
            out = c
        else:
            missing = (out < 0) | (c < 0)
            out, _ = pd.factorize(out * len(uniq) + c, sort=True)
            out = out.astype(np.int64)
            out[missing] = -1
    if out is not None and (out < 0).any():  # keep codes dense over the present tuples
        ok = out >= 0
        out[ok] = pd.factorize(out[ok], sort=True)[0]
    return out


def stable_argsort(code: np.ndarray) -> np.ndarray:
    """``np.argsort(code, kind="stable")`` for non-negative int codes. numpy sorts integers of
    at most 16 bits stably by radix sort (linear), several times faster than its merge sort of
    int64: codes of fewer than 65536 groups (tag spaces, consumers) are sorted as uint16."""
    if len(code) and 0 <= code.min() and code.max() < 2 ** 16:
        return np.argsort(code.astype(np.uint16), kind="stable")
    return np.argsort(code, kind="stable")


def group_cumsum(code: np.ndarray, values: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
    """Running sum of ``values`` within each group of ``code``, in row order
    (``Series.groupby(code).cumsum()`` without the groupby). ``idx``: the caller's
    ``np.argsort(code, kind="stable")``, when it has one."""
    if len(code) == 0:
        return np.zeros(0, dtype=np.int64)
    if idx is None:
        idx = stable_argsort(code)
    v = values[idx]
    run = np.cumsum(v)
    start = np.r_[True, code[idx][1:] != code[idx][:-1]]
    # subtract the running sum before each group's first row
    base = (run - v)[start]
    run -= np.repeat(base, np.diff(np.r_[np.flatnonzero(start), len(v)]))
    out = np.empty_like(run)
    out[idx] = run
    return out


def asof(left_key: np.ndarray, left_on: np.ndarray, right_key: np.ndarray, right_on: np.ndarray,
         direction: str = "backward", allow_exact_matches: bool = True) -> np.ndarray:
    """``pd.merge_asof`` on one int64 ``by`` key, as row positions: for each left row, the
    position in the right arrays of the last right row of the same key with ``right_on`` ≤
    ``left_on`` (backward) or the first with ``right_on`` ≥ ``left_on`` (forward; strict
    inequalities without exact matches); -1 when there is none, or when the key is < 0.

    Keys are small dense codes (see :func:`codes`) and ``on`` values non-negative ints (frame
    orders, or ranks), so (key, on) packs into one sortable int64 and the match is a
    ``searchsorted``; this avoids the merge's copies of both frames and its hashing of the keys."""
    n, nr = len(left_key), len(right_key)
    out = np.full(n, -1, dtype=np.int64)
    if n == 0 or nr == 0:
        return out
    span = int(max(left_on.max(), right_on.max())) + 1
    rk = right_key.astype(np.int64)
    r = rk * span + right_on.astype(np.int64)
    ridx = np.argsort(r, kind="stable")  # among equal (key, on): right order, as merge_asof
    r = r[ridx]
    lk = left_key.astype(np.int64)
    q = lk * span + left_on.astype(np.int64)
    if direction == "backward":
        j = np.searchsorted(r, q, side="right" if allow_exact_matches else "left") - 1
    else:
        j = np.searchsorted(r, q, side="left" if allow_exact_matches else "right")
    ok = (j >= 0) & (j < nr) & (lk >= 0)
    j = np.where(ok, j, 0)
    ok &= rk[ridx[j]] == lk
    out[ok] = ridx[j[ok]]
    return out


def select(m: pd.DataFrame, names, direction: str | None = None) -> np.ndarray:
    """Boolean mask of the rows of ``m`` with a method in ``names`` (one name or several), sent
    in ``direction`` (c2s/s2c) when given. On the categorical codes, not on strings."""
    names = [names] if isinstance(names, str) else list(names)
    meth = m["method"]
    if isinstance(meth.dtype, pd.CategoricalDtype):
        cats = meth.cat.categories
        want = cats.get_indexer(names)
        mask = np.isin(meth.cat.codes.to_numpy(), want[want >= 0])
    else:
        mask = meth.isin(names).to_numpy(dtype=bool, na_value=False)
    if direction is not None:
        mask &= (m["direction"] == direction).to_numpy(dtype=bool, na_value=False)
    return mask


def _obj(df: pd.DataFrame, *cols: str) -> pd.DataFrame:
    """Text merge keys as object dtype on both sides (pandas 3 infers `str` from arrays)."""
    return df.assign(**{c: df[c].astype(object) for c in cols})


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
    "the first running maximum ≥ item tag": a ``merge_asof`` forward on the tag.
    """
    n, ns = len(items), len(settlers)
    out = np.full(n, -1, dtype=np.int64)
    if n == 0 or ns == 0:
        return out
    i_key, s_key = items["space"].to_numpy(np.int64), settlers["space"].to_numpy(np.int64)
    i_order, s_order = items["order"].to_numpy(np.int64), settlers["order"].to_numpy(np.int64)
    i_tag, s_tag = items["tag"].to_numpy(np.int64), settlers["tag"].to_numpy(np.int64).copy()
    multiple = settlers["multiple"].to_numpy(dtype=bool)
    s_tag[multiple & (s_tag == 0)] = ALL_TAGS

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
        # the tags as ranks (ALL_TAGS would overflow the packed (key, tag) search)
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


@computed_once
def consumes(cap: Capture) -> pd.DataFrame:
    """basic.consume (client) with the tag the broker confirmed: an empty consumer tag in
    basic.consume means "broker, choose one", given back in the next basic.consume-ok on that
    channel (the broker answers a channel's methods in order). ``tag_code`` is the tag's code in
    the categories of cap.frames' consumer_tag (the codes :func:`deliveries` matches on).
    Computed once per Capture."""
    cached = cap.derived.get("consumes")
    if cached is not None:
        return cached
    m = methods(cap)
    c = pick(cap, m, select(m, "basic.consume", "c2s"), ["stream", "channel", "epoch", "space", "order", "packet",
                                                           "ts", "consumer_tag", "no_ack", "queue", "nowait"])
    ok = pick(cap, m, select(m, "basic.consume-ok", "s2c"), ["stream", "channel", "order", "ts", "packet", "consumer_tag"])
    c["tag_code"] = c["consumer_tag"].cat.codes.astype(np.int64)
    c["queue_code"] = c["queue"].cat.codes.astype(np.int64)
    ok["ok_code"] = ok["consumer_tag"].cat.codes.astype(np.int64)
    c, ok = _obj(c, "consumer_tag", "queue"), _obj(ok, "consumer_tag")
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
    out = c[c["consumer_tag"].notna()].reset_index(drop=True)
    cap.derived["consumes"] = out
    return out


@computed_once
def deliveries(cap: Capture) -> pd.DataFrame:
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
    cached = cap.derived.get("deliveries")
    if cached is not None:
        return cached
    m = methods(cap)
    f = cap.frames
    d = pick(cap, m, select(m, DELIVER_METHODS, "s2c"), KEY + ["space", "method", "delivery_tag", "packet", "ts",
                                                               "order", "redelivered"])
    d["tag"] = _tags(d["delivery_tag"])
    d = d[d["tag"] >= 0].sort_values("order").reset_index(drop=True)
    order = d["order"].to_numpy(np.int64)
    get_rows = select(d, "basic.get-ok")

    # consumer tags as codes into ``tag_labels``: the frames' categories, then "" (a missing tag
    # counts as the empty one) and GET_TAG (for get-ok), unless they are categories already
    cats = f["consumer_tag"].cat.categories
    tag_labels = np.r_[np.asarray(cats, dtype=object), np.array(["", GET_TAG], dtype=object)]
    tc = f["consumer_tag"].cat.codes.to_numpy().astype(np.int64)[order]
    tc[tc < 0] = cats.get_loc("") if "" in cats else len(cats)
    tc[get_rows] = cats.get_loc(GET_TAG) if GET_TAG in cats else len(cats) + 1

    # no-ack and queue: from the consumer's basic.consume, or the basic.get before a get-ok
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
    no_ack = no_ack_src[src]
    qc = queue_src[src]

    # settling frames: the client's ack/nack/reject on the same channel (§1.8.3.13)
    s = pick(cap, m, select(m, SETTLE_METHODS, "c2s"), KEY + ["space", "method", "delivery_tag", "multiple", "requeue",
                                                             "packet", "ts", "order"])
    s["tag"] = _tags(s["delivery_tag"])
    s["multiple"] = s["multiple"].fillna(False).astype(bool)  # basic.reject has no multiple bit
    s = s[s["tag"] >= 0].reset_index(drop=True)
    # without the basic.consume, a channel whose client never settles anything is taken as no-ack
    has_settles = np.isin(d["space"].to_numpy(), s["space"].to_numpy())
    no_ack = np.where(known, no_ack, ~has_settles)

    acked = np.flatnonzero(~no_ack)
    row = match_settlements(d.iloc[acked], s)
    # the settling row of ``s`` per delivery (-1: none). The settle_* columns are taken whole
    # with allow_fill (-1 gives <NA>/NaT) rather than filled row by row.
    srow = np.full(len(d), -1, dtype=np.int64)
    srow[acked] = row
    has = srow >= 0
    # settle method as 0 ack, 1 nack, 2 reject (the order of SETTLE_METHODS), -1 none
    want = s["method"].cat.categories.get_indexer(list(SETTLE_METHODS))
    s_kind = np.full(len(s["method"].cat.categories), -1, dtype=np.int64)
    s_kind[want[want >= 0]] = np.flatnonzero(want >= 0)
    kind = np.where(has, s_kind[s["method"].cat.codes.to_numpy()][np.where(has, srow, 0)] if len(s) else -1, -1)

    out = pd.DataFrame({
        "stream": d["stream"].to_numpy(np.int64), "channel": d["channel"].to_numpy(np.int64),
        "epoch": d["epoch"].to_numpy(np.int64), "consumer_tag": _text(tag_labels, tc),
        "delivery_tag": d["delivery_tag"].array, "packet": d["packet"].array, "ts": d["ts"].array, "order": order,
        "redelivered": d["redelivered"].array, "queue": _text(f["queue"].cat.categories, qc),
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
    # outcome codes into ``labels``: the settle method, else no-ack, closed or unsettled
    labels = ["ack", "nack", "reject", "no-ack", "closed", "unsettled"]
    oc = np.where(kind >= 0, kind, 5)
    oc[no_ack] = 3
    oc[_closed_after(m, d) & (oc == 5)] = 4
    out["outcome"] = _text(labels, oc)
    cap.derived["deliveries"] = out
    cap.derived["delivery_queue_code"] = qc  # for queue_backlog / ack_gaps (see queue_codes)
    cap.derived["delivery_tag_code"] = (tc, tag_labels)  # for tag_ranks
    return out


def tag_codes(cap: Capture | None, d: pd.DataFrame):
    """(codes, labels) of the consumer tags of ``d`` (:func:`deliveries`' table) as kept by
    :func:`deliveries` (``labels``: cap.frames' consumer_tag categories, then "" and GET_TAG; so
    :func:`consumes`' ``tag_code`` is a code into them too), or None when not kept."""
    kept = cap.derived.get("delivery_tag_code") if cap is not None else None
    if kept is None or cap.derived.get("deliveries") is not d:
        return None
    return kept


def text_ranks(labels, code: np.ndarray) -> np.ndarray:
    """``labels[code]`` as int64 numbered in the sorted order of the text (equal text, equal
    number), as a groupby on the text would order them; only the few labels in use are sorted."""
    code = np.asarray(code, dtype=np.int64)
    used = np.unique(code)
    rank = np.zeros(len(labels), dtype=np.int64)
    rank[used] = pd.factorize(np.asarray(labels, dtype=object)[used], sort=True)[0]
    return rank[code]


def tag_ranks(cap: Capture | None, d: pd.DataFrame) -> np.ndarray:
    """The consumer tag of each row of ``d`` (:func:`deliveries`' table) as :func:`text_ranks`:
    from the codes :func:`deliveries` kept, else by factorizing the text."""
    kept = tag_codes(cap, d)
    if kept is None:
        return pd.factorize(d["consumer_tag"].to_numpy(object), sort=True)[0].astype(np.int64)
    return text_ranks(kept[1], kept[0])


def queue_codes(cap: Capture, d: pd.DataFrame) -> np.ndarray:
    """The queue of each row of ``d`` (:func:`deliveries`' table) as its code in the categories of
    cap.frames' queue column (-1: none): kept by :func:`deliveries`, else looked up from the text."""
    qc = cap.derived.get("delivery_queue_code")
    if qc is None or cap.derived.get("deliveries") is not d:
        qc = cap.frames["queue"].cat.categories.get_indexer(d["queue"].astype(object))
    return np.asarray(qc, dtype=np.int64)


def _codes_in(cats: pd.Index, col: pd.Series, missing_as_empty: bool) -> np.ndarray:
    """A categorical column's values as codes into ``cats`` (the categories of the same column of
    cap.frames). The empty text has a code even when no frame has it (len(cats)); with
    ``missing_as_empty`` a missing value counts as the empty text, otherwise it stays -1."""
    empty = cats.get_loc("") if "" in cats else len(cats)
    c = col.cat.codes.to_numpy().astype(np.int64) if len(col) else np.zeros(0, np.int64)
    if missing_as_empty:
        c[c < 0] = empty
    return c


def _closed_after(m: pd.DataFrame, items: pd.DataFrame) -> np.ndarray:
    """Whether the item's channel (or connection) closed after it: the broker requeues a closed
    channel's unacked deliveries and forgets its unconfirmed publishes."""
    sel = select(m, ["channel.close", "channel.close-ok", "connection.close", "connection.close-ok"])
    if not sel.any() or len(items) == 0:
        return np.zeros(len(items), dtype=bool)
    order = items["order"].to_numpy(np.int64)
    c_order = m["order"].to_numpy(np.int64)[sel]
    c_stream, c_chan = m["stream"].to_numpy(np.int64)[sel], m["channel"].to_numpy(np.int64)[sel]
    i_stream = items["stream"].to_numpy(np.int64)
    # "a close after the item" is "the item before the last close of its channel or connection":
    # one last order per key, looked up (no as-of search). A connection's close (channel 0) by
    # stream (small ints: an array indexed by stream); a channel's by (stream, channel), among
    # the few closed channels
    conn = c_chan == 0
    last_conn = np.full(max(int(i_stream.max()), int(c_stream.max())) + 1, -1, dtype=np.int64)
    np.maximum.at(last_conn, c_stream[conn], c_order[conn])
    res = order < last_conn[i_stream]
    c_key = c_stream[~conn] * 65536 + c_chan[~conn]
    if len(c_key):
        uniq, inv = np.unique(c_key, return_inverse=True)
        last = np.full(len(uniq), -1, dtype=np.int64)
        np.maximum.at(last, inv.ravel(), c_order[~conn])
        i_key = i_stream * 65536 + items["channel"].to_numpy(np.int64)
        pos = np.minimum(np.searchsorted(uniq, i_key), len(uniq) - 1)
        res |= (uniq[pos] == i_key) & (order < last[pos])
    return res


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
    p["seq"] = p.groupby(KEY).cumcount().astype(np.int64) + 1
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
    outcome[(~hit) & _closed_after(m, p)] = "closed"
    p["outcome"] = outcome
    return p[cols].reset_index(drop=True)


@computed_once
def queue_backlog(cap: Capture) -> pd.DataFrame:
    """Lower bound of each consumed queue's backlog over time, from what the capture shows.

    A publish counts for queue Q when it goes to the default exchange with routing key Q, or to
    an (exchange, routing key) that a queue.bind in the capture bound Q with (exact key: direct
    exchanges; wildcards and fanout are not interpreted). Deliveries from Q subtract, nack/reject
    with requeue add back. Messages already in Q when the capture started are unknown, so the
    running sum is a lower bound of the backlog (never below 0). Columns: queue, order, ts,
    backlog_min (messages, after that frame).

    Queues, exchanges and routing keys are matched as codes into the categories of cap.frames'
    columns (a missing publish exchange or routing key counts as "", a missing one in a bind
    matches nothing); the queues' text is made once, for the table."""
    cached = cap.derived.get("backlog")
    if cached is not None:
        return cached
    m = methods(cap)
    d = deliveries(cap)
    f = cap.frames
    qc = queue_codes(cap, d)
    empty = pd.DataFrame({"queue": pd.Series(dtype=object), "order": pd.Series(dtype=np.int64),
                          "ts": pd.Series(dtype=f["ts"].dtype), "backlog_min": pd.Series(dtype=np.int64)})
    has = qc >= 0
    if not has.any():
        return empty
    qcats, ecats, rcats = (f[c].cat.categories for c in ("queue", "exchange", "routing_key"))
    uq = np.unique(qc[has])  # the consumed queues
    # routes (exchange, routing key, queue) to the consumed queues: the binds, and the default
    # exchange's (routing key = queue name; a name that is no frame's routing key gets no publish)
    binds = pick(cap, m, select(m, "queue.bind"), ["queue", "exchange", "routing_key"])
    b_q = _codes_in(qcats, binds["queue"], False)
    b_e, b_r = _codes_in(ecats, binds["exchange"], False), _codes_in(rcats, binds["routing_key"], False)
    ok = np.isin(b_q, uq) & (b_e >= 0) & (b_r >= 0)
    d_r = rcats.get_indexer(qcats[uq])
    d_r[(d_r < 0) & (qcats[uq] == "")] = len(rcats)  # (the empty routing key's own code, see _codes_in)
    r_e = np.r_[b_e[ok], np.full(len(uq), ecats.get_loc("") if "" in ecats else len(ecats))]
    r_r, r_q = np.r_[b_r[ok], d_r], np.r_[b_q[ok], uq]
    keep = r_r >= 0
    nr = len(rcats) + 1
    route = np.unique(np.c_[r_e[keep] * nr + r_r[keep], r_q[keep]], axis=0)  # sorted by (exchange, key), deduplicated
    # each publish joined with every route of its (exchange, routing key)
    pub = pick(cap, m, select(m, "basic.publish", "c2s"), ["order", "exchange", "routing_key"])
    p_key = _codes_in(ecats, pub["exchange"], True) * nr + _codes_in(rcats, pub["routing_key"], True)
    lo = np.searchsorted(route[:, 0], p_key, side="left")
    n_hit = np.searchsorted(route[:, 0], p_key, side="right") - lo
    hit_start = np.repeat(lo, n_hit)
    within = np.arange(len(hit_start)) - np.repeat(np.cumsum(n_hit) - n_hit, n_hit)
    p_q, p_order = route[hit_start + within, 1], np.repeat(pub["order"].to_numpy(np.int64), n_hit)
    # events (queue code, frame order, delta): publishes +1, deliveries −1, requeues +1
    rq = has & d["settle_requeue"].fillna(False).to_numpy(bool)
    ev_q = np.r_[p_q, qc[has], qc[rq]]
    ev_order = np.r_[p_order, d["order"].to_numpy(np.int64)[has], d["settle_order"].to_numpy(np.int64, na_value=0)[rq]]
    ev_delta = np.r_[np.ones(len(p_q), np.int64), -np.ones(int(has.sum()), np.int64), np.ones(int(rq.sum()), np.int64)]
    # queues numbered in the sorted order of their names (the table's order), summed per
    # (queue, frame); the frame's ts is cap.frames' (every event of a frame has that ts)
    by_name = uq[np.argsort(np.asarray(qcats[uq], dtype=object))]  # queue codes, by name
    rank = np.full(len(qcats) + 1, -1, dtype=np.int64)
    rank[by_name] = np.arange(len(uq))
    span = int(ev_order.max()) + 1
    key, inv = np.unique(rank[ev_q] * span + ev_order, return_inverse=True)
    delta = np.bincount(inv.ravel(), weights=ev_delta, minlength=len(key)).astype(np.int64)
    q, order = key // span, key % span
    run = group_cumsum(q, delta)
    # deliveries of messages older than the capture drive the sum negative; the true backlog is
    # at least (published − delivered) since the lowest point of the running sum. A running
    # minimum per queue in one pass: the queues are contiguous (sorted), and lowering each
    # queue's values by (queue × more than the range of run) makes every queue start below all
    # earlier ones, so the running minimum restarts at each queue
    lift = q * (int(run.max()) - int(run.min()) + 1)
    floor = np.minimum(np.minimum.accumulate(run - lift) + lift, 0)
    out = pd.DataFrame({"queue": pd.Series(np.asarray(qcats, dtype=object)[by_name[q]], dtype=object),
                        "order": order, "ts": f["ts"].array.take(order),
                        "backlog_min": (run - floor).astype(np.int64)})
    cap.derived["backlog"] = out
    cap.derived["backlog_queue_code"] = by_name[q]  # for ack_gaps (see backlog_queue_codes)
    return out


def backlog_queue_codes(cap: Capture, b: pd.DataFrame) -> np.ndarray:
    """The queue of each row of ``b`` (:func:`queue_backlog`'s table) as its code in the categories
    of cap.frames' queue column: kept by :func:`queue_backlog`, else looked up from the text."""
    qc = cap.derived.get("backlog_queue_code")
    if qc is None or cap.derived.get("backlog") is not b:
        qc = cap.frames["queue"].cat.categories.get_indexer(b["queue"].astype(object))
    return np.asarray(qc, dtype=np.int64)
