"""The queues' backlogs joined from every partition's queue events and read at every partition's
acks and consumers, in cells of the capture's packets taken one after the other (issue 13).

A queue's backlog is a running sum over the capture's frames in order (`amqpcap.derive.backlog`:
publishes routed to the queue add, deliveries subtract). Joined in one piece, it held an event
per message of the whole capture in one process: 14 GB for a 100M-packet capture. Instead the
frames are cut into cells of consecutive packets (`CELL_PACKETS` each; a capture's packet count
is known before any step: `amqpcap.model.facts.CaptureFacts.records`):

- a partition's context step cuts its queue events and acks into the cells (`shares_of`; on a
  worker they are kept in the store, `amqpcap.io.kept_rows`, and only their paths travel);
- `plan`: what every cell needs of all partitions, all small: the routes (the queue.binds and
  the consumed queues), the consumers' start and end;
- `prepare`: one cell's shares of every partition read (`CellInput`: its queue events and its
  acks), which needs nothing of the cells before it;
- `cell`: one cell's input, given what the cells before it left (`Carry`: each queue's running
  sum, its least value so far and its last backlog; the acks whose next delivery lies in a
  later cell; each consumer's latest row so far). It answers the acks it can, each as its
  partition's piece;
- `answers_of`: a partition's pieces as its `BacklogAnswers`.

A cell needs the cells before it, so they run in order (`BACKLOG_JOIN`, a
`amqpcap.analysis.partition.CellJoin`: here, or as a chain of tasks on the Dask workers, where the next
cell's input is read while a cell runs); what one holds is a cell's events. Every answer is the
one the whole backlog in one piece gives (tests compare one cell with many).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..io.kept_rows import keep_each, part_frame, parts_together
from ..analysis.partition import CellJoin
from .backlog import BacklogAnswers, BacklogQuestions
from .columns import asof, group_cumsum, range_min, sorted_group_cummin

#: packets of the capture per cell of the backlog join: what a cell task holds is the queue
#: events and acks of this many packets (about 1 GB at 4M packets of one message each)
CELL_PACKETS = 4_000_000

_NO_ROW = np.iinfo(np.int64).max  # (a range without a row: above every backlog)


def cells_for(records: int) -> int:
    """Cells of a capture of `records` packets (one when unknown: 0)."""
    return max(1, -(-records // CELL_PACKETS))


def cell_of(packet: np.ndarray, cells: int, records: int) -> np.ndarray:
    """The cell of each packet number (1-based, as frame numbers): `cells` runs of consecutive
    packets of about equal length."""
    packet = np.asarray(packet, np.int64)
    if cells == 1:
        return np.zeros(len(packet), np.int64)
    return np.clip((packet - 1) * cells // max(records, 1), 0, cells - 1)


@dataclass(frozen=True)
class BacklogShares:
    """A partition's context for the backlog join (`shares_of`)."""

    #: queue.bind frames (`QueueEvents.binds`)
    binds: pd.DataFrame
    #: the queues its deliveries came from (text)
    consumed: np.ndarray
    #: the largest frame rank of its frames + 1 (frame keys: packet × width + rank)
    width: int
    #: packets of the capture, and cells (`cells_for`)
    records: int
    #: rows of its acks (`BacklogQuestions.acks`) and consumers
    acks: int
    #: its consumers: queue (categorical), start_ts, end_ts (int64 ns)
    consumers: pd.DataFrame
    #: per cell: its (publishes, takes, acks) there, each a frame or a `KeptPart`; the acks with
    #: a queue only, each with its ``row`` among the partition's acks
    cells: list


def shares_of(q: BacklogQuestions, records: int) -> BacklogShares:
    """A partition's questions (`BacklogQuestions`) cut into the capture's cells, by the packet of
    each event and ack (kept in the store on a worker: `amqpcap.io.kept_rows.keep`)."""
    n = cells_for(records)
    ev = q.events
    acks = q.acks.assign(row=np.arange(len(q.acks), dtype=np.int64))
    acks = acks[acks["queue"].notna().to_numpy()]  # (the others are not answered: <NA>)
    tables = {"publishes": ev.publishes, "takes": ev.takes, "acks": acks}
    cut = {name: keep_each(t, cell_of(t["packet"].to_numpy(np.int64), n, records), n, "packet",
                           lambda r, name=name: (f"backlog/cell={r}/{name}", None))
           for name, t in tables.items()}
    takes = ev.takes["queue"].array
    used = np.unique(takes.codes[takes.codes >= 0])
    ranks = [ev.publishes["rank"], ev.takes["rank"], q.acks["rank"], q.acks["next_rank"]]
    return BacklogShares(
        binds=ev.binds, consumed=np.asarray(takes.categories, dtype=object)[used],
        width=max((int(r.max()) for r in ranks if len(r)), default=0) + 1, records=records, acks=len(q.acks),
        consumers=q.consumers,
        cells=[tuple(cut[name][r] for name in tables) for r in range(n)])


@dataclass(frozen=True)
class BacklogPlan:
    """What every cell needs of all partitions (`plan`)."""

    #: the consumed queues, sorted: a queue's code is its position
    names: np.ndarray
    #: (exchange, routing_key) → q: the binds to a consumed queue, and the default exchange's
    routes: pd.DataFrame
    width: int
    records: int
    cells: int
    #: per partition: rows of its acks and of its consumers
    sizes: list[tuple[int, int]]

    def frame_key(self, packet: np.ndarray, rank: np.ndarray) -> np.ndarray:
        """A frame's key, ordered as the frames: packet × width + its rank in the packet."""
        return packet * self.width + rank


@dataclass(frozen=True)
class Carry:
    """What the cells before one leave it."""

    #: per queue (a code): running sum after its last row so far, least running sum so far
    #: (`_NO_ROW` before any row: `seen`), backlog after its last row so far
    run_end: np.ndarray
    run_low: np.ndarray
    last: np.ndarray
    #: acks whose next delivery is in a later cell: part, row, q, next_key, next_cell, at (their
    #: backlog, known), low (the least backlog since, so far)
    pending: pd.DataFrame
    #: a consumer's start (end False) and end: part, row, end, q (-1: a queue not consumed),
    #: ts (int64 ns), and the latest backlog row so far with ts ≤ it (by ts, then frame):
    #: best_ts, best_key (-1: none), best_value
    consumers: pd.DataFrame

    @property
    def seen(self) -> np.ndarray:
        """Per queue: whether an earlier cell had a row of it."""
        return self.run_low != _NO_ROW


def plan(contexts: list[BacklogShares]) -> tuple[BacklogPlan, Carry, list[list]]:
    """The plan of the cells, the first carry, and each cell's inputs (`CellJoin.plan`)."""
    cells = {len(s.cells) for s in contexts}
    if len(cells) != 1 or len({s.records for s in contexts}) != 1:
        raise ValueError(f"the partitions were cut into different cells: {sorted(cells)}")
    names = np.unique(np.concatenate([s.consumed for s in contexts] or [np.zeros(0, object)]).astype(str))
    # routes (exchange, routing key) → queue to the consumed queues: the binds, and the default
    # exchange's (routing key = queue name)
    binds = _as_text(pd.concat([s.binds for s in contexts], ignore_index=True))
    binds = binds[binds["queue"].isin(names) & binds["exchange"].notna() & binds["routing_key"].notna()]
    routes = pd.concat([binds, pd.DataFrame({"queue": names, "exchange": "", "routing_key": names})],
                       ignore_index=True).drop_duplicates()
    routes = pd.DataFrame({"exchange": routes["exchange"].to_numpy(object),
                           "routing_key": routes["routing_key"].to_numpy(object),
                           "q": np.searchsorted(names, routes["queue"].to_numpy(object).astype(str))})
    p = BacklogPlan(names, routes, max(s.width for s in contexts), contexts[0].records, cells.pop(),
                    [(s.acks, len(s.consumers)) for s in contexts])
    Q = len(names)
    pending = pd.DataFrame({c: np.zeros(0, np.int64) for c in ("part", "row", "q", "next_key", "next_cell", "at", "low")})
    first = Carry(np.zeros(Q, np.int64), np.full(Q, _NO_ROW, np.int64), np.zeros(Q, np.int64),
                  pending, _consumer_queries(names, contexts))
    return p, first, [[s.cells[r] for s in contexts] for r in range(p.cells)]


def _consumer_queries(names: np.ndarray, contexts: list[BacklogShares]) -> pd.DataFrame:
    """Each consumer with a queue, twice: at its start and at its end (its queue a categorical:
    `BacklogQuestions.consumers`)."""
    out = []
    index = pd.Index(names)
    for i, s in enumerate(contexts):
        c = s.consumers
        ok = np.flatnonzero(c["queue"].notna().to_numpy())
        q = _codes_into(index, c["queue"])[ok]
        for end, col in ((False, "start_ts"), (True, "end_ts")):
            out.append(pd.DataFrame({"part": i, "row": ok, "end": end, "q": q,
                                     "ts": c[col].to_numpy(np.int64)[ok]}))
    df = pd.concat(out, ignore_index=True)  # (two frames a partition, maybe empty: never none)
    return df.assign(best_ts=np.iinfo(np.int64).min, best_key=np.int64(-1), best_value=np.int64(0))


@dataclass(frozen=True)
class CellRows:
    """A cell's backlog rows: one per (queue, frame) with an event, by queue then frame."""

    q: np.ndarray
    key: np.ndarray
    ts: np.ndarray
    #: the least number of messages known to wait in the queue after the frame
    backlog_min: np.ndarray
    #: running sum and its least value so far, after the frame
    run: np.ndarray
    low: np.ndarray


@dataclass(frozen=True)
class CellInput:
    """A cell's shares of every partition, read (`prepare`)."""

    #: its queue events: queue (code), frame key, ts, delta (`_cell_events`)
    events: tuple[np.ndarray, ...]
    #: its acks (`_acks`)
    acks: pd.DataFrame


def prepare(p: BacklogPlan, inputs: list, r: int) -> CellInput:
    """Cell `r`'s shares of every partition read (`CellJoin.prepare`): nothing of the cells before
    it is needed, so it may be read while they run."""
    return CellInput(_cell_events(p, inputs), _acks(p, inputs))


def cell_rows(p: BacklogPlan, carry: Carry, events: tuple[np.ndarray, ...]) -> CellRows:
    """A cell's backlog rows from its queue events (`_cell_events`), continuing the carry's sums.

    A publish counts for queue Q when it goes to the default exchange with routing key Q, or to
    an (exchange, routing key) that a queue.bind in the capture bound Q with (exact key: direct
    exchanges; wildcards and fanout are not interpreted). Deliveries from Q subtract, nack/reject
    with requeue add back. Messages already in Q when the capture started are unknown, so the
    running sum is a lower bound of the backlog: the backlog is at least (published − delivered)
    since the lowest point of the running sum, and never below 0."""
    q, key, ts, delta = events
    # summed per (queue, frame), in (queue, frame) order
    by = _by_queue_and_frame(q, key)
    q, key, delta = q[by], key[by], delta[by]
    first = np.flatnonzero(np.r_[True, (q[1:] != q[:-1]) | (key[1:] != key[:-1])]) if len(q) else np.zeros(0, np.int64)
    if len(first) < len(q):  # (else no frame has two events of one queue: nothing to sum)
        delta = np.add.reduceat(delta, first)
        q, key, by = q[first], key[first], by[first]
    ts = ts[by]
    run = group_cumsum(q, delta)
    run += carry.run_end[q]
    # the running minimum of each queue, from its least value before the cell
    low = sorted_group_cummin(q, run)
    np.minimum(low, carry.run_low[q], out=low)
    backlog_min = np.minimum(low, 0)
    np.subtract(run, backlog_min, out=backlog_min)
    return CellRows(q, key, ts, backlog_min, run, low)


def _by_queue_and_frame(q: np.ndarray, key: np.ndarray) -> np.ndarray:
    """The stable order of events by (queue, frame key): one sort of the pair packed into an int64
    (a merge of the runs `_cell_events` gives in order), or `np.lexsort` when it does not fit."""
    span = int(key.max()) + 1 if len(key) else 0
    if len(q) and key.min() >= 0 and (int(q.max()) + 1) * span < 2**63:
        return np.argsort(q * span + key, kind="stable")
    return np.lexsort((key, q))


def _cell_events(p: BacklogPlan, inputs: list) -> tuple[np.ndarray, ...]:
    """The events of a cell's shares: queue (code), frame key, ts, delta; publishes joined with
    every route of their (exchange, routing key), on the pair's codes (no text per row). The
    publishes come by queue (`_routed`), then the takes: `cell_rows` sorts them by (queue,
    frame), which then finds them mostly in order."""
    pubs = parts_together([x[0] for x in inputs])[0]
    takes = parts_together([x[1] for x in inputs])[0]
    ex_code, ex_names = _codes(pubs["exchange"])
    rk_code, rk_names = _codes(pubs["routing_key"])
    r_ex = pd.Index(ex_names).get_indexer(p.routes["exchange"].to_numpy(object))
    r_rk = pd.Index(rk_names).get_indexer(p.routes["routing_key"].to_numpy(object))
    seen = (r_ex >= 0) & (r_rk >= 0)  # (a route no publish took)
    width = len(rk_names) + 1
    hit_row, hit_q = _routed(ex_code * width + rk_code, r_ex[seen] * width + r_rk[seen],
                             p.routes["q"].to_numpy(np.int64)[seen])
    take_code, take_names = _codes(takes["queue"])
    to_q = pd.Index(p.names).get_indexer(take_names.astype(str)) if len(take_names) else np.zeros(0, np.int64)
    take_q = np.where(take_code >= 0, to_q[np.maximum(take_code, 0)] if len(to_q) else -1, -1).astype(np.int64)
    ok = take_q >= 0  # (every take's queue is a consumed one: none is dropped)

    def col(d: pd.DataFrame, c: str) -> np.ndarray:
        return d[c].to_numpy(np.int64)

    def keys(d: pd.DataFrame) -> np.ndarray:
        return p.frame_key(col(d, "packet"), col(d, "rank"))

    q = np.concatenate([hit_q, take_q[ok]])
    key = np.concatenate([keys(pubs)[hit_row], keys(takes)[ok]])
    ts = np.concatenate([col(pubs, "ts")[hit_row], col(takes, "ts")[ok]])
    delta = np.concatenate([np.ones(len(hit_row), np.int64), col(takes, "delta")[ok]])
    return q, key, ts, delta


def _routed(pair: np.ndarray, route_pair: np.ndarray, route_q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows of `pair` (a publish's (exchange, routing key) code) joined with the routes of the
    same pair to their queue `route_q`: (row, queue) of every hit, by queue, each route's rows in
    their order (the join of `pd.merge`, without its hash table and its copies)."""
    order = np.lexsort((route_pair, route_q))
    route_pair, route_q = route_pair[order], route_q[order]
    by_pair = np.argsort(pair, kind="stable")
    lo = np.searchsorted(pair[by_pair], route_pair, "left")
    count = np.searchsorted(pair[by_pair], route_pair, "right") - lo
    # each route's positions in by_pair, lo to lo + count, one route after the other
    first = np.cumsum(count) - count
    at = np.arange(int(count.sum()), dtype=np.int64) + np.repeat(lo - first, count)
    return by_pair[at], np.repeat(route_q, count)


def cell(p: BacklogPlan, carry: Carry, given: CellInput, r: int) -> tuple[Carry, list]:
    """Cell `r` (`CellJoin.cell`) from its input (`prepare`): its rows, the acks answered in it as
    each partition's piece (``(acks, consumers)``: frames or `KeptPart`s, the consumers' in the
    last cell only), and the carry for the next cell."""
    rows = cell_rows(p, carry, given.events)
    done, waiting = _answer_acks(p, carry, rows, given.acks, r)
    finished, still = _answer_pending(p, carry.pending, rows, r)
    answered = pd.concat([done, finished], ignore_index=True)
    pending = pd.concat([still, waiting], ignore_index=True)
    consumers = _latest_rows(carry.consumers, rows)
    final = r == p.cells - 1
    if final and len(pending):
        raise ValueError(f"{len(pending):,} acks wait for a delivery after the last cell")
    n = len(p.sizes)
    growth = _each_part(_growth(p, consumers), n, "backlog/growth") if final else [None] * n
    pieces = list(zip(_each_part(answered, n, f"backlog/cell={r}/answers"), growth))
    return _carried(carry, rows, pending, consumers), pieces


def _carried(carry: Carry, rows: CellRows, pending: pd.DataFrame, consumers: pd.DataFrame) -> Carry:
    """The carry after a cell: each queue's sums and backlog after its last row there."""
    ends = np.flatnonzero(np.r_[rows.q[1:] != rows.q[:-1], True]) if len(rows.q) else np.zeros(0, np.int64)
    qe = rows.q[ends]
    run_end, run_low, last = carry.run_end.copy(), carry.run_low.copy(), carry.last.copy()
    run_end[qe], run_low[qe], last[qe] = rows.run[ends], rows.low[ends], rows.backlog_min[ends]
    return Carry(run_end, run_low, last, pending, consumers)


def _each_part(df: pd.DataFrame, n: int, table: str) -> list:
    """`df`'s rows of each of `n` partitions (its ``part`` column, dropped), in their order, each
    kept as that partition's piece of `table` (by ``row``)."""
    return keep_each(df.drop(columns="part"), df["part"].to_numpy(np.int64), n, "row", lambda i: (table, i))


def _acks(p: BacklogPlan, inputs: list) -> pd.DataFrame:
    """A cell's acks of every partition: part, row, q (-1: not a consumed queue), key,
    next_key, next_cell (-1: no next delivery)."""
    a, rows = parts_together([x[2] for x in inputs])
    nxt = a["next_packet"].to_numpy(np.int64)
    a = pd.DataFrame({
        "part": np.repeat(np.arange(len(inputs), dtype=np.int64), rows), "row": a["row"].to_numpy(np.int64),
        "q": _codes_into(pd.Index(p.names), a["queue"]),
        "key": p.frame_key(a["packet"].to_numpy(np.int64), a["rank"].to_numpy(np.int64)),
        "next_key": np.where(nxt >= 0, p.frame_key(nxt, a["next_rank"].to_numpy(np.int64)), -1),
        "next_cell": np.where(nxt >= 0, cell_of(np.maximum(nxt, 1), p.cells, p.records), -1)})
    return a[a["q"].to_numpy() >= 0]


def _answer_acks(p: BacklogPlan, carry: Carry, rows: CellRows, acks: pd.DataFrame, r: int):
    """The acks of cell `r`: the backlog right after each (the last row of its queue at or before
    its frame, maybe in an earlier cell: the carry's), and its least value until the next delivery
    (<NA> without one): answered when that delivery is in this cell, else left pending."""
    q, key = acks["q"].to_numpy(np.int64), acks["key"].to_numpy(np.int64)
    hit = asof(q, key, rows.q, rows.key)
    at_ok = (hit >= 0) | carry.seen[q]
    at = np.where(hit >= 0, rows.backlog_min[np.maximum(hit, 0)] if len(rows.q) else 0, carry.last[q])
    start, end = _queue_bounds(rows, q)
    lo = np.where(hit >= 0, hit + 1, start)
    next_cell = acks["next_cell"].to_numpy(np.int64)
    here = next_cell == r
    hi = np.where(here, _before(rows, q, acks["next_key"].to_numpy(np.int64), start), end)
    low = np.minimum(at, range_min(rows.backlog_min, lo, hi, _NO_ROW))
    has_next = next_cell >= 0
    answered = ~at_ok | ~has_next | here
    done = pd.DataFrame({"part": acks["part"].to_numpy(np.int64), "row": acks["row"].to_numpy(np.int64),
                         "at": at, "at_ok": at_ok, "gap": low, "gap_ok": at_ok & has_next})[answered]
    waiting = pd.DataFrame({"part": acks["part"].to_numpy(np.int64), "row": acks["row"].to_numpy(np.int64), "q": q,
                            "next_key": acks["next_key"].to_numpy(np.int64), "next_cell": next_cell,
                            "at": at, "low": low})[~answered]
    return done, waiting


def _answer_pending(p: BacklogPlan, pending: pd.DataFrame, rows: CellRows, r: int):
    """The acks left pending by earlier cells: answered when their next delivery is in this cell
    (the least backlog up to its frame), else lowered by every row of their queue here."""
    q = pending["q"].to_numpy(np.int64)
    start, end = _queue_bounds(rows, q)
    here = pending["next_cell"].to_numpy(np.int64) == r
    hi = np.where(here, _before(rows, q, pending["next_key"].to_numpy(np.int64), start), end)
    low = np.minimum(pending["low"].to_numpy(np.int64), range_min(rows.backlog_min, start, hi, _NO_ROW))
    done = pd.DataFrame({"part": pending["part"].to_numpy(np.int64), "row": pending["row"].to_numpy(np.int64),
                         "at": pending["at"].to_numpy(np.int64), "at_ok": True, "gap": low, "gap_ok": True})[here]
    return done, pending.assign(low=low)[~here]


def _queue_bounds(rows: CellRows, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first row of each query's queue in the cell and one past its last (rows are sorted by
    queue)."""
    return np.searchsorted(rows.q, q, side="left"), np.searchsorted(rows.q, q, side="right")


def _before(rows: CellRows, q: np.ndarray, key: np.ndarray, start: np.ndarray) -> np.ndarray:
    """One past the last row of each query's queue before frame `key` (`start` when none)."""
    last = asof(q, key, rows.q, rows.key, allow_exact_matches=False)
    return np.where(last >= 0, last + 1, start)


def _latest_rows(consumers: pd.DataFrame, rows: CellRows) -> pd.DataFrame:
    """Each consumer query's latest backlog row so far with ts at or before its own: the last of
    its queue's rows ordered by ts, then frame (as a stable sort by ts of rows in frame order)."""
    if not len(rows.q) or not len(consumers):
        return consumers
    q, t = consumers["q"].to_numpy(np.int64), consumers["ts"].to_numpy(np.int64)
    hit = asof(q, t, rows.q, rows.ts)
    h = np.maximum(hit, 0)
    ts, key = rows.ts[h], rows.key[h]
    best_ts, best_key = consumers["best_ts"].to_numpy(np.int64), consumers["best_key"].to_numpy(np.int64)
    # a later cell's rows have later frames: at an equal ts, its row comes after
    newer = (hit >= 0) & (ts >= best_ts)
    return consumers.assign(best_ts=np.where(newer, ts, best_ts), best_key=np.where(newer, key, best_key),
                            best_value=np.where(newer, rows.backlog_min[h], consumers["best_value"].to_numpy(np.int64)))


def _growth(p: BacklogPlan, consumers: pd.DataFrame) -> pd.DataFrame:
    """Each consumer's queue's backlog at its end minus at its start (a queue without a row there:
    0), with part and row; <NA> for all when no queue was consumed."""
    value = np.where(consumers["best_key"].to_numpy(np.int64) >= 0, consumers["best_value"].to_numpy(np.int64), 0)
    end = consumers["end"].to_numpy(bool)
    starts = consumers[~end].reset_index(drop=True)
    ends = consumers[end].reset_index(drop=True)
    if not (starts[["part", "row"]].to_numpy() == ends[["part", "row"]].to_numpy()).all():
        raise ValueError("a consumer's start and end queries are out of step")
    return pd.DataFrame({"part": starts["part"].to_numpy(np.int64), "row": starts["row"].to_numpy(np.int64),
                         "growth": value[end] - value[~end], "ok": len(p.names) > 0})


def _codes(col: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """A categorical column's rows as codes (-1: missing) into its categories, returned as text
    objects; no row made text."""
    return col.cat.codes.to_numpy(np.int64), np.asarray(col.cat.categories, dtype=object)


def _codes_into(names: pd.Index, col: pd.Series) -> np.ndarray:
    """A categorical column's rows as codes into `names` (-1: missing, or not among them): its
    categories are looked up, not its rows."""
    to_names = names.get_indexer(np.asarray(col.cat.categories, dtype=object)).astype(np.int64)
    own = col.cat.codes.to_numpy(np.int64)
    return np.where(own >= 0, to_names[np.maximum(own, 0)] if len(to_names) else -1, -1)


def _as_text(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with its categorical columns (`text_codes`) as text objects, None where missing."""
    cat = [c for c in df.columns if isinstance(df[c].dtype, pd.CategoricalDtype)]
    return df.assign(**{c: df[c].astype(object).where(df[c].notna(), None) for c in cat})


@dataclass(frozen=True)
class BacklogPieces:
    """A partition's answers from the cells (`CellJoin.context`): what its step is given."""

    acks: int
    consumers: int
    #: per cell: (acks answered there, the consumers' growth or None), frames or `KeptPart`s
    pieces: list


def pieces_of(p: BacklogPlan, i: int, pieces: list) -> BacklogPieces:
    return BacklogPieces(*p.sizes[i], pieces)


def answers_of(b: BacklogPieces) -> BacklogAnswers:
    """A partition's `BacklogAnswers`, row for row, from its pieces (rows not answered: <NA>)."""
    at, gap, growth = (_Filled(b.acks), _Filled(b.acks), _Filled(b.consumers))
    for acks, grown in b.pieces:
        a = part_frame(acks)
        rows = a["row"].to_numpy(np.int64)
        at.put(rows, a["at"].to_numpy(np.int64), a["at_ok"].to_numpy(bool))
        gap.put(rows, a["gap"].to_numpy(np.int64), a["gap_ok"].to_numpy(bool))
        if grown is not None:
            g = part_frame(grown)
            growth.put(g["row"].to_numpy(np.int64), g["growth"].to_numpy(np.int64), g["ok"].to_numpy(bool))
    return BacklogAnswers(at.array(), gap.array(), growth.array())


class _Filled:
    """An Int64 column filled in by row (<NA> where nothing was put)."""

    def __init__(self, n: int) -> None:
        self.values, self.missing = np.zeros(n, np.int64), np.ones(n, bool)

    def put(self, rows: np.ndarray, values: np.ndarray, ok: np.ndarray) -> None:
        self.values[rows], self.missing[rows] = values, ~ok

    def array(self) -> pd.api.extensions.ExtensionArray:
        return pd.arrays.IntegerArray(self.values, self.missing)


#: the backlog joined in cells (`amqpcap.analysis.partition.CellJoin`): the consumers and latency
#: analyzers' `join_context`
BACKLOG_JOIN = CellJoin(plan=plan, prepare=prepare, cell=cell, context=pieces_of)


def backlog_rows(contexts: list[BacklogShares]) -> pd.DataFrame:
    """Every consumed queue's backlog over time from the partitions' shares (the cells' rows
    together; for notebooks and tests): one row per (queue, frame) with an event, by queue then
    frame: queue (categorical), packet, rank (the frame's key), ts (int64 ns), backlog_min."""
    p, carry, inputs = plan(contexts)
    parts = []
    for cell_inputs in inputs:
        rows = cell_rows(p, carry, _cell_events(p, cell_inputs))
        parts.append(rows)
        carry = _carried(carry, rows, carry.pending, carry.consumers)  # (the sums alone: no ack is answered)
    q = np.concatenate([x.q for x in parts])
    key = np.concatenate([x.key for x in parts])
    by = np.lexsort((key, q))  # (each cell's rows are by queue: the cells' together, by queue again)
    return pd.DataFrame({"queue": pd.Categorical.from_codes(q[by], p.names), "packet": key[by] // p.width,
                         "rank": key[by] % p.width, "ts": np.concatenate([x.ts for x in parts])[by],
                         "backlog_min": np.concatenate([x.backlog_min for x in parts])[by]})
