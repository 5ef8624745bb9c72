"""Session windows (Part 2 §2.5.6). A session's sender numbers its transfer frames (every frame,
continuation included) from its begin's next-outgoing-id. The receiving side announces
next-incoming-id and incoming-window (begin: incoming-window, its next-incoming-id being the
sender's begin next-outgoing-id; flow: both). The sender may send while the remote incoming
window, next-incoming-id + incoming-window − its next-outgoing-id, is above 0; a transfer sent at 0
or below breaks the session's accounting (the peer ends it with amqp:session:window-violation).
A flow from the sender itself gives its next-outgoing-id again (resynchronising a capture begun
mid-session).

A closure is a stretch during which a sending direction's remote window stayed at 0 or below: from
the frame that closed it (the sender's own transfer taking the last room, or the receiver's flow or
begin setting it so) to the receiver's flow that reopened it, or to the capture's end. Whether the
sender was kept from sending is the analyzer's to judge (it sent again right after, or was
sending when it closed); the rows say when it sent."""

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
CLOSURE_COLUMNS = ["stream", "session", "direction", "closed_side", "close_packet", "close_ts", "closed_by",
                   "reopen_packet", "reopen_ts", "zero_s", "transfers_before", "last_transfer_before_s",
                   "transfers_while_closed", "last_transfer_while_closed_s", "resume_packet", "resume_s"]


def windows_of(f: pd.DataFrame, session_of_frame: np.ndarray) -> pd.DataFrame:
    """Per session and sending direction: the remote incoming window the sender had (COLUMNS)."""
    return _walk(f, session_of_frame)[0]


def closures_of(f: pd.DataFrame, session_of_frame: np.ndarray) -> pd.DataFrame:
    """Per session and sending direction, every stretch its remote window spent at 0 or below
    (CLOSURE_COLUMNS): `closed_side` is the side whose incoming window it is (the receiver),
    `closed_by` the performative that closed it (`transfer`: the sender's own; `flow`, `begin`: the
    receiver's), `reopen_*` null when the capture ends with it closed (then `zero_s` runs to the
    capture's last frame of the connection), `transfers_before` the sender's transfer frames in the
    session before it closed and `last_transfer_before_s` how long before the close the last of
    them came, `resume_*` the sender's first transfer frame after the reopening and how long after it."""
    return _walk(f, session_of_frame)[1]


def _walk(f: pd.DataFrame, session_of_frame: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame]:
    perf = f["performative"].to_numpy(object)
    pick = np.flatnonzero((session_of_frame >= 0) & pd.Series(perf).isin(["begin", "flow", "transfer"]).to_numpy(bool))
    stream, direction = f["stream"].to_numpy(np.int64), f["direction"].to_numpy(object)
    packet = f["packet"].to_numpy(np.int64)
    ts = f["ts"].array.asi8
    nii_c, iw_c, noid_c = (f[c].to_numpy(np.float64, na_value=np.nan)
                           for c in ("next_incoming_id", "incoming_window", "next_outgoing_id"))
    end = f.groupby("stream", observed=True)["ts"].max() if len(f) else None
    st: dict[tuple, dict] = {}  # (stream, session, sending direction) -> its accounting

    def of(s, k, d):
        return st.setdefault((s, k, d), {"noid": None, "nii": None, "iw": None, "t": None, "w": None, "frames": 0,
                                         "min": None, "tracked": 0, "zero": 0, "beyond": 0,
                                         "sent": (None, None, 0)})  # the last transfer: packet, ts; and their count

    closures: list[dict] = []
    open_closure: dict[tuple, dict] = {}  # (stream, session, sending direction) -> its closure now
    resuming: dict[tuple, dict] = {}  # ... -> its last closure, reopened, until the sender's next transfer

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
            mine["sent"] = (int(packet[i]), t, mine["sent"][2] + 1)
            if mine["noid"] is not None:
                mine["noid"] = serial.add(mine["noid"], 1)
            key = (s, k, d)
            if key in open_closure:
                c = open_closure[key]
                c["transfers_while_closed"] += 1
                c["last_transfer_while_closed_s"] = (t - c["close_ts"]) / 1e9
            if key in resuming:
                c = resuming.pop(key)
                c["resume_packet"], c["resume_s"] = int(packet[i]), (t - c["reopen_ts"]) / 1e9
        for a, sender in ((mine, d), (theirs, OTHER[d])):
            was = a["w"]
            a["w"] = window(a)
            if a["w"] is not None:
                a["min"] = a["w"] if a["min"] is None else min(a["min"], a["w"])
            key = (s, k, sender)
            if a["w"] is not None and a["w"] <= 0 and key not in open_closure and (was is None or was > 0):
                _, last_t, n_sent = a["sent"]
                open_closure[key] = c = {
                    "stream": s, "session": k, "direction": sender,
                    "closed_side": "broker" if sender == "c2s" else "client",
                    "close_packet": int(packet[i]), "close_ts": t, "closed_by": p, "reopen_packet": None,
                    "reopen_ts": None, "transfers_before": n_sent,
                    "last_transfer_before_s": (t - last_t) / 1e9 if n_sent else np.nan,
                    "transfers_while_closed": 0, "last_transfer_while_closed_s": np.nan, "resume_packet": None,
                    "resume_s": np.nan}
                resuming.pop(key, None)
                closures.append(c)
            elif key in open_closure and a["w"] is not None and a["w"] > 0:
                c = open_closure.pop(key)
                c["reopen_packet"], c["reopen_ts"] = int(packet[i]), t
                resuming[key] = c
    rows = []
    for c in closures:
        stop = c["reopen_ts"] if c["reopen_ts"] is not None else int(end.loc[c["stream"]].value)
        c["zero_s"] = (stop - c["close_ts"]) / 1e9
    cl = pd.DataFrame(closures, columns=CLOSURE_COLUMNS)
    for col in ("reopen_packet", "resume_packet"):
        cl[col] = pd.array([None if pd.isna(x) else int(x) for x in cl[col]], dtype="Int64")
    for col in ("close_ts", "reopen_ts"):
        cl[col] = pd.to_datetime(pd.array([pd.NaT if x is None else pd.Timestamp(int(x), tz="UTC") for x in cl[col]],
                                          dtype="datetime64[ns, UTC]"), utc=True) if len(cl) else \
            pd.Series(dtype="datetime64[ns, UTC]")
    for col in ("zero_s", "last_transfer_before_s", "last_transfer_while_closed_s", "resume_s"):
        cl[col] = cl[col].astype(np.float64)
    for col in ("stream", "session", "close_packet", "transfers_before", "transfers_while_closed"):
        cl[col] = cl[col].astype(np.int64)
    for (s, k, d), a in sorted(st.items()):
        move(a, int(end.loc[s].value))
        rows.append({"stream": s, "session": k, "direction": d, "transfer_frames": a["frames"],
                     "window_min": a["min"], "window_tracked_s": a["tracked"] / 1e9, "zero_window_s": a["zero"] / 1e9,
                     "transfers_beyond_window": a["beyond"]})
    out = pd.DataFrame(rows, columns=COLUMNS)
    out["window_min"] = pd.array([None if x is None or x != x else int(x) for x in out["window_min"]], dtype="Int64")
    return out, cl


@derivation(CONNECTION)
def windows(cap: Capture) -> pd.DataFrame:
    """`windows_of` the capture's `amqp10_frames`."""
    return windows_of(amqp10_frames(cap), sessions(cap).of_frame)


@derivation(CONNECTION)
def closures(cap: Capture) -> pd.DataFrame:
    """`closures_of` the capture's `amqp10_frames`."""
    return closures_of(amqp10_frames(cap), sessions(cap).of_frame)
