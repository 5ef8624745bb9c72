//! The seam between TCP and the protocol decoders: each direction's reassembled chunks go to
//! the decoder its bytes choose (`crate::proto::detect`): AMQP 1.0 for an AMQP 1.0 protocol
//! header, or, in a direction seen from its middle (no SYN, or a gap before anything told), for
//! AMQP 1.0 frames found before any AMQP 0-9-1 frame (`detect::mid_stream`); AMQP 0-9-1 for
//! anything else (its own header, TLS, 0-9-1 frames of a capture that starts mid-connection,
//! which its decoder resynchronises on, or nothing found in `resync_window_bytes`). Until the
//! bytes tell, the chunks and gaps wait here, in order, and are then handed to the chosen decoder
//! as they came, so the decoder sees exactly what it would have seen from the first byte.
//!
//! What a decoder writes goes through a [`Sink`] (`crate::proto::sink`, the contract): the
//! tables' builders, the connection's facts, and where the rows are (the packet whose arrival
//! completes what is decoded). Capture gaps are recorded here, the same for every protocol.

use crate::proto::amqp091::decoder::Decoder as Decoder091;
use crate::proto::amqp10::decoder::Decoder as Decoder10;
use crate::anomaly::AnomalyKind;
use crate::proto::detect::{detect, mid_stream, Detected, MidStream};
use crate::limits::Limits;
use crate::proto::facts::{ConnInfo, Protocol};
use crate::proto::sink::{DecodeSink, Sink};
use crate::flow::tcp::reassembly::{Chunk, GapCause, PacketRef};

/// The first bytes of a direction, while they do not tell its protocol yet: fewer than a
/// protocol header's 8, a TLS record still to be seen whole, or, for a direction seen from its
/// middle, bytes in which no frame was found yet ([`mid_stream`]).
pub(crate) struct Undecided {
    aligned: bool,
    bytes: Vec<u8>,
    /// What came, in order: chunks of `bytes` and capture gaps.
    held: Vec<Held>,
    /// The search by frame structure, once the start told nothing.
    scan: Option<Scan>,
}

#[derive(Clone, Copy)]
enum Held {
    /// A chunk's length, its packet and the packet whose arrival handed it over.
    Data(usize, u32, PacketRef),
    /// A capture gap of that many bytes, found out on the packet's arrival.
    Gap(u64, PacketRef),
}

/// `bytes[..judged]` hold no position where frames start (the bytes after the latest gap are
/// searched: a chain never spans a gap).
#[derive(Clone, Copy)]
struct Scan {
    judged: usize,
}

/// What a direction turned out to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Choice {
    /// What its first bytes say (`crate::proto::detect::detect`); `Unknown`: AMQP 0-9-1 frames.
    Start(Detected),
    /// AMQP 1.0 frames, found by their structure in a direction seen from its middle.
    Amqp10MidStream,
}

impl Undecided {
    fn new(aligned: bool) -> Self {
        Undecided { aligned, bytes: Vec::new(), held: Vec::new(), scan: None }
    }

    /// What the bytes held tell, if they do. `at_end`: no byte will follow them (a gap, the end
    /// of the stream). `amqp10`: the connection's other direction speaks AMQP 1.0.
    fn choice(&mut self, at_end: bool, amqp10: bool, limits: &Limits) -> Option<Choice> {
        let scan = match self.scan {
            Some(scan) => scan,
            None => {
                match detect(&self.bytes, self.aligned) {
                    // a direction whose start was seen starts with frames or a header
                    Some(Detected::Unknown) if self.aligned => return Some(Choice::Start(Detected::Unknown)),
                    Some(Detected::Unknown) => {}
                    Some(found) => return Some(Choice::Start(found)),
                    None if !at_end => return None,
                    // its start cut short by a gap or the end: frames are searched for
                    None => {}
                }
                *self.scan.insert(Scan { judged: 0 })
            }
        };
        // A direction seen from its middle (or whose start was cut by a gap) is searched for
        // frames of either protocol from its first byte on, in the bytes after the latest gap;
        // past `resync_window_bytes` positions without any, it is AMQP 0-9-1 as before, whose
        // decoder goes on searching (or AMQP 1.0's, when the connection speaks it).
        let window = limits.resync_window_bytes as usize;
        let positions = window.saturating_sub(scan.judged);
        let (at, found) = mid_stream(&self.bytes[scan.judged..], positions, at_end, amqp10, limits);
        self.scan = Some(Scan { judged: scan.judged + at });
        match found {
            MidStream::Amqp091 => Some(Choice::Start(Detected::Unknown)),
            MidStream::Amqp10 => Some(Choice::Amqp10MidStream),
            MidStream::Need => None,
            MidStream::Neither if scan.judged + at >= window => Some(fallback(amqp10)),
            MidStream::Neither => None,
        }
    }
}

/// A direction whose bytes told nothing: AMQP 0-9-1, whose decoder handles what is not a header
/// (or AMQP 1.0's decoder, searching, when the connection's other direction speaks it).
fn fallback(amqp10: bool) -> Choice {
    if amqp10 {
        Choice::Amqp10MidStream
    } else {
        Choice::Start(Detected::Unknown)
    }
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
            StreamDecoder::Undecided(u) => u.held.iter().find_map(|h| match h {
                Held::Data(_, _, arrival) => Some(arrival.number),
                Held::Gap(..) => None,
            }),
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
                if u.held.is_empty() {
                    // the usual case: the first chunk tells
                    match detect(bytes, u.aligned) {
                        Some(Detected::Unknown) if !u.aligned => {}
                        Some(found) => {
                            *self = chosen(Choice::Start(found), u.aligned, sink, limits);
                            return self.feed(bytes, from, arrival, sink, limits);
                        }
                        None => {}
                    }
                }
                u.bytes.extend_from_slice(bytes);
                u.held.push(Held::Data(bytes.len(), from, arrival));
                if let Some(choice) = u.choice(false, known_amqp10(sink), limits) {
                    self.decide(choice, sink, limits);
                }
            }
        }
    }

    /// Become the decoder `choice` names, and hand it what waited.
    fn decide(&mut self, choice: Choice, sink: &mut Sink<'_>, limits: &Limits) {
        let StreamDecoder::Undecided(u) = self else { return };
        let waited = std::mem::replace(u, Undecided::new(u.aligned));
        *self = chosen(choice, waited.aligned, sink, limits);
        let row = sink.arrival_row;
        let mut at = 0;
        for h in waited.held {
            match h {
                Held::Data(len, from, arrival) => {
                    self.feed(&waited.bytes[at..at + len], from, arrival, sink, limits);
                    at += len;
                }
                Held::Gap(bytes, arrival) => {
                    sink.arrival_row = arrival.row;
                    self.gap(bytes, arrival, sink, limits);
                }
            }
        }
        sink.arrival_row = row;
    }

    fn gap(&mut self, bytes: u64, arrival: PacketRef, sink: &mut Sink<'_>, limits: &Limits) {
        if let StreamDecoder::Undecided(u) = self {
            // the bytes before the gap are all there will be of their stretch
            match u.choice(true, known_amqp10(sink), limits) {
                Some(choice) => self.decide(choice, sink, limits),
                None => {
                    u.held.push(Held::Gap(bytes, arrival));
                    u.scan = Some(Scan { judged: u.bytes.len() });
                    return;
                }
            }
        }
        match self {
            StreamDecoder::Amqp091(d) => d.gap(bytes, arrival.number),
            StreamDecoder::Amqp10(d) => d.gap(bytes, arrival.number, sink),
            StreamDecoder::Undecided(_) => unreachable!("decided above"),
        }
    }

    /// The end of the stream: what is buffered is completed or given up.
    pub(crate) fn finish(&mut self, packet: u32, sink: &mut Sink<'_>, limits: &Limits) {
        if let StreamDecoder::Undecided(u) = self {
            let amqp10 = known_amqp10(sink);
            let choice = u.choice(true, amqp10, limits).unwrap_or(fallback(amqp10));
            self.decide(choice, sink, limits);
        }
        match self {
            StreamDecoder::Amqp091(d) => d.finish(packet, limits, sink),
            StreamDecoder::Amqp10(d) => d.finish(packet, sink),
            StreamDecoder::Undecided(_) => unreachable!("decided above"),
        }
    }
}

/// The connection speaks AMQP 1.0: a direction of it told so.
fn known_amqp10(sink: &Sink<'_>) -> bool {
    sink.info.protocol == Some(Protocol::Amqp10)
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

/// The decoder for what a direction speaks; the connection's protocol is AMQP 1.0 when either
/// direction chose it.
fn chosen(choice: Choice, aligned: bool, sink: &mut Sink<'_>, limits: &Limits) -> StreamDecoder {
    let found = match choice {
        Choice::Amqp10MidStream => {
            sink.info.protocol = Some(Protocol::Amqp10);
            return StreamDecoder::Amqp10(Decoder10::mid_stream(limits));
        }
        Choice::Start(found) => found,
    };
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
    decoder.get_or_insert_with(|| Box::new(StreamDecoder::Undecided(Undecided::new(aligned))))
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
                decoder_of(decoder, aligned).gap(bytes, arrival, sink, limits);
                sink.arrival_row = arrival.row;
            }
        }
    }
}
