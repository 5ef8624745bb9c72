"""What the analyzers derive from a capture's tables and share, each computed once per capture.

One module per question, each a function of a Capture kept by `derivation` (the one cache,
`cache.py`), with its scope: whether a capture holding only some connections is enough for it
(``CONNECTION``) or it relates connections to each other (``CAPTURE``).

- methods: the method frames, each with its tag space (stream, channel, epoch). CONNECTION.
- deliveries: deliveries matched with the frames that settled them, the consumes they came from,
  publishes with their confirms. CONNECTION.
- acked: the messages a basic.ack settled (deliveries, confirmed publishes), at the ack's time:
  the one count of "acked" (the tally's, the throughput table's). Kept nowhere.
- consumers: the acknowledging consumers and their credit over time (unacked, prefetch,
  deficit). CONNECTION.
- backlog: the messages known to wait in each consumed queue over time. CAPTURE.
- refills: per ack, the broker's next delivery; the channels it refills slowly. CAPTURE.
- stream_order: the packets' TCP columns in (stream, packet) order. CONNECTION.
- columns, labels: whole-column tools and labels, kept nowhere.
- rates: messages per second, each named by its span (per second active, per second of the
  capture): the one definition every table, finding and the overview reads. Kept nowhere.
- `amqpcap.derive.names.connection_names` (CAPTURE: a label shared by connections is told apart by
  stream) and `connection_roles` (CONNECTION) are derivations too.

Analyzers (amqpcap/analyzers) import from here, never from each other (tests/derive/test_derive.py).
"""

from .cache import CAPTURE, CONNECTION, derivation

__all__ = ["CAPTURE", "CONNECTION", "derivation"]
