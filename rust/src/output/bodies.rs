//! The `bodies` table (docs/tables.md), only when bodies are asked for: one row per message,
//! its body bytes kept up to `max_body_bytes` in all.

use crate::output::tables::{direction_codes, Column, Table,
    DIRECTIONS,
};
use super::PacketTimes;

/// A message whose content header was decoded and whose body frames are still to come.
pub(crate) struct PendingBody {
    pub(crate) from_a: bool,
    pub(crate) channel: u16,
    /// Packet that completed the content header.
    pub(crate) packet: u32,
    pub(crate) body_size: u64,
    /// Body-frame payload bytes seen so far (kept or not).
    pub(crate) received: u64,
    pub(crate) data: Vec<u8>,
    /// Bytes of this body are missing from `data` (capture gap, resync, `max_body_bytes`).
    pub(crate) broken: bool,
}

/// The `bodies` table (only built when bodies are asked for): one row per message.
pub struct BodiesBuilder {
    pub(crate) stream: Vec<i32>,
    pub(crate) from_a: Vec<bool>,
    pub(crate) channel: Vec<i32>,
    pub(crate) packet: Vec<i32>,
    pub(crate) last_packet: Vec<i32>,
    pub(crate) body_size: Vec<i64>,
    pub(crate) complete: Vec<bool>,
    pub(crate) data: Vec<u8>,
    pub(crate) ends: Vec<usize>,
    /// Bytes that may still be kept (`max_body_bytes` minus what was kept).
    pub(crate) budget: u64,
    /// Body bytes not kept because of `max_body_bytes`.
    pub not_kept: u64,
}

impl BodiesBuilder {
    pub(crate) fn new(max_body_bytes: u64) -> Self {
        BodiesBuilder {
            stream: Vec::new(),
            from_a: Vec::new(),
            channel: Vec::new(),
            packet: Vec::new(),
            last_packet: Vec::new(),
            body_size: Vec::new(),
            complete: Vec::new(),
            data: Vec::new(),
            ends: Vec::new(),
            budget: max_body_bytes,
            not_kept: 0,
        }
    }

    pub(crate) fn row(&mut self, stream: u32, p: PendingBody, last_packet: u32) {
        self.stream.push(stream as i32);
        self.from_a.push(p.from_a);
        self.channel.push(p.channel as i32);
        self.packet.push(p.packet as i32);
        self.last_packet.push(last_packet as i32);
        self.body_size.push(p.body_size.min(i64::MAX as u64) as i64);
        self.complete
            .push(!p.broken && p.data.len() as u64 == p.body_size);
        self.data.extend_from_slice(&p.data);
        self.ends.push(self.data.len());
    }
}

pub(crate) fn bodies_table(b: BodiesBuilder, a_is_client: &[bool], times: &PacketTimes<'_>) -> Table {
    let stream_u32: Vec<u32> = b.stream.iter().map(|&s| s as u32).collect();
    let direction = direction_codes(&stream_u32, &b.from_a, a_is_client);
    let ts = times.of(&b.packet);
    vec![
        ("stream", Column::I32(b.stream)),
        ("direction", Column::Cat(direction, DIRECTIONS.to_vec())),
        ("channel", Column::I32(b.channel)),
        ("packet", Column::I32(b.packet)),
        ("last_packet", Column::I32(b.last_packet)),
        ("ts", Column::Ts(ts)),
        ("body_size", Column::I64(b.body_size)),
        ("complete", Column::Bool(b.complete)),
        ("body", Column::Bytes(b.data, b.ends)),
    ]
}

