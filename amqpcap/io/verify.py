"""`amqpcap verify`: decode a capture with Wireshark's AMQP dissector (through pyshark) and
compare, stream by stream, its method counts and frame types with amqpcap's.

Every difference is either explained by a known limit of Wireshark's dissector (found from
amqpcap's own tables: a capture gap in the stream, a frame over 1 MiB, a stream without its
protocol header, duplicated packets, malformed input) or reported as unexplained. Each
difference carries a Wireshark display filter that opens the packets concerned.

pyshark runs one tshark process and parses its JSON per packet in Python, which is slow; to keep
it reasonable only packets with AMQP are output (display filter ``amqp``), only the frame, tcp
and amqp layers and their top-level fields (``-j "frame tcp amqp"``: method arguments and
content properties are left out), no raw bytes, and no packets kept in memory.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from .load import DEFAULT_PORTS, Capture, load
from ..model.errors import ToolError

#: AMQP frame type octets (0-9-1 §2.3.5; RabbitMQ's heartbeat is 8) and amqpcap's names.
FRAME_TYPES = {"1": "method", "2": "header", "3": "body", "8": "heartbeat"}
TYPE_IDS = {v: k for k, v in FRAME_TYPES.items()}
#: An AMQP 1.0 connection's frames are compared by their number (amqpcap counts them,
#: connections.frames; Wireshark's have a data offset, amqp.doff): their type octets (0 AMQP,
#: 1 SASL) are not 0-9-1's.
AMQP10_ITEM = "AMQP 1.0 frames"
#: Frames above this size confuse Wireshark's dissector: with tshark 4.0.17 a 900 kB body frame
#: is decoded right, while after a 1.1 MB one the frame's own content is decoded again as
#: thousands of "type 0" frames (tests/io/test_verify.py crafts it).
WIRESHARK_PDU_LIMIT = 1 << 20

#: The known limits of Wireshark's dissector, by id: (title, explanation).
KNOWN_LIMITS: dict[str, tuple[str, str]] = {
    "capture-gap": (
        "garbage after a capture gap",
        "bytes of this stream are missing from the capture. Wireshark resumes at the next "
        "captured segment and decodes whatever it starts with, so frames cut by the hole are "
        "lost or mid-frame bytes are decoded as frames; amqpcap resynchronises on the next "
        "valid frame and reports the hole (capture-gap anomaly)."),
    "large-frame": (
        "frame over 1 MiB",
        "a frame in this stream is over 1 MiB; Wireshark's reassembly of such a PDU goes wrong "
        "and it decodes the frame's content as further frames (often type 0). "
        "amqpcap decodes bodies without buffering them, whatever their size."),
    "mid-connection": (
        "capture starts mid-connection",
        "the AMQP protocol header is not in the capture; Wireshark may not recognise the "
        "stream as AMQP, or starts decoding inside a frame, while amqpcap searches for the "
        "first valid frame."),
    "duplicates": (
        "duplicated or retransmitted segments",
        "the stream holds segments seen twice (a pcapng with several interfaces holding each "
        "packet once per interface, or TCP retransmissions); Wireshark does not dissect a "
        "retransmitted segment's AMQP and which copy it keeps depends on file order."),
    "malformed": (
        "malformed AMQP",
        "amqpcap found malformed frames in this stream (see its anomalies); after bad bytes "
        "the two decoders recover differently: amqpcap resynchronises on the next valid frame, "
        "Wireshark decodes on from the frame length it read."),
    "tls": (
        "TLS",
        "the stream is TLS; Wireshark shows its AMQP only when given the key log "
        "(--tls-keylog), as amqpcap."),
}


@dataclass
class Difference:
    stream: int
    #: "basic.ack" (method frames of that method) or "type body" (frames of that type)
    item: str
    amqpcap: int
    wireshark: int
    #: a KNOWN_LIMITS id, or None when unexplained
    cause: str | None
    filter: str

    @property
    def explained(self) -> bool:
        return self.cause is not None

    def to_json(self) -> dict[str, Any]:
        return {"stream": self.stream, "item": self.item, "amqpcap": self.amqpcap, "wireshark": self.wireshark,
                "cause": self.cause, "explanation": KNOWN_LIMITS[self.cause][1] if self.cause else None,
                "filter": self.filter}


@dataclass
class StreamComparison:
    stream: int
    #: counts by item ("basic.ack", "type method", ...) for each side
    amqpcap: Counter
    wireshark: Counter
    differences: list[Difference] = field(default_factory=list)
    filter: str = ""


@dataclass
class Verification:
    path: str
    streams: list[StreamComparison]
    #: AMQP packets pyshark delivered, and how long the Wireshark side took
    wireshark_packets: int = 0
    wireshark_s: float = 0.0
    amqpcap_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def differences(self) -> list[Difference]:
        return [d for s in self.streams for d in s.differences]

    @property
    def unexplained(self) -> list[Difference]:
        return [d for d in self.differences if not d.explained]

    @property
    def exit_code(self) -> int:
        """0: they agree, or differ only in explained ways; 1: an unexplained difference."""
        return 1 if self.unexplained else 0


# --- Wireshark's side (pyshark) ----------------------------------------------------------------

def _wireshark_items(path: str, plain_ports: list[int], tls_ports: list[int], keylog: str | None) -> tuple[dict[int, Counter], int]:
    try:
        import pyshark
    except ImportError:  # pragma: no cover - a dependency
        raise ToolError("amqpcap verify needs pyshark: pip install pyshark") from None
    decode_as = {f"tcp.port=={p}": "amqp" for p in plain_ports}
    prefs = {"tcp.desegment_tcp_streams": "TRUE"}
    if keylog:
        prefs["tls.keylog_file"] = keylog
        # AMQP inside TLS: Wireshark knows 5671; other TLS ports are declared both ways
        for p in tls_ports:
            if p != 5671:
                decode_as[f"tcp.port=={p}"] = "tls"
                decode_as[f"tls.port=={p}"] = "amqp"
    try:
        cap = pyshark.FileCapture(path, display_filter="amqp", use_json=True, include_raw=False, keep_packets=False,
                                  decode_as=decode_as, override_prefs=prefs, custom_parameters=["-j", "frame tcp amqp"])
    except Exception as e:  # pyshark raises its own TSharkNotFoundException etc.
        raise ToolError(f"amqpcap verify needs tshark (Wireshark's command line): {e}") from None
    per_stream: dict[int, Counter] = {}
    packets = 0
    try:
        for pkt in cap:
            packets += 1
            stream = int(pkt.tcp._all_fields.get("tcp.stream", -1))
            counts = per_stream.setdefault(stream, Counter())
            layer = pkt.amqp
            for frame in [layer, *layer.duplicate_layers]:
                f = frame._all_fields
                if "amqp.doff" in f:
                    counts[AMQP10_ITEM] += 1
                    continue
                t = f.get("amqp.type")
                if t is None:  # the protocol header: shown as AMQP without frame fields
                    continue
                counts["type " + FRAME_TYPES.get(t, t)] += 1
                if t == "1" and "amqp.method.class" in f:
                    counts[f"{f['amqp.method.class']}.{f.get('amqp.method.method', '?')}"] += 1
    except Exception as e:
        if "TShark" in type(e).__name__ or "tshark" in str(e).lower():
            raise ToolError(f"tshark failed on {path}: {e}") from None
        raise
    finally:
        cap.close()
    return per_stream, packets


# --- amqpcap's side ----------------------------------------------------------------------------

def _amqpcap_items(cap: Capture) -> tuple[dict[int, Counter], dict[str, str]]:
    """Counts per stream keyed like Wireshark's ("60.80", "type body"), and id → method name."""
    f = cap.frames
    out: dict[int, Counter] = {}
    types = f.groupby(["stream", "type"], observed=True).size()
    for (s, t), n in types.items():
        out.setdefault(int(s), Counter())["type " + str(t)] += int(n)
    m = f[f["type"] == "method"]
    ids = m.groupby(["stream", "class_id", "method_id"], observed=True).size()
    for (s, c, i), n in ids.items():
        out.setdefault(int(s), Counter())[f"{int(c)}.{int(i)}"] += int(n)
    c = cap.connections
    for s, n in zip(c.loc[c["protocol"] == "1.0", "stream"], c.loc[c["protocol"] == "1.0", "frames"]):
        out.setdefault(int(s), Counter())[AMQP10_ITEM] += int(n)
    names = m.drop_duplicates(["class_id", "method_id"])
    names = {f"{int(c)}.{int(i)}": str(n) for c, i, n in zip(names["class_id"], names["method_id"], names["method"]) if not pd.isna(n)}
    return out, names


def _cause(cap: Capture, stream: int) -> str | None:
    """The known Wireshark limit that explains a difference in ``stream``, if any."""
    a = cap.anomalies
    kinds = set(a.loc[a["stream"] == stream, "kind"].astype(str)) if len(a) else set()
    conn = cap.connections[cap.connections["stream"] == stream]
    if not len(conn):
        return None
    row = conn.iloc[0]
    if kinds & {"capture-gap", "truncated-packet", "reassembly-overflow"}:
        return "capture-gap"
    f = cap.frames
    if ((f["stream"] == stream) & (f["size_bytes"] > WIRESHARK_PDU_LIMIT)).any():
        return "large-frame"
    if bool(row["tls"]):
        return "tls"
    p = cap.packets
    if ((p["stream"] == stream) & p["retransmission"]).any():
        return "duplicates"
    if not bool(row["protocol_header_seen"]):
        return "mid-connection"
    if kinds & {"bad-frame-end", "unknown-frame-type", "oversized-frame", "unknown-method", "malformed-method",
                "malformed-header", "resync-skipped", "incomplete-frame", "protocol-header"}:
        return "malformed"
    return None


def _item_filter(stream: int, item: str) -> str:
    if item == AMQP10_ITEM:
        return f"tcp.stream eq {stream} && amqp.doff"
    if item.startswith("type "):
        t = item[5:]
        return f"tcp.stream eq {stream} && amqp.type == {TYPE_IDS.get(t, t)}"
    c, _, m = item.partition(".")
    return f"tcp.stream eq {stream} && amqp.method.class == {c} && amqp.method.method == {m}"


def verify(path: str | os.PathLike[str], ports=None, tls_keylog: str | os.PathLike[str] | None = None) -> Verification:
    """Compare amqpcap's and Wireshark's per-stream method counts and frame types."""
    path = os.fspath(path)
    t0 = time.perf_counter()
    cap = load(path, ports=ports if ports else DEFAULT_PORTS, tls_keylog=tls_keylog)
    t1 = time.perf_counter()
    tls = cap.connections[cap.connections["tls"]] if len(cap.connections) else cap.connections
    tls_ports = sorted({int(p) for p in tls["broker_port"]}) if len(tls) else []
    plain_ports = [p for p in cap.ports if p not in tls_ports and p != 5671]
    theirs, packets = _wireshark_items(path, plain_ports, tls_ports, os.fspath(tls_keylog) if tls_keylog else None)
    t2 = time.perf_counter()
    ours, names = _amqpcap_items(cap)
    streams = []
    known = {int(x) for x in cap.connections["stream"]}
    for s in sorted(set(ours) | set(theirs) | known):
        a, w = ours.get(s, Counter()), theirs.get(s, Counter())
        comp = StreamComparison(stream=s, amqpcap=a, wireshark=w, filter=f"tcp.stream eq {s} && amqp")
        diff_items = sorted(k for k in set(a) | set(w) if a[k] != w[k])
        if diff_items:
            cause = _cause(cap, s)
            comp.differences = [Difference(s, names.get(k, k), a[k], w[k], cause, _item_filter(s, k)) for k in diff_items]
        streams.append(comp)
    v = Verification(path=path, streams=streams, wireshark_packets=packets, wireshark_s=t2 - t1, amqpcap_s=t1 - t0)
    v.notes = list(cap.warnings)
    # readable item names in the comparison (ids kept for Wireshark-only methods)
    for comp in streams:
        comp.amqpcap = Counter({names.get(k, k): n for k, n in comp.amqpcap.items()})
        comp.wireshark = Counter({names.get(k, k): n for k, n in comp.wireshark.items()})
    return v


# --- output ------------------------------------------------------------------------------------

def render(console, v: Verification) -> None:
    from rich.table import Table

    agree = sum(1 for s in v.streams if not s.differences)
    console.print(f"[bold]{v.path}[/bold]: {len(v.streams)} AMQP streams, {agree} agree with Wireshark, "
                  f"{len(v.streams) - agree} differ ({len(v.unexplained)} unexplained differences); "
                  f"Wireshark (pyshark) {v.wireshark_s:.1f} s for {v.wireshark_packets:,} AMQP packets, "
                  f"amqpcap {v.amqpcap_s:.2f} s", highlight=False)
    for s in v.streams:
        t = Table(title=f"stream {s.stream}   [dim]{s.filter}[/dim]", title_justify="left")
        t.add_column("method / frame type")
        t.add_column("amqpcap", justify="right")
        t.add_column("Wireshark", justify="right")
        t.add_column("")
        diffs = {d.item: d for d in s.differences}
        keys = sorted(set(s.amqpcap) | set(s.wireshark), key=lambda k: (not k.startswith("type "), k))
        for k in keys:
            d = diffs.get(k)
            mark = "" if d is None else ("[yellow]differs (explained)[/yellow]" if d.explained else "[bold red]DIFFERS[/bold red]")
            style = None if d is None else ("yellow" if d.explained else "bold red")
            t.add_row(k, f"{s.amqpcap[k]:,}", f"{s.wireshark[k]:,}", mark, style=style)
        console.print(t)
        causes = {d.cause for d in s.differences}
        for c in sorted(causes, key=str):
            if c is None:
                console.print("  [bold red]unexplained[/bold red]: no known Wireshark limit applies to this stream; "
                              "open it in Wireshark:", highlight=False)
            else:
                title, text = KNOWN_LIMITS[c]
                console.print(f"  [yellow]known Wireshark limit: {title}[/yellow]: {text}", highlight=False)
        for d in s.differences:
            console.print(f"    {d.item}: amqpcap {d.amqpcap}, Wireshark {d.wireshark} — filter: {d.filter}", highlight=False)
    for n in v.notes:
        console.print(f"[yellow]note:[/yellow] {n}", highlight=False)
    if v.exit_code:
        console.print(f"[bold red]{len(v.unexplained)} unexplained differences[/bold red]")
    else:
        console.print("[green]amqpcap and Wireshark agree[/green]" + (" (differences explained above)" if v.differences else ""))
