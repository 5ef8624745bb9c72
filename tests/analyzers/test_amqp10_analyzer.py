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
from amqpcap.analyzers.amqp10.findings import MIN_DELIVERIES, SMALL_CREDIT
from amqpcap.engine.partitions import run_in_memory
from amqpcap.io.pieces import facts_of

from amqp10_scenarios import credit1_receiver, frame, frames, opening, u32, NEAR_WRAP

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


def test_outcomes_fixture():
    cap, facts = fixture("amqp10-outcomes.pcap")
    r = run_in_memory(Amqp10(), cap)
    f = by_id(r)["delivery-outcomes"]
    d = facts["amqp10_directions"]["0"]
    # the scenario: 5 rejected, 10 released, the 10 released ones redelivered with first-acquirer false
    assert (f.evidence["rejected"], f.evidence["released"]) == (5, 10)
    assert f.evidence["redelivered"] == d["s2c"]["transfers_first_acquirer_false"] == 10
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
