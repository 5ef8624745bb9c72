"""Command line: one subcommand per question (`amqpcap --help`).

Every error the user can cause prints one line on stderr and exits nonzero; a traceback is
shown only with AMQPCAP_DEBUG=1.

The modules: `app` (the application, `main`), `options` (the shared arguments and options),
`loading` (reading what the user named), `cluster` (the Dask cluster), and one module per subcommand, imported below in the
order `amqpcap --help` lists them: `frames`, `info`, `analyze` (and each analyzer's own
subcommand), `ingest`, `verify`, `sample`.
"""

import importlib as _importlib
import os as _os

#: BLAS thread pools the command line's processes do not start: no command does linear algebra,
#: yet numpy's OpenBLAS starts one thread per core at import, which then spin (10% of the
#: samples of `amqpcap frames X -o`, issue 51). Set before numpy is imported anywhere in the
#: process, inherited by the processes it starts (Dask's workers); a value the user set is kept.
#: (Not OMP_NUM_THREADS: Arrow sizes its own thread pool, which reads Parquet, by that one.)
BLAS_THREADS = {"OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
for _name, _value in BLAS_THREADS.items():
    _os.environ.setdefault(_name, _value)

from .app import app, main  # noqa: E402 (after the BLAS pools are limited)
from .loading import anomaly_warning, parse_limits  # noqa: E402
from .options import INFO_CONNECTIONS  # noqa: E402

for _command in ("frames", "info", "analyze", "ingest", "verify", "sample"):  # each registers its subcommand
    _importlib.import_module(f"{__name__}.{_command}")

__all__ = ["BLAS_THREADS", "INFO_CONNECTIONS", "anomaly_warning", "app", "main", "parse_limits"]
