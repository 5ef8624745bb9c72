"""The stalls' findings, each told only when its mechanism was at work in this capture:
receiver-window, broker-flow-control, publisher-blocked, capture-gaps (docs/findings.md).
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import numpy as np
import pandas as pd

from ...analysis.registry import Finding
from ...io.load import Capture
from ...derive.labels import who
from ...model.display_filters import filter_evidence, streams_part
from ...io.inputs import ring_holes
from ...derive.names import worst_first
from ...model.wording import counted
from ...model.written_values import iso_utc
from .constants import (
    CAPTURE_GAPS_CRITICAL_SHARE, CAPTURE_GAPS_INFO_MAX, CAPTURE_GAPS_WARNING_SHARE, DIRS, FLOW_CONTROL_DOC,
    PUBLISHER_BLOCKED_CRITICAL_S, RECEIVER_WINDOW_CRITICAL_SHARE, RECEIVER_WINDOW_WARNING_S,
    WINDOW_FULL_PACKETS, ZERO_WINDOW_PACKETS)


def _duration(x: float) -> str:
    """`1.21 s`, `3.0 ms`, `0.076 ms`: a title's duration in a unit that shows it."""
    return f"{x:.2f} s" if x >= 0.1 else f"{x * 1e3:.1f} ms" if x >= 1e-3 else f"{x * 1e3:.2g} ms"


def _share(x: float) -> str:
    """`63%`, `0.15%`: a share of time that does not read as none when it is small but some."""
    return f"{x:.0%}" if x >= 0.01 or x <= 0 else f"{x * 100:.2g}%"


def _times(n: int, p50_s: float, longest_s: float, total_s: float) -> str:
    """How often and how long, never a sum alone: `87 times, median 0.076 ms, longest 1.20 s,
    1.21 s in all`; `twice, 2.56 s and 0.009 ms, 2.56 s in all`; `once, 2.41 s`. A total of
    many short intervals read as one duration would tell of a stop that never happened. (The
    median of two is their mean, a length neither had: two are told each.)"""
    if n <= 1:
        return f"once, {_duration(total_s)}"
    if n == 2:
        return (f"twice, {_duration(longest_s)} and {_duration(max(total_s - longest_s, 0.0))}, "
                f"{_duration(total_s)} in all")
    return (f"{n:,} times, median {_duration(p50_s)}, longest {_duration(longest_s)}, "
            f"{_duration(total_s)} in all")


def _window_packets(cited: pd.DataFrame, sides: pd.DataFrame) -> pd.DataFrame:
    """For each direction of `sides` (stream, held: the direction its peer's window held back),
    the packets a window finding cites (`_cited`): the first ZERO_WINDOW_PACKETS zero windows its
    peer advertised and the first WINDOW_FULL_PACKETS window-full segments it sent, in row order
    (stream, time). Columns: stream, held, kind (`zero-window`, `window-full`), rank, packet."""
    wanted = sides["stream"].to_numpy(np.int64) * 2 + sides["d"].to_numpy(np.int64)
    mine = cited[np.isin(cited["stream"].to_numpy(np.int64) * 2 + cited["held"].to_numpy(np.int64), wanted)]
    out = [mine[mine["kind"] == kind].drop(columns="_t") for kind in ("zero-window", "window-full")]
    return pd.concat(out, ignore_index=True)


def _window_finding_parts(cap: Capture, wp: pd.DataFrame, g: pd.DataFrame, stalls_tbl: pd.DataFrame,
                          peer_filter: str):
    """What receiver-window and broker-flow-control share: (severity, subjects, evidence) for the
    directions ``g`` (rows of _window_sides, worst first). Severity from the worst: critical when
    a connection spent RECEIVER_WINDOW_CRITICAL_SHARE of its time window-limited, warning from
    RECEIVER_WINDOW_WARNING_S of it, else info; monotonic in both numbers."""
    share, limited = float(g["window_limited_share"].max()), float(g["window_limited_s"].max())
    severity = ("critical" if share >= RECEIVER_WINDOW_CRITICAL_SHARE
                else "warning" if limited >= RECEIVER_WINDOW_WARNING_S else "info")
    w, _, subjects = worst_first(cap, g, lambda r: dict(
        direction=str(DIRS[r.d]), window_limited_s=round(float(r.window_limited_s), 6),
        window_limited_share=round(float(r.window_limited_share), 4),
        window_limited_episodes=int(r.window_limited_episodes),
        window_limited_p50_s=None if np.isnan(r.window_limited_p50_s) else round(float(r.window_limited_p50_s), 6),
        window_limited_longest_s=round(float(r.window_limited_longest_s), 6), zero_window_ads=int(r.zero_window_ads),
        window_full_segments=int(r.window_full_segments), stalls=int(r.stalls), stalled_s=round(float(r.stalled_s), 6),
        **({"publishes": int(r.publishes)} if r.d == 0 else {})))
    streams = sorted(int(x) for x in g["stream"])
    wmin, wmax = g["peer_window_min_bytes"].dropna(), g["peer_window_max_bytes"].dropna()
    held = int(g["d"].iloc[0])
    # The way into Wireshark: the peer's zero windows, the held direction's window-full
    # segments (the first of each, in stream order), and the bounds of its longest window
    # stalls (a few of each).
    rw = stalls_tbl[(stalls_tbl["cause"] == "receiver-window") & stalls_tbl["stream"].isin(streams)
                    & (stalls_tbl["direction"] == DIRS[held])].nlargest(3, "duration_s")
    mine = wp[wp["stream"].isin(streams) & (wp["held"] == held)].sort_values(["stream", "rank"], kind="stable")

    def first(kind: str, n: int) -> list[int]:
        return mine.loc[mine["kind"] == kind, "packet"].head(n).tolist()

    packets = sorted(set(first("zero-window", ZERO_WINDOW_PACKETS) + first("window-full", WINDOW_FULL_PACKETS)
                         + rw["first_packet"].tolist() + rw["last_packet"].tolist()))
    evidence = {
        "connections": len(g),
        "window_limited_s": round(float(w["window_limited_s"]), 6),
        "window_limited_share": round(float(w["window_limited_share"]), 4),
        "window_limited_episodes": int(w["window_limited_episodes"]),
        "window_limited_p50_s": None if np.isnan(w["window_limited_p50_s"]) else round(float(w["window_limited_p50_s"]), 6),
        "window_limited_longest_s": round(float(w["window_limited_longest_s"]), 6),
        "stalled_s": round(float(w["stalled_s"]), 6),
        "longest_stall_s": round(float(g["longest_stall_s"].max()), 6),
        "stalls": int(g["stalls"].sum()),
        "zero_window_ads": int(g["zero_window_ads"].sum()),
        "window_full_segments": int(g["window_full_segments"].sum()),
        "peer_window_min_bytes": int(wmin.min()) if len(wmin) else None,
        "peer_window_max_bytes": int(wmax.max()) if len(wmax) else None,
        "streams": streams,
        "packets": [int(x) for x in packets],
        **filter_evidence(streams_part(streams), f" && {peer_filter}"),
    }
    return severity, subjects, evidence


def _window_times(sub: dict) -> str:
    """A window subject's zero or full windows: how many, the median and longest, and in all."""
    return _times(sub["window_limited_episodes"], sub["window_limited_p50_s"] or 0.0, sub["window_limited_longest_s"],
                  sub["window_limited_s"])


def _port_match(cap: Capture, streams) -> str:
    """The broker port(s) of these connections as a filter comparison: `== 5672`, `in {5671, 5672}`."""
    ports = sorted({int(p) for p in cap.connections.loc[cap.connections["stream"].isin(list(streams)), "broker_port"]})
    return f"== {ports[0]}" if len(ports) == 1 else "in {" + ", ".join(map(str, ports)) + "}"


class _WindowSide(NamedTuple):
    """What tells the two window findings apart (`_window_finding`): the id, where the broker's port
    stands in the peer's zero-window packets and in the held sender's window-full ones, the advice."""

    id: str
    zero_window_port: str
    window_full_port: str
    advice: str


#: The window findings by the direction their peer's window held back (`DIRS`): c2s (0), the
#: broker's window held a client's traffic; s2c (1), a client's held the broker's.
WINDOW_SIDES = (
    _WindowSide(id="broker-flow-control", zero_window_port="tcp.srcport", window_full_port="tcp.dstport", advice=(
        "RabbitMQ stopped reading these connections' sockets, so its TCP receive buffer filled and it advertised a "
        "zero or full window: credit-based flow control (" + FLOW_CONTROL_DOC + "), which throttles "
        "publishers that publish faster than the queues (or the channel and connection processes in front "
        "of them) can take the messages; the management UI shows these connections in state 'flow' "
        "(rabbitmqctl list_connections name state). Time under connection.blocked (a resource alarm, see "
        "publisher-blocked) is not counted here. "
        "The publishers are not at fault; the broker is at capacity for this load: spread the publishes over "
        "more queues (one queue is one Erlang process, one core), keep the queues short (consumers that keep "
        "up), use publisher confirms to bound what each publisher has in flight, or publish at a lower rate. "
        "If the connections are not in 'flow', the broker is short of CPU.")),
    _WindowSide(id="receiver-window", zero_window_port="tcp.dstport", window_full_port="tcp.srcport", advice=(
        "The client application, or its socket receive buffer, does not keep up: it left the socket unread "
        "while the broker had data for it. Do not do slow work on the connection's I/O thread (blocking "
        "callbacks, synchronous DB calls, long GC pauses); hand messages to a worker pool. Do not pin a small "
        "SO_RCVBUF (let kernel autotuning grow it; see peer_window_max_bytes). Lower the prefetch (basic.qos) "
        "so less data piles up unread.")),
)


def _window_finding(held: int, cap: Capture, wp: pd.DataFrame, sides: pd.DataFrame,
                    stalls_tbl: pd.DataFrame) -> Finding | None:
    """A side's window finding, every connection whose `held` direction (`DIRS`) waited on its
    peer's zero or full receive window a subject, worst first. receiver-window (s2c held): clients
    that stopped reading the broker's traffic. broker-flow-control (c2s held): the broker stopped
    reading clients, outside any connection.blocked (that is publisher-blocked's resource alarm);
    RabbitMQ does this to publishers under credit-based flow control."""
    g = sides[sides["d"] == held]
    if g.empty:
        return None
    side, port = WINDOW_SIDES[held], _port_match(cap, g["stream"])
    severity, subjects, ev = _window_finding_parts(
        cap, wp, g, stalls_tbl, f"((tcp.analysis.zero_window && {side.zero_window_port} {port}) || "
                                f"(tcp.analysis.window_full && {side.window_full_port} {port}))")
    if not held:
        ev["publishes"] = int(g["publishes"].sum())
    w, one = subjects[0], len(subjects) == 1
    names = who([x["connection"] for x in subjects])
    if held:
        head = (f"{names} stopped reading: the broker's data waited on {'its' if one else 'their'} zero or full TCP "
                f"receive window{'' if one else ', on the first connection'}")
    else:
        whom = "publishers" if (g["publishes"] > 0).all() else "connections"
        head = (f"Broker flow control: the broker stopped reading {'its ' + whom[:-1] if one else whom} {names}; its "
                f"TCP receive window towards {'it' if one else 'them'} was zero or full"
                f"{'' if one else ', towards the first'}")
    title = (f"{head} {_window_times(w)} = {_share(w['window_limited_share'])} of {'the' if one else 'its'} "
             f"connection's time ({counted(w['zero_window_ads'], 'zero-window advertisement')})")
    return Finding(side.id, severity, title, ev, side.advice,
                   impact=min(float(g["window_limited_share"].max()), 1.0), subjects=subjects)


#: the analyzer's two window findings: one function, a side each
_receiver_window = partial(_window_finding, 1)
_broker_flow_control = partial(_window_finding, 0)


def _publisher_blocked(blocked: pd.DataFrame, deliveries: int, cap: Capture) -> Finding | None:
    """publisher-blocked: one finding, every blocked connection a subject (longest block first),
    with the alarm's reason, how long, and what was published (`_block_publishes`) and delivered
    (`_deliveries_in`) meanwhile."""
    if blocked.empty:
        return None
    blocked = blocked.assign(dur=blocked["end"] - blocked["start"])
    dur = blocked["dur"]
    total, longest = float(dur.sum()), float(dur.max())
    open_end = bool((~blocked["lifted"]).any())
    severity = "critical" if longest >= PUBLISHER_BLOCKED_CRITICAL_S or open_end else "warning"
    streams = sorted(blocked["stream"].unique().tolist())
    reasons = sorted({str(r) for r in blocked["reason"] if isinstance(r, str)})
    per, subjects = _blocked_connections(blocked, cap)
    packets = blocked["blocked_packet"].tolist() + blocked["unblocked_packet"].dropna().astype(int).tolist()
    evidence = {
        "blocks": int(len(blocked)),
        "blocked_s": total,
        "blocked_p50_s": float(dur.median()),
        "longest_blocked_s": longest,
        "first_blocked_at_s": float(blocked["start"].min()),
        "reasons": reasons,
        "still_blocked_at_end": open_end,
        "publishes_while_blocked": int(blocked["publishes"].sum()),
        "publish_bytes_while_blocked": int(blocked["publish_body_bytes"].sum()),
        "deliveries_while_blocked": deliveries,
        "connections_with_this_finding": len(per),
        "streams": streams,
        "packets": sorted(int(x) for x in packets)[:20],
        **filter_evidence(streams_part(streams), " && amqp.method.class == 10 && "
                                                 "(amqp.method.method == 60 || amqp.method.method == 61)"),
    }
    what = ", ".join(reasons) if reasons else "no reason given"
    w = subjects[0]
    whom = w["connection"] if len(per) == 1 else f"{len(per)} publishing connections (longest: {w['connection']})"
    # the worst connection's blocks: how many, how long each (median, longest) and in all
    how_long = (f"for {_duration(w['blocked_s'])}" if w["blocks"] == 1 else
                _times(w["blocks"], w["blocked_p50_s"], w["longest_blocked_s"], w["blocked_s"]))
    title = (f"The broker blocked {whom} {how_long} (resource alarm: {what})"
             + ("" if not evidence["publishes_while_blocked"] else
                f"; {evidence['publishes_while_blocked']:,} publishes "
                f"({evidence['publish_bytes_while_blocked']:,} body bytes) were written into the blocked "
                f"connection{'s' if len(per) > 1 else ''} meanwhile")
             + ("; no consumer got a delivery meanwhile" if evidence["deliveries_while_blocked"] == 0 else
                f"; consumers got {evidence['deliveries_while_blocked']:,} deliveries meanwhile"))
    advice = ("A broker resource alarm blocked every publishing connection ('low on memory': memory above "
              "vm_memory_high_watermark; 'low on disk': free disk below disk_free_limit). Find why the broker ran "
              "short: queues growing because consumers are slower than publishers (see the consumer findings), "
              "large messages or long queues held in memory (use lazy or quorum queues, set max-length), or "
              "too little RAM/disk for the load. Raise the limits only with the resources to back them. Make "
              "publishers handle connection.blocked (Java BlockedListener, pika "
              "add_on_connection_blocked_callback) instead of timing out: what they write while blocked waits "
              "in socket buffers and client memory, unread by the broker.")
    return Finding("publisher-blocked", severity, title, evidence, advice, impact=min(total / 10.0, 1.0),
                   subjects=subjects)


def _blocked_connections(blocked: pd.DataFrame, cap: Capture) -> tuple[pd.DataFrame, list[dict]]:
    """The blocked connections (a row each: blocked_s, longest, blocks, p50 (the median block),
    publishes, body, open_end, reason), longest block first, and the finding's subject for each."""
    per = blocked.groupby("stream").agg(blocked_s=("dur", "sum"), longest=("dur", "max"), blocks=("dur", "size"),
                                        p50=("dur", "median"),
                                        publishes=("publishes", "sum"), body=("publish_body_bytes", "sum"),
                                        open_end=("lifted", lambda x: bool((~x).any())),
                                        reason=("reason", lambda x: ", ".join(sorted({str(v) for v in x
                                                                                      if isinstance(v, str)}))))
    per = per.sort_values(["longest", "publishes"], ascending=False, kind="stable").reset_index()
    return per, worst_first(cap, per, lambda r: dict(
        blocks=int(r.blocks), blocked_s=float(r.blocked_s), blocked_p50_s=float(r.p50),
        longest_blocked_s=float(r.longest), reason=r.reason or None, still_blocked_at_end=bool(r.open_end),
        publishes_while_blocked=int(r.publishes), publish_bytes_while_blocked=int(r.body),
        severity="critical" if r.longest >= PUBLISHER_BLOCKED_CRITICAL_S or r.open_end else "warning")).subjects


#: why a capture gap's bytes are missing, in the order the advice tells them (docs/analyzers/stalls.md#capture-gaps)
GAP_CAUSES = ("missing-file", "kernel-drops")


def _gap_severity(n: int, missing: int, span: int) -> str:
    """The severity of `n` gaps missing `missing` of their connections' `span` stream bytes."""
    share = missing / span if span else 1.0
    if share >= CAPTURE_GAPS_CRITICAL_SHARE:
        return "critical"
    if n > CAPTURE_GAPS_INFO_MAX or share >= CAPTURE_GAPS_WARNING_SHARE:
        return "warning"
    return "info"


def _gap_causes(gaps: pd.DataFrame, cap: Capture) -> tuple[np.ndarray, np.ndarray, list[dict]]:
    """Each gap's cause (`GAP_CAUSES`) and ring hole (index into the holes, -1: none), and the
    holes of the ring read as this capture (`amqpcap.io.inputs.ring_holes`). A gap is a missing
    file's when its bytes were lost in the file's time: its direction's data before it
    (``after_ts``; none: its connection's first packet) is no later than the last packet of the
    file before the hole and its own packet no earlier than the first of the file after. The
    capture's start and end make no gap (a direction's bytes count from its first packet, and
    only bytes the peer acknowledged are missing), so the rest were dropped while capturing."""
    holes = ring_holes(cap.summary.get("files", []))
    hole = np.full(len(gaps), -1)
    if holes and len(gaps):
        first = cap.connections.set_index("stream")["first_ts"]
        first_ns = first.reindex(gaps["stream"].to_numpy(np.int64, na_value=-1)).array.asi8
        after = gaps["after_ts"].to_numpy(np.int64)
        after = np.where(after >= 0, after, first_ns)  # (NaT: the smallest int64, before any hole)
        ts = gaps["ts"].to_numpy(np.int64)
        for i, h in reversed(list(enumerate(holes))):  # the earliest hole a gap spans names it
            hole[(after <= pd.Timestamp(h["from_ts"]).value) & (ts >= pd.Timestamp(h["to_ts"]).value)] = i
    return np.where(hole >= 0, GAP_CAUSES[0], GAP_CAUSES[1]), hole, holes


def _capture_gaps(gaps: pd.DataFrame, cap: Capture, stalls_tbl: pd.DataFrame) -> Finding | None:
    """capture-gaps: bytes the capture lost, told by cause (`_gap_causes`): a ring's missing
    file, or drops while capturing. Severity from the share of their connections' bytes lost,
    cause by cause; a missing file is at most a warning (the capture tool dropped nothing)."""
    if gaps.empty:
        return None
    cause, hole, holes = _gap_causes(gaps, cap)
    n, missing = int(len(gaps)), int(gaps["bytes"].sum())
    span_of = (cap.connections["c2s_stream_bytes"] + cap.connections["s2c_stream_bytes"]).groupby(
        cap.connections["stream"]).sum()

    def span(rows: pd.DataFrame) -> int:
        return int(span_of.reindex(rows["stream"].dropna().unique()).fillna(0).sum())

    streams = sorted(int(s) for s in gaps["stream"].dropna().unique())
    share = missing / span(gaps) if span(gaps) else 1.0
    by_cause, severities = {}, []
    for c in GAP_CAUSES:
        g = gaps[cause == c]
        if g.empty:
            continue
        sev = _gap_severity(len(g), int(g["bytes"].sum()), span(g))
        severities.append("warning" if c == "missing-file" and sev == "critical" else sev)
        by_cause[c] = {"gaps": int(len(g)), "bytes_missing": int(g["bytes"].sum()),
                       "streams": sorted(int(s) for s in g["stream"].dropna().unique())}
    severity = next(s for s in ("critical", "warning", "info") if s in severities)
    lost_in = []  # the ring's holes the gaps fell in, with what each took
    for i, h in enumerate(holes):
        g = gaps[hole == i]
        if len(g):
            lost_in.append({"files": h["files"], "after": h["after"], "before": h["before"],
                            "from_ts": iso_utc(h["from_ts"]), "to_ts": iso_utc(h["to_ts"]),
                            "gaps": int(len(g)), "bytes_missing": int(g["bytes"].sum())})
    per_stream = gaps.groupby("stream", observed=True)["bytes"].agg(["size", "sum"])
    evidence = {
        "gaps": n,
        "bytes_missing": missing,
        "missing_share": share,
        "by_cause": by_cause,
        "missing_files": lost_in,
        "stalls_uncertain": int((stalls_tbl["cause"] == "capture-gap").sum()),
        "gaps_by_stream": {int(s): int(r["size"]) for s, r in per_stream.iterrows()},
        "bytes_missing_by_stream": {int(s): int(r["sum"]) for s, r in per_stream.iterrows()},
        "streams": streams,
        "packets": sorted(gaps["packet"].dropna().astype(int))[:10],  # the first ten, whatever the rows' order
        **filter_evidence(streams_part(streams), " && (tcp.analysis.lost_segment || tcp.analysis.ack_lost_segment)"),
    }
    files = [f for h in lost_in for f in h["files"]]
    named = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    whole = f"{missing:,} bytes in {counted(n, 'gap')} ({share:.1%} of those connections' bytes)"
    if list(by_cause) == ["missing-file"]:
        title = (f"The ring is missing {'file' if len(files) == 1 else 'files'} {named}: the connections that crossed "
                 f"{'it' if len(files) == 1 else 'them'} lost {whole}; conclusions about that interval are uncertain")
    elif list(by_cause) == ["kernel-drops"]:
        title = f"The capture lost {whole}: conclusions about those intervals are uncertain"
    else:
        title = (f"The capture lost {whole}: {by_cause['missing-file']['bytes_missing']:,} in the ring's missing "
                 f"{'file' if len(files) == 1 else 'files'} {named}, {by_cause['kernel-drops']['bytes_missing']:,} "
                 "dropped while capturing; conclusions about those intervals are uncertain")
    advice = []
    for h in lost_in:
        advice.append(f"{'File ' + h['files'][0] + ' is' if len(h['files']) == 1 else 'Files ' + ', '.join(h['files']) + ' are'}"
                      f" missing from the ring (between {h['after']}'s last packet, {h['from_ts']}, and "
                      f"{h['before']}'s first, {h['to_ts']}): its packets were never read, so the connections "
                      "that crossed it lost their bytes there. Find the file (a copy left behind, a ring that "
                      "overwrote it: tcpdump -W keeps only its last files) and analyze the whole ring, or accept "
                      "that this interval cannot be known. The files read are sound: the capture tool's buffer "
                      "did not cause this.")
    if "kernel-drops" in by_cause:
        advice.append("The capture, not the network, dropped packets (the peer acknowledged bytes the capture never "
                      "saw), so what happened inside those gaps (windows, frames, timing) cannot be known. Capture "
                      "again with a bigger kernel buffer (tcpdump -B 65536, in KiB), full packets or a snaplen that "
                      "keeps the AMQP frame headers (-s 0), a narrow capture filter ('tcp port 5672') rather than "
                      "display filtering later, writing to a fast local disk, and rotating files (-C/-G) on long "
                      "captures. tcpdump's 'packets dropped by kernel' line confirms it.")
    return Finding("capture-gaps", severity, title, evidence, " ".join(advice), impact=min(share, 1.0))
