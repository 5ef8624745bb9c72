"""`load(progress=...)`: how far reading has got, reported while the core reads (another
thread) and once at the end; the totals are the files' sizes as stored and tshark's packet
count (fixtures/*.tshark.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import amqpcap

FIX = Path(__file__).resolve().parents[2] / "fixtures"


@pytest.mark.parametrize("name", ["healthy.pcap", "gzipped.pcap.gz", "dumpcap.pcapng"])
def test_progress_ends_at_the_file_size_and_the_packet_count(name):
    calls = []
    cap = amqpcap.load(FIX / name, progress=lambda *a: calls.append(a))
    packets = json.loads((FIX / f"{name}.tshark.json").read_text())["packets"]
    size = (FIX / name).stat().st_size
    assert calls[-1] == (size, size, packets)
    assert cap.summary["packets"] == packets
    for (b0, _, p0), (b1, _, p1) in zip(calls, calls[1:]):
        assert b0 <= b1 and p0 <= p1


def test_progress_of_a_set_counts_every_file(tmp_path):
    files = [FIX / "healthy.pcap", FIX / "confirms.pcap"]
    calls = []
    amqpcap.load(files, progress=lambda *a: calls.append(a))
    total = sum(f.stat().st_size for f in files)
    packets = sum(json.loads((FIX / f"{f.name}.tshark.json").read_text())["packets"] for f in files)
    assert calls[-1] == (total, total, packets)
