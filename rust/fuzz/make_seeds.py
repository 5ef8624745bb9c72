#!/usr/bin/env python3
"""Build the fuzz seed corpora from the real captures in fixtures/ (docs/fuzzing.md).

    python3 rust/fuzz/make_seeds.py OUT_DIR [--fixtures DIR] [--quick]

writes OUT_DIR/capture_reader, OUT_DIR/capture_merge, OUT_DIR/tcp_reassembly, OUT_DIR/amqp_decoder
and OUT_DIR/amqp10_performatives:

- capture_reader: each fixture cut to its first records (whole records, at most ~12 KiB; pcap,
  pcapng by blocks, and gzip-compressed again for the .gz fixture);
- capture_merge: two capture_reader seeds behind a big-endian u16 length of the first: the same
  fixture's two prefixes (records of equal times in both files: ties) and consecutive fixtures;
- amqp_decoder: the reassembled byte stream of each direction of a fixture's first connections
  (tshark -z follow,tcp,raw), at most 8 KiB, behind the harness's flags and control bytes
  (several chunkings, one with gaps and a frame_max change);
- tcp_reassembly: the segment list of those connections (tshark fields: direction, raw
  sequence and acknowledgement numbers, flags, length), in the input format of
  `_core::fuzzing::Conversation`, relative to each side's ISN;
- amqp10_performatives: the body of every whole AMQP 1.0 frame in a packet of a fixture (the
  packets tshark decodes as AMQP 1.0: those with `amqp.doff`), one seed each, distinct.

--quick uses only a few fixtures (the CI smoke run). Needs tshark. Only the standard library.
"""

import argparse
import gzip
import hashlib
import struct
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CAPTURE_BYTES = 12 << 10
STREAM_BYTES = 8 << 10
SEGMENTS = 160
CONNECTIONS = 2
QUICK = ["nack-requeue.pcap", "dumpcap.pcapng", "gzipped.pcap.gz", "midstream.pcap", "kernel-drops.pcap", "ipv6.pcap",
         "amqp10.pcap"]


def write(out: Path, data: bytes) -> None:
    """Content-addressed like libFuzzer's own corpus files, so re-runs do not duplicate."""
    out.mkdir(parents=True, exist_ok=True)
    (out / hashlib.sha1(data).hexdigest()).write_bytes(data)


# --- capture_reader -------------------------------------------------------------------------


def pcap_prefix(data: bytes, limit: int) -> bytes:
    """The global header and the whole records that fit in `limit` bytes (at least one)."""
    magic = data[:4]
    endian = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    pos, end = 24, 24
    while pos + 16 <= len(data):
        caplen = struct.unpack(endian + "I", data[pos + 8 : pos + 12])[0]
        nxt = pos + 16 + caplen
        if nxt > len(data) or (nxt > limit and end > 24):
            break
        pos = end = nxt
    return data[:end]


def pcapng_prefix(data: bytes, limit: int) -> bytes:
    """Whole blocks up to `limit` bytes, always past the first packet block."""
    endian = "<" if data[8:12] == b"\x4d\x3c\x2b\x1a" else ">"
    pos, packets = 0, 0
    while pos + 12 <= len(data):
        btype, blen = struct.unpack(endian + "II", data[pos : pos + 8])
        if blen < 12 or pos + blen > len(data) or (pos + blen > limit and packets > 0):
            break
        pos += blen
        packets += btype in (3, 6)
    return data[:pos]


def capture_seeds(fixture: Path, out: Path) -> list[bytes]:
    raw = fixture.read_bytes()
    compressed = raw[:2] == b"\x1f\x8b"
    if compressed:
        raw = gzip.decompress(raw)
    cut = pcapng_prefix if raw[:4] == b"\x0a\x0d\x0d\x0a" else pcap_prefix
    seeds = []
    for limit in (CAPTURE_BYTES, 2 << 10):
        seed = cut(raw, limit)
        seeds.append(gzip.compress(seed, mtime=0) if compressed else seed)
        write(out, seeds[-1])
    return seeds


def merge_seed(first: bytes, second: bytes) -> bytes:
    """The capture_merge input format: the first file's length (u16, big-endian), both files."""
    first = first[:0xFFFF]
    return struct.pack(">H", len(first)) + first + second


# --- tshark ---------------------------------------------------------------------------------


def tshark(*args: str) -> str:
    r = subprocess.run(["tshark", *args], capture_output=True, text=True, check=True)
    return r.stdout


def streams_of(fixture: Path) -> list[int]:
    ids = tshark("-r", str(fixture), "-Y", "tcp.len > 0", "-T", "fields", "-e", "tcp.stream").split()
    seen: list[int] = []
    for s in ids:
        if int(s) not in seen:
            seen.append(int(s))
    return seen[:CONNECTIONS]


def follow(fixture: Path, streams: list[int]) -> dict[int, tuple[bytes, bytes]]:
    """(bytes sent by node 0, by node 1) of each stream, from tshark's follow,tcp,raw."""
    args = ["-r", str(fixture), "-q"]
    for s in streams:
        args += ["-z", f"follow,tcp,raw,{s}"]
    out: dict[int, tuple[bytes, bytes]] = {}
    cur, parts = None, [bytearray(), bytearray()]
    for line in tshark(*args).splitlines():
        if line.startswith("Filter: tcp.stream eq "):
            cur = int(line.split()[-1])
            parts = [bytearray(), bytearray()]
            out[cur] = parts  # type: ignore[assignment]
        elif cur is not None and line.strip() and all(c in "0123456789abcdef" for c in line.strip()):
            parts[line.startswith("\t")] += bytes.fromhex(line.strip())
    return {k: (bytes(v[0]), bytes(v[1])) for k, v in out.items()}


# --- amqp_decoder ---------------------------------------------------------------------------

# (flags, control bytes): flags bit 0 = starts at a frame boundary, bit 1 = small caps,
# bits 2-3 = initial frame_max, bit 4 = AMQP 1.0's decoder after an AMQP 1.0 header (bit 5: the
# SASL one), which the harness puts first (bit 6: none, the stream seen from its middle); control 0x00-0xDF = a chunk of c+1 bytes, first-round
# 0xE0-0xEF = a frame_max change, 0xF0-0xFF = a gap of 2^(c&15) bytes (see plan() in src/testkit/decoders.rs).
CHUNKINGS = [
    (0b0001, b""),
    (0b0001, bytes([0x00, 0x06, 0x63, 0xDF])),
    (0b0011, bytes([0x20, 0xF4, 0x40, 0xEA, 0x10])),
    (0b1100, bytes([0xF0, 0x05, 0x80])),
]


#: the AMQP 1.0 protocol headers the harness writes itself: flags bits 4 and 5 (src/testkit/decoders.rs)
AMQP10_HEADERS = {b"AMQP\x00\x01\x00\x00": 0b010000, b"AMQP\x03\x01\x00\x00": 0b110000}
#: flags bits 4 and 6: AMQP 1.0's decoder on a stream seen from its middle
AMQP10_MID_STREAM = 0b1010000


def decoder_seeds(streams: dict[int, tuple[bytes, bytes]], out: Path) -> None:
    for client, server in streams.values():
        for data in (client, server):
            if not data:
                continue
            amqp10 = AMQP10_HEADERS.get(data[:8])
            if amqp10 is not None:
                for _, ctrl in CHUNKINGS:
                    write(out, bytes([amqp10, len(ctrl)]) + ctrl + data[8:][:STREAM_BYTES])
                    # the same stream entered mid-connection
                    write(out, bytes([AMQP10_MID_STREAM, len(ctrl)]) + ctrl + data[len(data) // 3 :][:STREAM_BYTES])
                continue
            for flags, ctrl in CHUNKINGS:
                write(out, bytes([flags, len(ctrl)]) + ctrl + data[:STREAM_BYTES])
                # the same stream entered mid-connection
                write(out, bytes([flags & ~1, len(ctrl)]) + ctrl + data[len(data) // 3 :][:STREAM_BYTES])


# --- tcp_reassembly ---------------------------------------------------------------------
# The format of `_core::fuzzing::Conversation` (its `encode`, pinned by the Rust test
# `conversation_format`): integers little-endian; ISNs, cap, then per segment: side byte,
# sequence tag (0 Next, 1 Delta i16, 2 Abs u32) and value, acknowledgement tag (0 None, 1 All,
# 2 Delta i16, 3 Abs u32) and value, flags, length u16, snaplen byte (0: none).


def value(kind: str, v: int | None) -> bytes:
    if kind == "delta":
        return struct.pack("<h", v)
    if kind == "abs":
        return struct.pack("<I", v)
    return b""


def segment(from_b: bool, seq: tuple, ack: tuple, flags: int, length: int) -> bytes:
    b = bytes([from_b, ["next", "delta", "abs"].index(seq[0])]) + value(*seq)
    b += bytes([["none", "all", "delta", "abs"].index(ack[0])]) + value(*ack)
    return b + bytes([flags & 0x07]) + struct.pack("<H", length) + b"\x00"


def conversation(isn: tuple[int, int], cap: int, segs: list[bytes]) -> bytes:
    return struct.pack("<IIH", isn[0], isn[1], cap) + b"".join(segs)


def reassembly_seeds(fixture: Path, streams: list[int], out: Path) -> None:
    rows = tshark(
        "-r", str(fixture), "-Y", " or ".join(f"tcp.stream == {s}" for s in streams), "-T", "fields",
        "-e", "tcp.stream", "-e", "tcp.dstport", "-e", "tcp.seq_raw", "-e", "tcp.ack_raw", "-e", "tcp.flags", "-e", "tcp.len",
    ).splitlines()
    by_stream: dict[int, list[list[str]]] = {}
    for r in rows:
        f = r.split("\t")
        if len(f) == 6 and all(f):
            by_stream.setdefault(int(f[0]), []).append(f)
    for pkts in by_stream.values():
        pkts = pkts[:SEGMENTS]
        # B is the side on port 5672 (as in the harness); ISNs from the first packet each way.
        isn: list[int | None] = [None, None]
        high = [0, 0]
        segs = []
        for _, dport, seq, ack, flags, length in pkts:
            d = 0 if dport == "5672" else 1
            seq, ack, flags, length = int(seq), int(ack), int(flags, 16), min(int(length), 4095)
            syn = flags & 0x02
            if isn[d] is None:
                isn[d] = seq if syn else (seq - 1) % 2**32
                high[d] = (isn[d] + 1) % 2**32
            if syn:
                s = ("next", None) if seq == isn[d] else ("abs", (seq - isn[d]) % 2**32)
            else:
                delta = (seq - high[d] + 2**31) % 2**32 - 2**31
                s = ("next", None) if delta == 0 else ("delta", delta) if -(2**15) <= delta < 2**15 else ("abs", (seq - isn[d]) % 2**32)
            if not flags & 0x10 or isn[1 - d] is None:
                a = ("none", None)
            else:
                delta = (ack - high[1 - d] + 2**31) % 2**32 - 2**31
                a = ("all", None) if delta == 0 else ("delta", delta) if -(2**15) <= delta < 2**15 else ("abs", (ack - isn[1 - d]) % 2**32)
            segs.append(segment(d == 1, s, a, flags, length))
            end = (seq + bool(syn) + length + (flags & 0x01)) % 2**32
            if 0 < (end - high[d]) % 2**32 < 2**31:
                high[d] = end
        if isn[0] is None:
            isn[0] = 0
        if isn[1] is None:
            isn[1] = 0
        write(out, conversation((isn[0], isn[1]), 4096, segs))
        # the same near the 32-bit wrap, with a tiny reassembly cap
        write(out, conversation((2**32 - 40, 2**32 - 7), 64, segs))


# --- amqp10_performatives ----------------------------------------------------------------


def body_seeds(fixture: Path, out: Path) -> None:
    """The bodies of the whole AMQP 1.0 frames (Part 2 §2.3: SIZE, DOFF, TYPE, channel) in
    each packet tshark decodes as AMQP 1.0, after a protocol header when the packet has one."""
    payloads = tshark("-r", str(fixture), "-Y", "amqp.doff", "-T", "fields", "-e", "tcp.payload").split()
    for hexdata in payloads:
        data = bytes.fromhex(hexdata)
        pos = 8 if data[:4] == b"AMQP" else 0
        while pos + 8 <= len(data):
            size, doff = struct.unpack(">IB", data[pos : pos + 5])
            if size < 8 or doff < 2 or doff * 4 > size or pos + size > len(data):
                break
            if size > doff * 4:
                write(out, data[pos + doff * 4 : pos + size])
            pos += size
            if data[pos : pos + 4] == b"AMQP":
                pos += 8


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--fixtures", type=Path, default=ROOT / "fixtures")
    ap.add_argument("--quick", action="store_true", help="a few fixtures only (CI smoke run)")
    args = ap.parse_args()
    fixtures = sorted(p for p in args.fixtures.iterdir() if p.name.endswith((".pcap", ".pcapng", ".pcap.gz")))
    if args.quick:
        fixtures = [p for p in fixtures if p.name in QUICK]
    if not fixtures:
        print(f"no captures in {args.fixtures}", file=sys.stderr)
        return 1
    previous: bytes | None = None
    for f in fixtures:
        big, small = capture_seeds(f, args.out / "capture_reader")
        write(args.out / "capture_merge", merge_seed(small, big))
        if previous is not None:
            write(args.out / "capture_merge", merge_seed(previous, small))
        previous = small
        streams = streams_of(f)
        if streams:
            decoder_seeds(follow(f, streams), args.out / "amqp_decoder")
            reassembly_seeds(f, streams, args.out / "tcp_reassembly")
        body_seeds(f, args.out / "amqp10_performatives")
    for t in ("capture_reader", "capture_merge", "tcp_reassembly", "amqp_decoder", "amqp10_performatives"):
        files = list((args.out / t).iterdir()) if (args.out / t).exists() else []
        print(f"{t}: {len(files)} seeds, {sum(p.stat().st_size for p in files)} bytes in {args.out / t}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
