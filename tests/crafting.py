"""Helpers to craft AMQP 0-9-1 conversations and write them as TCP captures.

Three layers, each usable on its own:

1. AMQP encoders.  Every ready-made encoder (``connection_start``,
   ``basic_publish``, ``content_header``, ...) returns a :class:`Frame`: the
   exact wire bytes of one frame plus ``Frame.expect``, the columns of the
   ``frames`` table (docs/tables.md) that frame must produce.  Expectations
   therefore come from what the test encoded, never from amqpcap itself.

2. :class:`TcpConversation`: a client/broker TCP conversation built packet by
   packet (handshake with options, data split into segments with correct
   seq/ack, pure ACKs, FIN/RST) plus knobs to drop, duplicate, reorder,
   overlap and truncate segments.  Each :class:`Packet` remembers what the
   ``packets`` table should say about it (relative seq/ack, flags, window...).

3. Capture writers: :func:`write_pcap` (little/big endian, micro/nanosecond,
   any snaplen, gzip) and :func:`write_pcapng` (several interfaces with their
   own link type, ``if_tsresol`` and ``if_tsoffset``).  Both are written with
   ``struct`` so that every byte of the file is under the test's control; the
   packets themselves are built with scapy.

Finally :func:`expected_frames` is a tiny reference reassembler: given the
packets in file order it says which packet completes each frame, so tests can
reorder/duplicate/split segments and still derive ``packet``/``first_packet``
from the scenario.

Wire format reminders (AMQP 0-9-1):
  frame   = type(1) channel(2) size(4) payload(size) frame-end(0xCE)   §2.3.5
  bits    = consecutive bit arguments are packed into octets, low bit first §4.2.5.2
  props   = property flag bit 15 is the first property (content-type)  §4.2.6.1
"""

from __future__ import annotations

import copy
import gzip
import struct
from dataclasses import dataclass

import pandas as pd

# ---------------------------------------------------------------------------
# AMQP 0-9-1 encoding
# ---------------------------------------------------------------------------

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8
FRAME_END = 0xCE
FRAME_OVERHEAD = 8  # 7-byte header + frame-end octet

USER = "guest"
PASSWORD = "secret-password"
PLAIN_RESPONSE = b"\x00" + USER.encode() + b"\x00" + PASSWORD.encode()


class Frame(bytes):
    """Wire bytes of one AMQP frame; ``expect`` holds the frames-table columns it must produce."""

    expect: dict

    def __new__(cls, data: bytes, expect: dict):
        obj = super().__new__(cls, data)
        obj.expect = dict(expect)
        return obj


def octet(v: int) -> bytes:
    return struct.pack(">B", v)


def short(v: int) -> bytes:
    return struct.pack(">H", v)


def long_(v: int) -> bytes:
    return struct.pack(">I", v)


def longlong(v: int) -> bytes:
    return struct.pack(">Q", v)


def shortstr(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    assert len(b) < 256, "shortstr longer than 255 bytes"
    return octet(len(b)) + b


def longstr(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return long_(len(b)) + b


def bits(*flags: bool) -> bytes:
    """Pack consecutive bit arguments into octets, low bit first (§4.2.5.2)."""
    out = b""
    for i in range(0, len(flags), 8):
        v = 0
        for j, f in enumerate(flags[i:i + 8]):
            v |= bool(f) << j
        out += octet(v)
    return out


def field_value(v) -> bytes:
    """Encode one field-table value with its type octet (RabbitMQ's type letters)."""
    if isinstance(v, bool):
        return b"t" + octet(int(v))
    if isinstance(v, int):
        if -(2**31) <= v < 2**31:
            return b"I" + struct.pack(">i", v)
        return b"l" + struct.pack(">q", v)
    if isinstance(v, float):
        return b"d" + struct.pack(">d", v)
    if isinstance(v, str):
        return b"S" + longstr(v)
    if isinstance(v, bytes):
        return b"x" + longstr(v)
    if isinstance(v, dict):
        return b"F" + table(v)
    if isinstance(v, (list, tuple)):
        body = b"".join(field_value(x) for x in v)
        return b"A" + long_(len(body)) + body
    if v is None:
        return b"V"
    raise TypeError(f"cannot encode {v!r} in a field table")


def table(d: dict | None) -> bytes:
    """Encode a field table: long size, then (shortstr name, typed value) pairs."""
    body = b"".join(shortstr(k) + field_value(v) for k, v in (d or {}).items())
    return long_(len(body)) + body


def raw_frame(ftype: int, channel: int, payload: bytes, end: int = FRAME_END) -> bytes:
    """Frame = type(1) channel(2) size(4) payload frame-end."""
    return struct.pack(">BHI", ftype, channel, len(payload)) + payload + octet(end)


def method_frame(channel: int, class_id: int, method_id: int, args: bytes = b"",
                 name: str | None = None, **expect) -> Frame:
    """A method frame; ``name`` and ``expect`` describe the decoded row."""
    payload = short(class_id) + short(method_id) + args
    row = dict(type="method", channel=channel, size_bytes=len(payload),
               class_id=class_id, method_id=method_id)
    if name is not None:
        row["method"] = name
    row.update(expect)
    return Frame(raw_frame(FRAME_METHOD, channel, payload), row)


# -- connection class (10) ---------------------------------------------------

def connection_start(product="RabbitMQ", version="3.13.7", platform="Erlang/OTP 26.2",
                     mechanisms="PLAIN AMQPLAIN", capabilities=None) -> Frame:
    props = {"capabilities": capabilities or {"publisher_confirms": True,
                                              "consumer_cancel_notify": True,
                                              "connection.blocked": True},
             "product": product, "version": version, "platform": platform}
    args = octet(0) + octet(9) + table(props) + longstr(mechanisms) + longstr("en_US")
    return method_frame(0, 10, 10, args, "connection.start",
                        server_product=product, server_version=version)


def connection_start_ok(product="pika", version="1.3.2", platform="Python 3.11.7",
                        connection_name=None, mechanism="PLAIN",
                        response=PLAIN_RESPONSE, user=USER) -> Frame:
    props = {"product": product, "version": version, "platform": platform,
             "capabilities": {"basic.nack": True, "publisher_confirms": True}}
    if connection_name is not None:
        props["connection_name"] = connection_name
    args = table(props) + shortstr(mechanism) + longstr(response) + shortstr("en_US")
    return method_frame(0, 10, 11, args, "connection.start-ok", mechanism=mechanism,
                        user=user, client_product=product, client_version=version,
                        client_platform=platform, connection_name=connection_name)


def _tune(method_id, name, channel_max, frame_max, heartbeat) -> Frame:
    args = short(channel_max) + long_(frame_max) + short(heartbeat)
    return method_frame(0, 10, method_id, args, name, channel_max=channel_max,
                        frame_max=frame_max, heartbeat_s=heartbeat)


def connection_tune(channel_max=2047, frame_max=131072, heartbeat=60) -> Frame:
    return _tune(30, "connection.tune", channel_max, frame_max, heartbeat)


def connection_tune_ok(channel_max=2047, frame_max=131072, heartbeat=60) -> Frame:
    return _tune(31, "connection.tune-ok", channel_max, frame_max, heartbeat)


def connection_open(vhost="/") -> Frame:
    return method_frame(0, 10, 40, shortstr(vhost) + shortstr("") + bits(False),
                        "connection.open", vhost=vhost)


def connection_open_ok() -> Frame:
    return method_frame(0, 10, 41, shortstr(""), "connection.open-ok")


def connection_close(reply_code=200, reply_text="Goodbye", class_id=0, method_id=0) -> Frame:
    args = short(reply_code) + shortstr(reply_text) + short(class_id) + short(method_id)
    return method_frame(0, 10, 50, args, "connection.close",
                        reply_code=reply_code, reply_text=reply_text)


def connection_close_ok() -> Frame:
    return method_frame(0, 10, 51, b"", "connection.close-ok")


def connection_blocked(reason="low on memory") -> Frame:
    return method_frame(0, 10, 60, shortstr(reason), "connection.blocked", reason=reason)


def connection_unblocked() -> Frame:
    return method_frame(0, 10, 61, b"", "connection.unblocked")


# -- channel class (20) --------------------------------------------------------

def channel_open(channel=1) -> Frame:
    return method_frame(channel, 20, 10, shortstr(""), "channel.open")


def channel_open_ok(channel=1) -> Frame:
    return method_frame(channel, 20, 11, longstr(""), "channel.open-ok")


def channel_flow(channel=1, active=False) -> Frame:
    return method_frame(channel, 20, 20, bits(active), "channel.flow", active=active)


def channel_flow_ok(channel=1, active=False) -> Frame:
    return method_frame(channel, 20, 21, bits(active), "channel.flow-ok", active=active)


def channel_close(channel=1, reply_code=406, reply_text="PRECONDITION_FAILED", class_id=60,
                  method_id=80) -> Frame:
    args = short(reply_code) + shortstr(reply_text) + short(class_id) + short(method_id)
    return method_frame(channel, 20, 40, args, "channel.close",
                        reply_code=reply_code, reply_text=reply_text)


def channel_close_ok(channel=1) -> Frame:
    return method_frame(channel, 20, 41, b"", "channel.close-ok")


# -- queue class (50) ----------------------------------------------------------

def queue_declare(channel=1, queue="q", durable=True, nowait=False, arguments=None) -> Frame:
    # reserved-1, queue, passive, durable, exclusive, auto-delete, no-wait, arguments
    args = short(0) + shortstr(queue) + bits(False, durable, False, False, nowait) + table(arguments)
    return method_frame(channel, 50, 10, args, "queue.declare", queue=queue, nowait=nowait)


def queue_declare_ok(channel=1, queue="q", message_count=0, consumer_count=0) -> Frame:
    args = shortstr(queue) + long_(message_count) + long_(consumer_count)
    return method_frame(channel, 50, 11, args, "queue.declare-ok", queue=queue,
                        message_count=message_count, consumer_count=consumer_count)


# -- basic class (60) ------------------------------------------------------------

def basic_qos(channel=1, prefetch_size=0, prefetch_count=10, global_=False) -> Frame:
    args = long_(prefetch_size) + short(prefetch_count) + bits(global_)
    return method_frame(channel, 60, 10, args, "basic.qos", prefetch_size=prefetch_size,
                        prefetch_count=prefetch_count, **{"global": global_})


def basic_qos_ok(channel=1) -> Frame:
    return method_frame(channel, 60, 11, b"", "basic.qos-ok")


def basic_consume(channel=1, queue="q", consumer_tag="ctag-1", no_ack=False, nowait=False,
                  arguments=None) -> Frame:
    # reserved-1, queue, consumer-tag, no-local, no-ack, exclusive, no-wait, arguments
    args = (short(0) + shortstr(queue) + shortstr(consumer_tag)
            + bits(False, no_ack, False, nowait) + table(arguments))
    return method_frame(channel, 60, 20, args, "basic.consume", queue=queue,
                        consumer_tag=consumer_tag, no_ack=no_ack, nowait=nowait)


def basic_consume_ok(channel=1, consumer_tag="ctag-1") -> Frame:
    return method_frame(channel, 60, 21, shortstr(consumer_tag), "basic.consume-ok",
                        consumer_tag=consumer_tag)


def basic_publish(channel=1, exchange="amq.direct", routing_key="rk", mandatory=False,
                  immediate=False) -> Frame:
    args = short(0) + shortstr(exchange) + shortstr(routing_key) + bits(mandatory, immediate)
    return method_frame(channel, 60, 40, args, "basic.publish", exchange=exchange,
                        routing_key=routing_key, mandatory=mandatory)


def basic_return(channel=1, reply_code=312, reply_text="NO_ROUTE", exchange="amq.direct",
                 routing_key="rk") -> Frame:
    args = short(reply_code) + shortstr(reply_text) + shortstr(exchange) + shortstr(routing_key)
    return method_frame(channel, 60, 50, args, "basic.return", reply_code=reply_code,
                        reply_text=reply_text, exchange=exchange, routing_key=routing_key)


def basic_deliver(channel=1, consumer_tag="ctag-1", delivery_tag=1, redelivered=False,
                  exchange="amq.direct", routing_key="rk") -> Frame:
    args = (shortstr(consumer_tag) + longlong(delivery_tag) + bits(redelivered)
            + shortstr(exchange) + shortstr(routing_key))
    return method_frame(channel, 60, 60, args, "basic.deliver", consumer_tag=consumer_tag,
                        delivery_tag=delivery_tag, redelivered=redelivered,
                        exchange=exchange, routing_key=routing_key)


def basic_ack(channel=1, delivery_tag=1, multiple=False) -> Frame:
    return method_frame(channel, 60, 80, longlong(delivery_tag) + bits(multiple), "basic.ack",
                        delivery_tag=delivery_tag, multiple=multiple)


def basic_reject(channel=1, delivery_tag=1, requeue=True) -> Frame:
    return method_frame(channel, 60, 90, longlong(delivery_tag) + bits(requeue), "basic.reject",
                        delivery_tag=delivery_tag, requeue=requeue)


def basic_nack(channel=1, delivery_tag=1, multiple=False, requeue=True) -> Frame:
    return method_frame(channel, 60, 120, longlong(delivery_tag) + bits(multiple, requeue),
                        "basic.nack", delivery_tag=delivery_tag, multiple=multiple,
                        requeue=requeue)


# -- confirm class (85) ----------------------------------------------------------

def confirm_select(channel=1, nowait=False) -> Frame:
    return method_frame(channel, 85, 10, bits(nowait), "confirm.select", nowait=nowait)


def confirm_select_ok(channel=1) -> Frame:
    return method_frame(channel, 85, 11, b"", "confirm.select-ok")


# -- content and heartbeat frames ----------------------------------------------

# Basic properties in wire order; flag bit 15 is the first one (§4.2.6.1).
BASIC_PROPERTIES = [
    ("content_type", "shortstr"), ("content_encoding", "shortstr"), ("headers", "table"),
    ("delivery_mode", "octet"), ("priority", "octet"), ("correlation_id", "shortstr"),
    ("reply_to", "shortstr"), ("expiration", "shortstr"), ("message_id", "shortstr"),
    ("timestamp", "longlong"), ("type", "shortstr"), ("user_id", "shortstr"),
    ("app_id", "shortstr"), ("cluster_id", "shortstr"),
]
_ENCODE = {"shortstr": shortstr, "table": table, "octet": octet, "longlong": longlong}
# property name -> frames-table column (only the documented ones)
_PROPERTY_COLUMNS = {"content_type": "content_type", "delivery_mode": "delivery_mode",
                     "priority": "priority", "correlation_id": "correlation_id",
                     "reply_to": "reply_to", "expiration": "expiration",
                     "message_id": "message_id", "timestamp": "message_timestamp"}


def content_header(channel=1, body_size=0, class_id=60, **props) -> Frame:
    """Content header frame; ``props`` are basic properties by python name (see BASIC_PROPERTIES)."""
    unknown = set(props) - {n for n, _ in BASIC_PROPERTIES}
    assert not unknown, f"unknown basic properties {unknown}"
    flags, plist = 0, b""
    for i, (name, kind) in enumerate(BASIC_PROPERTIES):
        if props.get(name) is not None:
            flags |= 1 << (15 - i)
            plist += _ENCODE[kind](props[name])
    payload = short(class_id) + short(0) + longlong(body_size) + short(flags) + plist
    row = dict(type="header", channel=channel, size_bytes=len(payload), class_id=class_id,
               body_size=body_size)
    for name, col in _PROPERTY_COLUMNS.items():
        v = props.get(name)
        if name == "timestamp" and v is not None:
            v = pd.Timestamp(v, unit="s", tz="UTC")
        row[col] = v
    return Frame(raw_frame(FRAME_HEADER, channel, payload), row)


def body_frame(channel=1, data: bytes = b"") -> Frame:
    return Frame(raw_frame(FRAME_BODY, channel, data),
                 dict(type="body", channel=channel, size_bytes=len(data)))


def heartbeat() -> Frame:
    return Frame(raw_frame(FRAME_HEARTBEAT, 0, b""),
                 dict(type="heartbeat", channel=0, size_bytes=0))


def content(channel=1, body: bytes = b"", frame_max=131072, **props) -> list[Frame]:
    """Content header plus body frames, the body cut so that no frame exceeds frame_max
    (frame_max 0 = unlimited: one body frame)."""
    frames = [content_header(channel, len(body), **props)]
    step = frame_max - FRAME_OVERHEAD if frame_max else max(len(body), 1)
    for i in range(0, len(body), step):
        frames.append(body_frame(channel, body[i:i + step]))
    return frames


def opening(frame_max=131072, channel_max=2047, heartbeat_s=60, vhost="/",
            **start_ok) -> list[tuple[str, bytes]]:
    """A standard connection + channel 1 opening as (direction, bytes) items."""
    return [
        ("c2s", PROTOCOL_HEADER),
        ("s2c", connection_start()),
        ("c2s", connection_start_ok(**start_ok)),
        ("s2c", connection_tune(channel_max, frame_max, heartbeat_s)),
        ("c2s", connection_tune_ok(channel_max, frame_max, heartbeat_s)),
        ("c2s", connection_open(vhost)),
        ("s2c", connection_open_ok()),
        ("c2s", channel_open(1)),
        ("s2c", channel_open_ok(1)),
    ]


# ---------------------------------------------------------------------------
# TCP conversation
# ---------------------------------------------------------------------------

FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10
OTHER = {"c2s": "s2c", "s2c": "c2s"}
T0_NS = 1_700_000_000_123_456_789  # a timestamp with all nanosecond digits used


@dataclass
class Packet:
    """One captured TCP packet and what the ``packets`` table should say about it.

    ``seq``/``ack`` are relative as in Wireshark (ISN + 1 = 1).  ``time_ns`` is
    assigned by :meth:`TcpConversation.timed` (or set by hand).  ``caplen``
    truncates this record in the written file (snaplen).
    """
    direction: str
    src: str
    dst: str
    sport: int
    dport: int
    abs_seq: int
    abs_ack: int
    seq: int
    ack: int
    flags: int
    window: int  # raw 16-bit field
    options: list
    payload: bytes = b""
    offset: int | None = None  # stream offset of payload[0] (0 = first data byte)
    expected_window: int | None = None
    tsval: int | None = None
    tsecr: int | None = None
    hop_by_hop: bool = False
    time_ns: int | None = None
    caplen: int | None = None

    def l3(self):
        """The scapy IP (or IPv6) packet."""
        from scapy.all import IP, IPv6, IPv6ExtHdrHopByHop, TCP, Raw
        tcp = TCP(sport=self.sport, dport=self.dport, seq=self.abs_seq % 2**32,
                  ack=self.abs_ack % 2**32, flags=self.flags, window=self.window,
                  options=self.options)
        if self.payload:
            tcp = tcp / Raw(self.payload)
        if ":" in self.src:
            ip = IPv6(src=self.src, dst=self.dst, hlim=64)
            if self.hop_by_hop:
                ip = ip / IPv6ExtHdrHopByHop(options=[])
            return ip / tcp
        return IP(src=self.src, dst=self.dst, ttl=64, id=0, flags="DF") / tcp

    def l3_bytes(self) -> bytes:
        if getattr(self, "_l3_cache", None) is None:
            from scapy.all import raw
            self._l3_cache = raw(self.l3())
        return self._l3_cache

    def frame_bytes(self, link: str = "ether") -> bytes:
        return link_frame(self.l3_bytes(), link, self.direction)

    def __copy__(self):
        new = Packet(**{f: getattr(self, f) for f in self.__dataclass_fields__})
        new.options = list(self.options)
        return new


@dataclass
class RawRecord:
    """A non-TCP (or foreign) record: given scapy L3 packet, e.g. UDP or ICMP."""
    l3pkt: object
    direction: str = "c2s"
    time_ns: int | None = None
    caplen: int | None = None

    def l3_bytes(self) -> bytes:
        from scapy.all import raw
        return raw(self.l3pkt)

    def frame_bytes(self, link: str = "ether") -> bytes:
        return link_frame(self.l3_bytes(), link, self.direction)


class TcpConversation:
    """Build the packets of one client/broker TCP conversation.

    Data is sent with :meth:`send` (or :meth:`send_frames`), which appends the
    bytes to that direction's stream and emits segments with correct seq/ack;
    the other side's ``ack`` is what it has sent-and-seen so far.  Everything
    ends up in ``self.packets`` (file order); knobs (:meth:`drop`,
    :meth:`duplicate`, :meth:`swap`, :meth:`retransmit`) edit that list.
    ``frame_log`` records (direction, stream offset, Frame) for every frame sent,
    which :func:`expected_frames` uses.
    """

    def __init__(self, client=("10.0.0.1", 40000), broker=("10.0.0.2", 5672),
                 isn_c=1_000_000, isn_s=3_000_000_000, mss=1460, wscale_c=7, wscale_s=9,
                 window=502, timestamps=True, hop_by_hop=False):
        self.addr = {"c2s": client, "s2c": broker}
        self.isn = {"c2s": isn_c, "s2c": isn_s}
        self.mss = mss
        self.wscale = {"c2s": wscale_c, "s2c": wscale_s}
        self.window = window
        self.timestamps = timestamps
        self.hop_by_hop = hop_by_hop
        self.data = {"c2s": bytearray(), "s2c": bytearray()}  # everything sent so far
        self.syn_seen = {"c2s": False, "s2c": False}
        self.fin_sent = {"c2s": False, "s2c": False}
        self.tsval = {"c2s": 100_000, "s2c": 700_000}
        self.packets: list = []
        self.frame_log: list[tuple[str, int, bytes]] = []

    # -- sequence numbers -------------------------------------------------
    def _next_seq(self, d):
        """Absolute sequence number of the next new byte in direction d."""
        return self.isn[d] + 1 + len(self.data[d]) + (1 if self.fin_sent[d] else 0)

    def _packet(self, d, abs_seq, flags, payload=b"", options=None, offset=None):
        src, dst = self.addr[d], self.addr[OTHER[d]]
        ack_flag = bool(flags & ACK)
        abs_ack = self._next_seq(OTHER[d]) if ack_flag else 0
        opts = list(options or [])
        tsval = tsecr = None
        if self.timestamps:
            self.tsval[d] += 1
            tsval, tsecr = self.tsval[d], (self.tsval[OTHER[d]] if ack_flag else 0)
            if not flags & SYN:
                opts = [("NOP", None), ("NOP", None)] + opts
            opts.append(("Timestamp", (tsval, tsecr)))
        both_syns = self.syn_seen["c2s"] and self.syn_seen["s2c"]
        exp_win = self.window if (flags & SYN or not both_syns) else self.window << self.wscale[d]
        p = Packet(direction=d, src=src[0], dst=dst[0], sport=src[1], dport=dst[1],
                   abs_seq=abs_seq, abs_ack=abs_ack, seq=abs_seq - self.isn[d],
                   ack=(abs_ack - self.isn[OTHER[d]]) if ack_flag else 0, flags=flags,
                   window=self.window, options=opts, payload=bytes(payload), offset=offset,
                   expected_window=exp_win, tsval=tsval, tsecr=tsecr,
                   hop_by_hop=self.hop_by_hop)
        self.packets.append(p)
        return p

    # -- building blocks --------------------------------------------------
    def handshake(self):
        """SYN, SYN-ACK, ACK with MSS, window scale, SACK-permitted and timestamps."""
        for d, flags in (("c2s", SYN), ("s2c", SYN | ACK)):
            opts = [("MSS", self.mss), ("SAckOK", b""), ("WScale", self.wscale[d])]
            self._packet(d, self.isn[d], flags, options=opts)
            self.syn_seen[d] = True
        self._packet("c2s", self._next_seq("c2s"), ACK)
        return self

    def send(self, d: str, data: bytes, segment_sizes=None) -> list[Packet]:
        """Append ``data`` to direction d's stream, split into segments.

        ``segment_sizes``: None (MSS-sized), an int (fixed size) or a list of
        sizes (the rest, if any, goes MSS-sized).  PSH is set on the last one.
        """
        start = len(self.data[d])
        self.data[d] += data
        sizes = _split_sizes(len(data), segment_sizes, self.mss)
        out, off = [], start
        for i, n in enumerate(sizes):
            flags = ACK | (PSH if i == len(sizes) - 1 else 0)
            out.append(self._segment(d, off, n, flags))
            off += n
        return out

    def send_frames(self, d: str, frames, segment_sizes=None) -> list[Packet]:
        """Send several frames (or the protocol header) back to back, logging each."""
        off = len(self.data[d])
        for f in frames:
            if isinstance(f, Frame):
                self.frame_log.append((d, off, f))
            off += len(f)
        return self.send(d, b"".join(frames), segment_sizes)

    def exchange(self, items, segment_sizes=None) -> list[Packet]:
        """Send (direction, bytes-or-frames) items, each as its own send()."""
        out = []
        for d, what in items:
            frames = what if isinstance(what, list) else [what]
            out += self.send_frames(d, frames, segment_sizes)
        return out

    def _segment(self, d, offset, length, flags=ACK | PSH) -> Packet:
        payload = self.data[d][offset:offset + length]
        return self._packet(d, self.isn[d] + 1 + offset, flags, payload, offset=offset)

    def ack(self, d: str) -> Packet:
        """A pure ACK from d for everything the other side has sent."""
        return self._packet(d, self._next_seq(d), ACK)

    def fin(self, d: str) -> Packet:
        p = self._packet(d, self._next_seq(d), FIN | ACK)
        self.fin_sent[d] = True
        return p

    def rst(self, d: str) -> Packet:
        return self._packet(d, self._next_seq(d), RST | ACK)

    def close(self):
        """FIN from each side and the final ACK."""
        self.fin("c2s")
        self.fin("s2c")
        self.ack("c2s")
        return self

    # -- knobs -------------------------------------------------------------
    def retransmit(self, d: str, offset: int, length: int, at: int | None = None) -> Packet:
        """A segment re-sending stream bytes [offset, offset+length) of d (it may
        overlap old and new data, as long as the bytes were sent already);
        appended, or inserted at index ``at`` of ``packets``."""
        assert offset + length <= len(self.data[d]), "can only retransmit sent bytes"
        p = self._segment(d, offset, length)
        if at is not None:
            self.packets.remove(p)
            self.packets.insert(at, p)
        return p

    def drop(self, *pkts: Packet):
        for p in pkts:
            self.packets.remove(p)

    def duplicate(self, pkt: Packet, at: int | None = None) -> Packet:
        """Insert a copy of pkt (right after it, or at index ``at``)."""
        new = copy.copy(pkt)
        pos = self.index(pkt) + 1 if at is None else at
        self.packets.insert(pos, new)
        return new

    def swap(self, a: Packet, b: Packet):
        i, j = self.index(a), self.index(b)
        self.packets[i], self.packets[j] = b, a

    def index(self, pkt) -> int:
        return next(i for i, p in enumerate(self.packets) if p is pkt)

    def timed(self, t0_ns: int = T0_NS, step_ns: int = 1_000_000) -> list:
        """The packets in file order, stamped t0, t0+step, ... (returns self.packets)."""
        return stamp(self.packets, t0_ns, step_ns)


def _split_sizes(total, segment_sizes, mss):
    if segment_sizes is None:
        segment_sizes = mss
    if isinstance(segment_sizes, int):
        sizes = [segment_sizes] * (total // segment_sizes)
        if total % segment_sizes:
            sizes.append(total % segment_sizes)
        return sizes or [0]
    sizes = list(segment_sizes)
    assert all(s > 0 for s in sizes) and sum(sizes) <= total, (sizes, total)
    rest = total - sum(sizes)
    return sizes + _split_sizes(rest, mss, mss) if rest else sizes


def stamp(records, t0_ns: int = T0_NS, step_ns: int = 1_000_000):
    """Give records increasing timestamps in list order (in place)."""
    for i, r in enumerate(records):
        r.time_ns = t0_ns + i * step_ns
    return records


def number(records, pkt) -> int:
    """1-based frame number of pkt in records."""
    return next(i + 1 for i, p in enumerate(records) if p is pkt)


# ---------------------------------------------------------------------------
# Link layers and capture files
# ---------------------------------------------------------------------------

MAC = {"c2s": (b"\x02\x00\x00\x00\x00\x01", b"\x02\x00\x00\x00\x00\x02"),
       "s2c": (b"\x02\x00\x00\x00\x00\x02", b"\x02\x00\x00\x00\x00\x01")}
LINKTYPES = {"ether": 1, "vlan": 1, "sll": 113, "raw": 101, "null": 0,
             "ieee802_11": 105}  # the last one amqpcap does not read (tests/hostile)


def link_frame(l3: bytes, link: str, direction: str = "c2s") -> bytes:
    """Wrap an IPv4/IPv6 packet in a link-layer header.

    ether: Ethernet II; vlan: Ethernet + 802.1Q tag (VLAN 42); sll: Linux
    cooked capture v1; raw: bare IP (LINKTYPE_RAW 101); null: BSD loopback
    (4-byte host-order address family, little endian here).
    """
    v6 = (l3[0] >> 4) == 6
    ethertype = 0x86DD if v6 else 0x0800
    src, dst = MAC[direction]
    if link == "ether":
        return dst + src + struct.pack(">H", ethertype) + l3
    if link == "vlan":
        return dst + src + struct.pack(">HHH", 0x8100, 42, ethertype) + l3
    if link == "sll":
        pkttype = 4 if direction == "c2s" else 0  # outgoing / to us
        return struct.pack(">HHH8sH", pkttype, 1, 6, src, ethertype) + l3
    if link == "raw":
        return l3
    if link == "null":
        return struct.pack("<I", 24 if v6 else 2) + l3
    raise ValueError(link)


def write_pcap(path, records, link: str = "ether", nano: bool = True, endian: str = "<",
               snaplen: int = 262144, compress: bool = False):
    """Write a classic pcap file.

    ``endian`` '<' or '>' (byte order of every header), ``nano`` (default, so
    that record times are kept exactly) selects the 0xa1b23c4d magic, else
    times are truncated to microseconds; ``snaplen`` truncates every record (a record's own
    ``caplen`` truncates just that one); the original length is kept in the
    record header, as tcpdump does.  ``compress`` gzips the file.
    """
    magic = 0xA1B23C4D if nano else 0xA1B2C3D4
    out = [struct.pack(endian + "IHHiIII", magic, 2, 4, 0, 0, snaplen, LINKTYPES[link])]
    for r in records:
        data = r.frame_bytes(link)
        caplen = min(len(data), snaplen, r.caplen if r.caplen is not None else len(data))
        sec, ns = divmod(r.time_ns, 10**9)
        frac = ns if nano else ns // 1000
        out.append(struct.pack(endian + "IIII", sec, frac, caplen, len(data)) + data[:caplen])
    blob = b"".join(out)
    if compress:
        blob = gzip.compress(blob)
    with open(path, "wb") as f:
        f.write(blob)
    return path


def _pad4(b: bytes) -> bytes:
    return b + b"\x00" * (-len(b) % 4)


def _option(code: int, value: bytes) -> bytes:
    return struct.pack("<HH", code, len(value)) + _pad4(value)


def _block(btype: int, body: bytes) -> bytes:
    total = 12 + len(body)
    return struct.pack("<II", btype, total) + body + struct.pack("<I", total)


@dataclass
class Interface:
    """A pcapng interface: link type name, if_tsresol octet (6 = µs, 9 = ns,
    0x80|n = 2^-n) and if_tsoffset in seconds."""
    link: str = "ether"
    tsresol: int = 6
    tsoffset: int = 0
    snaplen: int = 262144

    def units_per_second(self) -> int:
        return 2 ** (self.tsresol & 0x7F) if self.tsresol & 0x80 else 10 ** self.tsresol


def write_pcapng(path, interfaces: list[Interface], records: list[tuple[int, object]]):
    """Write a little-endian pcapng: SHB, one IDB per interface, one EPB per
    (interface index, record).  A record's ``time_ns`` must be representable
    exactly at its interface's resolution (after subtracting if_tsoffset)."""
    shb = _block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)
                 + _option(4, b"amqpcap tests") + _option(0, b""))
    out = [shb]
    for itf in interfaces:
        opts = _option(9, bytes([itf.tsresol]))
        if itf.tsoffset:
            opts += _option(14, struct.pack("<q", itf.tsoffset))
        opts += _option(0, b"")
        out.append(_block(1, struct.pack("<HHI", LINKTYPES[itf.link], 0, itf.snaplen) + opts))
    for idx, r in records:
        itf = interfaces[idx]
        data = r.frame_bytes(itf.link)
        caplen = min(len(data), itf.snaplen, r.caplen if r.caplen is not None else len(data))
        rel_ns = r.time_ns - itf.tsoffset * 10**9
        units, rem = divmod(rel_ns * itf.units_per_second(), 10**9)
        assert rem == 0, "timestamp not representable at this interface's resolution"
        body = struct.pack("<IIIII", idx, units >> 32, units & 0xFFFFFFFF, caplen, len(data))
        out.append(_block(6, body + _pad4(data[:caplen])))
    with open(path, "wb") as f:
        f.write(b"".join(out))
    return path


# ---------------------------------------------------------------------------
# Expected tables
# ---------------------------------------------------------------------------

def ts(time_ns: int) -> pd.Timestamp:
    return pd.Timestamp(time_ns, unit="ns", tz="UTC")


def expected_frames(records, conversations, streams=None, start=None) -> list[dict]:
    """Reference reassembly: the frames rows a correct decoder produces.

    Walks ``records`` in file order; per direction, the contiguous stream
    prefix grows as holes are filled.  A frame is completed by the packet that
    makes the prefix cover its last byte; its ``first_packet`` is the first
    packet (file order) holding its first byte.  Only valid for captures with
    no missing bytes.  ``streams`` gives each conversation's stream number
    (default: 0, 1, ...).  ``start`` maps a direction to the stream offset where
    the capture begins (mid-stream captures): frames starting before it are
    not expected.
    """
    if isinstance(conversations, TcpConversation):
        conversations = [conversations]
    streams = streams or list(range(len(conversations)))
    numbers = {id(r): i + 1 for i, r in enumerate(records)}
    rows = []
    for conv, stream in zip(conversations, streams):
        for d in ("c2s", "s2c"):
            mine = [(numbers[id(p)], p) for p in conv.packets
                    if isinstance(p, Packet) and p.direction == d and p.payload
                    and id(p) in numbers]
            mine.sort(key=lambda x: x[0])
            begin = (start or {}).get(d, 0)
            have = bytearray(len(conv.data[d]))  # 1 = byte seen
            prefix = begin
            completed_at = {}  # frame index -> (number, packet) completing it
            first_seen = {}
            frames = [(off, f) for dd, off, f in conv.frame_log if dd == d and off >= begin]
            fi = 0
            for num, p in mine:
                for o in range(p.offset, p.offset + len(p.payload)):
                    if not have[o]:
                        have[o] = 1
                        first_seen.setdefault(o, num)
                while prefix < len(have) and have[prefix]:
                    prefix += 1
                while fi < len(frames) and frames[fi][0] + len(frames[fi][1]) <= prefix:
                    completed_at[fi] = (num, p)
                    fi += 1
            for i, (off, f) in enumerate(frames):
                if i not in completed_at:
                    continue
                num, p = completed_at[i]
                row = dict(packet=num, first_packet=first_seen[off], ts=ts(p.time_ns),
                           stream=stream, direction=d, _offset=off)
                row.update(f.expect)
                rows.append(row)
    rows.sort(key=lambda r: (r["packet"], r["_offset"]))
    for r in rows:
        del r["_offset"]
    return rows


def _same(a, b) -> bool:
    if b is None or (not isinstance(b, (str, bytes)) and pd.isna(b)):
        return a is None or (not isinstance(a, (str, bytes)) and pd.isna(a))
    if a is None or (not isinstance(a, (str, bytes)) and pd.isna(a)):
        return False
    return a == b


def frame_mismatches(df: pd.DataFrame, expected: list[dict], columns=None) -> list[str]:
    """Compare a frames table with expected rows (only the keys each row names,
    restricted to ``columns`` if given). Returns human-readable differences."""
    problems = []
    if len(df) != len(expected):
        problems.append(f"{len(df)} frames decoded, {len(expected)} expected")
    for i, (exp, (_, row)) in enumerate(zip(expected, df.iterrows())):
        for k, v in exp.items():
            if columns is not None and k not in columns:
                continue
            if k not in row.index:
                problems.append(f"row {i}: no column {k!r}")
                continue
            if not _same(row[k], v):
                problems.append(f"row {i} ({exp.get('method') or exp.get('type')}): "
                                f"{k} = {row[k]!r}, expected {v!r}")
    return problems


def assert_frames(df: pd.DataFrame, expected: list[dict], columns=None):
    problems = frame_mismatches(df, expected, columns)
    assert not problems, "\n".join(problems[:30])


FRAME_KEY_COLUMNS = ["stream", "direction", "channel", "type", "size_bytes", "class_id",
                     "method_id", "method"]


def comparable(df: pd.DataFrame, drop=("packet", "first_packet", "ts")) -> pd.DataFrame:
    """A frames table without the columns that legitimately depend on segmentation,
    as plain objects (so category sets do not matter), index reset."""
    out = df.drop(columns=[c for c in drop if c in df.columns]).reset_index(drop=True)
    return out.astype(object).where(out.notna(), None)


def expected_packets(records, conv: TcpConversation, stream: int = 0, link: str = "ether"):
    """The packets-table rows of conv's packets (needs the handshake in the capture)."""
    rows = []
    mine = {id(p) for p in conv.packets}
    for num, r in enumerate(records, 1):
        if id(r) not in mine:
            continue
        rows.append(dict(packet=num, ts=ts(r.time_ns), stream=stream, direction=r.direction,
                         frame_len=len(r.frame_bytes(link)), payload_bytes=len(r.payload),
                         seq=r.seq, ack=r.ack, flags=r.flags, window=r.expected_window,
                         tsval=r.tsval, tsecr=r.tsecr, sack_blocks=0))
    return rows


def load(path, **kw):
    """amqpcap.load with the broker port used by every crafted conversation."""
    import amqpcap
    return amqpcap.load(str(path), ports=(5672,), **kw)


def kinds(cap, kind: str) -> pd.DataFrame:
    """The anomalies rows of one kind."""
    a = cap.anomalies
    return a[a["kind"].astype(object) == kind].reset_index(drop=True)


def all_cells_as_text(cap) -> str:
    """Every cell of every table plus the summary, as one string (for leak checks)."""
    parts = [repr(cap.summary)]
    for name in ("frames", "packets", "connections", "anomalies"):
        df = getattr(cap, name)
        parts.append(" ".join(df.columns.astype(str)))
        parts.append(df.astype(str).to_csv())
    return "\n".join(parts)
