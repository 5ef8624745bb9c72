"""amqpcap.derive.quantiles against numpy on the values concatenated: the same floats, bit for bit,
however the values are cut into parts, on the gathering path and on the radix selection's."""

import math

import numpy as np
import pytest

from amqpcap.derive import quantiles


def _cut(v: np.ndarray, rng) -> list[np.ndarray]:
    """`v` in parts of random sizes, some empty."""
    bounds = np.sort(rng.integers(0, len(v) + 1, size=rng.integers(0, 12)))
    return np.split(v, bounds)


def _samples(rng):
    """Latency-like values, ties, negative and positive values, one value, a few identical."""
    yield rng.lognormal(-7, 2, size=5000)
    yield rng.lognormal(0, 4, size=200)  # far apart: the two ways to interpolate differ in last bits
    yield np.round(rng.exponential(0.01, size=4000), 4)  # many ties
    yield rng.normal(0, 1, size=3001)
    yield np.array([0.25])
    yield np.full(7, 3.5)
    yield np.concatenate([np.zeros(500), rng.uniform(1e-9, 1e3, size=501)])


@pytest.mark.parametrize("gather_max", [1 << 20, 64, 1])
def test_percentiles_median_mean_are_numpys(gather_max, monkeypatch):
    monkeypatch.setattr(quantiles, "GATHER_MAX", gather_max)
    rng = np.random.default_rng(13)
    # (random ones too: numpy interpolates from either side, by the weight, and only some
    # values tell the two apart in their last bit)
    qs = [0, 1, 25, 50, 90, 99, 99.9, 100, 0.9 * 100.0, *rng.uniform(0, 100, size=100)]
    for v in _samples(rng):
        parts = _cut(v, rng)

        def chunks():
            return iter(parts)

        assert quantiles.percentiles(chunks, len(v), qs) == [float(x) for x in np.percentile(v, qs)]
        assert quantiles.median(chunks, len(v)) == float(np.median(v))
        assert quantiles.median_and_percentiles(chunks, len(v), qs[:3]) == (float(np.median(v)),
                                                                           [float(x) for x in np.percentile(v, qs[:3])])
        n, top, mean = quantiles.count_max_mean(chunks)
        assert (n, top) == (len(v), float(v.max()))
        assert mean == math.fsum(v.tolist()) / len(v)
        assert mean == pytest.approx(float(v.mean()), rel=1e-12)


def test_order_statistics_read_a_part_at_a_time_and_narrow_in_passes(monkeypatch):
    """More values than may be gathered: found by passes over the parts, each of which is read
    again for every pass (never joined)."""
    monkeypatch.setattr(quantiles, "GATHER_MAX", 100)
    rng = np.random.default_rng(7)
    v = rng.lognormal(-5, 1.5, size=20_000)
    parts = _cut(v, rng)
    passes = []

    def chunks():
        passes.append(1)
        return iter(parts)

    ranks = [0, 1, 9_999, 10_000, 19_999]
    got = quantiles.order_statistics(chunks, ranks)
    assert got == {r: float(np.sort(v)[r]) for r in ranks}
    assert 2 <= len(passes) <= 4


def test_no_values():
    n, top, mean = quantiles.count_max_mean(lambda: iter([np.zeros(0)]))
    assert n == 0 and math.isnan(top) and math.isnan(mean)
