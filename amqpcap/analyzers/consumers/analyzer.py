"""The consumers analyzer: a step over rows (a partition of whole connections, or a slice of its
time) given the queue backlog read at their acks (``uses = BACKLOG``, shared with latency), and a
finish.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ...analysis.registry import AnalyzerResult, Plot, analyzer
from ...io.load import Capture
from ...derive.labels import connection_labels
from ...derive.backlog_join import BacklogPieces
from ...derive.consumers import CONSUMER
from ...derive.refills import BACKLOG
from ...io.kept_rows import rows_table
from ...analysis.contract import Analyzer, Carried
from ...analysis.partition import taken
from ...io.pieces import facts_of
from ...io.rows import merge_rows
from ...model.facts import CaptureFacts
from .findings import _findings, _unlimited_finding
from .plots import _plot_state, merged_bins
from .step import consumers_join, consumers_slice


@analyzer("consumers")
class Consumers(Analyzer[Carried, list]):
    """Per consumer: unacked messages, prefetch, deficit (unused credit), utilisation, time at the limit."""

    uses = BACKLOG
    reads_derivations = True

    def start(self, facts: CaptureFacts) -> Carried:
        return Carried()

    def step(self, state: Carried, rows: Capture, facts: CaptureFacts, last: bool,
             backlog: BacklogPieces | None) -> Carried:
        return state.then(*consumers_slice(rows, state.carry, last, backlog))

    def close(self, state: Carried, rows: Capture, facts: CaptureFacts) -> list[dict[str, Any]]:
        return [consumers_join(state.pieces, rows.summary)]

    def merge(self, a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return a + b

    def finish(self, partials: list[dict[str, Any]], cap: Capture, facts: CaptureFacts) -> AnalyzerResult:
        """Every partition's consumers, in the whole capture's order (by stream and channel, a
        channel's consumers being one partition's); the findings and the plot from them."""
        s = _labelled(cap, merge_rows(taken(partials, "summary"), ["stream", "channel"]))
        # (a consumer's state rows are its channel's, of one partition: merged by stream; the plot
        # is drawn from each partition's numbers per consumer and time bin, `StateBins`)
        st = rows_table(taken(partials, "state"), CONSUMER)
        rows = s.drop(columns=["start_ts", "end_ts"]).assign(no_ack=False).to_dict(orient="records")
        no_ack = sorted((r for q in partials for r in q["no_ack"]), key=lambda r: (r["stream"], r["channel"], r["consumer_tag"]))
        labels = connection_labels(cap, [r["stream"] for r in no_ack])
        rows += [{"connection": who, **r} for r, who in zip(no_ack, labels)]
        plots = []
        if len(st):
            queues = pd.concat([q["queues"] for q in partials], ignore_index=True)
            bins = merged_bins([q["plotted"] for q in partials if q["plotted"] is not None])
            plots.append(Plot("consumers-unacked-deficit", "Consumers at their prefetch limit, and their unacked messages",
                              lambda path: _plot_state(cap, bins, queues, path)))
        findings = _findings(cap, s, np.concatenate([q["slow"] for q in partials]),
                             pd.concat([q["limits"] for q in partials], ignore_index=True))
        behind = [q["unlimited"] for q in partials if q["unlimited"] is not None and len(q["unlimited"])]
        unlimited = _unlimited_finding(cap, _labelled(cap, pd.concat(behind, ignore_index=True))) if behind else None
        findings += [unlimited] if unlimited else []
        return AnalyzerResult("consumers", tables={"consumers": s, "state": st}, summary={"consumers": rows},
                              findings=findings, plots=plots)


def consumer_summary(cap: Capture) -> pd.DataFrame:
    """One row per acknowledging consumer (see docs/analyzers/consumers.md)."""
    [partial] = Consumers().over_partition(cap, facts_of(cap), cap.context.backlog)
    return _labelled(cap, partial["summary"])


def _labelled(cap: Capture, rows: pd.DataFrame) -> pd.DataFrame:
    """`rows` with their connection's label (`connection_labels`) first: a partition's rows are
    named in the finish, by every connection of the capture (labels shared are told apart)."""
    rows.insert(0, "connection", connection_labels(cap, rows["stream"]))
    return rows
