"""Session windows (Part 2 §2.5.6). A session's sender numbers its transfer frames (every frame,
continuation included) from its begin's next-outgoing-id. The receiving side announces
next-incoming-id and incoming-window (begin: incoming-window, its next-incoming-id being the
sender's begin next-outgoing-id; flow: both). The sender may send while the remote incoming
window, next-incoming-id + incoming-window − its next-outgoing-id, is above 0; a transfer sent at 0
or below breaks the session's accounting (the peer ends it with amqp:session:window-violation).
A flow from the sender itself gives its next-outgoing-id again (resynchronising a capture begun
mid-session)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...io.load import Capture
from ..cache import CONNECTION, derivation
from . import serial
from .frames import amqp10_frames
from .sessions import OTHER, sessions

COLUMNS = ["stream", "session", "direction", "transfer_frames", "window_min", "window_tracked_s", "zero_window_s",
           "transfers_beyond_window"]


def windows_of(f: pd.DataFrame, session_of_frame: np.ndarray) -> pd.DataFrame:
    """Per session and sending direction: the remote incoming window the sender had (COLUMNS)."""
    perf = f["performative"].to_numpy(object)
    pick = np.flatnonzero((session_of_frame >= 0) & pd.Series(perf).isin(["begin", "flow", "transfer"]).to_numpy(bool))
    stream, direction = f["stream"].to_numpy(np.int64), f["direction"].to_numpy(object)
    ts = f["ts"].array.asi8
    nii_c, iw_c, noid_c = (f[c].to_numpy(np.float64, na_value=np.nan)
                           for c in ("next_incoming_id", "incoming_window", "next_outgoing_id"))
    end = f.groupby("stream", observed=True)["ts"].max() if len(f) else None
    st: dict[tuple, dict] = {}  # (stream, session, sending direction) -> its accounting

    def of(s, k, d):
        return st.setdefault((s, k, d), {"noid": None, "nii": None, "iw": None, "t": None, "w": None, "frames": 0,
                                         "min": None, "tracked": 0, "zero": 0, "beyond": 0})

    def move(a, t):
        """The time since the last change, counted at the window it had."""
        if a["t"] is not None and a["w"] is not None:
            a["tracked"] += t - a["t"]
            a["zero"] += (t - a["t"]) if a["w"] <= 0 else 0
        a["t"] = t

    def window(a):
        if None in (a["noid"], a["nii"], a["iw"]):
            return None
        return int(serial.diff(a["noid"], serial.add(a["nii"], a["iw"])))

    for i in pick.tolist():
        s, k, d, t, p = int(stream[i]), int(session_of_frame[i]), direction[i], int(ts[i]), perf[i]
        mine, theirs = of(s, k, d), of(s, k, OTHER[d])
        if p == "begin":
            move(mine, t)
            if noid_c[i] == noid_c[i]:
                mine["noid"] = int(noid_c[i])
                if mine["iw"] is not None and mine["nii"] is None:  # the other begin came first
                    mine["nii"] = mine["noid"]
            move(theirs, t)
            if iw_c[i] == iw_c[i]:
                # a begin's incoming-window counts from the other side's first id (its next-outgoing-id)
                theirs["iw"] = int(iw_c[i])
                theirs["nii"] = theirs["noid"]
        elif p == "flow":
            move(theirs, t)
            if nii_c[i] == nii_c[i]:
                theirs["nii"] = int(nii_c[i])
            if iw_c[i] == iw_c[i]:
                theirs["iw"] = int(iw_c[i])
            move(mine, t)
            if noid_c[i] == noid_c[i]:
                mine["noid"] = int(noid_c[i])
        else:  # a transfer frame: it needs room, and takes one id
            move(mine, t)
            w = window(mine)
            mine["beyond"] += int(w is not None and w <= 0)
            mine["frames"] += 1
            if mine["noid"] is not None:
                mine["noid"] = serial.add(mine["noid"], 1)
        for a in (mine, theirs):
            a["w"] = window(a)
            if a["w"] is not None:
                a["min"] = a["w"] if a["min"] is None else min(a["min"], a["w"])
    rows = []
    for (s, k, d), a in sorted(st.items()):
        move(a, int(end.loc[s].value))
        rows.append({"stream": s, "session": k, "direction": d, "transfer_frames": a["frames"],
                     "window_min": a["min"], "window_tracked_s": a["tracked"] / 1e9, "zero_window_s": a["zero"] / 1e9,
                     "transfers_beyond_window": a["beyond"]})
    out = pd.DataFrame(rows, columns=COLUMNS)
    out["window_min"] = pd.array([None if x is None or x != x else int(x) for x in out["window_min"]], dtype="Int64")
    return out


@derivation(CONNECTION)
def windows(cap: Capture) -> pd.DataFrame:
    """`windows_of` the capture's `amqp10_frames`."""
    return windows_of(amqp10_frames(cap), sessions(cap).of_frame)
