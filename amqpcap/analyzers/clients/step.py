"""The clients analyzer's step over rows (a partition, or a slice of its time: docs/time-split.md
§2.5): each slice's counts carried to the next, the slices' pieces joined into the partition's rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ...io.load import Capture
from ...derive.methods import methods, select
from ...derive.rates import msgs_per_s_active
from .channels import _cancels, _open_channels, _opens_per_s, _queue_deletes
from .constants import COLUMNS, COUNTED, EXAMPLES, NAMED, ROUND_TRIPS
from .publishes import _confirmed, _confirming, _count_publishes, _publishes_in_tx, _returns
from .requests import _examples, _remember_queues, _round_trips
from .state import _Final, _Piece, _Seen


def clients_slice(part: Capture, seen: _Seen | None, last: bool) -> tuple[_Seen, _Piece]:
    """A slice of a partition's time (a whole partition is its own one slice): what it adds to
    `seen`, and what it tells; the last slice also the connections' rows, from the final `seen`."""
    m = methods(part)  # (the slice's own frames: counted once, by the slice they are in)
    stream = part.connections["stream"].to_numpy(np.int64)
    seen = seen or _Seen.nothing(len(stream))
    pos = np.searchsorted(stream, m["stream"].to_numpy(np.int64))  # connections are sorted by stream
    for col, method, direction in COUNTED:
        seen.counted[col] += np.bincount(pos[select(m, method, direction)], minlength=len(stream))
    round_trips = {}
    for name, (request, replies) in ROUND_TRIPS.items():
        round_trips[name], seen.waiting[name] = _round_trips(part, m, request, replies, seen.waiting[name])
    piece = _Piece(round_trips=round_trips,
                   examples={method: _examples(part, m, pos, method, direction, seen.shown[method])
                             for method, direction in EXAMPLES},
                   cancels=_cancels(part, m, seen.frames), deletes=_queue_deletes(part, m),
                   confirmed=_confirmed(part, last))
    _remember_queues(part, m, seen)
    consumes = np.flatnonzero(select(m, "basic.consume", "c2s"))
    np.maximum.at(seen.last_consume, pos[consumes], seen.frames + m["order"].to_numpy(np.int64)[consumes])
    delivers = np.flatnonzero(select(m, "basic.deliver", "s2c"))
    deliver_ns = part.frames["ts"].array.asi8[m["order"].to_numpy(np.int64)[delivers]]
    np.minimum.at(seen.first_deliver, pos[delivers], deliver_ns)
    np.maximum.at(seen.last_deliver, pos[delivers], deliver_ns)
    _count_publishes(part, m, seen, last)
    _open_channels(m, pos, seen)
    _opens_per_s(part, m, pos, seen)
    seen.frames += len(part.frames)
    if last:
        piece.final = _Final(_rows(part, seen), _returns(seen), {k: q for k, (_, q) in seen.queues.items()},
                             pd.Series(seen.last_consume, index=stream))
    return seen, piece


def clients_join(pieces: list[_Piece]) -> dict[str, Any]:
    """The partition's partial from the pieces of its slices (`clients_slice`), in their order."""
    final = pieces[-1].final
    out = final.rows.copy()
    for name in ROUND_TRIPS:
        rt = pd.concat([p.round_trips[name] for p in pieces], ignore_index=True)
        p50 = rt.groupby("stream")["round_trip_s"].median()
        out[f"{name}_round_trip_p50_s"] = p50.reindex(out["stream"]).to_numpy()
    examples = pd.concat([pd.DataFrame({"stream": np.concatenate([p.examples[method][0] for p in pieces]),
                                        "packet": np.concatenate([p.examples[method][1] for p in pieces]),
                                        "method": method})
                          for method, _ in EXAMPLES], ignore_index=True)
    return {"connections": out[[c_ for c_ in COLUMNS if c_ not in NAMED]], "examples": examples,
            "returns": final.returns, "cancels": _cancel_rows(pieces, final),
            "deletes": _rows_together([p.deletes for p in pieces]),
            "confirming": _confirming(pd.concat([p.confirmed for p in pieces], ignore_index=True))}


def _rows(cap: Capture, seen: _Seen) -> pd.DataFrame:
    """A partition's connections: one row each, with its counts, rates and peaks (from the
    final `seen`)."""
    c = cap.connections
    stream = c["stream"].to_numpy(np.int64)
    out = pd.DataFrame({"stream": stream})  # (named in the merge: labels depend on every connection)
    out["first_ts"] = c["first_ts"].to_numpy()
    out["duration_s"] = (c["last_ts"] - c["first_ts"]).dt.total_seconds().to_numpy()
    for col, _, _ in COUNTED:
        out[col] = seen.counted[col]
    out["publishes_in_tx"] = _publishes_in_tx(seen, stream)
    span = np.where(out["duration_s"] > 0, out["duration_s"], np.nan)
    out["publish_rate_per_s"] = out["publishes"] / span
    # per second active: between the connection's first and last basic.deliver (amqpcap.derive.rates)
    out["delivered_msgs_per_s"] = msgs_per_s_active(out["deliveries"], seen.first_deliver, seen.last_deliver)
    out["get_rate_per_s"] = out["gets"] / span
    answered = out["gets_ok"] + out["gets_empty"]
    out["get_empty_share"] = np.where(answered > 0, out["gets_empty"] / answered.where(answered > 0, 1), np.nan)
    out["publishes_per_commit"] = np.where(out["tx_commits"] > 0,
                                           out["publishes_in_tx"] / out["tx_commits"].where(out["tx_commits"] > 0, 1),
                                           np.nan)
    out["channel_opens_per_s_peak"] = seen.opens_peak
    out["channels_open_peak"] = seen.open_peak
    out["channel_max"] = pd.array(c["channel_max"].to_numpy(float, na_value=np.nan), dtype="Int64")
    return out


def _cancel_rows(pieces: list[_Piece], final: _Final) -> pd.DataFrame:
    """One row per basic.cancel the broker sent (RabbitMQ's consumer cancel notification: the
    queue was deleted, or its node went down): stream, channel, consumer_tag, queue (of the
    basic.consume it answered with basic.consume-ok, when in the capture), packet, ts and
    resubscribed (the client sent basic.consume on the connection after it). Who deleted the
    queue is found in the merge (`_deleted_by`): the queue.delete may be on a connection of
    another partition."""
    c = _rows_together([p.cancels for p in pieces])
    c["queue"] = np.array([final.queues.get((s_, t)) for s_, t in zip(c["stream"], c["consumer_tag"])], dtype=object)
    c["resubscribed"] = final.last_consume.reindex(c["stream"]).to_numpy(np.int64) > c["order"].to_numpy(np.int64)
    return c[["stream", "channel", "consumer_tag", "queue", "packet", "ts", "resubscribed"]]


def _rows_together(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The rows of `frames` (text as object) one after the other, as one table made of them
    would be: text columns as pandas infers them from all their values (a slice without a row
    has no text to infer from)."""
    c = pd.concat(frames, ignore_index=True)
    return pd.DataFrame({col: c[col].to_numpy(object) if c[col].dtype == object else c[col].array for col in c})
