"""RabbitMQ 4's AMQP 1.0 behaviours that the fixtures' broker (Debian's RabbitMQ 3.10 and its
`rabbitmq_amqp1_0` plugin) does not show, crafted as captures with crafting_amqp10.py.

What RabbitMQ 4 does, read from rabbitmq-server's deps/rabbit/src/rabbit_amqp_session.erl (tags
v4.0.0 and v4.1.0; module `rabbit_amqp_session`):

- `DEFAULT_MAX_LINK_CREDIT` 170: the link-credit granted to a publishing client, in the flow that
  follows the broker's attach (`handle_attach`, role sender). After each delivery the credit
  falls by one; when it is at most 170 div 2 = 85 and fewer than 170 deliveries await their
  queue confirms (`grant_link_credit/3`), `maybe_grant_link_credit` sends a flow with the link's
  current delivery-count and link-credit 170 again (also after confirms, in
  `send_delivery_state_changes`).
- `DEFAULT_MAX_INCOMING_WINDOW` 400: the broker's session incoming-window in its begin.
  `session_flow_control_received_transfer` takes one per transfer frame; when the window is at
  most 400 div 2 = 200 and no resource alarm is on, it sends a session flow (no handle) with the
  window back at 400. Every flow the session sends carries the session fields
  (`session_flow_fields`: next-incoming-id, incoming-window floored at 0, next-outgoing-id,
  outgoing-window `UINT_OUTGOING_WINDOW` = 2^32 − 1) as they are after that transfer.
- A memory or disk alarm (`handle_cast({conserve_resources, ...})`): a session flow with
  incoming-window 0, and the window may be overshot by `incoming_window_margin` = 400 transfers
  in flight; when the alarm clears, a flow with 400 and the margin back to 0. No top-up flows
  while the alarm is on.
- A transfer that takes the window below −margin: `protocol_error(?V_1_0_SESSION_ERROR_WINDOW_
  VIOLATION, "incoming window violation (tolerated excess tranfers: ~b)")` (sic), which
  `log_error_and_close_session` answers with an **end** carrying that error (not a detach: the
  session, not a link, is at fault). A flow whose next-incoming-id leads the broker's
  next-outgoing-id ends the session the same way.
- `INITIAL_OUTGOING_TRANSFER_ID` = `?UINT_MAX - 3` (the broker's begin next-outgoing-id) and
  `INITIAL_DELIVERY_COUNT` = `?UINT_MAX - 4` (its sending links' initial-delivery-count) in 4.0
  and 4.1 (4.2 starts both at 0: commits "Initialise outgoing transfer-id to 0", "Initialise
  delivery-count to 0"); `INITIAL_OUTGOING_DELIVERY_ID` 0. Dispositions to a publisher are
  ranges (`send_dispositions`, `serial_number:ranges/1`, which sorts in serial order), so a
  range may cross 0.
- RabbitMQ's own Erlang client (deps/amqp10_client/src/amqp10_client_session.erl, v4.1.0)
  starts its delivery-ids at `INITIAL_OUTGOING_DELIVERY_ID` = `?UINT_MAX`, its transfer ids at
  `INITIAL_OUTGOING_TRANSFER_ID` = `?UINT_MAX - 1` and its links' delivery-count at
  `INITIAL_DELIVERY_COUNT` = `?UINT_MAX - 2`: with it, the publishing side wraps at once too.

:class:`Rabbit4Session` is the broker's session accounting above, in Python, producing the frames
RabbitMQ 4 sends; :class:`Client` the client's. Each `*_capture` function writes one scenario's
capture and returns its path; the tests compute what to expect from the scenario's parameters
and the rules above, never from amqpcap.
"""

from __future__ import annotations

import crafting_amqp10 as a

UINT_MAX = a.UINT_MAX
# rabbit_amqp_session (v4.0.0, v4.1.0)
MAX_LINK_CREDIT = 170  # DEFAULT_MAX_LINK_CREDIT
MAX_INCOMING_WINDOW = 400  # DEFAULT_MAX_INCOMING_WINDOW
BROKER_INITIAL_TRANSFER_ID = UINT_MAX - 3  # INITIAL_OUTGOING_TRANSFER_ID
BROKER_INITIAL_DELIVERY_COUNT = UINT_MAX - 4  # INITIAL_DELIVERY_COUNT
BROKER_INITIAL_DELIVERY_ID = 0  # INITIAL_OUTGOING_DELIVERY_ID
HANDLE_MAX = 255  # link_max_per_session 256 (deps/rabbit/Makefile) − 1
WINDOW_VIOLATION = "amqp:session:window-violation"
# amqp10_client_session (v4.1.0)
CLIENT_INITIAL_DELIVERY_ID = UINT_MAX  # INITIAL_OUTGOING_DELIVERY_ID
CLIENT_INITIAL_TRANSFER_ID = UINT_MAX - 1  # INITIAL_OUTGOING_TRANSFER_ID
CLIENT_INITIAL_DELIVERY_COUNT = UINT_MAX - 2  # INITIAL_DELIVERY_COUNT

CLIENT_CH, BROKER_CH = 0, 0  # RabbitMQ answers on the client's channel number (cfg.channel_num)
QUEUE = "/queues/q"


def u32(n: int) -> int:
    return n % 2**32


def ranges(ids: list[int]) -> list[tuple[int, int]]:
    """serial_number:ranges/1: contiguous runs in serial order (ids here are given in order)."""
    out: list[list[int]] = []
    for i in ids:
        if out and u32(out[-1][1] + 1) == i:
            out[-1][1] = i
        else:
            out.append([i, i])
    return [(f, l) for f, l in out]


class Rabbit4Session:
    """The broker end of one session as rabbit_amqp_session keeps it (see the module docstring)."""

    def __init__(self, client_next_outgoing_id: int, alarm: bool = False):
        self.next_incoming_id = client_next_outgoing_id
        self.incoming_window = 0 if alarm else MAX_INCOMING_WINDOW
        self.margin = 0
        self.alarm = alarm
        self.next_outgoing_id = BROKER_INITIAL_TRANSFER_ID
        self.next_delivery_id = BROKER_INITIAL_DELIVERY_ID
        self.links: dict[int, dict] = {}  # incoming (publishing) links by handle
        self.ended = False

    def session_fields(self) -> dict:
        return dict(next_incoming_id=self.next_incoming_id, incoming_window=max(0, self.incoming_window),
                    next_outgoing_id=self.next_outgoing_id, outgoing_window=UINT_MAX)

    def begin(self) -> a.Frame:
        return a.begin(BROKER_CH, remote_channel=CLIENT_CH, next_outgoing_id=self.next_outgoing_id,
                       incoming_window=self.incoming_window, outgoing_window=UINT_MAX, handle_max=HANDLE_MAX)

    def attach_publisher(self, name: str, handle: int, initial_delivery_count: int) -> list[a.Frame]:
        """handle_attach for a client sender: the attach answer and a flow granting 170."""
        self.links[handle] = {"delivery_count": initial_delivery_count, "credit": MAX_LINK_CREDIT, "unconfirmed": []}
        return [a.attach(BROKER_CH, name=name, handle=handle, role="receiver", snd_settle_mode="unsettled",
                         rcv_settle_mode="first", source="client", target=QUEUE, max_message_size=16777216),
                a.flow(BROKER_CH, **self.session_fields(), handle=handle, delivery_count=initial_delivery_count,
                       link_credit=MAX_LINK_CREDIT)]

    def attach_consumer(self, name: str, handle: int) -> a.Frame:
        """handle_attach for a client receiver: the broker is the sender."""
        return a.attach(BROKER_CH, name=name, handle=handle, role="sender", snd_settle_mode="unsettled",
                        rcv_settle_mode="first", source=QUEUE, target="client",
                        initial_delivery_count=BROKER_INITIAL_DELIVERY_COUNT)

    def _grant(self, handle: int) -> list[a.Frame]:
        """maybe_grant_link_credit: credit ≤ 85 and fewer than 170 unconfirmed → 170 again."""
        link = self.links[handle]
        if link["credit"] <= MAX_LINK_CREDIT // 2 and len(link["unconfirmed"]) < MAX_LINK_CREDIT:
            link["credit"] = MAX_LINK_CREDIT
            return [a.flow(BROKER_CH, **self.session_fields(), handle=handle, delivery_count=link["delivery_count"],
                           link_credit=MAX_LINK_CREDIT)]
        return []

    def received_transfer(self, handle: int, delivery_id: int | None, settled: bool, more: bool) -> list[a.Frame]:
        """handle_frame(transfer): the session accounting first (a window violation ends the
        session), then the link's (credit on a delivery's last frame), then the replies: the
        link's flow before the session's, all with the session fields after this transfer."""
        w = self.incoming_window - 1
        if w < -self.margin:
            self.ended = True
            return [a.end(BROKER_CH, error=a.error(
                WINDOW_VIOLATION, f"incoming window violation (tolerated excess tranfers: {self.margin})"))]
        self.next_incoming_id = u32(self.next_incoming_id + 1)
        top_up = w <= MAX_INCOMING_WINDOW // 2 and not self.alarm
        self.incoming_window = MAX_INCOMING_WINDOW if top_up else w
        replies = []
        if not more:
            link = self.links[handle]
            link["delivery_count"] = u32(link["delivery_count"] + 1)
            link["credit"] -= 1
            if not settled:
                link["unconfirmed"].append(delivery_id)
            replies += self._grant(handle)
        if top_up:
            replies.append(a.flow(BROKER_CH, **self.session_fields()))
        return replies

    def received_flow(self, next_incoming_id: int | None) -> list[a.Frame]:
        """session_flow_control_received_flow: a next-incoming-id ahead of the broker's own
        next-outgoing-id (serial order) ends the session with window-violation."""
        ahead = next_incoming_id is not None and 0 < (next_incoming_id - self.next_outgoing_id) % 2**32 < 2**31
        if ahead:
            self.ended = True
            return [a.end(BROKER_CH, error=a.error(
                WINDOW_VIOLATION, f"next-incoming-id from FLOW ({next_incoming_id}) leads next-outgoing-id "
                                  f"({self.next_outgoing_id})"))]
        return []

    def confirm(self) -> list[a.Frame]:
        """send_delivery_state_changes: accepted dispositions as serial ranges of the confirmed
        ids, then credit flows for links now due one."""
        out, due = [], []
        for handle, link in self.links.items():
            for first, last in ranges(link["unconfirmed"]):
                out.append(a.disposition(BROKER_CH, role="receiver", first=first,
                                         last=None if first == last else last, settled=True,
                                         state=a.outcome("accepted")))
            link["unconfirmed"] = []
            due.append(handle)
        for handle in due:
            out += self._grant(handle)
        return out

    def conserve_resources(self, on: bool) -> a.Frame:
        """An alarm raised (window 0, margin 400) or cleared (window 400, margin 0): a session flow."""
        self.alarm = on
        self.incoming_window, self.margin = (0, MAX_INCOMING_WINDOW) if on else (MAX_INCOMING_WINDOW, 0)
        return a.flow(BROKER_CH, **self.session_fields())

    def send_delivery(self, handle: int, tag: bytes, payload: bytes) -> a.Frame:
        """An outgoing transfer to a consuming client: the next delivery-id and transfer id."""
        # mc_amqp (v4.1.0) writes first-acquirer true and delivery-count 0 on a first delivery
        f = a.transfer(BROKER_CH, a.message(a.header(durable=True, first_acquirer=True, delivery_count=0),
                                            a.data(payload)), handle=handle,
                       delivery_id=self.next_delivery_id, delivery_tag=tag, message_format=0, settled=False)
        self.next_delivery_id = u32(self.next_delivery_id + 1)
        self.next_outgoing_id = u32(self.next_outgoing_id + 1)
        return f


class Client:
    """A publishing (and consuming) client's session: its transfer ids, delivery-ids, link counts."""

    def __init__(self, next_outgoing_id: int, first_delivery_id: int, incoming_window: int = 200):
        self.next_outgoing_id = next_outgoing_id
        self.next_delivery_id = first_delivery_id
        self.incoming_window = incoming_window
        self.delivery_count: dict[int, int] = {}

    def begin(self) -> a.Frame:
        return a.begin(CLIENT_CH, next_outgoing_id=self.next_outgoing_id, incoming_window=self.incoming_window,
                       outgoing_window=UINT_MAX)

    def attach_sender(self, name: str, handle: int, initial_delivery_count: int) -> a.Frame:
        self.delivery_count[handle] = initial_delivery_count
        return a.attach(CLIENT_CH, name=name, handle=handle, role="sender", snd_settle_mode="unsettled",
                        rcv_settle_mode="first", source="client", target=QUEUE,
                        initial_delivery_count=initial_delivery_count)

    def publish(self, handle: int, body: bytes, frames: int = 1) -> list[tuple[a.Frame, int, bool]]:
        """One message as `frames` transfer frames (the first with the delivery-id and tag, the
        rest continuations): [(frame, delivery_id, more)]."""
        did = self.next_delivery_id
        payload = a.message(a.header(durable=True), a.data(body))
        step = -(-len(payload) // frames)
        out = []
        for k in range(frames):
            more = k < frames - 1
            first = k == 0
            f = a.transfer(CLIENT_CH, payload[k * step:(k + 1) * step], handle=handle,
                           delivery_id=did if first else None, delivery_tag=did.to_bytes(4, "big") if first else None,
                           message_format=0 if first else None, settled=False if first else None, more=more)
            self.next_outgoing_id = u32(self.next_outgoing_id + 1)
            out.append((f, did, more))
        self.next_delivery_id = u32(did + 1)
        self.delivery_count[handle] = u32(self.delivery_count[handle] + 1)
        return out


def opening(conv: a.Conversation, client: Client, broker: Rabbit4Session) -> None:
    """SASL PLAIN, the opens (RabbitMQ 4's: frame_max 131072, idle-time-out half its 60 s
    heartbeat), the client's begin and the broker's."""
    a.sasl_plain_opening(conv)
    conv.send("c2s", a.open_(container_id="crafted-client", hostname="vhost:/"))
    conv.send("s2c", a.open_(container_id="rabbit@crafted", max_frame_size=131072, channel_max=2047,
                             idle_time_out=30_000))
    conv.send("c2s", client.begin())
    conv.send("s2c", broker.begin())


def closing(conv: a.Conversation, end_client: bool = True) -> None:
    if end_client:
        conv.send("c2s", a.end(CLIENT_CH))
        conv.send("s2c", a.end(BROKER_CH))
    conv.send("c2s", a.close())
    conv.send("s2c", a.close())
    conv.close()


def _publish(conv, client, broker, messages: int, frames_per_message: int = 1, lag: int = 0, confirm_every: int = 10,
             step_ms: float = 1.0, stop_on_end: bool = True) -> int:
    """The client publishes `messages` on handle 0, one frame every `step_ms`; the broker's
    replies to a frame reach the capture `lag` client frames later (the client keeps sending
    while they are in flight); every `confirm_every` messages the broker confirms. Returns the
    frames sent."""
    pending: list[tuple[int, list[a.Frame]]] = []  # (client frame index it shows after, replies)
    sent = 0
    for m in range(messages):
        for f, did, more in client.publish(0, b"m%06d" % m, frames_per_message):
            conv.send("c2s", f)
            replies = broker.received_transfer(0, did, False, more)
            if replies:
                pending.append((sent + lag, replies))
            while pending and pending[0][0] <= sent:
                conv.send("s2c", *pending.pop(0)[1])
            sent += 1
            conv.at((conv.now_ns - conv.t0_ns) / 1e6 + step_ms)
            if broker.ended and stop_on_end:
                return sent
        if (m + 1) % confirm_every == 0 and not pending and broker.links[0]["unconfirmed"]:
            conv.send("s2c", *broker.confirm())
    for _, replies in pending:
        conv.send("s2c", *replies)
    tail = broker.confirm()
    if tail:
        conv.send("s2c", *tail)
    return sent


def _publisher(path, messages: int, frames_per_message: int, lag: int, confirm_every: int) -> str:
    conv = a.Conversation()
    client = Client(CLIENT_INITIAL_TRANSFER_ID, CLIENT_INITIAL_DELIVERY_ID)
    broker = Rabbit4Session(client.next_outgoing_id)
    opening(conv, client, broker)
    conv.send("c2s", client.attach_sender("pub", 0, CLIENT_INITIAL_DELIVERY_COUNT))
    conv.send("s2c", *broker.attach_publisher("pub", 0, CLIENT_INITIAL_DELIVERY_COUNT))
    _publish(conv, client, broker, messages, frames_per_message, lag, confirm_every)
    closing(conv)
    return conv.write(path)


# ---------------------------------------------------------------------------
# a. link-credit 170, topped up at 85
# ---------------------------------------------------------------------------

def credit_170_capture(path, messages: int = 300, lag: int = 2, confirm_every: int = 10) -> str:
    """A client publishing `messages` single-frame messages; RabbitMQ 4 grants link-credit 170 at
    attach and again each time the credit falls to 85 (after 85, 170, 255 ... deliveries), its
    flows reaching the capture `lag` deliveries after the one that triggered them."""
    return _publisher(path, messages, 1, lag, confirm_every)


# ---------------------------------------------------------------------------
# b. session incoming-window 400, topped up at 200
# ---------------------------------------------------------------------------

def window_400_capture(path, messages: int = 250, frames_per_message: int = 2, lag: int = 3,
                       confirm_every: int = 10) -> str:
    """A client publishing `messages` messages of `frames_per_message` transfer frames each: the
    broker's session window (400 frames) is topped up by a session flow each time 200 frames have
    arrived since it was last full, independently of the link credit (per message)."""
    return _publisher(path, messages, frames_per_message, lag, confirm_every)


# ---------------------------------------------------------------------------
# c. incoming-window 0 under an alarm (for the session-window-closed finding too)
# ---------------------------------------------------------------------------

def alarm_window_closed_capture(path, before: int = 30, after: int = 20, alarm_at_ms: float = 100.0,
                                alarm_s: float = 2.5, in_flight: int = 0) -> str:
    """A client publishing `before` messages (1 ms apart), then RabbitMQ 4 raises a memory alarm at
    `alarm_at_ms`: a session flow with incoming-window 0. The client has `after` more messages
    and link credit for them but stops, as the window says; `alarm_s` later the alarm clears (a
    flow with incoming-window 400) and it publishes them. The broker's window is 0 for exactly
    `alarm_s`; it confirms everything at the end. `in_flight` of the `after` messages were on
    their way when the alarm's flow was written (the capture, taken at the broker, shows them
    after it; RabbitMQ tolerates up to 400 such). (The capture a `session-window-closed` finding
    can be tested on.)"""
    conv = a.Conversation()
    client = Client(CLIENT_INITIAL_TRANSFER_ID, CLIENT_INITIAL_DELIVERY_ID)
    broker = Rabbit4Session(client.next_outgoing_id)
    opening(conv, client, broker)
    conv.send("c2s", client.attach_sender("pub", 0, CLIENT_INITIAL_DELIVERY_COUNT))
    conv.send("s2c", *broker.attach_publisher("pub", 0, CLIENT_INITIAL_DELIVERY_COUNT))
    conv.at(10)
    _publish(conv, client, broker, before, confirm_every=before + 1)
    conv.at(alarm_at_ms)
    conv.send("s2c", broker.conserve_resources(True))
    _publish(conv, client, broker, in_flight, confirm_every=after + 1, step_ms=0.01)
    conv.at(alarm_at_ms + alarm_s * 1000)
    conv.send("s2c", broker.conserve_resources(False))
    conv.at(alarm_at_ms + alarm_s * 1000 + 1)
    _publish(conv, client, broker, after - in_flight, confirm_every=after + 1)
    closing(conv)
    return conv.write(path)


# ---------------------------------------------------------------------------
# d. ids and counts near 2^32
# ---------------------------------------------------------------------------

def near_wrap_capture(path, published: int = 6, confirm_every: int = 3, consumed: int = 7,
                      consumer_credit: int = 10) -> str:
    """RabbitMQ 4.0/4.1 with RabbitMQ's Erlang client, both ways in one session. The client
    publishes `published` messages: delivery-ids from 2^32 − 1, transfer ids from 2^32 − 2, its
    link's delivery-count from 2^32 − 3; the broker confirms them in ranges of `confirm_every`,
    the first crossing 0 (2^32 − 1 .. confirm_every − 2). The client consumes `consumed` messages with link-credit
    `consumer_credit`: the broker's transfer ids from 2^32 − 4, its link's delivery-count from
    2^32 − 5 (delivery-ids from 0); the client accepts them in one range."""
    conv = a.Conversation()
    client = Client(CLIENT_INITIAL_TRANSFER_ID, CLIENT_INITIAL_DELIVERY_ID)
    broker = Rabbit4Session(client.next_outgoing_id)
    opening(conv, client, broker)
    conv.send("c2s", client.attach_sender("pub", 0, CLIENT_INITIAL_DELIVERY_COUNT))
    conv.send("s2c", *broker.attach_publisher("pub", 0, CLIENT_INITIAL_DELIVERY_COUNT))
    conv.at(10)
    _publish(conv, client, broker, published, confirm_every=confirm_every)
    conv.at(50)
    conv.send("c2s", a.attach(CLIENT_CH, name="sub", handle=1, role="receiver", snd_settle_mode="unsettled",
                              rcv_settle_mode="first", source=QUEUE, target="client"))
    conv.send("s2c", broker.attach_consumer("sub", 1))
    conv.send("c2s", a.flow(CLIENT_CH, next_incoming_id=broker.next_outgoing_id, incoming_window=client.incoming_window,
                            next_outgoing_id=client.next_outgoing_id, outgoing_window=UINT_MAX, handle=1,
                            delivery_count=BROKER_INITIAL_DELIVERY_COUNT, link_credit=consumer_credit))
    ids = []
    for i in range(consumed):
        conv.at(60 + i)
        ids.append(broker.next_delivery_id)
        conv.send("s2c", broker.send_delivery(1, bytes([i]), b"d%03d" % i))
    conv.at(70 + consumed)
    conv.send("c2s", a.disposition(CLIENT_CH, role="receiver", first=ids[0], last=ids[-1], settled=True,
                                   state=a.outcome("accepted")))
    closing(conv)
    return conv.write(path)


# ---------------------------------------------------------------------------
# e. a client beyond the window: RabbitMQ 4 ends the session with window-violation
# ---------------------------------------------------------------------------

def window_violation_capture(path, before: int = 10) -> str:
    """A client that ignores the session window: it publishes `before` messages, RabbitMQ 4 raises
    an alarm (incoming-window 0, tolerating `incoming_window_margin` = 400 transfers in flight),
    and the client keeps publishing; the 401st transfer beyond the window ends the session with
    amqp:session:window-violation. The client then closes the connection."""
    conv = a.Conversation()
    client = Client(CLIENT_INITIAL_TRANSFER_ID, CLIENT_INITIAL_DELIVERY_ID)
    broker = Rabbit4Session(client.next_outgoing_id)
    opening(conv, client, broker)
    conv.send("c2s", client.attach_sender("pub", 0, CLIENT_INITIAL_DELIVERY_COUNT))
    conv.send("s2c", *broker.attach_publisher("pub", 0, CLIENT_INITIAL_DELIVERY_COUNT))
    conv.at(10)
    _publish(conv, client, broker, before, confirm_every=5)
    conv.at(100)
    conv.send("s2c", broker.conserve_resources(True))
    conv.at(101)
    # the broker still confirms and grants credit during the alarm (queues confirm), so the
    # client is held by nothing but the window it ignores
    _publish(conv, client, broker, MAX_INCOMING_WINDOW + 10, confirm_every=5, step_ms=0.1)
    assert broker.ended
    conv.send("c2s", a.end(CLIENT_CH))
    closing(conv, end_client=False)
    return conv.write(path)


def flow_ahead_capture(path, next_incoming_id: int = 0) -> str:
    """A consuming client whose library counts the broker's transfer ids from `next_incoming_id`
    (0: as if the broker's begin had said 0) instead of RabbitMQ 4.0/4.1's 2^32 − 4: its first
    flow's next-incoming-id leads the broker's next-outgoing-id, and RabbitMQ ends the session
    with window-violation before sending anything."""
    conv = a.Conversation()
    client = Client(CLIENT_INITIAL_TRANSFER_ID, CLIENT_INITIAL_DELIVERY_ID)
    broker = Rabbit4Session(client.next_outgoing_id)
    opening(conv, client, broker)
    conv.send("c2s", a.attach(CLIENT_CH, name="sub", handle=0, role="receiver", snd_settle_mode="unsettled",
                              rcv_settle_mode="first", source=QUEUE, target="client"))
    conv.send("s2c", broker.attach_consumer("sub", 0))
    conv.at(5)
    conv.send("c2s", a.flow(CLIENT_CH, next_incoming_id=next_incoming_id, incoming_window=client.incoming_window,
                            next_outgoing_id=client.next_outgoing_id, outgoing_window=UINT_MAX, handle=0,
                            delivery_count=BROKER_INITIAL_DELIVERY_COUNT, link_credit=10))
    conv.send("s2c", *broker.received_flow(next_incoming_id))
    assert broker.ended
    conv.send("c2s", a.end(CLIENT_CH))
    closing(conv, end_client=False)
    return conv.write(path)
