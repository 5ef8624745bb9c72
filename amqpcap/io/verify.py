"""`amqpcap verify`: decode a capture with Wireshark's AMQP dissector (tshark) and
compare, stream by stream, its method counts and frame types with amqpcap's, and for an AMQP 1.0
stream, per direction, the performatives and the fields of them listed in `Amqp10Frame`.

Every difference is either explained by a known limit of Wireshark's dissector (found from
amqpcap's own tables: a capture gap in the stream, a frame over 1 MiB, a stream without its
protocol header, duplicated packets, malformed input) or reported as unexplained. Each
difference carries a Wireshark display filter that opens the packets concerned.

tshark's output is read in Python as it streams (`tshark_packets`), which is slow for a large
capture; to keep it reasonable only packets with AMQP are output (display filter ``amqp``), as
JSON with only the tcp and amqp layers and their top-level fields (``-j "tcp amqp"``: method
arguments and content properties are left out). AMQP 1.0 frames need their arguments: when a
stream speaks it, a second pass reads only the packets with AMQP 1.0 frames (display filter
``amqp.doff``) as PDML (which has the shown names), whole amqp layers (``-J "tcp amqp"``), where
each frame is its own layer with its own fields.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import pandas as pd

from .load import DEFAULT_PORTS, Capture, load
from .tshark_packets import Layer, packets as tshark_packets, tshark_command
from ..model.errors import ToolError

#: AMQP frame type octets (0-9-1 §2.3.5; RabbitMQ's heartbeat is 8) and amqpcap's names.
FRAME_TYPES = {"1": "method", "2": "header", "3": "body", "8": "heartbeat"}
TYPE_IDS = {v: k for k, v in FRAME_TYPES.items()}
#: An AMQP 1.0 connection's frames are counted apart (amqpcap: connections.frames; Wireshark's
#: have a data offset, amqp.doff): their type octets (0 AMQP, 1 SASL) are not 0-9-1's. Their
#: performatives and fields are compared per direction (`amqp10_items`).
AMQP10_ITEM = "AMQP 1.0 frames"
#: AMQP 1.0 performatives by the code Wireshark gives them (amqp.performative, Part 2 §2.7; SASL
#: frames' amqp.sasl.method, Part 5 §5.3.3), named as amqpcap's amqp10_frames.performative
AMQP10_PERFORMATIVES = {16: "open", 17: "begin", 18: "attach", 19: "flow", 20: "transfer", 21: "disposition",
                        22: "detach", 23: "end", 24: "close"}
SASL_FRAMES = {64: "sasl-mechanisms", 65: "sasl-init", 66: "sasl-challenge", 67: "sasl-response",
               68: "sasl-outcome"}
#: sasl-outcome codes (Part 5 §5.3.3.6), named as amqp10_frames.sasl_outcome
SASL_OUTCOMES = {0: "ok", 1: "auth", 2: "sys", 3: "sys-perm", 4: "sys-temp"}
#: delivery states Wireshark has a field for (amqp.delivery-state.<name>)
DELIVERY_STATES = ("accepted", "rejected", "released", "modified", "received")
#: a role as Wireshark's boolean amqp.performative.arguments.role shows it (Part 2 §2.8.1)
ROLE_BITS = {"sender": 0, "receiver": 1}
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


@dataclass(frozen=True)
class Amqp10Frame:
    """The fields of one AMQP 1.0 frame that verify compares, as either decoder read them (None
    where the frame has none). There is no field for a sasl-init's initial response or a
    sasl-response (they hold the password): neither side reads them, no output can show them."""
    direction: str                    # "c2s" or "s2c"
    performative: str | None          # amqpcap's name; None: empty frame or no performative
    empty: bool = False               # no body (Part 2 §2.4.5: a heartbeat)
    settled: bool | None = None       # transfer, disposition
    role: str | None = None           # attach, disposition: "sender" / "receiver"
    state: str | None = None          # disposition: its delivery state (outcome)
    link_credit: int | None = None    # flow
    idle_timeout_ms: int | None = None  # open
    container_id: str | None = None   # open
    name: str | None = None           # attach: the link name
    mechanisms: str | None = None     # sasl-mechanisms: the offered names, space-separated
    mechanism: str | None = None      # sasl-init: the chosen one
    sasl_outcome: str | None = None   # sasl-outcome: its code's name ("ok", "auth", ...)


def _quoted(text: str) -> str:
    """A display filter string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def amqp10_items(f: Amqp10Frame) -> list[tuple[str, str]]:
    """The comparison rows one AMQP 1.0 frame counts in, as (item, display filter of the
    frame's fields). The item is prefixed with the frame's direction; the same function serves
    both decoders, so a row means the same on either side."""
    perf = f.performative
    a = "amqp.performative.arguments."
    out = [("frames", "amqp.doff")]
    if f.empty:
        out.append(("empty frame", "amqp.doff && amqp.length == 8"))
    if perf is None:
        return [(f"{f.direction} {item}", flt) for item, flt in out]
    code = {v: k for k, v in AMQP10_PERFORMATIVES.items()}.get(perf)
    sasl = {v: k for k, v in SASL_FRAMES.items()}.get(perf)
    this = f"amqp.performative == {code}" if code is not None else f"amqp.sasl.method == {sasl}"
    out.append((perf, this))
    role = f" && {a}role == {ROLE_BITS[f.role]}" if f.role in ROLE_BITS else ""
    if perf == "transfer" and f.settled:
        out.append(("transfer settled=true", f"{this} && {a}settled == 1"))
    elif perf == "disposition":
        state = f" && amqp.delivery-state.{f.state}" if f.state in DELIVERY_STATES else ""
        out.append((f"disposition role={f.role or 'none'} outcome={f.state or 'none'}", this + role + state))
    elif perf == "flow":
        credit = f"{a}linkCredit == {f.link_credit}" if f.link_credit is not None else f"!{a}linkCredit"
        out.append((f"flow link-credit={'none' if f.link_credit is None else f.link_credit}", f"{this} && {credit}"))
    elif perf == "open":
        idle = f"{a}idleTimeout == {f.idle_timeout_ms}" if f.idle_timeout_ms is not None else f"!{a}idleTimeout"
        ms = "none" if f.idle_timeout_ms is None else f"{f.idle_timeout_ms} ms"
        out.append((f"open idle-time-out={ms}", f"{this} && {idle}"))
        cid = f"{a}containerId == {_quoted(f.container_id)}" if f.container_id is not None else f"!{a}containerId"
        out.append((f"open container-id={f.container_id if f.container_id is not None else 'none'}", f"{this} && {cid}"))
    elif perf == "attach":
        name = f" && {a}name == {_quoted(f.name)}" if f.name is not None else ""
        out.append((f"attach role={f.role or 'none'} name={f.name if f.name is not None else 'none'}", this + role + name))
    elif perf == "sasl-mechanisms":
        out.append((f"sasl-mechanisms offered={f.mechanisms or 'none'}", this))
    elif perf == "sasl-init":
        mech = f" && amqp.sasl.mechanism == {_quoted(f.mechanism)}" if f.mechanism is not None else ""
        out.append((f"sasl-init mechanism={f.mechanism or 'none'}", this + mech))
    elif perf == "sasl-outcome":
        code_of = {v: k for k, v in SASL_OUTCOMES.items()}
        num = f" && amqp.sasl.saslCode == {code_of[f.sasl_outcome]}" if f.sasl_outcome in code_of else ""
        out.append((f"sasl-outcome code={f.sasl_outcome or 'none'}", this + num))
    return [(f"{f.direction} {item}", flt) for item, flt in out]


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
    #: AMQP packets tshark printed, and how long the Wireshark side took
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


# --- Wireshark's side (tshark) -----------------------------------------------------------------

def _tshark(path: str, plain_ports: list[int], tls_ports: list[int], keylog: str | None, *,
            output: Literal["json", "pdml"], display_filter: str, protocols: str, whole_layers: bool) -> Iterator[list[Layer]]:
    """Wireshark's packets of ``path`` (`tshark_packets.packets`), the AMQP ports decoded as AMQP
    (and TLS)."""
    decode_as = {f"tcp.port=={p}": "amqp" for p in plain_ports}
    # AMQP frames split over TCP segments are reassembled (the default; set so a user profile
    # cannot turn it off)
    prefs = {"tcp.desegment_tcp_streams": "TRUE"}
    if keylog:
        prefs["tls.keylog_file"] = keylog
        # AMQP inside TLS: Wireshark knows 5671; other TLS ports are declared both ways
        for p in tls_ports:
            if p != 5671:
                decode_as[f"tcp.port=={p}"] = "tls"
                decode_as[f"tls.port=={p}"] = "amqp"
    cmd = tshark_command(path, output=output, display_filter=display_filter, protocols=protocols,
                         whole_layers=whole_layers, decode_as=decode_as, prefs=prefs)
    return tshark_packets(cmd, path)


def _wireshark_items(path: str, plain_ports: list[int], tls_ports: list[int], keylog: str | None) -> tuple[dict[int, Counter], int]:
    # JSON, only the tcp and amqp layers' top-level fields (-j): method arguments and content
    # properties are left out
    per_stream: dict[int, Counter] = {}
    packets = 0
    for pkt in _tshark(path, plain_ports, tls_ports, keylog, output="json", display_filter="amqp",
                       protocols="tcp amqp", whole_layers=False):
        packets += 1
        tcp = next(l for l in pkt if l.name == "tcp")
        counts = per_stream.setdefault(int(tcp.show("tcp.stream") or -1), Counter())
        for frame in (l for l in pkt if l.name == "amqp"):
            if frame.show("amqp.doff") is not None:
                counts[AMQP10_ITEM] += 1
                continue
            t = frame.show("amqp.type")
            if t is None:  # the protocol header: shown as AMQP without frame fields
                continue
            counts["type " + FRAME_TYPES.get(t, t)] += 1
            cls = frame.show("amqp.method.class")
            if t == "1" and cls is not None:
                counts[f"{cls}.{frame.show('amqp.method.method') or '?'}"] += 1
    return per_stream, packets


def _wireshark_amqp10_frame(layer: Layer, direction: str) -> Amqp10Frame | None:
    """One AMQP 1.0 frame of Wireshark's (a PDML amqp layer), None for a protocol header or an
    AMQP 0-9-1 frame. Reads only the fields Amqp10Frame has: never amqp.sasl.initResponse nor
    amqp.sasl.response."""
    if layer.show("amqp.doff") is None:
        return None
    a = "amqp.performative.arguments."
    perf, sasl = layer.show("amqp.performative"), layer.show("amqp.sasl.method")
    if perf is None and sasl is None:
        return Amqp10Frame(direction, None, empty=layer.show("amqp.length") == "8")
    name = AMQP10_PERFORMATIVES.get(int(perf)) if perf is not None else SASL_FRAMES.get(int(sasl))
    if name is None:
        return Amqp10Frame(direction, None)

    def num(field: str) -> int | None:
        v = layer.show(a + field)
        return None if v is None else int(v)

    def flag(field: str) -> bool | None:
        v = layer.show(a + field)
        return None if v is None else v in ("1", "True", "true")

    role = flag("role")
    fields: dict[str, Any] = {}
    if name in ("transfer", "disposition"):
        fields["settled"] = flag("settled")
    if name in ("attach", "disposition"):
        fields["role"] = None if role is None else ("receiver" if role else "sender")
    if name == "disposition":
        fields["state"] = next((s for s in DELIVERY_STATES if layer.show("amqp.delivery-state." + s) is not None), None)
    elif name == "flow":
        fields["link_credit"] = num("linkCredit")
    elif name == "open":
        fields["idle_timeout_ms"] = num("idleTimeout")
        fields["container_id"] = layer.show(a + "containerId")
    elif name == "attach":
        fields["name"] = layer.show(a + "name")
    elif name == "sasl-mechanisms":
        # the offered symbols are in the shown names only ("Mechanisms (sym32): PLAIN"), one
        # amqp.list each for an array, amqp.sasl.mechanisms_sym for a single symbol
        items = layer.all("amqp.list") or layer.all("amqp.sasl.mechanisms_sym")
        fields["mechanisms"] = " ".join(x.shown_value for x in items) or None
    elif name == "sasl-init":
        fields["mechanism"] = layer.show("amqp.sasl.mechanism")
    elif name == "sasl-outcome":
        code = layer.show("amqp.sasl.saslCode")
        fields["sasl_outcome"] = None if code is None else SASL_OUTCOMES.get(int(code), code)
    return Amqp10Frame(direction, name, **fields)


def _wireshark_amqp10(path: str, plain_ports: list[int], tls_ports: list[int], keylog: str | None,
                      broker_ports: dict[int, int]) -> dict[int, list[Amqp10Frame]]:
    """Wireshark's AMQP 1.0 frames per stream, each with its direction: towards the broker port
    amqpcap found for the stream (else any of the AMQP ports)."""
    ports = set(plain_ports) | set(tls_ports)
    out: dict[int, list[Amqp10Frame]] = {}
    # PDML: the sasl-mechanisms offered are in shown names only
    for pkt in _tshark(path, plain_ports, tls_ports, keylog, output="pdml", display_filter="amqp.doff",
                       protocols="tcp amqp", whole_layers=True):
        tcp = next(l for l in pkt if l.name == "tcp")
        stream, src = int(tcp.show("tcp.stream")), int(tcp.show("tcp.srcport"))
        direction = "s2c" if src == broker_ports.get(stream, src if src in ports else -1) else "c2s"
        for layer in pkt:
            if layer.name == "amqp":
                f = _wireshark_amqp10_frame(layer, direction)
                if f is not None:
                    out.setdefault(stream, []).append(f)
    return out


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


def _na(v):
    return None if v is None or pd.isna(v) else v


def amqpcap_amqp10_frames(cap: Capture) -> dict[int, list[Amqp10Frame]]:
    """amqpcap's AMQP 1.0 frames per stream, from its `amqp10_frames` table (which keeps no
    initial response either)."""
    t = cap.amqp10_frames
    out: dict[int, list[Amqp10Frame]] = {}
    cols = ["stream", "direction", "type", "performative", "settled", "role", "state", "link_credit",
            "idle_timeout_ms", "container_id", "name", "mechanisms", "mechanism", "sasl_outcome"]
    for (s, d, typ, perf, settled, role, state, credit, idle, cid, name, mechs, mech, outcome) in \
            zip(*(t[c].astype(object) for c in cols)):
        perf = _na(perf)
        kept = {"settled": _na(settled) if perf in ("transfer", "disposition") else None,
                "role": _na(role), "state": _na(state) if perf == "disposition" else None,
                "link_credit": None if _na(credit) is None else int(credit),
                "idle_timeout_ms": None if _na(idle) is None else int(idle),
                "container_id": _na(cid), "name": _na(name), "mechanisms": _na(mechs),
                "mechanism": _na(mech), "sasl_outcome": _na(outcome)}
        out.setdefault(int(s), []).append(Amqp10Frame(str(d), None if perf is None else str(perf),
                                                      empty=str(typ) == "empty", **kept))
    return out


def _amqp10_counts(frames: dict[int, list[Amqp10Frame]], counts: dict[int, Counter],
                   filters: dict[tuple[int, str], str], broker_ports: dict[int, int]) -> None:
    """Add the AMQP 1.0 rows of ``frames`` to ``counts`` per stream, and each row's display filter."""
    for s, fs in frames.items():
        c = counts.setdefault(s, Counter())
        port = broker_ports.get(s)
        for f in fs:
            for item, flt in amqp10_items(f):
                c[item] += 1
                if (s, item) not in filters:
                    side = "" if port is None else f" && tcp.{'dst' if f.direction == 'c2s' else 'src'}port == {port}"
                    filters[(s, item)] = f"tcp.stream eq {s}{side} && {flt}"


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
    keylog = os.fspath(tls_keylog) if tls_keylog else None
    theirs, packets = _wireshark_items(path, plain_ports, tls_ports, keylog)
    wireshark_s = time.perf_counter() - t1
    ours, names = _amqpcap_items(cap)
    # AMQP 1.0 streams (either side's): their frames field by field, per direction
    broker_ports = {int(s): int(p) for s, p in zip(cap.connections["stream"], cap.connections["broker_port"])}
    filters: dict[tuple[int, str], str] = {}
    if any(c[AMQP10_ITEM] for c in [*theirs.values(), *ours.values()]):
        t2 = time.perf_counter()
        _amqp10_counts(_wireshark_amqp10(path, plain_ports, tls_ports, keylog, broker_ports), theirs, filters, broker_ports)
        wireshark_s += time.perf_counter() - t2
        _amqp10_counts(amqpcap_amqp10_frames(cap), ours, filters, broker_ports)
    streams = []
    known = {int(x) for x in cap.connections["stream"]}
    for s in sorted(set(ours) | set(theirs) | known):
        a, w = ours.get(s, Counter()), theirs.get(s, Counter())
        comp = StreamComparison(stream=s, amqpcap=a, wireshark=w, filter=f"tcp.stream eq {s} && amqp")
        diff_items = sorted(k for k in set(a) | set(w) if a[k] != w[k])
        if diff_items:
            cause = _cause(cap, s)
            comp.differences = [Difference(s, names.get(k, k), a[k], w[k], cause, filters.get((s, k)) or _item_filter(s, k))
                                for k in diff_items]
        streams.append(comp)
    v = Verification(path=path, streams=streams, wireshark_packets=packets, wireshark_s=wireshark_s, amqpcap_s=t1 - t0)
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
                  f"Wireshark (tshark) {v.wireshark_s:.1f} s for {v.wireshark_packets:,} AMQP packets, "
                  f"amqpcap {v.amqpcap_s:.2f} s", highlight=False)
    for s in v.streams:
        t = Table(title=f"stream {s.stream}   [dim]{s.filter}[/dim]", title_justify="left")
        t.add_column("method / frame type / AMQP 1.0 frames")
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
