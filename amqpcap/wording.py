"""Small helpers for the sentences amqpcap prints."""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``counted(1, "connection")`` → "1 connection", ``counted(2_000, "frame")`` → "2,000 frames"."""
    return f"{n:,} {noun if n == 1 else (plural or noun + 's')}"
