"""The frames where a consumer reached its prefetch limit (a finding's example packets), and the
rows of consumers without acknowledgements.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ...derive.columns import as_object, codes
from ...derive.deliveries import tag_ranks
from ...derive.tally import CONSUMER_KEY
from .summary import _runs


def _limit_rows(st: pd.DataFrame) -> pd.DataFrame:
    """Example packets of every consumer of the state rows `st`: the first 5 frames at which it
    was at its limit (any epoch of its channel), found on the state rows' consumer codes
    (`_runs`). Columns: stream, channel, consumer_tag, packet."""
    st_code, keys = _runs(st)
    k3_code = codes(*(keys[k].to_numpy() for k in CONSUMER_KEY))  # (equal across epochs)
    rows = np.flatnonzero(st["at_limit"].to_numpy(bool))
    c = k3_code[st_code[rows]]
    rows = rows[pd.Series(c).groupby(c).cumcount().to_numpy() < 5]
    return as_object(st[CONSUMER_KEY].iloc[rows], "consumer_tag").assign(packet=st["packet"].to_numpy(np.int64)[rows])


def _limit_packets(limits: pd.DataFrame, g: pd.DataFrame) -> list[int]:
    """The example packets (`_limit_rows`) of the consumers of ``g``."""
    wanted = pd.MultiIndex.from_frame(limits[CONSUMER_KEY]).isin(
        pd.MultiIndex.from_frame(as_object(g[CONSUMER_KEY], "consumer_tag")))
    return sorted(int(p) for p in limits["packet"].to_numpy(np.int64)[wanted])


def _no_ack_rows(d: pd.DataFrame) -> list[dict[str, Any]]:
    """summary.json's row of each no-ack consumer: deliveries counted per (stream, channel, tag)
    code (sorted as the keys) by bincount; its connection named in the merge."""
    na = np.flatnonzero(d["no_ack"].to_numpy(bool))
    if not len(na):
        return []
    stream, channel = d["stream"].to_numpy(np.int64)[na], d["channel"].to_numpy(np.int64)[na]
    code = codes(stream, channel, tag_ranks(None, d.iloc[na]))
    first = np.unique(code, return_index=True)[1]
    tags = d["consumer_tag"].array.take(na[first])
    return [{"stream": st_, "channel": ch_, "consumer_tag": tag, "no_ack": True, "deliveries": n}
            for st_, ch_, tag, n in zip(stream[first].tolist(), channel[first].tolist(), tags,
                                        np.bincount(code).tolist())]
