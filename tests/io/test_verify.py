"""`amqpcap verify`: amqpcap against Wireshark's dissector through pyshark.

On every fixture and the nDPI capture the two must agree. pyshark's side is itself checked
against the committed tshark facts (a different tshark invocation: -T fields), and crafted
captures show the known Wireshark limits being recognised and explained.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

import crafting as c
from test_fixtures import FACTS, capture_of
from tiers import one_fast

pytest.importorskip("pyshark")
if shutil.which("tshark") is None:
    pytest.skip("tshark is installed by scripts/test.sh", allow_module_level=True)

from amqpcap.io import verify as V

ROOT = Path(__file__).resolve().parents[2]


def wireshark_by_id(v: V.Verification, names_to_ids: dict[str, str]) -> tuple[dict, dict]:
    """pyshark's counts as the facts files key them: methods by "class.method", types by octet
    (an AMQP 1.0 stream's frame count is `amqp10_streams`, compared on its own)."""
    methods, types = {}, {}
    for s in v.streams:
        m = {names_to_ids.get(k, k): n for k, n in s.wireshark.items()
             if not k.startswith("type ") and k != V.AMQP10_ITEM and n}
        t = {V.TYPE_IDS.get(k[5:], k[5:]): n for k, n in s.wireshark.items() if k.startswith("type ") and n}
        if m:
            methods[str(s.stream)] = m
        if t:
            types[str(s.stream)] = t
    return methods, types


def method_ids(cap_frames) -> dict[str, str]:
    m = cap_frames[cap_frames["type"] == "method"].drop_duplicates(["class_id", "method_id"])
    return {str(n): f"{int(a)}.{int(b)}" for a, b, n in zip(m["class_id"], m["method_id"], m["method"])}


@pytest.mark.parametrize("facts_path", one_fast(FACTS), ids=lambda p: p.name[: -len(".tshark.json")])
def test_verify_agrees_on_every_real_capture(facts_path):
    import amqpcap

    path = capture_of(facts_path)
    facts = json.loads(facts_path.read_text())
    v = V.verify(path)
    assert v.exit_code == 0 and v.differences == [], [d.to_json() for d in v.differences]
    # pyshark's side equals tshark's committed facts, stream by stream
    ids = method_ids(amqpcap.load(path).frames)
    methods, types = wireshark_by_id(v, ids)
    assert methods == facts["streams"]
    if "stream_frame_types" in facts:
        assert types == facts["stream_frame_types"]
    amqp10 = {str(s.stream): {"frames": s.wireshark[V.AMQP10_ITEM]} for s in v.streams if s.wireshark[V.AMQP10_ITEM]}
    assert amqp10 == {k: {"frames": a["frames"]} for k, a in facts.get("amqp10_streams", {}).items()}


def test_verify_decrypted_tls_agrees_with_wireshark_decrypting():
    fix = ROOT / "fixtures"
    v = V.verify(fix / "tls.pcap", tls_keylog=fix / "tls.keylog")
    assert v.exit_code == 0 and v.differences == []
    facts = json.loads((fix / "tls.pcap.tshark.json").read_text())["decrypted"]
    total = sum(n for s in v.streams for k, n in s.wireshark.items() if not k.startswith("type "))
    assert total == sum(facts["methods"].values()) == 64


def large_frame_capture(path: Path) -> Path:
    conv = c.TcpConversation(mss=65000).handshake()
    conv.exchange(c.opening(frame_max=0))
    conv.send_frames("c2s", [c.basic_publish()] + c.content(body=bytes(1_100_000), frame_max=2_000_000))
    conv.send_frames("c2s", [c.basic_ack()])
    return c.write_pcap(path, conv.timed())


def gap_capture(path: Path) -> Path:
    """A dropped segment that ends inside a frame: the next captured segment starts mid-frame."""
    conv = c.TcpConversation().handshake()
    conv.exchange(c.opening())
    frames = [c.basic_publish(routing_key="k%d" % i) for i in range(6)]
    segs = conv.send_frames("c2s", frames, segment_sizes=[30, 30, 30, 30, 30])
    conv.ack("s2c")
    conv.drop(segs[1])
    conv.send_frames("c2s", [c.basic_ack(delivery_tag=7)])
    conv.ack("s2c")
    return c.write_pcap(path, conv.timed())


def tshark_count(path: Path, display_filter: str) -> int:
    out = subprocess.run(["tshark", "-r", str(path), "-Y", display_filter, "-T", "fields", "-e", "frame.number"],
                         capture_output=True, text=True, check=True).stdout
    return len(out.split())


def test_frame_over_one_mib_is_an_explained_difference(tmp_path):
    path = large_frame_capture(tmp_path / "big.pcap")
    v = V.verify(path)
    assert v.exit_code == 0
    (d,) = v.differences
    # Wireshark decodes the 1.1 MB body's zero bytes as frames of type 0; amqpcap has none
    assert (d.item, d.amqpcap, d.cause) == ("type 0", 0, "large-frame") and d.wireshark > 1000
    assert tshark_count(path, d.filter) == 1  # all of them in the packet that ends the body


def test_garbage_after_a_gap_is_an_explained_difference(tmp_path):
    path = gap_capture(tmp_path / "gap.pcap")
    v = V.verify(path)
    assert v.exit_code == 0
    assert {d.cause for d in v.differences} == {"capture-gap"}
    byitem = {d.item: d for d in v.differences}
    # amqpcap: the 6 publishes minus the two the hole cut, then the ack (from the crafted input)
    assert byitem["basic.publish"].amqpcap == 4 and byitem["basic.ack"].amqpcap == 1
    assert byitem["basic.publish"].wireshark < 4
    for d in v.differences:
        assert tshark_count(path, d.filter) == (1 if d.wireshark else 0) or d.wireshark > 1


def test_unexplained_difference_exits_1_and_is_shown(tmp_path, monkeypatch):
    path = gap_capture(tmp_path / "gap.pcap")
    monkeypatch.setattr(V, "_cause", lambda cap, stream: None)
    v = V.verify(path)
    assert v.exit_code == 1 and len(v.unexplained) == len(v.differences) >= 2
    buf = io.StringIO()
    V.render(Console(file=buf, width=200), v)
    text = buf.getvalue()
    assert "DIFFERS" in text and "unexplained" in text
    for d in v.differences:
        assert d.filter in text


def test_cli_verify_exit_codes_and_json(tmp_path):
    big = large_frame_capture(tmp_path / "big.pcap")
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "amqpcap.cli", "verify", str(big), "--json", str(tmp_path / "v.json")],
                       capture_output=True, text=True, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "frame over 1 MiB" in " ".join(r.stdout.split())
    doc = json.loads((tmp_path / "v.json").read_text())
    assert doc["exit_code"] == 0 and doc["differences"][0]["filter"].startswith("tcp.stream eq 0 && amqp.type == 0")
