"""Broken and hostile captures (tests/hostile/, built by tests/hostile/make_corpus.py).

Each case of tests/hostile/expected.json runs `amqpcap analyze FILE --out DIR` in a child
process: its exit code (2: unusable, 3: no AMQP connection), a warning (or none) on stderr,
never a traceback, and the child's peak memory under 1 GB. Loadable files are then loaded in
this process: the anomaly kinds, what must still be decoded (counted from how the file was
built), and the byte accounting of every connection. No timing is asserted here; benchmarks/hostile_scaling.py shows the time stays
linear in the input.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pytest

import amqpcap
from tiers import one_fast

HERE = Path(__file__).resolve().parents[1]  # tests/: the corpus is tests/hostile
sys.path.insert(0, str(HERE / "hostile"))
import make_corpus  # noqa: E402
from accounting import assert_byte_accounting  # noqa: E402
from rss import run_measured  # noqa: E402

CORPUS = HERE / "hostile"
CASES = {c["name"]: c for c in json.loads((CORPUS / "expected.json").read_text())["cases"]}
MAX_RSS_BYTES = 1 << 30
HANG_S = 600  # not a timing assertion: a child still running after this is stuck


def run_cli(args: list[str], tmp: Path, env: dict | None = None) -> tuple[int, str, str, int]:
    """Run the CLI in a child; returns (exit code, stdout, stderr, peak RSS in bytes of that
    child alone: tests/rss.py)."""
    out, err = tmp / "stdout.txt", tmp / "stderr.txt"
    with open(out, "wb") as o, open(err, "wb") as e:
        code, rss = run_measured([sys.executable, "-m", "amqpcap", *args], o, e,
                                 env={**os.environ, **(env or {})}, timeout_s=HANG_S)
    assert code != -9, f"amqpcap {' '.join(args)} still ran after {HANG_S} s"
    return code, out.read_text(errors="replace"), err.read_text(errors="replace"), rss


def limits_of(args: list[str]) -> amqpcap.Limits:
    """The caps a case's `--limit NAME=VALUE` arguments set."""
    given = {}
    for flag, value in zip(args, args[1:]):
        if flag == "--limit":
            name, v = value.split("=")
            given[name] = int(v)
    return amqpcap.Limits(**given)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """Test-time cases, built once per module run."""
    out = tmp_path_factory.mktemp("hostile-generated")
    built: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in built:
            make_corpus.build(name, out)
            built[name] = out / CASES[name]["file"]
        return built[name]

    return get


def test_corpus_is_large_enough_and_covers_the_issue():
    assert len(CASES) >= 25
    committed = {c["file"] for c in CASES.values() if not c["generated"]}
    total = sum((CORPUS / f).stat().st_size for f in committed)
    assert total < 2_500_000, f"the committed corpus is {total:,} bytes"
    kinds = {k for c in CASES.values() for k in (c["kinds"] or [])}
    # scope 3 of the issue: every hostile-stream oddity has its kind
    assert {"oversized-frame", "bad-frame-end", "frame-limit", "stream-limit", "out-of-window",
            "retransmission-mismatch", "reassembly-overflow"} <= kinds
    assert {c["exit"] for c in CASES.values()} == {0, 2, 3}


def test_committed_corpus_is_what_the_script_builds(tmp_path):
    """make_corpus.py is deterministic and the committed files and expected.json are its output.
    Gzip files (and what is counted from them) are left out: another zlib build compresses
    differently, and then a cut lands elsewhere."""
    assert make_corpus.main(["--out", str(tmp_path)]) == 0
    for name in sorted({c["file"] for c in CASES.values() if not c["generated"]}):
        if name.endswith(".gz"):
            continue
        built, committed = (tmp_path / name).read_bytes(), (CORPUS / name).read_bytes()
        assert hashlib.sha256(built).digest() == hashlib.sha256(committed).digest(), f"{name} differs: rerun make_corpus.py"
    rebuilt = {c["name"]: c for c in json.loads((tmp_path / "expected.json").read_text())["cases"]}
    assert rebuilt.keys() == CASES.keys()
    for name, case in CASES.items():
        if not case["file"].endswith(".gz"):
            assert rebuilt[name] == case, f"expected.json differs for {name}: rerun make_corpus.py"


#: three unusable inputs in the fast tier (each a child that stops at once: a wrong magic, gzip of
#: text, a header without packets); a loadable case runs every analyzer in its child (the crafted
#: tests of tests/core keep what it reads in the fast tier)
@pytest.mark.parametrize("name", one_fast(sorted(CASES), keep=("wrong-magic.pcap", "gzip-text.pcap.gz", "header-only.pcap")))
def test_case(name, tmp_path, generated):
    case = CASES[name]
    path = generated(name) if case["generated"] else CORPUS / case["file"]
    code, stdout, stderr, rss = run_cli(["analyze", str(path), "--out", str(tmp_path / "out"), *case["args"]], tmp_path)

    assert "Traceback" not in stdout + stderr, stderr[-3000:]
    assert code == case["exit"], stderr[-3000:]
    assert rss < MAX_RSS_BYTES, f"peak RSS {rss / 2**20:.0f} MiB"
    if case["warning"] is None:
        assert "warning" not in stderr.lower(), stderr
    else:
        assert case["warning"] in stderr, stderr
    if code == 3:
        # read, but no AMQP connection: said in one line after the warnings, nothing written
        assert stderr.strip().splitlines()[-1].startswith("amqpcap: error: no AMQP connection"), stderr
        assert not (tmp_path / "out").exists()
    elif code:
        # unusable: one line, the error only
        lines = stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("amqpcap: error:"), stderr
        with pytest.raises(amqpcap.CaptureError):
            amqpcap.load(path, limits=limits_of(case["args"]))
        return
    else:
        assert (tmp_path / "out" / "summary.json").is_file()

    cap = amqpcap.load(path, limits=limits_of(case["args"]))
    counts = cap.anomalies["kind"].value_counts()
    assert sorted(k for k, n in counts.items() if n) == sorted(case["kinds"]), cap.anomalies.head(20).to_string()
    d = case["decode"]
    if "packets" in d:
        assert cap.summary["packets"] == d["packets"]
    if "frames" in d:
        assert len(cap.frames) == d["frames"]
    if "connections" in d:
        assert len(cap.connections) == d["connections"]
    if "methods" in d:
        m = cap.frames["method"].value_counts()
        assert {k: int(n) for k, n in m.items() if n} == d["methods"]
    for kind, n in d.get("anomalies", {}).items():
        assert counts[kind] == n, kind
    for kind, n in d.get("anomaly_bytes", {}).items():
        assert cap.anomalies.loc[cap.anomalies["kind"] == kind, "bytes"].sum() == n, kind
    if "skipped_bytes" in d:
        assert cap.connections[["c2s_bytes_skipped", "s2c_bytes_skipped"]].to_numpy().sum() == d["skipped_bytes"]
    if "mismatched_bytes" in d:
        rows = cap.anomalies[cap.anomalies["kind"] == "retransmission-mismatch"]
        assert rows["bytes"].sum() == d["mismatched_bytes"]
    assert_byte_accounting(cap)
