"""A capture ingested, and a dataset analysed, on Dask (`dask.distributed`) (issue 13).

`ingest` decodes the buckets of `amqpcap.io.dataset.ingest` as tasks, each from its spill file,
each writing its bucket of the dataset.

Each analyzer (`amqpcap.analysis.contract`, run as its `amqpcap.analysis.partition.Split`) runs its
step on every bucket of the dataset, in a task of its own on a Dask worker, and its step over the
capture's `records` in one more; this process merges the partials. An analyzer with a context step gets
its context from the first round of bucket tasks and its partials from a second round, each
task given the contexts of every bucket joined here; a join in cells (`partition.CellJoin`: the
queue backlogs) runs as a chain of tasks on the workers, this process making its plan and
gathering each bucket's pieces. Dask schedules the tasks, moves the
partials and recomputes the tasks of a worker that dies; nothing here retries or schedules.

What summary.json and the report count of the capture is the summary's own analyzer, run beside
the others (`amqpcap.derive.tally.TallyCounts`, under `TALLY`); this process holds the dataset's outline
(connections, anomalies, summary) and the merged results, and the capture's own tables are
written from the dataset bucket by bucket (`amqpcap.io.stored_tables`).

The cluster is either an existing one (``scheduler``: its address, ``tcp://host:port``; the
workers must see the dataset at the same path) or a local one started for the run and stopped
after it: worker processes (one thread each: the steps hold the GIL part of the time), as many
as the machine has cores, at most `LOCAL_MAX_WORKERS`.
"""

from __future__ import annotations

import logging
import operator
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from ..io import dataset
from ..analysis.registry import AnalyzerResult
from ..io.load import Capture
from ..model.errors import AmqpcapError
from ..io.kept_rows import keeping_in
from ..analysis.partition import CellJoin, PerPartition, Split, context_for
from .partitions import joined_once
from .registered import TALLY, analyzers, bucket_steps
from ..io.memory import release_freed_memory
from ..model.facts import CaptureFacts
from .slices import SLICE_PACKETS, runs_in_slices, submit_in_slices

#: a local cluster's workers at most (one per core below that)
LOCAL_MAX_WORKERS = 8
#: what a local cluster's processes log on the user's terminal: nothing below critical. A worker
#: whose heartbeat meets the scheduler already closed, as the cluster stops, logs that at ERROR
#: with a traceback (distributed's `Worker.heartbeat`), after a run that succeeded; a task's
#: failure reaches the user through its future, as one line.
LOCAL_LOG_LEVEL = logging.CRITICAL
#: seconds to wait for an existing scheduler to answer
CONNECT_TIMEOUT_S = 10
#: about what a worker holds per packet of the bucket it analyses, at its peak: a connection is
#: analysed whole by one worker (measured: 3.06 GiB for a bucket of one PerfTest consumer's
#: connection of 2.13M packets, `fixtures/record/record.sh long-connection`; 0.8 GiB for a
#: bucket of 1,890 connections and 0.66M packets of the 10M-packet dataset). For sizing the
#: slices of a bucket too large for a worker (`slice_packets_of`) and telling a user why the
#: workers died (`_largest_bucket`), never to refuse a run.
WORKER_BYTES_PER_PACKET = 1_600
#: a bucket is analysed in one task while its packets need at most this share of a worker's
#: memory limit (at `WORKER_BYTES_PER_PACKET`); a larger one in slices of its time that do
#: (`amqpcap.engine.slices`): the rest of the worker holds the carries, the dataset reader's
#: buffers and what the allocator keeps
SLICE_MEMORY_SHARE = 0.5
#: seconds to wait for a worker to tell its memory limit, after the workers died running a task
WORKER_RESTART_WAIT_S = 10


class EngineError(AmqpcapError):
    """The Dask cluster cannot be reached or used."""

    exit_code = 2


def _seen_here(path: str) -> None:
    """A worker that does not see the dataset says so, naming itself (the workers of an
    existing cluster must see it at the path or URL the client was given)."""
    if not dataset.location(path).exists(dataset.MANIFEST):
        import socket

        raise EngineError(f"the Dask worker on {socket.gethostname()} does not see the dataset at {path}: "
                          "every worker must see it at the same path (a shared filesystem) or URL")


def bucket_step(path: str, bucket: int, facts: CaptureFacts, names: list[str],
                contexts: dict[str, Any] | None = None, store: str | None = None,
                given: dict[str, Split] | None = None) -> dict[str, Any]:
    """On a worker: the analyzers `names` over one bucket's connections. Without `contexts`
    (the first round): the partials of the analyzers without a context step, and the context of
    those with one; with `contexts` (the second round, {analyzer: joined context}): the partials
    of those analyzers. Per-message tables are kept in `store` when given (`amqpcap.io.kept_rows`).
    `given`: the steps `names` are among, when not every analyzer's (`amqpcap.engine.registered.bucket_steps`)."""
    _seen_here(path)
    with keeping_in(store, bucket):
        out = _steps_over(dataset.read_partition(path, [bucket]), facts, names, contexts, bucket_steps(given))
    release_freed_memory()  # (a worker keeps no bucket's columns between tasks: WORKER_ENV_DROPPED)
    return out


def _steps_over(part: Capture, facts: CaptureFacts, names: list[str], contexts: dict[str, Any] | None,
                sp: dict[str, Split]) -> dict[str, Any]:
    """`bucket_step`'s steps (`names` among `sp`) over the bucket read (`part`)."""
    if contexts is not None:
        return {name: sp[name].partial_with(part, facts, contexts[name]) for name in names}
    made: dict[Any, Any] = {}  # a context step shared by analyzers (the queue backlog's) runs once

    def context(split: Split) -> Any:
        if split.context not in made:
            made[split.context] = split.context(part, facts)
        return made[split.context]

    return {name: sp[name].partial(part, facts) if sp[name].context is None else context(sp[name]) for name in names}


def cell_step(join: CellJoin, plan: Any, carry: Any, prepared: Any, r: int, store: str | None) -> tuple[Any, list]:
    """On a worker: cell `r` of a join in cells (`amqpcap.analysis.partition.CellJoin`), given the carry
    of the cell before it and its inputs read (`cell_input_step`); the partitions' pieces kept
    in `store` when given."""
    with keeping_in(store, -1):
        out = join.cell(plan, carry, prepared, r)
    release_freed_memory()
    return out


#: cells whose inputs are read ahead of the cell running (`cell_input_step`). A cell's input is
#: its queue events and acks, up to about 1 GB (`amqpcap.derive.backlog_join.CELL_PACKETS`), so
#: one: the next cell's, read by the other worker while a cell runs.
CELLS_READ_AHEAD = 1


def cell_input_step(join: CellJoin, plan: Any, inputs: list, r: int, after: Any) -> Any:
    """On a worker: cell `r`'s inputs read (`CellJoin.prepare`), which needs none of the cells
    before it. `after` (the pieces of cell r - 1 - `CELLS_READ_AHEAD`) only holds it back, so
    that no more than that many cells' inputs wait in the workers' memory."""
    out = join.prepare(plan, inputs, r)
    release_freed_memory()
    return out


def records_step(path: str, facts: CaptureFacts, names: list[str],
                 given: dict[str, Split] | None = None) -> dict[str, Any]:
    """On a worker: the analyzers' steps over the capture's records (every packet of the file)."""
    sp = bucket_steps(given)
    wanted = [n for n in names if sp[n].records is not None]
    if not wanted:
        return {}
    _seen_here(path)
    # only the columns the steps read (every column of a 100M-packet capture's records: 7 GB)
    named = [sp[n].records_columns for n in wanted]
    columns = None if None in named else sorted({c for cols in named for c in cols})
    records = dataset.read_records(path, columns)
    return {name: sp[name].records(records, facts) for name in wanted}


def _no_offload_thread() -> None:
    """Dask serialises a large message (a bucket's partial, the joined backlog) in a thread of
    its own, which then stays for the life of the process; this process forks the report's
    writers after the analysis only when it has no other thread (`amqpcap.report.outputs.can_fork`).
    Serialising on the client's own loop costs nothing here: nothing else runs meanwhile. Dask
    reads the setting when `distributed` is first imported: set before it (a process that
    imported it already keeps its setting)."""
    import dask

    dask.config.set({"distributed.comm.offload": False})


#: Dask warns of a graph above 10 MB ("Sending large graph"): data repeated in a graph instead
#: of scattered once. A bucket's own context (`PerPartition`: the queue backlog read at its
#: acks, the stalls' consumers) goes with that bucket's second-round task, on purpose: the
#: scheduler keeps it to run the task again when a worker dies (scattered, it would be lost with
#: its worker). A busy bucket's is tens of MB (24.6 MiB for the consumer's bucket of a 2M-packet
#: connection), so the warning told users of nothing they could change: it starts at this size.
LARGE_GRAPH_WARNING = "1GiB"


def _large_graphs_expected() -> None:
    """Dask's large-graph warning from `LARGE_GRAPH_WARNING` on, in this process (the client's:
    the warning is given where a graph is sent)."""
    import dask

    dask.config.set({"distributed.admin.large-graph-warning-threshold": LARGE_GRAPH_WARNING})


@contextmanager
def client(scheduler: str | None = None, workers: int | None = None) -> Iterator[Any]:
    """A `distributed.Client` of the cluster at `scheduler`, or of a local cluster of `workers`
    processes started here (stopped on exit)."""
    _no_offload_thread()
    _large_graphs_expected()
    try:
        from distributed import Client, LocalCluster
    except ImportError:  # pragma: no cover - a dependency
        raise EngineError("the Dask engine needs dask[distributed]: pip install 'dask[distributed]'") from None
    if scheduler:
        try:
            c = Client(scheduler, timeout=CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError, ValueError) as e:  # ValueError: not an address
            raise EngineError(f"cannot reach the Dask scheduler at {scheduler}: {e}") from None
        with c:
            yield c
        return
    n = workers or min(os.cpu_count() or 1, LOCAL_MAX_WORKERS)
    try:
        with _workers_environment(), LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                                  dashboard_address=":0", silence_logs=LOCAL_LOG_LEVEL) as cluster, \
                Client(cluster) as c:
            yield c
    finally:
        _end_scheduler_thread()


#: what Dask sets in a worker's environment by default and a local cluster of ours does not:
#: ``MALLOC_TRIM_THRESHOLD_`` (64 KiB) makes glibc map and unmap every array over 128 KiB
#: (setting it turns off glibc's adaptive mmap threshold, mallopt(3)), so each of a step's
#: temporary columns costs fresh pages: a bucket's first step took 1.25x as long, its second
#: 2.1x (ds10m, one bucket in this process with and without it). The memory a step frees is
#: given back at its end instead (`release_freed_memory`).
WORKER_ENV_DROPPED = ("MALLOC_TRIM_THRESHOLD_",)


def _workers_environment() -> Any:
    """The Dask configuration the local cluster's worker processes are spawned with (a nanny
    reads it when made, and a worker it restarts gets the same)."""
    import dask

    key = "distributed.nanny.pre-spawn-environ"
    env = {k: v for k, v in (dask.config.get(key, None) or {}).items() if k not in WORKER_ENV_DROPPED}
    return dask.config.set({key: env})


def _end_scheduler_thread() -> None:
    """A local cluster's scheduler runs in this process, and runs graph work in Dask's offload
    thread pool (`distributed.utils.offload`), whose thread then stays for the life of the
    process, so that the report's writers could not be forked (`amqpcap.report.outputs.can_fork`).
    Once the cluster has stopped the pool is shut down and replaced by a fresh one, which starts
    no thread until it is used. (A private name of distributed: if it is gone, nothing is done
    and the writers run in this process.)"""
    from concurrent.futures import ThreadPoolExecutor

    from distributed import utils

    pool = getattr(utils, "_offload_executor", None)
    if isinstance(pool, ThreadPoolExecutor):
        pool.shutdown(wait=True)
        utils._offload_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="Dask-Offload")


@dataclass
class Steps:
    """The partition and records steps of one dataset, submitted to a cluster."""

    root: str
    buckets: int
    facts: CaptureFacts
    token: str
    #: {future: its bucket, or None for the records step}: the first round
    futures: dict[Any, int | None]
    #: the client they were submitted with (`merged` submits the second round with it)
    client: Any
    #: where the bucket steps keep their per-message tables (`amqpcap.io.kept_rows`), None: sent back
    store: str | None = None
    #: the buckets run as chains of tasks over slices of their time: where each is cut
    sliced: dict[int, list[int]] = field(default_factory=dict)
    #: the steps run, when not every analyzer's (`steps_of`)
    given: dict[str, Split] | None = None

    @property
    def total(self) -> int:
        """Tasks in all: the first round, and a second one per bucket when an analyzer has a
        context step."""
        return len(self.futures) + (self.buckets if any(s.context for s in bucket_steps(self.given).values()) else 0)


def submit_steps(path: str | os.PathLike[str], c: Any, store: str | None = None,
                 slice_packets: int | None = None, given: dict[str, Split] | None = None) -> Steps:
    """Submit the split analyzers' steps over the dataset at `path` to the cluster of client `c`:
    a task per bucket (each analyzer's partial, or its context when it has a context step; a chain
    of tasks over the slices of a bucket of more than `slice_packets` packets, `_submit_bucket`;
    None: as many as the workers' memory holds, `slice_packets_of`), one over the records;
    per-message tables kept in `store` (`amqpcap.io.kept_rows.store`) when given. `merged` submits
    the second round. `given`: the steps to run, when not every analyzer's (`steps_of`)."""
    root = os.fspath(path) if dataset.is_url(path) else str(Path(path).resolve())
    slice_packets = slice_packets or slice_packets_of(c)
    m = dataset.manifest(root)
    facts = dataset.facts(root)
    names = list(bucket_steps(given))
    token = _token(root, store, None if given is None else names)
    cuts = {k: c.submit(dataset.bucket_cuts, root, k, slice_packets, key=f"amqpcap-cuts-{k}-{token}").result()
            for k in np.flatnonzero(_sliced_buckets(root, m["buckets"], slice_packets, given)).tolist()}
    futures = {f: k for k in range(m["buckets"]) for f in _submit_bucket(c, root, k, facts, names, token, store,
                                                                           cuts.get(k), given=given)}
    futures[c.submit(records_step, root, facts, names, given, key=f"amqpcap-records-{token}")] = None
    return Steps(root, m["buckets"], facts, token, futures, c, store, {k: v for k, v in cuts.items() if v}, given)


def _sliced_buckets(root: str, buckets: int, slice_packets: int, given: dict[str, Split] | None = None) -> np.ndarray:
    """Which buckets are cut in slices of their time: those of more than `slice_packets` packets,
    when any step can run over slices (those that cannot run over such a bucket whole:
    `_submit_bucket`)."""
    steps = bucket_steps(given).values()
    if not any(runs_in_slices(s, first) for s in steps for first in (True, False)):
        return np.zeros(buckets, bool)
    return dataset.bucket_packets(dataset.read_outline(root).connections, buckets) > slice_packets


def _sliced_line(sliced: dict[int, list[int]]) -> str:
    """What a user is told of the buckets analysed in slices of their time ({bucket: its cuts})."""
    slices = sum(len(cuts) + 1 for cuts in sliced.values())
    which = f"bucket {next(iter(sliced))} is" if len(sliced) == 1 else f"{len(sliced)} buckets are"
    return (f"{which} larger than a worker holds at once: analysed in {slices} slices of "
            f"{'its' if len(sliced) == 1 else 'their'} time, one after the other (the same results, more time; "
            "--slice-packets sets the size)")


def slice_packets_of(c: Any) -> int:
    """The most packets a worker of the cluster of client `c` analyses in one task: those that
    need `SLICE_MEMORY_SHARE` of the smallest memory limit of its workers; `SLICE_PACKETS` when
    no worker tells one."""
    limits = [limit for limit in _memory_limits(c) if limit]
    if not limits:
        return SLICE_PACKETS
    return max(int(min(limits) * SLICE_MEMORY_SHARE / WORKER_BYTES_PER_PACKET), 1)


def _memory_limits(c: Any) -> list[int]:
    """The memory limit of each worker of the cluster of client `c` (0: none)."""
    return [w.get("memory_limit") or 0 for w in c.scheduler_info().get("workers", {}).values()]


def _submit_bucket(c: Any, root: str, k: int, facts: CaptureFacts, names: list[str], token: str, store: str | None,
                   cuts: list[int] | None, contexts: dict[str, Any] | None = None, round_name: str = "",
                   given: dict[str, Split] | None = None) -> list[Any]:
    """Bucket `k`'s steps (given `contexts`: the second round's, `bucket_step`): one task, or
    given `cuts`, a chain of tasks over the slices of its time they cut for the steps that can
    run over slices (`amqpcap.engine.slices`) and one task over the bucket whole for those that
    cannot. Their futures, each of a dict of some of the steps' partials."""
    if cuts:
        steps = bucket_steps(given)
        sliced = [n for n in names if runs_in_slices(steps[n], contexts is None)]
        whole = [n for n in names if n not in sliced]
    else:
        sliced, whole = [], names
    out = []
    if sliced:
        out.append(submit_in_slices(c, root, k, cuts, facts, sliced, f"{round_name}{token}", store,
                                    None if contexts is None else {n: contexts[n] for n in sliced}, given))
    if whole:
        out.append(c.submit(bucket_step, root, k, facts, whole,
                            None if contexts is None else {n: contexts[n] for n in whole}, store, given,
                            key=f"amqpcap-bucket-{round_name}{k}-{token}"))
    return out


def merged(steps: Steps, whole: Capture, progress: Callable[[str, int, int], None] | None = None,
           done: int = 0, total: int | None = None) -> dict[str, AnalyzerResult]:
    """The split analyzers' results, and the tally under `TALLY`: their steps gathered as they
    end (``progress(what, done, total)`` after each, counting on from `done`), merged with
    `whole` (the capture, or its outline: `amqpcap.io.dataset.read_outline`). The analyzers with a
    context step get a second round of bucket tasks, given their contexts joined, once the
    first round is in. The others are merged here while the workers run the queue backlogs'
    cells and that second round (`_merging_meanwhile`), not after it."""
    m = _Merging(steps, whole, progress, done, total if total is not None else steps.total, bucket_steps(steps.given))
    m.gather(steps.futures, "bucket")
    meanwhile = _merging_meanwhile(m.merge, [name for name, split in m.splits.items() if split.context is None])
    second = [name for name, split in m.splits.items() if split.context is not None]
    if second:
        m.second_round(second, meanwhile)
    meanwhile()
    m.merge(second)
    return m.out


@dataclass
class _Merging:
    """What `merged` holds while the rounds run: each bucket's partials as they come in, the
    records step's, the results merged so far, and the tasks counted for the progress."""

    steps: Steps
    whole: Capture
    progress: Callable[[str, int, int], None] | None
    done: int
    total: int
    splits: dict[str, Split] = field(default_factory=bucket_steps)  # (every analyzer's, or `Steps.given`)
    #: {bucket: {analyzer: its partial}}; an analyzer's are dropped once merged
    partials: dict[int, dict[str, Any]] = field(default_factory=dict)
    records: dict[str, Any] = field(default_factory=dict)
    out: dict[str, AnalyzerResult] = field(default_factory=dict)

    def largest(self) -> str:
        """What a task given up on is told with (`result_of`)."""
        return _largest_bucket(self.whole, self.steps.buckets, self.steps.sliced)

    def gather(self, futures: dict[Any, int | None], what: str) -> None:
        """The results of `futures` ({future: its bucket, None: the records step}) as they end."""
        from distributed import as_completed

        for fut in as_completed(futures):
            k = futures[fut]
            task = "the step over the capture's records" if k is None else f"the analysis of bucket {k}"
            out_k = result_of(fut, task, self.largest)
            if k is None:
                self.records = out_k
            else:
                self.partials.setdefault(k, {}).update(out_k)
            fut.release()
            self.tell("records" if k is None else f"{what} {k}")

    def tell(self, what: str) -> None:
        """One more task done."""
        self.done += 1
        if self.progress:
            self.progress(what, self.done, self.total)

    def merge(self, names: list[str]) -> None:
        """Merge the partials of `names` (each analyzer's partials dropped once merged:
        `partition.taken`)."""
        for name in names:
            mine = [self.partials[k].pop(name) for k in sorted(self.partials)]
            self.out[name] = self.splits[name].merge(mine, self.records.pop(name, None), self.steps.facts, self.whole)
            del mine
            release_freed_memory()

    def second_round(self, names: list[str], meanwhile: Callable[[], None]) -> None:
        """The partition steps of the analyzers `names` (those with a context step), each bucket
        given their contexts joined; `meanwhile` run once the workers have them."""
        steps = self.steps
        buckets = sorted(self.partials)
        joined = joined_once(self.splits, {name: [self.partials[k].pop(name) for k in buckets] for name in names},
                             lambda join, contexts: self.in_cells(join, contexts, meanwhile))
        # a value for every bucket sent to the workers once, not with every task (broadcast: a
        # copy on each worker, so that one dying does not lose it); a value per bucket
        # (`PerPartition`) goes with that bucket's task, as its argument (kept by the scheduler
        # for a retry)
        shared = list({id(v): v for v in joined.values() if not isinstance(v, PerPartition)}.values())
        sent = dict(zip(map(id, shared), steps.client.scatter(shared, broadcast=True, hash=False) if shared else []))
        given = [{name: context_for(v, i) if isinstance(v, PerPartition) else sent[id(v)] for name, v in joined.items()}
                 for i in range(len(buckets))]
        futures = {f: k for i, k in enumerate(buckets)
                   for f in _submit_bucket(steps.client, steps.root, k, steps.facts, names, steps.token, steps.store,
                                           steps.sliced.get(k), given[i], "round2-", steps.given)}
        self.total += len(futures) - len(buckets)  # (`Steps.total` counted a task per bucket)
        del joined, shared, given  # on the workers now: not held here through the merge
        meanwhile()
        self.gather(futures, "bucket (second round)")

    def in_cells(self, join: CellJoin, contexts: list, meanwhile: Callable[[], None]) -> PerPartition:
        """The cells of `join` as a chain of tasks, each given the carry of the one before
        (a future: it stays on the workers) and its inputs read by a task of its own, which
        runs while the cells before it do (`cell_input_step`); their pieces gathered as they
        end. (A cell of the 100M-packet dataset spent half its time reading its inputs.)"""
        steps = self.steps
        plan, carry, inputs = join.plan(contexts)
        [plan_f] = steps.client.scatter([plan], broadcast=True, hash=False)
        [carry] = steps.client.scatter([carry], hash=False)  # (the consumers' points: MBs, not in the graph)
        self.total += len(inputs)
        pieces = []
        for r, cell_inputs in enumerate(inputs):
            after = pieces[r - 1 - CELLS_READ_AHEAD] if r > CELLS_READ_AHEAD else None
            read = steps.client.submit(cell_input_step, join, plan_f, cell_inputs, r, after,
                                       key=f"amqpcap-cell-input-{r}-{steps.token}")
            both = steps.client.submit(cell_step, join, plan_f, carry, read, r, steps.store,
                                       key=f"amqpcap-cell-{r}-{steps.token}")
            carry = steps.client.submit(operator.getitem, both, 0, key=f"amqpcap-cell-carry-{r}-{steps.token}")
            pieces.append(steps.client.submit(operator.getitem, both, 1, key=f"amqpcap-cell-pieces-{r}-{steps.token}"))
        del both, carry, plan_f, read, after
        meanwhile()  # (the cells are a chain: one worker at a time, one core free for this process)
        for r, fut in enumerate(pieces):
            pieces[r] = result_of(fut, f"the queue backlogs' cell {r}", self.largest)
            fut.release()
            self.tell(f"queue backlogs, cell {r}")
        return PerPartition([join.context(plan, i, [p[i] for p in pieces]) for i in range(len(contexts))])


def _merging_meanwhile(merge: Callable[[list[str]], None], names: list[str]) -> Callable[[], None]:
    """A call that merges the analyzers `names` (those without a context step, whose partials
    are all in after the first round) the first time it is made, and does nothing after.
    `merged` makes it as soon as the workers have been given what comes next, so that these
    merges run while they work. On the 10M-packet dataset they were 1.8 s of the merges' 3.0 s;
    the queue backlogs' cells run one at a time, which leaves one of two workers' cores idle."""
    left = list(names)

    def now() -> None:
        merge(left)
        left.clear()

    return now


def analyze(path: str | os.PathLike[str], outline: Capture, c: Any,
            progress: Callable[[str, int, int], None] | None = None, store: str | None = None,
            slice_packets: int | None = None, tell: Callable[[str], None] | None = None) -> list[AnalyzerResult]:
    """Every analyzer on the dataset at `path`, the partition steps on the cluster of client `c`;
    results in `analyzers` order, equal to `amqpcap.engine.registered.run_all` on the dataset read whole
    (the per-message tables kept in `store` when given, `amqpcap.io.kept_rows`: read or write them
    before the store is removed).
    `outline` (`amqpcap.io.dataset.read_outline`) is given the buckets' tally (`amqpcap.derive.tally`), so
    that summary.json and the report are made from it as from the capture read whole.
    ``progress(what, done, total)`` as each task or analyzer ends. A bucket of more than
    `slice_packets` packets (None: as many as the workers' memory holds) runs in slices of its
    time, each step that can (`submit_steps`); ``tell(line)`` says so."""
    steps = submit_steps(path, c, store, slice_packets)
    if steps.sliced and tell:
        tell(_sliced_line(steps.sliced))
    results = merged(steps, outline, progress)
    outline.context.tally = results.pop(TALLY)
    return [results[name] for name in analyzers()]


def ingest_step(out: str, buckets: int, k: int, capture_records: int, load_args: dict,
                packets: int = 0) -> dataset.StepResult:
    """On a worker: decode bucket `k` of the ingest from its spill file
    (`amqpcap.io.dataset.ingest_bucket`). A worker that does not see the dataset directory says
    so, naming its host."""
    import socket

    if not dataset.spill_path(out, k).is_file():
        raise EngineError(f"the Dask worker on {socket.gethostname()} does not see the dataset directory {out}: every "
                          "worker must see it at the same path (a shared filesystem)")
    return dataset.ingest_bucket(out, buckets, k, capture_records, load_args, packets)


def ingest(capture, out: str | os.PathLike[str], c: Any, progress: Callable[[str, int, int], None] | None = None,
           **kwargs: Any) -> dataset.Ingested:
    """`amqpcap.io.dataset.ingest` with its buckets decoded as tasks on the cluster of client `c`
    (``progress(what, done, total)`` as each bucket is written). This process reads the capture
    once and spills it by bucket into the dataset directory, which the workers must see at the
    same path."""
    import uuid

    from distributed import as_completed

    run = uuid.uuid4().hex[:12]  # a rerun decodes again: nothing to reuse from a former one

    def run_buckets(_step, args: list[tuple]) -> list[dataset.StepResult]:
        futures = {c.submit(ingest_step, *a, key=f"amqpcap-ingest-bucket-{a[2]}-{run}"): a[2] for a in args}
        results = []
        for done, fut in enumerate(as_completed(futures), 1):
            results.append(result_of(fut, f"the decoding of bucket {futures[fut]}"))
            fut.release()
            if progress:
                progress(f"bucket {futures[fut]}", done, len(futures))
        return results

    return dataset.ingest(capture, Path(out).resolve(), run_buckets=run_buckets, **kwargs)


def result_of(fut: Any, task: str, holds: Callable[[], str] = lambda: "") -> Any:
    """`fut`'s result. When Dask gave up on the task (`KilledWorker`: the workers it was given
    to died, `distributed.scheduler.allowed-failures` + 1 times) or cancelled it (what it reads
    was lost with the workers that held it), one line naming it, what the
    data holds (`holds()`) and the workers' memory limit: a worker past it is stopped by its
    nanny, the usual way a task kills every worker it meets. (The task named need not be the
    one that used the memory: every task given to a worker that dies counts that death, so a
    step queued beside a bucket too large can be given up on first.)"""
    from concurrent.futures import CancelledError

    from distributed import KilledWorker

    try:
        return fut.result()
    except KilledWorker:
        what = holds()
        raise EngineError(f"Dask gave up on {task}: the workers it was given to died{'. ' + what if what else ''}; "
                          f"{_worker_memory(fut.client)}") from None
    except CancelledError:  # (a task whose input was lost: data sent to workers that all died)
        what = holds()
        raise EngineError(f"Dask cancelled {task}: what it reads was lost with workers that died"
                          f"{'. ' + what if what else ''}; {_worker_memory(fut.client)}") from None


def _largest_bucket(whole: Capture, buckets: int, sliced: dict[int, list[int]] | None = None) -> str:
    """What the bucket of the most packets holds, from the capture's connections: its packets,
    its largest connection, and about what a worker needs to analyse it, or one of its slices
    when it runs in `sliced` slices of its time ({bucket: its cuts}; `WORKER_BYTES_PER_PACKET`)."""
    c = whole.connections
    if not len(c):
        return ""
    k = int(dataset.bucket_packets(c, buckets).argmax())
    bucket = dataset.bucket_of(c["stream"].to_numpy(), buckets)
    mine = c[bucket == k]
    packets = (mine["c2s_packets"] + mine["s2c_packets"]).to_numpy(np.int64)
    big, total = int(packets.argmax()), int(packets.sum())
    stream = int(mine["stream"].iloc[big])
    held = (f"1 connection of {total:,} packets (tcp.stream == {stream})" if len(mine) == 1 else
            f"{len(mine):,} connections and {total:,} packets (the largest, tcp.stream == {stream}, {packets[big]:,})")
    cuts = (sliced or {}).get(k)
    if cuts:
        slices = len(cuts) + 1
        return (f"The largest bucket, {k}, holds {held}, analysed in {slices:,} slices of its time, about "
                f"{_gb(total // slices * WORKER_BYTES_PER_PACKET)} each in one worker")
    return (f"The largest bucket, {k}, holds {held}, about {_gb(total * WORKER_BYTES_PER_PACKET)} to analyse in one "
            "worker")


def _worker_memory(client: Any) -> str:
    """The workers' memory limit, and how a user gives them more. (Right after a worker died
    its nanny may not have started the next one: it is waited for, `WORKER_RESTART_WAIT_S`.)"""
    try:
        client.wait_for_workers(1, timeout=WORKER_RESTART_WAIT_S)
    except (TimeoutError, OSError):
        pass
    limits = _memory_limits(client)
    limit = ("the workers' memory limit is not known (none is running)" if not limits else
             f"the workers may use {_gb(min(limits))} each (a worker past its limit is stopped)" if min(limits) else
             "the workers have no memory limit")
    return (f"{limit}. Give them more memory: a local cluster, fewer workers (--workers 1); a cluster of yours, "
            "dask worker --memory-limit")


def _gb(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def _token(root: str, store: str | None = None, names: list[str] | None = None) -> str:
    """Task keys of one dataset's run: its path and manifest time, so that a rewritten
    dataset is not served results of the old one, and the store its rows are kept in (a
    result naming a store removed since is not served either); the steps run when they are not
    every analyzer's (`Steps.given`)."""
    import hashlib

    stamp = dataset.location(root).stamp()
    steps = "" if names is None else "\0" + ",".join(names)
    return hashlib.sha1(f"{root}\0{stamp}\0{store}{steps}".encode()).hexdigest()[:12]
