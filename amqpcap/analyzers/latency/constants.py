"""The latency analyzer's thresholds, and the most points a plot draws one by one
(docs/analyzers/latency.md).
"""

from __future__ import annotations


#: broker-slow-refill (detected by amqpcap.derive.refills.slow_refills) is critical when the median
#: ack→next-deliver is above this: a consumer at prefetch 1 then gets < 20 msg/s whatever it does
REFILL_CRITICAL_S = 0.050
#: redelivery-loop: at least this many redelivered deliveries or requeueing nack/reject...
REDELIVERY_MIN = 10
#: ... making at least this share of a channel's deliveries (a few redeliveries after a consumer
#: restart are normal; one in twenty bounced messages costs real broker and consumer work)
REDELIVERY_SHARE = 0.05
#: ... critical from this share (most of the traffic is the same messages going round)
REDELIVERY_CRITICAL_SHARE = 0.5
#: plots: raw points drawn below this count (percentile bands per time bin above it)
MAX_POINTS = 20_000
