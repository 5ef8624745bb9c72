"""What summary.json, the overview and the report count of a capture, partition by partition.

What is not an analyzer's result is an analyzer of the contract too (`amqpcap.analysis.contract`),
the summary's: `TallyCounts`, run beside the others on every partition, whose finish is the
`Tally`: the method and frame counts, the redaction counts, each connection's role, and the
overview's sums (publishes per destination, deliveries and acks per queue and per consumer,
messages per second over time). `tally_of` counts one partition of whole connections;
`Tally.joined` adds partitions up. Every
count is a sum over rows or a set of rows of one connection, so the joined tally of any split
of the capture is the tally of the capture read whole (tests/engine/test_partition.py).

`capture_tally(cap)` is the one way to read it: a capture read whole counts itself; the outline
of a dataset analysed on Dask (`amqpcap.io.dataset.read_outline`: its connections, no frames) is
given the joined tally of its buckets (``cap.context.tally``, `amqpcap.engine.on_dask`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from ..io.load import Capture
from . import CAPTURE, derivation
from . import deliveries as D
from .acked import settled_by_ack
from .amqp10.messages import amqp10_messages, delivery_starts
from .names import connection_roles, role_flags, roles_of
from .replay import for_derivations, told
from .seeds import seeds_of
from ..analysis.contract import Analyzer
from ..model.facts import CaptureFacts
from ..model.plotting import time_edges

#: the rates plot's series (report.html's top): what each counts
RATE_SERIES = ("published", "delivered", "acked")
PUBLISH_KEY = ["stream", "exchange", "routing_key"]
CONSUMER_KEY = ["stream", "channel", "consumer_tag"]


@dataclass
class Tally:
    #: rows of the packets, frames (AMQP 0-9-1) and amqp10_frames tables
    packets: int
    frames: int
    amqp10_frames: int
    #: method frames per method (`method` of the frames table)
    methods: pd.Series
    #: bytes of body frames' payload, and of the bodies kept (``--bodies``)
    body_bytes_seen: int
    body_bytes_kept: int
    #: each connection's role (index: stream; `amqpcap.derive.names.connection_roles`)
    roles: pd.Series
    #: basic.publish (c2s) and basic.return (s2c) per (stream, exchange, routing key)
    publishes: pd.DataFrame
    #: queue.bind and queue.unbind rows (exchange, routing_key, queue), each distinct once
    binds: pd.DataFrame
    unbinds: pd.DataFrame
    #: per queue named by its deliveries: delivered, acked, requeued, lossy_out (deliveries on
    #: connections that lost bytes)
    queues: pd.DataFrame
    #: deliveries whose queue the capture does not name
    unattributed: int
    #: per consumer (CONSUMER_KEY): delivered, acked, no_ack (any), queue, first_ts and last_ts
    #: (its first and last delivery: the span of `amqpcap.derive.rates.msgs_per_s_active`)
    consumers: pd.DataFrame
    #: deliveries in all, acked, no-ack
    delivered: int
    acked: int
    no_ack_delivered: int
    #: AMQP 1.0 messages (`amqpcap.derive.amqp10.messages`): the client's, the broker's, the
    #: broker's the client accepted, the broker's sent settled (pre-settled: the no-ack twin)
    amqp10_published: int
    amqp10_delivered: int
    amqp10_acked: int
    amqp10_presettled_delivered: int
    #: streams whose publishes the broker may have held back (`held_back_streams`)
    held_back: np.ndarray
    #: {series: count per time bin of `rate_edges`} over the capture (RATE_SERIES), AMQP 1.0's
    #: messages counted in as 0-9-1's
    rates: dict[str, np.ndarray]
    #: a slice's own amqp10_frames rows, kept for the partition's last slice (whose dispositions
    #: may settle deliveries of every slice before: `amqp10_messages`); None once joined
    amqp10_rows: pd.DataFrame | None = None

    @staticmethod
    def joined(parts: list[Tally]) -> Tally:
        """The tally of the partitions' connections together (each connection in one of them)."""
        if len(parts) == 1:
            return parts[0]

        def concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
            return pd.concat(frames, ignore_index=True)

        # what load() orders by key, re-ordered so (a stable sort: a key's rows are one partition's)
        publishes = concat([p.publishes for p in parts]).sort_values(PUBLISH_KEY, kind="stable", ignore_index=True)
        roles = pd.concat([p.roles for p in parts]).sort_index(kind="stable")
        queues = pd.concat([p.queues for p in parts]).groupby(level=0, sort=False).sum()
        return Tally(
            packets=sum(p.packets for p in parts), frames=sum(p.frames for p in parts),
            amqp10_frames=sum(p.amqp10_frames for p in parts),
            methods=_added([p.methods for p in parts]),
            body_bytes_seen=sum(p.body_bytes_seen for p in parts), body_bytes_kept=sum(p.body_bytes_kept for p in parts),
            roles=roles, publishes=publishes,
            binds=concat([p.binds for p in parts]).drop_duplicates(ignore_index=True),
            unbinds=concat([p.unbinds for p in parts]).drop_duplicates(ignore_index=True),
            queues=queues, unattributed=sum(p.unattributed for p in parts),
            consumers=concat([p.consumers for p in parts]),
            delivered=sum(p.delivered for p in parts), acked=sum(p.acked for p in parts),
            no_ack_delivered=sum(p.no_ack_delivered for p in parts),
            amqp10_published=sum(p.amqp10_published for p in parts),
            amqp10_delivered=sum(p.amqp10_delivered for p in parts),
            amqp10_acked=sum(p.amqp10_acked for p in parts),
            amqp10_presettled_delivered=sum(p.amqp10_presettled_delivered for p in parts),
            held_back=np.unique(np.concatenate([p.held_back for p in parts])),
            rates={k: sum(p.rates[k] for p in parts) for k in parts[0].rates})


def _added(counts: list[pd.Series]) -> pd.Series:
    """Value counts added, those above 0, largest first and ties by name: the same Series
    whatever the partitions or slices were (`method_counts` reads it in this order)."""
    s = pd.concat(counts).groupby(level=0, sort=True).sum()
    return s[s > 0].sort_values(ascending=False, kind="stable")


def rate_edges(cap: Capture) -> np.ndarray | None:
    """The rates plot's time bins (seconds since the capture's first record); None without records."""
    s = cap.summary
    if s.get("first_ts") is None:
        return None
    return time_edges((s["last_ts"] - s["first_ts"]).total_seconds())


def tally_of(part: Capture) -> Tally:
    """The counts of one partition (some connections whole, or the capture)."""
    return _counted(part, D.deliveries(part), None, [], True)


def _counted(part: Capture, d: pd.DataFrame, first_order: np.ndarray | None, amqp10_before: list[pd.DataFrame],
             last: bool) -> Tally:
    """The counts of the partition (or of a slice of its time) `part` whose deliveries are `d`
    (a slice: those it tells, each at its frame's whole order `first_order`, `_counts_of`; the
    partition's AMQP 1.0 frames of the slices before `amqp10_before`, `last` its last slice).
    A slice's `publishes` keeps returns without a publish (one may be in another slice) and
    its `consumers` each consumer's first orders, for `_slices_joined`."""
    f = part.frames
    acked = settled_by_ack(d)
    body = (f["type"] == "body").to_numpy(bool)
    publishes = _publish_counts(f)
    a10 = _amqp10_counts(part, amqp10_before, last)
    return Tally(
        packets=len(part.packets), frames=len(f), amqp10_frames=len(part.amqp10_frames),
        methods=_added([f["method"].value_counts()]),
        body_bytes_seen=int(f.loc[body, "size_bytes"].sum()),
        body_bytes_kept=0 if part.bodies is None else int(part.bodies["body"].map(len).sum()),
        roles=connection_roles(part) if first_order is None else role_flags(part),
        publishes=_published(publishes) if first_order is None else publishes,
        binds=_bind_rows(f, "queue.bind"), unbinds=_bind_rows(f, "queue.unbind"),
        queues=_queue_counts(part, d, acked), unattributed=int(d["queue"].isna().sum()),
        consumers=_consumer_counts(d, acked, first_order),
        delivered=len(d), acked=int(acked.sum()), no_ack_delivered=int(d["no_ack"].to_numpy(bool, na_value=False).sum()),
        amqp10_published=len(a10["published"]), amqp10_delivered=len(a10["delivered"]),
        amqp10_acked=len(a10["acked"]), amqp10_presettled_delivered=a10["presettled"],
        held_back=held_back_streams(part), rates=_rate_counts(part, d, acked, a10),
        amqp10_rows=None if first_order is None or last else part.amqp10_frames)


def _amqp10_counts(part: Capture, before: list[pd.DataFrame], last: bool) -> dict:
    """The AMQP 1.0 messages of `part` (`amqp10_messages`: times, int64 ns) as the overview counts
    them: published, delivered, acked (the broker's deliveries a client accepted: the consumer's
    ack), and how many of the broker's were sent settled (a count)."""
    none = np.zeros(0, np.int64)
    if not len(part.amqp10_frames) and not (last and before):
        return {"published": none, "delivered": none, "acked": none, "presettled": 0}
    published, delivered, acked = amqp10_messages(part, before, last)
    f = part.amqp10_frames
    presettled = delivery_starts(f) & f["settled"].to_numpy(bool, na_value=False) & (f["direction"] == "s2c").to_numpy(bool)
    return {"published": published, "delivered": delivered, "acked": acked["c2s"], "presettled": int(presettled.sum())}


@derivation(CAPTURE)
def capture_tally(cap: Capture) -> Tally:
    """The capture's tally: given (a dataset's outline, `amqpcap.engine.on_dask`) or counted here."""
    given = cap.context.tally
    return given if given is not None else tally_of(cap)


def _publish_counts(f: pd.DataFrame) -> pd.DataFrame:
    """basic.publish (c2s) and basic.return (s2c) frames per (stream, exchange, routing key),
    every key of either (`_published` keeps those published)."""
    def count(method: str, direction: str, name: str) -> pd.Series:
        rows = f.loc[(f["method"] == method).to_numpy(bool) & (f["direction"] == direction).to_numpy(bool), PUBLISH_KEY]
        rows = rows.astype({"exchange": object, "routing_key": object}).fillna("")  # missing: the default exchange
        return rows.groupby(PUBLISH_KEY).size().rename(name)

    out = pd.concat([count("basic.publish", "c2s", "published"), count("basic.return", "s2c", "returned")], axis=1)
    return out.fillna(0).reset_index().astype({"stream": np.int64, "published": np.int64, "returned": np.int64})


def _published(counts: pd.DataFrame) -> pd.DataFrame:
    """basic.publish per (stream, exchange, routing key) from `_publish_counts` (of a partition,
    or added over its slices): published, and returned (basic.return: the broker could not
    route a mandatory publish), sorted by key."""
    counts = counts.groupby(PUBLISH_KEY, as_index=False)[["published", "returned"]].sum()
    return counts[counts["published"].to_numpy() > 0].reset_index(drop=True).astype(
        {"stream": np.int64, "published": np.int64, "returned": np.int64})


def _bind_rows(f: pd.DataFrame, method: str) -> pd.DataFrame:
    cols = ["exchange", "routing_key", "queue"]
    return f.loc[(f["method"] == method).to_numpy(bool), cols].astype(object).dropna().drop_duplicates(ignore_index=True)


def _queue_counts(part: Capture, d: pd.DataFrame, acked: np.ndarray) -> pd.DataFrame:
    """Per queue named by deliveries: delivered, acked, requeued, lossy_out."""
    q = d["queue"].astype(object)
    known = q.notna().to_numpy()
    requeued = d["settle_requeue"].to_numpy(bool, na_value=False)
    lossy = d["stream"].isin(lossy_streams(part)).to_numpy()
    out = pd.DataFrame({"delivered": q[known].value_counts(), "acked": q[known & acked].value_counts(),
                        "requeued": q[known & requeued].value_counts(), "lossy_out": q[known & lossy].value_counts()})
    return out.fillna(0).astype(np.int64)


def _consumer_counts(d: pd.DataFrame, acked: np.ndarray, first_order: np.ndarray | None = None) -> pd.DataFrame:
    """Per consumer (CONSUMER_KEY; basic.get deliveries: one per channel), in order of first
    delivery, with its first and last delivery's ts; of a slice (`first_order`: its deliveries' whole orders), with each consumer's
    first delivery's and first queue's orders (``_first``, ``_queue_first``)."""
    d = d.assign(acked=acked, consumer_tag=d["consumer_tag"].astype(object))
    if first_order is not None:
        d = d.assign(_first=first_order, _queue_first=np.where(d["queue"].notna(), first_order, np.iinfo(np.int64).max))
    g = d.groupby(CONSUMER_KEY, sort=False)
    more = {} if first_order is None else {"_first": ("_first", "min"), "_queue_first": ("_queue_first", "min")}
    return g.agg(delivered=("acked", "size"), acked=("acked", "sum"), no_ack=("no_ack", "any"),
                 queue=("queue", "first"), first_ts=("ts", "min"), last_ts=("ts", "max"), **more).reset_index()


def lossy_streams(cap: Capture) -> np.ndarray:
    """Streams with bytes missing from the capture (gaps, truncation): their counts are lower bounds."""
    c = cap.connections
    return c.loc[c["bytes_missing"].to_numpy() > 0, "stream"].to_numpy(np.int64)


def held_back_streams(cap: Capture) -> np.ndarray:
    """Streams whose publishes the broker may not have read by the end of the capture: it
    advertised a zero window to the client (Wireshark's tcp.analysis.zero_window: window 0 on a
    segment without SYN, FIN or RST) or sent connection.blocked. Bytes TCP delivered wait in the
    broker's socket buffer until it reads them, so they are not in a queue yet."""
    p, f = cap.packets, cap.frames
    zero = ((p["direction"] == "s2c").to_numpy(bool) & (p["window"].to_numpy() == 0)
            & ((p["flags"].to_numpy() & 0x07) == 0))
    blocked = (f["method"] == "connection.blocked").to_numpy(bool)
    return np.union1d(p["stream"].to_numpy()[zero], f["stream"].to_numpy()[blocked]).astype(np.int64)


def _rate_counts(part: Capture, d: pd.DataFrame, acked: np.ndarray, amqp10: dict) -> dict[str, np.ndarray]:
    """Messages published, delivered and acked per time bin (`rate_edges`), AMQP 1.0's
    (`_amqp10_counts`) with 0-9-1's."""
    edges = rate_edges(part)
    if edges is None:
        return {k: np.zeros(0, np.int64) for k in RATE_SERIES}
    f, t0 = part.frames, part.summary["first_ts"]
    t = (f["ts"] - t0).dt.total_seconds().to_numpy()
    c2s, s2c = (f["direction"] == "c2s").to_numpy(bool), (f["direction"] == "s2c").to_numpy(bool)
    kinds = {"published": (f["method"] == "basic.publish").to_numpy(bool) & c2s,
             "delivered": f["method"].isin(D.DELIVER_METHODS).to_numpy(bool) & s2c}
    counts = {k: np.histogram(t[m], edges)[0] for k, m in kinds.items()}
    counts["acked"] = np.histogram((d.loc[acked, "settle_ts"] - t0).dt.total_seconds().to_numpy(), edges)[0]
    for k in RATE_SERIES:
        if len(amqp10[k]):
            counts[k] = counts[k] + np.histogram((amqp10[k] - t0.value) / 1e9, edges)[0]
    return counts


def frame_count(cap: Capture) -> int:
    """Rows of the capture's frames table (an outline holds none: its tally counts them)."""
    given = cap.context.tally
    return given.frames if given is not None else len(cap.frames)


def amqp10_frame_count(cap: Capture) -> int:
    """Rows of the capture's amqp10_frames table (an outline holds none: its tally counts them)."""
    given = cap.context.tally
    return given.amqp10_frames if given is not None else len(cap.amqp10_frames)


def packet_count(cap: Capture) -> int:
    """Rows of the capture's packets table (an outline holds none: its tally counts them)."""
    given = cap.context.tally
    return given.packets if given is not None else len(cap.packets)


def method_counts(cap: Capture) -> dict[str, int]:
    """Method frames per method, most first (ties by name)."""
    m = capture_tally(cap).methods
    m = m[m > 0]
    order = sorted(range(len(m)), key=lambda i: (-int(m.iloc[i]), str(m.index[i])))
    return {str(m.index[i]): int(m.iloc[i]) for i in order}


class TallyCounts(Analyzer[list, list]):
    """What summary.json, the overview and the report count of the capture (`Tally`): an analyzer
    of the summary, run beside the others on every partition or slice of one, whose finish is
    the capture's tally rather than a result of its own (`capture_tally` reads it)."""

    name = "tally"
    reads_derivations = True

    def start(self, facts: CaptureFacts) -> list[Tally]:
        return []

    def step(self, pieces: list[Tally], rows: Capture, facts: CaptureFacts, last: bool) -> list[Tally]:
        before = [p.amqp10_rows for p in pieces if p.amqp10_rows is not None and len(p.amqp10_rows)]
        return [*pieces, _counts_of(rows, last, before)]

    def close(self, pieces: list[Tally], rows: Capture, facts: CaptureFacts) -> list[Tally]:
        """The partition's tally, in a list of the partitions'."""
        whole = seeds_of(for_derivations(rows)) is None
        return [pieces[0] if whole else _slices_joined(pieces)]

    def merge(self, a: list[Tally], b: list[Tally]) -> list[Tally]:
        return a + b

    def finish(self, parts: list[Tally], whole: Capture, facts: CaptureFacts) -> Tally:
        return Tally.joined(parts)


def _counts_of(rows: Capture, last: bool, amqp10_before: list[pd.DataFrame]) -> Tally:
    """The counts of a partition whole (`tally_of`), or of a slice of its time: its own packets
    and frames, and the deliveries it tells (`amqpcap.derive.replay.told`: a delivery once it is
    settled or final). Nothing is carried: what is still open at the cut is replayed to the next
    slice."""
    view = for_derivations(rows)
    if seeds_of(view) is None:
        return tally_of(rows)
    d = D.deliveries(view)
    keep = told(view, d["order"].to_numpy(np.int64), last)
    d = d[keep]
    return _counted(rows, d, seeds_of(view).whole_orders(d["order"].to_numpy(np.int64)), amqp10_before, last)


def _slices_joined(pieces: list[Tally]) -> Tally:
    """The partition's tally from its slices' (`_counts_of`): `tally_of` the partition."""
    whole = Tally.joined(pieces)
    c = pd.concat([p.consumers for p in pieces], ignore_index=True)
    first = c.groupby(CONSUMER_KEY, sort=False).agg(
        _first=("_first", "min"), delivered=("delivered", "sum"), acked=("acked", "sum"), no_ack=("no_ack", "any"),
        first_ts=("first_ts", "min"), last_ts=("last_ts", "max"))
    # each consumer's queue: that of its first delivery naming one
    named = c[c["queue"].notna()].sort_values("_queue_first", kind="stable").drop_duplicates(CONSUMER_KEY)
    first = first.join(named.set_index(CONSUMER_KEY)["queue"]).sort_values("_first", kind="stable")
    consumers = first.drop(columns="_first").reset_index()
    consumers["queue"] = consumers["queue"].astype(c["queue"].dtype)
    consumers = consumers[CONSUMER_KEY + ["delivered", "acked", "no_ack", "queue", "first_ts", "last_ts"]]
    queues = pd.concat([p.queues for p in pieces]).groupby(level=0, sort=True).sum()
    queues.index = queues.index.astype(object)  # (text, as each slice's; the groupby makes it str)
    flags = pd.concat([p.roles for p in pieces]).groupby(level=0, sort=True).any()
    return replace(whole, roles=roles_of(flags), amqp10_rows=None,
                   publishes=_published(pd.concat([p.publishes for p in pieces], ignore_index=True)),
                   consumers=consumers, queues=queues)
