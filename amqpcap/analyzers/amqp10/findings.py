"""The amqp10 analyzer's findings (docs/analyzers/amqp10.md), each from the tables of `analyzer.part_of`
merged over the partitions. One finding per cause: a link whose credit is starved is not told
again for settling one delivery per disposition (at credit 1 there is only ever one to settle), and
a publisher's wait for credit is not told while a closed session window (session-window-closed)
held it over the same stretch."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...analysis.registry import Finding
from ...derive.names import subject_namer
from ...io.load import Capture
from ...model.display_filters import covered_filter, packets_part, streams_part
from ...model.wording import counted

#: credit-starved: a client receiver whose largest grant is at most this many messages
SMALL_CREDIT = 10
#: ... over at least this many deliveries ...
MIN_DELIVERIES = 20
#: ... at least this share of which used the link's last credit (the sender then waited for a flow)
ZERO_SHARE = 0.5
#: settle-one-by-one: at least this many dispositions, this share of them for one delivery each,
#: while a median of at least 2 deliveries were unsettled when each was sent (a range could have
#: settled them together)
MIN_DISPOSITIONS = 100
SINGLE_SHARE = 0.9
#: delivery-outcomes: a warning from this many rejected, released or modified deliveries (or
#: redeliveries) making this share of the link's deliveries; info below
MIN_OUTCOMES = 5
OUTCOME_SHARE = 0.05
#: session-window-closed, publisher-waiting-for-credit: a sender counts as having waited when its
#: next transfer came within this long of being allowed again (a reopened window, a grant of
#: credit): later than that it went at its own pace, and the stop proves nothing
PROMPT_S = 0.1
#: ... and its waits make a warning when they add up to this share of the connection's time in the
#: capture (its first to its last AMQP 1.0 frame); info below
WAIT_SHARE = 0.1
#: what an error condition names (Part 2 §2.8.15, §2.5.7, §2.6.10)
CONDITIONS = {
    "amqp:session:window-violation": "a transfer beyond the peer's session incoming-window (Part 2 §2.5.6): the "
                                     "sending side's session flow control, in the AMQP 1.0 library, not the "
                                     "application, is off",
    "amqp:resource-limit-exceeded": "a limit was exceeded; with an idle-time-out it is the sending side "
                                    "declaring that the other side sent nothing within its idle-time-out",
    "amqp:invalid-field": "a field the peer does not accept",
    "amqp:connection:forced": "the broker closed the connection itself (an operator, a node shutting down)",
    "amqp:not-found": "the address names no queue or exchange",
    "amqp:unauthorized-access": "the user may not use that address",
    "amqp:link:detach-forced": "the broker detached the link itself",
    "amqp:internal-error": "the peer failed internally",
}
CUT = {(True, True): None, (False, True): "start", (True, False): "end", (False, False): "start and end"}


def _cut(t: dict, stream: int) -> str | None:
    c = t["connections"].set_index("stream")
    return CUT[(bool(c.at[stream, "open_seen"]), bool(c.at[stream, "close_seen"]))] if stream in c.index else None


def _cut_words(cut: str | None) -> str:
    return "" if cut is None else f" (the capture cuts the connection at its {cut})"


def _filter(streams, then: str, packets=()) -> dict:
    part = streams_part(streams)
    if len(packets):
        pp = packets_part(packets)
        return covered_filter(f"{part.text}{then} && {pp.text}", part, pp)
    return covered_filter(part.text + then, part)


def findings(cap: Capture, t: dict) -> list[Finding]:
    out = []
    starved = _credit_starved(cap, t)
    if starved:
        out.append(starved[0])
    closed = _window_closed(cap, t)
    if closed:
        out.append(closed[0])
    for f in (_waiting_for_credit(cap, t, closed[1] if closed else t["closures"].iloc[:0]),
              _one_by_one(cap, t, starved[1] if starved else set()), _outcomes(cap, t), _errors(cap, t),
              _unsettled(cap, t), _presettled(cap, t)):
        if f is not None:
            out.append(f)
    return out


def _link_words(t: dict, stream: int, link: int, name) -> str:
    """How a title names a link: by its attach's name, or (a capture begun after the attach) by
    its handles."""
    if isinstance(name, str):
        return f"link {name!r}"
    h = t["handles"]
    row = h[(h["stream"] == stream) & (h["link"] == link)]
    ends = [f"{who} handle {int(row[f'{who}_handle'].iat[0])}" for who in ("client", "broker")
            if len(row) and not pd.isna(row[f"{who}_handle"].iat[0])]
    return ("an unnamed link (" + ", ".join(ends) + "; its attach came before the capture started mid-connection, "
            "so its name is unknown)")


def _attach_seen(t: dict, stream: int, link: int) -> bool:
    lk = t["links"]
    return bool(lk[(lk["stream"] == stream) & (lk["link"] == link)]["attached"].any())


def _credit_starved(cap: Capture, t: dict):
    c, r, disp = t["credit"], t["refills"], t["dispositions"]
    m = c[(c["client_role"] == "receiver") & (c["granted_credit_max"].fillna(1 << 40) <= SMALL_CREDIT)
          & (c["transfers"] >= MIN_DELIVERIES) & (c["transfers_to_zero"] >= ZERO_SHARE * c["transfers"])
          & (c["refills"] > 0)].copy()
    if not len(m):
        return None
    r = r.dropna(subset=["refill_gap_s"])
    waited = r[r["available"].fillna(0) > 0].groupby(["stream", "link"]).size()
    m["waiting_refills"] = [int(waited.get((s, k), 0)) for s, k in zip(m["stream"], m["link"])]
    m["next_transfer_median_s"] = [float(r[(r["stream"] == s) & (r["link"] == k)]["next_transfer_s"].median())
                                   for s, k in zip(m["stream"], m["link"])]
    single = disp[(disp["role"] == "receiver") & disp["settled"].fillna(False).astype(bool)]
    m["single_dispositions"] = [int(((single["stream"] == s) & (single["link"] == k) & (single["covers"] == 1)).sum())
                                for s, k in zip(m["stream"], m["link"])]
    m = m.sort_values(["zero_credit_s", "stream", "link"], ascending=[False, True, True], kind="stable")
    name = subject_namer(cap)
    subjects = [name(x.stream, link=x.name, client_end="receiver", granted_credit_max=int(x.granted_credit_max),
                     transfers=int(x.transfers), transfers_to_zero=int(x.transfers_to_zero),
                     refill_gap_median_s=float(x.refill_gap_median_s), zero_credit_share=float(x.zero_credit_share),
                     available_max=None if pd.isna(x.available_max) else int(x.available_max),
                     severity="warning" if x.waiting_refills else "info") for x in m.itertuples()]
    w = m.iloc[0]
    cut = _cut(t, int(w["stream"]))
    warn = bool((m["waiting_refills"] > 0).any())
    wr = r[(r["stream"] == w["stream"]) & (r["link"] == w["link"])]
    title = (f"{subjects[0]['connection']}'s receiver on {_link_words(t, int(w['stream']), int(w['link']), w['name'])} "
             f"grants {int(w['granted_credit_max'])} "
             f"credit at a time: {int(w['transfers_to_zero']):,} of {int(w['transfers']):,} deliveries used the last "
             f"credit, and the broker waited a median {w['refill_gap_median_s'] * 1e3:.2f} ms for the next flow"
             + (f" while it reported {int(w['available_max']):,} messages available" if w["waiting_refills"] else "")
             + _cut_words(cut) + (f"; {counted(len(m) - 1, 'more link', 'more links')}" if len(m) > 1 else ""))
    evidence = {
        "link": w["name"], "link_attach_seen": _attach_seen(t, int(w["stream"]), int(w["link"])),
        "client_end": "receiver", "granted_credit_max": int(w["granted_credit_max"]),
        "transfers": int(w["transfers"]), "transfers_to_zero": int(w["transfers_to_zero"]),
        "refills": int(w["refills"]), "refill_gap_median_s": float(w["refill_gap_median_s"]),
        "refill_gap_total_s": float(w["refill_gap_total_s"]),
        "next_transfer_median_s": float(w["next_transfer_median_s"]),
        "zero_credit_s": float(w["zero_credit_s"]), "zero_credit_share": float(w["zero_credit_share"]),
        "available_max": None if pd.isna(w["available_max"]) else int(w["available_max"]),
        "refills_with_messages_waiting": int(w["waiting_refills"]),
        "single_dispositions": int(w["single_dispositions"]), "capture_cut": cut,
        "links_with_this_finding": len(m), "streams": sorted({int(s) for s in m["stream"]}),
        "packets": [int(p) for p in wr["zero_packet"].head(5)],
        **_filter(m["stream"], " && amqp.performative in {19, 20, 21}"),
    }
    advice = ("Grant more credit at a time (proton: a prefetch of 100–300; most clients refill automatically "
              "when half is used) so the broker can keep sending while the application works, and settle "
              "with ranges (one disposition for first..last). Each delivery now costs a round trip: the "
              "receiver's flow, then the broker's transfer." + (
                  " The dispositions each settle one delivery because only one is ever outstanding: the credit, "
                  "not the settling, is the cause." if w["single_dispositions"] else ""))
    f = Finding("credit-starved", "warning" if warn else "info", title, evidence, advice,
                impact=min(1.0, float(w["zero_credit_share"])) if warn else 0.2, subjects=subjects)
    return f, {(int(s), int(k)) for s, k in zip(m["stream"], m["link"])}


def _window_waits(cl: pd.DataFrame) -> np.ndarray:
    """Which closures kept a sender from sending, proven from the frames: it had sent in the session
    before the window closed, sent nothing while it was closed (but transfers in flight when the
    receiver's flow closed it: within PROMPT_S of the close, as a capture near the receiver shows
    them; RabbitMQ 4 tolerates 400 of them under an alarm), and either sent again within
    PROMPT_S of the receiver's reopening flow, or (the capture ending with it closed) the receiver
    closed it itself (a flow or begin, not the sender filling it) while the sender's last transfer
    was more recent than the time it then stayed closed (it was sending at a pace that would have
    sent again meanwhile)."""
    reopened = cl["reopen_packet"].notna().to_numpy(bool)
    by_receiver = cl["closed_by"].isin(["flow", "begin"]).to_numpy(bool)
    in_flight = by_receiver & (cl["last_transfer_while_closed_s"].to_numpy(np.float64) <= PROMPT_S)
    held = (cl["transfers_while_closed"].to_numpy(np.int64) == 0) | in_flight
    base = (cl["transfers_before"].to_numpy(np.int64) > 0) & held
    resumed = reopened & (cl["resume_s"].to_numpy(np.float64) <= PROMPT_S)
    held_at_end = (~reopened & by_receiver
                   & (cl["last_transfer_before_s"].to_numpy(np.float64) <= cl["zero_s"].to_numpy(np.float64)))
    return base & (resumed | held_at_end)


def _window_closed(cap: Capture, t: dict):
    cl = t["closures"]
    waits = cl[_window_waits(cl)]
    if not len(waits):
        return None
    conn = t["connections"].set_index("stream")
    sess = t["sessions"].set_index(["stream", "session"])
    key = ["stream", "session", "direction"]
    g = waits.groupby(key).agg(waits=("close_packet", "size"), wait_total_s=("zero_s", "sum"),
                               wait_max_s=("zero_s", "max"), wait_median_s=("zero_s", "median"),
                               closed_side=("closed_side", "first"),
                               closed_at_end=("reopen_packet", lambda x: bool(x.isna().any()))).reset_index()
    zero = cl.groupby(key)["zero_s"].sum()
    g["zero_window_s"] = [float(zero.loc[tuple(k)]) for k in g[key].itertuples(index=False)]
    g["seen_s"] = [float(conn.at[s, "seen_s"]) for s in g["stream"]]
    g["wait_share"] = np.where(g["seen_s"] > 0, g["wait_total_s"] / g["seen_s"].where(g["seen_s"] > 0, 1), np.nan)
    g["loud"] = g["wait_share"].fillna(0) >= WAIT_SHARE
    g = g.sort_values(["wait_total_s", "stream", "session"], ascending=[False, True, True], kind="stable")
    channel = {k: (sess.at[k, "client_channel"], sess.at[k, "broker_channel"]) for k in sess.index}
    name = subject_namer(cap)

    def side_words(x) -> str:
        return "the broker's incoming window (the client's transfers: publishing)" if x == "broker" else \
            "the client's incoming window (the broker's transfers: deliveries to the consumer)"

    subjects = [name(x.stream, session=int(x.session), closed_side=x.closed_side, waits=int(x.waits),
                     wait_total_s=float(x.wait_total_s), wait_share=float(x.wait_share),
                     closed_at_end=bool(x.closed_at_end), severity="warning" if x.loud else "info")
                for x in g.itertuples()]
    w = g.iloc[0]
    s_, k_ = int(w["stream"]), int(w["session"])
    cut = _cut(t, s_)
    cc, bc = channel.get((s_, k_), (None, None))
    where = "" if pd.isna(cc) else f" (session on client channel {int(cc)})"
    who, sender = (("broker", "client") if w["closed_side"] == "broker" else ("client", "broker"))
    mine = waits[(waits["stream"] == s_) & (waits["session"] == k_) & (waits["direction"] == w["direction"])]
    title = (f"{subjects[0]['connection']}: the {who} closed its session incoming window{where} and the {sender}'s "
             f"transfers stopped while it was closed: {counted(int(w['waits']), 'wait')}, {w['wait_total_s']:.3f} s in all "
             f"({w['wait_share']:.0%} of the connection's time in the capture, the longest {w['wait_max_s']:.3f} s)"
             + ("; the connection's frames in the capture end with it still closed" if w["closed_at_end"] else "")
             + (": the publisher was blocked" if who == "broker" else ": consumption stopped")
             + _cut_words(cut) + (f"; {counted(len(g) - 1, 'more session', 'more sessions')}" if len(g) > 1 else ""))
    evidence = {
        "closed_side": w["closed_side"], "window": side_words(w["closed_side"]),
        "client_channel": None if pd.isna(cc) else int(cc), "broker_channel": None if pd.isna(bc) else int(bc),
        "waits": int(w["waits"]), "wait_total_s": float(w["wait_total_s"]), "wait_median_s": float(w["wait_median_s"]),
        "wait_max_s": float(w["wait_max_s"]), "wait_share": float(w["wait_share"]),
        "zero_window_s": float(w["zero_window_s"]), "closed_at_end": bool(w["closed_at_end"]),
        "closed_by": {k: int(v) for k, v in mine["closed_by"].value_counts().sort_index().items()},
        "resume_median_s": float(mine["resume_s"].median()) if mine["resume_s"].notna().any() else None,
        "capture_cut": cut, "sessions_with_this_finding": len(g), "streams": sorted({int(x) for x in g["stream"]}),
        "packets": [int(p) for p in mine["close_packet"].head(5)],
        "reopen_packets": [int(p) for p in mine["reopen_packet"].dropna().head(5)],
        **_filter(g["stream"], " && amqp.performative in {17, 19, 20}"),
    }
    if who == "broker":
        advice = ("The broker stopped taking the client's messages at the session level: RabbitMQ 4 sets its "
                  "incoming window to 0 while a memory or disk alarm is in effect, the likely cause here. "
                  "RabbitMQ's log (\"memory resource limit alarm set\", \"disk resource limit alarm set\") and "
                  "`rabbitmq-diagnostics alarms` confirm it; free memory or disk (consumers draining the queues, "
                  "a higher watermark, more disk) and the window reopens.")
    else:
        advice = ("The client let its session incoming window run down to 0 and widened it only later (or never, "
                  "when the capture ends with it closed), so the broker could not deliver: consumption stops "
                  "whatever the link credit. Configure the client library's session incoming window larger, or "
                  "use one that widens it as it processes frames (a flow with a new incoming-window).")
    f = Finding("session-window-closed", "warning" if bool(g["loud"].any()) else "info", title, evidence, advice,
                impact=min(1.0, float(w["wait_share"])) if bool(g["loud"].any()) else 0.2, subjects=subjects)
    return f, waits


def _waiting_for_credit(cap: Capture, t: dict, window_waits: pd.DataFrame) -> Finding | None:
    """A client sender that used its last credit and sent again only after the broker's next grant,
    promptly (PROMPT_S): each such refill is a wait, unless a closed session window the
    session-window-closed finding told already held the client then (one cause, told once)."""
    c, r, lk = t["credit"], t["refills"], t["links"]
    senders = c[c["client_role"] == "sender"]
    if not len(senders) or not len(r):
        return None
    r = r.merge(senders[["stream", "link"]], on=["stream", "link"]).merge(
        lk[["stream", "link", "session"]], on=["stream", "link"], how="left")
    gap, nxt = r["refill_gap_s"].to_numpy(np.float64), r["next_transfer_s"].to_numpy(np.float64)
    r = r[~np.isnan(gap) & (nxt >= gap) & (nxt - gap <= PROMPT_S)].copy()
    if not len(r):
        return None
    zero_ns = r["zero_ts"].array.asi8
    end_ns = zero_ns + (r["refill_gap_s"].to_numpy(np.float64) * 1e9).astype(np.int64)
    ww = window_waits[window_waits["direction"] == "c2s"]
    explained = np.zeros(len(r), bool)
    if len(ww):
        close = ww["close_ts"].array.asi8
        reopen = ww["reopen_ts"].array.asi8
        open_end = np.where(ww["reopen_ts"].isna().to_numpy(bool), np.iinfo(np.int64).max, reopen)
        for i, (s, k) in enumerate(zip(r["stream"].tolist(), r["session"].tolist())):
            same = (ww["stream"].to_numpy(np.int64) == s) & (ww["session"].to_numpy(np.int64) == k)
            explained[i] = bool(np.any(same & (close < end_ns[i]) & (open_end > zero_ns[i])))
    r["explained"] = explained
    told = r.groupby(["stream", "link"])["explained"].sum()
    r = r[~r["explained"]]
    if not len(r):
        return None
    conn = t["connections"].set_index("stream")
    g = r.groupby(["stream", "link"]).agg(waits=("zero_packet", "size"), wait_total_s=("refill_gap_s", "sum"),
                                          wait_median_s=("refill_gap_s", "median"),
                                          wait_max_s=("refill_gap_s", "max")).reset_index()
    g = g.merge(c, on=["stream", "link"], how="left")
    g["seen_s"] = [float(conn.at[s, "seen_s"]) for s in g["stream"]]
    g["wait_share"] = np.where(g["seen_s"] > 0, g["wait_total_s"] / g["seen_s"].where(g["seen_s"] > 0, 1), np.nan)
    g["loud"] = g["wait_share"].fillna(0) >= WAIT_SHARE
    g = g.sort_values(["wait_total_s", "stream", "link"], ascending=[False, True, True], kind="stable")
    name = subject_namer(cap)
    subjects = [name(x.stream, link=x.name, client_end="sender", waits=int(x.waits),
                     wait_total_s=float(x.wait_total_s), wait_share=float(x.wait_share),
                     severity="warning" if x.loud else "info") for x in g.itertuples()]
    w = g.iloc[0]
    s_, k_ = int(w["stream"]), int(w["link"])
    cut = _cut(t, s_)
    mine = r[(r["stream"] == s_) & (r["link"] == k_)]
    granted = "" if pd.isna(w["granted_credit_median"]) else \
        f"; the broker granted a median {w['granted_credit_median']:g} credit per flow"
    title = (f"{subjects[0]['connection']}'s sender on {_link_words(t, s_, k_, w['name'])} ran out of link credit "
             f"and sent its next message only after the broker's next flow granted more, "
             f"{counted(int(w['waits']), 'time')}: a median wait of {w['wait_median_s'] * 1e3:.2f} ms, the longest "
             f"{w['wait_max_s'] * 1e3:.2f} ms, {w['wait_share']:.0%} of the connection's time in the capture"
             + granted + _cut_words(cut) + (f"; {counted(len(g) - 1, 'more link', 'more links')}" if len(g) > 1 else ""))
    evidence = {
        "link": w["name"], "link_attach_seen": _attach_seen(t, s_, k_), "client_end": "sender",
        "waits": int(w["waits"]), "wait_median_s": float(w["wait_median_s"]), "wait_max_s": float(w["wait_max_s"]),
        "wait_total_s": float(w["wait_total_s"]), "wait_share": float(w["wait_share"]),
        "zero_credit_s": float(w["zero_credit_s"]), "transfers": int(w["transfers"]),
        "transfers_to_zero": int(w["transfers_to_zero"]), "flows_granted": int(w["flows_granted"]),
        "granted_credit_median": None if pd.isna(w["granted_credit_median"]) else float(w["granted_credit_median"]),
        "granted_credit_max": None if pd.isna(w["granted_credit_max"]) else int(w["granted_credit_max"]),
        "waits_told_as_window_closed": int(told.get((s_, k_), 0)),
        "capture_cut": cut, "links_with_this_finding": len(g), "streams": sorted({int(x) for x in g["stream"]}),
        "packets": [int(p) for p in mine["zero_packet"].head(5)],
        **_filter(g["stream"], " && amqp.performative in {19, 20}"),
    }
    advice = ("The client had more to send and waited for credit each time: the broker grants a publisher credit "
              "as its target queues take the messages, so the waits are the broker pacing it (a queue under load "
              "or in flow control, a slow quorum-queue replica) or grants smaller than the client's bursts. Check "
              "the target queue's load and the broker's flow-control state; a client cannot send faster than "
              "the credit it is given.")
    return Finding("publisher-waiting-for-credit", "warning" if bool(g["loud"].any()) else "info", title, evidence,
                   advice, impact=min(1.0, float(w["wait_share"])) if bool(g["loud"].any()) else 0.2,
                   subjects=subjects)


def _one_by_one(cap: Capture, t: dict, told: set) -> Finding | None:
    disp, links = t["dispositions"], t["links"]
    d = disp[(disp["direction"] == "c2s") & (disp["role"] == "receiver") & disp["settled"].fillna(False).astype(bool)
             & (disp["link"] >= 0)]
    if not len(d):
        return None
    g = d.groupby(["stream", "link"]).agg(dispositions=("packet", "size"),
                                          single=("covers", lambda x: int((x == 1).sum())),
                                          unsettled_median=("unsettled_before", "median")).reset_index()
    g = g[(g["dispositions"] >= MIN_DISPOSITIONS) & (g["single"] >= SINGLE_SHARE * g["dispositions"])
          & (g["unsettled_median"] >= 2)]
    g = g[[(int(s), int(k)) not in told for s, k in zip(g["stream"], g["link"])]]
    if not len(g):
        return None
    g = g.merge(links[["stream", "link", "name"]], on=["stream", "link"]).sort_values(
        ["dispositions", "stream"], ascending=[False, True], kind="stable")
    name = subject_namer(cap)
    subjects = [name(x.stream, link=x.name, dispositions=int(x.dispositions), single_dispositions=int(x.single),
                     unsettled_median=float(x.unsettled_median)) for x in g.itertuples()]
    w = g.iloc[0]
    cut = _cut(t, int(w["stream"]))
    title = (f"{subjects[0]['connection']} settles link {w['name']!r} one delivery per disposition "
             f"({int(w['single']):,} of {int(w['dispositions']):,}) while a median {w['unsettled_median']:.0f} "
             f"were unsettled: ranges could settle them together" + _cut_words(cut))
    evidence = {"link": w["name"], "dispositions": int(w["dispositions"]), "single_dispositions": int(w["single"]),
                "unsettled_median": float(w["unsettled_median"]), "capture_cut": cut,
                "links_with_this_finding": len(g), "streams": sorted({int(s) for s in g["stream"]}),
                **_filter(g["stream"], " && amqp.performative == 21")}
    return Finding("settle-one-by-one", "info", title, evidence,
                   "Settle with ranges: one disposition for first..last covers every delivery handled so far "
                   "(the AMQP 1.0 twin of basic.ack multiple=true); fewer frames each way.", impact=0.1,
                   subjects=subjects)


def _outcomes(cap: Capture, t: dict) -> Finding | None:
    s = t["settlement"]
    s = s.assign(bad=s["rejected"] + s["released"] + s["modified"])
    m = s[(s["bad"] > 0) | (s["redelivered"] > 0)]
    if not len(m):
        return None
    m = m.sort_values(["bad", "redelivered", "stream"], ascending=[False, False, True], kind="stable")
    loud = (np.maximum(m["bad"], m["redelivered"]) >= MIN_OUTCOMES) & (m["bad"] >= OUTCOME_SHARE * m["deliveries"])
    name = subject_namer(cap)
    subjects = [name(x.stream, link=x.name, client_end=x.client_role, deliveries=int(x.deliveries),
                     rejected=int(x.rejected), released=int(x.released), modified=int(x.modified),
                     redelivered=int(x.redelivered), severity="warning" if l else "info")
                for x, l in zip(m.itertuples(), loud)]
    w = m.iloc[0]
    cut = _cut(t, int(w["stream"]))
    title = (f"{subjects[0]['connection']}'s {w['client_role']} link {w['name']!r}: {int(w['rejected'])} rejected, "
             f"{int(w['released'])} released, {int(w['modified'])} modified of {int(w['deliveries'])} deliveries, "
             f"{int(w['redelivered'])} redelivered" + _cut_words(cut)
             + (f"; {counted(len(m) - 1, 'more link', 'more links')}" if len(m) > 1 else ""))
    d = t["deliveries"]
    ex = d[d["outcome"].isin(["rejected", "released", "modified"]) & d["outcome_packet"].notna()]
    evidence = {"link": w["name"], "client_end": w["client_role"], "deliveries": int(w["deliveries"]),
                "rejected": int(w["rejected"]), "released": int(w["released"]), "modified": int(w["modified"]),
                "redelivered": int(w["redelivered"]), "capture_cut": cut, "links_with_this_finding": len(m),
                "streams": sorted({int(x) for x in m["stream"]}),
                "packets": [int(p) for p in ex["outcome_packet"].head(5)],
                **_filter(m["stream"], " && ((amqp.performative == 21 && (amqp.delivery-state.rejected || "
                          "amqp.delivery-state.released || amqp.delivery-state.modified)) || "
                          "amqp.message.firstAcquirer == 0)")}
    return Finding("delivery-outcomes", "warning" if loud.any() else "info", title, evidence,
                   "Released and modified messages go back to the queue and come again (first-acquirer false, or a "
                   "header delivery-count): a message the application cannot handle loops. Reject poison messages "
                   "(RabbitMQ dead-letters rejected messages when the queue has a dead-letter exchange), and "
                   "release only what another consumer can handle.", impact=0.5 if loud.any() else 0.1,
                   subjects=subjects)


def _error_why(e, t: dict) -> str:
    why = CONDITIONS.get(e.condition, "")
    if e.condition == "amqp:invalid-field" and e.performative == "end":
        d = t["dispositions"]
        mod = d[(d["stream"] == e.stream) & (d["packet"] < e.packet) & (d["state"] == "modified")]
        if len(mod):
            why = ("the broker refused a modified outcome (packet " f"{int(mod['packet'].iloc[-1])}): RabbitMQ's "
                   "AMQP 1.0 plugin before 4.0 knows accepted, rejected and released only")
    if e.condition == "amqp:session:window-violation":
        why = _window_violation_why(e, t)
    if e.condition == "amqp:resource-limit-exceeded" and isinstance(e.description, str) \
            and "idle" in e.description.lower():
        other = "client" if e.side == "broker" else "broker"
        why = f"the {e.side} timed out the {other}: it sent nothing within the {e.side}'s idle-time-out"
    return why


def _window_violation_why(e, t: dict) -> str:
    """Who broke the session window, and how: the other side of the one that ended the session.
    The count is the transfer frames it sent at a window of 0 or below (`transfers_beyond_window`
    of the session the end's channel names, docs/amqp10.md)."""
    other = "client" if e.side == "broker" else "broker"
    if isinstance(e.description, str) and "next-incoming-id" in e.description:
        # RabbitMQ 4 (rabbit_amqp_session) checks a flow's next-incoming-id against its own next-outgoing-id
        start = "; RabbitMQ 4.0 and 4.1 start them at 2^32 − 4, so they wrap at once" if e.side == "broker" else ""
        return (f"the {other}'s flow gave a next-incoming-id ahead of the {e.side}'s next-outgoing-id: the {other}'s "
                f"AMQP 1.0 library counts the {e.side}'s transfer ids wrongly (its session accounting, Part 2 "
                f"§2.5.6{start})")
    s = t["sessions"]
    mine = s[(s["stream"] == e.stream) & (s[f"{e.side}_channel"] == e.channel) & (s["begin_packet"] <= e.packet)]
    sent_by = "c2s" if other == "client" else "s2c"
    beyond = int(mine[f"{sent_by}_transfers_beyond_window"].iloc[-1]) if len(mine) else 0
    sent = (f"sent {counted(beyond, 'transfer frame')} while the {e.side}'s session incoming-window was 0 or spent"
            if beyond else f"sent a transfer beyond the {e.side}'s session incoming-window")
    alarm = "; RabbitMQ closes its window under a memory or disk alarm" if e.side == "broker" else ""
    return (f"the {other} {sent} (Part 2 §2.5.6: a sender stops there until a flow reopens it{alarm}): the "
            f"session accounting of the {other}'s AMQP 1.0 library is at fault, not the application's code")


def _errors(cap: Capture, t: dict) -> Finding | None:
    e = t["errors"]
    if not len(e):
        return None
    name = subject_namer(cap)
    whys = [_error_why(x, t) for x in e.itertuples()]
    subjects = [name(x.stream, performative=x.performative, side=x.side, condition=x.condition,
                     description=None if pd.isna(x.description) else x.description, packet=int(x.packet), why=why)
                for x, why in zip(e.itertuples(), whys)]
    w = e.iloc[0]
    cut = _cut(t, int(w["stream"]))
    closed = {"detach": "detached the link", "end": "ended the session", "close": "closed the connection"}
    title = (f"{subjects[0]['connection']}: the {w['side']} {closed[w['performative']]} with {w['condition']}"
             + (f": {whys[0]}" if whys[0] else "") + _cut_words(cut)
             + (f"; {counted(len(e) - 1, 'more error', 'more errors')}" if len(e) > 1 else ""))
    evidence = {"condition": w["condition"], "description": None if pd.isna(w["description"]) else w["description"],
                "performative": w["performative"], "side": w["side"], "why": whys[0] or None,
                "conditions": {k: int(v) for k, v in e["condition"].value_counts().sort_index().items()},
                "capture_cut": cut, "errors": len(e), "streams": sorted({int(x) for x in e["stream"]}),
                "packets": [int(p) for p in e["packet"].head(10)],
                **_filter(e["stream"], " && amqp.error.condition")}
    return Finding("closed-with-error", "warning", title, evidence,
                   "The error condition says which side refused what (its description has the detail): fix what "
                   "it names on the side that caused it (see the analyzer's page for each condition).",
                   impact=0.6, subjects=subjects)


def _links_by(cap: Capture, t: dict, column: str) -> tuple[pd.DataFrame, list[dict]]:
    """The settlement rows with `column` > 0, the largest first (then by stream), and their
    subjects (connection, link, client end, the count): the links a settlement note names."""
    s = t["settlement"]
    m = s[s[column] > 0].sort_values([column, "stream"], ascending=[False, True], kind="stable")
    name = subject_namer(cap)
    return m, [name(x.stream, link=x.name, client_end=x.client_role, **{column: int(getattr(x, column))})
               for x in m.itertuples()]


def _unsettled(cap: Capture, t: dict) -> Finding | None:
    m, subjects = _links_by(cap, t, "unsettled")
    if not len(m):
        return None
    w = m.iloc[0]
    cut = _cut(t, int(w["stream"]))
    title = (f"{int(m['unsettled'].sum()):,} deliveries were not settled by the end of the capture, "
             f"{int(w['unsettled']):,} on {subjects[0]['connection']}'s "
             f"{_link_words(t, int(w['stream']), int(w['link']), w['name'])}" + _cut_words(cut))
    evidence = {"link": w["name"], "unsettled": int(w["unsettled"]), "unsettled_total": int(m["unsettled"].sum()),
                "capture_cut": cut, "streams": sorted({int(x) for x in m["stream"]}),
                **_filter(m["stream"], " && amqp.performative in {20, 21}")}
    return Finding("unsettled-at-end", "info", title, evidence,
                   "A note: deliveries in flight when the capture stopped. If the connection ended, the broker "
                   "redelivers its own unsettled deliveries; the client's unsettled sends may be lost or sent again.",
                   impact=0.05, subjects=subjects)


def _presettled(cap: Capture, t: dict) -> Finding | None:
    m, subjects = _links_by(cap, t, "settled_at_send")
    if not len(m):
        return None
    w = m.iloc[0]
    sender = "the client" if w["client_role"] == "sender" else "the broker"
    title = (f"{subjects[0]['connection']}'s {_link_words(t, int(w['stream']), int(w['link']), w['name'])}: "
             f"{sender} sent {int(w['settled_at_send']):,} "
             f"deliveries pre-settled (at most once)" + _cut_words(_cut(t, int(w["stream"]))))
    evidence = {"link": w["name"], "client_end": w["client_role"], "settled_at_send": int(w["settled_at_send"]),
                "capture_cut": _cut(t, int(w["stream"])), "streams": sorted({int(x) for x in m["stream"]}),
                **_filter(m["stream"], " && amqp.performative == 20 && amqp.performative.arguments.settled == 1")}
    return Finding("presettled-sender", "info", title, evidence,
                   "A note: pre-settled deliveries are at most once: no disposition says the peer took them, and "
                   "a message in flight when a connection drops is lost. Use unsettled sends where each message "
                   "matters.", impact=0.05, subjects=subjects)
