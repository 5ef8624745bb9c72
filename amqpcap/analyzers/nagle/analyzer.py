"""The nagle analyzer: a step over rows (a partition of whole connections, or a slice of its time)
carrying each direction's `_Carry`, and a finish that derives the table, findings and plots.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ...analysis.registry import AnalyzerResult, Plot, analyzer
from ...io.load import Capture
from ...analysis.contract import Analyzer, Carried
from ...io.rows import merge_rows
from ...model.facts import CaptureFacts
from .directions import _slice, nagle_join
from .findings import nagle_finding, small_packets_finding
from .plots import _plot_small_share, _plot_stalls


@analyzer("nagle")
class Nagle(Analyzer[Carried, list]):
    """Small TCP segments, unbatched writes and Nagle/delayed-ACK stalls per connection direction."""

    def start(self, facts: CaptureFacts) -> Carried:
        return Carried()

    def step(self, state: Carried, rows: Capture, facts: CaptureFacts, last: bool) -> Carried:
        _, carry, piece = _slice(rows, state.carry, last)
        return state.then(carry, piece)

    def close(self, state: Carried, rows: Capture, facts: CaptureFacts) -> list[dict[str, Any]]:
        """A partition's directions and stalls, and the segments in coalescable runs that a
        finding may cite (`nagle_join`), in a list of the partitions'."""
        return [nagle_join(state.pieces)]

    def merge(self, a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return a + b

    def finish(self, partials: list[dict[str, Any]], cap: Capture, facts: CaptureFacts) -> AnalyzerResult:
        return _result(partials, cap)


def _result(partials: list[dict[str, Any]], cap: Capture) -> AnalyzerResult:
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
