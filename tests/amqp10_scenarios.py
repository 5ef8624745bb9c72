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


def credit1_receiver(n: int, stream: int = 0, available: bool = True, broker_channel: int = 3) -> list[dict]:
    """A client receiver granting credit 1 after each delivery, settling each with its own
    disposition (the shape of fixtures/amqp10-credit1.pcap): per delivery i (0-based), 10 ms apart:
    the broker's transfer at 10i+5 ms, then the client's flow and disposition at 10i+8 ms (the
    refill gap: 3 ms), the broker's reported flow at 10i+9 ms with `available` n-i-1. The first 7
    rows are the opening (4), the two attaches and the client's first flow (packets 1..7). The
    broker's frames are on `broker_channel` (by default 3, a number of its own)."""
    rows = opening(stream, broker_channel=broker_channel)
    rows += [frame(5, 4, "c2s", "attach", 0, stream, name="L", handle=0, role="receiver", rcv_settle_mode="first",
                   source_address="/queue/q"),
             frame(6, 4.5, "s2c", "attach", broker_channel, stream, name="L", handle=1, role="sender",
                   snd_settle_mode="unsettled",
                   initial_delivery_count=NEAR_WRAP, source_address="/queue/q"),
             frame(7, 4.8, "c2s", "flow", 0, stream, handle=0, delivery_count=NEAR_WRAP, link_credit=1,
                   next_incoming_id=NEAR_WRAP, incoming_window=100, next_outgoing_id=0, outgoing_window=100)]
    p = 8
    for i in range(n):
        dc = u32(NEAR_WRAP + i)
        rows.append(frame(p, 10 * i + 5, "s2c", "transfer", broker_channel, stream, handle=1, delivery_id=dc,
                          delivery_tag=f"{i:02x}",
                          settled=False, more=False, continuation=False, payload_bytes=100, message_bytes=100,
                          first_acquirer=True))
        rows.append(frame(p + 1, 10 * i + 8, "c2s", "flow", 0, stream, handle=0, delivery_count=u32(dc + 1),
                          link_credit=1, next_incoming_id=u32(dc + 1), incoming_window=100, next_outgoing_id=0,
                          outgoing_window=100))
        rows.append(frame(p + 1, 10 * i + 8, "c2s", "disposition", 0, stream, role="receiver", first=dc, last=dc,
                          settled=True, state="accepted"))
        rows.append(frame(p + 2, 10 * i + 9, "s2c", "flow", broker_channel, stream, handle=1,
                          delivery_count=u32(dc + 1),
                          link_credit=1, available=(n - i - 1) if available else None, next_incoming_id=0,
                          incoming_window=100, next_outgoing_id=u32(dc + 1), outgoing_window=100))
        p += 3
    rows.append(frame(p, 10 * n + 5, "c2s", "close", 0, stream))
    return rows


def credit1_midstream(n: int, broker_channel: int = 0) -> list[dict]:
    """`credit1_receiver(n)` as a capture begun after its attach (the shape of
    fixtures/amqp10-midstream.pcap): its first 7 rows (open, begin, attach, the client's first
    flow) are not in it, so the first frame is the broker's transfer of delivery 0 at 5 ms (packet
    8), and the client's and the broker's handles (0 and 1) are named by no attach. The broker's
    channel is the client's (0) as RabbitMQ numbers it, so the two directions pair into one
    session; another number leaves them two sessions."""
    return credit1_receiver(n, broker_channel=broker_channel)[7:]


def publisher_opening(broker_incoming_window: int = 100, credit: int = 1000) -> list[dict]:
    """open each way; the client begins on channel 0 with next-outgoing-id 2^32−2 (its transfer ids
    wrap after 2), the broker answers on channel 3 with incoming-window `broker_incoming_window`;
    the client attaches sender "P" (handle 0, initial delivery-count 2^32−2), the broker attaches
    its receiver end (handle 2) and grants `credit` (packets 1..7, 0..6 ms)."""
    c, b = "c2s", "s2c"
    return [frame(1, 0, c, "open", container_id="app"), frame(2, 1, b, "open", container_id="rabbit"),
            frame(3, 2, c, "begin", 0, next_outgoing_id=NEAR_WRAP, incoming_window=100, outgoing_window=100),
            frame(4, 3, b, "begin", 3, remote_channel=0, next_outgoing_id=0, incoming_window=broker_incoming_window,
                  outgoing_window=100),
            frame(5, 4, c, "attach", 0, name="P", handle=0, role="sender", snd_settle_mode="unsettled",
                  initial_delivery_count=NEAR_WRAP, target_address="/queues/q"),
            frame(6, 5, b, "attach", 3, name="P", handle=2, role="receiver", rcv_settle_mode="first",
                  target_address="/queues/q"),
            frame(7, 6, b, "flow", 3, handle=2, delivery_count=NEAR_WRAP, link_credit=credit,
                  next_incoming_id=NEAR_WRAP, incoming_window=broker_incoming_window, next_outgoing_id=0,
                  outgoing_window=100)]


def publish(packet: int, ms: float, j: int) -> dict:
    """The client's j-th (0-based) transfer on "P": delivery id and transfer id 2^32−2+j."""
    return frame(packet, ms, "c2s", "transfer", 0, handle=0, delivery_id=u32(NEAR_WRAP + j), delivery_tag=f"{j:02x}",
                 settled=False, more=False, continuation=False, payload_bytes=10, message_bytes=10)


def settle_all(packet: int, ms: float, n: int) -> dict:
    """The broker accepts the client's deliveries 0..n−1 with one range."""
    return frame(packet, ms, "s2c", "disposition", 3, role="receiver", first=NEAR_WRAP, last=u32(NEAR_WRAP + n - 1),
                 settled=True, state="accepted")


def alarm_publisher(before: int = 5, closed_ms: float = 200, after: int = 5, reopen: bool = True,
                    resume_ms: float = 0.5, end_ms: float | None = None, ignore_window: bool = False) -> list[dict]:
    """RabbitMQ 4 under a memory alarm: a publisher with plenty of credit (1000) sends `before`
    transfers 1 ms apart from 10 ms; at 20 ms the broker's session flow sets its incoming-window to
    0 (next-incoming-id: the client's next id, 2^32−2+before): the window closes. With `reopen`,
    at 20+`closed_ms` ms the broker's flow sets it to 100 again and the client sends `after` more
    transfers from `resume_ms` after it, 1 ms apart; then the broker settles all in one range, and
    the client closes at `end_ms` (default: 5 ms after the last frame). `ignore_window`: the client
    sends one transfer while the window is 0, 150 ms after the close (longer than a transfer in
    flight when the flow was written could take: PROMPT_S), a window violation, not a wait."""
    rows = publisher_opening()
    p = 8
    for j in range(before):
        rows.append(publish(p, 10 + j, j))
        p += 1
    rows.append(frame(p, 20, "s2c", "flow", 3, next_incoming_id=u32(NEAR_WRAP + before), incoming_window=0,
                      next_outgoing_id=0, outgoing_window=100))
    p += 1
    sent = before
    if ignore_window:
        rows.append(publish(p, 170, sent))
        p, sent = p + 1, sent + 1
    t = 20.0
    if reopen:
        t = 20 + closed_ms
        rows.append(frame(p, t, "s2c", "flow", 3, next_incoming_id=u32(NEAR_WRAP + sent), incoming_window=100,
                          next_outgoing_id=0, outgoing_window=100))
        p += 1
        for j in range(after):
            t = 20 + closed_ms + resume_ms + j
            rows.append(publish(p, t, sent + j))
            p += 1
        sent += after
    rows.append(settle_all(p, t + 1, sent))
    rows.append(frame(p + 1, end_ms if end_ms is not None else t + 5, "c2s", "close", 0))
    return rows


def window_bound_consumer(rounds: int = 3, window: int = 3, closed_ms: float = 50) -> list[dict]:
    """A client whose session incoming-window is `window` and only widened after it ran out: its
    receiver "C" grants credit 1000; per round r (0-based) the broker sends `window` transfers
    0.1 ms apart from t_r = 10 + r·(closed_ms + 10) ms (the last one takes the last room: window
    0), the client settles them at t_r + 1 and, `closed_ms` after the round's first transfer, its
    flow moves next-incoming-id past them and sets incoming-window `window` again; the broker's
    next round starts 10 ms after that flow (t_{r+1} = t_r + closed_ms + 10); after the last round's
    flow the broker sends nothing more, and the client closes at t_rounds + 5."""
    c, b = "c2s", "s2c"
    rows = [frame(1, 0, c, "open", container_id="app"), frame(2, 1, b, "open", container_id="rabbit"),
            frame(3, 2, c, "begin", 0, next_outgoing_id=0, incoming_window=window, outgoing_window=100),
            frame(4, 3, b, "begin", 3, remote_channel=0, next_outgoing_id=NEAR_WRAP, incoming_window=100,
                  outgoing_window=100),
            frame(5, 4, c, "attach", 0, name="C", handle=0, role="receiver", rcv_settle_mode="first",
                  source_address="/queues/q"),
            frame(6, 5, b, "attach", 3, name="C", handle=0, role="sender", snd_settle_mode="unsettled",
                  initial_delivery_count=NEAR_WRAP, source_address="/queues/q"),
            frame(7, 6, c, "flow", 0, handle=0, delivery_count=NEAR_WRAP, link_credit=1000,
                  next_incoming_id=NEAR_WRAP, incoming_window=window, next_outgoing_id=0, outgoing_window=100)]
    p, sent = 8, 0
    for r in range(rounds):
        t = 10 + r * (closed_ms + 10)
        for j in range(window):
            rows.append(frame(p, t + 0.1 * j, b, "transfer", 3, handle=0, delivery_id=u32(NEAR_WRAP + sent + j),
                              settled=False, more=False, continuation=False, payload_bytes=10, message_bytes=10,
                              first_acquirer=True))
            p += 1
        rows.append(frame(p, t + 1, c, "disposition", 0, role="receiver", first=u32(NEAR_WRAP + sent),
                          last=u32(NEAR_WRAP + sent + window - 1), settled=True, state="accepted"))
        sent += window
        rows.append(frame(p + 1, t + closed_ms, c, "flow", 0, next_incoming_id=u32(NEAR_WRAP + sent),
                          incoming_window=window, next_outgoing_id=0, outgoing_window=100))
        p += 2
    rows.append(frame(p, 10 + rounds * (closed_ms + 10) + 5, c, "close", 0))
    return rows


def credit_waiting_publisher(rounds: int = 4, per_grant: int = 2, resume_ms: float = 0.2,
                             alarm: bool = False) -> list[dict]:
    """A publisher that has more to send than its credit: sender "P" (publisher_opening without
    its grant at attach, packets 1..6); per round r (0-based) at t_r = 10 + 10r
    ms the broker's flow grants `per_grant` credit (delivery-count 2^32−2 + per_grant·r), the client
    sends `per_grant` transfers from t_r + `resume_ms`, 0.2 ms apart (the last takes the last
    credit), the broker settles them at t_r + 2; after the last round one more grant at t_rounds
    that the client leaves unused (it had no more to send), then the client closes at t_rounds + 5.
    `alarm`: at t_r + 3 the broker's session flow also sets its incoming-window to 0, and each
    grant's flow sets it to 100 again: the closed window held the client over the same stretch as
    the spent credit (one cause to tell once)."""
    rows = publisher_opening(credit=0)[:-1]  # no grant at attach: the rounds grant
    p, sent = 7, 0
    for r in range(rounds + 1):
        t = 10 + 10 * r
        rows.append(frame(p, t, "s2c", "flow", 3, handle=2, delivery_count=u32(NEAR_WRAP + sent),
                          link_credit=per_grant, next_incoming_id=u32(NEAR_WRAP + sent), incoming_window=100,
                          next_outgoing_id=0, outgoing_window=100))
        p += 1
        if r == rounds:
            break
        for j in range(per_grant):
            rows.append(publish(p, t + resume_ms + 0.2 * j, sent + j))
            p += 1
        rows.append(frame(p, t + 2, "s2c", "disposition", 3, role="receiver", first=u32(NEAR_WRAP + sent),
                          last=u32(NEAR_WRAP + sent + per_grant - 1), settled=True, state="accepted"))
        p += 1
        sent += per_grant
        if alarm:
            rows.append(frame(p, t + 3, "s2c", "flow", 3, next_incoming_id=u32(NEAR_WRAP + sent), incoming_window=0,
                              next_outgoing_id=0, outgoing_window=100))
            p += 1
    rows.append(frame(p, 10 + 10 * rounds + 5, "c2s", "close", 0))
    return rows


def frames(rows: list[dict]) -> pd.DataFrame:
    return table(rows)
