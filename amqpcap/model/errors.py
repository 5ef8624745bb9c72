"""Errors for captures that cannot be used at all.

Problems *inside* a usable capture never raise: they become rows of the ``anomalies`` table.
The CLI shows any :class:`AmqpcapError` as one line and exits with its ``exit_code``.
"""

from __future__ import annotations


class AmqpcapError(Exception):
    """Base of every error amqpcap raises on purpose."""

    exit_code = 1


class CaptureError(AmqpcapError):
    """The capture file cannot be used."""

    exit_code = 2


class UnreadableCaptureError(CaptureError):
    """The file cannot be opened or read (missing, permissions, I/O error)."""


class EmptyCaptureError(CaptureError):
    """The file has no bytes."""


class NotACaptureError(CaptureError):
    """The file is not a pcap or pcapng capture (nor a gzip-compressed one)."""


class UnsupportedCaptureError(CaptureError):
    """A capture, but none of its packets can be read (only link types amqpcap does not read)."""


class NoAmqpError(AmqpcapError):
    """The capture was read but holds no AMQP connection: no packets, no TCP, or no TCP
    connection on the AMQP ports nor one opened with the AMQP protocol header (`analyze`,
    the analyzer subcommands and `frames`; `info` still shows what the file holds)."""

    exit_code = 3


class UsageError(AmqpcapError):
    """A command was called with arguments that cannot work (e.g. an unknown output format)."""

    exit_code = 64


class ToolError(AmqpcapError):
    """An external tool a feature needs is missing or failed (tshark for TLS decryption and
    `amqpcap verify`)."""

    exit_code = 69  # EX_UNAVAILABLE


_BY_KIND = {
    "unreadable": UnreadableCaptureError,
    "empty": EmptyCaptureError,
    "not-a-capture": NotACaptureError,
    "unsupported": UnsupportedCaptureError,
}


def from_core(kind: str, message: str) -> CaptureError:
    """Map the native core's error kind to the exception class."""
    return _BY_KIND.get(kind, CaptureError)(message)
