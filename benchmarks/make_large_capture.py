#!/usr/bin/env python3
"""Make a large real capture from a small recorded one, for benchmarks.

Each copy of the source capture gets its own client port (so it is a separate TCP connection,
as many concurrent clients would be) and a time offset; the copies are merged in time order
into one pcap. Past 60,000 connections the client's IPv4 address changes too (its second
octet counts up), so there is no limit on the copies. The AMQP bytes are the recorded ones,
untouched.

    python benchmarks/make_large_capture.py fixtures/rpc-nodelay.pcap /tmp/large.pcap --packets 1000000
    python benchmarks/make_large_capture.py SOURCE /dev/stdout --packets 100000000 | editcap -c 2000000 - ring/ring.pcap

Only classic pcap sources with Ethernet, Linux SLL/SLL2 or raw IPv4 framing are supported
(what tcpdump writes on Linux). TCP checksums are left as recorded (nobody here checks them).
"""

from __future__ import annotations

import argparse
import heapq
import struct
import sys
from pathlib import Path

LINK_HEADER = {1: 14, 113: 16, 276: 20, 101: 0, 228: 0}
#: client ports used per client address: 2000 up to 62000, but never an AMQP port (a copy whose
#: client port were the broker's would be a conversation between two equal endpoints)
AMQP_PORTS = (5671, 5672)


def read_pcap(path: Path):
    data = path.read_bytes()
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        endian = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        endian = ">"
    else:
        sys.exit(f"{path}: not a classic pcap file (convert pcapng with editcap -F pcap)")
    nano = magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    header = data[:24]
    linktype = struct.unpack(endian + "I", data[20:24])[0] & 0x0FFFFFFF
    if linktype not in LINK_HEADER:
        sys.exit(f"{path}: link type {linktype} not supported by this generator")
    records = []
    off = 24
    while off + 16 <= len(data):
        sec, frac, caplen, origlen = struct.unpack(endian + "IIII", data[off : off + 16])
        ts = sec * 1_000_000_000 + frac * (1 if nano else 1000)
        records.append((ts, bytearray(data[off + 16 : off + 16 + caplen]), origlen))
        off += 16 + caplen
    return header, endian, nano, linktype, records


def port_offsets(record: bytes, linktype: int):
    """Offsets of the TCP source and destination ports and of the IPv4 source and destination
    addresses, or None for non-IPv4-TCP packets."""
    ip = LINK_HEADER[linktype]
    if linktype == 1 and record[12:14] == b"\x81\x00":
        ip += 4
    if len(record) < ip + 20 or record[ip] >> 4 != 4 or record[ip + 9] != 6:
        return None
    tcp = ip + (record[ip] & 0x0F) * 4
    return tcp, tcp + 2, ip + 12, ip + 16


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", type=Path)
    ap.add_argument("output", type=Path)
    ap.add_argument("--packets", type=int, default=1_000_000, help="at least this many packets")
    ap.add_argument("--broker-port", type=int, default=5672)
    ap.add_argument("--overlap", type=int, default=50, help="copies running at the same time")
    args = ap.parse_args()

    header, endian, nano, linktype, records = read_pcap(args.source)
    if not records:
        sys.exit(f"{args.source}: no packets")
    copies = -(-args.packets // len(records))
    duration = records[-1][0] - records[0][0] + 1
    # `overlap` copies share each time slot, so the merged capture has many live connections.
    step = max(duration // args.overlap, 1)
    ports = [port_offsets(r, linktype) for _, r, _ in records]

    # Every client port of the source gets a fresh port in every copy, so each recorded
    # connection becomes `copies` distinct connections.
    client_ports = sorted({p for r, po in zip(records, ports) if po for p in struct.unpack(">HH", r[1][po[0] : po[0] + 4]) if p != args.broker_port})
    free = [p for p in range(2000, 62000) if p not in AMQP_PORTS and p != args.broker_port]
    if copies * len(client_ports) > 256 * len(free):
        sys.exit(f"{copies} copies x {len(client_ports)} connections: more than this generator numbers")

    def client(i: int, port: int) -> tuple[int, int]:
        """Copy `i`'s client port for recorded port `port`, and what its address's second octet gains."""
        n = i * len(client_ports) + client_ports.index(port)
        return free[n % len(free)], n // len(free)

    def copy(i: int):
        shift = i * step
        remap = {p: client(i, p) for p in client_ports}
        for (ts, rec, origlen), po in zip(records, ports):
            out = bytearray(rec)
            if po is not None:
                for port_off, addr_off in ((po[0], po[2]), (po[1], po[3])):
                    port = struct.unpack(">H", out[port_off : port_off + 2])[0]
                    if port != args.broker_port:
                        new_port, net = remap[port]
                        out[port_off : port_off + 2] = struct.pack(">H", new_port)
                        out[addr_off + 1] = (out[addr_off + 1] + net) % 256
            yield ts + shift, i, out, origlen

    total, size = 0, len(header)
    with open(args.output, "wb") as f:
        f.write(header)
        for ts, _, rec, origlen in heapq.merge(*(copy(i) for i in range(copies)), key=lambda r: (r[0], r[1])):
            sec, frac = divmod(ts, 1_000_000_000)
            if not nano:
                frac //= 1000
            f.write(struct.pack(endian + "IIII", sec, frac, len(rec), origlen))
            f.write(rec)
            total += 1
            size += 16 + len(rec)
    # on stderr: the output may be /dev/stdout, piped into `editcap -c` to make a ring
    print(f"{args.output}: {total:,} packets, {size / 1e6:.1f} MB, {copies} copies of {args.source.name}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
