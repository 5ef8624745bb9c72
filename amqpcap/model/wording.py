"""Small helpers for the sentences amqpcap prints."""

from __future__ import annotations

from .reply_codes import REPLY_CODE_NAMES


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``counted(1, "connection")`` → "1 connection", ``counted(2_000, "frame")`` → "2,000 frames"."""
    return f"{n:,} {noun if n == 1 else (plural or noun + 's')}"


def frames_counted(capture: dict) -> str:
    """The frames of summary.json's `capture`: "419,618 frames" when all are AMQP 0-9-1, else
    each protocol's ("104 AMQP 0-9-1 frames, 84 AMQP 1.0 frames"; "84 AMQP 1.0 frames" without 0-9-1)."""
    n10 = capture.get("amqp10_frames", 0)
    if not n10:
        return counted(capture["frames"], "frame")
    if not capture["frames"]:
        return counted(n10, "AMQP 1.0 frame")
    return f"{counted(capture['frames'], 'AMQP 0-9-1 frame')}, {counted(n10, 'AMQP 1.0 frame')}"


def reply_code(code: int | None, text: str | None = None) -> str:
    """A reply code in words, its name first and the number after it: ``reply_code(312)`` →
    "NO_ROUTE (312)", so that the number never reads as a count beside other counts. The name
    is the AMQP 0-9-1 spec's (`amqpcap.model.reply_codes`, generated from it); a code the spec does
    not name takes the reply-text's first word ("SOME_CODE (399)"), else "reply code 399"."""
    if code is None:
        return text or "no reply code"
    name = REPLY_CODE_NAMES.get(int(code)) or (str(text).split()[0] if text and str(text).split() else None)
    return f"{name} ({int(code)})" if name else f"reply code {int(code)}"


#: The analyzers that read AMQP 1.0 connections (their frames, `amqp10_frames`); the others read
#: AMQP 0-9-1 methods only and see a 1.0 connection's TCP at most. Told to the user wherever a
#: capture has 1.0 connections (the load's warning, `amqpcap info`); tests/core/test_amqp10.py
#: checks it against what the analyzers do.
AMQP10_READERS = ("amqp10", "nagle", "sizes", "stalls")


def amqp10_readers_words() -> str:
    """Which analyzers read a 1.0 connection: "the amqp10, nagle, sizes and stalls analyzers"."""
    *head, last = AMQP10_READERS
    return f"the {', '.join(head)} and {last} analyzers"
