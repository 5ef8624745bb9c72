"""Wireshark display filters naming connections: spelled once, here, for the findings, the
warnings and the TLS decryption's tshark run. Wireshark 4 wants a set's members separated by
commas: ``tcp.stream in {0 1}``, accepted before 4.0, is a syntax error since."""

from __future__ import annotations

from typing import NamedTuple

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


#: packets a finding's display filter names at most (`frame.number in {...}`)
MAX_FILTER_PACKETS = 100


class FilterPart(NamedTuple):
    """Part of a finding's display filter that names members (connections, connection
    directions, packets): its text, and how many of how many it names (`filter_evidence`)."""

    text: str
    named: int
    total: int
    #: what a member is: `COVERED` key
    unit: str


#: per unit of a `FilterPart`: (the evidence key stem: `filter_<stem>`, `<stem>_total`; the noun)
COVERED = {"streams": ("streams", "connections"), "directions": ("directions", "connection directions"),
           "packets": ("packets", "packets")}


def streams_part(streams, limit: int | None = MAX_FILTER_STREAMS, then: str = "") -> FilterPart:
    """`stream_filter` of ``streams`` (each counted once, worst first) followed by ``then`` (a
    channel clause), with how many of them it names."""
    total = len(dict.fromkeys(int(s) for s in streams))
    return FilterPart(stream_filter(streams, limit) + then, total if limit is None else min(total, limit), total,
                      "streams")


def packets_part(packets, limit: int = MAX_FILTER_PACKETS) -> FilterPart:
    """`frame.number in {...}` for the first ``limit`` of ``packets`` (in the order given, each once),
    with how many of them it names."""
    packets = list(dict.fromkeys(int(p) for p in packets))
    # Comma-separated: Wireshark >= 4.0 rejects whitespace-separated set members.
    return FilterPart("frame.number in {" + ", ".join(map(str, sorted(packets[:limit]))) + "}",
                      min(len(packets), limit), len(packets), "packets")


def filter_evidence(part: FilterPart, then: str = "") -> dict:
    """A finding's filter evidence for one part followed by ``then`` (`covered_filter`)."""
    return covered_filter(part.text + then, part)


def covered_filter(flt: str, *parts: FilterPart) -> dict:
    """A finding's filter evidence, the one way every finding writes it: ``filter`` (the text
    ``flt``, made of ``parts``), and when a part names fewer members than there are (a filter
    of thousands of connections would not paste), what it covers: ``filter_covers`` (`first 100
    of 1,502 connections`), ``filter_<unit>`` and ``<unit>_total`` (`COVERED`). The finding's
    ``streams`` still lists every connection."""
    out: dict = {"filter": flt}
    cut = [p for p in parts if p.named < p.total]
    if cut:
        out["filter_covers"] = "; ".join(f"first {p.named:,} of {p.total:,} {COVERED[p.unit][1]}" for p in cut)
        for p in cut:
            stem = COVERED[p.unit][0]
            out[f"filter_{stem}"], out[f"{stem}_total"] = p.named, p.total
    return out
