"""The latency analyzer: a step over rows (a partition of whole connections, or a slice of its time)
given the queue backlog read at their acks (``uses = BACKLOG``, shared with consumers), and a
finish that reads the per-message rows kept on the workers for the exact percentiles.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from ...analysis.registry import AnalyzerResult, Plot, analyzer
from ...io.load import Capture
from ...derive.labels import connection_labels
from ...derive.backlog_join import BacklogPieces
from ...derive.refills import BACKLOG
from ...io.kept_rows import columns as kept_columns
from ...io.kept_rows import rows_table
from ...analysis.contract import Analyzer, Carried
from ...analysis.partition import taken
from ...io.rows import merge_rows
from ...model.facts import CaptureFacts
from .findings import _redelivery_findings, _refill_findings
from .numbers import _imax, _values, _wmean, stats
from .plots import _plot_cdf, _plot_over_time, _plot_raster, _raster_joined
from .step import latency_join, latency_slice


#: what summary.json counts of the deliveries (deliver_to_ack) and of the confirms (publish_to_confirm)
DELIVERY_COUNTS = ("unsettled_at_end", "unsettled_at_close", "no_ack_excluded", "deliveries")
CONFIRM_COUNTS = ("publishes", "nacked", "unconfirmed_at_end", "unconfirmed_at_close")


@analyzer("latency")
class Latency(Analyzer[Carried, list]):
    """Deliver→ack, ack→next-deliver and publish→confirm latencies; deliver/ack interleaving."""

    uses = BACKLOG
    reads_derivations = True

    def start(self, facts: CaptureFacts) -> Carried:
        return Carried()

    def step(self, state: Carried, rows: Capture, facts: CaptureFacts, last: bool, backlog: BacklogPieces) -> Carried:
        return state.then(*latency_slice(rows, state.carry, last, backlog))

    def close(self, state: Carried, rows: Capture, facts: CaptureFacts) -> list[dict[str, Any]]:
        """A partition's deliveries, ack gaps (with the whole capture's backlog read at them) and
        confirms, kept where they were made (`amqpcap.io.kept_rows`); what the finish needs of
        them, each number a consumer's or a channel's own (its consumers, its channels' slow
        refills and bouncing messages, its counts); its interleaving rows and the raster's data."""
        return [latency_join(state.pieces)]

    def merge(self, a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return a + b

    def finish(self, partials: list[dict[str, Any]], cap: Capture, facts: CaptureFacts) -> AnalyzerResult:
        return latency_merge(partials, cap)


def latency_merge(partials: list[dict[str, Any]], cap: Capture) -> AnalyzerResult:
    """The partitions' rows in the whole capture's order (frame order: by packet, a packet's
    frames being one partition's); the summary, findings and plots from them: the percentiles
    from the latency columns alone, read whole (exact), the rest from the partitions' own
    numbers."""
    d = rows_table(taken(partials, "deliveries"), ["packet"])
    gaps = rows_table(taken(partials, "gaps"), ["packet"])
    conf = rows_table(taken(partials, "confirms"), ["packet"])
    inter = merge_rows(taken(partials, "interleaving"), ["stream", "channel"])
    # a consumer's rows are its channel's, of one partition: in the whole's order by stream
    per_consumer = merge_rows(taken(partials, "consumers"), ["stream"])
    if len(per_consumer):
        per_consumer["connection"] = connection_labels(cap, per_consumer["stream"])
    counts = {k: sum(q["counts"][k] for q in partials) for k in DELIVERY_COUNTS + CONFIRM_COUNTS}

    dta = stats(_values(d, "latency_s", unless="no_ack"))
    dta.update({k: counts[k] for k in DELIVERY_COUNTS})
    a2d = stats(_values(gaps, "gap_s"))
    p2c = stats(_values(conf, "latency_s"))
    p2c.update({k: counts[k] for k in CONFIRM_COUNTS})
    summary_inter = {
        "channels": int(len(inter)),
        "mean_deliver_run": _wmean(inter, "mean_deliver_run"), "max_deliver_run": _imax(inter, "max_deliver_run"),
        "mean_ack_run": _wmean(inter, "mean_ack_run"), "max_ack_run": _imax(inter, "max_ack_run"),
        "alternation_ratio": float(((inter["runs"] - 1).sum() / max((inter["delivers"] + inter["acks"] - 1).sum(), 1)))
        if len(inter) else None,
        "packets_multi_deliver": int(inter["packets_multi_deliver"].sum()) if len(inter) else 0,
        "packets_multi_ack": int(inter["packets_multi_ack"].sum()) if len(inter) else 0,
    }
    summary = {"latency": {"deliver_to_ack": dta, "ack_to_next_deliver": a2d, "publish_to_confirm": p2c,
                           "interleaving": summary_inter,
                           "consumers": per_consumer.to_dict(orient="records")}}
    findings = (_refill_findings(cap, _by_channel([q["refills"] for q in partials]))
                + _redelivery_findings(cap, _by_channel([q["redeliveries"] for q in partials])))
    tables = {"consumers": per_consumer, "deliveries": d, "ack-gaps": gaps, "confirms": conf, "interleaving": inter}
    plots = []
    measured = dta["count"] > 0
    if measured:
        plots.append(Plot("latency-over-time", "deliver→ack latency over time per consumer",
                          lambda path: _plot_over_time(cap, _acked(d), path)))
    if measured or counts["publishes"] or a2d["count"]:
        plots.append(Plot("latency-cdf", "latency CDF per consumer (deliver→ack), ack→next-deliver, publish→confirm",
                          lambda path: _plot_cdf(cap, _acked(d), kept_columns(gaps, ["gap_s"]),
                                                 kept_columns(conf, ["latency_s"]), path)))
    if len(inter):
        raster = _raster_joined([q["raster"] for q in partials])
        plots.append(Plot("interleaving-raster", "deliveries and acks over time per channel",
                          lambda path: _plot_raster(cap, raster, path)))
    return AnalyzerResult("latency", tables=tables, summary=summary, findings=findings, plots=plots)


#: the deliveries' columns the plots draw
PLOTTED = ["stream", "channel", "consumer_tag", "queue", "ts", "latency_s", "no_ack"]


def _acked(d) -> pd.DataFrame:
    """The acknowledged deliveries' plotted columns (read from the workers' files when kept there)."""
    a = kept_columns(d, PLOTTED)
    return a[~a["no_ack"].to_numpy(bool)]


def _by_channel(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """The partitions' per-channel rows (index: `chan_key`) in the whole capture's channel order."""
    kept = [p for p in parts if len(p)]
    if not kept:
        return parts[0]
    return pd.concat(kept).sort_index(kind="stable")
