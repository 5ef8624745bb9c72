//! The fields of AMQP 1.0 frame bodies: the performatives (Part 2 §2.7), the SASL frames (Part
//! 5 §5.3.3), the delivery states they carry (Part 3 §3.4), and the message sections a
//! transfer's payload starts with (Part 3 §3.2). Pure functions over a frame's body, built on
//! the type system (`types.rs`): nothing is copied, strings borrow the body.
//!
//! A performative is a composite type: a described list whose descriptor names it, its fields
//! the list's elements in the spec's order (Part 1 §1.4). Trailing fields may be left out and
//! any field may be null; either way the field is absent and takes the spec's default where the
//! spec gives one (noted field by field below), else is `None`. A mandatory field absent is
//! [`Bad::Missing`], a field of another type [`Bad::WrongType`]. Descriptors are accepted as
//! codes (`0x00 0x53 0x10`) or symbols (`amqp:open:list`) alike ([`DESCRIPTORS`]); a body with
//! a descriptor no performative has is [`Performative::Unknown`], not an error.
//!
//! Secrets: SASL's initial-response, challenge, response and additional-data carry credentials
//! or what authenticates with them. They are skipped, never kept in a value;
//! [`sasl_plain_authcid`] alone looks into a PLAIN initial-response, for the user name only.

use super::parser::Need;
use super::types::{decode_complete, Array, Bad, Descriptor, Elements, Encoded, Value};
use crate::proto::amqp091::parser::sasl_user;

/// Every descriptor this module reads: its code (domain 0, OASIS) and its symbolic name, as
/// the spec's type definitions declare them (Part 2 §2.7-2.8, Part 3 §3.2, §3.4-3.5, Part 4
/// §4.5, Part 5 §5.3.3).
pub const DESCRIPTORS: &[(u64, &str)] = &[
    (0x10, "amqp:open:list"),
    (0x11, "amqp:begin:list"),
    (0x12, "amqp:attach:list"),
    (0x13, "amqp:flow:list"),
    (0x14, "amqp:transfer:list"),
    (0x15, "amqp:disposition:list"),
    (0x16, "amqp:detach:list"),
    (0x17, "amqp:end:list"),
    (0x18, "amqp:close:list"),
    (0x1d, "amqp:error:list"),
    (0x23, "amqp:received:list"),
    (0x24, "amqp:accepted:list"),
    (0x25, "amqp:rejected:list"),
    (0x26, "amqp:released:list"),
    (0x27, "amqp:modified:list"),
    (0x28, "amqp:source:list"),
    (0x29, "amqp:target:list"),
    (0x30, "amqp:coordinator:list"),
    (0x33, "amqp:declared:list"),
    (0x34, "amqp:transactional-state:list"),
    (0x40, "amqp:sasl-mechanisms:list"),
    (0x41, "amqp:sasl-init:list"),
    (0x42, "amqp:sasl-challenge:list"),
    (0x43, "amqp:sasl-response:list"),
    (0x44, "amqp:sasl-outcome:list"),
    (0x70, "amqp:header:list"),
    (0x71, "amqp:delivery-annotations:map"),
    (0x72, "amqp:message-annotations:map"),
    (0x73, "amqp:properties:list"),
    (0x74, "amqp:application-properties:map"),
    (0x75, "amqp:data:binary"),
    (0x76, "amqp:amqp-sequence:list"),
    (0x77, "amqp:amqp-value:*"),
    (0x78, "amqp:footer:map"),
];

/// The code a descriptor stands for: its own, or the code of the symbol's name in
/// [`DESCRIPTORS`]; `None` for a name none has.
pub fn descriptor_code(d: Descriptor) -> Option<u64> {
    match d {
        Descriptor::Code(c) => Some(c),
        Descriptor::Symbol(s) => DESCRIPTORS.iter().find(|(_, name)| *name == s).map(|(c, _)| *c),
    }
}

/// A link endpoint's role (Part 2 §2.8.1: a boolean, false the sender).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Sender,
    Receiver,
}

/// Part 2 §2.8.2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SenderSettleMode {
    Unsettled,
    Settled,
    Mixed,
}

/// Part 2 §2.8.3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReceiverSettleMode {
    First,
    Second,
}

/// An error (Part 2 §2.8.14): its condition and description (its info map is not read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AmqpError<'a> {
    /// e.g. `amqp:not-found` (Part 2 §2.8.15-19).
    pub condition: &'a str,
    pub description: Option<&'a str>,
}

/// A delivery state (Part 3 §3.4: the outcomes and received; transactional states, Part 4
/// §4.5.5, and any other descriptor are `Other`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryState<'a> {
    Received { section_number: u32, section_offset: u64 },
    Accepted,
    Rejected { error: Option<AmqpError<'a>> },
    Released,
    /// The spec gives these flags no default; absent is `None` (not set).
    Modified { delivery_failed: Option<bool>, undeliverable_here: Option<bool> },
    Other(Descriptor<'a>),
}

/// A source or target (Part 3 §3.5.3-4); a coordinator (Part 4 §4.5.1) or another descriptor
/// has `descriptor` only, its other fields their defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Terminus<'a> {
    pub descriptor: Descriptor<'a>,
    pub address: Option<&'a str>,
    /// terminus-durability: 0 none (the default), 1 configuration, 2 unsettled-state.
    pub durable: u32,
    /// terminus-expiry-policy; default `session-end`.
    pub expiry_policy: &'a str,
    /// Seconds; default 0.
    pub timeout_s: u32,
    /// Default false.
    pub dynamic: bool,
    /// A source's distribution-mode (`move`, `copy`); `None` for a target.
    pub distribution_mode: Option<&'a str>,
}

/// A field that may hold one value or an array of them (`multiple="true"`, Part 1 §1.4
/// "Composite Type Representation"): symbols here (capabilities, locales, mechanisms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Symbols<'a>(Option<Encoded<'a>>);

impl<'a> Symbols<'a> {
    /// The symbols, in order (none when the field is absent).
    pub fn iter(&self) -> impl Iterator<Item = Result<&'a str, Bad>> + 'a {
        let (one, many): (Option<Encoded<'a>>, Option<Array<'a>>) = match self.0 {
            None => (None, None),
            Some(e) => match e.value() {
                Ok(Value::Array(a)) => (None, Some(a)),
                _ => (Some(e), None),
            },
        };
        one.into_iter()
            .map(Ok)
            .chain(many.into_iter().flat_map(|a| a.iter()))
            .map(|e| e.and_then(|e| symbol_of(e, "symbol")))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Open<'a> {
    pub container_id: &'a str,
    pub hostname: Option<&'a str>,
    /// Default 4294967295 (Part 2 §2.7.1).
    pub max_frame_size: u32,
    /// Default 65535.
    pub channel_max: u16,
    /// Milliseconds; none when absent (no idle timeout).
    pub idle_time_out_ms: Option<u32>,
    pub outgoing_locales: Symbols<'a>,
    pub incoming_locales: Symbols<'a>,
    pub offered_capabilities: Symbols<'a>,
    pub desired_capabilities: Symbols<'a>,
    /// The properties map, unread.
    pub properties: Option<Encoded<'a>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Begin<'a> {
    /// Absent when the session is begun locally (Part 2 §2.7.2).
    pub remote_channel: Option<u16>,
    pub next_outgoing_id: u32,
    pub incoming_window: u32,
    pub outgoing_window: u32,
    /// Default 4294967295.
    pub handle_max: u32,
    pub offered_capabilities: Symbols<'a>,
    pub desired_capabilities: Symbols<'a>,
    pub properties: Option<Encoded<'a>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attach<'a> {
    pub name: &'a str,
    pub handle: u32,
    pub role: Role,
    /// Default mixed (Part 2 §2.7.3).
    pub snd_settle_mode: SenderSettleMode,
    /// Default first.
    pub rcv_settle_mode: ReceiverSettleMode,
    pub source: Option<Terminus<'a>>,
    pub target: Option<Terminus<'a>>,
    /// The unsettled map, unread.
    pub unsettled: Option<Encoded<'a>>,
    /// Default false.
    pub incomplete_unsettled: bool,
    /// A sequence number; mandatory for a sender, absent from a receiver.
    pub initial_delivery_count: Option<u32>,
    /// Absent or 0: no maximum.
    pub max_message_size: Option<u64>,
    pub offered_capabilities: Symbols<'a>,
    pub desired_capabilities: Symbols<'a>,
    pub properties: Option<Encoded<'a>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow<'a> {
    pub next_incoming_id: Option<u32>,
    pub incoming_window: u32,
    pub next_outgoing_id: u32,
    pub outgoing_window: u32,
    /// With a handle the flow is a link's too, and the link fields below may be set (Part 2
    /// §2.7.4).
    pub handle: Option<u32>,
    pub delivery_count: Option<u32>,
    pub link_credit: Option<u32>,
    pub available: Option<u32>,
    /// Default false.
    pub drain: bool,
    /// Default false.
    pub echo: bool,
    pub properties: Option<Encoded<'a>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer<'a> {
    pub handle: u32,
    /// Mandatory on a delivery's first transfer, may be left out of the ones that continue it
    /// (Part 2 §2.7.5).
    pub delivery_id: Option<u32>,
    pub delivery_tag: Option<&'a [u8]>,
    pub message_format: Option<u32>,
    /// No default: unset on a delivery's first transfer means not settled, on a later one as
    /// the first said.
    pub settled: Option<bool>,
    /// Default false.
    pub more: bool,
    /// Absent: the link's mode.
    pub rcv_settle_mode: Option<ReceiverSettleMode>,
    pub state: Option<DeliveryState<'a>>,
    /// Default false.
    pub resume: bool,
    /// Default false.
    pub aborted: bool,
    /// Default false.
    pub batchable: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Disposition<'a> {
    pub role: Role,
    pub first: u32,
    /// Absent: the same as `first` (Part 2 §2.7.6).
    pub last: u32,
    /// Default false.
    pub settled: bool,
    pub state: Option<DeliveryState<'a>>,
    /// Default false.
    pub batchable: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Detach<'a> {
    pub handle: u32,
    /// Default false (Part 2 §2.7.7).
    pub closed: bool,
    pub error: Option<AmqpError<'a>>,
}

/// The SASL outcome codes (Part 5 §5.3.3.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslCode {
    Ok,
    Auth,
    Sys,
    SysPerm,
    SysTemp,
    /// A code the spec does not list.
    Other(u8),
}

/// A frame body's performative (or SASL frame body).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Performative<'a> {
    Open(Open<'a>),
    Begin(Begin<'a>),
    Attach(Attach<'a>),
    Flow(Flow<'a>),
    Transfer(Transfer<'a>),
    Disposition(Disposition<'a>),
    Detach(Detach<'a>),
    End { error: Option<AmqpError<'a>> },
    Close { error: Option<AmqpError<'a>> },
    /// The server's mechanisms (sasl-server-mechanisms).
    SaslMechanisms { mechanisms: Symbols<'a> },
    /// The client's choice. Its initial-response is never kept (see the module's doc).
    SaslInit { mechanism: &'a str, hostname: Option<&'a str> },
    /// Its challenge is never kept.
    SaslChallenge,
    /// Its response is never kept.
    SaslResponse,
    /// Its additional-data is never kept.
    SaslOutcome { code: SaslCode },
    /// A described body with a descriptor none of the above has.
    Unknown(Descriptor<'a>),
}

/// The fields of a composite value, in order; each absent (list ended or null) or present.
struct Fields<'a> {
    items: Elements<'a>,
}

/// The fields of `e`, which must be a list (list0, list8, list32).
fn fields<'a>(e: Encoded<'a>, what: &'static str) -> Result<Fields<'a>, Bad> {
    match e.value()? {
        Value::List(l) => Ok(Fields { items: l.iter() }),
        _ => Err(Bad::WrongType { field: what, code: e.code }),
    }
}

fn symbol_of<'a>(e: Encoded<'a>, field: &'static str) -> Result<&'a str, Bad> {
    match e.value()? {
        Value::Symbol(s) => Ok(s),
        _ => Err(Bad::WrongType { field, code: e.code }),
    }
}

impl<'a> Fields<'a> {
    /// The next field; `None` when absent (past the list's end, or null).
    fn next(&mut self) -> Result<Option<Encoded<'a>>, Bad> {
        match self.items.next() {
            None => Ok(None),
            Some(Err(b)) => Err(b),
            Some(Ok(e)) if e.is_null() => Ok(None),
            Some(Ok(e)) => Ok(Some(e)),
        }
    }

    /// The next field read by `f` from its value.
    fn read<T>(&mut self, field: &'static str, f: impl Fn(Value<'a>) -> Option<T>) -> Result<Option<T>, Bad> {
        match self.next()? {
            None => Ok(None),
            Some(e) => f(e.value()?).map(Some).ok_or(Bad::WrongType { field, code: e.code }),
        }
    }

    fn skip(&mut self) -> Result<(), Bad> {
        self.next().map(|_| ())
    }

    /// The next field read by a typed reader of [`Encoded`] (`Encoded::uint`, ...): a field of
    /// another type is [`Bad::WrongType`].
    fn typed<T>(&mut self, field: &'static str, f: impl Fn(&Encoded<'a>) -> Option<T>) -> Result<Option<T>, Bad> {
        match self.next()? {
            None => Ok(None),
            Some(e) => f(&e).map(Some).ok_or(Bad::WrongType { field, code: e.code }),
        }
    }

    fn uint(&mut self, field: &'static str) -> Result<Option<u32>, Bad> {
        self.typed(field, Encoded::uint)
    }

    fn ulong(&mut self, field: &'static str) -> Result<Option<u64>, Bad> {
        self.typed(field, Encoded::ulong)
    }

    fn ushort(&mut self, field: &'static str) -> Result<Option<u16>, Bad> {
        self.typed(field, Encoded::ushort)
    }

    fn ubyte(&mut self, field: &'static str) -> Result<Option<u8>, Bad> {
        self.typed(field, Encoded::ubyte)
    }

    fn boolean(&mut self, field: &'static str) -> Result<Option<bool>, Bad> {
        self.typed(field, Encoded::boolean).and_then(Option::transpose)
    }

    fn string(&mut self, field: &'static str) -> Result<Option<&'a str>, Bad> {
        self.read(field, |v| if let Value::String(x) = v { Some(x) } else { None })
    }

    fn symbol(&mut self, field: &'static str) -> Result<Option<&'a str>, Bad> {
        self.read(field, |v| if let Value::Symbol(x) = v { Some(x) } else { None })
    }

    fn binary(&mut self, field: &'static str) -> Result<Option<&'a [u8]>, Bad> {
        self.typed(field, Encoded::binary)
    }

    /// A field left as it is encoded (a map, a described value) for whoever wants it.
    fn raw(&mut self) -> Result<Option<Encoded<'a>>, Bad> {
        self.next()
    }

    fn symbols(&mut self) -> Result<Symbols<'a>, Bad> {
        Ok(Symbols(self.next()?))
    }

    fn role(&mut self) -> Result<Role, Bad> {
        Ok(if must(self.boolean("role")?, "role")? { Role::Receiver } else { Role::Sender })
    }

    fn rcv_settle_mode(&mut self) -> Result<Option<ReceiverSettleMode>, Bad> {
        const FIELD: &str = "rcv-settle-mode";
        self.ubyte(FIELD)?
            .map(|m| match m {
                0 => Ok(ReceiverSettleMode::First),
                1 => Ok(ReceiverSettleMode::Second),
                v => Err(Bad::OutOfRange { field: FIELD, value: v as u64 }),
            })
            .transpose()
    }

    fn error(&mut self) -> Result<Option<AmqpError<'a>>, Bad> {
        self.next()?.map(error).transpose()
    }

    fn state(&mut self) -> Result<Option<DeliveryState<'a>>, Bad> {
        self.next()?.map(delivery_state).transpose()
    }

    fn terminus(&mut self, field: &'static str) -> Result<Option<Terminus<'a>>, Bad> {
        self.next()?.map(|e| terminus(e, field)).transpose()
    }
}

fn must<T>(v: Option<T>, field: &'static str) -> Result<T, Bad> {
    v.ok_or(Bad::Missing(field))
}

/// A described composite's descriptor and fields.
fn composite<'a>(e: Encoded<'a>, what: &'static str) -> Result<(Descriptor<'a>, Fields<'a>), Bad> {
    let d = e.described()?.ok_or(Bad::NotDescribed(e.code))?;
    Ok((d.descriptor, fields(d.value, what)?))
}

/// An error (Part 2 §2.8.14).
fn error(e: Encoded) -> Result<AmqpError, Bad> {
    let (d, mut f) = composite(e, "error")?;
    if descriptor_code(d) != Some(0x1d) {
        return Err(Bad::WrongType { field: "error", code: e.code });
    }
    Ok(AmqpError { condition: must(f.symbol("condition")?, "condition")?, description: f.string("description")? })
}

/// A delivery state (Part 3 §3.4).
fn delivery_state(e: Encoded) -> Result<DeliveryState, Bad> {
    let (d, mut f) = composite(e, "delivery-state")?;
    Ok(match descriptor_code(d) {
        Some(0x23) => DeliveryState::Received {
            section_number: must(f.uint("section-number")?, "section-number")?,
            section_offset: must(f.ulong("section-offset")?, "section-offset")?,
        },
        Some(0x24) => DeliveryState::Accepted,
        Some(0x25) => DeliveryState::Rejected { error: f.error()? },
        Some(0x26) => DeliveryState::Released,
        Some(0x27) => DeliveryState::Modified {
            delivery_failed: f.boolean("delivery-failed")?,
            undeliverable_here: f.boolean("undeliverable-here")?,
        },
        _ => DeliveryState::Other(d),
    })
}

/// A source or target (Part 3 §3.5.3-4), their common fields first: address, durable,
/// expiry-policy, timeout, dynamic; then a source's dynamic-node-properties and
/// distribution-mode.
fn terminus<'a>(e: Encoded<'a>, field: &'static str) -> Result<Terminus<'a>, Bad> {
    let (descriptor, mut f) = composite(e, field)?;
    let mut t = Terminus {
        descriptor,
        address: None,
        durable: 0,
        expiry_policy: "session-end",
        timeout_s: 0,
        dynamic: false,
        distribution_mode: None,
    };
    let code = descriptor_code(descriptor);
    if !matches!(code, Some(0x28 | 0x29)) {
        return Ok(t);
    }
    t.address = f.string("address")?;
    t.durable = f.uint("durable")?.unwrap_or(0);
    t.expiry_policy = f.symbol("expiry-policy")?.unwrap_or("session-end");
    t.timeout_s = f.uint("timeout")?.unwrap_or(0);
    t.dynamic = f.boolean("dynamic")?.unwrap_or(false);
    if code == Some(0x28) {
        f.skip()?; // dynamic-node-properties
        t.distribution_mode = f.symbol("distribution-mode")?;
    }
    Ok(t)
}

/// The performative (or SASL frame body) a frame body starts with, and the bytes after it (a
/// transfer's payload; for other frames nothing, or bytes the spec does not define). `body` is
/// a whole frame body, not empty (an empty frame has no performative, Part 2 §2.4.5): a value
/// running past its end is [`Bad::Overrun`].
pub fn decode_performative(body: &[u8]) -> Result<(Performative<'_>, &[u8]), Bad> {
    let (e, n) = decode_complete(body)?;
    let d = e.described()?.ok_or(Bad::NotDescribed(e.code))?;
    let Some(code) = descriptor_code(d.descriptor) else {
        return Ok((Performative::Unknown(d.descriptor), &body[n..]));
    };
    let p = match code {
        0x10..=0x18 | 0x40..=0x44 => performative(code, d.descriptor, fields(d.value, "performative")?)?,
        _ => Performative::Unknown(d.descriptor),
    };
    Ok((p, &body[n..]))
}

fn performative<'a>(code: u64, descriptor: Descriptor<'a>, mut f: Fields<'a>) -> Result<Performative<'a>, Bad> {
    Ok(match code {
        // Part 2 §2.7.1
        0x10 => Performative::Open(Open {
            container_id: must(f.string("container-id")?, "container-id")?,
            hostname: f.string("hostname")?,
            max_frame_size: f.uint("max-frame-size")?.unwrap_or(u32::MAX),
            channel_max: f.ushort("channel-max")?.unwrap_or(u16::MAX),
            idle_time_out_ms: f.uint("idle-time-out")?,
            outgoing_locales: f.symbols()?,
            incoming_locales: f.symbols()?,
            offered_capabilities: f.symbols()?,
            desired_capabilities: f.symbols()?,
            properties: f.raw()?,
        }),
        // §2.7.2
        0x11 => Performative::Begin(Begin {
            remote_channel: f.ushort("remote-channel")?,
            next_outgoing_id: must(f.uint("next-outgoing-id")?, "next-outgoing-id")?,
            incoming_window: must(f.uint("incoming-window")?, "incoming-window")?,
            outgoing_window: must(f.uint("outgoing-window")?, "outgoing-window")?,
            handle_max: f.uint("handle-max")?.unwrap_or(u32::MAX),
            offered_capabilities: f.symbols()?,
            desired_capabilities: f.symbols()?,
            properties: f.raw()?,
        }),
        // §2.7.3
        0x12 => Performative::Attach(Attach {
            name: must(f.string("name")?, "name")?,
            handle: must(f.uint("handle")?, "handle")?,
            role: f.role()?,
            snd_settle_mode: match f.ubyte("snd-settle-mode")? {
                Some(0) => SenderSettleMode::Unsettled,
                Some(1) => SenderSettleMode::Settled,
                Some(2) | None => SenderSettleMode::Mixed,
                Some(v) => return Err(Bad::OutOfRange { field: "snd-settle-mode", value: v as u64 }),
            },
            rcv_settle_mode: f.rcv_settle_mode()?.unwrap_or(ReceiverSettleMode::First),
            source: f.terminus("source")?,
            target: f.terminus("target")?,
            unsettled: f.raw()?,
            incomplete_unsettled: f.boolean("incomplete-unsettled")?.unwrap_or(false),
            initial_delivery_count: f.uint("initial-delivery-count")?,
            max_message_size: f.ulong("max-message-size")?,
            offered_capabilities: f.symbols()?,
            desired_capabilities: f.symbols()?,
            properties: f.raw()?,
        }),
        // §2.7.4
        0x13 => Performative::Flow(Flow {
            next_incoming_id: f.uint("next-incoming-id")?,
            incoming_window: must(f.uint("incoming-window")?, "incoming-window")?,
            next_outgoing_id: must(f.uint("next-outgoing-id")?, "next-outgoing-id")?,
            outgoing_window: must(f.uint("outgoing-window")?, "outgoing-window")?,
            handle: f.uint("handle")?,
            delivery_count: f.uint("delivery-count")?,
            link_credit: f.uint("link-credit")?,
            available: f.uint("available")?,
            drain: f.boolean("drain")?.unwrap_or(false),
            echo: f.boolean("echo")?.unwrap_or(false),
            properties: f.raw()?,
        }),
        // §2.7.5
        0x14 => Performative::Transfer(Transfer {
            handle: must(f.uint("handle")?, "handle")?,
            delivery_id: f.uint("delivery-id")?,
            delivery_tag: f.binary("delivery-tag")?,
            message_format: f.uint("message-format")?,
            settled: f.boolean("settled")?,
            more: f.boolean("more")?.unwrap_or(false),
            rcv_settle_mode: f.rcv_settle_mode()?,
            state: f.state()?,
            resume: f.boolean("resume")?.unwrap_or(false),
            aborted: f.boolean("aborted")?.unwrap_or(false),
            batchable: f.boolean("batchable")?.unwrap_or(false),
        }),
        // §2.7.6
        0x15 => {
            let role = f.role()?;
            let first = must(f.uint("first")?, "first")?;
            Performative::Disposition(Disposition {
                role,
                first,
                last: f.uint("last")?.unwrap_or(first),
                settled: f.boolean("settled")?.unwrap_or(false),
                state: f.state()?,
                batchable: f.boolean("batchable")?.unwrap_or(false),
            })
        }
        // §2.7.7
        0x16 => Performative::Detach(Detach {
            handle: must(f.uint("handle")?, "handle")?,
            closed: f.boolean("closed")?.unwrap_or(false),
            error: f.error()?,
        }),
        // §2.7.8, §2.7.9
        0x17 => Performative::End { error: f.error()? },
        0x18 => Performative::Close { error: f.error()? },
        // Part 5 §5.3.3.1
        0x40 => {
            let mechanisms = f.symbols()?;
            if mechanisms.0.is_none() {
                return Err(Bad::Missing("sasl-server-mechanisms"));
            }
            Performative::SaslMechanisms { mechanisms }
        }
        // §5.3.3.2: mechanism, initial-response (skipped, never kept), hostname
        0x41 => {
            let mechanism = must(f.symbol("mechanism")?, "mechanism")?;
            f.binary("initial-response")?;
            Performative::SaslInit { mechanism, hostname: f.string("hostname")? }
        }
        // §5.3.3.3-4: challenge, response (never kept)
        0x42 => Performative::SaslChallenge,
        0x43 => Performative::SaslResponse,
        // §5.3.3.5
        0x44 => Performative::SaslOutcome {
            code: match must(f.ubyte("code")?, "code")? {
                0 => SaslCode::Ok,
                1 => SaslCode::Auth,
                2 => SaslCode::Sys,
                3 => SaslCode::SysPerm,
                4 => SaslCode::SysTemp,
                c => SaslCode::Other(c),
            },
        },
        _ => Performative::Unknown(descriptor),
    })
}

/// The user name of a sasl-init frame body with mechanism PLAIN: the authcid of its
/// initial-response (`authzid NUL authcid NUL passwd`, RFC 4616), read by AMQP 0-9-1's
/// [`sasl_user`], for `connections.user` as AMQP 0-9-1's start-ok gives it. The only look into
/// SASL's secrets: the authcid alone comes out, the password never leaves the frame's bytes.
/// `None` for another body or mechanism, or a response that is no PLAIN one.
pub fn sasl_plain_authcid(body: &[u8]) -> Option<&str> {
    let (e, _) = decode_complete(body).ok()?;
    let (d, mut f) = composite(e, "sasl-init").ok()?;
    if descriptor_code(d) != Some(0x41) || f.symbol("mechanism").ok()?? != "PLAIN" {
        return None;
    }
    let response = f.binary("initial-response").ok()??;
    std::str::from_utf8(sasl_user(b"PLAIN", response)?).ok()
}

/// A message's header section (Part 3 §3.2.1), defaults where absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Default false.
    pub durable: bool,
    /// Default 4.
    pub priority: u8,
    /// Milliseconds; none when absent (no expiry).
    pub ttl_ms: Option<u32>,
    /// Default false.
    pub first_acquirer: bool,
    /// Default 0.
    pub delivery_count: u32,
}

/// A message-id or correlation-id (Part 3 §3.2.11-15): ulong, uuid, binary or string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageId<'a> {
    Ulong(u64),
    Uuid([u8; 16]),
    Binary(&'a [u8]),
    String(&'a str),
}

/// A message's properties section (Part 3 §3.2.4), the fields read; none has a default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Properties<'a> {
    pub message_id: Option<MessageId<'a>>,
    /// The user-id's length in octets: the identity itself is not kept.
    pub user_id_bytes: Option<usize>,
    pub to: Option<&'a str>,
    pub subject: Option<&'a str>,
    pub reply_to: Option<&'a str>,
    pub correlation_id: Option<MessageId<'a>>,
    pub content_type: Option<&'a str>,
}

/// Which body a message has (Part 3 §3.2.5-8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    Data,
    AmqpSequence,
    AmqpValue,
}

/// The sections a transfer's payload starts with (Part 3 §3.2): the header and properties
/// read, the other sections measured. Sizes are the sections' encoded octets, descriptor
/// included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Message<'a> {
    pub header: Option<Header>,
    pub properties: Option<Properties<'a>>,
    pub delivery_annotations_bytes: Option<u64>,
    pub message_annotations_bytes: Option<u64>,
    pub application_properties_bytes: Option<u64>,
    pub body: Option<BodyKind>,
    /// Body sections read (several data or amqp-sequence sections may make one body).
    pub body_sections: u32,
    /// The body sections' octets, together.
    pub body_bytes: u64,
    pub footer_bytes: Option<u64>,
    /// The payload ends inside a section (a message split over several transfers, Part 2
    /// §2.6.14): the sections before it are read; the octets from the payload's start to the
    /// cut section's end (or as far as its first octets tell).
    pub cut: Option<Need>,
}

/// The sections at the start of a transfer's payload (the bytes [`decode_performative`] leaves
/// after a transfer). A section with an unknown descriptor is [`Bad::UnknownSection`].
pub fn decode_message(payload: &[u8]) -> Result<Message<'_>, Bad> {
    let mut m = Message::default();
    let mut at = 0;
    while at < payload.len() {
        let (e, n) = match super::types::decode(&payload[at..]) {
            Err(Need(need)) => {
                m.cut = Some(Need(at.saturating_add(need)));
                break;
            }
            Ok(r) => r?,
        };
        let d = e.described()?.ok_or(Bad::NotDescribed(e.code))?;
        let bytes = Some(n as u64);
        match descriptor_code(d.descriptor) {
            Some(0x70) => m.header = Some(header(fields(d.value, "header")?)?),
            Some(0x71) => m.delivery_annotations_bytes = bytes,
            Some(0x72) => m.message_annotations_bytes = bytes,
            Some(0x73) => m.properties = Some(properties(fields(d.value, "properties")?)?),
            Some(0x74) => m.application_properties_bytes = bytes,
            Some(code @ 0x75..=0x77) => {
                m.body = Some(match code {
                    0x75 => BodyKind::Data,
                    0x76 => BodyKind::AmqpSequence,
                    _ => BodyKind::AmqpValue,
                });
                m.body_sections += 1;
                m.body_bytes += n as u64;
            }
            Some(0x78) => m.footer_bytes = bytes,
            other => return Err(Bad::UnknownSection(other)),
        }
        at += n;
    }
    Ok(m)
}

fn header(mut f: Fields) -> Result<Header, Bad> {
    Ok(Header {
        durable: f.boolean("durable")?.unwrap_or(false),
        priority: f.ubyte("priority")?.unwrap_or(4),
        ttl_ms: f.uint("ttl")?,
        first_acquirer: f.boolean("first-acquirer")?.unwrap_or(false),
        delivery_count: f.uint("delivery-count")?.unwrap_or(0),
    })
}

fn properties<'a>(mut f: Fields<'a>) -> Result<Properties<'a>, Bad> {
    let id = |v: Value<'a>| match v {
        Value::Ulong(x) => Some(MessageId::Ulong(x)),
        Value::Uuid(x) => Some(MessageId::Uuid(x)),
        Value::Binary(x) => Some(MessageId::Binary(x)),
        Value::String(x) => Some(MessageId::String(x)),
        _ => None,
    };
    Ok(Properties {
        message_id: f.read("message-id", id)?,
        user_id_bytes: f.binary("user-id")?.map(<[u8]>::len),
        to: f.string("to")?,
        subject: f.string("subject")?,
        reply_to: f.string("reply-to")?,
        correlation_id: f.read("correlation-id", id)?,
        content_type: f.symbol("content-type")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::amqp10::parser::parse_frame_header;
    use crate::proto::amqp10::types::Value;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// The bodies of the frames a TCP payload holds, one after the other.
    fn bodies(mut seg: &[u8]) -> Vec<&[u8]> {
        let mut out = Vec::new();
        while !seg.is_empty() {
            let h = parse_frame_header(seg).unwrap().unwrap();
            out.push(&seg[h.body_offset as usize..h.size as usize]);
            seg = &seg[h.size as usize..];
        }
        out
    }

    fn perf(body: &[u8]) -> Performative<'_> {
        decode_performative(body).unwrap().0
    }

    fn syms<'a>(s: Symbols<'a>) -> Vec<&'a str> {
        s.iter().map(Result::unwrap).collect()
    }

    // Frames of fixtures/amqp10.pcap (RabbitMQ 3.10.8 and a Python client), each the TCP
    // payload of one packet as `tshark -r fixtures/amqp10.pcap -Y frame.number==N -T fields -e
    // tcp.payload` prints it; the expected values are what `tshark -O amqp` decodes.

    #[test]
    fn sasl_frames_of_the_fixture() {
        // frame 71: sasl-mechanisms, an array8 of sym32 (tshark: ANONYMOUS, AMQPLAIN, PLAIN)
        let seg = hex("0000003402010000005340c02701e02403b300000009414e4f4e594d4f555300000008414d51504c41494e00000005504c41494e");
        let Performative::SaslMechanisms { mechanisms } = perf(bodies(&seg)[0]) else { panic!() };
        assert_eq!(syms(mechanisms), ["ANONYMOUS", "AMQPLAIN", "PLAIN"]);
        // frame 73: sasl-init (tshark: Mechanism PLAIN, Init-Response 00 "guest" 00 "guest")
        let seg = hex("0000002302010000005341c01602a305504c41494ea00c006775657374006775657374");
        let body = bodies(&seg)[0];
        assert_eq!(perf(body), Performative::SaslInit { mechanism: "PLAIN", hostname: None });
        assert_eq!(sasl_plain_authcid(body), Some("guest"));
        // frame 74: sasl-outcome (tshark: Code ok (0))
        let seg = hex("0000001102010000005344c00402500040");
        assert_eq!(perf(bodies(&seg)[0]), Performative::SaslOutcome { code: SaslCode::Ok });
    }

    #[test]
    fn connection_and_link_frames_of_the_fixture() {
        // frame 86: open (tshark: Container-Id rabbit@vm, Channel-Max 32767, Idle-Timeout
        // 60000, Properties a map of 6 entries); hostname and max-frame-size are nulls
        let seg = hex("0000011602000000005310d0000001060000000aa10972616262697440766d4040607fff700000ea6040404040c1e70ca30c636c75737465725f6e616d65a10972616262697440766da309636f70797269676874a137436f707972696768742028632920323030372d3230323220564d776172652c20496e632e206f722069747320616666696c69617465732ea30b696e666f726d6174696f6ea1394c6963656e73656420756e64657220746865204d504c20322e302e20576562736974653a2068747470733a2f2f7261626269746d712e636f6da308706c6174666f726da11145726c616e672f4f54502032352e322e33a30770726f64756374a1085261626269744d51a30776657273696f6ea106332e31302e38");
        let Performative::Open(o) = perf(bodies(&seg)[0]) else { panic!() };
        assert_eq!((o.container_id, o.hostname, o.channel_max, o.idle_time_out_ms), ("rabbit@vm", None, 32767, Some(60000)));
        assert_eq!(o.max_frame_size, u32::MAX, "null: the default (Part 2 §2.7.1)");
        assert!(syms(o.offered_capabilities).is_empty());
        let Value::Map(props) = o.properties.unwrap().value().unwrap() else { panic!() };
        assert_eq!(props.count, 12, "6 keys, 6 values");

        // frame 88: begin then attach in one segment
        let seg = hex("0000001a02000000005311c00d044043707fffffff707fffffff0000008b02000000005312c07e0ea13a38396664656463632d303265362d343035612d383637352d6633336434316539353535662d2f71756575652f616d71706361702d616d71703130434250025000005328c00c0b4043404342404040404040005329c01e07a1152f71756575652f616d71706361702d616d7170313043404342404040404344404040");
        let b = bodies(&seg);
        // tshark: Next-Outgoing-Id 0, Incoming-Window 2147483647, Outgoing-Window 2147483647
        let Performative::Begin(begin) = perf(b[0]) else { panic!() };
        assert_eq!(
            (begin.remote_channel, begin.next_outgoing_id, begin.incoming_window, begin.outgoing_window, begin.handle_max),
            (None, 0, 2147483647, 2147483647, u32::MAX)
        );
        // tshark: Handle 0, Role sender, Send-Settle-Mode mixed, Receive-Settle-Mode first,
        // Source without address, Target Address /queue/amqpcap-amqp10, durable none, Timeout
        // 0, Dynamic False, Initial-Delivery-Count 0, Max-Message-Size 0
        let Performative::Attach(a) = perf(b[1]) else { panic!() };
        assert_eq!(a.name, "89fdedcc-02e6-405a-8675-f33d41e9555f-/queue/amqpcap-amqp10");
        assert_eq!((a.handle, a.role, a.snd_settle_mode, a.rcv_settle_mode), (0, Role::Sender, SenderSettleMode::Mixed, ReceiverSettleMode::First));
        let source = a.source.unwrap();
        assert_eq!((source.descriptor, source.address, source.durable, source.timeout_s, source.dynamic), (Descriptor::Code(0x28), None, 0, 0, false));
        assert_eq!(source.expiry_policy, "session-end", "null: the default (Part 3 §3.5.3)");
        let target = a.target.unwrap();
        assert_eq!((target.descriptor, target.address, target.durable, target.timeout_s, target.dynamic), (Descriptor::Code(0x29), Some("/queue/amqpcap-amqp10"), 0, 0, false));
        assert_eq!((a.initial_delivery_count, a.max_message_size, a.incomplete_unsettled), (Some(0), Some(0), false));

        // frame 172: attach (tshark: Handle 1, Role sender, Send-Settle-Mode unsettled, Source
        // Address /queue/amqpcap-amqp10, default outcome Released, Outcomes an array of 3 sym32,
        // no target, Initial-Delivery-Count 0)
        let seg = hex("000000c802000000005312c0bb0ea13a38396664656463632d303265362d343035612d383637352d6633336434316539353535662d2f71756575652f616d71706361702d616d7170313052014250005000005328c06a0ba1152f71756575652f616d71706361702d616d717031304340434240404000532645e04403b300000012616d71703a61636365707465643a6c69737400000012616d71703a72656a65637465643a6c69737400000012616d71703a72656c65617365643a6c697374404040404340404040");
        let Performative::Attach(a) = perf(bodies(&seg)[0]) else { panic!() };
        assert_eq!((a.handle, a.role, a.snd_settle_mode, a.rcv_settle_mode), (1, Role::Sender, SenderSettleMode::Unsettled, ReceiverSettleMode::First));
        assert_eq!(a.source.unwrap().address, Some("/queue/amqpcap-amqp10"));
        assert_eq!((a.target, a.initial_delivery_count, a.max_message_size), (None, Some(0), None));

        // frame 173: flow (tshark: Next-Incoming-Id 20, Incoming-Window 65515, Next-Outgoing-Id
        // 0, Outgoing-Window 65535, Handle 1, Delivery-Count 0, Link-Credit 10, Available 20,
        // Drain False); echo left out: false
        let seg = hex("0000002502000000005313c0180b5214700000ffeb43700000ffff520143520a5214424040");
        let Performative::Flow(f) = perf(bodies(&seg)[0]) else { panic!() };
        assert_eq!(
            (f.next_incoming_id, f.incoming_window, f.next_outgoing_id, f.outgoing_window, f.handle, f.delivery_count, f.link_credit, f.available, f.drain, f.echo),
            (Some(20), 65515, 0, 65535, Some(1), Some(0), Some(10), Some(20), false, false)
        );

        // frame 199: flow, disposition, close in one segment
        let seg = hex("0000002402000000005313c017095214707fffffff5214707fffffff52015214520940420000001802000000005315c00b0541520a521341005324450000000c0200000000531845");
        let b = bodies(&seg);
        // tshark: Next-Incoming-Id 20, windows 2147483647, Next-Outgoing-Id 20, Handle 1,
        // Delivery-Count 20, Link-Credit 9, Drain False; available absent
        let Performative::Flow(f) = perf(b[0]) else { panic!() };
        assert_eq!((f.next_incoming_id, f.next_outgoing_id, f.delivery_count, f.link_credit, f.available), (Some(20), 20, Some(20), Some(9), None));
        // tshark: Role receiver, First 10, Last 19, Settled True, Accepted
        let Performative::Disposition(d) = perf(b[1]) else { panic!() };
        assert_eq!((d.role, d.first, d.last, d.settled, d.state, d.batchable), (Role::Receiver, 10, 19, true, Some(DeliveryState::Accepted), false));
        assert_eq!(perf(b[2]), Performative::Close { error: None });
    }

    #[test]
    fn transfer_and_message_of_the_fixture() {
        // frame 124 (tshark: Handle 0, Delivery-Id 0, Delivery-Tag 31, Message-Format 0;
        // Message-Header; Message-Properties Message-Id 0; AMQP-Value str8-utf8 of 100 'x')
        let mut seg = hex("00000088 02000000 005314 c00704 43 43 a00131 43 005370 45 005373 c00201 44 005377 a164");
        seg.extend([b'x'; 100]);
        let body = bodies(&seg)[0];
        let (p, payload) = decode_performative(body).unwrap();
        let Performative::Transfer(t) = p else { panic!() };
        assert_eq!((t.handle, t.delivery_id, t.delivery_tag, t.message_format), (0, Some(0), Some(&b"1"[..]), Some(0)));
        assert_eq!((t.settled, t.more, t.rcv_settle_mode, t.state, t.resume, t.aborted, t.batchable), (None, false, None, None, false, false, false));
        let m = decode_message(payload).unwrap();
        // the header is list0: every field its default (Part 3 §3.2.1)
        assert_eq!(m.header, Some(Header { durable: false, priority: 4, ttl_ms: None, first_acquirer: false, delivery_count: 0 }));
        let props = m.properties.unwrap();
        assert_eq!(props.message_id, Some(MessageId::Ulong(0)));
        assert_eq!((props.to, props.user_id_bytes, props.content_type), (None, None, None));
        // the body: 00 53 77 a1 64 and 100 octets
        assert_eq!((m.body, m.body_sections, m.body_bytes, m.cut), (Some(BodyKind::AmqpValue), 1, 3 + 2 + 100, None));

        // frame 126: disposition (tshark: Role receiver, First 0, Last 0, Settled True, Accepted)
        let seg = hex("00000017 02000000 005315 c00a06 41 43 43 41 00532445 40");
        let Performative::Disposition(d) = perf(bodies(&seg)[0]) else { panic!() };
        assert_eq!((d.role, d.first, d.last, d.settled, d.state), (Role::Receiver, 0, 0, true, Some(DeliveryState::Accepted)));
    }

    /// Every strict prefix of a frame body is bad (the body is complete: a value cut by its end
    /// runs past it), never a panic or a value.
    #[test]
    fn cut_bodies_are_bad() {
        let seg = hex("0000002402000000005313c017095214707fffffff5214707fffffff52015214520940420000001802000000005315c00b0541520a521341005324450000000c0200000000531845");
        for body in bodies(&seg) {
            for cut in 0..body.len() {
                assert_eq!(decode_performative(&body[..cut]).map(|_| ()), Err(Bad::Overrun), "{body:02x?} cut at {cut}");
            }
        }
    }

    #[test]
    fn absent_and_null_fields_take_the_defaults() {
        // close and end as list0
        assert_eq!(perf(&[0x00, 0x53, 0x18, 0x45]), Performative::Close { error: None });
        assert_eq!(perf(&[0x00, 0x53, 0x17, 0x45]), Performative::End { error: None });
        // begin: remote-channel null, next-outgoing-id 1, windows 2 and 3, then nothing:
        // handle-max 4294967295 (Part 2 §2.7.2)
        let Performative::Begin(b) = perf(&[0x00, 0x53, 0x11, 0xc0, 0x08, 0x04, 0x40, 0x52, 1, 0x52, 2, 0x52, 3]) else { panic!() };
        assert_eq!((b.remote_channel, b.next_outgoing_id, b.incoming_window, b.outgoing_window, b.handle_max), (None, 1, 2, 3, u32::MAX));
        // attach with its mandatory fields only: name "l", handle 7, role receiver
        let Performative::Attach(a) = perf(&[0x00, 0x53, 0x12, 0xc0, 0x07, 0x03, 0xa1, 1, b'l', 0x52, 7, 0x41]) else { panic!() };
        assert_eq!((a.name, a.handle, a.role), ("l", 7, Role::Receiver));
        assert_eq!((a.snd_settle_mode, a.rcv_settle_mode, a.source, a.target), (SenderSettleMode::Mixed, ReceiverSettleMode::First, None, None));
        // ... and the same with explicit nulls up to max-message-size
        let mut b = vec![0x00, 0x53, 0x12, 0xc0, 7 + 8, 3 + 8, 0xa1, 1, b'l', 0x52, 7, 0x41];
        b.extend([0x40; 8]);
        let Performative::Attach(a2) = perf(&b) else { panic!() };
        assert_eq!(a2, a);
        // disposition without last: last = first (Part 2 §2.7.6); settled, batchable false
        let Performative::Disposition(d) = perf(&[0x00, 0x53, 0x15, 0xc0, 0x04, 0x02, 0x42, 0x52, 5]) else { panic!() };
        assert_eq!((d.role, d.first, d.last, d.settled, d.state, d.batchable), (Role::Sender, 5, 5, false, None, false));
        // a transfer with the handle only
        let Performative::Transfer(t) = perf(&[0x00, 0x53, 0x14, 0xc0, 0x02, 0x01, 0x43]) else { panic!() };
        assert_eq!((t.handle, t.delivery_id, t.more, t.settled), (0, None, false, None));
        // mandatory fields absent
        assert_eq!(decode_performative(&[0x00, 0x53, 0x13, 0x45]), Err(Bad::Missing("incoming-window")));
        assert_eq!(decode_performative(&[0x00, 0x53, 0x14, 0xc0, 0x02, 0x01, 0x40]), Err(Bad::Missing("handle")));
        assert_eq!(decode_performative(&[0x00, 0x53, 0x10, 0x45]), Err(Bad::Missing("container-id")));
        assert_eq!(decode_performative(&[0x00, 0x53, 0x40, 0x45]), Err(Bad::Missing("sasl-server-mechanisms")));
    }

    #[test]
    fn delivery_states_and_errors() {
        // transfer: handle 0, ..., state (field 8) = the state given, built around it
        let transfer = |state: &[u8]| {
            let mut b = vec![0x00, 0x53, 0x14, 0xc0, (1 + 7 + state.len()) as u8, 8, 0x43, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40];
            b.extend(state);
            b
        };
        let state = |b: &[u8]| -> Option<DeliveryState<'static>> {
            let b: &'static [u8] = b.to_vec().leak();
            let Performative::Transfer(t) = perf(b) else { panic!() };
            t.state
        };
        assert_eq!(state(&transfer(&[0x00, 0x53, 0x26, 0x45])), Some(DeliveryState::Released));
        // received: section-number 0 (uint0), section-offset 5 (smallulong)
        assert_eq!(state(&transfer(&[0x00, 0x53, 0x23, 0xc0, 0x04, 0x02, 0x43, 0x53, 5])), Some(DeliveryState::Received { section_number: 0, section_offset: 5 }));
        // modified: delivery-failed true, undeliverable-here absent (no default: None)
        assert_eq!(state(&transfer(&[0x00, 0x53, 0x27, 0xc0, 0x02, 0x01, 0x41])), Some(DeliveryState::Modified { delivery_failed: Some(true), undeliverable_here: None }));
        // rejected with error amqp:not-found "no q"; symbolic descriptors for both
        let mut rejected = vec![0x00, 0xa3, 18];
        rejected.extend(b"amqp:rejected:list");
        rejected.extend([0xc0, 1 + 3 + 15 + 2 + (1 + 2 + 14 + 2 + 4), 1, 0x00, 0xa3, 15]);
        rejected.extend(b"amqp:error:list");
        rejected.extend([0xc0, 1 + 2 + 14 + 2 + 4, 2, 0xa3, 14]);
        rejected.extend(b"amqp:not-found");
        rejected.extend([0xa1, 4]);
        rejected.extend(b"no q");
        assert_eq!(state(&transfer(&rejected)), Some(DeliveryState::Rejected { error: Some(AmqpError { condition: "amqp:not-found", description: Some("no q") }) }));
        // a transactional state (Part 4 §4.5.5) is another state
        assert_eq!(state(&transfer(&[0x00, 0x53, 0x34, 0x45])), Some(DeliveryState::Other(Descriptor::Code(0x34))));
        // detach: handle 2, closed, error amqp:internal-error without description
        let mut b = vec![0x00, 0x53, 0x16, 0xc0, 1 + 2 + 1 + 5 + 2 + 19, 3, 0x52, 2, 0x41, 0x00, 0x53, 0x1d, 0xc0, 1 + 2 + 19 - 1, 1, 0xa3, 19];
        b.extend(b"amqp:internal-error");
        b[4] = (b.len() - 5) as u8;
        b[13] = (b.len() - 14) as u8;
        let Performative::Detach(d) = perf(&b) else { panic!() };
        assert_eq!((d.handle, d.closed, d.error), (2, true, Some(AmqpError { condition: "amqp:internal-error", description: None })));
    }

    #[test]
    fn symbolic_descriptors_and_unknown_ones() {
        // close as amqp:close:list, list0
        let mut b = vec![0x00, 0xa3, 15];
        b.extend(b"amqp:close:list");
        b.push(0x45);
        assert_eq!(perf(&b), Performative::Close { error: None });
        // open by symbol (sym32): container-id "c"
        let mut b = vec![0x00, 0xb3, 0, 0, 0, 14];
        b.extend(b"amqp:open:list");
        b.extend([0xc0, 4, 1, 0xa1, 1, b'c']);
        let Performative::Open(o) = perf(&b) else { panic!() };
        assert_eq!((o.container_id, o.channel_max, o.idle_time_out_ms), ("c", u16::MAX, None));
        // the same open by ulong
        let Performative::Open(o2) = perf(&[0x00, 0x80, 0, 0, 0, 0, 0, 0, 0, 0x10, 0xc0, 4, 1, 0xa1, 1, b'c']) else { panic!() };
        assert_eq!(o2, o);
        // unknown descriptors are reported, numeric or symbolic
        assert_eq!(perf(&[0x00, 0x53, 0x99, 0x45]), Performative::Unknown(Descriptor::Code(0x99)));
        assert_eq!(perf(&[0x00, 0xa3, 3, b'x', b':', b'y', 0x45]), Performative::Unknown(Descriptor::Symbol("x:y")));
        // a body that is no described type
        assert_eq!(decode_performative(&[0x45]), Err(Bad::NotDescribed(0x45)));
        assert_eq!(decode_performative(&[]), Err(Bad::Overrun));
    }

    #[test]
    fn wrong_constructors_are_bad() {
        // transfer's handle as str8
        assert_eq!(decode_performative(&[0x00, 0x53, 0x14, 0xc0, 0x04, 0x01, 0xa1, 1, b'x']), Err(Bad::WrongType { field: "handle", code: 0xa1 }));
        // attach's role as ubyte
        assert_eq!(decode_performative(&[0x00, 0x53, 0x12, 0xc0, 0x08, 0x03, 0xa1, 1, b'l', 0x52, 7, 0x50, 1]), Err(Bad::WrongType { field: "role", code: 0x50 }));
        // snd-settle-mode 3
        assert_eq!(
            decode_performative(&[0x00, 0x53, 0x12, 0xc0, 0x09, 0x04, 0xa1, 1, b'l', 0x52, 7, 0x41, 0x50, 3]),
            Err(Bad::OutOfRange { field: "snd-settle-mode", value: 3 })
        );
        // a performative whose value is no list
        assert_eq!(decode_performative(&[0x00, 0x53, 0x18, 0xa1, 0]), Err(Bad::WrongType { field: "performative", code: 0xa1 }));
        // flow's incoming-window as a ulong
        assert_eq!(decode_performative(&[0x00, 0x53, 0x13, 0xc0, 0x03, 0x02, 0x40, 0x44]), Err(Bad::WrongType { field: "incoming-window", code: 0x44 }));
        // an error that is no error list (a source)
        assert_eq!(decode_performative(&[0x00, 0x53, 0x18, 0xc0, 0x05, 0x01, 0x00, 0x53, 0x28, 0x45]), Err(Bad::WrongType { field: "error", code: 0x45 }));
    }

    #[test]
    fn sasl_init_keeps_no_secret() {
        // sasl-init: mechanism PLAIN, initial-response "\0user\0s3cret", hostname "h"
        let mut b = vec![0x00, 0x53, 0x41, 0xc0, 0, 3, 0xa3, 5];
        b.extend(b"PLAIN");
        b.extend([0xa0, 12]);
        b.extend(b"\0user\0s3cret");
        b.extend([0xa1, 1, b'h']);
        b[4] = (b.len() - 5) as u8;
        let p = perf(&b);
        assert_eq!(p, Performative::SaslInit { mechanism: "PLAIN", hostname: Some("h") });
        assert!(!format!("{p:?}").contains("s3cret"));
        assert_eq!(sasl_plain_authcid(&b), Some("user"));
        // another mechanism: no user
        let mut anon = vec![0x00, 0x53, 0x41, 0xc0, 13, 2, 0xa3, 9];
        anon.extend(b"ANONYMOUS");
        anon.push(0x40);
        assert_eq!(sasl_plain_authcid(&anon), None);
        assert_eq!(perf(&anon), Performative::SaslInit { mechanism: "ANONYMOUS", hostname: None });
        // sasl-response and sasl-challenge: the bytes are not kept
        assert_eq!(perf(&[0x00, 0x53, 0x43, 0xc0, 0x04, 0x01, 0xa0, 1, 0x42]), Performative::SaslResponse);
        assert_eq!(perf(&[0x00, 0x53, 0x42, 0xc0, 0x04, 0x01, 0xa0, 1, 0x42]), Performative::SaslChallenge);
        // sasl-outcome code 1 (auth), additional-data left out
        assert_eq!(perf(&[0x00, 0x53, 0x44, 0xc0, 0x03, 0x01, 0x50, 1]), Performative::SaslOutcome { code: SaslCode::Auth });
    }

    /// Every section (Part 3 §3.2), octets counted by hand.
    fn full_message() -> Vec<u8> {
        // header (17 octets): durable true, priority 9, ttl 1000, first-acquirer true,
        // delivery-count 2
        let mut m = hex("005370 c00c05 41 5009 70000003e8 41 5202");
        // delivery-annotations (6): empty map8
        m.extend(hex("005371 c10100"));
        // message-annotations (12): {x-a: true}
        m.extend(hex("005372 c10702 a303782d61 41"));
        // properties (3 + 2 + 53 = 58): message-id 7, user-id of 10 octets, to "/q", subject
        // null, reply-to "/r", correlation-id a uuid, content-type text/plain
        m.extend(hex("005373 c03507 5307 a00a"));
        m.extend(b"secretuser");
        m.extend(hex("a1022f71 40 a1022f72 98000102030405060708090a0b0c0d0e0f a30a"));
        m.extend(b"text/plain");
        // application-properties (10): {k: 0}
        m.extend(hex("005374 c10502 a1016b 43"));
        // two data sections (8 + 9)
        m.extend(hex("005375 a003010203"));
        m.extend(hex("005375 b00000000109"));
        // footer (6)
        m.extend(hex("005378 c10100"));
        m
    }

    #[test]
    fn message_sections() {
        let b = full_message();
        let m = decode_message(&b).unwrap();
        assert_eq!(m.header, Some(Header { durable: true, priority: 9, ttl_ms: Some(1000), first_acquirer: true, delivery_count: 2 }));
        assert_eq!(
            m.properties,
            Some(Properties {
                message_id: Some(MessageId::Ulong(7)),
                user_id_bytes: Some(10),
                to: Some("/q"),
                subject: None,
                reply_to: Some("/r"),
                correlation_id: Some(MessageId::Uuid([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15])),
                content_type: Some("text/plain"),
            })
        );
        assert!(!format!("{m:?}").contains("secretuser"));
        assert_eq!((m.delivery_annotations_bytes, m.message_annotations_bytes, m.application_properties_bytes, m.footer_bytes), (Some(6), Some(12), Some(10), Some(6)));
        assert_eq!((m.body, m.body_sections, m.body_bytes, m.cut), (Some(BodyKind::Data), 2, 8 + 9, None));
        // cut inside the second data section (it starts at 17 + 6 + 12 + 58 + 10 + 8 = 111 and
        // takes 9): the sections before it read, the cut section's end known
        let m = decode_message(&b[..111 + 8]).unwrap();
        assert_eq!((m.body_sections, m.body_bytes, m.footer_bytes, m.cut), (1, 8, None, Some(Need(111 + 9))));
        // cut inside its descriptor: as far as those octets tell (the descriptor's third octet)
        assert_eq!(decode_message(&b[..111 + 2]).unwrap().cut, Some(Need(111 + 3)));
        // a payload that starts with no section
        assert_eq!(decode_message(&[0x00, 0x53, 0x99, 0x45]), Err(Bad::UnknownSection(Some(0x99))));
        assert_eq!(decode_message(&[0x45]), Err(Bad::NotDescribed(0x45)));
        assert_eq!(decode_message(&[]), Ok(Message::default()));
    }
}
