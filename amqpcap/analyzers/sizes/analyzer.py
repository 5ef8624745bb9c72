"""The sizes analyzer: a step over rows (`step`), a part of the capture's records (every packet of
the file, as Wireshark's `-z plen,tree`), and the finish.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ...analysis.registry import AnalyzerResult, Plot, analyzer
from ...io.load import Capture
from ...analysis.contract import Analyzer
from ...io.rows import merge_rows
from ...model.facts import CaptureFacts
from .bins import time_bins
from .counts import packet_size_table
from .plots import _plot_frames_per_packet, _plot_packet_sizes, _plot_segment_sizes, _plot_throughput
from .bins import plen_counts
from .step import _partial, _Seen, _seen
from .throughput import THROUGHPUT_SUMS, throughput_summary, throughput_table


@dataclass
class _Parts:
    """The partitions' partials (`_partial`, in the order of the buckets) and the plen counts of
    the capture's records (None: not yet merged)."""

    partials: list[dict[str, Any]]
    plen: np.ndarray | None = None


@analyzer("sizes")
class Sizes(Analyzer[_Seen, _Parts]):
    """Packet sizes (Wireshark plen buckets), frames per packet and throughput over time."""

    records_columns = ("frame_len",)
    #: the throughput table's acked messages are the shared deliveries' and confirms'
    reads_derivations = True

    def start(self, facts: CaptureFacts) -> _Seen:
        return _Seen.nothing(facts)

    def step(self, seen: _Seen, rows: Capture, facts: CaptureFacts, last: bool) -> _Seen:
        return _seen(rows, facts, seen, last)

    def close(self, seen: _Seen, rows: Capture, facts: CaptureFacts) -> _Parts:
        """A partition's connections' rows of the per-stream tables (with their sort keys),
        throughput sums per time bin, segment-size histograms."""
        return _Parts([_partial(seen)])

    def records(self, records: pd.DataFrame, facts: CaptureFacts) -> _Parts:
        """plen bucket counts of every packet in the file (AMQP or not)."""
        return _Parts([], plen_counts(records["frame_len"]))

    def merge(self, a: _Parts, b: _Parts) -> _Parts:
        plen = b.plen if a.plen is None else a.plen if b.plen is None else a.plen + b.plen
        return _Parts(a.partials + b.partials, plen)

    def finish(self, parts: _Parts, cap: Capture, facts: CaptureFacts) -> AnalyzerResult:
        return _result(parts.partials, parts.plen, facts, cap)


def _result(partials: list[dict[str, Any]], whole: np.ndarray, facts: CaptureFacts, cap: Capture) -> AnalyzerResult:
    """The result from the partitions' partials and the records' plen counts (`whole`)."""
    def rows(name: str, key: list[str]) -> pd.DataFrame:
        return merge_rows([q[name] for q in partials], key)

    sizes_t = packet_size_table(whole, rows("streams", ["stream", "direction", "b"]))
    whole_t = sizes_t[sizes_t["direction"] == "all"]
    amqp = sizes_t[sizes_t["direction"] != "all"]
    payload_t = rows("payload", ["stream", "direction"])
    fpp = rows("fpp", ["stream", "direction", "frames_per_packet"])
    ppf = rows("ppf", ["stream", "direction", "_type", "packets_per_frame"])
    width_s, n_bins = time_bins(facts)
    bins = {k: np.sum([q["throughput"][k] for q in partials], axis=0) for k in THROUGHPUT_SUMS}
    tp = throughput_table(bins, facts.t0_ns, width_s, n_bins)

    total = int(whole_t["count"].sum())
    fpp_all = fpp.groupby("frames_per_packet")["packets"].sum() if len(fpp) else pd.Series(dtype=np.int64)
    # Frames per span from the (small) table, not a value_counts over every frame.
    ppf_all = ppf.groupby("packets_per_frame")["frames"].sum() if len(ppf) else pd.Series(dtype=np.int64)
    summary = {
        "packet_sizes": {
            "bins": [{"range": r, "count": int(c), "percent": float(pc)}
                     for r, c, pc in zip(whole_t["range"], whole_t["count"], whole_t["percent"])],
            "total": total,
        },
        "frames_per_packet": {str(int(k)): int(v) for k, v in fpp_all.items()},
        "packets_per_frame": {str(int(k)): int(v) for k, v in ppf_all.items()},
        "throughput": throughput_summary(tp, facts.duration_s, width_s),
    }
    hist = np.sum([q["segment_hist"] for q in partials], axis=0)
    segments = np.sum([q["segments"] for q in partials], axis=0)
    plots = [
        Plot("sizes-packet-sizes", "Packet sizes (Wireshark plen buckets)", _plot_packet_sizes(whole_t, amqp)),
        Plot("sizes-frames-per-packet", "AMQP frames per TCP data packet", _plot_frames_per_packet(fpp)),
        Plot("sizes-throughput", "Throughput per direction over time", _plot_throughput(tp, width_s)),
        Plot("sizes-segment-sizes", "TCP segment sizes over time", _plot_segment_sizes(hist, segments, facts.duration_s)),
    ]
    tables = {
        "packet-sizes": sizes_t,
        "payload-sizes": payload_t,
        "frames-per-packet": fpp,
        "packets-per-frame": ppf,
        "throughput": tp,
    }
    return AnalyzerResult("sizes", tables=tables, summary=summary, findings=[], plots=plots)
