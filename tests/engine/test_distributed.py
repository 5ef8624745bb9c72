"""A real distributed run: `dask scheduler` and two `dask worker` processes on 127.0.0.1,
`amqpcap analyze DATASET --scheduler tcp://127.0.0.1:PORT` as a user types it gives the local
run's summary.json and tables; a worker killed (SIGKILL) mid-analysis is restarted by its nanny,
Dask recomputes what it held, and the result is still exact. `amqpcap ingest --scheduler` runs
its buckets' decodes on the same workers and writes the capture's dataset."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pandas as pd
import pytest

import amqpcap
from tiers import one_fast

FIX = Path(__file__).resolve().parents[2] / "fixtures"
BIN = Path(sys.executable).parent
AMQPCAP = [sys.executable, "-m", "amqpcap"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def dask_cluster(workers: int, worker_args: tuple[str, ...] = (), scheduler_env: dict | None = None,
                 worker_env: dict | None = None):
    """`dask scheduler` and `workers` `dask worker` processes on 127.0.0.1: the address."""
    pytest.importorskip("distributed")
    from distributed import Client

    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    dask = [sys.executable, "-m", "dask"]
    procs = [subprocess.Popen([*dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, **(scheduler_env or {})})]
    for _ in range(workers):
        procs.append(subprocess.Popen([*dask, "worker", address, "--nthreads", "1", "--host", "127.0.0.1",
                                       "--no-dashboard", "--death-timeout", "60", *worker_args],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      env={**os.environ, **(worker_env or {})}))
    try:
        with Client(address, timeout=60) as c:
            c.wait_for_workers(workers, timeout=120)
        yield address
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.fixture(scope="module")
def cluster():
    with dask_cluster(2) as address:
        yield address


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    root = tmp_path_factory.mktemp("dist") / "ds"
    subprocess.run([*AMQPCAP, "ingest", str(FIX / "flow-control.pcap.gz"), "--out", str(root), "--buckets", "24"],
                   check=True, capture_output=True)
    return root


def outputs(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()
            and p.suffix in (".json", ".csv")}


def same_as_the_local_run(root: Path, tmp_path: Path, *dist_args: str) -> subprocess.CompletedProcess:
    """`amqpcap analyze ROOT` in one process and with `dist_args` (--scheduler ...): both end
    well, print the same findings and write the same tables and summary.json. The second run."""
    local = subprocess.run([*AMQPCAP, "analyze", str(root), "--out", str(tmp_path / "local"), "--no-plots"],
                           capture_output=True, text=True)
    assert local.returncode == 0, local.stderr
    dist = subprocess.run([*AMQPCAP, "analyze", str(root), *dist_args, "--out", str(tmp_path / "dist"), "--no-plots"],
                          capture_output=True, text=True, timeout=900)
    assert dist.returncode == 0, dist.stderr
    assert dist.stdout == local.stdout
    got, want = outputs(tmp_path / "dist"), outputs(tmp_path / "local")
    assert "summary.json" in want and any(k.startswith("sizes") for k in want)
    assert got.keys() == want.keys()
    for k in want:
        assert got[k] == want[k], k
    return dist


@pytest.mark.slow
def test_analyze_on_a_real_cluster_is_the_local_run(cluster, stored, tmp_path):
    same_as_the_local_run(stored, tmp_path, "--scheduler", cluster)


@pytest.mark.slow
def test_a_dataset_named_by_an_fsspec_url_gives_the_local_run(cluster, stored, tmp_path):
    """`amqpcap analyze file:///…/ds --scheduler ADDRESS`: the client and the workers read the
    dataset through fsspec (the way they read s3://… or gs://…), and the result is that of the
    local path."""
    local = subprocess.run([*AMQPCAP, "analyze", str(stored), "--out", str(tmp_path / "local"), "--no-plots"],
                           capture_output=True, text=True)
    assert local.returncode == 0, local.stderr
    url = stored.as_uri()
    assert url.startswith("file:///")
    dist = subprocess.run([*AMQPCAP, "analyze", url, "--scheduler", cluster, "--out", str(tmp_path / "dist"),
                           "--no-plots"], capture_output=True, text=True)
    assert dist.returncode == 0, dist.stderr
    assert dist.stdout == local.stdout
    assert outputs(tmp_path / "dist") == outputs(tmp_path / "local")


@pytest.mark.slow
def test_a_worker_killed_mid_analysis_is_replaced_and_the_result_is_exact(cluster, stored):
    from distributed import Client

    from amqpcap.engine import on_dask as engine
    from amqpcap.io import kept_rows
    from amqpcap.engine.registered import run_all

    cap = amqpcap.load(stored)
    want = run_all(cap)
    killed: dict = {}
    with ExitStack() as stack, Client(cluster, timeout=60) as c:
        pids = c.run(os.getpid)  # {worker address: its process (the nanny's child)}

        def progress(what: str, done: int, total: int) -> None:
            if not what.startswith("bucket") or killed:
                return
            # the worker with the most partition work at stake: tasks it runs, results not yet
            # gathered. (Not the result just gathered: its release may not have reached the
            # scheduler yet, so `has_what` can still list it, but nothing will compute it again.)
            gathered = f"amqpcap-bucket-{what.split()[-1]}-"
            at_stake = {w: {str(k) for k in [*c.processing().get(w, ()), *c.has_what().get(w, ())]
                            if str(k).startswith("amqpcap-bucket") and not str(k).startswith(gathered)}
                        for w in pids}
            address = max(sorted(at_stake), key=lambda w: len(at_stake[w]))
            os.kill(pids[address], signal.SIGKILL)
            killed.update(address=address, pid=pids[address], keys=at_stake[address], at_stake=at_stake)

        from distributed import get_task_stream

        # the per-message tables kept on the workers, as `amqpcap analyze` keeps them: a killed
        # worker's bucket files are written again by the task run elsewhere
        kept = stack.enter_context(kept_rows.store(stored))
        assert kept is not None
        with get_task_stream(client=c) as stream:
            got = engine.analyze(stored, cap, c, progress=progress, store=kept)
        # the killed worker held partition work, and every piece of it was done again elsewhere
        assert killed and killed["keys"], killed
        elsewhere = {str(t["key"]) for t in stream.data if t["worker"] != killed["address"]}
        assert killed["keys"] <= elsewhere, (killed, sorted((t["worker"], str(t["key"])) for t in stream.data))
        # the nanny restarted it: two workers again, the killed process gone
        c.wait_for_workers(2, timeout=120)
        deadline = time.monotonic() + 60
        while killed["pid"] in c.run(os.getpid).values() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert killed["pid"] not in c.run(os.getpid).values()
        for g, w in zip(got, want):
            assert g.summary == w.summary, g.name
            for t in w.tables:
                assert kept_rows.frame(g.tables[t]).equals(w.tables[t]), (g.name, t)
        assert any(isinstance(t, kept_rows.KeptRows) for g in got for t in g.tables.values())


@pytest.mark.slow
def test_a_bucket_run_as_a_chain_of_slices_gives_its_partials_also_with_a_worker_killed(cluster, tmp_path):
    """A bucket too large for one worker runs as a chain of tasks over slices of its time
    (`amqpcap.engine.slices`): on the two workers, every step that can run over slices gives the
    partial (or, for a context step, the context) of the bucket analysed in one task, and so do
    the second round's steps given their contexts joined (consumers, latency); and a worker
    killed once it holds the carries of the third slice is replaced, Dask computes the chain
    again, and the partials are still exact."""
    from dataclasses import fields

    from distributed import Client

    from amqpcap.io import dataset
    from amqpcap.engine.on_dask import bucket_step
    from amqpcap.engine.registered import TALLY, bucket_steps as _steps
    from amqpcap.analysis.partition import context_for
    from amqpcap.engine.partitions import joined_once
    from amqpcap.engine.slices import submit_in_slices
    from test_partition import assert_same_partial
    from test_replay import assert_same_tally

    root = tmp_path / "ds"
    subprocess.run([*AMQPCAP, "ingest", str(FIX / "ten-consumers.pcap"), "--out", str(root), "--buckets", "2"],
                   check=True, capture_output=True)
    # (the first round: the partition steps of the splits without a context step, the context
    # steps of the others)
    names = sorted(n for n, s in _steps().items()
                   if (s.slicing if s.context is None else s.context_slicing) is not None)
    assert {TALLY, "clients", "sizes", "nagle", "consumers", "latency"} <= set(names)
    facts = dataset.facts(root)

    def same(got: dict, want: dict, where: str) -> None:
        assert list(got) == list(want) == names, where
        for n in names:
            if n == TALLY:
                [got_tally], [want_tally] = got[n], want[n]  # (a partition's part: a list of its tally)
                assert_same_tally(got_tally, want_tally, f"{n} of {where}")
            elif _steps()[n].context is not None:  # (a context: a dataclass of frames and arrays)
                for f in fields(want[n]):
                    assert_same_partial(getattr(got[n], f.name), getattr(want[n], f.name), f"{n}.{f.name} of {where}")
            else:
                assert_same_partial(got[n], want[n], f"{n} of {where}")

    firsts: dict = {}
    with Client(cluster, timeout=60) as c:
        for k in range(2):
            cuts = dataset.bucket_cuts(root, k, 400)
            assert len(cuts) >= 4, cuts
            whole = c.submit(bucket_step, str(root), k, facts, names, pure=False).result()
            same(submit_in_slices(c, str(root), k, cuts, facts, names, f"whole-{k}").result(), whole, f"bucket {k}")
            firsts[k] = whole
        # the second round: the steps given their contexts joined over both buckets (in this
        # process, as `joined_once` joins them), each slice of the chain given its bucket's
        second = sorted(n for n in names if _steps()[n].context is not None)
        joined = joined_once(_steps(), {n: [firsts[k][n] for k in range(2)] for n in second})
        for k in range(2):
            contexts = {n: context_for(joined[n], k) for n in second}
            want = c.submit(bucket_step, str(root), k, facts, second, contexts, pure=False).result()
            got = submit_in_slices(c, str(root), k, dataset.bucket_cuts(root, k, 400), facts, second, f"second-{k}",
                                   contexts=contexts).result()
            for n in second:
                assert_same_partial(got[n], want[n], f"{n} of bucket {k}, second round")
        pids = c.run(os.getpid)
        chain = submit_in_slices(c, str(root), 1, cuts, facts, names, "killed")
        third = "amqpcap-slice-carries-1-2-killed"
        deadline = time.monotonic() + 120
        while not (holders := [w for w, keys in c.has_what().items() if third in map(str, keys)]):
            assert time.monotonic() < deadline and not chain.done()
            time.sleep(0.01)
        assert not chain.done()
        os.kill(pids[holders[0]], signal.SIGKILL)
        same(chain.result(), whole, "bucket 1, a worker killed")
        c.wait_for_workers(2, timeout=120)
        assert pids[holders[0]] not in c.run(os.getpid).values()


@pytest.mark.slow
def test_ingest_on_a_real_cluster_is_the_capture(cluster, tmp_path):
    """`amqpcap ingest RING --scheduler ADDRESS`: this process reads the ring once and spills
    it by bucket; each bucket is decoded by a task on one of the two workers, which writes it;
    the dataset holds the capture `load(RING)` gives."""
    ring = FIX / "ring"
    r = subprocess.run([*AMQPCAP, "ingest", str(ring), "--out", str(tmp_path / "ds"), "--buckets", "6",
                        "--scheduler", cluster], capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr.strip().endswith("in 6 buckets"), r.stderr
    stored, direct = amqpcap.load(tmp_path / "ds"), amqpcap.load(ring)
    for table in ("records", "connections", "packets", "frames"):
        pd.testing.assert_frame_equal(getattr(stored, table), getattr(direct, table), obj=table)
    assert stored.summary == direct.summary


def test_an_ingest_worker_that_does_not_see_the_dataset_says_so(tmp_path):
    from amqpcap.engine import on_dask as engine

    with pytest.raises(engine.EngineError, match="does not see the dataset directory .*ds"):
        engine.ingest_step(str(tmp_path / "ds"), 1, 0, 10, {})


@pytest.mark.parametrize("address", one_fast(["nonsense", "tcp://127.0.0.1:1"], keep="nonsense"))
def test_a_scheduler_that_cannot_be_reached_is_one_line(stored, address):
    r = subprocess.run([*AMQPCAP, "analyze", str(stored), "--scheduler", address], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [r.stderr.strip()]
    assert r.stderr.startswith(f"amqpcap: error: cannot reach the Dask scheduler at {address}")


def test_scheduler_needs_a_dataset():
    r = subprocess.run([*AMQPCAP, "analyze", str(FIX / "healthy.pcap"), "--scheduler", "tcp://127.0.0.1:1"],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "amqpcap ingest" in r.stderr and "Traceback" not in r.stderr


def test_a_worker_that_does_not_see_the_dataset_says_so(tmp_path):
    from amqpcap.engine import on_dask as engine
    from amqpcap.model.facts import CaptureFacts

    with pytest.raises(engine.EngineError, match="does not see the dataset at .*same path"):
        engine.bucket_step(str(tmp_path / "elsewhere"), 0, CaptureFacts(0, 0), ["sizes"])


#: what a user is told when buckets are analysed in slices of their time
SLICED_LINE = re.compile(r"(bucket \d+ is|\d+ buckets are) larger than a worker holds at once: analysed in \d+ slices")


@pytest.mark.slow
@pytest.mark.parametrize("name, every", [("ten-consumers.pcap", 2_000), ("memory-alarm.pcap", 300),
                                         ("midstream.pcap", 200), ("confirms.pcap", 150)])
def test_a_dataset_analysed_in_slices_of_time_gives_the_local_run(cluster, tmp_path, name, every):
    """`amqpcap analyze DATASET --scheduler ADDRESS --slice-packets N`: every bucket of more than N
    packets runs as chains of tasks over slices of its time (`amqpcap.engine.slices`), the context
    round's and the second round's too, and the findings and every table are those of the local
    run, which reads the dataset whole in one process (a block held across a cut:
    memory-alarm.pcap; consumers whose prefetch is estimated: midstream.pcap; confirms)."""
    from amqpcap.io import dataset
    from amqpcap.engine.registered import bucket_steps as _steps
    from amqpcap.engine.slices import runs_in_slices

    assert all(runs_in_slices(s, first) for s in _steps().values() for first in (True, False)), \
        "a step cannot run over slices: it would run over its bucket whole, and this test would not slice it"
    root = tmp_path / "ds"
    subprocess.run([*AMQPCAP, "ingest", str(FIX / name), "--out", str(root), "--buckets", "2"],
                   check=True, capture_output=True)
    sliced = dataset.bucket_packets(dataset.read_outline(root).connections, 2) > every
    assert sliced.any(), "no bucket is cut in slices: the test would not test them"
    dist = same_as_the_local_run(root, tmp_path, "--scheduler", cluster, "--slice-packets", str(every))
    assert SLICED_LINE.search(dist.stderr), dist.stderr


@pytest.mark.slow
def test_a_bucket_too_large_for_the_workers_memory_is_named_in_one_line(tmp_path):
    """A worker whose memory passes its limit is stopped by its nanny; when Dask gives up (here
    the scheduler does at the first death) the user reads one line saying so, with what the
    largest bucket holds and the workers' limit, not Dask's `KilledWorker` text. (The bucket
    is analysed in one task, --slice-packets above its packets: by default it is cut in
    slices, which a worker of 500 MB cannot hold either for this capture's 2,840 connections'
    per-message rows: measured, 0.94 GiB at its peak in slices of 150,000 packets.)"""
    capture = tmp_path / "big.pcap"
    subprocess.run([sys.executable, str(FIX.parent / "benchmarks" / "make_large_capture.py"),
                    str(FIX / "prefetch-consumers.pcap"), str(capture), "--packets", "1000000"],
                   check=True, capture_output=True)
    subprocess.run([*AMQPCAP, "ingest", str(capture), "--out", str(tmp_path / "ds"), "--buckets", "1"],
                   check=True, capture_output=True)
    packets = int(subprocess.run(["capinfos", "-c", "-M", str(capture)], check=True, capture_output=True,
                                 text=True).stdout.split()[-1])
    # one bucket of 1M packets needs about 1.8 GB in a worker, the records step 0.2 GB (both
    # measured); a worker of 500 MB is stopped at 95 % of it (distributed.worker.memory.terminate)
    with dask_cluster(1, ("--memory-limit", "500MB"),
                      {"DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"}) as address:
        r = subprocess.run([*AMQPCAP, "analyze", str(tmp_path / "ds"), "--scheduler", address,
                            "--slice-packets", "10000000"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 2, r.stderr
    line = r.stderr.strip().splitlines()[-1]  # (after the dashboard's link)
    # the task given up on is the bucket's or the records step's, queued on the same worker
    # (each task given to a worker that dies counts its death)
    assert re.match(r"amqpcap: error: Dask gave up on (the analysis of bucket 0|the step over the capture's records): "
                    "the workers it was given to died. ", line), r.stderr
    assert f"The largest bucket, 0, holds 2,840 connections and {packets:,} packets" in line, line
    assert "the workers may use 0.5 GiB each" in line and "--memory-limit" in line, line
    assert "Traceback" not in r.stderr and "KilledWorker" not in r.stderr


#: a worker that tells a memory limit of 10 MB and is never paused nor stopped for it
TELLS_10_MB = {"DASK_DISTRIBUTED__WORKER__MEMORY__" + k: "False" for k in ("TARGET", "SPILL", "PAUSE", "TERMINATE")}


@pytest.mark.slow
def test_buckets_larger_than_half_a_workers_memory_are_analysed_in_slices_by_default(tmp_path):
    """As a user types it (no --slice-packets): on workers whose memory limit is 10 MB (told,
    not enforced here), the buckets of ten-consumers.pcap (about 8,800 packets each) need more
    than half of it (`engine.slice_packets_of`: 3,125 packets) and are analysed in slices, and
    the findings and every table are the local run's."""
    from distributed import Client

    from amqpcap.io import dataset
    from amqpcap.engine.on_dask import slice_packets_of

    root = tmp_path / "ds"
    subprocess.run([*AMQPCAP, "ingest", str(FIX / "ten-consumers.pcap"), "--out", str(root), "--buckets", "2"],
                   check=True, capture_output=True)
    with dask_cluster(2, ("--memory-limit", "10MB"), worker_env=TELLS_10_MB) as address:
        with Client(address, timeout=60) as c:
            every = slice_packets_of(c)
        assert every == 10_000_000 // 2 // 1_600
        assert (dataset.bucket_packets(dataset.read_outline(root).connections, 2) > every).all()
        dist = same_as_the_local_run(root, tmp_path, "--scheduler", address)
    assert SLICED_LINE.search(dist.stderr), dist.stderr


@pytest.mark.slow
def test_a_tasks_own_large_argument_is_not_warned_of(cluster):
    """A bucket's own context goes with its task on purpose (the scheduler keeps it for a retry:
    `engine.LARGE_GRAPH_WARNING`); Dask's "Sending large graph" warning, from 10 MB by default,
    is not given to the user of the engine's client. The same task through a client with Dask's
    default threshold is warned of (the warning is live in this Dask)."""
    import warnings

    import dask
    from distributed import Client

    from amqpcap.engine import on_dask as engine

    context = b"x" * (20 << 20)

    def warned(c) -> list[str]:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            assert c.submit(len, context, pure=False).result() == len(context)
        return [str(w.message) for w in seen if "large graph" in str(w.message)]

    with dask.config.set({"distributed.admin.large-graph-warning-threshold": "10MB"}), Client(cluster) as c:
        assert warned(c)
    with engine.client(cluster) as c:
        assert not warned(c)
