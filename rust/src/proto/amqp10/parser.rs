//! AMQP 1.0 framing (OASIS AMQP 1.0, Part 2 §2.3 "Framing"; SASL frames Part 5 §5.3.1): pure
//! functions over bytes that separate "need more bytes" ([`Need`]) from "bad bytes"
//! ([`Bad`]).
//!
//! A frame is an 8-byte header — SIZE (4 octets, the whole frame), DOFF (1 octet, where the
//! body starts, in 4-octet words, at least 2), TYPE (1 octet: 0 AMQP, 1 SASL), 2 octets of
//! type-specific data (the channel of an AMQP frame) — an extended header of `DOFF * 4 - 8`
//! octets, then the body. An AMQP frame's body is a performative (a described list whose
//! descriptor names it, Part 2 §2.7) and, for a transfer, message bytes; a frame without a body
//! is an empty frame, sent to keep the connection alive (Part 2 §2.4.5).

/// The frame header's octets (Part 2 §2.3.1).
pub const FRAME_HEADER_LEN: usize = 8;
/// DOFF's smallest valid value: the body starts right after the 8-octet header.
const MIN_DOFF: u8 = 2;
/// Octets of a body that name its performative at most: the described-type constructor 0x00,
/// then an ulong descriptor (0x80 and 8 octets; 0x53 and 1 octet for a smallulong).
pub const PERFORMATIVE_PREFIX_LEN: usize = 10;

/// TYPE octet values (Part 2 §2.3.2, Part 5 §5.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    Amqp,
    Sasl,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// The whole frame's octets, header included.
    pub size: u32,
    /// Octets from the frame's start to its body (DOFF * 4).
    pub body_offset: u32,
    pub kind: FrameKind,
    /// An AMQP frame's channel; 0 for SASL frames, which ignore it.
    pub channel: u16,
}

impl FrameHeader {
    pub fn body_len(&self) -> u32 {
        self.size - self.body_offset
    }
}

/// More bytes are needed: `needed` from the start of the slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Need(pub usize);

/// Why a frame header cannot be one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bad {
    /// SIZE below the header's 8 octets, DOFF below 2, or a body offset past SIZE.
    Layout { size: u32, doff: u8 },
    /// A TYPE octet that is neither AMQP (0) nor SASL (1).
    UnknownType(u8),
}

/// The frame header at the start of `b`.
pub fn parse_frame_header(b: &[u8]) -> Result<Result<FrameHeader, Bad>, Need> {
    if b.len() < FRAME_HEADER_LEN {
        return Err(Need(FRAME_HEADER_LEN));
    }
    let size = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let doff = b[4];
    if size < FRAME_HEADER_LEN as u32 || doff < MIN_DOFF || doff as u32 * 4 > size {
        return Ok(Err(Bad::Layout { size, doff }));
    }
    let kind = match b[5] {
        0 => FrameKind::Amqp,
        1 => FrameKind::Sasl,
        t => return Ok(Err(Bad::UnknownType(t))),
    };
    let channel = if kind == FrameKind::Amqp { u16::from_be_bytes([b[6], b[7]]) } else { 0 };
    Ok(Ok(FrameHeader { size, body_offset: doff as u32 * 4, kind, channel }))
}

/// The descriptor code of the performative (or SASL frame body) at the start of `body`, the
/// first octets of a frame's body (at most [`PERFORMATIVE_PREFIX_LEN`] are looked at): a
/// described type (constructor 0x00) with a numeric descriptor, smallulong (0x53) or ulong
/// (0x80) (Part 1 §1.2, §1.6.8). `None` when the body does not start so (a symbolic descriptor,
/// which no performative uses on the wire in practice, or bytes that are no described type);
/// `Err` while `body` is shorter than the descriptor.
pub fn performative_code(body: &[u8]) -> Result<Option<u64>, Need> {
    match body {
        [] => Err(Need(1)),
        [0x00] => Err(Need(2)),
        [0x00, 0x53] => Err(Need(3)),
        [0x00, 0x53, code, ..] => Ok(Some(*code as u64)),
        [0x00, 0x80, rest @ ..] if rest.len() < 8 => Err(Need(10)),
        [0x00, 0x80, rest @ ..] => Ok(Some(u64::from_be_bytes(rest[..8].try_into().unwrap()))),
        _ => Ok(None),
    }
}

/// The name of the performative or SASL body with descriptor `code` (Part 2 §2.7, Part 5
/// §5.3.3).
pub fn performative_name(code: u64) -> Option<&'static str> {
    Some(match code {
        0x10 => "open",
        0x11 => "begin",
        0x12 => "attach",
        0x13 => "flow",
        0x14 => "transfer",
        0x15 => "disposition",
        0x16 => "detach",
        0x17 => "end",
        0x18 => "close",
        0x40 => "sasl-mechanisms",
        0x41 => "sasl-init",
        0x42 => "sasl-challenge",
        0x43 => "sasl-response",
        0x44 => "sasl-outcome",
        _ => return None,
    })
}

/// The descriptor codes of a frame kind's bodies: AMQP frames carry performatives (Part 2
/// §2.7: open 0x10 to close 0x18), SASL frames the SASL bodies (Part 5 §5.3.3: sasl-mechanisms
/// 0x40 to sasl-outcome 0x44).
fn codes_of(kind: FrameKind) -> std::ops::RangeInclusive<u64> {
    match kind {
        FrameKind::Amqp => 0x10..=0x18,
        FrameKind::Sasl => 0x40..=0x44,
    }
}

/// Whether `body`, the first octets of a non-empty frame body of `body_len` octets, starts with
/// the descriptor of a body of frame kind `kind` (a performative or a SASL body): a described
/// type (constructor 0x00, Part 1 §1.2) whose descriptor is that body's code, as a smallulong
/// (0x53, then 1 octet) or ulong (0x80, then 8 octets), or its symbolic name as a sym8 (0xa3, a
/// length octet, then `amqp:<name>:list`: Part 2 §2.7 and Part 5 §5.3.3 name each
/// "amqp:open:list" and so on).
/// `Err(Need(n))` while fewer than the `n` octets that tell are in; false for a body too short
/// to hold the descriptor.
pub fn starts_with_performative(kind: FrameKind, body: &[u8], body_len: u32) -> Result<bool, Need> {
    let need = |n: usize| if (body_len as usize) < n { Ok(false) } else if body.len() < n { Err(Need(n)) } else { Ok(true) };
    if !need(2)? {
        return Ok(false);
    }
    let codes = codes_of(kind);
    match body[..2] {
        [0x00, 0x53] => Ok(need(3)? && codes.contains(&(body[2] as u64))),
        [0x00, 0x80] => Ok(need(10)? && codes.contains(&u64::from_be_bytes(body[2..10].try_into().unwrap()))),
        [0x00, 0xa3] => {
            if !need(3)? {
                return Ok(false);
            }
            let len = body[2] as usize;
            if !need(3 + len)? {
                return Ok(false);
            }
            let symbol = &body[3..3 + len];
            let Some(name) = symbol.strip_prefix(b"amqp:").and_then(|s| s.strip_suffix(b":list")) else { return Ok(false) };
            Ok(codes.into_iter().any(|c| performative_name(c).is_some_and(|n| n.as_bytes() == name)))
        }
        _ => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_header_is_read_or_needs_more_or_is_bad() {
        // an open performative's frame: 32 octets, DOFF 2, AMQP, channel 0
        let open = [0, 0, 0, 32, 2, 0, 0, 0, 0x00, 0x53, 0x10];
        assert_eq!(
            parse_frame_header(&open),
            Ok(Ok(FrameHeader { size: 32, body_offset: 8, kind: FrameKind::Amqp, channel: 0 }))
        );
        for n in 0..FRAME_HEADER_LEN {
            assert_eq!(parse_frame_header(&open[..n]), Err(Need(8)), "{n} octets");
        }
        // an empty frame (heartbeat): the header alone
        assert_eq!(parse_frame_header(&[0, 0, 0, 8, 2, 0, 0, 3]).unwrap().unwrap().body_len(), 0);
        // a SASL frame ignores the channel octets
        assert_eq!(parse_frame_header(&[0, 0, 0, 20, 2, 1, 9, 9]).unwrap().unwrap().channel, 0);
        assert_eq!(parse_frame_header(&[0, 0, 0, 7, 2, 0, 0, 0]), Ok(Err(Bad::Layout { size: 7, doff: 2 })));
        assert_eq!(parse_frame_header(&[0, 0, 0, 8, 1, 0, 0, 0]), Ok(Err(Bad::Layout { size: 8, doff: 1 })));
        assert_eq!(parse_frame_header(&[0, 0, 0, 8, 3, 0, 0, 0]), Ok(Err(Bad::Layout { size: 8, doff: 3 })));
        assert_eq!(parse_frame_header(&[0, 0, 0, 8, 2, 2, 0, 0]), Ok(Err(Bad::UnknownType(2))));
    }

    #[test]
    fn the_performative_is_named_by_its_descriptor() {
        assert_eq!(performative_code(&[0x00, 0x53, 0x14, 0xc0]), Ok(Some(0x14)));
        assert_eq!(performative_code(&[0x00, 0x80, 0, 0, 0, 0, 0, 0, 0, 0x18]), Ok(Some(0x18)));
        assert_eq!(performative_code(&[0x00, 0x80, 0, 0]), Err(Need(10)));
        assert_eq!(performative_code(&[0x00, 0x53]), Err(Need(3)));
        assert_eq!(performative_code(&[]), Err(Need(1)));
        assert_eq!(performative_code(&[0xa1, 3]), Ok(None));
        assert_eq!(performative_name(0x14), Some("transfer"));
        assert_eq!(performative_name(0x44), Some("sasl-outcome"));
        assert_eq!(performative_name(0x99), None);
    }

    #[test]
    fn a_body_starts_with_a_performative_of_its_frame_kind() {
        use FrameKind::{Amqp, Sasl};
        // transfer (0x14) as a smallulong, as a ulong, and by its symbolic name (Part 2 §2.7.5)
        assert_eq!(starts_with_performative(Amqp, &[0x00, 0x53, 0x14, 0xc0], 20), Ok(true));
        assert_eq!(starts_with_performative(Amqp, &[0x00, 0x80, 0, 0, 0, 0, 0, 0, 0, 0x14], 20), Ok(true));
        let mut sym = vec![0x00, 0xa3, 18];
        sym.extend_from_slice(b"amqp:transfer:list");
        assert_eq!(starts_with_performative(Amqp, &sym, 30), Ok(true));
        assert_eq!(starts_with_performative(Amqp, &sym[..10], 30), Err(Need(21)));
        // a SASL code in an AMQP frame and the other way round, a message section (0x75 data)
        assert_eq!(starts_with_performative(Amqp, &[0x00, 0x53, 0x40], 20), Ok(false));
        assert_eq!(starts_with_performative(Sasl, &[0x00, 0x53, 0x44], 20), Ok(true));
        assert_eq!(starts_with_performative(Sasl, &[0x00, 0x53, 0x10], 20), Ok(false));
        assert_eq!(starts_with_performative(Amqp, &[0x00, 0x53, 0x75], 20), Ok(false));
        assert_eq!(starts_with_performative(Amqp, b"\x00\xa3\x0eamqp:open:lisT", 20), Ok(false));
        // more octets needed, unless the body is shorter than the descriptor
        assert_eq!(starts_with_performative(Amqp, &[0x00], 20), Err(Need(2)));
        assert_eq!(starts_with_performative(Amqp, &[0x00, 0x80, 0], 20), Err(Need(10)));
        assert_eq!(starts_with_performative(Amqp, &[0x00, 0x53], 2), Ok(false));
        assert_eq!(starts_with_performative(Amqp, &[0x01, 0x53], 20), Ok(false));
    }
}
