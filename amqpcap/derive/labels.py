"""Connections and channels as tables and findings name them: the per-row labels of the tables,
a finding's Wireshark filter on channels, and its subjects as a title lists them.

Names come from `amqpcap.derive.names` (one rule for all of them); nothing here is kept on the capture.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..model.display_filters import FilterPart, streams_part
from ..io.load import Capture
from .names import connection_names


def connection_labels(cap: Capture | None, streams) -> np.ndarray:
    """The connection label (`amqpcap.derive.names.connection_names`: its connection_name, else client
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


def channels_filter(streams, channels) -> FilterPart:
    """Wireshark display filter for the (stream, channel) pairs of a finding's subjects: the
    streams (`amqpcap.model.display_filters.streams_part`, with how many of them it names), and the
    channel when they all share one. Channels of different streams cannot be paired in one short
    filter; the methods a finding adds narrow it."""
    chans = {int(c) for c in channels}
    return streams_part(streams, then=f" && amqp.channel == {chans.pop()}" if len(chans) == 1 else "")


def who(labels: list[str], shown: int = 2) -> str:
    """A finding's subjects as its title names them, worst first: `a`, `a and b`,
    `a, b and 3 more` (the subjects list names every one)."""
    labels = [str(x) for x in labels]
    if len(labels) <= shown:
        return " and ".join(labels)
    return f"{', '.join(labels[:shown])} and {len(labels) - shown} more"
