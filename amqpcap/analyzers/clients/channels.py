"""Channels and consumers per connection: channels opened and their peak rate, consumers the broker
cancelled and the queue deletes that caused it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...io.load import Capture
from ...derive.columns import group_cumsum
from ...derive.methods import select
from .requests import _text
from .state import _Seen


def _open_channels(m: pd.DataFrame, pos: np.ndarray, seen: _Seen) -> None:
    """Per connection (`pos`: each method row's connection index), the channels open now and the
    most open at once, counted on from `seen`: +1 at each channel.open, −1 at each
    channel.close-ok (either side closes, the other confirms), in frame order."""
    step = select(m, "channel.open", "c2s").astype(np.int64) - select(m, "channel.close-ok").astype(np.int64)
    rows = np.flatnonzero(step)
    at = pos[rows]
    if len(rows):
        np.maximum.at(seen.open_peak, at, seen.open_now[at] + group_cumsum(at, step[rows]))
        np.add.at(seen.open_now, at, step[rows])


def _opens_per_s(cap: Capture, m: pd.DataFrame, pos: np.ndarray, seen: _Seen) -> None:
    """Per connection, the most channel.open frames in a one-second window (`_peaks_per_s`) so
    far: of m's and those of the second before them (`seen.recent_*`), whose windows are counted
    again, now with m's frames in them. Then those less than a second before their connection's
    latest are kept: the windows of the others ended before it, and every later frame is at or
    after it (slices are cut where no packet before is later than one after)."""
    opens = np.flatnonzero(select(m, "channel.open", "c2s"))
    at = np.r_[seen.recent_pos, pos[opens]]
    ts = np.r_[seen.recent_ts, cap.frames["ts"].array.asi8[m["order"].to_numpy()[opens]]]
    seen.opens_peak = np.maximum(seen.opens_peak, _peaks_per_s(at, ts, len(seen.opens_peak)))
    latest = np.full(len(seen.opens_peak), np.iinfo(np.int64).min)
    np.maximum.at(latest, at, ts)
    recent = ts > latest[at] - 10**9
    seen.recent_pos, seen.recent_ts = at[recent], ts[recent]


def _peaks_per_s(group: np.ndarray, ts_ns: np.ndarray, groups: int) -> np.ndarray:
    """Per group 0..groups-1, the most of its timestamps in any one-second window (sliding,
    starting at each of them); 0 for a group without any. Whole-column: (group, time) pairs as
    complex numbers, which numpy sorts and searches lexicographically (real part first); the
    times relative to the earliest, in ns, are exact in a float64 for captures up to 104 days."""
    out = np.zeros(groups, dtype=np.int64)
    if len(ts_ns) == 0:
        return out
    key = np.sort(group.astype(np.float64) + 1j * (ts_ns - ts_ns.min()).astype(np.float64))
    in_window = np.searchsorted(key, key + 1e9j, side="left") - np.arange(len(key))
    np.maximum.at(out, key.real.astype(np.int64), in_window)
    return out


def _peak_per_s(ts_ns: np.ndarray) -> int:
    """The most timestamps in any one-second window (sliding, starting at each of them)."""
    return int(_peaks_per_s(np.zeros(len(ts_ns), dtype=np.int64), ts_ns, 1)[0])


def _cancels(cap: Capture, m: pd.DataFrame, frames_before: int) -> pd.DataFrame:
    """The basic.cancel frames the broker sent among m's: stream, channel, consumer_tag (text),
    packet, ts, and order (the whole partition's: `frames_before` + its position)."""
    rows = np.flatnonzero(select(m, "basic.cancel", "s2c"))
    order = m["order"].to_numpy()[rows]
    return pd.DataFrame({"stream": m["stream"].to_numpy(np.int64)[rows],
                         "channel": m["channel"].to_numpy(np.int64)[rows],
                         "consumer_tag": pd.Series(_text(cap, m, "consumer_tag", rows), dtype=object),
                         "packet": cap.frames["packet"].to_numpy(np.int64)[order],
                         "ts": cap.frames["ts"].array.take(order), "order": frames_before + order})


def _queue_deletes(cap: Capture, m: pd.DataFrame) -> pd.DataFrame:
    """queue, stream, packet of each queue.delete a client sent."""
    rows = np.flatnonzero(select(m, "queue.delete", "c2s"))
    order = m["order"].to_numpy()[rows]
    return pd.DataFrame({"queue": pd.Series(_text(cap, m, "queue", rows), dtype=object),
                         "stream": m["stream"].to_numpy(np.int64)[rows],
                         "packet": cap.frames["packet"].to_numpy(np.int64)[order]})


def _deleted_by(cancels: pd.DataFrame, deletes: pd.DataFrame) -> pd.DataFrame:
    """`cancels` with deleted_by: the stream of the last queue.delete of the cancelled consumer's
    queue before the cancel (packet numbers order frames of different connections), else missing."""
    cols = ["stream", "channel", "consumer_tag", "queue", "packet", "ts", "deleted_by", "resubscribed"]
    left = cancels.assign(_row=np.arange(len(cancels)), queue=cancels["queue"].astype(object).fillna(""))
    right = deletes.rename(columns={"stream": "deleted_by"}).astype({"queue": object, "packet": np.int64})
    hit = pd.merge_asof(left.sort_values("packet"), right.sort_values("packet"), on="packet", by="queue",
                        allow_exact_matches=False, direction="backward")
    by = hit.set_index("_row")["deleted_by"].reindex(range(len(cancels)))
    # (a consumer whose queue the capture does not name matches no delete)
    by = by.where(left["queue"].to_numpy(object) != "")
    return cancels.assign(deleted_by=pd.array(by.to_numpy(float, na_value=np.nan), dtype="Int64"))[cols]
