//! A capture split by connection into buckets, for `amqpcap ingest` and analyses that run per
//! bucket: which bucket a connection belongs to (`partition`) and the spill files that carry
//! each bucket's packets from the one read of the capture to the bucket's own decode (`spill`).

pub mod partition;
#[cfg(feature = "arrow")]
pub mod spill;
