"""Packet sizes, frames per packet and throughput over time.

Everything here is whole-column numpy/pandas work on the ingestion tables (docs/tables.md);
the only Python loops are over the two directions and the plot panels.
Documentation of every table, summary key and plot: docs/analyzers/sizes.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..analysis import AnalyzerResult, Plot, analyzer
from ..capture import Capture
from ..derive.columns import counts_added, value_at
from ..partition import CaptureFacts, Slicing, Split, merge_rows, run_whole

#: Wireshark's `-z plen,tree` bucket lower bounds (bytes); the last bucket is open-ended.
#: Spelled exactly as tshark prints them so `packet_sizes.bins` compares 1:1 with tshark.
PLEN_EDGES_BYTES = (0, 20, 40, 80, 160, 320, 640, 1280, 2560, 5120)
PLEN_LABELS = tuple(
    [f"{lo}-{hi - 1}" for lo, hi in zip(PLEN_EDGES_BYTES[:-1], PLEN_EDGES_BYTES[1:])] + [f"{PLEN_EDGES_BYTES[-1]} and greater"]
)
#: tshark prints bucket percentages with two decimals (`%.2f%%`).
PERCENT_DECIMALS = 2

#: The throughput timeline aims at about this many time bins over the capture: enough to see
#: bursts and stalls, few enough that a plot and a CSV stay small for any capture length.
TARGET_TIME_BINS = 200
#: Bin widths are picked from a 1-2-5 series (1 µs ... ) so bin edges are round numbers.
_NICE_STEPS = (1, 2, 5)

DIRECTIONS = ("c2s", "s2c")
DELIVER_METHODS = ("basic.deliver", "basic.get-ok")


def _ns(ts: pd.Series) -> np.ndarray:
    """Timestamps as int64 nanoseconds since the epoch (whole column, no per-row objects)."""
    return np.asarray(ts.dt.as_unit("ns").array.asi8, dtype=np.int64)


def bin_width_s(duration_s: float, target_bins: int = TARGET_TIME_BINS) -> float:
    """Smallest round (1-2-5) width giving at most ``target_bins`` bins over ``duration_s``."""
    want = max(duration_s / target_bins, 1e-6)
    exp = int(np.floor(np.log10(want)))
    for e in (exp, exp + 1):
        for step in _NICE_STEPS:
            w = step * 10.0**e
            if w >= want * (1 - 1e-9):
                return float(w)
    return float(10.0 ** (exp + 1))


#: plen bucket of every length below the last edge; longer lengths are clipped to it (last bucket).
_PLEN_LUT = np.searchsorted(np.asarray(PLEN_EDGES_BYTES), np.arange(PLEN_EDGES_BYTES[-1] + 1), side="right") - 1


def plen_bucket(frame_len: pd.Series | np.ndarray) -> np.ndarray:
    """Wireshark plen bucket index of on-wire lengths: one table lookup per row (a searchsorted
    over the edges costs several times more on a million rows)."""
    return _PLEN_LUT[np.minimum(np.asarray(frame_len), PLEN_EDGES_BYTES[-1])]


def plen_counts(frame_len: pd.Series | np.ndarray) -> np.ndarray:
    """Counts per Wireshark plen bucket for on-wire lengths."""
    return np.bincount(plen_bucket(frame_len), minlength=len(PLEN_EDGES_BYTES))


def _percent(counts: np.ndarray, total: int) -> np.ndarray:
    return np.round(counts * 100.0 / total, PERCENT_DECIMALS) if total else np.zeros(len(counts))


def _gk(df: pd.DataFrame) -> np.ndarray:
    """(stream, direction) as one int64: stream * 2 + (direction == s2c). Integer keys keep the
    per-row work in numpy; strings appear only in the (small) output tables."""
    return df["stream"].to_numpy(np.int64) * 2 + (df["direction"] == "s2c").to_numpy()


def _count_pairs(key: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(key, value, count) for every (key, value) pair that occurs: one `np.unique` on int64."""
    if not len(key):
        z = np.zeros(0, np.int64)
        return z, z, z
    key, value = np.asarray(key, np.int64), np.asarray(value, dtype=np.int64)
    n_v = int(value.max()) + 1
    if value.min() >= 0 and key.min() >= 0 and (int(key.max()) + 1) * n_v <= 4 * len(key) + 4096:
        # Few distinct (key, value) cells (the usual case: small keys, small counts): a dense
        # bincount instead of sorting every row; its nonzero cells come in the same (key, value) order.
        counts = np.bincount(key * n_v + value)
        kv = np.flatnonzero(counts)
        return kv // n_v, kv % n_v, counts[kv].astype(np.int64)
    kv, counts = np.unique((key << 32) | value, return_counts=True)
    return kv >> 32, kv & 0xFFFFFFFF, counts.astype(np.int64)


def _is_method(frames: pd.DataFrame, methods) -> np.ndarray:
    """Rows whose method is one of ``methods``, compared on the categorical's codes (small
    ints) instead of its values."""
    m = frames["method"].array
    # One gather from a per-category table; code -1 (missing) reads the appended False.
    return np.r_[m.categories.isin(list(methods)), False][m.codes]


def _stream_direction(gk: np.ndarray) -> dict[str, np.ndarray]:
    return {"stream": (gk // 2).astype(np.int32), "direction": np.where(gk % 2 == 1, "s2c", "c2s")}


#: counts of (key, value) pairs, as `_count_pairs` gives them: (key, value, count), sorted by
#: (key, value), each pair once
Counts = tuple[np.ndarray, np.ndarray, np.ndarray]


def _no_counts() -> Counts:
    z = np.zeros(0, np.int64)
    return z, z, z


def _added(counts: Counts, more: Counts) -> Counts:
    """`counts` with `more` added: the counts of a partition's slices so far, then of its next
    one (both sorted by (key, value) and each pair once, as is the result)."""
    (key, value), n = counts_added(counts[:2], counts[2], more[:2], more[2])
    return key, value, n


def size_cells(p: pd.DataFrame, gk: np.ndarray) -> Counts:
    """(stream·2 + direction, plen bucket index, packets) of the packets `p` (`gk`: _gk(p))."""
    return _count_pairs(gk, plen_bucket(p["frame_len"].to_numpy()))


def stream_size_rows(cells: Counts) -> pd.DataFrame:
    """plen bucket counts per stream and direction, only the buckets it uses (a capture of a
    million short connections would otherwise get ten rows each): stream, direction, b (bucket
    index), count, percent (of the stream direction). `cells`: size_cells of the packets."""
    group, b, n = cells
    if not len(group):
        return pd.DataFrame({"stream": pd.array([], dtype="Int32"), "direction": np.array([], dtype=object),
                             "b": np.zeros(0, np.int64), "count": np.zeros(0, np.int64), "percent": np.zeros(0)})
    totals = np.bincount(group, weights=n)[group]
    return pd.DataFrame({
        "stream": pd.array((group // 2).astype(np.int32), dtype="Int32"),
        "direction": pd.Categorical.from_codes((group % 2).astype(np.int8), categories=["c2s", "s2c"]).astype(object),
        "b": b,
        "count": n, "percent": np.round(n * 100.0 / totals, PERCENT_DECIMALS),
    })


def packet_size_table(whole: np.ndarray, streams: pd.DataFrame) -> pd.DataFrame:
    """plen buckets for the whole capture (stream <NA>, direction `all`; every bucket; `whole`:
    plen_counts of the records) then per stream and direction (`streams`: stream_size_rows)."""
    n_b = len(PLEN_LABELS)
    lo = np.asarray(PLEN_EDGES_BYTES)
    hi = pd.array(np.r_[lo[1:] - 1, 0], dtype="Int64")
    hi[n_b - 1] = pd.NA
    parts = [pd.DataFrame({"stream": pd.array([pd.NA] * n_b, dtype="Int32"), "direction": "all", "b": np.arange(n_b),
                           "count": whole, "percent": _percent(whole, int(whole.sum()))})]
    if len(streams):
        parts.append(streams)
    out = pd.concat(parts, ignore_index=True)
    b = out.pop("b").to_numpy()
    out.insert(2, "range", np.asarray(PLEN_LABELS)[b])
    out.insert(3, "min_bytes", lo[b])
    out.insert(4, "max_bytes", hi.take(b))
    out["count"] = out["count"].astype(np.int64)
    return out


def payload_size_table(sizes: Counts) -> pd.DataFrame:
    """Distribution of TCP payload sizes of data segments per stream and direction, from how many
    segments had each size (`sizes`: (stream·2 + direction, payload bytes, segments)): a size
    histogram gives the quantiles of the segments themselves, and adds up over slices of time."""
    cols = ["stream", "direction", "segments", "payload_bytes", "mean_bytes", "min_bytes", "p10_bytes", "p50_bytes",
            "p90_bytes", "p99_bytes", "max_bytes"]
    gk, size, count = sizes
    if not len(gk):
        return pd.DataFrame(columns=cols)
    # The segments sorted by (group, size), each size `count` times: `end` is where each size's
    # run ends in that (virtual) sorted array, `first` where each group's segments start.
    start = np.flatnonzero(np.r_[True, gk[1:] != gk[:-1]])
    n = np.add.reduceat(count, start)
    end = np.cumsum(count)
    first = end[start] - count[start]

    def nth(i: np.ndarray) -> np.ndarray:  # the size of the i-th segment of the sorted array
        return size[np.searchsorted(end, i, side="right")]

    out = pd.DataFrame({"stream": (gk[start] // 2).astype(np.int32), "direction": np.where(gk[start] % 2 == 1, "s2c", "c2s"),
                        "segments": n, "payload_bytes": np.add.reduceat(size * count, start)})
    out["mean_bytes"] = out["payload_bytes"] / n
    out["min_bytes"] = size[start]
    for q in (10, 50, 90, 99):
        # Linear interpolation between order statistics, as numpy/pandas quantile does.
        # The position within the group, not within the array: the value must not depend on
        # where the group sits (which other connections share the partition).
        pos = (n - 1) * (q / 100)
        below = np.floor(pos)
        lo_i = first + below.astype(np.int64)
        hi_i = np.minimum(lo_i + 1, first + n - 1)
        out[f"p{q}_bytes"] = nth(lo_i) + (nth(hi_i) - nth(lo_i)) * (pos - below)
    out["max_bytes"] = nth(first + n - 1)
    return out[cols]


def frames_per_packet_table(counts: Counts) -> pd.DataFrame:
    """How many AMQP frames each data packet completes, per stream and direction (`counts`:
    _count_pairs of stream·2 + direction and frames_ended over the data packets)."""
    gk, v, n = counts
    return pd.DataFrame({**_stream_direction(gk), "frames_per_packet": v, "packets": n})


def _rank_in_group(gk: np.ndarray) -> np.ndarray:
    """Each row's number of earlier rows with the same non-negative key (a groupby cumcount):
    its position in the stable sort by key minus where its key's run starts there (the counts
    of the smaller keys). Keys below 2¹⁶ sort as uint16, for which numpy's stable sort is a
    radix sort."""
    if not len(gk):
        return np.zeros(0, np.int64)
    o = np.argsort(gk.astype(np.uint16) if gk.max() < 1 << 16 else gk, kind="stable")
    counts = np.bincount(gk)
    run_start = np.cumsum(counts) - counts
    rank = np.empty(len(gk), np.int64)
    rank[o] = np.arange(len(gk))
    rank -= run_start[gk]
    return rank


@dataclass
class _Ranks:
    """Data packets of a partition's slices so far, per stream direction (stream·2 + direction),
    as `packets_per_frame` needs them for the frames that end in a later slice."""

    #: the directions (sorted) and how many data packets each had: the rank of its next one
    key: np.ndarray
    packets: np.ndarray
    #: per direction (sorted `done`) the last packet that completed a frame and its seq
    done: np.ndarray
    done_packet: np.ndarray
    done_seq: np.ndarray
    #: the data packets a later frame may start in (in packet order): those from the direction's
    #: last frame-completing packet on, and earlier ones holding bytes past that packet's seq (a
    #: frame completed by a segment that arrived late starts in the segment after it on the wire)
    back_key: np.ndarray
    back_packet: np.ndarray
    back_rank: np.ndarray
    back_seq_end: np.ndarray

    @classmethod
    def nothing(cls) -> "_Ranks":
        return cls(*(np.zeros(0, np.int64) for _ in range(9)))


def packets_per_frame(frames: pd.DataFrame, gk: np.ndarray, pkt: np.ndarray, before: _Ranks | None = None) -> np.ndarray:
    """For each frame, the data packets of its stream direction from `first_packet` to `packet`.

    Both ends are data packets of the frame's own stream direction, so the span is the
    difference of their running counts within that direction, found by binary search in the
    data packets' numbers (unique across the file, in order; a lookup indexed by packet number
    would be as long as the whole capture for a partition's few). `before`: the data packets of
    the partition's slices before this one (its frames may start there)."""
    if not len(frames):
        return np.zeros(0, np.int64)
    before = before or _Ranks.nothing()
    # data is in packet order, so a running count per group is each packet's rank in its group.
    rank = _rank_in_group(gk) + value_at(before.key, before.packets, gk, 0)
    at_pkt, at_rank = np.r_[before.back_packet, pkt], np.r_[before.back_rank, rank]

    def rank_of(packets: np.ndarray) -> np.ndarray:
        return at_rank[np.searchsorted(at_pkt, packets)]

    first = frames["first_packet"].to_numpy(np.int64)
    if len(before.key):
        _check_carried(first, _gk(frames), pkt, at_pkt, np.r_[before.back_key, gk])
    return rank_of(frames["packet"].to_numpy(np.int64)) - rank_of(first) + 1


def _check_carried(first: np.ndarray, frame_gk: np.ndarray, pkt: np.ndarray, at_pkt: np.ndarray,
                   at_gk: np.ndarray) -> None:
    """Frames that start before this slice start in a data packet its carry kept: else their
    span would silently differ from the whole partition's."""
    earlier = first < (pkt[0] if len(pkt) else np.iinfo(np.int64).max)
    i = np.minimum(np.searchsorted(at_pkt, first[earlier]), max(len(at_pkt) - 1, 0))
    if earlier.any() and not (len(at_pkt) and ((at_pkt[i] == first[earlier]) & (at_gk[i] == frame_gk[earlier])).all()):
        raise ValueError("a frame starts in a data packet of an earlier slice that the carry did not keep")


def _ranks_after(p: pd.DataFrame, is_data: np.ndarray, gk: np.ndarray, before: _Ranks,
                 connections: pd.DataFrame) -> _Ranks:
    """`before` with the packets `p` of the next slice (`gk`: _gk(p)) added."""
    d_gk = gk[is_data]
    d_key, d_n = np.unique(d_gk, return_counts=True)
    key, _, packets = _added((before.key, np.zeros(len(before.key), np.int64), before.packets),
                             (d_key, np.zeros(len(d_key), np.int64), d_n))
    packet, seq = p["packet"].to_numpy(np.int64), p["seq"].to_numpy(np.int64)
    # each direction's last frame-completing packet (packets are in packet order: the last row)
    ended = np.flatnonzero(p["frames_ended"].to_numpy() > 0)
    last = ended[len(ended) - 1 - np.unique(gk[ended][::-1], return_index=True)[1]]
    old = ~np.isin(before.done, gk[last])
    done = np.r_[before.done[old], gk[last]]
    order = np.argsort(done, kind="stable")
    done_packet = np.r_[before.done_packet[old], packet[last]][order]
    done_seq = np.r_[before.done_seq[old], seq[last]][order]
    done = done[order]
    # the slice's data packets, with their rank in the direction, joined to those carried
    rank = _rank_in_group(d_gk) + value_at(before.key, before.packets, d_gk, 0)
    back_key, back_packet = np.r_[before.back_key, d_gk], np.r_[before.back_packet, packet[is_data]]
    back_rank = np.r_[before.back_rank, rank]
    back_seq_end = np.r_[before.back_seq_end, (seq + p["payload_bytes"].to_numpy(np.int64))[is_data] & 0xFFFFFFFF]
    # sequence numbers are 32 bits: "past" is a positive difference modulo 2³²
    past = (back_seq_end - value_at(done, done_seq, back_key, 0) + (1 << 31)) % (1 << 32) - (1 << 31) > 0
    keep = ~np.isin(back_key, done) | (back_packet >= value_at(done, done_packet, back_key, 0)) | past
    # a direction none of whose bytes are decoded (TLS without its keys) completes no frame
    keep &= _decodes(connections, back_key)
    return _Ranks(key, packets, done, done_packet, done_seq, back_key[keep], back_packet[keep], back_rank[keep],
                  back_seq_end[keep])


def _decodes(connections: pd.DataFrame, gk: np.ndarray) -> np.ndarray:
    """Whether the direction `gk` (stream·2 + direction) of each row decoded any bytes as AMQP."""
    if "c2s_bytes_decoded" not in connections:
        return np.ones(len(gk), bool)
    stream = connections["stream"].to_numpy(np.int64)
    if not len(stream):
        return np.ones(len(gk), bool)
    order = np.argsort(stream)
    decoded = np.stack([connections[f"{d}_bytes_decoded"].to_numpy(np.int64) for d in DIRECTIONS], axis=1)[order]
    i = np.minimum(np.searchsorted(stream[order], gk // 2), len(stream) - 1)
    return (decoded[i, gk % 2] > 0) | (stream[order][i] != gk // 2)


def packets_per_frame_table(counts: Counts, types: pd.Index) -> pd.DataFrame:
    """Frames by the number of data packets they span, per stream, direction and frame type
    (`counts`: _count_pairs of stream·2 + direction, as ·8 + the frame type's code in `types`,
    and the span)."""
    key, v, n = counts
    types = np.asarray(types, dtype=object)
    return pd.DataFrame({**_stream_direction(key // 8), "type": types[key % 8], "packets_per_frame": v, "frames": n})


@dataclass
class _Acks:
    """What `settled_by_ack` carries from a partition's slices so far to the next one."""

    #: the highest delivery tag acked so far per (stream, channel, direction) key (sorted)
    key: np.ndarray
    highest: np.ndarray
    #: the channels opened (stream·2¹⁶ + channel, sorted)
    opened: np.ndarray
    #: the first acks of a channel with `multiple` set whose channel.open was not seen yet: it
    #: may come in a later slice, and decide where their tags started (stream·2¹⁶ + channel,
    #: throughput bin key, delivery tag); one per key at most
    undecided_channel: np.ndarray
    undecided_bin: np.ndarray
    undecided_tag: np.ndarray

    @classmethod
    def nothing(cls) -> "_Acks":
        z = np.zeros(0, np.int64)
        return cls(z, np.zeros(0), z, z, z, np.zeros(0))


def _channel_key(df: pd.DataFrame) -> np.ndarray:
    return (df["stream"].to_numpy(np.int64) << 16) | df["channel"].to_numpy(np.int64)


def settled_by_ack(frames: pd.DataFrame, seen: _Acks | None = None, last: bool = True) -> pd.DataFrame:
    """basic.ack frames with the number of delivery tags each one settles (`settled`).

    A single ack settles one tag; `multiple` settles every tag up to its own that no earlier ack
    of the same (stream, channel, direction) settled: its tag minus the highest tag acked before
    (a running max). The first ack of a channel counts from tag 0 when the channel was opened in
    the capture, else it counts as settling one tag (we do not know where the tags started).
    Limit: a single ack out of order above a later multiple ack's base is not subtracted.

    Over slices of time: `seen` (updated) holds the slices before; a first multiple ack whose
    channel.open is in none of them nor in this one may yet find it in a later slice: unless
    this is the `last` slice, it is `undecided` (settled 0 here; `_decided` counts it at the end).
    """
    seen = seen or _Acks.nothing()
    # Where a channel's tags start: channel.open seen (both directions share it) → tag 0.
    seen.opened = np.union1d(seen.opened, _channel_key(frames.loc[_is_method(frames, ["channel.open"])]))
    # Only the columns needed: the frames table is wide, a row filter would copy all of it.
    rows = np.flatnonzero(_is_method(frames, ["basic.ack"]))
    acks = pd.DataFrame({c: frames[c].array.take(rows) for c in ("ts", "stream", "channel", "direction", "delivery_tag",
                                                                   "multiple")}, index=frames.index[rows])
    if not len(acks):
        return acks.assign(settled=np.zeros(0, dtype=np.int64), undecided=np.zeros(0, bool))
    # (stream, channel, direction) as one int64 key (channel < 2¹⁶; the direction's category
    # code + 1, so a missing direction is a group of its own): grouping on one integer column
    # costs a fraction of grouping on three. (direction stays categorical in the result.)
    key = ((acks["stream"].to_numpy(np.int64) << 18) | (acks["channel"].to_numpy(np.int64) << 2)
           | (acks["direction"].array.codes.astype(np.int64) + 1))
    tag = acks["delivery_tag"].astype("float64").fillna(0).to_numpy()
    multiple = acks["multiple"].fillna(False).to_numpy(bool)
    prev_max = pd.Series(tag, index=acks.index).groupby(key).cummax().groupby(key).shift(1).to_numpy()
    pm = np.fmax(prev_max, value_at(seen.key, seen.highest, key, np.nan))  # (and the slices' before)
    first = np.isnan(pm)
    opened = np.isin(_channel_key(acks), seen.opened)
    pm[first] = np.where(opened[first], 0.0, tag[first] - 1)
    settled = np.where(multiple, np.clip(tag - pm, 0, None), 1).astype(np.int64)
    undecided = first & multiple & ~opened & (not last)
    settled[undecided] = 0
    highest = pd.Series(tag).groupby(key).max()
    k = np.r_[seen.key, highest.index.to_numpy(np.int64)]
    v = np.r_[seen.highest, highest.to_numpy()]
    seen.key, i = np.unique(k, return_inverse=True)
    seen.highest = np.full(len(seen.key), -np.inf)
    np.maximum.at(seen.highest, i, v)
    return acks.assign(settled=settled, undecided=undecided)


def _decided(seen: _Acks) -> tuple[np.ndarray, np.ndarray]:
    """The throughput bin keys and tags settled of the first multiple acks left undecided by
    earlier slices (`settled_by_ack`), now that every channel.open is known."""
    opened = np.isin(seen.undecided_channel, seen.opened)
    tag = seen.undecided_tag
    pm = np.where(opened, 0.0, tag - 1)
    return seen.undecided_bin, np.clip(tag - pm, 0, None).astype(np.int64).astype(np.float64)


#: the throughput timeline's quantities, summed per (time bin, direction) by `add_throughput`
THROUGHPUT_SUMS = ("wire_bytes", "payload_bytes", "packets", "published", "delivered", "acked")


def add_throughput(cap: Capture, facts: CaptureFacts, sums: dict[str, np.ndarray], acks_seen: _Acks,
                   last: bool = True) -> None:
    """Adds to `sums`, per quantity (THROUGHPUT_SUMS) an (n_bins, 2) array of sums per time bin and
    direction (column D is DIRECTIONS[D]), the packets and frames of `cap` (a partition or the
    next slice of its time, with `acks_seen` of those before; `last`: the last). Every value
    summed is a whole number, so sums of partitions and of slices add up exactly (float64 is
    exact below 2⁵³)."""
    p, f = cap.packets, cap.frames
    width_s, n_bins = time_bins(facts)
    w_ns = int(round(width_s * 1e9))

    def bin_key(ts_ns: np.ndarray, s2c: np.ndarray) -> np.ndarray:  # bin·2 + direction
        return np.clip((ts_ns - facts.t0_ns) // w_ns, 0, n_bins - 1) * 2 + s2c

    p_key = bin_key(_ns(p["ts"]), (p["direction"] == "s2c").to_numpy())
    # Frames: only the publish and deliver rows are binned, not the whole (long) frames table.
    f_ns, f_s2c = _ns(f["ts"]), (f["direction"] == "s2c").to_numpy()
    is_pub = _is_method(f, ["basic.publish"])
    is_dlv = _is_method(f, DELIVER_METHODS)
    acks = settled_by_ack(f, acks_seen, last)
    a_key = bin_key(_ns(acks["ts"]), (acks["direction"] == "s2c").to_numpy())
    undecided = acks["undecided"].to_numpy(bool)
    acks_seen.undecided_channel = np.r_[acks_seen.undecided_channel, _channel_key(acks)[undecided]]
    acks_seen.undecided_bin = np.r_[acks_seen.undecided_bin, a_key[undecided]]
    acks_seen.undecided_tag = np.r_[acks_seen.undecided_tag,
                                    acks["delivery_tag"].astype("float64").fillna(0).to_numpy()[undecided]]

    # One bincount per quantity on the key bin·2 + direction (no per-direction masks over the
    # million packets).
    def per_bin(key, weights=None):
        return np.bincount(key, weights=weights, minlength=2 * n_bins).astype(np.float64).reshape(n_bins, 2)

    sums["wire_bytes"] += per_bin(p_key, p["frame_len"].to_numpy(np.float64))
    sums["payload_bytes"] += per_bin(p_key, p["payload_bytes"].to_numpy(np.float64))
    sums["packets"] += per_bin(p_key)
    sums["published"] += per_bin(bin_key(f_ns[is_pub], f_s2c[is_pub]))
    sums["delivered"] += per_bin(bin_key(f_ns[is_dlv], f_s2c[is_dlv]))
    sums["acked"] += per_bin(a_key, acks["settled"].to_numpy(np.float64))
    if last:
        sums["acked"] += per_bin(*_decided(acks_seen))


def throughput_table(bins: dict[str, np.ndarray], t0_ns: int, width_s: float, n_bins: int) -> pd.DataFrame:
    """Per direction and time bin: Mbit/s on the wire, payload Mbit/s, packets/s and messages/s."""
    w_ns = int(round(width_s * 1e9))
    out = []
    start_s = np.arange(n_bins) * width_s
    for D, d in enumerate(DIRECTIONS):
        wire, pay, pk = bins["wire_bytes"][:, D], bins["payload_bytes"][:, D], bins["packets"][:, D]
        pub, dlv, ack = bins["published"][:, D], bins["delivered"][:, D], bins["acked"][:, D]
        out.append(pd.DataFrame({
            "start_s": start_s,
            "ts": pd.to_datetime(t0_ns + np.arange(n_bins, dtype=np.int64) * w_ns, utc=True),
            "direction": d,
            "bytes": wire.astype(np.int64),
            "packets": pk.astype(np.int64),
            "mbit_s": wire * 8 / 1e6 / width_s,
            "payload_mbit_s": pay * 8 / 1e6 / width_s,
            "packets_s": pk / width_s,
            "published_msgs_s": pub / width_s,
            "delivered_msgs_s": dlv / width_s,
            "acked_msgs_s": ack / width_s,
        }))
    return pd.concat(out, ignore_index=True)


def throughput_summary(tp: pd.DataFrame, duration_s: float, width_s: float) -> dict[str, Any]:
    out: dict[str, Any] = {"bin_s": width_s, "duration_s": duration_s}
    span = max(duration_s, width_s)
    for d in DIRECTIONS:
        t = tp[tp["direction"] == d]
        row: dict[str, Any] = {}
        for col in ("mbit_s", "packets_s", "published_msgs_s", "delivered_msgs_s", "acked_msgs_s"):
            total = float((t[col] * width_s).sum())  # back to a count (bits/1e6, packets, messages)
            row[f"peak_{col}"] = float(t[col].max()) if len(t) else 0.0
            row[f"mean_{col}"] = total / span
        out[d] = row
    return out


# --------------------------------------------------------------------------------------------- plots


def _plot_packet_sizes(whole: pd.DataFrame, amqp: pd.DataFrame):
    def draw(path: Path) -> None:
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(9, 4.5))
        x = np.arange(len(PLEN_LABELS))
        ax.bar(x, whole["count"], color="#cccccc", label="whole capture", width=0.8)
        for i, d in enumerate(DIRECTIONS):
            c = amqp[amqp["direction"] == d].groupby("range", sort=False)["count"].sum().reindex(PLEN_LABELS, fill_value=0)
            ax.bar(x + (i - 0.5) * 0.36, c.to_numpy(), width=0.36, label=f"AMQP {d}", color=("#1f77b4", "#ff7f0e")[i])
        for xi, (n, pc) in enumerate(zip(whole["count"], whole["percent"])):
            if n:
                ax.annotate(f"{n:,}\n{pc:.2f}%", (xi, n), ha="center", va="bottom", fontsize=8)
        ax.set_xticks(x, PLEN_LABELS, rotation=30, ha="right")
        ax.set_xlabel("on-wire packet length (bytes, Wireshark plen buckets)")
        ax.set_ylabel("packets")
        ax.set_ylim(0, max(1, whole["count"].max()) * 1.2)
        ax.set_title(f"Packet sizes ({int(whole['count'].sum()):,} packets)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=110)

    return draw


def _plot_frames_per_packet(fpp: pd.DataFrame):
    def draw(path: Path) -> None:
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 4.5))
        t = fpp.groupby(["frames_per_packet", "direction"])["packets"].sum().unstack("direction", fill_value=0)
        t = t.reindex(columns=list(DIRECTIONS), fill_value=0)
        # Beyond 30 frames per packet the bars are unreadable: lump the tail into one bar.
        cap_at = 30
        if len(t) and t.index.max() > cap_at:
            tail = t[t.index > cap_at].sum()
            t = t[t.index <= cap_at]
            t.loc[cap_at + 1] = tail
        labels = [str(i) if i <= cap_at else f">{cap_at}" for i in t.index]
        x = np.arange(len(t))
        for i, d in enumerate(DIRECTIONS):
            bars = ax.bar(x + (i - 0.5) * 0.4, t[d].to_numpy(), width=0.4, label=d)
            ax.bar_label(bars, labels=[f"{v:,}" if v else "" for v in t[d].to_numpy()], fontsize=7)
        ax.set_xticks(x, labels)
        ax.set_xlabel("AMQP frames completed in the packet (data packets only)")
        ax.set_ylabel("packets")
        ax.set_title("AMQP frames per TCP data packet")
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=110)

    return draw


def _plot_throughput(tp: pd.DataFrame, width_s: float):
    def draw(path: Path) -> None:
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(3, 1, figsize=(10, 8), sharex=True)
        for d in DIRECTIONS:
            t = tp[tp["direction"] == d]
            axes[0].step(t["start_s"], t["mbit_s"], where="post", label=d)
            axes[1].step(t["start_s"], t["packets_s"], where="post", label=d)
        c2s, s2c = tp[tp["direction"] == "c2s"], tp[tp["direction"] == "s2c"]
        for t, col, label in ((c2s, "published_msgs_s", "published (c2s)"), (s2c, "delivered_msgs_s", "delivered (s2c)"),
                              (c2s, "acked_msgs_s", "acked by consumers (c2s)"), (s2c, "acked_msgs_s", "confirmed (s2c)")):
            if t[col].any():
                axes[2].step(t["start_s"], t[col], where="post", label=label)
        axes[0].set_ylabel("Mbit/s (on wire)")
        axes[1].set_ylabel("packets/s")
        axes[2].set_ylabel("messages/s")
        axes[2].set_xlabel(f"time since capture start (s), {width_s * 1e3:g} ms bins")
        for ax in axes:
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(loc="upper right", fontsize=8)
        axes[0].set_title("Throughput per direction")
        fig.tight_layout()
        fig.savefig(path, dpi=110)

    return draw


#: the segment-size plot's payload axis: quarter-octave bins from 1 byte to 4 GiB, fixed so that
#: the histograms of partitions add up (the plot shows the rows that hold segments)
SEGMENT_SIZE_EDGES = 2.0 ** (np.arange(0, 32 * 4 + 1) / 4)


def segment_time_edges(duration_s: float) -> np.ndarray:
    # Half the timeline resolution: each cell then holds enough segments for the colour to mean something.
    return np.linspace(0, max(duration_s, 1e-6), TARGET_TIME_BINS // 2 + 1)


def segment_histograms(ts_ns: np.ndarray, size: np.ndarray, s2c: np.ndarray, facts: CaptureFacts) -> np.ndarray:
    """Data segments per (direction, time cell, payload size cell): a (2, time cells, size cells)
    array of counts, the time axis over the whole capture."""
    t_s = (ts_ns - facts.t0_ns) / 1e9
    x_edges = segment_time_edges(facts.duration_s)
    return np.stack([np.histogram2d(t_s[s2c == (d == "s2c")], size[s2c == (d == "s2c")].astype(np.float64),
                                    bins=(x_edges, SEGMENT_SIZE_EDGES))[0] for d in DIRECTIONS])


def _plot_segment_sizes(hist: np.ndarray, segments: np.ndarray, duration_s: float):
    """`hist`: segment_histograms (summed over partitions); `segments`: data segments per direction."""
    # A 2D histogram (time × payload size) per direction: any number of segments renders as one image.
    def draw(path: Path) -> None:
        import matplotlib.pyplot as plt
        from matplotlib.colors import LogNorm

        x_edges = segment_time_edges(duration_s)
        used = np.flatnonzero(hist.sum(axis=(0, 1)))
        lo, hi = (int(used[0]), int(used[-1]) + 1) if len(used) else (0, 4)
        y_edges = SEGMENT_SIZE_EDGES[lo:hi + 1]
        fig, axes = plt.subplots(2, 1, figsize=(10, 7), sharex=True, sharey=True)
        mesh = None
        for D, (ax, d) in enumerate(zip(axes, DIRECTIONS)):
            h = hist[D][:, lo:hi]
            if h.any():
                mesh = ax.pcolormesh(x_edges, y_edges, np.ma.masked_equal(h.T, 0), norm=LogNorm(vmin=1, vmax=max(h.max(), 2)),
                                     cmap="viridis", shading="flat")
            ax.set_yscale("log")
            ax.set_ylabel("TCP payload (bytes)")
            ax.set_title(f"{d}: {int(segments[D]):,} data segments")
            ax.grid(alpha=0.3)
        axes[1].set_xlabel("time since capture start (s)")
        if mesh is not None:
            from ..plotting import log_colorbar

            log_colorbar(fig, mesh, axes, "segments per cell")
        from ..plotting import plain_axis

        for ax in axes:
            plain_axis(ax.yaxis, log=True)
        fig.suptitle("TCP segment sizes over time")
        fig.savefig(path, dpi=110)

    return draw


# ------------------------------------------------------------------------------------------ analyzer


def time_bins(facts: CaptureFacts) -> tuple[float, int]:
    """The throughput timeline's bin width (s) and number of bins over the whole capture."""
    width_s = bin_width_s(facts.duration_s)
    return width_s, int(np.floor(facts.duration_s / width_s)) + 1


@dataclass
class _Seen:
    """What a partition's packets and frames so far give (sizes): carried from one slice of its
    time to the next (`Slicing`), or made from the partition at once. Counts per stream direction
    and value, sums per time bin: its size grows with the connections, not with their packets."""

    #: (stream·2 + direction, value, count): packets per plen bucket, data packets per payload size
    #: and per frames completed, frames (stream·2 + direction, ·8 + type code) per packets spanned
    streams: Counts
    payload: Counts
    fpp: Counts
    ppf: Counts
    #: the frames' types (the categories whose codes are in `ppf`)
    types: pd.Index
    ranks: _Ranks
    acks: _Acks
    #: THROUGHPUT_SUMS per time bin and direction; data segments per (direction, time cell, size
    #: cell) and per direction
    throughput: dict[str, np.ndarray]
    segment_hist: np.ndarray
    segments: np.ndarray

    @classmethod
    def nothing(cls, facts: CaptureFacts) -> "_Seen":
        n_bins = time_bins(facts)[1]
        hist_shape = (len(DIRECTIONS), len(segment_time_edges(facts.duration_s)) - 1, len(SEGMENT_SIZE_EDGES) - 1)
        return cls(_no_counts(), _no_counts(), _no_counts(), _no_counts(), pd.Index([], dtype=object),
                   _Ranks.nothing(), _Acks.nothing(), {k: np.zeros((n_bins, 2)) for k in THROUGHPUT_SUMS},
                   np.zeros(hist_shape), np.zeros(len(DIRECTIONS), np.int64))


def _seen(cap: Capture, facts: CaptureFacts, seen: _Seen | None, last: bool = True) -> _Seen:
    """`seen` (None: nothing yet) with the packets and frames of `cap` (the partition, or its next
    slice of time; `last`: the last one) added."""
    seen = seen or _Seen.nothing(facts)
    p, f = cap.packets, cap.frames
    # Data packets (TCP payload > 0) as plain arrays: filtering the whole table would copy every column.
    payload = p["payload_bytes"].to_numpy()
    is_data = payload > 0
    gk = _gk(p)
    d_gk = gk[is_data]
    # Rows first, then the int64 conversion: only the data rows are converted.
    d_pkt = p["packet"].to_numpy()[is_data].astype(np.int64)
    d_size = payload[is_data].astype(np.int64)
    seen.streams = _added(seen.streams, size_cells(p, gk))
    seen.payload = _added(seen.payload, _count_pairs(d_gk, d_size))
    seen.fpp = _added(seen.fpp, _count_pairs(d_gk, p["frames_ended"].to_numpy()[is_data].astype(np.int64)))
    span = packets_per_frame(f, d_gk, d_pkt, seen.ranks)
    # The frame type rides in the key as its category code (4 types: 3 bits are enough).
    seen.ppf = _added(seen.ppf, _count_pairs(_gk(f) * 8 + f["type"].cat.codes.to_numpy(np.int64), span))
    seen.types = f["type"].cat.categories
    if not last:  # (only frames that end in a later slice need them)
        seen.ranks = _ranks_after(p, is_data, gk, seen.ranks, cap.connections)
    add_throughput(cap, facts, seen.throughput, seen.acks, last)
    s2c = d_gk % 2 == 1
    seen.segment_hist += segment_histograms(_ns(p["ts"])[is_data], d_size, s2c, facts)
    seen.segments += np.array([int((~s2c).sum()), int(s2c.sum())])
    return seen


def _partial(seen: _Seen) -> dict[str, Any]:
    """A partition's partial from what its packets and frames gave (`_seen`)."""
    ppf = packets_per_frame_table(seen.ppf, seen.types)
    ppf.insert(0, "_type", seen.types.get_indexer(ppf["type"]))
    return {
        "streams": stream_size_rows(seen.streams),
        "payload": payload_size_table(seen.payload),
        "fpp": frames_per_packet_table(seen.fpp),
        "ppf": ppf,
        "throughput": seen.throughput,
        "segment_hist": seen.segment_hist,
        "segments": seen.segments,
    }


def sizes_partial(cap: Capture, facts: CaptureFacts) -> dict[str, Any]:
    """What a partition of whole connections contributes: its connections' rows of the per-stream
    tables (with their sort keys), throughput sums per time bin, segment-size histograms."""
    return _partial(_seen(cap, facts, None))


def sizes_slice(part: Capture, facts: CaptureFacts, seen: _Seen | None, last: bool):
    """A slice of a partition's time (`amqpcap.partition.Slicing`): what it adds to `seen`, and
    on the last slice the partition's partial."""
    seen = _seen(part, facts, seen, last)
    return seen, (_partial(seen) if last else None)


def sizes_records(records: pd.DataFrame, facts: CaptureFacts) -> np.ndarray:
    """plen bucket counts of every packet in the file (AMQP or not)."""
    return plen_counts(records["frame_len"])


def sizes_merge(partials: list[dict[str, Any]], whole: np.ndarray, facts: CaptureFacts, cap: Capture) -> AnalyzerResult:
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


SPLIT = Split(partial=sizes_partial, merge=sizes_merge, records=sizes_records, records_columns=("frame_len",),
              slicing=Slicing(sizes_slice, join=lambda pieces: pieces[-1]))


@analyzer("sizes", split=SPLIT)
def sizes(cap: Capture) -> AnalyzerResult:
    """Packet sizes (Wireshark plen buckets), frames per packet and throughput over time."""
    return run_whole(SPLIT, cap)
