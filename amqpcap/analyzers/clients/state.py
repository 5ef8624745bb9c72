"""What a partition's frames so far leave to the next slice of its time (`_Seen`), what a slice
tells (`_Piece`), and what only the partition's last slice knows (`_Final`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .constants import COUNTED, EXAMPLES, ROUND_TRIPS


_NONE = np.zeros(0, np.int64)


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
    #: each connection's first and last basic.deliver so far (ts in ns; the int64 maximum and
    #: minimum: none yet), the span of its `delivered_msgs_per_s`
    first_deliver: np.ndarray
    last_deliver: np.ndarray

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
                   queues={}, last_consume=np.full(n, -1, np.int64),
                   first_deliver=np.full(n, np.iinfo(np.int64).max), last_deliver=np.full(n, np.iinfo(np.int64).min))


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
