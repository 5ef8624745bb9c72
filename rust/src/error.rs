//! File-level errors: the capture cannot be used at all. Everything inside a usable capture
//! becomes an anomaly row instead.

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaptureError {
    /// Missing file, permission denied, I/O error.
    Unreadable(String),
    /// Zero bytes.
    Empty(String),
    /// Not a pcap/pcapng file (or a gzip file without one inside).
    NotACapture(String),
    /// A capture, but none of its packets can be read (unsupported link types only).
    Unsupported(String),
}

impl CaptureError {
    /// Stable kind names, mapped to Python exception classes by `amqpcap.errors`.
    pub fn kind(&self) -> &'static str {
        match self {
            CaptureError::Unreadable(_) => "unreadable",
            CaptureError::Empty(_) => "empty",
            CaptureError::NotACapture(_) => "not-a-capture",
            CaptureError::Unsupported(_) => "unsupported",
        }
    }
    pub fn message(&self) -> &str {
        match self {
            CaptureError::Unreadable(m)
            | CaptureError::Empty(m)
            | CaptureError::NotACapture(m)
            | CaptureError::Unsupported(m) => m,
        }
    }
}
