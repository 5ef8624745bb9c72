"""A capture stored as a Parquet dataset partitioned by connection (docs/dataset.md).

`write` stores a decoded capture; `ingest` decodes a capture into one reading it once, a bucket at
a time; `read` gives back the same `Capture` as `amqpcap.load` gave. Each connection's rows (its
`connections` row, packets, frames, anomalies and bodies) are in one bucket, `bucket_of(stream)`,
so that a bucket can be analysed on its own; rows of no connection (`records`, anomalies of the
file) are in `capture/`. `manifest.json` is written last, atomically: a directory without it is
an ingest that did not finish, and is refused.

One module per question: `layout` (where rows are, the manifest), `writing` (files written),
`ingestion` (a capture decoded into buckets), `reading` (a dataset read back).
"""

from .ingestion import SPILL_DIR, Ingested, StepResult, ingest, ingest_bucket, spill_path, split
from .layout import (CAPTURE_TABLES, CONNECTION_TABLES, MANIFEST, ORDER, DatasetError, Location, bucket_file, bucket_of,
                     bucket_packets, default_buckets, is_dataset, is_url, location, manifest)
from .reading import bucket_cuts, facts, packet_filter, read, read_outline, read_partition, read_records
from .writing import write

__all__ = [
    "CAPTURE_TABLES", "CONNECTION_TABLES", "MANIFEST", "ORDER", "SPILL_DIR", "DatasetError", "Ingested",
    "Location", "StepResult", "bucket_cuts", "bucket_file", "bucket_of", "bucket_packets", "default_buckets",
    "facts", "ingest", "ingest_bucket", "is_dataset", "is_url", "location", "manifest", "packet_filter",
    "read", "read_outline", "read_partition", "read_records", "spill_path", "split", "write",
]
