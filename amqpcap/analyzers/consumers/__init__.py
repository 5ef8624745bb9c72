"""consumers: unacked messages, prefetch and the broker's unused credit (deficit) per consumer.

What a consumer, its unacked count, prefetch and deficit are, and their series over time, is
derived in ``amqpcap.derive.consumers`` (the stalls analyzer reads it too); this package
summarises it per consumer and tells the findings.

The modules, one question each: `constants` (thresholds), `listing` (every consumer, cheaply),
`step` (the step over a partition or a slice of its time), `summary` (a row per consumer),
`findings` (who each finding is about, how severe, the frames at a consumer's limit that show it,
the findings), `plots`, and `analyzer` (the analyzer: `Consumers`).
"""

from .analyzer import Consumers, consumer_summary
from .findings import consumer_bound_severity, prefetch_one_severity
from .listing import consumer_list

__all__ = ["Consumers", "consumer_bound_severity", "consumer_list", "consumer_summary", "prefetch_one_severity"]
