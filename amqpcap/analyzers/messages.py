"""messages: how large the messages are, how many frames each takes, and the large ones: near or
over the broker's `max_message_size`, or spanning hundreds of frames that hold up the other
channels of their connection (issue 14, `large-messages`).

A message is a content header frame and the body frames after it on its channel (AMQP 0-9-1
§4.2.6: a content's frames are contiguous on its channel; other channels' frames may come in
between). The header announces the body size; each body frame holds at most frame_max − 8 bytes
(§4.2.3: frame_max counts the 7-byte header and the frame-end octet).

Everything is per connection, so the analyzer splits: a partition's step lists its own large
messages and counts the rest, the merge joins them and derives the finding.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from ..analysis.registry import SEVERITIES, AnalyzerResult, Finding, analyzer
from ..io.load import Capture
from ..derive.deliveries import TEXT
from ..derive.columns import counts_added, stable_argsort, value_at
from ..derive.methods import methods, select
from ..derive.labels import connection_labels
from ..model.display_filters import filter_evidence, streams_part
from ..derive.names import amqp091_rows, worst_first
from ..analysis.contract import Analyzer
from ..io.rows import merge_rows
from ..model.facts import CaptureFacts

#: a message is large when its body is this big or more (a RabbitMQ guide's rule of thumb: messages
#: of several MB are better kept in a blob store, with a reference in the message) ...
LARGE_BODY_BYTES = 1 << 20
#: ... or spans this many body frames or more (each a frame the connection's other channels wait
#: behind: a writer sends a content's frames together)
MANY_FRAMES = 100
#: large-messages is a warning when a body reaches this share of the broker's max_message_size
#: (the next larger message may be refused) ...
NEAR_MAX_SHARE = 0.5
#: ... and critical when the broker refused one: RabbitMQ closes the channel with
#: PRECONDITION_FAILED (406) "message size N is larger than configured max size M"
REFUSED_TEXT = re.compile(r"message size (\d+) is larger than configured max size (\d+)")
#: RabbitMQ's default max_message_size by server version (its Limits guide): 16 MiB from 4.0,
#: 128 MiB from 3.8 (before 3.8 no limit below the 2 GiB protocol ceiling)
MAX_MESSAGE_SIZE_DEFAULTS = ((4, 16 << 20), (3, 128 << 20))
#: assumed when the capture names no server version: today's default
MAX_MESSAGE_SIZE_UNKNOWN = 16 << 20
#: large messages listed per connection in the table (the largest); the counts cover all
LARGE_ROWS_PER_CONNECTION = 200
FILTER = "(amqp.method.class == 60 && amqp.method.method in {40, 60, 71}) || amqp.method.class == 20"
LARGE_COLUMNS = ["stream", "connection", "direction", "channel", "packet", "ts", "body_size", "body_frames",
                 "transfer_s", "other_channel_frames_during", "other_channels_active", "refused",
                 "max_message_size", "max_message_size_source"]
CONN_COLUMNS = ["stream", "messages_c2s", "messages_s2c", "body_bytes_p50", "body_bytes_max",
                "body_frames_max", "large_messages_c2s", "large_messages_s2c", "refused_messages"]
#: a direction in words: c2s content is published (basic.publish), s2c content is the broker's
#: (basic.deliver, and basic.get-ok and basic.return alike: the message comes to the client)
DIRECTION_WORDS = {"c2s": "published", "s2c": "delivered"}


@dataclass
class _Counts:
    """A count per int64 key (keys sorted; 0 for a key not there)."""

    keys: np.ndarray
    counts: np.ndarray

    @classmethod
    def none(cls) -> "_Counts":
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int64))

    def of(self, keys: np.ndarray) -> np.ndarray:
        return value_at(self.keys, self.counts, keys, 0)

    def plus(self, keys: np.ndarray, counts: np.ndarray) -> "_Counts":
        """These counts with `counts` added to `keys`' (distinct keys, few: `_tally`'s)."""
        (uniq,), total = counts_added((self.keys,), self.counts, (keys,), counts)
        return _Counts(uniq, total)


def _tally(key: np.ndarray, wanted: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The distinct keys of `key` (of those `wanted` alone, unless None) and how many times each
    comes: by hashing, as a slice's millions of frames hold few keys (sorting them cost more than
    the rest of the analyzer)."""
    if wanted is not None:
        key = key[np.isin(key, wanted)]
    code, uniq = pd.factorize(key)
    return uniq.astype(np.int64), np.bincount(code, minlength=len(uniq)).astype(np.int64)


class _OtherFrames:
    """A slice's frames on channels other than 0 (the connection's own): their rows and keys
    (`_keys`), made when first asked for: a whole partition without large messages asks for none
    (its every message is done and only counted)."""

    def __init__(self, frames: pd.DataFrame):
        self.frames = frames

    @cached_property
    def keyed(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The frames' rows, and their (connection, direction) and (connection, channel,
        direction) keys."""
        f = self.frames
        channel = f["channel"].to_numpy()
        rows = np.flatnonzero(channel != 0)
        s2c = (f["direction"] == "s2c").to_numpy(dtype=bool, na_value=False)[rows].astype(np.int64)
        return (rows, *_keys(f["stream"].to_numpy()[rows].astype(np.int64), channel[rows].astype(np.int64), s2c))


class _FramesOf:
    """The frames of `_OtherFrames` by one of their keys, of the keys `asked` alone (those of the
    messages that need the counts, `_during`: few), counted in the partition up to any frame of
    the slice: the count of the slices before (`before`) and the slice's own, by binary search
    over their (key, frame) pairs sorted once (never a pass over the frames per message)."""

    def __init__(self, rows: np.ndarray, key: np.ndarray, asked: np.ndarray, before: _Counts, frames: int):
        self.keys = np.unique(asked)
        mine = np.isin(key, self.keys)
        code = np.searchsorted(self.keys, key[mine])
        by_key = stable_argsort(code)  # (frame order kept within a key: the pairs come sorted)
        self.span = frames + 1
        self.pairs = code[by_key] * self.span + rows[mine][by_key]
        self.before = before

    def upto(self, key: np.ndarray, row: np.ndarray, through: bool) -> np.ndarray:
        """Per (key asked, slice row): the key's frames in the partition before the row's frame
        (and that frame too when `through`)."""
        q = np.searchsorted(self.keys, key) * self.span
        n = np.searchsorted(self.pairs, q + row, "right" if through else "left") - np.searchsorted(self.pairs, q, "left")
        return self.before.of(key) + n


#: a message as `_contents` gives it and `_Seen.open` carries it (without `superseded`): its
#: direction is its key's (`_keys`)
MESSAGE_COLUMNS = {"stream": np.int64, "channel": np.int64, "packet": np.int64, "ts": np.int64, "order": np.int64,
                   "key": np.int64, "body_size": float, "body_frames": np.int64, "last_order": np.int64,
                   "last_ts": np.int64, "refused": bool, "conn_before": np.int64, "own_before": np.int64,
                   "conn_through": np.int64, "own_through": np.int64}
#: the columns of MESSAGE_COLUMNS that `_during` fills
DURING_COLUMNS = ["conn_before", "own_before", "conn_through", "own_through"]


@dataclass
class _Seen:
    """What a partition's frames so far tell of its messages (per-connection arrays by the sorted
    connections' `stream`): carried from one slice of its time to the next (the analyzer's
    state), or made from the partition at once. A message is done once a later header comes on its channel and
    direction (no frame of it can follow), or at the partition's end; until then it is open."""

    #: the frames so far: the order (row in the partition's frames) of the next slice's first
    frames: int
    #: the open message of each (connection, channel, direction) (MESSAGE_COLUMNS: arrays): its
    #: body frames may go on in the next slice, and a refusal there may name it
    open: dict[str, np.ndarray]
    #: frames on channels other than 0 so far, per (connection, direction) and per (connection,
    #: direction, channel) (`_keys`): a large message's other channels' frames by difference (after
    #: the last slice, those of the kept rows' keys alone: no other is read)
    conn_frames: _Counts
    own_frames: _Counts
    #: per direction: the messages done
    messages: dict[str, np.ndarray]
    #: the body sizes of the messages done, a count per (connection position, size) sorted so
    #: (for the median: every message's size is needed, and sizes repeat; `_with_sizes`)
    sizes: tuple[np.ndarray, np.ndarray, np.ndarray]
    body_frames_max: np.ndarray
    #: per direction: the large messages done (a message published and then delivered is two
    #: messages on the wire, one each way: counted apart, never added up)
    large: dict[str, np.ndarray]
    refused: np.ndarray
    #: the largest max size a refusal of the broker named (NaN: none so far)
    told: np.ndarray
    #: the largest large messages done, LARGE_ROWS_PER_CONNECTION per connection at most
    #: (`_large_rows`; None: none yet)
    top: pd.DataFrame | None

    @classmethod
    def nothing(cls, n: int) -> "_Seen":
        def zeros():
            return np.zeros(n, np.int64)

        no_message = {c: np.zeros(0, t) for c, t in MESSAGE_COLUMNS.items()}
        return cls(0, no_message, _Counts.none(), _Counts.none(), {"c2s": zeros(), "s2c": zeros()},
                   (np.zeros(0, np.int64), np.zeros(0, float), np.zeros(0, np.int64)), zeros(),
                   {"c2s": zeros(), "s2c": zeros()}, zeros(),
                   np.full(n, np.nan), None)


def _keys(stream: np.ndarray, channel: np.ndarray, s2c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The (connection, direction) and (connection, channel, direction) keys of frames or messages
    (`s2c` 1 or 0)."""
    return stream * 2 + s2c, (stream * 65536 + channel) * 2 + s2c


def _take(msgs: dict[str, np.ndarray], rows: np.ndarray) -> dict[str, np.ndarray]:
    """The messages `rows` (a mask or positions) of `msgs` (`_contents`)."""
    return {c: v[rows] for c, v in msgs.items()}


def _seen(cap: Capture, seen: _Seen | None, last: bool) -> _Seen:
    """`seen` (None: nothing yet) with the frames of `cap` (the partition, or its next slice of
    time) added; the open messages done too when it is the `last`."""
    stream = cap.connections["stream"].to_numpy(np.int64)
    seen = seen or _Seen.nothing(len(stream))
    msgs, superseded = _contents(cap, seen)
    refusals = _refusals(cap, seen.frames)
    _refuse(msgs, refusals)
    np.fmax.at(seen.told, np.searchsorted(stream, refusals["stream"].to_numpy(np.int64)),
               refusals["max_size"].to_numpy(float))
    done = superseded | last
    big = _is_large(msgs)
    other = _OtherFrames(cap.frames)
    # the large messages done are listed, the open ones may turn large: the others are only counted
    _during(msgs, np.flatnonzero(big | ~done), other, seen, len(cap.frames))
    _count(seen, stream, msgs, done, big)
    seen.open = _take(msgs, ~done)
    _frames_so_far(seen, other, last)
    seen.frames += len(cap.frames)
    return seen


def _is_large(msgs: dict[str, np.ndarray]) -> np.ndarray:
    """Per message of `msgs` (`_contents`, refusals marked): large so far (its body size, its body
    frames, or refused)."""
    return (msgs["body_size"] >= LARGE_BODY_BYTES) | (msgs["body_frames"] >= MANY_FRAMES) | msgs["refused"]


def _during(msgs: dict[str, np.ndarray], need: np.ndarray, other: _OtherFrames, seen: _Seen, frames: int) -> None:
    """Fills in DURING_COLUMNS of the messages `need` (rows of `msgs`) where the slice holds their
    header (before) or their last frame (through): by `_FramesOf` over the frames of their keys
    alone. The other messages' are left as `_contents` made them: never read."""
    if not len(need):
        return
    rows, conn_frame, own_frame = other.keyed
    own_key = msgs["key"][need]
    conn_key = msgs["stream"][need] * 2 + own_key % 2
    header = msgs["order"][need] - seen.frames
    last = msgs["last_order"][need] - seen.frames
    new, now = header >= 0, last >= 0
    for name, frame_key, key, before in (("conn", conn_frame, conn_key, seen.conn_frames),
                                         ("own", own_frame, own_key, seen.own_frames)):
        of = _FramesOf(rows, frame_key, key, before, frames)
        msgs[f"{name}_before"][need[new]] = of.upto(key[new], header[new], through=False)
        msgs[f"{name}_through"][need[now]] = of.upto(key[now], last[now], through=True)


def _frames_so_far(seen: _Seen, other: _OtherFrames, last: bool) -> None:
    """Adds the slice's frames on channels other than 0 to `seen`'s counts per key: every key's
    (the next slices' messages may need any), but on the last slice the kept rows' keys alone
    (`other_channels_active` reads no other; without large messages, none)."""
    if last and not len(seen.top):
        return
    _, conn_frame, own_frame = other.keyed
    conn_wanted = seen.top["conn_key"].to_numpy(np.int64) if last else None
    own_wanted = seen.top["own_key"].to_numpy(np.int64) if last else None
    seen.conn_frames = seen.conn_frames.plus(*_tally(conn_frame, conn_wanted))
    seen.own_frames = seen.own_frames.plus(*_tally(own_frame, own_wanted))


def _contents(cap: Capture, seen: _Seen) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The messages of the slice `cap`: the open ones of `seen`, then one per content header of the
    slice, in frame order (MESSAGE_COLUMNS): stream, channel, packet, ts (ns), order (in the
    partition's frames), key (`_keys`: connection, channel and direction), body_size,
    body_frames (body frames after it on its channel and direction, before the next header
    there) and last_order, last_ts (its last body frame, else the header), refused (so far), and
    DURING_COLUMNS: the frames of channels other than 0 on its connection and direction before the
    header and through its last frame, of every channel (conn_*) and of its own (own_*), as
    carried for the open ones and 0 for the slice's until `_during` counts them. Then per
    message, superseded: a later header on its channel and direction (the message is done)."""
    f = cap.frames
    start = seen.frames
    header = (f["type"] == "header").to_numpy(dtype=bool, na_value=False)  # (on the categorical's codes)
    rows = np.flatnonzero(header | (f["type"] == "body").to_numpy(dtype=bool, na_value=False))
    s2c = (f["direction"] == "s2c").to_numpy(dtype=bool, na_value=False)[rows].astype(np.int64)
    _, own_key = _keys(f["stream"].to_numpy()[rows].astype(np.int64), f["channel"].to_numpy()[rows].astype(np.int64),
                       s2c)
    o = seen.open
    # the open messages as headers before the slice's frames (their body frames may follow)
    key = np.r_[o["key"], own_key]
    at = np.r_[o["order"], rows + start]
    headers = np.r_[np.ones(len(o["key"]), bool), header[rows]]
    # by channel and direction (their codes, sorted linearly; the groups in any order), frame
    # order kept
    by_key = stable_argsort(pd.factorize(key)[0])
    key, at, is_header = key[by_key], at[by_key], headers[by_key]
    message = np.cumsum(is_header) - 1  # the header each frame belongs to (frames before any: -1)
    # a body frame belongs to the header before it on the same channel and direction
    header_key = np.flatnonzero(is_header)
    mine = (message >= 0) & (key == key[header_key[np.maximum(message, 0)]]) if len(header_key) else False
    body = ~is_header & mine
    n = len(header_key)
    frames = np.bincount(message[body], minlength=n).astype(np.int64)
    last = at[header_key]
    np.maximum.at(last, message[body], at[body])
    superseded = np.r_[key[header_key][1:] == key[header_key][:-1], False][:n]
    # back in frame order: the open messages (earlier in the partition), then the slice's (each
    # header's message by where its frame went, no sort)
    message_of = np.empty(len(by_key), np.int64)
    message_of[by_key[header_key]] = np.arange(n)
    m = message_of[np.flatnonzero(headers)]
    h = rows[header[rows]]
    new = np.zeros(len(h), np.int64)
    last_order = np.maximum(last[m], np.r_[o["last_order"], new])
    in_slice = np.minimum(np.maximum(last_order - start, 0), len(f) - 1)  # (a frame of the slice where it counts)
    ts = f["ts"].array.asi8
    msgs = {
        "stream": np.r_[o["stream"], f["stream"].to_numpy()[h].astype(np.int64)],
        "channel": np.r_[o["channel"], f["channel"].to_numpy()[h].astype(np.int64)],
        "packet": np.r_[o["packet"], f["packet"].to_numpy()[h].astype(np.int64)],
        "ts": np.r_[o["ts"], ts[h]], "order": at[header_key][m], "key": key[header_key][m],
        "body_size": np.r_[o["body_size"], f["body_size"].array[h].to_numpy(dtype=float, na_value=np.nan)],
        "body_frames": np.r_[o["body_frames"], new] + frames[m], "last_order": last_order,
        "last_ts": np.where(last_order >= start, ts[in_slice] if len(f) else 0, np.r_[o["last_ts"], new]),
        "refused": np.r_[o["refused"], np.zeros(len(h), bool)]}
    msgs.update({c: np.r_[o[c], new] for c in DURING_COLUMNS})
    return msgs, superseded[m]


def _limits(cap: Capture) -> pd.DataFrame:
    """Per connection (index: stream): max_message_size and its source (`refused` when the broker
    said it refusing a message, else `default for RabbitMQ X`, else `assumed`), and the refused
    messages: (stream, channel) of each 406 close naming the limit."""
    c = cap.connections
    versions = c["server_version"].astype(object).where(c["server_version"].notna(), None).to_numpy(object)
    size, source = [], []
    for v in versions:
        major = int(m.group(1)) if v and (m := re.match(r"(\d+)\.(\d+)", str(v))) else None
        minor = int(m.group(2)) if major is not None else None
        limit = next((b for maj, b in MAX_MESSAGE_SIZE_DEFAULTS if major is not None and major >= maj), None)
        if major == 3 and minor is not None and minor < 8:
            limit = None  # no limit below the protocol's
        size.append(limit if major is not None else MAX_MESSAGE_SIZE_UNKNOWN)
        source.append(f"default of RabbitMQ {v}" if major is not None else "assumed (RabbitMQ 4's default)")
    return pd.DataFrame({"max_message_size": pd.array(size, dtype="Int64"), "max_message_size_source": source},
                        index=c["stream"].to_numpy(np.int64))


def _refusals(cap: Capture, start: int) -> pd.DataFrame:
    """Each channel.close from the broker refusing a message for its size: stream, channel,
    order (of the close, in the partition whose frames before the slice `cap` are `start`), max
    size the broker named."""
    m = methods(cap)
    rows = np.flatnonzero(select(m, "channel.close", "s2c"))
    order = m["order"].to_numpy()[rows]
    text = pd.Series(cap.frames["reply_text"].array.take(order)).astype(object).to_numpy(object)
    hit = [REFUSED_TEXT.search(str(t)) if t is not None and t == t else None for t in text]
    keep = np.array([h is not None for h in hit], dtype=bool)
    return pd.DataFrame({"stream": m["stream"].to_numpy(np.int64)[rows][keep],
                         "channel": m["channel"].to_numpy(np.int64)[rows][keep], "order": order[keep] + start,
                         "max_size": np.array([int(h.group(2)) for h in hit if h is not None], dtype=np.int64)})


def _refuse(msgs: dict[str, np.ndarray], refusals: pd.DataFrame) -> None:
    """Marks the refused messages in `msgs` (`_contents`): the last c2s header on the closed
    channel before the close. That is the channel's open message when the close comes in a later
    slice (`_Seen.open`), and a message done before it has a later header on its channel."""
    if not len(refusals):
        return
    c2s = msgs["key"] % 2 == 0
    for r in refusals.itertuples():  # few: a refusal closes the channel
        mine = np.flatnonzero((msgs["stream"] == r.stream) & (msgs["channel"] == r.channel) & c2s
                              & (msgs["order"] < r.order))
        if len(mine):
            msgs["refused"][mine[-1]] = True


def _count(seen: _Seen, stream: np.ndarray, msgs: dict[str, np.ndarray], done: np.ndarray, big: np.ndarray) -> None:
    """Adds the messages `done` of `msgs` (`big`: the large ones) to `seen`'s counts, sizes and
    largest."""
    pos = np.searchsorted(stream, msgs["stream"][done])
    c2s = msgs["key"][done] % 2 == 0
    seen.messages["c2s"] += np.bincount(pos[c2s], minlength=len(stream)).astype(np.int64)
    seen.messages["s2c"] += np.bincount(pos[~c2s], minlength=len(stream)).astype(np.int64)
    seen.sizes = _with_sizes(seen.sizes, pos, msgs["body_size"][done])
    np.maximum.at(seen.body_frames_max, pos, msgs["body_frames"][done])
    large = big[done]
    seen.large["c2s"] += np.bincount(pos[c2s & large], minlength=len(stream)).astype(np.int64)
    seen.large["s2c"] += np.bincount(pos[~c2s & large], minlength=len(stream)).astype(np.int64)
    seen.refused += np.bincount(pos[msgs["refused"][done]], minlength=len(stream)).astype(np.int64)
    seen.top = _largest(seen.top, _large_rows(_take(msgs, done & big)))


def _with_sizes(sizes: tuple[np.ndarray, np.ndarray, np.ndarray], pos: np.ndarray,
                size: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The histogram `sizes` (connection position, body size, count: sorted by both) with the
    sizes `size` of messages of the connections at `pos` added (NaN: no size told, not counted,
    as a median or max skips it). The slice's are counted by hashing first: millions of messages
    have few distinct sizes, and only those are sorted."""
    told = ~np.isnan(size)
    value, distinct = pd.factorize(size[told])
    n = max(len(distinct), 1)
    pair, pairs = pd.factorize(pos[told] * n + value)  # (connection position, distinct size) codes
    p, v = np.r_[sizes[0], pairs // n], np.r_[sizes[1], distinct[pairs % n]]
    c = np.r_[sizes[2], np.bincount(pair, minlength=len(pairs)).astype(np.int64)]
    order = np.lexsort((v, p))
    p, v, c = p[order], v[order], c[order]
    first = np.flatnonzero(np.r_[True, (p[1:] != p[:-1]) | (v[1:] != v[:-1])][:len(p)])
    return p[first], v[first], (np.add.reduceat(c, first) if len(first) else c)


def _median_and_max(sizes: tuple[np.ndarray, np.ndarray, np.ndarray], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per connection position (of `n`): the median and the max of the body sizes counted in
    `sizes` (`_with_sizes`), NaN without any: the median of an even count is the mean of the two
    middle sizes, (a + b) / 2, as pandas' and numpy's medians take it."""
    p, v, c = sizes
    median, top = np.full(n, np.nan), np.full(n, np.nan)
    if not len(p):
        return median, top
    upto = np.cumsum(c)  # (sizes counted through each entry, over every connection)
    first = np.flatnonzero(np.r_[True, p[1:] != p[:-1]])
    end = np.r_[first[1:], len(p)] - 1
    before = upto[first] - c[first]
    total = upto[end] - before

    def kth(k: np.ndarray) -> np.ndarray:  # the k-th smallest size (from 0) of each connection
        return v[np.searchsorted(upto, before + k, "right")]

    median[p[first]] = (kth((total - 1) // 2) + kth(total // 2)) / 2  # (an odd count: the middle one, twice)
    top[p[first]] = v[end]
    return median, top


def _large_rows(big: dict[str, np.ndarray]) -> pd.DataFrame:
    """Large messages done (`_contents`' rows) as the table lists them, with the keys of their
    connection's frames (`_keys`) and their order: transfer_s (header to last body frame) and
    other_channel_frames_during (frames of the connection's other channels but 0, same
    direction, from the header through the last body frame)."""
    own_key = big["key"]
    return pd.DataFrame({
        "stream": big["stream"], "direction": np.where(own_key % 2 == 1, "s2c", "c2s").astype(object),
        "channel": big["channel"], "packet": big["packet"], "ts": big["ts"],
        "body_size": big["body_size"].astype(np.int64), "body_frames": big["body_frames"],
        "transfer_s": (big["last_ts"] - big["ts"]) / 1e9,
        "other_channel_frames_during": (big["conn_through"] - big["conn_before"])
        - (big["own_through"] - big["own_before"]),
        "refused": big["refused"], "order": big["order"], "conn_key": big["stream"] * 2 + own_key % 2,
        "own_key": own_key})


def _largest(top: pd.DataFrame | None, rows: pd.DataFrame) -> pd.DataFrame:
    """The LARGE_ROWS_PER_CONNECTION largest of `top` and `rows` per connection (by body size,
    then the earliest; orders are the partition's, so those of every slice compare)."""
    rows = rows if top is None else pd.concat([top, rows], ignore_index=True)
    rows = rows.sort_values(["stream", "body_size", "order"], ascending=[True, False, True], kind="stable")
    return rows[rows.groupby("stream").cumcount() < LARGE_ROWS_PER_CONNECTION].reset_index(drop=True)


def _rows(cap: Capture, seen: _Seen) -> dict[str, pd.DataFrame]:
    """A partition's connections: their message counts and sizes, and their large messages, from
    what all its frames told (`seen`)."""
    stream = cap.connections["stream"].to_numpy(np.int64)
    large = seen.top.sort_values("order", kind="stable")
    # the limit every large message of a connection met: the largest a refusal named anywhere
    # in it, else the broker's default
    limits = _limits(cap)
    told = seen.told[np.searchsorted(stream, large["stream"].to_numpy(np.int64))]
    limit = limits["max_message_size"].reindex(large["stream"]).to_numpy(float, na_value=np.nan)
    source = limits["max_message_size_source"].reindex(large["stream"]).to_numpy(object)
    large["ts"] = pd.to_datetime(large["ts"], utc=True)
    large["max_message_size"] = pd.array(np.where(np.isnan(told), limit, told), dtype="Int64")
    large["max_message_size_source"] = np.where(np.isnan(told), source, "refused by the broker")
    # other channels of the connection sent frames in the message's direction (anywhere in it)
    large["other_channels_active"] = (seen.conn_frames.of(large["conn_key"].to_numpy(np.int64))
                                      - seen.own_frames.of(large["own_key"].to_numpy(np.int64))) > 0
    for text in ("direction", "max_message_size_source"):  # (one type, whether any row or not)
        large[text] = pd.array(large[text].to_numpy(object), dtype=TEXT)
    conns = pd.DataFrame({"stream": stream, "messages_c2s": seen.messages["c2s"],
                          "messages_s2c": seen.messages["s2c"]})
    conns["body_bytes_p50"], conns["body_bytes_max"] = _median_and_max(seen.sizes, len(stream))
    conns["body_frames_max"] = seen.body_frames_max
    conns["large_messages_c2s"] = seen.large["c2s"]
    conns["large_messages_s2c"] = seen.large["s2c"]
    conns["refused_messages"] = seen.refused
    # (named in the merge: labels depend on every connection)
    return {"large": large[[c for c in LARGE_COLUMNS if c != "connection"]].reset_index(drop=True),
            "connections": conns[CONN_COLUMNS]}


@analyzer("messages")
class Messages(Analyzer[_Seen, list]):
    """Message sizes and frames per message; large messages near or over the broker's limit."""

    def step(self, seen: _Seen | None, rows: Capture, facts: CaptureFacts, last: bool) -> _Seen:
        return _seen(rows, seen, last)

    def close(self, seen: _Seen, rows: Capture, facts: CaptureFacts) -> list[dict[str, pd.DataFrame]]:
        """A partition's connections: their message counts and sizes, and their large messages,
        in a list of the partitions'."""
        return [_rows(rows, seen)]

    def merge(self, a: list[dict], b: list[dict]) -> list[dict]:
        return a + b

    def finish(self, partials: list[dict[str, pd.DataFrame]], cap: Capture, facts: CaptureFacts) -> AnalyzerResult:
        return messages_merge(partials, cap)


def messages_merge(partials: list[dict[str, pd.DataFrame]], cap: Capture) -> AnalyzerResult:
    large = merge_rows([p["large"] for p in partials], ["ts", "stream", "channel"])
    large.insert(1, "connection", pd.Series(connection_labels(cap, large["stream"]), dtype=object))
    large["direction"] = pd.Series(large["direction"].to_numpy(object), dtype=object)
    large["max_message_size_source"] = pd.Series(large["max_message_size_source"].to_numpy(object), dtype=object)
    conns = amqp091_rows(cap, merge_rows([p["connections"] for p in partials], ["stream"]))
    # every count by its direction: a message published and delivered in the capture is a
    # content each way, and one total of both would count it twice
    summary = {"messages": {
        "messages_c2s": int(conns["messages_c2s"].sum()), "messages_s2c": int(conns["messages_s2c"].sum()),
        "body_bytes_max": None if not len(conns) or conns["body_bytes_max"].isna().all()
        else int(conns["body_bytes_max"].max()),
        "large_messages_c2s": int(conns["large_messages_c2s"].sum()),
        "large_messages_s2c": int(conns["large_messages_s2c"].sum()),
        "refused_messages": int(conns["refused_messages"].sum()),
    }}
    finding = _finding(cap, large, conns)
    return AnalyzerResult("messages", tables={"large": large, "connections": conns}, summary=summary,
                          findings=[finding] if finding else [], plots=[])


# -- the finding ------------------------------------------------------------------------------

def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 1e5 else f"{n / 1e3:,.1f} kB"


def _mib(n: float) -> str:
    """A limit as RabbitMQ configures it (max_message_size = 16 MiB)."""
    return f"{n / (1 << 20):,.4g} MiB"


def _finding(cap: Capture, large: pd.DataFrame, conns: pd.DataFrame) -> Finding | None:
    """large-messages: one finding, the connections sending or receiving large messages as subjects."""
    if not len(large):
        return None
    large, per = _ranked(large, conns)
    severity = SEVERITIES[int(per["rank"].max())]
    worst_messages = large.sort_values(["rank", "body_size"], ascending=False, kind="stable")
    w, examples = worst_messages.iloc[0], worst_messages.head(5)
    refused_n = int(large["refused"].sum())
    # (the subjects are the connections, worst first; the title's worst is a message, `w`)
    subjects = worst_first(cap, per, lambda r: dict(
        large_messages_c2s=int(r.large_c2s), large_messages_s2c=int(r.large_s2c), body_bytes_max=int(r.largest),
        body_frames_max=int(r.frames), near_max_c2s=int(r.near_c2s), near_max_s2c=int(r.near_s2c),
        refused=int(r.refused), transfer_s_max=float(r.transfer),
        severity=SEVERITIES[int(r.rank)])).subjects
    held = w.other_channels_active and w.other_channel_frames_during == 0
    evidence = {
        "body_bytes": int(w.body_size), "body_frames": int(w.body_frames), "direction": w.direction,
        "channel": int(w.channel), "refused": bool(w.refused),
        "max_message_size": None if pd.isna(w.max_message_size) else int(w.max_message_size),
        "max_message_size_source": w.max_message_size_source,
        "share_of_max": None if pd.isna(w.share_of_max) else float(w.share_of_max),
        "transfer_s": float(w.transfer_s), "other_channels_held_s": float(w.transfer_s) if held else 0.0,
        "large_messages_c2s": int(per["large_c2s"].sum()), "large_messages_s2c": int(per["large_s2c"].sum()),
        "near_max_messages_c2s": int(per["near_c2s"].sum()), "near_max_messages_s2c": int(per["near_s2c"].sum()),
        "near_max_at_least": bool(per["cut"].any()), "refused_messages": refused_n,
        "connections_with_this_finding": int(len(per)), "streams": sorted(int(s) for s in per["stream"]),
        "packets": sorted(int(p) for p in examples["packet"]),
        **filter_evidence(streams_part(per['stream']), f" && ({FILTER})"),
    }
    advice = ("Keep large payloads out of the broker: put them in a blob store (S3, a file share, a database) "
              "and publish a reference, or split them into chunks an application reassembles. A message is "
              "held whole in the broker's memory and written to disk, and every other channel on its "
              "connection waits behind its frames. RabbitMQ refuses bodies above max_message_size "
              "(16 MiB by default since 4.0, 128 MiB before), closing the publisher's channel.")
    if held:
        advice += (f" On this connection the other channels sent nothing while its frames crossed "
                   f"({float(w.transfer_s) * 1e3:,.1f} ms for the largest): publish large messages on a connection "
                   "of their own.")
    impact = 1.0 if w.refused else float(min(1.0, w.share_of_max)) if not pd.isna(w.share_of_max) else 0.1
    return Finding("large-messages", severity, _title(w, large, per), evidence, advice, impact=impact,
                   subjects=subjects)


def _ranked(large: pd.DataFrame, conns: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The large messages with how bad each is (``near`` the broker's max_message_size,
    ``share_of_max``, ``rank``: 2 refused, 1 near, 0 large), and a row per connection (its worst
    rank, largest body, most frames, longest transfer; its large messages each way from `conns`,
    which counts them all, and those near the limit each way from the table's rows, ``cut``
    when the table kept fewer rows than it has large messages: then its near counts are lower
    bounds), worst first."""
    limit = large["max_message_size"].to_numpy(float, na_value=np.nan)
    near = (large["body_size"].to_numpy(float) >= NEAR_MAX_SHARE * np.where(np.isnan(limit), np.inf, limit)) \
        & ~large["refused"].to_numpy(bool)
    large = large.assign(near=near, share_of_max=large["body_size"] / np.where(np.isnan(limit), np.nan, limit))
    rank = np.where(large["refused"], 2, np.where(near, 1, 0))
    large = large.assign(rank=rank)
    c2s = (large["direction"] == "c2s").to_numpy(bool)
    large = large.assign(near_c2s=near & c2s, near_s2c=near & ~c2s)
    per = large.groupby("stream").agg(rank=("rank", "max"), largest=("body_size", "max"),
                                      frames=("body_frames", "max"), rows=("body_size", "size"),
                                      refused=("refused", "sum"), near_c2s=("near_c2s", "sum"),
                                      near_s2c=("near_s2c", "sum"), transfer=("transfer_s", "max")).reset_index()
    counts = conns.set_index("stream").reindex(per["stream"])
    per["large_c2s"] = counts["large_messages_c2s"].to_numpy(np.int64)
    per["large_s2c"] = counts["large_messages_s2c"].to_numpy(np.int64)
    per["cut"] = per["large_c2s"] + per["large_s2c"] > per["rows"]
    per = per.sort_values(["rank", "largest", "stream"], ascending=[False, False, True], kind="stable")
    return large, per


def _each_way(c2s: int, s2c: int) -> str:
    """Counts of messages, each with its direction: "30 published and 30 delivered", "4
    published", "2 delivered". A message published and then delivered crosses the wire twice:
    one number for both would count it twice."""
    ways = [f"{n:,} {DIRECTION_WORDS[d]}" for d, n in (("c2s", c2s), ("s2c", s2c)) if n]
    return " and ".join(ways) or "0"


def _title(w, large: pd.DataFrame, per: pd.DataFrame) -> str:
    """The finding's title: the worst message `w`, then how many large messages there are each
    way (published, delivered), those near the limit and refused, and on how many connections."""
    who = w.connection
    does = "sends" if w.direction == "c2s" else "receives"
    if w.refused:
        head = (f"{who} sent a {_mb(w.body_size)} message the broker refused (over its max_message_size of "
                f"{_mib(w.max_message_size)}): RabbitMQ closed the channel")
    elif w.near:
        head = (f"{who} {does} messages near the broker's max_message_size: {_mb(w.body_size)}, "
                f"{w.share_of_max:.0%} of {_mib(w.max_message_size)} ({w.max_message_size_source})")
    else:
        head = f"{who} {does} large messages: up to {_mb(w.body_size)} in {int(w.body_frames):,} frames"
    large_c2s, large_s2c = int(per["large_c2s"].sum()), int(per["large_s2c"].sum())
    near_c2s, near_s2c = int(per["near_c2s"].sum()), int(per["near_s2c"].sum())
    refused_n = int(large["refused"].sum())
    more = [f"{refused_n:,} refused"] if refused_n > 1 else []
    if (near_c2s or near_s2c) and not (w.near and (near_c2s, near_s2c) == (large_c2s, large_s2c)):
        more.append(("at least " if per["cut"].any() else "") + f"{_each_way(near_c2s, near_s2c)} near the limit")
    tail = f"; large messages: {_each_way(large_c2s, large_s2c)}" + (f" ({'; '.join(more)})" if more else "")
    if len(per) > 1:
        tail += f", on {len(per)} connections"
    return head + tail
