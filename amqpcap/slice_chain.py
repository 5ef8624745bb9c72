"""A bucket too large for one worker, analysed as a chain of tasks over slices of its time (issue 13).

A bucket's partition step (`amqpcap.engine.bucket_step`) holds the bucket's columns whole, about
`amqpcap.engine.WORKER_BYTES_PER_PACKET` per packet: a bucket of one 20M-packet connection does
not fit a worker. Such a bucket is cut where its time may be cut (`amqpcap.dataset.bucket_cuts`)
into slices of about `SLICE_PACKETS` packets, and its steps run over the slices one after the
other (`amqpcap.partition.Slicing`, docs/time-split.md §4.3), as `partition.sliced_partial` runs
them in one process:

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

from . import dataset
from .kept_rows import keeping_in
from .partition import CaptureFacts, Split, release_freed_memory

#: a bucket of more packets than this is analysed in slices of about this many packets: one
#: slice's columns take about 1.6 GB of a worker (`amqpcap.engine.WORKER_BYTES_PER_PACKET`)
SLICE_PACKETS = 1_000_000


def can_slice(steps: dict[str, Split]) -> bool:
    """Whether every one of `steps` runs over slices of time, and so a bucket can be sliced.
    (A split with a context step needs its context made over slices too: not yet.)"""
    return all(s.slicing is not None and s.context is None for s in steps.values())


def submit_in_slices(client: Any, root: str, bucket: int, cuts: list[int], facts: CaptureFacts,
                     names: list[str], token: str, store: str | None = None) -> Any:
    """The steps `names` over bucket `bucket` of the dataset at `root` cut at the packets `cuts`,
    submitted to the cluster of `client` as a chain of tasks: a future of the bucket's partials
    ({name: partial}, as `amqpcap.engine.bucket_step` returns them; per-message tables kept in
    `store` when given, `amqpcap.kept_rows`)."""
    slices = list(zip([0, *cuts], [*cuts, None]))
    ends = None
    if any(_steps()[n].slicing.replays for n in names):
        seen = None
        for i, (first, end) in enumerate(slices):
            seen = client.submit(ends_task, root, bucket, first, end, seen, key=f"amqpcap-ends-{bucket}-{i}-{token}")
        ends = client.submit(_ends_of, seen, key=f"amqpcap-ends-{bucket}-{token}")
    carries = replay = None
    pieces = []
    for i, (first, end) in enumerate(slices):
        out = client.submit(slice_task, root, bucket, first, end, facts, names, carries, replay, ends,
                            key=f"amqpcap-slice-{bucket}-{i}-{token}")
        carries = client.submit(operator.getitem, out, 0, key=f"amqpcap-slice-carries-{bucket}-{i}-{token}")
        pieces.append(client.submit(operator.getitem, out, 1, key=f"amqpcap-slice-pieces-{bucket}-{i}-{token}"))
        replay = client.submit(operator.getitem, out, 2, key=f"amqpcap-slice-replay-{bucket}-{i}-{token}")
    return client.submit(join_task, names, bucket, store, *pieces, key=f"amqpcap-slices-joined-{bucket}-{token}")


def ends_task(root: str, bucket: int, first: int, end: int | None, seen: Any) -> Any:
    """On a worker: the first pass over one slice of the bucket, given what the slices before saw."""
    from .derive.replay import ends_step

    out = ends_step(dataset.read_partition(root, [bucket], packets=(first, end)), seen)
    release_freed_memory()
    return out


def _ends_of(seen: Any) -> Any:
    from .derive.replay import ends_of

    return ends_of(seen)


def slice_task(root: str, bucket: int, first: int, end: int | None, facts: CaptureFacts, names: list[str],
               carries: dict[str, Any] | None, replay: Any, ends: Any) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """On a worker: every step `names` over one slice of the bucket (packets `first` up to `end`;
    None: to the end), given their carries from the slice before (None: the first slice) and,
    when a step reads the derivations, the first pass's `ends` and the `replay` of the slice
    before: (the carries for the next slice, each step's piece, the next slice's replay)."""
    from .derive.replay import next_replay, with_replay

    sp = _steps()
    part = dataset.read_partition(root, [bucket], packets=(first, end))
    last = end is None
    if ends is not None:  # (the plain slice is unchanged: only `for_derivations` reads these)
        with_replay(part, replay, ends)
    carries = carries or dict.fromkeys(names)
    after, pieces = {}, {}
    for name in names:
        after[name], pieces[name] = sp[name].slice_step(part, facts, carries[name], last)
    replay_next = next_replay(part) if ends is not None and not last else None
    del part
    release_freed_memory()
    return after, pieces, replay_next


def join_task(names: list[str], bucket: int, store: str | None, *pieces: dict[str, Any]) -> dict[str, Any]:
    """On a worker: each step's partial from its pieces of every slice, in slice order (its
    per-message tables kept in `store` as the bucket's, when given)."""
    sp = _steps()
    with keeping_in(store, bucket):
        out = {name: sp[name].slicing.join([p[name] for p in pieces]) for name in names}
    release_freed_memory()
    return out


def _steps() -> dict[str, Split]:
    from .engine import _steps as steps

    return steps()
