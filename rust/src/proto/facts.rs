//! What the protocol decoders learn about a connection, kept with its conversation
//! (`crate::flow::conn::Stream::info`) and read by the connections table: the protocol it
//! speaks, AMQP 0-9-1's handshake (the negotiated frame_max holds the decoders to it), counts,
//! and the message bodies being collected.

use crate::output::bodies::PendingBody;

/// The protocol a connection speaks, as the connections table names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Amqp091,
    Amqp10,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Amqp091 => "0-9-1",
            Protocol::Amqp10 => "1.0",
        }
    }
}

/// What the connection's handshake says, allocated when the first connection.* method of the
/// stream is decoded (most of a SYN flood's conversations never get one).
#[derive(Default)]
pub(crate) struct Handshake {
    pub(crate) frame_max: Option<u64>,
    pub(crate) channel_max: Option<u64>,
    pub(crate) heartbeat: Option<u64>,
    /// Values from connection.tune-ok take precedence over connection.tune.
    pub(crate) tune_ok_seen: bool,
    pub(crate) vhost: Option<String>,
    pub(crate) user: Option<String>,
    pub(crate) mechanism: Option<String>,
    pub(crate) client_product: Option<String>,
    pub(crate) client_version: Option<String>,
    pub(crate) client_platform: Option<String>,
    pub(crate) connection_name: Option<String>,
    pub(crate) server_product: Option<String>,
    pub(crate) server_version: Option<String>,
    /// AMQP 1.0: each side's open idle-time-out (milliseconds), index 0 sent by endpoint A.
    pub(crate) idle_timeout_ms: [Option<u64>; 2],
    /// AMQP 1.0: each side's open's `connection_name` property, or else its container-id
    /// (index 0 sent by endpoint A): the client's is the connection's name.
    pub(crate) amqp10_name: [Option<String>; 2],
}

#[derive(Default)]
pub(crate) struct ConnInfo {
    pub(crate) protocol_header_seen: bool,
    /// What a direction's bytes chose, by header or frame structure (`crate::proto::dispatch`):
    /// AMQP 1.0 when either did.
    pub(crate) protocol: Option<Protocol>,
    /// A tune-ok was decoded: the decoders' frame limit must follow it.
    pub(crate) frame_max_changed: bool,
    pub(crate) hs: Option<Box<Handshake>>,
    /// Messages whose body is being collected (only with bodies on; boxed: 8 bytes per
    /// conversation instead of an empty Vec's 24).
    #[allow(clippy::box_collection)]
    pub(crate) bodies: Option<Box<Vec<PendingBody>>>,
    pub(crate) frames: u64,
    /// What an AMQP 1.0 connection's frames leave for the frames that follow
    /// (`crate::proto::amqp10::deliveries`); boxed, made at its first transfer.
    pub(crate) amqp10: Option<Box<crate::proto::amqp10::deliveries::Deliveries>>,
    pub(crate) anomalies: u64,
    /// Bytes cut by snaplen at the end of a packet, shown as `gap_before` of the next data
    /// packet of the same direction (index: sent by endpoint A).
    pub(crate) snaplen_gap: [u64; 2],
}

impl ConnInfo {
    pub(crate) fn frame_max(&self) -> Option<u64> {
        self.hs.as_ref().and_then(|h| h.frame_max)
    }
}
