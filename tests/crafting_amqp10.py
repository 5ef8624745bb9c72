"""Helpers to craft AMQP 1.0 conversations as bytes and write them as TCP captures.

The AMQP 1.0 twin of crafting.py (which crafts 0-9-1): the TCP conversation, the IP packets and
the capture file are crafting.py's (`TcpConversation`, `write_pcap`), called, never copied.

Three layers:

1. Type encoders (OASIS AMQP 1.0 Part 1 §1.6): each returns :class:`Encoded`, the exact bytes of
   one value. A plain Python value is encoded by the field that takes it (`uint` picks uint0,
   smalluint or uint by size, as encoders on the wire do); an :class:`Encoded` value is written
   as given, so a test can force any of the encodings (``uint(5, wide=True)`` is 0x70).
2. Performatives and sections by field name in the spec's order (Part 2 §2.7, Part 3 §3.2, §3.4,
   §3.5, Part 5 §5.3.3): each builder returns a described list (:class:`Encoded`) whose ``expect``
   holds the columns of `amqp10_frames` (docs/tables.md) the fields given must produce, so the
   expectations come from what the test encoded, never from amqpcap itself.
3. :func:`frame` (Part 2 §2.3: size, doff 2, type 0 AMQP / 1 SASL, channel) and the protocol
   headers (§2.2 "AMQP" 0 1 0 0, Part 5 §5.3.1 "AMQP" 3 1 0 0); :class:`Conversation` sends them
   on a crafting.TcpConversation at times the test chooses.
"""

from __future__ import annotations

import struct

import crafting

# ---------------------------------------------------------------------------
# 1. Type encoders (Part 1 §1.6)
# ---------------------------------------------------------------------------


class Encoded(bytes):
    """The wire bytes of one AMQP value; ``expect`` the `amqp10_frames` columns it implies."""

    expect: dict

    def __new__(cls, data: bytes, expect: dict | None = None):
        obj = super().__new__(cls, data)
        obj.expect = dict(expect or {})
        return obj


def null() -> Encoded:
    """null 0x40 (§1.6.1)."""
    return Encoded(b"\x40")


def boolean(v: bool, wide: bool = False) -> Encoded:
    """true 0x41 / false 0x42 (§1.6.2, the one-octet forms), or 0x56 with one octet when wide."""
    return Encoded(b"\x56" + bytes([1 if v else 0])) if wide else Encoded(b"\x41" if v else b"\x42")


def ubyte(v: int) -> Encoded:
    """ubyte 0x50 (§1.6.3)."""
    return Encoded(b"\x50" + struct.pack(">B", v))


def ushort(v: int) -> Encoded:
    """ushort 0x60 (§1.6.4)."""
    return Encoded(b"\x60" + struct.pack(">H", v))


def uint(v: int, wide: bool = False) -> Encoded:
    """uint (§1.6.5): uint0 0x43 for 0, smalluint 0x52 below 256, else (or when wide) 0x70."""
    if not wide and v == 0:
        return Encoded(b"\x43")
    if not wide and v < 256:
        return Encoded(b"\x52" + bytes([v]))
    return Encoded(b"\x70" + struct.pack(">I", v))


def ulong(v: int, wide: bool = False) -> Encoded:
    """ulong (§1.6.6): ulong0 0x44 for 0, smallulong 0x53 below 256, else (or when wide) 0x80."""
    if not wide and v == 0:
        return Encoded(b"\x44")
    if not wide and v < 256:
        return Encoded(b"\x53" + bytes([v]))
    return Encoded(b"\x80" + struct.pack(">Q", v))


def int_(v: int) -> Encoded:
    """int (§1.6.9): smallint 0x54 for -128..127, else 0x71."""
    return Encoded(b"\x54" + struct.pack(">b", v)) if -128 <= v < 128 else Encoded(b"\x71" + struct.pack(">i", v))


def long_(v: int) -> Encoded:
    """long (§1.6.10): smalllong 0x55 for -128..127, else 0x81."""
    return Encoded(b"\x55" + struct.pack(">b", v)) if -128 <= v < 128 else Encoded(b"\x81" + struct.pack(">q", v))


def timestamp(ms: int) -> Encoded:
    """timestamp 0x83 (§1.6.17): ms since the Unix epoch, signed 64 bits."""
    return Encoded(b"\x83" + struct.pack(">q", ms))


def _variable(code8: int, code32: int, data: bytes) -> Encoded:
    """The one-octet-size form (codes 0xa_) below 256 octets, else the four-octet one (0xb_) (§1.2)."""
    if len(data) < 256:
        return Encoded(bytes([code8, len(data)]) + data)
    return Encoded(bytes([code32]) + struct.pack(">I", len(data)) + data)


def binary(data: bytes) -> Encoded:
    """binary vbin8 0xa0 / vbin32 0xb0 (§1.6.19)."""
    return _variable(0xA0, 0xB0, bytes(data))


def string(s: str) -> Encoded:
    """string str8-utf8 0xa1 / str32-utf8 0xb1 (§1.6.20)."""
    return _variable(0xA1, 0xB1, s.encode())


def symbol(s: str) -> Encoded:
    """symbol sym8 0xa3 / sym32 0xb3 (§1.6.21), ASCII."""
    return _variable(0xA3, 0xB3, s.encode("ascii"))


def list_(items: list[bytes], wide: bool = False) -> Encoded:
    """list (§1.6.22): list0 0x45 when empty, list8 0xc0 (size and count one octet each), list32
    0xd0 when the body needs it (or wide). The size counts the count's octets and the items."""
    body = b"".join(items)
    if not items and not wide:
        return Encoded(b"\x45")
    if not wide and len(body) + 1 < 256 and len(items) < 256:
        return Encoded(bytes([0xC0, len(body) + 1, len(items)]) + body)
    return Encoded(b"\xd0" + struct.pack(">II", len(body) + 4, len(items)) + body)


def map_(pairs: list[tuple[bytes, bytes]], wide: bool = False) -> Encoded:
    """map (§1.6.23): map8 0xc1 / map32 0xd1; the count is of keys and values together."""
    body = b"".join(k + v for k, v in pairs)
    n = 2 * len(pairs)
    if not wide and len(body) + 1 < 256 and n < 256:
        return Encoded(bytes([0xC1, len(body) + 1, n]) + body)
    return Encoded(b"\xd1" + struct.pack(">II", len(body) + 4, n) + body)


def array(constructor: int, elements: list[bytes], wide: bool = False) -> Encoded:
    """array (§1.6.24, §1.2): array8 0xe0 / array32 0xf0, one constructor for all elements, each
    element its bytes without the constructor (e.g. ``array(0xa3, [b"\\x05PLAIN"])``)."""
    body = bytes([constructor]) + b"".join(elements)
    if not wide and len(body) + 1 < 256 and len(elements) < 256:
        return Encoded(bytes([0xE0, len(body) + 1, len(elements)]) + body)
    return Encoded(b"\xf0" + struct.pack(">II", len(body) + 4, len(elements)) + body)


def symbols(names: list[str]) -> Encoded:
    """A multiple symbol field (Part 1 §1.4 multiple="true"): an array of sym8 (0xa3)."""
    return array(0xA3, [bytes([len(n)]) + n.encode("ascii") for n in names])


def described(code: int, value: bytes, expect: dict | None = None) -> Encoded:
    """A described type (§1.2, §1.5): the 0x00 constructor, the descriptor as a smallulong code,
    then the value."""
    return Encoded(b"\x00" + ulong(code) + value, expect)


def fields_map(d: dict[str, bytes]) -> Encoded:
    """A `fields` map (Part 2 §2.8.14): symbol keys, any values."""
    return map_([(symbol(k), v) for k, v in d.items()])


# ---------------------------------------------------------------------------
# 2. Composite types by field name (spec order)
# ---------------------------------------------------------------------------

ROLES = {"sender": False, "receiver": True}  # Part 2 §2.8.1
SND_SETTLE_MODES = {"unsettled": 0, "settled": 1, "mixed": 2}  # §2.8.2
RCV_SETTLE_MODES = {"first": 0, "second": 1}  # §2.8.3
SASL_CODES = {"ok": 0, "auth": 1, "sys": 2, "sys-perm": 3, "sys-temp": 4}  # Part 5 §5.3.3.6


def _milliseconds(v):
    return uint(v)


def _address(v):
    return string(v)


def _tag(v: bytes):
    return binary(v)


#: the fields of each composite type in spec order: (field, encoder, column it fills or None)
FIELDS = {
    # Part 2 §2.7.1 .. §2.7.9
    "open": [("container_id", string, "container_id"), ("hostname", string, "hostname"),
             ("max_frame_size", uint, "max_frame_size"), ("channel_max", ushort, "channel_max"),
             ("idle_time_out", _milliseconds, "idle_timeout_ms"), ("outgoing_locales", symbols, None),
             ("incoming_locales", symbols, None), ("offered_capabilities", symbols, None),
             ("desired_capabilities", symbols, None), ("properties", fields_map, None)],
    "begin": [("remote_channel", ushort, "remote_channel"), ("next_outgoing_id", uint, "next_outgoing_id"),
              ("incoming_window", uint, "incoming_window"), ("outgoing_window", uint, "outgoing_window"),
              ("handle_max", uint, "handle_max"), ("offered_capabilities", symbols, None),
              ("desired_capabilities", symbols, None), ("properties", fields_map, None)],
    "attach": [("name", string, "name"), ("handle", uint, "handle"), ("role", lambda r: boolean(ROLES[r]), "role"),
               ("snd_settle_mode", lambda m: ubyte(SND_SETTLE_MODES[m]), "snd_settle_mode"),
               ("rcv_settle_mode", lambda m: ubyte(RCV_SETTLE_MODES[m]), "rcv_settle_mode"),
               ("source", lambda a: source(address=a), None), ("target", lambda a: target(address=a), None),
               ("unsettled", map_, None), ("incomplete_unsettled", boolean, None),
               ("initial_delivery_count", uint, "initial_delivery_count"),
               ("max_message_size", ulong, "max_message_size"), ("offered_capabilities", symbols, None),
               ("desired_capabilities", symbols, None), ("properties", fields_map, None)],
    "flow": [("next_incoming_id", uint, "next_incoming_id"), ("incoming_window", uint, "incoming_window"),
             ("next_outgoing_id", uint, "next_outgoing_id"), ("outgoing_window", uint, "outgoing_window"),
             ("handle", uint, "handle"), ("delivery_count", uint, "delivery_count"),
             ("link_credit", uint, "link_credit"), ("available", uint, "available"), ("drain", boolean, "drain"),
             ("echo", boolean, "echo"), ("properties", fields_map, None)],
    "transfer": [("handle", uint, "handle"), ("delivery_id", uint, "delivery_id"),
                 ("delivery_tag", _tag, "delivery_tag"), ("message_format", uint, "message_format"),
                 ("settled", boolean, "settled"), ("more", boolean, "more"),
                 ("rcv_settle_mode", lambda m: ubyte(RCV_SETTLE_MODES[m]), None), ("state", None, None),
                 ("resume", boolean, "resume"), ("aborted", boolean, "aborted"), ("batchable", boolean, "batchable")],
    "disposition": [("role", lambda r: boolean(ROLES[r]), "role"), ("first", uint, "first"), ("last", uint, "last"),
                    ("settled", boolean, "settled"), ("state", None, None), ("batchable", boolean, "batchable")],
    "detach": [("handle", uint, "handle"), ("closed", boolean, "closed"), ("error", None, None)],
    "end": [("error", None, None)],
    "close": [("error", None, None)],
    # Part 2 §2.8.14 error
    "error": [("condition", symbol, "error_condition"), ("description", string, "error_description"),
              ("info", fields_map, None)],
    # Part 3 §3.4 delivery states (outcomes)
    "accepted": [],
    "rejected": [("error", None, None)],
    "released": [],
    "modified": [("delivery_failed", boolean, "delivery_failed"),
                 ("undeliverable_here", boolean, "undeliverable_here"), ("message_annotations", map_, None)],
    # Part 3 §3.5.3, §3.5.4 terminus
    "source": [("address", _address, "source_address"), ("durable", uint, None), ("expiry_policy", symbol, None),
               ("timeout", uint, None), ("dynamic", boolean, None), ("dynamic_node_properties", fields_map, None),
               ("distribution_mode", symbol, None), ("filter", map_, None), ("default_outcome", None, None),
               ("outcomes", symbols, None), ("capabilities", symbols, None)],
    "target": [("address", _address, "target_address"), ("durable", uint, None), ("expiry_policy", symbol, None),
               ("timeout", uint, None), ("dynamic", boolean, None), ("dynamic_node_properties", fields_map, None),
               ("capabilities", symbols, None)],
    # Part 3 §3.2.1 header, §3.2.4 properties
    "header": [("durable", boolean, "durable"), ("priority", ubyte, "priority"), ("ttl", uint, "ttl_ms"),
               ("first_acquirer", boolean, "first_acquirer"), ("delivery_count", uint, "header_delivery_count")],
    "properties": [("message_id", string, "message_id"), ("user_id", binary, None), ("to", _address, "to"),
                   ("subject", string, "subject"), ("reply_to", _address, "reply_to"),
                   ("correlation_id", string, "correlation_id"), ("content_type", symbol, "content_type"),
                   ("content_encoding", symbol, None), ("absolute_expiry_time", timestamp, None),
                   ("creation_time", timestamp, None), ("group_id", string, None), ("group_sequence", uint, None),
                   ("reply_to_group_id", string, None)],
    # Part 5 §5.3.3.1, .2, .6
    "sasl-mechanisms": [("sasl_server_mechanisms", symbols, "mechanisms")],
    "sasl-init": [("mechanism", symbol, "mechanism"), ("initial_response", binary, None), ("hostname", string, None)],
    "sasl-outcome": [("code", lambda c: ubyte(SASL_CODES[c]), "sasl_outcome"), ("additional_data", binary, None)],
}

#: descriptor codes (Part 2 §2.7, §2.8.14; Part 3 §3.2, §3.4, §3.5; Part 5 §5.3.3)
CODES = {"open": 0x10, "begin": 0x11, "attach": 0x12, "flow": 0x13, "transfer": 0x14, "disposition": 0x15,
         "detach": 0x16, "end": 0x17, "close": 0x18, "error": 0x1D, "accepted": 0x24, "rejected": 0x25,
         "released": 0x26, "modified": 0x27, "source": 0x28, "target": 0x29, "header": 0x70,
         "properties": 0x73, "data": 0x75, "sasl-mechanisms": 0x40, "sasl-init": 0x41, "sasl-outcome": 0x44}
#: the column a field's given value is written as, where it is not the value itself
COLUMN_VALUE = {"delivery_tag": lambda v: bytes(v).hex(), "sasl_server_mechanisms": " ".join}


def composite(kind: str, **given) -> Encoded:
    """The described list of `kind` with the fields given (by name, any order; the list is
    written in spec order, trailing absent fields left out, absent ones before a given one null,
    Part 1 §1.4). ``expect`` holds the columns the given fields fill, and those of a nested
    composite (a source's address, an error's condition, an outcome's state)."""
    spec = FIELDS[kind]
    unknown = set(given) - {name for name, _, _ in spec}
    assert not unknown, f"{kind} has no field {sorted(unknown)}"
    items, expect = [], {}
    last = max((i for i, (name, _, _) in enumerate(spec) if given.get(name) is not None), default=-1)
    for name, enc, column in spec[:last + 1]:
        v = given.get(name)
        if v is None:
            items.append(null())
            continue
        if isinstance(v, Encoded):
            items.append(v)
            expect.update(v.expect)
        else:
            assert enc is not None, f"{kind}.{name} takes an Encoded value (error(...), outcome(...))"
            e = enc(v)
            items.append(e)
            expect.update(e.expect)
        if column is not None and not isinstance(v, Encoded):
            expect[column] = COLUMN_VALUE.get(name, lambda x: x)(v)
    return described(CODES[kind], list_(items), expect)


def error(condition: str, description: str | None = None, **rest) -> Encoded:
    """error (Part 2 §2.8.14): condition, description, info."""
    return composite("error", condition=condition, description=description, **rest)


def source(**fields) -> Encoded:
    """source (Part 3 §3.5.3)."""
    return composite("source", **fields)


def target(**fields) -> Encoded:
    """target (Part 3 §3.5.4)."""
    return composite("target", **fields)


def outcome(state: str, **fields) -> Encoded:
    """A delivery state (Part 3 §3.4): accepted, rejected (error), released, modified (...); its
    ``expect`` is the `state` column and the fields'."""
    e = composite(state, **fields)
    e.expect["state"] = state
    return e


# ---------------------------------------------------------------------------
# Message sections for a transfer's payload (Part 3 §3.2)
# ---------------------------------------------------------------------------


def header(**fields) -> Encoded:
    """header section 0x70 (§3.2.1): durable, priority, ttl, first_acquirer, delivery_count."""
    return composite("header", **fields)


def properties(**fields) -> Encoded:
    """properties section 0x73 (§3.2.4)."""
    return composite("properties", **fields)


def data(body: bytes) -> Encoded:
    """data section 0x75 (§3.2.6): the body as binary."""
    return described(CODES["data"], binary(body))


def message(*sections: Encoded) -> Encoded:
    """A bare message (§3.2): its sections back to back; ``expect`` is theirs together."""
    expect = {}
    for s in sections:
        expect.update(s.expect)
    return Encoded(b"".join(sections), expect)


# ---------------------------------------------------------------------------
# 3. Frames (Part 2 §2.3) and protocol headers (§2.2, Part 5 §5.3.1)
# ---------------------------------------------------------------------------

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"  # protocol id 0: AMQP
SASL_HEADER = b"AMQP\x03\x01\x00\x00"  # protocol id 3: SASL
FRAME_AMQP, FRAME_SASL = 0, 1
DOFF = 2  # data offset in 4-octet words: the 8-octet header, no extended header
UINT_MAX = 2**32 - 1


class Frame(bytes):
    """Wire bytes of one AMQP 1.0 frame; ``expect`` the `amqp10_frames` columns it must produce."""

    expect: dict


def frame(body: bytes = b"", channel: int = 0, ftype: int = FRAME_AMQP, payload: bytes = b"") -> Frame:
    """A frame (§2.3.1): SIZE (4 octets, the whole frame), DOFF 2, TYPE, the channel (2 octets; a
    SASL frame's is ignored, 0 here), then the body: a performative and, for a transfer, the
    payload. No body at all is an empty frame (a heartbeat, §2.4.5)."""
    raw = body + payload
    f = Frame(struct.pack(">IBBH", 8 + len(raw), DOFF, ftype, channel) + raw)
    f.expect = {"channel": channel if ftype == FRAME_AMQP else 0, "size_bytes": len(raw),
                "type": ("amqp" if ftype == FRAME_AMQP else "sasl") if raw else "empty"}
    return f


def performative(kind: str, channel: int = 0, payload: Encoded | bytes = b"", **fields) -> Frame:
    """The frame of performative `kind` (open, begin, ... close) with the fields given, by name;
    ``payload`` (a transfer's message bytes) follows it in the frame."""
    body = composite(kind, **fields)
    f = frame(body, channel, FRAME_AMQP, payload)
    f.expect.update(performative=kind, **body.expect)
    if kind == "transfer" and payload:
        f.expect["payload_bytes"] = len(payload)
        f.expect.update(getattr(payload, "expect", {}))
    return f


def sasl(kind: str, **fields) -> Frame:
    """A SASL frame (Part 5 §5.3.3): `sasl-mechanisms`, `sasl-init`, `sasl-outcome`."""
    body = composite(kind, **fields)
    f = frame(body, 0, FRAME_SASL)
    f.expect.update(performative=kind, **body.expect)
    return f


def open_(channel: int = 0, **fields) -> Frame:
    """open (§2.7.1)."""
    return performative("open", channel, **fields)


def begin(channel: int, **fields) -> Frame:
    """begin (§2.7.2)."""
    return performative("begin", channel, **fields)


def attach(channel: int, **fields) -> Frame:
    """attach (§2.7.3)."""
    return performative("attach", channel, **fields)


def flow(channel: int, **fields) -> Frame:
    """flow (§2.7.4)."""
    return performative("flow", channel, **fields)


def transfer(channel: int, payload: Encoded | bytes = b"", **fields) -> Frame:
    """transfer (§2.7.5) with its payload (a message's sections, or a part of them)."""
    return performative("transfer", channel, payload, **fields)


def disposition(channel: int, **fields) -> Frame:
    """disposition (§2.7.6)."""
    return performative("disposition", channel, **fields)


def detach(channel: int, **fields) -> Frame:
    """detach (§2.7.7)."""
    return performative("detach", channel, **fields)


def end(channel: int, **fields) -> Frame:
    """end (§2.7.8)."""
    return performative("end", channel, **fields)


def close(channel: int = 0, **fields) -> Frame:
    """close (§2.7.9)."""
    return performative("close", channel, **fields)


def heartbeat() -> Frame:
    """An empty frame (§2.4.5)."""
    return frame()


# ---------------------------------------------------------------------------
# A conversation at chosen times
# ---------------------------------------------------------------------------


class Conversation:
    """A crafting.TcpConversation on port 5672 whose packets are stamped as sent: `at(ms)` sets
    the clock, each `send` stamps its packets then and moves the clock on by `STEP_NS` (so
    packets keep their order). `frames` logs (direction, time_ns, Frame) for the tests."""

    STEP_NS = 1_000  # 1 µs between packets sent back to back

    def __init__(self, t0_ns: int = crafting.T0_NS, **tcp):
        self.t0_ns = t0_ns
        self.now_ns = t0_ns
        self.tcp = crafting.TcpConversation(**tcp)
        self.frames: list[tuple[str, int, Frame]] = []
        self._stamp(lambda: self.tcp.handshake())

    def _stamp(self, act):
        before = len(self.tcp.packets)
        act()
        for p in self.tcp.packets[before:]:
            p.time_ns = self.now_ns
            self.now_ns += self.STEP_NS

    def at(self, ms: float) -> "Conversation":
        """Move the clock to t0 + ms (never back)."""
        self.now_ns = max(self.now_ns, self.t0_ns + int(round(ms * 1e6)))
        return self

    def send(self, direction: str, *items: bytes) -> "Conversation":
        """Send frames (and protocol headers) back to back in one TCP segment (or as many as the
        MSS needs)."""
        t = self.now_ns
        for it in items:
            if isinstance(it, Frame):
                self.frames.append((direction, t, it))
        self._stamp(lambda: self.tcp.send(direction, b"".join(items)))
        return self

    def close(self) -> "Conversation":
        self._stamp(self.tcp.close)
        return self

    def write(self, path) -> str:
        """The capture file (classic pcap, nanosecond times)."""
        crafting.write_pcap(path, self.tcp.packets)
        return str(path)

    def sent(self, direction: str | None = None, kind: str | None = None) -> list[Frame]:
        """The frames sent, optionally of one direction and performative."""
        return [f for d, _, f in self.frames if (direction is None or d == direction)
                and (kind is None or f.expect.get("performative") == kind)]


def sasl_plain_opening(conv: Conversation, user: str = "guest", password: str = "guest",
                       mechanisms=("PLAIN", "ANONYMOUS", "AMQPLAIN")) -> Conversation:
    """The SASL layer (Part 5 §5.3.2): headers each way, the broker's mechanisms, the client's
    PLAIN init, outcome ok; then the AMQP headers each way (a new protocol header after SASL,
    §5.3.1)."""
    conv.send("c2s", SASL_HEADER)
    conv.send("s2c", SASL_HEADER, sasl("sasl-mechanisms", sasl_server_mechanisms=list(mechanisms)))
    conv.send("c2s", sasl("sasl-init", mechanism="PLAIN",
                          initial_response=b"\x00" + user.encode() + b"\x00" + password.encode()))
    conv.send("s2c", sasl("sasl-outcome", code="ok"))
    conv.send("c2s", AMQP_HEADER)
    conv.send("s2c", AMQP_HEADER)
    return conv
