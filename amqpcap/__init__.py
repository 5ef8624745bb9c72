"""amqpcap: AMQP 0-9-1 traffic analysis from packet captures.

>>> import amqpcap
>>> cap = amqpcap.load("capture.pcap")
>>> cap.frames.method.value_counts()
"""

from .capture import DEFAULT_PORTS, Capture, Limits, load
from .errors import (
    AmqpcapError,
    CaptureError,
    EmptyCaptureError,
    NotACaptureError,
    UnreadableCaptureError,
    UnsupportedCaptureError,
)
from .sample import sample_path

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
__version__ = "0.1.0"
