//! The tables the pipeline writes (docs/tables.md), one module per table: a builder that rows
//! are pushed into as packets and frames are decoded, and the function that makes the table's
//! declared columns from it at the end.

pub mod anomalies;
#[cfg(feature = "arrow")]
pub mod arrow_out;
#[cfg(feature = "arrow")]
pub mod csv_out;
pub mod bodies;
pub mod connections;
pub mod frames;
pub mod packets;
pub mod records;
pub mod tables;

/// The capture time of the packets that rows refer to, by packet number: the packets table's
/// own (`packet`, `ts`) columns, which hold every packet of a kept connection in order. Rows of
/// a connection only name packets of that connection, so nothing else needs remembering: a
/// pass of `amqpcap ingest` keeps no time for the packets of other connections, and the
/// `records` table can leave the core before the end of the capture.
pub(crate) struct PacketTimes<'a> {
    numbers: &'a [i32],
    ts: &'a [i64],
}

impl<'a> PacketTimes<'a> {
    pub(crate) fn new(numbers: &'a [i32], ts: &'a [i64]) -> Self {
        debug_assert!(numbers.is_sorted());
        PacketTimes { numbers, ts }
    }

    /// The time of packet `number`; None for a packet of no kept connection.
    pub(crate) fn get(&self, number: i32) -> Option<i64> {
        self.numbers.binary_search(&number).ok().map(|i| self.ts[i])
    }

    /// The time of each packet in `packets` (all of kept connections). Packets in order (the
    /// usual case: frames and bodies are sorted by the core) are found in one merge walk.
    pub(crate) fn of(&self, packets: &[i32]) -> Vec<i64> {
        let mut out = Vec::with_capacity(packets.len());
        // (from the first one's place: a batch of a long decode's later frames)
        let mut i = packets.first().map_or(0, |&p| self.numbers.partition_point(|&n| n < p));
        for &p in packets {
            if i >= self.numbers.len() || self.numbers[i] > p {
                i = self.numbers.partition_point(|&n| n < p);
            } else {
                while i < self.numbers.len() && self.numbers[i] < p {
                    i += 1;
                }
            }
            debug_assert!(self.numbers.get(i) == Some(&p), "packet {p} is of no kept connection");
            out.push(self.ts.get(i).copied().unwrap_or(0));
        }
        out
    }
}
