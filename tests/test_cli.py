"""The command line: outputs, and one clear line (never a traceback) for unusable input."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import amqpcap
from amqpcap.cli import INFO_CONNECTIONS

ROOT = Path(__file__).resolve().parent.parent
CONFIRMS = ROOT / "fixtures" / "confirms.pcap"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "amqpcap", *map(str, args)], capture_output=True, text=True, timeout=120)


def test_frames_csv_has_the_documented_columns(tmp_path):
    out = tmp_path / "frames.csv"
    r = run("frames", CONFIRMS, "-o", out)
    assert r.returncode == 0, r.stderr
    csv = pd.read_csv(out)
    cap = amqpcap.load(CONFIRMS)
    assert list(csv.columns) == list(cap.frames.columns)
    assert len(csv) == len(cap.frames)
    assert csv["method"].value_counts()["basic.publish"] == (cap.frames["method"] == "basic.publish").sum()


def test_frames_parquet(tmp_path):
    out = tmp_path / "frames.parquet"
    r = run("frames", CONFIRMS, "--output", out)
    assert r.returncode == 0, r.stderr
    back = pd.read_parquet(out)
    assert len(back) == len(amqpcap.load(CONFIRMS).frames)


def test_info_lists_connections():
    r = run("info", CONFIRMS)
    assert r.returncode == 0, r.stderr
    assert "AMQP connections" in r.stdout and "basic.publish" in r.stdout
    assert "guest@/" in r.stdout


def test_sample_is_shipped():
    r = run("sample")
    assert r.returncode == 0
    assert Path(r.stdout.strip()).is_file()
    assert len(amqpcap.load(r.stdout.strip()).frames) > 0


def _bad_inputs(tmp: Path) -> dict[str, tuple[Path, str]]:
    empty = tmp / "empty.pcap"
    empty.write_bytes(b"")
    text = tmp / "notes.pcap"
    text.write_text("this is not a capture\n")
    magic = tmp / "wrong-magic.pcap"
    magic.write_bytes(b"\x00\x01\x02\x03" + bytes(100))
    gz_text = tmp / "text.pcap.gz"
    gz_text.write_bytes(gzip.compress(b"hello"))
    return {
        "missing": (tmp / "nope.pcap", "cannot open"),
        "empty": (empty, "is empty"),
        "text": (text, "looks like text"),
        "wrong magic": (magic, "not a pcap or pcapng"),
        "gzip without a capture": (gz_text, "holds no pcap"),
        "a directory": (tmp, "cannot"),
    }


@pytest.mark.parametrize("case", ["missing", "empty", "text", "wrong magic", "gzip without a capture", "a directory"])
def test_unusable_input_is_one_line(tmp_path, case):
    path, words = _bad_inputs(tmp_path)[case]
    r = run("info", path)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("amqpcap: error:") and words in lines[0], r.stderr
    with pytest.raises(amqpcap.CaptureError):
        amqpcap.load(path)


def test_capture_cut_mid_record_decodes_and_warns(tmp_path):
    data = CONFIRMS.read_bytes()
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(data[: len(data) // 2 + 7])
    r = run("info", cut)
    assert r.returncode == 0
    assert "warning:" in r.stderr and "middle of a record" in r.stderr
    cap = amqpcap.load(cut)
    assert cap.summary["truncated"] and (cap.anomalies["kind"] == "capture-truncated").sum() == 1
    assert 0 < len(cap.frames) < len(amqpcap.load(CONFIRMS).frames)


def test_gzip_ending_early_decodes_and_warns(tmp_path):
    data = gzip.compress(CONFIRMS.read_bytes())
    cut = tmp_path / "cut.pcap.gz"
    cut.write_bytes(data[: len(data) // 2])
    cap = amqpcap.load(cut)
    assert cap.summary["truncated"] and cap.warnings
    assert len(cap.frames) > 0


def test_bad_output_and_usage_errors(tmp_path):
    r = run("frames", CONFIRMS, "-o", tmp_path / "x.txt")
    assert r.returncode == 64 and "must end in .csv or .parquet" in r.stderr and "Traceback" not in r.stderr
    r = run("frames", CONFIRMS, "-o", tmp_path / "no" / "such" / "dir.csv")
    assert r.returncode == 64 and "Traceback" not in r.stderr
    r = run("info")
    assert r.returncode == 2 and "Missing argument" in r.stderr and "Traceback" not in r.stderr
    r = run("info", CONFIRMS, "--port", "70000")
    assert r.returncode == 64 and "not a TCP port" in r.stderr


def test_unknown_table_format_is_a_usage_error():
    for cmd in ("analyze", "latency"):
        r = run(cmd, CONFIRMS, "--format", "xml")
        assert r.returncode == 64 and "unknown table format" in r.stderr and "Traceback" not in r.stderr


def test_limits_on_the_command_line(tmp_path):
    r = run("info", CONFIRMS, "--limit", "max_frames=100", "--limit", "max-streams=1K")
    assert r.returncode == 0, r.stderr
    assert "frame-limit" in r.stderr and "warning:" in r.stderr
    assert amqpcap.load(CONFIRMS, limits=amqpcap.Limits(max_frames=100)).frames.shape[0] == 100
    for bad, words in (("max_frame=5", "NAME one of"), ("max_frames", "NAME=VALUE"), ("max_frames=lots", "whole number"),
                       ("max_frames=-1", "whole number")):
        r = run("info", CONFIRMS, "--limit", bad)
        assert r.returncode == 64 and words in r.stderr and "Traceback" not in r.stderr, (bad, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1


def test_limit_suffixes():
    from amqpcap.cli import parse_limits

    l = parse_limits(["max_frames=2K", "max_body_bytes=3M", "max_reassembly_bytes=1g", "max_streams=1_000"])
    assert (l.max_frames, l.max_body_bytes, l.max_reassembly_bytes, l.max_streams) == (2048, 3 << 20, 1 << 30, 1000)
    assert parse_limits(None) is None


def test_bodies_need_an_output_directory():
    r = run("analyze", CONFIRMS, "--bodies")
    assert r.returncode == 64 and "--bodies needs --out" in r.stderr and "Traceback" not in r.stderr


def test_unwritable_output_directory_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    for cmd in ("analyze", "sizes"):
        r = run(cmd, CONFIRMS, "--out", blocker / "out", "--no-plots")
        assert r.returncode == 64 and "cannot write into" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_exit_codes_documented():
    """docs/cli.md's table lists every exit code the command line uses."""
    import re

    from amqpcap import errors

    doc = (ROOT / "docs" / "cli.md").read_text()
    table = doc[doc.index("## Exit codes"):]
    documented = {int(c) for c in re.findall(r"^\| (\d+) \|", table, re.M)}
    used = {cls.exit_code for cls in vars(errors).values() if isinstance(cls, type) and issubclass(cls, errors.AmqpcapError)}
    cli_src = (ROOT / "amqpcap" / "cli.py").read_text()
    used |= {int(c) for c in re.findall(r"sys\.exit\((\d+)\)", cli_src)}
    used |= {1}  # amqpcap verify: an unexplained difference from Wireshark
    assert used | {0} == documented


def test_info_lists_the_busiest_connections_unless_all(tmp_path):
    # 8 copies of healthy.pcap, each its own three connections (19, ~900 and ~900 packets): 24
    big = tmp_path / "many.pcap"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "make_large_capture.py"),
                    str(ROOT / "fixtures" / "healthy.pcap"), str(big), "--packets", "14000"], check=True, capture_output=True)
    conns = amqpcap.load(big).connections
    assert len(conns) > INFO_CONNECTIONS
    packets = conns["c2s_packets"] + conns["s2c_packets"]
    # expected: the INFO_CONNECTIONS largest packet counts, ties to the lower stream
    ranked = sorted(zip(-packets, conns["stream"]))[:INFO_CONNECTIONS]
    expected = sorted(int(s) for _, s in ranked)

    def streams_listed(stdout: str) -> list[int]:
        # the connections table only (the consumers table after it has a stream column too)
        lines = stdout[stdout.index("AMQP connections"):stdout.index("Consumers")].splitlines()
        col = [c.strip() for c in next(x for x in lines if x.startswith("┃")).split("┃")].index("stream")
        return [int(line.split("│")[col]) for line in lines
                if line.startswith("│") and line.split("│")[col].strip().isdigit()]

    r = run("info", big)
    assert r.returncode == 0, r.stderr
    assert streams_listed(r.stdout) == expected
    assert f"and {len(conns) - INFO_CONNECTIONS} more connections: --all lists every one" in r.stdout
    r = run("info", "--all", big)
    assert streams_listed(r.stdout) == sorted(conns["stream"].tolist())
    assert "more connection" not in r.stdout
