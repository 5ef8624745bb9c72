#!/usr/bin/env python3
"""Time stays linear in the input on hostile streams: each input built at 1x, 2x and 4x its size.

    python benchmarks/hostile_scaling.py [--repeat 3] [--only NAME ...]

For every hostile stream of issue 4 (and a few more that stress the same code: resynchronising
through garbage and through garbage built to make every position an expensive near-miss), the
script builds the capture at three sizes with tests/hostile/make_corpus.py's helpers, loads each
with `amqpcap.load` in its own process (best of --repeat, Python start-up excluded) and prints
the times and the ratios t(2x)/t(1x) and t(4x)/t(2x): about 2 when the time is linear, about 4
when it is quadratic. Peak RSS of each child is printed too.
"""

from __future__ import annotations

import argparse
import json
import random
import struct
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "hostile"))
import crafting as c  # noqa: E402
import make_corpus as m  # noqa: E402
from rss import run_measured  # noqa: E402

CHILD = r"""
import json, sys, time
import amqpcap
limits = amqpcap.Limits(**json.loads(sys.argv[2]))
t = time.perf_counter()
cap = amqpcap.load(sys.argv[1], limits=limits)
print(json.dumps({"load_s": time.perf_counter() - t, "frames": len(cap.frames),
                  "anomalies": len(cap.anomalies), "connections": len(cap.connections)}))
"""


def _write(path: Path, conv: c.TcpConversation) -> None:
    m.write_pcap(path, conv.timed())


def tiny_frames(path: Path, k: int) -> dict:
    recs, _ = m.tiny_frames(1_000_000 * k)
    m.write_pcap(path, recs)
    return {}


def one_byte_segments(path: Path, k: int) -> dict:
    conv = m.opened(timestamps=False)
    m.publish(conv, 600 * k, segment_sizes=1)
    _write(path, conv)
    return {}


def many_connections(path: Path, k: int) -> dict:
    m.many_connections(path, 100_000 * k)
    return {"max_streams": 10**7}


def garbage(path: Path, k: int) -> dict:
    conv = c.TcpConversation(timestamps=False)
    conv.send("c2s", random.Random(k).randbytes(4_000_000 * k), segment_sizes=60_000)
    m.publish(conv, 10)
    _write(path, conv)
    return {}


def resync_bait(path: Path, k: int) -> dict:
    """A port-5672 stream seen from its middle: 64-byte blocks, each starting a frame header of
    connection.start-ok that claims 65,644 bytes, whose frame-end octet is in place and whose
    client-properties table parses through every later block (the header bytes of each block
    read as table entries) up to its very end, where it fails. Decoding every such candidate in
    full would cost 65 KB per 64 bytes of input."""
    size = 0x01006C  # size bytes 00 01 00 6C: as table entries, 0x6C ('l') is a 64-bit value
    block = bytearray(64)
    block[0:7] = b"\x01\x41s" + struct.pack(">I", size)  # type, channel 0x4173: key 'A', type 's'
    block[7:11] = b"\x00\x0a\x00\x0b"                       # connection.start-ok
    block[11:15] = struct.pack(">I", size - 8)               # the table runs to the payload's end
    fill = b"\x01A\x56" + b"\x00\x56" * 16 + b"\x01\xce\x56" + b"\x01A\x56" + b"\x00\x56" * 4
    block[15:64] = fill                                      # frame-end 0xCE at offset 51
    assert (7 + size) % 64 == 51 and block[51] == 0xCE
    conv = c.TcpConversation(timestamps=False)
    conv.send("c2s", bytes(block) * (64_000 * k), segment_sizes=60_000)
    m.publish(conv, 10)
    _write(path, conv)
    return {}


def ooo_flood(path: Path, k: int) -> dict:
    conv = m.opened(timestamps=False)
    conv.send_frames("c2s", [c.basic_publish(routing_key="lost")])
    lost = conv.packets[-1]
    conv.send_frames("c2s", [c.heartbeat()] * (10_000 * k), segment_sizes=1)
    conv.drop(lost)
    _write(path, conv)
    return {"max_reassembly_bytes": 65536}


def out_of_window(path: Path, k: int) -> dict:
    conv = m.opened(timestamps=False)
    for i in range(40_000 * k):
        conv._packet("c2s", conv._next_seq("c2s") + (m.GiB if i % 2 else -m.GiB), c.ACK, b"x" * 100)
        if i % 10 == 0:
            m.publish(conv, 1)
    _write(path, conv)
    return {}


def retransmission_mismatch(path: Path, k: int) -> dict:
    conv = m.opened(timestamps=False)
    for i in range(20_000 * k):
        start = len(conv.data["c2s"])
        m.publish(conv, 1)
        p = conv.retransmit("c2s", start + 10, 50)
        p.payload = bytes(b ^ 0x20 for b in p.payload)
    _write(path, conv)
    return {}


def bad_frames(path: Path, k: int) -> dict:
    conv = m.opened(timestamps=False)
    bad = bytes(c.basic_publish())[:-1] + b"\x00"
    huge = struct.pack(">BHI", 1, 1, 0xFFFFFFFF)
    for i in range(20_000 * k):
        conv.send("c2s", bad if i % 2 else huge)
        m.publish(conv, 1)
    _write(path, conv)
    return {}


CASES = {
    "tiny-frames": tiny_frames,
    "one-byte-segments": one_byte_segments,
    "many-connections": many_connections,
    "garbage-resync": garbage,
    "resync-bait": resync_bait,
    "ooo-flood": ooo_flood,
    "out-of-window": out_of_window,
    "retransmission-mismatch": retransmission_mismatch,
    "bad-frames": bad_frames,
}


def load_time(path: Path, limits: dict, repeat: int) -> tuple[float, int, dict]:
    best, rss, info = None, 0, {}
    for _ in range(repeat):
        with tempfile.TemporaryFile() as out:
            code, peak = run_measured([sys.executable, "-c", CHILD, str(path), json.dumps(limits)], out, None)
            if code:
                sys.exit(f"loading {path} failed")
            out.seek(0)
            info = json.loads(out.read())
        rss = max(rss, peak)
        best = info["load_s"] if best is None else min(best, info["load_s"])
    return best, rss, info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", nargs="*", choices=list(CASES), default=list(CASES))
    args = ap.parse_args()
    print(f"{'input':<24} {'size 1x':>10} {'t 1x':>8} {'t 2x':>8} {'t 4x':>8} {'2x/1x':>6} {'4x/2x':>6} {'peak RSS 4x':>12}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only:
            times, sizes, rss = [], [], 0
            for k in (1, 2, 4):
                path = Path(tmp) / f"{name}-{k}.pcap"
                limits = CASES[name](path, k)
                t, rss, _ = load_time(path, limits, args.repeat)
                times.append(t)
                sizes.append(path.stat().st_size)
                path.unlink()
            print(f"{name:<24} {sizes[0] / 1e6:>8.1f}MB {times[0]:>7.3f}s {times[1]:>7.3f}s {times[2]:>7.3f}s "
                  f"{times[1] / times[0]:>6.2f} {times[2] / times[1]:>6.2f} {rss / 2**20:>9.0f} MiB", flush=True)


if __name__ == "__main__":
    main()
