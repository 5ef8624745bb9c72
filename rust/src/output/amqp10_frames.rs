//! The `amqp10_frames` table (docs/tables.md): one row per AMQP 1.0 frame (SASL and empty frames
//! included), the performative's fields in sparse columns; rows are pushed by
//! `crate::proto::amqp10::session`, the direction settled when the table is made.

use super::PacketTimes;
use crate::output::tables::{direction_codes, sort_rows_by, Column, Sparse, SparseStr, Table, DIRECTIONS};

/// `type`'s values: a performative (AMQP frame), a SASL frame, an empty frame (Part 2 §2.4.5).
pub const FRAME_TYPES: [&str; 3] = ["amqp", "sasl", "empty"];

/// `performative`'s values, by the descriptor codes of `crate::proto::amqp10::parser::performative_name`.
pub const PERFORMATIVES: [&str; 14] = [
    "open", "begin", "attach", "flow", "transfer", "disposition", "detach", "end", "close",
    "sasl-mechanisms", "sasl-init", "sasl-challenge", "sasl-response", "sasl-outcome",
];

/// The code of `performative` in [`PERFORMATIVES`]; -1 for a name not in it.
pub fn performative_code(name: &str) -> i8 {
    PERFORMATIVES.iter().position(|&p| p == name).map_or(-1, |i| i as i8)
}

/// A sparse column made a table column over `n` rows.
trait Finish {
    fn finish_over(self, n: usize) -> Column;
}
macro_rules! finish_sparse {
    ($($t:ty),*) => {$(
        impl Finish for Sparse<$t> {
            fn finish_over(self, n: usize) -> Column {
                self.finish(n)
            }
        }
    )*};
}
finish_sparse!(i32, u32, u64, i64, bool, u8);
impl Finish for SparseStr {
    fn finish_over(self, n: usize) -> Column {
        self.finish(n)
    }
}

/// The builder's columns after the dense ones, each listed once, in the table's order.
macro_rules! amqp10_frames_builder {
    ($($field:ident: $ty:ty),* $(,)?) => {
        /// The rows pushed so far: the dense columns every frame has, then the sparse ones.
        #[derive(Default)]
        pub struct Amqp10FramesBuilder {
            pub(crate) packet: Vec<i32>,
            pub(crate) first_packet: Vec<i32>,
            pub(crate) stream: Vec<i32>,
            pub(crate) from_a: Vec<bool>,
            pub(crate) channel: Vec<i32>,
            /// Codes into [`FRAME_TYPES`].
            pub(crate) frame_type: Vec<i8>,
            pub(crate) size_bytes: Vec<i64>,
            /// Codes into [`PERFORMATIVES`], -1 none.
            pub(crate) performative: Vec<i8>,
            $(pub(crate) $field: $ty,)*
        }

        fn sparse_columns(f: Amqp10FramesBuilder, n: usize, t: &mut Table) {
            $(t.push((stringify!($field), f.$field.finish_over(n)));)*
        }
    };
}

amqp10_frames_builder! {
    handle: Sparse<u32>,
    remote_channel: Sparse<i32>,
    delivery_id: Sparse<u32>,
    continuation: Sparse<bool>,
    delivery_tag: SparseStr,
    message_format: Sparse<u32>,
    settled: Sparse<bool>,
    more: Sparse<bool>,
    aborted: Sparse<bool>,
    resume: Sparse<bool>,
    batchable: Sparse<bool>,
    role: SparseStr,
    first: Sparse<u32>,
    last: Sparse<u32>,
    state: SparseStr,
    delivery_failed: Sparse<bool>,
    undeliverable_here: Sparse<bool>,
    next_incoming_id: Sparse<u32>,
    incoming_window: Sparse<u32>,
    next_outgoing_id: Sparse<u32>,
    outgoing_window: Sparse<u32>,
    handle_max: Sparse<u32>,
    delivery_count: Sparse<u32>,
    link_credit: Sparse<u32>,
    available: Sparse<u32>,
    drain: Sparse<bool>,
    echo: Sparse<bool>,
    name: SparseStr,
    source_address: SparseStr,
    target_address: SparseStr,
    snd_settle_mode: SparseStr,
    rcv_settle_mode: SparseStr,
    initial_delivery_count: Sparse<u32>,
    max_message_size: Sparse<u64>,
    closed: Sparse<bool>,
    error_condition: SparseStr,
    error_description: SparseStr,
    container_id: SparseStr,
    hostname: SparseStr,
    max_frame_size: Sparse<u32>,
    channel_max: Sparse<i32>,
    idle_timeout_ms: Sparse<u32>,
    mechanisms: SparseStr,
    mechanism: SparseStr,
    sasl_outcome: SparseStr,
    payload_bytes: Sparse<i64>,
    message_bytes: Sparse<i64>,
    durable: Sparse<bool>,
    first_acquirer: Sparse<bool>,
    priority: Sparse<u8>,
    ttl_ms: Sparse<u32>,
    header_delivery_count: Sparse<u32>,
    message_id: SparseStr,
    correlation_id: SparseStr,
    to: SparseStr,
    subject: SparseStr,
    reply_to: SparseStr,
    content_type: SparseStr,
}

impl Amqp10FramesBuilder {
    pub(crate) fn rows(&self) -> usize {
        self.packet.len()
    }
}

/// The table, each row's direction settled by `a_is_client` (by the decode's stream numbers)
/// and its time given by `times`; rows in packet order (ties as pushed), as `frames`' are.
pub(crate) fn amqp10_frames_table(mut f: Amqp10FramesBuilder, a_is_client: &[bool], times: &PacketTimes<'_>) -> Table {
    let n = f.rows();
    let stream_u32: Vec<u32> = f.stream.iter().map(|&s| s as u32).collect();
    let direction = direction_codes(&stream_u32, &f.from_a, a_is_client);
    let mut t: Table = vec![
        ("packet", Column::I32(std::mem::take(&mut f.packet))),
        ("first_packet", Column::I32(std::mem::take(&mut f.first_packet))),
        ("stream", Column::I32(std::mem::take(&mut f.stream))),
        ("direction", Column::Cat(direction, DIRECTIONS.to_vec())),
        ("channel", Column::I32(std::mem::take(&mut f.channel))),
        ("type", Column::Cat(std::mem::take(&mut f.frame_type), FRAME_TYPES.to_vec())),
        ("size_bytes", Column::I64(std::mem::take(&mut f.size_bytes))),
        ("performative", Column::Cat(std::mem::take(&mut f.performative), PERFORMATIVES.to_vec())),
    ];
    sparse_columns(f, n, &mut t);
    // Frames are pushed as their packets are decoded, but what a direction still holds at the
    // end of the capture is decoded then (as `frames::FrameRows::new` says): sorted, stably.
    sort_rows_by(&mut t, "packet");
    let Column::I32(packets) = &t[0].1 else { unreachable!("packet is the first column") };
    let ts = times.of(packets);
    t.insert(2, ("ts", Column::Ts(ts)));
    t
}
