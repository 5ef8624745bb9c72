"""Names of the files `amqpcap analyze --out` writes that more than one output refers to."""

from __future__ import annotations


def finding_streams_file(finding_id: str) -> str:
    """The file beside the report listing every connection of a finding whose filter names only
    some of them (`amqpcap.model.display_filters.covered_filter`)."""
    return f"findings-{finding_id}-streams.csv"
