//! The tables the pipeline writes (docs/tables.md), one module per table: a builder that rows
//! are pushed into as packets and frames are decoded, and the function that makes the table's
//! declared columns from it at the end.

pub mod amqp10_frames;
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

/// The rows of the per-connection tables while the capture is read: what the pipeline writes
/// (packets, anomalies of the file) and what the protocols write through their sink
/// (`crate::proto::sink::Sink`): a protocol's table is declared here, one field, so that the
/// pipeline carries it without knowing it.
#[derive(Default)]
pub struct Builders {
    pub packets: packets::PacketsBuilder,
    /// AMQP 0-9-1's frames.
    pub frames: frames::FramesBuilder,
    /// AMQP 1.0's frames (`crate::proto::amqp10::session`).
    pub amqp10_frames: amqp10_frames::Amqp10FramesBuilder,
    pub anomalies: anomalies::AnomaliesBuilder,
    /// Message bodies (AMQP 0-9-1), only when they were asked for.
    pub bodies: Option<bodies::BodiesBuilder>,
}

impl Builders {
    /// No rows yet; `bodies`: message bodies are kept (up to `max_body_bytes` in all).
    pub fn new(limits: &crate::limits::Limits, bodies: bool) -> Self {
        Builders {
            packets: packets::PacketsBuilder::default(),
            frames: frames::FramesBuilder::default(),
            amqp10_frames: Default::default(),
            anomalies: anomalies::AnomaliesBuilder { cap: limits.max_anomalies, ..Default::default() },
            bodies: bodies.then(|| bodies::BodiesBuilder::new(limits.max_body_bytes)),
        }
    }
}

/// The per-connection tables, made from the [`Builders`] once the capture is read.
pub(crate) struct ConnTables {
    pub(crate) packets: tables::Table,
    /// Made into a table by the caller: all at once, or what is left after a frames sink.
    pub(crate) frames: frames::FrameRows,
    pub(crate) anomalies: tables::Table,
    pub(crate) bodies: Option<tables::Table>,
    /// Tables a protocol declares besides these, by name, handed to Python under that name
    /// (AMQP 1.0's frames: docs/core.md says how a protocol's table is one).
    pub(crate) added: Vec<(&'static str, tables::Table)>,
}

impl Builders {
    /// The tables, the directions settled (`a_is_client`, by stream); `is_amqp`: the
    /// conversations whose packets keep their rows. A warning for bodies not kept goes to
    /// `warnings`.
    pub(crate) fn into_tables(self, is_amqp: &[bool], a_is_client: &[bool], max_body_bytes: u64, warnings: &mut Vec<String>) -> ConnTables {
        let Builders { packets, frames, amqp10_frames, anomalies, bodies } = self;
        // The other tables' times come from the packets table's (before it drops the rows of
        // conversations that turned out not to be AMQP: none of them is named by another row).
        let times = PacketTimes::new(&packets.packet, &packets.ts);
        let frames = frames::FrameRows::new(frames, a_is_client, &times);
        let added = vec![("amqp10_frames", amqp10_frames::amqp10_frames_table(amqp10_frames, a_is_client, &times))];
        let anomalies = anomalies::anomalies_table(anomalies, a_is_client, &times);
        let bodies = bodies.map(|b| {
            if b.not_kept > 0 {
                warnings.push(format!(
                    "message bodies: {} bytes not kept, the max_body_bytes cap ({} bytes) was reached; those messages have complete=False",
                    b.not_kept, max_body_bytes
                ));
            }
            let mut t = bodies::bodies_table(b, a_is_client, &times);
            tables::sort_rows_by(&mut t, "last_packet");
            t
        });
        let packets = packets::packets_table(packets, is_amqp, a_is_client);
        ConnTables { packets, frames, anomalies, bodies, added }
    }
}

impl ConnTables {
    /// Every `stream` column from a decode's own stream numbers to `global[local]` (a decode
    /// of spilled packets: `crate::buckets::spill`).
    pub(crate) fn renumber_streams(&mut self, global: &[u32]) {
        let others = [&mut self.packets, &mut self.anomalies].into_iter().chain(self.bodies.as_mut());
        for t in others.chain(self.added.iter_mut().map(|(_, t)| t)) {
            tables::renumber_streams(t, global);
        }
        self.frames.renumber_streams(global);
    }
}

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
