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

use crate::proto::amqp091::parser::{parse_protocol_header, tls_record, TLS_HANDSHAKE};

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
}
