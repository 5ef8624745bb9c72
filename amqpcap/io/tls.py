"""AMQPS: decrypting TLS connections with a key log, through tshark.

amqpcap does not implement TLS. The native core recognises TLS connections on the AMQP ports
(a TLS record where AMQP should start) and skips them. Given the TLS secrets of a capture's
sessions (an NSS key log: what Python's ``SSLContext.keylog_filename``, ``SSLKEYLOGFILE`` in
OpenSSL-based tools, curl and browsers write), Wireshark's dissector decrypts the records: one
tshark run over those connections extracts, for every packet, the application data of the TLS
records it completed. The native core then decodes those streams from this plaintext instead of their TCP payload
(``amqpcap._core.decode(..., decrypted=...)``): frames, connections and anomalies come out of the
same pipeline as for plain AMQP, with the capture's own packet numbers, while the ``packets``
table keeps describing the real, encrypted TCP segments.

Why not a synthetic plaintext capture fed to the unchanged core: its acknowledgement numbers
would have to be translated from ciphertext to plaintext offsets (records and plaintext do not
align), or reassembly would see every ACK as proof of lost bytes; and the ``packets`` table
would describe invented segments.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field

from ..model.display_filters import stream_filter
from ..model.errors import UsageError
from .tshark_packets import tshark_messages, tshark_path

#: Where tshark puts the plaintext: ``-d tls.port==P,data`` hands a port's decrypted application
#: data to the "data" dissector, whose ``data.data`` field is the raw bytes (one occurrence per
#: record). Without it Wireshark's AMQP dissector would take it on 5671.
_FIELDS = ["frame.number", "tcp.stream", "frame.protocols", "data.data"]


@dataclass
class Decryption:
    """What tshark decrypted: the ``decrypted`` argument of ``_core.decode``, and notes."""

    streams: list[int] = field(default_factory=list)
    packets: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    data: bytes = b""
    warnings: list[str] = field(default_factory=list)

    def core_argument(self) -> tuple[list[int], list[int], list[int], bytes]:
        return (self.streams, self.packets, self.ends, self.data)


def tshark_command(path: str, keylog: str, streams: list[int], ports: list[int]) -> list[str]:
    cmd = [tshark_path("decrypting TLS"), "-r", path, "-n", "-o", f"tls.keylog_file:{keylog}",
           # TLS records spanning several TCP segments are reassembled (both are defaults; set
           # here so a user profile cannot turn them off)
           "-o", "tcp.desegment_tcp_streams:TRUE", "-o", "tls.desegment_ssl_records:TRUE"]
    for p in sorted(set(ports)):
        # the broker ports of the TLS connections (Wireshark knows only 5671 as AMQPS)
        cmd += ["-d", f"tcp.port=={p},tls", "-d", f"tls.port=={p},data"]
    cmd += ["-Y", f"({stream_filter(streams, limit=None)}) && data.data",
            "-T", "fields", "-E", "occurrence=a", "-E", "separator=/t"]
    for f in _FIELDS:
        cmd += ["-e", f]
    return cmd


def check_keylog(keylog: str | os.PathLike[str]) -> str:
    """The key log's path, or a UsageError when it cannot be read."""
    keylog = os.fspath(keylog)
    try:
        with open(keylog, "rb") as fh:
            fh.read(1)
    except OSError as e:
        raise UsageError(f"cannot read TLS key log {keylog}: {e.strerror or e}") from None
    return keylog


def decrypt(path: str, keylog: str | os.PathLike[str], streams: list[int], ports: list[int]) -> Decryption:
    """Run tshark once over ``path`` with the key log and collect the plaintext of the TLS
    connections ``streams`` (tcp.stream numbers), whose broker ports are ``ports``."""
    keylog = check_keylog(keylog)
    cmd = tshark_command(path, keylog, streams, ports)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    out = Decryption()
    if proc.returncode != 0:
        # e.g. a capture cut mid-record: tshark still printed what it decoded; the core reports
        # the file's own problems
        msg = next(iter(tshark_messages(proc.stderr)), "")
        out.warnings.append(f"tshark exited with status {proc.returncode} while decrypting TLS: {msg}")
    streams: set[int] = set()
    chunks: list[bytes] = []
    end = 0
    # One line per packet that completed TLS records (a few per message at most): small next
    # to the capture, so a plain loop; the bytes cross into the core as one buffer.
    for line in proc.stdout.splitlines():
        cols = line.split("\t")
        # only data the TLS dissector produced (payload no dissector took is "tcp:data")
        if len(cols) < 4 or not cols[3] or ":tcp:tls:" not in cols[2] + ":":
            continue
        plain = bytes.fromhex(cols[3].replace(",", ""))
        if not plain:
            continue
        streams.add(int(cols[1]))
        out.packets.append(int(cols[0]))
        end += len(plain)
        out.ends.append(end)
        chunks.append(plain)
    out.streams = sorted(streams)
    out.data = b"".join(chunks)
    return out
