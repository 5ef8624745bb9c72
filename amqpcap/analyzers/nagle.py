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
from ._tcp import running_last as _running_last
from ._tcp import HI_SHIFT as _HI_SHIFT
from ._tcp import stream_order

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
#: Reported from 200 avoidable packets/s (each one costs a send syscall, a receiver wake-up
#: and ~66 bytes of headers; hundreds per second per connection is when batching starts to pay).
AVOIDABLE_RATE_WARNING = 200.0
#: Severity. `warning` when the application splits messages: most segments of the direction
#: complete a single AMQP frame (publish, header and body written separately: 3 packets per
#: message). Whole messages sent one per packet, merely not batched across messages (a plain
#: publisher at a few thousand msg/s), are `info`: batching would help, nothing is wrong.
#: `critical` from 10 000 avoidable packets/s, where per-packet CPU cost at both ends limits
#: the connection's throughput whatever the pattern.
SPLIT_SHARE_MIN = 0.5
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


def _segments(cap: Capture) -> dict[str, np.ndarray]:
    """Every data segment that is not a retransmission, sorted by (stream, direction, packet),
    with what the analysis needs from the peer's side, as plain numpy columns.

    All packets are first put in (stream, packet) order (shared with the stalls analyzer, see
    _tcp.py). There, a segment's peer-side state is read at one row: the peer's last packet
    before it, which is the row just before the segment's run of same-direction rows. The
    peer's cumulative ACK and data count there are running maxima/sums per direction, both
    directions in one array so a single gather reads the peer's side of every segment."""
    so = stream_order(cap)
    stream, s2c, pkt, ts = so["stream"], so["s2c"], so["packet"], so["ts"]
    payload, flags, ack, seq = so["payload_bytes"], so["flags"], so["ack"], so["seq"]
    frames, retr, hi = so["frames_ended"], so["retransmission"], so["hi"]
    n_all = len(stream)
    data = payload > 0

    # Rows [0, n_all): state of c2s, rows [n_all, 2·n_all): of s2c, at each packet row.
    # acked: the direction's highest ACK so far in the row's stream (stream in the high bits,
    # see _tcp.running_max_keyed); data_cnt: its data packets so far (only differences are read).
    acked = np.empty(2 * n_all, np.int64)
    keyed_ack = ack + hi
    np.maximum.accumulate(np.where(s2c, -1, keyed_ack), out=acked[:n_all])
    np.maximum.accumulate(np.where(s2c, keyed_ack, -1), out=acked[n_all:])
    data_cnt = np.empty(2 * n_all, np.int32)
    np.cumsum(data & ~s2c, dtype=np.int32, out=data_cnt[:n_all])
    np.cumsum(data & s2c, dtype=np.int32, out=data_cnt[n_all:])
    # The row where each run of same-direction rows starts: the peer's last packet before a row
    # is the one just before its run (file-wide, like the stream check below).
    turn = np.empty(n_all, bool)
    turn[:1] = True
    np.not_equal(s2c[1:], s2c[:-1], out=turn[1:])
    run_start = _running_last(turn)

    idx = np.flatnonzero(data & ~retr)
    g = stream[idx].astype(np.int64) * 2 + s2c[idx]
    # (stream, direction, packet): a stable sort on g; radix sort when g fits 16 bits.
    o = np.argsort(g.astype(np.uint16) if len(g) and g.max() < 1 << 16 else g, kind="stable")
    idx, g = idx[o], g[o]
    seg_s2c = (g & 1).astype(bool)
    seg_stream = g >> 1
    seg_hi = seg_stream << _HI_SHIFT

    peer_last = run_start[idx] - 1
    pl = np.maximum(peer_last, 0)
    valid = (peer_last >= 0) & (stream[pl] == seg_stream)
    at = pl + np.where(seg_s2c, 0, n_all)  # the peer's direction at its last row
    # pl is a peer row of the stream when valid, so its running max includes itself (>= 0).
    peer_acked = np.where(valid, acked[at] - seg_hi, -1)
    # What the peer had acknowledged before that last packet (one row earlier; an earlier
    # stream's maximum is below this stream's key).
    before = acked[np.maximum(at - 1, 0)]
    peer_acked_before = np.where(valid & (peer_last >= 1) & (before >= seg_hi), before - seg_hi, -1)
    pl_flags = flags[pl]
    pure_ack = (payload[pl] == 0) & ((pl_flags & FLAG_ACK) != 0) & ((pl_flags & (FLAG_SYN | FLAG_FIN | FLAG_RST)) == 0)
    seg_payload = payload[idx]
    return {
        "g": g, "stream": seg_stream, "s2c": seg_s2c, "packet": pkt[idx], "ts_ns": ts[idx],
        "payload_bytes": seg_payload, "end": seq[idx] + seg_payload, "frames": frames[idx],
        "peer_acked": peer_acked,
        "peer_last_packet": np.where(valid, pkt[pl], -1),
        "peer_last_ts_ns": np.where(valid, ts[pl], 0),
        "peer_last_pure_ack": valid & pure_ack,
        "peer_last_ack": np.where(valid, ack[pl], -1),
        "peer_acked_before_last": peer_acked_before,
        # Equal to the count at the segment's own row: the rows between are of its direction.
        "peer_data_count": data_cnt[at],
    }


def _mss(cap: Capture) -> pd.DataFrame:
    """Effective MSS per (stream, direction) group: the smaller of the two SYN options (a sender
    uses min(peer's MSS, its own)); NaN when neither SYN is in the capture."""
    c = cap.connections
    mss = np.fmin(c["mss_c2s"].to_numpy(dtype="float64", na_value=np.nan), c["mss_s2c"].to_numpy(dtype="float64", na_value=np.nan))
    streams = c["stream"].to_numpy(np.int64)
    return pd.DataFrame({
        "g": np.concatenate([streams * 2, streams * 2 + 1]),
        "mss": np.concatenate([mss, mss]),
        "broker_port": np.concatenate([c["broker_port"].to_numpy(np.int64)] * 2),
        "connection_s": np.concatenate([(c["last_ts"] - c["first_ts"]).dt.total_seconds().to_numpy()] * 2),
    }).set_index("g")


def _shifted(x: np.ndarray) -> np.ndarray:
    """x one row down: row i holds x[i - 1] (row 0 keeps x[0]). The previous segment's value
    by a copy, not a gather."""
    out = np.empty_like(x)
    out[:1] = x[:1]
    out[1:] = x[:-1]
    return out


def _ns(seconds: float) -> int:
    """A threshold in whole nanoseconds. For integer ns x and a threshold c that is a whole
    number of ns, x / 1e9 >= c exactly when x >= c·1e9 (the division is monotonic and exact at
    x = c·1e9), so the per-segment comparisons stay in int64 without a float column."""
    return int(round(seconds * 1e9))


def analyze_segments(cap: Capture) -> tuple[dict[str, np.ndarray], pd.DataFrame, pd.DataFrame]:
    """(segment columns with per-segment flags, per-direction table, stalls table)."""
    s = _segments(cap)
    n = len(s["g"])
    conn = _mss(cap)
    g, payload, ts, end, packet = s["g"], s["payload_bytes"], s["ts_ns"], s["end"], s["packet"]
    # Rows are grouped by direction (g): per-direction values are taken once per group and
    # spread over its rows; group sums are `add.reduceat` over the group starts.
    same = np.zeros(n, bool)  # previous row: same stream direction
    np.equal(g[1:], g[:-1], out=same[1:])
    gs = np.flatnonzero(~same)
    groups = g[gs]
    mss_g = conn["mss"].reindex(groups).to_numpy() if n else np.zeros(0)
    small_limit_g = np.ceil(np.where(np.isnan(mss_g), SMALL_BYTES_UNKNOWN_MSS, SMALL_MSS_FRACTION * mss_g)).astype(np.int64)
    merge_mss_g = np.where(np.isnan(mss_g), MERGE_MSS_UNKNOWN_BYTES, mss_g)
    small = payload < np.repeat(small_limit_g, np.diff(np.r_[gs, n]))

    prev_ts = _shifted(ts)
    prev_small = same & _shifted(small)

    # Unbatched writes: a small segment sent while an earlier small segment of the direction
    # was still unacknowledged by the peer (Nagle would have held it; with TCP_NODELAY it goes).
    last_small = _shifted(_running_last(small))
    last_small[:1] = -1
    ls = np.maximum(last_small, 0)
    small_while_unacked = small & (last_small >= 0) & (g[ls] == g) & (s["peer_acked"] < end[ls])

    # Coalescing: runs of small segments, each within COALESCE_WINDOW_S of the previous one
    # and with no peer data in between, could have been written (and sent) together.
    pdc = s["peer_data_count"]
    joins = prev_small & small & (ts - prev_ts <= _ns(COALESCE_WINDOW_S)) & (pdc == _shifted(pdc))
    start = np.flatnonzero(~joins)  # every group start is a run start (joins needs `same`)
    run_segments = np.diff(np.r_[start, n])
    run_bytes = np.add.reduceat(payload, start, dtype=np.float64) if n else np.zeros(0)
    merge_mss = merge_mss_g[np.searchsorted(gs, start, side="right") - 1]
    needed = np.maximum(np.ceil(run_bytes / merge_mss), 1)
    run_saved = np.maximum(run_segments - needed, 0)
    in_run = joins.copy()
    in_run[:-1] |= joins[1:]

    # Nagle/delayed-ACK stall: this small segment left right after the peer's pure ACK of the
    # previous small segment, and that ACK was itself delayed by a delayed-ACK timer. The cheap
    # flags pick the candidates; the rest is checked on those rows only (`c - 1`: previous row).
    c = np.flatnonzero(prev_small & small & s["peer_last_pure_ack"])
    t_ack = s["peer_last_ts_ns"][c]
    ack_delay, release = t_ack - ts[c - 1], ts[c] - t_ack
    prev_end = end[c - 1]
    ok = ((s["peer_last_packet"][c] > packet[c - 1])
          & (s["peer_last_ack"][c] >= prev_end)
          & (s["peer_acked_before_last"][c] < prev_end)
          & (ack_delay >= _ns(STALL_ACK_DELAY_MIN_S)) & (ack_delay <= _ns(STALL_ACK_DELAY_MAX_S))
          & (release >= 0) & (release <= _ns(STALL_RELEASE_MAX_S)))
    st = c[ok]
    stall = np.zeros(n, bool)
    stall[st] = True
    stall_s = (ts[st] - ts[st - 1]) / 1e9
    stalls = pd.DataFrame({
        "stream": s["stream"][st].astype(np.int32),
        "direction": np.where(s["s2c"][st], "s2c", "c2s"),
        "packet": packet[st].astype(np.int32),
        "ts": pd.to_datetime(ts[st], utc=True),
        "previous_packet": packet[st - 1].astype(np.int32),
        "ack_packet": s["peer_last_packet"][st].astype(np.int32),
        "stall_s": stall_s,
        "ack_delay_s": ack_delay[ok] / 1e9,
        "release_s": release[ok] / 1e9,
        "payload_bytes": payload[st].astype(np.int64),
    })

    def total(x):  # integer sums per direction
        return np.add.reduceat(x, gs, dtype=np.int64) if n else np.zeros(0, np.int64)

    st_group = np.searchsorted(gs, st, side="right") - 1
    d = pd.DataFrame({
        "stream": (groups // 2).astype(np.int32),
        "direction": np.where(groups % 2 == 1, "s2c", "c2s"),
        "mss_bytes": pd.array(mss_g, dtype="Float64").astype("Int64"),
        "small_limit_bytes": small_limit_g,
        "data_segments": np.diff(np.r_[gs, n]).astype(np.int64),
        "payload_bytes": total(payload),
        "small_segments": total(small),
        "frames": total(s["frames"]),
        "single_frame_segments": total(s["frames"] == 1),
        "small_while_unacked": total(small_while_unacked),
        # Runs never cross directions: a direction's runs are those from its first run on.
        "packets_saved": np.add.reduceat(run_saved, np.searchsorted(start, gs)).astype(np.int64) if n else np.zeros(0, np.int64),
        "stalls": np.bincount(st_group, minlength=len(gs)).astype(np.int64),
        # Summed in row order, as a per-row sum with zeros elsewhere would be.
        "stall_time_s": np.bincount(st_group, weights=stall_s, minlength=len(gs)).astype(np.float64),
        "active_s": (np.maximum.reduceat(ts, gs) - np.minimum.reduceat(ts, gs)) / 1e9 if n else np.zeros(0),
    })
    med = stalls.assign(g=stalls["stream"].astype(np.int64) * 2 + (stalls["direction"] == "s2c")).groupby("g")["stall_s"].median()
    d["median_stall_s"] = med.reindex(groups).to_numpy()
    d["connection_s"] = conn["connection_s"].reindex(groups).to_numpy()
    d["broker_port"] = conn["broker_port"].reindex(groups).to_numpy()
    span = np.maximum(d["active_s"].to_numpy(), RATE_MIN_SPAN_S)
    d["small_share"] = d["small_segments"] / d["data_segments"]
    d["frames_per_segment"] = d["frames"] / d["data_segments"]
    d["small_segments_s"] = d["small_segments"] / span
    d["small_while_unacked_share"] = d["small_while_unacked"] / d["data_segments"]
    d["packets_saved_share"] = d["packets_saved"] / d["data_segments"]
    d["packets_saved_s"] = d["packets_saved"] / span
    cs = d["connection_s"].to_numpy()
    d["stall_share"] = np.where(cs > 0, d["stall_time_s"] / np.where(cs > 0, cs, 1), 0.0)
    cols = ["stream", "direction", "mss_bytes", "small_limit_bytes", "data_segments", "payload_bytes", "small_segments",
            "small_share", "small_segments_s", "frames_per_segment", "single_frame_segments", "small_while_unacked",
            "small_while_unacked_share", "packets_saved", "packets_saved_share", "packets_saved_s", "stalls",
            "stall_time_s", "median_stall_s", "stall_share", "active_s", "connection_s", "broker_port"]
    s.update(small=small, in_run=in_run, stall=stall)
    return s, d[cols], stalls


# -------------------------------------------------------------------------------------- findings


def _frames_filter(packets) -> str:
    # Comma-separated: Wireshark >= 4.0 rejects whitespace-separated set members.
    return "frame.number in {" + ", ".join(str(int(x)) for x in sorted(set(packets))) + "}"


def _dir_clause(stream: int, direction: str, port: int, extra: str) -> str:
    side = "tcp.dstport" if direction == "c2s" else "tcp.srcport"
    return f"(tcp.stream eq {stream} && {side} == {port}{extra})"


def small_packets_finding(seg: dict[str, np.ndarray], d: pd.DataFrame) -> Finding | None:
    hit = d[(d["small_share"] >= SMALL_SHARE_MIN) & (d["packets_saved_share"] >= AVOIDABLE_SHARE_MIN)
            & (d["packets_saved"] >= AVOIDABLE_MIN_PACKETS) & (d["packets_saved_s"] >= AVOIDABLE_RATE_WARNING)]
    if not len(hit):
        return None
    hit = hit.sort_values("packets_saved_s", ascending=False)
    worst = float(hit["packets_saved_s"].max())
    split = bool((hit["single_frame_segments"] / hit["data_segments"] >= SPLIT_SHARE_MIN).any())
    severity = "critical" if worst >= AVOIDABLE_RATE_CRITICAL else "warning" if split else "info"
    hit_g = hit["stream"].to_numpy(np.int64) * 2 + (hit["direction"] == "s2c").to_numpy()
    examples = seg["packet"][seg["in_run"] & np.isin(seg["g"], hit_g)][:EXAMPLE_PACKETS].tolist()
    clauses = [_dir_clause(int(r.stream), r.direction, int(r.broker_port), f" && tcp.len > 0 && tcp.len < {int(r.small_limit_bytes)}")
               for r in hit.head(10).itertuples()]
    n_small, n_data = int(hit["small_segments"].sum()), int(hit["data_segments"].sum())
    saved = int(hit["packets_saved"].sum())
    single = int(hit["single_frame_segments"].sum())
    per_dir = [
        {"stream": int(r.stream), "direction": r.direction, "data_segments": int(r.data_segments),
         "small_segments": int(r.small_segments), "small_share": round(float(r.small_share), 3),
         "frames_per_segment": round(float(r.frames_per_segment), 2),
         "single_frame_segments": int(r.single_frame_segments), "small_while_unacked": int(r.small_while_unacked),
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
            "messages_split": split,
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
        ax.set_ylim(0, ax.get_ylim()[1] * 1.3)  # headroom for the marker labels
        for ms, lbl in ((40, "Linux delayed ACK\n(40 ms)"), (200, "delayed ACK\n200 ms")):
            ax.axvline(ms, color="grey", ls="--", lw=1)
            ax.text(ms + 3, ax.get_ylim()[1] * 0.97, lbl, fontsize=8, color="dimgrey", va="top",
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8})
        ax.set_xlabel("stall: previous segment → held segment (ms), 5 ms bins")
        ax.set_ylabel("stalls")
        ax.set_title("Nagle / delayed-ACK stalls")
        ax.legend(loc="center right")
        fig.tight_layout()
        fig.savefig(path, dpi=110)

    return draw


def _plot_small_share(cap: Capture, d: pd.DataFrame):
    top = d.sort_values("data_segments", ascending=False).head(20)

    def draw(path: Path) -> None:
        import matplotlib.pyplot as plt

        from ..names import connection_label
        from ..plotting import plain_axis, short, shown_of

        fig, ax = plt.subplots(figsize=(11, max(2.5, 0.3 * len(top) + 1.3)), layout="constrained")
        labels = [f"{short(connection_label(cap, s), 44)} {dr}" for s, dr in zip(top["stream"], top["direction"])]
        y = np.arange(len(top))
        n = top["data_segments"].to_numpy()
        # Nested bars of decreasing height, so each stays visible when it equals the one behind.
        ax.barh(y, n, height=0.8, color="#cccccc", label="data segments")
        ax.barh(y, top["small_segments"].to_numpy(), height=0.55, color="#ff7f0e", label="small (< 25% of MSS)")
        ax.barh(y, top["packets_saved"].to_numpy(), height=0.3, color="#d62728", label="avoidable by coalescing")
        ax.set_yticks(y, labels, fontsize=8)
        ax.invert_yaxis()
        plain_axis(ax.xaxis)
        ax.set_xlabel("segments")
        ax.set_title(f"Small segments per connection direction ({shown_of(len(top), len(d), 'direction')}, "
                     "most segments first)", fontsize=10, loc="left")
        ax.legend(loc="lower right", fontsize=8)
        fig.savefig(path, dpi=100)

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
    plots = [Plot("nagle-small-segments", "Small segments per connection direction", _plot_small_share(cap, d))]
    if len(stalls):
        plots.append(Plot("nagle-stalls", "Nagle / delayed-ACK stalls", _plot_stalls(stalls)))
    return AnalyzerResult("nagle", tables={"directions": d.drop(columns=["broker_port"]), "stalls": stalls},
                          summary=summary, findings=findings, plots=plots)
