//! The sink contract: what a protocol decoder writes, and where it goes.
//!
//! Every decoder reports through [`DecodeSink`] (protocol headers, anomalies); each protocol
//! adds its own frame trait on top (`amqp091::decoder::FrameSink`, `amqp10::decoder::FrameSink`)
//! and implements it on [`Sink`] in its `session.rs`, which is where that protocol's frames
//! become rows. [`Sink`] hands a protocol the builders of every table (`crate::output::Builders`)
//! and the connection's facts, so a protocol with a table of its own writes its rows from its
//! own folder: the pipeline only builds the sink, once per packet it decodes, and hands it the
//! direction's chunks. A decoder itself never sees the tables: it is generic over its frame
//! trait, so the tests and fuzz harnesses give it a sink of their own.

use crate::anomaly::AnomalyKind;
use crate::output::tables::RowOrigin;
use crate::output::Builders;
use crate::proto::facts::ConnInfo;

/// What every protocol decoder reports besides its frames.
pub trait DecodeSink {
    fn protocol_header(&mut self, version: [u8; 4], packet: u32);
    fn anomaly(&mut self, kind: AnomalyKind, packet: u32, bytes: u64, detail: String);
}

/// The one `tls-encrypted` row of a direction that turned out to carry TLS: `bytes` skipped
/// from packet `first` on.
pub fn report_encrypted(sink: &mut impl DecodeSink, first: u32, bytes: u64) {
    sink.anomaly(AnomalyKind::TlsEncrypted, first, bytes, format!("TLS: {bytes} encrypted bytes skipped (decrypt with a TLS key log)"));
}

/// Receives what one direction's decoder finds.
pub(crate) struct Sink<'a> {
    /// The rows of every table being written (a protocol writes its own).
    pub(crate) tables: &'a mut Builders,
    pub(crate) info: &'a mut ConnInfo,
    /// The connection and direction whose bytes are decoded.
    pub(crate) origin: RowOrigin,
    /// Row in the packets table of the packet whose arrival completes what is being decoded.
    pub(crate) arrival_row: u32,
    /// Rows the frames table may still take (`max_frames` less the rows already handed out).
    pub(crate) max_frames: u64,
}

impl<'a> Sink<'a> {
    /// The sink of connection direction `origin` (its facts: `info`); rows are of the packet
    /// at row `arrival_row` of the packets table until the dispatch says otherwise.
    pub(crate) fn new(tables: &'a mut Builders, info: &'a mut ConnInfo, origin: RowOrigin, arrival_row: u32, max_frames: u64) -> Self {
        Sink { tables, info, origin, arrival_row, max_frames }
    }

    /// Bytes of this direction are missing: the messages in progress cannot be whole.
    pub(crate) fn body_gap(&mut self) {
        let from_a = self.origin.from_a;
        if let Some(pending) = self.info.bodies.as_deref_mut() {
            pending.iter_mut().filter(|p| p.from_a == from_a).for_each(|p| p.broken = true);
        }
    }
}

impl DecodeSink for Sink<'_> {
    fn protocol_header(&mut self, _version: [u8; 4], _packet: u32) {
        self.info.protocol_header_seen = true;
    }

    fn anomaly(&mut self, kind: AnomalyKind, packet: u32, bytes: u64, detail: String) {
        self.info.anomalies += 1;
        self.tables.anomalies.push(kind, Some(self.origin), Some(packet), None, bytes, detail);
    }
}
