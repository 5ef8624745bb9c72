"""Link credit over time (Part 2 §2.6.7). The sender of a link may send a delivery only while it holds
credit. A flow from the receiving end grants it: the sender's credit becomes the receiver's
delivery-count + link-credit − the sender's own delivery-count (serial arithmetic, `serial.diff`),
which accounts for transfers still in flight when the flow was written. A flow from the sending end
reports its own view (its delivery-count, link-credit, and `available`: messages it could send).
Each delivery (not each frame: continuation frames take none) uses one credit and advances the
sender's delivery-count by one.

The sender's delivery-count starts at its attach's initial-delivery-count; on a link attached before
the capture it is taken from the first flow that gives one (then the credit is the flow's
link-credit).

A refill is a transfer that used the link's last credit (credit 0 after it) followed by the
receiver's next flow granting more: the refill gap is their time apart, and `next_transfer_s` how
long the next delivery came after the one that used the last credit."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from ...io.load import Capture
from ..cache import CONNECTION, derivation
from . import serial
from .deliveries import deliveries
from .frames import amqp10_frames
from .handles import links
from .sessions import sessions

EVENT_COLUMNS = ["stream", "link", "packet", "ts", "event", "credit", "link_credit", "delivery_count", "available",
                 "drain", "echo", "outstanding"]
REFILL_COLUMNS = ["stream", "link", "zero_packet", "zero_ts", "refill_packet", "refill_gap_s", "next_transfer_s",
                  "available"]
LINK_COLUMNS = ["stream", "link", "granted_credit_max", "granted_credit_median", "flows_granted", "flows_reported",
                "available_max", "drained", "transfers", "transfers_to_zero", "transfers_without_credit",
                "credit_tracked_s", "zero_credit_s", "zero_credit_share", "refills", "refill_gap_median_s",
                "refill_gap_total_s", "outstanding_max"]


class Credit(NamedTuple):
    #: per link, every flow and delivery with the sender's credit after it (EVENT_COLUMNS)
    events: pd.DataFrame
    #: per transfer that used a link's last credit, the refill that followed (REFILL_COLUMNS)
    refills: pd.DataFrame
    #: per link (LINK_COLUMNS)
    links: pd.DataFrame


def _num(v) -> int | None:
    return None if v is None or pd.isna(v) else int(v)


def _flag(v) -> bool:
    return False if v is None or pd.isna(v) else bool(v)


def credit_of(f: pd.DataFrame, session_of_frame: np.ndarray, link_table: pd.DataFrame, link_of_frame: np.ndarray,
              delivery_table: pd.DataFrame) -> Credit:
    """Credit over time of the links of `f` (their table and each frame's link given, and their deliveries)."""
    perf = f["performative"].to_numpy(object)
    cont = f["continuation"].to_numpy(bool, na_value=False)
    pick = np.flatnonzero((link_of_frame >= 0) & (((perf == "flow") & f["link_credit"].notna().to_numpy(bool))
                                                  | ((perf == "transfer") & ~cont)))
    lt = link_table.set_index(["stream", "link"])
    sender_dir = lt["sender_direction"].to_dict()
    initial = lt["initial_delivery_count"].to_dict()
    state: dict[tuple[int, int], list] = {}  # link -> [sender delivery-count, credit]
    out = []
    cols = {c: f[c].to_numpy(object) for c in ("delivery_count", "link_credit", "available", "drain", "echo")}
    stream, direction, packet = f["stream"].to_numpy(np.int64), f["direction"].to_numpy(object), f["packet"].to_numpy(np.int64)
    ts = f["ts"].array.asi8
    for i in pick.tolist():
        key = (int(stream[i]), int(link_of_frame[i]))
        sd = sender_dir.get(key)
        st = state.setdefault(key, [_num(initial.get(key)), None])
        dc, lc = _num(cols["delivery_count"][i]), _num(cols["link_credit"][i])
        if perf[i] == "transfer":
            event = "transfer"
            if st[0] is not None:
                st[0] = serial.add(st[0], 1)
            if st[1] is not None:
                st[1] -= 1
        elif sd is None or direction[i] != sd:  # the receiving end's flow: a grant
            event = "granted"
            if st[0] is None and dc is not None:
                st[0] = dc
            st[1] = None if lc is None else (lc if dc is None or st[0] is None else int(serial.diff(st[0], serial.add(dc, lc))))
        else:  # the sending end's own view
            event = "reported"
            if dc is not None:
                st[0] = dc
            st[1] = lc
        av = _num(cols["available"][i])
        out.append((key[0], key[1], int(packet[i]), int(ts[i]), event, st[1], lc, dc, av,
                    _flag(cols["drain"][i]), _flag(cols["echo"][i])))
    ev = pd.DataFrame(out, columns=EVENT_COLUMNS[:-1])
    ev["credit"] = pd.array([None if pd.isna(c) else int(c) for c in ev["credit"]], dtype="Int64")  # (None in a float column: NaN)
    for c in ("link_credit", "delivery_count", "available"):
        ev[c] = pd.array([None if x is None or x != x else int(x) for x in ev[c]], dtype="Int64")
    ev["outstanding"] = _outstanding(ev, delivery_table)
    ev["ts"] = pd.to_datetime(ev["ts"].to_numpy(np.int64).view("M8[ns]"), utc=True)
    end_ns = f.groupby("stream", observed=True)["ts"].max() if len(f) else pd.Series(dtype="datetime64[ns, UTC]")
    refills, per_link = _per_link(ev, link_table, end_ns)
    return Credit(ev[EVENT_COLUMNS], refills, per_link)


def _outstanding(ev: pd.DataFrame, d: pd.DataFrame) -> np.ndarray:
    """Per event: the link's deliveries sent and not settled yet after it."""
    out = np.zeros(len(ev), np.int64)
    if not len(ev) or not len(d):
        return out
    settled = np.where(d["settled_at_send"].to_numpy(bool), d["first_packet"].to_numpy(np.int64),
                       d["settle_packet"].to_numpy(np.float64, na_value=np.inf))
    dg = {k: v for k, v in d.groupby(["stream", "link"]).indices.items()}
    for key, rows in ev.groupby(["stream", "link"]).indices.items():
        drows = dg.get(key)
        if drows is None:
            continue
        p = ev["packet"].to_numpy(np.int64)[rows]
        sent = np.sort(d["first_packet"].to_numpy(np.int64)[drows])
        done = np.sort(settled[drows])
        out[rows] = np.searchsorted(sent, p, "right") - np.searchsorted(done, p, "right")
    return out


def _per_link(ev: pd.DataFrame, link_table: pd.DataFrame, end_ts: pd.Series) -> tuple[pd.DataFrame, pd.DataFrame]:
    refills, rows = [], []
    groups = ev.groupby(["stream", "link"], sort=True).indices if len(ev) else {}
    ts_all = ev["ts"].array.asi8 if len(ev) else np.zeros(0, np.int64)
    for (s, link), idx in groups.items():
        e = ev.iloc[idx]
        t = ts_all[idx]
        credit = e["credit"].to_numpy(np.float64, na_value=np.nan)
        kind = e["event"].to_numpy(object)
        end = int(end_ts.loc[s].value) if s in end_ts.index else int(t[-1])
        nxt = np.r_[t[1:], end]
        known = ~np.isnan(credit)
        tracked = float(np.sum((nxt - t)[known])) / 1e9
        zero = float(np.sum((nxt - t)[known & (credit <= 0)])) / 1e9
        is_t = kind == "transfer"
        before = np.r_[np.nan, credit[:-1]]
        granted = e["link_credit"].to_numpy(np.float64, na_value=np.nan)[kind == "granted"]
        avail = e["available"].to_numpy(np.float64, na_value=np.nan)
        grants = np.flatnonzero((kind == "granted") & (credit > 0))
        transfers = np.flatnonzero(is_t)
        reports = np.flatnonzero((kind == "reported") & ~np.isnan(avail))
        mine = len(refills)
        for j in np.flatnonzero(is_t & (credit == 0)).tolist():
            g = grants[np.searchsorted(grants, j, "right"):][:1]  # the next grant of credit
            nt = transfers[np.searchsorted(transfers, j, "right"):][:1]  # the next delivery
            rep = reports[:np.searchsorted(reports, j, "right")][-1:]  # the sender's last report
            refills.append((s, link, int(e["packet"].iat[j]), int(t[j]),
                            int(e["packet"].iat[g[0]]) if len(g) else None,
                            (t[g[0]] - t[j]) / 1e9 if len(g) else np.nan,
                            (t[nt[0]] - t[j]) / 1e9 if len(nt) else np.nan,
                            int(avail[rep[0]]) if len(rep) else None))
        gaps = [r[5] for r in refills[mine:] if r[5] == r[5]]
        rows.append({
            "stream": s, "link": link,
            "granted_credit_max": int(np.nanmax(granted)) if np.isfinite(granted).any() else None,
            "granted_credit_median": float(np.nanmedian(granted)) if np.isfinite(granted).any() else np.nan,
            "flows_granted": int((kind == "granted").sum()), "flows_reported": int((kind == "reported").sum()),
            "available_max": int(np.nanmax(avail)) if np.isfinite(avail).any() else None,
            "drained": bool(e["drain"].any()),
            "transfers": int(is_t.sum()), "transfers_to_zero": int((is_t & (credit == 0)).sum()),
            "transfers_without_credit": int((is_t & (before <= 0)).sum()),
            "credit_tracked_s": tracked, "zero_credit_s": zero,
            "zero_credit_share": zero / tracked if tracked > 0 else np.nan,
            "refills": len(gaps), "refill_gap_median_s": float(np.median(gaps)) if gaps else np.nan,
            "refill_gap_total_s": float(np.sum(gaps)) if gaps else 0.0,
            "outstanding_max": int(e["outstanding"].max()),
        })
    r = pd.DataFrame(refills, columns=REFILL_COLUMNS)
    r["zero_ts"] = pd.to_datetime(r["zero_ts"].to_numpy(np.int64).view("M8[ns]"), utc=True)
    for c in ("refill_packet", "available"):
        r[c] = pd.array([None if x is None or x != x else int(x) for x in r[c]], dtype="Int64")
    per = pd.DataFrame(rows, columns=LINK_COLUMNS)
    for c in ("granted_credit_max", "available_max"):
        per[c] = pd.array([None if x is None or x != x else int(x) for x in per[c]], dtype="Int64")
    return r, per


@derivation(CONNECTION)
def credit(cap: Capture) -> Credit:
    """`credit_of` the capture's `amqp10_frames`."""
    f = amqp10_frames(cap)
    return credit_of(f, sessions(cap).of_frame, links(cap).table, links(cap).of_frame, deliveries(cap).table)
