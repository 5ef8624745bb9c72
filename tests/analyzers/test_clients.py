"""The clients analyzer on real recordings (fixtures/record/record.sh, stage 8, and others): its
per-connection counts, round trips and rates, and the numbers its findings rest on, equal an
independent computation from tshark's own AMQP fields (tests/tshark_reference.py); each
finding's filter opens, in tshark, exactly the packets it is about."""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

import amqpcap
from amqpcap.engine.registered import in_memory
from tiers import one_fast

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "fixtures"
clients = in_memory("clients")
from tshark_reference import tshark_methods  # noqa: E402

pytestmark = pytest.mark.skipif(not shutil.which("tshark"), reason="needs tshark (scripts/test.sh installs it)")

#: (class, method) counted per connection, by the table's column
COUNTED = {"publishes": (60, 40), "returns": (60, 50), "deliveries": (60, 60), "gets": (60, 70), "gets_ok": (60, 71),
           "gets_empty": (60, 72), "consumes": (60, 20), "cancelled_by_broker": (60, 30), "confirm_selects": (85, 10), "tx_selects": (90, 10),
           "tx_commits": (90, 20), "tx_rollbacks": (90, 30), "channels_opened": (20, 10),
           "connection_opens": (10, 40)}
#: a request and its replies (AMQP 0-9-1 §2.3.4: one outstanding synchronous request per channel)
ROUND_TRIPS = {"get_round_trip_p50_s": ((60, 70), {(60, 71), (60, 72)}),
               "commit_round_trip_p50_s": ((90, 20), {(90, 21)}),
               "channel_open_round_trip_p50_s": ((20, 10), {(20, 11)})}


def run(*cmd) -> str:
    return subprocess.run([str(c) for c in cmd], check=True, capture_output=True, text=True).stdout


def reference(path: Path) -> dict[int, dict]:
    """Per tcp.stream, from tshark alone: method counts (client→broker requests, broker→client
    replies), the median round trip of each synchronous request on its channel, and the
    stream's first and last packet times."""
    frames = tshark_methods(str(path))
    out: dict[int, dict] = defaultdict(dict)
    counts: dict[int, Counter] = defaultdict(Counter)
    by_channel: dict[tuple, list] = defaultdict(list)
    for f in frames:
        counts[f["stream"]][f["method"]] += 1
        by_channel[(f["stream"], f["channel"])].append(f)
    for line in run("tshark", "-r", path, "-T", "fields", "-e", "tcp.stream", "-e", "frame.time_epoch").splitlines():
        stream, t = line.split("\t")
        r = out[int(stream)]
        r["first"] = min(r.get("first", float(t)), float(t))
        r["last"] = max(r.get("last", float(t)), float(t))
    for stream, c in counts.items():
        for col, method in COUNTED.items():
            out[stream][col] = c[method]
        opens = sorted(f["t"] for f in frames if f["stream"] == stream and f["method"] == (20, 10))
        out[stream]["channel_opens_per_s_peak"] = max((sum(1 for u in opens if t <= u < t + 1) for t in opens), default=0)
    for col, (request, replies) in ROUND_TRIPS.items():
        rtt: dict[int, list] = defaultdict(list)
        for (stream, _), fs in by_channel.items():
            for a, b in zip(fs, fs[1:]):
                if a["method"] == request and b["method"] in replies:
                    rtt[stream].append(b["t"] - a["t"])
        for stream in out:
            out[stream][col] = statistics.median(rtt[stream]) if rtt[stream] else None
    return out


@pytest.mark.parametrize("name", one_fast(["polling.pcap", "transactions.pcap", "unroutable.pcap", "cancelled.pcap", "churn.pcap",
                                           "publish-wait.pcap", "channel-churn.pcap", "secrets.pcap",
                                           "confirms.pcap", "nack-requeue.pcap"], keep="secrets.pcap"))
def test_the_clients_table_is_tsharks_count(name):
    table = clients(amqpcap.load(FIX / name)).tables["connections"].set_index("stream")
    ref = reference(FIX / name)
    assert sorted(table.index) == sorted(s for s in ref if "publishes" in ref[s])
    for stream, r in table.iterrows():
        want = ref[stream]
        for col in (*COUNTED, "channel_opens_per_s_peak"):
            assert r[col] == want[col], (name, stream, col)
        duration = want["last"] - want["first"]
        assert r["duration_s"] == pytest.approx(duration, abs=2e-6)
        if duration > 0:
            assert r["get_rate_per_s"] == pytest.approx(want["gets"] / duration, rel=1e-5)
        for col in ROUND_TRIPS:
            if want[col] is None:
                assert r[col] != r[col], (name, stream, col)  # NaN
            else:
                assert r[col] == pytest.approx(want[col], abs=2e-6), (name, stream, col)


def finding(name: str, fid: str):
    r = clients(amqpcap.load(FIX / name))
    found = [f for f in r.findings if f.id == fid]
    assert len(found) == 1, [f.id for f in r.findings]
    return found[0]


def packets_of(path: Path, display_filter: str) -> list[int]:
    return [int(n) for n in run("tshark", "-r", path, "-Y", display_filter, "-T", "fields", "-e", "frame.number").split()]


@pytest.mark.slow
def test_polling_is_named_with_tsharks_numbers():
    f = finding("polling.pcap", "polling-basic-get")
    ref = reference(FIX / "polling.pcap")
    poller = ref[0]
    ev = f.evidence
    assert f.severity == "warning" and f.subjects[0]["connection"] == "amqpcap-poller"
    # the scenario's own numbers (the client printed them: fixtures/README.md) and tshark's
    assert (ev["gets"], ev["gets_ok"], ev["gets_empty"]) == (186, 40, 146)
    assert (ev["gets"], ev["gets_ok"], ev["gets_empty"]) == (poller["gets"], poller["gets_ok"], poller["gets_empty"])
    assert ev["get_empty_share"] == pytest.approx(146 / 186)
    assert ev["get_rate_per_s"] == pytest.approx(186 / (poller["last"] - poller["first"]), rel=1e-5)
    assert ev["get_round_trip_p50_s"] == pytest.approx(poller["get_round_trip_p50_s"], abs=2e-6)
    assert ev["streams"] == [0]
    # the filter opens the poller's get, get-ok and get-empty packets, and only those
    frames = tshark_methods(str(FIX / "polling.pcap"))
    want = sorted({fr["packet"] for fr in frames if fr["stream"] == 0 and fr["method"] in ((60, 70), (60, 71), (60, 72))})
    assert packets_of(FIX / "polling.pcap", ev["filter"]) == want
    assert set(ev["packets"]) <= set(want)


@pytest.mark.slow
def test_transactions_are_named_with_tsharks_numbers():
    f = finding("transactions.pcap", "transactions")
    tx = reference(FIX / "transactions.pcap")[0]
    ev = f.evidence
    assert f.severity == "warning" and f.subjects[0]["connection"] == "amqpcap-tx-publisher"
    # the scenario's parameters: 50 messages, one tx.commit each
    assert (ev["tx_commits"], ev["publishes_in_tx"], ev["publishes_per_commit"]) == (50, 50, 1.0)
    assert (ev["tx_commits"], ev["publishes_in_tx"]) == (tx["tx_commits"], tx["publishes"])
    assert ev["commit_round_trip_p50_s"] == pytest.approx(tx["commit_round_trip_p50_s"], abs=2e-6)
    frames = tshark_methods(str(FIX / "transactions.pcap"))
    want = sorted({fr["packet"] for fr in frames if fr["method"][0] == 90})
    assert packets_of(FIX / "transactions.pcap", ev["filter"]) == want
    assert set(ev["packets"]) <= set(want) and len(ev["packets"]) == 5


def test_one_basic_get_is_not_polling():
    """secrets.pcap gets one message back with basic.get on each of two connections: a fetch,
    not a polling loop."""
    r = clients(amqpcap.load(FIX / "secrets.pcap"))
    assert r.summary["clients"]["polling"] == 2
    assert not [f for f in r.findings if f.id == "polling-basic-get"]


@pytest.mark.slow
def test_unroutable_messages_are_named_with_tsharks_numbers():
    f = finding("unroutable.pcap", "unroutable-messages")
    ev = f.evidence
    assert f.severity == "warning" and f.subjects[0]["connection"] == "amqpcap-orders-publisher"
    # the scenario's parameters: 30 mandatory publishes to amq.direct with a key no queue is
    # bound with, 30 to a declared queue; the client counted 30 basic.return, all 312
    assert (ev["returns"], ev["publishes"], ev["exchange"], ev["routing_key"]) == (
        30, 60, "amq.direct", "orders.nobody-binds-this")
    assert (ev["reply_code"], ev["reply_text"]) == (312, "NO_ROUTE")
    # tshark: the broker's basic.return frames and the fields they carry
    out = run("tshark", "-r", FIX / "unroutable.pcap", "-Y", "amqp.method.class == 60 && amqp.method.method == 50",
              "-T", "fields", "-E", "occurrence=a", "-e", "frame.number", "-e", "amqp.method.arguments.reply_code",
              "-e", "amqp.method.arguments.reply_text", "-e", "amqp.method.arguments.exchange",
              "-e", "amqp.method.arguments.routing_key")
    rows = [line.split("\t") for line in out.splitlines()]
    assert len(rows) == ev["returns"]
    assert {tuple(r[1:]) for r in rows} == {("312", "NO_ROUTE", "amq.direct", "orders.nobody-binds-this")}
    publishes = reference(FIX / "unroutable.pcap")[0]["publishes"]
    assert ev["publishes"] == publishes and ev["returned_share"] == pytest.approx(30 / publishes)
    assert ev["destinations"] == [{"exchange": "amq.direct", "routing_key": "orders.nobody-binds-this",
                                   "returns": 30, "publishes": 30}]
    # the filter opens exactly the basic.return packets
    assert packets_of(FIX / "unroutable.pcap", ev["filter"]) == [int(r[0]) for r in rows]
    assert set(ev["packets"]) <= {int(r[0]) for r in rows}


def test_the_unroutable_title_names_the_reply_code_after_the_counts():
    """unroutable.pcap: the title's counts are of returns and publishes, and the reply code is
    named, its name first ("NO_ROUTE (312)"), never a bare number beside them that reads as a
    count ("30 of 60 returned (312 NO_ROUTE)"). The number of returns is tshark's count of
    basic.return (fixtures/unroutable.pcap.tshark.json), the code and its name the wire's."""
    import json

    f = finding("unroutable.pcap", "unroutable-messages")
    facts = json.loads((FIX / "unroutable.pcap.tshark.json").read_text())
    returns = facts["methods"]["60.50"]  # basic.return
    assert f.evidence["returns"] == returns == 30
    assert f"{returns:,} of its {f.evidence['publishes']:,} publishes came back unroutable with NO_ROUTE (312)" \
        in f.title, f.title
    assert "312 NO_ROUTE" not in f.title and "(312 " not in f.title
    assert "NO_ROUTE (312)" in f.advice


def test_reply_code_names_are_the_specs():
    """amqpcap/model/reply_codes.py is what tools/gen_spec.py makes of the AMQP 0-9-1 spec JSON (one
    source for the code → name table), and a reply code reads as its name, then the number."""
    from amqpcap.model import reply_codes
    from amqpcap.model.wording import reply_code

    spec_path = ROOT.parent / "shared" / "spec" / "amqp-rabbitmq-0.9.1.json"
    if spec_path.exists():
        import json

        sys.path.insert(0, str(ROOT / "tools"))
        import gen_spec

        assert (ROOT / "amqpcap" / "model" / "reply_codes.py").read_text() == \
            gen_spec.reply_codes_source(json.loads(spec_path.read_text()))
    # the spec's numbers (AMQP 0-9-1 §1.2 constants), and how a code reads
    assert (reply_codes.NO_ROUTE, reply_codes.CONNECTION_FORCED, reply_codes.PRECONDITION_FAILED) == (312, 320, 406)
    assert reply_code(312) == "NO_ROUTE (312)" and reply_code(530, "NOT_ALLOWED - too many") == "NOT_ALLOWED (530)"
    assert reply_code(399, "ODD_THING - x") == "ODD_THING (399)" and reply_code(399) == "reply code 399"


@pytest.mark.slow
def test_a_consumer_cancelled_by_the_broker_is_named_with_tsharks_numbers():
    f = finding("cancelled.pcap", "consumer-cancelled")
    ev = f.evidence
    frames = tshark_methods(str(FIX / "cancelled.pcap"))
    # the broker's basic.cancel (s2c), the consume it ends and the queue.delete before it: tshark's
    cancels = [fr for fr in frames if fr["method"] == (60, 30) and fr["s2c"]]
    assert len(cancels) == 1 == ev["cancels"] and ev["packets"] == [cancels[0]["packet"]]
    assert ev["streams"] == [cancels[0]["stream"]] and ev["channel"] == cancels[0]["channel"]
    out = run("tshark", "-r", FIX / "cancelled.pcap", "-Y", "amqp.method.class == 60 && amqp.method.method in {20, 30}",
              "-T", "fields", "-e", "frame.number", "-e", "amqp.method.arguments.queue",
              "-e", "amqp.method.arguments.consumer_tag")
    rows = {int(r.split("\t")[0]): r.split("\t")[1:] for r in out.splitlines()}
    assert rows[cancels[0]["packet"]][1] == ev["consumer_tag"]
    consume = [r for n, r in rows.items() if r[0]]  # basic.consume names the queue
    assert [r[0] for r in consume] == [ev["queue"]] == ["amqpcap-reports"]
    deletes = run("tshark", "-r", FIX / "cancelled.pcap", "-Y", "amqp.method.class == 50 && amqp.method.method == 40",
                  "-T", "fields", "-e", "frame.number", "-e", "tcp.stream", "-e", "amqp.method.arguments.queue").split()
    assert int(deletes[0]) < cancels[0]["packet"] and (int(deletes[1]), deletes[2]) == (ev["deleted_by_stream"], ev["queue"])
    # the scenario: the consumer never subscribes again (no basic.consume after the cancel)
    assert not [fr for fr in frames if fr["method"] == (60, 20) and fr["packet"] > cancels[0]["packet"]]
    assert ev["resubscribed"] is False and f.severity == "warning"
    assert f.subjects[0]["connection"] == "amqpcap-report-consumer" and "amqpcap-admin deleted the queue" in f.title
    want = sorted({fr["packet"] for fr in frames if fr["stream"] == cancels[0]["stream"] and fr["method"] in ((60, 30), (60, 31))})
    assert packets_of(FIX / "cancelled.pcap", ev["filter"]) == want


@pytest.mark.slow
def test_connection_churn_is_named_with_tsharks_numbers():
    f = finding("churn.pcap", "connection-churn")
    ev = f.evidence
    ref = reference(FIX / "churn.pcap")
    # tshark: connection.open (10.40) per stream, each stream's first and last packet, publishes
    opened = sorted(s for s, r in ref.items() if r.get("connection_opens"))
    # the scenario: 40 connections of a message each, then one more that deletes the queue
    assert len(opened) == 41 and ref[opened[-1]]["publishes"] == 0
    opened = opened[:-1]
    assert len(opened) == 40 == ev["connections"]
    assert ev["streams"] == opened and ev["application"] == "amqpcap-churner"
    lifetimes = [ref[s]["last"] - ref[s]["first"] for s in opened]
    assert ev["lifetime_p50_s"] == pytest.approx(statistics.median(lifetimes), abs=2e-6)
    assert ev["messages_per_connection_p50"] == statistics.median(ref[s]["publishes"] for s in opened) == 1
    firsts = sorted(ref[s]["first"] for s in opened)
    assert ev["opens_per_s"] == pytest.approx((len(firsts) - 1) / (firsts[-1] - firsts[0]), rel=1e-5)
    assert ev["opens_per_s_peak"] == max(sum(1 for u in firsts if t <= u < t + 1) for t in firsts)
    assert f.severity == "warning" and len(f.subjects) == 40
    # the filter opens exactly the connection.open packets
    frames = tshark_methods(str(FIX / "churn.pcap"))
    assert packets_of(FIX / "churn.pcap", ev["filter"]) == sorted(fr["packet"] for fr in frames
                                                                  if fr["method"] == (10, 40) and fr["stream"] in opened)


@pytest.mark.parametrize("name, fid, words", one_fast([
    ("churn.pcap", "connection-churn", "carrying 1 message published each (medians)"),
    ("channel-churn.pcap", "channel-churn", "{published:.1f} messages published per channel"),
    ("channel-leak.pcap", "channel-churn", "{published:.1f} messages published per channel"),
], keep="channel-leak.pcap", several=True))
def test_churn_titles_count_messages_with_their_direction(name, fid, words):
    """The churn findings' messages each way: these publishers consume nothing (tshark: no
    basic.deliver nor basic.get-ok on their connections), so the title says "published" and
    never "delivered", with tshark's publishes (per channel opened: channel.open)."""
    f = finding(name, fid)
    ref = reference(FIX / name)
    mine = [ref[s] for s in f.evidence["streams"]]
    assert sum(r["deliveries"] + r["gets_ok"] for r in mine) == 0
    w = ref[f.evidence["streams"][0]] if fid == "channel-churn" else None
    published = w["publishes"] / w["channels_opened"] if w else None
    assert words.format(published=published) in f.title, f.title
    assert "delivered" not in f.title
    if w:
        assert f.evidence["published_per_channel"] == pytest.approx(published)
        assert f.evidence["delivered_per_channel"] == 0


@pytest.mark.slow
def test_publish_and_wait_is_named_with_tsharks_numbers():
    f = finding("publish-wait.pcap", "publish-and-wait")
    ev = f.evidence
    # tshark: the client's basic.publish (numbered from 1 after confirm.select, RabbitMQ publisher
    # confirms) and the broker's basic.ack confirms on that channel, each settling its tag
    frames = [fr for fr in tshark_methods(str(FIX / "publish-wait.pcap")) if fr["stream"] == 0 and fr["channel"] == 1]
    publishes = [fr for fr in frames if fr["method"] == (60, 40)]
    acks = {fr["tag"]: fr for fr in frames if fr["method"] == (60, 80) and fr["s2c"]}
    assert not [fr for fr in frames if fr["method"] == (60, 80) and fr["s2c"] and fr.get("multiple")]
    assert len(publishes) == 60 == ev["publishes"]  # the scenario: 60 messages, each waited for
    sent = [p["t"] for p in publishes]
    confirmed = [acks[i + 1]["t"] for i in range(len(publishes))]
    sequential = sum(sent[i] >= confirmed[i - 1] for i in range(1, len(sent))) / (len(sent) - 1)
    assert ev["sequential_share"] == pytest.approx(sequential) == 1.0
    latency = [c - s for s, c in zip(sent, confirmed)]
    assert ev["confirm_latency_p50_s"] == pytest.approx(statistics.median(latency), abs=2e-6)
    assert ev["waiting_share"] == pytest.approx(sum(latency) / (max(confirmed) - min(sent)), rel=1e-3)
    assert f.severity == "warning" and f.subjects[0]["connection"] == "amqpcap-invoice-publisher"
    want = sorted({fr["packet"] for fr in tshark_methods(str(FIX / "publish-wait.pcap"))
                   if fr["stream"] == 0 and fr["method"] in ((60, 40), (60, 80), (60, 120))})
    assert packets_of(FIX / "publish-wait.pcap", ev["filter"]) == want


def test_a_rate_limited_confirming_publisher_is_not_publish_and_wait():
    """confirms.pcap: PerfTest at 100 msg/s with up to 10 confirms outstanding. Its publishes
    mostly follow the previous confirm too (the confirm is back long before the next publish is
    due), but the channel waits for confirms a few percent of the time: not told."""
    r = clients(amqpcap.load(FIX / "confirms.pcap"))
    ch = r.tables["confirming"].iloc[0]
    assert ch["sequential_share"] >= 0.9 and ch["waiting_share"] < 0.1
    assert not [f for f in r.findings if f.id == "publish-and-wait"]


@pytest.mark.slow
def test_channel_churn_is_named_with_tsharks_numbers():
    f = finding("channel-churn.pcap", "channel-churn")
    ev = f.evidence
    ref = reference(FIX / "channel-churn.pcap")[0]
    # the scenario: 60 channels of one message each, plus one to declare and one to delete the queue
    assert ref["channels_opened"] == 62 == ev["channels_opened"] and ref["publishes"] == 60
    assert ev["messages_per_channel"] == pytest.approx(60 / 62)
    assert ev["channel_opens_per_s_peak"] == ref["channel_opens_per_s_peak"]
    assert ev["channel_open_round_trip_p50_s"] == pytest.approx(ref["channel_open_round_trip_p50_s"], abs=2e-6)
    assert f.severity == "warning" and f.subjects[0]["connection"] == "amqpcap-audit-logger"
    want = sorted({fr["packet"] for fr in tshark_methods(str(FIX / "channel-churn.pcap"))
                   if fr["stream"] == 0 and fr["method"] in ((20, 10), (20, 11))})
    assert packets_of(FIX / "channel-churn.pcap", ev["filter"]) == want


def test_a_channel_leak_is_named_with_tsharks_numbers():
    """channel-leak.pcap (record.sh stage 8): pika with channel_max 32 opens a channel per task, 28
    tasks of 5 messages, and never closes them: tshark's channel.open and channel.close-ok frames
    give the open channels' peak, its tune-ok the channel_max."""
    path = FIX / "channel-leak.pcap"
    f = finding("channel-leak.pcap", "channel-churn")
    frames = [fr for fr in tshark_methods(str(path)) if fr["stream"] == 0]
    open_now = peak = 0
    for fr in frames:
        open_now += (fr["method"] == (20, 10) and not fr["s2c"]) - (fr["method"] == (20, 41))
        peak = max(peak, open_now)
    tune_ok = run("tshark", "-r", path, "-Y", "amqp.method.class == 10 && amqp.method.method == 31", "-T", "fields",
                  "-e", "amqp.method.arguments.channel_max").split()
    assert tune_ok == ["32"]  # the scenario's own channel_max
    assert (f.evidence["channels_open_peak"], f.evidence["channel_max"]) == (peak, 32)
    assert peak == 29  # a channel to declare the queue, 28 tasks: none closed
    assert f.evidence["leak"] and f.severity == "warning"
    assert f.evidence["messages_per_channel"] == pytest.approx(140 / 29)  # 5 per task: not a channel per operation
    assert f.subjects[0]["connection"] == "amqpcap-task-runner" and "leaks channels" in f.title


def tshark_heartbeats(path: Path) -> dict[int, dict]:
    """Per tcp.stream, from tshark alone: the heartbeat of connection.tune-ok (else tune), the
    first FIN or RST (its frame number, time and sender), whether that sender sent
    connection.close, and the other side's last payload before it."""
    out: dict[int, dict] = defaultdict(lambda: {"payload": {}, "closed": set()})
    fields = ["tcp.stream", "frame.number", "frame.time_epoch", "tcp.srcport", "tcp.len", "tcp.flags.fin",
              "tcp.flags.reset", "amqp.method.class", "amqp.method.method", "amqp.method.arguments.heartbeat"]
    lines = run("tshark", "-r", path, "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,",
                *[x for f in fields for x in ("-e", f)]).splitlines()
    for line in lines:
        stream, number, t, sport, length, fin, rst, cls, meth, hb = line.split("\t")
        r = out[int(stream)]
        side = "broker" if sport == "5672" else "client"
        pairs = list(zip(cls.split(","), meth.split(","))) if cls else []
        if ("10", "31") in pairs or (("10", "30") in pairs and "heartbeat_s" not in r):
            r["heartbeat_s"] = int(hb.split(",")[-1])
        if ("10", "50") in pairs:
            r["closed"].add(side)
        if "end" not in r and ("1" in (fin, rst) or "True" in (fin, rst)):
            r["end"] = (int(number), float(t), side)
        if "end" not in r and int(length or 0) > 0:
            r["payload"][side] = float(t)
    return out


def test_heartbeat_problems_are_named_with_tsharks_numbers():
    """heartbeats.pcap (record.sh stage 8): amqpcap-no-heartbeat asks for heartbeat 0;
    amqpcap-blocked-worker negotiates 2 s, then blocks without I/O for 9 s and the broker resets
    it: the finding's heartbeats, silence and end packet are tshark's."""
    heartbeats = in_memory("heartbeats")
    path = FIX / "heartbeats.pcap"
    ref = tshark_heartbeats(path)
    result = heartbeats(amqpcap.load(path))
    t = result.tables["connections"].set_index("stream")
    for stream, r in ref.items():
        assert t.loc[stream, "heartbeat_s"] == r["heartbeat_s"]
        number, end_t, ender = r["end"]
        assert (t.loc[stream, "end_packet"], t.loc[stream, "ended_by"]) == (number, ender)
        silent = "client" if ender == "broker" else "broker"
        assert t.loc[stream, "silence_before_end_s"] == pytest.approx(end_t - r["payload"][silent], abs=2e-6)
        assert t.loc[stream, "closed_with_amqp"] == (ender in r["closed"])
    f = next(f for f in result.findings if f.id == "heartbeat-problems")
    assert f.severity == "warning"
    by_name = {s["connection"]: s for s in f.subjects}
    worker = by_name["amqpcap-blocked-worker"]
    stream = worker["stream"]
    number, end_t, ender = ref[stream]["end"]
    # the scenario's own numbers: a 2 s heartbeat, silent past two intervals, the broker ends it
    assert (worker["problem"], worker["heartbeat_s"], ender, worker["end_packet"]) == \
        ("missed-heartbeats", 2, "broker", number)
    assert worker["silence_before_end_s"] >= 2 * 2
    assert by_name["amqpcap-no-heartbeat"]["problem"] == "heartbeat-disabled"
    assert ref[by_name["amqpcap-no-heartbeat"]["stream"]]["heartbeat_s"] == 0
    assert f.subjects[0]["connection"] == "amqpcap-blocked-worker"
    # the filter opens the dropped connection's heartbeats, tune and its end, nothing of the other
    opened = packets_of(path, f.evidence["filter"])
    assert number in opened
    hb_frames = packets_of(path, f"tcp.stream eq {stream} && amqp.type == 8")
    assert hb_frames and set(hb_frames) <= set(opened)
    assert not set(opened) & set(packets_of(path, f"tcp.stream eq {by_name['amqpcap-no-heartbeat']['stream']}"))


def test_a_low_heartbeat_without_a_drop_is_info():
    """prefetch-consumers.pcap: PerfTest negotiated 1 s heartbeats (tshark's tune-ok), and every
    connection ended with connection.close: told as info, never as a drop."""
    heartbeats = in_memory("heartbeats")
    path = FIX / "prefetch-consumers.pcap"
    ref = tshark_heartbeats(path)
    f = next(f for f in heartbeats(amqpcap.load(path)).findings if f.id == "heartbeat-problems")
    assert f.severity == "info"
    assert {s["stream"]: s["heartbeat_s"] for s in f.subjects} == {s: r["heartbeat_s"] for s, r in ref.items()}
    assert {s["problem"] for s in f.subjects} == {"heartbeat-low"}


# -- slices of a partition's time (amqpcap.analysis.partition.Slicing) --------------------------------------

def _sliced_everywhere(path: Path, step_ns: int = 1_000_000) -> tuple[dict, dict]:
    """The clients partial of the capture crafted at `path` whole, and cut before every packet
    (`clean_cuts` every 1)."""
    from amqpcap.engine.registered import splits
    from amqpcap.model.facts import ns
    from amqpcap.engine.partitions import sliced_partial
    from amqpcap.io.pieces import facts_of
    from amqpcap.model.facts import clean_cuts

    cap = amqpcap.load(path)
    facts = facts_of(cap)
    cuts = clean_cuts(cap.packets["packet"].to_numpy(), ns(cap.packets["ts"]), 1)
    assert len(cuts) == len(cap.packets) - 1
    split = splits()["clients"]  # (a partition's part: a list of its one partial)
    return split.partial(cap, facts)[0], sliced_partial(split, cap, facts, cuts)[0]


def _frames(conv, *sent) -> None:
    """Each (direction, frames) sent in packets of its own."""
    for direction, frames in sent:
        conv.send_frames(direction, frames if isinstance(frames, list) else [frames])


def _basic_get(c, channel=1):
    return c.method_frame(channel, 60, 70, c.short(0) + c.shortstr("q") + c.bits(False), "basic.get")


def _basic_get_ok(c, channel=1, delivery_tag=1):
    args = c.longlong(delivery_tag) + c.bits(False) + c.shortstr("") + c.shortstr("q") + c.long_(0)
    return [c.method_frame(channel, 60, 71, args, "basic.get-ok"), *c.content(channel, b"m")]


def _basic_get_empty(c, channel=1):
    return c.method_frame(channel, 60, 72, c.shortstr(""), "basic.get-empty")


def _tx(c, method_id: int, channel=1):
    return c.method_frame(channel, 90, method_id, b"")


def _basic_cancel(c, channel=1, consumer_tag="ctag-1"):
    return c.method_frame(channel, 60, 30, c.shortstr(consumer_tag) + c.bits(False), "basic.cancel")


@pytest.mark.slow
def test_requests_answered_in_a_later_slice_are_round_trips_and_examples_count_on(tmp_path):
    """basic.get, tx.commit and channel.open answered by the broker in the next packet: cut
    between each request and its reply, the round trips are the whole's; and the first five
    gets of the connection are cited, though each is in a slice of its own."""
    import crafting as c
    from test_partition import assert_same_partial

    conv = c.TcpConversation().handshake()
    for direction, what in c.opening():
        _frames(conv, (direction, what))
    for i in range(7):
        _frames(conv, ("c2s", _basic_get(c)), ("s2c", _basic_get_ok(c, delivery_tag=i + 1) if i % 2 else
                                                      _basic_get_empty(c)))
    _frames(conv, ("c2s", c.channel_open(2)), ("s2c", c.channel_open_ok(2)), ("c2s", _tx(c, 10, 2)),
            ("s2c", _tx(c, 11, 2)))
    for _ in range(3):
        _frames(conv, ("c2s", [c.basic_publish(2), *c.content(2, b"m")]), ("c2s", _tx(c, 20, 2)),
                ("s2c", _tx(c, 21, 2)))
    c.write_pcap(tmp_path / "requests.pcap", conv.close().timed())
    whole, sliced = _sliced_everywhere(tmp_path / "requests.pcap")
    row = whole["connections"].iloc[0]
    assert (row["gets"], row["tx_commits"], row["channels_opened"]) == (7, 3, 2)
    for request in ("get", "commit", "channel_open"):  # (each reply one packet, a millisecond, after)
        assert row[f"{request}_round_trip_p50_s"] == 0.001
    assert (whole["examples"]["method"] == "basic.get").sum() == 5
    assert_same_partial(sliced, whole, "cut before every packet")


@pytest.mark.slow
def test_publishes_before_a_tx_select_and_a_return_slices_after_them_count_as_in_the_whole(tmp_path):
    """A channel's publishes are a transaction's when it selects tx, even later; a destination
    returned counts every publish to it, before and after the return: the slices decide both
    where they end."""
    import crafting as c
    from test_partition import assert_same_partial

    conv = c.TcpConversation().handshake()
    for direction, what in c.opening():
        _frames(conv, (direction, what))
    nowhere = {"exchange": "amq.direct", "routing_key": "nowhere"}
    for _ in range(3):
        _frames(conv, ("c2s", [c.basic_publish(1, mandatory=True, **nowhere), *c.content(1, b"m")]))
    _frames(conv, ("c2s", [c.basic_publish(1), *c.content(1, b"m")]))
    _frames(conv, ("s2c", [c.basic_return(1, **nowhere), *c.content(1, b"m")]))
    _frames(conv, ("c2s", [c.basic_publish(1, mandatory=True, **nowhere), *c.content(1, b"m")]))
    _frames(conv, ("c2s", _tx(c, 10)), ("s2c", _tx(c, 11)), ("c2s", [c.basic_publish(1), *c.content(1, b"m")]),
            ("c2s", _tx(c, 20)), ("s2c", _tx(c, 21)))
    c.write_pcap(tmp_path / "later.pcap", conv.close().timed())
    whole, sliced = _sliced_everywhere(tmp_path / "later.pcap")
    row = whole["connections"].iloc[0]
    assert (row["publishes"], row["publishes_in_tx"], row["publishes_per_commit"]) == (6, 6, 6.0)
    assert whole["returns"][["routing_key", "returns", "publishes"]].values.tolist() == [["nowhere", 1, 4]]
    assert_same_partial(sliced, whole, "cut before every packet")


@pytest.mark.slow
def test_a_cancelled_consumer_has_its_queue_and_its_resubscription_from_other_slices(tmp_path):
    """The broker cancels a consumer whose basic.consume and basic.consume-ok are slices before
    it, and the client subscribes again slices after it."""
    import crafting as c
    from test_partition import assert_same_partial

    conv = c.TcpConversation().handshake()
    for direction, what in c.opening():
        _frames(conv, (direction, what))
    _frames(conv, ("c2s", c.basic_consume(1, queue="reports")), ("s2c", c.basic_consume_ok(1)),
            ("s2c", _basic_cancel(c)), ("c2s", c.channel_open(2)), ("s2c", c.channel_open_ok(2)),
            ("c2s", c.basic_consume(2, queue="other", consumer_tag="ctag-2")), ("s2c", c.basic_consume_ok(2, "ctag-2")))
    c.write_pcap(tmp_path / "cancelled.pcap", conv.close().timed())
    whole, sliced = _sliced_everywhere(tmp_path / "cancelled.pcap")
    assert whole["cancels"][["consumer_tag", "queue", "resubscribed"]].values.tolist() == [["ctag-1", "reports", True]]
    assert_same_partial(sliced, whole, "cut before every packet")


@pytest.mark.slow
def test_channels_open_at_once_and_opened_in_a_second_are_counted_across_slices(tmp_path):
    """Channels opened and closed in packets a fifth of a second apart: the most open at once
    and the most opened in a one-second window (which reaches over several slices) are the
    whole's."""
    import crafting as c
    from test_partition import assert_same_partial

    conv = c.TcpConversation().handshake()
    for direction, what in c.opening():
        _frames(conv, (direction, what))
    for ch in range(2, 9):
        _frames(conv, ("c2s", c.channel_open(ch)), ("s2c", c.channel_open_ok(ch)))
        if ch % 3 == 0:
            _frames(conv, ("c2s", c.channel_close(ch - 1, 200, "", 0, 0)), ("s2c", c.channel_close_ok(ch - 1)))
    c.write_pcap(tmp_path / "channels.pcap", conv.close().timed(step_ns=200_000_000))
    whole, sliced = _sliced_everywhere(tmp_path / "channels.pcap")
    row = whole["connections"].iloc[0]
    assert (row["channels_opened"], row["channels_open_peak"], row["channel_opens_per_s_peak"]) == (8, 6, 3)
    assert_same_partial(sliced, whole, "cut before every packet")
