"""tshark's packets as `amqpcap verify` reads them (amqpcap.io.tshark_packets): the JSON and the
PDML readers agree with each other and with tshark's own -T fields, the JSON reader is the same
however its input is cut, a reader stopped early leaves no tshark behind, and a tshark that
fails is one ToolError with tshark's message."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from amqpcap.io import tshark_packets as T
from amqpcap.model.errors import ToolError

if shutil.which("tshark") is None:
    pytest.skip("tshark is installed by scripts/test.sh", allow_module_level=True)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
# AMQP 0-9-1 with several frames per packet; AMQP 1.0 with SASL (shown names)
CAPTURES = [FIXTURES / "confirms.pcap", FIXTURES / "amqp10-credit1.pcap"]
AMQP = {"tcp.port==5672": "amqp"}


def command(path: Path, output: str, whole_layers: bool = False) -> list[str]:
    return T.tshark_command(str(path), output=output, display_filter="amqp", protocols="tcp amqp",
                            whole_layers=whole_layers, decode_as=AMQP, prefs={"tcp.desegment_tcp_streams": "TRUE"})


def amqp_rows(packets) -> list[tuple]:
    """Per packet: its stream, and each amqp layer's frame type, length, method class and data
    offset."""
    rows = []
    for pkt in packets:
        tcp = next(l for l in pkt if l.name == "tcp")
        frames = tuple((l.show("amqp.type"), l.show("amqp.length"), l.show("amqp.method.class"), l.show("amqp.doff"))
                       for l in pkt if l.name == "amqp")
        rows.append((tcp.show("tcp.stream"), frames))
    return rows


def fields_rows(path: Path) -> list[tuple]:
    """The same from tshark -T fields: every occurrence of each field in the packet, in order."""
    out = subprocess.run(["tshark", "-n", "-r", str(path), "-Y", "amqp", "-d", "tcp.port==5672,amqp",
                          "-o", "tcp.desegment_tcp_streams:TRUE", "-T", "fields", "-E", "occurrence=a",
                          "-E", "aggregator=;", "-e", "tcp.stream", "-e", "amqp.type", "-e", "amqp.doff",
                          "-e", "amqp.length"], capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        stream, types, doffs, lengths = line.split("\t")
        rows.append((stream, sorted(t for t in types.split(";") if t), len([d for d in doffs.split(";") if d]),
                     sorted(n for n in lengths.split(";") if n)))
    return rows


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_json_and_pdml_readers_agree_with_tshark_fields(path):
    json_rows = amqp_rows(T.packets(command(path, "json"), str(path)))
    pdml_rows = amqp_rows(T.packets(command(path, "pdml"), str(path)))
    assert json_rows == pdml_rows
    # against -T fields (no layers: compare what it keeps, per packet)
    assert [(s, sorted(t for t, _, _, _ in f if t), sum(d is not None for *_, d in f), sorted(n for _, n, _, _ in f if n))
            for s, f in json_rows] == fields_rows(path)
    assert max(len(f) for _, f in json_rows) > 1  # packets with several frames were read


def test_pdml_keeps_the_shown_names():
    path = FIXTURES / "amqp10-credit1.pcap"
    cmd = T.tshark_command(str(path), output="pdml", display_filter="amqp.sasl.method == 64", protocols="amqp",
                           whole_layers=True, decode_as=AMQP, prefs={})
    [pkt] = list(T.packets(cmd, str(path)))
    [layer] = [l for l in pkt if l.name == "amqp"]
    shown = [f.shown_value for f in layer.all("amqp.list") or layer.all("amqp.sasl.mechanisms_sym")]
    assert "PLAIN" in shown and all(":" not in s for s in shown)


def test_json_reader_is_the_same_in_small_chunks(monkeypatch):
    path = CAPTURES[0]
    whole = [[(l.name, l.fields) for l in p] for p in T.packets(command(path, "json", whole_layers=True), str(path))]
    monkeypatch.setattr(T, "_JSON_CHUNK_BYTES", 97)
    cut = [[(l.name, l.fields) for l in p] for p in T.packets(command(path, "json", whole_layers=True), str(path))]
    assert cut == whole and len(whole) > 100


def test_json_reader_decodes_utf8_cut_between_chunks(monkeypatch):
    import io
    text = '[\n  {"_source": {"layers": {"amqp": {"amqp.x": "caf\u00e9 \u00e9t\u00e9"}}}},\n  {"_source": {"layers": {}}}\n]\n'
    for size in (1, 2, 3, 5):
        monkeypatch.setattr(T, "_JSON_CHUNK_BYTES", size)
        got = list(T._json_packets(io.BytesIO(text.encode())))
        assert [[(l.name, l.show("amqp.x")) for l in p] for p in got] == [[("amqp", "caf\u00e9 \u00e9t\u00e9")], []]


def test_a_reader_stopped_early_leaves_no_tshark_running(monkeypatch):
    path = FIXTURES / "confirms.pcap"
    started = []
    real_popen = subprocess.Popen

    def popen(*a, **k):
        started.append(real_popen(*a, **k))
        return started[-1]

    monkeypatch.setattr(T.subprocess, "Popen", popen)
    packets = T.packets(command(path, "pdml"), str(path))
    next(packets)
    assert started[0].returncode is None
    packets.close()
    assert started[0].returncode is not None  # killed and waited for


def test_a_tshark_that_fails_is_one_tool_error_with_its_message(tmp_path):
    bad = tmp_path / "not-a-capture.pcap"
    bad.write_bytes(b"this is not a capture file\n" * 10)
    with pytest.raises(ToolError, match=r"tshark failed on .*not-a-capture\.pcap \(exit status 2\): .*\S"):
        list(T.packets(command(bad, "json"), str(bad)))
