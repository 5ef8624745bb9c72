"""The consumers analyzer: the queue backlog's context round (shared with latency), a step per
partition of whole connections (over slices of its time when it is large), and a merge.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ...analysis.registry import AnalyzerResult, Plot, analyzer
from ...io.load import Capture
from ...derive.labels import connection_labels
from ...derive.refills import BACKLOG_CONTEXT_SLICING, backlog_context, join_backlog_context
from ...io.kept_rows import rows_table
from ...analysis.partition import Slicing, Split, facts_of, run_whole, taken
from ...io.rows import merge_rows
from ...model.facts import CaptureFacts
from .findings import _findings, _unlimited_finding
from .plots import _plot_state, merged_bins
from .step import consumers_join, consumers_partial, consumers_slice


def consumer_summary(cap: Capture) -> pd.DataFrame:
    """One row per acknowledging consumer (see docs/analyzers/consumers.md)."""
    return consumers_partial(cap, facts_of(cap), cap.context.get("backlog"))["summary"]


def consumers_merge(partials: list[dict[str, Any]], records: None, facts: CaptureFacts, cap: Capture) -> AnalyzerResult:
    """Every partition's consumers, in the whole capture's order (by stream and channel, a
    channel's consumers being one partition's); the findings and the plot from them."""
    s = merge_rows(taken(partials, "summary"), ["stream", "channel"])
    s["connection"] = connection_labels(cap, s["stream"])
    # (a consumer's state rows are its channel's, of one partition: merged by stream; the plot
    # is drawn from each partition's numbers per consumer and time bin, `StateBins`)
    st = rows_table(taken(partials, "state"), ["stream", "channel", "epoch", "consumer_tag"])
    rows = s.drop(columns=["start_ts", "end_ts"]).to_dict(orient="records")
    no_ack = sorted((r for q in partials for r in q["no_ack"]), key=lambda r: (r["stream"], r["channel"], r["consumer_tag"]))
    for r, who in zip(no_ack, connection_labels(cap, [r["stream"] for r in no_ack])):
        rows.append({"connection": who, **r})
    for r in rows:
        r.setdefault("no_ack", False)
    plots = []
    if len(st):
        queues = pd.concat([q["queues"] for q in partials], ignore_index=True)
        bins = merged_bins([q["plotted"] for q in partials if q["plotted"] is not None])
        plots.append(Plot("consumers-unacked-deficit", "Consumers at their prefetch limit, and their unacked messages",
                          lambda path: _plot_state(cap, bins, queues, path)))
    slow = np.concatenate([q["slow"] for q in partials])
    limits = pd.concat([q["limits"] for q in partials], ignore_index=True)
    findings = _findings(cap, s, slow, limits)
    behind = [q["unlimited"] for q in partials if q["unlimited"] is not None and len(q["unlimited"])]
    if behind:  # in consumer_list's order (by queue, connection, channel), the connections named here
        c = pd.concat(behind, ignore_index=True)
        c["connection"] = connection_labels(cap, c["stream"])
        unlimited = _unlimited_finding(cap, c.sort_values(["queue", "connection", "channel"], na_position="last",
                                                          kind="stable"))
        findings += [unlimited] if unlimited else []
    return AnalyzerResult("consumers", tables={"consumers": s, "state": st}, summary={"consumers": rows},
                          findings=findings, plots=plots)


SPLIT = Split(partial=consumers_partial, merge=consumers_merge, context=backlog_context, join_context=join_backlog_context,
              slicing=Slicing(consumers_slice, consumers_join, replays=True), context_slicing=BACKLOG_CONTEXT_SLICING)


@analyzer("consumers", split=SPLIT)
def consumers(cap: Capture) -> AnalyzerResult:
    """Per consumer: unacked messages, prefetch, deficit (unused credit), utilisation, time at the limit."""
    return run_whole(SPLIT, cap)
