//! Stable anomaly kinds: the `anomalies.kind` column. Names never change once released
//! (documented in docs/tables.md).

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AnomalyKind {
    CaptureGap,
    TruncatedPacket,
    BadFrameEnd,
    UnknownFrameType,
    OversizedFrame,
    UnknownMethod,
    MalformedMethod,
    MalformedHeader,
    ResyncSkipped,
    IncompleteFrame,
    ProtocolHeader,
    ReassemblyOverflow,
    IpFragment,
    MalformedPacket,
    UnsupportedLinkType,
    StreamLimit,
    CaptureTruncated,
    TlsEncrypted,
    RetransmissionMismatch,
    OutOfWindow,
    FrameLimit,
    BadFrameHeader,
}

impl AnomalyKind {
    pub const ALL: [AnomalyKind; 22] = [
        AnomalyKind::CaptureGap,
        AnomalyKind::TruncatedPacket,
        AnomalyKind::BadFrameEnd,
        AnomalyKind::UnknownFrameType,
        AnomalyKind::OversizedFrame,
        AnomalyKind::UnknownMethod,
        AnomalyKind::MalformedMethod,
        AnomalyKind::MalformedHeader,
        AnomalyKind::ResyncSkipped,
        AnomalyKind::IncompleteFrame,
        AnomalyKind::ProtocolHeader,
        AnomalyKind::ReassemblyOverflow,
        AnomalyKind::IpFragment,
        AnomalyKind::MalformedPacket,
        AnomalyKind::UnsupportedLinkType,
        AnomalyKind::StreamLimit,
        AnomalyKind::CaptureTruncated,
        AnomalyKind::TlsEncrypted,
        AnomalyKind::RetransmissionMismatch,
        AnomalyKind::OutOfWindow,
        AnomalyKind::FrameLimit,
        AnomalyKind::BadFrameHeader,
    ];

    pub fn name(self) -> &'static str {
        match self {
            AnomalyKind::CaptureGap => "capture-gap",
            AnomalyKind::TruncatedPacket => "truncated-packet",
            AnomalyKind::BadFrameEnd => "bad-frame-end",
            AnomalyKind::UnknownFrameType => "unknown-frame-type",
            AnomalyKind::OversizedFrame => "oversized-frame",
            AnomalyKind::UnknownMethod => "unknown-method",
            AnomalyKind::MalformedMethod => "malformed-method",
            AnomalyKind::MalformedHeader => "malformed-header",
            AnomalyKind::ResyncSkipped => "resync-skipped",
            AnomalyKind::IncompleteFrame => "incomplete-frame",
            AnomalyKind::ProtocolHeader => "protocol-header",
            AnomalyKind::ReassemblyOverflow => "reassembly-overflow",
            AnomalyKind::IpFragment => "ip-fragment",
            AnomalyKind::MalformedPacket => "malformed-packet",
            AnomalyKind::UnsupportedLinkType => "unsupported-link-type",
            AnomalyKind::StreamLimit => "stream-limit",
            AnomalyKind::CaptureTruncated => "capture-truncated",
            // A TLS connection (TLS record layer where AMQP should start, RFC 8446 §5.1):
            // every byte of the direction is skipped unless a key log decrypted it.
            AnomalyKind::TlsEncrypted => "tls-encrypted",
            AnomalyKind::RetransmissionMismatch => "retransmission-mismatch",
            AnomalyKind::OutOfWindow => "out-of-window",
            AnomalyKind::FrameLimit => "frame-limit",
            // AMQP 1.0 (Part 2 §2.3.1): a SIZE below 8, a DOFF below 2, or a body offset past SIZE.
            AnomalyKind::BadFrameHeader => "bad-frame-header",
        }
    }
}
