"""The `amqp10_frames` table (docs/tables.md) and the `connections` columns AMQP 1.0 fills, on each
AMQP 1.0 fixture, against tshark's own dissection of it (`amqp10_directions` in the fixture's
`.tshark.json`, written by fixtures/record/tshark_facts.py from tshark's PDML; fixtures/README.md
says what each key means) and the scenarios' parameters in fixtures/record/record.sh.

amqp10-midstream is left out: amqpcap tells AMQP 1.0 by its protocol header, which that capture
does not have (tests/core/test_amqp10_fixtures.py), so none of its frames are rows yet.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

import amqpcap

FIX = Path(__file__).resolve().parents[2] / "fixtures"
FIXTURES = ["amqp10", "amqp10-credit1", "amqp10-presettled", "amqp10-multiframe", "amqp10-outcomes", "amqp10-idle"]
#: tshark's performative codes (Part 2 §2.7) by amqpcap's names
CODES = {"open": "16", "begin": "17", "attach": "18", "flow": "19", "transfer": "20", "disposition": "21",
         "detach": "22", "end": "23", "close": "24"}

RECORD_SH = (FIX / "record" / "record.sh").read_text()
PROTON_CLIENT = (FIX / "record" / "proton_client.py").read_text()

_caps: dict[str, object] = {}


def load(name: str):
    if name not in _caps:
        _caps[name] = amqpcap.load(FIX / f"{name}.pcap")
    return _caps[name]


def directions(name: str):
    """(stream, direction, tshark's facts of it, amqpcap's rows of it) for each AMQP 1.0
    direction tshark dissects."""
    facts = json.loads((FIX / f"{name}.pcap.tshark.json").read_text())["amqp10_directions"]
    t = load(name).amqp10_frames
    for stream, st in facts.items():
        for d in ("c2s", "s2c"):
            rows = t[(t["stream"] == int(stream)).to_numpy() & (t["direction"] == d).to_numpy()]
            yield int(stream), d, st[d], rows


def performative(rows: pd.DataFrame, name: str) -> pd.DataFrame:
    return rows[(rows["performative"] == name).fillna(False).to_numpy()]


def true(s: pd.Series) -> int:
    return int(s.fillna(False).sum())


@pytest.mark.parametrize("name", FIXTURES)
def test_every_frame_is_a_row_with_its_performative(name):
    for stream, d, f, rows in directions(name):
        where = f"{name} stream {stream} {d}"
        assert len(rows) == f["frames"], where
        assert (rows["type"] == "empty").sum() == f["empty_frames"], where
        amqp = rows[(rows["type"] == "amqp").to_numpy()]
        counts = Counter(CODES[p] for p in amqp["performative"].astype(str))
        assert dict(counts) == f["performatives"], where
    t = load(name).amqp10_frames
    assert t["packet"].is_monotonic_increasing
    assert (t["first_packet"] <= t["packet"]).all()
    assert t["performative"].notna().sum() == (t["type"] != "empty").sum(), "every frame with a body is named"
    assert len(load(name).anomalies) == 0


@pytest.mark.parametrize("name", FIXTURES)
def test_transfers_settled_more_and_first_acquirer_as_tshark_reads_them(name):
    for stream, d, f, rows in directions(name):
        where = f"{name} stream {stream} {d}"
        tr = performative(rows, "transfer")
        assert len(tr) == f["transfers"], where
        assert true(tr["settled"]) == f["transfers_settled"], where
        assert true(tr["more"]) == f["transfers_more"], where
        # tshark counts a header's first-acquirer written false; the table writes the spec's
        # default (false) where a header section leaves it out, as proton's do (the client
        # sends no first-acquirer), while RabbitMQ writes it on every delivery: compare there
        if d == "s2c":
            assert int((tr["first_acquirer"] == False).sum()) == f["transfers_first_acquirer_false"], where  # noqa: E712
        # a delivery's frames: the first has its id, the others continue it
        assert tr["delivery_id"].notna().all(), where
        assert int(tr["continuation"].sum()) == f["transfers_more"], where
        assert tr["payload_bytes"].notna().all(), where


@pytest.mark.parametrize("name", FIXTURES)
def test_dispositions_by_outcome_and_the_deliveries_they_cover(name):
    for stream, d, f, rows in directions(name):
        where = f"{name} stream {stream} {d}"
        disp = performative(rows, "disposition")
        assert len(disp) == f["dispositions"], where
        assert true(disp["settled"]) == f["dispositions_settled"], where
        assert int((disp["first"] == disp["last"]).sum()) == f["dispositions_single"], where
        covered = (disp["last"] - disp["first"] + 1).astype("int64")
        for outcome in ("accepted", "rejected", "released", "modified"):
            mine = (disp["state"] == outcome).fillna(False).to_numpy()
            assert int(mine.sum()) == f["disposition_outcomes"][outcome], f"{where} {outcome}"
            assert int(covered[mine].sum()) == f["disposition_outcome_deliveries"][outcome], f"{where} {outcome}"


@pytest.mark.parametrize("name", FIXTURES)
def test_flows_opens_begins_and_attaches_as_tshark_reads_them(name):
    for stream, d, f, rows in directions(name):
        where = f"{name} stream {stream} {d}"
        flows = performative(rows, "flow")
        credit = Counter(str(int(v)) for v in flows["link_credit"].dropna())
        assert dict(credit) == f["flow_link_credit"], where
        [o] = performative(rows, "open").itertuples()
        assert o.container_id == f["open"]["container_id"], where
        assert (None if pd.isna(o.idle_timeout_ms) else int(o.idle_timeout_ms)) == f["open"]["idle_timeout_ms"], where
        # (absent: the spec's default, 4294967295, Part 2 §2.7.1)
        assert int(o.max_frame_size) == (f["open"]["max_frame_size"] or 2**32 - 1), where
        begins = [{"channel": int(b.channel), "remote_channel": None if pd.isna(b.remote_channel) else int(b.remote_channel)}
                  for b in performative(rows, "begin").itertuples()]
        assert begins == f["begins"], where
        attaches = [{"channel": int(a.channel), "name": a.name, "handle": int(a.handle), "role": a.role}
                    for a in performative(rows, "attach").itertuples()]
        assert attaches == f["attaches"], where
        errors = [{"performative": CODES[str(e.performative)], "channel": int(e.channel), "condition": e.error_condition}
                  for e in rows[rows["error_condition"].notna().to_numpy()].itertuples()
                  if e.performative in ("detach", "end", "close")]
        assert errors == f["errors"], where


@pytest.mark.parametrize("name", FIXTURES)
def test_sessions_pair_the_channels_of_each_side(name):
    facts = json.loads((FIX / f"{name}.pcap.tshark.json").read_text())["amqp10_directions"]
    t = load(name).amqp10_frames
    for stream, st in facts.items():
        mine = t[(t["stream"] == int(stream)).to_numpy()]
        answers = performative(mine[(mine["direction"] == "s2c").to_numpy()], "begin")
        assert sorted([int(b.remote_channel), int(b.channel)] for b in answers.itertuples()) == sorted(st["sessions"])


@pytest.mark.parametrize("name", FIXTURES)
def test_connections_idle_timeouts_and_names_from_the_opens(name):
    facts = json.loads((FIX / f"{name}.pcap.tshark.json").read_text())["amqp10_directions"]
    c = load(name).connections.set_index("stream")
    for stream, st in facts.items():
        row = c.loc[int(stream)]
        for d in ("c2s", "s2c"):
            want = st[d]["open"]["idle_timeout_ms"]
            got = row[f"idle_timeout_{d}_ms"]
            assert (None if pd.isna(got) else int(got)) == want, f"{name} {stream} {d}"
        # the client's open names the connection: its connection_name property where it sets
        # one (proton_client.py send-receive, amqp10.pcap), else its container-id
        named = re.search(r'properties=\{"connection_name": "([^"]+)"\}', PROTON_CLIENT).group(1)
        assert row["connection_name"] == (named if name == "amqp10" else st["c2s"]["open"]["container_id"])
        sizes = [st[d]["open"]["max_frame_size"] or 2**32 - 1 for d in ("c2s", "s2c")]
        assert row["frame_max"] == min(sizes)
        assert row["mechanism"] == "PLAIN"
        assert row["heartbeat_s"] is pd.NA or pd.isna(row["heartbeat_s"]), "an AMQP 0-9-1 column"


def test_a_message_over_many_frames_adds_up_on_its_last_frame():
    """record.sh's multiframe sizes (A10_MF_SIZES: 65536 and 150000 bytes of data) each sent once and received
    once: each delivery's `message_bytes`, on its last frame, is its data section and a few
    octets of the other sections; the frames before it carry no total."""
    sizes = [int(s) for s in re.search(r"^A10_MF_SIZES=(\S+)", RECORD_SH, re.M).group(1).split(",")]
    t = load("amqp10-multiframe").amqp10_frames
    tr = performative(t, "transfer")
    for d in ("c2s", "s2c"):
        mine = tr[(tr["direction"] == d).to_numpy()]
        last = mine[~mine["more"].to_numpy(bool)]
        assert mine[mine["more"].to_numpy(bool)]["message_bytes"].isna().all()
        totals = sorted(int(b) for b in last["message_bytes"])
        assert len(totals) == len(sizes)
        for total, size in zip(totals, sorted(sizes)):
            assert size < total < size + 512, (d, total, size)
        # every frame's bytes after the performative are in its delivery's total
        assert sum(totals) == int(mine["payload_bytes"].sum())


def test_no_amqp10_frames_is_an_empty_table_with_the_columns():
    cap = amqpcap.load(FIX / "churn.pcap")
    one = load("amqp10-idle").amqp10_frames
    assert len(cap.amqp10_frames) == 0
    assert list(cap.amqp10_frames.columns) == list(one.columns)
    assert (cap.amqp10_frames.dtypes.astype(str) == one.dtypes.astype(str))[
        [c for c in one.columns if not isinstance(one[c].dtype, pd.CategoricalDtype)]].all()
