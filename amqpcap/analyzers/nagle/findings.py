"""The nagle analyzer's findings, each told only when its mechanism was at work: small-packets (what
the small segments carry decides the advice) and nagle-delayed-ack (docs/findings.md).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...analysis.registry import Finding
from ...io.load import Capture
from ...model.display_filters import FilterPart, filter_evidence, packets_part
from ...derive.names import worst_first
from ...derive.labels import who
from .constants import (
    AVOIDABLE_MIN_PACKETS, AVOIDABLE_RATE_CRITICAL, AVOIDABLE_RATE_INFO, AVOIDABLE_RATE_WARNING,
    AVOIDABLE_SHARE_MIN, EXAMPLE_PACKETS, FILTER_DIRECTIONS, FILTER_PACKETS, SMALL_SHARE_MIN, STALL_MIN_COUNT,
    STALL_SHARE_CRITICAL, STALL_SHARE_WARNING)


def _dir_clause(stream: int, direction: str, port: int, extra: str) -> str:
    side = "tcp.dstport" if direction == "c2s" else "tcp.srcport"
    return f"(tcp.stream eq {stream} && {side} == {port}{extra})"


#: What each kind of small segment says, and what to do about it (small-packets' advice).
CARRIES_TITLE = {
    "ack": "one basic.ack per TCP segment",
    "message": "one small message per TCP segment",
    "split": "each message's frames (method, header, body) in separate TCP segments",
    "disposition": "one AMQP 1.0 disposition per TCP segment",
    "flow": "one AMQP 1.0 flow (link credit) per TCP segment",
    "transfer-part": "each AMQP 1.0 message's transfer frames in separate TCP segments",
    "other": "many small TCP segments back to back",
}
CARRIES_ADVICE = {
    "ack": ("Consumers acknowledge every message on its own, one segment each: acknowledge in batches "
            "(basic.ack with multiple=true every N messages or every few milliseconds; PerfTest "
            "--multi-ack-every N), which also cuts the broker's work per message."),
    "message": ("Publishers send each message in its own segment, back to back: publish in batches (several "
                "publishes in one write: a buffered output flushed once per batch), or let the kernel coalesce "
                "a batch with TCP_CORK / MSG_MORE."),
    "split": ("The client writes the method, header and body frames of each message in separate send calls "
              "with TCP_NODELAY on, one segment per frame: build all frames of a message into one buffer and "
              "write it once (a buffered writer flushed per message or per batch, writev). Leaving Nagle on "
              "instead would hold the second write for the peer's delayed ACK (see nagle-delayed-ack)."),
    "disposition": ("The AMQP 1.0 receiver settles every delivery with a disposition of its own, one segment each: "
                    "settle in batches (one disposition naming a range first..last of delivery ids every N messages "
                    "or every few milliseconds), which also cuts the broker's work per message."),
    "flow": ("The AMQP 1.0 client grants link credit a little at a time, one flow per segment: grant more credit "
             "at once (a larger credit window, e.g. the receiver's prefetch), so that a flow is written every "
             "many deliveries, not after each."),
    "transfer-part": ("The AMQP 1.0 client writes each transfer frame of a message in its own send call: raise "
                      "max-frame-size so that a message fits one frame, or write all frames of a message (and "
                      "several messages) in one buffer."),
    "other": ("Many small writes leave back to back: coalesce them into one write per batch (a buffered "
              "output flushed once), or use TCP_CORK / MSG_MORE while a batch is written."),
}


def small_packets_finding(cap: Capture, seg: dict[str, np.ndarray], d: pd.DataFrame) -> Finding | None:
    """The client's writes (c2s) that waste packets, one subject per connection, worst first.
    Only c2s: the broker's writes are RabbitMQ's own (its writer already coalesces the frames
    queued together), and the client's patterns behind them have findings of their own."""
    hit = d[(d["direction"] == "c2s") & (d["carries"] != "heartbeat")
            & (d["small_share"] >= SMALL_SHARE_MIN) & (d["packets_saved_share"] >= AVOIDABLE_SHARE_MIN)
            & (d["packets_saved"] >= AVOIDABLE_MIN_PACKETS) & (d["packets_saved_s"] >= AVOIDABLE_RATE_INFO)]
    if not len(hit):
        return None
    hit = hit.sort_values(["packets_saved_s", "stream"], ascending=[False, True])
    w, _, subjects = worst_first(cap, hit, lambda r: dict(
        direction=r.direction, carries=r.carries, carries_share=round(float(r.carries_share), 3),
        data_segments=int(r.data_segments), small_segments=int(r.small_segments),
        small_while_unacked=int(r.small_while_unacked), packets_saved=int(r.packets_saved),
        packets_saved_s=round(float(r.packets_saved_s), 1), small_limit_bytes=int(r.small_limit_bytes)))
    worst = float(w["packets_saved_s"])
    severity = ("critical" if worst >= AVOIDABLE_RATE_CRITICAL else "warning" if worst >= AVOIDABLE_RATE_WARNING
                else "info")
    hit_g = hit["stream"].to_numpy(np.int64) * 2 + (hit["direction"] == "s2c").to_numpy()
    examples = seg["packet"][seg["in_run"] & np.isin(seg["g"], hit_g)][:EXAMPLE_PACKETS].tolist()
    clauses = [_dir_clause(int(r.stream), r.direction, int(r.broker_port), f" && tcp.len > 0 && tcp.len < {int(r.small_limit_bytes)}")
               for r in hit.head(FILTER_DIRECTIONS).itertuples()]
    kinds = list(dict.fromkeys(hit["carries"]))  # worst subject's kind first
    n_data, saved = int(hit["data_segments"].sum()), int(hit["packets_saved"].sum())
    if len(kinds) == 1:
        what = CARRIES_TITLE[kinds[0]]
    else:
        what = "; ".join(f"{CARRIES_TITLE[k]} ({int((hit['carries'] == k).sum())} connections)" for k in kinds)
    rate = f"{worst:,.0f} avoidable packets/s" if len(subjects) == 1 else f"up to {worst:,.0f} avoidable packets/s (the first)"
    return Finding(
        id="small-packets",
        severity=severity,
        title=(f"Small TCP segments from {who([x['connection'] for x in subjects])}: {what}; {rate}, "
               f"{float(w['packets_saved_share']):.0%} of its segments could have been written together"),
        evidence={
            "max_packets_saved_s": round(worst, 1),
            "carries": {k: int((hit["carries"] == k).sum()) for k in kinds},
            "directions": len(hit),
            "data_segments": n_data,
            "small_segments": int(hit["small_segments"].sum()),
            "small_while_unacked": int(hit["small_while_unacked"].sum()),
            "packets_saved": saved,
            "packets_saved_share": round(saved / n_data, 3),
            "streams": sorted({int(s) for s in hit["stream"]}),
            "packets": examples,
            **filter_evidence(FilterPart(" || ".join(clauses), len(clauses), len(hit), "directions")),
        },
        advice=" ".join(CARRIES_ADVICE[k] for k in kinds),
        impact=min(1.0, worst / AVOIDABLE_RATE_CRITICAL),
        subjects=subjects,
    )


def nagle_finding(cap: Capture, d: pd.DataFrame, stalls: pd.DataFrame) -> Finding | None:
    """Directions whose writes Nagle held until the peer's delayed ACK (every stall passed the
    mechanism checks of analyze_segments), one subject per connection direction, worst first;
    severity from the worst one's share of its own connection's time."""
    if not len(stalls):
        return None
    hit = d[(d["stalls"] >= STALL_MIN_COUNT) & (d["stall_share"] >= STALL_SHARE_WARNING)]
    if not len(hit):
        return None
    hit = hit.sort_values(["stall_share", "stream"], ascending=[False, True])
    w, _, subjects = worst_first(cap, hit, lambda r: dict(
        direction=r.direction, stalls=int(r.stalls), median_stall_s=float(r.median_stall_s),
        stall_time_s=float(r.stall_time_s), stall_share=round(float(r.stall_share), 4),
        connection_s=float(r.connection_s)))
    worst = float(w["stall_share"])
    severity = "critical" if worst >= STALL_SHARE_CRITICAL else "warning"
    key = stalls["stream"].astype(np.int64) * 2 + (stalls["direction"] == "s2c")
    st = stalls[key.isin(hit["stream"].to_numpy(np.int64) * 2 + (hit["direction"] == "s2c").to_numpy())]
    writer = {"c2s": "the client's", "s2c": "the broker's"}[w["direction"]] if hit["direction"].nunique() == 1 else "the"
    peer = {"c2s": "the broker's", "s2c": "the client's"}[w["direction"]] if hit["direction"].nunique() == 1 else "the peer's"
    worst_of = "" if len(subjects) == 1 else f" on {subjects[0]['connection']}"
    return Finding(
        id="nagle-delayed-ack",
        severity=severity,
        title=(f"Nagle held {writer} small writes on {who([x['connection'] for x in subjects])} until {peer} delayed "
               f"ACK: {int(w['stalls'])} times{worst_of}, median {float(w['median_stall_s']) * 1e3:.0f} ms, "
               f"{float(w['stall_time_s']):.2f} s = {worst:.0%} of the connection's time"),
        evidence={
            "stalls": int(len(st)),
            "median_stall_s": float(np.median(st["stall_s"])),
            "max_stall_s": float(st["stall_s"].max()),
            "median_ack_delay_s": float(np.median(st["ack_delay_s"])),
            "stall_time_s": float(w["stall_time_s"]),
            "stall_share": round(worst, 4),
            "directions": len(hit),
            "streams": sorted({int(s) for s in hit["stream"]}),
            "packets": st[["previous_packet", "ack_packet", "packet"]].head(3).to_numpy().ravel().tolist(),
            **filter_evidence(packets_part(st["packet"], FILTER_PACKETS)),
        },
        advice=("Write-write-read with Nagle on: each small write after the first waited until the first was "
                "acknowledged, while only that one small segment was in flight and the receive window was open "
                "(Nagle, RFC 896), and the peer delays that ACK (~40 ms on Linux, up to 200 ms elsewhere). Write "
                "the whole message (method, header and body frames) in one send call, or set TCP_NODELAY on the "
                "socket (most AMQP clients do by default); with TCP_NODELAY, still write a message's frames "
                "together so as not to trade the stall for small-packets."),
        impact=min(1.0, worst),
        subjects=subjects,
    )
