"""messages: how large the messages are, how many frames each takes, and the large ones: near or
over the broker's `max_message_size`, or spanning hundreds of frames that hold up the other
channels of their connection (issue 14, `large-messages`).

A message is a content header frame and the body frames after it on its channel (AMQP 0-9-1
§4.2.6: a content's frames are contiguous on its channel; other channels' frames may come in
between). The header announces the body size; each body frame holds at most frame_max − 8 bytes
(§4.2.3: frame_max counts the 7-byte header and the frame-end octet).

Everything is per connection, so the analyzer splits: a partition's step lists its own large
messages and counts the rest, the merge joins them and derives the finding.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..analysis import AnalyzerResult, Finding, analyzer
from ..capture import Capture
from ..derive.methods import methods, select
from ..derive.columns import codes, stable_argsort
from ..derive.labels import connection_labels
from ..display_filters import stream_filter
from ..names import subject_namer
from ..partition import CaptureFacts, Split, merge_rows, run_whole

#: a message is large when its body is this big or more (a RabbitMQ guide's rule of thumb: messages
#: of several MB are better kept in a blob store, with a reference in the message) ...
LARGE_BODY_BYTES = 1 << 20
#: ... or spans this many body frames or more (each a frame the connection's other channels wait
#: behind: a writer sends a content's frames together)
MANY_FRAMES = 100
#: large-messages is a warning when a body reaches this share of the broker's max_message_size
#: (the next larger message may be refused) ...
NEAR_MAX_SHARE = 0.5
#: ... and critical when the broker refused one: RabbitMQ closes the channel with 406
#: PRECONDITION_FAILED "message size N is larger than configured max size M"
REFUSED_TEXT = re.compile(r"message size (\d+) is larger than configured max size (\d+)")
#: RabbitMQ's default max_message_size by server version (its Limits guide): 16 MiB from 4.0,
#: 128 MiB from 3.8 (before 3.8 no limit below the 2 GiB protocol ceiling)
MAX_MESSAGE_SIZE_DEFAULTS = ((4, 16 << 20), (3, 128 << 20))
#: assumed when the capture names no server version: today's default
MAX_MESSAGE_SIZE_UNKNOWN = 16 << 20
#: large messages listed per connection in the table (the largest); the counts cover all
LARGE_ROWS_PER_CONNECTION = 200
FILTER = "(amqp.method.class == 60 && amqp.method.method in {40, 60, 71}) || amqp.method.class == 20"
LARGE_COLUMNS = ["stream", "connection", "direction", "channel", "packet", "ts", "body_size", "body_frames",
                 "transfer_s", "other_channel_frames_during", "other_channels_active", "refused",
                 "max_message_size", "max_message_size_source"]
CONN_COLUMNS = ["stream", "messages_c2s", "messages_s2c", "body_bytes_p50", "body_bytes_max",
                "body_frames_max", "large_messages", "refused_messages"]


def _contents(cap: Capture) -> pd.DataFrame:
    """One row per content header: stream, direction, channel, packet, ts (ns), order (in
    cap.frames), body_size, body_frames (body frames after it on its channel, before the
    channel's next header) and last_order (its last body frame, else the header)."""
    f = cap.frames
    header = (f["type"] == "header").to_numpy(dtype=bool, na_value=False)  # (on the categorical's codes)
    rows = np.flatnonzero(header | (f["type"] == "body").to_numpy(dtype=bool, na_value=False))
    stream = f["stream"].to_numpy(np.int64)[rows]
    chan = stream * 65536 + f["channel"].to_numpy(np.int64)[rows]
    d = (f["direction"] == "s2c").to_numpy(dtype=bool, na_value=False)[rows].astype(np.int64)
    key = chan * 2 + d
    order = np.argsort(key, kind="stable")  # by channel and direction, frame order kept
    rows, key = rows[order], key[order]
    is_header = header[rows]
    message = np.cumsum(is_header) - 1  # the header each frame belongs to (frames before any: -1)
    # a body frame belongs to the header before it on the same channel and direction
    header_key = np.where(is_header)[0]
    own = (message >= 0) & (key == key[header_key[np.maximum(message, 0)]] if len(header_key) else False)
    body = ~is_header & own
    n = int(is_header.sum())
    frames = np.bincount(message[body], minlength=n).astype(np.int64)
    last = rows[header_key].astype(np.int64)
    np.maximum.at(last, message[body], rows[body].astype(np.int64))
    h = rows[header_key]
    return pd.DataFrame({"stream": f["stream"].to_numpy(np.int64)[h],
                         "direction": np.asarray(f["direction"].array.take(h), dtype=object),
                         "channel": f["channel"].to_numpy(np.int64)[h], "packet": f["packet"].to_numpy(np.int64)[h],
                         "ts": f["ts"].array.asi8[h], "order": h.astype(np.int64),
                         "body_size": f["body_size"].to_numpy(float, na_value=np.nan)[h], "body_frames": frames,
                         "last_order": last}).sort_values("order", kind="stable", ignore_index=True)


def _limits(cap: Capture) -> pd.DataFrame:
    """Per connection (index: stream): max_message_size and its source (`refused` when the broker
    said it refusing a message, else `default for RabbitMQ X`, else `assumed`), and the refused
    messages: (stream, channel) of each 406 close naming the limit."""
    c = cap.connections
    versions = c["server_version"].astype(object).where(c["server_version"].notna(), None).to_numpy(object)
    size, source = [], []
    for v in versions:
        major = int(m.group(1)) if v and (m := re.match(r"(\d+)\.(\d+)", str(v))) else None
        minor = int(m.group(2)) if major is not None else None
        limit = next((b for maj, b in MAX_MESSAGE_SIZE_DEFAULTS if major is not None and major >= maj), None)
        if major == 3 and minor is not None and minor < 8:
            limit = None  # no limit below the protocol's
        size.append(limit if major is not None else MAX_MESSAGE_SIZE_UNKNOWN)
        source.append(f"default of RabbitMQ {v}" if major is not None else "assumed (RabbitMQ 4's default)")
    return pd.DataFrame({"max_message_size": pd.array(size, dtype="Int64"), "max_message_size_source": source},
                        index=c["stream"].to_numpy(np.int64))


def _refusals(cap: Capture) -> pd.DataFrame:
    """Each channel.close from the broker refusing a message for its size: stream, channel,
    order (of the close), max size the broker named."""
    m = methods(cap)
    rows = np.flatnonzero(select(m, "channel.close", "s2c"))
    order = m["order"].to_numpy()[rows]
    text = pd.Series(cap.frames["reply_text"].array.take(order)).astype(object).to_numpy(object)
    hit = [REFUSED_TEXT.search(str(t)) if t is not None and t == t else None for t in text]
    keep = np.array([h is not None for h in hit], dtype=bool)
    return pd.DataFrame({"stream": m["stream"].to_numpy(np.int64)[rows][keep],
                         "channel": m["channel"].to_numpy(np.int64)[rows][keep], "order": order[keep],
                         "max_size": np.array([int(h.group(2)) for h in hit if h is not None], dtype=np.int64)})


def messages_partial(cap: Capture, facts: CaptureFacts) -> dict[str, pd.DataFrame]:
    """A partition's connections: their message counts and sizes, and their large messages."""
    msgs = _contents(cap)
    limits = _limits(cap)
    refusals = _refusals(cap)
    # the refused message: the last c2s header on the closed channel before the close
    refused = np.zeros(len(msgs), dtype=bool)
    for r in refusals.itertuples():  # few: a refusal closes the channel
        mine = np.flatnonzero((msgs["stream"].to_numpy() == r.stream) & (msgs["channel"].to_numpy() == r.channel)
                              & (msgs["direction"].to_numpy(object) == "c2s") & (msgs["order"].to_numpy() < r.order))
        if len(mine):
            refused[mine[-1]] = True
    by_broker = refusals.groupby("stream")["max_size"].max()
    limit = limits["max_message_size"].reindex(msgs["stream"]).to_numpy(float, na_value=np.nan)
    source = limits["max_message_size_source"].reindex(msgs["stream"]).to_numpy(object)
    told = by_broker.reindex(msgs["stream"]).to_numpy(float)
    limit = np.where(np.isnan(told), limit, told)
    source = np.where(np.isnan(told), source, "refused by the broker")
    big = (msgs["body_size"].to_numpy(float) >= LARGE_BODY_BYTES) | (msgs["body_frames"].to_numpy() >= MANY_FRAMES) \
        | refused
    large = msgs[big].assign(refused=refused[big], max_message_size=limit[big], max_message_size_source=source[big])
    large = _transfers(cap, large)
    large["ts"] = pd.to_datetime(large["ts"], utc=True)
    large["max_message_size"] = pd.array(large["max_message_size"].to_numpy(float), dtype="Int64")
    large["body_size"] = large["body_size"].astype(np.int64)
    large = large.sort_values(["stream", "body_size", "order"], ascending=[True, False, True], kind="stable")
    large = large[large.groupby("stream").cumcount() < LARGE_ROWS_PER_CONNECTION].sort_values("order", kind="stable")
    conns = _per_connection(cap, msgs, big, refused)
    # (named in the merge: labels depend on every connection)
    return {"large": large[[c for c in LARGE_COLUMNS if c != "connection"]].reset_index(drop=True), "connections": conns}


def _transfers(cap: Capture, large: pd.DataFrame) -> pd.DataFrame:
    """`large` with transfer_s (header to last body frame), other_channel_frames_during (frames
    of the connection's other channels, same direction, completed in that span) and
    other_channels_active (other channels sent frames in that direction on the connection).

    Frames of the connection's direction in a span, less those of the message's own channel:
    each a count of (group, frame order) pairs between two bounds, by binary search over the
    pairs sorted once (never a pass over the frames per message)."""
    f = cap.frames
    ts = f["ts"].array.asi8
    # the frames of the large messages' connections alone (the spans are counted within a
    # connection), less channel 0 (the connection's own)
    f_stream = f["stream"].to_numpy(np.int64)
    rows = np.flatnonzero((f["channel"].to_numpy(np.int64) != 0)
                          & np.isin(f_stream, np.unique(large["stream"].to_numpy(np.int64))))
    n_f = len(rows)
    order = np.r_[rows, large["order"].to_numpy(np.int64)]
    stream = np.r_[f_stream[rows], large["stream"].to_numpy(np.int64)]
    s2c = np.r_[(f["direction"] == "s2c").to_numpy(dtype=bool, na_value=False)[rows],
                large["direction"].to_numpy(object) == "s2c"].astype(np.int64)
    chan = np.r_[f["channel"].to_numpy(np.int64)[rows], large["channel"].to_numpy(np.int64)]
    lo, hi = large["order"].to_numpy(np.int64), large["last_order"].to_numpy(np.int64)
    span = int(order.max(initial=0)) + 2

    def sorted_pairs(group: np.ndarray) -> np.ndarray:
        # the frames' orders increase: sorted by group alone (stably), the pairs are sorted
        return (group[:n_f] * span + order[:n_f])[stable_argsort(group[:n_f])]

    def count(pairs: np.ndarray, group: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        q = group[n_f:] * span
        return np.searchsorted(pairs, q + hi, "right") - np.searchsorted(pairs, q + lo, "left")

    conn, own = codes(stream, s2c), codes(stream, s2c, chan)
    conn_pairs, own_pairs = sorted_pairs(conn), sorted_pairs(own)
    everything = (np.zeros(len(large), np.int64), np.full(len(large), span - 1, np.int64))
    return large.assign(transfer_s=(ts[hi] - large["ts"].to_numpy()) / 1e9,
                        other_channel_frames_during=(count(conn_pairs, conn, lo, hi)
                                                     - count(own_pairs, own, lo, hi)).astype(np.int64),
                        other_channels_active=(count(conn_pairs, conn, *everything)
                                               - count(own_pairs, own, *everything)) > 0)


def _per_connection(cap: Capture, msgs: pd.DataFrame, big: np.ndarray, refused: np.ndarray) -> pd.DataFrame:
    stream = cap.connections["stream"].to_numpy(np.int64)
    pos = np.searchsorted(stream, msgs["stream"].to_numpy(np.int64))
    out = pd.DataFrame({"stream": stream})
    c2s = msgs["direction"].to_numpy(object) == "c2s"
    out["messages_c2s"] = np.bincount(pos[c2s], minlength=len(stream)).astype(np.int64)
    out["messages_s2c"] = np.bincount(pos[~c2s], minlength=len(stream)).astype(np.int64)
    g = pd.Series(msgs["body_size"].to_numpy(float)).groupby(pos)
    out["body_bytes_p50"] = g.median().reindex(range(len(stream))).to_numpy(float)
    out["body_bytes_max"] = g.max().reindex(range(len(stream))).to_numpy(float)
    out["body_frames_max"] = pd.Series(msgs["body_frames"].to_numpy()).groupby(pos).max() \
        .reindex(range(len(stream))).fillna(0).astype(np.int64).to_numpy()
    out["large_messages"] = np.bincount(pos[big], minlength=len(stream)).astype(np.int64)
    out["refused_messages"] = np.bincount(pos[refused], minlength=len(stream)).astype(np.int64)
    return out[CONN_COLUMNS]


def messages_merge(partials: list[dict[str, pd.DataFrame]], records: None, facts: CaptureFacts,
                   cap: Capture) -> AnalyzerResult:
    large = merge_rows([p["large"] for p in partials], ["ts", "stream", "channel"])
    large.insert(1, "connection", pd.Series(connection_labels(cap, large["stream"]), dtype=object))
    large["direction"] = pd.Series(large["direction"].to_numpy(object), dtype=object)
    large["max_message_size_source"] = pd.Series(large["max_message_size_source"].to_numpy(object), dtype=object)
    conns = merge_rows([p["connections"] for p in partials], ["stream"])
    total = int(conns["messages_c2s"].sum() + conns["messages_s2c"].sum())
    summary = {"messages": {
        "messages": total,
        "body_bytes_max": None if not len(conns) or conns["body_bytes_max"].isna().all()
        else int(conns["body_bytes_max"].max()),
        "large_messages": int(conns["large_messages"].sum()),
        "refused_messages": int(conns["refused_messages"].sum()),
    }}
    finding = _finding(cap, large, conns)
    return AnalyzerResult("messages", tables={"large": large, "connections": conns}, summary=summary,
                          findings=[finding] if finding else [], plots=[])


SPLIT = Split(partial=messages_partial, merge=messages_merge)


@analyzer("messages", split=SPLIT)
def messages(cap: Capture) -> AnalyzerResult:
    """Message sizes and frames per message; large messages near or over the broker's limit."""
    return run_whole(SPLIT, cap)


# -- the finding ------------------------------------------------------------------------------

def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 1e5 else f"{n / 1e3:,.1f} kB"


def _mib(n: float) -> str:
    """A limit as RabbitMQ configures it (max_message_size = 16 MiB)."""
    return f"{n / (1 << 20):,.4g} MiB"


def _finding(cap: Capture, large: pd.DataFrame, conns: pd.DataFrame) -> Finding | None:
    """large-messages: one finding, the connections sending or receiving large messages as subjects."""
    if not len(large):
        return None
    limit = large["max_message_size"].to_numpy(float, na_value=np.nan)
    near = (large["body_size"].to_numpy(float) >= NEAR_MAX_SHARE * np.where(np.isnan(limit), np.inf, limit)) \
        & ~large["refused"].to_numpy(bool)
    large = large.assign(near=near, share_of_max=large["body_size"] / np.where(np.isnan(limit), np.nan, limit))
    rank = np.where(large["refused"], 2, np.where(near, 1, 0))
    large = large.assign(rank=rank)
    per = large.groupby("stream").agg(rank=("rank", "max"), largest=("body_size", "max"),
                                      frames=("body_frames", "max"), count=("body_size", "size"),
                                      refused=("refused", "sum"), near=("near", "sum"),
                                      transfer=("transfer_s", "max")).reset_index()
    per = per.sort_values(["rank", "largest", "stream"], ascending=[False, False, True], kind="stable")
    severity = ("info", "warning", "critical")[int(per["rank"].max())]
    w = large.sort_values(["rank", "body_size"], ascending=False, kind="stable").iloc[0]
    who = w.connection
    if w.refused:
        head = (f"{who} sent a {_mb(w.body_size)} message the broker refused (over its max_message_size of "
                f"{_mib(w.max_message_size)}): RabbitMQ closed the channel")
    elif w.near:
        head = (f"{who} sends messages near the broker's max_message_size: {_mb(w.body_size)}, "
                f"{w.share_of_max:.0%} of {_mib(w.max_message_size)} ({w.max_message_size_source})")
    else:
        head = f"{who} sends large messages: up to {_mb(w.body_size)} in {int(w.body_frames):,} frames"
    near_n = int(large["near"].sum())
    refused_n = int(large["refused"].sum())
    tail = f"; {len(large):,} large messages" + (f", {refused_n:,} refused" if refused_n > 1 else "") \
        + (f", {near_n:,} near the limit" if near_n and not (w.near and near_n == len(large)) else "")
    if len(per) > 1:
        tail += f", on {len(per)} connections"
    examples = large.sort_values(["rank", "body_size"], ascending=False, kind="stable").head(5)
    subject_of = subject_namer(cap)
    subjects = [subject_of(r.stream, large_messages=int(r.count), body_bytes_max=int(r.largest),
                           body_frames_max=int(r.frames), near_max=int(r.near), refused=int(r.refused),
                           transfer_s_max=float(r.transfer), severity=("info", "warning", "critical")[int(r.rank)])
                for r in per.itertuples()]
    held = w.other_channels_active and w.other_channel_frames_during == 0
    evidence = {
        "body_bytes": int(w.body_size), "body_frames": int(w.body_frames), "direction": w.direction,
        "channel": int(w.channel), "refused": bool(w.refused),
        "max_message_size": None if pd.isna(w.max_message_size) else int(w.max_message_size),
        "max_message_size_source": w.max_message_size_source,
        "share_of_max": None if pd.isna(w.share_of_max) else float(w.share_of_max),
        "transfer_s": float(w.transfer_s), "other_channels_held_s": float(w.transfer_s) if held else 0.0,
        "large_messages": int(len(large)), "near_max_messages": near_n, "refused_messages": refused_n,
        "connections_with_this_finding": int(len(per)), "streams": sorted(int(s) for s in per["stream"]),
        "packets": sorted(int(p) for p in examples["packet"]),
        "filter": f"{stream_filter(per['stream'])} && ({FILTER})",
    }
    advice = ("Keep large payloads out of the broker: put them in a blob store (S3, a file share, a database) "
              "and publish a reference, or split them into chunks an application reassembles. A message is "
              "held whole in the broker's memory and written to disk, and every other channel on its "
              "connection waits behind its frames. RabbitMQ refuses bodies above max_message_size "
              "(16 MiB by default since 4.0, 128 MiB before), closing the publisher's channel.")
    if held:
        advice += (f" On this connection the other channels sent nothing while its frames crossed "
                   f"({float(w.transfer_s) * 1e3:,.1f} ms for the largest): publish large messages on a connection "
                   "of their own.")
    impact = 1.0 if w.refused else float(min(1.0, w.share_of_max)) if not pd.isna(w.share_of_max) else 0.1
    return Finding("large-messages", severity, head + tail, evidence, advice, impact=impact, subjects=subjects)
