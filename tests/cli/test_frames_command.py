"""`amqpcap frames -o` over every kind of input it takes, and `--amqp10`: the rows written are
those tshark counts, and the line on stderr says how many, of which protocol. Expected values
come from the fixtures' tshark facts (fixtures/NAME.tshark.json)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "fixtures"
MIXED = FIX / "amqp10.pcap"  # a 0-9-1 connection (stream 0) and a 1.0 one (stream 1)


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "amqpcap", *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


def facts(name: str) -> dict:
    return json.loads((FIX / f"{name}.tshark.json").read_text())


def read(path: Path) -> pd.DataFrame:
    return pd.read_csv(path) if path.suffix == ".csv" else pd.read_parquet(path)


def frames_091(f: dict) -> int:
    return sum(f["frame_types"].values())


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ds") / "mixed.ds"
    r = run("ingest", MIXED, "--out", out)
    assert r.returncode == 0, r.stderr
    return out


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_dataset_and_a_decrypted_capture_are_written_and_counted(fmt, dataset, tmp_path):
    """The two inputs read whole before writing (a dataset; a capture with a key log), which the
    streamed path does not take: the file has tshark's frames, and the line counts them (it was
    an internal error: the writer's return value taken for a count)."""
    for source, extra, expected, what in (
            (dataset, [], frames_091(facts("amqp10.pcap")), "AMQP 0-9-1 frame"),
            (FIX / "tls.pcap", ["--tls-keylog", FIX / "tls.keylog"], frames_091(facts("tls.pcap")["decrypted"]), "frame")):
        out = tmp_path / f"{Path(source).stem}.{fmt}"
        r = run("frames", source, "-o", out, *extra)
        assert r.returncode == 0, r.stderr
        assert len(read(out)) == expected
        assert f"{expected:,} {what}s from " in r.stderr, r.stderr


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_amqp10_writes_the_amqp10_frames_as_tshark_counts_them(fmt, dataset, tmp_path):
    """--amqp10: one row per AMQP 1.0 frame (performatives and SASL frames, by tshark's codes),
    from the capture and from its dataset alike; without it the line says where they are."""
    a10 = facts("amqp10.pcap")["amqp10_streams"]
    codes = {16: "open", 17: "begin", 18: "attach", 19: "flow", 20: "transfer", 21: "disposition", 22: "detach",
             23: "end", 24: "close", 64: "sasl-mechanisms", 65: "sasl-init", 66: "sasl-challenge",
             67: "sasl-response", 68: "sasl-outcome"}
    expected = {codes[int(c)]: n for c, n in {**a10["1"]["performatives"], **a10["1"]["sasl"]}.items()}
    written = []
    for source in (MIXED, dataset):
        out = tmp_path / f"{source.stem}-amqp10.{fmt}"
        r = run("frames", source, "-o", out, "--amqp10")
        assert r.returncode == 0, r.stderr
        back = read(out)
        assert set(back["stream"]) == {1}
        counts = back["performative"].value_counts()  # (Parquet's categorical counts every category)
        assert counts[counts > 0].to_dict() == expected
        assert f"{a10['1']['frames']} AMQP 1.0 frames from 2 connections written to" in r.stderr, r.stderr
        written.append(back)
    # (the same values; a Parquet file written from the core's Arrow has no pandas metadata, so its
    # nullable integers read back as floats, its missing values as None)
    same = [w.astype(object).where(w.notna(), None) for w in written]
    pd.testing.assert_frame_equal(same[0], same[1], check_dtype=False)
    r = run("frames", MIXED, "-o", tmp_path / f"plain.{fmt}")
    assert r.returncode == 0, r.stderr
    assert f"the capture's {a10['1']['frames']} AMQP 1.0 frames are written by --amqp10" in r.stderr, r.stderr
