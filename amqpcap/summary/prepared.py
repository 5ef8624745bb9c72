"""Everything the outputs show, prepared once from the capture and the results: the report and
the files are handed a `Prepared` and derive nothing again (issue 49)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..analysis.registry import AnalyzerResult
from ..engine.registered import analyzers
from ..derive.labels import connection_labels
from ..derive.names import connection_names, consumer_labels
from ..derive.tally import capture_tally
from ..io.load import Capture
from .build import build_summary
from .overview import rate_bins


@dataclass
class Prepared:
    #: summary.json (docs/summary.md), JSON-ready
    summary: dict[str, Any]
    #: each connection's label by stream (what a table's ``connection`` column shows)
    labels: pd.Series
    #: the report's connections table: who each connection is, its role, then its numbers
    connections: pd.DataFrame
    #: the capture's anomalies table (docs/tables.md)
    anomalies: pd.DataFrame
    #: per finding whose display filter names only some of its connections: every one of its
    #: streams with its connection label (`amqpcap.report.file_names.finding_streams_file`)
    finding_streams: dict[str, pd.DataFrame]
    #: the overview's consumers named for the page, and the queue they all consume from (if one)
    consumer_labels: tuple[list[str], str | None]
    #: messages per time bin for the rates plot (`amqpcap.summary.overview.rate_bins`)
    rate_bins: tuple[np.ndarray, dict[str, np.ndarray]] | None
    #: each analyzer's one-line help, by name
    analyzer_help: dict[str, str]


def prepare(cap: Capture, results: list[AnalyzerResult], summary: dict[str, Any] | None = None) -> Prepared:
    """What every output of `amqpcap analyze` shows of `cap` and its `results` (``summary``: when
    already built by `build_summary`)."""
    summary = build_summary(cap, results) if summary is None else summary
    rows = summary["overview"]["consumers"]
    return Prepared(
        summary=summary, labels=connection_names(cap)["connection"], connections=connections_table(cap),
        anomalies=cap.anomalies, finding_streams=finding_streams(cap, summary),
        consumer_labels=consumer_labels(cap, [r["stream"] for r in rows], [r["channel"] for r in rows],
                                        [r["queue"] for r in rows], [r["consumer_tag"] for r in rows]),
        rate_bins=rate_bins(cap), analyzer_help={name: help for name, (_, help) in analyzers().items()})


def connections_table(cap: Capture) -> pd.DataFrame:
    """One row per connection: who it is (label, client, user@vhost, role) before the numbers."""
    c = cap.connections
    names = connection_names(cap).reindex(c["stream"].to_numpy())
    user, vhost = names["user"].to_numpy(object), names["vhost"].to_numpy(object)
    who = np.where((user != "") & (vhost != ""), user + "@" + vhost, user + vhost)
    return pd.DataFrame({
        "connection": names["connection"].to_numpy(object), "client": names["client"].to_numpy(object),
        "user@vhost": who, "role": capture_tally(cap).roles.reindex(c["stream"].to_numpy()).to_numpy(object),
        "stream": c["stream"].to_numpy(), "client_endpoint": names["client_endpoint"].to_numpy(object),
        "packets": (c["c2s_packets"] + c["s2c_packets"]).to_numpy(), "frames": c["frames"].to_numpy(),
        "duration_s": (c["last_ts"] - c["first_ts"]).dt.total_seconds().to_numpy(),
        "anomalies": c["anomalies"].to_numpy()})


def finding_streams(cap: Capture, summary: dict[str, Any]) -> dict[str, pd.DataFrame]:
    """For each finding whose display filter names only some of its connections (evidence
    `streams_total`), every one of its `streams` with its connection label, a row each: what the
    filter could not list."""
    out = {}
    for f in summary["findings"]:
        if "streams_total" in f["evidence"]:
            streams = f["evidence"]["streams"]
            out[f["id"]] = pd.DataFrame({"stream": streams, "connection": connection_labels(cap, streams)})
    return out
