"""The clients analyzer: a step over rows (a partition of whole connections, or a slice of its time),
and a finish that names the connections and derives the findings from their rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ...analysis.registry import AnalyzerResult, analyzer
from ...io.load import Capture
from ...derive.names import amqp091_rows, connection_names
from ...analysis.contract import Analyzer, Carried
from ...io.rows import merge_rows
from ...model.facts import CaptureFacts
from .channels import _deleted_by
from .constants import COLUMNS, NAMED, SUMMARY_COLUMNS, SUMMARY_CONNECTIONS
from .findings import (
    _cancelled_finding, _channel_churn_finding, _churn_finding, _polling_finding, _publish_wait_finding,
    _transactions_finding, _unroutable_finding)
from .step import clients_join, clients_slice


@analyzer("clients")
class Clients(Analyzer[Carried, list]):
    """What each connection does (publishes, consumes, gets, transactions, confirms) and the habits that cost most."""

    reads_derivations = True

    def start(self, facts: CaptureFacts) -> Carried:
        return Carried()

    def step(self, state: Carried, rows: Capture, facts: CaptureFacts, last: bool) -> Carried:
        return state.then(*clients_slice(rows, state.carry, last))

    def close(self, state: Carried, rows: Capture, facts: CaptureFacts) -> list[dict[str, Any]]:
        """The partition's partial from its slices' pieces, in a list of the partitions'."""
        return [clients_join(state.pieces)]

    def merge(self, a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return a + b

    def finish(self, partials: list[dict[str, Any]], cap: Capture, facts: CaptureFacts) -> AnalyzerResult:
        return _result(partials, cap)


def _result(partials: list[dict[str, Any]], cap: Capture) -> AnalyzerResult:
    """The connections of every partition, named; the findings and summary from them."""
    conns = amqp091_rows(cap, merge_rows([p["connections"] for p in partials], ["stream"]))
    names = connection_names(cap)
    for col in NAMED:
        conns[col] = pd.Series(names[col].reindex(conns["stream"]).to_numpy(object), dtype=object)
    conns = conns[COLUMNS]
    examples = merge_rows([p["examples"] for p in partials], ["stream", "method", "packet"])
    returns = merge_rows([p["returns"] for p in partials], ["stream", "exchange", "routing_key"])
    deletes = merge_rows([p["deletes"] for p in partials], ["packet", "stream"])
    cancels = _deleted_by(merge_rows([p["cancels"] for p in partials], ["packet", "stream", "channel"]), deletes)
    confirming = merge_rows([p["confirming"] for p in partials], ["stream", "channel", "epoch"])
    findings = [f for f in (_polling_finding(cap, conns, examples), _transactions_finding(cap, conns, examples),
                            _unroutable_finding(cap, conns, returns, examples), _cancelled_finding(cap, cancels),
                            _churn_finding(cap, conns), _publish_wait_finding(cap, confirming),
                            _channel_churn_finding(cap, conns, examples))
                if f is not None]
    summary = {"clients": {
        "connections": int(len(conns)),
        "publishing": int((conns["publishes"] > 0).sum()),
        "consuming": int(((conns["deliveries"] > 0) | (conns["consumes"] > 0) | (conns["gets_ok"] > 0)).sum()),
        "polling": int((conns["gets"] > 0).sum()),
        "transactional": int((conns["tx_selects"] > 0).sum()),
        "confirming": int((conns["confirm_selects"] > 0).sum()),
        "returned": int((conns["returns"] > 0).sum()),
        "cancelled_by_broker": int((conns["cancelled_by_broker"] > 0).sum()),
        "by_connection": _by_connection(conns),
    }}
    return AnalyzerResult("clients", tables={"connections": conns, "returns": returns, "cancels": cancels,
                                             "confirming": confirming},
                          summary=summary,
                          findings=findings, plots=[])


def _by_connection(conns: pd.DataFrame) -> list[dict[str, Any]]:
    """The busiest SUMMARY_CONNECTIONS connections (messages published, delivered and got),
    in summary.json's terms (missing numbers as null)."""
    busy = conns["publishes"] + conns["deliveries"] + conns["gets_ok"]
    top = conns.assign(busy_msgs=busy).sort_values(["busy_msgs", "stream"], ascending=[False, True], kind="stable")
    out = []
    for r in top.head(SUMMARY_CONNECTIONS)[list(SUMMARY_COLUMNS)].to_dict(orient="records"):
        out.append({k: (None if isinstance(v, float) and np.isnan(v) else v.item() if isinstance(v, np.generic) else v)
                    for k, v in r.items()})
    return out
