"""What the derivations of a slice of a partition's time start from (docs/time-split.md §6).

A partition is cut in slices of its packets when one connection is too large for a worker
(`amqpcap.io.pieces.time_slice`). The derivations (:mod:`amqpcap.derive.methods`,
:mod:`amqpcap.derive.deliveries`) are functions of a `Capture` alone; a slice is a `Capture` of
its own whose ``cap.frames`` start with **replayed rows**: the frames of earlier slices that are
still open at the cut (a delivery not yet settled, the basic.consume a later delivery is matched
to), put again before the slice's own frames (`amqpcap.derive.replay`). The derivations then run
unchanged on them, given the few numbers on ``cap.context.seeds`` (a `Seeds`) that the rows
themselves cannot tell:

- ``order`` stays a position in the slice's ``cap.frames``; the whole partition's position of a
  frame (its *whole order*) is ``offset`` + its position among the slice's own frames, or the
  replayed row's own (`whole_orders`);
- a frame's ``epoch`` (channel.open frames on its channel so far, AMQP 0-9-1 §4.2.4: tag spaces
  restart) counts from the opens of the earlier slices (``opens``); a replayed row keeps its own;
- a publish's confirm sequence number counts from the publishes numbered so far (``numbered``);
- what only the partition's end knows (`Ends`: whether a tag space ever has a client settle, the
  last close of each channel and connection) comes from a first pass over the slices.

Without seeds (a whole partition) every derivation is as before: one code path, of which the
whole partition is the one-slice case.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .columns import codes, value_at

#: a channel: stream · CHANNELS + channel number (channel numbers are 16-bit, AMQP 0-9-1 §4.2.3)
CHANNELS = 65536


def chan_keys(stream: np.ndarray, channel: np.ndarray) -> np.ndarray:
    return np.asarray(stream, np.int64) * CHANNELS + np.asarray(channel, np.int64)


@dataclass(frozen=True)
class Closes:
    """The last close frame (channel.close/-ok, connection.close/-ok) of each closed channel and
    connection, by order: the broker requeues a closed channel's unacked deliveries and forgets
    its unconfirmed publishes."""

    #: channel keys (sorted) and the order of each one's last channel.close or channel.close-ok
    channels: np.ndarray
    channel_orders: np.ndarray
    #: streams (sorted) and the order of each one's last connection.close or connection.close-ok
    connections: np.ndarray
    connection_orders: np.ndarray

    @classmethod
    def of(cls, stream: np.ndarray, channel: np.ndarray, order: np.ndarray) -> "Closes":
        """The last of the close frames on `stream`, `channel` (0: the connection's) at `order`."""
        conn = channel == 0
        chan, chan_order = last_per_key(chan_keys(stream[~conn], channel[~conn]), order[~conn])
        streams, conn_order = last_per_key(stream[conn], order[conn])
        return cls(chan, chan_order, streams, conn_order)

    def after(self, stream: np.ndarray, key: np.ndarray, order: np.ndarray) -> np.ndarray:
        """Whether the channel `key` (or connection `stream`) of each frame at `order` closes
        after it."""
        return ((order < value_at(self.connections, self.connection_orders, stream, -1))
                | (order < value_at(self.channels, self.channel_orders, key, -1)))

    def joined(self, other: "Closes") -> "Closes":
        """The last closes of both (of a slice and of the slices before it)."""
        chan, chan_order = last_per_key(np.r_[self.channels, other.channels],
                                       np.r_[self.channel_orders, other.channel_orders])
        conn, conn_order = last_per_key(np.r_[self.connections, other.connections],
                                       np.r_[self.connection_orders, other.connection_orders])
        return Closes(chan, chan_order, conn, conn_order)


def last_per_key(key: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct keys (sorted) and each one's greatest order."""
    uniq, inv = np.unique(np.asarray(key, np.int64), return_inverse=True)
    last = np.full(len(uniq), -1, dtype=np.int64)
    np.maximum.at(last, inv.ravel(), np.asarray(order, np.int64))
    return uniq, last


@dataclass(frozen=True)
class Ends:
    """What the whole partition knows and a slice cannot see yet, in whole orders (a first pass
    over the slices: `amqpcap.derive.replay.ends_of`)."""

    #: tag spaces with a client basic.ack/nack/reject anywhere, as sorted unique (channel key,
    #: epoch) pairs: a consumer whose basic.consume is not in the capture is taken as no-ack when
    #: its channel never settles (`amqpcap.derive.deliveries.deliveries_with_codes`)
    settled_keys: np.ndarray
    settled_epochs: np.ndarray
    closes: Closes

    def settles(self, key: np.ndarray, epoch: np.ndarray) -> np.ndarray:
        """Whether each tag space (channel key, epoch) has a client settle anywhere."""
        return _pair_lookup(self.settled_keys, self.settled_epochs, np.ones(len(self.settled_keys), bool),
                            key, epoch, False)


def _pair_lookup(keys: np.ndarray, epochs: np.ndarray, values: np.ndarray, key: np.ndarray, epoch: np.ndarray,
                 default) -> np.ndarray:
    """`values` of the sorted unique pairs (keys, epochs) at each (key, epoch), `default` where
    the pair is absent: both sides coded together (`codes` numbers pairs in sorted order, so the
    table's codes are sorted too)."""
    code = codes(np.r_[np.asarray(keys, np.int64), np.asarray(key, np.int64)],
                 np.r_[np.asarray(epochs, np.int64), np.asarray(epoch, np.int64)])
    return value_at(code[:len(keys)], np.asarray(values), code[len(keys):], default)


def _none() -> np.ndarray:
    return np.zeros(0, np.int64)


def _no_acks() -> pd.DataFrame:
    return pd.DataFrame({"settled": _none(), "queue": np.zeros(0, object), "unacked_after": _none()})


@dataclass(frozen=True)
class Replay:
    """What a slice leaves to the next one's derivations (`amqpcap.derive.replay.replay_after`);
    the default: nothing, before the first slice."""

    #: the frames to replay (rows of cap.frames in whole order; all method frames; text columns
    #: as text: a slice read from a dataset has categories of its own rows)
    rows: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: per row, its whole order, its epoch, its confirm sequence number (0: not one), and
    #: whether it is an item not told yet (a delivery not settled, a publish not confirmed, a
    #: basic.consume not answered, an ack waiting for the next delivery: told by the slice where
    #: it is final, `amqpcap.derive.replay.told`) rather than a row later frames are matched to
    #: (a basic.consume, a confirm.select, a basic.qos)
    orders: np.ndarray = field(default_factory=_none)
    epochs: np.ndarray = field(default_factory=_none)
    seqs: np.ndarray = field(default_factory=_none)
    pending: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    #: per row, its rank among its packet's frames (its frame key is (packet, rank):
    #: `amqpcap.derive.backlog.frame_keys`)
    ranks: np.ndarray = field(default_factory=_none)
    #: per row, what `amqpcap.derive.ack_rows.ack_rows` said of it when it is an ack waiting for
    #: the next delivery (columns settled, queue, unacked_after; settled -1 for the other rows):
    #: the deliveries it settled are not replayed
    acks: pd.DataFrame = field(default_factory=_no_acks)
    #: the consumers in a current tag space so far (`amqpcap.derive.consumers.consumers_so_far`
    #: of the slice: start orders whole, text as text): a consumer's row is final only once its
    #: tag space ends (a later delivery to it adds to its count)
    consumers: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: each consumer's last state row so far when its next row (or its end) is not known yet
    #: (`amqpcap.derive.consumers.consumer_state`'s columns and ``_order``, its frame's whole
    #: order), and the most deliveries each consumer held unacknowledged so far (CONSUMER and
    #: max_unacked): an estimated prefetch is the most of its whole life
    state_rows: pd.DataFrame = field(default_factory=pd.DataFrame)
    state_maxima: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: whole order of the next slice's first own frame
    offset: int = 0
    #: channel.open frames per channel key so far (keys sorted)
    open_keys: np.ndarray = field(default_factory=_none)
    open_counts: np.ndarray = field(default_factory=_none)
    #: publishes numbered so far per current tag space (channel key, epoch; sorted)
    numbered_keys: np.ndarray = field(default_factory=_none)
    numbered_epochs: np.ndarray = field(default_factory=_none)
    numbered_counts: np.ndarray = field(default_factory=_none)


@dataclass(frozen=True)
class Seeds:
    """A slice's start (see the module doc): what the slice before left (its rows are at the
    head of cap.frames) and what the first pass found."""

    replay: Replay
    ends: Ends | None = None

    @property
    def replayed(self) -> int:
        """How many rows at the head of cap.frames are replayed."""
        return len(self.replay.rows)

    def whole_orders(self, order: np.ndarray) -> np.ndarray:
        """The whole partition's order of the frames at positions `order` of the slice's frames."""
        order = np.asarray(order, np.int64)
        own = order >= self.replayed
        return np.where(own, order - self.replayed + self.replay.offset,
                        self.replay.orders[np.where(own, 0, order)] if self.replayed else 0)

    def epochs_of(self, key: np.ndarray, opened: np.ndarray, order: np.ndarray, counted) -> np.ndarray:
        """The epoch of each method frame (channel key `key`, whether it is a channel.open,
        position `order`): a replayed frame's own, an own frame's the opens before the slice
        plus ``counted(key, opened)`` of the slice's own frames up to it."""
        own = order >= self.replayed
        epoch = np.empty(len(key), np.int64)
        epoch[~own] = self.replay.epochs[order[~own]]
        epoch[own] = value_at(self.replay.open_keys, self.replay.open_counts, key[own], 0) + counted(key[own], opened[own])
        return epoch

    def numbered_before(self, key: np.ndarray, epoch: np.ndarray) -> np.ndarray:
        """Publishes of each tag space numbered in the slices before (0 for a new one)."""
        r = self.replay
        return _pair_lookup(r.numbered_keys, r.numbered_epochs, r.numbered_counts, key, epoch, 0)


def seeds_of(cap) -> Seeds | None:
    """The seeds of a slice (None: a whole partition)."""
    return cap.context.seeds
