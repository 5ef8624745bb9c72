"""Deliveries (Part 2 §2.6.12, §2.7.5, §2.7.6): a delivery is one or more transfer frames on a link,
its id given on its first frame (continuation frames carry none; the table gives them the id of
the delivery they continue). Delivery ids count per session and per sending direction, so a
delivery is (stream, session, direction, delivery_id).

A disposition names a range first..last of delivery ids and a role: the role of its sender. With
role=receiver it speaks of deliveries the other direction sent (a receiver settling what it got);
with role=sender, of deliveries its own direction sent. A delivery is settled at send (a transfer
with settled=true), or by the first disposition with settled=true covering it; its outcome is the
state of the first disposition that gives it one. Ranges are serial ranges (`serial.within`)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from ...io.load import Capture
from ..cache import CONNECTION, derivation
from . import serial
from .frames import amqp10_frames
from .handles import links
from .sessions import OTHER, sessions

COLUMNS = ["stream", "session", "link", "direction", "delivery_id", "delivery_tag", "first_packet", "last_packet",
           "first_ts", "last_ts", "frames", "size_bytes", "complete", "aborted", "settled_at_send", "first_acquirer",
           "header_delivery_count", "redelivered", "outcome", "outcome_packet", "settle_packet", "settle_ts",
           "settled_by", "disposition_covers", "settle_latency_s"]
DISPOSITION_COLUMNS = ["stream", "session", "link", "direction", "packet", "ts", "role", "first", "last",
                       "covers", "settled", "state", "deliveries_seen", "unsettled_before"]


class Deliveries(NamedTuple):
    #: one row per delivery (COLUMNS), in (stream, session, direction, first frame) order
    table: pd.DataFrame
    #: one row per disposition frame (DISPOSITION_COLUMNS)
    dispositions: pd.DataFrame


def _first_valid(s: pd.Series):
    v = s.dropna()
    return v.iloc[0] if len(v) else None


def deliveries_of(f: pd.DataFrame, session_of_frame: np.ndarray, link_of_frame: np.ndarray) -> Deliveries:
    """The deliveries and dispositions of the frames `f`, their sessions and links given."""
    is_t = (f["performative"] == "transfer").to_numpy(bool, na_value=False) & (session_of_frame >= 0)
    t = f.loc[is_t, ["stream", "direction", "packet", "first_packet", "ts", "delivery_id", "delivery_tag",
                     "settled", "more", "aborted", "payload_bytes", "message_bytes", "first_acquirer",
                     "header_delivery_count"]].copy()
    t["session"] = session_of_frame[is_t]
    t["link"] = link_of_frame[is_t]
    t["direction"] = t["direction"].astype(object)
    t = t[t["delivery_id"].notna()]  # (a continuation whose first frame was not captured)
    key = ["stream", "session", "direction", "delivery_id"]
    g = t.groupby(key, sort=False, observed=True)
    d = g.agg(link=("link", "first"), first_packet=("first_packet", "first"), last_packet=("packet", "last"),
              first_ts=("ts", "first"), last_ts=("ts", "last"), frames=("packet", "size"),
              payload=("payload_bytes", "sum"), message_bytes=("message_bytes", "last"), more=("more", "last"),
              aborted=("aborted", "any"), settled_at_send=("settled", "any"),
              first_acquirer=("first_acquirer", "first"),
              header_delivery_count=("header_delivery_count", "first")).reset_index()
    d["delivery_tag"] = g["delivery_tag"].agg(_first_valid).to_numpy(object) if len(d) else pd.Series(dtype=object)
    d["size_bytes"] = pd.array(d["message_bytes"].fillna(d["payload"]).to_numpy(np.float64), dtype="Int64") \
        if len(d) else pd.array([], dtype="Int64")
    d["complete"] = ~d["more"].fillna(True).astype(bool)
    d["aborted"] = d["aborted"].astype(bool)
    d["settled_at_send"] = d["settled_at_send"].fillna(False).astype(bool)
    fa = d["first_acquirer"].astype("boolean")
    hdc = d["header_delivery_count"].astype("UInt32")
    d["first_acquirer"], d["header_delivery_count"] = fa, hdc
    # a redelivery is the broker's to tell (Part 3 §3.2.1: first-acquirer, delivery-count count the
    # broker's delivery attempts); a client's message header with first-acquirer left out reads as
    # the spec's default false and says nothing about its publish
    by_broker = (d["direction"] == "s2c").to_numpy(bool)
    d["redelivered"] = ((fa == False).fillna(False) | (hdc > 0).fillna(False)).to_numpy(bool) & by_broker  # noqa: E712
    d = d.sort_values(["stream", "session", "direction", "first_packet"], kind="stable").reset_index(drop=True)
    d["delivery_id"] = d["delivery_id"].astype(np.int64)
    for c in ("stream", "session", "link", "first_packet", "last_packet", "frames"):
        d[c] = d[c].astype(np.int64)

    n = len(d)
    outcome = np.full(n, None, object)
    outcome_packet = np.full(n, -1, np.int64)
    settle_packet = np.full(n, -1, np.int64)
    settle_ts = np.full(n, np.iinfo(np.int64).min, np.int64)
    settled_by = np.where(d["settled_at_send"].to_numpy(bool), "at send", None).astype(object)
    covers = np.zeros(n, np.int64)

    is_d = (f["performative"] == "disposition").to_numpy(bool, na_value=False) & (session_of_frame >= 0)
    disp = f.loc[is_d, ["stream", "direction", "packet", "ts", "role", "first", "last", "settled", "state"]].copy()
    disp["session"] = session_of_frame[is_d]
    disp["direction"] = disp["direction"].astype(object)
    disp["role"] = disp["role"].astype(object)
    disp["state"] = disp["state"].astype(object)
    disp = disp[disp["first"].notna()].reset_index(drop=True)
    first = disp["first"].to_numpy(np.int64)
    last = disp["last"].fillna(disp["first"]).to_numpy(np.int64)
    disp["first"], disp["last"] = first, last
    disp["covers"] = serial.diff(first, last) + 1
    # the direction whose deliveries it speaks of
    covered = np.where(disp["role"].to_numpy(object) == "receiver",
                       [OTHER.get(x, x) for x in disp["direction"]], disp["direction"].to_numpy(object))
    d_link = np.full(len(disp), -1, np.int64)
    seen = np.zeros(len(disp), np.int64)
    unsettled_before = np.zeros(len(disp), np.int64)
    dts = d["last_ts"].array.asi8 if n else np.zeros(0, np.int64)
    dpk = d["first_packet"].to_numpy(np.int64)
    groups = {k: np.asarray(v) for k, v in d.groupby(["stream", "session", "direction"], sort=False).indices.items()} \
        if n else {}
    for i, (s, k, cd, pk, ts, settled, state) in enumerate(zip(
            disp["stream"].tolist(), disp["session"].tolist(), covered.tolist(), disp["packet"].tolist(),
            disp["ts"].array.asi8.tolist(), disp["settled"].fillna(False).tolist(), disp["state"].tolist())):
        rows = groups.get((s, k, cd))
        if rows is None:
            continue
        ids = d["delivery_id"].to_numpy(np.int64)[rows]
        inside = rows[serial.within(ids, first[i], last[i]) & (dpk[rows] <= pk)]
        seen[i] = len(inside)
        if len(inside):
            d_link[i] = d["link"].to_numpy(np.int64)[inside[0]]
        # deliveries sent before it and not settled by then (at send, or by an earlier disposition)
        sent = rows[dpk[rows] <= pk]
        unsettled_before[i] = int(np.sum((settled_by[sent] == None) & (settle_packet[sent] < 0)))  # noqa: E711
        if isinstance(state, str):
            new = inside[outcome[inside] == None]  # noqa: E711
            outcome[new], outcome_packet[new] = state, pk
        if settled:
            new = inside[(settle_packet[inside] < 0) & (settled_by[inside] == None)]  # noqa: E711
            settle_packet[new], settle_ts[new] = pk, ts
            settled_by[new] = disp["role"].iat[i]
            covers[new] = disp["covers"].iat[i]
    disp["link"], disp["deliveries_seen"], disp["unsettled_before"] = d_link, seen, unsettled_before
    disp = disp[DISPOSITION_COLUMNS]
    for c in ("stream", "session", "packet"):
        disp[c] = disp[c].astype(np.int64)

    has = settle_packet >= 0
    d["outcome"] = outcome
    d["outcome_packet"] = pd.arrays.IntegerArray(np.where(outcome_packet >= 0, outcome_packet, 0), outcome_packet < 0)
    d["settle_packet"] = pd.arrays.IntegerArray(np.where(has, settle_packet, 0), ~has)
    d["settle_ts"] = pd.to_datetime(settle_ts.view("M8[ns]"), utc=True)
    d["settled_by"] = settled_by
    d["disposition_covers"] = pd.arrays.IntegerArray(covers, ~has)
    d["settle_latency_s"] = np.where(has, (settle_ts - dts) / 1e9, np.nan)
    return Deliveries(d[COLUMNS], disp)


@derivation(CONNECTION)
def deliveries(cap: Capture) -> Deliveries:
    """`deliveries_of` the capture's `amqp10_frames`."""
    return deliveries_of(amqp10_frames(cap), sessions(cap).of_frame, links(cap).of_frame)
