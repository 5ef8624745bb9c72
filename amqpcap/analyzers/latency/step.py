"""The latency analyzer's step over rows (a partition, or a slice of its time: docs/time-split.md
§2.7): what each slice tells, what it carries to the next (`_Carry`), and the slices' pieces joined
into the partition's partial.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ...io.load import Capture
from ...derive.backlog_join import BacklogPieces
from ...derive.columns import text_ranks
from ...derive.deliveries import DELIVER_METHODS, SETTLE_METHODS, Deliveries, confirms, deliveries_with_codes
from ...derive.labels import connection_labels
from ...derive.methods import chan_key, methods, pick, select
from ...derive.refills import AnswerRows, backlog_answers, slow_refills_of, told_ack_gaps
from ...derive.replay import for_derivations, told
from ...derive.seeds import seeds_of
from ...io.kept_rows import keep
from .channels import _redelivery_rows, _refill_rows
from .interleaving import _current, _no_spaces, _replayed, _spaces, interleaving
from .per_consumer import _Labels, consumer_latency
from .plots import _raster_data


_NONE = np.zeros(0, np.int64)


@dataclass
class _Carry:
    """What the slices so far leave to the next one (`latency_slice`), besides what the
    derivations replay (`amqpcap.derive.replay`): bounded by the channels and by the acks
    waiting for their next delivery (at most the deliveries outstanding in their tag space)."""

    #: where the next slice's acks are in the partition's backlog answers
    answer_rows: AnswerRows
    #: each channel's latest tag space with deliveries or settling frames (SPACE rows): the runs
    #: its next frames go on
    spaces: pd.DataFrame


@dataclass
class _Piece:
    """What a slice tells (`latency_slice`); the partition's partial is made of the pieces of all
    its slices (`latency_join`). Each row is told by one slice (`amqpcap.derive.replay.told`)
    and holds its frame's whole order (``_order``): a row told late goes back to its place."""

    #: the deliveries, ack gaps and confirms told (`deliveries`, `ack_gaps`, `confirms`), the
    #: deliveries with ``_tag``: their consumer tag's number among `tags`, the slice's tag text
    #: in sorted order
    deliveries: pd.DataFrame
    gaps: pd.DataFrame
    confirms: pd.DataFrame
    tags: np.ndarray
    #: the tag spaces whose runs are final (SPACE rows): a channel opened again, or the last slice
    spaces: pd.DataFrame
    #: the slice's own deliveries and settling frames for the raster (`_raster_events`)
    raster: pd.DataFrame
    #: the last slice's: the connections' labels
    labels: _Labels | None = None


def latency_slice(part: Capture, carry: _Carry | None, last: bool, backlog: BacklogPieces) -> tuple[_Carry, _Piece]:
    """A slice of a partition's time (a whole partition is its own one slice): the rows it
    tells, with what the slices before left in `carry`, and the carry for the next slice."""
    carry = carry or _Carry(AnswerRows(), _no_spaces())
    part.context.backlog = backlog
    view = for_derivations(part)
    dc = deliveries_with_codes(view)
    tag, tags = _tag_ranks(dc)
    d = _told(view, dc.table.assign(_tag=tag), last)
    conf = _told(view, confirms(view), last)
    gaps, answer_rows = told_ack_gaps(view, backlog_answers(part), carry.answer_rows, last)
    spaces = _spaces(view, carry.spaces)
    final = np.ones(len(spaces), bool) if last else ~_current(spaces)
    carry = _Carry(answer_rows, spaces[~final].reset_index(drop=True))
    piece = _Piece(deliveries=d, gaps=gaps, confirms=conf, tags=tags,
                   spaces=spaces[final].reset_index(drop=True), raster=_raster_events(view))
    if last:
        stream = part.connections["stream"].to_numpy(np.int64)
        piece.labels = _Labels(stream, connection_labels(part, stream))
    return carry, piece


def _whole_orders(view: Capture, order) -> np.ndarray:
    """The whole partition's order of the view's frames at `order`."""
    seeds = seeds_of(view)
    order = np.asarray(order, np.int64)
    return seeds.whole_orders(order) if seeds is not None else order


def _told(view: Capture, table: pd.DataFrame, last: bool) -> pd.DataFrame:
    """The rows of a table derived from the view (with ``order``) that the slice tells, with
    ``_order``: their frame's whole order."""
    if not len(table):
        return table.assign(_order=_NONE)
    rows = told(view, table["order"].to_numpy(np.int64), last)
    table = table if rows.all() else table[rows]
    return table.assign(_order=_whole_orders(view, table["order"].to_numpy(np.int64)))


def _tag_ranks(dc: Deliveries) -> tuple[np.ndarray, np.ndarray]:
    """Each delivery's consumer tag as a number in the sorted order of the text (`tag_ranks`),
    and the text of each number."""
    rank = text_ranks(dc.tag_labels, dc.tag_code)
    if not len(rank):
        return rank, np.zeros(0, object)
    number, first = np.unique(rank, return_index=True)
    text = np.zeros(int(number.max()) + 1, object)
    text[number] = np.asarray(dc.tag_labels, dtype=object)[dc.tag_code[first]]
    return rank, text


def _raster_events(view: Capture) -> pd.DataFrame:
    """The slice's own deliveries and settling frames as the raster draws them: channel key
    (``key``), ``is_deliver``, ``t`` (seconds since the capture's start)."""
    m = methods(view)
    own = m["order"].to_numpy(np.int64) >= _replayed(view)
    ev = pick(view, m, (select(m, DELIVER_METHODS, "s2c") | select(m, SETTLE_METHODS, "c2s")) & own,
              ["stream", "channel", "ts", "method"])
    if not len(ev):  # (a capture without packets has no start either)
        return pd.DataFrame({"key": _NONE, "is_deliver": np.zeros(0, bool), "t": np.zeros(0, float)})
    return pd.DataFrame({"key": chan_key(ev), "is_deliver": ev["method"].isin(DELIVER_METHODS).to_numpy(bool),
                         "t": (ev["ts"] - view.summary["first_ts"]).dt.total_seconds().to_numpy()})


def latency_join(pieces: list[_Piece]) -> dict[str, Any]:
    """The partition's partial from the pieces of its slices (`latency_slice`), in their order."""
    # consumer tags numbered in the sorted order of their text (each slice's are numbered among its own)
    text = np.concatenate([p.tags for p in pieces])
    number = pd.factorize(text, sort=True)[0].astype(np.int64)
    start = np.cumsum([0] + [len(p.tags) for p in pieces])
    d = _in_whole_order([_tag_numbers(p, number[start[i]:]) for i, p in enumerate(pieces)])
    gaps = _in_whole_order([p.gaps for p in pieces])
    conf = _in_whole_order([p.confirms for p in pieces])
    tags = d["_tag"].to_numpy(np.int64) if len(d) else _NONE
    d, gaps, conf = (t.drop(columns=[c for c in t.columns if c.startswith("_")]) for t in (d, gaps, conf))
    counts = {"unsettled_at_end": int((d["outcome"] == "unsettled").sum()),
              "unsettled_at_close": int((d["outcome"] == "closed").sum()),
              "no_ack_excluded": int(d["no_ack"].sum()), "deliveries": int(len(d)), "publishes": int(len(conf)),
              "nacked": int((conf["outcome"] == "nack").sum()),
              "unconfirmed_at_end": int((conf["outcome"] == "unconfirmed").sum()),
              "unconfirmed_at_close": int((conf["outcome"] == "closed").sum())}
    spaces = pd.concat([p.spaces for p in pieces if len(p.spaces)] or [pieces[0].spaces], ignore_index=True)
    if len(spaces):  # (each slice's rows are sorted: the final ones of all slices, together)
        spaces = spaces.sort_values(["stream", "channel", "epoch"], kind="stable", ignore_index=True)
    # (a frame's position in the frames table is a partition's own: the tables name frames by packet)
    return {"deliveries": keep(d.drop(columns=["order", "settle_order", "epoch"]), "latency-deliveries", "packet"),
            "gaps": keep(gaps.drop(columns=["order", "epoch"]), "latency-ack-gaps", "packet"),
            "confirms": keep(conf.drop(columns=["order"]), "latency-confirms", "packet"),
            "consumers": consumer_latency(d, gaps, tags, pieces[-1].labels), "counts": counts,
            "refills": _refill_rows(gaps, slow_refills_of(d, gaps)), "redeliveries": _redelivery_rows(d),
            "interleaving": interleaving(spaces),
            "raster": _raster_data(pd.concat([p.raster for p in pieces], ignore_index=True))}


def _in_whole_order(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """The slices' rows of a table, in the whole partition's order (their frames', ``_order``):
    a row told by a later slice than its frame's goes back to its place."""
    kept = [p for p in parts if len(p)] or parts[:1]  # (an empty table's columns may be of object dtype)
    out = pd.concat(kept, ignore_index=True) if len(kept) > 1 else kept[0].reset_index(drop=True)
    order = out["_order"].to_numpy(np.int64)
    if len(order) > 1 and (order[1:] < order[:-1]).any():
        out = out.take(np.argsort(order, kind="stable")).reset_index(drop=True)
    return out


def _tag_numbers(piece: _Piece, number: np.ndarray) -> pd.DataFrame:
    """The piece's deliveries with ``_tag`` made the number of their consumer tag's text among
    those of all slices (`number`: per tag text of the slices' `_Piece.tags`, from this piece's)."""
    d = piece.deliveries
    return d.assign(_tag=number[d["_tag"].to_numpy(np.int64)]) if len(d) else d
