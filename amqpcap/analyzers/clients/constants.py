"""The numbers and names the clients analyzer decides by, in one place: the findings' thresholds, the
methods counted per connection, the round trips timed, the display filters a finding cites, the
table's columns (docs/analyzers/clients.md).
"""

from __future__ import annotations


#: polling-basic-get: a connection that sends at least this many basic.get polls in a loop
#: (a few gets, e.g. a script fetching one message, are not polling)
POLLING_MIN_GETS = 20
#: ... warning when at least this share of its gets find the queue empty (a round trip for
#: nothing each), or when it gets at least POLLING_WARN_GETS_PER_S (one round trip per message
#: where a consumer with a prefetch window would have them pushed); info otherwise
POLLING_EMPTY_SHARE = 0.2
POLLING_WARN_GETS_PER_S = 10.0
#: transactions: a connection that commits at least this many transactions ...
TX_MIN_COMMITS = 10
#: ... warning when its transactions hold at most this many publishes each on average (a
#: synchronous commit round trip every few messages); info for larger batches
TX_SMALL_BATCH = 10
#: unroutable-messages: a connection whose mandatory publishes came back (basic.return) at least
#: once is told (info); warning from this many returns making at least UNROUTABLE_WARN_SHARE of
#: its publishes (a misrouted publisher, not a rare mandatory check failing)
UNROUTABLE_WARN_RETURNS = 10
UNROUTABLE_WARN_SHARE = 0.01
#: connection-churn: an application (connections sharing a connection_name, else client library,
#: user and client address) with at least this many connections opened and closed in the
#: capture ...
CHURN_MIN_CONNECTIONS = 10
#: ... that lived this long or less (median): a pool recycling connections every minute is not churn
CHURN_MAX_LIFETIME_S = 10.0
#: warning when its connections carry this many messages or fewer (median: a connection per
#: message or few) or it opens CHURN_WARN_OPENS_PER_S or more in some second (RabbitMQ's
#: Connections guide: churn consistently above 100/s needs investigating); info otherwise
CHURN_FEW_MESSAGES = 10
CHURN_WARN_OPENS_PER_S = 100
#: publish-and-wait: a channel in confirm mode with at least this many confirmed publishes ...
PUBLISH_WAIT_MIN = 20
#: ... nearly each published after the previous one was confirmed (this share of them) ...
PUBLISH_WAIT_SEQUENTIAL = 0.9
#: ... spending at least this share of its publishing time waiting for confirms: its rate is
#: then set by the confirm round trip (a publisher rate-limited far below it waits little and is
#: not told)
PUBLISH_WAIT_SHARE = 0.5
#: channel-churn: a connection that opens at least this many channels ...
CHANNEL_CHURN_MIN = 20
#: ... carrying this many messages or fewer each (published, delivered and got over channels
#: opened: a channel per operation, each costing a channel.open round trip) ...
CHANNEL_FEW_MESSAGES = 2
#: ... or opening this many in some second (RabbitMQ's Channels guide: churn consistently above
#: 100/s needs investigating)
CHANNEL_WARN_OPENS_PER_S = 100
#: ... or, a channel leak (channels opened and never closed), when its open channels reached this
#: share of the negotiated channel_max: the next channel.open past it fails (RabbitMQ closes the
#: connection: NOT_ALLOWED (530)). RabbitMQ's Channels guide names the leak; 2047 is its default
CHANNEL_LEAK_SHARE = 0.8
#: AMQP 0-9-1 §1.4.2.6 connection.tune: channel-max 0 means no limit but the 16-bit channel number
NO_CHANNEL_MAX = 65535
#: example packets a finding cites per connection and method
EXAMPLE_PACKETS = 5
#: connections listed in summary.json (`clients.by_connection`), busiest first; the table has all
SUMMARY_CONNECTIONS = 50
#: what summary.json lists of each connection
SUMMARY_COLUMNS = ("connection", "stream", "client", "user", "duration_s", "publishes", "publish_rate_per_s", "returns",
                   "deliveries", "delivered_msgs_per_s", "gets", "get_rate_per_s", "get_empty_share", "acks",
                   "confirm_selects", "tx_commits", "publishes_per_commit")

#: (column, method, direction) counted per connection
COUNTED = (
    ("publishes", "basic.publish", "c2s"),
    ("returns", "basic.return", "s2c"),
    ("deliveries", "basic.deliver", "s2c"),
    ("gets", "basic.get", "c2s"),
    ("gets_ok", "basic.get-ok", "s2c"),
    ("gets_empty", "basic.get-empty", "s2c"),
    ("acks", "basic.ack", "c2s"),
    ("consumes", "basic.consume", "c2s"),
    ("cancelled_by_broker", "basic.cancel", "s2c"),
    ("confirm_selects", "confirm.select", "c2s"),
    ("tx_selects", "tx.select", "c2s"),
    ("tx_commits", "tx.commit", "c2s"),
    ("tx_rollbacks", "tx.rollback", "c2s"),
    ("channels_opened", "channel.open", "c2s"),
    ("connection_opens", "connection.open", "c2s"),
    ("connection_close_oks", "connection.close-ok", None),
)
#: a synchronous request and its replies (AMQP 0-9-1 §2.3.4: at most one outstanding per channel)
ROUND_TRIPS = {"get": ("basic.get", ("basic.get-ok", "basic.get-empty")),
               "commit": ("tx.commit", ("tx.commit-ok",)),
               "channel_open": ("channel.open", ("channel.open-ok",))}
FILTER_GET = "amqp.method.class == 60 && amqp.method.method in {70, 71, 72}"
FILTER_TX = "amqp.method.class == 90"
FILTER_RETURN = "amqp.method.class == 60 && amqp.method.method == 50"
FILTER_CANCEL = "amqp.method.class == 60 && amqp.method.method in {30, 31}"
FILTER_OPEN = "amqp.method.class == 10 && amqp.method.method == 40"
FILTER_CONFIRM = "amqp.method.class == 60 && amqp.method.method in {40, 80, 120}"
FILTER_CHANNEL_OPEN = "amqp.method.class == 20 && amqp.method.method in {10, 11}"
#: the columns that name a connection (`amqpcap.derive.names.connection_names`), added in the merge: a
#: label shared by two connections is told apart by their stream numbers, which only the whole
#: capture's connections show
NAMED = ("connection", "application", "client", "user", "vhost")
COLUMNS = ["connection", "stream", "application", "client", "user", "vhost", "first_ts", "duration_s",
           *(c for c, _, _ in COUNTED), "publishes_in_tx", "publish_rate_per_s", "delivered_msgs_per_s",
           "get_rate_per_s", "get_empty_share", "get_round_trip_p50_s", "publishes_per_commit",
           "commit_round_trip_p50_s", "channel_open_round_trip_p50_s", "channel_opens_per_s_peak",
           "channels_open_peak", "channel_max"]


#: the methods (and direction) a finding cites the first EXAMPLE_PACKETS packets of, per connection
EXAMPLES = (("basic.get", "c2s"), ("tx.commit", "c2s"), ("channel.open", "c2s"), ("basic.return", "s2c"))
#: a destination of publishes and returns
DESTINATION = ["stream", "exchange", "routing_key"]
