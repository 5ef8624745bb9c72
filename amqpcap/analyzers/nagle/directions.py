"""A slice's segments made into per-direction rows: what small segments carry, the coalescing runs,
the delayed-ACK stall candidates and the examples a finding cites; the stalls told once the
last slice has shown whether the direction is under Nagle at all.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ...io.load import Capture
from ...derive.stream_order import running_last as _running_last
from .carry import _Carry, _NONE, _SEGMENT_COLUMNS, _again
from .constants import (
    ACK_METHODS, CARRIES, COALESCE_WINDOW_S, CONTENT_METHODS, EXAMPLE_PACKETS, MERGE_MSS_UNKNOWN_BYTES,
    NAGLE_UNACKED_SHARE_MAX, RATE_MIN_SPAN_S, SMALL_BYTES_UNKNOWN_MSS, SMALL_MSS_FRACTION,
    STALL_ACK_DELAY_MAX_S, STALL_ACK_DELAY_MIN_S, STALL_RELEASE_MAX_S)
from .segments import _directions, _in, _ns, _segments, _shifted


def carried(cap: Capture, packets: np.ndarray, frames_ended: np.ndarray, streams: np.ndarray | None = None) -> np.ndarray:
    """What each of these data segments carries (an index into CARRIES), from the frames each
    completes: counts per segment of heartbeats, acks, content methods, headers and bodies (and
    of AMQP 1.0's empty frames, dispositions, flows and transfers: `_amqp10_counts`), each
    frame's segment found once by binary search on the packet numbers (a partition's packets are
    spread over the whole capture's numbers: a count per packet number would be as long as the
    capture). `streams`: the segments' connections (needed with AMQP 1.0 alone: a segment of a
    1.0 connection that completes no frame holds part of a transfer)."""
    f = cap.frames
    if not len(packets):
        return np.zeros(0, np.int8)
    by = np.argsort(packets, kind="stable")
    count = _segment_counter(packets, by, f["packet"].to_numpy(np.int64))
    hb = count(_in(f["type"], ["heartbeat"]))
    ack = count(_in(f["method"], ACK_METHODS))
    content = count(_in(f["method"], CONTENT_METHODS))
    header, body = count(_in(f["type"], ["header"])), count(_in(f["type"], ["body"]))
    whole = (content >= 1) & (header >= content)  # every content method with its header
    part = (frames_ended == 0) | (content + header + body > 0)
    conds = [(frames_ended > 0) & (hb == frames_ended), (frames_ended == 1) & (ack == 1), whole, part]
    kinds = ["heartbeat", "ack", "message", "split"]
    if len(cap.amqp10_frames):  # (no AMQP 1.0: nothing more is looked at)
        a = _amqp10_counts(cap.amqp10_frames, packets, by)
        # a segment of a 1.0 connection completing no frame holds part of one: a transfer's
        # (the only frame a message makes larger than a segment)
        is10 = np.isin(streams, np.unique(cap.amqp10_frames["stream"].to_numpy()))
        conds = [(frames_ended > 0) & (hb + a["empty"] == frames_ended), *conds[1:2],
                 (a["disposition"] == 1) & (a["disposition"] + a["flow"] == frames_ended),
                 (frames_ended > 0) & (a["flow"] == frames_ended),
                 # every delivery begun here ends here (a transfer without `more`)
                 whole | ((a["starts"] >= 1) & (a["ends"] >= a["starts"]) & (a["ends"] == a["transfers"])),
                 part & ~is10,
                 (a["transfers"] > 0) | (is10 & (frames_ended == 0))]
        kinds = ["heartbeat", "ack", "disposition", "flow", "message", "split", "transfer-part"]
    return np.select(conds, [CARRIES.index(k) for k in kinds], CARRIES.index("other")).astype(np.int8)


def _segment_counter(packets: np.ndarray, by: np.ndarray, frame_packets: np.ndarray):
    """``count(mask)``: per segment (`packets`, sorted by `by`), the frames of `mask` it completes
    (frames whose last packet, `frame_packets`, is one of them)."""
    seg = np.minimum(np.searchsorted(packets[by], frame_packets), len(packets) - 1)
    at = np.flatnonzero(packets[by][seg] == frame_packets)  # (the frames completed by these segments)
    seg = by[seg[at]]

    def count(mask: np.ndarray) -> np.ndarray:
        return np.bincount(seg[mask[at]], minlength=len(packets))

    return count


def _amqp10_counts(f: pd.DataFrame, packets: np.ndarray, by: np.ndarray) -> dict[str, np.ndarray]:
    """Per segment, the AMQP 1.0 frames it completes (`amqp10_frames` `f`): empty frames (1.0's
    heartbeat, Part 2 §2.4.5), dispositions, flows, transfers, the transfers that start a
    delivery (not a continuation) and those that end one (without `more`)."""
    count = _segment_counter(packets, by, f["packet"].to_numpy(np.int64))
    perf = f["performative"]
    transfer = _in(perf, ["transfer"])
    return {"empty": count(_in(f["type"], ["empty"])), "disposition": count(_in(perf, ["disposition"])),
            "flow": count(_in(perf, ["flow"])), "transfers": count(transfer),
            "starts": count(transfer & ~f["continuation"].to_numpy(bool, na_value=False)),
            "ends": count(transfer & ~f["more"].to_numpy(bool, na_value=True))}


def _slice(cap: Capture, carry: _Carry | None, last: bool) -> tuple[dict[str, np.ndarray], _Carry, dict[str, Any]]:
    """A partition's packets after those `carry` has seen (None: none), analysed: (segment
    columns with per-segment flags, the carry moved past them, their piece of the partial: the
    stall candidates, the coalesced segments a finding may cite, and on the `last` slice the
    per-direction table without its stall columns; see `nagle_join`)."""
    conn = _directions(cap)
    carry = carry or _Carry.nothing(cap, len(conn))
    s = _again(_segments(cap, carry, conn["g"].to_numpy()[::2] >> 1, last), carry, conn)
    n, g, k = len(s["g"]), s["g"], s["k"]
    # The rows put again (one per direction at most, its first row: a run start): their own
    # values were counted in their slice, so they are adjusted on these rows alone.
    head = np.flatnonzero(s["again"])
    # Rows are grouped by direction (g): group sums are `add.reduceat` over the group starts.
    same = np.zeros(n, bool)  # previous row: same stream direction
    np.equal(g[1:], g[:-1], out=same[1:])
    gs = np.flatnonzero(~same)
    small_limit_k, merge_mss_k = _small_limits(conn["mss"].to_numpy())
    small = s["payload_bytes"] < small_limit_k[k]
    prev_small = same & _shifted(small)
    latest_small = _running_last(small)
    small_while_unacked = _small_while_unacked(s, carry, small, latest_small)

    joins = _joins(s, small, prev_small)
    _count_runs(s, carry, joins, head, merge_mss_k, last)
    joined = joins.copy()
    joined[head] = carry.joined[k[head]]
    in_run = joined.copy()
    in_run[:-1] |= joins[1:]
    # Whether a direction's last segment here is in a run is told by its next segment.
    group_last = np.r_[~same[1:], True] if n else same
    told = ~group_last | last

    _count(cap, s, carry, gs, head, small, small_while_unacked)
    stall, candidates = _stall_candidates(s, small, prev_small, conn["scaled"].to_numpy(bool))
    piece = {"stalls": candidates, "runs": _examples(s, in_run & told, carry), "directions": None}

    if last:
        piece["directions"] = _direction_rows(conn, carry, small_limit_k)
    else:  # what the next slice reads of each direction's segments here
        _keep_last_segments(s, carry, np.flatnonzero(group_last), joined, latest_small)
    s.update(small=small, in_run=in_run, stall=stall)
    return s, carry, piece


def _small_limits(mss_k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per direction (its effective MSS `mss_k`, NaN: unknown): the payload below which a
    segment is small, and the segment size the coalescing runs are counted in."""
    small_limit_k = np.ceil(np.where(np.isnan(mss_k), SMALL_BYTES_UNKNOWN_MSS, SMALL_MSS_FRACTION * mss_k)).astype(np.int64)
    merge_mss_k = np.where(np.isnan(mss_k), MERGE_MSS_UNKNOWN_BYTES, mss_k)
    return small_limit_k, merge_mss_k


def _small_while_unacked(s: dict[str, np.ndarray], carry: _Carry, small: np.ndarray,
                         latest_small: np.ndarray) -> np.ndarray:
    """Unbatched writes: a small segment sent while an earlier small segment of the direction
    was still unacknowledged by the peer (Nagle would have held it; with TCP_NODELAY it goes).
    Before the direction's first small segment here, the last small one is the carry's
    (`latest_small`: each row's latest small row so far, -1: none)."""
    g, k, end = s["g"], s["k"], s["end"]
    last_small = _shifted(latest_small)
    last_small[:1] = -1
    ls = np.maximum(last_small, 0)
    here = (last_small >= 0) & (g[ls] == g)
    small_while_unacked = small & here & (s["peer_acked"] < end[ls])
    first_small = np.flatnonzero(small & ~here)  # (the direction's first small segment here)
    kept_end = carry.small_end[k[first_small]]
    small_while_unacked[first_small] = (kept_end != _NONE) & (s["peer_acked"][first_small] < kept_end)
    return small_while_unacked


def _joins(s: dict[str, np.ndarray], small: np.ndarray, prev_small: np.ndarray) -> np.ndarray:
    """Whether each segment goes on the coalescing run of the previous one: runs of small
    segments, each within COALESCE_WINDOW_S of the previous one and with no peer data in
    between, could have been written (and sent) together."""
    ts, pdc = s["ts_ns"], s["peer_data_count"]
    return prev_small & small & (ts - _shifted(ts) <= _ns(COALESCE_WINDOW_S)) & (pdc == _shifted(pdc))


def _count_runs(s: dict[str, np.ndarray], carry: _Carry, joins: np.ndarray, head: np.ndarray,
                merge_mss_k: np.ndarray, last: bool) -> None:
    """The packets the coalescing runs (`joins`) would have saved added to the carry's totals. A
    segment put again (`head`) stands for its run so far; a direction's last run may go on in
    the next slice (unless `last`): it is kept in the carry, its packets saved counted once it
    ends."""
    n, k, payload = len(joins), s["k"], s["payload_bytes"]
    if not n:
        return
    head_k = k[head]
    start = np.flatnonzero(~joins)  # every group start is a run start (a join needs the same direction)
    run_k = k[start]
    run_segments = np.diff(np.r_[start, n])
    # (sums of whole numbers below 2**53: exact in float64, in any order)
    run_bytes = np.add.reduceat(payload, start, dtype=np.float64)
    head_run = np.searchsorted(start, head)
    run_segments[head_run] += carry.run_segments[head_k] - 1
    run_bytes[head_run] += carry.run_bytes[head_k] - payload[head]
    run_saved = np.maximum(run_segments - np.maximum(np.ceil(run_bytes / merge_mss_k[run_k]), 1), 0)
    open_run = np.r_[run_k[1:] != run_k[:-1], True] & (not last)
    carry.run_segments[run_k[open_run]] = run_segments[open_run]
    carry.run_bytes[run_k[open_run]] = run_bytes[open_run].astype(np.int64)
    carry.totals["packets_saved"] += np.bincount(run_k[~open_run], weights=run_saved[~open_run],
                                                 minlength=len(merge_mss_k)).astype(np.int64)


def _keep_last_segments(s: dict[str, np.ndarray], carry: _Carry, gl: np.ndarray, joined: np.ndarray,
                        latest_small: np.ndarray) -> None:
    """What the next slice reads of each direction's segments here (`gl`: each direction's last
    row): its last segment, whether that joined the one before, the end of its last small one."""
    g, k = s["g"], s["k"]
    for c in _SEGMENT_COLUMNS:
        carry.segment[c][k[gl]] = s[c][gl]
    carry.joined[k[gl]] = joined[gl]
    last_small = latest_small[gl]
    mine = (last_small >= 0) & (g[np.maximum(last_small, 0)] == g[gl])
    carry.small_end[k[gl][mine]] = s["end"][last_small[mine]]


def _count(cap: Capture, s: dict[str, np.ndarray], carry: _Carry, gs: np.ndarray, head: np.ndarray,
           small: np.ndarray, small_while_unacked: np.ndarray) -> None:
    """The segments here added to the carry's per-direction counts (`gs`: the rows where each
    direction's segments start), but for those put again (`head`, counted in their slice): all
    rows are summed, then the rows put again taken off."""
    if not len(gs):
        return
    k = s["k"]
    kg, kh = k[gs], k[head]

    def add(name: str, x: np.ndarray) -> None:  # integer sums per direction
        carry.totals[name][kg] += np.add.reduceat(x, gs, dtype=np.int64)
        carry.totals[name][kh] -= x[head]

    carry.totals["data_segments"][kg] += np.diff(np.r_[gs, len(k)])
    carry.totals["data_segments"][kh] -= 1
    add("payload_bytes", s["payload_bytes"])
    add("small_segments", small)
    add("frames", s["frames"])
    add("single_frame_segments", s["frames"] == 1)
    add("small_while_unacked", small_while_unacked)
    # A segment put again is one of the earlier slices': its ts is within the carry's span already.
    ts = s["ts_ns"]
    carry.first_ts[kg] = np.minimum(carry.first_ts[kg], np.minimum.reduceat(ts, gs))
    carry.last_ts[kg] = np.maximum(carry.last_ts[kg], np.maximum.reduceat(ts, gs))
    # What the small segments carry: counts per (direction, kind).
    sm = np.flatnonzero(small)
    sm = sm[~s["again"][sm]]
    kind = carried(cap, s["packet"][sm].astype(np.int64), s["frames"][sm], s["stream"][sm])
    carry.kinds += np.bincount(k[sm] * len(CARRIES) + kind, minlength=carry.kinds.size).reshape(carry.kinds.shape)


def _stall_candidates(s: dict[str, np.ndarray], small: np.ndarray, prev_small: np.ndarray,
                      scaled_k: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Nagle/delayed-ACK stalls but for the TCP_NODELAY test, which needs the whole direction
    (`nagle_join`): the flag per segment, and the stalls' columns."""
    ts, end, payload, packet, k = s["ts_ns"], s["end"], s["payload_bytes"], s["packet"], s["k"]
    # This small segment S left right after the peer's pure ACK of the previous small segment P,
    # and that ACK was itself delayed by a delayed-ACK timer. The cheap flags pick the
    # candidates; the rest is checked on those rows only (`c - 1`: previous row).
    c = np.flatnonzero(prev_small & small & s["peer_last_pure_ack"])
    t_ack = s["peer_last_ts_ns"][c]
    ack_delay, release = t_ack - ts[c - 1], ts[c] - t_ack
    prev_end = end[c - 1]
    win, edge = s["peer_prev_window"][c], s["peer_prev_ack"][c] + s["peer_prev_window"][c]
    ok = ((s["peer_last_packet"][c] > packet[c - 1])
          & (s["peer_last_ack"][c] >= prev_end)
          # Nagle's mechanism: P was the only unacknowledged data (the peer had acknowledged
          # everything up to P's first byte, and not P), so S waited for P's ACK alone ...
          & (s["peer_acked_before_last"][c] == prev_end - payload[c - 1])
          # ... and not for the peer's window: it was open, with room for S (when windows are
          # scaled; else only "not zero" can be told). A zero or full window is flow control.
          & (win > 0) & (~scaled_k[k[c]] | (edge >= end[c]))
          & (ack_delay >= _ns(STALL_ACK_DELAY_MIN_S)) & (ack_delay <= _ns(STALL_ACK_DELAY_MAX_S))
          & (release >= 0) & (release <= _ns(STALL_RELEASE_MAX_S)))
    st = c[ok]
    stall = np.zeros(len(ts), bool)
    stall[st] = True
    return stall, {"g": s["g"][st], "stream": s["stream"][st], "s2c": s["s2c"][st], "packet": packet[st],
                   "ts_ns": ts[st], "previous_packet": packet[st - 1], "ack_packet": s["peer_last_packet"][st],
                   "stall_ns": ts[st] - ts[st - 1], "ack_delay_ns": ack_delay[ok], "release_ns": release[ok],
                   "payload_bytes": payload[st]}


def _examples(s: dict[str, np.ndarray], in_run: np.ndarray, carry: _Carry) -> dict[str, np.ndarray]:
    """The segments in coalescable runs that a finding may cite: the first EXAMPLE_PACKETS of
    each direction, in segment order, with their rank (counted on from the carry's)."""
    rows = np.flatnonzero(in_run)
    k = s["k"][rows]
    first = np.r_[True, k[1:] != k[:-1]] if len(k) else np.zeros(0, bool)
    at = np.arange(len(k))
    rank = carry.in_run[k] + at - np.maximum.accumulate(np.where(first, at, 0))
    carry.in_run += np.bincount(k, minlength=len(carry.in_run))
    keep = rank < EXAMPLE_PACKETS
    return {"g": s["g"][rows[keep]], "packet": s["packet"][rows[keep]], "_rank": rank[keep]}


def _direction_rows(conn: pd.DataFrame, carry: _Carry, small_limit_k: np.ndarray) -> pd.DataFrame:
    """The per-direction table from the counts of all the partition's segments (`carry` after
    the last slice), without the stall columns (`_with_stalls`)."""
    kk = np.flatnonzero(carry.totals["data_segments"] > 0)
    groups = conn["g"].to_numpy()[kk]
    t = {name: v[kk] for name, v in carry.totals.items()}
    mss_g = conn["mss"].to_numpy()[kk]
    # Per direction: does it show TCP_NODELAY? Nagle (Minshall's variant, Linux) never sends a
    # small segment while an earlier small one is unacknowledged (RFC 896; RFC 1122 4.2.3.4),
    # so a direction that does so often is not under Nagle, and nothing of it was held by Nagle.
    n_small_g = t["small_segments"]
    nodelay_g = t["small_while_unacked"] > NAGLE_UNACKED_SHARE_MAX * n_small_g
    # What the small segments carry, per direction: the most common kind and its share of the
    # direction's small segments.
    kinds = carry.kinds[kk]
    top = kinds.argmax(axis=1) if len(kk) else np.zeros(0, np.int64)
    n_small_safe = np.maximum(n_small_g, 1)
    d = pd.DataFrame({
        "stream": (groups // 2).astype(np.int32),
        "direction": np.where(groups % 2 == 1, "s2c", "c2s"),
        "mss_bytes": pd.array(mss_g, dtype="Float64").astype("Int64"),
        "small_limit_bytes": small_limit_k[kk],
        "data_segments": t["data_segments"],
        "payload_bytes": t["payload_bytes"],
        "small_segments": n_small_g,
        "frames": t["frames"],
        "single_frame_segments": t["single_frame_segments"],
        "small_while_unacked": t["small_while_unacked"],
        "nodelay": nodelay_g,
        "carries": np.where(n_small_g > 0, np.asarray(CARRIES, dtype=object)[top], None),
        "carries_share": np.where(n_small_g > 0, kinds[np.arange(len(kk)), top] / n_small_safe, np.nan),
        "packets_saved": t["packets_saved"],
        "active_s": (carry.last_ts[kk] - carry.first_ts[kk]) / 1e9,
    })
    d["connection_s"] = conn["connection_s"].to_numpy()[kk]
    d["broker_port"] = conn["broker_port"].to_numpy()[kk]
    span = np.maximum(d["active_s"].to_numpy(), RATE_MIN_SPAN_S)
    d["small_share"] = d["small_segments"] / d["data_segments"]
    d["frames_per_segment"] = d["frames"] / d["data_segments"]
    d["small_segments_s"] = d["small_segments"] / span
    d["small_while_unacked_share"] = d["small_while_unacked"] / d["data_segments"]
    d["packets_saved_share"] = d["packets_saved"] / d["data_segments"]
    d["packets_saved_s"] = d["packets_saved"] / span
    return d


def _with_stalls(d: pd.DataFrame, candidates: dict[str, np.ndarray]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The per-direction table with its stall columns, and the stalls table: the candidates of
    the directions that do not show TCP_NODELAY, in (stream, direction, segment) order."""
    dg = d["stream"].to_numpy(np.int64) * 2 + (d["direction"] == "s2c").to_numpy(bool)
    at = np.searchsorted(dg, candidates["g"])
    held = np.flatnonzero(~d["nodelay"].to_numpy(bool)[at])
    o = held[np.argsort(candidates["g"][held], kind="stable")]
    c = {name: v[o] for name, v in candidates.items()}
    stall_s = c["stall_ns"] / 1e9
    stalls = pd.DataFrame({
        "stream": c["stream"].astype(np.int32),
        "direction": np.where(c["s2c"], "s2c", "c2s"),
        "packet": c["packet"].astype(np.int32),
        "ts": pd.to_datetime(c["ts_ns"], utc=True),
        "previous_packet": c["previous_packet"].astype(np.int32),
        "ack_packet": c["ack_packet"].astype(np.int32),
        "stall_s": stall_s,
        "ack_delay_s": c["ack_delay_ns"] / 1e9,
        "release_s": c["release_ns"] / 1e9,
        "payload_bytes": c["payload_bytes"].astype(np.int64),
    })
    st_group = at[o]
    d = d.copy()
    d["stalls"] = np.bincount(st_group, minlength=len(d)).astype(np.int64)
    # Summed in row order, as a per-row sum with zeros elsewhere would be.
    d["stall_time_s"] = np.bincount(st_group, weights=stall_s, minlength=len(d)).astype(np.float64)
    med = stalls.assign(g=stalls["stream"].astype(np.int64) * 2 + (stalls["direction"] == "s2c")).groupby("g")["stall_s"].median()
    d["median_stall_s"] = med.reindex(dg).to_numpy()
    cs = d["connection_s"].to_numpy()
    d["stall_share"] = np.where(cs > 0, d["stall_time_s"] / np.where(cs > 0, cs, 1), 0.0)
    return d[DIRECTION_COLUMNS], stalls


#: the per-direction table's columns
DIRECTION_COLUMNS = [
    "stream", "direction", "mss_bytes", "small_limit_bytes", "data_segments", "payload_bytes", "small_segments",
    "small_share", "small_segments_s", "frames_per_segment", "single_frame_segments", "small_while_unacked",
    "small_while_unacked_share", "nodelay", "carries", "carries_share", "packets_saved", "packets_saved_share",
    "packets_saved_s", "stalls", "stall_time_s", "median_stall_s", "stall_share", "active_s", "connection_s",
    "broker_port"]


def nagle_join(pieces: list[dict[str, Any]]) -> dict[str, Any]:
    """The partition's directions and stalls from its slices' pieces (the last one holds the
    directions' counts over all of them: a direction's stall candidates are its stalls unless
    the direction shows TCP_NODELAY), and the segments in coalescable runs that a finding may
    cite (the first EXAMPLE_PACKETS of each direction: a finding cites the first ones of the
    directions it names, in segment order)."""
    d, stalls = _with_stalls(pieces[-1]["directions"], {c: np.concatenate([q["stalls"][c] for q in pieces])
                                                       for c in pieces[0]["stalls"]})
    runs = {c: np.concatenate([q["runs"][c] for q in pieces]) for c in ("g", "packet", "_rank")}
    o = np.argsort(runs["g"], kind="stable")  # (a direction's examples of later slices after its earlier ones)
    return {"directions": d, "stalls": stalls, "runs": {c: v[o] for c, v in runs.items()}}


def analyze_segments(cap: Capture) -> tuple[dict[str, np.ndarray], pd.DataFrame, pd.DataFrame]:
    """(segment columns with per-segment flags, per-direction table, stalls table) of a
    partition analysed whole."""
    s, _, piece = _slice(cap, None, True)
    part = nagle_join([piece])
    d = part["directions"]
    # a candidate of a direction that shows TCP_NODELAY is no stall
    dg = d["stream"].to_numpy(np.int64) * 2 + (d["direction"] == "s2c").to_numpy(bool)
    s["stall"] &= ~d["nodelay"].to_numpy(bool)[np.searchsorted(dg, s["g"])]
    return s, d, part["stalls"]
