//! Frame rows handed to a sink while the capture is read, in the frames table's order, as
//! soon as they are settled: `amqpcap ingest` and `frames -o` never hold a long connection's
//! frames all at once.

use super::{Ingest, TableSink};
use crate::flow::conn::Kind;
use crate::output::frames::{take_rows_before, FrameRows, FramesBuilder};
use crate::output::tables::BuilderRows;
use crate::output::PacketTimes;

/// Where the frames go while the capture is read ([`Ingest::set_frames_sink`]).
pub(super) struct FramesOut<'a> {
    sink: TableSink<'a>,
    batch_rows: usize,
    /// Rows handed to the sink so far (`max_frames` counts them too).
    handed: u64,
    /// The builder's rows at which to look for settled rows again.
    next_look: usize,
}

impl<'l> Ingest<'l> {
    /// Hand the `frames` rows to `sink` in tables of `batch_rows` rows (the last one fewer) as
    /// they settle while the capture is read, in the order of the frames table: the output's
    /// frames table is then empty, and a long connection's frames never all in memory at once.
    /// A row is settled once no row still to come can sort before it and its direction is
    /// known for good ([`Ingest::frames_watermark`]).
    pub fn set_frames_sink(&mut self, sink: TableSink<'l>, batch_rows: usize) {
        let batch_rows = batch_rows.max(1);
        self.tables.frames.text_wide();
        self.frames_out = Some(FramesOut { sink, batch_rows, handed: 0, next_look: batch_rows });
    }

    /// The rows the frames builder may still take under `max_frames` (rows handed to a sink
    /// count).
    pub(super) fn frames_room(&self) -> u64 {
        self.limits.max_frames.saturating_sub(self.frames_out.as_ref().map_or(0, |o| o.handed))
    }

    /// No frame row still to come can be of a packet before the returned one, nor can a row
    /// already pushed before it change: packet `next` is the next to be decoded, and what a
    /// direction already holds may still give rows of earlier packets
    /// ([`crate::flow::conn::Dir::earliest_pending_frame`]); a stream whose client side may
    /// still change (`Stream::client_settled`) holds back its rows' direction, so its earliest
    /// row.
    fn frames_watermark(&self, next: u32) -> u32 {
        let mut watermark = next;
        let mut unsettled = Vec::new();
        for (i, st) in self.streams.iter().enumerate() {
            if st.kind != Kind::Amqp || !self.keeps(i as u32) {
                continue;
            }
            for d in &st.dirs {
                if let Some(p) = d.earliest_pending_frame() {
                    watermark = watermark.min(p);
                }
            }
            if !st.client_settled() {
                unsettled.resize(self.streams.len(), false);
                unsettled[i] = true;
            }
        }
        if !unsettled.is_empty() {
            let f = &self.tables.frames;
            for (&s, &p) in f.stream.iter().zip(&f.packet) {
                if unsettled[s as usize] {
                    watermark = watermark.min(p as u32);
                }
            }
        }
        watermark
    }

    /// With a frames sink, when the builder has grown enough since the last look: hand it the
    /// settled rows, whole batches of them (`next`: the packet about to be decoded).
    pub(super) fn hand_settled_frames(&mut self, next: u32) {
        let Some(out) = self.frames_out.as_ref() else { return };
        if self.tables.frames.rows() < out.next_look {
            return;
        }
        let batch_rows = out.batch_rows;
        let watermark = self.frames_watermark(next) as i32;
        let settled = self.tables.frames.packet.iter().filter(|&&p| p < watermark).count();
        let rows = take_rows_before(&mut self.tables.frames, watermark, settled / batch_rows * batch_rows);
        self.hand_frames(rows, false);
        // Look again after a quarter of a batch more, or, while rows are held back (a stream
        // whose client side is still open), after half as many rows again as are held: a look
        // reads every row held, so the looks cost as much as the rows they find, not quadratic.
        let held = self.tables.frames.rows();
        let next_look = held + (batch_rows / 4).max(held / 2).max(1);
        if let Some(out) = self.frames_out.as_mut() {
            out.next_look = next_look;
        }
    }

    /// Frame rows, in the frames table's order, to the sink in batches; `last`: the rows left
    /// at the end, one table of no rows if the sink got none at all (it has the columns).
    pub(super) fn hand_frames(&mut self, rows: FramesBuilder, last: bool) {
        let none_yet = self.frames_out.as_ref().is_some_and(|o| o.handed == 0);
        if rows.rows() == 0 && !(last && none_yet) {
            return;
        }
        let a_is_client: Vec<bool> = self.streams.iter().map(|s| s.a_is_client).collect();
        let times = PacketTimes::new(&self.tables.packets.packet, &self.tables.packets.ts);
        let mut rows = FrameRows::new(rows, &a_is_client, &times);
        if let Some(sp) = self.from_spill.as_ref() {
            rows.renumber_streams(&sp.global);
        }
        let Some(out) = self.frames_out.as_mut() else { return };
        if rows.rows() == 0 {
            (out.sink)(rows.table());
            return;
        }
        for start in (0..rows.rows()).step_by(out.batch_rows) {
            let end = (start + out.batch_rows).min(rows.rows());
            (out.sink)(rows.table_of(start, end));
        }
        out.handed += rows.rows() as u64;
    }
}
