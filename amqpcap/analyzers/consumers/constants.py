"""The consumers analyzer's thresholds, in one place: when a consumer is prefetch-one, consumer-bound
or unlimited, how severe, and how many examples a finding cites (docs/analyzers/consumers.md).
"""

#: prefetch-one: a consumer at prefetch 1 receiving at least this rate (msg/s). Each message then
#: costs a full deliver→ack→deliver round trip; below a few messages per second nobody notices.
PREFETCH_ONE_MIN_RATE_PER_S = 10.0
#: ... "one ack per message": at least this share of its settled deliveries were settled one per
#: ack frame (with multiple=1 acks the per-message cost is shared)
ONE_ACK_PER_MESSAGE_SHARE = 0.9
#: ... warning (not info) when the consumer is also held at its limit at least this share of time:
#: then prefetch 1 is what limits its throughput, not just a cost
PREFETCH_ONE_WARNING_SHARE_AT_LIMIT = 0.5
#: consumer-bound: at its prefetch limit at least this share of its time (the broker could not
#: send it more for most of the capture)...
CONSUMER_BOUND_SHARE = 0.5
#: ... and its deliver→ack median at least this multiple of the channel's ack→next-deliver median
#: (the consumer's processing, not the broker's refill, takes most of each cycle)
CONSUMER_DOMINANCE = 2.0
#: ... critical when its queue's backlog (lower bound) grew during the consumer's life by at least
#: BACKLOG_GROWTH_MSGS messages and at least BACKLOG_GROWTH_RATIO times as fast as all the queue's
#: consumers took messages (growth / life over their summed delivery rates): the publishers
#: outpace the consumers by that much, the queue only grows. A ratio, not a share of time at the
#: limit, so that a queue growing faster is never less severe (ten-consumers.pcap: 5,275 messages
#: in 3 s against 1,280 msg/s consumed, ratio 1.4; slow-prefetch1.pcap: 152 against 150 msg/s, 0.33)
BACKLOG_GROWTH_MSGS = 100
BACKLOG_GROWTH_RATIO = 0.1
#: unlimited-prefetch: a consumer without a prefetch limit (basic.qos prefetch_count 0, or no
#: basic.qos before its basic.consume: RabbitMQ's default; or no-ack) has fallen behind when its
#: unacked messages reached this many: over three times the 100-300 RabbitMQ's "Consumer
#: Prefetch" guide finds usually optimal, all held in the client's memory ...
UNLIMITED_UNACKED = 1000
#: ... or when its connection advertised a zero TCP receive window while it received deliveries
#: (the broker had pushed more than the client read; for a no-ack consumer the only sign on the
#: wire): TCP flag bits that make a zero window not a window (docs/tables.md, `flags`)
NOT_A_WINDOW = 0x01 | 0x02 | 0x04  # FIN, SYN, RST
#: findings need at least this many deliveries to the consumer (fewer is anecdotal)
MIN_DELIVERIES = 50
#: a finding's example packets (frames where a consumer reached its limit, 5 each) come from this
#: many of its subjects, the worst first: a way into Wireshark, not an inventory
EXAMPLE_SUBJECTS = 4
