"""clients: what each connection does (publishes, consumes, gets, transactions, confirms) and at
what rates, named as the operator knows it; and the client habits RabbitMQ's documentation
warns about, named from the wire (issue 14): polling with basic.get, a transaction per message,
mandatory publishes that no queue takes, consumers the broker cancels, a connection per few messages,
a publisher that waits for each confirm before the next publish, a channel per message.

Everything here is per connection, so the analyzer splits: a partition's step counts its own
connections' methods, the merge joins the rows and derives the findings from them. The step also
runs over slices of a partition's time (`clients_slice`, docs/time-split.md §2.5): what the rows
need of the frames before a slice is carried to it (`_Seen`), what a slice tells is joined with
the other slices' when all are done (`clients_join`); a whole partition is its own one slice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pandas as pd

from ..analysis import AnalyzerResult, Finding, analyzer
from ..capture import Capture
from ..derive.columns import codes, counts_added, group_cumsum
from ..derive.deliveries import confirms
from ..derive.methods import methods, select
from ..derive.replay import for_derivations, told
from ..derive.seeds import CHANNELS, chan_keys
from ..display_filters import stream_filter
from ..names import connection_names, subject, subject_namer
from ..partition import CaptureFacts, Slicing, Split, merge_rows, run_whole

#: polling-basic-get: a connection that sends at least this many basic.get polls in a loop
#: (a few gets, e.g. a script fetching one message, are not polling)
POLLING_MIN_GETS = 20
#: ... warning when at least this share of its gets find the queue empty (a round trip for
#: nothing each), or when it gets at least POLLING_WARN_GETS_PER_S (one round trip per message
#: where a consumer with a prefetch window would have them pushed); info otherwise
POLLING_EMPTY_SHARE = 0.2
POLLING_WARN_GETS_PER_S = 10.0
#: transactions: a connection that commits at least this many transactions ...
TX_MIN_COMMITS = 10
#: ... warning when its transactions hold at most this many publishes each on average (a
#: synchronous commit round trip every few messages); info for larger batches
TX_SMALL_BATCH = 10
#: unroutable-messages: a connection whose mandatory publishes came back (basic.return) at least
#: once is told (info); warning from this many returns making at least UNROUTABLE_WARN_SHARE of
#: its publishes (a misrouted publisher, not a rare mandatory check failing)
UNROUTABLE_WARN_RETURNS = 10
UNROUTABLE_WARN_SHARE = 0.01
#: connection-churn: an application (connections sharing a connection_name, else client library,
#: user and client address) with at least this many connections opened and closed in the
#: capture ...
CHURN_MIN_CONNECTIONS = 10
#: ... that lived this long or less (median): a pool recycling connections every minute is not churn
CHURN_MAX_LIFETIME_S = 10.0
#: warning when its connections carry this many messages or fewer (median: a connection per
#: message or few) or it opens CHURN_WARN_OPENS_PER_S or more in some second (RabbitMQ's
#: Connections guide: churn consistently above 100/s needs investigating); info otherwise
CHURN_FEW_MESSAGES = 10
CHURN_WARN_OPENS_PER_S = 100
#: publish-and-wait: a channel in confirm mode with at least this many confirmed publishes ...
PUBLISH_WAIT_MIN = 20
#: ... nearly each published after the previous one was confirmed (this share of them) ...
PUBLISH_WAIT_SEQUENTIAL = 0.9
#: ... spending at least this share of its publishing time waiting for confirms: its rate is
#: then set by the confirm round trip (a publisher rate-limited far below it waits little and is
#: not told)
PUBLISH_WAIT_SHARE = 0.5
#: channel-churn: a connection that opens at least this many channels ...
CHANNEL_CHURN_MIN = 20
#: ... carrying this many messages or fewer each (published, delivered and got over channels
#: opened: a channel per operation, each costing a channel.open round trip) ...
CHANNEL_FEW_MESSAGES = 2
#: ... or opening this many in some second (RabbitMQ's Channels guide: churn consistently above
#: 100/s needs investigating)
CHANNEL_WARN_OPENS_PER_S = 100
#: ... or, a channel leak (channels opened and never closed), when its open channels reached this
#: share of the negotiated channel_max: the next channel.open past it fails (RabbitMQ closes the
#: connection: 530 NOT_ALLOWED). RabbitMQ's Channels guide names the leak; 2047 is its default
CHANNEL_LEAK_SHARE = 0.8
#: AMQP 0-9-1 §1.4.2.6 connection.tune: channel-max 0 means no limit but the 16-bit channel number
NO_CHANNEL_MAX = 65535
#: example packets a finding cites per connection and method
EXAMPLE_PACKETS = 5
#: connections listed in summary.json (`clients.by_connection`), busiest first; the table has all
SUMMARY_CONNECTIONS = 50
#: what summary.json lists of each connection
SUMMARY_COLUMNS = ("connection", "stream", "client", "user", "duration_s", "publishes", "publish_rate_per_s", "returns",
                   "deliveries", "delivery_rate_per_s", "gets", "get_rate_per_s", "get_empty_share", "acks",
                   "confirm_selects", "tx_commits", "publishes_per_commit")

#: (column, method, direction) counted per connection
COUNTED = (
    ("publishes", "basic.publish", "c2s"),
    ("returns", "basic.return", "s2c"),
    ("deliveries", "basic.deliver", "s2c"),
    ("gets", "basic.get", "c2s"),
    ("gets_ok", "basic.get-ok", "s2c"),
    ("gets_empty", "basic.get-empty", "s2c"),
    ("acks", "basic.ack", "c2s"),
    ("consumes", "basic.consume", "c2s"),
    ("cancelled_by_broker", "basic.cancel", "s2c"),
    ("confirm_selects", "confirm.select", "c2s"),
    ("tx_selects", "tx.select", "c2s"),
    ("tx_commits", "tx.commit", "c2s"),
    ("tx_rollbacks", "tx.rollback", "c2s"),
    ("channels_opened", "channel.open", "c2s"),
    ("connection_opens", "connection.open", "c2s"),
    ("connection_close_oks", "connection.close-ok", None),
)
#: a synchronous request and its replies (AMQP 0-9-1 §2.3.4: at most one outstanding per channel)
ROUND_TRIPS = {"get": ("basic.get", ("basic.get-ok", "basic.get-empty")),
               "commit": ("tx.commit", ("tx.commit-ok",)),
               "channel_open": ("channel.open", ("channel.open-ok",))}
FILTER_GET = "amqp.method.class == 60 && amqp.method.method in {70, 71, 72}"
FILTER_TX = "amqp.method.class == 90"
FILTER_RETURN = "amqp.method.class == 60 && amqp.method.method == 50"
FILTER_CANCEL = "amqp.method.class == 60 && amqp.method.method in {30, 31}"
FILTER_OPEN = "amqp.method.class == 10 && amqp.method.method == 40"
FILTER_CONFIRM = "amqp.method.class == 60 && amqp.method.method in {40, 80, 120}"
FILTER_CHANNEL_OPEN = "amqp.method.class == 20 && amqp.method.method in {10, 11}"
#: the columns that name a connection (`amqpcap.names.connection_names`), added in the merge: a
#: label shared by two connections is told apart by their stream numbers, which only the whole
#: capture's connections show
NAMED = ("connection", "application", "client", "user", "vhost")
COLUMNS = ["connection", "stream", "application", "client", "user", "vhost", "first_ts", "duration_s",
           *(c for c, _, _ in COUNTED), "publishes_in_tx", "publish_rate_per_s", "delivery_rate_per_s",
           "get_rate_per_s", "get_empty_share", "get_round_trip_p50_s", "publishes_per_commit",
           "commit_round_trip_p50_s", "channel_open_round_trip_p50_s", "channel_opens_per_s_peak",
           "channels_open_peak", "channel_max"]


#: the methods (and direction) a finding cites the first EXAMPLE_PACKETS packets of, per connection
EXAMPLES = (("basic.get", "c2s"), ("tx.commit", "c2s"), ("channel.open", "c2s"), ("basic.return", "s2c"))
#: a destination of publishes and returns
DESTINATION = ["stream", "exchange", "routing_key"]
_NONE = np.zeros(0, np.int64)


# -- a partition's step, over slices of its time ------------------------------------------------

@dataclass
class _Waiting:
    """The requests of one kind (a `ROUND_TRIPS` request, basic.consume) not answered yet: on
    each channel, its last request when no reply followed it (`_answered`). Per request, its
    channel key and what its pairing reads of it: its time (ns) for a round trip, its queue for
    a basic.consume."""

    key: np.ndarray
    value: np.ndarray

    @classmethod
    def nothing(cls, dtype) -> "_Waiting":
        return cls(_NONE, np.zeros(0, dtype))


@dataclass
class _Seen:
    """What a partition's frames so far tell of each of its connections (arrays by the sorted
    connections' `stream`): carried from one slice of its time to the next (`Slicing`), or made
    from the partition at once. Bounded by its connections, channels, consumer tags and the
    destinations it publishes to (`published`), and by the channel.open frames of one second
    (`recent_pos`, `recent_ts`)."""

    #: frames of the slices before: the whole partition's order of the slice's first frame
    frames: int
    #: the COUNTED columns so far
    counted: dict[str, np.ndarray]
    #: per EXAMPLES method: the packets cited so far (at most EXAMPLE_PACKETS)
    shown: dict[str, np.ndarray]
    #: basic.publish frames per channel key (sorted), and the channel keys with a tx.select: a
    #: channel's publishes before its tx.select are a transaction's too
    channel_keys: np.ndarray
    channel_publishes: np.ndarray
    tx_channels: np.ndarray
    #: basic.publish frames per destination (DESTINATION, text, and publishes): a basic.return
    #: may come slices after the publishes to its destination; and per destination returned
    #: (index DESTINATION; None: none yet), returns and the first reply_code and reply_text
    published: pd.DataFrame
    returned: pd.DataFrame | None
    #: the requests not answered yet, per ROUND_TRIPS name and "consume"
    waiting: dict[str, _Waiting]
    #: channels open (channel.open less channel.close-ok) now and at most
    open_now: np.ndarray
    open_peak: np.ndarray
    #: the channel.open frames (connection index, ts in ns) less than a second before their
    #: connection's latest: the one-second windows starting at them may reach the next slice
    recent_pos: np.ndarray
    recent_ts: np.ndarray
    #: the most channel.open frames in a one-second window so far
    opens_peak: np.ndarray
    #: (stream, consumer tag) -> (channel key, queue) of the consumers started (`_remember_queues`)
    queues: dict
    #: the whole order of each connection's last basic.consume (-1: none yet)
    last_consume: np.ndarray

    @classmethod
    def nothing(cls, n: int) -> "_Seen":
        def zeros() -> np.ndarray:
            return np.zeros(n, np.int64)

        return cls(frames=0, counted={col: zeros() for col, _, _ in COUNTED},
                   shown={method: zeros() for method, _ in EXAMPLES},
                   channel_keys=_NONE, channel_publishes=_NONE, tx_channels=_NONE,
                   published=pd.DataFrame({"stream": _NONE, "exchange": np.zeros(0, object),
                                           "routing_key": np.zeros(0, object), "publishes": _NONE}),
                   returned=None,
                   waiting={**{name: _Waiting.nothing(np.int64) for name in ROUND_TRIPS},
                            "consume": _Waiting.nothing(object)},
                   open_now=zeros(), open_peak=zeros(), recent_pos=_NONE, recent_ts=_NONE, opens_peak=zeros(),
                   queues={}, last_consume=np.full(n, -1, np.int64))


@dataclass
class _Final:
    """What the last slice adds to its piece: the connections' rows (without the round trips:
    `clients_join`), the returns, and what a cancel is told with (`_cancel_rows`)."""

    rows: pd.DataFrame
    returns: pd.DataFrame
    #: (stream, consumer tag) -> queue
    queues: dict
    #: each connection's last basic.consume's whole order (index: stream)
    last_consume: pd.Series


@dataclass
class _Piece:
    """What a slice tells (`clients_slice`): the partition's partial is made from the pieces of
    all its slices (`clients_join`). Its rows are the slice's alone, each told once."""

    #: per ROUND_TRIPS name: stream, round_trip_s of the requests answered in the slice
    round_trips: dict[str, pd.DataFrame]
    #: per EXAMPLES method: stream and packet of the frames cited
    examples: dict[str, tuple[np.ndarray, np.ndarray]]
    #: the broker's basic.cancel frames (`_cancels`), the client's queue.delete frames
    cancels: pd.DataFrame
    deletes: pd.DataFrame
    #: the confirmed publishes the slice tells (`_confirmed`)
    confirmed: pd.DataFrame
    #: the last slice's
    final: _Final | None = None


def clients_partial(cap: Capture, facts: CaptureFacts) -> dict[str, Any]:
    """A partition's connections: one row each, with its counts, rates and round trips."""
    return clients_join([clients_slice(cap, facts, None, True)[1]])


def clients_slice(part: Capture, facts: CaptureFacts, seen: _Seen | None, last: bool) -> tuple[_Seen, _Piece]:
    """A slice of a partition's time (`amqpcap.partition.Slicing`; a whole partition is its own
    one slice): what it adds to `seen`, and what it tells; the last slice also the connections'
    rows, from the final `seen`."""
    m = methods(part)  # (the slice's own frames: counted once, by the slice they are in)
    stream = part.connections["stream"].to_numpy(np.int64)
    seen = seen or _Seen.nothing(len(stream))
    pos = np.searchsorted(stream, m["stream"].to_numpy(np.int64))  # connections are sorted by stream
    for col, method, direction in COUNTED:
        seen.counted[col] += np.bincount(pos[select(m, method, direction)], minlength=len(stream))
    round_trips = {}
    for name, (request, replies) in ROUND_TRIPS.items():
        round_trips[name], seen.waiting[name] = _round_trips(part, m, request, replies, seen.waiting[name])
    piece = _Piece(round_trips=round_trips,
                   examples={method: _examples(part, m, pos, method, direction, seen.shown[method])
                             for method, direction in EXAMPLES},
                   cancels=_cancels(part, m, seen.frames), deletes=_queue_deletes(part, m),
                   confirmed=_confirmed(part, last))
    _remember_queues(part, m, seen)
    consumes = np.flatnonzero(select(m, "basic.consume", "c2s"))
    np.maximum.at(seen.last_consume, pos[consumes], seen.frames + m["order"].to_numpy(np.int64)[consumes])
    _count_publishes(part, m, seen, last)
    _open_channels(m, pos, seen)
    _opens_per_s(part, m, pos, seen)
    seen.frames += len(part.frames)
    if last:
        piece.final = _Final(_rows(part, seen), _returns(seen), {k: q for k, (_, q) in seen.queues.items()},
                             pd.Series(seen.last_consume, index=stream))
    return seen, piece


def clients_join(pieces: list[_Piece]) -> dict[str, Any]:
    """The partition's partial from the pieces of its slices (`clients_slice`), in their order."""
    final = pieces[-1].final
    out = final.rows.copy()
    for name in ROUND_TRIPS:
        rt = pd.concat([p.round_trips[name] for p in pieces], ignore_index=True)
        p50 = rt.groupby("stream")["round_trip_s"].median()
        out[f"{name}_round_trip_p50_s"] = p50.reindex(out["stream"]).to_numpy()
    examples = pd.concat([pd.DataFrame({"stream": np.concatenate([p.examples[method][0] for p in pieces]),
                                        "packet": np.concatenate([p.examples[method][1] for p in pieces]),
                                        "method": method})
                          for method, _ in EXAMPLES], ignore_index=True)
    return {"connections": out[[c_ for c_ in COLUMNS if c_ not in NAMED]], "examples": examples,
            "returns": final.returns, "cancels": _cancel_rows(pieces, final),
            "deletes": _rows_together([p.deletes for p in pieces]),
            "confirming": _confirming(pd.concat([p.confirmed for p in pieces], ignore_index=True))}


def _rows(cap: Capture, seen: _Seen) -> pd.DataFrame:
    """A partition's connections: one row each, with its counts, rates and peaks (from the
    final `seen`)."""
    c = cap.connections
    stream = c["stream"].to_numpy(np.int64)
    out = pd.DataFrame({"stream": stream})  # (named in the merge: labels depend on every connection)
    out["first_ts"] = c["first_ts"].to_numpy()
    out["duration_s"] = (c["last_ts"] - c["first_ts"]).dt.total_seconds().to_numpy()
    for col, _, _ in COUNTED:
        out[col] = seen.counted[col]
    out["publishes_in_tx"] = _publishes_in_tx(seen, stream)
    span = np.where(out["duration_s"] > 0, out["duration_s"], np.nan)
    out["publish_rate_per_s"] = out["publishes"] / span
    out["delivery_rate_per_s"] = out["deliveries"] / span
    out["get_rate_per_s"] = out["gets"] / span
    answered = out["gets_ok"] + out["gets_empty"]
    out["get_empty_share"] = np.where(answered > 0, out["gets_empty"] / answered.where(answered > 0, 1), np.nan)
    out["publishes_per_commit"] = np.where(out["tx_commits"] > 0,
                                           out["publishes_in_tx"] / out["tx_commits"].where(out["tx_commits"] > 0, 1),
                                           np.nan)
    out["channel_opens_per_s_peak"] = seen.opens_peak
    out["channels_open_peak"] = seen.open_peak
    out["channel_max"] = pd.array(c["channel_max"].to_numpy(float, na_value=np.nan), dtype="Int64")
    return out


def _answered(m: pd.DataFrame, request: str, replies,
              waiting: np.ndarray = _NONE) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of `m` (requests, their replies) of each client `request` answered by a broker reply
    in `replies`: the reply that follows the request on the same channel (a synchronous method is
    answered before the channel's next one, AMQP 0-9-1 §2.3.4), in frame order; and the requests
    not answered after m's last frame (each the last of its channel's rows). `waiting`: the
    channel keys of the requests not answered before m's first frame (in a slice of a
    partition's time: left by the slices before), put first, the i-th as row -1 - i."""
    req, rep = select(m, request, "c2s"), select(m, replies, "s2c")
    own = np.flatnonzero(req | rep)
    rows = np.r_[-1 - np.arange(len(waiting)), own]
    key = np.r_[waiting, chan_keys(m["stream"].to_numpy(np.int64)[own], m["channel"].to_numpy(np.int64)[own])]
    by = np.argsort(key, kind="stable")  # by channel, frame order kept within it
    rows, key, is_req = rows[by], key[by], np.r_[np.ones(len(waiting), bool), req[own]][by]
    pair = np.flatnonzero(~is_req[1:] & is_req[:-1] & (key[1:] == key[:-1]))
    last = np.r_[key[1:] != key[:-1], True][:len(key)]
    return rows[pair], rows[pair + 1], rows[last & is_req]


def _at(rows: np.ndarray, before: np.ndarray, own: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Values of `_answered` rows: of a request waiting from before m's frames (row -1 - i) from
    `before`, of a row of m from ``own(rows)``."""
    out = np.empty(len(rows), before.dtype)
    mine = rows >= 0
    out[mine] = own(rows[mine])
    out[~mine] = before[-1 - rows[~mine]]
    return out


def _still(rows: np.ndarray, waiting: _Waiting, m: pd.DataFrame,
           value: Callable[[np.ndarray], np.ndarray]) -> _Waiting:
    """The requests `rows` (`_answered`: not answered yet) as the next slice's `waiting`."""
    def key(r: np.ndarray) -> np.ndarray:
        return chan_keys(m["stream"].to_numpy(np.int64)[r], m["channel"].to_numpy(np.int64)[r])

    return _Waiting(_at(rows, waiting.key, key), _at(rows, waiting.value, value))


def _round_trips(cap: Capture, m: pd.DataFrame, request: str, replies: tuple[str, ...],
                 waiting: _Waiting) -> tuple[pd.DataFrame, _Waiting]:
    """stream, round_trip_s of each `request` answered by one of `replies` (`_answered`), and
    the requests not answered yet (`waiting`: those before m's frames)."""
    asked, answer, still = _answered(m, request, replies, waiting.key)
    ts, order = cap.frames["ts"].array.asi8, m["order"].to_numpy()

    def ts_of(rows: np.ndarray) -> np.ndarray:
        return ts[order[rows]]

    rt = pd.DataFrame({"stream": m["stream"].to_numpy(np.int64)[answer],
                       "round_trip_s": (ts_of(answer) - _at(asked, waiting.value, ts_of)) / 1e9})
    return rt, _still(still, waiting, m, ts_of)


def _examples(cap: Capture, m: pd.DataFrame, pos: np.ndarray, method: str, direction: str,
              shown: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """stream, packet of the first EXAMPLE_PACKETS `method` frames (in `direction`) of each
    connection (`pos`: each row's), counted on from `shown` (each connection's cited before m's
    frames; counted up)."""
    rows = np.flatnonzero(select(m, method, direction))
    at = pos[rows]
    cited = shown[at] + group_cumsum(at, np.ones(len(at), np.int64)) <= EXAMPLE_PACKETS
    rows, at = rows[cited], at[cited]
    np.add.at(shown, at, 1)
    return m["stream"].to_numpy(np.int64)[rows], cap.frames["packet"].to_numpy(np.int64)[m["order"].to_numpy()[rows]]


def _text(cap: Capture, m: pd.DataFrame, col: str, rows: np.ndarray) -> np.ndarray:
    """The text column `col` of the frames of m's `rows` (object: str, or NaN when missing)."""
    return pd.Series(cap.frames[col].array.take(m["order"].to_numpy()[rows])).astype(object).to_numpy(object)


def _remember_queues(cap: Capture, m: pd.DataFrame, seen: _Seen) -> None:
    """The queue of each consumer m's frames start (its basic.consume, answered by the
    basic.consume-ok naming its tag: `_answered`), by (stream, consumer tag), into
    `seen.queues`. Of two consumers with one tag, the one answered later in `_answered`'s order
    (by channel, then time) is kept, as the dict of a whole partition's pairs kept it."""
    waiting = seen.waiting["consume"]

    def queue(rows: np.ndarray) -> np.ndarray:
        return _text(cap, m, "queue", rows)

    asked, answer, still = _answered(m, "basic.consume", ("basic.consume-ok",), waiting.key)
    stream = m["stream"].to_numpy(np.int64)[answer]
    key = chan_keys(stream, m["channel"].to_numpy(np.int64)[answer])
    for s, k, tag, q in zip(stream, key, _text(cap, m, "consumer_tag", answer), _at(asked, waiting.value, queue)):
        if (s, tag) not in seen.queues or seen.queues[(s, tag)][0] <= k:
            seen.queues[(s, tag)] = (k, q)
    seen.waiting["consume"] = _still(still, waiting, m, queue)


def _count_publishes(cap: Capture, m: pd.DataFrame, seen: _Seen, last: bool) -> None:
    """Add m's basic.publish frames to the counts per channel and per destination, its
    tx.select channels and basic.return frames to those of `seen`. The last slice counts only
    what the rows read: the publishes on channels in a transaction, to destinations returned."""
    stream, channel = m["stream"].to_numpy(np.int64), m["channel"].to_numpy(np.int64)
    tx = select(m, "tx.select", "c2s")
    seen.tx_channels = np.union1d(seen.tx_channels, chan_keys(stream[tx], channel[tx]))
    publish = np.flatnonzero(select(m, "basic.publish", "c2s"))
    key = chan_keys(stream[publish], channel[publish])
    if last:
        key = key[np.isin(key, seen.tx_channels)]
    (seen.channel_keys,), seen.channel_publishes = counts_added((seen.channel_keys,), seen.channel_publishes,
                                                                *_counted(key))
    seen.returned = _returned(seen.returned, cap, m)
    if not last or seen.returned is not None:
        seen.published = _published(seen.published, cap, m, publish)


def _counted(key: np.ndarray) -> tuple[tuple[np.ndarray], np.ndarray]:
    """The distinct `key` values and the rows of each."""
    code, uniq = pd.factorize(key)
    return (np.asarray(uniq, np.int64),), np.bincount(code, minlength=len(uniq)).astype(np.int64)


def _publishes_in_tx(seen: _Seen, stream: np.ndarray) -> np.ndarray:
    """Per connection, the publishes on its channels that selected tx (a transaction's messages)."""
    in_tx = np.isin(seen.channel_keys, seen.tx_channels)
    out = np.zeros(len(stream), np.int64)
    np.add.at(out, np.searchsorted(stream, seen.channel_keys[in_tx] // CHANNELS), seen.channel_publishes[in_tx])
    return out


def _open_channels(m: pd.DataFrame, pos: np.ndarray, seen: _Seen) -> None:
    """Per connection (`pos`: each method row's connection index), the channels open now and the
    most open at once, counted on from `seen`: +1 at each channel.open, −1 at each
    channel.close-ok (either side closes, the other confirms), in frame order."""
    step = select(m, "channel.open", "c2s").astype(np.int64) - select(m, "channel.close-ok").astype(np.int64)
    rows = np.flatnonzero(step)
    at = pos[rows]
    if len(rows):
        np.maximum.at(seen.open_peak, at, seen.open_now[at] + group_cumsum(at, step[rows]))
        np.add.at(seen.open_now, at, step[rows])


def _opens_per_s(cap: Capture, m: pd.DataFrame, pos: np.ndarray, seen: _Seen) -> None:
    """Per connection, the most channel.open frames in a one-second window (`_peaks_per_s`) so
    far: of m's and those of the second before them (`seen.recent_*`), whose windows are counted
    again, now with m's frames in them. Then those less than a second before their connection's
    latest are kept: the windows of the others ended before it, and every later frame is at or
    after it (slices are cut where no packet before is later than one after)."""
    opens = np.flatnonzero(select(m, "channel.open", "c2s"))
    at = np.r_[seen.recent_pos, pos[opens]]
    ts = np.r_[seen.recent_ts, cap.frames["ts"].array.asi8[m["order"].to_numpy()[opens]]]
    seen.opens_peak = np.maximum(seen.opens_peak, _peaks_per_s(at, ts, len(seen.opens_peak)))
    latest = np.full(len(seen.opens_peak), np.iinfo(np.int64).min)
    np.maximum.at(latest, at, ts)
    recent = ts > latest[at] - 10**9
    seen.recent_pos, seen.recent_ts = at[recent], ts[recent]


def _confirmed(part: Capture, last: bool) -> pd.DataFrame:
    """The confirmed publishes the slice `part` tells (`amqpcap.derive.replay.told`: once
    confirmed; a whole partition tells all), the columns `_confirming` reads: stream, channel,
    epoch, seq, packet, ts and confirmed (ns)."""
    view = for_derivations(part)
    c = confirms(view)
    if not len(c):
        return pd.DataFrame({col: _NONE for col in ("stream", "channel", "epoch", "seq", "packet", "ts", "confirmed")})
    c = c[told(view, c["order"].to_numpy(np.int64), last) & c["confirm_ts"].notna().to_numpy(bool)]
    return pd.DataFrame({**{col: c[col].to_numpy(np.int64) for col in ("stream", "channel", "epoch", "seq", "packet")},
                         "ts": c["ts"].array.asi8, "confirmed": pd.to_datetime(c["confirm_ts"], utc=True).array.asi8})


def _confirming(c: pd.DataFrame) -> pd.DataFrame:
    """Per channel opening in confirm mode (stream, channel, epoch) with confirmed publishes
    (`c`: `_confirmed`'s rows): publishes (confirmed), sequential_share (of its publishes after
    the first, those sent after the previous one was confirmed), waiting_share (the publishes'
    confirm latencies summed over the time from its first publish to its last confirm),
    confirm_latency_p50_s, publish_rate_per_s, first_packet."""
    key = ["stream", "channel", "epoch"]
    cols = [*key, "publishes", "sequential_share", "waiting_share", "confirm_latency_p50_s", "publish_rate_per_s",
            "first_packet"]
    rows = []
    for k, g in c.groupby(key, sort=True):
        g = g.sort_values("seq")
        ts, confirmed = g["ts"].to_numpy(), g["confirmed"].to_numpy()
        span_s = (confirmed.max() - ts.min()) / 1e9
        latency = (confirmed - ts) / 1e9
        rows.append((*k, len(g), float(np.mean(ts[1:] >= confirmed[:-1])) if len(g) > 1 else np.nan,
                     float(latency.sum() / span_s) if span_s > 0 else np.nan, float(np.median(latency)),
                     (len(g) - 1) / ((ts.max() - ts.min()) / 1e9) if ts.max() > ts.min() else np.nan,
                     int(g["packet"].iloc[0])))
    out = pd.DataFrame(rows, columns=cols)
    return out.astype({c_: np.int64 if c_ in (*key, "publishes", "first_packet") else float for c_ in cols})


def _destinations(cap: Capture, m: pd.DataFrame, mask: np.ndarray, extra=()) -> pd.DataFrame:
    """stream, exchange, routing_key (and the `extra` columns) of the method frames `mask`."""
    rows = np.flatnonzero(mask)
    order = m["order"].to_numpy()[rows]
    f = cap.frames
    out = pd.DataFrame({"stream": m["stream"].to_numpy(np.int64)[rows]})
    for col in ("exchange", "routing_key", *extra):
        v = pd.Series(f[col].array.take(order)).astype(object)
        out[col] = (v.fillna("") if col in ("exchange", "routing_key") else v.where(v.notna(), None)).to_numpy(object)
    return out


def _returned(before: pd.DataFrame | None, cap: Capture, m: pd.DataFrame) -> pd.DataFrame | None:
    """Per destination returned (basic.return) by `before` (None: none) and m's frames, sorted:
    returns, and the first reply_code and reply_text (a missing one is passed over)."""
    returned = select(m, "basic.return", "s2c")
    if not returned.any():
        return before
    ret = _destinations(cap, m, returned, ("reply_code", "reply_text"))
    g = ret.groupby(DESTINATION, sort=True)
    more = g.size().rename("returns").to_frame().join(g[["reply_code", "reply_text"]].first())
    if before is None:
        return more
    g = pd.concat([before, more]).groupby(level=DESTINATION, sort=True)
    return g[["returns"]].sum().join(g[["reply_code", "reply_text"]].first())


def _published(before: pd.DataFrame, cap: Capture, m: pd.DataFrame, rows: np.ndarray) -> pd.DataFrame:
    """The publishes per destination of `before` with m's basic.publish frames `rows` added."""
    if not len(rows):
        return before
    order = m["order"].to_numpy()[rows]
    stream = m["stream"].to_numpy(np.int64)[rows]
    exchange, exchanges = _coded(cap.frames["exchange"], order)
    routing_key, routing_keys = _coded(cap.frames["routing_key"], order)
    code = codes(stream, exchange, routing_key)
    n = np.bincount(code) if len(code) else _NONE
    one = np.empty(len(n), np.int64)
    one[code] = np.arange(len(code))  # (a row of each destination)
    more = pd.DataFrame({"stream": stream[one], "exchange": exchanges[exchange[one]],
                         "routing_key": routing_keys[routing_key[one]], "publishes": n})
    both = pd.concat([before, more], ignore_index=True)
    return both.groupby(DESTINATION, sort=False, as_index=False)["publishes"].sum()


def _coded(col: pd.Series, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The text of `col` at `order` as codes into its distinct values (object), "" (the default
    exchange) for a missing one: a text column of every publish is costly, its codes are not."""
    code, uniq = pd.factorize(col.array.take(order))
    return code + 1, np.concatenate([np.array([""], object), np.asarray(uniq, dtype=object)])


def _returns(seen: _Seen) -> pd.DataFrame:
    """Per (stream, exchange, routing key) with a basic.return: the returns (and the first one's
    reply code and text) and the publishes to that destination."""
    cols = [*DESTINATION, "returns", "publishes", "reply_code", "reply_text"]
    if seen.returned is None:
        return pd.DataFrame({c: pd.Series(dtype=np.int64 if c in ("stream", "returns", "publishes") else object)
                             for c in cols})
    out = seen.returned.copy()
    pub = seen.published.set_index(DESTINATION)["publishes"]
    out["publishes"] = pub.reindex(out.index).fillna(0).astype(np.int64).to_numpy()
    return out.reset_index()[cols]


def _cancels(cap: Capture, m: pd.DataFrame, frames_before: int) -> pd.DataFrame:
    """The basic.cancel frames the broker sent among m's: stream, channel, consumer_tag (text),
    packet, ts, and order (the whole partition's: `frames_before` + its position)."""
    rows = np.flatnonzero(select(m, "basic.cancel", "s2c"))
    order = m["order"].to_numpy()[rows]
    return pd.DataFrame({"stream": m["stream"].to_numpy(np.int64)[rows],
                         "channel": m["channel"].to_numpy(np.int64)[rows],
                         "consumer_tag": pd.Series(_text(cap, m, "consumer_tag", rows), dtype=object),
                         "packet": cap.frames["packet"].to_numpy(np.int64)[order],
                         "ts": cap.frames["ts"].array.take(order), "order": frames_before + order})


def _cancel_rows(pieces: list[_Piece], final: _Final) -> pd.DataFrame:
    """One row per basic.cancel the broker sent (RabbitMQ's consumer cancel notification: the
    queue was deleted, or its node went down): stream, channel, consumer_tag, queue (of the
    basic.consume it answered with basic.consume-ok, when in the capture), packet, ts and
    resubscribed (the client sent basic.consume on the connection after it). Who deleted the
    queue is found in the merge (`_deleted_by`): the queue.delete may be on a connection of
    another partition."""
    c = _rows_together([p.cancels for p in pieces])
    c["queue"] = np.array([final.queues.get((s_, t)) for s_, t in zip(c["stream"], c["consumer_tag"])], dtype=object)
    c["resubscribed"] = final.last_consume.reindex(c["stream"]).to_numpy(np.int64) > c["order"].to_numpy(np.int64)
    return c[["stream", "channel", "consumer_tag", "queue", "packet", "ts", "resubscribed"]]


def _queue_deletes(cap: Capture, m: pd.DataFrame) -> pd.DataFrame:
    """queue, stream, packet of each queue.delete a client sent."""
    rows = np.flatnonzero(select(m, "queue.delete", "c2s"))
    order = m["order"].to_numpy()[rows]
    return pd.DataFrame({"queue": pd.Series(_text(cap, m, "queue", rows), dtype=object),
                         "stream": m["stream"].to_numpy(np.int64)[rows],
                         "packet": cap.frames["packet"].to_numpy(np.int64)[order]})


def _deleted_by(cancels: pd.DataFrame, deletes: pd.DataFrame) -> pd.DataFrame:
    """`cancels` with deleted_by: the stream of the last queue.delete of the cancelled consumer's
    queue before the cancel (packet numbers order frames of different connections), else missing."""
    cols = ["stream", "channel", "consumer_tag", "queue", "packet", "ts", "deleted_by", "resubscribed"]
    left = cancels.assign(_row=np.arange(len(cancels)), queue=cancels["queue"].astype(object).fillna(""))
    right = deletes.rename(columns={"stream": "deleted_by"}).astype({"queue": object, "packet": np.int64})
    hit = pd.merge_asof(left.sort_values("packet"), right.sort_values("packet"), on="packet", by="queue",
                        allow_exact_matches=False, direction="backward")
    by = hit.set_index("_row")["deleted_by"].reindex(range(len(cancels)))
    # (a consumer whose queue the capture does not name matches no delete)
    by = by.where(left["queue"].to_numpy(object) != "")
    return cancels.assign(deleted_by=pd.array(by.to_numpy(float, na_value=np.nan), dtype="Int64"))[cols]


def _rows_together(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The rows of `frames` (text as object) one after the other, as one table made of them
    would be: text columns as pandas infers them from all their values (a slice without a row
    has no text to infer from)."""
    c = pd.concat(frames, ignore_index=True)
    return pd.DataFrame({col: c[col].to_numpy(object) if c[col].dtype == object else c[col].array for col in c})


def clients_merge(partials: list[dict[str, Any]], records: None, facts: CaptureFacts, cap: Capture) -> AnalyzerResult:
    """The connections of every partition, named; the findings and summary from them."""
    conns = merge_rows([p["connections"] for p in partials], ["stream"])
    names = connection_names(cap)
    for col in NAMED:
        conns[col] = pd.Series(names[col].reindex(conns["stream"]).to_numpy(object), dtype=object)
    conns = conns[COLUMNS]
    examples = merge_rows([p["examples"] for p in partials], ["stream", "method", "packet"])
    returns = merge_rows([p["returns"] for p in partials], ["stream", "exchange", "routing_key"])
    deletes = merge_rows([p["deletes"] for p in partials], ["packet", "stream"])
    cancels = _deleted_by(merge_rows([p["cancels"] for p in partials], ["packet", "stream", "channel"]), deletes)
    confirming = merge_rows([p["confirming"] for p in partials], ["stream", "channel", "epoch"])
    findings = [f for f in (_polling_finding(cap, conns, examples), _transactions_finding(cap, conns, examples),
                            _unroutable_finding(cap, conns, returns, examples), _cancelled_finding(cap, cancels),
                            _churn_finding(cap, conns), _publish_wait_finding(cap, confirming),
                            _channel_churn_finding(cap, conns, examples))
                if f is not None]
    summary = {"clients": {
        "connections": int(len(conns)),
        "publishing": int((conns["publishes"] > 0).sum()),
        "consuming": int(((conns["deliveries"] > 0) | (conns["consumes"] > 0) | (conns["gets_ok"] > 0)).sum()),
        "polling": int((conns["gets"] > 0).sum()),
        "transactional": int((conns["tx_selects"] > 0).sum()),
        "confirming": int((conns["confirm_selects"] > 0).sum()),
        "returned": int((conns["returns"] > 0).sum()),
        "cancelled_by_broker": int((conns["cancelled_by_broker"] > 0).sum()),
        "by_connection": _by_connection(conns),
    }}
    return AnalyzerResult("clients", tables={"connections": conns, "returns": returns, "cancels": cancels,
                                             "confirming": confirming},
                          summary=summary,
                          findings=findings, plots=[])


def _by_connection(conns: pd.DataFrame) -> list[dict[str, Any]]:
    """The busiest SUMMARY_CONNECTIONS connections (messages published, delivered and got),
    in summary.json's terms (missing numbers as null)."""
    busy = conns["publishes"] + conns["deliveries"] + conns["gets_ok"]
    top = conns.assign(busy_msgs=busy).sort_values(["busy_msgs", "stream"], ascending=[False, True], kind="stable")
    out = []
    for r in top.head(SUMMARY_CONNECTIONS)[list(SUMMARY_COLUMNS)].to_dict(orient="records"):
        out.append({k: (None if isinstance(v, float) and np.isnan(v) else v.item() if isinstance(v, np.generic) else v)
                    for k, v in r.items()})
    return out


SPLIT = Split(partial=clients_partial, merge=clients_merge,
              slicing=Slicing(clients_slice, clients_join, replays=True))


@analyzer("clients", split=SPLIT)
def clients(cap: Capture) -> AnalyzerResult:
    """What each connection does (publishes, consumes, gets, transactions, confirms) and the habits that cost most."""
    return run_whole(SPLIT, cap)


# -- findings ---------------------------------------------------------------------------------

def _packets(examples: pd.DataFrame, stream: int, method: str) -> list[int]:
    e = examples[(examples["stream"] == stream) & (examples["method"] == method)]
    return sorted(int(p) for p in e["packet"])


def _where(per: pd.DataFrame, examples: pd.DataFrame, method: str, frames_filter: str) -> dict[str, Any]:
    """The evidence that locates a finding told of the connections `per` (worst first): how
    many, their streams, the worst one's first `method` packets, and the filter opening those
    connections' frames `frames_filter`."""
    return {"connections_with_this_finding": len(per), "streams": sorted(int(s) for s in per["stream"]),
            "packets": _packets(examples, int(per["stream"].iloc[0]), method),
            "filter": f"{stream_filter(per['stream'])} && {frames_filter}"}


def _polling_finding(cap: Capture, conns: pd.DataFrame, examples: pd.DataFrame) -> Finding | None:
    """polling-basic-get: connections that loop on basic.get, worst (most empty gets) first."""
    poll = conns[conns["gets"] >= POLLING_MIN_GETS]
    if len(poll) == 0:
        return None
    empty = poll["get_empty_share"].fillna(0.0)
    loud = (empty >= POLLING_EMPTY_SHARE) | (poll["get_rate_per_s"].fillna(0.0) >= POLLING_WARN_GETS_PER_S)
    poll = poll.assign(loud=loud, empty_part=empty).sort_values(["loud", "gets_empty", "gets"], ascending=False,
                                                             kind="stable")
    w, n = poll.iloc[0], len(poll)
    rtt = w.get_round_trip_p50_s
    cap_note = "" if pd.isna(rtt) or rtt <= 0 else \
        f"; at {rtt * 1e3:.1f} ms a round trip, one channel gets at most {1 / rtt:,.0f} messages/s this way"
    numbers = (f"{int(w.gets):,} basic.get at {w.get_rate_per_s:.1f}/s, {w.empty_part:.0%} of them found the queue "
               f"empty{cap_note}")
    title = (f"{w.connection} polls with basic.get: {numbers}" if n == 1 else
             f"{n} connections poll with basic.get: worst {w.connection}, {numbers}")
    subject_of = subject_namer(cap)
    subjects = [subject_of(r.stream, gets=int(r.gets), gets_ok=int(r.gets_ok), gets_empty=int(r.gets_empty),
                           get_empty_share=float(r.empty_part), get_rate_per_s=float(r.get_rate_per_s),
                           get_round_trip_p50_s=None if pd.isna(r.get_round_trip_p50_s)
                                                else float(r.get_round_trip_p50_s),
                           severity="warning" if r.loud else "info")
                for r in poll.itertuples()]
    return Finding(
        id="polling-basic-get", severity="warning" if poll["loud"].any() else "info", title=title,
        evidence={
            "gets": int(w.gets), "gets_ok": int(w.gets_ok), "gets_empty": int(w.gets_empty),
            "get_empty_share": float(w.empty_part), "get_rate_per_s": float(w.get_rate_per_s),
            "get_round_trip_p50_s": None if pd.isna(rtt) else float(rtt),
            "gets_total": int(poll["gets"].sum()), **_where(poll, examples, "basic.get", FILTER_GET),
        },
        advice="Consume with basic.consume and a prefetch window (basic.qos, e.g. 50-300) instead of polling: "
               "the broker pushes messages as they arrive, without a round trip per message and without "
               "asking an empty queue again and again. RabbitMQ's consumer guide calls polling with basic.get "
               "highly inefficient; prefetch does not apply to it.",
        impact=float(poll["empty_part"].max()),
        subjects=subjects)


def _transactions_finding(cap: Capture, conns: pd.DataFrame, examples: pd.DataFrame) -> Finding | None:
    """transactions: connections that commit AMQP transactions, smallest batches first."""
    tx = conns[conns["tx_commits"] >= TX_MIN_COMMITS]
    if len(tx) == 0:
        return None
    per = tx["publishes_per_commit"].fillna(0.0)
    loud = per <= TX_SMALL_BATCH
    tx = tx.assign(loud=loud, per_tx=per).sort_values(["loud", "tx_commits"], ascending=False, kind="stable")
    w, n = tx.iloc[0], len(tx)
    rtt = w.commit_round_trip_p50_s
    rate = "" if pd.isna(rtt) or rtt <= 0 else \
        f"; each commit waits {rtt * 1e3:.1f} ms for commit-ok, capping the channel at {w.per_tx / rtt:,.0f} messages/s"
    numbers = f"{int(w.tx_commits):,} tx.commit, {w.per_tx:.1f} publishes per transaction{rate}"
    title = (f"{w.connection} publishes in transactions: {numbers}" if n == 1 else
             f"{n} connections publish in transactions: worst {w.connection}, {numbers}")
    subject_of = subject_namer(cap)
    subjects = [subject_of(r.stream, tx_commits=int(r.tx_commits), tx_rollbacks=int(r.tx_rollbacks),
                           publishes_in_tx=int(r.publishes_in_tx), publishes_per_commit=float(r.per_tx),
                           commit_round_trip_p50_s=None if pd.isna(r.commit_round_trip_p50_s)
                           else float(r.commit_round_trip_p50_s),
                           severity="warning" if r.loud else "info")
                for r in tx.itertuples()]
    return Finding(
        id="transactions", severity="warning" if tx["loud"].any() else "info", title=title,
        evidence={
            "tx_commits": int(w.tx_commits), "tx_rollbacks": int(w.tx_rollbacks),
            "publishes_in_tx": int(w.publishes_in_tx), "publishes_per_commit": float(w.per_tx),
            "commit_round_trip_p50_s": None if pd.isna(rtt) else float(rtt),
            **_where(tx, examples, "tx.commit", FILTER_TX),
        },
        advice="Use publisher confirms (confirm.select) instead of AMQP transactions: the broker then "
               "acknowledges publishes asynchronously while the client keeps publishing, with a window of "
               "outstanding confirms. RabbitMQ's documentation measures transactions as cutting throughput "
               "by a factor of 250. If transactions must stay, put many publishes in each.",
        impact=float(1.0 / max(float(w.per_tx), 1.0)), subjects=subjects)



def _unroutable_finding(cap: Capture, conns: pd.DataFrame, returns: pd.DataFrame,
                        examples: pd.DataFrame) -> Finding | None:
    """unroutable-messages: connections whose mandatory publishes came back, most returns first."""
    if len(returns) == 0:
        return None
    per = conns[conns["returns"] > 0].copy()
    per["returned_share"] = per["returns"] / per["publishes"].where(per["publishes"] > 0, 1)
    per["loud"] = (per["returns"] >= UNROUTABLE_WARN_RETURNS) & (per["returned_share"] >= UNROUTABLE_WARN_SHARE)
    per = per.sort_values(["loud", "returns"], ascending=False, kind="stable")
    w, n = per.iloc[0], len(per)
    mine = returns[returns["stream"] == w.stream].sort_values("returns", ascending=False, kind="stable")
    top = mine.iloc[0]
    reply = " ".join(str(x) for x in (top.reply_code, top.reply_text) if x is not None)
    numbers = (f"{int(w.returns):,} of its {int(w.publishes):,} publishes came back unroutable ({reply}), most to "
               f"exchange '{top.exchange}' with routing key '{top.routing_key}'")
    title = (f"{w.connection} publishes messages no queue takes: {numbers}" if n == 1 else
             f"{n} connections publish messages no queue takes: worst {w.connection}, {numbers}")
    dest = returns.groupby(["exchange", "routing_key"], sort=True)[["returns", "publishes"]].sum()
    dest = dest.sort_values("returns", ascending=False, kind="stable").reset_index()
    subject_of = subject_namer(cap)
    subjects = [subject_of(r.stream, returns=int(r.returns), publishes=int(r.publishes),
                           returned_share=float(r.returned_share), severity="warning" if r.loud else "info")
                for r in per.itertuples()]
    return Finding(
        id="unroutable-messages", severity="warning" if per["loud"].any() else "info", title=title,
        evidence={
            "returns": int(w.returns), "publishes": int(w.publishes), "returned_share": float(w.returned_share),
            "exchange": str(top.exchange), "routing_key": str(top.routing_key),
            "reply_code": None if top.reply_code is None else int(top.reply_code),
            "reply_text": None if top.reply_text is None else str(top.reply_text),
            "destinations": [{"exchange": str(d.exchange), "routing_key": str(d.routing_key), "returns": int(d.returns),
                              "publishes": int(d.publishes)} for d in dest.itertuples()],
            "returns_total": int(per["returns"].sum()), **_where(per, examples, "basic.return", FILTER_RETURN),
        },
        advice="The broker returns these mandatory publishes (basic.return, NO_ROUTE): no queue is bound to the "
               "exchange with that routing key, so the messages are dropped. Declare and bind the queue the "
               "publisher expects (check the exchange name and routing key), or give the exchange an alternate "
               "exchange to catch what nothing takes. With publisher confirms the return comes before the ack: "
               "an acked message was not necessarily delivered to a queue.",
        impact=float(per["returned_share"].max()), subjects=subjects)


def _cancelled_finding(cap: Capture, cancels: pd.DataFrame) -> Finding | None:
    """consumer-cancelled: consumers the broker cancelled, those that did not subscribe again first.
    A cancel after the consumer's own connection deleted the queue is its own teardown: not told."""
    own = (cancels["deleted_by"] == cancels["stream"]).fillna(False).to_numpy(bool)
    if own.all():
        return None
    c = cancels[~own]
    c = c.assign(loud=~c["resubscribed"].to_numpy(bool))
    c = c.sort_values(["loud", "packet"], ascending=[False, True], kind="stable")
    w, n = c.iloc[0], len(c)
    queue = f"queue {w.queue}" if w.queue else f"consumer {w.consumer_tag}"
    why = "" if w.deleted_by is None or pd.isna(w.deleted_by) else \
        f" after {connection_names(cap)['connection'].get(int(w.deleted_by), f'stream {int(w.deleted_by)}')} deleted the queue"
    then = "and it never subscribed again" if w.loud else "and it subscribed again"
    title = (f"The broker cancelled the consumer of {queue} on {subject(cap, w.stream)['connection']}{why}, {then}"
             if n == 1 else
             f"The broker cancelled {n} consumers, {int(c['loud'].sum())} never subscribed again: first "
             f"{queue} on {subject(cap, w.stream)['connection']}{why}")
    t0 = cap.summary.get("first_ts")
    subject_of = subject_namer(cap)
    subjects = [subject_of(r.stream, channel=int(r.channel), consumer_tag=str(r.consumer_tag),
                           queue=None if r.queue is None else str(r.queue),
                           deleted_by_stream=None if r.deleted_by is None or pd.isna(r.deleted_by)
                                             else int(r.deleted_by),
                           resubscribed=bool(r.resubscribed), severity="warning" if r.loud else "info")
                for r in c.itertuples()]
    return Finding(
        id="consumer-cancelled", severity="warning" if c["loud"].any() else "info", title=title,
        evidence={
            "cancels": n, "not_resubscribed": int(c["loud"].sum()),
            "queue": None if w.queue is None else str(w.queue), "consumer_tag": str(w.consumer_tag),
            "channel": int(w.channel), "resubscribed": bool(w.resubscribed),
            "deleted_by_stream": None if w.deleted_by is None or pd.isna(w.deleted_by) else int(w.deleted_by),
            "cancel_at_s": None if t0 is None else float((w.ts - t0).total_seconds()),
            "streams": sorted({int(s) for s in c["stream"]}),
            "packets": sorted(int(p) for p in c["packet"].head(EXAMPLE_PACKETS)),
            "filter": f"{stream_filter(c['stream'])} && {FILTER_CANCEL}",
        },
        advice="The broker cancelled these consumers itself (basic.cancel from the broker: their queue was deleted, "
               "or the node holding it went down). A consumer that does not handle the cancel notification "
               "silently stops receiving: subscribe again (after declaring the queue again if it was deleted), "
               "or fail loudly. Find who deletes the queue (an auto-delete or exclusive queue whose owner left, "
               "a TTL, or an operator) if it was not meant to go.",
        impact=float(c["loud"].mean()), subjects=subjects)


def _peaks_per_s(group: np.ndarray, ts_ns: np.ndarray, groups: int) -> np.ndarray:
    """Per group 0..groups-1, the most of its timestamps in any one-second window (sliding,
    starting at each of them); 0 for a group without any. Whole-column: (group, time) pairs as
    complex numbers, which numpy sorts and searches lexicographically (real part first); the
    times relative to the earliest, in ns, are exact in a float64 for captures up to 104 days."""
    out = np.zeros(groups, dtype=np.int64)
    if len(ts_ns) == 0:
        return out
    key = np.sort(group.astype(np.float64) + 1j * (ts_ns - ts_ns.min()).astype(np.float64))
    in_window = np.searchsorted(key, key + 1e9j, side="left") - np.arange(len(key))
    np.maximum.at(out, key.real.astype(np.int64), in_window)
    return out


def _peak_per_s(ts_ns: np.ndarray) -> int:
    """The most timestamps in any one-second window (sliding, starting at each of them)."""
    return int(_peaks_per_s(np.zeros(len(ts_ns), dtype=np.int64), ts_ns, 1)[0])


def _churn_finding(cap: Capture, conns: pd.DataFrame) -> Finding | None:
    """connection-churn: applications opening and closing many short-lived connections."""
    whole = conns[(conns["connection_opens"] > 0) & (conns["connection_close_oks"] > 0)]
    sizes = whole["application"].value_counts()
    whole = whole[whole["application"].isin(sizes.index[sizes >= CHURN_MIN_CONNECTIONS])]  # (few groups left)
    rows = []
    for app, g in whole.groupby("application", sort=True):
        if g["duration_s"].median() > CHURN_MAX_LIFETIME_S:
            continue
        opens = g["first_ts"].array.asi8
        span_s = (opens.max() - opens.min()) / 1e9
        msgs = g["publishes"] + g["deliveries"] + g["gets_ok"]
        peak = _peak_per_s(opens)
        rows.append({"application": app, "connections": len(g), "opens_per_s_peak": peak,
                     "opens_per_s": (len(g) - 1) / span_s if span_s > 0 else None,
                     "lifetime_p50_s": float(g["duration_s"].median()),
                     "messages_per_connection_p50": float(msgs.median()),
                     "loud": bool(msgs.median() <= CHURN_FEW_MESSAGES or peak >= CHURN_WARN_OPENS_PER_S),
                     "members": g.sort_values("first_ts")})
    if not rows:
        return None
    rows.sort(key=lambda r: (not r["loud"], -r["connections"]))
    w, n = rows[0], len(rows)
    rate = "" if w["opens_per_s"] is None else f" ({w['opens_per_s']:.1f}/s, at most {w['opens_per_s_peak']} in a second)"
    numbers = (f"{w['connections']:,} connections opened and closed{rate}, living {w['lifetime_p50_s'] * 1e3:,.0f} ms "
               f"and carrying {w['messages_per_connection_p50']:g} message"
               f"{'' if w['messages_per_connection_p50'] == 1 else 's'} each (medians)")
    title = (f"{w['application']} opens a connection per few messages: {numbers}" if n == 1 else
             f"{n} applications churn connections: worst {w['application']}, {numbers}")
    streams = sorted(int(s) for r in rows for s in r["members"]["stream"])
    # every churned connection a subject, application by application (worst first), in open order
    subject_of = subject_namer(cap)
    subjects = [subject_of(c.stream, application=r["application"], lifetime_s=float(c.duration_s),
                           messages=int(c.publishes + c.deliveries + c.gets_ok),
                           severity="warning" if r["loud"] else "info")
                for r in rows for c in r["members"].itertuples()]
    applications = [{k: r[k] for k in ("application", "connections", "opens_per_s", "opens_per_s_peak", "lifetime_p50_s",
                                       "messages_per_connection_p50")} | {"severity": "warning" if r["loud"] else "info"}
                    for r in rows]
    return Finding(
        id="connection-churn", severity="warning" if any(r["loud"] for r in rows) else "info", title=title,
        evidence={
            "application": w["application"], "connections": w["connections"], "opens_per_s": w["opens_per_s"],
            "opens_per_s_peak": w["opens_per_s_peak"], "lifetime_p50_s": w["lifetime_p50_s"],
            "messages_per_connection_p50": w["messages_per_connection_p50"],
            "applications_with_this_finding": n, "applications": applications, "streams": streams,
            "filter": f"{stream_filter(streams)} && {FILTER_OPEN}",
        },
        advice="Open a connection once and keep it for the life of the process (one per application, with a "
               "channel per thread), instead of a connection per message or per task: each open costs a TCP "
               "handshake, an AMQP handshake with authentication and broker memory, and high churn loads the "
               "broker's CPU. RabbitMQ's Connections guide asks to investigate churn consistently above 100 "
               "connections/s.",
        impact=float(w["connections"]) / max(float(len(conns)), 1.0), subjects=subjects)


def _publish_wait_finding(cap: Capture, confirming: pd.DataFrame) -> Finding | None:
    """publish-and-wait: confirm-mode channels that publish one message at a time, each after the
    previous one's confirm, spending most of their time waiting; most waiting first."""
    c = confirming[(confirming["publishes"] >= PUBLISH_WAIT_MIN)
                   & (confirming["sequential_share"] >= PUBLISH_WAIT_SEQUENTIAL)
                   & (confirming["waiting_share"] >= PUBLISH_WAIT_SHARE)]
    if len(c) == 0:
        return None
    c = c.sort_values(["waiting_share", "publishes"], ascending=False, kind="stable")
    w, n = c.iloc[0], len(c)
    cap_rate = 1 / w.confirm_latency_p50_s if w.confirm_latency_p50_s > 0 else None
    limit = "" if cap_rate is None else f", which caps the channel at {cap_rate:,.0f} messages/s"
    numbers = (f"{int(w.publishes):,} publishes, each sent after the previous one's confirm ({w.sequential_share:.0%}); "
               f"{w.waiting_share:.0%} of the time goes to waiting {w.confirm_latency_p50_s * 1e3:.2f} ms per confirm"
               f"{limit}")
    title = (f"{subject(cap, w.stream)['connection']} publishes and waits for each confirm: {numbers}" if n == 1 else
             f"{n} channels publish and wait for each confirm: worst {subject(cap, w.stream)['connection']}, {numbers}")
    subject_of = subject_namer(cap)
    subjects = [subject_of(r.stream, channel=int(r.channel), publishes=int(r.publishes),
                           sequential_share=float(r.sequential_share), waiting_share=float(r.waiting_share),
                           confirm_latency_p50_s=float(r.confirm_latency_p50_s),
                           publish_rate_per_s=None if pd.isna(r.publish_rate_per_s) else float(r.publish_rate_per_s),
                           severity="warning")
                for r in c.itertuples()]
    return Finding(
        id="publish-and-wait", severity="warning", title=title,
        evidence={
            "publishes": int(w.publishes), "sequential_share": float(w.sequential_share),
            "waiting_share": float(w.waiting_share), "confirm_latency_p50_s": float(w.confirm_latency_p50_s),
            "max_rate_per_s": cap_rate,
            "publish_rate_per_s": None if pd.isna(w.publish_rate_per_s) else float(w.publish_rate_per_s),
            "channel": int(w.channel), "channels_with_this_finding": n,
            "streams": sorted({int(s) for s in c["stream"]}), "packets": [int(w.first_packet)],
            "filter": f"{stream_filter(c['stream'])} && {FILTER_CONFIRM}",
        },
        advice="Keep a window of outstanding confirms instead of waiting for each one: publish, and handle the "
               "broker's acks asynchronously (a confirm listener or callback), or publish a batch and wait for "
               "the batch's confirms. With one publish in flight the channel's rate is one message per confirm "
               "round trip; RabbitMQ's Publishers guide calls publish-and-wait an anti-pattern.",
        impact=float(c["waiting_share"].max()), subjects=subjects)


def _channel_churn_finding(cap: Capture, conns: pd.DataFrame, examples: pd.DataFrame) -> Finding | None:
    """channel-churn: connections opening a channel per operation (or 100 a second)."""
    msgs = conns["publishes"] + conns["deliveries"] + conns["gets_ok"]
    per = conns.assign(messages_per_channel=msgs / conns["channels_opened"].where(conns["channels_opened"] > 0, 1))
    limit = per["channel_max"].astype("Float64").fillna(np.nan).to_numpy(float)
    limit = np.where(limit == 0, NO_CHANNEL_MAX, limit)
    per = per.assign(channel_max_share=per["channels_open_peak"] / limit)
    leak = (per["channel_max_share"] >= CHANNEL_LEAK_SHARE).to_numpy(bool)
    churn = ((per["channels_opened"] >= CHANNEL_CHURN_MIN)
             & ((per["messages_per_channel"] <= CHANNEL_FEW_MESSAGES)
                | (per["channel_opens_per_s_peak"] >= CHANNEL_WARN_OPENS_PER_S))).to_numpy(bool)
    per = per.assign(leak=leak)[churn | leak]
    if len(per) == 0:
        return None
    per = per.sort_values(["leak", "channels_opened", "stream"], ascending=[False, False, True], kind="stable")
    w, n = per.iloc[0], len(per)
    rtt = w.channel_open_round_trip_p50_s
    cost = "" if pd.isna(rtt) else f", each open a {rtt * 1e3:.2f} ms round trip"
    numbers = (f"{int(w.channels_opened):,} channels opened ({int(w.channel_opens_per_s_peak)} in its busiest second), "
               f"{w.messages_per_channel:.1f} messages per channel{cost}")
    if w.leak:
        numbers = (f"{int(w.channels_open_peak):,} channels open at once, {w.channel_max_share:.0%} of the negotiated "
                   f"channel_max ({int(w.channel_max) or NO_CHANNEL_MAX:,}); "
                   + numbers)
    doing = "leaks channels (opens them and never closes them)" if w.leak else "opens a channel per operation"
    title = (f"{w.connection} {doing}: {numbers}" if n == 1 else
             f"{n} connections {'leak channels' if w.leak else 'open a channel per operation'}: worst "
             f"{w.connection}, {numbers}")
    subject_of = subject_namer(cap)
    subjects = [subject_of(r.stream, channels_opened=int(r.channels_opened),
                           channel_opens_per_s_peak=int(r.channel_opens_per_s_peak),
                           messages_per_channel=float(r.messages_per_channel),
                           channel_open_round_trip_p50_s=None if pd.isna(r.channel_open_round_trip_p50_s)
                           else float(r.channel_open_round_trip_p50_s), channels_open_peak=int(r.channels_open_peak),
                           channel_max=None if pd.isna(r.channel_max) else int(r.channel_max), leak=bool(r.leak),
                           severity="warning")
                for r in per.itertuples()]
    return Finding(
        id="channel-churn", severity="warning", title=title,
        evidence={
            "channels_opened": int(w.channels_opened), "channel_opens_per_s_peak": int(w.channel_opens_per_s_peak),
            "messages_per_channel": float(w.messages_per_channel),
            "channel_open_round_trip_p50_s": None if pd.isna(rtt) else float(rtt),
            "channels_open_peak": int(w.channels_open_peak),
            "channel_max": None if pd.isna(w.channel_max) else int(w.channel_max), "leak": bool(w.leak),
            **_where(per, examples, "channel.open", FILTER_CHANNEL_OPEN),
        },
        advice="Open channels once and reuse them (one per thread, kept for the connection's life) instead of a "
               "channel per publish or per task: each channel.open is a round trip to the broker and a process "
               "there. RabbitMQ's Channels guide asks to investigate channel churn consistently above 100/s."
               + (" Channels opened and never closed leak: each holds a process and memory on the broker, and "
                  "once channel_max are open the next channel.open fails and RabbitMQ closes the connection "
                  "(530 NOT_ALLOWED). Close every channel you open (a with-block or finally), or reuse a fixed "
                  "set." if per["leak"].any() else ""),
        impact=float(1.0 / max(float(w.messages_per_channel), 1.0)), subjects=subjects)
