"""What every step over part of a capture knows about the whole of it, and where its time may be
cut into slices (docs/time-split.md)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


def ns(ts: pd.Series) -> np.ndarray:
    """Timestamps as int64 nanoseconds since the epoch (whole column, no per-row objects): the
    time axis every fact below and every derivation counts in."""
    return np.asarray(ts.dt.as_unit("ns").array.asi8, dtype=np.int64)


@dataclass(frozen=True)
class CaptureFacts:
    """What a partition's step knows about the whole capture."""

    #: earliest and latest record timestamp (ns since the epoch; records may be out of order in
    #: a file), 0 and 0 for a capture without records
    t0_ns: int
    t1_ns: int
    #: earliest timestamp of the AMQP connections' packets (the `packets` table), 0 without
    #: packets: the origin of the stalls analyzer's seconds, which every partition must share
    #: for its float seconds to be the whole capture's
    packets_t0_ns: int = 0
    #: records of the file (the largest packet number), 0 when unknown: where the queue backlogs'
    #: cells of packets are cut (`amqpcap.derive.backlog_join`)
    records: int = 0

    @property
    def duration_s(self) -> float:
        return (self.t1_ns - self.t0_ns) / 1e9


def facts_from_ts(ts_ns: np.ndarray, packets_t0_ns: int = 0) -> CaptureFacts:
    """The facts of a capture whose records' timestamps are `ts_ns` (every record's, in order)."""
    if not len(ts_ns):
        return CaptureFacts(0, 0, packets_t0_ns)
    return CaptureFacts(int(ts_ns.min()), int(ts_ns.max()), packets_t0_ns, len(ts_ns))


def clean_cuts(packet: np.ndarray, ts_ns: np.ndarray, every: int) -> list[int]:
    """Packet numbers at which a partition whose packets are `packet` (in packet order) with
    times `ts_ns` may be cut into slices of about `every` packets: the first clean cut at or after
    each multiple of `every` rows, a clean cut being a packet that no earlier packet follows in
    time (the prefix's latest ts ≤ the suffix's earliest). Captures put a packet out of time order
    now and then (a pcapng of several interfaces, a clock step); no cut falls inside one."""
    packet, ts_ns = np.asarray(packet, np.int64), np.asarray(ts_ns, np.int64)
    n = len(packet)
    if n < 2 or every < 1:
        return []
    latest_before = np.maximum.accumulate(ts_ns)[:-1]
    earliest_from = np.minimum.accumulate(ts_ns[::-1])[::-1][1:]
    clean = np.flatnonzero(latest_before <= earliest_from) + 1  # (row i: a cut before row i)
    wanted = np.arange(every, n, every)
    at = np.searchsorted(clean, wanted)
    rows = np.unique(clean[at[at < len(clean)]])
    return packet[rows].tolist()
