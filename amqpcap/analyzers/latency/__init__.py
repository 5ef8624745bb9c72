"""latency: deliver→ack, ack→next-deliver, publish→confirm and deliver/ack interleaving.

Who is slow? deliver→ack is the consumer's time (work plus the way back); ack→next-deliver is the
broker's time to use the credit an ack freed ("assigning blame": a healthy consumer connection
interleaves deliveries and acks, a starved one shows long runs of acks with no delivery between).

The modules, one question each: `constants` (thresholds), `numbers` (the summary's numbers),
`interleaving` (deliver/ack runs per channel), `per_consumer` (each consumer's latencies),
`channels` (the rows the findings come from), `step` (the step over a partition or a slice of
its time), `findings`, `plots`, and `analyzer` (the analyzer: `Latency`).
"""

from .analyzer import Latency
from .channels import redelivery_severity, refill_severity
from .interleaving import interleaving
from .numbers import stats
from .per_consumer import consumer_latency

__all__ = ["Latency", "consumer_latency", "interleaving", "redelivery_severity", "refill_severity", "stats"]
