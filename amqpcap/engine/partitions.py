"""An analyzer's steps run in this process: over the partitions of a capture one after the other
(the in-memory run is its split over the one partition that is all of it: `run_whole`), over the
slices of a partition's time (docs/time-split.md), and the joins of their context rounds. The
same steps run as Dask tasks in `amqpcap.engine.on_dask` and `amqpcap.engine.slices`.
"""

from __future__ import annotations

from typing import Any, Callable

from ..analysis.contract import Analyzer, split_of
from ..analysis.partition import CellJoin, Partial, Slicing, Split, context_for
from ..derive.cache import CAPTURE, derivation
from ..derive.replay import ends_of, ends_step, next_replay, with_replay
from ..io.kept_rows import keeping_in
from ..io.load import Capture
from ..io.pieces import facts_of, time_slice
from ..model.facts import CaptureFacts


def partials_of(split: Split, parts: list[Capture], facts: CaptureFacts, store: str | None = None) -> list[Partial]:
    """The partition steps of `split` over `parts` in this process: the context round first
    (when the split has one), then a partial per partition (`amqpcap.engine.on_dask` runs the same
    rounds as Dask tasks), its per-message tables kept in `store` as bucket i's when given
    (`amqpcap.io.kept_rows`, as on a worker)."""
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


def run_in_memory(a: Analyzer, cap: Capture) -> Any:
    """`a` on a capture in memory, registered or not: one step over the whole capture (given what
    it `uses`, of the capture as its one partition) and its finish."""
    return run_whole(split_of(a), cap)
