"""The stalls' context round: what a partition's step needs of other partitions (the blocks the broker
told, estimated consumers' whole-life prefetch), over slices of a partition's time too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...io.load import Capture
from ...derive import consumers as credit
from ...derive.columns import as_object
from ...derive.replay import for_derivations
from ...derive.stream_order import seconds
from ...model.facts import ns
from ...analysis.contract import Carried, Need, Steps
from ...analysis.partition import PerPartition
from ...model.facts import CaptureFacts
from .causes import _blocked, _frames
from .constants import BLOCK_METHODS
from .intervals import _empty_iv


def _origin(facts: CaptureFacts) -> pd.Timestamp:
    """Time zero of the analyzer's seconds: the capture's first AMQP packet, one for every
    partition, so that their float seconds are those of the whole capture."""
    return pd.Timestamp(facts.packets_t0_ns, unit="ns", tz="UTC")


def _stream_ends(cap: Capture, t0_ns: int, streams: np.ndarray) -> pd.Series:
    """Seconds of each stream's last packet in time (index: stream): the last row of the stream
    in `_packets` (seconds grow with the nanoseconds they are made from)."""
    s = cap.packets["stream"].to_numpy(np.int64)
    mine = np.isin(s, streams)
    last = pd.Series(ns(cap.packets["ts"])[mine]).groupby(s[mine]).max()
    return pd.Series(seconds(last.to_numpy(np.int64) - t0_ns), index=last.index)


@dataclass(frozen=True)
class StallsContext:
    """What a partition's stalls step needs to know beyond its own slice of time (the context
    round: `BLOCKS`)."""

    #: connection.blocked intervals (start, end: seconds from `_origin`): a partition's own, in
    #: its context; every partition's, once joined. A resource alarm blocks the publishers, and
    #: starves the consumers of every other connection.
    blocks: pd.DataFrame
    #: the partition's consumers whose prefetch is estimated (neither basic.qos nor basic.consume
    #: in the capture: started before it) with the most deliveries each held unacknowledged over
    #: its whole life (CONSUMER, max_unacked), their prefetch (`consumers.with_final_prefetch`):
    #: a slice of the partition's time knows only the most so far
    maxima: pd.DataFrame


#: the columns of the blocks in a context; the maxima of no consumer
_BLOCK_COLUMNS = ["start", "end"]
_NO_MAXIMA = pd.DataFrame({"stream": pd.Series(dtype=np.int64), "channel": pd.Series(dtype=np.int64),
                           "epoch": pd.Series(dtype=np.int64), "consumer_tag": pd.Series(dtype=object),
                           "max_unacked": pd.Series(dtype=np.int64)})


@dataclass(frozen=True)
class _ContextCarry:
    """What the context step over one slice of a partition's time leaves to the next
    (`stalls_context_slice`). Bounded by the connections and their consumers."""

    #: the connection.blocked rows of the blocks not lifted yet (`_blocked`'s ``before``), and
    #: the seconds of the latest packet so far of their connections (a block never lifted ends
    #: at its connection's last packet)
    open_blocks: pd.DataFrame | None = None
    last_t: pd.Series = field(default_factory=lambda: pd.Series(dtype=float))
    #: the consumers with an estimated prefetch so far and the most each held unacknowledged
    maxima: pd.DataFrame = field(default_factory=lambda: _NO_MAXIMA)


def stalls_context_slice(part: Capture, facts: CaptureFacts, carry: _ContextCarry | None,
                         last: bool) -> tuple[_ContextCarry, dict]:
    """The first round's step over a slice of a partition's time (a whole partition is its own
    one slice): the blocks it tells (lifted here, or every one at the
    `last` slice) with their stream and connection.blocked packet (their place in the whole's
    order), and at the last slice the consumers' maxima."""
    carry = carry or _ContextCarry()
    blocks, open_blocks, last_t = _blocks_told(part, facts, carry, last)
    maxima = _estimated_maxima(part, carry.maxima)
    return _ContextCarry(open_blocks, last_t, maxima), {"blocks": blocks, "maxima": maxima if last else None}


def stalls_context_join(pieces: list[dict]) -> StallsContext:
    """The partition's context from its slices' pieces (`stalls_context_slice`), in their order:
    the blocks in the whole's order (by stream, start, then frame: as `_blocked` gives them)."""
    told = [p["blocks"] for p in pieces if len(p["blocks"])]
    if not told:
        return StallsContext(_empty_iv(_BLOCK_COLUMNS), pieces[-1]["maxima"])
    b = pd.concat(told, ignore_index=True)
    by = np.lexsort((b["blocked_packet"].to_numpy(np.int64), b["start"].to_numpy(float), b["stream"].to_numpy(np.int64)))
    return StallsContext(b[_BLOCK_COLUMNS].iloc[by].reset_index(drop=True), pieces[-1]["maxima"])


def _blocks_told(part: Capture, facts: CaptureFacts, carry: _ContextCarry,
                 last: bool) -> tuple[pd.DataFrame, pd.DataFrame | None, pd.Series]:
    """The blocks the slice `part` tells (stream, blocked_packet, start, end), the
    connection.blocked rows of those still holding at its end and their connections' latest
    packet time so far (`_ContextCarry`)."""
    fr, f, _ = _frames(part, _origin(facts), BLOCK_METHODS)
    before = carry.open_blocks
    if fr.empty and before is None:
        return _empty_iv(["stream", "blocked_packet", *_BLOCK_COLUMNS]), None, carry.last_t
    streams = np.union1d(fr["stream"].to_numpy(np.int64),
                         before["stream"].to_numpy(np.int64) if before is not None else np.zeros(0, np.int64))
    # (seconds grow with the nanoseconds they are made from: the latest of the slices' latest)
    last_t = pd.concat([carry.last_t, _stream_ends(part, facts.packets_t0_ns, streams)]).groupby(level=0).max()
    # a block not lifted at the slice's end lasts to a time a later slice tells (inf), at the
    # partition's last slice to its connection's last packet
    blocked = _blocked(part, fr, f, last_t if last else pd.Series(np.inf, index=last_t.index), before)
    told = np.isfinite(blocked["end"].to_numpy(float)) | last
    still = blocked[~told]
    open_blocks = None if not len(still) else pd.DataFrame({
        "packet": still["blocked_packet"].to_numpy(np.int64), "stream": still["stream"].to_numpy(np.int64),
        "d": np.int8(1), "t": still["start"].to_numpy(float), "channel": 0, "method": "connection.blocked",
        "reason": still["reason"].to_numpy(object)})
    return (blocked.loc[told, ["stream", "blocked_packet", *_BLOCK_COLUMNS]].reset_index(drop=True), open_blocks,
            last_t[last_t.index.isin(still["stream"].to_numpy())])


def _estimated_maxima(part: Capture, before: pd.DataFrame) -> pd.DataFrame:
    """The consumers of the slice `part` (as the derivations see it) whose prefetch is estimated,
    with the most deliveries each held unacknowledged so far (`consumer_state_with_codes`' own
    maxima: with the slices' before), and those the slices `before` found (CONSUMER and
    max_unacked, sorted by consumer). The consumer state is computed only when there is one."""
    view = for_derivations(part)
    c = credit.consumer_rows(view)
    est = c[~c["qos_seen"].to_numpy(bool) & ~c["consume_seen"].to_numpy(bool)]
    if not len(est):
        return before
    at = credit.code_of(credit.acked_deliveries(view).keys, est)
    most = credit.consumer_state_with_codes(view).max_unacked
    known = at >= 0  # (not: a consumer the slices before saw, with nothing of it in this one)
    known[known] = most[at[known]] > np.iinfo(np.int64).min
    now = est.loc[known, credit.CONSUMER].assign(max_unacked=most[at[known]])
    both = pd.concat([t for t in (before, as_object(now, "consumer_tag")) if len(t)] or [_NO_MAXIMA], ignore_index=True)
    out = both.groupby(credit.CONSUMER, as_index=False, sort=True)["max_unacked"].max()
    return out.astype(_NO_MAXIMA.dtypes.to_dict())


def stalls_join(contexts: list[StallsContext]) -> PerPartition:
    """Each partition's context joined: every partition's blocks, as one table, and its own
    consumers' maxima."""
    told = [x.blocks for x in contexts if len(x.blocks)]
    blocks = pd.concat(told, ignore_index=True) if told else _empty_iv(_BLOCK_COLUMNS)
    return PerPartition([StallsContext(blocks, x.maxima) for x in contexts])


class BlocksRound(Steps[Carried, StallsContext]):
    """What every partition needs of this one: its connections' connection.blocked intervals,
    and what its own step needs of its whole time: the lifetime maxima of its consumers with an
    estimated prefetch (`StallsContext`)."""

    reads_derivations = True

    def start(self, facts: CaptureFacts) -> Carried:
        return Carried()

    def step(self, state: Carried, rows: Capture, facts: CaptureFacts, last: bool) -> Carried:
        return state.then(*stalls_context_slice(rows, facts, state.carry, last))

    def close(self, state: Carried, rows: Capture, facts: CaptureFacts) -> StallsContext:
        return stalls_context_join(state.pieces)


#: what the stalls' step needs of every partition (``uses = BLOCKS``): the blocks the broker told
#: on any connection, and its own consumers' whole-life maxima, as a `StallsContext`
BLOCKS = Need("blocks and estimated prefetches", BlocksRound(), stalls_join)
