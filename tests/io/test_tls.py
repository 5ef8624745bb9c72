"""AMQPS: TLS connections detected without keys, decrypted with a key log.

Fixtures (fixtures/README.md): tls.pcap is one pika connection over TLS 1.3 on 5671, tls.keylog
the client's key log, tls-plaintext.pcap the same deterministic workload over plain AMQP on 5672.
Expected values come from tshark (with and without the key log) and from the plaintext twin.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

import amqpcap
from amqpcap.model.errors import ToolError, UsageError

import crafting as c
from test_fixtures import method_counts, type_counts

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "fixtures"
TLS, KEYLOG, TWIN = FIX / "tls.pcap", FIX / "tls.keylog", FIX / "tls-plaintext.pcap"
FACTS = json.loads((FIX / "tls.pcap.tshark.json").read_text())
needs_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is installed by scripts/test.sh")


def tshark_fields(path: Path, *args: str, fields: list[str]) -> list[list[str]]:
    cmd = ["tshark", "-r", str(path), *args, "-T", "fields", "-E", "separator=/t", "-E", "occurrence=a"]
    for f in fields:
        cmd += ["-e", f]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [line.split("\t") for line in out.splitlines()]


def stream_payload_bytes(path: Path, broker_port: int) -> dict[str, int]:
    """Bytes of each direction's TCP stream by tshark: tcp.len of every segment that is not a
    retransmission."""
    out = Counter()
    for sport, n, retrans in tshark_fields(path, fields=["tcp.srcport", "tcp.len", "tcp.analysis.retransmission"]):
        if not retrans:
            out["s2c" if int(sport) == broker_port else "c2s"] += int(n)
    return dict(out)


@pytest.fixture(scope="module")
def encrypted():
    return amqpcap.load(TLS)


@pytest.fixture(scope="module")
def decrypted():
    return amqpcap.load(TLS, tls_keylog=KEYLOG)


@pytest.fixture(scope="module")
def twin():
    return amqpcap.load(TWIN)


def test_fixtures_present():
    assert TLS.is_file() and KEYLOG.is_file() and TWIN.is_file()
    assert "CLIENT_HANDSHAKE_TRAFFIC_SECRET" in KEYLOG.read_text()  # TLS 1.3 secrets


# --- without keys ------------------------------------------------------------------------------

@needs_tshark
def test_without_keys_the_connection_is_listed_encrypted_and_skipped(encrypted):
    cap = encrypted
    assert 5671 in amqpcap.DEFAULT_PORTS
    c_ = cap.connections
    assert len(c_) == 1
    row = c_.iloc[0]
    assert bool(row["tls"]) and not bool(row["tls_decrypted"])
    assert row["broker_port"] == 5671 and row["frames"] == 0 and len(cap.frames) == 0
    # tshark without keys sees no AMQP either
    assert FACTS["methods"] == {} and FACTS["frame_types"] == {}
    # every stream byte is skipped, as counted by tshark, with one anomaly per direction
    expected = stream_payload_bytes(TLS, 5671)
    a = cap.anomalies.set_index("direction")
    assert set(cap.anomalies["kind"]) == {"tls-encrypted"}
    for d in ("c2s", "s2c"):
        assert row[f"{d}_stream_bytes"] == expected[d]
        assert row[f"{d}_bytes_skipped"] == expected[d]
        assert row[f"{d}_bytes_decoded"] == 0 and row[f"{d}_bytes_missing"] == 0
        assert a.loc[d, "bytes"] == expected[d]
    # noticed on the first handshake record of each direction: ClientHello, ServerHello
    hellos = tshark_fields(TLS, "-Y", "tls.handshake.type == 1 || tls.handshake.type == 2", fields=["frame.number", "tcp.srcport"])
    first = {("s2c" if int(sp) == 5671 else "c2s"): int(n) for n, sp in reversed(hellos)}
    assert {d: int(a.loc[d, "packet"]) for d in ("c2s", "s2c")} == first
    assert cap.warnings == ["1 TLS connection is encrypted and was skipped (pass --tls-keylog FILE to decrypt)"]


def test_cli_warns_about_encrypted_connections():
    r = subprocess.run([sys.executable, "-m", "amqpcap.cli", "analyze", str(TLS)], capture_output=True, text=True,
                       cwd=ROOT, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    assert "1 TLS connection is encrypted and was skipped (pass --tls-keylog FILE to decrypt)" in " ".join(r.stderr.split())


# --- with the key log ------------------------------------------------------------------------

@needs_tshark
def test_decrypted_counts_equal_tshark_with_the_key_log(decrypted):
    cap = decrypted
    facts = FACTS["decrypted"]
    assert method_counts(cap.frames) == facts["methods"]
    assert type_counts(cap.frames) == facts["frame_types"]
    per_stream = {str(s): method_counts(g) for s, g in cap.frames.groupby("stream")}
    assert per_stream == facts["streams"]
    assert len(cap.anomalies) == 0 and cap.warnings == []
    row = cap.connections.iloc[0]
    assert bool(row["tls"]) and bool(row["tls_decrypted"])
    assert row["client_product"] == "Pika Python Client Library" and row["user"] == "guest"


@needs_tshark
def test_decrypted_frames_sit_on_the_packets_tshark_shows_them_in(decrypted):
    """Frame numbers are the capture's own: the packets tshark (with the key log) shows each
    AMQP frame in, frame by frame."""
    rows = tshark_fields(TLS, "-o", f"tls.keylog_file:{KEYLOG}", "-Y", "amqp.type", fields=["frame.number", "amqp.type"])
    expected = [int(n) for n, types in rows for _ in types.split(",")]
    assert decrypted.frames["packet"].tolist() == expected


@needs_tshark
def test_decrypted_frames_equal_the_plaintext_twin(decrypted, twin):
    """What is compared: the frames table row by row in order (the connection's frames as they
    complete, both directions interleaved), every column except packet, first_packet, ts and
    stream — i.e. direction, channel, type, size_bytes, class/method ids and name, and every
    decoded argument and content property. The workload is strictly request/response (confirms,
    prefetch 1), so even the interleaving of the directions is fixed."""
    skip = ["packet", "first_packet", "ts", "stream"]
    a = decrypted.frames.drop(columns=skip).astype(object)
    b = twin.frames.drop(columns=skip).astype(object)
    assert len(a) == len(b) == 104
    assert a.columns.tolist() == b.columns.tolist()
    diff = [(i, col) for col in a.columns for i in range(len(a)) if not (pd.isna(a.at[i, col]) and pd.isna(b.at[i, col])) and a.at[i, col] != b.at[i, col]]
    assert diff == []
    # and the connection facts decoded from them
    cols = ["frame_max", "channel_max", "heartbeat_s", "vhost", "user", "mechanism", "client_product",
            "client_version", "client_platform", "connection_name", "server_product", "server_version", "frames"]
    assert decrypted.connections[cols].astype(object).equals(twin.connections[cols].astype(object))


@needs_tshark
def test_decrypted_byte_accounting_is_the_plaintext_stream(decrypted, twin):
    """Decoded bytes are plaintext: the twin's TCP stream byte for byte (tshark's tcp.len)."""
    row = decrypted.connections.iloc[0]
    expected = stream_payload_bytes(TWIN, 5672)
    for d in ("c2s", "s2c"):
        assert row[f"{d}_bytes_decoded"] == expected[d]
        assert row[f"{d}_bytes_skipped"] == 0 and row[f"{d}_bytes_missing"] == 0
        assert row[f"{d}_stream_bytes"] == expected[d]
    # ... while the wire columns still describe the TLS segments (tshark without keys)
    wire = stream_payload_bytes(TLS, 5671)
    assert (row["c2s_bytes"], row["s2c_bytes"]) == (wire["c2s"], wire["s2c"])


def test_packets_table_is_the_wire_with_or_without_keys(encrypted, decrypted):
    a = encrypted.packets.drop(columns=["frames_ended"])
    b = decrypted.packets.drop(columns=["frames_ended"])
    assert a.equals(b)
    assert decrypted.packets["frames_ended"].sum() == len(decrypted.frames)


def test_key_log_without_the_secrets(tmp_path, twin):
    other = tmp_path / "other.keylog"
    other.write_text("CLIENT_RANDOM " + "00" * 32 + " " + "11" * 48 + "\n")
    if shutil.which("tshark") is None:
        pytest.skip("tshark")
    cap = amqpcap.load(TLS, tls_keylog=other)
    assert len(cap.frames) == 0 and set(cap.anomalies["kind"]) == {"tls-encrypted"}
    assert cap.warnings == [f"1 TLS connection is encrypted and was skipped: the key log {other} has no secrets for it"]
    # plaintext captures are not affected by a key log
    with_log = amqpcap.load(TWIN, tls_keylog=KEYLOG)
    assert with_log.frames.astype(object).equals(twin.frames.astype(object))
    assert with_log.warnings == [f"no TLS connection on the AMQP ports: the key log {KEYLOG} was not used"]


def test_missing_key_log_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="cannot read TLS key log"):
        amqpcap.load(TLS, tls_keylog=tmp_path / "nope.log")


def test_missing_tshark_is_reported(monkeypatch):
    import amqpcap.io.tshark_packets  # (where tshark is looked for)

    monkeypatch.setattr(amqpcap.io.tshark_packets.shutil, "which", lambda name: None)
    with pytest.raises(ToolError, match="needs tshark"):
        amqpcap.load(TLS, tls_keylog=KEYLOG)


# --- detection on crafted streams -------------------------------------------------------------

def tls_record(ctype: int, body: bytes, version: bytes = b"\x03\x03") -> bytes:
    return bytes([ctype]) + version + len(body).to_bytes(2, "big") + body


CLIENT_HELLO = tls_record(22, b"\x01\x00\x00\x2a" + bytes(42), b"\x03\x01")
SERVER_HELLO = tls_record(22, b"\x02\x00\x00\x26" + bytes(38))


def test_crafted_tls_handshake_on_an_amqp_port(tmp_path):
    conv = c.TcpConversation(broker=("10.0.0.2", 5671)).handshake()
    conv.send("c2s", CLIENT_HELLO)
    conv.send("s2c", SERVER_HELLO + tls_record(23, bytes(300)))
    conv.send("c2s", tls_record(23, bytes(100)) + tls_record(23, bytes(50)))
    recs = conv.timed()
    cap = amqpcap.load(c.write_pcap(tmp_path / "t.pcap", recs))  # default ports: 5671 is AMQPS
    row = cap.connections.iloc[0]
    assert bool(row["tls"]) and len(cap.frames) == 0
    c2s = len(conv.data["c2s"])
    s2c = len(conv.data["s2c"])
    assert (row["c2s_bytes_skipped"], row["s2c_bytes_skipped"]) == (c2s, s2c)
    a = cap.anomalies.sort_values("direction")
    assert a["kind"].tolist() == ["tls-encrypted"] * 2
    assert a["bytes"].tolist() == [c2s, s2c]
    assert a["packet"].tolist() == [4, 5]  # ClientHello, ServerHello


def test_crafted_tls_mid_connection(tmp_path):
    """No SYN, no handshake: a chain of application-data records on an AMQP port is TLS."""
    conv = c.TcpConversation(broker=("10.0.0.2", 5671))
    conv.send("s2c", tls_record(23, bytes(200)) + tls_record(23, bytes(20)))
    conv.send("c2s", tls_record(23, bytes(64)))
    cap = amqpcap.load(c.write_pcap(tmp_path / "m.pcap", conv.timed()))
    assert bool(cap.connections.iloc[0]["tls"])
    assert set(cap.anomalies["kind"]) == {"tls-encrypted"} and len(cap.frames) == 0


def test_plain_amqp_on_5671_is_not_tls(tmp_path):
    conv = c.TcpConversation(broker=("10.0.0.2", 5671)).handshake()
    conv.exchange(c.opening())
    cap = amqpcap.load(c.write_pcap(tmp_path / "p.pcap", conv.timed()))
    assert not cap.connections["tls"].any() and len(cap.anomalies) == 0
    c.assert_frames(cap.frames, c.expected_frames(conv.packets, conv))


def test_midstream_amqp_starting_like_a_tls_header_is_not_tls(tmp_path):
    """Mid-connection, bytes that begin like one TLS record header but are not followed by
    another are AMQP (here the tail of a body frame whose bytes look like a record header)."""
    conv = c.TcpConversation()
    body = c.body_frame(data=bytes(40) + b"\x17\x03\x03\x00\x05" + bytes(20))
    tail = bytes(body)[7 + 40:]  # the capture starts inside the body
    frames = [c.basic_ack(delivery_tag=1), c.basic_ack(delivery_tag=2)]
    conv.send("c2s", tail)
    conv.send_frames("c2s", frames)
    cap = c.load(c.write_pcap(tmp_path / "x.pcap", conv.timed()))
    assert not cap.connections["tls"].any()
    assert cap.frames["method"].astype(str).tolist() == ["basic.ack", "basic.ack"]


@needs_tshark
def test_cli_decrypts_with_tls_keylog(tmp_path):
    import os

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "amqpcap.cli", "frames", str(TLS), "--tls-keylog", str(KEYLOG),
                        "-o", str(tmp_path / "f.csv")], capture_output=True, text=True, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr
    frames = pd.read_csv(tmp_path / "f.csv")
    assert len(frames) == sum(FACTS["decrypted"]["frame_types"].values())
    r = subprocess.run([sys.executable, "-m", "amqpcap.cli", "info", str(TLS), "--tls-keylog", str(tmp_path / "nope")],
                       capture_output=True, text=True, env=env, cwd=ROOT)
    assert r.returncode == 64 and "cannot read TLS key log" in r.stderr and "Traceback" not in r.stderr
