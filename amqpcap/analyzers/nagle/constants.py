"""The numbers the nagle analyzer decides by, in one place: what a small segment is, when writes could
have been one, what a delayed-ACK stall is, when a finding is told and how severe
(docs/analyzers/nagle.md).
"""

from __future__ import annotations


# ----------------------------------------------------------------------------------- definitions

#: A data segment is "small" when its payload is below this share of the MSS: far from full,
#: so packets (syscalls, wake-ups, headers) are spent on little data.
SMALL_MSS_FRACTION = 0.25
#: Without an MSS option in the capture (no SYN seen), "small" means below the minimum MSS
#: every IPv4 host must accept (RFC 1122): such a segment is small on any path.
SMALL_BYTES_UNKNOWN_MSS = 536
#: Without an MSS, coalesced segments are assumed to be limited by Ethernet's 1460-byte MSS.
MERGE_MSS_UNKNOWN_BYTES = 1460

#: Consecutive small segments of a direction could have been one write when they left within
#: this interval with no data from the peer in between (the application was not waiting for an
#: answer). 1 ms is far longer than the microseconds between writes of one batch, and far
#: shorter than any round trip an application would wait on between unrelated writes.
COALESCE_WINDOW_S = 0.001

#: Delayed-ACK stall: the peer's pure ACK of the previous (small, unacknowledged) segment came
#: this long after it. Linux delays an ACK at least 40 ms (TCP_DELACK_MIN), Windows and BSDs
#: up to 200 ms; the window brackets both with margin for timer granularity.
STALL_ACK_DELAY_MIN_S = 0.030
STALL_ACK_DELAY_MAX_S = 0.250
#: ... and the held segment left at most this long after that ACK: Nagle releases it as soon
#: as the ACK arrives (microseconds on the sender; one path delay when captured at the peer).
STALL_RELEASE_MAX_S = 0.010
#: A direction where more than this share of the small segments left while an earlier small
#: segment was unacknowledged (`small_while_unacked`) is not under Nagle: Nagle allows none
#: (RFC 896, RFC 1122 4.2.3.4; Linux checks the last small segment, Minshall's variant), so
#: it shows TCP_NODELAY and none of its segments is counted as held by Nagle. The margin
#: absorbs capture artefacts (an ACK the capture missed makes a segment look unacknowledged).
NAGLE_UNACKED_SHARE_MAX = 0.05

# ------------------------------------------------------------------------------------ thresholds

#: `small-packets` looks at avoidable packets: how many fewer data segments the direction would
#: need if the runs of small back-to-back segments had been written at once. A direction is
#: reported when most of its segments are small, coalescing would remove a good share of them,
#: and the avoidable packets are both numerous and frequent:
SMALL_SHARE_MIN = 0.5
AVOIDABLE_SHARE_MIN = 0.25
AVOIDABLE_MIN_PACKETS = 200
#: Rates are over the direction's active span (first to last data segment), at least
#: RATE_MIN_SPAN_S, so a burst of a hundred packets in 30 ms is not a "high rate".
RATE_MIN_SPAN_S = 1.0
#: Severity grows with the worst direction's avoidable packets per second, and only with it.
#: Each avoidable packet costs a send system call at the client, a wake-up and a read at the
#: broker (one more pass of its connection reader) and ~66 bytes of headers: of the order of
#: 10 µs of CPU at the two ends together. `info` from 200/s (a fraction of a percent of a core:
#: worth knowing, not a fault); `warning` from 1 000/s (about 1 % of a core per connection, and
#: hundreds of connections like it add up); `critical` from 10 000/s, where the per-packet cost
#: (about a tenth of a core per connection) limits the connection's throughput.
AVOIDABLE_RATE_INFO = 200.0
AVOIDABLE_RATE_WARNING = 1_000.0
AVOIDABLE_RATE_CRITICAL = 10_000.0

#: What a small segment carries, from the AMQP frames it completes (`frames.packet`,
#: `amqp10_frames.packet`), so that the advice fits the cause; a direction is labelled by what
#: most of its small segments carry:
#: `ack` one basic.ack/nack/reject alone (a consumer acknowledging each message);
#: `message` whole messages (each content method with its header in the segment; AMQP 1.0: each
#: delivery begun in the segment ends in it: batching across messages would save packets);
#: `split` part of a message (a content method, header or body without the rest, or no complete
#: frame: one write per frame); `heartbeat` heartbeats only (AMQP 1.0: empty frames; tiny by
#: design, never reported); `other` anything else (other methods, several acks).
#: AMQP 1.0's own (Part 2 §2.7): `disposition` one disposition, alone or with flows (a receiver
#: settling each delivery on its own, the 1.0 twin of `ack`); `flow` flows only (link credit
#: granted or reported, a little at a time); `transfer-part` part of a delivery (a transfer
#: frame with `more`, or one continuing a delivery, without the delivery's last frame: the 1.0
#: twin of `split`).
CARRIES = ("ack", "message", "split", "heartbeat", "disposition", "flow", "transfer-part", "other")
ACK_METHODS = ("basic.ack", "basic.nack", "basic.reject")
CONTENT_METHODS = ("basic.publish", "basic.deliver", "basic.get-ok", "basic.return")

#: `nagle-delayed-ack`: repeated stalls (one may be chance) that cost a share of the
#: connection's time: warning from 2 %, critical from 20 % (every fifth second spent waiting
#: for a delayed ACK).
STALL_MIN_COUNT = 5
STALL_SHARE_WARNING = 0.02
STALL_SHARE_CRITICAL = 0.20

#: At most this many packet numbers in a finding's example list and frame-number filters.
EXAMPLE_PACKETS = 10
FILTER_PACKETS = 100
#: small-packets: connection directions its display filter names at most (one clause each)
FILTER_DIRECTIONS = 10

FLAG_FIN, FLAG_SYN, FLAG_RST, FLAG_ACK = 0x01, 0x02, 0x04, 0x10
