"""RFC 1982 serial-number arithmetic, 32 bits (AMQP 1.0 Part 2 §2.8.1 `sequence-no`, §2.6.7): delivery
ids, delivery counts and transfer ids wrap at 2^32, and RabbitMQ 4 starts them near the top, so
they are compared and subtracted on the circle, never as plain integers.

Two numbers exactly 2^31 apart are not ordered by RFC 1982; `diff` gives -2^31 for them (the rest
of the circle is split evenly). Works on Python ints and numpy int64 arrays alike."""

from __future__ import annotations

MOD = 1 << 32
HALF = 1 << 31


def add(a, n):
    """a + n on the circle (n may be negative)."""
    return (a + n) % MOD


def diff(a, b):
    """b − a as the signed distance on the circle, in [−2^31, 2^31): how far b is ahead of a."""
    return (b - a + HALF) % MOD - HALF


def lt(a, b):
    """a precedes b (RFC 1982 §3.2)."""
    return diff(a, b) > 0


def within(x, first, last):
    """first ≤ x ≤ last on the circle (a disposition's range, Part 2 §2.7.6)."""
    return (diff(first, x) >= 0) & (diff(x, last) >= 0)


def unwrap(values, base):
    """Each value as base + its signed distance from base: a plain integer line on which values
    within 2^31 of base keep their serial order."""
    return base + diff(base, values)
