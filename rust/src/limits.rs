//! Resource caps, declared once: the [`LIMITS`] table below gives each cap's name, default,
//! unit and meaning, and makes the [`Limits`] struct the pipeline reads. Python gets the table
//! from the binding (`_core.limits()`, which `amqpcap.Limits` is made from), the docs get it
//! through `tools/gen_limits_doc.py` (docs/tables.md, "Resource caps", checked by a test), the
//! command line sets a cap with `--limit NAME=VALUE`. Past a cap, input is recorded as an
//! anomaly (or a warning), never buffered.

/// Files in one set read as a capture (`records.source_file` is an int16 index). Not settable.
pub const MAX_FILES: usize = i16::MAX as usize;

/// One cap as the table declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub name: &'static str,
    pub default: u64,
    /// What the cap counts: "bytes" (a frame's, a record's, in all), "bytes per direction"
    /// (held by each direction of each connection), or the rows or things counted.
    pub unit: &'static str,
    /// What happens past it (the docs' "what happens past it" column).
    pub meaning: &'static str,
}

/// Declares the caps: the [`Limits`] struct with one field per cap (so that reading a cap in
/// the pipeline stays a field access), its defaults, [`Limits::set`] by name, and [`LIMITS`].
macro_rules! declare_limits {
    ($($name:ident: $default:expr, $unit:literal, $meaning:literal;)*) => {
        /// The caps in force for one decode (each field is the cap of the same name in
        /// [`LIMITS`], whose meaning is its doc).
        #[derive(Debug, Clone)]
        pub struct Limits {
            $(#[doc = $meaning] pub $name: u64,)*
        }

        impl Default for Limits {
            fn default() -> Self {
                Limits { $($name: $default,)* }
            }
        }

        impl Limits {
            /// Set the cap called `name`; an error for a name that is no cap's.
            pub fn set(&mut self, name: &str, value: u64) -> Result<(), String> {
                match name {
                    $(stringify!($name) => self.$name = value,)*
                    other => return Err(format!("unknown limit {other}")),
                }
                Ok(())
            }
        }

        /// Every cap, in the order the docs list them.
        pub const LIMITS: &[Limit] = &[
            $(Limit { name: stringify!($name), default: $default, unit: $unit, meaning: $meaning },)*
        ];
    };
}

declare_limits! {
    max_frame_bytes: 256 << 20, "bytes",
        "a frame header claiming more (and more than the negotiated frame_max) is `oversized-frame`; decoding resynchronises";
    max_buffered_frame_bytes: 16 << 20, "bytes",
        "method and content-header frames are buffered whole; larger ones are skipped as `oversized-frame` (bodies are never buffered)";
    max_reassembly_bytes: 16 << 20, "bytes per direction",
        "out-of-order data beyond it (each segment counted with 64 bytes of overhead) is given up (`reassembly-overflow`)";
    resync_max_frame_bytes: 1 << 20, "bytes",
        "when searching for a frame boundary, candidate frames larger than this are not considered";
    resync_window_bytes: 2 << 20, "bytes per direction",
        "bytes held while searching for a frame boundary; older ones are given up (`resync-skipped`)";
    max_streams: 250_000, "conversations",
        "TCP conversations (AMQP or not) beyond it get no state, are not decoded and not numbered (`stream-limit`); capture with `tcp port 5672` so that other traffic does not count";
    max_record_bytes: 16 << 20, "bytes",
        "a capture record claiming more ends reading (`capture-truncated` warning)";
    max_frames: 10_000_000, "frames",
        "later frames are still checked (so the connection's state stays right) but are not rows of `frames`; their bytes count as skipped (`frame-limit`, and a warning)";
    max_seq_jump_bytes: 64 << 20, "bytes",
        "a segment that far from the next expected byte (ahead and not acknowledged by the peer, or behind) is `out-of-window` and not used";
    max_retained_bytes: 16 << 10, "bytes per direction",
        "received bytes the peer has not acknowledged are kept up to this to compare retransmissions with (`retransmission-mismatch`); 0 turns the comparison off";
    max_body_bytes: 64 << 20, "bytes",
        "with bodies asked for, body bytes beyond it are not kept (rows get `complete` = false, and a warning)";
    max_anomalies: 1_000_000, "rows",
        "later anomalies get no row of their own: one row per kind sums them (`stream` `<NA>`, `bytes` their total, `detail` how many), so the whole-capture byte totals still add up (the per-connection ones no longer do)";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cap_is_set_by_its_name_and_no_other_name_is_one() {
        let mut l = Limits::default();
        for (i, cap) in LIMITS.iter().enumerate() {
            l.set(cap.name, 1000 + i as u64).unwrap();
        }
        assert_eq!((l.max_frame_bytes, l.max_anomalies), (1000, 1000 + LIMITS.len() as u64 - 1));
        assert!(l.set("max_everything", 1).is_err());
        let d = Limits::default();
        assert_eq!((d.max_streams, d.max_retained_bytes), (250_000, 16 << 10));
    }
}
