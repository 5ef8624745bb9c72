//! The tables the pipeline writes (docs/tables.md), one module per table: a builder that rows
//! are pushed into as packets and frames are decoded, and the function that makes the table's
//! declared columns from it at the end.

pub mod anomalies;
pub mod bodies;
pub mod connections;
pub mod frames;
pub mod packets;

/// The capture time of each packet number (1-based) in `packets`.
pub(crate) fn ts_of(packets: &[i32], all_ts: &[i64]) -> Vec<i64> {
    packets.iter().map(|&p| all_ts[(p - 1) as usize]).collect()
}
