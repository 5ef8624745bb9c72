//! The `packets` table (docs/tables.md): one row per TCP packet of an AMQP connection, filled
//! as packets arrive; rows of conversations that turn out not to be AMQP are dropped, and the
//! direction (client or broker side) is settled, when the table is made.

use crate::output::tables::{direction_codes, keep_rows, Column, OptCol, Table,
    DIRECTIONS,
};
use crate::capture::link::{TcpOptions, TcpPacket};

#[derive(Default)]
pub struct PacketsBuilder {
    pub(crate) packet: Vec<i32>,
    /// Capture time (ns): also the time of the packets other tables' rows name (`PacketTimes`).
    pub(crate) ts: Vec<i64>,
    pub(crate) stream: Vec<i32>,
    pub(crate) from_a: Vec<bool>,
    pub(crate) frame_len: Vec<i32>,
    pub(crate) payload_bytes: Vec<i32>,
    pub(crate) seq: Vec<i64>,
    pub(crate) ack: Vec<i64>,
    pub(crate) flags: Vec<i16>,
    pub(crate) window: Vec<i64>,
    pub(crate) tsval: OptCol<u32>,
    pub(crate) tsecr: OptCol<u32>,
    pub(crate) sack_blocks: Vec<i8>,
    pub(crate) frames_ended: Vec<i32>,
    pub(crate) retransmission: Vec<bool>,
    pub(crate) gap_before: Vec<i64>,
}

/// What a packets row is made of: one TCP segment of a kept connection, its sequence and
/// acknowledgement numbers already relative (Wireshark's `tcp.seq`/`tcp.ack`) and its window
/// already scaled.
pub(crate) struct Segment<'a> {
    pub number: u32,
    pub ts_ns: i64,
    pub stream: u32,
    pub from_a: bool,
    pub frame_len: u32,
    pub tcp: &'a TcpPacket<'a>,
    pub seq: u32,
    pub ack: i64,
    pub window: i64,
    pub opts: &'a TcpOptions,
}

impl PacketsBuilder {
    /// Room for `rows` more rows at once, when they are known ahead (the packets the split
    /// spilled into a bucket): its columns are made at their final size instead of doubling,
    /// each doubling a copy into freshly faulted memory.
    pub(crate) fn reserve_exact(&mut self, rows: usize) {
        let PacketsBuilder {
            packet, ts, stream, from_a, frame_len, payload_bytes, seq, ack, flags, window, tsval, tsecr, sack_blocks,
            frames_ended, retransmission, gap_before,
        } = self;
        packet.reserve_exact(rows);
        ts.reserve_exact(rows);
        stream.reserve_exact(rows);
        from_a.reserve_exact(rows);
        frame_len.reserve_exact(rows);
        payload_bytes.reserve_exact(rows);
        seq.reserve_exact(rows);
        ack.reserve_exact(rows);
        flags.reserve_exact(rows);
        window.reserve_exact(rows);
        tsval.reserve_exact(rows);
        tsecr.reserve_exact(rows);
        sack_blocks.reserve_exact(rows);
        frames_ended.reserve_exact(rows);
        retransmission.reserve_exact(rows);
        gap_before.reserve_exact(rows);
    }

    /// A row for the segment; its row index. What decoding it adds later (frames ended, the
    /// retransmission flag, bytes missing before it) starts at zero.
    pub(crate) fn push_segment(&mut self, s: Segment<'_>) -> u32 {
        let row = self.packet.len() as u32;
        self.packet.push(s.number as i32);
        self.ts.push(s.ts_ns);
        self.stream.push(s.stream as i32);
        self.from_a.push(s.from_a);
        self.frame_len.push(s.frame_len as i32);
        self.payload_bytes.push(s.tcp.payload_len as i32);
        self.seq.push(s.seq as i64);
        self.ack.push(s.ack);
        self.flags.push(s.tcp.flags as i16);
        self.window.push(s.window);
        self.tsval.push(s.opts.timestamp.map(|t| t.0));
        self.tsecr.push(s.opts.timestamp.map(|t| t.1));
        self.sack_blocks.push(s.opts.sack_blocks as i8);
        self.frames_ended.push(0);
        self.retransmission.push(false);
        self.gap_before.push(0);
        row
    }
}

pub(crate) fn packets_table(mut p: PacketsBuilder, is_amqp: &[bool], a_is_client: &[bool]) -> Table {
    let keep: Vec<bool> = p.stream.iter().map(|&s| is_amqp[s as usize]).collect();
    if keep.iter().any(|k| !k) {
        keep_rows(&mut p.packet, &keep);
        keep_rows(&mut p.ts, &keep);
        keep_rows(&mut p.stream, &keep);
        keep_rows(&mut p.from_a, &keep);
        keep_rows(&mut p.frame_len, &keep);
        keep_rows(&mut p.payload_bytes, &keep);
        keep_rows(&mut p.seq, &keep);
        keep_rows(&mut p.ack, &keep);
        keep_rows(&mut p.flags, &keep);
        keep_rows(&mut p.window, &keep);
        p.tsval.keep(&keep);
        p.tsecr.keep(&keep);
        keep_rows(&mut p.sack_blocks, &keep);
        keep_rows(&mut p.frames_ended, &keep);
        keep_rows(&mut p.retransmission, &keep);
        keep_rows(&mut p.gap_before, &keep);
    }
    let stream_u32: Vec<u32> = p.stream.iter().map(|&s| s as u32).collect();
    let direction = direction_codes(&stream_u32, &p.from_a, a_is_client);
    vec![
        ("packet", Column::I32(p.packet)),
        ("ts", Column::Ts(p.ts)),
        ("stream", Column::I32(p.stream)),
        ("direction", Column::Cat(direction, DIRECTIONS.to_vec())),
        ("frame_len", Column::I32(p.frame_len)),
        ("payload_bytes", Column::I32(p.payload_bytes)),
        ("seq", Column::I64(p.seq)),
        ("ack", Column::I64(p.ack)),
        ("flags", Column::I16(p.flags)),
        ("window", Column::I64(p.window)),
        ("tsval", p.tsval.finish()),
        ("tsecr", p.tsecr.finish()),
        ("sack_blocks", Column::I8(p.sack_blocks)),
        ("frames_ended", Column::I32(p.frames_ended)),
        ("retransmission", Column::Bool(p.retransmission)),
        ("gap_before", Column::I64(p.gap_before)),
    ]
}

