//! Pure parsing of AMQP 0-9-1 wire bytes.
//!
//! Every function takes a byte slice and returns either a value, [`ParseError::Incomplete`]
//! ("need more bytes", only where more bytes can still arrive) or [`ParseError::Invalid`]
//! ("bad bytes"). Nothing here keeps state, allocates per frame, or panics on any input.

use super::spec::{class_has_content, class_properties, method_index, METHODS};
use super::spec_types::{ArgType, Slot};

/// Frame header: type (1), channel (2), size (4) — AMQP 0-9-1 §2.3.5.
pub const FRAME_HEADER_LEN: usize = 7;
/// Every frame ends with this octet (§2.3.5, `frame-end`).
pub const FRAME_END: u8 = 0xCE;
/// `AMQP` followed by four version octets (§4.2.2).
pub const PROTOCOL_HEADER_LEN: usize = 8;
pub const PROTOCOL_HEADER_091: &[u8; 8] = b"AMQP\x00\x00\x09\x01";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameType {
    Method = 1,
    Header = 2,
    Body = 3,
    /// RabbitMQ and the 0-9-1 errata use 8 (the 0-9-1 PDF says 4).
    Heartbeat = 8,
}

impl FrameType {
    /// Its name in messages (the 0-9-1 spec's words).
    pub fn name(self) -> &'static str {
        match self {
            Self::Method => "method",
            Self::Header => "content header",
            Self::Body => "body",
            Self::Heartbeat => "heartbeat",
        }
    }

    pub fn from_octet(b: u8) -> Option<Self> {
        match b {
            1 => Some(Self::Method),
            2 => Some(Self::Header),
            3 => Some(Self::Body),
            8 => Some(Self::Heartbeat),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalid {
    UnknownFrameType(u8),
    BadFrameEnd(u8),
    UnknownMethod(u16, u16),
    UnknownClass(u16),
    /// Arguments or properties end before the spec says they do.
    Truncated,
    /// A field table whose entries do not fit its declared length, or an unknown value type.
    BadFieldTable,
}

/// In words, for the anomalies' details (the caller says of what: a method, a content header).
impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Invalid::UnknownFrameType(t) => write!(f, "frame type {t} is none of 0-9-1's (1, 2, 3, 8)"),
            Invalid::BadFrameEnd(b) => write!(f, "the frame ends with 0x{b:02x}, not 0xce"),
            Invalid::UnknownMethod(c, m) => write!(f, "class {c} method {m} is no method of 0-9-1"),
            Invalid::UnknownClass(c) => write!(f, "class {c} is no class of 0-9-1 with content"),
            Invalid::Truncated => write!(f, "shorter than the spec requires"),
            Invalid::BadFieldTable => write!(f, "a field table whose entries overrun its length, or of an unknown value type"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// Not enough bytes yet: `needed` is the total length required from the slice start.
    Incomplete { needed: usize },
    Invalid(Invalid),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub frame_type: FrameType,
    pub channel: u16,
    /// Payload size: excludes the 7-byte header and the frame-end octet.
    pub size: u32,
}

impl FrameHeader {
    /// Header + payload + frame-end.
    pub fn wire_len(&self) -> u64 {
        FRAME_HEADER_LEN as u64 + self.size as u64 + 1
    }
}

pub fn parse_frame_header(buf: &[u8]) -> Result<FrameHeader, ParseError> {
    if buf.is_empty() {
        return Err(ParseError::Incomplete { needed: FRAME_HEADER_LEN });
    }
    let frame_type =
        FrameType::from_octet(buf[0]).ok_or(ParseError::Invalid(Invalid::UnknownFrameType(buf[0])))?;
    if buf.len() < FRAME_HEADER_LEN {
        return Err(ParseError::Incomplete { needed: FRAME_HEADER_LEN });
    }
    Ok(FrameHeader {
        frame_type,
        channel: u16::from_be_bytes([buf[1], buf[2]]),
        size: u32::from_be_bytes([buf[3], buf[4], buf[5], buf[6]]),
    })
}

/// TLS record header: content type (1), legacy version (2), length (2) — RFC 8446 §5.1.
pub const TLS_RECORD_HEADER_LEN: usize = 5;
/// TLS content type of handshake records (ClientHello, ServerHello), RFC 8446 §5.1.
pub const TLS_HANDSHAKE: u8 = 22;
/// Largest record length: 2^14 plaintext plus 2048 of expansion (RFC 5246 §6.2.3; TLS 1.3
/// allows less, 2^14 + 256).
const TLS_MAX_RECORD: usize = (1 << 14) + 2048;

/// `Some(record length including its header)` when `buf` starts with a plausible TLS record
/// header (content type 20..=23 — change_cipher_spec, alert, handshake, application_data —,
/// version 3.0 to 3.4, length within the limit), `None` when it cannot be one. An AMQP frame
/// never starts like this: frame types are 1, 2, 3 and 8, and a protocol header starts "AMQP".
pub fn tls_record(buf: &[u8]) -> Result<Option<usize>, ParseError> {
    let need = ParseError::Incomplete { needed: TLS_RECORD_HEADER_LEN };
    match buf.first() {
        None => return Err(need),
        Some(20..=23) => {}
        Some(_) => return Ok(None),
    }
    if buf.len() < 3 {
        return if buf.len() == 2 && buf[1] != 3 { Ok(None) } else { Err(need) };
    }
    if buf[1] != 3 || buf[2] > 4 {
        return Ok(None);
    }
    if buf.len() < TLS_RECORD_HEADER_LEN {
        return Err(need);
    }
    let len = u16::from_be_bytes([buf[3], buf[4]]) as usize;
    if len == 0 || len > TLS_MAX_RECORD {
        return Ok(None);
    }
    Ok(Some(TLS_RECORD_HEADER_LEN + len))
}

/// `Some(version octets)` when `buf` starts with a protocol header, `None` when it cannot be one.
/// Incomplete when `buf` is a strict prefix of `AMQP`.
pub fn parse_protocol_header(buf: &[u8]) -> Result<Option<[u8; 4]>, ParseError> {
    let n = buf.len().min(4);
    if buf[..n] != b"AMQP"[..n] {
        return Ok(None);
    }
    if buf.len() < PROTOCOL_HEADER_LEN {
        return Err(ParseError::Incomplete { needed: PROTOCOL_HEADER_LEN });
    }
    Ok(Some([buf[4], buf[5], buf[6], buf[7]]))
}

/// Reads fixed-width big-endian values (§4.2.5.1) from a complete frame payload.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Bits already consumed from `buf[pos - 1]` when the previous argument was a bit.
    bit: u8,
}

impl<'a> Cursor<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0, bit: 0 }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], Invalid> {
        self.bit = 0;
        let end = self.pos.checked_add(n).ok_or(Invalid::Truncated)?;
        let s = self.buf.get(self.pos..end).ok_or(Invalid::Truncated)?;
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, Invalid> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, Invalid> {
        let s = self.take(2)?;
        Ok(u16::from_be_bytes([s[0], s[1]]))
    }
    fn u32(&mut self) -> Result<u32, Invalid> {
        let s = self.take(4)?;
        Ok(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn u64(&mut self) -> Result<u64, Invalid> {
        let s = self.take(8)?;
        Ok(u64::from_be_bytes(s.try_into().unwrap()))
    }
    fn shortstr(&mut self) -> Result<&'a [u8], Invalid> {
        let n = self.u8()? as usize;
        self.take(n)
    }
    fn longstr(&mut self) -> Result<&'a [u8], Invalid> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    /// §4.2.5.2: bits are packed into octets, low bit first; a run of more than 8 starts a new octet.
    fn bit(&mut self) -> Result<bool, Invalid> {
        if self.bit == 0 || self.bit == 8 {
            let octet = self.u8()?;
            self.bit = 1;
            Ok(octet & 1 != 0)
        } else {
            let octet = self.buf[self.pos - 1];
            let v = octet >> self.bit & 1 != 0;
            self.bit += 1;
            Ok(v)
        }
    }
}

/// A decoded value of one argument or property.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    Int(u64),
    Bool(bool),
    Bytes(&'a [u8]),
    /// A field table's content (without its 4-byte length).
    Table(&'a [u8]),
}

fn read_value<'a>(cur: &mut Cursor<'a>, t: ArgType) -> Result<Value<'a>, Invalid> {
    Ok(match t {
        ArgType::Octet => Value::Int(cur.u8()? as u64),
        ArgType::Short => Value::Int(cur.u16()? as u64),
        ArgType::Long => Value::Int(cur.u32()? as u64),
        ArgType::LongLong | ArgType::Timestamp => Value::Int(cur.u64()?),
        ArgType::ShortStr => Value::Bytes(cur.shortstr()?),
        ArgType::LongStr => Value::Bytes(cur.longstr()?),
        ArgType::Bit => Value::Bool(cur.bit()?),
        ArgType::Table => {
            let t = cur.longstr()?;
            validate_field_table(t)?;
            Value::Table(t)
        }
    })
}

/// Arguments of one method frame that map to frames-table columns.
#[derive(Debug, Default, Clone)]
pub struct MethodArgs<'a> {
    /// Index into [`METHODS`].
    pub index: usize,
    pub consumer_tag: Option<&'a [u8]>,
    pub delivery_tag: Option<u64>,
    pub redelivered: Option<bool>,
    pub exchange: Option<&'a [u8]>,
    pub routing_key: Option<&'a [u8]>,
    pub multiple: Option<bool>,
    pub requeue: Option<bool>,
    pub mandatory: Option<bool>,
    pub queue: Option<&'a [u8]>,
    pub no_ack: Option<bool>,
    pub prefetch_count: Option<u64>,
    pub prefetch_size: Option<u64>,
    pub global: Option<bool>,
    pub active: Option<bool>,
    pub nowait: Option<bool>,
    pub frame_max: Option<u64>,
    pub channel_max: Option<u64>,
    pub heartbeat: Option<u64>,
    pub vhost: Option<&'a [u8]>,
    pub mechanism: Option<&'a [u8]>,
    pub client_properties: Option<&'a [u8]>,
    pub server_properties: Option<&'a [u8]>,
    pub reply_code: Option<u64>,
    pub reply_text: Option<&'a [u8]>,
    pub reason: Option<&'a [u8]>,
    pub message_count: Option<u64>,
    pub consumer_count: Option<u64>,
    /// The SASL response of connection.start-ok. Only ever handed to [`sasl_user`]; the
    /// table builders have no column for it.
    pub sasl_response: Option<&'a [u8]>,
}

impl<'a> MethodArgs<'a> {
    pub fn class_id(&self) -> u16 {
        METHODS[self.index].class_id
    }
    pub fn method_id(&self) -> u16 {
        METHODS[self.index].method_id
    }
    pub fn name(&self) -> &'static str {
        METHODS[self.index].name
    }
    /// The user name from connection.start-ok's SASL response (never the password).
    pub fn user(&self) -> Option<&'a [u8]> {
        sasl_user(self.mechanism?, self.sasl_response?)
    }
    pub fn client_property(&self, key: &[u8]) -> Option<&'a [u8]> {
        table_string(self.client_properties?, key)
    }
    pub fn server_property(&self, key: &[u8]) -> Option<&'a [u8]> {
        table_string(self.server_properties?, key)
    }
}

/// Class and method ids of a method frame payload, without decoding its arguments.
pub fn method_ids(payload: &[u8]) -> Result<(u16, u16), Invalid> {
    if payload.len() < 4 {
        return Err(Invalid::Truncated);
    }
    Ok((u16::from_be_bytes([payload[0], payload[1]]), u16::from_be_bytes([payload[2], payload[3]])))
}

/// Decode a complete method frame payload (§2.3.5.1: class-id, method-id, arguments).
pub fn decode_method(payload: &[u8]) -> Result<MethodArgs<'_>, Invalid> {
    let (class_id, method_id) = method_ids(payload)?;
    let index = method_index(class_id, method_id).ok_or(Invalid::UnknownMethod(class_id, method_id))?;
    let spec = &METHODS[index];
    let mut cur = Cursor::new(&payload[4..]);
    let mut a = MethodArgs { index, ..Default::default() };
    for &(_, t, slot) in spec.args {
        let v = read_value(&mut cur, t)?;
        let (int, flag, bytes) = match v {
            Value::Int(i) => (Some(i), None, None),
            Value::Bool(b) => (None, Some(b), None),
            Value::Bytes(b) | Value::Table(b) => (None, None, Some(b)),
        };
        match slot {
            Slot::Skip => {}
            Slot::Secret => {
                if spec.name == "connection.start-ok" {
                    a.sasl_response = bytes;
                }
            }
            Slot::ConsumerTag => a.consumer_tag = bytes,
            Slot::DeliveryTag => a.delivery_tag = int,
            Slot::Redelivered => a.redelivered = flag,
            Slot::Exchange => a.exchange = bytes,
            Slot::RoutingKey => a.routing_key = bytes,
            Slot::Multiple => a.multiple = flag,
            Slot::Requeue => a.requeue = flag,
            Slot::Mandatory => a.mandatory = flag,
            Slot::Queue => a.queue = bytes,
            Slot::NoAck => a.no_ack = flag,
            Slot::PrefetchCount => a.prefetch_count = int,
            Slot::PrefetchSize => a.prefetch_size = int,
            Slot::Global => a.global = flag,
            Slot::Active => a.active = flag,
            Slot::NoWait => a.nowait = flag,
            Slot::FrameMax => a.frame_max = int,
            Slot::ChannelMax => a.channel_max = int,
            Slot::Heartbeat => a.heartbeat = int,
            Slot::VirtualHost => a.vhost = bytes,
            Slot::Mechanism => a.mechanism = bytes,
            Slot::ClientProperties => a.client_properties = bytes,
            Slot::ServerProperties => a.server_properties = bytes,
            Slot::ReplyCode => a.reply_code = int,
            Slot::ReplyText => a.reply_text = bytes,
            Slot::Reason => a.reason = bytes,
            Slot::MessageCount => a.message_count = int,
            Slot::ConsumerCount => a.consumer_count = int,
        }
    }
    Ok(a)
}

/// Decoded content header (§2.3.5.2, §4.2.6.1).
#[derive(Debug, Default, Clone)]
pub struct ContentHeader<'a> {
    pub class_id: u16,
    pub body_size: u64,
    pub content_type: Option<&'a [u8]>,
    pub delivery_mode: Option<u64>,
    pub priority: Option<u64>,
    pub correlation_id: Option<&'a [u8]>,
    pub reply_to: Option<&'a [u8]>,
    pub expiration: Option<&'a [u8]>,
    pub message_id: Option<&'a [u8]>,
    /// Seconds since the epoch (§4.2.5.4).
    pub timestamp: Option<u64>,
}

pub fn decode_content_header(payload: &[u8]) -> Result<ContentHeader<'_>, Invalid> {
    let mut cur = Cursor::new(payload);
    let class_id = cur.u16()?;
    if !class_has_content(class_id) {
        return Err(Invalid::UnknownClass(class_id));
    }
    let _weight = cur.u16()?;
    let body_size = cur.u64()?;
    let mut h = ContentHeader { class_id, body_size, ..Default::default() };
    // Property flags: 15 flags per 16-bit word, highest bit first; bit 0 set means another
    // flags word follows (§4.2.6.1).
    let props = class_properties(class_id);
    let mut present = [false; 64];
    let mut index = 0usize;
    loop {
        let word = cur.u16()?;
        for bit in (1..16).rev() {
            if index < present.len() {
                present[index] = word >> bit & 1 != 0;
            }
            index += 1;
        }
        if word & 1 == 0 {
            break;
        }
        if index >= present.len() {
            return Err(Invalid::Truncated);
        }
    }
    for (i, &(name, t)) in props.iter().enumerate() {
        if !present[i] {
            continue;
        }
        let v = read_value(&mut cur, t)?;
        let (int, bytes) = match v {
            Value::Int(i) => (Some(i), None),
            Value::Bytes(b) => (None, Some(b)),
            _ => (None, None),
        };
        match name {
            "content-type" => h.content_type = bytes,
            "delivery-mode" => h.delivery_mode = int,
            "priority" => h.priority = int,
            "correlation-id" => h.correlation_id = bytes,
            "reply-to" => h.reply_to = bytes,
            "expiration" => h.expiration = bytes,
            "message-id" => h.message_id = bytes,
            "timestamp" => h.timestamp = int,
            _ => {}
        }
    }
    Ok(h)
}

/// Length of one field value of type `tag` at the start of `buf`. RabbitMQ's field types
/// (its 0-9-1 errata: `s` is a signed 16-bit integer, `l` a signed 64-bit one).
fn field_value_len(tag: u8, buf: &[u8]) -> Result<usize, Invalid> {
    let fixed = match tag {
        b't' | b'b' | b'B' => 1,
        b's' | b'u' => 2,
        b'I' | b'i' | b'f' => 4,
        b'l' | b'L' | b'd' | b'T' => 8,
        b'D' => 5,
        b'V' => 0,
        b'S' | b'A' | b'F' | b'x' => {
            let len = buf.get(..4).ok_or(Invalid::BadFieldTable)?;
            return Ok(4 + u32::from_be_bytes(len.try_into().unwrap()) as usize);
        }
        _ => return Err(Invalid::BadFieldTable),
    };
    Ok(fixed)
}

/// Walk the entries of a field table's content, calling `f(key, tag, value bytes)`.
/// Nested tables and arrays are not descended into.
pub fn for_each_field<'a>(
    table: &'a [u8],
    mut f: impl FnMut(&'a [u8], u8, &'a [u8]),
) -> Result<(), Invalid> {
    let mut pos = 0usize;
    while pos < table.len() {
        let klen = table[pos] as usize;
        let key = table.get(pos + 1..pos + 1 + klen).ok_or(Invalid::BadFieldTable)?;
        pos += 1 + klen;
        let tag = *table.get(pos).ok_or(Invalid::BadFieldTable)?;
        pos += 1;
        let vlen = field_value_len(tag, &table[pos..])?;
        let value = table.get(pos..pos.checked_add(vlen).ok_or(Invalid::BadFieldTable)?).ok_or(Invalid::BadFieldTable)?;
        f(key, tag, value);
        pos += vlen;
    }
    Ok(())
}

fn validate_field_table(table: &[u8]) -> Result<(), Invalid> {
    for_each_field(table, |_, _, _| {})
}

/// The string value of `key` in a field table, for `S` (long string) or `x` (bytes) values.
pub fn table_string<'a>(table: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    let mut found = None;
    let _ = for_each_field(table, |k, tag, v| {
        if found.is_none() && k == key && matches!(tag, b'S' | b'x') {
            found = Some(&v[4..]);
        }
    });
    found
}

/// The user name inside a SASL response: PLAIN is `authzid NUL authcid NUL password`
/// (RFC 4616), AMQPLAIN a field table without its length holding `LOGIN` and `PASSWORD`.
/// Only the user name ever leaves this function.
pub fn sasl_user<'a>(mechanism: &[u8], response: &'a [u8]) -> Option<&'a [u8]> {
    match mechanism {
        b"PLAIN" => {
            let mut parts = response.splitn(3, |&b| b == 0);
            let _authzid = parts.next()?;
            let authcid = parts.next()?;
            parts.next()?; // a password must follow, or this is not PLAIN
            Some(authcid)
        }
        b"AMQPLAIN" => table_string(response, b"LOGIN"),
        _ => None,
    }
}

/// Result of checking whether a frame can start at `buf[0]` during resynchronisation.
#[derive(Debug, PartialEq, Eq)]
pub enum Candidate {
    /// A frame of this wire length starts here and is self-consistent.
    Frame(u64),
    /// Plausible, but its end is beyond `buf`.
    NeedMore { needed: usize },
    No,
}

/// Structural check used to find a frame boundary in the middle of a stream: type, size, the
/// frame-end octet, and for non-body frames the payload itself (a known method whose arguments
/// decode, a content header of a content class, an empty channel-0 heartbeat). Body frames carry
/// no internal structure, so the caller also checks the frame after them.
pub fn check_candidate(buf: &[u8], max_size: u32) -> Candidate {
    check_candidate_with(buf, max_size, true, &mut 0)
}

/// [`check_candidate`], with the payload decoded only when `deep` (adding the payload's
/// length to `work`); otherwise a candidate is judged by its header, method ids and frame-end
/// octet alone. The caller bounds the decoding work this way.
pub fn check_candidate_with(buf: &[u8], max_size: u32, deep: bool, work: &mut u64) -> Candidate {
    let h = match parse_frame_header(buf) {
        Ok(h) => h,
        Err(ParseError::Incomplete { needed }) => return Candidate::NeedMore { needed },
        Err(ParseError::Invalid(_)) => return Candidate::No,
    };
    if h.size > max_size {
        return Candidate::No;
    }
    let total = h.wire_len() as usize;
    match h.frame_type {
        FrameType::Heartbeat if h.channel != 0 || h.size != 0 => return Candidate::No,
        FrameType::Method if h.size < 4 => return Candidate::No,
        FrameType::Header if h.size < 14 || h.channel == 0 => return Candidate::No,
        FrameType::Body if h.channel == 0 => return Candidate::No,
        _ => {}
    }
    // Cheap early rejections before waiting for the whole frame.
    if h.frame_type == FrameType::Method && buf.len() >= FRAME_HEADER_LEN + 4 {
        if let Ok((c, m)) = method_ids(&buf[FRAME_HEADER_LEN..]) {
            if method_index(c, m).is_none() {
                return Candidate::No;
            }
        }
    }
    if buf.len() < total {
        return Candidate::NeedMore { needed: total };
    }
    if buf[total - 1] != FRAME_END {
        return Candidate::No;
    }
    let payload = &buf[FRAME_HEADER_LEN..total - 1];
    if deep && matches!(h.frame_type, FrameType::Method | FrameType::Header) {
        *work += payload.len() as u64;
    }
    let ok = match h.frame_type {
        FrameType::Method if deep => decode_method(payload).is_ok(),
        FrameType::Header if deep => decode_content_header(payload).is_ok(),
        FrameType::Header => class_has_content(u16::from_be_bytes([payload[0], payload[1]])),
        _ => true,
    };
    if ok {
        Candidate::Frame(total as u64)
    } else {
        Candidate::No
    }
}

/// Wire bytes of one frame, for tests.
#[cfg(test)]
pub(crate) fn encode_frame(frame_type: u8, channel: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![frame_type];
    v.extend_from_slice(&channel.to_be_bytes());
    v.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    v.extend_from_slice(payload);
    v.push(FRAME_END);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(t: u8, ch: u16, payload: &[u8]) -> Vec<u8> {
        encode_frame(t, ch, payload)
    }

    #[test]
    fn header_needs_more_vs_bad() {
        assert_eq!(parse_frame_header(&[1, 0]), Err(ParseError::Incomplete { needed: 7 }));
        assert_eq!(parse_frame_header(&[9, 0]), Err(ParseError::Invalid(Invalid::UnknownFrameType(9))));
    }

    #[test]
    fn deliver_args() {
        // basic.deliver: consumer-tag "ct", delivery-tag 7, redelivered=1, exchange "", routing-key "q"
        let mut p = vec![0, 60, 0, 60, 2, b'c', b't'];
        p.extend_from_slice(&7u64.to_be_bytes());
        p.extend_from_slice(&[1, 0, 1, b'q']);
        let a = decode_method(&p).unwrap();
        assert_eq!(a.name(), "basic.deliver");
        assert_eq!(a.consumer_tag, Some(&b"ct"[..]));
        assert_eq!(a.delivery_tag, Some(7));
        assert_eq!(a.redelivered, Some(true));
        assert_eq!(a.routing_key, Some(&b"q"[..]));
    }

    #[test]
    fn packed_bits() {
        // basic.nack: delivery-tag 5, multiple=0 requeue=1 share one octet (§4.2.5.2)
        let mut p = vec![0, 60, 0, 120];
        p.extend_from_slice(&5u64.to_be_bytes());
        p.push(0b10);
        let a = decode_method(&p).unwrap();
        assert_eq!((a.multiple, a.requeue), (Some(false), Some(true)));
        assert_eq!(decode_method(&p[..p.len() - 1]).unwrap_err(), Invalid::Truncated);
    }

    #[test]
    fn sasl_plain_user_only() {
        assert_eq!(sasl_user(b"PLAIN", b"\0guest\0secret"), Some(&b"guest"[..]));
        assert_eq!(sasl_user(b"PLAIN", b"guest"), None);
    }

    #[test]
    fn candidates() {
        let hb = frame(8, 0, &[]);
        assert_eq!(check_candidate(&hb, 1 << 20), Candidate::Frame(8));
        assert_eq!(check_candidate(&hb[..5], 1 << 20), Candidate::NeedMore { needed: 7 });
        let mut bad = hb.clone();
        bad[7] = 0;
        assert_eq!(check_candidate(&bad, 1 << 20), Candidate::No);
        assert_eq!(check_candidate(&frame(8, 1, &[]), 1 << 20), Candidate::No);
    }

    #[test]
    fn content_header_properties() {
        // class 60, weight 0, body size 10, flags: delivery-mode (bit 12) + correlation-id (bit 10)
        let mut p = vec![0, 60, 0, 0];
        p.extend_from_slice(&10u64.to_be_bytes());
        p.extend_from_slice(&((1u16 << 12) | (1 << 10)).to_be_bytes());
        p.push(2);
        p.extend_from_slice(&[3, b'a', b'b', b'c']);
        let h = decode_content_header(&p).unwrap();
        assert_eq!(h.body_size, 10);
        assert_eq!(h.delivery_mode, Some(2));
        assert_eq!(h.correlation_id, Some(&b"abc"[..]));
    }
}
