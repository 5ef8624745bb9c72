"""The method frames of a capture, each with its tag space: the table every question about
deliveries, acks, consumers and confirms starts from.

Ordering. Frames are compared by their position in ``cap.frames`` (``order``: the order in which
the capture completed them), not by timestamp: files with out-of-order timestamps (pcapng with
per-interface batches) still give a consistent "before/after". Latencies are differences of the
frames' ``ts``. Positions and dense codes are relative to the capture they were computed on.

Tag spaces. Delivery tags are per channel and count from 1 (AMQP 0-9-1 §1.8.3.13 ``basic.ack``;
§4.2.4 channels); publish sequence numbers count from 1 after ``confirm.select`` on a channel
(RabbitMQ publisher confirms). Both restart when the channel is opened again, so every frame gets
an ``epoch``: the number of ``channel.open`` frames seen on that (stream, channel) so far. The key
of a tag space is (stream, channel, epoch). In a slice of a partition's time the epochs count
on from the slices before (:mod:`amqpcap.derive.seeds`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..io.load import Capture
from .cache import CONNECTION, derivation
from .columns import codes, group_cumsum
from .seeds import seeds_of

#: a tag space: delivery tags and publish sequence numbers count per channel opening
KEY = ["stream", "channel", "epoch"]


@derivation(CONNECTION)
def methods(cap: Capture) -> pd.DataFrame:
    """Method frames: stream, channel, epoch (see module doc), space (dense code of the tag space
    (stream, channel, epoch), in sorted order), order (position in cap.frames), method, direction.

    Only these few columns: the others are needed on small subsets (a few thousand basic.qos or
    basic.consume rows) or as codes, so :func:`pick` takes them from cap.frames for the selected
    rows only, where copying 18 columns of every method frame cost more than all the matching.
    ``method`` and ``direction`` stay categorical (as in cap.frames): compared on their codes."""
    f = cap.frames
    order = np.flatnonzero((f["type"] == "method").to_numpy(dtype=bool, na_value=False))
    stream = f["stream"].to_numpy(np.int64)[order]
    channel = f["channel"].to_numpy(np.int64)[order]
    m = pd.DataFrame({"stream": stream, "channel": channel, "order": order.astype(np.int64),
                      "method": f["method"].array.take(order), "direction": f["direction"].array.take(order)})
    key, opened = stream * 65536 + channel, select(m, "channel.open")
    seeds = seeds_of(cap)
    m["epoch"] = _epochs(key, opened) if seeds is None else seeds.epochs_of(key, opened, order, _epochs)
    m["space"] = codes(stream, channel, m["epoch"].to_numpy())
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


def chan_key(df: pd.DataFrame) -> np.ndarray:
    """(stream, channel) as one int64 (channel numbers are 16-bit, AMQP 0-9-1 §4.2.3)."""
    return df["stream"].to_numpy(np.int64) * 65536 + df["channel"].to_numpy(np.int64)


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
