"""Writing the outputs: tables and plots shared between forked writer processes, with the same
bytes as when one process writes them all."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

import amqpcap
import amqpcap.report.outputs as report
from amqpcap.engine.registered import run_all
from tiers import one_fast

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "fixtures"


def test_balance_puts_every_job_in_one_group_largest_first():
    costs = [5, 1, 9, 3, 3, 7]
    groups = report._balance(costs, 2)
    assert sorted(i for g in groups for i in g) == list(range(len(costs)))
    assert max(sum(costs[i] for i in g) for g in groups) <= 15  # optimum 14; LPT is within 4/3 of it
    assert report._balance([4, 8, 4], 2) == [[1], [0, 2]]
    assert report._balance([4], 3) == [[0]]


def written_bytes(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


@pytest.mark.skipif("fork" not in __import__("multiprocessing").get_all_start_methods(), reason="needs fork")
def test_fresh_jobs_go_where_the_load_is_lightest_and_the_others_stay_here():
    def job(cost, fresh):
        return report._Job(cost, lambda: None, fresh=fresh)

    # here: 10 of jobs that cannot leave; fresh 100, 60, 50, 5 over this process and one spawned
    jobs = [job(10, False), job(100, True), job(60, True), job(5, True), job(50, True)]
    groups = report._share_fresh(jobs, [1, 2, 3, 4], 2)
    # largest first into the lighter: 100 away (0), 60 here (10), 50 here (70 < 100), 5 away
    assert groups == [[2, 4], [1, 3]]
    assert sorted(i for g in groups for i in g) == [1, 2, 3, 4]



def test_one_job_of_any_size_is_written_here(tmp_path, monkeypatch):
    """A single file to write (an analyzer's one table, or one plot) is written in this process,
    however large: there is nothing to share with a writer."""
    monkeypatch.setattr(report, "PARALLEL_MIN_CELLS", 0)
    out = tmp_path / "one.txt"
    jobs = [report._Job(10**9, lambda: (out.write_text("x"), out)[1])]
    assert report._run_jobs(jobs, 2, report._Written(None, 1)) == [out] and out.read_text() == "x"


def test_plots_are_balanced_against_a_large_table():
    """The frames table of 7 copies of flow-control.pcap.gz (2.9M rows, 50 columns: about 3.7 s
    of CSV) against 11 plots (0.3-2.2 s each, about 10 s in all): the writer of the table also
    draws some of the plots (at least 3: about as long as the table), not the other writer all."""
    costs = [2_937_326 * 50] + [report.PLOT_COST_CELLS] * 11
    [table_writer] = [g for g in report._balance(costs, 2) if 0 in g]
    assert len(table_writer) - 1 >= 3

@pytest.mark.slow
def test_forked_writers_write_the_same_files_as_one_process(tmp_path, monkeypatch):
    assert report.can_fork(), "a thread left running by an earlier test: the writers would not fork"
    cap = amqpcap.load(FIX / "prefetch-consumers.pcap", bodies=True)
    results = run_all(cap)
    serial = report.write_results(results, tmp_path / "serial", plots=True, bodies=cap.bodies, workers=1)
    monkeypatch.setattr(report, "PARALLEL_MIN_CELLS", 0)  # this capture is small: fork anyway
    forked = report.write_results(results, tmp_path / "forked", plots=True, bodies=cap.bodies, workers=3)
    assert [p.name for p in forked] == [p.name for p in serial]
    assert all(p.parent == tmp_path / "forked" for p in forked)
    assert any(p.suffix == ".png" for p in serial) and serial[-1].name == "bodies.csv"
    assert written_bytes(tmp_path / "forked") == written_bytes(tmp_path / "serial")


def _told(calls: list[tuple], written: list[Path]) -> None:
    """`write_results`' progress: each written file told once, counted 1..N of N."""
    assert sorted(name for name, _, _ in calls) == sorted(p.name for p in written)
    assert [done for _, done, _ in calls] == list(range(1, len(written) + 1))
    assert {total for _, _, total in calls} == {len(written)}


@pytest.mark.parametrize("workers", one_fast([1, 3], keep=3))
def test_each_file_written_is_told_as_it_is_here_or_in_a_forked_writer(workers, tmp_path, monkeypatch):
    assert report.can_fork()
    cap = amqpcap.load(FIX / "prefetch-consumers.pcap", bodies=True)
    monkeypatch.setattr(report, "PARALLEL_MIN_CELLS", 0)
    calls: list[tuple] = []
    written = report.write_results(run_all(cap), tmp_path, plots=True, bodies=cap.bodies, workers=workers,
                                   base=report.base_tables(cap), progress=lambda *a: calls.append(a))
    assert len(written) > 20 and all(p.is_file() for p in written)
    _told(calls, written)


@pytest.mark.slow
def test_each_file_written_is_told_as_it_is_beside_spawned_writers(tmp_path):
    """A dataset's stored tables go to spawned writers (`_run_beside_fresh`)."""
    from amqpcap.io import dataset
    from amqpcap.io import stored_tables

    root = dataset.write(amqpcap.load(FIX / "flow-control.pcap.gz"), tmp_path / "ds", buckets=3)
    base = stored_tables.stored_tables(str(root), ("frames", "packets", "records"))
    calls: list[tuple] = []
    written = report.write_results(run_all(dataset.read(root)), tmp_path / "out", plots=False, workers=2, base=base,
                                   progress=lambda *a: calls.append(a))
    assert {"frames.csv", "packets.csv", "records.csv"} <= {p.name for p in written}
    _told(calls, written)


def test_a_write_error_in_a_forked_writer_reaches_the_caller(tmp_path, monkeypatch):
    assert report.can_fork()
    results = run_all(amqpcap.load(FIX / "prefetch-consumers.pcap"))
    (tmp_path / "latency-deliveries.csv").mkdir()  # the file cannot be written, whichever process tries
    monkeypatch.setattr(report, "PARALLEL_MIN_CELLS", 0)
    with pytest.raises(OSError, match="(?i)is a directory"):
        report.write_results(results, tmp_path, plots=False, workers=2)


def test_writers_are_not_forked_beside_another_thread(tmp_path, monkeypatch):
    results = run_all(amqpcap.load(FIX / "prefetch-consumers.pcap"))
    monkeypatch.setattr(report, "PARALLEL_MIN_CELLS", 0)
    monkeypatch.setattr(report, "ProcessPoolExecutor", None)  # any attempt to fork fails
    gate = threading.Event()
    other = threading.Thread(target=gate.wait)
    other.start()
    try:
        assert not report.can_fork()
        assert report.write_results(results, tmp_path, plots=False, workers=2)
    finally:
        gate.set()
        other.join()


def test_analyze_says_in_one_line_that_it_cannot_write(tmp_path):
    (tmp_path / "latency-deliveries.csv").mkdir()
    p = subprocess.run([sys.executable, "-m", "amqpcap", "analyze", str(FIX / "prefetch-consumers.pcap"),
                        "--out", str(tmp_path), "--no-plots"], capture_output=True, text=True)
    assert p.returncode != 0
    assert "Traceback" not in p.stderr
    assert f"cannot write into {tmp_path}" in p.stderr
