"""A bucket too large for one worker, analysed as a chain of tasks over slices of its time (issue 13).

A bucket's partition step (`amqpcap.engine.on_dask.bucket_step`) holds the bucket's columns whole, about
`amqpcap.engine.on_dask.WORKER_BYTES_PER_PACKET` per packet: a bucket of one 20M-packet connection does
not fit a worker. Such a bucket is cut where its time may be cut (`amqpcap.io.dataset.bucket_cuts`)
into slices of about as many packets as half a worker's memory holds
(`amqpcap.engine.on_dask.slice_packets_of`), and its steps run over the slices one after the other
(`amqpcap.analysis.partition.Slicing`, docs/time-split.md §4.3), as
`amqpcap.engine.partitions.sliced_partial` runs them in one process:

1. when a step reads the shared derivations, a first pass, slice after slice, finds what only
   the bucket's end tells (`amqpcap.derive.replay.ends_step`: the settles and closes to come);
2. the analysing pass: each slice, given the first pass's ends, what the slice before left open
   (a `Replay`) and every step's carry, makes every step's piece;
3. one task joins each step's pieces into its partial: the bucket's partials, as `bucket_step`
   gives them.

Each task reads its own slice of the dataset (`dataset.read_partition(..., packets=)`), so a
worker holds one slice's columns and what the steps carry (bounded by connections, channels and
consumer tags), never the bucket's. Dask passes the carries between the tasks as futures (they
stay on the workers) and recomputes the tasks a dying worker held; nothing here retries.
"""

from __future__ import annotations

import operator
from typing import Any

from ..io import dataset
from ..io.kept_rows import keeping_in
from ..analysis.partition import Split
from ..derive.replay import ends_of, ends_step, next_replay, with_replay
from ..io.memory import release_freed_memory
from ..model.facts import CaptureFacts
from .registered import bucket_steps

#: a bucket of more packets than this is analysed in slices of about this many packets when the
#: workers tell no memory limit (else: `amqpcap.engine.on_dask.slice_packets_of`): one slice's columns
#: take about 1.6 GB of a worker (`amqpcap.engine.on_dask.WORKER_BYTES_PER_PACKET`)
SLICE_PACKETS = 1_000_000


def runs_in_slices(split: Split, first_round: bool) -> bool:
    """Whether the step `split` runs in a round (`_slicing`: its context step's in the first round
    when it has one, else its partition step) can run over slices of time. Each analyzer is
    asked alone: in a bucket cut in slices, one that cannot runs over the bucket whole, beside
    the others' chain of slices (`amqpcap.engine.on_dask._submit_bucket`)."""
    return _slicing(split, first_round) is not None


def submit_in_slices(client: Any, root: str, bucket: int, cuts: list[int], facts: CaptureFacts,
                     names: list[str], token: str, store: str | None = None,
                     contexts: dict[str, Any] | None = None, given: dict[str, Split] | None = None) -> Any:
    """The steps `names` over bucket `bucket` of the dataset at `root` cut at the packets `cuts`,
    submitted to the cluster of `client` as a chain of tasks: a future of what
    `amqpcap.engine.on_dask.bucket_step` returns for the bucket (per-message tables kept in `store` when
    given, `amqpcap.io.kept_rows`): without `contexts` (the first round), the partials of the
    steps without a context step and the contexts of the others; with `contexts` ({name: the
    joined context, or a future of it}: the second round), those steps' partials. `given`: the
    steps `names` are among, when not every analyzer's (`amqpcap.engine.registered.steps_of`)."""
    slices = list(zip([0, *cuts], [*cuts, None]))
    if contexts is not None:  # (each slice of the bucket reads its context: sent to the workers once,
        # once for the steps that share it, consumers' and latency's queue backlog; a copy on
        # each worker, so that one dying does not lose it: Dask cannot compute it again)
        sent: dict[int, Any] = {}
        for v in contexts.values():
            if not _is_future(v) and id(v) not in sent:
                sent[id(v)] = client.scatter([v], broadcast=True, hash=False)[0]
        contexts = {name: v if _is_future(v) else sent[id(v)] for name, v in contexts.items()}
    ends = None
    if any(_slicing(bucket_steps(given)[n], contexts is None).replays for n in names):
        seen = None
        for i, (first, end) in enumerate(slices):
            seen = client.submit(ends_task, root, bucket, first, end, seen, key=f"amqpcap-ends-{bucket}-{i}-{token}")
        ends = client.submit(ends_of, seen, key=f"amqpcap-ends-{bucket}-{token}")
    carries = replay = None
    pieces = []
    for i, (first, end) in enumerate(slices):
        out = client.submit(slice_task, root, bucket, first, end, facts, names, carries, replay, ends, contexts, given,
                            store, key=f"amqpcap-slice-{bucket}-{i}-{token}")
        carries = client.submit(operator.getitem, out, 0, key=f"amqpcap-slice-carries-{bucket}-{i}-{token}")
        pieces.append(client.submit(operator.getitem, out, 1, key=f"amqpcap-slice-pieces-{bucket}-{i}-{token}"))
        replay = client.submit(operator.getitem, out, 2, key=f"amqpcap-slice-replay-{bucket}-{i}-{token}")
    return client.submit(join_task, names, bucket, store, contexts is None, given, *pieces,
                         key=f"amqpcap-slices-joined-{bucket}-{token}")


def _slicing(split: Split, first_round: bool) -> Any:
    """The `Slicing` a step of `split` runs in a round: its context step's in the first round
    when it has one, else its partition step's."""
    return split.context_slicing if first_round and split.context is not None else split.slicing


def _is_future(value: Any) -> bool:
    from distributed import Future

    return isinstance(value, Future)


def ends_task(root: str, bucket: int, first: int, end: int | None, seen: Any) -> Any:
    """On a worker: the first pass over one slice of the bucket, given what the slices before saw."""
    out = ends_step(dataset.read_partition(root, [bucket], packets=(first, end)), seen)
    release_freed_memory()
    return out


def slice_task(root: str, bucket: int, first: int, end: int | None, facts: CaptureFacts, names: list[str],
               carries: dict[str, Any] | None, replay: Any, ends: Any,
               contexts: dict[str, Any] | None = None, given: dict[str, Split] | None = None,
               store: str | None = None) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """On a worker: every step `names` over one slice of the bucket (packets `first` up to `end`;
    None: to the end), given their carries from the slice before (None: the first slice) and,
    when a step reads the derivations, the first pass's `ends` and the `replay` of the slice
    before: (the carries for the next slice, each step's piece, the next slice's replay). The
    steps of a round (`submit_in_slices`): without `contexts`, a split's context step when it
    has one (once for the splits that share it); with them, its partition step given its
    context. The last slice's steps close the bucket's state: what they keep goes to `store`
    as the bucket's (`amqpcap.io.kept_rows`)."""
    sp = bucket_steps(given)
    part = dataset.read_partition(root, [bucket], packets=(first, end))
    last = end is None
    if ends is not None:  # (the plain slice is unchanged: only `for_derivations` reads these)
        with_replay(part, replay, ends)
    carries = carries or dict.fromkeys(names)
    after, pieces, made = {}, {}, {}
    with keeping_in(store, bucket):
        for name in names:
            split = sp[name]
            if contexts is not None:
                after[name], pieces[name] = split.slice_step(part, facts, carries[name], last, contexts[name])
            elif split.context is None:
                after[name], pieces[name] = split.slice_step(part, facts, carries[name], last)
            else:  # (a context step shared by analyzers, the queue backlog's, runs once)
                if split.context_slicing not in made:
                    made[split.context_slicing] = split.context_slicing.step(part, facts, carries[name], last)
                after[name], pieces[name] = made[split.context_slicing]
    replay_next = next_replay(part) if ends is not None and not last else None
    del part
    release_freed_memory()
    return after, pieces, replay_next


def join_task(names: list[str], bucket: int, store: str | None, first_round: bool,
              given: dict[str, Split] | None, *pieces: dict[str, Any]) -> dict[str, Any]:
    """On a worker: each step's partial (or context, in the `first_round`: `slice_task`) from its
    pieces of every slice, in slice order (its per-message tables kept in `store` as the
    bucket's, when given). A context shared by analyzers is joined once."""
    sp = bucket_steps(given)
    out, made = {}, {}
    with keeping_in(store, bucket):
        for name in names:
            slicing = _slicing(sp[name], first_round)
            shared = first_round and sp[name].context is not None
            if not shared or slicing not in made:
                made[slicing if shared else name] = slicing.join([p[name] for p in pieces])
            out[name] = made[slicing if shared else name]
    release_freed_memory()
    return out
