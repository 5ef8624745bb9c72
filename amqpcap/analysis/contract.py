"""The analyzer contract, as simple as a Wireshark tap (issue 49): a carried state, one step over
rows, a merge of two states, a finish that makes the result.

An analyzer is a class of five methods, registered with ``@analyzer(name)``
(`amqpcap.analysis.registry`); docs/writing-an-analyzer.md builds one step by step:

- ``start(facts)``: the state before any rows (``facts``: what every step knows of the whole
  capture, `CaptureFacts`);
- ``step(state, rows, facts, last)``: the state with ``rows`` added. ``rows`` is a `Capture` of
  some connections whole (the capture in memory, a bucket of a dataset) or a slice of the time
  of one (docs/time-split.md); ``last`` is True on the rows that end it (a whole partition is
  one step with ``last`` True). Each connection's packets and frames come in packet order,
  slice after slice, and its connections row is whole in every slice;
- ``close(state, rows, facts)``: what the partition's state comes to at its end (``rows``: its
  last rows, or for a `Carried` state after slices its connections alone), the part that is
  merged (by default the state itself);
- ``merge(a, b)``: two partitions' parts as one (``a`` holds connections before ``b``'s in the
  engine's order of buckets; no connection is in both);
- ``finish(part, whole, facts)``: the `AnalyzerResult` from the parts of every partition merged;
  ``whole`` is the capture, or a dataset's outline (its connections and summary, never its
  packets or frames: what names a connection in a finding).

The engine derives every run from these (`split_of`): in memory, one step over the capture and
its finish; on Dask, a step per bucket on a worker, the parts merged here; a bucket too large for
a worker, its steps over slices of its time one after the other, the state carried between
them. No analyzer writes a partition step twice, nor a run of its own.

What an analyzer may also say (class attributes):

- ``slices`` (True): its step runs over slices of a partition's time. One that cannot is run
  over the whole bucket, while the other analyzers of that bucket still run in slices;
- ``reads_derivations`` (False): its step reads the shared derivations (deliveries, confirms,
  consumers: `amqpcap.derive`), which a slice gives only with what the slice before left open
  replayed (`amqpcap.derive.replay`): the engine makes a first pass over the slices for them;
- ``uses``: a `Need`, what the step needs of every other partition (`BACKLOG`: the queue
  backlog read at the partition's acks). The step is then given its value as one more
  argument: ``step(state, rows, facts, last, backlog)``;
- ``records(records, facts)`` and ``records_columns``: a part made of the capture file's own
  packets (every packet, AMQP or not; only those columns), merged with the partitions' parts.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Generic, TypeVar

import pandas as pd

from ..io.load import Capture
from ..model.facts import CaptureFacts
from .partition import CellJoin, Slicing, Split

State = TypeVar("State")
Part = TypeVar("Part")


class Steps(Generic[State, Part]):
    """A carried state and one step over rows, closed at a partition's end (the module docstring
    says what each method does): what an `Analyzer` is before its merge and finish, and what a
    `Need`'s first round is."""

    slices: ClassVar[bool] = True
    reads_derivations: ClassVar[bool] = False

    def start(self, facts: CaptureFacts) -> State:
        return None  # type: ignore[return-value]

    def step(self, state: State, rows: Capture, facts: CaptureFacts, last: bool, *used: Any) -> State:
        raise NotImplementedError

    def close(self, state: State, rows: Capture, facts: CaptureFacts) -> Part:
        return state  # type: ignore[return-value]

    # -- what the engine derives from the methods above ------------------------------------------

    def over_partition(self, part: Capture, facts: CaptureFacts, *used: Any) -> Part:
        """A partition's part: its rows in one step."""
        return self.close(self.step(self.start(facts), part, facts, True, *used), part, facts)

    def over_slice(self, rows: Capture, facts: CaptureFacts, carry: Any, last: bool, *used: Any) -> tuple[Any, Any]:
        """One slice of a partition's time (`Slicing.step`): the state carried to the next slice
        (``carry`` None: the first), and the slice's piece: at the `last`, the partition's part.

        A `Carried` state's pieces are not carried: each slice's stay its own piece (on Dask, a
        future of the slice's task, not sent on with every later slice), and `joined_slices`
        closes the state with all of them, given the partition's connections."""
        state = self.step(self.start(facts) if carry is None else carry[0], rows, facts, last, *used)
        if isinstance(state, Carried):
            told, state = _Told(state.pieces), Carried(state.carry)
            return (state,), (_Closing(told.pieces, state, outline_of(rows), facts) if last else told)
        return (state,), (self.close(state, rows, facts) if last else None)

    def joined_slices(self, pieces: list) -> Part:
        """The partition's part from its slices' pieces (`over_slice`), in their order."""
        closing = pieces[-1]
        if not isinstance(closing, _Closing):
            return closing  # (closed by the last slice)
        told = [piece for told in pieces for piece in told.pieces]
        return self.close(Carried(closing.state.carry, told), closing.rows, closing.facts)

    def slicing(self) -> Slicing | None:
        """The step over slices of a partition's time, as the engine runs it (None: it cannot)."""
        return Slicing(self.over_slice, self.joined_slices, replays=self.reads_derivations) if self.slices else None


@dataclass(frozen=True)
class Need:
    """What an analyzer's step needs of every partition of the capture (`Analyzer.uses`), made
    by a first round of steps over every partition, before any analyzer's:

    - ``tells``: those steps (`Steps`): a partition's state closes as what it tells the others;
    - ``join(contexts)``: every partition's joined into the value each step is given: one value,
      given to every partition, or a value per partition (`PerPartition`, `CellJoin`).

    Analyzers naming the same `Need` share its round: it runs once."""

    name: str
    tells: Steps
    join: Callable[[list], Any] | CellJoin

    def context(self, part: Capture, facts: CaptureFacts | None) -> Any:
        """What the partition `part` tells the others (its rows in one step)."""
        return self.tells.over_partition(part, facts)


class Analyzer(Steps[State, Part]):
    """An analyzer (the module docstring says what each method does). Subclass it, write its
    methods and register it with ``@analyzer(name)``; the class docstring's first line is its
    command's help."""

    #: the registered name (set by ``@analyzer``)
    name: ClassVar[str] = ""
    uses: ClassVar[Need | None] = None
    #: the columns of the capture's records that `records` reads (None: every column)
    records_columns: ClassVar[tuple[str, ...] | None] = None
    #: ``records(records, facts) -> Part``, when the analyzer reads the file's own packets
    records: ClassVar[Callable[..., Any] | None] = None

    def merge(self, a: Part, b: Part) -> Part:
        raise NotImplementedError

    def finish(self, part: Part, whole: Capture, facts: CaptureFacts) -> Any:
        raise NotImplementedError

    def merged(self, parts: list[Part], records: Part | None, facts: CaptureFacts, whole: Capture) -> Any:
        """The result from every partition's part (in the order of the buckets) and the records'."""
        together = functools.reduce(self.merge, parts)
        parts.clear()  # (the merged part holds the rows now: the partitions' are let go)
        if self.records is not None:
            together = self.merge(together, records)
        return self.finish(together, whole, facts)


@dataclass
class Carried:
    """A state for a step that tells something of each slice of time (rows final once a later
    slice is seen): ``carry``, what the next slice reads of those before, and the ``pieces``
    told so far, which ``close`` joins into the partition's part."""

    carry: Any = None
    pieces: list = field(default_factory=list)

    def then(self, carry: Any, piece: Any) -> "Carried":
        """The state after one more slice: its carry, and its piece told."""
        return Carried(carry, [*self.pieces, piece])


@dataclass
class _Told:
    """What one slice of a partition told (a `Carried` state's pieces of that slice)."""

    pieces: list


@dataclass
class _Closing(_Told):
    """The last slice's piece: what it told, and what the state is closed with."""

    state: Carried
    rows: Capture
    facts: CaptureFacts


def outline_of(rows: Capture) -> Capture:
    """The connections and summary of `rows`, without their packets and frames: what a close
    after the last slice is given (`Steps.joined_slices`)."""
    def none_of(df: pd.DataFrame | None) -> pd.DataFrame | None:
        return None if df is None else df.iloc[:0]

    return Capture(path=rows.path, ports=rows.ports, frames=none_of(rows.frames), packets=none_of(rows.packets),
                   connections=rows.connections, anomalies=none_of(rows.anomalies), records=none_of(rows.records),
                   bodies=none_of(rows.bodies), summary=rows.summary, amqp10_frames=none_of(rows.amqp10_frames))


def split_of(a: Analyzer) -> Split:
    """The partition steps and merge the engine runs for `a` (`amqpcap.analysis.partition.Split`:
    in memory `amqpcap.engine.partitions.run_whole`, on Dask `amqpcap.engine.on_dask`, over slices
    `amqpcap.engine.slices`)."""
    need = a.uses
    context_slicing = _first_round_slicing(need) if need else None
    slices = need is None or context_slicing is not None
    return Split(partial=a.over_partition, merge=a.merged,
                 records=a.records, records_columns=a.records_columns,
                 context=need.context if need else None, join_context=need.join if need else None,
                 slicing=a.slicing() if slices else None, context_slicing=context_slicing)


@functools.cache
def _first_round_slicing(need: Need) -> Slicing | None:
    """A need's first round over slices, one value per need: analyzers that share the need share
    its round over slices too (`amqpcap.engine.slices` runs one step per distinct `Slicing`)."""
    return need.tells.slicing()
