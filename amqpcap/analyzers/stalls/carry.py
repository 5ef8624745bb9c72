"""What one slice of a partition's time carries to the next (docs/time-split.md §2.9): `_Carry`,
made by `amqpcap.analyzers.stalls.step`, read by the causes and the tables built from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...io.load import Capture
from .intervals import _Cover
from .plots import _PlotPoints
from .tcp_state import _Seen, _seen_before


#: the cause states whose time inside a stall is its evidence (each a `_Cover` carried from one
#: slice of time to the next), and the events counted inside it (closed at its end, or not)
COVERED = ("window_s", "flow_s", "prefetch_s", "confirm_s")
COUNTED = (("gaps_n", True), ("zero_window_n", True), ("retrans_n", False))


@dataclass
class _Carry:
    """What one slice of a partition's time leaves to the next (docs/time-split.md §2.9): the
    TCP state (`_Seen`), and per connection direction (slots) the cause states' covered time so
    far (`covers`, and ``block``: connection.blocked, for the window findings), each at the start
    of the direction's open silence (`at_start`), the events since that start (`since`, with the
    latest one's time and how many at it); per connection its latest packet's time, whether it
    carried a basic.deliver, its publishes, the earliest publish its channel opened again left
    unconfirmed; the open blocks, the channel.flow stops, the segments of the last moments
    (retransmissions' first copies). The publishes awaiting a confirm are not here: the
    derivations replay them (`amqpcap.derive.replay`). Bounded by the connections and channels,
    but for the protocol window `_Seen.unacked` and the segments of 2·DUPLICATE_S."""

    seen: _Seen
    covers: dict
    at_start: dict
    since: dict
    since_t: dict
    since_at_t: dict
    last_t: np.ndarray
    delivers: np.ndarray
    publishes: np.ndarray
    zw_in_block: np.ndarray
    open_blocks: pd.DataFrame | None
    flows: pd.DataFrame | None
    #: per connection, the earliest publish left without a confirm when its channel opened
    #: again (`_confirm_outstanding`: awaited to the connection's end)
    confirms: pd.Series | None
    recent: pd.DataFrame | None
    #: per slot: window-limited time outside connection.blocked so far, and the blocked time
    #: covered at the start of the limited interval `_Seen.limited_from`
    outside: np.ndarray
    block_at_limited: np.ndarray
    #: per slot: the zero windows its peer advertised and the window-full segments it sent, so
    #: far (the findings cite the first ones)
    cited: dict
    #: the window plot's points so far (`_plot_bins`): at most PLOT_FINE_BINS per direction (None
    #: for a partition that is its one slice: its join gathers the drawn directions' only)
    plot: "_PlotPoints | None" = None
    #: the partition's AMQP 1.0 frames of the slices so far (none without AMQP 1.0): its last
    #: slice derives the 1.0 cause states from them all (`amqp10.amqp10_states`). Grows with the
    #: partition's 1.0 frames, as the amqp10 analyzer's state does.
    amqp10: list = field(default_factory=list)

    @classmethod
    def nothing(cls, part: Capture) -> "_Carry":
        seen = _seen_before(part, None)
        n, m = 2 * len(seen.stream), len(seen.stream)
        return cls(seen, {k: _Cover.nothing(n) for k in (*COVERED, "block")}, {k: np.zeros(n) for k in COVERED},
                   {k: np.zeros(n, np.int64) for k, _ in COUNTED}, {k: np.full(n, np.nan) for k, _ in COUNTED},
                   {k: np.zeros(n, np.int64) for k, _ in COUNTED}, np.full(m, np.nan), np.zeros(m, bool),
                   np.zeros(m, np.int64), np.zeros(m, np.int64), None, None, None, None, np.zeros(n), np.zeros(n),
                   {"zero-window": np.zeros(n, np.int64), "window-full": np.zeros(n, np.int64)})
