"""The dataset path (`amqpcap ingest`, amqpcap.io.dataset): every fixture stored as a Parquet
dataset and read back gives the tables and summary.json `load()` gives; the layout is readable
by pyarrow as a hive-partitioned dataset with each connection whole in one bucket; an
unfinished dataset is refused and a failed write leaves no manifest."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import amqpcap
from amqpcap.io import dataset
from amqpcap.io.dataset import ingestion
from amqpcap.io.dataset.writing import capture_tables
from amqpcap.engine.registered import run_all
from amqpcap.summary.build import build_summary
from tiers import one_fast

FIX = Path(__file__).resolve().parents[2] / "fixtures"
FIXTURES = sorted(p.name for p in FIX.iterdir() if p.name.endswith((".pcap", ".pcapng", ".pcap.gz")))
SAME_ORDER = ("connections", "packets", "frames", "records", "bodies", "amqp10_frames")


def canonical_anomalies(a: pd.DataFrame) -> pd.DataFrame:
    """The anomalies' row order is not part of the dataset (docs/dataset.md)."""
    return a.sort_values(["packet", "stream"], kind="stable", na_position="first", ignore_index=True)


def summary_json(cap) -> str:
    return json.dumps(build_summary(cap, run_all(cap)), indent=2, ensure_ascii=False)


@pytest.mark.parametrize("name", one_fast(FIXTURES))
def test_a_fixture_through_the_dataset_is_the_same_capture(name, tmp_path):
    direct = amqpcap.load(FIX / name, bodies=True)
    dataset.write(direct, tmp_path / "ds", buckets=3)
    assert_same_capture(direct, amqpcap.load(tmp_path / "ds"))


def assert_same_capture(direct, stored) -> None:
    for table in SAME_ORDER:
        pd.testing.assert_frame_equal(getattr(direct, table), getattr(stored, table), obj=table)
    pd.testing.assert_frame_equal(canonical_anomalies(direct.anomalies), canonical_anomalies(stored.anomalies))
    assert stored.summary == direct.summary
    assert summary_json(stored) == summary_json(direct)


@pytest.mark.parametrize("name", ["amqp10.pcap", "amqp10-outcomes.pcap"])
def test_amqp10_frames_through_the_dataset_written_and_ingested(name, tmp_path):
    """AMQP 1.0's frames are stored by connection, in their buckets, and read back as `load`
    gave them, from a dataset written from a loaded capture and from one ingested bucket by
    bucket (amqp10-outcomes: two connections, so two buckets hold rows)."""
    direct = amqpcap.load(FIX / name, bodies=True)
    assert len(direct.amqp10_frames)
    dataset.write(direct, tmp_path / "written", buckets=3)
    dataset.ingest(FIX / name, tmp_path / "ingested", buckets=3, bodies=True)
    for ds in ("written", "ingested"):
        assert (tmp_path / ds / "amqp10_frames" / "bucket=0" / "part-0.parquet").exists()
        assert_same_capture(direct, amqpcap.load(tmp_path / ds))


@pytest.mark.slow
@pytest.mark.parametrize("name", FIXTURES)
def test_a_fixture_ingested_bucket_by_bucket_is_the_same_capture(name, tmp_path):
    """Four buckets, each decoded from its spilled packets alone: together they are the capture
    `load` gives (and the spill files are gone)."""
    direct = amqpcap.load(FIX / name, bodies=True)
    done = dataset.ingest(FIX / name, tmp_path / "ds", buckets=4, bodies=True)
    assert done.buckets == 4 and done.connections == len(direct.connections)
    assert not (tmp_path / "ds" / dataset.SPILL_DIR).exists()
    assert_same_capture(direct, amqpcap.load(tmp_path / "ds"))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["kernel-drops.pcap", "midstream.pcap", "memory-alarm.pcap", "ten-consumers.pcap",
                                  "unlimited.pcap.gz"])
def test_a_buckets_frames_written_a_batch_at_a_time_are_the_same_capture(name, tmp_path, monkeypatch):
    """The core hands a bucket's frames to the ingest `FRAMES_BATCH_ROWS` rows at a time as they
    settle during the decode, and each is written as it comes (a row group each); with batches
    of 1,000 rows, far fewer than these fixtures' frames, the capture read back is still the one
    `load` gives (midstream.pcap: connections whose client side is settled late)."""
    import pyarrow.parquet as pq

    monkeypatch.setattr(ingestion, "FRAMES_BATCH_ROWS", 1000)
    monkeypatch.setattr(ingestion, "FRAMES_STREAM_MIN_PACKETS", 0)
    direct = amqpcap.load(FIX / name, bodies=True)
    dataset.ingest(FIX / name, tmp_path / "ds", buckets=4, bodies=True)
    groups = [pq.ParquetFile(tmp_path / "ds" / "frames" / f"bucket={k}" / "part-0.parquet").num_row_groups
              for k in range(4)]
    assert max(groups) > 1, groups  # (batches were made: the test would otherwise show nothing)
    assert_same_capture(direct, amqpcap.load(tmp_path / "ds"))


def test_duckdb_and_polars_read_the_dataset_as_tshark_counts_the_capture(tmp_path, monkeypatch):
    """The dataset is readable as it is by other tools (docs/dataset.md): DuckDB and Polars read
    the frames of every bucket, hive partitions and all, with the frames written as they settle
    in row groups of 500 (each with a dictionary of its own); the method frames of each
    connection are those tshark counts (fixtures/*.tshark.json), and each connection is in one
    bucket."""
    import duckdb
    import polars as pl

    monkeypatch.setattr(ingestion, "FRAMES_BATCH_ROWS", 500)
    monkeypatch.setattr(ingestion, "FRAMES_STREAM_MIN_PACKETS", 0)
    name = "ten-consumers.pcap"
    dataset.ingest(FIX / name, tmp_path / "ds", buckets=4)
    facts = json.loads((FIX / f"{name}.tshark.json").read_text())
    expected = {(int(s), m): n for s, methods in facts["streams"].items() for m, n in methods.items()}
    frames = f"{tmp_path / 'ds'}/frames/*/*.parquet"
    rows = duckdb.sql(f"SELECT stream, class_id, method_id, count(*), count(DISTINCT bucket) FROM "
                      f"read_parquet('{frames}', hive_partitioning = true) WHERE method_id IS NOT NULL "
                      "GROUP BY ALL").fetchall()
    assert {(s, f"{c}.{m}"): n for s, c, m, n, _ in rows} == expected
    assert {b for *_, b in rows} == {1}
    got = (pl.scan_parquet(frames, hive_partitioning=True).filter(pl.col("method_id").is_not_null())
           .group_by("stream", "class_id", "method_id").len().collect())
    assert {(s, f"{c}.{m}"): n for s, c, m, n in got.iter_rows()} == expected


#: dtypes of docs/tables.md that hold no missing value (pandas' nullable ones are capitalised;
#: categoricals and text can miss). Timestamps and bytes are left out: pandas' datetime64 holds
#: NaT and object None, missing or not.
NEVER_MISSING = re.compile(r"u?int\d+|bool")


@pytest.mark.parametrize("name", ["ten-consumers.pcap", "amqp10-outcomes.pcap"])
def test_parquet_columns_are_required_exactly_where_the_documented_dtype_holds_no_missing_value(tmp_path, name):
    """A column that cannot miss a value is a REQUIRED Parquet column (no definition levels to
    encode); every other one OPTIONAL: as docs/tables.md gives each column's dtype (timestamps
    and bytes, either)."""
    import pyarrow.parquet as pq
    from test_docs import documented

    dataset.ingest(FIX / name, tmp_path / "ds", buckets=2, bodies=True)
    checked = 0
    for f in sorted((tmp_path / "ds").glob("*/bucket=*/*.parquet")):
        table = f.parent.parent.name
        doc = documented(table)
        schema = pq.ParquetFile(f).schema
        required = {schema.column(i).name: schema.column(i).max_definition_level == 0 for i in range(len(schema))
                    if not doc[schema.column(i).name].startswith(("datetime64", "object"))}
        assert required == {c: bool(NEVER_MISSING.fullmatch(doc[c])) for c in required}, (table, f)
        checked += sum(required.values())
    assert checked > 0


@pytest.mark.parametrize("keep", [0, 1 << 40])
def test_a_bucket_gives_its_freed_memory_back_only_above_the_kept_bytes(tmp_path, monkeypatch, keep):
    """After each bucket the freed memory is given back when the process holds more than
    KEEP_FREED_BYTES, and kept for the next bucket below it."""
    from amqpcap.io import memory

    released = []
    monkeypatch.setattr(memory, "release_freed_memory", lambda: released.append(1))
    monkeypatch.setattr(ingestion, "KEEP_FREED_BYTES", keep)
    assert memory.resident_bytes() > 0
    got = dataset.ingest(FIX / "ten-consumers.pcap", tmp_path / "ds", buckets=3)
    assert len(released) == (got.buckets if keep == 0 else 0) and got.buckets == 3


def test_the_split_spills_each_connection_into_its_bucket(tmp_path):
    """The first step of ingest: it decodes no connection but numbers streams as a whole
    decode does (port reuse included), writes every record, and spills each connection's
    packets into its bucket's file, from which that bucket's connections alone are decoded."""
    from amqpcap.io.load import decode_arrow, decode_spilled

    whole = amqpcap.load(FIX / "ten-consumers.pcap")
    spill = tmp_path / "spill"
    first = decode_arrow(FIX / "ten-consumers.pcap", spill=(str(spill), 3))
    assert first.tables["connections"].num_rows == first.tables["packets"].num_rows == 0
    assert first.tables["records"].num_rows == len(whole.records)
    spilled = first.tables["spilled"]
    assert sum(p for p, _ in spilled) == len(whole.packets)  # every packet of every AMQP connection, once
    buckets = dataset.bucket_of(whole.connections["stream"].to_numpy(), 3)
    for k in range(3):
        part = decode_spilled(spill / f"bucket={k}.arrow", first.summary["packets"])
        mine = whole.connections["stream"][buckets == k]
        assert part.tables["connections"].column("stream").to_pylist() == mine.tolist() and len(mine)
        assert part.tables["packets"].num_rows == spilled[k][0]
        assert set(part.tables["frames"].column("stream").to_pylist()) == set(mine)


def test_the_layout_is_a_hive_dataset_with_whole_connections_per_bucket(tmp_path):
    import pyarrow.dataset as ds

    cap = amqpcap.load(FIX / "prefetch-consumers.pcap")
    root = dataset.write(cap, tmp_path / "ds", buckets=4)
    manifest = json.loads((root / "manifest.json").read_text())
    streams_of = {}
    for table in ("connections", "packets", "frames", "anomalies"):
        t = ds.dataset(root / table, format="parquet", partitioning="hive").to_table().to_pandas()
        loose = root / "capture" / f"{table}.parquet"
        loose_rows = len(pd.read_parquet(loose)) if loose.exists() else 0
        assert len(t) + loose_rows == manifest["rows"][table] == len(getattr(cap, table))
        streams_of[table] = t.groupby("bucket", observed=True)["stream"].agg(lambda s: set(s.dropna().astype(int)))
    for bucket, streams in streams_of["packets"].items():
        assert streams <= streams_of["connections"][bucket]
    # the buckets are those of the documented hash, and more than one is used
    conns = streams_of["connections"]
    assert len([b for b in conns.index if conns[b]]) > 1
    for bucket, streams in conns.items():
        assert set(dataset.bucket_of(list(streams), 4)) <= {int(bucket)}


def run_cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "amqpcap", *map(str, args)], capture_output=True, text=True, **kw)


def test_an_unfinished_dataset_is_refused_in_one_line(tmp_path):
    root = dataset.write(amqpcap.load(FIX / "healthy.pcap"), tmp_path / "ds")
    (root / "manifest.json").unlink()
    r = run_cli("analyze", root)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        f"amqpcap: error: {root} is an incomplete amqpcap dataset (no manifest.json: the ingest did not finish); "
        "ingest the capture again"]


def test_reading_what_is_no_dataset_says_so_not_that_an_ingest_failed(tmp_path):
    """`dataset.read` of a path with nothing there, or of a directory no ingest wrote into, is
    not told to ingest again as if an ingest had stopped part way."""
    with pytest.raises(dataset.DatasetError) as missing:
        dataset.read(tmp_path / "nothing-here")
    assert str(missing.value) == f"no amqpcap dataset at {tmp_path / 'nothing-here'}: no such file or directory"
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("not a dataset")
    with pytest.raises(dataset.DatasetError) as foreign:
        dataset.read(tmp_path / "notes")
    assert str(foreign.value).startswith(f"{tmp_path / 'notes'} is not an amqpcap dataset (no manifest.json")


WRITE_LIMITED = r"""
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))
from amqpcap.cli import main
sys.argv = ["amqpcap", "ingest", sys.argv[1], "--out", sys.argv[2], *sys.argv[3:]]
main()
"""


def test_a_failed_write_is_one_line_and_leaves_no_manifest(tmp_path):
    """A disk that fills up, made by a file size limit (RLIMIT_FSIZE): the write fails part
    way, the error is one line, and the directory is not a finished dataset."""
    out = tmp_path / "ds"
    r = subprocess.run([sys.executable, "-c", WRITE_LIMITED, str(FIX / "prefetch-consumers.pcap"), str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"amqpcap: error: cannot write the dataset into {out}: ")
    assert "File too large" in lines[0] and lines[0].endswith("(it is left incomplete: no manifest.json)")
    assert out.is_dir() and not (out / "manifest.json").exists()
    assert dataset.is_dataset(out)
    with pytest.raises(dataset.DatasetError, match="incomplete"):
        amqpcap.load(out)


def test_a_disk_that_fills_up_while_spilling_is_one_line_and_leaves_no_spill(tmp_path):
    """The same in the split of a capture of several buckets: the spill files (written by the
    core) outgrow the limit; one line, no manifest, and the spill is removed, not left to fill
    the disk."""
    out = tmp_path / "ds"
    r = subprocess.run([sys.executable, "-c", WRITE_LIMITED, str(FIX / "ten-consumers.pcap"), str(out), "--buckets", "2"],
                       capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"amqpcap: error: cannot write the dataset into {out}: ")
    assert "File too large" in lines[0] and lines[0].endswith("(it is left incomplete: no manifest.json)")
    assert not (out / "manifest.json").exists() and not (out / dataset.SPILL_DIR).exists()


def test_ingest_refuses_a_directory_in_use(tmp_path):
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "other").write_text("x")
    r = run_cli("ingest", FIX / "healthy.pcap", "--out", tmp_path / "ds")
    assert r.returncode == 64 and "is not an empty directory" in r.stderr


@pytest.mark.parametrize("name", one_fast(["healthy.pcap", "kernel-drops.pcap", "huge-messages.pcap.gz", "midstream.pcap",
                                           "churn.pcap"], keep="midstream.pcap"))
def test_the_cores_arrow_tables_hold_the_values_load_gives(name):
    """`decode_arrow` (what `ingest` and `frames -o` write) against `load()`, column by column:
    the same values and missing values; integers and timestamps in the same Arrow types,
    categoricals as dictionaries of strings, free text as strings."""
    import pyarrow as pa

    from amqpcap.io.load import decode_arrow

    direct = amqpcap.load(FIX / name, bodies=True)
    arrow = decode_arrow(FIX / name, bodies=True).tables
    for table, df in {**capture_tables(direct), "records": direct.records}.items():
        t = arrow[table]
        assert t.column_names == list(df.columns), table
        assert t.num_rows == len(df), table
        for col in df.columns:
            core = t.column(col).combine_chunks()
            via_pandas = pa.Table.from_pandas(df[[col]], preserve_index=False).column(0).combine_chunks()
            if isinstance(df[col].dtype, pd.CategoricalDtype):
                assert pa.types.is_dictionary(core.type) and core.type.value_type == pa.string(), (table, col)
                core, via_pandas = core.cast(pa.string()), via_pandas.cast(pa.string())
            elif df[col].dtype == object or isinstance(df[col].dtype, pd.StringDtype):
                assert core.type in (pa.string(), pa.binary()), (table, col, core.type)
                via_pandas = via_pandas.cast(core.type)
            else:
                assert core.type == via_pandas.type, (table, col)
            assert core.equals(via_pandas), (table, col)


def test_records_leave_the_core_in_batches_while_the_capture_is_read():
    """With a records sink the core hands the `records` rows over a batch at a time while it
    reads (the first batch before the last packet is read) and keeps none for the end; the
    batches together are `load()`'s records table."""
    import pyarrow as pa

    from amqpcap import _core

    path = str(FIX / "healthy.pcap")
    counter = _core.ReadProgress()
    batches, read_when = [], []

    def sink(batch):
        read_when.append(counter.records)
        batches.append(pa.record_batch(batch))

    out = _core.decode([path], [5672], None, False, None, False, counter, True, sink, 500)
    total = amqpcap.load(path).records
    assert [b.num_rows for b in batches] == [500, 500, 500, len(total) - 1500]
    assert read_when[0] == 500 < len(total) and read_when[-1] == len(total)
    assert pa.record_batch(out["records"]).num_rows == 0
    got = pa.Table.from_batches(batches).to_pandas()
    for col in ("packet", "frame_len", "source_packet"):
        assert got[col].tolist() == total[col].tolist(), col
    assert (got["ts"] == total["ts"]).all()


@pytest.mark.parametrize("name", ["healthy.pcap", "midstream.pcap"])
def test_frames_leave_the_core_in_batches_while_the_capture_is_read(name):
    """With a frames sink the core hands the `frames` rows over as they settle, a batch at a
    time, while it reads: every batch but the last before the last packet is read (midstream:
    connections whose first packets the capture missed, their client side known by the port
    once both sides have sent bytes); the batches together are `load()`'s frames table."""
    import pyarrow as pa

    from amqpcap import _core

    path = str(FIX / name)
    counter = _core.ReadProgress()
    batches, read_when = [], []

    def sink(batch):
        read_when.append(counter.records)
        batches.append(pa.record_batch(batch))

    out = _core.decode([path], [5672], None, False, None, False, counter, True, frames_sink=sink, frames_batch_rows=500)
    whole = amqpcap.load(path)
    assert out["frames"] is None and len(whole.frames) > 2000
    assert [b.num_rows for b in batches[:-1]] == [500] * (len(batches) - 1)
    assert read_when[-2] < len(whole.records) and read_when[-1] == len(whole.records)
    got = pa.Table.from_batches(batches).to_pandas()
    def values(s: pd.Series) -> list:
        return [None if pd.isna(v) else v for v in s.astype(object)]

    for col in ("packet", "stream", "direction", "method", "channel", "delivery_tag", "routing_key"):
        assert values(got[col]) == values(whole.frames[col]), col
    assert (got["ts"] == whole.frames["ts"]).all()


@pytest.mark.slow
def test_a_dataset_is_read_from_an_fsspec_url_as_from_its_path(tmp_path):
    """`load("file:///…")` reads the dataset through fsspec (as it would s3://…): the same
    capture as its path gives; a URL of nothing, or of a scheme fsspec does not know, is one
    DatasetError line."""
    done = dataset.ingest(FIX / "kernel-drops.pcap", tmp_path / "ds", buckets=3, bodies=True)
    assert_same_capture(amqpcap.load(done.path), amqpcap.load(done.path.as_uri()))
    assert not dataset.is_dataset((tmp_path / "nothing").as_uri())
    with pytest.raises(dataset.DatasetError, match="cannot read nosuchscheme://x"):
        dataset.manifest("nosuchscheme://x/ds")


@pytest.mark.parametrize("ahead", [True, False])
def test_the_next_bucket_is_decoded_while_one_is_written_unless_both_are_large(ahead, monkeypatch):
    """Two buckets' spills up to DECODE_AHEAD_MAX_BYTES together: bucket k + 1 is decoded while
    bucket k is written; larger (a long connection each): one bucket's tables at a time."""
    import threading

    started = {k: threading.Event() for k in range(3)}
    order: list[str] = []

    def decode(out, buckets, k, records, load_args):
        order.append(f"decode {k}")
        started[k].set()
        return k

    def store(decoded, out, buckets, k):
        # while bucket k is written, bucket k + 1 starts decoding only when both are small
        if k + 1 in started:
            assert started[k + 1].wait(5 if ahead else 0.3) == ahead, (k, order)
        order.append(f"stored {k}")
        return k

    monkeypatch.setattr(ingestion, "_decode_bucket", decode)
    monkeypatch.setattr(ingestion, "_store_bucket", store)
    each = ingestion.DECODE_AHEAD_MAX_BYTES // 2 + (0 if ahead else 1)
    args = [("out", 3, k, 100, {}) for k in range(3)]
    assert list(ingestion._buckets_in_turn(args, lambda r, k: r, [each] * 3)) == [0, 1, 2]
    assert sorted(order) == ["decode 0", "decode 1", "decode 2", "stored 0", "stored 1", "stored 2"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dumpcap.pcapng", "huge-messages.pcap.gz", "kernel-drops.pcap", "midstream.pcap"])
def test_a_buckets_slice_of_time_is_read_as_it_is_cut_in_memory(name, tmp_path):
    """A slice of a bucket's time read from the dataset (`read_partition(..., packets=)`: Parquet
    filters on the packet columns) holds the rows `amqpcap.io.pieces.time_slice` cuts from the bucket read
    whole, and the bucket's clean cuts are read from two of its packets' columns (dumpcap.pcapng
    has packets out of time order; the others have bodies, anomalies, a capture started midway)."""
    from amqpcap.model.facts import ns
    from amqpcap.io.pieces import time_slice
    from amqpcap.model.facts import clean_cuts

    dataset.ingest(FIX / name, tmp_path / "ds", buckets=2, bodies=True)
    sliced = 0
    for k in range(2):
        whole = dataset.read_partition(tmp_path / "ds", [k])
        p = whole.packets
        every = max(1, len(p) // 5)
        cuts = dataset.bucket_cuts(tmp_path / "ds", k, every)
        assert cuts == clean_cuts(p["packet"].to_numpy("int64"), ns(p["ts"]), every)
        bounds = [0, *cuts, None]
        for first, end in zip(bounds, bounds[1:]):
            got = dataset.read_partition(tmp_path / "ds", [k], packets=(first, end))
            want = time_slice(whole, first, end)
            for table in ("connections", "packets", "frames", "bodies", "anomalies"):
                g, w = getattr(got, table), getattr(want, table)
                if table == "anomalies":
                    g, w = canonical_anomalies(g), canonical_anomalies(w)
                # (a text column's categories are those of the rows read, as with any partition's
                # read; an empty text column's type is pandas' guess, as in an empty `load`)
                pd.testing.assert_frame_equal(g, w, check_categorical=False, check_dtype=len(w) > 0,
                                              obj=f"{table} {first}-{end}")
            sliced += len(want.packets) > 0 and end is not None
    assert sliced >= 4  # (slices that do cut a bucket)
