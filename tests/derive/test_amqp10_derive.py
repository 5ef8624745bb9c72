"""The AMQP 1.0 derivations (amqpcap/derive/amqp10) on hand-written frames (tests/amqp10_scenarios.py):
the expected values are counted by hand from each scenario, in the comments."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

import amqpcap

from amqpcap.derive.amqp10 import serial
from amqpcap.derive.amqp10.credit import credit_of
from amqpcap.derive.amqp10.deliveries import deliveries_of
from amqpcap.derive.amqp10.frames import amqp10_frames, dtypes, empty
from amqpcap.derive.amqp10.handles import links_of
from amqpcap.derive.amqp10.sessions import sessions_of
from amqpcap.derive.amqp10.windows import closures_of, windows_of

from amqp10_scenarios import (NEAR_WRAP, alarm_publisher, credit1_midstream, credit1_receiver, frame, frames, opening,
                              u32, window_bound_consumer)

MAX = 2**32 - 1


def derived(rows):
    f = frames(rows)
    s = sessions_of(f)
    h = links_of(f, s.of_frame)
    d = deliveries_of(f, s.of_frame, h.of_frame)
    c = credit_of(f, s.of_frame, h.table, h.of_frame, d.table)
    return f, s, h, d, c


# --- serial numbers (RFC 1982) --------------------------------------------------------------

def test_serial_arithmetic_across_the_wrap():
    assert serial.diff(MAX, 0) == 1  # 0 follows 2^32-1
    assert serial.diff(0, MAX) == -1
    assert serial.diff(MAX - 4, 5) == 10  # 5 ids up to the wrap, 5 after it, plus... (2^32-5 → 5: 10 steps)
    assert serial.lt(MAX, 0) and not serial.lt(0, MAX)
    assert serial.add(MAX, 3) == 2
    assert serial.within(1, MAX - 1, 2) and not serial.within(3, MAX - 1, 2)
    # vectorised, as the derivations call it
    ids = np.array([MAX - 1, MAX, 0, 1], np.int64)
    assert serial.unwrap(ids, MAX - 1).tolist() == [MAX - 1, MAX, MAX + 1, MAX + 2]
    assert serial.within(ids, MAX, 0).tolist() == [False, True, True, False]


def test_a_capture_without_amqp10_has_an_empty_table_of_the_schema():
    f = amqp10_frames(amqpcap.load(Path(__file__).resolve().parents[2] / "fixtures" / "healthy.pcap"))
    assert list(f.columns) == list(dtypes()) and len(f) == 0
    assert list(empty().columns) == list(dtypes()) and len(empty()) == 0


# --- sessions and handles -------------------------------------------------------------------

def test_a_session_pairs_the_clients_channel_with_the_brokers_by_remote_channel():
    # client begins on channel 0, broker answers on channel 3 with remote-channel 0: one session;
    # a second session: client channel 1, broker channel 0 (numbers crossed on purpose)
    rows = opening() + [frame(5, 4, "c2s", "begin", 1, next_outgoing_id=0, incoming_window=10, outgoing_window=10),
                        frame(6, 5, "s2c", "begin", 0, remote_channel=1, next_outgoing_id=0, incoming_window=10,
                              outgoing_window=10),
                        frame(7, 6, "s2c", "end", 0, error_condition="amqp:session:window-violation"),
                        frame(8, 7, "c2s", "end", 1)]
    f, s, *_ = derived(rows)
    t = s.table
    assert t[["client_channel", "broker_channel"]].astype(int).values.tolist() == [[0, 3], [1, 0]]
    # the broker's end on its channel 0 ends the second session, not the first
    assert t["broker_end_packet"].tolist()[1] == 7 and pd.isna(t["broker_end_packet"].tolist()[0])
    assert t["end_error_condition"].isna().tolist() == [True, False]
    assert t["end_error_condition"].iat[1] == "amqp:session:window-violation"
    assert t["end_error_side"].isna().iat[0] and t["end_error_side"].iat[1] == "broker"
    # opens are in no session; the begins and ends in theirs
    assert s.of_frame.tolist() == [-1, -1, 0, 0, 1, 1, 1, 1]


def test_handles_are_per_direction_and_the_two_ends_share_the_name():
    rows = opening() + [
        frame(5, 4, "c2s", "attach", 0, name="A", handle=0, role="sender", snd_settle_mode="unsettled",
              target_address="/queue/a", initial_delivery_count=0),
        frame(6, 5, "c2s", "attach", 0, name="B", handle=1, role="receiver", source_address="/queue/b"),
        # the broker answers B first, with handle 0 (its own numbering): B, not A
        frame(7, 6, "s2c", "attach", 3, name="B", handle=0, role="sender", snd_settle_mode="settled"),
        frame(8, 7, "s2c", "attach", 3, name="A", handle=1, role="receiver", rcv_settle_mode="first"),
        frame(9, 8, "s2c", "flow", 3, handle=1, delivery_count=0, link_credit=5),  # broker's handle 1: A
        frame(10, 9, "c2s", "transfer", 0, handle=0, delivery_id=0, continuation=False, settled=False, more=False),
        frame(11, 10, "s2c", "detach", 3, handle=0, closed=True, error_condition="amqp:not-found",
              error_description="no queue"),
    ]
    f, s, h, *_ = derived(rows)
    t = h.table.set_index("name")
    assert t.loc["A", "client_role"] == "sender" and t.loc["A", "sender_direction"] == "c2s"
    assert t.loc["B", "client_role"] == "receiver" and t.loc["B", "sender_direction"] == "s2c"
    assert (t.loc["A", "client_handle"], t.loc["A", "broker_handle"]) == (0, 1)
    assert (t.loc["B", "client_handle"], t.loc["B", "broker_handle"]) == (1, 0)
    # settle modes: the sending end's snd, the receiving end's rcv
    assert t.loc["B", "snd_settle_mode"] == "settled" and t.loc["A", "rcv_settle_mode"] == "first"
    assert t.loc["B", "detach_error_condition"] == "amqp:not-found" and t.loc["B", "detach_error_side"] == "broker"
    a, b = t.loc["A", "link"], t.loc["B", "link"]
    # frames 5..11: attach A, attach B, broker attach B, broker attach A, flow (A), transfer (A), detach (B)
    assert h.of_frame[4:].tolist() == [a, b, b, a, a, a, b]


def test_a_link_attached_before_the_capture_is_its_handles_paired_by_elimination():
    # credit1_midstream(4): no begin, no attach; the client's flows and dispositions on channel 0,
    # handle 0; the broker's transfers and flows on channel 0, handle 1: one implicit session, one
    # implicit handle each way, only the broker's carrying transfers: one link, the broker its sender
    f, s, h, *_ = derived(credit1_midstream(4))
    assert len(s.table) == 1 and not s.table["begun"].iat[0]
    t = h.table
    assert len(t) == 1
    link = t.iloc[0]
    assert not link["attached"] and link["name"] is None
    assert (link["client_role"], link["sender_direction"]) == ("receiver", "s2c")
    assert (link["client_handle"], link["broker_handle"]) == (0, 1)
    # every flow and transfer (4 transfers, 4 client flows, 4 broker flows) is the link's; the
    # dispositions and the close are of no link
    handled = f["performative"].isin(["flow", "transfer"]).to_numpy(bool)
    assert handled.sum() == 12 and (h.of_frame[handled] == 0).all() and (h.of_frame[~handled] == -1).all()


def test_implicit_handles_in_two_sessions_are_not_paired():
    # the broker on channel 3, the client on 0: two implicit sessions (no begin pairs them), so
    # nothing ties the client's flows to the broker's transfers: two links, the client's of no role
    _, s, h, *_ = derived(credit1_midstream(4, broker_channel=3))
    assert len(s.table) == 2
    t = h.table.set_index("link")
    assert len(t) == 2
    roles = {(r.client_handle if not pd.isna(r.client_handle) else None,
              r.broker_handle if not pd.isna(r.broker_handle) else None):
             r.client_role if isinstance(r.client_role, str) else None for r in t.itertuples()}
    assert roles == {(None, 1): "receiver", (0, None): None}


def test_credit_of_a_link_attached_before_the_capture_is_known_from_the_first_grant():
    # credit1_midstream(4): the broker's first transfer (5 ms) comes before any flow: its credit is
    # unknown; the client's flow at 8 ms grants 1 (delivery-count taken from it), each later
    # transfer uses it: 3 of 4 transfers to zero, each refilled 3 ms later (the last one too)
    *_, c = derived(credit1_midstream(4))
    ev = c.events
    assert ev[ev["event"] == "transfer"]["credit"].tolist()[1:] == [0, 0, 0]
    assert pd.isna(ev[ev["event"] == "transfer"]["credit"].iat[0])
    link = c.links.iloc[0]
    assert link["transfers"] == 4 and link["transfers_to_zero"] == 3 and link["refills"] == 3
    assert link["flows_granted"] == 4 and link["flows_reported"] == 4
    assert c.refills["refill_gap_s"].round(6).tolist() == [0.003] * 3


# --- deliveries -----------------------------------------------------------------------------

def test_a_range_disposition_settles_deliveries_across_the_wrap_and_continuations_carry_no_new_delivery():
    # the broker sends 3 deliveries on one link, ids 2^32-2, 2^32-1, 0; the middle one in 2 frames
    # (a continuation); the client settles the first two with one range (accepted) and the third
    # with a released disposition; a role=receiver disposition from the broker speaks of the
    # client's deliveries (there are none), not of the broker's own delivery 0
    B = NEAR_WRAP
    rows = opening() + [
        frame(5, 4, "c2s", "attach", 0, name="L", handle=0, role="receiver"),
        frame(6, 5, "s2c", "attach", 3, name="L", handle=0, role="sender", initial_delivery_count=B),
        frame(7, 10, "s2c", "transfer", 3, handle=0, delivery_id=B, delivery_tag="aa", continuation=False,
              settled=False, more=False, payload_bytes=10, message_bytes=10, first_acquirer=True),
        frame(8, 11, "s2c", "transfer", 3, handle=0, delivery_id=u32(B + 1), delivery_tag="bb", continuation=False,
              settled=False, more=True, payload_bytes=7, first_acquirer=True),
        frame(9, 12, "s2c", "transfer", 3, handle=0, delivery_id=u32(B + 1), continuation=True, more=False,
              payload_bytes=3, message_bytes=10),
        frame(10, 13, "s2c", "transfer", 3, handle=0, delivery_id=0, delivery_tag="cc", continuation=False,
              settled=False, more=False, payload_bytes=5, message_bytes=5, first_acquirer=False),
        frame(11, 20, "c2s", "disposition", 0, role="receiver", first=B, last=u32(B + 1), settled=True,
              state="accepted"),
        frame(12, 21, "s2c", "disposition", 3, role="receiver", first=0, last=0, settled=True),
        frame(13, 30, "c2s", "disposition", 0, role="receiver", first=0, last=0, settled=True, state="released"),
    ]
    f, s, h, d, _ = derived(rows)
    t = d.table
    assert t["delivery_id"].tolist() == [B, B + 1, 0]
    assert t["frames"].tolist() == [1, 2, 1]
    assert t["size_bytes"].tolist() == [10, 10, 5]
    assert t["first_packet"].tolist() == [7, 8, 10] and t["last_packet"].tolist() == [7, 9, 10]
    assert t["settle_packet"].tolist() == [11, 11, 13]
    assert t["outcome"].tolist() == ["accepted", "accepted", "released"]
    assert t["disposition_covers"].tolist() == [2, 2, 1]  # first..last across the wrap: 2
    # the third was redelivered (first-acquirer false)
    assert t["redelivered"].tolist() == [False, False, True]
    # settled 20 ms − 10 ms and 20 − 12 (the last frame), 30 − 13
    np.testing.assert_allclose(t["settle_latency_s"], [0.010, 0.008, 0.017])
    # the broker's role=receiver disposition covers no client delivery (the client sent none)
    disp = d.dispositions
    assert disp["deliveries_seen"].tolist() == [2, 0, 1]
    # unsettled of the direction each speaks of: the broker's 3 (none settled yet); the client's
    # none; the broker's 3 less the 2 settled
    assert disp["unsettled_before"].tolist() == [3, 0, 1]


# --- credit ---------------------------------------------------------------------------------

def test_credit_one_at_a_time_reaches_zero_after_each_transfer_and_waits_a_refill_gap():
    # credit1_receiver(4): 4 deliveries; each transfer (10i+5 ms) uses the only credit (0 after it),
    # the client's flow 3 ms later grants 1 again (rdc + 1 − sdc = 1), the broker reports available
    f, s, h, d, c = derived(credit1_receiver(4))
    link = c.links.iloc[0]
    assert link["granted_credit_max"] == 1
    assert link["transfers"] == 4 and link["transfers_to_zero"] == 4 and link["transfers_without_credit"] == 0
    assert link["flows_granted"] == 5 and link["flows_reported"] == 4  # the first grant + one per delivery
    # credit known from the first flow (4.8 ms) to the capture's last frame (close, 45 ms): 40.2 ms;
    # at 0 from each transfer to the next grant: 4 × 3 ms
    assert abs(link["credit_tracked_s"] - 0.0402) < 1e-9
    assert abs(link["zero_credit_s"] - 0.012) < 1e-9
    r = c.refills
    assert r["refill_gap_s"].round(6).tolist() == [0.003] * 4
    assert r["next_transfer_s"].round(6).tolist()[:3] == [0.010] * 3 and np.isnan(r["next_transfer_s"].iat[3])
    # the broker's last report before each zero: available n−i−1 after delivery i−1 (none before the first)
    assert r["available"].tolist()[1:] == [3, 2, 1]
    # events: the sender's credit after each, across the delivery-count's wrap
    ev = c.events
    assert ev[ev["event"] == "transfer"]["credit"].tolist() == [0, 0, 0, 0]
    assert ev[ev["event"] == "granted"]["credit"].tolist() == [1] * 5
    assert ev["outstanding"].max() == 1


def test_a_grant_counts_transfers_in_flight():
    # the receiver grants link-credit 2 at delivery-count D; the sender has already sent 2 (its
    # delivery-count is D+2): 2 + D − (D + 2) = 0 credit, not 2
    B = NEAR_WRAP
    rows = opening() + [
        frame(5, 4, "c2s", "attach", 0, name="L", handle=0, role="receiver"),
        frame(6, 5, "s2c", "attach", 3, name="L", handle=0, role="sender", initial_delivery_count=B),
        frame(7, 6, "c2s", "flow", 0, handle=0, delivery_count=B, link_credit=2),
        frame(8, 7, "s2c", "transfer", 3, handle=0, delivery_id=B, continuation=False, more=False),
        frame(9, 8, "s2c", "transfer", 3, handle=0, delivery_id=u32(B + 1), continuation=False, more=False),
        frame(10, 9, "c2s", "flow", 0, handle=0, delivery_count=B, link_credit=2),  # written before it saw them
    ]
    *_, c = derived(rows)
    assert c.events["credit"].tolist() == [2, 1, 0, 0]


# --- session windows ------------------------------------------------------------------------

def test_the_remote_incoming_window_shrinks_per_transfer_frame():
    # client begin: incoming-window 2 for the broker's transfers, counted from the broker's
    # next-outgoing-id (2^32−2); the broker sends 3 transfer frames: window 2, 1, 0 → the third is
    # beyond it; at 0 from the second transfer (12 ms) to the last frame (20 ms): 8 ms
    B = NEAR_WRAP
    rows = [frame(1, 0, "c2s", "begin", 0, next_outgoing_id=0, incoming_window=2, outgoing_window=10),
            frame(2, 1, "s2c", "begin", 3, remote_channel=0, next_outgoing_id=B, incoming_window=10, outgoing_window=10)]
    rows += [frame(3 + i, 10 + 2 * i, "s2c", "transfer", 3, handle=0, delivery_id=u32(B + i), continuation=False,
                   more=False) for i in range(3)]
    rows.append(frame(6, 20, "c2s", "end", 0))
    f = frames(rows)
    w = windows_of(f, sessions_of(f).of_frame).set_index("direction")
    assert w.loc["s2c", "transfer_frames"] == 3
    assert w.loc["s2c", "transfers_beyond_window"] == 1
    assert w.loc["s2c", "window_min"] == -1
    assert abs(w.loc["s2c", "zero_window_s"] - 0.008) < 1e-9


def test_a_closure_of_the_brokers_window_by_its_flow_and_the_reopening():
    # alarm_publisher(): 5 client transfers at 10..14 ms (packets 8..12); the broker's flow at 20 ms
    # (packet 13) sets incoming-window 0: closed by a flow, the broker's window; its flow at 220 ms
    # (packet 14) reopens it: 0.2 s at 0; the client's next transfer 0.5 ms later (packet 15); the
    # last transfer before the close 6 ms before it
    f = frames(alarm_publisher())
    c = closures_of(f, sessions_of(f).of_frame)
    assert len(c) == 1
    x = c.iloc[0]
    assert (x["direction"], x["closed_side"], x["closed_by"]) == ("c2s", "broker", "flow")
    assert (x["close_packet"], x["reopen_packet"], x["resume_packet"]) == (13, 14, 15)
    assert abs(x["zero_s"] - 0.2) < 1e-9 and abs(x["resume_s"] - 0.0005) < 1e-9
    assert x["transfers_before"] == 5 and abs(x["last_transfer_before_s"] - 0.006) < 1e-9
    assert x["transfers_while_closed"] == 0
    # never reopened: it runs to the connection's last frame (the client's close at 500 ms)
    f = frames(alarm_publisher(reopen=False, end_ms=500))
    x = closures_of(f, sessions_of(f).of_frame).iloc[0]
    assert pd.isna(x["reopen_packet"]) and pd.isna(x["resume_packet"]) and abs(x["zero_s"] - 0.48) < 1e-9


def test_closures_of_the_clients_window_filled_by_the_brokers_transfers():
    # window_bound_consumer(3 rounds, window 3, 50 ms): per round the broker's third transfer
    # (t_r + 0.2 ms) takes the client's last room; the client's flow at t_r + 50 reopens it: 49.8 ms;
    # the broker resumes 10 ms later, except after the last round
    f = frames(window_bound_consumer())
    c = closures_of(f, sessions_of(f).of_frame)
    assert c["closed_by"].tolist() == ["transfer"] * 3 and set(c["closed_side"]) == {"client"}
    assert c["direction"].tolist() == ["s2c"] * 3
    assert c["transfers_before"].tolist() == [3, 6, 9]
    np.testing.assert_allclose(c["zero_s"], [0.0498] * 3, atol=1e-8)
    np.testing.assert_allclose(c["resume_s"].to_numpy(np.float64)[:2], [0.010, 0.010], atol=1e-8)
    assert pd.isna(c["resume_packet"].iat[2])
    # the windows table agrees: 3 × 49.8 ms at 0 for the broker's transfers, none beyond it
    w = windows_of(f, sessions_of(f).of_frame).set_index("direction")
    assert abs(w.loc["s2c", "zero_window_s"] - 3 * 0.0498) < 1e-8 and w.loc["s2c", "transfers_beyond_window"] == 0
