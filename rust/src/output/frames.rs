//! The `frames` table (docs/tables.md): one row per AMQP 0-9-1 frame, the method's arguments in
//! sparse columns; the direction is settled when the table is made.

use crate::amqp::parser::{decode_method, method_ids, FrameType, Invalid, MethodArgs};
use crate::amqp::spec::{METHODS, METHOD_COUNT};
use crate::anomaly::AnomalyKind;
use crate::tables::{str_column, 
    direction_codes, Column, OptCol, Sparse, SparseStr, Table,
    DIRECTIONS,
};
use super::PacketTimes;

#[derive(Default)]
pub struct FramesBuilder {
    pub(crate) packet: Vec<i32>,
    pub(crate) first_packet: Vec<i32>,
    pub(crate) stream: Vec<i32>,
    pub(crate) from_a: Vec<bool>,
    pub(crate) channel: Vec<i32>,
    pub(crate) frame_type: Vec<i8>,
    pub(crate) size_bytes: Vec<i64>,
    pub(crate) class_id: OptCol<i16>,
    pub(crate) method_id: OptCol<i16>,
    pub(crate) method: Vec<i32>,
    pub(crate) consumer_tag: SparseStr,
    pub(crate) delivery_tag: Sparse<u64>,
    pub(crate) redelivered: Sparse<bool>,
    pub(crate) exchange: SparseStr,
    pub(crate) routing_key: SparseStr,
    pub(crate) multiple: Sparse<bool>,
    pub(crate) requeue: Sparse<bool>,
    pub(crate) mandatory: Sparse<bool>,
    pub(crate) queue: SparseStr,
    pub(crate) no_ack: Sparse<bool>,
    pub(crate) prefetch_count: Sparse<i32>,
    pub(crate) prefetch_size: Sparse<u32>,
    pub(crate) global: Sparse<bool>,
    pub(crate) active: Sparse<bool>,
    pub(crate) nowait: Sparse<bool>,
    pub(crate) frame_max: Sparse<u32>,
    pub(crate) channel_max: Sparse<i32>,
    pub(crate) heartbeat_s: Sparse<i32>,
    pub(crate) vhost: SparseStr,
    pub(crate) mechanism: SparseStr,
    pub(crate) user: SparseStr,
    pub(crate) client_product: SparseStr,
    pub(crate) client_version: SparseStr,
    pub(crate) client_platform: SparseStr,
    pub(crate) connection_name: SparseStr,
    pub(crate) server_product: SparseStr,
    pub(crate) server_version: SparseStr,
    pub(crate) reply_code: Sparse<i16>,
    pub(crate) reply_text: SparseStr,
    pub(crate) reason: SparseStr,
    pub(crate) message_count: Sparse<u32>,
    pub(crate) consumer_count: Sparse<u32>,
    pub(crate) body_size: Sparse<i64>,
    pub(crate) delivery_mode: Sparse<i16>,
    pub(crate) priority: Sparse<i16>,
    pub(crate) content_type: SparseStr,
    pub(crate) correlation_id: SparseStr,
    pub(crate) reply_to: SparseStr,
    pub(crate) expiration: SparseStr,
    pub(crate) message_id: SparseStr,
    pub(crate) message_timestamp: Sparse<i64>,
}

pub const FRAME_TYPES: [&str; 4] = ["method", "header", "body", "heartbeat"];

pub(crate) fn frame_type_code(t: FrameType) -> i8 {
    match t {
        FrameType::Method => 0,
        FrameType::Header => 1,
        FrameType::Body => 2,
        FrameType::Heartbeat => 3,
    }
}

impl FramesBuilder {
    /// Fill the method columns of one row; `Err` names the anomaly when the payload is not a
    /// known, well-formed method (the row then has only the ids).
    pub(crate) fn push_method<'p>(&mut self, row: usize, payload: &'p [u8]) -> Result<MethodArgs<'p>, (AnomalyKind, String)> {
        let f = self;
        match decode_method(payload) {
            Ok(a) => {
                f.class_id.push(Some(a.class_id() as i16));
                f.method_id.push(Some(a.method_id() as i16));
                f.method.push(a.index as i32);
                f.consumer_tag.push(row, a.consumer_tag);
                f.delivery_tag.push(row, a.delivery_tag);
                f.redelivered.push(row, a.redelivered);
                f.exchange.push(row, a.exchange);
                f.routing_key.push(row, a.routing_key);
                f.multiple.push(row, a.multiple);
                f.requeue.push(row, a.requeue);
                f.mandatory.push(row, a.mandatory);
                f.queue.push(row, a.queue);
                f.no_ack.push(row, a.no_ack);
                f.prefetch_count.push(row, a.prefetch_count.map(|v| v as i32));
                f.prefetch_size.push(row, a.prefetch_size.map(|v| v as u32));
                f.global.push(row, a.global);
                f.active.push(row, a.active);
                f.nowait.push(row, a.nowait);
                f.frame_max.push(row, a.frame_max.map(|v| v as u32));
                f.channel_max.push(row, a.channel_max.map(|v| v as i32));
                f.heartbeat_s.push(row, a.heartbeat.map(|v| v as i32));
                f.vhost.push(row, a.vhost);
                f.mechanism.push(row, a.mechanism);
                f.user.push(row, a.user());
                f.client_product.push(row, a.client_property(b"product"));
                f.client_version.push(row, a.client_property(b"version"));
                f.client_platform.push(row, a.client_property(b"platform"));
                f.connection_name.push(row, a.client_property(b"connection_name"));
                f.server_product.push(row, a.server_property(b"product"));
                f.server_version.push(row, a.server_property(b"version"));
                f.reply_code.push(row, a.reply_code.map(|v| v as i16));
                f.reply_text.push(row, a.reply_text);
                f.reason.push(row, a.reason);
                f.message_count.push(row, a.message_count.map(|v| v as u32));
                f.consumer_count.push(row, a.consumer_count.map(|v| v as u32));
                Ok(a)
            }
            Err(e) => {
                let ids = method_ids(payload).ok();
                f.class_id.push(ids.map(|i| i.0 as i16));
                f.method_id.push(ids.map(|i| i.1 as i16));
                f.method.push(-1);
                Err(match e {
                    Invalid::UnknownMethod(c, m) => (AnomalyKind::UnknownMethod, format!("class {c} method {m}")),
                    other => (AnomalyKind::MalformedMethod, format!("{other:?} in method {ids:?}")),
                })
            }
        }
    }

    pub(crate) fn rows(&self) -> usize {
        self.packet.len()
    }
}

pub(crate) fn frames_table(f: FramesBuilder, a_is_client: &[bool], times: &PacketTimes<'_>) -> Table {
    let n = f.rows();
    let stream_u32: Vec<u32> = f.stream.iter().map(|&s| s as u32).collect();
    let direction = direction_codes(&stream_u32, &f.from_a, a_is_client);
    let ts = times.of(&f.packet);
    let method_names: Vec<String> = METHODS.iter().map(|m| m.name.to_string()).collect();
    debug_assert_eq!(method_names.len(), METHOD_COUNT);
    let (ts_values, ts_valid) = f.message_timestamp.dense(n);
    vec![
        ("packet", Column::I32(f.packet)),
        ("first_packet", Column::I32(f.first_packet)),
        ("ts", Column::Ts(ts)),
        ("stream", Column::I32(f.stream)),
        ("direction", Column::Cat(direction, DIRECTIONS.to_vec())),
        ("channel", Column::I32(f.channel)),
        ("type", Column::Cat(f.frame_type, FRAME_TYPES.to_vec())),
        ("size_bytes", Column::I64(f.size_bytes)),
        ("class_id", f.class_id.finish()),
        ("method_id", f.method_id.finish()),
        ("method", str_column(f.method, method_names)),
        ("consumer_tag", f.consumer_tag.finish(n)),
        ("delivery_tag", f.delivery_tag.finish(n)),
        ("redelivered", f.redelivered.finish(n)),
        ("exchange", f.exchange.finish(n)),
        ("routing_key", f.routing_key.finish(n)),
        ("multiple", f.multiple.finish(n)),
        ("requeue", f.requeue.finish(n)),
        ("mandatory", f.mandatory.finish(n)),
        ("queue", f.queue.finish(n)),
        ("no_ack", f.no_ack.finish(n)),
        ("prefetch_count", f.prefetch_count.finish(n)),
        ("prefetch_size", f.prefetch_size.finish(n)),
        ("global", f.global.finish(n)),
        ("active", f.active.finish(n)),
        ("nowait", f.nowait.finish(n)),
        ("frame_max", f.frame_max.finish(n)),
        ("channel_max", f.channel_max.finish(n)),
        ("heartbeat_s", f.heartbeat_s.finish(n)),
        ("vhost", f.vhost.finish(n)),
        ("mechanism", f.mechanism.finish(n)),
        ("user", f.user.finish(n)),
        ("client_product", f.client_product.finish(n)),
        ("client_version", f.client_version.finish(n)),
        ("client_platform", f.client_platform.finish(n)),
        ("connection_name", f.connection_name.finish(n)),
        ("server_product", f.server_product.finish(n)),
        ("server_version", f.server_version.finish(n)),
        ("reply_code", f.reply_code.finish(n)),
        ("reply_text", f.reply_text.finish(n)),
        ("reason", f.reason.finish(n)),
        ("message_count", f.message_count.finish(n)),
        ("consumer_count", f.consumer_count.finish(n)),
        ("body_size", f.body_size.finish(n)),
        ("delivery_mode", f.delivery_mode.finish(n)),
        ("priority", f.priority.finish(n)),
        ("content_type", f.content_type.finish(n)),
        ("correlation_id", f.correlation_id.finish(n)),
        ("reply_to", f.reply_to.finish(n)),
        ("expiration", f.expiration.finish(n)),
        ("message_id", f.message_id.finish(n)),
        ("message_timestamp", Column::NullTs(ts_values, ts_valid)),
    ]
}

