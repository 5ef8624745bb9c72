"""The amqp10 analyzer (amqpcap/analyzers/amqp10): its findings on hand-written scenarios
(tests/amqp10_scenarios.py, expected values counted by hand), the same result over slices of time
as at once, and, once the core gives `cap.amqp10_frames`, on the recorded fixtures (their
scenarios: fixtures/README.md stage 9, fixtures/record/record.sh's A10_* parameters, and tshark's
`amqp10_directions`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import amqpcap
from amqpcap.analyzers.amqp10 import Amqp10
from amqpcap.analyzers.amqp10.findings import MIN_DELIVERIES, PROMPT_S, SMALL_CREDIT, WAIT_SHARE
from amqpcap.engine.partitions import run_in_memory
from amqpcap.io.pieces import facts_of

from amqp10_scenarios import (alarm_publisher, credit1_midstream, credit1_receiver, credit_waiting_publisher, frame,
                              frames, opening, u32, window_bound_consumer, NEAR_WRAP)

FIX = Path(__file__).resolve().parents[2] / "fixtures"


@pytest.fixture(scope="module")
def host():
    """A capture to hang hand-written frames on (its connections name stream 0 and 1)."""
    return amqpcap.load(FIX / "amqp10.pcap")


def run(host, rows):
    recorded = host.amqp10_frames
    host.amqp10_frames = frames(rows)
    host.derived.clear()
    try:
        return run_in_memory(Amqp10(), host)
    finally:
        host.amqp10_frames = recorded
        host.derived.clear()


def by_id(result):
    return {f.id: f for f in result.findings}


def test_credit_starved_receiver_is_told_with_its_link_and_client_end(host):
    # 30 deliveries at credit 1, the broker reporting messages available: every transfer used the
    # last credit, each refill 3 ms (credit1_receiver's timing)
    r = run(host, credit1_receiver(30))
    f = by_id(r)["credit-starved"]
    assert f.severity == "warning"
    e = f.evidence
    assert e["link"] == "L" and e["client_end"] == "receiver"
    assert e["granted_credit_max"] == 1 and e["transfers"] == 30 and e["transfers_to_zero"] == 30
    assert abs(e["refill_gap_median_s"] - 0.003) < 1e-9
    assert abs(e["next_transfer_median_s"] - 0.010) < 1e-9
    assert e["available_max"] == 29 and e["refills_with_messages_waiting"] == 29  # all but the first
    assert e["single_dispositions"] == 30 and e["capture_cut"] is None
    assert e["filter"] == "tcp.stream eq 0 && amqp.performative in {19, 20, 21}"
    # one cause told once: not again as one disposition per message
    assert "settle-one-by-one" not in by_id(r)
    assert r.summary["amqp10"]["deliveries"] == 30 and r.summary["amqp10"]["outcomes"]["accepted"] == 30


def test_without_messages_waiting_it_is_a_note(host):
    r = run(host, credit1_receiver(MIN_DELIVERIES, available=False))
    assert by_id(r)["credit-starved"].severity == "info"


def test_too_few_deliveries_or_enough_credit_is_not_starved(host):
    assert "credit-starved" not in by_id(run(host, credit1_receiver(MIN_DELIVERIES - 1)))
    rows = [dict(r, link_credit=SMALL_CREDIT + 1) if r.get("link_credit") == 1 and r["direction"] == "c2s" else r
            for r in credit1_receiver(30)]
    # (credit 11 granted: the transfers no longer use the last credit)
    assert "credit-starved" not in by_id(run(host, rows))


def test_credit_starved_on_a_link_attached_before_the_capture(host):
    # credit1_midstream(30): credit1_receiver(30) without its opening, attaches and first flow; the
    # first transfer's credit is unknown (no grant seen yet), the other 29 use the last credit, each
    # refilled 3 ms later by the client's flow (29 refills); the broker's last report before zero i
    # (i ≥ 1) said n − i = 29..1 available: all 29 refills had messages waiting
    r = run(host, credit1_midstream(30))
    f = by_id(r)["credit-starved"]
    assert f.severity == "warning"
    e = f.evidence
    assert e["link"] is None and e["link_attach_seen"] is False and e["client_end"] == "receiver"
    assert e["granted_credit_max"] == 1 and e["transfers"] == 30 and e["transfers_to_zero"] == 29
    assert e["refills"] == 29 and abs(e["refill_gap_median_s"] - 0.003) < 1e-9
    assert e["available_max"] == 29 and e["refills_with_messages_waiting"] == 29
    assert e["capture_cut"] == "start"  # no open; the client's close is there
    assert "unnamed link (client handle 0, broker handle 1" in f.title and "name is unknown" in f.title
    assert "cuts the connection at its start" in f.title


def test_a_note_on_a_link_attached_before_the_capture_names_its_handles(host):
    # credit1_midstream(5) without its last disposition: delivery 4 is not settled at the end, on
    # the link the capture saw no attach of (its name unknown, not "None")
    rows = credit1_midstream(5)
    last = max(i for i, r in enumerate(rows) if r["performative"] == "disposition")
    f = by_id(run(host, rows[:last] + rows[last + 1:]))["unsettled-at-end"]
    assert f.evidence["unsettled"] == 1
    assert "unnamed link (client handle 0, broker handle 1" in f.title and "None" not in f.title


def test_not_credit_starved_when_nothing_ties_the_clients_flows_to_the_brokers_transfers(host):
    # the broker's frames on channel 3, the client's on 0, no begin: two sessions, two one-ended
    # links; the grants of credit 1 cannot be proven to be the broker's link's
    assert "credit-starved" not in by_id(run(host, credit1_midstream(30, broker_channel=3)))


def test_the_brokers_closed_window_blocks_the_publisher(host):
    # alarm_publisher(): the broker's window closed at 20 ms after 5 transfers, reopened at 220 ms,
    # the client's next transfer 0.5 ms later: one wait of 0.2 s; the connection's frames span
    # 0..229.5 ms (the 5 later transfers 220.5..224.5, the broker's range 225.5, the close 229.5):
    # 0.2 / 0.2295 = 87 % ≥ WAIT_SHARE: a warning
    f = by_id(run(host, alarm_publisher()))["session-window-closed"]
    assert f.severity == "warning"
    e = f.evidence
    assert e["closed_side"] == "broker" and e["client_channel"] == 0 and e["broker_channel"] == 3
    assert e["waits"] == 1 and abs(e["wait_total_s"] - 0.2) < 1e-9 and abs(e["wait_max_s"] - 0.2) < 1e-9
    assert abs(e["wait_share"] - 0.2 / 0.2295) < 1e-9 and abs(e["zero_window_s"] - 0.2) < 1e-9
    assert e["closed_by"] == {"flow": 1} and e["closed_at_end"] is False
    assert abs(e["resume_median_s"] - 0.0005) < 1e-9
    assert e["packets"] == [13] and e["reopen_packets"] == [14] and e["capture_cut"] is None
    assert e["filter"] == "tcp.stream eq 0 && amqp.performative in {17, 19, 20}"
    assert "the publisher was blocked" in f.title and "alarm" in f.advice and "rabbitmq-diagnostics alarms" in f.advice
    # the credit (1000) never ran out: no other cause told
    assert "publisher-waiting-for-credit" not in by_id(run(host, alarm_publisher()))


def test_a_closed_window_in_a_long_capture_is_a_note_and_one_closed_at_the_end_counts(host):
    # the same wait with the client's close at 10 s: 0.2 / 10 = 2 % < WAIT_SHARE
    assert 0.02 < WAIT_SHARE
    assert by_id(run(host, alarm_publisher(end_ms=10_000)))["session-window-closed"].severity == "info"
    # never reopened: closed by the broker's flow at 20 ms, the client's last transfer 6 ms before,
    # the close at 500 ms: 0.48 s closed, more than the 6 ms since its last transfer
    e = by_id(run(host, alarm_publisher(reopen=False, end_ms=500)))["session-window-closed"].evidence
    assert e["closed_at_end"] is True and abs(e["wait_total_s"] - 0.48) < 1e-9


def test_a_closed_window_the_sender_did_not_wait_on_is_not_told(host):
    # the client sent its next transfer 0.5 s after the reopening (> PROMPT_S): its own pace
    assert 0.5 > PROMPT_S
    assert "session-window-closed" not in by_id(run(host, alarm_publisher(resume_ms=500)))
    # it sent while the window was 0, 150 ms after the close (> PROMPT_S: not in flight when the
    # flow was written; a window violation): the window did not hold it
    assert 0.15 > PROMPT_S
    assert "session-window-closed" not in by_id(run(host, alarm_publisher(ignore_window=True)))
    # it had sent nothing before the window closed
    assert "session-window-closed" not in by_id(run(host, alarm_publisher(before=0)))


def test_the_clients_window_filled_stops_consumption(host):
    # window_bound_consumer(): 3 rounds; the broker's third transfer fills the client's window of
    # 3, the client's flow reopens it 49.8 ms later and the broker resumes 10 ms after that (rounds
    # 1 and 2; after round 3 it has nothing more: not a wait): 2 waits, 99.6 ms; the frames span
    # 0..195 ms: 51 %
    f = by_id(run(host, window_bound_consumer()))["session-window-closed"]
    e = f.evidence
    assert f.severity == "warning" and e["closed_side"] == "client"
    assert e["waits"] == 2 and abs(e["wait_total_s"] - 0.0996) < 1e-8
    assert abs(e["wait_share"] - 0.0996 / 0.195) < 1e-8
    assert e["closed_by"] == {"transfer": 2} and abs(e["resume_median_s"] - 0.010) < 1e-8
    assert "consumption stopped" in f.title and "incoming window" in f.advice


def test_a_publisher_waiting_for_credit(host):
    # credit_waiting_publisher(4 rounds, 2 credit per grant): per round the client's second transfer
    # (t_r + 0.4 ms) uses the last credit; the next grant comes at t_r + 10 (wait 9.6 ms) and the
    # client sends 0.2 ms after it; rounds 0..2 are waits (3 × 9.6 ms = 28.8 ms); round 3's zero is
    # refilled by a grant the client never uses (it had no more to send): not a wait. Frames span
    # 0..55 ms: 52 %; zero packets: the second transfers of rounds 0..2 (9, 13, 17)
    f = by_id(run(host, credit_waiting_publisher()))["publisher-waiting-for-credit"]
    assert f.severity == "warning"
    e = f.evidence
    assert e["link"] == "P" and e["link_attach_seen"] is True and e["client_end"] == "sender"
    assert e["waits"] == 3 and abs(e["wait_median_s"] - 0.0096) < 1e-8 and abs(e["wait_max_s"] - 0.0096) < 1e-8
    assert abs(e["wait_total_s"] - 0.0288) < 1e-8 and abs(e["wait_share"] - 0.0288 / 0.055) < 1e-7
    assert e["transfers"] == 8 and e["transfers_to_zero"] == 4 and e["flows_granted"] == 5
    assert e["granted_credit_median"] == 2 and e["granted_credit_max"] == 2
    assert e["packets"] == [9, 13, 17] and e["waits_told_as_window_closed"] == 0
    assert e["filter"] == "tcp.stream eq 0 && amqp.performative in {19, 20}"


def test_no_credit_wait_without_more_to_send_or_when_the_window_tells_it(host):
    # one round: its zero is refilled by a grant the client never uses
    assert "publisher-waiting-for-credit" not in by_id(run(host, credit_waiting_publisher(rounds=1)))
    # the client sends 300 ms after each grant (> PROMPT_S): its own pace, not a wait
    assert "publisher-waiting-for-credit" not in by_id(run(host, credit_waiting_publisher(resume_ms=300)))
    # the broker's window also closed (t_r + 3 ms) over each zero-credit stretch and reopened with
    # the grant: one cause, told once, as the closed window
    r = by_id(run(host, credit_waiting_publisher(alarm=True)))
    assert "publisher-waiting-for-credit" not in r
    assert r["session-window-closed"].evidence["waits"] == 3


def _batch_receiver(n: int, outcome=lambda i: "accepted", first_acquirer=lambda i: True):
    """Credit 1000 granted once; the broker sends n deliveries 1 ms apart, then the client settles
    each with its own disposition 1 ms apart, after all have come (all n unsettled at each)."""
    rows = opening() + [frame(5, 4, "c2s", "attach", 0, name="L", handle=0, role="receiver"),
                        frame(6, 5, "s2c", "attach", 3, name="L", handle=0, role="sender",
                              initial_delivery_count=NEAR_WRAP),
                        frame(7, 6, "c2s", "flow", 0, handle=0, delivery_count=NEAR_WRAP, link_credit=1000)]
    for i in range(n):
        rows.append(frame(8 + i, 10 + i, "s2c", "transfer", 3, handle=0, delivery_id=u32(NEAR_WRAP + i),
                          continuation=False, more=False, settled=False, payload_bytes=10, message_bytes=10,
                          first_acquirer=first_acquirer(i)))
    for i in range(n):
        rows.append(frame(8 + n + i, 10 + n + i, "c2s", "disposition", 0, role="receiver",
                          first=u32(NEAR_WRAP + i), last=u32(NEAR_WRAP + i), settled=True, state=outcome(i)))
    return rows


def test_one_disposition_per_message_where_ranges_could_settle_many(host):
    # 100 deliveries, 100 single dispositions; when disposition i is sent 100 − i are unsettled:
    # median 50.5
    f = by_id(run(host, _batch_receiver(100)))["settle-one-by-one"]
    assert f.severity == "info"
    assert f.evidence["dispositions"] == 100 and f.evidence["single_dispositions"] == 100
    assert f.evidence["unsettled_median"] == 50.5
    assert "settle-one-by-one" not in by_id(run(host, _batch_receiver(99)))


def test_rejected_and_released_outcomes_with_redeliveries(host):
    # 30 deliveries: i % 6 == 1 rejected (5), i % 6 in {3, 5} released (10), the rest accepted;
    # deliveries 20..29 came again (first-acquirer false: 10 redelivered)
    def outcome(i):
        return "rejected" if i % 6 == 1 else "released" if i % 6 in (3, 5) else "accepted"

    r = run(host, _batch_receiver(30, outcome, lambda i: i < 20))
    f = by_id(r)["delivery-outcomes"]
    assert f.severity == "warning"
    assert (f.evidence["rejected"], f.evidence["released"], f.evidence["modified"]) == (5, 10, 0)
    assert f.evidence["redelivered"] == 10 and f.evidence["deliveries"] == 30
    assert r.summary["amqp10"]["outcomes"] == {"accepted": 15, "rejected": 5, "released": 10, "modified": 0}


def test_errors_are_classified_by_condition(host):
    rows = _batch_receiver(1, lambda i: "modified")
    rows.append(frame(20, 40, "s2c", "end", 3, error_condition="amqp:invalid-field",
                      error_description="Unrecognised state"))
    f = by_id(run(host, rows))["closed-with-error"]
    assert f.severity == "warning"
    assert f.evidence["condition"] == "amqp:invalid-field" and f.evidence["side"] == "broker"
    assert "refused a modified outcome (packet 9)" in f.evidence["why"]
    idle = opening() + [frame(5, 10, "s2c", "close", 0, error_condition="amqp:resource-limit-exceeded",
                              error_description="no frame received from client within idle timeout threshold")]
    e = by_id(run(host, idle))["closed-with-error"].evidence
    assert e["why"].startswith("the broker timed out the client")
    assert e["conditions"] == {"amqp:resource-limit-exceeded": 1}


def test_notes_unsettled_at_the_end_and_presettled(host):
    rows = _batch_receiver(3)[:-3]  # the 3 deliveries, none settled
    f = by_id(run(host, rows))["unsettled-at-end"]
    assert f.severity == "info" and f.evidence["unsettled_total"] == 3
    assert f.evidence["capture_cut"] == "end"  # no close in the rows
    pre = opening() + [frame(5, 4, "c2s", "attach", 0, name="P", handle=0, role="sender", snd_settle_mode="settled",
                             initial_delivery_count=0),
                       frame(6, 5, "s2c", "attach", 3, name="P", handle=0, role="receiver"),
                       frame(7, 6, "s2c", "flow", 3, handle=0, delivery_count=0, link_credit=100)]
    pre += [frame(8 + i, 7 + i, "c2s", "transfer", 0, handle=0, delivery_id=i, continuation=False, more=False,
                  settled=True) for i in range(5)]
    r = run(host, pre)
    assert [f.id for f in r.findings] == ["presettled-sender"]
    assert r.findings[0].severity == "info" and r.findings[0].evidence["settled_at_send"] == 5
    assert r.findings[0].evidence["client_end"] == "sender"


def test_the_tables_of_a_healthy_link(host):
    r = run(host, _batch_receiver(3))
    s = r.tables["settlement"].iloc[0]
    assert s["twin"] == "deliver-ack" and s["deliveries"] == 3 and s["unsettled"] == 0
    # deliveries at 10, 11, 12 ms; settled at 13, 14, 15 ms: 3 ms each
    assert abs(s["latency_p50_s"] - 0.003) < 1e-9
    assert r.findings == []


def test_slices_of_time_give_the_whole_result(host):
    """The step over the frames cut at any packet, one slice after the other, gives the result
    of one step over them all (the state gathers the partition's frames)."""
    rows = credit1_receiver(30) + [dict(r, stream=1) for r in _batch_receiver(30, lambda i: "released")]
    rows.sort(key=lambda r: r["packet"])
    whole = run(host, rows)
    f = frames(rows)
    a, facts = Amqp10(), facts_of(host)
    for cut_every in (1, 7, 40):
        state = a.start(facts)
        packets = f["packet"].to_numpy()
        edges = list(range(int(packets.min()), int(packets.max()) + 1, cut_every)) + [int(packets.max()) + 1]
        for lo, hi in zip(edges[:-1], edges[1:]):
            piece = amqpcap.io.pieces.time_slice(host, lo, hi)
            piece.amqp10_frames = f[(packets >= lo) & (packets < hi)].reset_index(drop=True)
            state = a.step(state, piece, facts, hi > packets.max())
        got = a.finish(a.close(state, host, facts), host, facts)
        assert json.dumps(got.summary) == json.dumps(whole.summary)
        assert [x.to_json() for x in got.findings] == [x.to_json() for x in whole.findings]
        for name in whole.tables:
            pd.testing.assert_frame_equal(got.tables[name], whole.tables[name], check_exact=True, obj=name)


# --- the recorded fixtures, once the core gives the table ----------------------------------

def fixture(name: str):
    cap = amqpcap.load(FIX / name)
    return cap, json.loads((FIX / f"{name}.tshark.json").read_text())


def warnings_of(result):
    return [f for f in result.findings if f.severity in ("warning", "critical")]


def test_credit1_fixture_is_credit_starved():
    # record.sh: 200 messages loaded, the client grants link-credit 1 at attach and after each
    cap, facts = fixture("amqp10-credit1.pcap")
    r = run_in_memory(Amqp10(), cap)
    f = by_id(r)["credit-starved"]
    assert f.severity == "warning"  # the broker's flows report available > 0
    s2c = facts["amqp10_directions"]["0"]["s2c"]
    assert f.evidence["transfers"] == s2c["transfers"] == 200
    assert f.evidence["granted_credit_max"] == 1
    assert f.evidence["transfers_to_zero"] == 200
    assert f.evidence["link"] == "amqpcap-a10-credit1-/queue/amqpcap-a10-credit1"
    assert f.subjects[0]["connection"] == "amqpcap-a10-credit1"
    assert "settle-one-by-one" not in by_id(r)
    c2s = facts["amqp10_directions"]["0"]["c2s"]
    assert r.summary["amqp10"]["settled_by_disposition"] == c2s["dispositions_single"] == 200


def test_midstream_fixture_is_credit_starved_on_an_unnamed_link():
    # fixtures/README: the tail of amqp10-credit1.pcap from the broker's transfer of delivery 100:
    # no open, begin or attach; 100 transfers, 99 client flows with link-credit 1; the client's
    # first frame is such a flow, so the credit is known before the first transfer is decoded
    # (the core completes it with packet 4) and every transfer uses the last credit
    cap, facts = fixture("amqp10-midstream.pcap")
    r = run_in_memory(Amqp10(), cap)
    f = by_id(r)["credit-starved"]
    c2s, s2c = facts["amqp10_directions"]["0"]["c2s"], facts["amqp10_directions"]["0"]["s2c"]
    assert f.severity == "warning"
    assert f.evidence["transfers"] == f.evidence["transfers_to_zero"] == s2c["transfers"] == 100
    assert f.evidence["granted_credit_max"] == max(int(k) for k in c2s["flow_link_credit"]) == 1
    assert f.evidence["refills"] == c2s["flow_link_credit"]["1"] == 99
    assert f.evidence["link"] is None and f.evidence["link_attach_seen"] is False
    assert f.evidence["capture_cut"] == "start" and "name is unknown" in f.title
    assert "settle-one-by-one" not in by_id(r)


def test_outcomes_fixture():
    cap, facts = fixture("amqp10-outcomes.pcap")
    r = run_in_memory(Amqp10(), cap)
    f = by_id(r)["delivery-outcomes"]
    d = facts["amqp10_directions"]["0"]
    # the scenario: 5 rejected, 10 released, the 10 released ones redelivered with first-acquirer false
    assert (f.evidence["rejected"], f.evidence["released"]) == (5, 10)
    assert f.evidence["redelivered"] == d["s2c"]["transfers_first_acquirer_false"] == 10
    # the second connection's receiver settled its one message as modified: one more link, in words
    assert f.evidence["links_with_this_finding"] == 2 and f.title.endswith("; 1 more link"), f.title
    e = by_id(r)["closed-with-error"]
    assert e.evidence["condition"] == "amqp:invalid-field" and e.evidence["side"] == "broker"
    assert e.subjects[0]["stream"] == 1 and "modified" in e.evidence["why"]


@pytest.mark.parametrize("name", ["amqp10.pcap", "amqp10-multiframe.pcap", "amqp10-idle.pcap"])
def test_healthy_fixtures_are_silent(name):
    cap, _ = fixture(name)
    assert warnings_of(run_in_memory(Amqp10(), cap)) == []


def test_presettled_fixture_is_a_note_only():
    cap, facts = fixture("amqp10-presettled.pcap")
    r = run_in_memory(Amqp10(), cap)
    assert [f.id for f in r.findings] == ["presettled-sender"] and r.findings[0].severity == "info"
    assert r.findings[0].evidence["settled_at_send"] == facts["amqp10_directions"]["0"]["c2s"]["transfers_settled"] == 50


def test_multiframe_deliveries_are_whole_messages():
    cap, _ = fixture("amqp10-multiframe.pcap")
    s = run_in_memory(Amqp10(), cap).tables["settlement"]
    # the scenario's sizes: 65,536 and 150,000 bytes, each way, each accepted
    assert s["deliveries"].tolist() == [2, 2] and s["accepted"].tolist() == [2, 2]
