"""The Dask cluster `analyze` and `ingest` run on, when they run on one."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Optional

from .consoles import err


@contextmanager
def _dask_client(scheduler: str, workers: Optional[int]):
    """A client of the cluster --scheduler names (`local`: one started for the run); its
    dashboard's link on stderr."""
    from ..engine import on_dask as engine

    with engine.client(None if scheduler == "local" else scheduler, workers) as client:
        link = getattr(client, "dashboard_link", None)
        if link:
            err.print(f"Dask dashboard: {link}", highlight=False, soft_wrap=True)
        yield client
