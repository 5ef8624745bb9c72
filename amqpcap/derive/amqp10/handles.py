"""Links and their handles (Part 2 §2.6): each end names a link with an attach on its session,
choosing a handle of its own: handles are per session and per direction, and the two ends of one
link share only its name. attach, flow (when it has a handle), transfer and detach carry their
sender's handle; the frame belongs to the link that handle names in that direction at the time.
A detach releases the handle in its direction (it may name another link after).

A capture that starts after the attach sees a handle no attach named: it opens an implicit link
(`attached` false), identified by its session and its handle in that direction, whose name and
addresses are unknown. Its role comes from the performatives: the direction that sends transfers on
a handle is the link's sender end (a handle the broker sends transfers on is a broker sender link,
the client its receiver). The two ends of an implicit link share no name, so they are paired by
elimination, the way `sessions` pairs channels: in a session with exactly one implicit handle each
way, one of them carrying transfers and the other none, the two are one link (a guess the frames
allow and `attached` false says; with more candidates each way they stay apart, each end a link of
its own, and nothing is claimed about their credit)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from ...io.load import Capture
from ..cache import CONNECTION, derivation
from .frames import amqp10_frames, as_text
from .sessions import sessions

HANDLED = frozenset({"attach", "flow", "transfer", "detach"})
COLUMNS = ["stream", "session", "link", "name", "attached", "client_role", "sender_direction", "client_handle",
           "broker_handle", "source_address", "target_address", "snd_settle_mode", "rcv_settle_mode",
           "initial_delivery_count", "client_attach_packet", "broker_attach_packet", "attach_ts",
           "client_detach_packet", "broker_detach_packet", "detach_error_condition", "detach_error_description",
           "detach_error_side"]


class Links(NamedTuple):
    #: one row per link (COLUMNS), numbered per stream from 0 in attach order
    table: pd.DataFrame
    #: per row of the frames table: its link (−1: a frame of no link)
    of_frame: np.ndarray


def _text(v):
    return None if v is None or (not isinstance(v, str) and pd.isna(v)) else v


def links_of(f: pd.DataFrame, session_of_frame: np.ndarray) -> Links:
    """The links of the frames `f` (an `amqp10_frames` table) whose sessions are `session_of_frame`."""
    n = len(f)
    of_frame = np.full(n, -1, np.int64)
    perf = f["performative"].to_numpy(object)
    hv = f["handle"].to_numpy(np.float64, na_value=np.nan)
    rows_i = np.flatnonzero(pd.Series(perf).isin(HANDLED).to_numpy(bool) & ~np.isnan(hv) & (session_of_frame >= 0))
    stream = f["stream"].to_numpy(np.int64)
    direction = f["direction"].to_numpy(object)
    packet = f["packet"].to_numpy(np.int64)
    ts = f["ts"].to_numpy()
    cols = {c: f[c].to_numpy(object) for c in ("name", "role", "source_address", "target_address",
                                                "snd_settle_mode", "rcv_settle_mode", "error_condition",
                                                "error_description")}
    idc = f["initial_delivery_count"].to_numpy(np.float64, na_value=np.nan)
    rows: dict[tuple[int, int], dict] = {}
    counter: dict[int, int] = {}
    on_handle: dict[tuple, int] = {}  # (stream, session, direction, handle) -> link
    by_name: dict[tuple, int] = {}  # (stream, session, name) -> a link attached by one end only so far

    for i in rows_i.tolist():
        s, k, d, h, p = int(stream[i]), int(session_of_frame[i]), direction[i], int(hv[i]), perf[i]
        end = "client" if d == "c2s" else "broker"
        key = (s, k, d, h)
        if p == "attach":
            name = _text(cols["name"][i])
            link = by_name.pop((s, k, name), None)
            if link is None:
                link = counter.get(s, 0)
                counter[s] = link + 1
                rows[(s, link)] = dict.fromkeys(COLUMNS)
                rows[(s, link)].update(stream=s, session=k, link=link, name=name, attached=True, attach_ts=ts[i])
                by_name[(s, k, name)] = link
            r = rows[(s, link)]
            r[f"{end}_handle"], r[f"{end}_attach_packet"] = h, int(packet[i])
            role = _text(cols["role"][i])
            if role is not None:
                # the sender end sends the transfers; the client's role names the link for the user
                r["sender_direction"] = d if role == "sender" else ("s2c" if d == "c2s" else "c2s")
                r["client_role"] = role if end == "client" else ("receiver" if role == "sender" else "sender")
                if role == "sender":
                    r["snd_settle_mode"] = _text(cols["snd_settle_mode"][i])
                    if not np.isnan(idc[i]):
                        r["initial_delivery_count"] = int(idc[i])
                else:
                    r["rcv_settle_mode"] = _text(cols["rcv_settle_mode"][i])
            for c in ("source_address", "target_address"):
                r[c] = r[c] if r[c] is not None else _text(cols[c][i])
            on_handle[key] = link
        elif key in on_handle:
            link = on_handle[key]
            r = rows[(s, link)]
            if p == "transfer" and not r["attached"] and r["sender_direction"] is None:
                r["sender_direction"] = d  # (its first frames were flows)
                r["client_role"] = "sender" if d == "c2s" else "receiver"
        else:  # attached before the capture began
            link = counter.get(s, 0)
            counter[s] = link + 1
            rows[(s, link)] = dict.fromkeys(COLUMNS)
            rows[(s, link)].update(stream=s, session=k, link=link, attached=False, attach_ts=ts[i])
            rows[(s, link)][f"{end}_handle"] = h
            if p == "transfer":
                rows[(s, link)]["sender_direction"] = d
                rows[(s, link)]["client_role"] = "sender" if d == "c2s" else "receiver"
            on_handle[key] = link
        of_frame[i] = link
        if p == "detach":
            r = rows[(s, link)]
            r[f"{end}_detach_packet"] = int(packet[i])
            if _text(cols["error_condition"][i]) is not None and r["detach_error_condition"] is None:
                r.update(detach_error_condition=cols["error_condition"][i],
                         detach_error_description=_text(cols["error_description"][i]), detach_error_side=end)
            del on_handle[key]
            by_name.pop((s, k, r["name"]), None)
    rows, of_frame = _pair_implicit(rows, of_frame, stream)
    table = pd.DataFrame([rows[k] for k in sorted(rows)], columns=COLUMNS)
    for c in ("client_handle", "broker_handle", "initial_delivery_count", "client_attach_packet",
              "broker_attach_packet", "client_detach_packet", "broker_detach_packet"):
        table[c] = pd.array(table[c].to_list(), dtype="Int64")
    for c in ("stream", "session", "link"):
        table[c] = table[c].astype(np.int64)
    table["attached"] = table["attached"].astype(bool)
    as_text(table, ("detach_error_condition", "detach_error_description", "detach_error_side"))
    table["attach_ts"] = pd.to_datetime(table["attach_ts"], utc=True)
    return Links(table, of_frame)


def _pair_implicit(rows: dict, of_frame: np.ndarray, stream: np.ndarray) -> tuple[dict, np.ndarray]:
    """The implicit links' two ends made one link where the session has exactly one implicit
    handle each way and exactly one of them carries transfers (module doc); the links renumbered
    per stream in order, without gaps."""
    ends: dict[tuple[int, int], dict[str, list[int]]] = {}
    for (s, link), r in rows.items():
        if not r["attached"] and (r["client_handle"] is None) != (r["broker_handle"] is None):
            ends.setdefault((s, r["session"]), {"client": [], "broker": []})[
                "client" if r["client_handle"] is not None else "broker"].append(link)
    into: dict[tuple[int, int], int] = {}  # (stream, link) -> the link it joins
    for (s, _), e in ends.items():
        if len(e["client"]) != 1 or len(e["broker"]) != 1:
            continue
        c, b = rows[(s, e["client"][0])], rows[(s, e["broker"][0])]
        senders = [r for r in (c, b) if r["sender_direction"] is not None]
        if len(senders) != 1:
            continue
        keep, gone = sorted((e["client"][0], e["broker"][0]))
        kr, gr = rows[(s, keep)], rows[(s, gone)]
        for col in ("client_handle", "broker_handle", "sender_direction", "client_role", "client_detach_packet",
                    "broker_detach_packet", "detach_error_condition", "detach_error_description",
                    "detach_error_side"):
            if kr[col] is None:
                kr[col] = gr[col]
        kr["attach_ts"] = min(kr["attach_ts"], gr["attach_ts"])
        into[(s, gone)] = keep
        del rows[(s, gone)]
    if not into:
        return rows, of_frame
    renumber = {}
    for s in sorted({s for s, _ in rows}):
        for n, (_, link) in enumerate(sorted(k for k in rows if k[0] == s)):
            renumber[(s, link)] = n
    out = of_frame.copy()
    for i in np.flatnonzero(of_frame >= 0).tolist():
        key = (int(stream[i]), int(of_frame[i]))
        key = (key[0], into.get(key, key[1]))
        out[i] = renumber[key]
    new = {}
    for (s, link), r in rows.items():
        r["link"] = renumber[(s, link)]
        new[(s, r["link"])] = r
    return new, out


@derivation(CONNECTION)
def links(cap: Capture) -> Links:
    """`links_of` the capture's `amqp10_frames`."""
    return links_of(amqp10_frames(cap), sessions(cap).of_frame)
