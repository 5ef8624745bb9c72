"""Packets per frame: how many data packets each AMQP frame spans, carried across slices of time
(`_Ranks`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...derive.columns import value_at
from .constants import DIRECTIONS
from .counts import Counts, _added, _gk, _stream_direction


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
