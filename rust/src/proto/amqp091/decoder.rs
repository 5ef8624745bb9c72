//! Per-direction AMQP frame decoder: turns the in-order byte stream of one TCP direction into
//! frames, never buffering content bodies, and resynchronises on the next valid frame after a
//! capture gap, a bad frame or a capture that starts mid-connection.
//!
//! The decoder only splits the stream into frames and checks their structure; what a frame
//! means is decided by the caller (the [`FrameSink`]).

use std::collections::VecDeque;

use super::parser::{
    check_candidate_with, parse_frame_header, tls_record, Candidate, FrameHeader, FrameType,
    Invalid, ParseError, FRAME_END, FRAME_HEADER_LEN, PROTOCOL_HEADER_LEN,
};
use crate::anomaly::AnomalyKind;
use crate::proto::detect::{detect, Detected};
use crate::limits::Limits;
use crate::proto::sink::{report_encrypted, DecodeSink};

/// A complete frame. `payload` is `None` for body frames (bodies are never kept).
pub struct FrameEvent<'a> {
    pub header: FrameHeader,
    pub payload: Option<&'a [u8]>,
    pub first_packet: u32,
    /// The packet whose arrival completed the frame.
    pub packet: u32,
}

/// Payload bytes a resynchronisation may decode per byte it skips (see the `Resync` state).
const RESYNC_WORK_PER_BYTE: u64 = 64;

pub trait FrameSink: DecodeSink {
    /// A complete frame. Returns false when the frame was not kept (the frames table is full):
    /// its bytes then count as skipped.
    fn frame(&mut self, ev: FrameEvent<'_>) -> bool;
    /// Payload bytes of a body frame on `channel`, in order, when bodies are kept
    /// ([`Decoder::keep_bodies`]); called before the frame's [`FrameSink::frame`].
    fn body(&mut self, _channel: u16, _bytes: &[u8]) {}
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing decoded yet: a protocol header may come first.
    Start { aligned: bool },
    /// At a frame boundary.
    Aligned,
    /// Inside a body frame: `remaining` payload bytes, then the frame-end octet. `missing`
    /// payload bytes fell into capture gaps (the frame stays aligned: its header gave the size).
    Body { header: FrameHeader, remaining: u64, first_packet: u32, missing: u64 },
    /// Searching for a frame boundary.
    Resync,
    /// The direction carries TLS (detected in `packet`): every byte is skipped, reported once
    /// as `tls-encrypted` at the end.
    Encrypted { packet: u32 },
}

pub struct Decoder {
    state: State,
    /// Bytes not yet consumed (a partial frame, or the window searched during resync).
    buf: Vec<u8>,
    /// Stream offset of `buf[0]` (or of the next byte when `buf` is empty).
    buf_offset: u64,
    /// (stream offset, packet) where the latest fed chunk started, and before it, where each
    /// earlier chunk with bytes still in `buf` started: to find a frame's first packet. The
    /// queue stays empty (unallocated) while frames end inside the packets that hold them.
    cur: (u64, u32),
    marks: VecDeque<(u64, u32)>,
    /// Bytes skipped by the current resync, reported once it ends.
    skip_pending: u64,
    skip_packet: u32,
    /// Frame size limit in force: the negotiated frame_max once known, else the cap.
    frame_max: u64,
    /// Hand body payloads to the sink ([`FrameSink::body`]).
    pub keep_bodies: bool,
    /// Payload bytes decoded to check candidates in the current resynchronisation.
    resync_work: u64,
    /// The capture has ended (see [`Decoder::finish`]).
    at_end: bool,
    /// Frames the sink did not keep, reported once at the end (`frame-limit`).
    unkept_frames: u64,
    unkept_bytes: u64,
    unkept_packet: u32,
    pub bytes_decoded: u64,
    pub bytes_skipped: u64,
    pub frames: u64,
    /// Bytes skipped because the direction is TLS (part of `bytes_skipped`).
    pub bytes_encrypted: u64,
}

impl Decoder {
    /// `aligned`: the stream is known to start at a frame boundary (its SYN was seen).
    pub fn new(aligned: bool, limits: &Limits) -> Self {
        Decoder {
            state: State::Start { aligned },
            buf: Vec::new(),
            buf_offset: 0,
            cur: (0, 0),
            marks: VecDeque::new(),
            skip_pending: 0,
            skip_packet: 0,
            frame_max: limits.max_frame_bytes,
            keep_bodies: false,
            resync_work: 0,
            at_end: false,
            unkept_frames: 0,
            unkept_bytes: 0,
            unkept_packet: 0,
            bytes_decoded: 0,
            bytes_skipped: 0,
            frames: 0,
            bytes_encrypted: 0,
        }
    }

    /// Called when connection.tune-ok fixes frame_max (0 = no limit, AMQP 0-9-1 §4.2.3... tune).
    pub fn set_frame_max(&mut self, frame_max: u64, limits: &Limits) {
        self.frame_max = if frame_max == 0 { limits.max_frame_bytes } else { frame_max.min(limits.max_frame_bytes) };
    }

    /// Feed in-order bytes that arrived in packet `data_packet`; frames they complete are
    /// attributed to `arrival_packet` (differs when reassembly released buffered data).
    pub fn feed(&mut self, data: &[u8], data_packet: u32, arrival_packet: u32, limits: &Limits, sink: &mut impl FrameSink) {
        if data.is_empty() {
            return;
        }
        let start = self.buf_offset + self.buf.len() as u64;
        if self.cur.1 != data_packet || self.cur == (0, 0) {
            if !self.buf.is_empty() {
                self.marks.push_back(self.cur);
            }
            self.cur = (start, data_packet);
        }
        if self.buf.is_empty() {
            // Fast path: decode straight from the packet, keep only an unfinished tail.
            let used = self.run(data, arrival_packet, limits, sink);
            self.buf_offset += used as u64;
            self.buf.extend_from_slice(&data[used..]);
        } else {
            let mut buf = std::mem::take(&mut self.buf);
            buf.extend_from_slice(data);
            let used = self.run(&buf, arrival_packet, limits, sink);
            buf.drain(..used);
            self.buf_offset += used as u64;
            self.buf = buf;
        }
        // Past `resync_window_bytes` the oldest buffered bytes are given up.
        if self.state == State::Resync && self.buf.len() as u64 > limits.resync_window_bytes {
            let drop = self.buf.len() - limits.resync_window_bytes as usize;
            self.skip(drop as u64, arrival_packet);
            self.buf.drain(..drop);
            self.buf_offset += drop as u64;
        }
        self.prune_marks();
    }

    /// The direction was recognised as TLS: its bytes are skipped, not decoded.
    pub fn encrypted(&self) -> bool {
        matches!(self.state, State::Encrypted { .. })
    }

    /// `bytes` of the stream are missing from the capture.
    pub fn gap(&mut self, bytes: u64, packet: u32) {
        if self.encrypted() {
            // still TLS after the hole; the missing bytes are counted by reassembly
            self.buf_offset += bytes;
            return;
        }
        if let State::Body { header, remaining, first_packet, missing } = self.state {
            if self.buf.is_empty() && remaining >= bytes {
                // The hole is inside a body we were skipping anyway: stay aligned. (Wireshark
                // loses the rest of the stream here; the frame-end check still guards us.)
                self.state = State::Body { header, remaining: remaining - bytes, first_packet, missing: missing + bytes };
                self.buf_offset += bytes;
                return;
            }
        }
        let unfinished = self.buf.len() as u64 + self.body_bytes_in_progress();
        if unfinished > 0 {
            // Reported together with whatever the resync skips next.
            self.skip(unfinished, packet);
        }
        self.buf_offset += self.buf.len() as u64 + bytes;
        self.buf.clear();
        self.state = State::Resync;
    }

    /// End of stream: whatever is unfinished is counted as skipped.
    pub fn finish(&mut self, packet: u32, limits: &Limits, sink: &mut impl FrameSink) {
        // Every byte is in now: a direction that started mid-connection and holds exactly one
        // whole TLS record (the decision waited for a second record header) is TLS.
        if matches!(self.state, State::Start { .. })
            && matches!(tls_record(&self.buf), Ok(Some(n)) if n == self.buf.len())
        {
            let n = self.buf.len() as u64;
            self.buf.clear();
            self.buf_offset += n;
            self.bytes_skipped += n;
            self.bytes_encrypted += n;
            self.state = State::Encrypted { packet };
        }
        if let State::Encrypted { packet: first } = self.state {
            return report_encrypted(sink, first, self.bytes_encrypted);
        }
        if self.state == State::Resync && !self.buf.is_empty() {
            // No more bytes will come: a candidate that needs more is no frame, and the frames
            // after it (a bogus header claiming a large size swallowed them) are still found.
            self.at_end = true;
            let mut buf = std::mem::take(&mut self.buf);
            let used = self.run(&buf, packet, limits, sink);
            buf.drain(..used);
            self.buf_offset += used as u64;
            self.buf = buf;
        }
        let unfinished = self.buf.len() as u64 + self.body_bytes_in_progress();
        if unfinished > 0 {
            if self.state == State::Resync {
                self.skip(unfinished, packet);
            } else {
                self.bytes_skipped += unfinished;
                sink.anomaly(
                    AnomalyKind::IncompleteFrame,
                    packet,
                    unfinished,
                    format!("{unfinished} bytes of an unfinished frame at the end of the capture"),
                );
            }
        }
        self.flush_skip(sink);
        if self.unkept_frames > 0 {
            let (n, b) = (self.unkept_frames, self.unkept_bytes);
            sink.anomaly(
                AnomalyKind::FrameLimit,
                self.unkept_packet,
                b,
                format!("{n} frames ({b} bytes) decoded after the frames table was full (max_frames) are not in it"),
            );
        }
        self.buf.clear();
        self.state = State::Resync;
    }

    /// Count a complete frame of `wire` stream bytes as decoded, or as skipped when the sink
    /// did not keep it.
    fn emitted(&mut self, kept: bool, wire: u64, packet: u32) {
        self.frames += 1;
        if kept {
            self.bytes_decoded += wire;
        } else {
            if self.unkept_frames == 0 {
                self.unkept_packet = packet;
            }
            self.unkept_frames += 1;
            self.unkept_bytes += wire;
            self.bytes_skipped += wire;
        }
    }

    /// Whether bytes already fed may still give frames at the end of the stream (`finish`
    /// decodes what resynchronisation holds: a candidate header that claimed more bytes than
    /// came may have swallowed real frames). Frames decoded before the end complete in a packet
    /// yet to come.
    pub fn may_decode_at_end(&self) -> bool {
        self.state == State::Resync && !self.buf.is_empty()
    }

    /// Why a frame whose header says `h` is not decoded but resynchronised over
    /// (`oversized-frame`): larger than the frame limit in force (the negotiated frame_max, AMQP
    /// 0-9-1 §4.2.3, within `max_frame_bytes`), or, a method or content-header frame, than the
    /// buffering cap (a body frame is never buffered, so any size within the limit goes).
    fn oversized(&self, h: FrameHeader, limits: &Limits) -> Option<String> {
        if h.size as u64 > self.frame_max {
            Some(format!("frame claims {} bytes, limit {}", h.size, self.frame_max))
        } else if h.frame_type != FrameType::Body && h.size as u64 > limits.max_buffered_frame_bytes {
            Some(format!("{} frame of {} bytes exceeds the buffering cap", h.frame_type.name(), h.size))
        } else {
            None
        }
    }

    /// Bytes of the body frame being skipped that were already consumed.
    fn body_bytes_in_progress(&self) -> u64 {
        match self.state {
            State::Body { header, remaining, missing, .. } => FRAME_HEADER_LEN as u64 + header.size as u64 - remaining - missing,
            _ => 0,
        }
    }

    fn skip(&mut self, bytes: u64, packet: u32) {
        if self.skip_pending == 0 {
            self.skip_packet = packet;
        }
        self.skip_pending += bytes;
        self.bytes_skipped += bytes;
    }

    fn flush_skip(&mut self, sink: &mut impl FrameSink) {
        if self.skip_pending > 0 {
            let n = self.skip_pending;
            sink.anomaly(AnomalyKind::ResyncSkipped, self.skip_packet, n, format!("{n} bytes skipped to find a frame boundary"));
            self.skip_pending = 0;
        }
    }

    fn prune_marks(&mut self) {
        // A mark is needed while bytes from its chunk (up to the next chunk's start) are held.
        while let Some(&(_, _)) = self.marks.front() {
            let next = self.marks.get(1).map_or(self.cur.0, |m| m.0);
            if next > self.buf_offset {
                break;
            }
            self.marks.pop_front();
        }
    }

    fn packet_at(&self, offset: u64) -> u32 {
        if offset >= self.cur.0 || self.marks.is_empty() {
            return self.cur.1;
        }
        // The last mark at or before `offset` (marks rise with the offset); a binary search, as
        // a resync window fed one byte per packet holds millions of marks.
        let i = self.marks.partition_point(|&(o, _)| o <= offset);
        self.marks.get(i.saturating_sub(1)).map_or(self.cur.1, |m| m.1)
    }

    /// Decode as much of `s` (starting at stream offset `buf_offset`) as possible; returns the
    /// number of bytes consumed. Each state reads from where the last one left off.
    fn run(&mut self, s: &[u8], packet: u32, limits: &Limits, sink: &mut impl FrameSink) -> usize {
        let base = self.buf_offset;
        let mut pos = 0usize;
        while pos < s.len() {
            let rest = &s[pos..];
            let step = match self.state {
                State::Body { header, remaining, first_packet, missing } => {
                    self.body_bytes(rest, Body { header, remaining, first_packet, missing }, packet, sink)
                }
                State::Encrypted { .. } => {
                    self.bytes_skipped += rest.len() as u64;
                    self.bytes_encrypted += rest.len() as u64;
                    Step::waits(rest.len())
                }
                State::Start { aligned } => self.stream_start(rest, aligned, packet, sink),
                State::Aligned => self.frame_at(rest, base + pos as u64, packet, limits, sink),
                State::Resync => self.resync(rest, packet, limits, sink),
            };
            pos += step.used;
            if !step.goes_on {
                return pos;
            }
        }
        pos
    }

    /// Payload bytes of the body frame `b` (never kept: handed to the sink when bodies are),
    /// then its frame-end octet.
    fn body_bytes(&mut self, rest: &[u8], b: Body, packet: u32, sink: &mut impl FrameSink) -> Step {
        let Body { header, first_packet, missing, .. } = b;
        let take = b.remaining.min(rest.len() as u64) as usize;
        if self.keep_bodies && take > 0 {
            sink.body(header.channel, &rest[..take]);
        }
        let remaining = b.remaining - take as u64;
        self.state = State::Body { header, remaining, first_packet, missing };
        if remaining > 0 || take == rest.len() {
            // more payload, or the frame-end octet, still to come
            return Step::waits(take);
        }
        let end = rest[take];
        if end == FRAME_END {
            self.state = State::Aligned;
            let kept = sink.frame(FrameEvent { header, payload: None, first_packet, packet });
            self.emitted(kept, header.wire_len() - missing, packet);
            Step::goes_on(take + 1)
        } else {
            // The body's bytes were consumed without being kept: they are skipped together
            // with whatever the resync skips from here.
            let consumed = FRAME_HEADER_LEN as u64 + header.size as u64 - missing;
            sink.anomaly(AnomalyKind::BadFrameEnd, packet, header.wire_len(), format!("body frame ends with 0x{end:02x}, not 0xce"));
            self.skip(consumed, packet);
            self.state = State::Resync;
            Step::goes_on(take)
        }
    }

    /// The direction's first bytes: TLS, a protocol header, or frames (`crate::proto::detect`).
    fn stream_start(&mut self, rest: &[u8], aligned: bool, packet: u32, sink: &mut impl FrameSink) -> Step {
        match detect(rest, aligned) {
            None => return Step::waits(0),
            Some(Detected::Tls) => self.state = State::Encrypted { packet },
            Some(Detected::Unknown) => self.state = if aligned { State::Aligned } else { State::Resync },
            Some(header) => {
                let version = [rest[4], rest[5], rest[6], rest[7]];
                self.bytes_decoded += PROTOCOL_HEADER_LEN as u64;
                // AMQP 1.0 (and 0-8, 0-9) are named, not decoded: the frames that follow fail
                // 0-9-1's checks and are resynchronised over (crate::proto::detect)
                if header != Detected::Amqp091 {
                    let detail = format!("protocol header for version {}-{}-{}-{}", version[0], version[1], version[2], version[3]);
                    sink.anomaly(AnomalyKind::ProtocolHeader, packet, PROTOCOL_HEADER_LEN as u64, detail);
                }
                sink.protocol_header(version, packet);
                self.state = State::Aligned;
                return Step::goes_on(PROTOCOL_HEADER_LEN);
            }
        }
        Step::goes_on(0)
    }

    /// The frame that starts `rest`, at stream offset `offset`: a body frame's header (its
    /// payload follows in state `Body`), or a whole method, header or heartbeat frame. A header
    /// that does not check out is resynchronised over.
    fn frame_at(&mut self, rest: &[u8], offset: u64, packet: u32, limits: &Limits, sink: &mut impl FrameSink) -> Step {
        let h = match parse_frame_header(rest) {
            Err(ParseError::Incomplete { .. }) => return Step::waits(0),
            Err(ParseError::Invalid(Invalid::UnknownFrameType(t))) => {
                sink.anomaly(AnomalyKind::UnknownFrameType, packet, 1, format!("frame type {t}"));
                return self.resync_from_here();
            }
            Err(ParseError::Invalid(_)) => return self.resync_from_here(),
            Ok(h) => h,
        };
        if let Some(detail) = self.oversized(h, limits) {
            sink.anomaly(AnomalyKind::OversizedFrame, packet, h.size as u64, detail);
            return self.resync_from_here();
        }
        let first_packet = self.packet_at(offset);
        if h.frame_type == FrameType::Body {
            self.state = State::Body { header: h, remaining: h.size as u64, first_packet, missing: 0 };
            return Step::goes_on(FRAME_HEADER_LEN);
        }
        let total = h.wire_len() as usize;
        if rest.len() < total {
            return Step::waits(0);
        }
        let end = rest[total - 1];
        if end != FRAME_END {
            sink.anomaly(AnomalyKind::BadFrameEnd, packet, total as u64, format!("{} frame ends with 0x{end:02x}, not 0xce", h.frame_type.name()));
            return self.resync_from_here();
        }
        let kept = sink.frame(FrameEvent { header: h, payload: Some(&rest[FRAME_HEADER_LEN..total - 1]), first_packet, packet });
        self.emitted(kept, total as u64, packet);
        Step::goes_on(total)
    }

    /// The frame boundary is lost where the decoder stands: search for the next one.
    fn resync_from_here(&mut self) -> Step {
        self.state = State::Resync;
        Step::goes_on(0)
    }

    /// Skip to the next frame boundary in `rest`, if it holds one.
    fn resync(&mut self, rest: &[u8], packet: u32, limits: &Limits, sink: &mut impl FrameSink) -> Step {
        let (skipped, found) = self.next_boundary(rest, limits);
        if skipped > 0 {
            self.skip(skipped as u64, packet);
        }
        if !found {
            return Step::waits(skipped);
        }
        self.flush_skip(sink);
        self.resync_work = 0;
        self.state = State::Aligned;
        Step::goes_on(skipped)
    }

    /// Where the next frame that checks out starts in `rest` (bytes to skip), and whether one
    /// was found (false: the bytes from there on need more to tell).
    fn next_boundary(&mut self, rest: &[u8], limits: &Limits) -> (usize, bool) {
        let limit = limits.resync_max_frame_bytes.min(self.frame_max) as u32;
        let mut i = 0usize;
        while i < rest.len() {
            // Decoding candidates' payloads may read at most RESYNC_WORK_PER_BYTE bytes per byte
            // skipped (plus a window's worth); past that, candidates are judged on their
            // structure alone. Input built so that every position is a large near-miss then
            // still costs linear time.
            let allowance = limits.resync_window_bytes + RESYNC_WORK_PER_BYTE * (self.skip_pending + i as u64);
            let deep = self.resync_work < allowance;
            match check_candidate_with(&rest[i..], limit, deep, &mut self.resync_work) {
                Candidate::No => i += 1,
                Candidate::NeedMore { .. } if self.at_end => i += 1,
                Candidate::NeedMore { .. } => return (i, false),
                // A body frame has no structure of its own: the next frame must check out too
                // before we trust it (at the end of the capture there may be none).
                Candidate::Frame(n) if rest[i] == FrameType::Body as u8 => {
                    match check_candidate_with(&rest[i + n as usize..], limit, deep, &mut self.resync_work) {
                        Candidate::Frame(_) => return (i, true),
                        Candidate::NeedMore { .. } if self.at_end => return (i, true),
                        Candidate::NeedMore { .. } => return (i, false),
                        Candidate::No => i += 1,
                    }
                }
                Candidate::Frame(_) => return (i, true),
            }
        }
        (i, false)
    }
}

/// The body frame whose payload is being read (the fields of `State::Body`).
#[derive(Clone, Copy)]
struct Body {
    header: FrameHeader,
    remaining: u64,
    first_packet: u32,
    missing: u64,
}

/// What one state did with the bytes it was given: `used` of them consumed; `goes_on`: the
/// decoder reads on from there (false: what is left waits for more bytes).
struct Step {
    used: usize,
    goes_on: bool,
}

impl Step {
    fn goes_on(used: usize) -> Self {
        Step { used, goes_on: true }
    }
    fn waits(used: usize) -> Self {
        Step { used, goes_on: false }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Rec {
        frames: Vec<(u8, u16, u32, u32, u32)>,
        anomalies: Vec<(AnomalyKind, u64)>,
        /// Frames after this many are not kept (0: all kept).
        keep: usize,
        bodies: Vec<u8>,
    }
    impl FrameSink for Rec {
        fn frame(&mut self, ev: FrameEvent<'_>) -> bool {
            if self.keep > 0 && self.frames.len() >= self.keep {
                return false;
            }
            self.frames.push((
                ev.header.frame_type as u8,
                ev.header.channel,
                ev.header.size,
                ev.first_packet,
                ev.packet,
            ));
            true
        }
        fn body(&mut self, _: u16, bytes: &[u8]) {
            self.bodies.extend_from_slice(bytes);
        }
    }
    impl DecodeSink for Rec {
        fn protocol_header(&mut self, _: [u8; 4], _: u32) {}
        fn anomaly(&mut self, kind: AnomalyKind, _: u32, bytes: u64, _: String) {
            self.anomalies.push((kind, bytes));
        }
    }

    use crate::proto::amqp091::parser::encode_frame as frame;
    use crate::proto::amqp091::parser::PROTOCOL_HEADER_091;

    fn ack(tag: u64) -> Vec<u8> {
        let mut p = vec![0, 60, 0, 80];
        p.extend_from_slice(&tag.to_be_bytes());
        p.push(0);
        frame(1, 1, &p)
    }

    #[test]
    fn byte_by_byte_equals_whole() {
        let limits = Limits::default();
        let mut stream = PROTOCOL_HEADER_091.to_vec();
        stream.extend(ack(1));
        stream.extend(frame(3, 1, &[7u8; 300]));
        stream.extend(frame(8, 0, &[]));
        let mut whole = Rec::default();
        let mut d = Decoder::new(true, &limits);
        d.feed(&stream, 1, 1, &limits, &mut whole);
        let mut bytes = Rec::default();
        let mut d2 = Decoder::new(true, &limits);
        for (i, b) in stream.iter().enumerate() {
            d2.feed(std::slice::from_ref(b), i as u32 + 1, i as u32 + 1, &limits, &mut bytes);
        }
        assert_eq!(whole.frames.len(), 3);
        let kinds = |r: &Rec| r.frames.iter().map(|f| (f.0, f.1, f.2)).collect::<Vec<_>>();
        assert_eq!(kinds(&whole), kinds(&bytes));
        assert_eq!(d2.bytes_decoded, stream.len() as u64);
        // the ack frame starts in byte 9 and ends in byte 8 + 21
        assert_eq!((bytes.frames[0].3, bytes.frames[0].4), (9, 29));
    }

    #[test]
    fn resync_after_gap_skips_garbage() {
        let limits = Limits::default();
        let mut d = Decoder::new(true, &limits);
        let mut r = Rec::default();
        let body = frame(3, 1, &[1u8; 100]);
        d.feed(&ack(1), 1, 1, &limits, &mut r);
        d.feed(&body[..20], 2, 2, &limits, &mut r);
        d.gap(50, 3);
        // the hole was inside the body: still aligned
        d.feed(&body[70..], 3, 3, &limits, &mut r);
        d.feed(&ack(2), 4, 4, &limits, &mut r);
        assert_eq!(r.frames.len(), 3);
        assert!(r.anomalies.is_empty());
        // a gap that cuts a method frame forces a resync
        let a = ack(3);
        d.feed(&a[..5], 5, 5, &limits, &mut r);
        d.gap(10, 6);
        let mut tail = a[15..].to_vec();
        tail.extend(ack(4));
        d.feed(&tail, 6, 6, &limits, &mut r);
        assert_eq!(r.frames.len(), 4);
        assert_eq!(r.anomalies, vec![(AnomalyKind::ResyncSkipped, 5 + (a.len() as u64 - 15))]);
    }

    fn tls(ctype: u8, len: usize) -> Vec<u8> {
        let mut r = vec![ctype, 3, 3, (len >> 8) as u8, len as u8];
        r.extend(std::iter::repeat(0x5a).take(len));
        r
    }

    #[test]
    fn tls_handshake_at_the_start_is_skipped_whole() {
        let limits = Limits::default();
        let mut stream = tls(22, 60);
        stream.extend(tls(23, 300));
        // fed byte by byte: detection waits for the record header, then every byte is skipped
        let mut r = Rec::default();
        let mut d = Decoder::new(true, &limits);
        for (i, b) in stream.iter().enumerate() {
            d.feed(std::slice::from_ref(b), i as u32 + 1, i as u32 + 1, &limits, &mut r);
        }
        assert!(d.encrypted());
        d.gap(100, 999);
        assert!(d.encrypted());
        d.finish(1000, &limits, &mut r);
        assert!(r.frames.is_empty());
        assert_eq!(r.anomalies, vec![(AnomalyKind::TlsEncrypted, stream.len() as u64)]);
        assert_eq!((d.bytes_decoded, d.bytes_skipped), (0, stream.len() as u64));
    }

    #[test]
    fn tls_needs_a_handshake_when_aligned_and_a_record_chain_when_not() {
        let limits = Limits::default();
        // aligned, application data first: not a TLS start (AMQP resyncs instead)
        let mut d = Decoder::new(true, &limits);
        d.feed(&tls(23, 10), 1, 1, &limits, &mut Rec::default());
        assert!(!d.encrypted());
        // unaligned: two chained records are TLS
        let mut two = tls(23, 10);
        two.extend(tls(23, 4));
        two.push(1);
        let mut d = Decoder::new(false, &limits);
        d.feed(&two, 1, 1, &limits, &mut Rec::default());
        assert!(d.encrypted());
        // unaligned: a header followed by something else is not
        let mut one = tls(23, 10);
        one.extend(ack(1));
        let mut d = Decoder::new(false, &limits);
        let mut r = Rec::default();
        d.feed(&one, 1, 1, &limits, &mut r);
        assert!(!d.encrypted());
        assert_eq!(r.frames.len(), 1);
    }

    #[test]
    fn bad_frame_end_resyncs() {
        let limits = Limits::default();
        let mut d = Decoder::new(true, &limits);
        let mut r = Rec::default();
        let mut bad = ack(1);
        *bad.last_mut().unwrap() = 0;
        bad.extend(ack(2));
        d.feed(&bad, 1, 1, &limits, &mut r);
        assert_eq!(r.frames.len(), 1);
        assert_eq!(r.anomalies[0].0, AnomalyKind::BadFrameEnd);
        assert_eq!(d.bytes_decoded + d.bytes_skipped, bad.len() as u64);
    }
    #[test]
    fn frames_not_kept_count_as_skipped() {
        let limits = Limits::default();
        let mut d = Decoder::new(true, &limits);
        let mut r = Rec { keep: 2, ..Default::default() };
        let hb = frame(8, 0, &[]);
        let stream: Vec<u8> = (0..5).flat_map(|_| hb.clone()).collect();
        d.feed(&stream, 1, 1, &limits, &mut r);
        d.finish(1, &limits, &mut r);
        assert_eq!(r.frames.len(), 2);
        assert_eq!(r.anomalies, vec![(AnomalyKind::FrameLimit, 24)]);
        assert_eq!((d.bytes_decoded, d.bytes_skipped), (16, 24));
    }

    #[test]
    fn bad_body_end_is_skipped_through_the_resync_row() {
        let limits = Limits::default();
        let mut d = Decoder::new(true, &limits);
        let mut r = Rec::default();
        let mut bad = frame(3, 1, &[7u8; 50]);
        *bad.last_mut().unwrap() = 0x55;
        let mut stream = bad.clone();
        stream.extend(ack(1));
        d.feed(&stream, 1, 1, &limits, &mut r);
        assert_eq!(r.frames.len(), 1);
        // the frame's wire length on the bad-frame-end row; the bytes skipped on the resync row
        assert_eq!(r.anomalies, vec![(AnomalyKind::BadFrameEnd, bad.len() as u64), (AnomalyKind::ResyncSkipped, bad.len() as u64)]);
        assert_eq!(d.bytes_decoded + d.bytes_skipped, stream.len() as u64);
    }

    #[test]
    fn bodies_are_handed_over_only_when_asked() {
        let limits = Limits::default();
        let mut stream = frame(3, 1, b"hello ");
        stream.extend(frame(3, 1, b"world"));
        for keep in [false, true] {
            let mut d = Decoder::new(true, &limits);
            d.keep_bodies = keep;
            let mut r = Rec::default();
            for (i, b) in stream.iter().enumerate() {
                d.feed(std::slice::from_ref(b), i as u32 + 1, i as u32 + 1, &limits, &mut r);
            }
            assert_eq!(r.frames.len(), 2);
            assert_eq!(r.bodies, if keep { b"hello world".to_vec() } else { vec![] });
        }
    }

    #[test]
    fn resync_decoding_work_is_bounded() {
        // Every 64 bytes a method frame header of a method with a field table (queue.declare),
        // its end octet in place, whose arguments fail only at their very end: each would be
        // decoded in full. The resync must still find the frame after them, and decode at most
        // its allowance.
        let limits = Limits::default();
        let size = 60_000u32;
        let block = 64usize;
        let mut garbage = vec![0u8; 400_000];
        for at in (0..garbage.len() - size as usize - 8).step_by(block) {
            garbage[at] = 1;
            garbage[at + 1..at + 3].copy_from_slice(&[0, 1]);
            garbage[at + 3..at + 7].copy_from_slice(&size.to_be_bytes());
            garbage[at + 7..at + 11].copy_from_slice(&[0, 50, 0, 10]);
            garbage[at + 7 + size as usize] = FRAME_END;
        }
        let mut stream = garbage.clone();
        stream.extend(ack(9));
        let mut d = Decoder::new(false, &limits);
        let mut r = Rec::default();
        d.feed(&stream, 1, 1, &limits, &mut r);
        d.finish(1, &limits, &mut r);
        assert_eq!(d.bytes_decoded + d.bytes_skipped, stream.len() as u64);
        assert!(r.frames.len() >= 1);
    }
}
