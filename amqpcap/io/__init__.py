"""Bytes in and out: loading captures through the core, the files of a capture, TLS, the sample,
verify, the Parquet dataset, table files, stored and kept tables."""
