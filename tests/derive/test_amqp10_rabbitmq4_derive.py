"""The AMQP 1.0 derivations (credit, windows, deliveries) on RabbitMQ 4's behaviours that the
recorded fixtures (RabbitMQ 3.10) do not show, crafted by tests/amqp10_rabbitmq4.py. Expected
values come from each scenario's parameters and RabbitMQ 4's rules (that module's docstring:
credit 170 topped up at 85, window 400 topped up at 200, ids from near 2^32), counted by hand."""

from __future__ import annotations

import pandas as pd
import pytest

import crafting
import amqp10_rabbitmq4 as r4
from amqpcap.derive.amqp10.credit import credit
from amqpcap.derive.amqp10.deliveries import deliveries
from amqpcap.derive.amqp10.sessions import sessions
from amqpcap.derive.amqp10.windows import windows

U = r4.UINT_MAX


def window_of(cap, direction: str) -> pd.Series:
    w = windows(cap)
    return w[w["direction"] == direction].iloc[0]


def events(cap, link: int) -> pd.DataFrame:
    e = credit(cap).events
    return e[e["link"] == link].reset_index(drop=True)


# --- a. link-credit 170 ------------------------------------------------------------------

def test_credit_170_is_granted_at_attach_and_again_at_85(tmp_path):
    messages, lag = 300, 2
    cap = crafting.load(r4.credit_170_capture(tmp_path / "a.pcap", messages=messages, lag=lag))
    e = events(cap, 0)
    grants = e[e["event"] == "granted"]
    # at attach, then after deliveries 85, 170, 255 (credit 170 − 85 = 85 = 170 div 2)
    assert len(grants) == 1 + messages // 85 == 4
    assert list(grants["link_credit"]) == [170] * 4
    assert list(grants["delivery_count"]) == [r4.u32(r4.CLIENT_INITIAL_DELIVERY_COUNT + 85 * k) for k in range(4)]
    # each top-up reaches the capture `lag` deliveries late: those are in flight, so the credit is 170 − lag
    assert list(grants["credit"]) == [170] + [170 - lag] * 3
    t = e[e["event"] == "transfer"]
    assert len(t) == messages and t["credit"].min() == 85 - lag
    assert list(t["credit"].iloc[:3]) == [169, 168, 167]
    link = credit(cap).links.iloc[0]
    assert (link["granted_credit_max"], link["transfers_without_credit"], link["transfers_to_zero"]) == (170, 0, 0)
    assert link["zero_credit_s"] == 0 and link["refills"] == 0


# --- b. session window 400 ---------------------------------------------------------------

def test_window_400_is_topped_up_at_200_frames_not_messages(tmp_path):
    messages, per, lag = 250, 2, 3
    cap = crafting.load(r4.window_400_capture(tmp_path / "b.pcap", messages=messages, frames_per_message=per, lag=lag))
    w = window_of(cap, "c2s")
    assert w["transfer_frames"] == messages * per
    # 400 at begin; 200 frames later the broker's flow puts it back to 400, seen `lag` frames late
    assert w["window_min"] == 400 - 200 - lag
    assert w["zero_window_s"] == 0 and w["transfers_beyond_window"] == 0
    f = cap.amqp10_frames
    session_flows = f[(f["performative"] == "flow") & f["handle"].isna() & (f["direction"] == "s2c")]
    assert list(session_flows["incoming_window"]) == [400] * (messages * per // 200)
    assert list(session_flows["next_incoming_id"]) == [r4.u32(r4.CLIENT_INITIAL_TRANSFER_ID + 200 * k)
                                                       for k in (1, 2)]
    # the link credit counts messages, not frames: top-ups after 85 and 170 messages only
    assert credit(cap).links.iloc[0]["flows_granted"] == 1 + messages // 85 == 3


# --- c. window 0 under an alarm ------------------------------------------------------------

def test_an_alarm_closes_the_window_for_its_duration(tmp_path):
    before, after, alarm_s = 30, 20, 2.5
    cap = crafting.load(r4.alarm_window_closed_capture(tmp_path / "c.pcap", before=before, after=after,
                                                       alarm_s=alarm_s))
    w = window_of(cap, "c2s")
    assert w["transfer_frames"] == before + after
    assert w["window_min"] == 0 and w["transfers_beyond_window"] == 0
    assert w["zero_window_s"] == pytest.approx(alarm_s, abs=1e-9)
    # the client had link credit all along (170 − 30): the window, not the credit, held it
    link = credit(cap).links.iloc[0]
    assert link["zero_credit_s"] == 0 and link["transfers_without_credit"] == 0


def test_an_alarm_window_is_zero_from_the_alarms_flow_to_the_clearing_one(tmp_path):
    cap = crafting.load(r4.alarm_window_closed_capture(tmp_path / "c.pcap", alarm_at_ms=200.0, alarm_s=0.75))
    f = cap.amqp10_frames
    flows = f[(f["performative"] == "flow") & f["handle"].isna()]
    assert list(flows["incoming_window"]) == [0, 400]
    gap = (flows["ts"].iat[1] - flows["ts"].iat[0]).total_seconds()
    assert gap == pytest.approx(0.75) == pytest.approx(window_of(cap, "c2s")["zero_window_s"])


def test_transfers_in_flight_when_the_alarm_closed_the_window_count_beyond_it(tmp_path):
    # seen at the broker, 3 transfers the client wrote before it read the alarm's flow come after
    # it: the window as the wire states it is below 0 for them (RabbitMQ tolerates 400)
    cap = crafting.load(r4.alarm_window_closed_capture(tmp_path / "c.pcap", alarm_s=1.0, in_flight=3))
    w = window_of(cap, "c2s")
    assert (w["transfers_beyond_window"], w["window_min"]) == (3, -3)
    assert w["zero_window_s"] == pytest.approx(1.0, abs=1e-9)


# --- d. ids near 2^32 ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def wrap(tmp_path_factory):
    return crafting.load(r4.near_wrap_capture(tmp_path_factory.mktemp("d") / "d.pcap", published=6, confirm_every=3,
                                              consumed=7, consumer_credit=10))


def test_deliveries_are_matched_to_dispositions_across_the_wrap(wrap):
    d = deliveries(wrap).table
    pub = d[d["direction"] == "c2s"]
    assert list(pub["delivery_id"]) == [U, 0, 1, 2, 3, 4]
    assert pub["settle_packet"].notna().all() and (pub["outcome"] == "accepted").all()
    # the broker's ranges: 2^32 − 1 .. 1 (crossing 0), then 2 .. 4
    assert list(pub["disposition_covers"]) == [3] * 6
    disp = deliveries(wrap).dispositions
    broker = disp[disp["direction"] == "s2c"]
    assert list(zip(broker["first"], broker["last"])) == [(U, 1), (2, 4)]
    assert list(broker["covers"]) == [3, 3] and list(broker["deliveries_seen"]) == [3, 3]
    sub = d[d["direction"] == "s2c"]
    assert list(sub["delivery_id"]) == list(range(7)) and (sub["outcome"] == "accepted").all()
    assert list(sub["disposition_covers"]) == [7] * 7


def test_credit_and_windows_count_across_the_wrap(wrap):
    pub, sub = events(wrap, 0), events(wrap, 1)
    # the publisher's delivery-count 2^32 − 3 wraps after 3 deliveries; the broker's 2^32 − 5 after 5
    assert list(pub["credit"]) == [170, 169, 168, 167, 166, 165, 164]
    assert list(sub["credit"]) == [10, 9, 8, 7, 6, 5, 4, 3]
    links = credit(wrap).links.set_index("link")
    assert list(links["transfers_without_credit"]) == [0, 0]
    # transfer ids from 2^32 − 2 (client) and 2^32 − 4 (broker) wrap too: windows 400 − 6 and 200 − 7
    assert window_of(wrap, "c2s")["window_min"] == 400 - 6
    assert window_of(wrap, "s2c")["window_min"] == 200 - 7
    assert window_of(wrap, "c2s")["transfers_beyond_window"] == window_of(wrap, "s2c")["transfers_beyond_window"] == 0


# --- e. a window violation --------------------------------------------------------------

def test_the_window_violation_ends_the_session_after_400_in_flight(tmp_path):
    cap = crafting.load(r4.window_violation_capture(tmp_path / "e.pcap", before=10))
    w = window_of(cap, "c2s")
    # an alarm closes the window and tolerates 400 transfers beyond it; the 401st ends the session
    assert w["transfers_beyond_window"] == r4.MAX_INCOMING_WINDOW + 1
    assert w["transfer_frames"] == 10 + r4.MAX_INCOMING_WINDOW + 1
    s = sessions(cap).table.iloc[0]
    assert s["end_error_condition"] == "amqp:session:window-violation" and s["end_error_side"] == "broker"
