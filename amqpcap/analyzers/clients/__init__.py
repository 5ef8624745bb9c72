"""clients: what each connection does (publishes, consumes, gets, transactions, confirms) and at
what rates, named as the operator knows it; and the client habits RabbitMQ's documentation
warns about, named from the wire (issue 14): polling with basic.get, a transaction per message,
mandatory publishes that no queue takes, consumers the broker cancels, a connection per few messages,
a publisher that waits for each confirm before the next publish, a channel per message.

Everything here is per connection: the step counts its rows' connections' methods, the finish
joins the partitions' rows and derives the findings from them. The step runs over slices of a
partition's time (`clients_slice`, docs/time-split.md §2.5): what the rows need of the frames
before a slice is carried to it (`_Seen`), what a slice tells is joined with the other slices'
when all are done (`clients_join`); a whole partition is its own one slice.

The modules, one question each: `constants` (thresholds, counted methods, filters, columns),
`state` (what a slice carries and tells), `requests` (round trips, answers), `publishes`
(counts, destinations, returns, confirms), `channels` (channels, cancelled consumers), `step`
(the step over a partition or a slice of it), `findings`, and `analyzer` (the analyzer: `Clients`).
"""

from .analyzer import Clients
from .constants import COLUMNS

__all__ = ["COLUMNS", "Clients"]
