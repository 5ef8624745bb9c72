"""What the engine runs of an analyzer: a step per partition of whole connections, and a merge (issue 13).

An analyzer is written in the contract of `amqpcap.analysis.contract` (a state, a step, a merge,
a finish); the engine runs it as the `Split` derived from it (`amqpcap.analysis.contract.split_of`),
the form this module and `amqpcap.engine` know. No analyzer writes a `Split` itself.

A partition is a `Capture` holding some connections whole (their connections row, packets,
frames, anomalies and bodies) — a bucket of a dataset (`amqpcap.io.dataset`), or the whole capture.
The file's `records` (every packet, AMQP or not) are the capture's own, not a connection's: an
analyzer that needs them has a separate step over them.

A `Split`:

- ``partial(part, facts)``: what the partition contributes (counts, histograms, the rows of its
  own connections: for the per-message tables, every row), picklable: it travels from a worker
  to the merge;
- ``records(records, facts)`` (optional): the same over the capture's `records` (only its
  ``records_columns`` when the split names them);
- ``merge(partials, records_partial, facts, whole)``: the `AnalyzerResult`, from the partials;
  ``whole`` is the capture's own connections table and summary (one row per connection: what
  names a connection in a finding), never its packets or frames.

An analyzer whose partition step needs something of the other partitions (a memory alarm on
one connection explains another's silence) also has a first round:

- ``context(part, facts)``: what every other partition needs of this one (the blocks of its
  connections; its queue events, for the queue backlogs), from a step of its own before any
  ``partial``;
- ``join_context(contexts)``: those of every partition as one value, given to each
  ``partial(part, facts, context)``; or as a `PerPartition`, a value for each partition (the
  queue backlog read at that partition's acks), given to that partition's step alone. A step
  that puts it on ``part.context`` for the derivations does so before any derivation reads it
  (`amqpcap.io.load.Capture.context`).

Run in one process, the analyzer is its own split over one partition (`run_whole`): there is one
code path, so a dataset analysed in any number of partitions gives the in-memory result.
`facts` are what every step needs to know about the whole capture before it starts (the time
axis of the timelines): `facts_of` a capture, `amqpcap.io.dataset.facts` of a dataset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pandas as pd

from ..io.load import Capture
from ..model.facts import CaptureFacts, facts_from_ts
from ..derive.cache import CAPTURE, derivation
from ..derive.stream_order import ns


def facts_of(cap: Capture) -> CaptureFacts:
    """The facts of an in-memory capture (its records' time span, its packets' first time)."""
    p = ns(cap.packets["ts"])
    return facts_from_ts(ns(cap.records["ts"]), int(p.min()) if len(p) else 0)


Partial = Any

@dataclass(frozen=True)
class PerPartition:
    """A joined context that is a value per partition, in the order of the contexts joined:
    each partition's step is given its own (`amqpcap.engine.on_dask` sends each with its bucket's task
    alone, where a joined context of one value goes to every worker)."""

    values: list


@dataclass(frozen=True)
class CellJoin:
    """A `Split.join_context` computed in cells, one after the other, so that no process holds
    every partition's context at once (the queue backlogs: `amqpcap.derive.backlog_join`):

    - ``plan(contexts)``: what every cell needs of all partitions (small), the first carry, and
      each cell's inputs (a share of every partition's context, in partition order);
    - ``prepare(plan, inputs, r)``: cell `r`'s inputs read, without the carry (so, in a chain
      of tasks, while the cells before it run);
    - ``cell(plan, carry, prepared, r)``: cell `r` given what the cells before it left and its
      prepared inputs: the carry for the next cell, and a piece for each partition;
    - ``context(plan, i, pieces)``: partition `i`'s joined context from its pieces, in cell order.

    Called, it runs the cells here; `amqpcap.engine.on_dask` runs them as a chain of tasks on the
    workers, where the partitions' shares were kept (`amqpcap.io.kept_rows`)."""

    plan: Callable[[list], tuple[Any, Any, list[list]]]
    prepare: Callable[[Any, list, int], Any]
    cell: Callable[[Any, Any, Any, int], tuple[Any, list]]
    context: Callable[[Any, int, list], Any]

    def __call__(self, contexts: list) -> PerPartition:
        plan, carry, inputs = self.plan(contexts)
        pieces: list[list] = [[] for _ in contexts]
        for r, cell_inputs in enumerate(inputs):
            carry, out = self.cell(plan, carry, self.prepare(plan, cell_inputs, r), r)
            for mine, piece in zip(pieces, out):
                mine.append(piece)
        return PerPartition([self.context(plan, i, p) for i, p in enumerate(pieces)])


def context_for(joined: Any, i: int) -> Any:
    """What the step of the `i`-th partition (in the order of the contexts joined) is given."""
    return joined.values[i] if isinstance(joined, PerPartition) else joined


@dataclass(frozen=True)
class Slicing:
    """How an analyzer's partition step runs over the partition cut in slices of its packets, one
    after the other (a connection larger than a worker can hold: docs/time-split.md):

    - ``step(part, facts, carry, last)``: a slice (`time_slice`; ``carry`` None at the first,
      ``last`` True at the last) → (the carry for the next slice, the slice's piece); with a
      context step, ``step(part, facts, carry, last, context)``: each slice is given the
      partition's context, as its ``partial`` is (`Split.slice_step`);
    - ``join(pieces)``: the partial from the slices' pieces, exactly the partition's ``partial``
      (`sliced_partial`; the tests compare them on every fixture).

    The slices are cut where no packet before has a later timestamp than a packet after
    (`amqpcap.model.facts.clean_cuts`): the steps that order a connection's packets by time then see them in the
    whole's order, slice after slice."""

    step: Callable[[Capture, CaptureFacts, Any, bool], tuple[Any, Any]]
    join: Callable[[list], Partial]
    #: the step reads the shared derivations (deliveries, confirms, consumers: `amqpcap.derive`)
    #: of the slice with the frames still open at its cut replayed (`amqpcap.derive.replay.
    #: for_derivations`): the slices are then run after a first pass over them, and each slice
    #: is given what the one before left open (``part.context``: `with_replay`)
    replays: bool = False


@dataclass(frozen=True)
class Split:
    #: ``partial(part, facts)``, or ``partial(part, facts, context)`` with a `context` step
    partial: Callable[..., Partial]
    merge: Callable[[list, Partial, CaptureFacts, Capture], Any]
    records: Callable[[pd.DataFrame, CaptureFacts], Partial] | None = None
    context: Callable[[Capture, CaptureFacts], Any] | None = None
    join_context: Callable[[list], Any] | None = None
    #: the columns of the records that ``records`` reads (a dataset's step reads those alone:
    #: a row per packet of the file); None: every column
    records_columns: tuple[str, ...] | None = None
    #: the partition step over slices of the partition's time, when the analyzer has one; and
    #: its context step's (``join`` gives the partition's context, as ``context`` does)
    slicing: Slicing | None = None
    context_slicing: Slicing | None = None

    def __post_init__(self) -> None:
        if (self.context is None) != (self.join_context is None):
            raise TypeError("a Split has both context and join_context, or neither")

    def partial_with(self, part: Capture, facts: CaptureFacts, context: Any = None) -> Partial:
        """The partition step, given the joined context when the split has one."""
        return self.partial(part, facts) if self.context is None else self.partial(part, facts, context)

    def slice_step(self, part: Capture, facts: CaptureFacts, carry: Any, last: bool,
                   context: Any = None) -> tuple[Any, Any]:
        """The step over a slice of the partition's time (`Slicing`), given the partition's
        joined context when the split has one."""
        if self.context is None:
            return self.slicing.step(part, facts, carry, last)
        return self.slicing.step(part, facts, carry, last, context)


def partials_of(split: Split, parts: list[Capture], facts: CaptureFacts, store: str | None = None) -> list[Partial]:
    """The partition steps of `split` over `parts` in this process: the context round first
    (when the split has one), then a partial per partition (`amqpcap.engine.on_dask` runs the same
    rounds as Dask tasks), its per-message tables kept in `store` as bucket i's when given
    (`amqpcap.io.kept_rows`, as on a worker)."""
    from ..io.kept_rows import keeping_in

    ctx = None
    if split.context:
        contexts = []
        for i, p in enumerate(parts):
            with keeping_in(store, i):
                contexts.append(split.context(p, facts))
        with keeping_in(store, -1):  # (a cell join keeps its pieces as each partition's)
            ctx = split.join_context(contexts)
    out = []
    for i, p in enumerate(parts):
        with keeping_in(store, i):
            out.append(split.partial_with(p, facts, context_for(ctx, i)))
    return out


def run_whole(split: Split, cap: Capture) -> Any:
    """The analyzer on an in-memory capture: its split over the one partition that is all of it
    (the context round too, its joined value shared: `_joined_contexts`)."""
    facts = facts_of(cap)
    rec = split.records(cap.records, facts) if split.records else None
    ctx = None
    if split.context is not None:
        kept, key = _joined_contexts(cap), (split.context, split.join_context)
        if key not in kept:
            kept[key] = split.join_context([split.context(cap, facts)])
        ctx = context_for(kept[key], 0)
    return split.merge([split.partial_with(cap, facts, ctx)], rec, facts, cap)


@derivation(CAPTURE)
def _joined_contexts(cap: Capture) -> dict:
    """The joined contexts of the capture as one partition, by (context, join_context): two
    analyzers with the same context round (consumers and latency: the queue backlog) join it
    once. Kept by the derivation cache, so that it goes with the tables it came from."""
    return {}


def joined_once(splits: dict[str, Split], contexts: dict[str, list],
                cells: Callable[[CellJoin, list], Any] | None = None) -> dict[str, Any]:
    """{analyzer: its joined context} from {analyzer: every partition's context}, each
    (context, join_context) pair joined once: analyzers sharing a context round share the value
    (`amqpcap.engine.on_dask` sends each distinct one to the workers once). A `CellJoin` is run by
    ``cells(join, contexts)`` when given (`amqpcap.engine.on_dask`: on the workers)."""
    joined: dict[tuple, Any] = {}
    out = {}
    for name, parts in contexts.items():
        join = splits[name].join_context
        key = (splits[name].context, join)
        if key not in joined:
            joined[key] = cells(join, parts) if cells is not None and isinstance(join, CellJoin) else join(parts)
        out[name] = joined[key]
    return out


def taken(partials: list[dict], name: str) -> list[pd.DataFrame]:
    """Each partial's table `name`, taken out of it: the merge then holds the only reference to
    those rows, freed as `merge_rows` joins them (a per-message table of a large capture takes
    gigabytes in the merging process)."""
    return [q.pop(name) for q in partials]


# --- slices of a partition's time (docs/time-split.md) ------------------------------------------

def time_slice(cap: Capture, first: int, end: int | None) -> Capture:
    """The partition `cap` from packet `first` up to packet `end` (excluded; None: to the end): its
    packets, frames and anomalies of those packets, the bodies of the messages whose last packet
    is there; the connections and summary whole (a slice's steps read each connection's facts)."""
    def rows(df: pd.DataFrame | None, column: str) -> pd.DataFrame | None:
        if df is None or column not in df:
            return df
        packet = df[column].to_numpy(np.int64, na_value=0)  # (a file-level anomaly: the first slice)
        keep = (packet >= first) & (packet < end if end is not None else True)
        return df[keep].reset_index(drop=True)

    return Capture(path=cap.path, ports=cap.ports, frames=rows(cap.frames, "packet"),
                   packets=rows(cap.packets, "packet"), connections=cap.connections,
                   anomalies=rows(cap.anomalies, "packet"), records=cap.records.iloc[:0],
                   bodies=rows(cap.bodies, "last_packet"), summary=cap.summary)


def sliced_partial(split: Split, part: Capture, facts: CaptureFacts, cuts: list[int], context: Any = None) -> Partial:
    """The partition step of `split` over `part` cut at the packets `cuts` (`clean_cuts`), slice
    after slice with the carry between them: the partition's partial, as ``partial`` gives it
    (`Split.partial_with`, given the partition's `context` when the split has a context step)."""
    return sliced_partials({"": split}, part, facts, cuts, {"": context})[""]


def sliced_partials(splits: dict[str, Split], part: Capture, facts: CaptureFacts, cuts: list[int],
                    contexts: dict[str, Any] | None = None) -> dict[str, Partial]:
    """The partition steps of `splits` ({name: split}) over `part` cut at the packets `cuts`, in
    one chain of slices, each slice made once and its derivations shared by every step (as
    `amqpcap.engine.slices.slice_task` runs them on a worker): {name: its partial, as
    `sliced_partial` gives it}, each given its context in `contexts` when it has a context step."""
    contexts = contexts or {}
    for split in splits.values():
        if split.slicing is None:
            raise ValueError("this analyzer has no step over slices of time")

    def step(split: Split, context: Any) -> Callable[[Capture, Any, bool], tuple]:
        return lambda piece_of, carry, last: split.slice_step(piece_of, facts, carry, last, context)

    return _over_slices({name: (split.slicing, step(split, contexts.get(name))) for name, split in splits.items()},
                        part, cuts)


def sliced_context(split: Split, part: Capture, facts: CaptureFacts, cuts: list[int]) -> Any:
    """The context step of `split` over `part` cut at the packets `cuts`, as `sliced_partial`
    runs its partition step: the partition's context, as ``context`` gives it."""
    if split.context_slicing is None:
        raise ValueError("this analyzer has no context step over slices of time")
    return _over_slices({"": (split.context_slicing,
                              lambda piece_of, carry, last: split.context_slicing.step(piece_of, facts, carry, last))},
                        part, cuts)[""]


def _over_slices(steps: dict[str, tuple[Slicing, Callable[[Capture, Any, bool], tuple]]], part: Capture,
                 cuts: list[int]) -> dict[str, Any]:
    """For each of `steps` ({name: (its slicing, ``step(slice, carry, last)``)}), ``slicing.join``
    of its pieces over `part` cut at `cuts`, slice after slice with each step's carry between
    them (after the first pass when one replays: the slices are then given what the slice
    before left open, which only `for_derivations` reads)."""
    from ..derive.replay import ends_of, ends_step, next_replay, with_replay

    bounds = [0, *cuts, None]
    slices = list(zip(bounds, bounds[1:]))
    replays = any(slicing.replays for slicing, _ in steps.values())
    ends = replay = None
    if replays:
        seen = None
        for first, end in slices:
            seen = ends_step(time_slice(part, first, end), seen)
        ends = ends_of(seen)
    carries: dict[str, Any] = dict.fromkeys(steps)
    pieces: dict[str, list] = {name: [] for name in steps}
    for first, end in slices:
        piece_of = time_slice(part, first, end)
        if replays:
            with_replay(piece_of, replay, ends)
        for name, (_, step) in steps.items():
            carries[name], piece = step(piece_of, carries[name], end is None)
            pieces[name].append(piece)
        if replays and end is not None:
            replay = next_replay(piece_of)
    return {name: slicing.join(pieces[name]) for name, (slicing, _) in steps.items()}
