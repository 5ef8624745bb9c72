"""AMQP 1.0's own mechanisms, one fixture each (issue 50; record.sh stage 9: RabbitMQ 3.10's
rabbitmq_amqp1_0 plugin and Debian's python3-qpid-proton): credit 1 at a time, pre-settled sends,
transfers over many frames, rejected/released/modified outcomes, empty frames on an idle
connection, and a capture that starts in the middle of a connection.

Two kinds of checks:
- what amqpcap tells today about these connections (protocol 1.0 where the header is in the file,
  as many frames as tshark counts, every stream byte decoded), against the `.tshark.json` facts;
- that the facts themselves (`amqp10_directions`, written by fixtures/record/tshark_facts.py from
  tshark's PDML) show what each scenario is about, against the scenario's parameters in
  fixtures/record/record.sh and what the client printed (its `.notes.txt`), so a re-recording
  that no longer shows it fails here, before any analyzer relies on it.
"""

from __future__ import annotations

import ast
import json
import math
import re
from pathlib import Path

import pytest

import amqpcap

from accounting import assert_byte_accounting

FIX = Path(__file__).resolve().parents[2] / "fixtures"
RECORD_SH = (FIX / "record" / "record.sh").read_text()
SCENARIOS = ["credit1", "presettled", "multiframe", "outcomes", "idle", "midstream"]
PERF = {"open": "16", "begin": "17", "attach": "18", "flow": "19", "transfer": "20", "disposition": "21",
        "detach": "22", "end": "23", "close": "24"}


def param(name: str) -> str:
    """A scenario parameter as record.sh sets it (`A10_...=value`)."""
    m = re.search(rf"^{name}=(\S+)", RECORD_SH, re.M)
    assert m, name
    return m.group(1)


def facts(scenario: str) -> dict:
    return json.loads((FIX / f"amqp10-{scenario}.pcap.tshark.json").read_text())


def notes(scenario: str) -> str:
    return (FIX / f"amqp10-{scenario}.notes.txt").read_text()


def by_container(f: dict, container_id: str) -> dict:
    """The stream whose client open carries this container id."""
    [st] = [st for st in f["amqp10_directions"].values()
            if (st["c2s"]["open"] or {}).get("container_id") == container_id]
    return st


_caps: dict[str, object] = {}


def load(scenario: str):
    if scenario not in _caps:
        _caps[scenario] = amqpcap.load(FIX / f"amqp10-{scenario}.pcap")
    return _caps[scenario]


# --- the facts agree with themselves ---------------------------------------------------------

@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_two_tshark_counts_agree(scenario):
    """tshark's fields output (amqp10_streams) and its PDML (amqp10_directions) count the same
    frames and performatives, and the files are small."""
    f = facts(scenario)
    assert (FIX / f["capture"]).stat().st_size < 1_000_000
    assert set(f["amqp10_streams"]) == set(f["amqp10_directions"])
    for s, whole in f["amqp10_streams"].items():
        d = f["amqp10_directions"][s]
        assert d["c2s"]["frames"] + d["s2c"]["frames"] == whole["frames"]
        both = {k: d["c2s"]["performatives"].get(k, 0) + d["s2c"]["performatives"].get(k, 0)
                for k in whole["performatives"]}
        assert both == whole["performatives"]
    assert not [n for n in f.get("tshark_notes", []) if "consistency" in n]


# --- what amqpcap tells today ----------------------------------------------------------------

@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s != "midstream"])
def test_amqpcap_frames_each_amqp10_connection_as_tshark_does(scenario):
    f, cap = facts(scenario), load(scenario)
    c = cap.connections.set_index("stream")
    for s, d in f["amqp10_directions"].items():
        # the scenario's connections all start in the file: SASL header, then AMQP header
        assert d["c2s"]["protocol_headers"] == d["s2c"]["protocol_headers"] == ["3", "0"]
        row = c.loc[int(s)]
        assert row["protocol"] == "1.0" and row["protocol_header_seen"]
        assert row["frames"] == f["amqp10_streams"][s]["frames"]
        for x in ("c2s", "s2c"):
            assert row[f"{x}_bytes_skipped"] == 0
            assert row[f"{x}_bytes_decoded"] == row[f"{x}_stream_bytes"] > 0
            if f["tcp_analysis"]["retransmission"] == 0:
                assert row[f"{x}_stream_bytes"] == d[x]["tcp_payload_bytes"]
    assert set(c.index) == {int(s) for s in f["amqp10_directions"]}
    assert len(cap.frames) == 0, "no AMQP 0-9-1 frame in these captures"
    assert len(cap.anomalies) == 0
    assert_byte_accounting(cap)


def test_amqpcap_accounts_for_every_byte_of_the_midstream_capture():
    f, cap = facts("midstream"), load("midstream")
    [(s, d)] = f["amqp10_directions"].items()
    row = cap.connections.set_index("stream").loc[int(s)]
    assert not row["protocol_header_seen"]
    for x in ("c2s", "s2c"):
        # tcp.len counts a retransmitted segment twice, the stream's byte span once
        assert 0 < row[f"{x}_stream_bytes"] <= d[x]["tcp_payload_bytes"]
    assert_byte_accounting(cap)


def test_amqpcap_knows_the_midstream_connection_speaks_amqp10():
    """Cut after its protocol headers, the connection is told by its frames' structure
    (rust/src/proto/detect.rs) and every frame tshark sees is decoded."""
    f, cap = facts("midstream"), load("midstream")
    [s] = f["amqp10_directions"]
    row = cap.connections.set_index("stream").loc[int(s)]
    assert row["protocol"] == "1.0" and row["frames"] == f["amqp10_streams"][s]["frames"]


# --- each scenario's facts show the scenario --------------------------------------------------

def test_credit1_grants_one_credit_per_message_and_settles_each_alone():
    count = int(param("A10_CREDIT1_COUNT"))
    st = by_container(facts("credit1"), "amqpcap-a10-credit1")
    c, b = st["c2s"], st["s2c"]
    assert c["flow_link_credit"] == {"1": count}
    assert b["transfers"] == count and b["transfers_settled"] == 0
    assert c["dispositions"] == c["dispositions_single"] == c["dispositions_settled"] == count
    assert c["disposition_outcome_deliveries"] == {"accepted": count, "rejected": 0, "released": 0, "modified": 0}
    assert [a["role"] for a in c["attaches"]] == ["receiver"] and [a["role"] for a in b["attaches"]] == ["sender"]
    assert c["attaches"][0]["name"] == b["attaches"][0]["name"]
    assert st["sessions"] == [[0, 0]]
    assert f"received and accepted {count}" in notes("credit1")


def test_presettled_transfers_are_settled_and_never_disposed():
    count = int(param("A10_PRESETTLED_COUNT"))
    st = by_container(facts("presettled"), "amqpcap-a10-presettled")
    c, b = st["c2s"], st["s2c"]
    assert c["transfers"] == c["transfers_settled"] == count
    assert c["performatives"].get(PERF["disposition"], 0) == b["performatives"].get(PERF["disposition"], 0) == 0
    assert [a["role"] for a in c["attaches"]] == ["sender"]
    # the broker kept them all, though nothing on the wire says so
    assert f"holds {count} messages" in notes("presettled")


def test_multiframe_transfers_span_frames_of_the_negotiated_size():
    max_frame = int(param("A10_MF_MAX_FRAME"))
    sizes = [int(x) for x in param("A10_MF_SIZES").split(",")]
    st = by_container(facts("multiframe"), "amqpcap-a10-multiframe")
    for d in ("c2s", "s2c"):
        x = st[d]
        assert x["open"]["max_frame_size"] == max_frame
        # one transfer frame without more=true ends each message; a frame carries less than
        # max_frame of the message, so each message needs more than size / max_frame frames
        assert x["transfers"] - x["transfers_more"] == len(sizes)
        assert x["transfers"] >= sum(math.ceil(n / max_frame) for n in sizes)
        assert x["tcp_payload_bytes"] > sum(sizes)
    assert st["c2s"]["disposition_outcome_deliveries"]["accepted"] == len(sizes)
    assert st["s2c"]["disposition_outcome_deliveries"]["accepted"] == len(sizes)


def test_outcomes_reject_and_release_and_released_ones_come_back():
    count = int(param("A10_OUT_COUNT"))
    f = facts("outcomes")
    st = by_container(f, "amqpcap-a10-outcomes")
    tally = ast.literal_eval(re.search(r"settled as (\{.*\})", notes("outcomes")).group(1))
    c, b = st["c2s"], st["s2c"]
    got = c["disposition_outcome_deliveries"]
    assert got["rejected"] > 0 and got["released"] > 0
    assert got == {"accepted": tally["accepted"], "rejected": tally["rejected"],
                   "released": tally["released"], "modified": 0}
    assert got["accepted"] + got["rejected"] == count
    # each released message is delivered once more, as not the first acquirer
    assert b["transfers"] == count + got["released"]
    assert b["transfers_first_acquirer_false"] == got["released"] == tally["again"]


def test_modified_is_refused_by_the_broker_with_the_session_ended():
    st = by_container(facts("outcomes"), "amqpcap-a10-modified")
    assert st["c2s"]["disposition_outcomes"]["modified"] == 1
    assert st["s2c"]["errors"] == [{"performative": PERF["end"], "channel": 0, "condition": "amqp:invalid-field"}]
    assert "REFUSED" in notes("outcomes") and "modified" in notes("outcomes")


def test_idle_connection_sends_empty_frames_at_half_the_peers_idle_timeout():
    proton_s, broker_s, seconds = (float(param(p)) for p in ("A10_IDLE_HEARTBEAT", "A10_IDLE_BROKER",
                                                              "A10_IDLE_SECONDS"))
    st = by_container(facts("idle"), "amqpcap-a10-idle")
    c, b = st["c2s"], st["s2c"]
    assert c["open"]["idle_timeout_ms"] == proton_s * 1000 / 2   # proton-c advertises half
    assert b["open"]["idle_timeout_ms"] == broker_s * 1000
    for sender, peer in ((c, b), (b, c)):
        # at least one empty frame per peer's idle-time-out (else the peer would close the
        # connection), at most one per half of it (what both ends aim for; proton's timer makes
        # some of its gaps 3 s instead of 2)
        timeout_s = peer["open"]["idle_timeout_ms"] / 1000
        assert math.floor(seconds / timeout_s) <= sender["empty_frames"] <= seconds / (timeout_s / 2)
        assert sender["empty_frames"] > 0
    # nothing but the empty frames between attach and close
    assert c["performatives"] == {PERF[p]: 1 for p in ("open", "begin", "attach", "flow", "close")}


def test_midstream_starts_after_the_handshake_in_the_middle_of_the_transfers():
    f = facts("midstream")
    [st] = f["amqp10_directions"].values()
    c, b = st["c2s"], st["s2c"]
    assert c["protocol_headers"] == b["protocol_headers"] == [] and f["protocol_headers"] == 0
    for x in (c, b):
        assert not {PERF["open"], PERF["begin"], PERF["attach"]} & set(x["performatives"])
        assert x["performatives"][PERF["close"]] == 1
    assert st["sessions"] == []
    left = int(param("A10_CREDIT1_COUNT")) - int(param("A10_MID_FROM"))
    assert b["transfers"] == left and c["disposition_outcome_deliveries"]["accepted"] == left
    assert set(c["flow_link_credit"]) == {"1"}
    # the same connection as amqp10-credit1's, cut
    assert "from amqp10-credit1.pcap" in notes("midstream")
