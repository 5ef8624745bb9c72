"""Real captures (fixtures/, ../shared/captures/) against what Wireshark's dissector reports.

Two independent sources of expected values:
- the committed `<capture>.tshark.json` facts (per-stream method counts, frame types), written by
  fixtures/record/tshark_facts.py from tshark's output;
- tshark run now on the same file, packet by packet (numbering, timestamps, TCP fields).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pytest

import amqpcap

from accounting import assert_byte_accounting
from tiers import one_fast, large_slow

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "captures"
FACTS = sorted(ROOT.glob("fixtures/*.tshark.json")) + sorted(SHARED.glob("*.tshark.json"))
TYPE_IDS = {"method": "1", "header": "2", "body": "3", "heartbeat": "8"}


def capture_of(facts_path: Path) -> Path:
    name = facts_path.name[: -len(".tshark.json")]
    direct = facts_path.with_name(name)
    return direct if direct.exists() else facts_path.with_name(name + ".pcap")


def method_counts(frames: pd.DataFrame) -> dict[str, int]:
    m = frames[frames["type"] == "method"]
    sizes = m.groupby(["class_id", "method_id"]).size()
    return {f"{int(c)}.{int(i)}": int(n) for (c, i), n in sizes.items() if n}


def type_counts(frames: pd.DataFrame) -> dict[str, int]:
    return {TYPE_IDS[k]: int(n) for k, n in frames["type"].value_counts().items() if n}


@pytest.fixture(scope="module", params=large_slow(FACTS), ids=lambda p: p.name[: -len(".tshark.json")])
def case(request):
    facts = json.loads(request.param.read_text())
    return facts, amqpcap.load(capture_of(request.param))


def test_shared_capture_is_there():
    """The nDPI capture in ../shared (a capture nobody on this project wrote) must be checked too;
    CI clones the project beside shared/."""
    assert (SHARED / "ndpi-amqp-celery-midstream.pcap").is_file(), f"missing {SHARED}"


def test_fixture_set_is_complete():
    names = {p.name for p in (ROOT / "fixtures").iterdir()}
    for required in (
        "confirms.pcap", "prefetch-consumers.pcap", "prefetch1.pcap", "multi-ack.pcap",
        "nack-requeue.pcap", "auto-ack.pcap", "ipv6.pcap", "any-sll2.pcap", "any-sll.pcap",
        "dumpcap.pcapng", "nanosecond.pcap", "midstream.pcap", "gzipped.pcap.gz", "tls.pcap", "tls-plaintext.pcap",
        "flow-control.pcap.gz", "ten-consumers.pcap",
    ):
        assert required in names
        assert f"{required}.tshark.json" in names


def test_methods_and_frame_types_equal_tshark(case):
    facts, cap = case
    assert method_counts(cap.frames) == facts["methods"]
    assert type_counts(cap.frames) == facts["frame_types"]


def test_per_stream_counts_equal_tshark(case):
    facts, cap = case
    methods = cap.frames[cap.frames["type"] == "method"]
    ours = {str(s): method_counts(g) for s, g in methods.groupby("stream")}
    assert ours == facts["streams"]
    if "stream_frame_types" in facts:
        types = {str(s): type_counts(g) for s, g in cap.frames.groupby("stream") if len(g)}
        assert types == facts["stream_frame_types"]


def test_packet_count_equals_tshark(case):
    facts, cap = case
    # the shared capture's facts have no packet count; its plen histogram counts every packet
    expected = facts["packets"] if "packets" in facts else sum(facts["plen"].values())
    assert cap.summary["packets"] == expected


def test_nothing_undecoded_on_clean_captures(case):
    facts, cap = case
    if "kernel-drops" in cap.path:
        assert (cap.anomalies["kind"] == "capture-gap").any()
        return
    if "decrypted" in facts:
        # a TLS capture loaded without its key log: one tls-encrypted row per direction of each
        # connection, every stream byte skipped (tests/io/test_tls.py checks the numbers)
        a = cap.anomalies
        assert set(a["kind"]) == {"tls-encrypted"} and len(a) == 2 * len(cap.connections)
        assert cap.connections["tls"].all()
        return
    if "flow-control" in cap.path:
        # cut by tcpdump -c while producers' last frames waited behind the broker's zero window
        # (test_flow_control_cut_frames_wait_behind_zero_windows checks that against tshark)
        assert set(cap.anomalies["kind"]) == {"incomplete-frame"}
        return
    assert len(cap.anomalies) == 0, cap.anomalies.head()
    c = cap.connections
    assert (c["c2s_bytes_skipped"] == 0).all() and (c["s2c_bytes_skipped"] == 0).all()


def test_byte_accounting(case):
    """Every stream byte of every connection is decoded into a frame of the table, skipped or
    missing, and each skipped or missing byte is counted by an anomaly of that connection
    direction (tests/accounting.py)."""
    _, cap = case
    assert len(cap.connections)
    assert_byte_accounting(cap)


def test_connection_handshake_facts():
    cap = amqpcap.load(ROOT / "fixtures" / "confirms.pcap")
    c = cap.connections
    assert (c["protocol_header_seen"]).all() and (c["handshake_seen"]).all()
    assert (c["broker_port"] == 5672).all()
    assert set(c["vhost"]) == {"/"}
    assert set(c["user"]) == {"guest"}
    assert (c["frame_max"] > 0).all()
    assert c["client_product"].str.contains("RabbitMQ", na=False).all()
    # tune-ok is what the client agreed to; the frames table has both tune and tune-ok
    f = cap.frames
    tune_ok = f[f["method"] == "connection.tune-ok"].set_index("stream")["frame_max"]
    assert (c.set_index("stream")["frame_max"] == tune_ok).all()


def test_midstream_capture_is_decoded_without_handshake():
    cap = amqpcap.load(ROOT / "fixtures" / "midstream.pcap")
    c = cap.connections
    assert not c["protocol_header_seen"].any() and not c["handshake_seen"].any()
    assert (c["broker_port"] == 5672).all()
    assert (cap.frames["direction"][cap.frames["method"] == "basic.deliver"] == "s2c").all()
    assert (cap.frames["direction"][cap.frames["method"] == "basic.ack"] == "c2s").all()


# --- packet by packet against tshark run now -------------------------------------------------

TSHARK = shutil.which("tshark")
PACKET_FIELDS = ["frame.number", "frame.time_epoch", "frame.len", "tcp.stream", "tcp.len", "tcp.seq", "tcp.ack", "tcp.window_size", "tcp.flags", "tcp.analysis.retransmission"]


def tshark_packets(path: Path) -> pd.DataFrame:
    cmd = [TSHARK, "-r", str(path), "-Y", "tcp", "-T", "fields", "-E", "separator=\t", "-E", "occurrence=f"]
    for f in PACKET_FIELDS:
        cmd += ["-e", f]
    text = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = [line.split("\t") for line in text.splitlines() if line]
    return pd.DataFrame(rows, columns=PACKET_FIELDS)


@pytest.mark.skipif(TSHARK is None, reason="tshark is installed by the README's test command")
@pytest.mark.parametrize(
    "name",
    one_fast(["confirms.pcap", "nanosecond.pcap", "dumpcap.pcapng", "any-sll2.pcap", "any-sll.pcap", "ipv6.pcap", "midstream.pcap", "gzipped.pcap.gz", "kernel-drops.pcap", "zero-window.pcap", "flow-control.pcap.gz"], keep="nanosecond.pcap"),
)
def test_packets_table_equals_tshark_packet_by_packet(name):
    path = ROOT / "fixtures" / name
    cap = amqpcap.load(path)
    t = tshark_packets(path)
    t = t[t["tcp.stream"].astype(int).isin(set(cap.connections["stream"]))]
    p = cap.packets
    assert len(p) == len(t)
    assert (p["packet"].to_numpy() == t["frame.number"].astype(int).to_numpy()).all()
    assert (p["stream"].to_numpy() == t["tcp.stream"].astype(int).to_numpy()).all()
    assert (p["frame_len"].to_numpy() == t["frame.len"].astype(int).to_numpy()).all()
    assert (p["payload_bytes"].to_numpy() == t["tcp.len"].astype(int).to_numpy()).all()
    assert (p["seq"].to_numpy() == t["tcp.seq"].astype(int).to_numpy()).all()
    assert (p["ack"].to_numpy() == t["tcp.ack"].astype(int).to_numpy()).all()
    assert (p["window"].to_numpy() == t["tcp.window_size"].astype(int).to_numpy()).all()
    assert (p["flags"].to_numpy() == t["tcp.flags"].apply(lambda x: int(x, 16)).to_numpy()).all()
    # Timestamps to the nanosecond: tshark prints the epoch with the file's full precision.
    ns = t["frame.time_epoch"].map(lambda s: int(Decimal(s) * 1_000_000_000)).to_numpy()
    assert (p["ts"].astype("int64").to_numpy() == ns).all()
    retrans = (t["tcp.analysis.retransmission"] != "").to_numpy()
    assert (p["retransmission"].to_numpy() == retrans).all()


@pytest.mark.slow
@pytest.mark.skipif(TSHARK is None, reason="tshark is installed by the README's test command")
def test_flow_control_cut_frames_wait_behind_zero_windows():
    """flow-control.pcap.gz was cut by tcpdump -c during the run. Every frame amqpcap reports as
    unfinished is in the last data segment a producer sent on that connection, and from then
    to the end of the capture the broker (port 5672) advertised only zero windows there: the
    rest of the frame could not have been sent before the capture ended (tshark's view)."""
    path = ROOT / "fixtures" / "flow-control.pcap.gz"
    a = amqpcap.load(path).anomalies
    assert len(a) and set(a["kind"]) == {"incomplete-frame"} and set(a["direction"]) == {"c2s"}
    streams = ", ".join(str(s) for s in sorted(set(a["stream"])))
    cmd = [TSHARK, "-r", str(path), "-Y", f"tcp.stream in {{{streams}}}", "-T", "fields", "-E", "separator=\t"]
    for f in ("frame.number", "tcp.stream", "tcp.srcport", "tcp.len", "tcp.window_size"):
        cmd += ["-e", f]
    text = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    t = pd.DataFrame([line.split("\t") for line in text.splitlines() if line],
                     columns=["frame", "stream", "srcport", "len", "window"]).astype(int)
    for row in a.itertuples():
        s = t[t["stream"] == row.stream]
        sent = s[(s["srcport"] != 5672) & (s["len"] > 0)]
        assert sent["frame"].iloc[-1] == row.packet
        after = s[(s["srcport"] == 5672) & (s["frame"] >= row.packet)]
        assert len(after) and (after["window"] == 0).all()
