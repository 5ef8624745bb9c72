"""Loading a capture into the ingestion tables (documented column by column in docs/tables.md).

The native core hands over whole column arrays (`amqpcap.io.core_columns` wraps them into pandas
dtypes without per-row Python work), or Arrow record batches (`decode_arrow`). pandas is
imported when first needed, so that a decode to Arrow starts without waiting for it.
"""

from __future__ import annotations

import functools
import os
import threading
from dataclasses import asdict, dataclass, field, make_dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, TypeVar

from .. import _core
from ..model.display_filters import stream_filter
from ..model.errors import UsageError, from_core
from ..model.wording import amqp10_readers_words, counted

if TYPE_CHECKING:
    import pandas as pd

#: AMQP (5672) and AMQPS (5671, AMQP over TLS: detected and reported as encrypted unless a
#: key log decrypts it)
DEFAULT_PORTS: tuple[int, ...] = (5672, 5671)


def _check_limits(self) -> None:
    for name, value in asdict(self).items():
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 63:
            raise UsageError(f"limit {name} must be a whole number of at least 0, not {value!r}")


#: Resource caps of the native core (docs/tables.md, "Resource caps"): a frozen dataclass with
#: one int field per cap, its default the core's. The caps are declared once, in the core
#: (rust/src/limits.rs, given here by ``_core.limits()``), not spelled again here.
Limits = make_dataclass(
    "Limits",
    [(name, int, field(default=default)) for name, default, _unit, _meaning in _core.limits()],
    frozen=True,
    namespace={
        "__doc__": """Resource caps of the native core (docs/tables.md, "Resource caps"). The command line
    sets them with ``--limit NAME=VALUE``.""",
        "__post_init__": _check_limits,
    },
)
Limits.__module__ = __name__


@dataclass(slots=True)
class Told:
    """What the derivations of a partition of a capture, or of a slice of its time, are told from
    outside it (`Capture.context`), each None until it is set. Its values are the derivations'
    own types, named here and not imported: the I/O layer holds them without reading them."""

    #: the queue backlog read at this partition's acks and consumers (an
    #: `amqpcap.derive.backlog_join.BacklogPieces`: the `BACKLOG` need's context round)
    backlog: Any = None
    #: a slice of a partition's time: what the slice before left open (`amqpcap.derive.seeds.Replay`;
    #: None at the first slice) ...
    replay: Any = None
    #: ... and what the first pass over every slice found of the partition's end
    #: (`amqpcap.derive.seeds.Ends`); None: not a slice replayed (`amqpcap.derive.replay.with_replay`)
    ends: Any = None
    #: a slice as its derivations see it: the seeds of its replayed rows (`amqpcap.derive.seeds.Seeds`)
    seeds: Any = None
    #: a dataset's outline: its buckets' tally joined (`amqpcap.derive.tally`), which the summary reads
    tally: Any = None


@dataclass
class Capture:
    """A decoded capture: the ingestion tables and the file summary."""

    path: str
    ports: tuple[int, ...]
    frames: pd.DataFrame
    packets: pd.DataFrame
    connections: pd.DataFrame
    anomalies: pd.DataFrame
    #: every record of the file (also non-TCP): packet, ts, frame_len
    records: pd.DataFrame = field(default_factory=lambda: _pandas().DataFrame())
    #: message bodies, one row per message; None unless ``load(..., bodies=True)``
    bodies: pd.DataFrame | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    #: AMQP 1.0's frames, one row per frame (docs/tables.md); empty, with its columns, when no
    #: connection speaks AMQP 1.0
    amqp10_frames: pd.DataFrame = field(default_factory=lambda: empty_table("amqp10_frames"))
    #: values the analyzers derive from the tables, computed once and shared between analyzers
    #: (matched deliveries, consumer state, stream-ordered packet columns: amqpcap.derive), keyed
    #: by the derivation function. Only `amqpcap.derive.derivation` reads or writes it, each
    #: derivation under its own lock (`computed_once`), so analyzers running in threads compute a
    #: shared value once. Clear it after editing a table in place.
    derived: dict[Callable[..., Any], Any] = field(default_factory=dict, repr=False, compare=False)
    #: for a partition of a capture (some of its connections) or a slice of its time: what its
    #: derivations are told from outside it (`Told`). Set before any derivation reads it; nothing
    #: for a whole capture, whose derivations compute it themselves
    context: Told = field(default_factory=Told, repr=False, compare=False)
    _derivation_locks: dict[str, threading.RLock] = field(default_factory=dict, init=False, repr=False, compare=False)

    def derivation_lock(self, name: str) -> threading.RLock:
        """The lock of one derivation (see `computed_once`) on this capture."""
        with _LOCKS_GUARD:
            return self._derivation_locks.setdefault(name, threading.RLock())

    @property
    def warnings(self) -> list[str]:
        return list(self.summary.get("warnings", []))

    def __repr__(self) -> str:
        return (
            f"<Capture {os.path.basename(self.path)}: {counted(self.summary.get('packets', 0), 'packet')}, "
            f"{counted(len(self.connections), 'AMQP connection')}, {counted(len(self.frames), 'frame')}, "
            f"{counted(len(self.anomalies), 'anomaly', 'anomalies')}>"
        )


@functools.lru_cache(maxsize=1)
def empty_capture() -> Capture:
    """The capture of a pcap file without packets, as `load` gives it: its tables are empty in
    `load`'s dtypes (categories of the fixed vocabularies included), the core's own, so the
    dtypes have one source (`empty_table`, the dataset reader's templates)."""
    import struct
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        empty = Path(d) / "empty.pcap"
        empty.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        return load(empty, bodies=True)


def empty_table(name: str) -> pd.DataFrame:
    """Table `name` without rows, in `load`'s dtypes (`empty_capture`'s)."""
    return getattr(empty_capture(), name).copy()


def _pandas():
    """pandas, imported when first needed: `decode_arrow` starts the decode of `amqpcap frames
    -o` without it (its tables stay Arrow until the decode's summary is made)."""
    import pandas

    return pandas


_LOCKS_GUARD = threading.Lock()
_F = TypeVar("_F", bound=Callable[..., Any])


def computed_once(fn: _F) -> _F:
    """For a function of a Capture that keeps its result on the capture (`amqpcap.derive.derivation`,
    which keeps it in ``cap.derived``): concurrent first calls on one capture wait for each other,
    so the value is computed once even when the analyzers run in threads
    (`amqpcap.engine.registered.run_all`). A derivation only calls the ones it is built from, never one
    built from it, so taking the locks in call order cannot deadlock."""
    name = f"{fn.__module__}.{fn.__qualname__}"

    @functools.wraps(fn)
    def locked(cap: Capture, *args: Any, **kwargs: Any) -> Any:
        with cap.derivation_lock(name):
            return fn(cap, *args, **kwargs)

    return locked  # type: ignore[return-value]


def _ports(ports: int | Iterable[int] | None) -> tuple[int, ...]:
    if ports is None:
        return DEFAULT_PORTS
    if isinstance(ports, int):
        ports = (ports,)
    out = tuple(int(p) for p in ports)
    bad = [p for p in out if not 0 < p < 65536]
    if bad:
        raise UsageError(f"not a TCP port: {bad[0]}")
    return out


def load(
    path: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    ports: int | Iterable[int] | None = DEFAULT_PORTS,
    limits: Limits | None = None,
    tls_keylog: str | os.PathLike[str] | None = None,
    bodies: bool = False,
    strict: bool = False,
    progress: Callable[[int, int, int], None] | None = None,
) -> Capture:
    """Decode the capture at ``path`` (pcap, pcapng, optionally gzip-compressed).

    ``path`` may be a dataset written by ``amqpcap ingest`` (`amqpcap.io.dataset`): the capture it
    stores is read back as it was decoded, and the other arguments are not used.

    ``path`` may also name several files (a list, a glob pattern, a directory: a tcpdump ring,
    see `amqpcap.io.inputs.capture_files`): they are read as one capture, merged by time the way
    ``mergecap`` merges them, so a connection spanning files is one connection, and packet
    numbers are those of the merged file (``records.source_file`` and ``source_packet`` give
    each packet's file and number there). A file of the set that cannot be used is skipped with
    a warning, or raises when ``strict``.

    ``ports`` are the AMQP ports: a connection on one of them is decoded even when the capture
    starts mid-connection; connections on other ports are decoded when their AMQP protocol
    header is in the capture. Raises :class:`amqpcap.model.errors.CaptureError` when the file cannot
    be used; anything odd inside the capture is reported in ``Capture.anomalies``.

    TLS connections (AMQPS) on these ports are listed in ``connections`` (``tls``) and skipped
    (a ``tls-encrypted`` anomaly per direction, and a warning). ``tls_keylog`` names a key log
    (NSS format, e.g. Python's ``SSLContext.keylog_filename``): tshark decrypts the sessions it
    has secrets for, and their AMQP is decoded like plain AMQP (see :mod:`amqpcap.io.tls`).

    Message bodies are not kept unless ``bodies`` is true; then ``Capture.bodies`` holds them
    (at most ``limits.max_body_bytes`` bytes in all).

    ``progress(bytes_read, bytes_total, packets)`` is called every `PROGRESS_INTERVAL_S` while
    the files are read (from another thread; bytes of the files as stored, so compressed bytes
    for gzip files), and once at the end.
    """
    from .dataset import is_dataset

    if isinstance(path, (str, os.PathLike)) and is_dataset(path):
        from .dataset import read

        return read(path)  # stored by `amqpcap ingest` (amqpcap.io.dataset): decoded already
    pd = _pandas()
    from .core_columns import pandas_frame

    d = _decoded(path, ports, limits, tls_keylog, bodies, strict, progress, arrow=False)
    raw = d.tables
    records = pandas_frame(raw.pop("records"))
    records["source_file"] = pd.Categorical.from_codes(records["source_file"].to_numpy(),
                                                       categories=pd.Index(d.files, dtype=object))
    body_rows = raw.pop("bodies")
    return Capture(
        path=d.summary["path"],
        ports=d.ports,
        frames=pandas_frame(raw.pop("frames")),
        packets=pandas_frame(raw.pop("packets")),
        connections=d.connections,
        anomalies=pandas_frame(raw.pop("anomalies")),
        records=records,
        bodies=pandas_frame(body_rows) if body_rows is not None else None,
        summary=d.summary,
        amqp10_frames=pandas_frame(raw.pop("amqp10_frames")),
    )


@dataclass
class Decoded:
    """A capture as the core decoded it, before its tables are made pandas frames: `tables` as
    the core hands them (column lists, or with ``arrow`` pyarrow Tables, ``connections`` among
    them; ``bodies`` None unless asked for), the summary `load` gives. `connections` is the
    connections table as `load` gives it, or with ``arrow`` only its `TLS_COLUMNS` (in pandas;
    in Arrow when decoded with ``pandas=False``, as the summary's times are the core's
    nanoseconds then: `decode_arrow`). `written`: the rows of each table its sinks wrote while
    it decoded (set by the writer: `amqpcap.io.dataset`)."""

    tables: dict[str, Any]
    connections: Any
    summary: dict[str, Any]
    ports: tuple[int, ...]
    files: list[str]
    written: dict[str, int] = field(default_factory=dict)

    def anomaly_rows(self) -> pd.DataFrame:
        """The anomalies' kind, stream, bytes and detail as pandas (what a command's one-line
        account of them reads: `amqpcap.cli.anomaly_warning`), from the Arrow table."""
        return self.tables["anomalies"].select(["kind", "stream", "bytes", "detail"]).to_pandas()


#: rows of the `frames` table in a batch that `decode_arrow` hands to its ``frames_sink``, by
#: default (`amqpcap frames -o` gives `table_files.STREAMED_FRAMES_BATCH_ROWS`, `amqpcap.io.dataset` its own)
FRAMES_BATCH_ROWS = 1 << 20


def decode_arrow(path, ports=DEFAULT_PORTS, limits: Limits | None = None, tls_keylog=None, bodies: bool = False,
                 strict: bool = False, progress=None,
                 records_sink: Callable[[Any], None] | None = None, spill: tuple[str, int] | None = None,
                 frames_sink: Callable[[Any], None] | None = None,
                 frames_batch_rows: int = FRAMES_BATCH_ROWS, pandas: bool = True) -> Decoded:
    """What `load` decodes, with the tables as pyarrow Tables made by the core (no pandas in
    between: `amqpcap.io.dataset.ingest` writes them to Parquet as they are). ``records.source_file``
    is a dictionary of the file names, as `load` makes it.

    With ``records_sink``, the `records` rows are not kept: they are given to it as pyarrow
    RecordBatches of about `RECORDS_BATCH_ROWS` rows while the capture is read, the last ones
    when it ends, and ``tables["records"]`` is empty. Neither sink is used with a key log (the
    capture is decoded twice then).

    With ``spill = (directory, buckets)``, the first step of `amqpcap.io.dataset.ingest`: no
    connection is decoded; the packets of every connection are spilled into its bucket's file
    in ``directory`` (`decode_spilled` decodes one), and ``tables["spilled"]`` lists each
    bucket's (packets, captured bytes).

    With ``frames_sink``, the `frames` rows are not kept: they are given to it as pyarrow
    RecordBatches of ``frames_batch_rows`` rows (the last one fewer, at least one batch) in the
    table's order as they settle while the capture is read, and ``tables["frames"]`` is None.
    Their text columns have 32-bit dictionary codes whatever the dictionary's size, and each
    batch's dictionary holds the texts met so far (so the batches share one schema).

    With ``pandas=False`` nothing imports pandas (`amqpcap frames -o`: its import took a quarter
    of the CPU the command uses): ``connections`` is an Arrow table of `TLS_COLUMNS`, and the
    summary's times stay the core's nanoseconds since the epoch (``first_ts_ns``,
    ``last_ts_ns``, each file's too). Not with a key log."""
    import pyarrow as pa

    if (records_sink is not None or frames_sink is not None or not pandas) and tls_keylog is not None:
        raise ValueError("records_sink, frames_sink and pandas=False are not used with a TLS key log")
    from .inputs import capture_files

    files = capture_files(path)

    def named(batch):
        """The core's records batch with `source_file` as a dictionary of the file names."""
        i = batch.schema.get_field_index("source_file")
        column = batch.column(i)
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        names = pa.DictionaryArray.from_arrays(column, _string_array(files))
        return batch.set_column(i, pa.field("source_file", names.type), names)

    if pandas:  # (which the decode's summary needs when it ends: imported meanwhile)
        threading.Thread(target=_pandas, name="amqpcap-import-pandas").start()
    records = _batch_sink(records_sink and (lambda b: records_sink(named(b))))
    d = _decoded(path, ports, limits, tls_keylog, bodies, strict, progress, arrow=True, records_sink=records,
                 files=files, spill=spill, frames=(_batch_sink(frames_sink), frames_batch_rows), pandas=pandas)
    d.tables["records"] = named(d.tables["records"])
    return d


def _string_array(texts: list[str]):
    """`texts` as an Arrow string array, made without pandas (`pyarrow.array` of a list imports
    it, to ask whether the list is a pandas object)."""
    import array

    import pyarrow as pa

    data = [t.encode() for t in texts]
    ends = array.array("i", [0])
    for d in data:
        ends.append(ends[-1] + len(d))
    return pa.StringArray.from_buffers(len(data), pa.py_buffer(ends), pa.py_buffer(b"".join(data)))


def decode_spilled(path: str | os.PathLike[str], capture_records: int, ports=DEFAULT_PORTS, limits: Limits | None = None,
                   bodies: bool = False, frames_sink: Callable[[Any], None] | None = None,
                   frames_batch_rows: int = FRAMES_BATCH_ROWS, packets: int = 0, **_whole_capture_args: Any) -> Decoded:
    """One bucket of `amqpcap.io.dataset.ingest`, decoded from the spill file `decode_arrow`'s
    ``spill`` wrote (`rust/src/buckets/spill.rs`): the tables of its connections (pyarrow Tables), as a
    whole decode of the capture (of ``capture_records`` packets) gives them. The summary has
    only the warnings of this decode; ``strict`` and ``tls_keylog`` concern the capture's files
    and are not used here. ``frames_sink``: as `decode_arrow`'s. ``packets``: the packets spilled into
    the bucket (``tables["spilled"]``), for which the core makes its packets columns at once."""
    port_list = _ports(ports)
    raw = _core.decode_spilled(os.fspath(path), list(port_list), int(capture_records), asdict(limits or Limits()),
                               bool(bodies), True, _batch_sink(frames_sink), frames_batch_rows, int(packets))
    _arrow_tables(raw)
    summary = {"warnings": list(raw.pop("summary")["warnings"])}
    return Decoded(raw, _tls_columns(raw["connections"]), summary, port_list, [])


def _arrow_tables(raw: dict) -> None:
    """The core's Arrow batches of a decode as pyarrow Tables, in place."""
    import pyarrow as pa

    for table in ("records", "packets", "frames", "connections", "anomalies", "bodies", "amqp10_frames"):
        if raw.get(table) is not None:
            raw[table] = pa.Table.from_batches([pa.record_batch(raw[table])])


def _batch_sink(sink: Callable[[Any], None] | None):
    """`sink` of pyarrow RecordBatches as a sink of the core's Arrow batches."""
    if sink is None:
        return None
    import pyarrow as pa

    return lambda b: sink(pa.record_batch(b))


#: rows of the `records` table in a batch that `decode_arrow` hands to its ``records_sink``
RECORDS_BATCH_ROWS = 1 << 20


def _decoded(path, ports, limits, tls_keylog, bodies, strict, progress, arrow: bool,
             records_sink=None, files: list[str] | None = None, spill=None, frames=(None, FRAMES_BATCH_ROWS),
             pandas: bool = True) -> Decoded:
    """The core's decode of the capture at `path` (see `load`; `files`: its files, when known
    already) and its summary; with a key log, decoded again with the plaintext of the TLS
    connections it decrypts. ``pandas=False``: as `decode_arrow`'s."""
    from .inputs import capture_files, describe, missing_ring_files

    files = capture_files(path) if files is None else files
    name = describe(path, files)
    port_list = _ports(ports)
    if tls_keylog is not None:
        from .tls import check_keylog

        check_keylog(tls_keylog)
        if len(files) > 1:
            raise UsageError("a TLS key log is used with one capture file: merge the set with mergecap first")
        path = files[0]
    limit_dict = asdict(limits or Limits())

    def decode(decrypted=None) -> tuple[dict, pd.DataFrame]:
        try:
            raw = _decode(files, list(port_list), limit_dict, bool(bodies), decrypted, bool(strict), progress, arrow,
                          records_sink, spill, frames)
        except _core.CoreCaptureError as e:
            raise from_core(*e.args) from None
        if not arrow:
            from .core_columns import pandas_frame

            return raw, pandas_frame(raw.pop("connections"))
        _arrow_tables(raw)
        if not pandas:
            return raw, raw["connections"].select(list(TLS_COLUMNS))
        return raw, _tls_columns(raw["connections"])

    raw, connections = decode()
    decryption = None
    if tls_keylog is not None and connections["tls"].any():
        # The core found the TLS connections; tshark decrypts only those, then the capture is
        # decoded again with their plaintext (the core is fast next to tshark).
        from .tls import decrypt

        tls = connections[connections["tls"]]
        decryption = decrypt(path, tls_keylog, tls["stream"].tolist(), tls["broker_port"].tolist())
        if decryption.streams:
            raw, connections = decode(decryption.core_argument())
    summary = dict(raw.pop("summary"))
    summary["path"] = name
    summary["files"] = _files_summary(summary["files"], pandas)
    summary["file_bytes"] = sum(f["file_bytes"] or 0 for f in summary["files"])
    if pandas:
        for key in ("first_ts", "last_ts"):
            summary[key] = _utc(summary.pop(f"{key}_ns"))
    summary["warnings"] = list(summary["warnings"]) + missing_ring_files(files)
    if spill is None:  # (else the connections are decoded bucket by bucket, from the spill)
        summary["warnings"] += tls_warnings(connections, tls_keylog, decryption) + protocol_warnings(connections)
    summary["tls_keylog"] = os.fspath(tls_keylog) if tls_keylog is not None else None
    return Decoded(raw, connections, summary, port_list, files)


#: what the TLS step and the summary's warnings read of the connections table
TLS_COLUMNS = ("stream", "broker_port", "tls", "tls_decrypted", "protocol")


def _tls_columns(t) -> pd.DataFrame:
    """Of the connections table in Arrow, `TLS_COLUMNS` as pandas (the whole table is the
    caller's, still in Arrow)."""
    return t.select(list(TLS_COLUMNS)).to_pandas()


#: seconds between two calls of a `load` progress callback
PROGRESS_INTERVAL_S = 0.25


def _decode(files: list[str], ports: list[int], limits: dict, bodies: bool, decrypted, strict: bool,
            progress: Callable[[int, int, int], None] | None, arrow: bool = False,
            records_sink=None, spill=None, frames=(None, FRAMES_BATCH_ROWS)) -> dict:
    """The core's decode (`frames`: its frames sink and the rows of a batch); with `progress`,
    a thread reports how far it has read (the core runs without the GIL, counting into a
    `_core.ReadProgress`)."""
    if progress is None:
        return _core.decode(files, ports, limits, bodies, decrypted, strict, arrow=arrow,
                            records_sink=records_sink, records_batch_rows=RECORDS_BATCH_ROWS, spill=spill,
                            frames_sink=frames[0], frames_batch_rows=frames[1])
    counter = _core.ReadProgress()
    total = 0
    for f in files:
        try:
            total += os.path.getsize(f)
        except OSError:
            pass  # the core names the file and why
    finished = threading.Event()

    def report() -> None:
        while not finished.wait(PROGRESS_INTERVAL_S):
            progress(counter.bytes, total, counter.records)

    reporter = threading.Thread(target=report, name="amqpcap-progress", daemon=True)
    reporter.start()
    try:
        return _core.decode(files, ports, limits, bodies, decrypted, strict, counter, arrow, records_sink,
                            RECORDS_BATCH_ROWS, spill, *frames)
    finally:
        finished.set()
        reporter.join()
        progress(counter.bytes, total, counter.records)


def _utc(ns: int | None) -> pd.Timestamp | None:
    return _pandas().Timestamp(ns, unit="ns", tz="UTC") if ns is not None else None


def _files_summary(files: list[dict], timestamps: bool = True) -> list[dict]:
    """The core's account of each file, with its size and timestamps as Timestamps (with
    ``timestamps=False`` as the core gives them: ``first_ts_ns``, ``last_ts_ns``)."""
    out = []
    for f in files:
        f = dict(f)
        try:
            f["file_bytes"] = os.path.getsize(f["name"])
        except OSError:
            f["file_bytes"] = None
        if timestamps:
            f["first_ts"], f["last_ts"] = _utc(f.pop("first_ts_ns")), _utc(f.pop("last_ts_ns"))
        out.append(f)
    return out


#: streams a warning names at most (the rest are counted)
NAMED_STREAMS = 10


def protocol_warnings(connections) -> list[str]:
    """Say which connections speak AMQP 1.0: the core decodes their frames (`amqp10_frames`) and
    the analyzers of `AMQP10_READERS` read them; the others read 0-9-1 methods only, so their
    findings never speak of them. `connections`: a
    pandas frame or an Arrow table (`amqpcap.model.table_columns`)."""
    from ..model.table_columns import column_list

    protocols = column_list(connections, "protocol")
    amqp10 = [s for s, p in zip(column_list(connections, "stream"), protocols) if p == "1.0"]
    if not amqp10:
        return []
    n = len(amqp10)
    named = stream_filter(amqp10, NAMED_STREAMS) + (f", the first {NAMED_STREAMS}" if n > NAMED_STREAMS else "")
    return [f"{'1 connection speaks' if n == 1 else f'{n:,} connections speak'} AMQP 1.0 ({named}): "
            f"{'its' if n == 1 else 'their'} frames are read by {amqp10_readers_words()}; the others "
            f"read AMQP 0-9-1 only"]


def tls_warnings(connections, keylog, decryption) -> list[str]:
    """Say which TLS connections were skipped: nothing of a capture goes missing silently.
    `connections`: a pandas frame or an Arrow table (`amqpcap.model.table_columns`)."""
    from ..model.table_columns import column_list, has_column

    if not has_column(connections, "tls"):
        return []
    out = list(decryption.warnings) if decryption else []
    tls = column_list(connections, "tls")
    if keylog is not None and not any(tls):
        out.append(f"no TLS connection on the AMQP ports: the key log {os.fspath(keylog)} was not used")
    skipped = sum(bool(t) and not d for t, d in zip(tls, column_list(connections, "tls_decrypted")))
    if skipped:
        n = "1 TLS connection is" if skipped == 1 else f"{skipped} TLS connections are"
        if keylog is None:
            out.append(f"{n} encrypted and {'was' if skipped == 1 else 'were'} skipped (pass --tls-keylog FILE to decrypt)")
        else:
            out.append(f"{n} encrypted and {'was' if skipped == 1 else 'were'} skipped: "
                       f"the key log {os.fspath(keylog)} has no secrets for {'it' if skipped == 1 else 'them'}")
    return out
