//! The ingestion pipeline: capture records → TCP conversations (numbered like Wireshark's
//! tcp.stream) → per-direction reassembly → the decoder the direction's first bytes choose
//! (`crate::proto::dispatch`). No protocol code lives here: what frames mean to the tables is
//! each protocol's own `session.rs`, reached through the sink (`crate::proto::sink`), which the
//! pipeline builds once per packet it decodes. TLS plaintext decrypted outside the core comes
//! from `crate::tls`.
//!
//! - `mod.rs`: the [`Ingest`] state, its options, and [`ingest`], a whole decode.
//! - `records.rs`: each capture record → its conversation (numbering, port reuse, caps).
//! - `segment.rs`: each TCP segment of a kept AMQP conversation → its packet row, reassembly,
//!   and the decoders (through the sink).
//! - `frames_out.rs`: frame rows handed to a sink while the capture is read, once settled.
//! - `finish.rs`: the end of the capture: streams drained, anomaly totals, the tables.

mod finish;
mod frames_out;
mod records;
mod segment;
#[cfg(test)]
mod tests;

use std::collections::HashMap;

use ahash::RandomState;

use crate::buckets::partition::Partition;
use crate::capture::merge::{read_captures, FileRead, Progress};
use crate::capture::reader::{ReadSummary, Record};
use crate::error::CaptureError;
use crate::flow::conn::Streams;
use crate::flow::tcp::ConvKey;
use crate::limits::Limits;
use crate::output::records::RecordsBuilder;
use crate::output::tables::Table;
use crate::output::Builders;
use crate::tls::Decrypted;
use frames_out::FramesOut;

/// Receives the `records` table's rows in batches while the capture is read.
pub type TableSink<'a> = Box<dyn FnMut(Table) + 'a>;

/// Receives each TCP packet of a conversation that is (or may still turn out to be) AMQP, with
/// its packet and stream numbers: the first step of a spilled ingest (`crate::buckets::spill`).
pub type PacketSpill<'a> = Box<dyn FnMut(u32, u32, &Record<'_>) + 'a>;

/// A decode of one bucket's spilled packets (`crate::buckets::spill`): their packet and stream
/// numbers are the capture's, given with each packet. Streams are numbered here in the order
/// they appear, which is the order of their capture-wide numbers: the tables are made with
/// these local numbers and renumbered at the end.
#[derive(Default)]
struct FromSpill {
    /// The capture-wide number of each local stream.
    global: Vec<u32>,
    local: HashMap<u32, u32, RandomState>,
    /// Records of the whole capture (the number of its last packet).
    capture_records: u32,
}

pub struct Ingest<'l> {
    limits: &'l Limits,
    decrypted: Decrypted,
    ports: Vec<u16>,
    conversations: HashMap<ConvKey, u32, RandomState>,
    streams: Streams,
    records: RecordsBuilder,
    /// Where `records` rows go, a batch at a time while the capture is read (see
    /// [`Ingest::set_records_sink`]); without it they are output with the other tables.
    records_sink: Option<(TableSink<'l>, usize)>,
    /// The rows of the per-connection tables (`crate::output::Builders`).
    tables: Builders,
    tcp_packets: u64,
    /// Records skipped for their link type: (link type, records, captured bytes, anomaly row).
    skipped_linktypes: Vec<(u32, u64, u64, Option<usize>)>,
    /// Packets of conversations beyond `max_streams`: (packets, captured bytes, anomaly row).
    over_limit: Option<(u64, u64, Option<usize>)>,
    /// Only these connections (and maybe no rows of the capture as a whole) are output.
    partition: Option<Partition>,
    /// Where the packets of AMQP conversations go (the first step of a spilled ingest).
    spill: Option<PacketSpill<'l>>,
    /// This decode reads one bucket's spilled packets.
    from_spill: Option<FromSpill>,
    /// Where the frames go as they settle, instead of the output's table.
    frames_out: Option<FramesOut<'l>>,
}

pub struct Output {
    pub records: Table,
    pub packets: Table,
    /// Empty when the frames went to a sink ([`Ingest::set_frames_sink`]).
    pub frames: Table,
    pub connections: Table,
    pub anomalies: Table,
    /// Only when bodies were asked for.
    pub bodies: Option<Table>,
    /// Tables a protocol declares besides these (`crate::output::ConnTables::added`).
    pub added: Vec<(&'static str, Table)>,
    pub read: ReadSummary,
    pub tcp_packets: u64,
    pub first_ts: Option<i64>,
    pub last_ts: Option<i64>,
    /// Each file of the set, in the order given (`records.source_file` indexes it).
    pub files: Vec<FileRead>,
}

impl<'l> Ingest<'l> {
    pub fn new(ports: &[u16], limits: &'l Limits, bodies: bool) -> Self {
        Ingest {
            limits,
            ports: ports.to_vec(),
            conversations: HashMap::default(),
            streams: Streams::default(),
            records: RecordsBuilder::new(true),
            records_sink: None,
            tables: Builders::new(limits, bodies),
            tcp_packets: 0,
            skipped_linktypes: Vec::new(),
            over_limit: None,
            decrypted: Decrypted::default(),
            partition: None,
            spill: None,
            from_spill: None,
            frames_out: None,
        }
    }

    /// Hand every TCP packet of a conversation that is or may be AMQP to `spill` (see
    /// [`PacketSpill`]).
    pub fn set_spill(&mut self, spill: PacketSpill<'l>) {
        self.spill = Some(spill);
    }

    /// Read packets of one bucket spilled by the first step (`crate::buckets::spill`) through
    /// [`Ingest::spilled_record`]; the capture has `capture_records` records in all.
    pub fn set_spilled(&mut self, capture_records: u32) {
        self.records = RecordsBuilder::new(false);
        self.from_spill = Some(FromSpill { capture_records, ..Default::default() });
    }

    /// Room for `packets` packets rows at once: the packets the split spilled into a bucket, an
    /// upper bound of its rows (those of conversations that turn out not to be AMQP are dropped).
    pub fn reserve_packets(&mut self, packets: usize) {
        self.tables.packets.reserve_exact(packets);
    }

    /// Output only the connections `partition` keeps (see [`Partition`]).
    pub fn set_partition(&mut self, partition: Partition) {
        self.records = RecordsBuilder::new(partition.capture_rows);
        self.partition = Some(partition);
    }

    /// Hand the `records` rows to `sink` in batches of `batch_rows` while the capture is read,
    /// and the last ones at the end: the `records` table of the output is then empty, and the
    /// rows never all in memory at once.
    pub fn set_records_sink(&mut self, sink: TableSink<'l>, batch_rows: usize) {
        self.records.reserve(batch_rows);
        self.records_sink = Some((sink, batch_rows.max(1)));
    }

    /// Decode the listed streams from decrypted plaintext (see [`Decrypted`]).
    pub fn set_decrypted(&mut self, decrypted: Decrypted) {
        self.decrypted = decrypted;
    }

    fn keeps(&self, stream: u32) -> bool {
        self.partition.as_ref().is_none_or(|p| p.keeps(stream))
    }

    /// Rows of no connection (records, anomalies of the file) are output by this pass.
    fn capture_rows(&self) -> bool {
        self.partition.as_ref().is_none_or(|p| p.capture_rows)
    }
}

/// Decode the capture made of the files at `paths` (one file, or a set such as a tcpdump
/// ring, merged by time as `mergecap` does: [`read_captures`]); an unusable file of a set is
/// skipped with a warning, or is the error when `strict`. The plaintext of TLS streams, when a
/// key log decrypted them, comes from `decrypted` (see [`Decrypted`]). With `partition`, only
/// the connections it keeps are output (see [`Partition`]).
#[allow(clippy::too_many_arguments)]
pub fn ingest(
    paths: &[String],
    ports: &[u16],
    limits: &Limits,
    bodies: bool,
    decrypted: Option<Decrypted>,
    partition: Option<Partition>,
    strict: bool,
    progress: &Progress,
    records_sink: Option<(TableSink<'_>, usize)>,
    spill: Option<PacketSpill<'_>>,
    frames_sink: Option<(TableSink<'_>, usize)>,
) -> Result<Output, CaptureError> {
    if paths.len() > crate::limits::MAX_FILES {
        return Err(CaptureError::Unreadable(format!(
            "{} files given; at most {} can be read as one capture (merge them with mergecap first)",
            paths.len(),
            crate::limits::MAX_FILES
        )));
    }
    let mut ing = Ingest::new(ports, limits, bodies);
    if let Some(d) = decrypted {
        ing.set_decrypted(d);
    }
    if let Some(p) = partition {
        ing.set_partition(p);
    }
    if let Some((sink, batch_rows)) = records_sink {
        ing.set_records_sink(sink, batch_rows);
    }
    if let Some(spill) = spill {
        ing.set_spill(spill);
    }
    if let Some((sink, batch_rows)) = frames_sink {
        ing.set_frames_sink(sink, batch_rows);
    }
    let several = paths.len() > 1;
    let merged = read_captures(paths, limits.max_record_bytes, strict, progress, |rec, file| ing.record_from(rec, file))?;
    if let Some(why) = ing.nothing_readable(merged.read.records) {
        let name = if several { format!("none of the {} files", paths.len()) } else { paths[0].clone() };
        return Err(CaptureError::Unsupported(format!("{name}: {why}")));
    }
    let mut out = ing.finish(merged.read);
    out.files = merged.files;
    Ok(out)
}
