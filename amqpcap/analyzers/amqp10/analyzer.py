"""The `amqp10` analyzer: its state is the partition's AMQP 1.0 frame rows, gathered slice after
slice; at the partition's close the derivations (`amqpcap.derive.amqp10`) run over them once, so
the result is the same in memory, per bucket and over slices. (The state grows with the
partition's AMQP 1.0 frames, not with its connections: a bounded, carried state per link is the
next step if 1.0 traffic gets large.) Every table is per connection, so buckets of whole
connections merge by putting their rows together."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...analysis.contract import Analyzer
from ...analysis.registry import AnalyzerResult, analyzer
from ...derive.amqp10.credit import credit, credit_of
from ...derive.amqp10.deliveries import deliveries, deliveries_of
from ...derive.amqp10.frames import amqp10_frames, empty
from ...derive.amqp10.handles import links, links_of
from ...derive.amqp10.links import link_rows, link_rows_of
from ...derive.amqp10.sessions import sessions, sessions_of
from ...derive.amqp10.windows import closures, closures_of, windows, windows_of
from ...derive.labels import connection_labels
from ...io.load import Capture
from ...io.rows import merge_rows
from ...model.facts import CaptureFacts
from .findings import findings

#: the tables of a part, and the key that orders their rows across partitions
KEYS = {"links": ["stream", "link"], "settlement": ["stream", "link"], "credit": ["stream", "link"],
        "sessions": ["stream", "session"], "deliveries": ["stream", "session", "direction", "first_packet"],
        "refills": ["stream", "link", "zero_packet"], "dispositions": ["stream", "packet", "session"],
        "errors": ["stream", "packet", "performative"], "connections": ["stream"],
        "closures": ["stream", "session", "direction", "close_packet"], "handles": ["stream", "link"]}
#: the tables written (the rest are what the findings read)
WRITTEN = ("links", "settlement", "credit", "sessions")
#: the percentiles of settlement latency per link
QUANTILES = {"p50": 0.5, "p95": 0.95}
OUTCOMES = ("accepted", "rejected", "released", "modified")
ERROR_COLUMNS = ["stream", "packet", "ts", "performative", "side", "channel", "condition", "description"]


def _derived(rows: Capture, f: pd.DataFrame) -> dict:
    """The derivations over `f`: the capture's own (cached, shared) when `f` is its whole table."""
    if f is amqp10_frames(rows):
        s, h, d, c, w, lr = sessions(rows), links(rows), deliveries(rows), credit(rows), windows(rows), link_rows(rows)
        cl = closures(rows)
    else:
        s = sessions_of(f)
        h = links_of(f, s.of_frame)
        d = deliveries_of(f, s.of_frame, h.of_frame)
        c = credit_of(f, s.of_frame, h.table, h.of_frame, d.table)
        w = windows_of(f, s.of_frame)
        cl = closures_of(f, s.of_frame)
        lr = link_rows_of(f, h.table, h.of_frame, d.table, d.dispositions, c.links)
    return {"sessions": s, "links": h, "deliveries": d, "credit": c, "windows": w, "link_rows": lr, "closures": cl}


def _settlement(lr: pd.DataFrame, d: pd.DataFrame) -> pd.DataFrame:
    """Per link: how its deliveries were settled, and how long after their last frame (the
    deliver→ack twin when the broker sends, the confirm twin when the client sends)."""
    out = lr[["stream", "link", "name", "client_role", "sender_direction"]].copy()
    out["twin"] = np.where(out["sender_direction"] == "s2c", "deliver-ack",
                           np.where(out["sender_direction"] == "c2s", "confirm", None))
    key = ["stream", "link"]
    x = pd.DataFrame({"stream": d["stream"].to_numpy(np.int64), "link": d["link"].to_numpy(np.int64),
                      "deliveries": 1, "settled_at_send": d["settled_at_send"].to_numpy(bool).astype(np.int64),
                      "settled_by_disposition": d["settle_packet"].notna().to_numpy(bool).astype(np.int64),
                      "unsettled": (d["settle_packet"].isna().to_numpy(bool)
                                    & ~d["settled_at_send"].to_numpy(bool)).astype(np.int64),
                      **{o: (d["outcome"].to_numpy(object) == o).astype(np.int64) for o in OUTCOMES},
                      "redelivered": d["redelivered"].to_numpy(bool).astype(np.int64)})
    counts = x.groupby(key).sum()
    lat = d.dropna(subset=["settle_latency_s"]).groupby(key)["settle_latency_s"]
    out = out.join(counts, on=key)
    for name, q in QUANTILES.items():
        out = out.join(lat.quantile(q).rename(f"latency_{name}_s"), on=key)
    out = out.join(lat.max().rename("latency_max_s"), on=key)
    for c in counts.columns:
        out[c] = out[c].fillna(0).astype(np.int64)
    for c in ("latency_p50_s", "latency_p95_s", "latency_max_s"):
        out[c] = out[c].astype(np.float64) if c in out else np.full(len(out), np.nan)
    return out.drop(columns=["sender_direction"])


def _sessions(s: pd.DataFrame, w: pd.DataFrame) -> pd.DataFrame:
    out = s.copy()
    for d in ("c2s", "s2c"):
        wd = w[w["direction"] == d].set_index(["stream", "session"])
        out = out.join(wd[["window_min", "zero_window_s", "transfers_beyond_window"]].add_prefix(f"{d}_"),
                       on=["stream", "session"])
        out[f"{d}_zero_window_s"] = out[f"{d}_zero_window_s"].astype(np.float64)
        out[f"{d}_window_min"] = out[f"{d}_window_min"].astype("Int64")
        out[f"{d}_transfers_beyond_window"] = out[f"{d}_transfers_beyond_window"].fillna(0).astype(np.int64)
    return out


def _errors(f: pd.DataFrame) -> pd.DataFrame:
    """Every detach, end or close that carries an error."""
    e = f[f["performative"].isin(["detach", "end", "close"]).to_numpy(bool) & f["error_condition"].notna().to_numpy(bool)]
    return pd.DataFrame({
        "stream": e["stream"].to_numpy(np.int64), "packet": e["packet"].to_numpy(np.int64), "ts": e["ts"].to_numpy(),
        "performative": e["performative"].astype(object).to_numpy(),
        "side": np.where(e["direction"].astype(object).to_numpy() == "c2s", "client", "broker"),
        "channel": e["channel"].to_numpy(np.int64), "condition": e["error_condition"].astype(object).to_numpy(),
        "description": e["error_description"].astype(object).to_numpy()}, columns=ERROR_COLUMNS)


def _connections(f: pd.DataFrame) -> pd.DataFrame:
    """Per connection: whether the capture holds its start (the client's open) and its end (a close)."""
    streams = np.unique(f["stream"].to_numpy(np.int64))
    perf, d = f["performative"].astype(object).to_numpy(), f["direction"].astype(object).to_numpy()
    st = f["stream"].to_numpy(np.int64)
    opened = np.isin(streams, st[(perf == "open") & (d == "c2s")])
    closed = np.isin(streams, st[perf == "close"])
    ts = f["ts"].array.asi8
    # the connection's time in the capture (its first to its last AMQP 1.0 frame): what a wait is a share of
    seen = np.array([float(np.ptp(ts[st == s])) / 1e9 for s in streams.tolist()], np.float64)
    return pd.DataFrame({"stream": streams, "open_seen": opened, "close_seen": closed, "seen_s": seen})


def part_of(rows: Capture, f: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """A partition's tables from its AMQP 1.0 frames `f`."""
    x = _derived(rows, f)
    lr, d = x["link_rows"], x["deliveries"].table
    cr = x["credit"].links.merge(lr[["stream", "link", "name", "client_role"]], on=["stream", "link"], how="left")
    cr = cr[["stream", "link", "name", "client_role", *[c for c in cr.columns if c not in
                                                         ("stream", "link", "name", "client_role")]]]
    return {"links": lr, "settlement": _settlement(lr, d), "credit": cr,
            "sessions": _sessions(x["sessions"].table, x["windows"]), "deliveries": d,
            "refills": x["credit"].refills, "dispositions": x["deliveries"].dispositions, "errors": _errors(f),
            "connections": _connections(f), "closures": x["closures"],
            "handles": x["links"].table[["stream", "link", "client_handle", "broker_handle"]].copy()}


@analyzer("amqp10")
class Amqp10(Analyzer[list, list]):
    """AMQP 1.0 links: settlement, outcomes, link credit, errors."""

    def start(self, facts: CaptureFacts) -> list:
        return []

    def step(self, seen: list, rows: Capture, facts: CaptureFacts, last: bool) -> list:
        f = amqp10_frames(rows)
        return seen + [f] if len(f) else seen

    def close(self, seen: list, rows: Capture, facts: CaptureFacts) -> list[dict]:
        """The partition's tables, in a list of the partitions'."""
        f = seen[0] if len(seen) == 1 else pd.concat(seen, ignore_index=True) if seen else empty()
        return [part_of(rows, f)]

    def merge(self, a: list[dict], b: list[dict]) -> list[dict]:
        return a + b

    def finish(self, parts: list[dict], whole: Capture, facts: CaptureFacts) -> AnalyzerResult:
        t = {name: merge_rows([p[name] for p in parts], key) for name, key in KEYS.items()}
        for name in ("links", "settlement", "credit", "sessions"):
            t[name].insert(1, "connection", connection_labels(whole, t[name]["stream"]))
        s, d = t["settlement"], t["deliveries"]
        summary = {"amqp10": {
            "connections": int(len(t["connections"])), "sessions": int(len(t["sessions"])),
            "links": int(len(t["links"])), "deliveries": int(len(d)),
            "settled_at_send": int(d["settled_at_send"].sum()) if len(d) else 0,
            "settled_by_disposition": int(d["settle_packet"].notna().sum()) if len(d) else 0,
            "unsettled_at_end": int(s["unsettled"].sum()),
            "outcomes": {o: int(s[o].sum()) for o in OUTCOMES},
            "redelivered": int(s["redelivered"].sum()),
            "errors": int(len(t["errors"])),
        }}
        return AnalyzerResult("amqp10", tables={n: t[n] for n in WRITTEN}, summary=summary,
                              findings=findings(whole, t), plots=[])
