"""Command line: one subcommand per question (`amqpcap --help`).

Every error the user can cause prints one line on stderr and exits nonzero; a traceback is
shown only with AMQPCAP_DEBUG=1.

The modules: `app` (the application, `main`), `options` (the shared arguments and options),
`loading` (reading what the user named), `cluster` (the Dask cluster), and one module per subcommand, imported below in the
order `amqpcap --help` lists them: `frames`, `info`, `analyze` (and each analyzer's own
subcommand), `ingest`, `verify`, `sample`.
"""

import importlib as _importlib

from .app import app, main
from .loading import anomaly_warning, parse_limits
from .options import INFO_CONNECTIONS

for _command in ("frames", "info", "analyze", "ingest", "verify", "sample"):  # each registers its subcommand
    _importlib.import_module(f"{__name__}.{_command}")

__all__ = ["INFO_CONNECTIONS", "anomaly_warning", "app", "main", "parse_limits"]
