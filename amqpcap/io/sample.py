"""The sample capture shipped inside the package (a real RabbitMQ recording, see fixtures/)."""

from __future__ import annotations

from importlib.resources import files

SAMPLE_NAME = "sample.pcap"


def sample_path() -> str:
    """Path of the bundled sample capture."""
    return str(files("amqpcap") / "data" / SAMPLE_NAME)
