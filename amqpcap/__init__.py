"""amqpcap: AMQP 0-9-1 and AMQP 1.0 traffic analysis from packet captures.

>>> import amqpcap
>>> cap = amqpcap.load("capture.pcap")
>>> cap.frames.method.value_counts()             # AMQP 0-9-1: one row per frame
>>> cap.amqp10_frames.performative.value_counts()  # AMQP 1.0: one row per frame
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .model.errors import (
    AmqpcapError,
    CaptureError,
    EmptyCaptureError,
    NotACaptureError,
    UnreadableCaptureError,
    UnsupportedCaptureError,
)
from .io.sample import sample_path

if TYPE_CHECKING:
    from .io.load import DEFAULT_PORTS, Capture, Limits, load

__all__ = [
    "DEFAULT_PORTS",
    "AmqpcapError",
    "Capture",
    "CaptureError",
    "EmptyCaptureError",
    "Limits",
    "NotACaptureError",
    "UnreadableCaptureError",
    "UnsupportedCaptureError",
    "load",
    "sample_path",
]

#: what `import amqpcap` gives without importing it: `amqpcap.io.load` imports pandas and numpy
#: (0.4 s), which `amqpcap --version`, `--help` and `ingest` do not need
_FROM_CAPTURE = ("DEFAULT_PORTS", "Capture", "Limits", "load")


def __getattr__(name: str) -> Any:
    """`load`, `Capture`, `Limits` and `DEFAULT_PORTS` (from `amqpcap.io.load`), `__version__`
    (from the core), and the
    submodules (``amqpcap.io.dataset``), imported when first asked for (PEP 562)."""
    if name in _FROM_CAPTURE:
        value = getattr(importlib.import_module(".io.load", __name__), name)
    elif name == "__version__":  # written once, in rust/Cargo.toml: the core carries it
        value = importlib.import_module("._core", __name__).__version__
    elif not name.startswith("__"):
        try:
            value = importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_FROM_CAPTURE, "__version__"])
