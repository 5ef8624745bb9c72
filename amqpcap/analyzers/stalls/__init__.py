"""stalls: intervals where a connection direction went silent, and who is to blame.

A *stall* is a silence of one direction of one connection (no new data segment) that is long
both absolutely and relative to that direction's normal pacing and the connection's round trip.
Each stall gets exactly one cause, the first of `CAUSES` whose evidence holds over the interval:
what the capture cannot tell (a gap), TCP (receive window, loss), the broker (flow control), the
consumer's credit (prefetch), the publisher's confirm window, and otherwise the application.
Per direction it also reports the TCP numbers that separate "TCP's fault" from "broker's fault":
segment→ACK times, retransmissions, zero windows, window-full segments, bytes in flight.

Method and limits: docs/analyzers/stalls.md. The modules, one question each:
- `constants`: every threshold, column list and plot limit;
- `tcp_state`: per-packet TCP state of each direction (windows, retransmissions, round trips);
- `silences`: each direction's silences, which are stalls, and the cause each gets;
- `causes`: the causes' evidence as intervals (blocks, channel.flow, confirms, prefetch);
- `amqp10`: the same causes' evidence on AMQP 1.0 connections (link credit, dispositions awaited);
- `intervals`: interval arithmetic on whole columns;
- `context`: the context round (what a partition needs of the others);
- `step`: a partition's step over slices of its time, and what a slice carries to the next;
- `tables`, `findings`, `plots`: the merged tables and summary, the findings, the plots;
- `analyzer`: the analyzer itself (`Stalls`: its step, close, merge and finish).
"""

from .analyzer import Stalls
from .constants import CAUSES, STALL_COLUMNS, TCP_COLUMNS
from .context import StallsContext

__all__ = ["CAUSES", "STALL_COLUMNS", "Stalls", "StallsContext", "TCP_COLUMNS"]
