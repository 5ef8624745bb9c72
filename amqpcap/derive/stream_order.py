"""Per-packet TCP columns in (stream, packet) order, read by the stalls and nagle analyzers.

Both analyzers walk each connection's packets in order and look up the peer's state (its
cumulative ACK, window, last packet) with running maxima. Putting the packets table in stream
order (a stable argsort: cap.packets is already in packet order) and taking each column costs
tens of milliseconds on a million packets, so it is done once per Capture (`stream_order`).
Columns are taken lazily: each analyzer only pays for the ones it reads.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..io.load import Capture
from ..model.facts import ns
from .cache import CONNECTION, derivation


def seconds(delta_ns: np.ndarray) -> np.ndarray:
    """int64 nanosecond differences as float seconds, bit-identical to pandas' total_seconds()
    (which splits whole seconds and the remainder before dividing)."""
    return pd.TimedeltaIndex(np.asarray(delta_ns, np.int64).view("m8[ns]")).total_seconds().to_numpy()


class StreamOrder:
    """The packets table's columns in (stream, packet) order, as numpy arrays, taken on first use.

    `o` maps a row here to its row in cap.packets. Columns keep the packets table's dtypes
    (int32 stays int32: half the memory traffic of int64 in every later operation); `s2c` and
    `retransmission` are bool, `ts` int64 nanoseconds. `hi` is the stream number shifted into the
    high bits of an int64 (see running_max_keyed), computed once for both analyzers."""

    _NATIVE = ("stream", "packet", "payload_bytes", "seq", "ack", "flags", "window", "frames_ended", "retransmission")

    def __init__(self, packets: pd.DataFrame):
        self._p = packets
        stream = packets["stream"].to_numpy(copy=False)
        # A stable sort by stream keeps packet order inside a stream. With fewer than 65 536
        # streams (the usual case) the keys fit uint16, for which numpy's stable sort is a radix
        # sort: a few times faster than the merge sort it uses for wider integers.
        if len(stream) and 0 <= stream.min() and stream.max() < 1 << 16:
            self.o = np.argsort(stream.astype(np.uint16), kind="stable")
        else:
            self.o = np.argsort(stream, kind="stable")
        self._cols: dict[str, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.o)

    def __getitem__(self, name: str) -> np.ndarray:
        col = self._cols.get(name)
        if col is None:
            p = self._p
            if name == "s2c":  # compared on the categorical's codes, not its strings
                dirs = p["direction"].array
                col = (dirs.codes == dirs.categories.get_loc("s2c"))[self.o]
            elif name == "ts":
                col = ns(p["ts"])[self.o]
            elif name == "hi":
                col = self["stream"].astype(np.int64) << HI_SHIFT
            elif name in self._NATIVE:
                col = p[name].to_numpy(copy=False)[self.o]
            else:
                raise KeyError(name)
            self._cols[name] = col
        return col


@derivation(CONNECTION)
def stream_order(cap: Capture) -> StreamOrder:
    """The stream-ordered packet columns of `cap`."""
    return StreamOrder(cap.packets)


def running_last(mask: np.ndarray) -> np.ndarray:
    """For each position, the index of the last position at or before it where ``mask`` holds
    (-1 if none): one `maximum.accumulate`, no loop."""
    return np.maximum.accumulate(np.where(mask, np.arange(len(mask)), -1)) if len(mask) else np.zeros(0, np.int64)


#: running_max_keyed: stream numbers go above bit 40, values (sequence/ack numbers, < 2³²) below.
HI_SHIFT = np.int64(40)


def running_max_keyed(keyed: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Running max over the masked rows of ``keyed``: non-negative values (< 2⁴⁰) plus the
    row's StreamOrder["hi"] (its stream in the high bits), so one `maximum.accumulate` never
    carries a value across streams (rows sorted by stream); -1 before the first masked row. A
    result below the row's own key means the stream has no masked row yet."""
    if not len(keyed):
        return np.zeros(0, np.int64)
    return np.maximum.accumulate(np.where(mask, keyed, -1))
