"""The nagle analyzer: a step per partition of whole connections (over slices of its time when it is
large) and a merge that derives the table, findings and plots.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ...analysis.registry import AnalyzerResult, Plot, analyzer
from ...io.load import Capture
from ...analysis.partition import Slicing, Split, run_whole
from ...io.rows import merge_rows
from ...model.facts import CaptureFacts
from .carry import _Carry
from .directions import _slice, nagle_join
from .findings import nagle_finding, small_packets_finding
from .plots import _plot_small_share, _plot_stalls


def nagle_slice(part: Capture, facts: CaptureFacts, carry: _Carry | None, last: bool) -> tuple[_Carry, dict[str, Any]]:
    """A slice of a partition's time (`amqpcap.analysis.partition.Slicing`): the carry moved past its
    packets, and its piece of the partial (`nagle_join`)."""
    _, carry, piece = _slice(part, carry, last)
    return carry, piece


def nagle_partial(cap: Capture, facts: CaptureFacts) -> dict[str, Any]:
    """A partition's directions and stalls, and the segments in coalescable runs that a finding
    may cite: the partition as its one slice of time."""
    return nagle_join([nagle_slice(cap, facts, None, True)[1]])


def nagle_merge(partials: list[dict[str, Any]], records: None, facts: CaptureFacts, cap: Capture) -> AnalyzerResult:
    """Directions and stalls of all partitions; the findings and summary from them."""
    d = merge_rows([q["directions"] for q in partials], ["stream", "direction"])
    stalls = merge_rows([q["stalls"] for q in partials], ["stream", "direction", "packet"])
    runs = pd.DataFrame({k: np.concatenate([q["runs"][k] for q in partials]) for k in ("g", "packet", "_rank")})
    runs = runs.sort_values(["g", "_rank"], kind="stable")
    seg = {"g": runs["g"].to_numpy(), "packet": runs["packet"].to_numpy(), "in_run": np.ones(len(runs), bool)}
    findings = [f for f in (small_packets_finding(cap, seg, d), nagle_finding(cap, d, stalls)) if f is not None]
    summary: dict[str, Any] = {
        "nagle": {
            "data_segments": int(d["data_segments"].sum()),
            "small_segments": int(d["small_segments"].sum()),
            "small_while_unacked": int(d["small_while_unacked"].sum()),
            "packets_saved": int(d["packets_saved"].sum()),
            "stalls": int(len(stalls)),
            "stall_time_s": float(stalls["stall_s"].sum()) if len(stalls) else 0.0,
            "median_stall_s": float(stalls["stall_s"].median()) if len(stalls) else None,
        }
    }
    plots = [Plot("nagle-small-segments", "Small segments per connection direction", _plot_small_share(cap, d))]
    if len(stalls):
        plots.append(Plot("nagle-stalls", "Nagle / delayed-ACK stalls", _plot_stalls(stalls)))
    return AnalyzerResult("nagle", tables={"directions": d.drop(columns=["broker_port"]), "stalls": stalls},
                          summary=summary, findings=findings, plots=plots)


SPLIT = Split(partial=nagle_partial, merge=nagle_merge, slicing=Slicing(nagle_slice, nagle_join))


@analyzer("nagle", split=SPLIT)
def nagle(cap: Capture) -> AnalyzerResult:
    """Small TCP segments, unbatched writes and Nagle/delayed-ACK stalls per connection direction."""
    return run_whole(SPLIT, cap)
