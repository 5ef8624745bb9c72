"""The numbers the stalls analyzer decides by, in one place: what a stall is, when a finding is told and how
severe, the causes in the order they are tried, the tables' columns and the plots' limits
(docs/analyzers/stalls.md).
"""

from __future__ import annotations

import numpy as np


# --- stall detection thresholds -------------------------------------------------------------
#: A silence shorter than this is never a stall: below ~50 ms users do not notice, and Linux's
#: 40 ms delayed ACK alone produces silences up to that length (the nagle analyzer's subject).
MIN_STALL_S = 0.050
#: ... and it must be this many times the direction's median gap between new-data segments,
#: so a direction that normally talks every 200 ms (a slow, steady publisher, heartbeats) is not
#: "stalled" each time it pauses as usual.
GAP_FACTOR = 10.0
#: ... and this many path round trips: a silence of a couple of RTTs is one request/response
#: exchange on a long path, not a stall.
RTT_FACTOR = 4.0
#: Two copies of one segment (same seq and length) closer than this are the capture seeing the
#: packet twice (several interfaces), not a retransmission: TCP cannot detect a loss that fast
#: (Linux's minimum RTO is 200 ms; fast retransmit waits for three duplicate ACKs).
DUPLICATE_S = 0.001
#: A state (window full, blocked, at prefetch, confirms outstanding) is the cause of a stall only
#: when it held for at least this share of the stall: a stall is blamed on what kept the
#: direction silent for most of it, not on a coincidence at one end.
CAUSE_SHARE = 0.5

#: Causes, in the order they are checked (the first that holds wins).
CAUSES = (
    "capture-gap",  # the capture lost bytes of this connection inside the interval: unknowable
    "receiver-window",  # peer advertised a zero window, or bytes in flight filled its window
    "retransmission",  # segments of this direction were retransmitted inside it: TCP loss recovery
    "broker-flow",  # connection.blocked / channel.flow active=false (also: publishers blocked)
    "consumer-prefetch",  # s2c: a consumer of the connection had unacked == prefetch
    "publisher-confirms",  # c2s: publishes awaiting a confirm were outstanding
    "idle",  # none of the above: the application had nothing to send (or did not send it)
)

# --- finding thresholds ---------------------------------------------------------------------
#: receiver-window (a client's window) and broker-flow-control (the broker's window towards a
#: client): a direction is a subject when it was window-limited (zero window, or bytes in flight
#: filling the peer's window) for at least this long in all (or RECEIVER_WINDOW_CRITICAL_SHARE of
#: a shorter connection, or in a stall), or, held by the broker, when the broker advertised a
#: zero window (its reader stopped: flow control). Shorter zero or full windows are TCP pacing a
#: transfer to a reader that keeps reading, not a reader that stopped (the stall threshold's
#: floor, MIN_STALL_S): measured on large-messages.pcap, a consumer reading 400 kB messages
#: advertised 4 zero windows, 7 windows of 0.32 ms median and 0.90 ms at most, each shorter than
#: the 2.4 ms a message took to arrive, 3.0 ms in all (`tables._held_back`).
WINDOW_MIN_S = MIN_STALL_S
#: Severity, from the worst subject: warning from this much window-limited time (a few
#: window-full moments that cost no noticeable time are only info) ...
RECEIVER_WINDOW_WARNING_S = 0.2
#: ... critical from this share of that connection's own duration (first to last packet).
RECEIVER_WINDOW_CRITICAL_SHARE = 0.25
#: RabbitMQ's page on credit-based flow control, named in broker-flow-control's advice.
FLOW_CONTROL_DOC = "https://www.rabbitmq.com/docs/flow-control"
#: publisher-blocked: any block is at least a warning (a resource alarm fired); a block this long
#: (or one still active when the capture ends) is critical: publishers waited for seconds.
PUBLISHER_BLOCKED_CRITICAL_S = 1.0
#: capture-gaps: at most this many gaps missing less than WARNING_SHARE of the affected streams'
#: bytes is info (a rare drop does not change conclusions); beyond, a warning; a capture
#: missing CRITICAL_SHARE of the bytes cannot support conclusions about those streams.
CAPTURE_GAPS_INFO_MAX = 2
CAPTURE_GAPS_WARNING_SHARE = 0.001
CAPTURE_GAPS_CRITICAL_SHARE = 0.10

#: Plots: connections/directions drawn in the window plot, rows in the timeline, and the number
#: of time bins a long series is aggregated into (so millions of packets draw in seconds).
PLOT_MAX_DIRECTIONS = 12
PLOT_MAX_TIMELINE_ROWS = 40
PLOT_BINS = 2000
#: the window plot's finer bins over a connection's life, each slice of time adding its points
#: to them (`_plot_bins`), from which a series of more than PLOT_BINS points is binned over its
#: own time range: a direction busy for a moment of a long connection keeps its detail
PLOT_FINE_BINS = 16 * PLOT_BINS

DIRS = np.array(["c2s", "s2c"])
FIN_SYN_RST = 0x07
SYN = 0x02
ACK = 0x10

STALL_COLUMNS = ["stream", "direction", "start_ts", "end_ts", "duration_s", "cause", "first_packet", "last_packet",
                 "threshold_s", "detail"]
TCP_COLUMNS = ["stream", "direction", "data_packets", "data_bytes", "retransmissions", "zero_window_ads",
               "window_full_segments", "window_limited_s", "bytes_in_flight_max", "peer_window_min_bytes", "peer_window_max_bytes",
               "rtt_samples", "rtt_min_s", "rtt_p50_s", "rtt_p90_s", "path_rtt_s", "median_gap_s", "stall_count",
               "stall_total_s"]
CAUSE_COLORS = {"capture-gap": "#7f7f7f", "receiver-window": "#d62728", "retransmission": "#ff7f0e",
                "broker-flow": "#9467bd", "consumer-prefetch": "#1f77b4", "publisher-confirms": "#17becf",
                "idle": "#bcbd22"}


# --- what the context round and the findings read and cite ---------------------------------

#: connection.blocked / unblocked: what the context round reads of each partition
BLOCK_METHODS = ["connection.blocked", "connection.unblocked"]
#: the window findings cite at most this many zero-window packets of the peer, and window-full
#: segments of the held direction (the first ones, in stream order)
ZERO_WINDOW_PACKETS = 10
WINDOW_FULL_PACKETS = 5
