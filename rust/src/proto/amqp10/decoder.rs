//! Per-direction AMQP 1.0 frame decoder: splits the in-order byte stream of one TCP direction
//! into frames (Part 2 §2.3) and names each frame's performative, keeping at most a frame's
//! header, its performative (up to `max_buffered_frame_bytes`) and, for a transfer, the first
//! [`MESSAGE_HEAD_BYTES`] of its message (never a whole message).
//!
//! A direction is given to this decoder when it starts with an AMQP 1.0 protocol header
//! (`crate::proto::dispatch`). The protocol header comes again when the SASL layer ends (Part 5
//! §5.3.2); a header for TLS (protocol id 2, Part 5 §5.2) means the rest is encrypted.
//! AMQP 1.0 frames carry no end marker to search for, so after a capture gap that lands between
//! frames, or a header that is no frame's, the rest of the direction is skipped (counted, and
//! reported once), not resynchronised.

use super::parser::{
    parse_frame_header, performative_code, performative_name, Bad, FrameHeader, Need, FRAME_HEADER_LEN,
    PERFORMATIVE_PREFIX_LEN,
};
use crate::proto::amqp091::parser::{parse_protocol_header, PROTOCOL_HEADER_LEN};
use crate::anomaly::AnomalyKind;
use crate::limits::Limits;
use crate::proto::sink::{report_encrypted, DecodeSink};

/// A complete frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameEvent {
    pub header: FrameHeader,
    /// The performative's (or SASL body's) descriptor code; `None` for an empty frame or a body
    /// that starts with no numeric descriptor.
    pub performative: Option<u64>,
    pub first_packet: u32,
    /// The packet whose arrival completed the frame.
    pub packet: u32,
}

pub trait FrameSink: DecodeSink {
    /// A complete frame. `body`: the start of its body as kept: the whole performative (or SASL
    /// body) and, for a transfer, up to [`MESSAGE_HEAD_BYTES`] of the message after it; `None`
    /// when the performative could not be kept (larger than `max_buffered_frame_bytes`, an
    /// `oversized-frame` reported here, or some of its octets missing from the capture).
    fn frame(&mut self, ev: FrameEvent, body: Option<&[u8]>);
}

/// Octets of a transfer's message kept after its performative: enough for the sections a
/// message starts with, header and properties (Part 3 §3.2.1, §3.2.4), after RabbitMQ's
/// message-annotations (its x-opt-* keys: tens of octets). A section past them is not read.
/// The spec bounds none of them; a structural constant, not a user-facing cap: at most this
/// much is copied per transfer frame.
pub const MESSAGE_HEAD_BYTES: usize = 8192;

/// The transfer performative's descriptor code (Part 2 §2.7.5).
const TRANSFER: u64 = 0x14;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// A protocol header is due: the direction's start, and after sasl-outcome.
    Header,
    /// At a frame boundary; `sasl`: inside the SASL layer (Part 5 §5.3).
    Frames { sasl: bool },
    /// Inside a frame whose start was read: `remaining` octets to skip, `missing` of its octets
    /// fell into capture gaps, the next `keep` of them are kept in `body`.
    Skip { ev: FrameEvent, remaining: u64, missing: u64, sasl: bool, keep: u64 },
    /// TLS inside AMQP 1.0 (protocol id 2), from `packet` on: every byte is skipped.
    Encrypted { packet: u32 },
    /// The frame boundary is lost (since `packet`): every byte is skipped.
    Lost { packet: u32 },
}

pub struct Decoder {
    state: State,
    /// The start of a header or frame not yet complete enough to read.
    buf: Vec<u8>,
    /// The packet of `buf`'s first byte.
    buf_packet: u32,
    frame_max: u64,
    /// The body start of the frame in progress ([`FrameSink::frame`]'s `body`).
    body: Vec<u8>,
    /// `body` cannot be had: its performative is oversized or lost octets to a capture gap.
    body_lost: bool,
    /// Performatives larger than this are not kept (`max_buffered_frame_bytes`).
    max_performative: u64,
    /// Bytes skipped since the boundary was lost, reported at the end.
    lost_bytes: u64,
    pub bytes_decoded: u64,
    pub bytes_skipped: u64,
    pub bytes_encrypted: u64,
    pub frames: u64,
}

impl Decoder {
    pub fn new(limits: &Limits) -> Self {
        Decoder {
            state: State::Header,
            buf: Vec::new(),
            buf_packet: 0,
            frame_max: limits.max_frame_bytes,
            body: Vec::new(),
            body_lost: false,
            max_performative: limits.max_buffered_frame_bytes,
            lost_bytes: 0,
            bytes_decoded: 0,
            bytes_skipped: 0,
            bytes_encrypted: 0,
            frames: 0,
        }
    }

    pub fn encrypted(&self) -> bool {
        matches!(self.state, State::Encrypted { .. })
    }

    /// Feed in-order bytes that arrived in packet `data_packet`; frames they complete are
    /// attributed to `arrival_packet`.
    pub fn feed(&mut self, data: &[u8], data_packet: u32, arrival_packet: u32, sink: &mut impl FrameSink) {
        let mut pos = 0;
        while pos < data.len() {
            let rest = &data[pos..];
            match self.state {
                State::Skip { ev, remaining, missing, sasl, mut keep } => {
                    let take = remaining.min(rest.len() as u64);
                    // (what to keep grows as the performative's first octets tell its size)
                    let mut kept = 0;
                    while keep > 0 && kept < take {
                        let k = keep.min(take - kept) as usize;
                        self.body.extend_from_slice(&rest[kept as usize..kept as usize + k]);
                        kept += k as u64;
                        keep = self.keep_more(&ev, sink);
                    }
                    pos += take as usize;
                    if take == remaining {
                        self.emit(FrameEvent { packet: arrival_packet, ..ev }, missing, sasl, sink);
                    } else {
                        self.state = State::Skip { ev, remaining: remaining - take, missing, sasl, keep };
                    }
                }
                State::Encrypted { .. } => {
                    self.bytes_skipped += rest.len() as u64;
                    self.bytes_encrypted += rest.len() as u64;
                    return;
                }
                State::Lost { .. } => {
                    self.bytes_skipped += rest.len() as u64;
                    self.lost_bytes += rest.len() as u64;
                    return;
                }
                State::Header | State::Frames { .. } => {
                    if self.buf.is_empty() {
                        self.buf_packet = data_packet;
                    }
                    let want = self.wanted().saturating_sub(self.buf.len());
                    let take = want.min(rest.len());
                    self.buf.extend_from_slice(&rest[..take]);
                    pos += take;
                    if take == want {
                        self.read_start(arrival_packet, sink);
                    }
                }
            }
        }
    }

    /// Octets of the header or frame start that `buf` must hold before it can be read.
    fn wanted(&self) -> usize {
        match self.state {
            State::Header => PROTOCOL_HEADER_LEN,
            _ => match parse_frame_header(&self.buf) {
                Ok(Ok(h)) => h.body_offset as usize + (h.body_len() as usize).min(PERFORMATIVE_PREFIX_LEN),
                // a bad header is read (and reported) as soon as its 8 octets are in
                Ok(Err(_)) | Err(Need(_)) => FRAME_HEADER_LEN,
            },
        }
    }

    /// `buf` holds what [`Decoder::wanted`] asked for (or a complete frame header that is bad).
    fn read_start(&mut self, packet: u32, sink: &mut impl FrameSink) {
        if self.state == State::Header {
            return self.read_protocol_header(packet, sink);
        }
        let State::Frames { sasl } = self.state else { return };
        if sasl && self.buf.starts_with(b"AMQP") {
            // the SASL layer is over: each side starts again with a protocol header (Part 5
            // §5.3.2), the client's before it sees the broker's sasl-outcome. No SASL frame is
            // that large (512 octets at most, Part 5 §5.3.1).
            return self.read_protocol_header(packet, sink);
        }
        let h = match parse_frame_header(&self.buf) {
            Err(Need(_)) => return,
            Ok(Err(bad)) => {
                let (kind, detail) = match bad {
                    Bad::UnknownType(t) => (AnomalyKind::UnknownFrameType, format!("AMQP 1.0 frame type {t}")),
                    Bad::Layout { size, doff } => (AnomalyKind::BadFrameHeader, format!("AMQP 1.0 frame header with size {size} and data offset {doff}: not a frame")),
                };
                sink.anomaly(kind, packet, FRAME_HEADER_LEN as u64, detail);
                return self.lose(packet);
            }
            Ok(Ok(h)) => h,
        };
        if h.size as u64 > self.frame_max {
            sink.anomaly(AnomalyKind::OversizedFrame, packet, h.size as u64, format!("AMQP 1.0 frame claims {} bytes, limit {}", h.size, self.frame_max));
            return self.lose(packet);
        }
        if self.buf.len() < self.wanted() {
            return; // the header is in; the body's first octets are not yet
        }
        let body = &self.buf[h.body_offset as usize..];
        let performative = if body.is_empty() { None } else { performative_code(body).unwrap_or(None) };
        let ev = FrameEvent { header: h, performative, first_packet: self.buf_packet, packet };
        let remaining = h.size as u64 - self.buf.len() as u64;
        self.body.clear();
        self.body.extend_from_slice(body);
        self.body_lost = false;
        self.buf.clear();
        if remaining == 0 {
            self.emit(ev, 0, sasl, sink);
        } else {
            let keep = self.keep_more(&ev, sink);
            self.state = State::Skip { ev, remaining, missing: 0, sasl, keep };
        }
    }

    fn read_protocol_header(&mut self, packet: u32, sink: &mut impl FrameSink) {
        let header = parse_protocol_header(&self.buf);
        self.buf.clear();
        match header {
            Ok(Some(version @ [id, 1, 0, 0])) => {
                self.bytes_decoded += PROTOCOL_HEADER_LEN as u64;
                sink.protocol_header(version, packet);
                self.state = match id {
                    3 => State::Frames { sasl: true },
                    2 => State::Encrypted { packet },
                    _ => State::Frames { sasl: false },
                };
            }
            Ok(Some(version)) => {
                // e.g. a broker refusing the version names the one it speaks, then closes
                // (Part 2 §2.2)
                self.bytes_decoded += PROTOCOL_HEADER_LEN as u64;
                sink.anomaly(
                    AnomalyKind::ProtocolHeader,
                    packet,
                    PROTOCOL_HEADER_LEN as u64,
                    format!("protocol header for version {}-{}-{}-{} in an AMQP 1.0 connection", version[0], version[1], version[2], version[3]),
                );
                self.state = State::Lost { packet };
            }
            _ => {
                sink.anomaly(AnomalyKind::ProtocolHeader, packet, PROTOCOL_HEADER_LEN as u64, "no AMQP 1.0 protocol header where one is due".into());
                self.bytes_skipped += PROTOCOL_HEADER_LEN as u64;
                self.lost_bytes += PROTOCOL_HEADER_LEN as u64;
                self.state = State::Lost { packet };
            }
        }
    }

    /// Octets of the frame in progress still to be kept in `body`, now that it holds what it
    /// does: the performative's (as far as its first octets tell its size, read again as more
    /// come), then a transfer's message head. A performative larger than the cap is
    /// `oversized-frame`: the frame is still a frame, its fields are not read.
    fn keep_more(&mut self, ev: &FrameEvent, sink: &mut impl FrameSink) -> u64 {
        let body_len = ev.header.body_len() as u64;
        let want = match super::types::decode(&self.body) {
            Ok(Ok((_, n))) => n as u64 + if ev.performative == Some(TRANSFER) { MESSAGE_HEAD_BYTES as u64 } else { 0 },
            // (a performative claiming more than its frame holds is read as far as the frame
            // goes, and found bad by the sink)
            Err(Need(n)) if (n as u64).min(body_len) > self.max_performative => {
                sink.anomaly(
                    AnomalyKind::OversizedFrame,
                    ev.first_packet,
                    ev.header.size as u64,
                    format!("AMQP 1.0 {} performative of {n} bytes or more exceeds the buffering cap", frame_name(ev)),
                );
                self.body_lost = true;
                return 0;
            }
            Err(Need(n)) => n as u64,
            // the sink reads it and says what is wrong
            Ok(Err(_)) => self.body.len() as u64,
        };
        want.min(body_len).saturating_sub(self.body.len() as u64)
    }

    fn emit(&mut self, ev: FrameEvent, missing: u64, sasl: bool, sink: &mut impl FrameSink) {
        self.frames += 1;
        self.bytes_decoded += ev.header.size as u64 - missing;
        let body = if self.body_lost { None } else { Some(&self.body[..]) };
        sink.frame(ev, body);
        self.body.clear();
        self.body_lost = false;
        self.state = State::Frames { sasl };
    }

    /// The boundary is lost: what `buf` holds, and every byte from here on, is skipped.
    fn lose(&mut self, packet: u32) {
        let n = self.buf.len() as u64;
        self.buf.clear();
        self.bytes_skipped += n;
        self.lost_bytes += n;
        self.state = State::Lost { packet };
    }

    /// Octets of the frame or header in progress already consumed.
    fn unfinished(&self) -> u64 {
        match self.state {
            State::Skip { ev, remaining, missing, .. } => ev.header.size as u64 - remaining - missing,
            _ => self.buf.len() as u64,
        }
    }

    /// `bytes` of the stream are missing from the capture.
    pub fn gap(&mut self, bytes: u64, packet: u32) {
        match self.state {
            State::Encrypted { .. } | State::Lost { .. } => {}
            // inside a frame whose size is known: the next one still starts where it said
            State::Skip { ev, remaining, missing, sasl, keep } if remaining > bytes => {
                // octets of the body still to be kept are lost: the performative cannot be read
                if keep > 0 {
                    self.body_lost = true;
                }
                self.state = State::Skip { ev, remaining: remaining - bytes, missing: missing + bytes, sasl, keep: 0 };
            }
            _ => {
                let n = self.unfinished();
                self.buf.clear();
                self.bytes_skipped += n;
                self.lost_bytes += n;
                self.state = State::Lost { packet };
            }
        }
    }

    /// End of stream: what is unfinished is counted as skipped and reported.
    pub fn finish(&mut self, packet: u32, sink: &mut impl DecodeSink) {
        match self.state {
            State::Encrypted { packet: first } => return report_encrypted(sink, first, self.bytes_encrypted),
            // (a header of another version followed by nothing lost no byte: no row)
            State::Lost { packet: since } if self.lost_bytes > 0 => {
                let n = self.lost_bytes;
                sink.anomaly(
                    AnomalyKind::ResyncSkipped,
                    since,
                    n,
                    format!("{n} bytes of AMQP 1.0 after a capture gap or a bad frame not decoded (AMQP 1.0 frames are not resynchronised)"),
                );
            }
            State::Lost { .. } => {}
            _ => {
                let n = self.unfinished();
                if n > 0 {
                    self.bytes_skipped += n;
                    sink.anomaly(AnomalyKind::IncompleteFrame, packet, n, format!("{n} bytes of an unfinished AMQP 1.0 frame at the end of the capture"));
                }
            }
        }
        self.buf.clear();
        self.state = State::Lost { packet };
    }
}

/// The name of a frame's performative; "empty" for an empty frame (Part 2 §2.4.5).
pub fn frame_name(ev: &FrameEvent) -> &'static str {
    match ev.performative {
        None if ev.header.body_len() == 0 => "empty",
        Some(code) => performative_name(code).unwrap_or("unknown"),
        None => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::amqp10::parser::FrameKind;

    #[derive(Default)]
    struct Seen {
        frames: Vec<(FrameKind, u16, &'static str, u32, u32)>,
        headers: Vec<[u8; 4]>,
        anomalies: Vec<(AnomalyKind, u64)>,
        bodies: Vec<Option<Vec<u8>>>,
    }
    impl DecodeSink for Seen {
        fn protocol_header(&mut self, version: [u8; 4], _packet: u32) {
            self.headers.push(version);
        }
        fn anomaly(&mut self, kind: AnomalyKind, _packet: u32, bytes: u64, _detail: String) {
            self.anomalies.push((kind, bytes));
        }
    }
    impl FrameSink for Seen {
        fn frame(&mut self, ev: FrameEvent, body: Option<&[u8]>) {
            self.bodies.push(body.map(<[u8]>::to_vec));
            self.frames.push((ev.header.kind, ev.header.channel, frame_name(&ev), ev.first_packet, ev.packet));
        }
    }

    fn frame(kind: u8, channel: u16, body: &[u8]) -> Vec<u8> {
        let mut f = ((8 + body.len()) as u32).to_be_bytes().to_vec();
        f.extend_from_slice(&[2, kind]);
        f.extend_from_slice(&channel.to_be_bytes());
        f.extend_from_slice(body);
        f
    }

    /// An AMQP layer after its protocol header: open, begin, a transfer with a 300-byte
    /// message, an empty frame, close.
    fn amqp_frames() -> Vec<u8> {
        let mut s = frame(0, 0, &[0x00, 0x53, 0x10, 0xc0, 2, 1, 0x40]);
        s.extend(frame(0, 1, &[0x00, 0x53, 0x11, 0x45]));
        let mut transfer = vec![0x00, 0x80, 0, 0, 0, 0, 0, 0, 0, 0x14, 0x45];
        transfer.extend(std::iter::repeat_n(7u8, 300));
        s.extend(frame(0, 1, &transfer));
        s.extend(frame(0, 1, &[]));
        s.extend(frame(0, 0, &[0x00, 0x53, 0x18, 0x45]));
        s
    }

    fn decode(chunks: &[&[u8]]) -> (Seen, Decoder) {
        let limits = Limits::default();
        let mut d = Decoder::new(&limits);
        let mut seen = Seen::default();
        for (i, c) in chunks.iter().enumerate() {
            d.feed(c, i as u32 + 1, i as u32 + 1, &mut seen);
        }
        d.finish(chunks.len() as u32, &mut seen);
        (seen, d)
    }

    #[test]
    fn sasl_outcome_hands_over_to_the_amqp_header() {
        let mut s = b"AMQP\x03\x01\x00\x00".to_vec();
        s.extend(frame(1, 0, &[0x00, 0x53, 0x40, 0xc0, 3, 1, 0xa3, 0]));
        s.extend(frame(1, 0, &[0x00, 0x53, 0x44, 0xc0, 3, 1, 0x50, 0]));
        s.extend(b"AMQP\x00\x01\x00\x00");
        s.extend(amqp_frames());
        let (whole, d) = decode(&[&s]);
        let names: Vec<&str> = whole.frames.iter().map(|f| f.2).collect();
        assert_eq!(names, ["sasl-mechanisms", "sasl-outcome", "open", "begin", "transfer", "empty", "close"]);
        assert_eq!(whole.headers, [*b"\x03\x01\x00\x00", *b"\x00\x01\x00\x00"]);
        assert_eq!(whole.anomalies, []);
        assert_eq!((d.bytes_decoded, d.bytes_skipped, d.frames), (s.len() as u64, 0, 7));
        assert_eq!(whole.frames[4].1, 1, "the transfer's channel");
        // cut anywhere, byte by byte: the same frames, each completed by the packet holding
        // its last byte and started by the one holding its first
        let bytes: Vec<&[u8]> = s.chunks(1).collect();
        let (cut, d) = decode(&bytes);
        assert_eq!(cut.frames.iter().map(|f| f.2).collect::<Vec<_>>(), names);
        assert_eq!((d.bytes_decoded, d.frames), (s.len() as u64, 7));
        let transfer = cut.frames[4];
        assert_eq!(transfer.4 - transfer.3 + 1, 8 + 11 + 300, "one packet per byte of the transfer");
        // each frame's body is kept whole (the transfer's 300-byte message is within the head
        // kept), the empty frame's is empty, however the bytes are cut
        let whole_bodies: Vec<usize> = whole.bodies.iter().map(|b| b.as_ref().unwrap().len()).collect();
        assert_eq!(whole_bodies, [8, 8, 7, 4, 11 + 300, 0, 4]);
        assert_eq!(cut.bodies, whole.bodies);
        for at in 1..s.len() {
            let (two, _) = decode(&[&s[..at], &s[at..]]);
            assert_eq!(two.frames.iter().map(|f| f.2).collect::<Vec<_>>(), names, "cut at {at}");
            assert_eq!(two.anomalies, []);
            assert_eq!(two.bodies, whole.bodies, "cut at {at}");
        }
    }

    #[test]
    fn the_client_starts_again_after_its_sasl_init() {
        let mut s = b"AMQP\x03\x01\x00\x00".to_vec();
        s.extend(frame(1, 0, &[0x00, 0x53, 0x41, 0xc0, 3, 1, 0xa3, 0]));
        s.extend(b"AMQP\x00\x01\x00\x00");
        s.extend(amqp_frames());
        for at in 1..s.len() {
            let (two, d) = decode(&[&s[..at], &s[at..]]);
            let names: Vec<&str> = two.frames.iter().map(|f| f.2).collect();
            assert_eq!(names, ["sasl-init", "open", "begin", "transfer", "empty", "close"], "cut at {at}");
            assert_eq!(two.headers.len(), 2);
            assert_eq!((d.bytes_decoded, d.bytes_skipped), (s.len() as u64, 0));
        }
    }

    #[test]
    fn a_transfer_keeps_its_performative_and_its_message_head_only() {
        // a performative of list32 (its size known after 19 octets), then a message larger
        // than the head kept
        let mut transfer = vec![0x00, 0x53, 0x14, 0xd0, 0, 0, 0, 9, 0, 0, 0, 1, 0x70, 0, 0, 0, 1];
        transfer.extend(std::iter::repeat_n(7u8, MESSAGE_HEAD_BYTES + 1000));
        let mut s = b"AMQP\x00\x01\x00\x00".to_vec();
        s.extend(frame(0, 1, &transfer));
        let (whole, _) = decode(&[&s]);
        let kept = whole.bodies[0].as_ref().unwrap();
        assert_eq!(kept.len(), 17 + MESSAGE_HEAD_BYTES);
        assert_eq!(kept[..], transfer[..kept.len()]);
        let bytes: Vec<&[u8]> = s.chunks(7).collect();
        assert_eq!(decode(&bytes).0.bodies, whole.bodies);
        // a performative larger than the buffering cap is not kept: oversized-frame
        let limits = Limits { max_buffered_frame_bytes: 10, ..Limits::default() };
        let mut d = Decoder::new(&limits);
        let mut seen = Seen::default();
        d.feed(&s, 1, 1, &mut seen);
        assert_eq!(seen.bodies, [None]);
        assert_eq!(seen.anomalies, [(AnomalyKind::OversizedFrame, transfer.len() as u64 + 8)]);
        // a gap inside the performative loses it, not the frame
        let mut d = Decoder::new(&Limits::default());
        let mut seen = Seen::default();
        d.feed(&s[..8 + 8 + 12], 1, 1, &mut seen);
        d.gap(3, 2);
        d.feed(&s[8 + 8 + 15..], 3, 3, &mut seen);
        assert_eq!((seen.frames.len(), &seen.bodies[..]), (1, &[None][..]));
    }

    #[test]
    fn a_gap_between_frames_loses_the_rest_and_says_so_once() {
        let mut s = b"AMQP\x00\x01\x00\x00".to_vec();
        s.extend(frame(0, 0, &[0x00, 0x53, 0x10, 0x45]));
        let limits = Limits::default();
        let mut d = Decoder::new(&limits);
        let mut seen = Seen::default();
        d.feed(&s, 1, 1, &mut seen);
        d.gap(100, 2);
        let more = frame(0, 0, &[0x00, 0x53, 0x18, 0x45]);
        d.feed(&more, 3, 3, &mut seen);
        d.finish(3, &mut seen);
        assert_eq!(seen.frames.len(), 1);
        assert_eq!(seen.anomalies, [(AnomalyKind::ResyncSkipped, more.len() as u64)]);
        assert_eq!(d.bytes_skipped, more.len() as u64);
    }

    #[test]
    fn a_gap_inside_a_message_keeps_the_frame_boundary() {
        let mut s = b"AMQP\x00\x01\x00\x00".to_vec();
        let mut transfer = vec![0x00, 0x53, 0x14, 0x45];
        transfer.extend([9u8; 200]);
        let f = frame(0, 2, &transfer);
        s.extend(&f[..50]);
        let limits = Limits::default();
        let mut d = Decoder::new(&limits);
        let mut seen = Seen::default();
        d.feed(&s, 1, 1, &mut seen);
        d.gap(100, 2);
        d.feed(&f[150..], 3, 3, &mut seen);
        d.feed(&frame(0, 0, &[0x00, 0x53, 0x18, 0x45]), 4, 4, &mut seen);
        d.finish(4, &mut seen);
        let names: Vec<&str> = seen.frames.iter().map(|f| f.2).collect();
        assert_eq!(names, ["transfer", "close"]);
        assert_eq!(seen.anomalies, []);
        assert_eq!(d.bytes_decoded, 8 + f.len() as u64 - 100 + 12);
    }

    #[test]
    fn bad_headers_and_unfinished_frames_are_reported() {
        let (seen, d) = decode(&[b"AMQP\x00\x01\x00\x00\x00\x00\x00\x04\x02\x00\x00\x00rest"]);
        assert_eq!(seen.anomalies, [(AnomalyKind::BadFrameHeader, 8), (AnomalyKind::ResyncSkipped, 12)]);
        assert_eq!((d.bytes_decoded, d.bytes_skipped), (8, 12));
        let (seen, _) = decode(&[b"AMQP\x00\x01\x00\x00\x00\x00\x00\x20\x02\x00\x00\x00\x00\x53"]);
        assert_eq!(seen.anomalies, [(AnomalyKind::IncompleteFrame, 10)]);
        let (seen, _) = decode(&[b"AMQP\x00\x00\x09\x01"]);
        assert_eq!(seen.anomalies, [(AnomalyKind::ProtocolHeader, 8)], "nothing lost after it: no resync-skipped row");
        let (seen, d) = decode(&[b"AMQP\x02\x01\x00\x00", &[22, 3, 3, 0, 5, 1, 2, 3, 4, 5]]);
        assert_eq!(seen.anomalies, [(AnomalyKind::TlsEncrypted, 10)]);
        assert!(d.encrypted());
    }
}
