//! The `frames` table (docs/tables.md): one row per AMQP 0-9-1 frame, the method's arguments in
//! sparse columns; the direction is settled when the table is made.

use crate::proto::amqp091::parser::{decode_method, method_ids, FrameType, Invalid, MethodArgs};
use crate::proto::amqp091::spec::{METHODS, METHOD_COUNT};
use crate::anomaly::AnomalyKind;
use crate::output::tables::{direction_codes, str_column, BuilderRows, Column, OptCol, Sparse, SparseStr, Table, DIRECTIONS};
use super::PacketTimes;

/// The builder's columns, each listed once: the struct, and its rows sliced or reordered
/// column by column ([`BuilderRows`]).
macro_rules! frames_builder {
    ($($field:ident: $ty:ty),* $(,)?) => {
        #[derive(Default)]
        pub struct FramesBuilder {
            $(pub(crate) $field: $ty,)*
        }

        impl BuilderRows for FramesBuilder {
            fn rows_slice(&self, start: usize, end: usize) -> Self {
                FramesBuilder { $($field: self.$field.rows_slice(start, end),)* }
            }
            fn reorder(&mut self, order: &[u32], inverse: &[u32]) {
                $(self.$field.reorder(order, inverse);)*
            }
            fn drop_front(&mut self, n: usize) {
                $(self.$field.drop_front(n);)*
            }
            fn text_wide(&mut self) {
                $(self.$field.text_wide();)*
            }
        }
    };
}

frames_builder! {
    packet: Vec<i32>,
    first_packet: Vec<i32>,
    stream: Vec<i32>,
    from_a: Vec<bool>,
    channel: Vec<i32>,
    frame_type: Vec<i8>,
    size_bytes: Vec<i64>,
    class_id: OptCol<i16>,
    method_id: OptCol<i16>,
    method: Vec<i32>,
    consumer_tag: SparseStr,
    delivery_tag: Sparse<u64>,
    redelivered: Sparse<bool>,
    exchange: SparseStr,
    routing_key: SparseStr,
    multiple: Sparse<bool>,
    requeue: Sparse<bool>,
    mandatory: Sparse<bool>,
    queue: SparseStr,
    no_ack: Sparse<bool>,
    prefetch_count: Sparse<i32>,
    prefetch_size: Sparse<u32>,
    global: Sparse<bool>,
    active: Sparse<bool>,
    nowait: Sparse<bool>,
    frame_max: Sparse<u32>,
    channel_max: Sparse<i32>,
    heartbeat_s: Sparse<i32>,
    vhost: SparseStr,
    mechanism: SparseStr,
    user: SparseStr,
    client_product: SparseStr,
    client_version: SparseStr,
    client_platform: SparseStr,
    connection_name: SparseStr,
    server_product: SparseStr,
    server_version: SparseStr,
    reply_code: Sparse<i16>,
    reply_text: SparseStr,
    reason: SparseStr,
    message_count: Sparse<u32>,
    consumer_count: Sparse<u32>,
    body_size: Sparse<i64>,
    delivery_mode: Sparse<i16>,
    priority: Sparse<i16>,
    content_type: SparseStr,
    correlation_id: SparseStr,
    reply_to: SparseStr,
    expiration: SparseStr,
    message_id: SparseStr,
    message_timestamp: Sparse<i64>,
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
                    other => (AnomalyKind::MalformedMethod, match ids {
                        Some((c, m)) => format!("class {c} method {m}: {other}"),
                        None => other.to_string(),
                    }),
                })
            }
        }
    }

    pub(crate) fn rows(&self) -> usize {
        self.packet.len()
    }
}

/// The rows of `f` stably sorted by `key(packet)`.
fn reorder_by_key<K: Ord>(f: &mut FramesBuilder, key: impl Fn(i32) -> K) {
    let mut order: Vec<u32> = (0..f.rows() as u32).collect();
    order.sort_by_key(|&i| key(f.packet[i as usize]));
    let mut inverse = vec![0u32; order.len()];
    for (new, &old) in order.iter().enumerate() {
        inverse[old as usize] = new as u32;
    }
    f.reorder(&order, &inverse);
}

/// Up to `limit` of the rows of `f` whose packet is before `watermark`, taken out of it in
/// packet order (ties in the order pushed); the rows left keep that order, the rows of later
/// packets after them in the order pushed. Taking rows this way again and again, with a
/// watermark that no row pushed later is below, gives the rows in the order `FrameRows::new`
/// sorts them all at once.
pub(crate) fn take_rows_before(f: &mut FramesBuilder, watermark: i32, limit: usize) -> FramesBuilder {
    let before = f.packet.iter().filter(|&&p| p < watermark).count();
    let k = before.min(limit);
    if k == 0 {
        return FramesBuilder::default();
    }
    // (the usual case: frames are pushed in packet order)
    if !f.packet[..before].is_sorted() || f.packet[..before].last().is_some_and(|&p| p >= watermark) {
        reorder_by_key(f, |p| if p < watermark { (false, p) } else { (true, 0) });
    }
    let taken = f.rows_slice(0, k);
    f.drop_front(k);
    taken
}

/// Frames of a decode, in packet order, with what their rows need from the rest of the decode
/// (each frame's direction and time), made into tables some rows at a time
/// ([`FrameRows::table_of`]) or all at once ([`FrameRows::table`]). A table of some rows
/// spreads the sparse columns over those rows only: the builder holds about 50 bytes a frame
/// where a table holds about 140, so a frames sink gets a batch at a time of the rows settled.
pub struct FrameRows {
    f: FramesBuilder,
    direction: Vec<i8>,
    ts: Vec<i64>,
}

impl FrameRows {
    /// `a_is_client` settles each frame's direction (by the decode's stream numbers);
    /// `times` gives each frame its packet's time.
    pub(crate) fn new(mut f: FramesBuilder, a_is_client: &[bool], times: &PacketTimes<'_>) -> Self {
        if !f.packet.is_sorted() {
            // Frames are pushed as their packets are decoded, but what a direction still holds
            // at the end of the capture is decoded then, as of its own last packet: after
            // frames of later packets of other directions. Ties keep their order (stable).
            reorder_by_key(&mut f, |p| p);
        }
        let stream_u32: Vec<u32> = f.stream.iter().map(|&s| s as u32).collect();
        let direction = direction_codes(&stream_u32, &f.from_a, a_is_client);
        let ts = times.of(&f.packet);
        FrameRows { f, direction, ts }
    }

    pub fn rows(&self) -> usize {
        self.f.rows()
    }

    /// The `stream` column from the decode's stream numbers to `global[local]` (a decode of
    /// spilled packets: `crate::buckets::spill`), once the directions are settled.
    pub(crate) fn renumber_streams(&mut self, global: &[u32]) {
        self.f.stream.iter_mut().for_each(|s| *s = global[*s as usize] as i32);
    }

    /// The table of rows `start..end`.
    pub fn table_of(&self, start: usize, end: usize) -> Table {
        frames_table(self.f.rows_slice(start, end), self.direction[start..end].to_vec(), self.ts[start..end].to_vec())
    }

    /// The table of every row.
    pub fn table(self) -> Table {
        frames_table(self.f, self.direction, self.ts)
    }
}

fn frames_table(f: FramesBuilder, direction: Vec<i8>, ts: Vec<i64>) -> Table {
    let n = f.rows();
    let method_names: Vec<String> = METHODS.iter().map(|m| m.name.to_string()).collect();
    debug_assert_eq!(method_names.len(), METHOD_COUNT);
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
        ("message_timestamp", f.message_timestamp.finish_ts(n)),
    ]
}


#[cfg(all(test, feature = "arrow"))]
mod tests {
    use super::*;
    use crate::output::arrow_out::record_batch;
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int32Type, Int64Type, Int8Type, UInt64Type};
    use arrow_array::RecordBatch;

    fn i32s(t: &RecordBatch, name: &str) -> Vec<i32> {
        t.column_by_name(name).unwrap().as_primitive::<Int32Type>().values().to_vec()
    }

    /// Frames of two streams, the last ones out of packet order (as what a direction still
    /// holds is decoded at the end of the capture), with sparse numbers and texts.
    /// (packet, stream, delivery tag, queue)
    type Frame = (i32, i32, Option<u64>, Option<&'static [u8]>);

    fn frames() -> FramesBuilder {
        let mut f = FramesBuilder::default();
        let rows: [Frame; 7] = [
            (1, 0, Some(1), Some(b"q1")),
            (2, 1, None, None),
            (4, 0, Some(2), None),
            (5, 1, None, Some(b"q2")),
            (3, 0, Some(3), Some(b"q3")),
            (3, 1, None, None),
            (6, 0, Some(4), Some(b"q1")),
        ];
        for (row, (packet, stream, tag, queue)) in rows.into_iter().enumerate() {
            f.packet.push(packet);
            f.first_packet.push(packet);
            f.stream.push(stream);
            f.from_a.push(true);
            f.channel.push(1);
            f.frame_type.push(0);
            f.size_bytes.push(100 + row as i64);
            f.class_id.push(Some(60));
            f.method_id.push(tag.map(|_| 60));
            f.method.push(-1);
            f.delivery_tag.push(row, tag);
            f.queue.push(row, queue);
        }
        f
    }

    #[test]
    fn frames_made_some_rows_at_a_time_are_the_whole_table_in_packet_order() {
        let (numbers, ts) = ([1, 2, 3, 4, 5, 6], [10, 20, 30, 40, 50, 60]);
        let times = PacketTimes::new(&numbers, &ts);
        let a_is_client = [true, false];
        let whole = record_batch(FrameRows::new(frames(), &a_is_client, &times).table()).unwrap();
        // sorted by packet, ties in their order (stream 0's frame of packet 3 first)
        assert_eq!(i32s(&whole, "packet"), [1, 2, 3, 3, 4, 5, 6]);
        assert_eq!(i32s(&whole, "stream"), [0, 1, 0, 1, 0, 1, 0]);
        let sizes = whole.column_by_name("size_bytes").unwrap().as_primitive::<Int64Type>().values().to_vec();
        assert_eq!(sizes, [100, 101, 104, 105, 102, 103, 106]);
        let tags = whole.column_by_name("delivery_tag").unwrap().as_primitive::<UInt64Type>();
        let tags: Vec<Option<u64>> = tags.iter().collect();
        assert_eq!(tags, [Some(1), None, Some(3), None, Some(2), None, Some(4)]);
        let queues = whole.column_by_name("queue").unwrap().as_dictionary::<Int8Type>();
        let words = queues.values().as_string::<i32>();
        let queue: Vec<Option<&str>> = queues.keys().iter().map(|k| k.map(|k| words.value(k as usize))).collect();
        assert_eq!(queue, [Some("q1"), None, Some("q3"), None, None, Some("q2"), Some("q1")]);
        let direction = whole.column_by_name("direction").unwrap().as_dictionary::<Int8Type>().keys().values().to_vec();
        assert_eq!(direction, [0, 1, 0, 1, 0, 1, 0]);
        let rows = FrameRows::new(frames(), &a_is_client, &times);
        for cut in 0..=7 {
            for (start, end) in [(0, cut), (cut, 7)] {
                let part = record_batch(rows.table_of(start, end)).unwrap();
                assert_eq!(part, whole.slice(start, end - start), "rows {start}..{end}");
            }
        }
    }

    #[test]
    fn rows_taken_before_rising_watermarks_are_the_whole_table_in_order() {
        let (numbers, ts) = ([1, 2, 3, 4, 5, 6], [10, 20, 30, 40, 50, 60]);
        let times = PacketTimes::new(&numbers, &ts);
        let whole = record_batch(FrameRows::new(frames(), &[true, false], &times).table()).unwrap();
        for limit in 1..=7 {
            let mut f = frames();
            let mut start = 0;
            // (packet 3's rows were pushed after packets 4 and 5's: a watermark of 4 takes them
            // first; a row of packet 6 stays until the watermark passes it)
            for watermark in [2, 4, 4, 6, 7, 7, 7, 7, 7, 7] {
                let rows = take_rows_before(&mut f, watermark, limit);
                let n = rows.rows();
                assert!(n <= limit && rows.packet.iter().all(|&p| p < watermark));
                let part = record_batch(FrameRows::new(rows, &[true, false], &times).table()).unwrap();
                assert_eq!(part, whole.slice(start, n), "rows {start}.. with limit {limit}");
                start += n;
            }
            assert_eq!((start, f.rows()), (7, 0), "limit {limit}");
        }
    }

    #[test]
    fn renumbered_streams_keep_the_directions_of_the_decode() {
        let (numbers, ts) = ([1, 2, 3, 4, 5, 6], [10, 20, 30, 40, 50, 60]);
        let times = PacketTimes::new(&numbers, &ts);
        let mut rows = FrameRows::new(frames(), &[true, false], &times);
        rows.renumber_streams(&[7, 9]);
        let t = record_batch(rows.table()).unwrap();
        assert_eq!(i32s(&t, "stream"), [7, 9, 7, 9, 7, 9, 7]);
        let direction = t.column_by_name("direction").unwrap().as_dictionary::<Int8Type>().keys().values().to_vec();
        assert_eq!(direction, [0, 1, 0, 1, 0, 1, 0]);
    }
}
