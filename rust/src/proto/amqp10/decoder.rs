//! Per-direction AMQP 1.0 frame decoder: splits the in-order byte stream of one TCP direction
//! into frames (Part 2 §2.3) and names each frame's performative, keeping at most a frame's
//! header, its performative (up to `max_buffered_frame_bytes`) and, for a transfer, the first
//! [`MESSAGE_HEAD_BYTES`] of its message (never a whole message).
//!
//! A direction is given to this decoder when it starts with an AMQP 1.0 protocol header, or,
//! seen from its middle, when AMQP 1.0 frames are found in it by their structure
//! (`crate::proto::dispatch`, `crate::proto::detect::mid_stream`). The protocol header comes
//! again when the SASL layer ends (Part 5 §5.3.2); a header for TLS (protocol id 2, Part 5 §5.2)
//! means the rest is encrypted.
//!
//! AMQP 1.0 frames carry no end marker, so after a capture gap that lands between frames (or
//! cuts a frame's start), a header that is no frame's, or from the start of a direction seen
//! from its middle, the decoder resynchronises by the rule that recognises AMQP 1.0 mid-stream
//! (`crate::proto::detect::amqp10_chain`: a chain of valid frame headers whose bodies start
//! with performatives): the first position where a chain starts is the next frame boundary, and
//! the bytes before it are skipped (one `resync-skipped` row per search). Held while the search
//! waits for more bytes: at most `resync_window_bytes`, since a chain never looks further.

use std::collections::VecDeque;

use super::parser::{
    parse_frame_header, performative_code, performative_name, Bad, FrameHeader, FrameKind, Need, FRAME_HEADER_LEN,
    PERFORMATIVE_PREFIX_LEN,
};
use crate::proto::amqp091::parser::{parse_protocol_header, PROTOCOL_HEADER_LEN};
use crate::anomaly::AnomalyKind;
use crate::limits::Limits;
use crate::proto::detect::{amqp10_chain, Found};
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
    /// Searching for a frame boundary: the bytes not yet judged are in `held`.
    Resync,
}

/// Bytes held by the search for a frame boundary, with the packet each chunk of them came in.
#[derive(Default)]
struct Held {
    bytes: Vec<u8>,
    /// Stream offset of `bytes[0]` (counted from the decoder's first byte).
    start: u64,
    /// (stream offset, packet) where each chunk with bytes still held starts.
    marks: VecDeque<(u64, u32)>,
}

impl Held {
    fn push(&mut self, bytes: &[u8], packet: u32) {
        if bytes.is_empty() {
            return;
        }
        let at = self.start + self.bytes.len() as u64;
        if self.marks.back().is_none_or(|m| m.1 != packet) || self.bytes.is_empty() {
            self.marks.push_back((at, packet));
        }
        self.bytes.extend_from_slice(bytes);
    }

    /// Drop the first `n` bytes.
    fn drop_front(&mut self, n: usize) {
        self.bytes.drain(..n);
        self.start += n as u64;
        // a mark is needed while bytes of its chunk (up to the next mark) are held
        while self.marks.len() > 1 && self.marks[1].0 <= self.start {
            self.marks.pop_front();
        }
        if self.bytes.is_empty() {
            self.marks.clear();
        }
    }

    /// Everything held, as (bytes, packet they came in) in order; `self` is left empty.
    fn take(&mut self) -> Vec<(Vec<u8>, u32)> {
        let bytes = std::mem::take(&mut self.bytes);
        let marks = std::mem::take(&mut self.marks);
        let start = self.start;
        self.start += bytes.len() as u64;
        let mut out = Vec::with_capacity(marks.len());
        for (i, &(at, packet)) in marks.iter().enumerate() {
            let from = at.saturating_sub(start) as usize;
            let to = marks.get(i + 1).map_or(bytes.len(), |m| (m.0 - start) as usize);
            if to > from {
                out.push((bytes[from..to].to_vec(), packet));
            }
        }
        out
    }
}

pub struct Decoder {
    state: State,
    /// The start of a header or frame not yet complete enough to read.
    buf: Vec<u8>,
    /// The packet of `buf`'s first byte.
    buf_packet: u32,
    frame_max: u64,
    /// What the search for a frame boundary holds (state `Resync`).
    held: Held,
    /// Bytes skipped by the current search, reported once it ends, and the packet where the
    /// boundary was lost.
    skip_pending: u64,
    skip_packet: u32,
    /// The largest frame a chain may claim (`resync_max_frame_bytes`, within the frame cap) and
    /// how far a chain may reach (`resync_window_bytes`).
    resync_max_frame: u64,
    resync_window: u64,
    /// The body start of the frame in progress ([`FrameSink::frame`]'s `body`).
    body: Vec<u8>,
    /// `body` cannot be had: its performative is oversized or lost octets to a capture gap.
    body_lost: bool,
    /// Performatives larger than this are not kept (`max_buffered_frame_bytes`).
    max_performative: u64,
    pub bytes_decoded: u64,
    pub bytes_skipped: u64,
    pub bytes_encrypted: u64,
    pub frames: u64,
}

impl Decoder {
    /// The decoder of a direction that starts with a protocol header.
    pub fn new(limits: &Limits) -> Self {
        Decoder {
            state: State::Header,
            buf: Vec::new(),
            buf_packet: 0,
            frame_max: limits.max_frame_bytes,
            held: Held::default(),
            skip_pending: 0,
            skip_packet: 0,
            resync_max_frame: limits.resync_max_frame_bytes.min(limits.max_frame_bytes),
            resync_window: limits.resync_window_bytes,
            body: Vec::new(),
            body_lost: false,
            max_performative: limits.max_buffered_frame_bytes,
            bytes_decoded: 0,
            bytes_skipped: 0,
            bytes_encrypted: 0,
            frames: 0,
        }
    }

    /// The decoder of a direction seen from its middle: no header is due, and its first frame
    /// boundary is searched for (as after a gap).
    pub fn mid_stream(limits: &Limits) -> Self {
        Decoder { state: State::Resync, ..Decoder::new(limits) }
    }

    pub fn encrypted(&self) -> bool {
        matches!(self.state, State::Encrypted { .. })
    }

    /// Feed in-order bytes that arrived in packet `data_packet`; frames they complete are
    /// attributed to `arrival_packet`.
    pub fn feed(&mut self, data: &[u8], data_packet: u32, arrival_packet: u32, sink: &mut impl FrameSink) {
        self.run(data, data_packet, arrival_packet, sink);
        self.resync(false, arrival_packet, sink);
    }

    /// Decode `data` from where the decoder stands; while it searches for a frame boundary, the
    /// bytes are held for [`Decoder::resync`].
    fn run(&mut self, data: &[u8], data_packet: u32, arrival_packet: u32, sink: &mut impl FrameSink) {
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
                State::Resync => {
                    self.held.push(rest, data_packet);
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
        if header.is_ok_and(|h| h.is_some()) {
            self.buf.clear();
        }
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
                self.lose(packet);
            }
            _ => {
                // its octets are searched for a frame boundary, as any after a bad header
                sink.anomaly(AnomalyKind::ProtocolHeader, packet, PROTOCOL_HEADER_LEN as u64, "no AMQP 1.0 protocol header where one is due".into());
                self.lose(packet);
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

    /// The boundary is lost (in `packet`): what `buf` holds, and the bytes that follow, are
    /// searched for the next one.
    fn lose(&mut self, packet: u32) {
        if self.skip_pending == 0 {
            self.skip_packet = packet;
        }
        let buf = std::mem::take(&mut self.buf);
        self.held.push(&buf, self.buf_packet);
        self.state = State::Resync;
    }

    /// While searching for a frame boundary, look for one in what is held: found, the bytes
    /// before it are skipped and the rest decoded from it (which may lose the boundary again
    /// further on: then search again). `at_end`: no byte will follow what is held (a gap, the
    /// end); frames completed are attributed to `arrival_packet`.
    fn resync(&mut self, at_end: bool, arrival_packet: u32, sink: &mut impl FrameSink) {
        while self.state == State::Resync && !self.held.bytes.is_empty() {
            let b = &self.held.bytes;
            let mut at = 0;
            let found = loop {
                if at == b.len() {
                    break None;
                }
                match amqp10_chain(&b[at..], at_end, self.resync_max_frame, self.resync_window) {
                    Found::No => at += 1,
                    Found::Need => break None,
                    Found::Yes => break parse_frame_header(&b[at..]).ok().and_then(|h| h.ok()),
                }
            };
            if at > 0 {
                if self.skip_pending == 0 {
                    self.skip_packet = self.held.marks.front().map_or(arrival_packet, |m| m.1);
                }
                self.skip_pending += at as u64;
                self.bytes_skipped += at as u64;
                self.held.drop_front(at);
            }
            let Some(h) = found else { return };
            self.flush_skip(sink);
            self.state = State::Frames { sasl: h.kind == FrameKind::Sasl };
            for (bytes, packet) in self.held.take() {
                self.run(&bytes, packet, arrival_packet, sink);
            }
        }
    }

    /// The `resync-skipped` row of the search that just ended.
    fn flush_skip(&mut self, sink: &mut impl DecodeSink) {
        if self.skip_pending > 0 {
            let n = self.skip_pending;
            sink.anomaly(AnomalyKind::ResyncSkipped, self.skip_packet, n, format!("{n} bytes of AMQP 1.0 skipped to find a frame boundary"));
            self.skip_pending = 0;
        }
    }

    /// Octets of the frame or header in progress already consumed.
    fn unfinished(&self) -> u64 {
        match self.state {
            State::Skip { ev, remaining, missing, .. } => ev.header.size as u64 - remaining - missing,
            _ => self.buf.len() as u64,
        }
    }

    /// `bytes` of the stream are missing from the capture (found out on `packet`'s arrival).
    /// What a search for a frame boundary holds is judged first: no byte will follow it.
    pub fn gap(&mut self, bytes: u64, packet: u32, sink: &mut impl FrameSink) {
        self.resync(true, packet, sink);
        match self.state {
            State::Encrypted { .. } | State::Resync => {}
            // inside a frame whose size is known: the next one still starts where it said
            State::Skip { ev, remaining, missing, sasl, keep } if remaining > bytes => {
                // octets of the body still to be kept are lost: the performative cannot be read
                if keep > 0 {
                    self.body_lost = true;
                }
                self.state = State::Skip { ev, remaining: remaining - bytes, missing: missing + bytes, sasl, keep: 0 };
            }
            // the hole ends exactly where the frame does
            State::Skip { ev, remaining, missing, sasl, keep } if remaining == bytes => {
                if keep > 0 {
                    self.body_lost = true;
                }
                self.emit(FrameEvent { packet, ..ev }, missing + bytes, sasl, sink);
            }
            _ => {
                // the frame in progress cannot be read: its bytes are skipped with the search's
                let n = self.unfinished();
                self.buf.clear();
                self.body.clear();
                self.body_lost = false;
                if self.skip_pending == 0 {
                    self.skip_packet = packet;
                }
                self.skip_pending += n;
                self.bytes_skipped += n;
                self.state = State::Resync;
            }
        }
    }

    /// End of stream: what a search holds is judged (no byte will follow), what is unfinished
    /// is counted as skipped and reported.
    pub fn finish(&mut self, packet: u32, sink: &mut impl FrameSink) {
        if let State::Encrypted { packet: first } = self.state {
            return report_encrypted(sink, first, self.bytes_encrypted);
        }
        self.resync(true, packet, sink);
        if self.state != State::Resync {
            let n = self.unfinished();
            if n > 0 {
                self.bytes_skipped += n;
                sink.anomaly(AnomalyKind::IncompleteFrame, packet, n, format!("{n} bytes of an unfinished AMQP 1.0 frame at the end of the capture"));
            }
        }
        self.flush_skip(sink);
        self.buf.clear();
        self.state = State::Resync;
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

    fn names(seen: &Seen) -> Vec<&'static str> {
        seen.frames.iter().map(|f| f.2).collect()
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
        d.gap(3, 2, &mut seen);
        d.feed(&s[8 + 8 + 15..], 3, 3, &mut seen);
        assert_eq!((seen.frames.len(), &seen.bodies[..]), (1, &[None][..]));
    }

    #[test]
    fn after_a_gap_between_frames_the_next_chain_is_the_boundary() {
        let mut s = b"AMQP\x00\x01\x00\x00".to_vec();
        s.extend(frame(0, 0, &[0x00, 0x53, 0x10, 0x45]));
        let limits = Limits::default();
        let mut d = Decoder::new(&limits);
        let mut seen = Seen::default();
        d.feed(&s, 1, 1, &mut seen);
        d.gap(100, 2, &mut seen);
        // the gap lands between frames: the bytes after it start with a frame, no byte skipped
        let more = amqp_frames();
        d.feed(&more, 3, 3, &mut seen);
        d.finish(3, &mut seen);
        assert_eq!(names(&seen), ["open", "open", "begin", "transfer", "empty", "close"]);
        assert_eq!(seen.anomalies, []);
        assert_eq!((d.bytes_decoded, d.bytes_skipped), (s.len() as u64 + more.len() as u64, 0));
    }

    #[test]
    fn a_gap_that_cuts_a_frame_start_skips_to_the_next_chain() {
        // the gap takes a begin frame's header: its 4 remaining octets, then the frames after it
        let begin = frame(0, 1, &[0x00, 0x53, 0x11, 0x45]);
        let mut after = begin[8..].to_vec();
        let rest = amqp_frames();
        after.extend(&rest);
        let limits = Limits::default();
        for at in 0..=after.len() {
            let mut d = Decoder::new(&limits);
            let mut seen = Seen::default();
            d.feed(b"AMQP\x00\x01\x00\x00", 1, 1, &mut seen);
            d.feed(&begin[..3], 2, 2, &mut seen);
            d.gap(5, 3, &mut seen);
            d.feed(&after[..at], 3, 3, &mut seen);
            d.feed(&after[at..], 4, 4, &mut seen);
            d.finish(4, &mut seen);
            assert_eq!(names(&seen), ["open", "begin", "transfer", "empty", "close"], "cut at {at}");
            assert_eq!(seen.anomalies, [(AnomalyKind::ResyncSkipped, 3 + 4)], "cut at {at}");
            assert_eq!((d.bytes_decoded, d.bytes_skipped), (8 + rest.len() as u64, 7));
        }
    }

    #[test]
    fn a_lone_frame_is_taken_only_when_it_ends_where_the_stream_does() {
        let limits = Limits::default();
        let close = frame(0, 0, &[0x00, 0x53, 0x18, 0x45]);
        // mid-stream, 5 stray octets then a close frame that ends the capture: one frame in a
        // row, but nothing can follow it
        let mut s = vec![0xff, 1, 2, 3, 4];
        s.extend(&close);
        let mut d = Decoder::mid_stream(&limits);
        let mut seen = Seen::default();
        d.feed(&s, 1, 1, &mut seen);
        assert_eq!(seen.frames, [], "more may follow: not decided yet");
        d.finish(1, &mut seen);
        assert_eq!(names(&seen), ["close"]);
        assert_eq!(seen.anomalies, [(AnomalyKind::ResyncSkipped, 5)]);
        // the same followed by 3 octets that are no header: no chain, all skipped
        s.extend([9, 9, 9]);
        let mut d = Decoder::mid_stream(&limits);
        let mut seen = Seen::default();
        d.feed(&s, 1, 1, &mut seen);
        d.finish(1, &mut seen);
        assert_eq!(seen.frames, []);
        assert_eq!(seen.anomalies, [(AnomalyKind::ResyncSkipped, s.len() as u64)]);
        assert_eq!((d.bytes_decoded, d.bytes_skipped), (0, s.len() as u64));
    }

    #[test]
    fn a_stream_seen_from_its_middle_starts_at_the_first_chain_however_cut() {
        let limits = Limits::default();
        // the tail of a transfer's message (no header fits it: SIZE 0x07070707 is over the cap),
        // then a SASL layer's end and the AMQP frames
        let mut s = vec![7u8; 40];
        s.extend(frame(1, 0, &[0x00, 0x53, 0x44, 0xc0, 3, 1, 0x50, 0]));
        s.extend(b"AMQP\x00\x01\x00\x00");
        s.extend(amqp_frames());
        let expect = ["sasl-outcome", "open", "begin", "transfer", "empty", "close"];
        let decode_cut = |chunks: &[&[u8]]| {
            let mut d = Decoder::mid_stream(&limits);
            let mut seen = Seen::default();
            for (i, c) in chunks.iter().enumerate() {
                d.feed(c, i as u32 + 1, i as u32 + 1, &mut seen);
            }
            d.finish(chunks.len() as u32, &mut seen);
            (seen, d)
        };
        let (whole, d) = decode_cut(&[&s]);
        assert_eq!(names(&whole), expect);
        assert_eq!(whole.headers, [*b"\x00\x01\x00\x00"], "the SASL layer's end hands over to the AMQP header");
        assert_eq!(whole.anomalies, [(AnomalyKind::ResyncSkipped, 40)]);
        assert_eq!((d.bytes_decoded, d.bytes_skipped), (s.len() as u64 - 40, 40));
        let bytes: Vec<&[u8]> = s.chunks(1).collect();
        let (cut, _) = decode_cut(&bytes);
        assert_eq!(names(&cut), expect);
        // the sasl-outcome starts in packet 41 and is decoded when the protocol header after
        // it (its chain's next link) is in, 16 + 8 octets later
        assert_eq!((cut.frames[0].3, cut.frames[0].4), (41, 40 + 16 + 8));
        assert_eq!(cut.anomalies, whole.anomalies);
        for at in 1..s.len() {
            let (two, _) = decode_cut(&[&s[..at], &s[at..]]);
            assert_eq!(names(&two), expect, "cut at {at}");
            assert_eq!(two.anomalies, whole.anomalies, "cut at {at}");
        }
    }

    #[test]
    fn amqp_0_9_1_bytes_and_random_bytes_are_skipped_whole() {
        let limits = Limits::default();
        // AMQP 0-9-1 frames (§4.2.3: type, channel, size, payload, 0xCE): basic.ack, a body, a
        // heartbeat; read as AMQP 1.0, their SIZE octets claim 16 MiB and more
        let mut s = vec![1, 0, 1, 0, 0, 0, 13, 0, 60, 0, 80, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0xce];
        s.extend([3, 0, 1, 0, 0, 0, 4, b'b', b'o', b'd', b'y', 0xce, 8, 0, 0, 0, 0, 0, 0, 0xce]);
        // xorshift bytes
        let mut x = 0x2545_f491_4f6c_dd1du64;
        s.extend((0..20_000).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        }));
        let mut d = Decoder::mid_stream(&limits);
        let mut seen = Seen::default();
        d.feed(&s, 1, 1, &mut seen);
        d.finish(1, &mut seen);
        assert_eq!(seen.frames, []);
        assert_eq!((d.bytes_decoded, d.bytes_skipped), (0, s.len() as u64));
        assert_eq!(seen.anomalies, [(AnomalyKind::ResyncSkipped, s.len() as u64)]);
    }

    #[test]
    fn a_gap_that_ends_exactly_at_a_frame_end_keeps_the_boundary() {
        let limits = Limits::default();
        let mut transfer = vec![0x00, 0x53, 0x14, 0x45];
        transfer.extend([9u8; 100]);
        let f = frame(0, 1, &transfer);
        let mut d = Decoder::new(&limits);
        let mut seen = Seen::default();
        d.feed(b"AMQP\x00\x01\x00\x00", 1, 1, &mut seen);
        d.feed(&f[..20], 2, 2, &mut seen);
        d.gap(f.len() as u64 - 20, 3, &mut seen);
        d.feed(&frame(0, 0, &[0x00, 0x53, 0x18, 0x45]), 3, 3, &mut seen);
        d.finish(3, &mut seen);
        assert_eq!(names(&seen), ["transfer", "close"]);
        assert_eq!(seen.anomalies, []);
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
        d.gap(100, 2, &mut seen);
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
