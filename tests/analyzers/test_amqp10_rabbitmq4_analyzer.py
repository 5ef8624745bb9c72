"""The `amqp10` analyzer on RabbitMQ 4's behaviours crafted by tests/amqp10_rabbitmq4.py (the
recorded fixtures come from RabbitMQ 3.10, which shows none of them): healthy credit and window
top-ups raise nothing; an alarm's closed window is told as the publisher blocked; a window
violation is told as the client library's session accounting.
Expected values come from each scenario's parameters."""

from __future__ import annotations

import pytest

import crafting
import amqp10_rabbitmq4 as r4
from amqpcap.analyzers.amqp10 import Amqp10
from amqpcap.engine.partitions import run_in_memory


def analyze(path):
    return run_in_memory(Amqp10(), crafting.load(path))


@pytest.mark.parametrize("build", [r4.credit_170_capture, r4.window_400_capture, r4.near_wrap_capture],
                         ids=lambda f: f.__name__)
def test_rabbitmq4_flow_control_at_work_raises_nothing(tmp_path, build):
    r = analyze(build(tmp_path / "x.pcap"))
    assert r.findings == [], [f.title for f in r.findings]


def test_the_credit_table_shows_170_topped_up(tmp_path):
    messages = 300
    r = analyze(r4.credit_170_capture(tmp_path / "a.pcap", messages=messages))
    c = r.tables["credit"].iloc[0]
    assert (c["name"], c["client_role"]) == ("pub", "sender")
    assert c["granted_credit_max"] == r4.MAX_LINK_CREDIT and c["granted_credit_median"] == r4.MAX_LINK_CREDIT
    assert c["flows_granted"] == 1 + messages // (r4.MAX_LINK_CREDIT // 2) and c["transfers"] == messages
    assert c["transfers_to_zero"] == c["transfers_without_credit"] == 0 and c["zero_credit_share"] == 0
    assert r.tables["settlement"].iloc[0]["accepted"] == messages


@pytest.mark.parametrize("in_flight", [0, 3])
def test_an_alarm_closing_the_window_is_told_as_the_publisher_blocked(tmp_path, in_flight):
    # the alarm's window 0 holds the client's last `after` messages for alarm_s; `in_flight` of them
    # were on their way when the flow was written (the capture shows them after it), and the
    # client waits from then on: the one finding is the closed window, the credit never ran out
    alarm_s = 2.5
    r = analyze(r4.alarm_window_closed_capture(tmp_path / "c.pcap", alarm_s=alarm_s, in_flight=in_flight))
    assert [f.id for f in r.findings] == ["session-window-closed"], [f.title for f in r.findings]
    f = r.findings[0]
    e = f.evidence
    assert (e["closed_side"], e["waits"], e["closed_at_end"]) == ("broker", 1, False)
    assert e["closed_by"] == {"flow": 1}
    assert e["zero_window_s"] == pytest.approx(alarm_s, abs=1e-9)
    assert f.severity == "warning" and "the publisher was blocked" in f.title
    assert "rabbitmq-diagnostics alarms" in f.advice


def test_a_sender_going_on_past_a_closed_window_is_not_told_as_held(tmp_path):
    # the window violation capture: the client goes on sending for 401 transfers after the
    # alarm's flow, long past a round trip: it was not held, the error tells what happened
    r = analyze(r4.window_violation_capture(tmp_path / "e.pcap", before=10))
    assert "session-window-closed" not in {f.id for f in r.findings}


def test_the_sessions_table_shows_the_alarm(tmp_path):
    r = analyze(r4.alarm_window_closed_capture(tmp_path / "c.pcap", alarm_s=1.25))
    s = r.tables["sessions"].iloc[0]
    assert s["c2s_window_min"] == 0 and s["c2s_zero_window_s"] == pytest.approx(1.25, abs=1e-9)
    assert s["c2s_transfers_beyond_window"] == 0


def test_a_window_violation_names_the_clients_session_accounting(tmp_path):
    r = analyze(r4.window_violation_capture(tmp_path / "e.pcap", before=10))
    f = {x.id: x for x in r.findings}["closed-with-error"]
    e = f.evidence
    assert (e["condition"], e["performative"], e["side"]) == (r4.WINDOW_VIOLATION, "end", "broker")
    assert e["description"] == "incoming window violation (tolerated excess tranfers: 400)"  # RabbitMQ's words, sic
    beyond = r4.MAX_INCOMING_WINDOW + 1  # the alarm's margin of 400, then one more
    assert e["why"].startswith(f"the client sent {beyond} transfer frames while the broker's session "
                               "incoming-window was 0")
    assert "client's AMQP 1.0 library is at fault, not the application's code" in e["why"]
    assert "the broker ended the session with amqp:session:window-violation" in f.title
    assert r.tables["sessions"].iloc[0]["c2s_transfers_beyond_window"] == beyond


def test_a_flow_ahead_of_the_brokers_ids_names_the_clients_count_of_them(tmp_path):
    r = analyze(r4.flow_ahead_capture(tmp_path / "f.pcap", next_incoming_id=0))
    e = {x.id: x for x in r.findings}["closed-with-error"].evidence
    assert (e["condition"], e["side"]) == (r4.WINDOW_VIOLATION, "broker")
    assert e["description"] == f"next-incoming-id from FLOW (0) leads next-outgoing-id ({r4.UINT_MAX - 3})"
    assert e["why"].startswith("the client's flow gave a next-incoming-id ahead of the broker's next-outgoing-id: "
                               "the client's AMQP 1.0 library counts the broker's transfer ids wrongly")
