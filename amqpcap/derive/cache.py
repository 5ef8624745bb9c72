"""`derivation`: the one cache of values derived from a Capture's tables.

A derivation is a function of a Capture alone. Its value is kept in ``cap.derived`` under the
function itself (not a hand-typed name), so every analyzer asking for it gets the object the
first one computed; this decorator is the only code that reads or writes ``cap.derived``.
Concurrent first calls on one capture wait for each other (`amqpcap.io.load.computed_once`),
so analyzers running in threads compute a value once.

Each derivation declares its scope, what a partition of the capture (whole connections) is
enough for (issue 13: analyzers that compute a partial per partition and merge):

- ``CONNECTION``: each connection's rows depend on that connection's frames and packets only,
  so the derivation computed on a capture holding some connections gives their rows.
- ``CAPTURE``: it relates connections to each other (a queue's backlog counts one connection's
  publishes against another's deliveries; a label shared by two connections is told apart by
  their stream numbers), so it needs them all.

A connection derivation may not be built from a capture one; the decorator refuses such a call,
so the rule holds as the derivations change.
"""

from __future__ import annotations

import functools
import threading
from typing import Callable, Literal, TypeVar

from ..io.load import Capture, computed_once

Scope = Literal["connection", "capture"]
CONNECTION: Scope = "connection"
CAPTURE: Scope = "capture"

R = TypeVar("R")

#: the derivations being computed in this thread, innermost last (their scopes)
_active = threading.local()


def _tables(cap: Capture) -> tuple:
    """The tables a value is derived from. Kept beside it: a table replaced since (a new
    DataFrame assigned) makes the value stale. Editing a table in place still needs
    ``cap.derived.clear()``."""
    # (amqp10_frames: read with getattr until the core's table reaches every Capture, issue 50)
    return (cap.frames, cap.packets, cap.connections, cap.anomalies, cap.records, cap.bodies,
            getattr(cap, "amqp10_frames", None))


def derivation(scope: Scope) -> Callable[[Callable[[Capture], R]], Callable[[Capture], R]]:
    """Decorate a function of a Capture whose value is shared: computed once per capture (and
    per set of tables), then the same object for every caller. ``scope``: see the module doc."""
    if scope not in (CONNECTION, CAPTURE):
        raise ValueError(f"scope must be {CONNECTION!r} or {CAPTURE!r}, not {scope!r}")

    def wrap(fn: Callable[[Capture], R]) -> Callable[[Capture], R]:
        @computed_once
        @functools.wraps(fn)
        def kept(cap: Capture) -> R:
            stack = _active.__dict__.setdefault("scopes", [])
            if scope == CAPTURE and CONNECTION in stack:
                raise TypeError(f"{fn.__qualname__} relates connections (scope {CAPTURE!r}): a derivation of "
                                f"scope {CONNECTION!r} may not be built from it")
            tables = _tables(cap)
            hit = cap.derived.get(fn)
            if hit is not None and all(a is b for a, b in zip(hit[0], tables)):
                return hit[1]
            stack.append(scope)
            try:
                value = fn(cap)
            finally:
                stack.pop()
            cap.derived[fn] = (tables, value)
            return value

        kept.scope = scope  # type: ignore[attr-defined]
        return kept

    return wrap
