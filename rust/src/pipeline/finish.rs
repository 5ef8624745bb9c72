//! The end of the capture: what each direction still holds is decoded or given up, the
//! anomaly rows that hold totals are filled in, and the builders become the tables.

use super::records::linktype_text;
use super::{Ingest, Output};
use crate::anomaly::AnomalyKind;
use crate::capture::reader::ReadSummary;
use crate::flow::conn::{Dir, Kind, Stream};
use crate::flow::tcp::reassembly::PacketRef;
use crate::limits::Limits;
use crate::output::connections::connections_table;
use crate::output::tables::{renumber_streams, RowOrigin, Table};
use crate::proto::dispatch::on_chunk;
use crate::proto::sink::Sink;

impl Ingest<'_> {
    pub fn finish(mut self, read: ReadSummary) -> Output {
        // Not needed any more; a million conversations make it large.
        self.conversations = Default::default();
        let last = PacketRef {
            number: self.from_spill.as_ref().map_or(self.records.count(), |s| s.capture_records),
            row: self.tables.packets.packet.len().saturating_sub(1) as u32,
        };
        self.drain_streams(last);
        let read = self.settle_anomalies(read, last);
        self.into_output(read)
    }

    /// The end of the capture: each kept AMQP direction's reassembler hands out what it still
    /// holds, its decoder completes or gives up what is buffered, and messages whose body never
    /// completed get their row.
    fn drain_streams(&mut self, last: PacketRef) {
        let limits = self.limits;
        let max_frames = self.frames_room();
        let Ingest { streams, tables, partition, .. } = self;
        for (idx, st) in streams.iter_mut().enumerate() {
            if st.kind != Kind::Amqp || partition.as_ref().is_some_and(|p| !p.keeps(idx as u32)) {
                continue;
            }
            let Stream { dirs, info, decrypted, .. } = st;
            let mut sink = Sink::new(tables, info, RowOrigin { stream: idx as u32, from_a: true }, last.row, max_frames);
            for (d, dir) in dirs.iter_mut().enumerate() {
                sink.origin = RowOrigin { stream: idx as u32, from_a: d == 0 };
                sink.arrival_row = last.row;
                drain_direction(dir, !*decrypted, last, &mut sink, limits);
            }
            // Messages whose body never completed.
            if let (Some(b), Some(pending)) = (tables.bodies.as_mut(), info.bodies.take()) {
                for mut p in *pending {
                    p.broken = true;
                    let last = p.packet;
                    b.row(idx as u32, p, last);
                }
            }
        }
    }

    /// The anomaly rows settled only at the end (their totals: packets over max_streams, records
    /// of skipped link types, anomalies over the table's cap, a truncated file), and the
    /// warnings they add to `read`.
    fn settle_anomalies(&mut self, mut read: ReadSummary, last: PacketRef) -> ReadSummary {
        let anomalies = &mut self.tables.anomalies;
        if let Some((n, bytes, Some(row))) = self.over_limit {
            anomalies.bytes[row] = bytes as i64;
            let detail = format!(
                "{n} packets of TCP conversations after the first {} are not decoded (max_streams)",
                self.limits.max_streams
            );
            anomalies.detail.set(row, detail.as_bytes());
        }
        for &(lt, n, bytes, row) in &self.skipped_linktypes {
            let Some(row) = row else { continue };
            anomalies.bytes[row] = bytes as i64;
            let detail = format!("{}: {n} packets skipped", linktype_text(lt));
            anomalies.detail.set(row, detail.as_bytes());
        }
        let over: u64 = anomalies.over.iter().map(|o| o.1).sum();
        if over > 0 {
            read.warnings.push(format!(
                "{over} anomalies have no row of their own: the anomalies table reached max_anomalies ({} rows); they are summed per kind",
                self.limits.max_anomalies
            ));
        }
        anomalies.summarise_over_cap();
        if read.truncated {
            let detail = read.warnings.last().cloned().unwrap_or_default();
            let ts = self.records.last_ts;
            self.file_anomaly(AnomalyKind::CaptureTruncated, last.number, ts, 0, detail);
        }
        read
    }

    /// The tables, built from the builders (directions settled: `a_is_client`).
    fn into_output(mut self, mut read: ReadSummary) -> Output {
        let to_sink = self.frames_out.is_some();
        if to_sink {
            let rest = std::mem::take(&mut self.tables.frames);
            self.hand_frames(rest, true);
        }
        let is_amqp: Vec<bool> = self.streams.iter().map(|s| s.kind == Kind::Amqp).collect();
        let a_is_client: Vec<bool> = self.streams.iter().map(|s| s.a_is_client).collect();
        let partition = self.partition.take();
        let mut connections = connections_table(std::mem::take(&mut self.streams), |i| partition.as_ref().is_none_or(|p| p.keeps(i as u32)));
        let builders = std::mem::take(&mut self.tables);
        let mut tables = builders.into_tables(&is_amqp, &a_is_client, self.limits.max_body_bytes, &mut read.warnings);
        if let Some(sp) = self.from_spill.take() {
            renumber_streams(&mut connections, &sp.global);
            tables.renumber_streams(&sp.global);
        }
        let mut records = self.records.take_rows();
        if let Some((mut sink, _)) = self.records_sink.take() {
            sink(records);
            records = self.records.take_rows(); // (none: every row went to the sink)
        }
        let frames = if to_sink { Table::new() } else { tables.frames.table() };
        Output {
            records,
            packets: tables.packets,
            frames,
            connections,
            anomalies: tables.anomalies,
            bodies: tables.bodies,
            added: tables.added,
            read,
            tcp_packets: self.tcp_packets,
            first_ts: self.records.first_ts,
            last_ts: self.records.last_ts,
            files: Vec::new(),
        }
    }
}

/// One direction at the end of the capture: reassembly hands out what it holds (`feed`: to the
/// decoder; false for a decrypted stream), the decoder completes or gives up what is buffered,
/// and is dropped, its counts kept.
fn drain_direction(dir: &mut Dir, feed: bool, last: PacketRef, sink: &mut Sink<'_>, limits: &Limits) {
    let Dir { reasm, decoder, .. } = dir;
    let aligned = reasm.syn_seen;
    reasm.finish(last, &mut |c| on_chunk(c, decoder, aligned, feed, sink, limits));
    if let Some(mut dec) = decoder.take() {
        // What the decoder still completes or gives up at the end is in bytes the direction's
        // latest data packet handed out, not in the capture's last packet (often of another
        // stream).
        let here = reasm.last_arrival().unwrap_or(last);
        sink.arrival_row = here.row;
        dec.finish(here.number, sink, limits);
        // Only the counts are needed from here on: free the buffers before the tables are
        // built.
        (dir.bytes_decoded, dir.bytes_skipped, dir.encrypted) = dec.counts();
    }
}
