"""Hand-written AMQP 1.0 frame rows (the `amqp10_frames` schema, docs/amqp10.md) for the derive and
analyzer tests: each scenario is written frame by frame, its expected values computed by hand in the
tests' comments. Ids and counts start near 2^32 (as RabbitMQ 4 starts them) so they wrap."""

from __future__ import annotations

import pandas as pd

from amqpcap.derive.amqp10.frames import table

T0 = pd.Timestamp("2024-01-01", tz="UTC")
#: two below the wrap: the ids go 4294967294, 4294967295, 0, 1, ...
NEAR_WRAP = 2**32 - 2


def at(ms: float) -> pd.Timestamp:
    return T0 + pd.Timedelta(milliseconds=ms)


def u32(n: int) -> int:
    return n % 2**32


def frame(packet: int, ms: float, direction: str, performative: str, channel: int = 0, stream: int = 0,
          **fields) -> dict:
    return {"packet": packet, "ts": at(ms), "stream": stream, "direction": direction, "channel": channel,
            "type": "amqp", "performative": performative, **fields}


def opening(stream: int = 0, client_channel: int = 0, broker_channel: int = 3, packet: int = 1) -> list[dict]:
    """open each way, the client's begin, the broker's answering begin on a channel of its own."""
    c, b = "c2s", "s2c"
    return [frame(packet, 0, c, "open", stream=stream, container_id="app"),
            frame(packet + 1, 1, b, "open", stream=stream, container_id="rabbit"),
            frame(packet + 2, 2, c, "begin", client_channel, stream, next_outgoing_id=0, incoming_window=100,
                  outgoing_window=100),
            frame(packet + 3, 3, b, "begin", broker_channel, stream, remote_channel=client_channel,
                  next_outgoing_id=NEAR_WRAP, incoming_window=100, outgoing_window=100)]


def credit1_receiver(n: int, stream: int = 0, available: bool = True) -> list[dict]:
    """A client receiver granting credit 1 after each delivery, settling each with its own
    disposition (the shape of fixtures/amqp10-credit1.pcap): per delivery i (0-based), 10 ms apart:
    the broker's transfer at 10i+5 ms, then the client's flow and disposition at 10i+8 ms (the
    refill gap: 3 ms), the broker's reported flow at 10i+9 ms with `available` n-i-1."""
    rows = opening(stream)
    rows += [frame(5, 4, "c2s", "attach", 0, stream, name="L", handle=0, role="receiver", rcv_settle_mode="first",
                   source_address="/queue/q"),
             frame(6, 4.5, "s2c", "attach", 3, stream, name="L", handle=1, role="sender", snd_settle_mode="unsettled",
                   initial_delivery_count=NEAR_WRAP, source_address="/queue/q"),
             frame(7, 4.8, "c2s", "flow", 0, stream, handle=0, delivery_count=NEAR_WRAP, link_credit=1,
                   next_incoming_id=NEAR_WRAP, incoming_window=100, next_outgoing_id=0, outgoing_window=100)]
    p = 8
    for i in range(n):
        dc = u32(NEAR_WRAP + i)
        rows.append(frame(p, 10 * i + 5, "s2c", "transfer", 3, stream, handle=1, delivery_id=dc, delivery_tag=f"{i:02x}",
                          settled=False, more=False, continuation=False, payload_bytes=100, message_bytes=100,
                          first_acquirer=True))
        rows.append(frame(p + 1, 10 * i + 8, "c2s", "flow", 0, stream, handle=0, delivery_count=u32(dc + 1),
                          link_credit=1, next_incoming_id=u32(dc + 1), incoming_window=100, next_outgoing_id=0,
                          outgoing_window=100))
        rows.append(frame(p + 1, 10 * i + 8, "c2s", "disposition", 0, stream, role="receiver", first=dc, last=dc,
                          settled=True, state="accepted"))
        rows.append(frame(p + 2, 10 * i + 9, "s2c", "flow", 3, stream, handle=1, delivery_count=u32(dc + 1),
                          link_credit=1, available=(n - i - 1) if available else None, next_incoming_id=0,
                          incoming_window=100, next_outgoing_id=u32(dc + 1), outgoing_window=100))
        p += 3
    rows.append(frame(p, 10 * n + 5, "c2s", "close", 0, stream))
    return rows


def frames(rows: list[dict]) -> pd.DataFrame:
    return table(rows)
