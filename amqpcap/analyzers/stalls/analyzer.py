"""The stalls analyzer: a step over rows (a partition of whole connections, or a slice of its time)
given what it needs of the other partitions (``uses = BLOCKS``), a finish that derives the tables,
findings and plots.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ...analysis.registry import AnalyzerResult, Plot, analyzer
from ...io.load import Capture
from ...io.kept_rows import keep
from ...analysis.contract import Analyzer, Carried
from ...analysis.partition import taken
from ...io.rows import merge_rows
from ...model.facts import CaptureFacts
from .constants import PLOT_MAX_DIRECTIONS
from .intervals import _overlap_s
from .context import BLOCKS, StallsContext, _origin
from .findings import _broker_flow_control, _capture_gaps, _publisher_blocked, _receiver_window, _window_packets
from .plots import _drawn_points, _life_s, _plot_timeline, _plot_window, _window_directions, _window_series
from .silences import _causes, _median_gap, _rtt_stats, _stalls_of, _stalls_table
from .step import stalls_slice
from .tables import _episodes, _rtt_values, _summary, _tcp_table, _window_sides


def stalls_pieces_joined(pieces: list[dict]) -> dict[str, Any]:
    """The partition's partial from its slices' pieces (`stalls_slice`): the thresholds from
    every gap and RTT sample, the stalls among the candidate silences, the tables."""
    c = pieces[-1]["carry"]
    seen = c.seen

    def joined(name: str, order: list[str] | None = None) -> pd.DataFrame:
        parts = [q[name] for q in pieces]
        df = pd.concat([x for x in parts if len(x)] or parts[:1], ignore_index=True)
        if order and len(pieces) > 1:  # (a stable sort: each slice's rows are in order already)
            df = df.iloc[np.lexsort([df[k].to_numpy() for k in reversed(order)])].reset_index(drop=True)
        return df

    rtt = joined("rtt", ["d", "stream", "_t", "_packet"])
    rtt_stats, path_rtt = _rtt_stats(rtt, int(seen.stream.max(initial=-1)) + 1)
    median_gap = _median_gap(joined("gaps"))
    st = _stalls_of(joined("cand", ["stream", "end", "last_packet"]), median_gap, path_rtt)
    consumers = np.isin(st["stream"].to_numpy(np.int64), seen.stream[c.delivers])
    xb = (st["d"].to_numpy() == 1) & consumers & pieces[-1]["has_blocks"]
    st["flow_s"] = np.where(xb, np.maximum(st["flow_s"].to_numpy(), st["xb_s"].to_numpy(float)), st["flow_s"])
    a10 = pieces[-1]["amqp10"]
    if a10 is not None:  # AMQP 1.0 connections' states (none of 0-9-1's on them: the larger is theirs)
        states, streams = a10
        for col, iv in states.items():
            st[col] = np.maximum(st[col].to_numpy(float), _overlap_s(st, iv))
        st["amqp10"] = np.isin(st["stream"].to_numpy(np.int64), streams)
    stalls_tbl = _stalls_table(_causes(st))
    tcp = _tcp_table(seen, rtt_stats, path_rtt, median_gap, st)
    sides = _window_sides(pieces[-1]["connections"], c, tcp, stalls_tbl, _episodes(joined("limited")))
    cited = joined("cited", ["stream", "_t", "packet"])
    drawn = _window_directions(tcp, stalls_tbl).head(PLOT_MAX_DIRECTIONS)
    connections, t0_ns = pieces[-1]["connections"], pieces[-1]["t0_ns"]
    plot = c.plot if c.plot is not None else \
        _drawn_points(pieces[-1]["plot_columns"], drawn["stream"].to_numpy(np.int64), connections, t0_ns)
    return {"stalls": stalls_tbl, "tcp": tcp,
            # (the samples stay where they were made: only their percentiles are merged)
            "rtt": keep(rtt[["stream", "d", "rtt_s"]], "stalls-rtt", "stream"),
            "sides": sides, "window_packets": _window_packets(cited, sides),
            "blocked": joined("blocked", ["stream", "start", "blocked_packet"]),
            "deliveries_while_blocked": sum(q["deliveries_while_blocked"] for q in pieces),
            # (by packet: the anomalies' own order is the order the reassembly found them in)
            "gaps": joined("capture_gaps").sort_values("packet", kind="stable", ignore_index=True),
            "window_series": _window_series(plot, _life_s(connections, t0_ns), drawn)}


@analyzer("stalls")
class Stalls(Analyzer[Carried, list]):
    """Silent intervals per connection direction and their cause; RTT, retransmissions, windows."""

    uses = BLOCKS
    reads_derivations = True

    def start(self, facts: CaptureFacts) -> Carried:
        return Carried()

    def step(self, state: Carried, rows: Capture, facts: CaptureFacts, last: bool, context: StallsContext) -> Carried:
        return state.then(*stalls_slice(rows, facts, state.carry, last, context))

    def close(self, state: Carried, rows: Capture, facts: CaptureFacts) -> list[dict[str, Any]]:
        """A partition's stalls with their causes, its tcp rows, RTT samples, window-held
        directions (with the packets a finding cites and the plot's series), blocks and capture
        gaps (`stalls_pieces_joined`), in a list of the partitions'."""
        return [stalls_pieces_joined(state.pieces)]

    def merge(self, a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return a + b

    def finish(self, partials: list[dict[str, Any]], cap: Capture, facts: CaptureFacts) -> AnalyzerResult:
        return stalls_merge(partials, facts, cap)


def stalls_merge(partials: list[dict[str, Any]], facts: CaptureFacts, cap: Capture) -> AnalyzerResult:
    """Every partition's stalls and directions; the summary, findings and plots from them."""
    t0 = _origin(facts)
    stalls_tbl = merge_rows(taken(partials, "stalls"), ["start_ts", "stream", "end_ts", "last_packet"])
    tcp = merge_rows(taken(partials, "tcp"), ["stream", "direction"])
    rtt = taken(partials, "rtt")
    summary = _summary(stalls_tbl, tcp, [_rtt_values(rtt, D) for D in (0, 1)])
    sides = pd.concat([q["sides"] for q in partials], ignore_index=True).sort_values(
        ["window_limited_share", "window_limited_s", "stream", "d"], ascending=[False, False, True, True],
        kind="stable", ignore_index=True)
    wp = pd.concat([q["window_packets"] for q in partials], ignore_index=True)
    blocked = pd.concat([q["blocked"] for q in partials], ignore_index=True).sort_values(
        ["stream", "start", "blocked_packet"], kind="stable", ignore_index=True)
    findings = [x for x in (_receiver_window(cap, wp, sides, stalls_tbl),
                            _broker_flow_control(cap, wp, sides, stalls_tbl),
                            _publisher_blocked(blocked, sum(q["deliveries_while_blocked"] for q in partials), cap),
                            _capture_gaps(pd.concat([q["gaps"] for q in partials], ignore_index=True), cap, stalls_tbl))
                if x is not None]
    plots = []  # only plots with something to show: held-back windows, stalls other than idle
    if len(_window_directions(tcp, stalls_tbl)):
        series = {k: v for q in partials for k, v in q["window_series"].items()}
        plots.append(Plot("stalls-window", "Receiver windows that held senders back",
                          lambda path: _plot_window(path, cap, series, tcp, stalls_tbl, t0)))
    if (stalls_tbl["cause"] != "idle").any():
        plots.append(Plot("stalls-timeline", "Stalls by cause",
                          lambda path: _plot_timeline(path, cap, stalls_tbl, t0)))
    return AnalyzerResult("stalls", tables={"stalls": stalls_tbl, "tcp": tcp}, summary=summary, findings=findings,
                          plots=plots)
