"""`amqpcap analyze` and each analyzer's own subcommand: in this process, or through a dataset on a
Dask cluster when the capture is large; the findings told, the outputs written.
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional


from ..model.errors import UsageError
from ..io.inputs import IN_MEMORY_MAX_BYTES
from .analyzer_commands import _no_findings, _Writing
from .app import app
from .consoles import err, out
from .cluster import _dask_client
from .loading import (
    _analyzing_progress, _capture_line, _check_outputs, _load, _load_outline, _one_name, parse_limits,
    ports_of, require_amqp, undecoded_note)
from .options import (
    AddPortOpt, BodiesOpt, CapturesArg, FormatOpt, InMemoryOpt, KeylogOpt, LimitOpt, OutOpt, PlotsOpt, PortOpt,
    SchedulerOpt, SlicePacketsOpt, StrictOpt, WorkersOpt)

if TYPE_CHECKING:
    from ..io.load import Capture


@app.command()
def analyze(capture: List[str] = CapturesArg, port: Optional[List[int]] = PortOpt,
            add_port: Optional[List[int]] = AddPortOpt, out_dir: Optional[Path] = OutOpt,
            fmt: str = FormatOpt, plots: bool = PlotsOpt, limit: Optional[List[str]] = LimitOpt,
            bodies: bool = BodiesOpt, tls_keylog: Optional[Path] = KeylogOpt, strict: bool = StrictOpt,
            scheduler: Optional[str] = SchedulerOpt, workers: Optional[int] = WorkersOpt,
            in_memory: bool = InMemoryOpt, slice_packets: Optional[int] = SlicePacketsOpt) -> None:
    """Run every analyzer: findings first (who is to blame, with evidence), then the numbers.

    A capture larger than the in-memory size (--in-memory to decode it in this process anyway)
    is decoded into a temporary dataset and analysed on a local Dask cluster, so that no
    process holds the whole capture; so is a dataset (`amqpcap ingest`) of such a capture,
    without the temporary copy. With --scheduler, on the cluster given."""
    if bodies and out_dir is None:
        raise UsageError("--bodies needs --out DIR: the bodies are written there, never printed")
    _check_outputs(fmt, out_dir)
    if in_memory and scheduler is not None:
        raise UsageError("--in-memory and --scheduler exclude each other")
    dataset_path = _dataset_for(capture, scheduler)
    if dataset_path is None and scheduler is None and not in_memory:
        dataset_path = _large_dataset(capture)
        scheduler = "local" if dataset_path is not None else None
    if dataset_path is not None:
        _analyze_dataset(dataset_path, scheduler, workers, out_dir, fmt, plots, slice_packets=slice_packets)
    elif scheduler is not None or (not in_memory and _is_large(capture)):
        why = ("" if scheduler is not None else
               f"the capture is larger than {IN_MEMORY_MAX_BYTES >> 20} MB (--in-memory: decode it here): ")
        ingest_args = dict(ports=ports_of(port, add_port), limits=parse_limits(limit), bodies=bodies,
                           tls_keylog=tls_keylog, strict=strict)
        with _temporary_directory(why) as tmp:
            _analyze_dataset(tmp / "dataset", "local", workers, out_dir, fmt, plots, ingest=(capture, ingest_args),
                             slice_packets=slice_packets)
    else:
        from ..engine.registered import run_all

        cap = _load(capture, port, limit, bodies=bodies, tls_keylog=tls_keylog, add_port=add_port, strict=strict)
        require_amqp(cap)
        with _analyzing_progress() as progress:
            results = run_all(cap, progress=progress)
        _tell_analysis(cap, results, out_dir, fmt, plots)


def _analyze_dataset(path: Path | str, scheduler: str, workers: Optional[int], out_dir: Optional[Path], fmt: str,
                     plots: bool, ingest: Optional[tuple] = None, slice_packets: Optional[int] = None) -> None:
    """`analyze` of a dataset on Dask: its outline here (`amqpcap.io.dataset.read_outline`), its
    buckets on the cluster, the capture's own tables written from the dataset bucket by bucket.
    With `ingest` (capture, ingest arguments), the capture is first ingested into `path` on the
    same cluster: this process reads the capture once and spills it, the workers decode it."""
    from ..engine.on_dask import analyze as analyze_on_dask
    from ..io.kept_rows import store
    from ..io.stored_tables import stored_tables

    # the per-message tables stay where the workers made them (`kept`) until they are written,
    # after the cluster is let go; the cluster first: an address that does not answer fails
    # before the dataset is read
    with ExitStack() as stack, _dask_client(scheduler, workers) as client:
        if ingest is not None:
            from ..engine.on_dask import ingest as ingest_on_dask

            with _analyzing_progress("decoding") as progress:
                ingest_on_dask(_one_name(ingest[0]), path, client, progress=progress, **ingest[1])
        cap = _load_outline(path)
        require_amqp(cap)
        rows_at = stack.enter_context(store(path))
        with _analyzing_progress() as progress:
            results = analyze_on_dask(path, cap, client, progress=progress, store=rows_at, slice_packets=slice_packets,
                                      tell=lambda line: err.print(line, highlight=False, soft_wrap=True))
        kept = stack.pop_all()  # (removed after the writing, below)
    with kept:
        base = {"connections": cap.connections, **stored_tables(str(path), ("frames", "packets")),
                "anomalies": cap.anomalies, **stored_tables(str(path), ("records", "bodies"))}
        _tell_analysis(cap, results, out_dir, fmt, plots, base)


def _tell_analysis(cap: Capture, results, out_dir: Optional[Path], fmt: str, plots: bool, base=None) -> None:
    """The findings on stdout, and with --out every output (`amqpcap.report.outputs.write_outputs`)."""
    from ..analysis.consequences import settled
    from ..report.console import findings_table
    findings = settled(results)
    problems = [f for f in findings if f.severity != "info"]
    notes = [f for f in findings if f.severity == "info"]
    out.print(_capture_line(cap), highlight=False)
    if problems:
        out.print(findings_table(problems))
    else:
        out.print(_no_findings(cap, [r.name for r in results], len(notes)), highlight=False)
    if notes:
        out.print(findings_table(notes, title="Notes (info: not a problem on their own)"))
    note = undecoded_note(cap)
    if note:
        out.print(note, highlight=False)
    if out_dir is not None:
        from ..io.memory import release_freed_memory
        from ..report.outputs import write_outputs
        from ..summary.prepared import prepare

        prepared = prepare(cap, results)
        # what the analysis freed goes back to the system before the writing allocates its own:
        # kept by the allocators it counted in the peak (million-connections.pcap of the hostile
        # corpus: 904-913 MiB instead of 1013-1025 MiB)
        release_freed_memory()
        with _Writing(out_dir), _analyzing_progress("writing") as progress:
            written = write_outputs(cap, results, prepared, out_dir, fmt, plots, base=base, progress=progress)
        err.print(f"{len(written)} files written to {out_dir}", highlight=False, soft_wrap=True)


def _large_dataset(capture: List[str]) -> Optional[Path | str]:
    """The dataset named, when its capture was larger than the in-memory size: analysed on a
    local cluster, as that capture would be."""
    from ..io.dataset import is_dataset, manifest
    from ..io.inputs import too_large_for_memory

    name = _one_name(capture)
    if isinstance(name, list) or not is_dataset(name):
        return None
    return name if too_large_for_memory(manifest(name)["summary"]["file_bytes"]) else None


def _is_large(capture: List[str]) -> bool:
    from ..io.dataset import is_dataset
    from ..io.inputs import is_large

    name = _one_name(capture)
    return not (isinstance(name, (str, Path)) and is_dataset(name)) and is_large(name)


@contextmanager
def _temporary_directory(why: str):
    """A temporary directory for a capture's dataset (removed after; $TMPDIR chooses where),
    for `analyze` on a local cluster. The dataset's warnings are told once, from its outline."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="amqpcap-") as tmp:
        err.print(f"{why}decoding it into a temporary dataset in {tmp}, then analysing it on a local Dask cluster",
                  highlight=False, soft_wrap=True)
        yield Path(tmp)


def _dataset_for(capture: List[str], scheduler: Optional[str]) -> Optional[Path | str]:
    """The dataset (a path, or an fsspec URL) to analyse on Dask when --scheduler is given and
    names one; None for a capture (with --scheduler local: through a temporary dataset)."""
    if scheduler is None:
        return None
    from ..io.dataset import is_dataset

    name = _one_name(capture)
    if not isinstance(name, list) and is_dataset(name):
        return name
    if scheduler != "local":
        raise UsageError("--scheduler ADDRESS analyses a dataset its workers can read: write one first with "
                         "`amqpcap ingest CAPTURE... --out DATASET`, then `amqpcap analyze DATASET --scheduler ...` "
                         "(`--scheduler local` takes a capture through a temporary dataset)")
    return None
