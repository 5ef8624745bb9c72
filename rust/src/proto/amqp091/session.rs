//! What the frames of one AMQP 0-9-1 connection direction mean to the tables: the frame rows
//! (methods decoded into their columns, content headers into theirs), the connection's session
//! facts (connection.start/-ok, tune/-ok, open: the handshake and the negotiated frame_max the
//! decoder is held to), and message bodies when asked for.
//!
//! The pipeline (`crate::pipeline`) owns the flow table, TCP metadata and reassembly; it builds
//! the [`Sink`] (`crate::proto::sink`) once per decoded packet and `crate::proto::dispatch` hands
//! the direction's chunks to the decoder its first bytes chose. Everything here is AMQP 0-9-1
//! (AMQP 1.0's is `crate::proto::amqp10::session`); the negotiated frame_max reaches the decoders
//! through `crate::proto::dispatch::apply_tune`.

use crate::proto::amqp091::decoder::{FrameEvent, FrameSink};
use crate::proto::amqp091::parser::{decode_content_header, decode_method, FrameType, MethodArgs};
use crate::anomaly::AnomalyKind;
use crate::output::bodies::PendingBody;
use crate::output::frames::frame_type_code;
use crate::proto::sink::{DecodeSink, Sink};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

impl FrameSink for Sink<'_> {
    fn frame(&mut self, ev: FrameEvent<'_>) -> bool {
        if self.tables.bodies.is_some() {
            self.body_frame(&ev);
        }
        if self.tables.frames.rows() as u64 >= self.max_frames {
            // The table is full: only what the connection's state depends on is still read.
            if ev.header.frame_type == FrameType::Method && ev.header.channel == 0 {
                if let Ok(a) = decode_method(ev.payload.unwrap_or(&[])) {
                    self.connection_facts(&a);
                }
            }
            return false;
        }
        let f = &mut self.tables.frames;
        let row = f.packet.len();
        self.info.frames += 1;
        self.tables.packets.frames_ended[self.arrival_row as usize] += 1;
        f.packet.push(ev.packet as i32);
        f.first_packet.push(ev.first_packet as i32);
        f.stream.push(self.origin.stream as i32);
        f.from_a.push(self.origin.from_a);
        f.channel.push(ev.header.channel as i32);
        f.frame_type.push(frame_type_code(ev.header.frame_type));
        f.size_bytes.push(ev.header.size as i64);
        let payload = ev.payload.unwrap_or(&[]);
        match ev.header.frame_type {
            FrameType::Method => {
                let res = f.push_method(row, payload);
                match res {
                    Ok(a) => self.connection_facts(&a),
                    Err((kind, detail)) => self.anomaly(kind, ev.packet, ev.header.size as u64, detail),
                }
            }
            FrameType::Header => {
                match decode_content_header(payload) {
                    Ok(h) => {
                        f.class_id.push(Some(h.class_id as i16));
                        f.body_size.push(row, Some(h.body_size as i64));
                        f.delivery_mode.push(row, h.delivery_mode.map(|v| v as i16));
                        f.priority.push(row, h.priority.map(|v| v as i16));
                        f.content_type.push(row, h.content_type);
                        f.correlation_id.push(row, h.correlation_id);
                        f.reply_to.push(row, h.reply_to);
                        f.expiration.push(row, h.expiration);
                        f.message_id.push(row, h.message_id);
                        f.message_timestamp.push(row, h.timestamp.map(|s| (s as i64).saturating_mul(1_000_000_000)));
                    }
                    Err(e) => {
                        f.class_id.push(payload.get(..2).map(|b| u16::from_be_bytes([b[0], b[1]]) as i16));
                        self.anomaly(AnomalyKind::MalformedHeader, ev.packet, ev.header.size as u64, e.to_string());
                    }
                }
                let f = &mut self.tables.frames;
                f.method_id.push(None);
                f.method.push(-1);
            }
            FrameType::Body | FrameType::Heartbeat => {
                f.class_id.push(None);
                f.method_id.push(None);
                f.method.push(-1);
            }
        }
        true
    }

    fn body(&mut self, channel: u16, bytes: &[u8]) {
        let (Some(b), Some(pending)) =
            (self.tables.bodies.as_mut(), self.info.bodies.as_deref_mut())
        else {
            return;
        };
        let from_a = self.origin.from_a;
        let Some(p) = pending
            .iter_mut()
            .find(|p| p.from_a == from_a && p.channel == channel)
        else {
            return;
        };
        if p.broken {
            return;
        }
        let want = (bytes.len() as u64).min(p.body_size.saturating_sub(p.data.len() as u64));
        let take = want.min(b.budget);
        p.data.extend_from_slice(&bytes[..take as usize]);
        b.budget -= take;
        if take < want {
            b.not_kept += want - take;
            p.broken = true;
        }
    }
}

impl Sink<'_> {
    /// Bodies on: a content header opens a message on its channel, body frames complete it.
    fn body_frame(&mut self, ev: &FrameEvent<'_>) {
        let from_a = self.origin.from_a;
        let channel = ev.header.channel;
        let stream = self.origin.stream;
        let Some(b) = self.tables.bodies.as_mut() else {
            return;
        };
        let pending = self.info.bodies.get_or_insert_with(Default::default);
        let at = pending
            .iter()
            .position(|p| p.from_a == from_a && p.channel == channel);
        match ev.header.frame_type {
            FrameType::Header => {
                if let Some(i) = at {
                    // The previous message on this channel never got all its body.
                    let mut old = pending.swap_remove(i);
                    old.broken = true;
                    let last = old.packet;
                    b.row(stream, old, last);
                }
                let Ok(h) = decode_content_header(ev.payload.unwrap_or(&[])) else {
                    return;
                };
                let p = PendingBody {
                    from_a,
                    channel,
                    packet: ev.packet,
                    body_size: h.body_size,
                    received: 0,
                    data: Vec::new(),
                    broken: false,
                };
                if h.body_size == 0 {
                    b.row(stream, p, ev.packet);
                } else {
                    pending.push(p);
                }
            }
            FrameType::Body => {
                let Some(i) = at else { return };
                let p = &mut pending[i];
                p.received += ev.header.size as u64;
                if p.received >= p.body_size {
                    let p = pending.swap_remove(i);
                    b.row(stream, p, ev.packet);
                }
            }
            _ => {}
        }
    }

    /// Remember what a connection-level method says about the connection.
    fn connection_facts(&mut self, a: &MethodArgs<'_>) {
        let name = a.name();
        if !matches!(
            name,
            "connection.start"
                | "connection.start-ok"
                | "connection.tune"
                | "connection.tune-ok"
                | "connection.open"
        ) {
            return;
        }
        let info = &mut *self.info;
        let i = info.hs.get_or_insert_with(Default::default);
        let s = |v: Option<&[u8]>| v.map(text);
        match name {
            "connection.start" => {
                i.server_product = s(a.server_property(b"product"));
                i.server_version = s(a.server_property(b"version"));
            }
            "connection.start-ok" => {
                i.user = s(a.user());
                i.mechanism = s(a.mechanism);
                i.client_product = s(a.client_property(b"product"));
                i.client_version = s(a.client_property(b"version"));
                i.client_platform = s(a.client_property(b"platform"));
                i.connection_name = s(a.client_property(b"connection_name"));
            }
            "connection.tune" | "connection.tune-ok" => {
                let ok = name == "connection.tune-ok";
                if ok || !i.tune_ok_seen {
                    i.frame_max = a.frame_max;
                    i.channel_max = a.channel_max;
                    i.heartbeat = a.heartbeat;
                    info.frame_max_changed = true;
                }
                i.tune_ok_seen |= ok;
            }
            "connection.open" => i.vhost = s(a.vhost),
            _ => {}
        }
    }
}
