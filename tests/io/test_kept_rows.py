"""Per-message tables kept in the buckets' files (amqpcap.io.kept_rows) read back, written and
previewed as the table held whole in memory is: the whole table here is built directly (pandas),
split by its partition key the way buckets split a capture, and compared with what the kept
parts give."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from amqpcap.io.kept_rows import (KeptRows, columns, frame, keep, keep_each, keeping_in, part_frame, parts_together,
                               rows_table, store, top_rows)
from amqpcap.io.table_files import write_table


def whole_table(n: int = 500) -> pd.DataFrame:
    """Rows by packet (unique), of streams spread over buckets, with ties in `latency_s`, text
    with missing values, a nullable integer, a categorical and tz-aware timestamps."""
    rng = np.random.default_rng(7)
    packet = np.sort(rng.choice(10 * n, n, replace=False)) + 1
    return pd.DataFrame({
        "stream": rng.integers(0, 9, n), "packet": packet,
        "ts": pd.to_datetime(1_700_000_000_000_000_000 + packet * 1_000, utc=True),
        "latency_s": rng.integers(0, 5, n) / 1000,  # few values: many ties
        "consumer_tag": pd.Series(np.where(rng.random(n) < 0.1, None, [f"ctag-{i % 7}" for i in range(n)]), dtype=object),
        "settle_packet": pd.array(np.where(rng.random(n) < 0.2, None, packet + 3), dtype="Int64"),
        "outcome": pd.Categorical(rng.choice(["ack", "nack", "unsettled"], n)),
    })


def kept_parts(df: pd.DataFrame, tmp_path, buckets: int = 3) -> list:
    """`df` split by stream into `buckets` partitions, each kept as that bucket's."""
    parts = []
    for k in range(buckets):
        with keeping_in(str(tmp_path), k):
            parts.append(keep(df[df["stream"] % buckets == k].reset_index(drop=True), "t", "packet"))
    return parts


def test_kept_rows_read_back_as_the_whole_table(tmp_path):
    df = whole_table()
    kept = rows_table(kept_parts(df, tmp_path), ["packet"])
    assert isinstance(kept, KeptRows) and len(kept) == len(df) and kept.columns == list(df.columns)
    pd.testing.assert_frame_equal(frame(kept), df, check_exact=True)
    pd.testing.assert_frame_equal(columns(kept, ["latency_s", "consumer_tag"]), df[["latency_s", "consumer_tag"]],
                                  check_exact=True)


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_kept_rows_are_written_as_the_whole_table(tmp_path, fmt):
    df = whole_table()
    kept = rows_table(kept_parts(df, tmp_path / "store"), ["packet"])
    want = write_table(df, tmp_path / "whole", fmt)
    got = kept.write(tmp_path / "kept", fmt)
    if fmt == "csv":
        assert got.read_bytes() == want.read_bytes()
    else:
        pd.testing.assert_frame_equal(pd.read_parquet(got), pd.read_parquet(want), check_exact=True)


@pytest.mark.parametrize("by,largest", [(None, True), ("latency_s", True), ("latency_s", False)])
def test_a_preview_of_kept_rows_is_that_of_the_whole_table_ties_included(tmp_path, by, largest):
    df = whole_table()
    kept = rows_table(kept_parts(df, tmp_path), ["packet"])
    want = top_rows(df, 20, by, largest).reset_index(drop=True)
    pd.testing.assert_frame_equal(top_rows(kept, 20, by, largest).reset_index(drop=True), want, check_exact=True)


def test_without_a_store_the_rows_stay_frames(tmp_path):
    df = whole_table()
    assert keep(df, "t", "packet") is df
    parts = [df[df["stream"] % 2 == k] for k in range(2)]
    pd.testing.assert_frame_equal(rows_table(parts, ["packet"]), df, check_exact=True)


def test_the_store_is_removed_after_the_run(tmp_path):
    with store(tmp_path) as where:
        assert where is not None and where.startswith(str(tmp_path.resolve()))
        kept_parts(whole_table(), where)
    assert list(tmp_path.iterdir()) == []
    with store("file:///nowhere/ds") as where:  # not a directory this process writes: rows come back
        assert where is None


def by_bucket(df: pd.DataFrame, buckets: int) -> list[pd.DataFrame]:
    """`df`'s rows of each bucket (stream % buckets), in their order, as the frames `keep` is given."""
    return [df[df["stream"] % buckets == k].reset_index(drop=True) for k in range(buckets)]


@pytest.mark.parametrize("in_store", [True, False])
def test_parts_together_are_the_parts_one_after_the_other(tmp_path, in_store):
    # four buckets, one without a row (an empty frame, never a file), categories differing by part
    df = whole_table()
    df = df[df["stream"] % 4 != 2].reset_index(drop=True)
    df["outcome"] = df["outcome"].astype(object).where(df["stream"] % 4 != 1, "requeued").astype("category")
    mine = by_bucket(df, 4)
    parts = []
    for k, d in enumerate(mine):
        with keeping_in(str(tmp_path) if in_store else None, k):
            parts.append(keep(d, "t", "packet"))
    got, rows = parts_together(parts)
    assert rows.tolist() == [len(d) for d in mine] and rows[2] == 0
    want = pd.concat(mine, ignore_index=True)
    assert sorted(got["outcome"].cat.categories) == sorted(set(want["outcome"].astype(str)))
    pd.testing.assert_frame_equal(got.assign(outcome=got["outcome"].astype(object)),
                                  want.assign(outcome=want["outcome"].astype(object)), check_exact=True)


@pytest.mark.parametrize("in_store", [True, False])
def test_keep_each_keeps_each_partitions_rows_as_its_own(tmp_path, in_store):
    df = whole_table()
    buckets = 5
    part = np.array(df["stream"] % buckets, dtype=np.int64)
    part[part == 3] = 1  # (bucket 3 has no row)
    with keeping_in(str(tmp_path) if in_store else None, -1):
        kept = keep_each(df, part, buckets, "packet", lambda i: ("t", i))
    assert len(kept) == buckets
    for k, piece in enumerate(kept):
        want = df[part == k].reset_index(drop=True)
        if in_store and len(want):
            assert not isinstance(piece, pd.DataFrame) and piece.path.endswith(f"t/bucket={k}.arrow")
        pd.testing.assert_frame_equal(part_frame(piece), want, check_exact=True)
