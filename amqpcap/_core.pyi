"""Native core (Rust, rust/src/binding/). Python code should use amqpcap.load instead."""

from pathlib import Path
from typing import Any, Callable

import numpy as np
import numpy.typing as npt

# A column is a tuple whose first item names its encoding:
#   ("i8"|"i16"|"i32"|"i64"|"bool"|"ts", values)               ts: int64 nanoseconds since the epoch
#   ("null_i16"|"null_i32"|"null_u32"|"null_i64"|"null_u64"|"null_bool"|"null_ts", values, missing_mask)
#   ("str", codes: int8/int16/int32 (-1 = missing), dictionary: list[str])
#   ("cat", codes: int8 (-1 = missing), names: list[str])
#   ("text", codes, dictionary)      like "str", but made a column of str objects, not a categorical
Column = tuple[Any, ...]
Table = list[tuple[str, Column]]

class CoreCaptureError(Exception):
    """args: (kind, message); kind is "unreadable", "empty", "not-a-capture" or "unsupported"."""

ANOMALY_KINDS: list[str]
METHOD_NAMES: list[str]

MAX_FILES: int
#: amqpcap's version (rust/Cargo.toml's, the one place it is written)
__version__: str

def limits() -> list[tuple[str, int, str, str]]:
    """The resource caps as the core declares them (rust/src/limits.rs): (name, default, unit,
    meaning) each, in the order docs/tables.md lists them. `amqpcap.Limits` is made from it;
    `decode`'s `limits` dict names them."""

class ArrowBatch:
    """One table as an Arrow record batch, given through the Arrow PyCapsule interface
    (`pyarrow.record_batch(obj)` imports it without a copy). It can be taken once."""

    def __arrow_c_array__(self, requested_schema: object | None = None) -> tuple[object, object]: ...

class ReadProgress:
    """How far a running `decode` has read; pass it as `progress` and read it from another thread."""

    def __init__(self) -> None: ...
    @property
    def bytes(self) -> int:
        """Bytes read from the files so far (compressed bytes for gzip files)."""
    @property
    def records(self) -> int:
        """Packet records read so far."""

def decode(
    paths: list[str],
    ports: list[int],
    limits: dict[str, int] | None = None,
    bodies: bool = False,
    decrypted: tuple[list[int], list[int], list[int], bytes] | None = None,
    strict: bool = False,
    progress: ReadProgress | None = None,
    arrow: bool = False,
    records_sink: Callable[[ArrowBatch], None] | None = None,
    records_batch_rows: int = 1 << 20,
    spill: tuple[str, int] | None = None,
    frames_sink: Callable[[ArrowBatch], None] | None = None,
    frames_batch_rows: int = 1 << 20,
) -> dict[str, Any]:
    """Decode a capture: one file, or a set read as one capture, merged by time as mergecap
    merges them (a file of a set that cannot be used is skipped with a warning unless
    `strict`). Returns {"records", "packets", "frames", "connections", "anomalies",
    "amqp10_frames" (AMQP 1.0's frames; no rows without AMQP 1.0): Table, "bodies": Table (with
    bodies=True) or None, "summary": dict}. Raises CoreCaptureError when
    the file cannot be used.

    decrypted = (streams, packets, ends, data): plaintext of TLS connections decrypted outside
    the core. The tcp.stream numbers in `streams` are decoded from it instead of their TCP
    payload; packet `packets[i]` (ascending frame numbers) completed the plaintext
    data[ends[i-1]:ends[i]] (ends[-1] = 0).

    spill = (directory, buckets): the first step of `amqpcap ingest` (rust/src/buckets/spill.rs). No
    connection is decoded (their tables are empty); every TCP packet of a conversation that is
    or may be AMQP goes to the spill file of its stream's bucket, `directory/bucket=K.arrow`,
    with its packet and stream numbers; the rows of no connection (records, anomalies of the
    file) and the summary are as without it. The result has "spilled": each bucket's
    (packets, captured bytes). A write error of the spill raises OSError.

    arrow: each table is an `ArrowBatch` instead of a column list (`pyarrow.record_batch(t)`),
    in the types docs/dataset.md lists ("Arrow from the core").

    records_sink: called with the `records` rows as an ArrowBatch each time `records_batch_rows`
    are read, and with the last ones at the end, while the capture is read (with the GIL taken
    for the call); the returned "records" table is then empty. Its first exception stops the
    calls and is raised when the decode returns.

    frames_sink: called with the `frames` rows as ArrowBatches of `frames_batch_rows` rows (the
    last one fewer; one of no rows when there are none) in the table's order, each as soon as
    its rows are settled while the capture is read: no row still to come sorts before them and
    their connection's client side is known for good (rust/src/pipeline/frames_out.rs, `frames_watermark`).
    Their text columns have 32-bit codes, and each batch's dictionary is the texts met so far.
    The returned "frames" is then None. Errors as for records_sink."""

def decode_spilled(
    path: str,
    ports: list[int],
    capture_records: int,
    limits: dict[str, int] | None = None,
    bodies: bool = False,
    arrow: bool = True,
    frames_sink: Callable[[ArrowBatch], None] | None = None,
    frames_batch_rows: int = 1 << 20,
    packets: int = 0,
) -> dict[str, Any]:
    """Decode one bucket spilled by `decode(..., spill=...)` from its spill file: the tables of
    its connections as a whole decode of the capture (`capture_records` records) gives them
    (capture-wide packet and stream numbers), in `decode`'s dict (records empty; the summary's
    only meaningful key is "warnings"). `frames_sink` as `decode`'s. `packets`: the packets
    spilled into the bucket (the split's count), for which its packets columns are made at once.
    Raises OSError when the file cannot be read."""

def spill_path(dir: str, bucket: int) -> Path:
    """The spill file of `bucket` in the spill directory `dir` (`decode(..., spill=(dir, n))`)."""

def bucket_of(streams: npt.NDArray[np.int64], buckets: int) -> npt.NDArray[np.int32]:
    """The bucket of each stream number (Fibonacci hashing: consecutive streams spread)."""

def csv_text(schema: object, array: object, header: bool, raw: list[int] = ...) -> bytes | None:
    """The CSV text of a record batch given as the two capsules of `batch.__arrow_c_array__()`:
    what `pyarrow.csv.write_csv` writes for it (integers, booleans, text and dictionary text;
    the columns numbered in `raw` are text written unquoted), with the header line when
    `header`; None when a column is of another type (rust/src/output/csv_out.rs)."""
