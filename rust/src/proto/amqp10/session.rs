//! What the frames of an AMQP 1.0 connection direction mean to the tables: each frame a row of
//! `amqp10_frames` (docs/tables.md), its performative's fields decoded (`performatives.rs`);
//! open and SASL fill the connection's facts (`connections`); the transfers of a delivery split
//! over several frames (Part 2 §2.6.14) are tied together per direction (`deliveries.rs`).
//!
//! Secrets: a sasl-init's initial response is never kept. PLAIN's authcid alone comes out of it
//! (`connections.user`, through [`sasl_plain_authcid`]); no column holds the response, the
//! password, a challenge or a response.

use crate::anomaly::AnomalyKind;
use crate::output::amqp10_frames::{performative_code, Amqp10FramesBuilder};
use crate::proto::amqp10::decoder::{FrameEvent, FrameSink};
use crate::proto::amqp10::parser::{performative_name, FrameKind};
use crate::proto::amqp10::performatives::{
    decode_message, decode_performative, sasl_plain_authcid, AmqpError, DeliveryState, MessageId, Performative, ReceiverSettleMode,
    Role, SaslCode, SenderSettleMode, Symbols, DESCRIPTORS,
};
use crate::proto::amqp10::types::{Descriptor, Encoded, Value};
use crate::proto::facts::ConnInfo;
use crate::proto::sink::{DecodeSink, Sink};

impl FrameSink for Sink<'_> {
    fn frame(&mut self, ev: FrameEvent, body: Option<&[u8]>) {
        self.info.frames += 1;
        self.tables.packets.frames_ended[self.arrival_row as usize] += 1;
        let dir = if self.origin.from_a { 0 } else { 1 };
        let f = &mut self.tables.amqp10_frames;
        let row = f.rows();
        let h = ev.header;
        f.packet.push(ev.packet as i32);
        f.first_packet.push(ev.first_packet as i32);
        f.stream.push(self.origin.stream as i32);
        f.from_a.push(self.origin.from_a);
        f.channel.push(h.channel as i32);
        f.frame_type.push(match (h.kind, h.body_len()) {
            (_, 0) => 2,
            (FrameKind::Amqp, _) => 0,
            (FrameKind::Sasl, _) => 1,
        });
        f.size_bytes.push(h.body_len() as i64);
        let named = ev.performative.and_then(performative_name);
        let Some(body) = body.filter(|b| !b.is_empty()) else {
            // an empty frame, or a performative not kept (the decoder said why)
            f.performative.push(named.map_or(-1, performative_code));
            return;
        };
        let (p, payload) = match decode_performative(body) {
            Ok(d) => d,
            Err(bad) => {
                f.performative.push(named.map_or(-1, performative_code));
                let what = named.unwrap_or("frame body");
                self.anomaly(AnomalyKind::MalformedMethod, ev.packet, h.body_len() as u64, format!("AMQP 1.0 {what}: {bad:?}"));
                return;
            }
        };
        if let Performative::Unknown(d) = p {
            f.performative.push(-1);
            self.anomaly(AnomalyKind::UnknownMethod, ev.packet, h.body_len() as u64, format!("AMQP 1.0 frame body with descriptor {}", descriptor_name(d)));
            return;
        }
        f.performative.push(performative_code(name_of(&p)));
        // the message bytes this frame carries: the frame's body less its performative
        let payload_bytes = h.body_len() as u64 - (body.len() - payload.len()) as u64;
        let info = &mut *self.info;
        let malformed = push_fields(f, info, row, dir, h.channel, &p, body, payload, payload_bytes);
        if let Some(detail) = malformed {
            self.anomaly(AnomalyKind::MalformedHeader, ev.packet, payload_bytes, detail);
        }
    }
}

fn name_of(p: &Performative) -> &'static str {
    match p {
        Performative::Open(_) => "open",
        Performative::Begin(_) => "begin",
        Performative::Attach(_) => "attach",
        Performative::Flow(_) => "flow",
        Performative::Transfer(_) => "transfer",
        Performative::Disposition(_) => "disposition",
        Performative::Detach(_) => "detach",
        Performative::End { .. } => "end",
        Performative::Close { .. } => "close",
        Performative::SaslMechanisms { .. } => "sasl-mechanisms",
        Performative::SaslInit { .. } => "sasl-init",
        Performative::SaslChallenge => "sasl-challenge",
        Performative::SaslResponse => "sasl-response",
        Performative::SaslOutcome { .. } => "sasl-outcome",
        Performative::Unknown(_) => "unknown",
    }
}

/// A descriptor as text: its symbol, or the name [`DESCRIPTORS`] gives its code, or the code.
fn descriptor_name(d: Descriptor) -> String {
    match d {
        Descriptor::Symbol(s) => s.to_string(),
        Descriptor::Code(c) => DESCRIPTORS.iter().find(|(code, _)| *code == c).map_or_else(|| format!("0x{c:x}"), |(_, n)| n.to_string()),
    }
}

/// `b` in lowercase hex, two digits an octet (delivery tags, binary message ids). Not through
/// `write!`: formatting each octet took about 3% of a 1.0 capture's decoding (perf samples).
fn hex(b: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(2 * b.len());
    for &x in b {
        s.push(DIGITS[(x >> 4) as usize] as char);
        s.push(DIGITS[(x & 0x0f) as usize] as char);
    }
    s
}

/// A message-id or correlation-id as text (docs/tables.md): ulong in decimal, uuid in its
/// 8-4-4-4-12 form, binary in hex, string as it is.
fn id_text(id: MessageId) -> String {
    match id {
        MessageId::Ulong(v) => v.to_string(),
        MessageId::Uuid(u) => {
            let h = hex(&u);
            format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
        }
        MessageId::Binary(b) => hex(b),
        MessageId::String(s) => s.to_string(),
    }
}

fn role(r: Role) -> &'static [u8] {
    match r {
        Role::Sender => b"sender",
        Role::Receiver => b"receiver",
    }
}

fn symbols(s: Symbols) -> String {
    s.iter().filter_map(Result::ok).collect::<Vec<_>>().join(" ")
}

/// The `connection_name` property of an open's properties map (a symbol or string key with a
/// string value), as client libraries set it (RabbitMQ shows it as the connection's name).
fn connection_name_property<'a>(properties: Option<Encoded<'a>>) -> Option<&'a str> {
    let Ok(Value::Map(m)) = properties?.value() else { return None };
    let mut items = m.iter();
    while let (Some(Ok(k)), Some(Ok(v))) = (items.next(), items.next()) {
        if matches!(k.value(), Ok(Value::Symbol("connection_name") | Value::String("connection_name"))) {
            return match v.value() {
                Ok(Value::String(s)) => Some(s),
                _ => None,
            };
        }
    }
    None
}

/// A delivery state's columns: `state`, a modified state's flags, a rejected state's error.
fn push_state(f: &mut Amqp10FramesBuilder, row: usize, s: Option<DeliveryState>) {
    let Some(s) = s else { return };
    let name = match s {
        DeliveryState::Received { .. } => "received".to_string(),
        DeliveryState::Accepted => "accepted".to_string(),
        DeliveryState::Rejected { error } => {
            push_error(f, row, error);
            "rejected".to_string()
        }
        DeliveryState::Released => "released".to_string(),
        DeliveryState::Modified { delivery_failed, undeliverable_here } => {
            f.delivery_failed.push(row, delivery_failed);
            f.undeliverable_here.push(row, undeliverable_here);
            "modified".to_string()
        }
        DeliveryState::Other(d) => descriptor_name(d),
    };
    f.state.push(row, Some(name.as_bytes()));
}

fn push_error(f: &mut Amqp10FramesBuilder, row: usize, e: Option<AmqpError>) {
    if let Some(e) = e {
        f.error_condition.push(row, Some(e.condition.as_bytes()));
        f.error_description.push(row, e.description.map(str::as_bytes));
    }
}

/// The columns of performative `p` in row `row` (sent by `dir` on `channel`; `body` the frame
/// body as kept, `payload` what follows the performative in it, `payload_bytes` the frame's
/// bytes after the performative), and what it tells of the connection. `Some` says why the
/// message's sections could not be read.
#[allow(clippy::too_many_arguments)]
fn push_fields(
    f: &mut Amqp10FramesBuilder,
    info: &mut ConnInfo,
    row: usize,
    dir: usize,
    channel: u16,
    p: &Performative,
    body: &[u8],
    payload: &[u8],
    payload_bytes: u64,
) -> Option<String> {
    match *p {
        Performative::Open(o) => {
            f.container_id.push(row, Some(o.container_id.as_bytes()));
            f.hostname.push(row, o.hostname.map(str::as_bytes));
            f.max_frame_size.push(row, Some(o.max_frame_size));
            f.channel_max.push(row, Some(o.channel_max as i32));
            f.idle_timeout_ms.push(row, o.idle_time_out_ms);
            let hs = info.hs.get_or_insert_with(Default::default);
            // what both sides may send: the smaller of the two (Part 2 §2.7.1)
            let smaller = |was: Option<u64>, v: u64| Some(was.map_or(v, |w| w.min(v)));
            hs.frame_max = smaller(hs.frame_max, o.max_frame_size as u64);
            hs.channel_max = smaller(hs.channel_max, o.channel_max as u64);
            hs.idle_timeout_ms[dir] = o.idle_time_out_ms.map(u64::from);
            hs.amqp10_name[dir] = Some(connection_name_property(o.properties).unwrap_or(o.container_id).to_string());
        }
        Performative::Begin(b) => {
            f.remote_channel.push(row, b.remote_channel.map(i32::from));
            f.next_outgoing_id.push(row, Some(b.next_outgoing_id));
            f.incoming_window.push(row, Some(b.incoming_window));
            f.outgoing_window.push(row, Some(b.outgoing_window));
            f.handle_max.push(row, Some(b.handle_max));
        }
        Performative::Attach(a) => {
            f.handle.push(row, Some(a.handle));
            f.role.push(row, Some(role(a.role)));
            f.name.push(row, Some(a.name.as_bytes()));
            f.source_address.push(row, a.source.and_then(|t| t.address).map(str::as_bytes));
            f.target_address.push(row, a.target.and_then(|t| t.address).map(str::as_bytes));
            f.snd_settle_mode.push(row, Some(match a.snd_settle_mode {
                SenderSettleMode::Unsettled => b"unsettled".as_slice(),
                SenderSettleMode::Settled => b"settled",
                SenderSettleMode::Mixed => b"mixed",
            }));
            f.rcv_settle_mode.push(row, Some(match a.rcv_settle_mode {
                ReceiverSettleMode::First => b"first".as_slice(),
                ReceiverSettleMode::Second => b"second",
            }));
            f.initial_delivery_count.push(row, a.initial_delivery_count);
            f.max_message_size.push(row, a.max_message_size);
        }
        Performative::Flow(fl) => {
            f.handle.push(row, fl.handle);
            f.next_incoming_id.push(row, fl.next_incoming_id);
            f.incoming_window.push(row, Some(fl.incoming_window));
            f.next_outgoing_id.push(row, Some(fl.next_outgoing_id));
            f.outgoing_window.push(row, Some(fl.outgoing_window));
            f.delivery_count.push(row, fl.delivery_count);
            f.link_credit.push(row, fl.link_credit);
            f.available.push(row, fl.available);
            f.drain.push(row, Some(fl.drain));
            f.echo.push(row, Some(fl.echo));
        }
        Performative::Transfer(t) => {
            let deliveries = info.amqp10.get_or_insert_with(Default::default);
            let d = deliveries.transfer(dir, channel, t.handle, t.delivery_id, t.more, t.aborted, Some(payload_bytes));
            f.handle.push(row, Some(t.handle));
            f.delivery_id.push(row, d.delivery_id);
            f.continuation.push(row, Some(d.continuation));
            f.delivery_tag.push(row, t.delivery_tag.map(hex).as_deref().map(str::as_bytes));
            f.message_format.push(row, t.message_format);
            f.settled.push(row, t.settled);
            f.more.push(row, Some(t.more));
            f.aborted.push(row, Some(t.aborted));
            f.resume.push(row, Some(t.resume));
            f.batchable.push(row, Some(t.batchable));
            push_state(f, row, t.state);
            f.payload_bytes.push(row, Some(payload_bytes as i64));
            f.message_bytes.push(row, d.message_bytes.map(|b| b as i64));
            // the message's first sections, on its first frame, in the standard format (0,
            // Part 3 §3.2); the frame may end inside one (read up to it)
            if !d.continuation && t.message_format.unwrap_or(0) == 0 {
                return push_message(f, row, payload);
            }
        }
        Performative::Disposition(d) => {
            f.role.push(row, Some(role(d.role)));
            f.first.push(row, Some(d.first));
            f.last.push(row, Some(d.last));
            f.settled.push(row, Some(d.settled));
            f.batchable.push(row, Some(d.batchable));
            push_state(f, row, d.state);
        }
        Performative::Detach(d) => {
            f.handle.push(row, Some(d.handle));
            f.closed.push(row, Some(d.closed));
            push_error(f, row, d.error);
            if let Some(deliveries) = info.amqp10.as_deref_mut() {
                deliveries.forget(dir, channel, Some(d.handle));
            }
        }
        Performative::End { error } => {
            push_error(f, row, error);
            if let Some(deliveries) = info.amqp10.as_deref_mut() {
                deliveries.forget(dir, channel, None);
            }
        }
        Performative::Close { error } => push_error(f, row, error),
        Performative::SaslMechanisms { mechanisms } => f.mechanisms.push(row, Some(symbols(mechanisms).as_bytes())),
        Performative::SaslInit { mechanism, .. } => {
            f.mechanism.push(row, Some(mechanism.as_bytes()));
            let hs = info.hs.get_or_insert_with(Default::default);
            hs.mechanism = Some(mechanism.to_string());
            // the user name alone; the response itself (with the password) is never kept
            hs.user = sasl_plain_authcid(body).map(str::to_string);
        }
        Performative::SaslOutcome { code } => {
            let name = match code {
                SaslCode::Ok => "ok".to_string(),
                SaslCode::Auth => "auth".to_string(),
                SaslCode::Sys => "sys".to_string(),
                SaslCode::SysPerm => "sys-perm".to_string(),
                SaslCode::SysTemp => "sys-temp".to_string(),
                SaslCode::Other(c) => c.to_string(),
            };
            f.sasl_outcome.push(row, Some(name.as_bytes()));
        }
        Performative::SaslChallenge | Performative::SaslResponse | Performative::Unknown(_) => {}
    }
    None
}

/// The header and properties sections of a message's first octets; `Some` says why they could
/// not be read.
fn push_message(f: &mut Amqp10FramesBuilder, row: usize, payload: &[u8]) -> Option<String> {
    let m = match decode_message(payload) {
        Ok(m) => m,
        Err(bad) => return Some(format!("AMQP 1.0 message sections: {bad:?}")),
    };
    if let Some(h) = m.header {
        f.durable.push(row, Some(h.durable));
        f.first_acquirer.push(row, Some(h.first_acquirer));
        f.priority.push(row, Some(h.priority));
        f.ttl_ms.push(row, h.ttl_ms);
        f.header_delivery_count.push(row, Some(h.delivery_count));
    }
    if let Some(p) = m.properties {
        f.message_id.push(row, p.message_id.map(id_text).as_deref().map(str::as_bytes));
        f.correlation_id.push(row, p.correlation_id.map(id_text).as_deref().map(str::as_bytes));
        f.to.push(row, p.to.map(str::as_bytes));
        f.subject.push(row, p.subject.map(str::as_bytes));
        f.reply_to.push(row, p.reply_to.map(str::as_bytes));
        f.content_type.push(row, p.content_type.map(str::as_bytes));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_two_lowercase_digits_an_octet() {
        assert_eq!(hex(&[]), "");
        assert_eq!(hex(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
        let every: Vec<u8> = (0..=255).collect();
        let expected: String = every.iter().map(|x| format!("{x:02x}")).collect();
        assert_eq!(hex(&every), expected);
    }
}
