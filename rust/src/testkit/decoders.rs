//! The amqp_decoder harness: one direction's byte stream, cut in arbitrary chunks, through
//! AMQP 0-9-1's and AMQP 1.0's decoders, which must report the same however it is cut.

use crate::proto::amqp091::decoder::{Decoder, FrameEvent, FrameSink};
use crate::proto::amqp10;
use crate::proto::sink::DecodeSink;
use crate::proto::amqp091::parser::{decode_content_header, decode_method, FrameType};
use crate::anomaly::AnomalyKind;
use crate::limits::Limits;
use crate::proto::detect::{amqp10_chain, mid_stream, Found, MidStream};
use super::small_limits;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Event {
    /// The next `n` stream bytes.
    Data(usize),
    /// `n` bytes missing from the capture.
    Gap(u64),
    /// connection.tune-ok fixed frame_max.
    FrameMax(u64),
}

const FRAME_MAX_CHOICES: [u64; 16] = [0, 1, 7, 8, 9, 12, 100, 1024, 4095, 4096, 8192, 65536, 131072, 1 << 20, u32::MAX as u64, u64::MAX];

/// Split `stream_len` bytes by the control bytes, used round and round: a byte c is a chunk of
/// c + 1 bytes, except on the first round, where 0xE0..=0xEF set frame_max and 0xF0..=0xFF are
/// a gap of 2^(c & 15) bytes.
pub(super) fn plan(ctrl: &[u8], stream_len: usize) -> Vec<Event> {
    let mut ev = Vec::new();
    if ctrl.is_empty() {
        ev.push(Event::Data(stream_len));
        return ev;
    }
    let mut left = stream_len;
    let mut first_round = true;
    'outer: loop {
        for &c in ctrl {
            match c {
                0xE0..=0xEF if first_round => ev.push(Event::FrameMax(FRAME_MAX_CHOICES[(c & 15) as usize])),
                0xF0..=0xFF if first_round => ev.push(Event::Gap(1 << (c & 15))),
                _ => {
                    if left == 0 {
                        if first_round {
                            continue;
                        }
                        break 'outer;
                    }
                    let n = (c as usize + 1).min(left);
                    ev.push(Event::Data(n));
                    left -= n;
                }
            }
        }
        first_round = false;
        if left == 0 {
            break;
        }
    }
    ev
}

/// What a decoder reported, without packet numbers (they depend on the chunking).
#[derive(Debug, Default, PartialEq, Eq)]
struct Seen {
    events: Vec<String>,
    /// Feeding packet number of the current chunk, and the first packet fed.
    packet: u32,
}

impl FrameSink for Seen {
    fn frame(&mut self, ev: FrameEvent<'_>) -> bool {
        assert_eq!(ev.packet, self.packet, "a frame completed by another packet than the one fed");
        assert!(ev.first_packet >= 1 && ev.first_packet <= ev.packet, "frame starts in packet {} after {}", ev.first_packet, ev.packet);
        let h = ev.header;
        assert_eq!(ev.payload.is_none(), h.frame_type == FrameType::Body, "bodies (only) are not kept");
        if let Some(p) = ev.payload {
            assert_eq!(p.len() as u64, h.size as u64);
        }
        // What the pipeline does with the payload: must not panic.
        let parsed = match (h.frame_type, ev.payload) {
            (FrameType::Method, Some(p)) => match decode_method(p) {
                Ok(a) => {
                    let props = (a.user(), a.client_property(b"product"), a.server_property(b"version"), a.client_property(b"connection_name"));
                    format!("{} {:?} {props:?}", a.name(), a.delivery_tag)
                }
                Err(e) => format!("{e:?}"),
            },
            (FrameType::Header, Some(p)) => match decode_content_header(p) {
                Ok(c) => format!("{c:?}"),
                Err(e) => format!("{e:?}"),
            },
            _ => String::new(),
        };
        self.events.push(format!("frame {:?} ch{} {}B {:?} {parsed}", h.frame_type, h.channel, h.size, ev.payload));
        true
    }
}

impl DecodeSink for Seen {
    fn protocol_header(&mut self, version: [u8; 4], packet: u32) {
        assert_eq!(packet, self.packet);
        self.events.push(format!("protocol header {version:?}"));
    }
    fn anomaly(&mut self, kind: AnomalyKind, packet: u32, bytes: u64, detail: String) {
        assert!(packet <= self.packet, "anomaly in packet {packet} not fed yet");
        self.events.push(format!("anomaly {} {bytes}B {detail}", kind.name()));
    }
}

impl amqp10::decoder::FrameSink for Seen {
    fn frame(&mut self, ev: amqp10::decoder::FrameEvent, body: Option<&[u8]>) {
        assert_eq!(ev.packet, self.packet, "a frame completed by another packet than the one fed");
        assert!(ev.first_packet >= 1 && ev.first_packet <= ev.packet, "frame starts in packet {} after {}", ev.first_packet, ev.packet);
        let h = ev.header;
        assert!(h.size >= 8 && h.body_offset >= 8 && h.body_offset <= h.size);
        // (the body kept is the frame's own start, whatever the segments: in the event)
        assert!(body.is_none_or(|b| b.len() as u32 <= h.body_len()));
        let kept = body.map(|b| b.iter().fold(b.len() as u64, |h, &x| h.wrapping_mul(31).wrapping_add(x as u64)));
        self.events.push(format!("frame {:?} ch{} {}B {} {kept:?}", h.kind, h.channel, h.size, amqp10::decoder::frame_name(&ev)));
    }
}

/// A direction's decoder as the harness drives it: AMQP 0-9-1's or AMQP 1.0's.
trait Fuzzed {
    fn feed(&mut self, data: &[u8], packet: u32, limits: &Limits, seen: &mut Seen);
    /// (`seen`: AMQP 1.0's decoder judges what its search holds at a gap, which may end frames)
    fn gap(&mut self, bytes: u64, packet: u32, seen: &mut Seen);
    fn set_frame_max(&mut self, frame_max: u64, limits: &Limits);
    fn finish(&mut self, packet: u32, limits: &Limits, seen: &mut Seen);
    /// Bytes decoded, bytes skipped, frames.
    fn counts(&self) -> [u64; 3];
}

impl Fuzzed for Decoder {
    fn feed(&mut self, data: &[u8], packet: u32, limits: &Limits, seen: &mut Seen) {
        Decoder::feed(self, data, packet, packet, limits, seen)
    }
    fn gap(&mut self, bytes: u64, packet: u32, _seen: &mut Seen) {
        Decoder::gap(self, bytes, packet)
    }
    fn set_frame_max(&mut self, frame_max: u64, limits: &Limits) {
        Decoder::set_frame_max(self, frame_max, limits)
    }
    fn finish(&mut self, packet: u32, limits: &Limits, seen: &mut Seen) {
        Decoder::finish(self, packet, limits, seen)
    }
    fn counts(&self) -> [u64; 3] {
        [self.bytes_decoded, self.bytes_skipped, self.frames]
    }
}

impl Fuzzed for amqp10::decoder::Decoder {
    fn feed(&mut self, data: &[u8], packet: u32, _limits: &Limits, seen: &mut Seen) {
        amqp10::decoder::Decoder::feed(self, data, packet, packet, seen)
    }
    fn gap(&mut self, bytes: u64, packet: u32, seen: &mut Seen) {
        amqp10::decoder::Decoder::gap(self, bytes, packet, seen)
    }
    /// AMQP 1.0's max-frame-size is not followed yet: the cap holds.
    fn set_frame_max(&mut self, _frame_max: u64, _limits: &Limits) {}
    fn finish(&mut self, packet: u32, _limits: &Limits, seen: &mut Seen) {
        amqp10::decoder::Decoder::finish(self, packet, seen)
    }
    fn counts(&self) -> [u64; 3] {
        [self.bytes_decoded, self.bytes_skipped, self.frames]
    }
}

/// Run a decoder made by `new` over the events; `merge` feeds runs of consecutive data chunks
/// at once.
fn decode<D: Fuzzed>(new: impl Fn() -> D, limits: &Limits, frame_max: Option<u64>, stream: &[u8], events: &[Event], merge: bool) -> (Seen, [u64; 3]) {
    let mut d = new();
    if let Some(fm) = frame_max {
        d.set_frame_max(fm, limits);
    }
    let mut seen = Seen::default();
    let mut pos = 0usize;
    let mut i = 0;
    while i < events.len() {
        match events[i] {
            Event::Data(n) => {
                let mut end = pos + n;
                if merge {
                    while let Some(Event::Data(m)) = events.get(i + 1) {
                        end += m;
                        i += 1;
                    }
                }
                seen.packet += 1;
                d.feed(&stream[pos..end], seen.packet, limits, &mut seen);
                pos = end;
            }
            Event::Gap(n) => {
                let packet = seen.packet.max(1);
                d.gap(n, packet, &mut seen)
            }
            Event::FrameMax(fm) => d.set_frame_max(fm, limits),
        }
        i += 1;
    }
    assert_eq!(pos, stream.len());
    seen.packet = seen.packet.max(1);
    d.finish(seen.packet, limits, &mut seen);
    (seen, d.counts())
}

/// The stream decoded chunk by chunk and with consecutive chunks merged: the same frames,
/// anomalies and byte counts, and every data byte decoded or skipped exactly once.
fn same_however_cut<D: Fuzzed>(new: impl Fn() -> D, limits: &Limits, frame_max: Option<u64>, stream: &[u8], events: &[Event]) {
    let (whole, whole_counts) = decode(&new, limits, frame_max, stream, events, true);
    let (chunked, chunked_counts) = decode(&new, limits, frame_max, stream, events, false);
    assert_eq!(whole.events, chunked.events, "decoding depends on segmentation");
    assert_eq!(whole_counts, chunked_counts, "byte counts depend on segmentation");
    let [decoded, skipped, _] = whole_counts;
    assert_eq!(decoded + skipped, stream.len() as u64, "bytes decoded {decoded} + skipped {skipped} != bytes fed {}", stream.len());
}

/// `data` = flags, k, k control bytes, then the byte stream of one direction. Flags: bit 0 the
/// stream starts at a frame boundary (SYN seen), bit 1 [`small_limits`] instead of the defaults,
/// bits 2-3 an initial frame_max (none, 0, 131072, 4096), bit 4 the AMQP 1.0 decoder instead of
/// AMQP 0-9-1's (the stream after an AMQP 1.0 protocol header, or the SASL one with bit 5; with
/// bit 6, a stream seen from its middle: no header, the decoder searching for its first frame
/// boundary as after a gap, and the mid-stream recogniser checked, [`recognised_however_cut`]). The
/// control bytes cut the stream into chunks and place gaps and frame_max changes ([`plan`]). The
/// stream is decoded twice, chunk by chunk and with consecutive chunks merged: frames,
/// anomalies and byte counts must be the same (the decoder does not depend on segmentation),
/// and every data byte is decoded or skipped exactly once.
pub fn amqp_decoder(data: &[u8]) {
    let [flags, k, rest @ ..] = data else { return };
    let (ctrl, stream) = rest.split_at((*k as usize).min(rest.len()));
    let aligned = flags & 1 != 0;
    let limits = if flags & 2 != 0 { small_limits() } else { Limits::default() };
    let frame_max = [None, Some(0), Some(131072), Some(4096)][((flags >> 2) & 3) as usize];
    if flags & 16 != 0 && flags & 64 != 0 {
        recognised_however_cut(stream, &limits);
        let events = plan(ctrl, stream.len());
        return same_however_cut(|| amqp10::decoder::Decoder::mid_stream(&limits), &limits, frame_max, stream, &events);
    }
    if flags & 16 != 0 {
        let mut s = if flags & 32 != 0 { b"AMQP\x03\x01\x00\x00".to_vec() } else { b"AMQP\x00\x01\x00\x00".to_vec() };
        s.extend_from_slice(stream);
        let events = plan(ctrl, s.len());
        return same_however_cut(|| amqp10::decoder::Decoder::new(&limits), &limits, frame_max, &s, &events);
    }
    let events = plan(ctrl, stream.len());
    same_however_cut(|| Decoder::new(aligned, &limits), &limits, frame_max, stream, &events);
}

/// The mid-stream recognisers (`crate::proto::detect`) do not depend on where the bytes so far
/// end: at each of the stream's first positions, the answer on any prefix of the bytes is "need
/// more" or the answer on all of them; and on all of them as the last bytes (a gap or the end
/// follows), never "need more". (A few positions, a scan of 256, some 64 prefixes: fuzzing speed.)
fn recognised_however_cut(stream: &[u8], limits: &Limits) {
    const SCANNED: usize = 256;
    let max_frame = limits.resync_max_frame_bytes.min(limits.max_frame_bytes);
    let window = limits.resync_window_bytes;
    for i in 0..stream.len().min(4) {
        let rest = &stream[i..];
        let all = amqp10_chain(rest, false, max_frame, window);
        assert_ne!(amqp10_chain(rest, true, max_frame, window), Found::Need, "a chain needs more at the end");
        let scan = mid_stream(rest, SCANNED, false, false, limits);
        assert_ne!(mid_stream(rest, SCANNED, true, false, limits).1, MidStream::Need, "the scan needs more at the end");
        for cut in (0..rest.len()).step_by((rest.len() / 64).max(13)) {
            let part = amqp10_chain(&rest[..cut], false, max_frame, window);
            assert!(part == Found::Need || part == all, "chain at {i} cut at {cut}: {part:?}, whole: {all:?}");
            let (at, found) = mid_stream(&rest[..cut], SCANNED, false, false, limits);
            let agrees = match found {
                MidStream::Need | MidStream::Neither => at <= scan.0,
                _ => (at, found) == scan,
            };
            assert!(agrees, "scan cut at {cut}: {found:?} at {at}, whole: {scan:?}");
        }
    }
}
