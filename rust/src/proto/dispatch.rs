//! The seam between TCP and the protocol decoders: each direction's reassembled chunks go to
//! the decoder its first bytes choose (`crate::proto::detect`): AMQP 1.0 for an AMQP 1.0 protocol
//! header, AMQP 0-9-1 for anything else (its own header, TLS, or the frames of a capture that
//! starts mid-connection, which its decoder resynchronises on). Until the first bytes tell, the
//! chunks wait here, in order, and are then handed to the chosen decoder as they came, so the
//! decoder sees exactly what it would have seen from the first byte.
//!
//! What a decoder writes goes through a [`Sink`] (`crate::proto::sink`, the contract): the
//! tables' builders, the connection's facts, and where the rows are (the packet whose arrival
//! completes what is decoded). Capture gaps are recorded here, the same for every protocol.

use crate::proto::amqp091::decoder::Decoder as Decoder091;
use crate::proto::amqp10::decoder::Decoder as Decoder10;
use crate::anomaly::AnomalyKind;
use crate::proto::detect::{detect, Detected};
use crate::limits::Limits;
use crate::proto::facts::{ConnInfo, Protocol};
use crate::proto::sink::{DecodeSink, Sink};
use crate::flow::tcp::reassembly::{Chunk, GapCause, PacketRef};

/// The first bytes of a direction, while they do not tell its protocol yet (fewer than a
/// protocol header's 8, or a TLS record still to be seen whole).
pub(crate) struct Undecided {
    aligned: bool,
    bytes: Vec<u8>,
    /// Each chunk's length, its packet and the packet whose arrival handed it over.
    chunks: Vec<(usize, u32, PacketRef)>,
}

/// A direction's decoder.
pub(crate) enum StreamDecoder {
    Undecided(Undecided),
    Amqp091(Decoder091),
    Amqp10(Decoder10),
}

impl StreamDecoder {
    /// The earliest packet a frame row still to come from bytes this direction already handed
    /// over may be attributed to, when one may come before any later packet's: the chunks
    /// waiting for the protocol to be decided are decoded as of the packets that handed them
    /// over; what 0-9-1 decodes at the end of the stream is as of `last_arrival`, the
    /// direction's latest data packet (`finish`). AMQP 1.0's frames have no rows here.
    pub(crate) fn earliest_pending_frame(&self, last_arrival: u32) -> Option<u32> {
        match self {
            StreamDecoder::Undecided(u) => u.chunks.first().map(|c| c.2.number),
            StreamDecoder::Amqp091(d) => d.may_decode_at_end().then_some(last_arrival),
            StreamDecoder::Amqp10(_) => None,
        }
    }

    /// The AMQP 0-9-1 decoder, when the direction has one.
    pub(crate) fn amqp091(&mut self) -> Option<&mut Decoder091> {
        match self {
            StreamDecoder::Amqp091(d) => Some(d),
            _ => None,
        }
    }

    /// No byte was decoded or skipped yet.
    pub(crate) fn untouched(&self) -> bool {
        match self {
            StreamDecoder::Undecided(_) => true,
            StreamDecoder::Amqp091(d) => d.bytes_decoded + d.bytes_skipped == 0,
            StreamDecoder::Amqp10(d) => d.bytes_decoded + d.bytes_skipped == 0,
        }
    }

    /// Bytes decoded, bytes skipped, and whether the direction carries TLS.
    pub(crate) fn counts(&self) -> (u64, u64, bool) {
        match self {
            StreamDecoder::Undecided(_) => (0, 0, false),
            StreamDecoder::Amqp091(d) => (d.bytes_decoded, d.bytes_skipped, d.encrypted()),
            StreamDecoder::Amqp10(d) => (d.bytes_decoded, d.bytes_skipped, d.encrypted()),
        }
    }

    fn feed(&mut self, bytes: &[u8], from: u32, arrival: PacketRef, sink: &mut Sink<'_>, limits: &Limits) {
        sink.arrival_row = arrival.row;
        match self {
            StreamDecoder::Amqp091(d) => d.feed(bytes, from, arrival.number, limits, sink),
            StreamDecoder::Amqp10(d) => d.feed(bytes, from, arrival.number, sink),
            StreamDecoder::Undecided(u) => {
                let first = u.chunks.is_empty();
                let found = if first { detect(bytes, u.aligned) } else {
                    u.bytes.extend_from_slice(bytes);
                    detect(&u.bytes, u.aligned)
                };
                match found {
                    // the usual case: the first chunk tells
                    Some(found) if first => {
                        *self = chosen(found, u.aligned, sink, limits);
                        self.feed(bytes, from, arrival, sink, limits);
                    }
                    _ => {
                        if first {
                            u.bytes.extend_from_slice(bytes);
                        }
                        u.chunks.push((bytes.len(), from, arrival));
                        if let Some(found) = found {
                            self.decide(found, sink, limits);
                        }
                    }
                }
            }
        }
    }

    /// Become the decoder `found` chooses, and hand it the chunks that waited.
    fn decide(&mut self, found: Detected, sink: &mut Sink<'_>, limits: &Limits) {
        let StreamDecoder::Undecided(u) = self else { return };
        let waited = std::mem::replace(u, Undecided { aligned: u.aligned, bytes: Vec::new(), chunks: Vec::new() });
        *self = chosen(found, waited.aligned, sink, limits);
        let row = sink.arrival_row;
        let mut at = 0;
        for (len, from, arrival) in waited.chunks {
            self.feed(&waited.bytes[at..at + len], from, arrival, sink, limits);
            at += len;
        }
        sink.arrival_row = row;
    }

    /// Still undecided when the stream cannot tell any more (a gap, its end): AMQP 0-9-1, whose
    /// decoder handles what is not a header.
    fn settle(&mut self, sink: &mut Sink<'_>, limits: &Limits) {
        if matches!(self, StreamDecoder::Undecided(_)) {
            self.decide(Detected::Unknown, sink, limits);
        }
    }

    fn gap(&mut self, bytes: u64, packet: u32, sink: &mut Sink<'_>, limits: &Limits) {
        self.settle(sink, limits);
        match self {
            StreamDecoder::Amqp091(d) => d.gap(bytes, packet),
            StreamDecoder::Amqp10(d) => d.gap(bytes, packet),
            StreamDecoder::Undecided(_) => unreachable!("settled above"),
        }
    }

    /// The end of the stream: what is buffered is completed or given up.
    pub(crate) fn finish(&mut self, packet: u32, sink: &mut Sink<'_>, limits: &Limits) {
        self.settle(sink, limits);
        match self {
            StreamDecoder::Amqp091(d) => d.finish(packet, limits, sink),
            StreamDecoder::Amqp10(d) => d.finish(packet, sink),
            StreamDecoder::Undecided(_) => unreachable!("settled above"),
        }
    }
}

/// A connection.tune/-ok just decoded: both directions' decoders are held to the negotiated
/// frame_max from here on (AMQP 0-9-1 §4.2.3: a larger frame is a protocol error).
pub(crate) fn apply_tune(info: &mut ConnInfo, decoders: [Option<&mut StreamDecoder>; 2], limits: &Limits) {
    if !info.frame_max_changed {
        return;
    }
    info.frame_max_changed = false;
    let fm = info.frame_max().unwrap_or(0);
    for decoder in decoders {
        if let Some(dec) = decoder.and_then(|d| d.amqp091()) {
            dec.set_frame_max(fm, limits);
        }
    }
}

/// The decoder for what a direction starts with; the connection's protocol is AMQP 1.0 when
/// either direction chose it.
fn chosen(found: Detected, aligned: bool, sink: &mut Sink<'_>, limits: &Limits) -> StreamDecoder {
    match found {
        Detected::Amqp10 { .. } => {
            sink.info.protocol = Some(Protocol::Amqp10);
            return StreamDecoder::Amqp10(Decoder10::new(limits));
        }
        // TLS does not say what it carries
        Detected::Tls => {}
        // a 0-9-1 header, another version's (0-8, 0-9), or frames of a capture that started
        // mid-connection, decoded as 0-9-1
        Detected::Amqp091 | Detected::OtherAmqp(_) | Detected::Unknown => {
            sink.info.protocol.get_or_insert(Protocol::Amqp091);
        }
    }
    let mut d = Decoder091::new(aligned, limits);
    d.keep_bodies = sink.tables.bodies.is_some();
    if let Some(fm) = sink.info.frame_max() {
        d.set_frame_max(fm, limits);
    }
    StreamDecoder::Amqp091(d)
}

/// The direction's decoder, made on its first bytes (`aligned`: they start the stream).
fn decoder_of(decoder: &mut Option<Box<StreamDecoder>>, aligned: bool) -> &mut StreamDecoder {
    decoder.get_or_insert_with(|| Box::new(StreamDecoder::Undecided(Undecided { aligned, bytes: Vec::new(), chunks: Vec::new() })))
}

/// In-order bytes of a direction that arrived in packet `from` (handed over by `arrival`'s
/// arrival) to its decoder.
pub(crate) fn feed(decoder: &mut Option<Box<StreamDecoder>>, aligned: bool, bytes: &[u8], from: u32, arrival: PacketRef, sink: &mut Sink<'_>, limits: &Limits) {
    if !bytes.is_empty() {
        decoder_of(decoder, aligned).feed(bytes, from, arrival, sink, limits);
    }
}

/// One chunk of a direction's reassembled TCP stream. `feed`: its bytes go to the decoder;
/// false for decrypted TLS streams, whose decoder gets plaintext instead (gaps are still
/// recorded, on the ciphertext).
pub(crate) fn on_chunk(c: Chunk<'_>, decoder: &mut Option<Box<StreamDecoder>>, aligned: bool, feed_bytes: bool, sink: &mut Sink<'_>, limits: &Limits) {
    match c {
        Chunk::Data { bytes, from, arrival } => {
            if feed_bytes {
                feed(decoder, aligned, bytes, from.number, arrival, sink, limits);
            }
        }
        Chunk::Gap { bytes, cause, next, arrival } => {
            sink.arrival_row = arrival.row;
            let (kind, packet, detail) = match cause {
                GapCause::Dropped => {
                    sink.tables.packets.gap_before[next.row as usize] += bytes as i64;
                    (AnomalyKind::CaptureGap, next.number, format!("{bytes} bytes missing from the capture"))
                }
                GapCause::Snaplen => {
                    sink.info.snaplen_gap[!sink.origin.from_a as usize] += bytes;
                    (AnomalyKind::TruncatedPacket, next.number, format!("{bytes} bytes cut by the capture's snaplen"))
                }
                GapCause::Tail => {
                    // No packet of this direction follows the hole: no gap_before to add to.
                    (AnomalyKind::CaptureGap, next.number, format!("{bytes} bytes acknowledged by the peer are missing from the capture's end"))
                }
                GapCause::Overflow => {
                    sink.tables.packets.gap_before[next.row as usize] += bytes as i64;
                    (AnomalyKind::ReassemblyOverflow, next.number, format!("{bytes} bytes given up: out-of-order data over the reassembly cap"))
                }
            };
            sink.anomaly(kind, packet, bytes, detail);
            if feed_bytes {
                sink.body_gap();
                decoder_of(decoder, aligned).gap(bytes, arrival.number, sink, limits);
                sink.arrival_row = arrival.row;
            }
        }
    }
}
