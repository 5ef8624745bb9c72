"""Per consumer: deliveries, outcomes and its latency percentiles, named by its connection's label."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...derive.columns import codes
from ...derive.labels import connection_labels
from ...derive.methods import chan_key
from ...derive.rates import msgs_per_s_active


@dataclass
class _Labels:
    """The partition's connections (stream, sorted) and each one's label
    (`amqpcap.derive.labels.connection_labels`): connections are whole in every slice."""

    streams: np.ndarray
    labels: np.ndarray

    def of(self, streams) -> np.ndarray:
        """The label of each of `streams` (`stream N` for a stream that is no connection)."""
        streams = np.asarray(streams, np.int64)
        label = connection_labels(None, streams)
        at = np.minimum(np.searchsorted(self.streams, streams), max(len(self.streams) - 1, 0))
        known = (self.streams[at] == streams) if len(self.streams) else np.zeros(len(streams), bool)
        label[known] = self.labels[at[known]]
        return label


def consumer_latency(d: pd.DataFrame, gaps: pd.DataFrame, tags: np.ndarray, labels: "_Labels") -> pd.DataFrame:
    """Per consumer: its connection's label (`labels`), deliveries, outcomes and deliver→ack /
    ack→next-deliver percentiles; ``tags``: each delivery's consumer tag as a number in the
    sorted order of the text (`_tag_numbers`)."""
    cons = ["connection", "stream", "channel", "consumer_tag"]
    if len(d) == 0:
        return pd.DataFrame(columns=cons + ["deliveries"])
    # one int64 code per consumer (sorted as the keys): pandas factorizes a single int64 column
    # once per GroupBy object, where three key columns (one of text) cost a factorization per call
    code = codes(d["stream"].to_numpy(np.int64), d["channel"].to_numpy(np.int64), tags)
    n = int(code.max()) + 1
    first = np.unique(code, return_index=True)[1]
    # text made into Python objects only for the consumers' rows; outcomes compared whole-column
    # (on the string array itself, not on a copy as objects)
    tag_text = np.asarray(d["consumer_tag"].array.take(first), dtype=object)

    def count(mask):
        return np.bincount(code[mask], minlength=n).astype(np.int64)

    def outcome(value):
        return (d["outcome"] == value).to_numpy(dtype=bool, na_value=False)

    g = pd.DataFrame({"latency_s": d["latency_s"].to_numpy(float), "ts": d["ts"].array}).groupby(code)
    lat = g["latency_s"]
    stream = d["stream"].to_numpy(np.int64)[first]
    out = pd.DataFrame({
        "connection": labels.of(stream), "stream": stream,
        "channel": d["channel"].to_numpy(np.int64)[first], "consumer_tag": tag_text,
        "deliveries": count(slice(None)),
        "redelivered": count(d["redelivered"].fillna(False).to_numpy(bool)),
        "no_ack": count(~d["no_ack"].to_numpy(bool)) == 0,
        "acked": count(outcome("ack")), "nacked": count(outcome("nack")), "rejected": count(outcome("reject")),
        "unsettled_at_end": count(outcome("unsettled")), "unsettled_at_close": count(outcome("closed")),
        "deliver_to_ack_p50_s": lat.median().to_numpy(), "deliver_to_ack_p90_s": lat.quantile(0.9).to_numpy(),
        "deliver_to_ack_p99_s": lat.quantile(0.99).to_numpy(), "deliver_to_ack_max_s": lat.max().to_numpy(),
    })
    # per second active: between the consumer's first and last delivery (amqpcap.derive.rates)
    out["delivered_msgs_per_s"] = msgs_per_s_active(out["deliveries"], g["ts"].min(), g["ts"].max())
    # ack→next-deliver is per channel; attach it to the channel's consumers
    gg = gaps["gap_s"].groupby(chan_key(gaps))
    ch = pd.DataFrame({"ack_to_next_deliver_p50_s": gg.median(), "ack_to_next_deliver_p90_s": gg.quantile(0.9),
                       "ack_to_next_deliver_max_s": gg.max()})
    ch = ch.reindex(chan_key(out))
    for col in ch:
        out[col] = ch[col].to_numpy()
    return out
