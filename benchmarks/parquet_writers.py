#!/usr/bin/env python3
"""pyarrow's Parquet writer against arrow-rs' (the `parquet` crate) on the frames batches the core
hands `amqpcap frames -o` and the ingest, in one run (issue 13: "the `parquet` crate or pyarrow
— measure and choose").

    python3 benchmarks/parquet_writers.py CAPTURE [--repeat 5]

The capture's frames are decoded once, in batches of `table_files.STREAMED_FRAMES_BATCH_ROWS`
rows, and kept as an Arrow IPC stream (a file cannot replace a dictionary). Each writer then writes those same batches from memory, a
row group per batch, with the options amqpcap gives pyarrow (`table_files.parquet_options`, whose column lists
the example is given): pyarrow in this process, arrow-rs in `rust/examples/parquet_write.rs` (built here with
`cargo build --release --example parquet_write --features parquet-bench`). Prints the best of
--repeat write times of each (CPU of one thread: both writers use one here), their ratio and
file sizes, and checks that pyarrow reads arrow-rs' file back as the same table.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUST = Path(__file__).resolve().parent.parent / "rust"


def frames_batches(capture: Path) -> list:
    from amqpcap.io.load import decode_arrow
    from amqpcap.io.table_files import STREAMED_FRAMES_BATCH_ROWS

    batches: list = []
    decode_arrow(str(capture), frames_sink=batches.append, frames_batch_rows=STREAMED_FRAMES_BATCH_ROWS,
                 pandas=False)
    return [b for b in batches if b.num_rows]


def pyarrow_write(batches: list, path: str, repeat: int) -> float:
    import pyarrow.parquet as pq

    from amqpcap.io.table_files import parquet_options

    schema = batches[0].schema
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        with pq.ParquetWriter(path, schema, **parquet_options(schema)) as w:
            for b in batches:
                w.write(b)
        times.append(time.perf_counter() - t)
    return min(times)


def arrow_rs_write(ipc: str, path: str, repeat: int, schema) -> float:
    """The example's best time, given `parquet_options`' column lists (one source for both)."""
    from amqpcap.io.table_files import parquet_options

    o = parquet_options(schema)
    lists = [",".join(o["write_statistics"]), ",".join(o["use_dictionary"]), ",".join(o["column_encoding"])]
    manifest = str(RUST / "Cargo.toml")
    subprocess.run(["cargo", "build", "--quiet", "--release", "--manifest-path", manifest, "--example",
                    "parquet_write", "--no-default-features", "--features", "parquet-bench"], check=True)
    out = subprocess.run([str(RUST / "target/release/examples/parquet_write"), ipc, path, str(repeat), *lists],
                         check=True, capture_output=True, text=True).stdout
    return float(out)


def decoded(table):
    """`table` with its dictionary columns as plain text: a file's dictionaries are not the
    batches' (each writer chooses), their values are."""
    import pyarrow as pa

    return pa.table({n: c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c
                     for n, c in zip(table.column_names, table.columns)})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture", type=Path)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    import pyarrow as pa
    import pyarrow.parquet as pq

    batches = frames_batches(args.capture)
    rows = sum(b.num_rows for b in batches)
    with tempfile.TemporaryDirectory() as d:
        ipc = f"{d}/frames.arrow"
        with pa.ipc.new_stream(ipc, batches[0].schema) as w:
            for b in batches:
                w.write_batch(b)
        py = pyarrow_write(batches, f"{d}/pyarrow.parquet", args.repeat)
        rs = arrow_rs_write(ipc, f"{d}/arrow-rs.parquet", args.repeat, batches[0].schema)
        sizes = {k: Path(f"{d}/{k}.parquet").stat().st_size for k in ("pyarrow", "arrow-rs")}
        expected = decoded(pa.Table.from_batches(batches))
        same = {k: decoded(pq.read_table(f"{d}/{k}.parquet")).equals(expected) for k in sizes}
    print(f"{args.capture.name}: {rows:,} frames in {len(batches)} batches of {len(batches[0].schema)} columns")
    print(f"pyarrow  {pa.__version__:>8}: {py:.3f} s, {sizes['pyarrow'] / 1e6:.1f} MB")
    print(f"arrow-rs (parquet crate): {rs:.3f} s, {sizes['arrow-rs'] / 1e6:.1f} MB")
    print(f"arrow-rs takes {rs / py:.2f}x pyarrow's time; read back as the batches: {same}")
    return 0 if all(same.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
