//! Resource caps. Every cap is documented in docs/tables.md ("Resource caps") and can be set
//! from Python (`amqpcap.Limits`) and the command line (`--limit NAME=VALUE`). Past a cap,
//! input is recorded as an anomaly (or a warning), never buffered.

/// Files in one set read as a capture (`records.source_file` is an int16 index). Not settable.
pub const MAX_FILES: usize = i16::MAX as usize;

#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest frame accepted when frame_max was not negotiated in the capture (or was 0).
    pub max_frame_bytes: u64,
    /// Method and content-header frames are buffered whole up to this size (bodies never are).
    pub max_buffered_frame_bytes: u64,
    /// Out-of-order bytes held per direction while waiting for a hole to fill.
    pub max_reassembly_bytes: u64,
    /// Largest candidate frame considered while searching for a frame boundary.
    pub resync_max_frame_bytes: u64,
    /// Bytes held per direction while searching for a frame boundary.
    pub resync_window_bytes: u64,
    /// TCP conversations decoded; later ones are numbered but not decoded.
    pub max_streams: u64,
    /// A capture record claiming more than this ends reading.
    pub max_record_bytes: u64,
    /// Rows of the frames table; later frames are checked but not kept (`frame-limit`).
    pub max_frames: u64,
    /// A segment further than this from the next expected byte is out of window.
    pub max_seq_jump_bytes: u64,
    /// Unacknowledged received bytes kept per direction to compare retransmissions with.
    pub max_retained_bytes: u64,
    /// Message body bytes kept in all (only when bodies are asked for).
    pub max_body_bytes: u64,
    /// Rows of the anomalies table; later anomalies are summed per kind.
    pub max_anomalies: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_frame_bytes: 256 << 20,
            max_buffered_frame_bytes: 16 << 20,
            max_reassembly_bytes: 16 << 20,
            resync_max_frame_bytes: 1 << 20,
            resync_window_bytes: 2 << 20,
            max_streams: 250_000,
            max_record_bytes: 16 << 20,
            max_frames: 10_000_000,
            max_seq_jump_bytes: 64 << 20,
            max_retained_bytes: 16 << 10,
            max_body_bytes: 64 << 20,
            max_anomalies: 1_000_000,
        }
    }
}

impl Limits {
    /// The caps reassembly needs.
    pub fn reassembly(&self) -> crate::flow::tcp::reassembly::ReasmLimits {
        crate::flow::tcp::reassembly::ReasmLimits {
            max_buffered: self.max_reassembly_bytes,
            max_seq_jump: self.max_seq_jump_bytes,
            max_retained: self.max_retained_bytes,
        }
    }
}
