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

import importlib

#: the module of each name the package gives, imported when the name is first used (PEP 562):
#: a command that only asks whether a path is a dataset (`amqpcap frames CAPTURE -o X`) starts
#: its decode without importing pandas, which the other modules need
_MODULE_OF = {
    **dict.fromkeys(("SPILL_DIR", "Ingested", "StepResult", "ingest", "ingest_bucket", "spill_path", "split"), "ingestion"),
    **dict.fromkeys(("CAPTURE_TABLES", "CONNECTION_TABLES", "MANIFEST", "ORDER", "DatasetError", "Location",
                     "bucket_file", "bucket_of", "bucket_packets", "default_buckets", "is_dataset", "is_url",
                     "location", "manifest"), "layout"),
    **dict.fromkeys(("bucket_cuts", "facts", "packet_filter", "read", "read_outline", "read_partition",
                     "read_records"), "reading"),
    "write": "writing",
}


def __getattr__(name: str):
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
    globals()[name] = value
    return value


__all__ = list(_MODULE_OF)
