"""The command line: outputs, and one clear line (never a traceback) for unusable input."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
import re
import shlex
import shutil
import statistics
import struct
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import amqpcap
from amqpcap.engine.registered import analyzers
from amqpcap.cli import INFO_CONNECTIONS
from tiers import one_fast

ROOT = Path(__file__).resolve().parents[2]
CONFIRMS = ROOT / "fixtures" / "confirms.pcap"
SAMPLE = ROOT / "amqpcap" / "data" / "sample.pcap"  # = fixtures/slow-prefetch1.pcap
HOSTILE = ROOT / "tests" / "hostile"
import crafting as c  # noqa: E402
from tshark_reference import reference  # noqa: E402


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "amqpcap", *map(str, args)], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)


def facts(name: str) -> dict:
    """What tshark says about a fixture (fixtures/NAME.tshark.json)."""
    return json.loads((ROOT / "fixtures" / f"{name}.tshark.json").read_text())


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


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_frames_of_a_set_of_files_are_every_files_frames(fmt, tmp_path):
    """Two captures given as a set are merged into one capture: its frames are the frames tshark
    counts in each (their connections are not the same conversation)."""
    out = tmp_path / f"frames.{fmt}"
    r = run("frames", CONFIRMS, ROOT / "fixtures" / "slow-prefetch1.pcap", "-o", out)
    assert r.returncode == 0, r.stderr
    back = pd.read_csv(out) if fmt == "csv" else pd.read_parquet(out)
    expected = sum(sum(facts(f"{name}.pcap")["frame_types"].values()) for name in ("confirms", "slow-prefetch1"))
    assert len(back) == expected and back["packet"].is_monotonic_increasing


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
    empty_dir = tmp / "no-captures"
    empty_dir.mkdir()
    (empty_dir / "notes.txt").write_text("not a capture")
    return {
        "missing": (tmp / "nope.pcap", "cannot open"),
        "empty": (empty, "is empty"),
        "text": (text, "looks like text"),
        "wrong magic": (magic, "not a pcap or pcapng"),
        "gzip without a capture": (gz_text, "holds no pcap"),
        # a directory is read as a set of files (a tcpdump ring): here, one without a capture
        "a directory": (empty_dir, "no file in it starts like a capture"),
    }


@pytest.mark.parametrize("case", one_fast(["missing", "empty", "text", "wrong magic", "gzip without a capture", "a directory"],
                                           keep=("missing", "wrong magic")))
def test_unusable_input_is_one_line(tmp_path, case):
    path, words = _bad_inputs(tmp_path)[case]
    r = run("info", path)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("amqpcap: error:") and words in lines[0], r.stderr
    with pytest.raises(amqpcap.CaptureError):
        amqpcap.load(path)


#: what Rust's Debug and Python's repr of an internal error look like: never in a message
INTERNAL_NAMES = re.compile(r"Incomplete|Error\(|Some\(|Err\(|Kind|None\b|\b[A-Z][a-z]+[A-Z]\w*|\w\(\d")


def _cut_headers(tmp: Path) -> dict[str, tuple[Path, str]]:
    """Captures cut inside their first header, built here: a pcap file header (24 bytes:
    magic, versions 2.4, zone, sigfigs, snaplen, link type) and a pcapng section header block
    (28 bytes: type, length, byte-order magic, versions 1.0, section length, length again)."""
    pcap = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    shb = struct.pack("<IIIHHqI", 0x0A0D0D0A, 28, 0x1A2B3C4D, 1, 0, -1, 28)
    cases = {"pcap cut at 20 bytes": (pcap[:20], "ends after 20 bytes, inside the pcap file header (24 bytes)"),
             "pcap cut at 3 bytes": (pcap[:3], "ends after 3 bytes"),
             "pcapng cut at 20 bytes": (shb[:20], "ends after 20 bytes, inside the pcapng section header block (28 bytes)"),
             "pcapng cut at 10 bytes": (shb[:10], "ends after 10 bytes, inside the pcapng section header block")}
    out = {}
    for name, (data, words) in cases.items():
        path = tmp / (name.replace(" ", "-") + (".pcapng" if "pcapng" in name else ".pcap"))
        path.write_bytes(data)
        out[name] = (path, words)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("case", ["pcap cut at 20 bytes", "pcap cut at 3 bytes", "pcapng cut at 20 bytes",
                                  "pcapng cut at 10 bytes"])
def test_a_cut_capture_header_is_said_in_words(tmp_path, case):
    path, words = _cut_headers(tmp_path)[case]
    for command in ("info", "analyze"):
        r = run(command, path)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("amqpcap: error:"), r.stderr
        assert words in lines[0] and not INTERNAL_NAMES.search(lines[0].removeprefix(f"amqpcap: error: {path}")), lines


def test_anomaly_details_are_words():
    """The anomalies the hostile corpus makes (tests/hostile/make_corpus.py: basic.ack (60.80) and
    queue.declare (50.10) cut short, a content header of class 20, a method, a content header and
    a body frame that do not end with 0xce) are told in words, not in the core's type names."""
    details = {}
    for name in ("malformed-methods.pcap", "bad-frame-ends.pcap"):
        a = amqpcap.load(HOSTILE / name).anomalies
        for kind, detail in zip(a["kind"], a["detail"]):
            details.setdefault(kind, []).append(detail)
    assert [d for ds in details.values() for d in ds if INTERNAL_NAMES.search(d)] == [], details
    assert sorted(d.split(":")[0] for d in details["malformed-method"]) == ["class 50 method 10", "class 60 method 80"]
    assert "class 20" in details["malformed-header"][0]
    assert sorted(d.split(" frame ")[0] for d in details["bad-frame-end"]) == ["body", "content header", "method"]


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


@pytest.mark.slow
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


@pytest.mark.slow
def test_unwritable_output_directory_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    for cmd in ("analyze", "sizes"):
        r = run(cmd, CONFIRMS, "--out", blocker / "out", "--no-plots")
        assert r.returncode == 64 and "cannot write into" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_exit_codes_documented():
    """docs/cli.md's table lists every exit code the command line uses."""
    import re

    from amqpcap.model import errors

    doc = (ROOT / "docs" / "cli.md").read_text()
    table = doc[doc.index("## Exit codes"):]
    documented = {int(c) for c in re.findall(r"^\| (\d+) \|", table, re.M)}
    used = {cls.exit_code for cls in vars(errors).values() if isinstance(cls, type) and issubclass(cls, errors.AmqpcapError)}
    cli_src = "".join(p.read_text() for p in sorted((ROOT / "amqpcap" / "cli").glob("*.py")))
    used |= {int(c) for c in re.findall(r"sys\.exit\((\d+)\)", cli_src)}
    used |= {1}  # amqpcap verify: an unexplained difference from Wireshark
    assert used | {0} == documented


@pytest.mark.slow
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


# --- 1. a single-analyzer subcommand answers: summary numbers and findings first, rows on request

def _lines(stdout: str, label: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.split("  ")[0].strip() == label]


def test_latency_prints_its_percentiles_first():
    """deliver→ack count and median as tshark's AMQP fields give them (tests/tshark_reference.py),
    in milliseconds, before the findings and without table rows."""
    assert shutil.which("tshark"), "tshark is installed by the README's test command"
    ref = reference(str(SAMPLE))
    r = run("latency", SAMPLE)
    assert r.returncode == 0, r.stderr
    count, p50 = _lines(r.stdout, "count"), _lines(r.stdout, "p50")
    assert count and count[0].split()[1] == f"{len(ref['deliver_to_ack']):,}", r.stdout
    assert f"{statistics.median(ref['deliver_to_ack']) * 1000:.2f} ms" in p50[0], r.stdout
    for label in ("p90", "p99", "max", "mean"):
        assert _lines(r.stdout, label), label
    verdict = r.stdout.find("Findings") if "Findings" in r.stdout else r.stdout.index("No findings")
    assert r.stdout.index("deliver to ack") < verdict
    # rows only on request: the tables are named with their sizes (tshark: 454 deliveries)
    assert f"deliveries ({facts('slow-prefetch1.pcap')['methods']['60.60']} rows)" in r.stdout
    assert not re.search(r"^latency: \S+ \(", r.stdout, re.M), r.stdout


@pytest.mark.slow
def test_rows_prints_the_first_rows_of_each_table():
    r = run("latency", SAMPLE, "--rows", "3")
    assert r.returncode == 0, r.stderr
    section = r.stdout[r.stdout.index("latency: deliveries"):r.stdout.index("latency: ack-gaps")]
    assert len([line for line in section.splitlines() if line.startswith("│")]) == 3, section
    assert "Tables:" not in r.stdout
    assert run("latency", SAMPLE, "--rows", "-1").returncode == 2  # click: out of range


@pytest.mark.slow
def test_consumers_and_sizes_print_the_numbers_of_the_scenario():
    """slow-prefetch1: PerfTest -q 1 (prefetch 1); tshark counts 454 deliveries, 1829 packets
    and their Wireshark plen buckets."""
    f = facts("slow-prefetch1.pcap")
    r = run("consumers", SAMPLE)
    assert r.returncode == 0, r.stderr
    assert _lines(r.stdout, "prefetch")[0].split()[-1] == "1"
    assert _lines(r.stdout, "deliveries")[0].split()[-1] == str(f["methods"]["60.60"])
    assert re.search(r"^share at limit +\d+(\.\d+)? %$", r.stdout, re.M), r.stdout  # a share as percent
    assert re.search(r"^delivered msgs +\d+(\.\d+)?/s$", r.stdout, re.M), r.stdout  # per second active
    r = run("sizes", SAMPLE)
    assert r.returncode == 0, r.stderr
    assert _lines(r.stdout, "total")[0].split()[-1] == f"{f['packets']:,}"  # thousands separated
    for bucket, n in f["plen"].items():
        assert re.search(rf"^{re.escape(bucket)} +{n:,} ", r.stdout, re.M), (bucket, n)


@pytest.mark.slow
def test_the_command_line_starts_without_the_analyzers():
    """`amqpcap --version`, `frames --help` and `ingest --help` do not import pandas (0.4 s) nor an
    analyzer; `--help` lists every analyzer, by its module's name, after the other commands."""
    probe = ("import sys, runpy; sys.argv = ['amqpcap', *sys.argv[1:]]\n"
             "try:\n    runpy.run_module('amqpcap', run_name='__main__')\n"
             "except SystemExit:\n    pass\n"
             "print(sorted(m for m in sys.modules if m == 'pandas' or m.startswith('amqpcap.analyzers.')))")
    for args in (["--version"], ["frames", "--help"], ["ingest", "--help"]):
        r = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert r.stdout.splitlines()[-1] == "[]", (args, r.stdout[-300:], r.stderr)
    listed = re.findall(r"^│ (\w+) ", run("--help").stdout, re.M)
    assert listed[-len(analyzers()):] == sorted(analyzers()) and len(listed) > len(analyzers()), listed
    assert "Did you mean 'nagle'?" in run("nagel", SAMPLE).stderr


@pytest.mark.parametrize("name", one_fast(sorted(analyzers()), keep="heartbeats"))
def test_every_analyzer_subcommand_summarises_before_its_verdict(name):
    r = run(name, SAMPLE)
    assert r.returncode == 0, r.stderr
    first_table = r.stdout.splitlines()[1]  # after the capture line: the first summary title
    assert first_table.split(" ›")[0] in {name, *(k.replace("_", " ") for k in analyzers()[name][0](amqpcap.load(SAMPLE)).summary)}
    verdict = r.stdout.find("Findings") if "Findings" in r.stdout else r.stdout.index("No findings")
    assert verdict > len(r.stdout.splitlines()[0]) + len(first_table)
    assert re.search(r"Tables: .+ --rows N prints", " ".join(r.stdout.split())), r.stdout


# --- 2. output options are checked before any work --------------------------------------------

#: runs the CLI with amqpcap.io.load.load (what the CLI loads a capture with, imported when it
#: does) replaced by a function that prints LOADED and exits 99: whatever fails before it did no work
UNLOADED = """
import sys
import amqpcap.io.load
import amqpcap.cli as cli
def loaded(*args, **kwargs):
    print("LOADED")
    raise SystemExit(99)
amqpcap.io.load.load = loaded
sys.argv = ["amqpcap", *sys.argv[1:]]
cli.main()
"""


def run_unloaded(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", UNLOADED, *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


def test_the_harness_reaches_the_load_when_the_outputs_are_fine(tmp_path):
    out = tmp_path / "out"
    # the harness does reach the load when nothing is wrong with the outputs
    r = run_unloaded("analyze", CONFIRMS, "--out", out)
    assert r.returncode == 99 and "LOADED" in r.stdout, r.stderr


@pytest.mark.slow
def test_an_unwritable_out_fails_before_loading(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cases = [(["analyze", CONFIRMS, "--out", blocker / "out"], "cannot write into"),
             (["analyze", CONFIRMS, "--out", blocker], "cannot write into"),
             (["sizes", CONFIRMS, "--out", blocker / "a" / "b"], "cannot write into"),
             (["frames", CONFIRMS, "-o", blocker / "frames.csv"], "no directory"),
             (["frames", CONFIRMS, "-o", tmp_path / "nothere" / "frames.csv"], "no directory"),
             (["frames", CONFIRMS, "-o", tmp_path], "must end in .csv"),
             (["frames", CONFIRMS, "-o", _dir(tmp_path / "d.csv")], "is a directory")]
    for args, words in cases:
        r = run_unloaded(*args)
        assert r.returncode == 64 and "LOADED" not in r.stdout, (args, r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], (args, r.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.csv", "file"]


def _dir(path: Path) -> Path:
    path.mkdir()
    return path


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_an_out_without_permission_fails_before_loading(tmp_path):
    locked = _dir(tmp_path / "locked")
    locked.chmod(0o500)
    try:
        r = run_unloaded("analyze", CONFIRMS, "--out", locked / "out")
        assert r.returncode == 64 and "permission denied" in r.stderr and "LOADED" not in r.stdout, r.stderr
    finally:
        locked.chmod(0o700)


# --- 3. analyze --out writes every table, the capture's own too -------------------------------

@pytest.fixture(scope="module")
def sample_out(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sample") / "out"
    r = run("analyze", SAMPLE, "--out", out, "--no-plots")
    assert r.returncode == 0, r.stderr
    return out


@pytest.mark.slow
def test_analyze_out_writes_the_capture_tables(sample_out):
    """Row counts from tshark: 1829 packets (all of them TCP in 3 AMQP streams), 3677 frames."""
    f = facts("slow-prefetch1.pcap")
    rows = {name: len(pd.read_csv(sample_out / f"{name}.csv")) for name in ("connections", "frames", "packets", "records")}
    assert rows == {"connections": len(f["streams"]), "frames": sum(f["frame_types"].values()),
                    "packets": f["packets"], "records": f["packets"]}
    anomalies = pd.read_csv(sample_out / "anomalies.csv")
    assert list(anomalies.columns)[:2] == ["kind", "stream"] and len(anomalies) == 0
    readme = (ROOT / "README.md").read_text()
    use = readme[readme.index("## Use"):readme.index("## Capturing well")]
    for name in ("connections.csv", "frames.csv", "packets.csv", "anomalies.csv", "records.csv"):
        assert name in use, name


@pytest.mark.slow
def test_analyze_out_writes_the_capture_tables_as_parquet(tmp_path):
    r = run("analyze", CONFIRMS, "--out", tmp_path, "--no-plots", "--format", "parquet")
    assert r.returncode == 0, r.stderr
    f = facts("confirms.pcap")
    assert len(pd.read_parquet(tmp_path / "frames.parquet")) == sum(f["frame_types"].values())
    assert len(pd.read_parquet(tmp_path / "packets.parquet")) == f["packets"]


# --- 4. one timestamp format, floats without noise ---------------------------------------------

ISO_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z$")
NUMBER = re.compile(r"^-?(\d+)\.(\d+)(?:e[-+]?\d+)?$|^-?(\d+)e[-+]?\d+$")
RATE_S = ("_per_s", "_per_capture_s", "mbit_s", "packets_s", "msgs_s", "segments_s", "saved_s")


def significant_digits(text: str) -> int:
    mantissa = text.lstrip("-").split("e")[0].replace(".", "").lstrip("0")
    return len(mantissa.rstrip("0")) if "." not in text.split("e")[0] else len(mantissa)


def tshark_first_time(path: Path) -> str:
    """The first packet's time as tshark gives it, in ISO 8601 UTC with 9 decimals and Z."""
    epoch = subprocess.run(["tshark", "-r", str(path), "-c", "1", "-T", "fields", "-e", "frame.time_epoch"],
                           capture_output=True, text=True, check=True).stdout.strip()
    seconds, _, fraction = epoch.partition(".")
    return dt.datetime.fromtimestamp(int(seconds), dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + fraction.ljust(9, "0") + "Z"


def test_csv_timestamps_are_iso_utc_and_floats_have_no_noise(sample_out):
    checked_ts = checked_floats = 0
    for path in sorted(sample_out.glob("*.csv")):
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
        for col in df.columns:
            cells = [v for v in df[col] if v]
            assert not any(re.match(r"\d{4}-\d\d-\d\d \d", v) or v.endswith("+00:00") for v in cells), (path.name, col)
            if col == "ts" or col.endswith("_ts") or col == "message_timestamp":
                bad = [v for v in cells if not ISO_Z.match(v)]
                assert not bad, (path.name, col, bad[:3])
                checked_ts += len(cells)
            for v in cells:
                if NUMBER.match(v):
                    assert significant_digits(v) <= 15, (path.name, col, v)
                    if col.endswith("_s") and not col.endswith(RATE_S):  # seconds: whole nanoseconds
                        assert float(v) == round(float(v), 9), (path.name, col, v)
                    checked_floats += 1
    assert checked_ts > 1000 and checked_floats > 1000
    first = tshark_first_time(SAMPLE)
    assert pd.read_csv(sample_out / "packets.csv", dtype=str)["ts"][0] == first


def _walk(value, key=""):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v, key)
    else:
        yield key, value


def test_summary_json_timestamps_and_floats(sample_out):
    text = (sample_out / "summary.json").read_text()
    summary = json.loads(text)
    assert summary["capture"]["first_ts"] == tshark_first_time(SAMPLE)
    floats = [(k, v) for k, v in _walk(summary) if isinstance(v, float)]
    assert len(floats) > 50
    for k, v in floats:
        assert significant_digits(repr(v)) <= 15, (k, v)
        if k.endswith("_s") and not k.endswith(RATE_S):
            assert v == round(v, 9), (k, v)
    for k, v in _walk(summary):
        if k.endswith("_ts") and v is not None:
            assert ISO_Z.match(v), (k, v)
    assert "+00:00" not in text


@pytest.mark.slow
def test_terminal_and_frames_csv_timestamps_are_iso_utc(tmp_path):
    first = tshark_first_time(SAMPLE)
    r = run("info", SAMPLE)
    assert r.returncode == 0 and first in r.stdout, r.stdout
    r = run("frames", SAMPLE, "-o", tmp_path / "f.csv")
    assert r.returncode == 0, r.stderr
    ts = pd.read_csv(tmp_path / "f.csv", dtype=str)["ts"]
    assert ts.map(lambda v: bool(ISO_Z.match(v))).all()


# --- 5. no packets, or no AMQP connection: said plainly, exit 3 --------------------------------

def _assert_no_amqp(r: subprocess.CompletedProcess, *words: str) -> None:
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("amqpcap: error: no AMQP connection in "), r.stderr
    for w in words:
        assert w in last, (w, last)
    assert "No findings" not in r.stdout and "Traceback" not in r.stderr


def _http_capture(path: Path, port: int = 80) -> int:
    conv = c.TcpConversation(broker=("10.0.0.2", port)).handshake()
    conv.send("c2s", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    conv.send("s2c", b"HTTP/1.1 200 OK\r\n\r\n")
    recs = conv.close().timed()
    c.write_pcap(path, recs)
    return len(recs)


@pytest.mark.slow
def test_no_packets_exits_3_and_writes_nothing(tmp_path):
    for args in (["analyze", "--out", tmp_path / "out"], ["stalls", "--out", tmp_path / "out"], ["frames", "-o", tmp_path / "f.csv"]):
        r = run(args[0], HOSTILE / "header-only.pcap", *args[1:])
        _assert_no_amqp(r, "header-only.pcap", "it holds no packets")
        assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_tcp_but_no_amqp_exits_3_and_says_which_ports(tmp_path):
    packets = _http_capture(tmp_path / "http.pcap")
    r = run("analyze", tmp_path / "http.pcap")
    _assert_no_amqp(r, f"none of its {packets} TCP packets is on port 5672 or 5671", "--add-port")
    # a real capture read with a port it does not use (no protocol header: it starts mid-connection)
    r = run("latency", ROOT / "fixtures" / "midstream.pcap", "--port", "9999")
    _assert_no_amqp(r, f"{facts('midstream.pcap')['packets']:,} TCP packets is on port 9999")


def test_no_tcp_at_all_exits_3(tmp_path):
    from scapy.all import IP, UDP

    recs = c.stamp([c.RawRecord(IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=5000, dport=53)) for _ in range(4)])
    c.write_pcap(tmp_path / "udp.pcap", recs)
    _assert_no_amqp(run("analyze", tmp_path / "udp.pcap"), "none of its 4 packets is TCP")


# --- 6. --port replaces the defaults, --add-port adds ------------------------------------------

@pytest.mark.slow
def test_port_replaces_and_add_port_adds(tmp_path):
    """Two connections caught mid-way (no protocol header), one on 5672 and one on 5673: only
    the ports given decide which is AMQP."""
    recs = []
    for client, port in ((("10.0.0.1", 40000), 5672), (("10.0.0.3", 40001), 5673)):
        conv = c.TcpConversation(client=client, broker=("10.0.0.2", port))
        for _ in range(3):
            conv.send_frames("c2s", [c.basic_publish(), *c.content(body=b"hello")])
            conv.ack("s2c")
        recs += conv.packets
    cap = c.write_pcap(tmp_path / "two-ports.pcap", c.stamp(recs))

    def broker_ports(*args: str) -> list[int]:
        out = tmp_path / "-".join(args or ("default",))
        r = run("analyze", cap, "--out", out, "--no-plots", *args)
        assert r.returncode == 0, r.stderr
        return sorted(pd.read_csv(out / "connections.csv")["broker_port"])

    assert broker_ports() == [5672]
    assert broker_ports("--port", "5673") == [5673]
    assert broker_ports("--add-port", "5673") == [5672, 5673]
    assert broker_ports("--port", "5673", "--add-port", "5672") == [5672, 5673]
    help_text = subprocess.run([sys.executable, "-m", "amqpcap", "info", "--help"], capture_output=True, text=True,
                               cwd=ROOT, env={**os.environ, "COLUMNS": "250"}).stdout
    assert "replacing the defaults 5672 and 5671" in help_text and "in addition to the defaults" in help_text


# --- 7. nothing crossed a threshold: say what was checked ------------------------------------

def _quiet_capture(path: Path) -> tuple[int, int]:
    conv = c.TcpConversation().handshake()
    conv.exchange(c.opening())
    for _ in range(5):
        conv.send_frames("c2s", [c.basic_publish(), *c.content(body=b"hello")])
        conv.ack("s2c")
    recs = conv.close().timed()
    c.write_pcap(path, recs)
    return 1, len(recs)


@pytest.mark.slow
def test_no_findings_says_what_was_checked(tmp_path):
    connections, packets = _quiet_capture(tmp_path / "quiet.pcap")
    r = run("analyze", tmp_path / "quiet.pcap")
    assert r.returncode == 0, r.stderr
    assert (f"No findings: {connections} AMQP connection, {packets} packets checked by {len(analyzers())} analyzers; "
            "nothing crossed a threshold (docs/findings.md).") in r.stdout
    r = run("nagle", tmp_path / "quiet.pcap")
    assert "checked by the nagle analyzer; nothing crossed a threshold" in r.stdout


@pytest.mark.slow
def test_connections_without_a_decoded_frame_say_only_tcp_was_analysed():
    # an AMQP 0-10 client (tests/hostile/make_corpus.py: 8 packets, 1 connection)
    r = run("analyze", HOSTILE / "other-protocol.pcap")
    assert r.returncode == 0, r.stderr
    assert "No findings: 1 AMQP connection, 8 packets checked" in r.stdout
    assert "No AMQP frame was decoded in 1 AMQP connection (see the warnings above), so only TCP was analysed." in r.stdout
    r = run("analyze", ROOT / "fixtures" / "tls.pcap")  # AMQPS without its key log
    assert r.returncode == 0, r.stderr
    assert "(encrypted with TLS: --tls-keylog FILE decrypts it), so only TCP was analysed" in " ".join(r.stdout.split())


# --- 8. a reader that goes away ends the output quietly ----------------------------------------

@pytest.mark.parametrize("args", one_fast([("info", ROOT / "fixtures" / "healthy.pcap"), ("analyze", SAMPLE),
                                           ("latency", SAMPLE, "--rows", "5"), ("verify", ROOT / "fixtures" / "healthy.pcap"),
                                           ("sample",)], keep="sample"), ids=lambda a: a[0])
def test_a_closed_pipe_ends_quietly(args, tmp_path):
    """`amqpcap ... | head -n 3`, and a reader gone before the first write (`| true`: the write
    is certain to find the pipe closed): exit 0 or 141 (SIGPIPE's), nothing on stderr."""
    command = " ".join(shlex.quote(str(a)) for a in (sys.executable, "-m", "amqpcap", *args))
    for reader in ("head -n 3", "true"):
        r = subprocess.run(["bash", "-c", f"{command} 2>{tmp_path / 'stderr'} | {reader} >/dev/null; "
                                          "echo ${PIPESTATUS[0]}"],
                           capture_output=True, text=True, timeout=180, cwd=ROOT)
        assert r.stdout.strip() in ("0", "141"), (reader, r.stdout, (tmp_path / "stderr").read_text())
        assert (tmp_path / "stderr").read_text() == "", reader


@pytest.mark.slow
def test_a_closed_pipe_still_writes_the_out_directory(tmp_path):
    command = " ".join(shlex.quote(str(a)) for a in (sys.executable, "-m", "amqpcap", "analyze", SAMPLE,
                                                      "--out", tmp_path / "out", "--no-plots"))
    r = subprocess.run(["bash", "-c", f"{command} | true; echo ${{PIPESTATUS[0]}}"], capture_output=True, text=True,
                       timeout=180, cwd=ROOT)
    assert r.stdout.strip() == "0", r
    assert "files written to" in r.stderr
    assert json.loads((tmp_path / "out" / "summary.json").read_text())


# --- 9. tables fit the terminal by leaving columns out, never by cutting one -------------------

def run_on_terminal(columns: int, *args: str) -> str:
    """amqpcap's stdout on a pseudo-terminal `columns` wide (COLUMNS, as a terminal of that width
    says; rich reads it only with LINES), without styles (TERM=dumb). A file or a pipe is always
    given 120 columns."""
    import pty

    main, child = pty.openpty()
    env = {**os.environ, "COLUMNS": str(columns), "LINES": "50", "TERM": "dumb", "NO_COLOR": "1"}
    p = subprocess.Popen([sys.executable, "-m", "amqpcap", *map(str, args)], stdin=subprocess.DEVNULL, stdout=child,
                         stderr=subprocess.PIPE, cwd=ROOT, env=env)
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(main, 1 << 16)
        except OSError:  # EIO: the child's end is closed
            break
        if not data:
            break
        chunks.append(data)
    os.close(main)
    _, stderr = p.communicate(timeout=120)
    assert p.returncode == 0, stderr
    return b"".join(chunks).decode().replace("\r\n", "\n")


def _printed_tables(stdout: str, prefix: str) -> dict[str, tuple[list[str], list[str]]]:
    """{table: (the headers printed, the columns the line under it says were left out)} of each
    bordered table whose title starts with `prefix`."""
    lines = stdout.splitlines()
    tables = {}
    for i, line in enumerate(lines):
        if not (line.startswith(prefix) and i + 2 < len(lines) and lines[i + 1].startswith("┏")):
            continue
        header = [cell.strip() for cell in lines[i + 2].strip().strip("┃").split("┃")]
        end = next(j for j in range(i, len(lines)) if lines[j].startswith("└"))
        after = []
        for rest in lines[end + 1:]:
            if rest.startswith(prefix) or rest.startswith("┏"):
                break
            after.append(rest)
        note = re.search(r"left out to fit \d+ columns: (.+?);", " ".join(" ".join(after).split()))
        tables[line.split(" (")[0].strip().removeprefix(prefix)] = (header, note.group(1).split(", ") if note else [])
    return tables


@pytest.mark.slow
def test_table_rows_fit_the_terminal_by_leaving_columns_out(tmp_path):
    """prefetch1.pcap's latency tables on an 80- and a 200-column terminal: each header whole (the
    written CSV's column names, independent of how the terminal cut them), every line within the
    width, no cell cut ("…"), and the columns not shown named under the table."""
    r = run("latency", ROOT / "fixtures" / "prefetch1.pcap", "--out", tmp_path, "--no-plots")
    assert r.returncode == 0, r.stderr
    shown = {}
    for columns in (80, 200):
        stdout = run_on_terminal(columns, "latency", ROOT / "fixtures" / "prefetch1.pcap", "--rows", "2")
        assert all(len(line) <= columns for line in stdout.splitlines()), stdout
        assert not [line for line in stdout.splitlines() if line[:1] in "┃│" and "…" in line], stdout
        tables = _printed_tables(stdout, "latency: ")
        assert set(tables) == {p.stem.removeprefix("latency-") for p in tmp_path.glob("latency-*.csv")}, stdout
        for name, (header, left_out) in tables.items():
            written = list(pd.read_csv(tmp_path / f"latency-{name}.csv", nrows=0).columns)
            assert header == [c for c in written if c not in left_out], (name, stdout)
            assert {"stream", "channel"} <= set(header), (name, stdout)  # the names of what a row is about, always
        assert "connection" in tables["consumers"][0]
        shown[columns] = sum(len(header) for header, _ in tables.values())
        if columns == 80:
            assert any(left_out for _, left_out in tables.values()), stdout  # (else this tests nothing)
    assert shown[200] > shown[80]


@pytest.mark.slow
def test_info_fits_the_terminal_by_leaving_columns_out():
    """ten-consumers.pcap on an 80-column terminal: the connections and consumers tables keep
    their names whole, on one line each (perf-test-consumer-N, as PerfTest names them)."""
    stdout = run_on_terminal(80, "info", ROOT / "fixtures" / "ten-consumers.pcap")
    assert all(len(line) <= 80 for line in stdout.splitlines()), stdout
    tables = _printed_tables(stdout, "")
    connections, consumers = tables["AMQP connections"], tables["Consumers"]
    assert connections[0][0] == "connection" and "stream" in connections[0], stdout
    assert consumers[0][:2] == ["queue", "connection"], stdout
    for n in range(10):
        assert re.search(rf"^│ perf-test-consumer-{n} +│", stdout, re.M), stdout
    assert not [line for line in stdout.splitlines() if line[:1] in "┃│" and "…" in line], stdout
