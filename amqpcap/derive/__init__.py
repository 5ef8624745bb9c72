"""What the analyzers derive from a capture's tables and share, each computed once per capture
and kept by `derivation` (the one cache, `cache.py`)."""

from .cache import CAPTURE, CONNECTION, derivation

__all__ = ["CAPTURE", "CONNECTION", "derivation"]
