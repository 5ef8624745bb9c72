//! Types the generated `spec.rs` is written in.

/// Wire types of AMQP 0-9-1 method arguments and content properties (§4.2.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgType {
    Octet,
    Short,
    Long,
    LongLong,
    ShortStr,
    LongStr,
    /// Consecutive bits share octets, low bit first (§4.2.5.2).
    Bit,
    Table,
    Timestamp,
}

/// Which frames-table column an argument fills.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    Skip,
    /// SASL responses/challenges and update-secret: decoded only to stay aligned, never stored.
    Secret,
    ConsumerTag,
    DeliveryTag,
    Redelivered,
    Exchange,
    RoutingKey,
    Multiple,
    Requeue,
    Mandatory,
    Queue,
    NoAck,
    PrefetchCount,
    PrefetchSize,
    Global,
    Active,
    NoWait,
    FrameMax,
    ChannelMax,
    Heartbeat,
    VirtualHost,
    Mechanism,
    ClientProperties,
    ServerProperties,
    ReplyCode,
    ReplyText,
    Reason,
    MessageCount,
    ConsumerCount,
}

pub struct MethodSpec {
    pub class_id: u16,
    pub method_id: u16,
    /// `class.method`, e.g. `basic.get-ok`.
    pub name: &'static str,
    /// Followed by a content header and bodies (§2.3.5.2).
    pub has_content: bool,
    pub args: &'static [(&'static str, ArgType, Slot)],
}

pub type PropertySpec = (&'static str, ArgType);
