"""Synchronous requests and their answers (AMQP 0-9-1 §2.3.4: at most one outstanding per channel):
round-trip times, requests still waiting at a slice's end, the packets a finding cites, the
queues a connection declared.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from ...io.load import Capture
from ...derive.columns import group_cumsum
from ...derive.methods import select
from ...derive.seeds import chan_keys
from .constants import EXAMPLE_PACKETS
from .state import _NONE, _Seen, _Waiting


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
