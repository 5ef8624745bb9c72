"""`amqpcap verify`: amqpcap against Wireshark's dissector (tshark's PDML).

On every fixture and the nDPI capture the two must agree. verify's Wireshark side is itself checked
against the committed tshark facts (a different tshark invocation: -T fields), and crafted
captures show the known Wireshark limits being recognised and explained.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from rich.console import Console

import crafting as c
from test_fixtures import FACTS, capture_of
from tiers import one_fast

if shutil.which("tshark") is None:
    pytest.skip("tshark is installed by scripts/test.sh", allow_module_level=True)

from amqpcap.io import verify as V

ROOT = Path(__file__).resolve().parents[2]


def wireshark_by_id(v: V.Verification, names_to_ids: dict[str, str]) -> tuple[dict, dict]:
    """Wireshark's counts as the facts files key them: methods by "class.method", types by octet
    (an AMQP 1.0 stream's frame count is `amqp10_streams`, its per-direction rows
    `amqp10_directions`, compared on their own)."""
    methods, types = {}, {}
    for s in v.streams:
        m = {names_to_ids.get(k, k): n for k, n in s.wireshark.items()
             if not k.startswith(("type ", "c2s ", "s2c ")) and k != V.AMQP10_ITEM and n}
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
    # verify's Wireshark side equals tshark's committed facts, stream by stream
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


# --- AMQP 1.0: field by field, per direction ----------------------------------------------------

AMQP10_FIXTURES = sorted((ROOT / "fixtures").glob("amqp10*.pcap"))
#: performative codes (OASIS AMQP 1.0 Part 2 §2.7; SASL Part 5 §5.3.3) as the facts files key them
PERFORMATIVE_NAMES = {"16": "open", "17": "begin", "18": "attach", "19": "flow", "20": "transfer",
                      "21": "disposition", "22": "detach", "23": "end", "24": "close",
                      "64": "sasl-mechanisms", "65": "sasl-init", "66": "sasl-challenge",
                      "67": "sasl-response", "68": "sasl-outcome"}


def rows(counts, prefix: str) -> dict[str, int]:
    """The rows starting with ``prefix``, by the rest of their name (zeros left out)."""
    return {k[len(prefix):]: n for k, n in counts.items() if k.startswith(prefix) and n}


@pytest.mark.parametrize("path", AMQP10_FIXTURES, ids=lambda p: p.name)
def test_amqp10_fields_agree_and_are_the_tshark_facts(path):
    """Every AMQP 1.0 fixture verifies with no difference, and the rows compared are real: the
    Wireshark side (verify's second PDML pass) and amqpcap's both equal the committed tshark facts
    (fixtures/record/tshark_facts.py, another tshark invocation), direction by direction."""
    facts = json.loads(Path(str(path) + ".tshark.json").read_text())
    v = V.verify(path)
    assert v.exit_code == 0 and v.differences == [], [d.to_json() for d in v.differences]
    by_stream = {str(s.stream): s for s in v.streams}
    assert facts["amqp10_directions"]
    for sid, dirs in facts["amqp10_directions"].items():
        comp = by_stream[sid]
        sasl = {}
        for side in (comp.amqpcap, comp.wireshark):
            for d in ("c2s", "s2c"):
                x = dirs[d]
                p = f"{d} "
                assert x["frames"] > 0 and side[p + "frames"] == x["frames"]
                assert side[p + "empty frame"] == x["empty_frames"]
                perfs = {PERFORMATIVE_NAMES[c]: n for c, n in x["performatives"].items()}
                amqp = {PERFORMATIVE_NAMES[str(c)] for c in range(16, 25)}  # SASL frames: below
                assert {k: n for k, n in rows(side, p).items() if k in amqp} == perfs
                assert side[p + "transfer settled=true"] == x["transfers_settled"]
                outcomes = Counter()
                for k, n in rows(side, p + "disposition role=").items():
                    outcomes[k.split(" outcome=")[1]] += n
                assert sum(outcomes.values()) == x["dispositions"]
                assert {o: n for o, n in outcomes.items() if o in x["disposition_outcomes"]} == \
                    {o: n for o, n in x["disposition_outcomes"].items() if n}
                assert rows(side, p + "flow link-credit=") == {k: n for k, n in x["flow_link_credit"].items()}
                if x["open"] is not None:
                    idle = x["open"]["idle_timeout_ms"]
                    assert side[p + "open idle-time-out=" + ("none" if idle is None else f"{idle} ms")] == 1
                    assert side[p + "open container-id=" + x["open"]["container_id"]] == 1
                else:  # the mid-stream capture starts after the opens
                    assert not rows(side, p + "open")
                attaches = Counter(f"role={a['role']} name={a['name']}" for a in x["attaches"])
                assert rows(side, p + "attach ") == dict(attaches)
            sasl[id(side)] = {c: side[f"c2s {PERFORMATIVE_NAMES[c]}"] + side[f"s2c {PERFORMATIVE_NAMES[c]}"]
                              for c in facts["amqp10_streams"][sid]["sasl"]}
        for n in sasl.values():  # SASL frames per stream (the facts do not split them by direction)
            assert dict(n) == facts["amqp10_streams"][sid]["sasl"]
        if "midstream" not in path.name:
            # every recorded client logs in with PLAIN and the broker says ok (fixtures/record/proton_client.py)
            for side in (comp.amqpcap, comp.wireshark):
                assert side["c2s sasl-init mechanism=PLAIN"] == side["s2c sasl-outcome code=ok"] == 1
                # (RabbitMQ lists the mechanisms it offers in no fixed order)
                (offered,) = rows(side, "s2c sasl-mechanisms offered=").items()
                assert "PLAIN" in offered[0].split() and offered[1] == 1


def altered_load(monkeypatch, change):
    """Make verify's amqpcap side (the tables `load()` returns) read differently: ``change``
    edits the capture's amqp10_frames, as a decoding bug would."""
    real = V.load

    def load(*args, **kwargs):
        cap = real(*args, **kwargs)
        change(cap.amqp10_frames)
        return cap

    monkeypatch.setattr(V, "load", load)


def test_amqp10_field_difference_is_reported_with_its_filter(monkeypatch):
    """amqp10.pcap's broker grants link-credit 255 once (tshark facts); amqpcap made to read 254
    there, and one accepted disposition as released: four differing rows, unexplained (the
    stream is clean), exit 1, each with a filter that opens Wireshark's packet."""
    path = ROOT / "fixtures" / "amqp10.pcap"

    def change(f):
        flow = f.index[(f["direction"] == "s2c") & (f["link_credit"] == 255)]
        assert len(flow) == 1
        f.loc[flow, "link_credit"] = 254
        disp = f.index[(f["direction"] == "s2c") & (f["performative"] == "disposition")][0]
        if "released" not in f["state"].cat.categories:
            f["state"] = f["state"].cat.add_categories(["released"])
        f.loc[disp, "state"] = "released"

    altered_load(monkeypatch, change)
    v = V.verify(path)
    assert v.exit_code == 1
    got = {d.item: (d.amqpcap, d.wireshark) for d in v.differences}
    assert got == {"s2c flow link-credit=255": (0, 1), "s2c flow link-credit=254": (1, 0),
                   "s2c disposition role=receiver outcome=accepted": (19, 20),
                   "s2c disposition role=receiver outcome=released": (1, 0)}
    assert all(d.stream == 1 and not d.explained for d in v.differences)
    byitem = {d.item: d for d in v.differences}
    assert byitem["s2c flow link-credit=255"].filter == (
        "tcp.stream eq 1 && tcp.srcport == 5672 && amqp.performative == 19 && amqp.performative.arguments.linkCredit == 255")
    assert tshark_count(path, byitem["s2c flow link-credit=255"].filter) == 1
    assert tshark_count(path, byitem["s2c flow link-credit=254"].filter) == 0
    assert tshark_count(path, byitem["s2c disposition role=receiver outcome=accepted"].filter) == 20
    buf = io.StringIO()
    V.render(Console(file=buf, width=250), v)
    text = buf.getvalue()
    assert "DIFFERS" in text and "unexplained" in text and "4 unexplained differences" in text
    for d in v.differences:
        assert d.filter in text


def test_a_dataset_is_refused_in_words_naming_its_capture(tmp_path):
    """tshark reads files: `verify DATASET` says so in one line (exit 64) and names the capture
    the dataset was made from, instead of tshark's complaint that a directory is not a file."""
    capture = ROOT / "fixtures" / "confirms.pcap"
    ds = tmp_path / "confirms.ds"
    made = subprocess.run([sys.executable, "-m", "amqpcap", "ingest", str(capture), "--out", str(ds)],
                          capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    r = subprocess.run([sys.executable, "-m", "amqpcap", "verify", str(ds)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 64, r.stderr
    [line] = r.stderr.strip().splitlines()
    assert "is a dataset (amqpcap ingest)" in line and line.endswith(f"made from: {capture}"), line
