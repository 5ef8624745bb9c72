"""Small segments, unbatched writes and Nagle/delayed-ACK stalls, per connection and direction.

All per-segment work is whole-column numpy: segments of every (stream, direction) are laid out
in one array sorted by a group key, and everything that needs the *peer's* packets (its
cumulative ACK, its data, its last packet before ours) is found with one `searchsorted` on the
peer's (group, packet number) keys. Documentation: docs/analyzers/nagle.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..analysis import AnalyzerResult, Finding, Plot, analyzer
from ..capture import Capture

# ----------------------------------------------------------------------------------- definitions

#: A data segment is "small" when its payload is below this share of the MSS: far from full,
#: so packets (syscalls, wake-ups, headers) are spent on little data.
SMALL_MSS_FRACTION = 0.25
#: Without an MSS option in the capture (no SYN seen), "small" means below the minimum MSS
#: every IPv4 host must accept (RFC 1122): such a segment is small on any path.
SMALL_BYTES_UNKNOWN_MSS = 536
#: Without an MSS, coalesced segments are assumed to be limited by Ethernet's 1460-byte MSS.
MERGE_MSS_UNKNOWN_BYTES = 1460

#: Consecutive small segments of a direction could have been one write when they left within
#: this interval with no data from the peer in between (the application was not waiting for an
#: answer). 1 ms is far longer than the microseconds between writes of one batch, and far
#: shorter than any round trip an application would wait on between unrelated writes.
COALESCE_WINDOW_S = 0.001

#: Delayed-ACK stall: the peer's pure ACK of the previous (small, unacknowledged) segment came
#: this long after it. Linux delays an ACK at least 40 ms (TCP_DELACK_MIN), Windows and BSDs
#: up to 200 ms; the window brackets both with margin for timer granularity.
STALL_ACK_DELAY_MIN_S = 0.030
STALL_ACK_DELAY_MAX_S = 0.250
#: ... and the held segment left at most this long after that ACK: Nagle releases it as soon
#: as the ACK arrives (microseconds on the sender; one path delay when captured at the peer).
STALL_RELEASE_MAX_S = 0.010

# ------------------------------------------------------------------------------------ thresholds

#: `small-packets` looks at avoidable packets: how many fewer data segments the direction would
#: need if the runs of small back-to-back segments had been written at once. A direction is
#: reported when most of its segments are small, coalescing would remove a good share of them,
#: and the avoidable packets are both numerous and frequent:
SMALL_SHARE_MIN = 0.5
AVOIDABLE_SHARE_MIN = 0.25
AVOIDABLE_MIN_PACKETS = 200
#: Rates are over the direction's active span (first to last data segment), at least
#: RATE_MIN_SPAN_S, so a burst of a hundred packets in 30 ms is not a "high rate".
RATE_MIN_SPAN_S = 1.0
#: warning: ≥ 200 avoidable packets/s (each one costs a send syscall, a receiver wake-up and
#: ~66 bytes of headers; hundreds per second per connection is when batching starts to pay);
#: critical: ≥ 10 000/s, where per-packet CPU cost limits the connection's throughput.
AVOIDABLE_RATE_WARNING = 200.0
AVOIDABLE_RATE_CRITICAL = 10_000.0

#: `nagle-delayed-ack`: repeated stalls (one may be chance) that cost a share of the
#: connection's time: warning from 2 %, critical from 20 % (every fifth second spent waiting
#: for a delayed ACK).
STALL_MIN_COUNT = 5
STALL_SHARE_WARNING = 0.02
STALL_SHARE_CRITICAL = 0.20

#: At most this many packet numbers in a finding's example list and frame-number filters.
EXAMPLE_PACKETS = 10
FILTER_PACKETS = 100

FLAG_FIN, FLAG_SYN, FLAG_RST, FLAG_ACK = 0x01, 0x02, 0x04, 0x10


def _ns(ts: pd.Series) -> np.ndarray:
    return np.asarray(ts.dt.as_unit("ns").array.asi8, dtype=np.int64)


def _gkey(stream: np.ndarray, s2c: np.ndarray) -> np.ndarray:
    return stream.astype(np.int64) * 2 + s2c.astype(np.int64)


def _segments(cap: Capture) -> pd.DataFrame:
    """Every data segment (not a retransmission) with what the analysis needs, in group order."""
    p = cap.packets
    s2c = (p["direction"] == "s2c").to_numpy()
    g = _gkey(p["stream"].to_numpy(), s2c)
    ts = _ns(p["ts"])
    payload = p["payload_bytes"].to_numpy(np.int64)
    flags = p["flags"].to_numpy(np.int64)
    ack = p["ack"].to_numpy(np.int64)
    pkt = p["packet"].to_numpy(np.int64)

    # All packets keyed by (group, packet): the peer's side of every question below.
    key = (g << 32) | pkt
    order = np.argsort(key, kind="stable")
    key_s, g_s, ts_s, ack_s = key[order], g[order], ts[order], ack[order]
    payload_s, flags_s, pkt_s = payload[order], flags[order], pkt[order]
    # Highest ACK a group's packets carried so far (cumulative: the peer's data acknowledged).
    acked_s = pd.Series(ack_s).groupby(g_s).cummax().to_numpy()
    pure_ack_s = (payload_s == 0) & ((flags_s & FLAG_ACK) != 0) & ((flags_s & (FLAG_SYN | FLAG_FIN | FLAG_RST)) == 0)
    # Peer data packets only, for "did the peer send data between two of our segments".
    pdata_key = key_s[payload_s > 0]

    m = (payload > 0) & ~p["retransmission"].to_numpy(bool)
    seg = pd.DataFrame({
        "g": g[m], "stream": p["stream"].to_numpy()[m], "direction": np.where(s2c[m], "s2c", "c2s"),
        "packet": pkt[m], "ts_ns": ts[m], "seq": p["seq"].to_numpy(np.int64)[m], "payload_bytes": payload[m],
        "frames": p["frames_ended"].to_numpy(np.int64)[m],
    })
    seg = seg.iloc[np.argsort(((seg["g"].to_numpy() << 32) | seg["packet"].to_numpy()), kind="stable")].reset_index(drop=True)
    seg["end"] = seg["seq"] + seg["payload_bytes"]

    peer_g = seg["g"].to_numpy() ^ 1
    # Index of the peer's last packet before this segment (-1: none).
    i = np.searchsorted(key_s, (peer_g << 32) | seg["packet"].to_numpy(), side="left") - 1
    valid = (i >= 0) & (g_s[np.clip(i, 0, None)] == peer_g)
    ic = np.clip(i, 0, None)
    seg["peer_acked"] = np.where(valid, acked_s[ic], -1)
    seg["peer_last_packet"] = np.where(valid, pkt_s[ic], -1)
    seg["peer_last_ts_ns"] = np.where(valid, ts_s[ic], 0)
    seg["peer_last_pure_ack"] = valid & pure_ack_s[ic]
    seg["peer_last_ack"] = np.where(valid, ack_s[ic], -1)
    # What the peer had acknowledged just before that last packet.
    j = i - 1
    valid_j = valid & (j >= 0) & (g_s[np.clip(j, 0, None)] == peer_g)
    seg["peer_acked_before_last"] = np.where(valid_j, acked_s[np.clip(j, 0, None)], -1)
    # Peer data packets strictly between the previous segment of this direction and this one.
    before = np.searchsorted(pdata_key, (peer_g << 32) | seg["packet"].to_numpy(), side="left")
    seg["_peer_data_before"] = before
    return seg


def _mss(cap: Capture) -> pd.DataFrame:
    """Effective MSS per (stream, direction): the smaller of the two SYN options (a sender
    uses min(peer's MSS, its own)); <NA> when neither SYN is in the capture."""
    c = cap.connections
    both = pd.concat([c["mss_c2s"], c["mss_s2c"]], axis=1).min(axis=1, skipna=True).astype("Int64")
    rows = pd.DataFrame({"stream": np.repeat(c["stream"].to_numpy(), 2), "direction": np.tile(["c2s", "s2c"], len(c)),
                         "mss_bytes": pd.array(np.repeat(both.to_numpy(dtype="float64", na_value=np.nan), 2)).astype("Int64")})
    rows["broker_port"] = np.repeat(c["broker_port"].to_numpy(), 2)
    rows["first_ts"] = np.repeat(c["first_ts"].to_numpy(), 2)
    rows["last_ts"] = np.repeat(c["last_ts"].to_numpy(), 2)
    return rows


def analyze_segments(cap: Capture) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(segments with per-segment flags, per-direction table, stalls table)."""
    seg = _segments(cap)
    mss = _mss(cap)
    seg = seg.merge(mss[["stream", "direction", "mss_bytes"]], on=["stream", "direction"], how="left")
    mss_f = seg["mss_bytes"].to_numpy(dtype="float64", na_value=np.nan)
    small_limit = np.where(np.isnan(mss_f), SMALL_BYTES_UNKNOWN_MSS, SMALL_MSS_FRACTION * mss_f)
    merge_mss = np.where(np.isnan(mss_f), MERGE_MSS_UNKNOWN_BYTES, mss_f)
    seg["small_limit_bytes"] = np.ceil(small_limit).astype(np.int64)
    small = seg["payload_bytes"].to_numpy() < small_limit
    seg["small"] = small

    g = seg["g"].to_numpy()
    same = np.r_[False, g[1:] == g[:-1]]  # previous row is the same stream direction
    prev = np.r_[0, np.arange(len(seg) - 1)] if len(seg) else np.zeros(0, dtype=np.int64)
    ts = seg["ts_ns"].to_numpy()
    gap_s = np.where(same, (ts - ts[prev]) / 1e9, np.nan)
    prev_small = same & small[prev]
    prev_end = seg["end"].to_numpy()[prev]
    prev_packet = seg["packet"].to_numpy()[prev]

    # Unbatched writes: a small segment sent while an earlier small segment of the direction
    # was still unacknowledged by the peer (Nagle would have held it; with TCP_NODELAY it goes).
    small_end = pd.Series(np.where(small, seg["end"].to_numpy(), np.nan)).groupby(g).shift(1)
    small_end = small_end.groupby(g).ffill().to_numpy()
    seg["small_while_unacked"] = small & ~np.isnan(small_end) & (seg["peer_acked"].to_numpy() < small_end)

    # Coalescing: runs of small segments, each within COALESCE_WINDOW_S of the previous one
    # and with no peer data in between, could have been written (and sent) together.
    peer_data_between = seg["_peer_data_before"].to_numpy() - seg["_peer_data_before"].to_numpy()[prev]
    joins = small & prev_small & (gap_s <= COALESCE_WINDOW_S) & (peer_data_between == 0)
    run = np.cumsum(~joins)
    runs = pd.DataFrame({"run": run, "g": g, "bytes": seg["payload_bytes"].to_numpy(), "mss": merge_mss}).groupby("run").agg(
        g=("g", "first"), segments=("g", "size"), bytes=("bytes", "sum"), mss=("mss", "first"))
    runs["needed"] = np.ceil(runs["bytes"] / runs["mss"]).clip(lower=1)
    runs["saved"] = (runs["segments"] - runs["needed"]).clip(lower=0).astype(np.int64)
    seg["run"] = run
    seg["in_run"] = joins | np.r_[joins[1:], False]

    # Nagle/delayed-ACK stall: this small segment left right after the peer's pure ACK of the
    # previous small segment, and that ACK was itself delayed by a delayed-ACK timer.
    t_ack = seg["peer_last_ts_ns"].to_numpy()
    ack_delay_s = (t_ack - ts[prev]) / 1e9
    release_s = (ts - t_ack) / 1e9
    stall = (
        small & prev_small & seg["peer_last_pure_ack"].to_numpy()
        & (seg["peer_last_packet"].to_numpy() > prev_packet)
        & (seg["peer_last_ack"].to_numpy() >= prev_end)
        & (seg["peer_acked_before_last"].to_numpy() < prev_end)
        & (ack_delay_s >= STALL_ACK_DELAY_MIN_S) & (ack_delay_s <= STALL_ACK_DELAY_MAX_S)
        & (release_s >= 0) & (release_s <= STALL_RELEASE_MAX_S)
    )
    seg["stall"] = stall
    stalls = pd.DataFrame({
        "stream": seg["stream"].to_numpy()[stall].astype(np.int32),
        "direction": seg["direction"].to_numpy()[stall],
        "packet": seg["packet"].to_numpy()[stall].astype(np.int32),
        "ts": pd.to_datetime(ts[stall], utc=True),
        "previous_packet": prev_packet[stall].astype(np.int32),
        "ack_packet": seg["peer_last_packet"].to_numpy()[stall].astype(np.int32),
        "stall_s": gap_s[stall],
        "ack_delay_s": ack_delay_s[stall],
        "release_s": release_s[stall],
        "payload_bytes": seg["payload_bytes"].to_numpy()[stall],
    })

    # Per direction.
    seg["stall_s"] = np.where(stall, gap_s, 0.0)
    grp = seg.groupby(["stream", "direction"], sort=True)
    d = grp.agg(
        data_segments=("packet", "size"), payload_bytes=("payload_bytes", "sum"), small_segments=("small", "sum"),
        small_limit_bytes=("small_limit_bytes", "first"), frames=("frames", "sum"),
        small_while_unacked=("small_while_unacked", "sum"), stalls=("stall", "sum"), stall_time_s=("stall_s", "sum"),
        first_ns=("ts_ns", "min"), last_ns=("ts_ns", "max"),
    ).reset_index()
    d["single_frame_segments"] = seg.assign(one=seg["frames"] == 1).groupby(["stream", "direction"], sort=True)["one"].sum().to_numpy()
    saved = runs.groupby("g")["saved"].sum()
    d_g = _gkey(d["stream"].to_numpy(), (d["direction"] == "s2c").to_numpy())
    d["packets_saved"] = saved.reindex(d_g, fill_value=0).to_numpy().astype(np.int64)
    stall_med = stalls.groupby(["stream", "direction"])["stall_s"].median()
    d["median_stall_s"] = stall_med.reindex(pd.MultiIndex.from_frame(d[["stream", "direction"]])).to_numpy()
    d = d.merge(mss[["stream", "direction", "mss_bytes", "broker_port", "first_ts", "last_ts"]], on=["stream", "direction"], how="left")
    d["active_s"] = (d["last_ns"] - d["first_ns"]) / 1e9
    span = np.maximum(d["active_s"].to_numpy(), RATE_MIN_SPAN_S)
    d["small_share"] = d["small_segments"] / d["data_segments"]
    d["frames_per_segment"] = d["frames"] / d["data_segments"]
    d["small_segments_s"] = d["small_segments"] / span
    d["small_while_unacked_share"] = d["small_while_unacked"] / d["data_segments"]
    d["packets_saved_share"] = d["packets_saved"] / d["data_segments"]
    d["packets_saved_s"] = d["packets_saved"] / span
    conn_s = (d["last_ts"] - d["first_ts"]).dt.total_seconds().to_numpy()
    d["connection_s"] = conn_s
    d["stall_share"] = np.where(conn_s > 0, d["stall_time_s"] / np.where(conn_s > 0, conn_s, 1), 0.0)
    cols = ["stream", "direction", "mss_bytes", "small_limit_bytes", "data_segments", "payload_bytes", "small_segments",
            "small_share", "small_segments_s", "frames_per_segment", "single_frame_segments", "small_while_unacked",
            "small_while_unacked_share", "packets_saved", "packets_saved_share", "packets_saved_s", "stalls",
            "stall_time_s", "median_stall_s", "stall_share", "active_s", "connection_s", "broker_port"]
    d["stream"] = d["stream"].astype(np.int32)
    for c in ("small_segments", "small_while_unacked", "stalls"):
        d[c] = d[c].astype(np.int64)
    return seg, d[cols], stalls


# -------------------------------------------------------------------------------------- findings


def _frames_filter(packets) -> str:
    # Comma-separated: Wireshark >= 4.0 rejects whitespace-separated set members.
    return "frame.number in {" + ", ".join(str(int(x)) for x in sorted(set(packets))) + "}"


def _dir_clause(stream: int, direction: str, port: int, extra: str) -> str:
    side = "tcp.dstport" if direction == "c2s" else "tcp.srcport"
    return f"(tcp.stream eq {stream} && {side} == {port}{extra})"


def small_packets_finding(seg: pd.DataFrame, d: pd.DataFrame) -> Finding | None:
    hit = d[(d["small_share"] >= SMALL_SHARE_MIN) & (d["packets_saved_share"] >= AVOIDABLE_SHARE_MIN)
            & (d["packets_saved"] >= AVOIDABLE_MIN_PACKETS) & (d["packets_saved_s"] >= AVOIDABLE_RATE_WARNING)]
    if not len(hit):
        return None
    hit = hit.sort_values("packets_saved_s", ascending=False)
    worst = float(hit["packets_saved_s"].max())
    severity = "critical" if worst >= AVOIDABLE_RATE_CRITICAL else "warning"
    keys = set(zip(hit["stream"].tolist(), hit["direction"].tolist()))
    sel = seg[seg["in_run"].to_numpy() & pd.Series(list(zip(seg["stream"], seg["direction"]))).isin(keys).to_numpy()]
    examples = sel["packet"].head(EXAMPLE_PACKETS).tolist()
    clauses = [_dir_clause(int(r.stream), r.direction, int(r.broker_port), f" && tcp.len > 0 && tcp.len < {int(r.small_limit_bytes)}")
               for r in hit.head(10).itertuples()]
    n_small, n_data = int(hit["small_segments"].sum()), int(hit["data_segments"].sum())
    saved = int(hit["packets_saved"].sum())
    single = int(hit["single_frame_segments"].sum())
    per_dir = [
        {"stream": int(r.stream), "direction": r.direction, "data_segments": int(r.data_segments),
         "small_segments": int(r.small_segments), "small_share": round(float(r.small_share), 3),
         "frames_per_segment": round(float(r.frames_per_segment), 2), "small_while_unacked": int(r.small_while_unacked),
         "packets_saved": int(r.packets_saved), "packets_saved_s": round(float(r.packets_saved_s), 1),
         "small_limit_bytes": int(r.small_limit_bytes)}
        for r in hit.head(10).itertuples()
    ]
    return Finding(
        id="small-packets",
        severity=severity,
        title=(f"{n_small:,} of {n_data:,} data segments are far below the MSS; writing them together would save "
               f"{saved:,} packets ({saved / n_data:.0%}, up to {worst:,.0f}/s) on {len(hit)} connection direction(s)"),
        evidence={
            "data_segments": n_data,
            "small_segments": n_small,
            "small_share": round(n_small / n_data, 3),
            "single_frame_segments": single,
            "small_while_unacked": int(hit["small_while_unacked"].sum()),
            "packets_saved": saved,
            "packets_saved_share": round(saved / n_data, 3),
            "max_packets_saved_s": round(worst, 1),
            "directions": per_dir,
            "streams": sorted({int(s) for s in hit["stream"]}),
            "packets": examples,
            "filter": " || ".join(clauses),
        },
        advice=("The application writes each AMQP frame (or each small message) in its own send call, so each "
                "becomes a TCP segment. Batch the writes: build publish + header + body into one buffer (writev / "
                "a buffered writer flushed once per message or per batch), publish in batches and ack with "
                "multiple=true; or let the kernel coalesce (leave Nagle on only if the app never waits for an "
                "answer between writes, or use TCP_CORK/MSG_MORE)."),
        impact=min(1.0, worst / AVOIDABLE_RATE_CRITICAL),
    )


def nagle_finding(d: pd.DataFrame, stalls: pd.DataFrame) -> Finding | None:
    if not len(stalls):
        return None
    per_conn = d.groupby("stream").agg(stalls=("stalls", "sum"), stall_time_s=("stall_time_s", "sum"),
                                       connection_s=("connection_s", "first"))
    per_conn["stall_share"] = per_conn["stall_time_s"] / per_conn["connection_s"].where(per_conn["connection_s"] > 0)
    hit = per_conn[(per_conn["stalls"] >= STALL_MIN_COUNT) & (per_conn["stall_share"] >= STALL_SHARE_WARNING)]
    if not len(hit):
        return None
    worst = float(hit["stall_share"].max())
    severity = "critical" if worst >= STALL_SHARE_CRITICAL else "warning"
    st = stalls[stalls["stream"].isin(hit.index)]
    delays = st["ack_delay_s"].to_numpy()
    examples = st[["previous_packet", "ack_packet", "packet"]].head(3).to_numpy().ravel().tolist()
    streams = sorted(int(s) for s in hit.index)
    held = st["packet"].head(FILTER_PACKETS).tolist()
    return Finding(
        id="nagle-delayed-ack",
        severity=severity,
        title=(f"{len(st):,} small segments were held by Nagle until the peer's delayed ACK "
               f"(median {np.median(st['stall_s']) * 1e3:.0f} ms each, {st['stall_s'].sum():.2f} s in all, "
               f"{worst:.0%} of the connection's time)"),
        evidence={
            "stalls": int(len(st)),
            "median_stall_s": float(np.median(st["stall_s"])),
            "max_stall_s": float(st["stall_s"].max()),
            "median_ack_delay_s": float(np.median(delays)),
            "stall_time_s": float(st["stall_s"].sum()),
            "stall_share": round(worst, 4),
            "directions": {f"{s} {dr}": int(n) for (s, dr), n in st.groupby(["stream", "direction"]).size().items()},
            "streams": streams,
            "packets": examples,
            "filter": _frames_filter(held),
        },
        advice=("Write-write-read with Nagle on: the second small write waits until the first is acknowledged, and "
                "the peer delays that ACK (~40 ms on Linux, up to 200 ms elsewhere). Write the whole message "
                "(method, header and body frames) in one send call, or set TCP_NODELAY on the socket (most AMQP "
                "clients do by default); with TCP_NODELAY, still coalesce frames to avoid small packets."),
        impact=min(1.0, worst),
    )


# ------------------------------------------------------------------------------------------ plots


def _plot_stalls(stalls: pd.DataFrame):
    def draw(path: Path) -> None:
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 4.5))
        bins = np.arange(0, STALL_ACK_DELAY_MAX_S * 1e3 + 20, 5)
        for d in ("c2s", "s2c"):
            x = stalls.loc[stalls["direction"] == d, "stall_s"].to_numpy() * 1e3
            if len(x):
                ax.hist(x, bins=bins, alpha=0.7, label=f"{d} ({len(x)})")
        for ms, lbl in ((40, "Linux delayed ACK (40 ms)"), (200, "200 ms delayed ACK")):
            ax.axvline(ms, color="grey", ls="--", lw=1)
            ax.text(ms + 2, ax.get_ylim()[1] * 0.9, lbl, fontsize=8, color="grey")
        ax.set_xlabel("stall: previous segment → held segment (ms), 5 ms bins")
        ax.set_ylabel("stalls")
        ax.set_title("Nagle / delayed-ACK stalls")
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=110)

    return draw


def _plot_small_share(d: pd.DataFrame):
    top = d.sort_values("data_segments", ascending=False).head(20)

    def draw(path: Path) -> None:
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(9, max(3, 0.35 * len(top) + 1.5)))
        labels = [f"stream {s} {dr}" for s, dr in zip(top["stream"], top["direction"])]
        y = np.arange(len(top))
        n = top["data_segments"].to_numpy()
        ax.barh(y, n, color="#dddddd", label="data segments")
        ax.barh(y, top["small_segments"].to_numpy(), color="#ff7f0e", alpha=0.6, label="small (< 25% of MSS)")
        ax.barh(y, top["packets_saved"].to_numpy(), color="#d62728", label="avoidable by coalescing")
        ax.set_yticks(y, labels)
        ax.invert_yaxis()
        ax.set_xlabel("segments")
        ax.set_title("Small segments per connection direction (top 20 by segments)")
        ax.legend(loc="lower right", fontsize=8)
        fig.tight_layout()
        fig.savefig(path, dpi=110)

    return draw


# ---------------------------------------------------------------------------------------- analyzer


@analyzer("nagle")
def nagle(cap: Capture) -> AnalyzerResult:
    """Small TCP segments, unbatched writes and Nagle/delayed-ACK stalls per connection direction."""
    seg, d, stalls = analyze_segments(cap)
    findings = [f for f in (small_packets_finding(seg, d), nagle_finding(d, stalls)) if f is not None]
    summary: dict[str, Any] = {
        "nagle": {
            "data_segments": int(d["data_segments"].sum()),
            "small_segments": int(d["small_segments"].sum()),
            "small_while_unacked": int(d["small_while_unacked"].sum()),
            "packets_saved": int(d["packets_saved"].sum()),
            "stalls": int(len(stalls)),
            "stall_time_s": float(stalls["stall_s"].sum()) if len(stalls) else 0.0,
            "median_stall_s": float(stalls["stall_s"].median()) if len(stalls) else None,
        }
    }
    plots = [Plot("nagle-small-segments", "Small segments per connection direction", _plot_small_share(d))]
    if len(stalls):
        plots.append(Plot("nagle-stalls", "Nagle / delayed-ACK stalls", _plot_stalls(stalls)))
    return AnalyzerResult("nagle", tables={"directions": d.drop(columns=["broker_port"]), "stalls": stalls},
                          summary=summary, findings=findings, plots=plots)
