"""consumers: unacked messages, prefetch and the broker's unused credit (deficit) per consumer.

A consumer is (stream, channel, consumer tag) on one opening of the channel. Its unacked count
rises with each basic.deliver and falls when the client's ack/nack/reject settles a delivery.
RabbitMQ sends a consumer a message only while its unacked count is below its prefetch
(basic.qos prefetch_count; global=false: per consumer, applying to consumers started after the
qos on that channel; global=true: shared by all consumers of the channel).
``deficit = prefetch − unacked`` is the credit the broker holds for the consumer and has not used.
The credit series itself is derived in ``amqpcap.derive.consumers`` (the stalls analyzer reads it
too); this module summarises it per consumer and tells the findings.

The modules, one question each: `constants` (thresholds), `listing` (every consumer, cheaply),
`step` (the step over a partition or a slice of its time), `summary` (a row per consumer),
`findings` (who each finding is about, how severe, the frames at a consumer's limit that show it,
the findings), `plots`, and `analyzer` (the analyzer: `Consumers`).
"""

from .analyzer import Consumers, consumer_summary
from .findings import consumer_bound_severity, prefetch_one_severity
from .listing import consumer_list

__all__ = ["Consumers", "consumer_bound_severity", "consumer_list", "consumer_summary", "prefetch_one_severity"]
