"""How values are written: timestamps as ISO 8601 text, floats without binary noise, units read
from the names, summary.json's values."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd

import amqpcap.model.written_values as written_values


def numpy_iso(arr: np.ndarray) -> np.ndarray:
    """The reference: numpy's own formatter, one value at a time."""
    text = np.char.add(np.datetime_as_string(arr, unit="ns"), "Z").astype(object)
    text[np.isnat(arr)] = ""
    return text


def test_iso_timestamps_equal_numpys_formatter():
    rng = np.random.default_rng(7)
    spread = rng.integers(-(2**62), 2**62, 20_000, dtype=np.int64)
    near_now = np.int64(1_763_000_000_000_000_000) + rng.integers(0, 10**14, 20_000)
    values = np.concatenate([spread, near_now]).view("datetime64[ns]")
    values[::37] = np.datetime64("NaT")
    edges = np.array(["1677-09-22T00:12:43.145224193", "1969-12-31T23:59:59.999999999", "1970-01-01",
                      "2000-02-29T12:00:00.5", "2262-04-11T23:47:16.854775807", "NaT"], dtype="datetime64[ns]")
    for arr in (values, edges, values[:0]):
        assert list(written_values.iso_utc_ns(arr)) == list(numpy_iso(arr))


def test_clean_floats_round_like_pythons_decimal_formatting():
    """The whole-column rounding against Python's own correctly rounded %g and round(): the
    same value except where the 13th digit is a tie (numpy rounds the scaled binary value half
    to even), and every result prints with no more digits than kept."""
    rng = np.random.default_rng(3)
    values = rng.standard_normal(50_000) * 10.0 ** rng.integers(-30, 30, 50_000)
    values[::101] = np.nan
    values[::103] = 0.0
    got = written_values.clean_floats(values, "rate_per_s")
    want = np.array([float(f"{v:.12g}") for v in values])
    differ = ~((got == want) | (np.isnan(got) & np.isnan(want)))
    assert differ.sum() < 10
    assert np.allclose(got[differ], want[differ], rtol=2e-12, atol=0)
    finite = got[np.isfinite(got)]
    assert all(float(f"{v:.12g}") == v for v in finite)
    seconds = np.abs(rng.standard_normal(50_000)) * 10.0 ** rng.integers(-9, 6, 50_000)
    assert list(written_values.clean_floats(seconds, "latency_s")) == [round(v, 9) for v in seconds]
    assert written_values.clean_floats(np.array([0.008651480000000001]), "p99_s")[0] == 0.00865148
    assert repr(written_values.clean_float(0.1 + 0.2, "share")) == "0.3"


def test_is_seconds_reads_the_unit_from_the_name():
    for name in ("latency_s", "p50_s", "deliver_to_ack_p99_s", "stall_time_s", "bin_s", "connection_s"):
        assert written_values.is_seconds(name) and not written_values.is_rate(name), name
    for name in ("rate_per_s", "mbit_s", "peak_mbit_s", "packets_s", "published_msgs_s", "small_segments_s",
                 "packets_saved_s", "max_rate_msgs_per_s", "delivered_msgs_per_capture_s"):
        assert written_values.is_rate(name) and not written_values.is_seconds(name), name


def test_summary_json_values():
    doc = written_values.jsonable({"first_ts": pd.Timestamp("2026-11-21 21:28:45.173855+00:00"),
                                  "naive": dt.datetime(2026, 1, 2, 3, 4, 5, 6),
                                  "none": pd.NaT, "p99_s": np.float64(0.008651480000000001), "n": np.int64(3),
                                  "rates": [1 / 3], "nan": float("nan")})
    assert doc == {"first_ts": "2026-11-21T21:28:45.173855000Z", "naive": "2026-01-02T03:04:05.000006000Z",
                   "none": None, "p99_s": 0.00865148, "n": 3, "rates": [0.333333333333], "nan": None}
