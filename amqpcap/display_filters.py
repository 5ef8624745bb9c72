"""Wireshark display filters naming connections: spelled once, here, for the findings, the
warnings and the TLS decryption's tshark run. Wireshark 4 wants a set's members separated by
commas: ``tcp.stream in {0 1}``, accepted before 4.0, is a syntax error since."""

from __future__ import annotations

#: streams a finding's display filter names at most: a finding over thousands of connections of a
#: production capture would otherwise carry a filter of thousands of numbers (evidence.streams
#: still lists them all)
MAX_FILTER_STREAMS = 100


def stream_filter(streams, limit: int | None = MAX_FILTER_STREAMS) -> str:
    """Wireshark display filter for tcp.stream numbers: the first `limit` of them (all: None) in
    the order given (a finding's subjects come worst first), in increasing order."""
    streams = sorted(list(dict.fromkeys(int(s) for s in streams))[:limit])
    if not streams:
        return ""
    if len(streams) == 1:
        return f"tcp.stream eq {streams[0]}"
    return "tcp.stream in {" + ", ".join(map(str, streams)) + "}"
