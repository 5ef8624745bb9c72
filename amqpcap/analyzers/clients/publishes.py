"""Publishes per connection: counted, inside transactions, per destination, returned (mandatory
publishes no queue took), and how a publisher waits for its confirms.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...io.load import Capture
from ...derive.columns import codes, counts_added
from ...derive.deliveries import confirms
from ...derive.methods import select
from ...derive.rates import msgs_per_s_active
from ...derive.replay import for_derivations, told
from ...derive.seeds import CHANNELS, chan_keys
from .constants import DESTINATION
from .state import _NONE, _Seen


def _count_publishes(cap: Capture, m: pd.DataFrame, seen: _Seen, last: bool) -> None:
    """Add m's basic.publish frames to the counts per channel and per destination, its
    tx.select channels and basic.return frames to those of `seen`. The last slice counts only
    what the rows read: the publishes on channels in a transaction, to destinations returned."""
    stream, channel = m["stream"].to_numpy(np.int64), m["channel"].to_numpy(np.int64)
    tx = select(m, "tx.select", "c2s")
    seen.tx_channels = np.union1d(seen.tx_channels, chan_keys(stream[tx], channel[tx]))
    publish = np.flatnonzero(select(m, "basic.publish", "c2s"))
    key = chan_keys(stream[publish], channel[publish])
    if last:
        key = key[np.isin(key, seen.tx_channels)]
    (seen.channel_keys,), seen.channel_publishes = counts_added((seen.channel_keys,), seen.channel_publishes,
                                                                *_counted(key))
    seen.returned = _returned(seen.returned, cap, m)
    if not last or seen.returned is not None:
        seen.published = _published(seen.published, cap, m, publish)


def _counted(key: np.ndarray) -> tuple[tuple[np.ndarray], np.ndarray]:
    """The distinct `key` values and the rows of each."""
    code, uniq = pd.factorize(key)
    return (np.asarray(uniq, np.int64),), np.bincount(code, minlength=len(uniq)).astype(np.int64)


def _publishes_in_tx(seen: _Seen, stream: np.ndarray) -> np.ndarray:
    """Per connection, the publishes on its channels that selected tx (a transaction's messages)."""
    in_tx = np.isin(seen.channel_keys, seen.tx_channels)
    out = np.zeros(len(stream), np.int64)
    np.add.at(out, np.searchsorted(stream, seen.channel_keys[in_tx] // CHANNELS), seen.channel_publishes[in_tx])
    return out


def _confirmed(part: Capture, last: bool) -> pd.DataFrame:
    """The confirmed publishes the slice `part` tells (`amqpcap.derive.replay.told`: once
    confirmed; a whole partition tells all), the columns `_confirming` reads: stream, channel,
    epoch, seq, packet, ts and confirmed (ns)."""
    view = for_derivations(part)
    c = confirms(view)
    if not len(c):
        return pd.DataFrame({col: _NONE for col in ("stream", "channel", "epoch", "seq", "packet", "ts", "confirmed")})
    c = c[told(view, c["order"].to_numpy(np.int64), last) & c["confirm_ts"].notna().to_numpy(bool)]
    return pd.DataFrame({**{col: c[col].to_numpy(np.int64) for col in ("stream", "channel", "epoch", "seq", "packet")},
                         "ts": c["ts"].array.asi8, "confirmed": pd.to_datetime(c["confirm_ts"], utc=True).array.asi8})


def _confirming(c: pd.DataFrame) -> pd.DataFrame:
    """Per channel opening in confirm mode (stream, channel, epoch) with confirmed publishes
    (`c`: `_confirmed`'s rows): publishes (confirmed), sequential_share (of its publishes after
    the first, those sent after the previous one was confirmed), waiting_share (the publishes'
    confirm latencies summed over the time from its first publish to its last confirm),
    confirm_latency_p50_s, published_msgs_per_s (per second active: `amqpcap.derive.rates`),
    first_packet."""
    key = ["stream", "channel", "epoch"]
    cols = [*key, "publishes", "sequential_share", "waiting_share", "confirm_latency_p50_s",
            "published_msgs_per_s", "first_packet"]
    rows = []
    for k, g in c.groupby(key, sort=True):
        g = g.sort_values("seq")
        ts, confirmed = g["ts"].to_numpy(), g["confirmed"].to_numpy()
        span_s = (confirmed.max() - ts.min()) / 1e9
        latency = (confirmed - ts) / 1e9
        rows.append((*k, len(g), float(np.mean(ts[1:] >= confirmed[:-1])) if len(g) > 1 else np.nan,
                     float(latency.sum() / span_s) if span_s > 0 else np.nan, float(np.median(latency)),
                     float(msgs_per_s_active([len(g)], [ts.min()], [ts.max()])[0]),
                     int(g["packet"].iloc[0])))
    out = pd.DataFrame(rows, columns=cols)
    return out.astype({c_: np.int64 if c_ in (*key, "publishes", "first_packet") else float for c_ in cols})


def _destinations(cap: Capture, m: pd.DataFrame, mask: np.ndarray, extra=()) -> pd.DataFrame:
    """stream, exchange, routing_key (and the `extra` columns) of the method frames `mask`."""
    rows = np.flatnonzero(mask)
    order = m["order"].to_numpy()[rows]
    f = cap.frames
    out = pd.DataFrame({"stream": m["stream"].to_numpy(np.int64)[rows]})
    for col in ("exchange", "routing_key", *extra):
        v = pd.Series(f[col].array.take(order)).astype(object)
        out[col] = (v.fillna("") if col in ("exchange", "routing_key") else v.where(v.notna(), None)).to_numpy(object)
    return out


def _returned(before: pd.DataFrame | None, cap: Capture, m: pd.DataFrame) -> pd.DataFrame | None:
    """Per destination returned (basic.return) by `before` (None: none) and m's frames, sorted:
    returns, and the first reply_code and reply_text (a missing one is passed over)."""
    returned = select(m, "basic.return", "s2c")
    if not returned.any():
        return before
    ret = _destinations(cap, m, returned, ("reply_code", "reply_text"))
    g = ret.groupby(DESTINATION, sort=True)
    more = g.size().rename("returns").to_frame().join(g[["reply_code", "reply_text"]].first())
    if before is None:
        return more
    g = pd.concat([before, more]).groupby(level=DESTINATION, sort=True)
    return g[["returns"]].sum().join(g[["reply_code", "reply_text"]].first())


def _published(before: pd.DataFrame, cap: Capture, m: pd.DataFrame, rows: np.ndarray) -> pd.DataFrame:
    """The publishes per destination of `before` with m's basic.publish frames `rows` added."""
    if not len(rows):
        return before
    order = m["order"].to_numpy()[rows]
    stream = m["stream"].to_numpy(np.int64)[rows]
    exchange, exchanges = _coded(cap.frames["exchange"], order)
    routing_key, routing_keys = _coded(cap.frames["routing_key"], order)
    code = codes(stream, exchange, routing_key)
    n = np.bincount(code) if len(code) else _NONE
    one = np.empty(len(n), np.int64)
    one[code] = np.arange(len(code))  # (a row of each destination)
    more = pd.DataFrame({"stream": stream[one], "exchange": exchanges[exchange[one]],
                         "routing_key": routing_keys[routing_key[one]], "publishes": n})
    both = pd.concat([before, more], ignore_index=True)
    return both.groupby(DESTINATION, sort=False, as_index=False)["publishes"].sum()


def _coded(col: pd.Series, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The text of `col` at `order` as codes into its distinct values (object), "" (the default
    exchange) for a missing one: a text column of every publish is costly, its codes are not."""
    code, uniq = pd.factorize(col.array.take(order))
    return code + 1, np.concatenate([np.array([""], object), np.asarray(uniq, dtype=object)])


def _returns(seen: _Seen) -> pd.DataFrame:
    """Per (stream, exchange, routing key) with a basic.return: the returns (and the first one's
    reply code and text) and the publishes to that destination."""
    cols = [*DESTINATION, "returns", "publishes", "reply_code", "reply_text"]
    if seen.returned is None:
        return pd.DataFrame({c: pd.Series(dtype=np.int64 if c in ("stream", "returns", "publishes") else object)
                             for c in cols})
    out = seen.returned.copy()
    pub = seen.published.set_index(DESTINATION)["publishes"]
    out["publishes"] = pub.reindex(out.index).fillna(0).astype(np.int64).to_numpy()
    return out.reset_index()[cols]
