//! What a TCP direction speaks, told from its first bytes: the one place a protocol is
//! recognised, so that a decoder can be chosen per connection. Pure functions over bytes that
//! separate "need more bytes" from an answer.
//!
//! Every AMQP version starts with an 8-byte protocol header "AMQP" + 4 octets (AMQP 0-9-1
//! §4.2.2: `AMQP 0 0 9 1`; AMQP 1.0 Part 2 §2.2 and Part 5 §5.1-§5.2: `AMQP id 1 0 0`, protocol
//! id 0 for AMQP itself, 2 for a TLS layer, 3 for SASL). AMQPS starts with a TLS record instead.
//! `crate::proto::dispatch` gives an AMQP 1.0 direction to AMQP 1.0's decoder and every other one to
//! AMQP 0-9-1's, whose own start names TLS (`tls-encrypted`) and other versions' headers
//! (`protocol-header`).
//!
//! A direction seen from its middle (a capture that starts mid-connection, or the bytes after a
//! capture gap before the protocol was told) has no header: its protocol is told by frame
//! structure ([`mid_stream`]): the first position where an AMQP 0-9-1 frame checks out as
//! 0-9-1's resynchronisation would take it, or where a chain of AMQP 1.0 frames starts
//! ([`amqp10_chain`], which AMQP 1.0's decoder resynchronises by too).
//!
//! How strong the AMQP 1.0 test is. One frame header whose body starts with a performative
//! passes by chance in random bytes about once in 2^38 positions: SIZE in 8..=1 MiB (2^-12),
//! TYPE 0 or 1 (2^-7), the body's 0x00 0x53 and a code of that frame type (2^-8 · 9/256, about
//! 2^-13) with DOFF almost free; an empty frame (SIZE = 4 · DOFF, both small) as rarely. A
//! capture of a few GB of message bodies would then hold such a position, so one header is not
//! enough; [`AMQP10_CHAIN_FRAMES`] = 2 frames, the second starting exactly where the first ends,
//! is about 2^-76 per position. AMQP 0-9-1's own structure cannot pass where it matters: a 0-9-1
//! frame starts with its type (1, 2, 3 or 8), which read as an AMQP 1.0 SIZE is at least 16 MiB,
//! over the 1 MiB that a candidate may claim (`resync_max_frame_bytes`); inside 0-9-1 payloads,
//! where field tables and content headers do hold small integers, the 1.0 test needs 0x00 0x53
//! 0x10..=0x18 (or 0x40..=0x44) at a body offset twice in a row. Measured on the AMQP 0-9-1
//! streams of fixtures/ (41 million positions, both directions of every connection, as
//! `tshark -z follow,tcp,raw` reassembles them): one frame passes at 91 positions, two in a row
//! at none. Where both tests could pass at one position (only with `resync_max_frame_bytes` of
//! 16 MiB or more), 0-9-1 is taken; and the earlier position wins, so a 0-9-1 direction is taken as 1.0 only if a 1.0 chain comes before
//! its first 0-9-1 frame boundary (in the rest of a message body the capture started in: a 0-9-1
//! message whose body holds AMQP 1.0 frames). Three frames would be stronger still, but two
//! frames of the largest size a candidate may claim must fit the resynchronisation window
//! (`resync_window_bytes`, 2 MiB by default) with the next header, and an idle AMQP 1.0
//! connection sends an empty frame only every half idle-timeout.

use crate::limits::Limits;
use crate::proto::amqp091::parser::{check_candidate_with, parse_protocol_header, tls_record, Candidate, FrameType, TLS_HANDSHAKE};
use crate::proto::amqp10::parser::{parse_frame_header, starts_with_performative, FrameKind, Need};

/// What the start of a direction is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detected {
    /// The AMQP 0-9-1 protocol header (`AMQP 0 0 9 1`).
    Amqp091,
    /// An AMQP 1.0 protocol header; `protocol_id`: 0 AMQP, 2 TLS, 3 SASL (Part 5 §5.1, §5.2).
    Amqp10 { protocol_id: u8 },
    /// Another "AMQP" header (e.g. 0-8, 0-9): the four octets after "AMQP".
    OtherAmqp([u8; 4]),
    /// TLS records (see [`tls_start`]).
    Tls,
    /// None of these: the bytes are AMQP frames (a capture that starts mid-connection) or
    /// another protocol.
    Unknown,
}

/// The AMQP 0-9-1 and 1.0 headers' octets after "AMQP".
const VERSION_091: [u8; 4] = [0, 0, 9, 1];

/// What `buf`, the first bytes of a direction, starts with; `None` while more bytes are needed
/// to tell. `aligned`: these are the direction's first bytes (its SYN was seen).
pub fn detect(buf: &[u8], aligned: bool) -> Option<Detected> {
    match tls_start(buf, aligned) {
        TlsStart::NeedMore => return None,
        TlsStart::Yes => return Some(Detected::Tls),
        TlsStart::No => {}
    }
    match parse_protocol_header(buf) {
        Err(_) => None,
        Ok(None) => Some(Detected::Unknown),
        Ok(Some(VERSION_091)) => Some(Detected::Amqp091),
        Ok(Some([id, 1, 0, 0])) => Some(Detected::Amqp10 { protocol_id: id }),
        Ok(Some(version)) => Some(Detected::OtherAmqp(version)),
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum TlsStart {
    Yes,
    No,
    NeedMore,
}

/// At the start of a direction (`aligned`: its SYN was seen, so this is its first byte) a
/// handshake record (ClientHello / ServerHello) means TLS. Mid-connection, a record header
/// followed by another one does. The answer must not depend on where the bytes so far happen to
/// end (the decoder gives the same result however the stream is segmented), so a record that
/// ends exactly there waits for the next header.
pub fn tls_start(b: &[u8], aligned: bool) -> TlsStart {
    match tls_record(b) {
        Err(_) => TlsStart::NeedMore,
        Ok(None) => TlsStart::No,
        Ok(Some(_)) if aligned => {
            if b[0] == TLS_HANDSHAKE {
                TlsStart::Yes
            } else {
                TlsStart::No
            }
        }
        Ok(Some(n)) if n >= b.len() => TlsStart::NeedMore,
        Ok(Some(n)) => match tls_record(&b[n..]) {
            Err(_) => TlsStart::NeedMore,
            Ok(None) => TlsStart::No,
            Ok(Some(_)) => TlsStart::Yes,
        },
    }
}

/// The protocol header that starts AMQP 1.0's AMQP layer (Part 2 §2.2).
const AMQP10_HEADER: [u8; 8] = *b"AMQP\x00\x01\x00\x00";

/// AMQP 1.0 frames in a row that [`amqp10_chain`] asks for.
pub const AMQP10_CHAIN_FRAMES: usize = 2;

/// Whether a frame (or a protocol's frames) start at a position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    Yes,
    No,
    /// More bytes are needed to tell.
    Need,
}

/// Whether AMQP 1.0 frames start at `b[0]`: [`AMQP10_CHAIN_FRAMES`] frame headers in a row, each
/// valid (Part 2 §2.3.1: SIZE ≥ 8, DOFF ≥ 2, 4 · DOFF ≤ SIZE, TYPE 0 AMQP or 1 SASL) with SIZE
/// at most `max_frame`, each followed by an empty body (an empty frame, Part 2 §2.4.5) or one
/// that starts with a performative of its frame type (Part 2 §2.7, Part 5 §5.3.3), each frame
/// but the last ending exactly where the next header starts; after a SASL frame, the AMQP
/// protocol header that ends the SASL layer (`AMQP 0 1 0 0`, Part 5 §5.3.2) may take the next
/// header's place (it ends the chain: what follows is the AMQP layer's). `at_end`: no byte will follow `b`
/// (the end of the capture, or a gap): what needs more is no chain, but a chain that ends exactly
/// at the end of `b` after at least one whole frame is one. Bytes past `window` from `b[0]` are
/// never looked at (a chain that needs them is none), so the answer never depends on where the
/// bytes so far happen to end, and whoever waits for it holds at most `window` bytes.
pub fn amqp10_chain(b: &[u8], at_end: bool, max_frame: u64, window: u64) -> Found {
    // what to answer when `n` bytes from `b[0]` are needed and not all in
    let need = |n: u64| if at_end || n > window { Found::No } else { Found::Need };
    // what lies past the window is not looked at (needing it makes no chain)
    let seen = b.len().min(window.min(usize::MAX as u64) as usize);
    let at_end = at_end && seen == b.len();
    let b = &b[..seen];
    let mut pos = 0u64;
    let mut sasl = false;
    for k in 0..AMQP10_CHAIN_FRAMES {
        let at = pos as usize;
        if k > 0 && at_end && at == b.len() {
            return Found::Yes;
        }
        if sasl {
            let have = &b[at.min(b.len())..];
            let n = have.len().min(AMQP10_HEADER.len());
            if have[..n] == AMQP10_HEADER[..n] {
                return if n == AMQP10_HEADER.len() { Found::Yes } else { need(pos + AMQP10_HEADER.len() as u64) };
            }
        }
        let h = match parse_frame_header(&b[at.min(b.len())..]) {
            Err(Need(n)) => return need(pos + n as u64),
            Ok(Err(_)) => return Found::No,
            Ok(Ok(h)) => h,
        };
        if h.size as u64 > max_frame {
            return Found::No;
        }
        sasl = h.kind == FrameKind::Sasl;
        if h.body_len() > 0 {
            let body_at = pos + h.body_offset as u64;
            let body = b.get(body_at as usize..).unwrap_or(&[]);
            match starts_with_performative(h.kind, body, h.body_len()) {
                Ok(true) => {}
                Ok(false) => return Found::No,
                Err(Need(n)) => return need(body_at + n as u64),
            }
        }
        pos += h.size as u64;
        if k + 1 < AMQP10_CHAIN_FRAMES && pos as usize > b.len() {
            return need(pos);
        }
    }
    Found::Yes
}

/// Whether an AMQP 0-9-1 frame starts at `b[0]` as AMQP 0-9-1's resynchronisation judges a
/// candidate (`crate::proto::amqp091::decoder`: the frame checks out, a body frame together with
/// the frame after it), its payload judged by structure only (method ids and frame end, not its
/// arguments): at least as willing as the decoder, so that what it would take for 0-9-1 is
/// never taken for AMQP 1.0.
fn amqp091_frame(b: &[u8], at_end: bool, max_frame: u32) -> Found {
    let judge = |b: &[u8]| check_candidate_with(b, max_frame, false, &mut 0);
    match judge(b) {
        Candidate::No => Found::No,
        Candidate::NeedMore { .. } if at_end => Found::No,
        Candidate::NeedMore { .. } => Found::Need,
        Candidate::Frame(n) if b[0] == FrameType::Body as u8 => match judge(&b[n as usize..]) {
            Candidate::Frame(_) => Found::Yes,
            Candidate::NeedMore { .. } if at_end => Found::Yes,
            Candidate::NeedMore { .. } => Found::Need,
            Candidate::No => Found::No,
        },
        Candidate::Frame(_) => Found::Yes,
    }
}

/// The protocol of a direction seen from its middle, told by frame structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MidStream {
    /// An AMQP 0-9-1 frame starts here.
    Amqp091,
    /// AMQP 1.0 frames start here ([`amqp10_chain`]).
    Amqp10,
    /// More bytes are needed to tell whether frames start here.
    Need,
    /// No frame starts at any position looked at.
    Neither,
}

/// The first of the first `positions` positions of `b` where frames start, and whose:
/// AMQP 0-9-1's when its frame checks out there (tried first), AMQP 1.0's when a chain does
/// ([`amqp10_chain`]); `amqp10_only`: the connection is known to speak AMQP 1.0 (its other
/// direction told), so 0-9-1 frames are not looked for. Stops at the first position that needs
/// more bytes to tell; returns (position, what is there), `(positions, Neither)` when no
/// position tells. `at_end`: no byte will follow `b`. The frame caps are `resync_max_frame_bytes`
/// (within `max_frame_bytes`) and, for an AMQP 1.0 chain, `resync_window_bytes`.
pub fn mid_stream(b: &[u8], positions: usize, at_end: bool, amqp10_only: bool, limits: &Limits) -> (usize, MidStream) {
    let max_frame = limits.resync_max_frame_bytes.min(limits.max_frame_bytes);
    for i in 0..positions.min(b.len()) {
        let rest = &b[i..];
        let old = if amqp10_only { Found::No } else { amqp091_frame(rest, at_end, max_frame.min(u32::MAX as u64) as u32) };
        let new = amqp10_chain(rest, at_end, max_frame, limits.resync_window_bytes);
        match (old, new) {
            (Found::Yes, _) => return (i, MidStream::Amqp091),
            (Found::Need, _) => return (i, MidStream::Need),
            (Found::No, Found::Yes) => return (i, MidStream::Amqp10),
            (Found::No, Found::Need) => return (i, MidStream::Need),
            (Found::No, Found::No) => {}
        }
    }
    (positions.min(b.len()), MidStream::Neither)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_of_every_amqp_version_and_tls_are_told_apart() {
        assert_eq!(detect(b"AMQP\x00\x00\x09\x01\x01\x00", true), Some(Detected::Amqp091));
        assert_eq!(detect(b"AMQP\x00\x01\x00\x00", true), Some(Detected::Amqp10 { protocol_id: 0 }));
        assert_eq!(detect(b"AMQP\x03\x01\x00\x00", true), Some(Detected::Amqp10 { protocol_id: 3 }));
        assert_eq!(detect(b"AMQP\x02\x01\x00\x00", false), Some(Detected::Amqp10 { protocol_id: 2 }));
        assert_eq!(detect(b"AMQP\x01\x01\x08\x00", true), Some(Detected::OtherAmqp([1, 1, 8, 0])));
        // a ClientHello record header (handshake, TLS 1.0 record version, 512 bytes)
        assert_eq!(detect(&[22, 3, 1, 2, 0, 1], true), Some(Detected::Tls));
        // an AMQP 0-9-1 method frame: neither a header nor TLS
        assert_eq!(detect(&[1, 0, 1, 0, 0, 0, 4], false), Some(Detected::Unknown));
    }

    #[test]
    fn a_prefix_needs_more_bytes_whatever_the_segmentation() {
        for n in 0..8 {
            assert_eq!(detect(&b"AMQP\x00\x00\x09\x01"[..n], true), None, "{n} bytes");
        }
        assert_eq!(detect(&[22, 3], true), None);
        assert_eq!(detect(b"AMQX", true), Some(Detected::Unknown));
    }

    /// An AMQP 1.0 frame (Part 2 §2.3.1): SIZE, DOFF 2, TYPE, channel, body.
    fn frame10(kind: u8, channel: u16, body: &[u8]) -> Vec<u8> {
        let mut f = ((8 + body.len()) as u32).to_be_bytes().to_vec();
        f.extend_from_slice(&[2, kind]);
        f.extend_from_slice(&channel.to_be_bytes());
        f.extend_from_slice(body);
        f
    }

    /// An AMQP 0-9-1 frame (§4.2.3): type, channel, size, payload, frame-end 0xCE.
    fn frame091(kind: u8, channel: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![kind];
        f.extend_from_slice(&channel.to_be_bytes());
        f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        f.extend_from_slice(payload);
        f.push(0xce);
        f
    }

    fn xorshift(n: usize, mut x: u64) -> Vec<u8> {
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    const MAX: u64 = 1 << 20;
    const WINDOW: u64 = 2 << 20;

    fn chain(b: &[u8], at_end: bool) -> Found {
        amqp10_chain(b, at_end, MAX, WINDOW)
    }

    #[test]
    fn two_amqp10_frames_in_a_row_are_a_chain() {
        // open (smallulong descriptor 0x10, Part 2 §2.7.1) then begin as a ulong (0x11, §2.7.2)
        let mut s = frame10(0, 0, &[0x00, 0x53, 0x10, 0xc0, 2, 1, 0x40]);
        s.extend(frame10(0, 1, &[0x00, 0x80, 0, 0, 0, 0, 0, 0, 0, 0x11, 0x45]));
        assert_eq!(chain(&s, false), Found::Yes);
        // two empty frames (heartbeats, Part 2 §2.4.5)
        let empties = [frame10(0, 0, &[]), frame10(0, 0, &[])].concat();
        assert_eq!(chain(&empties, false), Found::Yes);
        // a transfer by its symbolic descriptor then a disposition (0x15)
        let mut sym = vec![0x00, 0xa3, 18];
        sym.extend_from_slice(b"amqp:transfer:list");
        let t = [frame10(0, 3, &sym), frame10(0, 3, &[0x00, 0x53, 0x15, 0x45])].concat();
        assert_eq!(chain(&t, false), Found::Yes);
        // sasl-outcome (0x44, Part 5 §5.3.3.6), then the AMQP layer's header (Part 5 §5.3.2)
        let mut sasl = frame10(1, 0, &[0x00, 0x53, 0x44, 0xc0, 3, 1, 0x50, 0]);
        sasl.extend_from_slice(b"AMQP\x00\x01\x00\x00");
        assert_eq!(chain(&sasl, false), Found::Yes);
        // each prefix needs more; as the last bytes, only the first frame whole is a chain
        // (the chain reads the open's 15 octets, the begin's header and descriptor: 33)
        assert_eq!(chain(&s[..33], false), Found::Yes);
        for n in 0..33 {
            assert_eq!(chain(&s[..n], false), Found::Need, "{n} octets");
            let whole_first = n == 15;
            assert_eq!(chain(&s[..n], true), if whole_first { Found::Yes } else { Found::No }, "{n} octets at the end");
        }
        for n in 0..sasl.len() {
            assert_eq!(chain(&sasl[..n], false), Found::Need, "{n} octets");
        }
    }

    #[test]
    fn what_is_no_chain() {
        let open = frame10(0, 0, &[0x00, 0x53, 0x10, 0x45]);
        let close = frame10(0, 0, &[0x00, 0x53, 0x18, 0x45]);
        let pair = [open.clone(), close.clone()].concat();
        // a frame followed by bytes that are no header (SIZE 0x07070707)
        assert_eq!(chain(&[open.clone(), vec![7; 12]].concat(), false), Found::No);
        // a SASL code in an AMQP frame; a message section (data, 0x75) where a performative is due
        assert_eq!(chain(&[frame10(0, 0, &[0x00, 0x53, 0x41]), close.clone()].concat(), false), Found::No);
        assert_eq!(chain(&[frame10(0, 0, &[0x00, 0x53, 0x75]), close.clone()].concat(), false), Found::No);
        // TYPE 2, DOFF 1, a body offset past SIZE
        for (at, v) in [(5, 2), (4, 1), (4, 5)] {
            let mut bad = pair.clone();
            bad[at] = v;
            assert_eq!(chain(&bad, false), Found::No, "octet {at} = {v}");
        }
        // a SIZE over the cap, or a chain reaching past the window
        assert_eq!(amqp10_chain(&pair, false, 11, WINDOW), Found::No);
        // (the chain reads the open, the close's header and its 3 descriptor octets: 23)
        assert_eq!(amqp10_chain(&pair, false, MAX, 22), Found::No);
        assert_eq!(amqp10_chain(&pair, true, MAX, 22), Found::No);
        assert_eq!(amqp10_chain(&pair, false, MAX, 23), Found::Yes);
        // a whole frame ending at the window is no chain when more bytes follow
        assert_eq!(amqp10_chain(&pair, true, MAX, 12), Found::No);
    }

    #[test]
    fn amqp_0_9_1_and_random_bytes_hold_no_chain() {
        // connection.tune-ok, basic.publish with its content header and body, a heartbeat
        let mut s = frame091(1, 0, &[0, 10, 0, 31, 0, 0, 0, 2, 0, 0, 0, 0x3c]);
        s.extend(frame091(1, 1, &[0, 60, 0, 40, 0, 0, 0, 3, b'k', b'e', b'y', 0]));
        s.extend(frame091(2, 1, &[0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0x10, 0, 2]));
        s.extend(frame091(3, 1, b"body"));
        s.extend(frame091(8, 0, &[]));
        let random = xorshift(1 << 16, 0x9e37_79b9_7f4a_7c15);
        for bytes in [&s, &random] {
            for i in 0..bytes.len() {
                assert_ne!(chain(&bytes[i..], true), Found::Yes, "position {i}");
            }
        }
        // and the scan takes the 0-9-1 frames, from their first one on, for 0-9-1
        let mut cut = random[..100].to_vec();
        cut.extend(&s);
        let limits = Limits::default();
        let (at, found) = mid_stream(&cut, cut.len(), false, false, &limits);
        assert!(at <= 100 && found == MidStream::Amqp091, "{found:?} at {at}");
    }

    #[test]
    fn the_scan_finds_the_first_chain_or_waits() {
        let limits = Limits::default();
        let mut s = vec![0x07; 30];
        s.extend(frame10(0, 1, &[0x00, 0x53, 0x13, 0x45]));
        s.extend(frame10(0, 1, &[0x00, 0x53, 0x14, 0x45, 1, 2, 3]));
        assert_eq!(mid_stream(&s, s.len(), false, false, &limits), (30, MidStream::Amqp10));
        // fewer positions looked at: none tells
        assert_eq!(mid_stream(&s, 20, false, false, &limits), (20, MidStream::Neither));
        // cut inside the second frame's performative: position 30 waits
        assert_eq!(mid_stream(&s[..30 + 12 + 10], 100, false, false, &limits), (30, MidStream::Need));
        assert_eq!(mid_stream(&s[..30 + 12 + 10], 100, true, false, &limits), (52, MidStream::Neither));
        // a 0-9-1 body frame that claims more than is there waits, unless the connection is
        // known to speak AMQP 1.0
        let mut t = vec![3, 0, 1, 0, 0, 1, 0];
        t.extend(&s);
        assert_eq!(mid_stream(&t, t.len(), false, false, &limits), (0, MidStream::Need));
        assert_eq!(mid_stream(&t, t.len(), false, true, &limits), (37, MidStream::Amqp10));
    }
}
