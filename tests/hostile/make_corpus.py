#!/usr/bin/env python3
"""Build the corpus of broken and hostile captures (tests/hostile/) and its expected.json.

    python3 tests/hostile/make_corpus.py                  # rewrite the committed corpus
    python3 tests/hostile/make_corpus.py --out DIR        # the same, into DIR
    python3 tests/hostile/make_corpus.py --out DIR NAME…  # only these cases (also the
                                                          # test-time ones, see below)

Every case says what it is, how `amqpcap analyze FILE --out DIR` must end (exit code: 2 for an
unusable file, 3 for a readable one with no AMQP connection; a substring of its stderr), which
anomaly kinds `amqpcap.load` must report, and what must still be decoded. Those expectations come from how the file is built here (the frames it carries,
the records before the damage), never from amqpcap's output. Cases marked `generated` are too
big to commit (a million connections); tests/core/test_hostile.py builds them into a temporary
directory with this script (numpy, a few seconds).

The files are deterministic: packets are encoded with `struct` from tests/crafting.py's
conversations (fixed addresses, sequence numbers and timestamps), random bytes come from a
seeded generator, gzip is written without a timestamp.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import struct
import sys
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import crafting as c  # noqa: E402

EXPECTED = HERE / "expected.json"
GiB = 1 << 30


# ---------------------------------------------------------------------------
# Encoding crafted packets without scapy (fast, so that the benchmark can build large inputs)
# ---------------------------------------------------------------------------

def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def _tcp_options(options) -> bytes:
    out = b""
    for kind, value in options:
        if kind == "NOP":
            out += b"\x01"
        elif kind == "MSS":
            out += struct.pack("!BBH", 2, 4, value)
        elif kind == "WScale":
            out += struct.pack("!BBB", 3, 3, value)
        elif kind == "SAckOK":
            out += b"\x04\x02"
        elif kind == "Timestamp":
            out += struct.pack("!BBII", 8, 10, *value)
        else:
            raise ValueError(kind)
    return out + b"\0" * (-len(out) % 4)


def l3_bytes(p: c.Packet) -> bytes:
    """IPv4 + TCP bytes of a crafted packet, with correct checksums."""
    opts = _tcp_options(p.options)
    src, dst = (bytes(int(x) for x in a.split(".")) for a in (p.src, p.dst))
    tcp = struct.pack("!HHIIBBHHH", p.sport, p.dport, p.abs_seq % 2**32, p.abs_ack % 2**32,
                      (5 + len(opts) // 4) << 4, p.flags, p.window, 0, 0) + opts + p.payload
    pseudo = src + dst + struct.pack("!BBH", 0, 6, len(tcp))
    tcp = tcp[:16] + struct.pack("!H", _checksum(pseudo + tcp)) + tcp[18:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 0, 0x4000, 64, 6, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", _checksum(ip)) + ip[12:]
    return ip + tcp


def encode(records) -> list:
    """Fill the packets' byte cache so that crafting's writers never call scapy."""
    for r in records:
        if isinstance(r, c.Packet):
            r._l3_cache = l3_bytes(r)
    return records


class Raw:
    """A record given as link-layer bytes (damaged packets)."""

    def __init__(self, data: bytes, time_ns: int = 0, caplen: int | None = None, origlen: int | None = None):
        self.data, self.time_ns, self.caplen, self.origlen = data, time_ns, caplen, origlen

    def frame_bytes(self, link: str = "ether") -> bytes:
        return self.data


def write_pcap(path: Path, records, link="ether", **kw) -> Path:
    return c.write_pcap(path, encode(records), link=link, nano=False, **kw)


def pcap_header(linktype=1, snaplen=262144, magic=0xA1B2C3D4) -> bytes:
    return struct.pack("<IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype)


def pcap_record(data: bytes, time_ns: int, caplen: int | None = None, origlen: int | None = None) -> bytes:
    sec, ns = divmod(time_ns, 10**9)
    caplen = len(data) if caplen is None else caplen
    return struct.pack("<IIII", sec, ns // 1000, caplen, len(data) if origlen is None else origlen) + data


# ---------------------------------------------------------------------------
# Conversations and what they must decode to
# ---------------------------------------------------------------------------

def opened(**kw) -> c.TcpConversation:
    conv = c.TcpConversation(**kw).handshake()
    conv.exchange(c.opening())
    return conv


def publish(conv: c.TcpConversation, n: int, size: int = 40, tag: str = "m", segment_sizes=None):
    for i in range(n):
        body = (f"{tag}-{i:06d}-".encode() * (size // 8 + 1))[:size]
        conv.send_frames("c2s", [c.basic_publish(routing_key=f"{tag}{i}"), *c.content(1, body)], segment_sizes)


def closed(conv: c.TcpConversation) -> c.TcpConversation:
    conv.exchange([("c2s", c.connection_close()), ("s2c", c.connection_close_ok())])
    return conv.close()


def facts(records, conv: c.TcpConversation | None = None, connections: int | None = None, **extra) -> dict:
    """What must be decoded from `records` (the file's packets, in order): every frame of the
    conversation that the records complete (tests/crafting.py's reference reassembly)."""
    out = {"packets": len(records)}
    if conv is not None:
        mine = [r for r in records if isinstance(r, c.Packet) and (r.offset is not None or not r.payload)]
        rows = c.expected_frames(mine, conv)
        out["frames"] = len(rows)
        methods: dict[str, int] = {}
        for r in rows:
            if r.get("method"):
                methods[r["method"]] = methods.get(r["method"], 0) + 1
        out["methods"] = dict(sorted(methods.items()))
        out["connections"] = 1 if connections is None else connections
    elif connections is not None:
        out["connections"] = connections
    out.update(extra)
    return out


# ---------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------

@dataclass
class Case:
    name: str
    file: str
    what: str
    exit: int = 0
    #: substring of the command's stderr (None: stderr must hold no warning)
    warning: str | None = None
    #: anomaly kinds `amqpcap.load` reports, exactly (None: the file cannot be loaded)
    kinds: list[str] | None = field(default_factory=list)
    #: what must still be decoded: packets (records read), frames, methods, connections, bodies
    decode: dict = field(default_factory=dict)
    #: extra arguments for `amqpcap analyze` (and the same limits for amqpcap.load)
    args: list[str] = field(default_factory=list)
    #: built at test time (too big to commit)
    generated: bool = False


CASES: dict[str, tuple[Case, Callable[[Path], dict | None]]] = {}


def case(name: str, what: str, file: str | None = None, **kw):
    """Register a case; several cases may read the same file (with other arguments)."""
    def register(build: Callable[[Path], dict | None]):
        CASES[name] = (Case(name, file or name, what, **kw), build)
        return build
    return register


# -- unusable files ---------------------------------------------------------

@case("empty.pcap", "zero bytes", exit=2, warning="is empty", kinds=None)
def _empty(path):
    path.write_bytes(b"")


@case("random.bin", "4 KiB of random bytes", exit=2, warning="not a pcap or pcapng capture", kinds=None)
def _random(path):
    path.write_bytes(b"\x00" + random.Random(4).randbytes(4095))


@case("notes.txt", "a text file", exit=2, warning="looks like text", kinds=None)
def _text(path):
    path.write_text("tcpdump -i any -w cap.pcap 'tcp port 5672'\nthese are my notes, not a capture\n")


@case("wrong-magic.pcap", "a good capture whose magic number has one bit flipped", exit=2,
      warning="not a pcap or pcapng capture", kinds=None)
def _wrong_magic(path):
    write_pcap(path, closed(opened()).timed())
    data = bytearray(path.read_bytes())
    data[0] ^= 0x01
    path.write_bytes(bytes(data))


@case("short-header.pcap", "the first 12 bytes of a pcap file header (it has 24)", exit=2,
      warning="the file ends after 12 bytes, inside the pcap file header (24 bytes)", kinds=None)
def _short_header(path):
    path.write_bytes(pcap_header()[:12])


@case("pcapng-no-interface.pcapng", "pcapng packets that name an interface no block describes",
      exit=2, warning="no interface description", kinds=None)
def _no_interface(path):
    recs = encode(closed(opened()).timed())
    out = [c._block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))]
    for r in recs:
        data = r.frame_bytes()
        units = r.time_ns // 1000
        out.append(c._block(6, struct.pack("<IIIII", 0, units >> 32, units & 0xFFFFFFFF, len(data), len(data)) + c._pad4(data)))
    path.write_bytes(b"".join(out))


@case("unsupported-linktype.pcap", "a conversation in a pcap whose link type is USB (189)", exit=2,
      warning="link type LINKTYPE_189", kinds=None)
def _unsupported_linktype(path):
    recs = encode(closed(opened()).timed())
    path.write_bytes(pcap_header(linktype=189) + b"".join(pcap_record(r.frame_bytes(), r.time_ns) for r in recs))


@case("gzip-text.pcap.gz", "gzip-compressed text", exit=2, warning="holds no pcap or pcapng capture", kinds=None)
def _gzip_text(path):
    path.write_bytes(gzip.compress(b"not a capture\n" * 100, mtime=0))


# -- partly usable files ----------------------------------------------------

@case("header-only.pcap", "a pcap file header and no packet (tcpdump stopped at once): no AMQP connection, exit 3",
      exit=3, warning="holds no packets", kinds=[], decode={"packets": 0, "frames": 0, "connections": 0})
def _header_only(path):
    path.write_bytes(pcap_header())


@case("cut-mid-record.pcap", "a capture cut in the middle of its last record's data (tcpdump killed)",
      warning="middle of a record", kinds=["capture-truncated"])
def _cut_mid_record(path):
    conv = opened()
    publish(conv, 10)
    recs = conv.timed()
    write_pcap(path, recs)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - len(recs[-1].frame_bytes()) // 2])
    return facts(recs[:-1], conv)


@case("cut-record-header.pcap", "a capture cut 6 bytes into a record header", warning="middle of a record",
      kinds=["capture-truncated"])
def _cut_record_header(path):
    conv = opened()
    publish(conv, 10)
    recs = conv.timed()
    write_pcap(path, recs)
    path.write_bytes(path.read_bytes() + b"\x10\x20\x30\x40\x00\x00")
    return facts(recs, conv)


@case("record-claims-2gb.pcap", "the 20th record's header claims a 2 GiB packet (then garbage)",
      warning="claims 2147483648 bytes", kinds=["capture-truncated"])
def _record_2gb(path):
    conv = opened()
    publish(conv, 10)
    recs = encode(conv.timed())
    good = recs[:19]
    blob = pcap_header() + b"".join(pcap_record(r.frame_bytes(), r.time_ns) for r in good)
    blob += struct.pack("<IIII", 1_700_000_100, 0, 2 * GiB, 2 * GiB) + random.Random(5).randbytes(3000)
    path.write_bytes(blob)
    return facts(good, conv)


@case("zero-length-records.pcap", "records of 0 captured bytes (some claiming 60 on the wire) between the packets",
      warning="malformed-packet", kinds=["malformed-packet"])
def _zero_length(path):
    conv = opened()
    publish(conv, 5)
    recs = encode(conv.timed())
    out = []
    for i, r in enumerate(recs):
        out.append(pcap_record(r.frame_bytes(), r.time_ns))
        if i % 4 == 1:
            out.append(pcap_record(b"", r.time_ns + 1, caplen=0, origlen=0 if i % 8 == 1 else 60))
    path.write_bytes(pcap_header() + b"".join(out))
    zero = sum(1 for i in range(len(recs)) if i % 4 == 1)
    f = facts(recs, conv)
    f["packets"] += zero
    f["anomalies"] = {"malformed-packet": zero}
    return f


@case("malformed-ip.pcap", "packets whose IPv4 or TCP headers are cut or lie about their length",
      warning="malformed-packet", kinds=["malformed-packet"])
def _malformed_ip(path):
    conv = opened()
    publish(conv, 5)
    recs = encode(conv.timed())
    eth = c.MAC["c2s"][1] + c.MAC["c2s"][0] + b"\x08\x00"
    l3 = recs[-1].l3_bytes()
    ip_total_short = bytearray(l3)
    struct.pack_into("!H", ip_total_short, 2, 10)              # IPv4 total length below its header
    bad = [
        eth + l3[:12],                                          # IPv4 header cut
        eth + bytes([0x43]) + l3[1:],                           # IPv4 header length of 12 bytes
        eth + bytes(ip_total_short),
        eth + l3[:20] + l3[20:30],                              # TCP header cut (and not by snaplen)
        eth + l3[:20] + l3[20:32] + bytes([0x30]) + l3[33:],    # TCP data offset of 12 bytes
        b"\x02\x00",                                            # not even an Ethernet header
    ]
    out = [pcap_record(r.frame_bytes(), r.time_ns) for r in recs]
    for i, b in enumerate(bad):
        out.insert(4 + 3 * i, pcap_record(b, recs[0].time_ns + i))
    path.write_bytes(pcap_header() + b"".join(out))
    f = facts(recs, conv)
    f["packets"] += len(bad)
    f["anomalies"] = {"malformed-packet": len(bad)}
    f["anomaly_bytes"] = {"malformed-packet": sum(len(b) for b in bad)}
    return f


@case("malformed-ip-capped", "the same malformed packets with the anomalies table capped at 2 rows: the rest summed in one",
      file="malformed-ip.pcap", args=["--limit", "max_anomalies=2"], warning="reached max_anomalies",
      kinds=["malformed-packet"], decode={"anomalies": {"malformed-packet": 3}})
def _malformed_ip_capped(path):
    return _malformed_ip(path)  # the bytes still add up


@case("ip-fragments.pcap", "a TCP segment sent as two IPv4 fragments (not reassembled)",
      warning="ip-fragment", kinds=["ip-fragment"])
def _fragments(path):
    conv = opened()
    publish(conv, 3)
    recs = encode(conv.timed())
    eth = c.MAC["c2s"][1] + c.MAC["c2s"][0] + b"\x08\x00"
    ip = bytearray(recs[-1].l3_bytes())
    tcp = bytes(ip[20:])
    frags = []
    for off, chunk, more in ((0, tcp[:16], True), (16, tcp[16:], False)):
        h = bytearray(ip[:20])
        struct.pack_into("!H", h, 2, 20 + len(chunk))
        struct.pack_into("!H", h, 4, 777)
        struct.pack_into("!H", h, 6, (0x2000 if more else 0) | off // 8)
        struct.pack_into("!H", h, 10, 0)
        struct.pack_into("!H", h, 10, _checksum(bytes(h)))
        frags.append(eth + bytes(h) + chunk)
    out = [pcap_record(r.frame_bytes(), r.time_ns) for r in recs]
    out += [pcap_record(f, recs[-1].time_ns + 1000 + i) for i, f in enumerate(frags)]
    path.write_bytes(pcap_header() + b"".join(out))
    f = facts(recs, conv)
    f["packets"] += 2
    return f


@case("snaplen-60.pcap", "every packet cut to 60 bytes by snaplen: 6 bytes of each payload",
      warning="truncated-packet", kinds=["truncated-packet", "resync-skipped"],
      decode={"frames": 0, "connections": 1})
def _snaplen(path):
    conv = c.TcpConversation(timestamps=False).handshake()
    conv.exchange(c.opening())
    publish(conv, 5)
    recs = conv.timed()
    write_pcap(path, recs, snaplen=60)
    return {"packets": len(recs)}


@case("pcapng-unknown-blocks.pcapng", "pcapng with custom, unknown, name-resolution and statistics blocks between the packets",
      kinds=[])
def _unknown_blocks(path):
    conv = opened()
    publish(conv, 5)
    recs = encode(closed(conv).timed())
    c.write_pcapng(path, [c.Interface(tsresol=9)], [(0, r) for r in recs])
    blocks = _split_blocks(path.read_bytes())
    extra = [
        c._block(0x00000BAD, struct.pack("<I", 32473) + b"custom block, copiable"),
        c._block(0x40000BAD, struct.pack("<I", 32473) + b"custom, do not copy"),
        c._block(0x0BADF00D, b"a block type nobody defined" + b"\0"),
        c._block(0x00000004, struct.pack("<HH", 1, 8) + b"\x0a\x00\x00\x02rmq\0" + struct.pack("<HH", 0, 0)),
        c._block(0x00000005, struct.pack("<III", 0, 0, 0)),
    ]
    for i, b in enumerate(extra):
        blocks.insert(3 + 4 * i, b)
    path.write_bytes(b"".join(blocks))
    return facts(recs, conv)


def _split_blocks(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        n = struct.unpack_from("<I", data, pos + 4)[0]
        out.append(data[pos:pos + n])
        pos += n
    return out


def _ten_publishes_as_pcapng_blocks(path) -> tuple[c.TcpConversation, list, list[bytes]]:
    """A conversation publishing 10 messages, written to `path` as pcapng and cut into its blocks
    (SHB, IDB, then one EPB per record), for a case to corrupt one and write them back."""
    conv = opened()
    publish(conv, 10)
    recs = encode(conv.timed())
    c.write_pcapng(path, [c.Interface(tsresol=9)], [(0, r) for r in recs])
    return conv, recs, _split_blocks(path.read_bytes())


@case("pcapng-corrupt-block.pcapng", "pcapng whose 15th packet block has a trailing length that disagrees with its header",
      warning="corrupt data after 14 packets", kinds=["capture-truncated"])
def _corrupt_block(path):
    conv, recs, blocks = _ten_publishes_as_pcapng_blocks(path)
    # corrupt the 15th record's block
    bad = bytearray(blocks[2 + 14])
    bad[-4:] = struct.pack("<I", len(bad) + 4)
    blocks[2 + 14] = bytes(bad)
    path.write_bytes(b"".join(blocks))
    return facts(recs[:14], conv)


@case("pcapng-block-claims-2gb.pcapng", "pcapng whose 10th packet block claims to be 2 GiB long",
      warning="claims 2147483648 bytes", kinds=["capture-truncated"])
def _block_2gb(path):
    conv, recs, blocks = _ten_publishes_as_pcapng_blocks(path)
    bad = bytearray(blocks[2 + 9])
    struct.pack_into("<I", bad, 4, 2 * GiB)
    blocks[2 + 9] = bytes(bad)
    path.write_bytes(b"".join(blocks))
    return facts(recs[:9], conv)


@case("pcapng-block-claims-5-bytes.pcapng",
      "pcapng with a Process Information Block after its 10th packet block claiming 5 bytes, fewer than any "
      "block has (pcap-parser 0.17 subtracted 12 from it: found by the capture_merge fuzz target)",
      warning="a block claims 5 bytes", kinds=["capture-truncated"])
def _block_5_bytes(path):
    conv, recs, blocks = _ten_publishes_as_pcapng_blocks(path)
    blocks.insert(2 + 10, struct.pack("<II", 0x8000_0001, 5) + bytes(16))
    path.write_bytes(b"".join(blocks))
    return facts(recs[:10], conv)


@case("mixed-linktypes.pcapng", "two interfaces: Ethernet with a conversation, and IEEE 802.11 radio packets",
      warning="unsupported-link-type", kinds=["unsupported-link-type"])
def _mixed_linktypes(path):
    conv = opened()
    publish(conv, 5)
    recs = encode(closed(conv).timed())
    radio = [Raw(random.Random(i).randbytes(80), recs[i].time_ns + 1) for i in range(0, len(recs), 3)]
    items = [(0, r) for r in recs] + [(1, r) for r in radio]
    items.sort(key=lambda x: x[1].time_ns)
    c.write_pcapng(path, [c.Interface(tsresol=9), c.Interface(link="ieee802_11", tsresol=9)], items)
    return facts(recs, conv, packets=len(items))


def _gzip_prefix_records(blob: bytes, cut: bytes) -> int:
    """How many whole pcap records the gzip prefix `cut` of pcap `blob` holds."""
    d = zlib.decompressobj(wbits=31)
    try:
        avail = d.decompress(cut)
    except zlib.error:
        avail = b""
    pos, n = 24, 0
    while pos + 16 <= len(avail):
        caplen = struct.unpack_from("<I", avail, pos + 8)[0]
        if pos + 16 + caplen > len(avail):
            break
        pos += 16 + caplen
        n += 1
    assert avail == blob[: len(avail)]
    return n


@case("gzip-cut.pcap.gz", "a gzip-compressed capture cut at 60 % of its length (the download stopped)",
      warning="gzip stream ends early or is corrupt", kinds=["capture-truncated"])
def _gzip_cut(path):
    conv = opened()
    publish(conv, 200, size=200)
    recs = encode(conv.timed())
    write_pcap(path, recs)
    blob = path.read_bytes()
    gz = gzip.compress(blob, mtime=0)
    cut = gz[: len(gz) * 6 // 10]
    path.write_bytes(cut)
    n = _gzip_prefix_records(blob, cut)
    return facts(recs[:n], conv)


@case("gzip-bad-crc.pcap.gz", "a gzip-compressed capture whose CRC-32 trailer is wrong (every packet is there)",
      warning="gzip stream ends early or is corrupt", kinds=["capture-truncated"])
def _gzip_bad_crc(path):
    conv = opened()
    publish(conv, 20)
    recs = encode(closed(conv).timed())
    write_pcap(path, recs)
    gz = bytearray(gzip.compress(path.read_bytes(), mtime=0))
    gz[-8:-4] = bytes(b ^ 0xFF for b in gz[-8:-4])
    path.write_bytes(bytes(gz))
    return facts(recs, conv)


@case("gzip-trailing-garbage.pcap.gz", "a gzip-compressed capture followed by 100 bytes that are not gzip",
      warning="gzip stream ends early or is corrupt", kinds=["capture-truncated"])
def _gzip_trailing(path):
    conv = opened()
    publish(conv, 20)
    recs = encode(closed(conv).timed())
    write_pcap(path, recs)
    path.write_bytes(gzip.compress(path.read_bytes(), mtime=0) + random.Random(9).randbytes(100))
    return facts(recs, conv)


# -- hostile AMQP streams ---------------------------------------------------

def _hostile_then_good(bad: bytes, tail_frames: int = 5, **kw):
    """A conversation: opening, `bad` bytes from the client, then `tail_frames` publishes."""
    conv = opened(**kw)
    publish(conv, 3, tag="before")
    conv.send("c2s", bad)
    publish(conv, tail_frames, tag="after")
    return closed(conv)


@case("frame-claims-4gb.pcap", "a method frame header claiming 4 GiB (size 0xFFFFFFFF), then valid frames",
      warning="oversized-frame", kinds=["oversized-frame", "resync-skipped"])
def _frame_4gb(path):
    conv = _hostile_then_good(struct.pack(">BHI", 1, 1, 0xFFFFFFFF) + b"\x00\x3c\x00\x28" + b"x" * 100)
    recs = conv.timed()
    write_pcap(path, recs)
    return facts(recs, conv)


@case("body-claims-4gb.pcap", "a content header announcing 4 GiB, then a body frame claiming 4 GiB, then valid frames",
      warning="oversized-frame", kinds=["oversized-frame", "resync-skipped"])
def _body_4gb(path):
    conv = opened()
    publish(conv, 3, tag="before")
    conv.send_frames("c2s", [c.basic_publish(routing_key="huge"), c.content_header(1, 0xFFFFFFFF)])
    conv.send("c2s", struct.pack(">BHI", 3, 1, 0xFFFFFFFF) + b"y" * 200)
    publish(conv, 5, tag="after")
    recs = closed(conv).timed()
    write_pcap(path, recs)
    return facts(recs, conv)


@case("bad-frame-ends.pcap", "a method, a content header and a body frame whose frame-end octet is not 0xCE, each followed by good frames",
      warning="bad-frame-end", kinds=["bad-frame-end", "resync-skipped"])
def _bad_frame_ends(path):
    conv = opened()
    bad = [c.basic_publish(routing_key="bad-method"), c.content_header(1, 5), c.body_frame(1, b"12345")]
    for i, f in enumerate(bad):
        publish(conv, 2, tag=f"ok{i}")
        conv.send("c2s", bytes(f)[:-1] + b"\x00")
    publish(conv, 2, tag="end")
    recs = closed(conv).timed()
    write_pcap(path, recs)
    return facts(recs, conv, anomalies={"bad-frame-end": 3})


@case("malformed-methods.pcap", "an unknown method, truncated arguments, a broken field table, a content header of a class without content and an unknown frame type",
      warning="malformed-method", kinds=["malformed-method", "malformed-header", "resync-skipped", "unknown-frame-type", "unknown-method"])
def _malformed_methods(path):
    conv = opened()
    # well-framed, so each is a row of the frames table (without a method name) and an anomaly
    framed = [
        c.raw_frame(1, 1, c.short(60) + c.short(999) + b"xyz"),                   # unknown method
        c.raw_frame(1, 1, c.short(60) + c.short(80) + b"\x00\x01"),               # basic.ack cut short
        c.raw_frame(1, 1, c.short(50) + c.short(10) + c.short(0) + c.shortstr("q") + b"\x00"
                    + c.long_(9) + b"\x03key?\x00\x00\x00"),                       # bad field table
        c.raw_frame(2, 1, c.short(20) + c.short(0) + c.longlong(1) + c.short(0)),  # channel class has no content
    ]
    for i, b in enumerate(framed):
        publish(conv, 1, tag=f"ok{i}")
        conv.send_frames("c2s", [c.Frame(b, {})])
    publish(conv, 1, tag="ok4")
    conv.send("c2s", c.raw_frame(7, 1, b"seven"))                                 # frame type 7: not a frame
    publish(conv, 2, tag="end")
    recs = closed(conv).timed()
    write_pcap(path, recs)
    return facts(recs, conv)


@case("other-protocol.pcap", "a client sends an AMQP 0-10 protocol header; the broker answers with 0-9-1 and closes",
      warning="protocol-header", kinds=["protocol-header"], decode={"frames": 0, "connections": 1})
def _other_protocol(path):
    conv = c.TcpConversation().handshake()
    conv.send("c2s", b"AMQP\x00\x00\x0a\x00")
    conv.send("s2c", c.PROTOCOL_HEADER)
    recs = conv.close().timed()
    write_pcap(path, recs)
    return {"packets": len(recs)}


#: AMQP 1.0 (Part 2 §2.3.1): the protocol header, and an open performative's frame (SIZE 16,
#: DOFF 2, type 0 AMQP, channel 0; body: described type 0x00, smallulong 0x53 0x10 open, list8
#: of 3 octets holding one field, its mandatory container-id, an empty str8, Part 2 §2.7.1)
AMQP10_HEADER = b"AMQP\x00\x01\x00\x00"
AMQP10_OPEN = struct.pack(">IBBH", 16, 2, 0, 0) + b"\x00\x53\x10\xc0\x03\x01\xa1\x00"


def _amqp10_then(path, bad: bytes) -> dict:
    """Write an AMQP 1.0 connection to `path`: both headers and opens, then `bad` bytes from the
    client; its facts."""
    conv = c.TcpConversation().handshake()
    conv.send("c2s", AMQP10_HEADER)
    conv.send("s2c", AMQP10_HEADER)
    conv.send("c2s", AMQP10_OPEN)
    conv.send("s2c", AMQP10_OPEN)
    conv.send("c2s", bad)
    recs = conv.close().timed()
    write_pcap(path, recs)
    return {"packets": len(recs)}


@case("amqp10-bad-frame.pcap", "an AMQP 1.0 connection whose client sends, after its open, a frame header of size 4 "
      "(below the header's own 8 octets) and 100 bytes: no chain of AMQP 1.0 frames starts in the rest (resynchronisation finds none), so it is skipped",
      warning="bad-frame-header", kinds=["bad-frame-header", "resync-skipped"],
      decode={"frames": 0, "connections": 1, "skipped_bytes": 108})
def _amqp10_bad_frame(path):
    return _amqp10_then(path, struct.pack(">IBBH", 4, 2, 0, 0) + b"z" * 100)


@case("amqp10-claims-4gb.pcap", "an AMQP 1.0 frame header claiming 4 GiB (SIZE 0xFFFFFFFF) after the open, then 200 bytes: "
      "over max_frame_bytes, nothing is buffered for it",
      warning="oversized-frame", kinds=["oversized-frame", "resync-skipped"],
      decode={"frames": 0, "connections": 1, "skipped_bytes": 208})
def _amqp10_4gb(path):
    return _amqp10_then(path, struct.pack(">IBBH", 0xFFFFFFFF, 2, 0, 0) + b"y" * 200)


@case("garbage-midstream.pcap", "a port-5672 conversation seen from its middle: 20 KiB of random bytes, then frames",
      warning="resync-skipped", kinds=["resync-skipped"])
def _garbage_midstream(path):
    conv = c.TcpConversation()
    garbage = random.Random(7).randbytes(20_000)
    conv.send("c2s", garbage)
    publish(conv, 10)
    recs = closed(conv).timed()
    write_pcap(path, recs)
    return facts(recs, conv)


@case("header-claims-beyond-end.pcap", "a conversation seen from its middle whose first bytes look like a basic.publish frame "
      "header claiming 500,000 bytes, more than the rest of the capture; then 5 messages",
      warning="resync-skipped", kinds=["resync-skipped"])
def _beyond_end(path):
    conv = c.TcpConversation()
    conv.send("c2s", struct.pack(">BHI", 1, 1, 500_000) + c.short(60) + c.short(40))
    publish(conv, 5)
    recs = conv.timed()
    write_pcap(path, recs)
    return facts(recs, conv, skipped_bytes=11)


def tiny_frames(n: int) -> tuple[list, c.TcpConversation]:
    conv = opened()
    hb = c.heartbeat()
    # written by send(), not send_frames(): one log entry per frame would be slow; counted below
    conv.send("c2s", bytes(hb) * n, segment_sizes=65000)
    return closed(conv).timed(), conv


TINY_FRAMES = 100_000


@case("tiny-frames.pcap", f"{TINY_FRAMES:,} heartbeat frames (8 bytes each) in 64 KB segments", kinds=[])
def _tiny_frames(path):
    recs, conv = tiny_frames(TINY_FRAMES)
    write_pcap(path, recs)
    f = facts(recs, conv)
    f["frames"] += TINY_FRAMES
    return f


@case("tiny-frames-capped", f"the same {TINY_FRAMES:,} heartbeats with the frames table capped at 1,000 rows",
      file="tiny-frames.pcap", args=["--limit", "max_frames=1000"], warning="frame-limit", kinds=["frame-limit"],
      decode={"frames": 1000, "connections": 1})
def _tiny_frames_capped(path):
    return {"packets": len(tiny_frames(TINY_FRAMES)[0])}


@case("one-byte-segments.pcap", "a conversation whose client sends every byte in its own segment", kinds=[])
def _one_byte(path):
    conv = opened()
    publish(conv, 20, segment_sizes=1)
    recs = closed(conv).timed()
    write_pcap(path, recs)
    return facts(recs, conv)


def _jump(path, delta: int):
    conv = opened(timestamps=False)
    publish(conv, 3, tag="before")
    # a segment far from the client's next sequence number (not acknowledged by the broker)
    conv._packet("c2s", conv._next_seq("c2s") + delta, c.ACK | c.PSH, bytes(c.heartbeat()) * 40)
    publish(conv, 3, tag="after")
    recs = closed(conv).timed()
    write_pcap(path, recs)
    return facts(recs, conv)


@case("seq-jump-ahead.pcap", "a client segment 1 GiB ahead of the stream, then the stream goes on",
      warning="out-of-window", kinds=["out-of-window"])
def _jump_ahead(path):
    return _jump(path, GiB)


@case("seq-jump-behind.pcap", "a client segment 1 GiB behind the stream", warning="out-of-window", kinds=["out-of-window"])
def _jump_behind(path):
    return _jump(path, -GiB)


@case("seq-jump-wrap.pcap", "a client segment 3 GiB ahead (past the 32-bit half-way point: 1.25 GiB behind)",
      warning="out-of-window", kinds=["out-of-window"])
def _jump_wrap(path):
    return _jump(path, 3 * GiB)


@case("retransmission-mismatch.pcap", "a retransmission overlapping two segments already received, with other bytes",
      warning="retransmission-mismatch", kinds=["retransmission-mismatch"])
def _mismatch(path):
    conv = opened()
    start = len(conv.data["c2s"])
    publish(conv, 4, tag="first")
    # re-send 60 bytes straddling the first two segments (103 bytes each: publish, header,
    # 40-byte body), with "first" changed in the body and the routing key
    first = bytes(conv.data["c2s"][start + 80: start + 140])
    p = conv.retransmit("c2s", start + 80, 60)
    p.payload = first.replace(b"first", b"FORGE")
    assert p.payload != first
    publish(conv, 2, tag="after")
    recs = closed(conv).timed()
    write_pcap(path, recs)
    differ = sum(a != b for a, b in zip(first, p.payload))
    return facts(recs, conv, anomalies={"retransmission-mismatch": 1}, mismatched_bytes=differ)


@case("ooo-mismatch.pcap", "two overlapping out-of-order segments with different bytes, ahead of a hole that fills later",
      warning="retransmission-mismatch", kinds=["retransmission-mismatch"])
def _ooo_mismatch(path):
    conv = opened(timestamps=False)
    publish(conv, 6, tag="seg")
    segs = [p for p in conv.packets if p.direction == "c2s" and p.payload][-6:]
    hole, later = segs[1], segs[3]
    # hold back the hole; send an overlapping copy of `later` with other bytes before it
    conv.packets.remove(hole)
    forged = conv.retransmit("c2s", later.offset - 10, 30)
    forged.payload = forged.payload[:10] + bytes(b ^ 0xFF for b in forged.payload[10:20]) + forged.payload[20:]
    conv.packets.remove(forged)
    conv.packets.insert(conv.index(later) + 1, forged)
    conv.packets.insert(conv.index(segs[-1]) + 1, hole)
    recs = closed(conv).timed()
    write_pcap(path, recs)
    return facts(recs, conv, anomalies={"retransmission-mismatch": 1}, mismatched_bytes=10)


@case("ooo-flood.pcap", "a hole, then 5,000 one-byte segments after it (out-of-order buffer capped at 32 KiB)",
      args=["--limit", "max_reassembly_bytes=32768"], warning="reassembly-overflow", kinds=["reassembly-overflow"])
def _ooo_flood(path):
    conv = opened(timestamps=False)
    conv.send_frames("c2s", [c.basic_publish(routing_key="lost")])
    lost = conv.packets[-1]
    conv.send_frames("c2s", [c.heartbeat()] * 625, segment_sizes=1)  # 5,000 bytes
    conv.frame_log = [x for x in conv.frame_log if x[2].expect.get("routing_key") != "lost"]
    # every frame but the lost one is decoded; nothing after the hole acknowledges it
    f = facts(conv.timed(), conv)
    conv.drop(lost)
    recs = conv.timed()
    write_pcap(path, recs)
    f["packets"] = len(recs)
    return f


# -- many connections (built at test time) ----------------------------------

def many_connections(path: Path, n: int) -> dict:
    """`n` connections, each a SYN and a segment carrying the AMQP protocol header and a FIN,
    from 10.<i>.<i>.1:<port> to 10.0.0.2:5672. numpy builds every record at once."""
    import numpy as np

    i = np.arange(n, dtype=np.int64)
    src = (0x0A000001 + ((i // 50_000) << 8)).astype(">u4")
    sport = (10_000 + i % 50_000).astype(">u2")

    def records(payload: bytes, flags: int, seq_extra: int) -> np.ndarray:
        size = 14 + 20 + 20 + len(payload)
        rec = np.zeros((n, 16 + size), np.uint8)
        ts_us = 1_700_000_000 * 10**6 + 2 * i + seq_extra
        hdr = np.zeros(n, [("s", "<u4"), ("us", "<u4"), ("cl", "<u4"), ("ol", "<u4")])
        hdr["s"], hdr["us"], hdr["cl"], hdr["ol"] = ts_us // 10**6, ts_us % 10**6, size, size
        rec[:, :16] = hdr.view(np.uint8).reshape(n, 16)
        rec[:, 16:30] = np.frombuffer(c.MAC["c2s"][1] + c.MAC["c2s"][0] + b"\x08\x00", np.uint8)
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40 + len(payload), 0, 0x4000, 64, 6, 0, b"\0" * 4, b"\x0a\0\0\x02")
        rec[:, 30:50] = np.frombuffer(ip, np.uint8)
        rec[:, 42:46] = src.view(np.uint8).reshape(n, 4)
        rec[:, 50:70] = np.frombuffer(struct.pack("!HHIIBBHHH", 0, 5672, 0, 0, 0x50, flags, 65535, 0, 0), np.uint8)
        rec[:, 50:52] = sport.view(np.uint8).reshape(n, 2)
        rec[:, 54:58] = (1000 + seq_extra + i).astype(">u4").view(np.uint8).reshape(n, 4)
        rec[:, 70:] = np.frombuffer(payload, np.uint8)
        return rec

    syn = records(b"", c.SYN, 0)
    data = records(c.PROTOCOL_HEADER, c.ACK | c.PSH | c.FIN, 1)
    with open(path, "wb") as f:
        f.write(pcap_header())
        f.write(np.concatenate([syn, data], axis=1).tobytes())
    return {"packets": 2 * n, "connections": n, "frames": 0}


@case("million-connections.pcap", "1,000,000 short connections (SYN, then the protocol header with FIN); 148 MB, "
      "built at test time. The first max_streams (250,000 by default) are decoded, the rest counted",
      warning="stream-limit", kinds=["stream-limit"], generated=True, decode={"connections": 250_000})
def _million(path):
    return many_connections(path, 1_000_000)


@case("many-connections-capped.pcap", "100,000 short connections with max_streams=1,000: the rest are numbered, not decoded",
      args=["--limit", "max_streams=1000"], warning="stream-limit", kinds=["stream-limit"], generated=True,
      decode={"connections": 1000})
def _many_capped(path):
    f = many_connections(path, 100_000)
    f["connections"] = 1000
    return f


# ---------------------------------------------------------------------------

def build(name: str, out: Path) -> Case:
    """Write case `name`'s file into `out`; return the Case with the construction's facts."""
    cs, fn = CASES[name]
    out.mkdir(parents=True, exist_ok=True)
    got = fn(out / cs.file) or {}
    return Case(**{**asdict(cs), "decode": {**got, **cs.decode}})


def generated_facts(cs: Case) -> dict:
    """The facts of a test-time case, from its parameters (without writing the file)."""
    n = {"million-connections.pcap": 1_000_000, "many-connections-capped.pcap": 100_000}[cs.name]
    return {"packets": 2 * n, "connections": n, "frames": 0, **cs.decode}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=HERE)
    p.add_argument("names", nargs="*", help="cases to build (default: every committed one)")
    a = p.parse_args(argv)
    names = a.names or [n for n, (cs, _) in CASES.items() if not cs.generated]
    unknown = set(names) - set(CASES)
    if unknown:
        p.error(f"unknown cases: {', '.join(sorted(unknown))}")
    built = {n: build(n, a.out) for n in names}
    if not a.names:
        cases = [asdict(built[n]) if n in built else {**asdict(cs), "decode": generated_facts(cs)}
                 for n, (cs, _) in CASES.items()]
        (a.out / "expected.json").write_text(json.dumps({"cases": cases}, indent=1) + "\n")
    for n in names:
        f = a.out / CASES[n][0].file
        print(f"{n}: {f.name}, {f.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
