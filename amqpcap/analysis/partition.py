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
  (`amqpcap.io.load.Told`).

This module holds those forms alone; the engine runs them (`amqpcap.engine.partitions` in one
process, `amqpcap.engine.on_dask` and `amqpcap.engine.slices` as Dask tasks). Run in one process,
the analyzer is its own split over one partition (`amqpcap.engine.partitions.run_whole`): there is
one code path, so a dataset analysed in any number of partitions gives the in-memory result.
`facts` are what every step needs to know about the whole capture before it starts (the time
axis of the timelines): `amqpcap.io.pieces.facts_of` a capture, `amqpcap.io.dataset.facts` of a
dataset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import pandas as pd

from ..io.load import Capture
from ..model.facts import CaptureFacts



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

    - ``step(part, facts, carry, last)``: a slice (`amqpcap.io.pieces.time_slice`; ``carry`` None at the first,
      ``last`` True at the last) → (the carry for the next slice, the slice's piece); with a
      context step, ``step(part, facts, carry, last, context)``: each slice is given the
      partition's context, as its ``partial`` is (`Split.slice_step`);
    - ``join(pieces)``: the partial from the slices' pieces, exactly the partition's ``partial``
      (`amqpcap.engine.partitions.sliced_partial`; the tests compare them on every fixture).

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


def taken(partials: list[dict], name: str) -> list[pd.DataFrame]:
    """Each partial's table `name`, taken out of it: the merge then holds the only reference to
    those rows, freed as `merge_rows` joins them (a per-message table of a large capture takes
    gigabytes in the merging process)."""
    return [q.pop(name) for q in partials]
