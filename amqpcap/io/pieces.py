"""Pieces of an in-memory capture that the steps of an analyzer are run over: its facts (what every
step knows of the whole capture before it starts) and a slice of its time (docs/time-split.md).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..model.facts import CaptureFacts, facts_from_ts, ns
from .load import Capture


def facts_of(cap: Capture) -> CaptureFacts:
    """The facts of an in-memory capture (its records' time span, its packets' first time)."""
    p = ns(cap.packets["ts"])
    return facts_from_ts(ns(cap.records["ts"]), int(p.min()) if len(p) else 0)


def time_slice(cap: Capture, first: int, end: int | None) -> Capture:
    """The partition `cap` from packet `first` up to packet `end` (excluded; None: to the end): its
    packets, frames and anomalies of those packets, the bodies of the messages whose last packet
    is there; the connections and summary whole (a slice's steps read each connection's facts)."""
    def rows(df: pd.DataFrame | None, column: str) -> pd.DataFrame | None:
        if df is None or column not in df:
            return df
        packet = df[column].to_numpy(np.int64, na_value=0)  # (a file-level anomaly: the first slice)
        keep = (packet >= first) & (packet < end if end is not None else True)
        return df[keep].reset_index(drop=True)

    return Capture(path=cap.path, ports=cap.ports, frames=rows(cap.frames, "packet"),
                   packets=rows(cap.packets, "packet"), connections=cap.connections,
                   anomalies=rows(cap.anomalies, "packet"), records=cap.records.iloc[:0],
                   bodies=rows(cap.bodies, "last_packet"), summary=cap.summary,
                   amqp10_frames=rows(cap.amqp10_frames, "packet"))
