"""The fast tier: `pytest -m "not slow" -n 2` runs in under 3 minutes on 2 cores, for the inner
loop; `bash scripts/test.sh` (the README's command 2, CI) runs every test, the slow ones too.

A test is marked slow when its cost is large: a Dask cluster, a browser, a child process per
case, a capture cut into slices at every packet, a large capture. A test run over many captures
keeps one of them in the fast tier (`one_fast`), or all but the large ones (`large_slow`), so
that the fast tier still has a test of every layer and every feature (tests/whole/test_tiers.py
checks that every test file keeps one).
"""

from __future__ import annotations

from pathlib import Path

import pytest

#: The capture a test over many captures keeps in the fast tier: small (330 packets, 39 kB) and
#: with most of what the analyzers follow: a consumer at prefetch 10, publishes, deliveries, acks,
#: nacks, rejects and redeliveries (fixtures/README.md).
FAST_FIXTURE = "nack-requeue.pcap"

#: The fixtures whose decode alone takes seconds (flow-control: 2.7 MB gzipped, 10 producers at
#: full speed; churn-many: thousands of connections).
LARGE_FIXTURES = ("flow-control.pcap.gz", "churn-many.pcap.gz")


def name_of(value) -> object:
    """The name a parameter is chosen by: a capture's file name (also of its tshark facts file),
    the first of a tuple, or the value itself."""
    if isinstance(value, tuple):
        value = value[0]
    if isinstance(value, Path):
        value = value.name
    if isinstance(value, str):
        return value.removesuffix(".tshark.json")
    return value


def slow(value, several: bool = False):
    """`value` marked slow; `several`: it is the tuple of a parametrization over several names."""
    return pytest.param(*value, marks=pytest.mark.slow) if several else pytest.param(value, marks=pytest.mark.slow)


def one_fast(values, keep=FAST_FIXTURE, several: bool = False) -> list:
    """`values` for a parametrization, each marked slow but the one named `keep` (or the ones,
    given a tuple). Refuses a `keep` that is not among them, so that renaming a capture cannot
    take the test out of the fast tier without a word."""
    keep = keep if isinstance(keep, tuple) else (keep,)
    values = list(values)
    missing = set(keep) - {name_of(v) for v in values}
    if missing:
        raise ValueError(f"{sorted(missing, key=str)} not among the parameters {[name_of(v) for v in values]}")
    return [v if name_of(v) in keep else slow(v, several) for v in values]


def large_slow(values, large=LARGE_FIXTURES) -> list:
    """`values` for a parametrization over captures, the large ones marked slow."""
    return [slow(v) if name_of(v) in large else v for v in values]
