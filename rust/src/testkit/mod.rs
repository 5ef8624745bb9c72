//! The test kit (cargo feature `fuzzing`): fuzzing harnesses and the packet builders and table
//! checks they share. Each harness takes the fuzzer's bytes, drives one part of the core and
//! panics when something breaks: a panic of the core itself, or an invariant the tables
//! promise (docs/tables.md) or the component must keep. The cargo-fuzz targets in `rust/fuzz/`
//! are one-line wrappers; `rust/tests/fuzz_regressions.rs` replays saved inputs through the same
//! functions on stable Rust. docs/fuzzing.md describes the input formats.
//!
//! - `capture.rs`: `capture_reader`, `capture_merge`.
//! - `conversation.rs`: `tcp_reassembly`, and the segment and IPv4 packet builders.
//! - `decoders.rs`: `amqp_decoder`.
//! - `performatives.rs`: `amqp10_performatives`.
//! - `invariants.rs`: `check_output`, what every decode's tables must hold.

mod capture;
mod conversation;
mod decoders;
mod invariants;
mod performatives;

pub use capture::{capture_merge, capture_reader};
pub use conversation::{tcp_reassembly, Ack, Conversation, Segment, Seq};
pub use decoders::amqp_decoder;
pub use invariants::check_output;
pub use performatives::amqp10_performatives;

use crate::limits::Limits;

/// Caps small enough for fuzz-sized inputs to reach them. The resync window holds two
/// candidate frames of the largest resync size (body frame + the frame that must follow it),
/// so that, as with the defaults for any input below 2 MiB, dropping resync bytes never
/// depends on how the stream was segmented.
pub fn small_limits() -> Limits {
    Limits {
        max_frame_bytes: 16384,
        max_buffered_frame_bytes: 2048,
        max_reassembly_bytes: 4096,
        resync_max_frame_bytes: 1024,
        resync_window_bytes: 4096,
        max_streams: 3,
        max_record_bytes: 65536,
        // The caps added since (frames, anomalies, bodies, retained bytes, sequence jumps) keep
        // their defaults: past them the per-connection counts checked here are summed instead.
        ..Limits::default()
    }
}

// ---------------------------------------------------------------------------------------------
// capture_reader: bytes as a capture file, through the whole pipeline to tables.

#[cfg(test)]
mod tests {
    use super::*;
    use super::decoders::{plan, Event};

    #[test]
    fn plan_covers_the_stream() {
        assert_eq!(plan(&[], 10), vec![Event::Data(10)]);
        assert_eq!(plan(&[1, 0xF3], 7), vec![Event::Data(2), Event::Gap(8), Event::Data(2), Event::Data(3)]);
        assert_eq!(plan(&[0xE0, 0xFF], 0), vec![Event::FrameMax(0), Event::Gap(32768)]);
    }

    /// The format that make_seeds.py writes for tcp_reassembly seeds, byte by byte.
    #[test]
    fn conversation_format() {
        let mut b = Vec::new();
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        b.extend_from_slice(&64u16.to_le_bytes());
        // from B, Delta(-5), ack Abs(7), SYN|FIN, 10 bytes, no snaplen
        b.extend_from_slice(&[1, 1, 0xfb, 0xff, 3, 7, 0, 0, 0, 3, 10, 0, 0]);
        // from A, Next, ack All, no flags, 4095 bytes, snaplen 2
        b.extend_from_slice(&[0, 0, 1, 0, 0xff, 0x0f, 1, 2, 0]);
        let c = Conversation::parse(&b);
        assert_eq!(
            format!("{c:?}"),
            "Conversation { isn: [1, 4294967295], cap: 64, segments: [\
             Segment { from_b: true, seq: Delta(-5), ack: Abs(7), flags: 3, len: 10, snap: None }, \
             Segment { from_b: false, seq: Next, ack: All, flags: 0, len: 4095, snap: Some(2) }] }"
        );
        assert_eq!(c.encode(), b);
        // a cut-off last segment reads as if zeros followed
        assert_eq!(format!("{:?}", Conversation::parse(&b[..b.len() - 3]).segments[1]), "Segment { from_b: false, seq: Next, ack: All, flags: 0, len: 4095, snap: None }");
    }

    #[test]
    fn harnesses_accept_trivial_inputs() {
        for d in [&b""[..], b"\x01", b"\x01\x00AMQP\x00\x00\x09\x01", &[0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0], b"\x30\x00\x00\x00\x00\x08\x02\x01\x00\x00"] {
            capture_reader(d);
            tcp_reassembly(d);
            amqp_decoder(d);
        }
    }
}

