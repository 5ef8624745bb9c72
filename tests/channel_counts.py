"""channels: how many channels each connection opened and closed, and the most it held open at once.

The analyzer docs/writing-an-analyzer.md builds step by step (each of its code blocks is a piece
of this file, tests/analysis/test_writing_an_analyzer.py checks it). It is not registered, so that
`amqpcap analyze` does not run it: the tests run it as `amqpcap.engine.partitions.run_in_memory`
and `amqpcap.engine.registered.steps_of` run an analyzer before it is registered.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from amqpcap.analysis.contract import Analyzer
from amqpcap.io.rows import merge_rows
from amqpcap.model.facts import CaptureFacts
from amqpcap.analysis.registry import AnalyzerResult
from amqpcap.derive.labels import connection_labels
from amqpcap.io.load import Capture

#: what the state counts per connection (index: its stream)
COUNTS = ["opened", "closed", "open_now", "open_peak"]


class ChannelCounts(Analyzer[pd.DataFrame, list]):
    """Channels opened and closed per connection, and the most open at once."""

    def start(self, facts: CaptureFacts) -> pd.DataFrame:
        """No connection seen yet."""
        return pd.DataFrame({c: pd.Series(dtype=np.int64) for c in COUNTS},
                            index=pd.Index([], dtype=np.int64, name="stream"))

    def step(self, seen: pd.DataFrame, rows: Capture, facts: CaptureFacts, last: bool) -> pd.DataFrame:
        """`seen` with the channels that `rows` open and close added, frame by frame."""
        f = rows.frames
        method = f["method"].to_numpy(object)
        # a channel is open once the broker says so, closed once either side confirms the close
        move = np.select([method == "channel.open-ok", method == "channel.close-ok"], [1, -1], 0)
        moves = pd.DataFrame({"stream": f["stream"].to_numpy(np.int64), "move": move})[move != 0]
        # every connection of the rows has a row, even one that never opens a channel
        seen = seen.reindex(np.union1d(seen.index, rows.connections["stream"]), fill_value=0)
        # how many are open after each move: the count the slices before left, plus the moves so far
        moves["level"] = seen["open_now"].reindex(moves["stream"]).to_numpy() \
            + moves.groupby("stream")["move"].cumsum().to_numpy()
        told = moves.assign(opened=moves["move"] > 0, closed=moves["move"] < 0).groupby("stream").agg(
            opened=("opened", "sum"), closed=("closed", "sum"), moved=("move", "sum"), peak=("level", "max"))
        at = told.index
        seen.loc[at, "opened"] += told["opened"]
        seen.loc[at, "closed"] += told["closed"]
        seen.loc[at, "open_now"] += told["moved"]
        seen.loc[at, "open_peak"] = np.maximum(seen.loc[at, "open_peak"], told["peak"])
        return seen

    def close(self, seen: pd.DataFrame, rows: Capture, facts: CaptureFacts) -> list[pd.DataFrame]:
        """The partition's rows, in a list of every partition's."""
        return [seen.reset_index()]

    def merge(self, a: list[pd.DataFrame], b: list[pd.DataFrame]) -> list[pd.DataFrame]:
        return a + b

    def finish(self, parts: list[pd.DataFrame], whole: Capture, facts: CaptureFacts) -> AnalyzerResult:
        """One row per connection, named; what summary.json says of them."""
        table = merge_rows(parts, ["stream"])
        table.insert(1, "connection", connection_labels(whole, table["stream"]))
        # (a capture that starts after a channel opened sees it closed, not opened)
        table["left_open"] = (table["opened"] - table["closed"]).clip(lower=0)
        table = table.drop(columns="open_now")
        summary = {"channels": {
            "opened": int(table["opened"].sum()), "closed": int(table["closed"].sum()),
            "connections_leaving_channels_open": int((table["left_open"] > 0).sum()),
            "most_open_at_once": int(table["open_peak"].max()) if len(table) else 0,
        }}
        return AnalyzerResult("channels", tables={"channels": table}, summary=summary)
