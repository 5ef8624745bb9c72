//! The ingestion pipeline: capture records → TCP conversations (numbered like Wireshark's
//! tcp.stream) → per-direction reassembly → the decoder the direction's first bytes choose
//! (`crate::proto::dispatch`: AMQP 0-9-1 or AMQP 1.0). What the frames mean to the tables (frame rows,
//! session facts, bodies) is the protocol's own module (`crate::proto::amqp091::session` for AMQP 0-9-1,
//! `crate::proto::amqp10::session` for AMQP 1.0); TLS plaintext decrypted outside the core comes from
//! `crate::tls`.

use std::collections::HashMap;

use ahash::RandomState;

use crate::proto::amqp091::parser::PROTOCOL_HEADER_091;
use crate::proto::amqp091::session::apply_tune;
use crate::proto::dispatch::{self, on_chunk, DecodeSink, Sink};
use crate::anomaly::AnomalyKind;
use crate::capture::link::{self, parse_options, LinkError, ACK, SYN};
use crate::capture::merge::{read_captures, FileRead, Progress};
use crate::capture::reader::{ReadSummary, Record};
use crate::error::CaptureError;
use crate::limits::Limits;
use crate::buckets::partition::Partition;
use crate::output::tables::{sort_rows_by, BuilderRows, Column, RowOrigin, Table};
use crate::flow::tcp::reassembly::{PacketRef, ReasmLimits};
use crate::flow::tcp::{ConvKey, Endpoint};
use crate::output::anomalies::{anomalies_table, AnomaliesBuilder};
use crate::output::bodies::{bodies_table, BodiesBuilder};
use crate::output::frames::{take_rows_before, FrameRows, FramesBuilder};
use crate::output::packets::{packets_table, PacketsBuilder, Segment};
use crate::output::connections::connections_table;
use crate::output::records::RecordsBuilder;
use crate::output::PacketTimes;
use crate::flow::conn::{ClientEvidence, ConnInfo, Dir, Kind, Stream, Streams};
use crate::tls::Decrypted;

/// Receives the `records` table's rows in batches while the capture is read.
pub type TableSink<'a> = Box<dyn FnMut(Table) + 'a>;

/// Where the frames go while the capture is read ([`Ingest::set_frames_sink`]).
struct FramesOut<'a> {
    sink: TableSink<'a>,
    batch_rows: usize,
    /// Rows handed to the sink so far (`max_frames` counts them too).
    handed: u64,
    /// The builder's rows at which to look for settled rows again.
    next_look: usize,
}

/// Receives each TCP packet of a conversation that is (or may still turn out to be) AMQP, with
/// its packet and stream numbers: the first step of a spilled ingest (`crate::buckets::spill`).
pub type PacketSpill<'a> = Box<dyn FnMut(u32, u32, &Record<'_>) + 'a>;

/// A decode of one bucket's spilled packets (`crate::buckets::spill`): their packet and stream numbers
/// are the capture's, given with each packet. Streams are numbered here in the order they
/// appear, which is the order of their capture-wide numbers: the tables are made with these
/// local numbers and renumbered at the end.
#[derive(Default)]
struct FromSpill {
    /// The capture-wide number of each local stream.
    global: Vec<u32>,
    local: HashMap<u32, u32, RandomState>,
    /// Records of the whole capture (the number of its last packet).
    capture_records: u32,
}

pub struct Ingest<'l> {
    limits: &'l Limits,
    decrypted: Decrypted,
    ports: Vec<u16>,
    conversations: HashMap<ConvKey, u32, RandomState>,
    streams: Streams,
    records: RecordsBuilder,
    /// Where `records` rows go, a batch at a time while the capture is read (see
    /// [`Ingest::set_records_sink`]); without it they are output with the other tables.
    records_sink: Option<(TableSink<'l>, usize)>,
    packets: PacketsBuilder,
    frames: FramesBuilder,
    anomalies: AnomaliesBuilder,
    bodies: Option<BodiesBuilder>,
    tcp_packets: u64,
    /// Records skipped for their link type: (link type, records, captured bytes, anomaly row).
    skipped_linktypes: Vec<(u32, u64, u64, Option<usize>)>,
    /// Packets of conversations beyond `max_streams`: (packets, captured bytes, anomaly row).
    over_limit: Option<(u64, u64, Option<usize>)>,
    /// Only these connections (and maybe no rows of the capture as a whole) are output.
    partition: Option<Partition>,
    /// Where the packets of AMQP conversations go (the first step of a spilled ingest).
    spill: Option<PacketSpill<'l>>,
    /// This decode reads one bucket's spilled packets.
    from_spill: Option<FromSpill>,
    /// Where the frames go as they settle, instead of the output's table.
    frames_out: Option<FramesOut<'l>>,
}

pub struct Output {
    pub records: Table,
    pub packets: Table,
    /// Empty when the frames went to a sink ([`Ingest::set_frames_sink`]).
    pub frames: Table,
    pub connections: Table,
    pub anomalies: Table,
    /// Only when bodies were asked for.
    pub bodies: Option<Table>,
    pub read: ReadSummary,
    pub tcp_packets: u64,
    pub first_ts: Option<i64>,
    pub last_ts: Option<i64>,
    /// Each file of the set, in the order given (`records.source_file` indexes it).
    pub files: Vec<FileRead>,
}

impl<'l> Ingest<'l> {
    pub fn new(ports: &[u16], limits: &'l Limits, bodies: bool) -> Self {
        Ingest {
            limits,
            ports: ports.to_vec(),
            conversations: HashMap::default(),
            streams: Streams::default(),
            records: RecordsBuilder::new(true),
            records_sink: None,
            packets: PacketsBuilder::default(),
            frames: FramesBuilder::default(),
            anomalies: AnomaliesBuilder { cap: limits.max_anomalies, ..Default::default() },
            bodies: bodies.then(|| BodiesBuilder::new(limits.max_body_bytes)),
            tcp_packets: 0,
            skipped_linktypes: Vec::new(),
            over_limit: None,
            decrypted: Decrypted::default(),
            partition: None,
            spill: None,
            from_spill: None,
            frames_out: None,
        }
    }

    /// Hand the `frames` rows to `sink` in tables of `batch_rows` rows (the last one fewer) as
    /// they settle while the capture is read, in the order of the frames table: the output's
    /// frames table is then empty, and a long connection's frames never all in memory at once.
    /// A row is settled once no row still to come can sort before it and its direction is
    /// known for good ([`Ingest::frames_watermark`]).
    pub fn set_frames_sink(&mut self, sink: TableSink<'l>, batch_rows: usize) {
        let batch_rows = batch_rows.max(1);
        self.frames.text_wide();
        self.frames_out = Some(FramesOut { sink, batch_rows, handed: 0, next_look: batch_rows });
    }

    /// Hand every TCP packet of a conversation that is or may be AMQP to `spill` (see
    /// [`PacketSpill`]).
    pub fn set_spill(&mut self, spill: PacketSpill<'l>) {
        self.spill = Some(spill);
    }

    /// Read packets of one bucket spilled by the first step (`crate::buckets::spill`) through
    /// [`Ingest::spilled_record`]; the capture has `capture_records` records in all.
    pub fn set_spilled(&mut self, capture_records: u32) {
        self.records = RecordsBuilder::new(false);
        self.from_spill = Some(FromSpill { capture_records, ..Default::default() });
    }

    /// Packet `number` of stream `stream` (the capture's numbers), spilled by the first step:
    /// decoded as a whole decode decodes it (its conversation was numbered there).
    pub fn spilled_record(&mut self, number: u32, stream: u32, rec: Record<'_>) {
        self.hand_settled_frames(number);
        // (the first step spilled only TCP packets that decode)
        let Ok(tcp) = link::decode(rec.linktype, rec.data) else { return };
        self.tcp_packets += 1;
        let known = self.from_spill.as_ref().and_then(|sp| sp.local.get(&stream).copied());
        let idx = match known {
            Some(i) => i,
            None => {
                let src = Endpoint { addr: tcp.src, port: tcp.sport };
                let dst = Endpoint { addr: tcp.dst, port: tcp.dport };
                // (never over max_streams: the first step numbered at least as many)
                let Some(i) = self.new_stream(ConvKey::new(src, dst, tcp.v6), src, dst, tcp.v6) else { return };
                let Some(sp) = self.from_spill.as_mut() else { return };
                sp.global.push(stream);
                sp.local.insert(stream, i);
                i
            }
        };
        self.tcp_segment(idx, &tcp, rec, number);
    }

    /// Output only the connections `partition` keeps (see [`Partition`]).
    pub fn set_partition(&mut self, partition: Partition) {
        self.records = RecordsBuilder::new(partition.capture_rows);
        self.partition = Some(partition);
    }

    /// Hand the `records` rows to `sink` in batches of `batch_rows` while the capture is read,
    /// and the last ones at the end: the `records` table of the output is then empty, and the
    /// rows never all in memory at once.
    pub fn set_records_sink(&mut self, sink: TableSink<'l>, batch_rows: usize) {
        self.records_sink = Some((sink, batch_rows.max(1)));
    }

    fn keeps(&self, stream: u32) -> bool {
        self.partition.as_ref().is_none_or(|p| p.keeps(stream))
    }

    /// Rows of no connection (records, anomalies of the file) are output by this pass.
    fn capture_rows(&self) -> bool {
        self.partition.as_ref().is_none_or(|p| p.capture_rows)
    }

    /// Decode the listed streams from decrypted plaintext (see [`Decrypted`]).
    pub fn set_decrypted(&mut self, decrypted: Decrypted) {
        self.decrypted = decrypted;
    }

    fn file_anomaly(&mut self, kind: AnomalyKind, packet: u32, ts_ns: Option<i64>, bytes: u64, detail: String) {
        if !self.capture_rows() {
            return;
        }
        self.anomalies.push(kind, None, Some(packet), ts_ns, bytes, detail);
    }

    /// The next record of a capture of one file.
    pub fn record(&mut self, rec: Record<'_>) {
        self.record_from(rec, 0)
    }

    /// The next record of the capture, read from file `file` of the set.
    pub fn record_from(&mut self, rec: Record<'_>, file: usize) {
        let number = self.records.push(rec.ts_ns, rec.origlen, file);
        self.hand_settled_frames(number);
        if let Some((sink, batch_rows)) = self.records_sink.as_mut() {
            if self.records.rows() >= *batch_rows {
                sink(self.records.take_rows());
            }
        }
        if !link::linktype_supported(rec.linktype) {
            let bytes = rec.data.len() as u64;
            match self
                .skipped_linktypes
                .iter_mut()
                .find(|s| s.0 == rec.linktype)
            {
                Some(s) => {
                    s.1 += 1;
                    s.2 += bytes;
                }
                None => {
                    // One row per link type; its count is filled in at the end.
                    let row = self.summary_row(AnomalyKind::UnsupportedLinkType, number, rec.ts_ns);
                    self.skipped_linktypes.push((rec.linktype, 1, bytes, row));
                }
            }
            return;
        }
        let tcp = match link::decode(rec.linktype, rec.data) {
            Ok(t) => t,
            Err(LinkError::NotTcp) => return,
            Err(LinkError::Fragment) => {
                self.file_anomaly(AnomalyKind::IpFragment, number, Some(rec.ts_ns), rec.data.len() as u64, "fragmented IP packet (not reassembled)".into());
                return;
            }
            Err(LinkError::Malformed) => {
                self.file_anomaly(AnomalyKind::MalformedPacket, number, Some(rec.ts_ns), rec.data.len() as u64, "link, IP or TCP header does not parse".into());
                return;
            }
        };
        self.tcp_packets += 1;
        let src = Endpoint { addr: tcp.src, port: tcp.sport };
        let dst = Endpoint { addr: tcp.dst, port: tcp.dport };
        let key = ConvKey::new(src, dst, tcp.v6);
        let is_syn_only = tcp.flags & (SYN | ACK) == SYN;
        let idx = match self.conversations.get(&key) {
            Some(&i) => {
                let st = &self.streams[i as usize];
                let d = if st.a == src { 0 } else { 1 };
                // Port reuse (as Wireshark): a SYN whose ISN differs from the direction's base
                // starts a new conversation.
                if is_syn_only && st.dirs[d].base_seq.is_some_and(|b| b != tcp.seq) {
                    self.new_stream(key, src, dst, tcp.v6)
                } else {
                    Some(i)
                }
            }
            None => self.new_stream(key, src, dst, tcp.v6),
        };
        match idx {
            Some(idx) => {
                self.tcp_segment(idx, &tcp, rec, number);
                if let Some(spill) = self.spill.as_mut() {
                    // (a conversation that turned out not to be AMQP has no rows from here on)
                    if self.streams[idx as usize].kind != Kind::Other {
                        spill(number, idx, &rec);
                    }
                }
            }
            None => self.beyond_stream_limit(rec.data.len() as u64, number, rec.ts_ns),
        }
    }

    /// A packet of a conversation beyond `max_streams`: only counted (no state is kept for
    /// such conversations, so the cap bounds memory).
    fn beyond_stream_limit(&mut self, bytes: u64, number: u32, ts_ns: i64) {
        match self.over_limit.as_mut() {
            Some(o) => {
                o.0 += 1;
                o.1 += bytes;
            }
            None => {
                let row = self.summary_row(AnomalyKind::StreamLimit, number, ts_ns);
                self.over_limit = Some((1, bytes, row));
            }
        }
    }

    /// A row of the file filled in at the end (whatever the anomaly cap), when this pass
    /// outputs the rows of the capture as a whole.
    fn summary_row(&mut self, kind: AnomalyKind, number: u32, ts_ns: i64) -> Option<usize> {
        let row = self.anomalies.kind.len();
        self.capture_rows().then(|| {
            self.anomalies.push_row(kind, None, Some(number), Some(ts_ns), 0, String::new());
            row
        })
    }

    fn new_stream(&mut self, key: ConvKey, src: Endpoint, dst: Endpoint, v6: bool) -> Option<u32> {
        let idx = self.streams.len() as u32;
        if self.streams.len() as u64 >= self.limits.max_streams {
            return None;
        }
        let decrypted = self.decrypted.decodes(idx);
        let (kind, a_is_client, evidence) = if self.ports.contains(&dst.port) {
            (Kind::Amqp, true, ClientEvidence::Port)
        } else if self.ports.contains(&src.port) {
            (Kind::Amqp, false, ClientEvidence::Port)
        } else if decrypted {
            (Kind::Amqp, true, ClientEvidence::FirstPacket)
        } else {
            (Kind::Undecided, true, ClientEvidence::FirstPacket)
        };
        self.streams.push(Stream {
            decrypted,
            a: src,
            b: dst,
            v6,
            kind,
            a_is_client,
            evidence,
            dirs: [Dir::default(), Dir::default()],
            first_ts: 0,
            last_ts: 0,
            info: ConnInfo::default(),
        });
        self.conversations.insert(key, idx);
        Some(idx)
    }

    fn tcp_segment(&mut self, idx: u32, tcp: &link::TcpPacket<'_>, rec: Record<'_>, number: u32) {
        let limits = self.limits;
        let max_frames = self.frames_room();
        let keep = self.keeps(idx);
        let Ingest {
            streams,
            packets,
            frames,
            anomalies,
            bodies,
            decrypted,
            ..
        } = self;
        let st = &mut streams[idx as usize];
        let d = if st.a.addr == tcp.src && st.a.port == tcp.sport { 0 } else { 1 };
        if st.first_ts == 0 && st.dirs[0].packets == 0 && st.dirs[1].packets == 0 {
            st.first_ts = rec.ts_ns;
        }
        st.last_ts = rec.ts_ns;
        st.dirs[d].packets += 1;
        st.dirs[d].payload_bytes += tcp.payload_len as u64;
        if st.kind == Kind::Other {
            return;
        }
        if st.kind == Kind::Undecided && tcp.payload_len > 0 {
            if tcp.payload.starts_with(b"AMQP") {
                st.kind = Kind::Amqp;
            } else {
                st.kind = Kind::Other;
                return;
            }
        }
        // Who is the client: the protocol header's sender beats the port, which beats the SYN.
        if !st.decrypted && tcp.payload.starts_with(&PROTOCOL_HEADER_091[..4]) && st.evidence < ClientEvidence::ProtocolHeader && st.dirs[d].reasm.span() == 0 {
            st.a_is_client = d == 0;
            st.evidence = ClientEvidence::ProtocolHeader;
        } else if tcp.flags & (SYN | ACK) == SYN && st.evidence < ClientEvidence::Syn {
            st.a_is_client = d == 0;
            st.evidence = ClientEvidence::Syn;
        }

        let syn = tcp.flags & SYN != 0;
        // Wireshark's relative sequence numbers: base = ISN on a SYN, else seq - 1; the other
        // direction's base may come from this ACK.
        let (dir, other) = if d == 0 {
            let (x, y) = st.dirs.split_at_mut(1);
            (&mut x[0], &mut y[0])
        } else {
            let (x, y) = st.dirs.split_at_mut(1);
            (&mut y[0], &mut x[0])
        };
        if dir.base_seq.is_none() {
            dir.base_seq = Some(if syn { tcp.seq } else { tcp.seq.wrapping_sub(1) });
        }
        let has_ack = tcp.flags & ACK != 0;
        if other.base_seq.is_none() && has_ack {
            other.base_seq = Some(tcp.ack.wrapping_sub(1));
        }
        // A connection of another partition: followed only this far, for the bases that tell
        // a reused port's new conversation (`record`).
        if !keep {
            return;
        }
        let opts = parse_options(tcp.options);
        if syn && dir.syn_options.is_none() {
            dir.syn_options = Some(opts);
        }
        // Window scaling (RFC 7323 §2.2) applies once both SYNs were seen, never to SYNs.
        let window = match (dir.syn_options, other.syn_options) {
            (Some(mine), Some(theirs)) if !syn => match (mine.window_scale, theirs.window_scale) {
                (Some(shift), Some(_)) => (tcp.window as i64) << shift,
                _ => tcp.window as i64,
            },
            _ => tcp.window as i64,
        };

        let row = packets.push_segment(Segment {
            number,
            ts_ns: rec.ts_ns,
            stream: idx,
            from_a: d == 0,
            frame_len: rec.origlen,
            tcp,
            seq: tcp.seq.wrapping_sub(dir.base_seq.unwrap_or(0)),
            ack: if has_ack { tcp.ack.wrapping_sub(other.base_seq.unwrap_or(0)) as i64 } else { 0 },
            window,
            opts: &opts,
        });

        if tcp.payload_len > 0 && st.info.snaplen_gap[d] > 0 {
            packets.gap_before[row as usize] += std::mem::take(&mut st.info.snaplen_gap[d]) as i64;
        }
        let pref = PacketRef { number, row };
        let feed = !st.decrypted;
        let info = &mut st.info;
        // The peer's acknowledgement may reveal bytes the capture lost in the other direction.
        if has_ack {
            let origin = RowOrigin { stream: idx, from_a: d != 0 };
            let Dir { reasm, decoder, .. } = other;
            let mut sink = Sink {
                frames,
                anomalies,
                packets,
                bodies: bodies.as_mut(),
                info,
                origin,
                arrival_row: row,
                max_frames,
            };
            reasm.peer_ack(tcp.ack, &mut |c| on_chunk(c, decoder, false, feed, &mut sink, limits));
        }
        let origin = RowOrigin { stream: idx, from_a: d == 0 };
        let aligned = if dir.reasm.started() { dir.reasm.syn_seen } else { syn };
        let Dir { reasm, decoder, .. } = dir;
        let mut sink = Sink {
            frames,
            anomalies,
            packets,
            bodies: bodies.as_mut(),
            info,
            origin,
            arrival_row: row,
            max_frames,
        };
        let outcome = reasm.segment_with(
            tcp.seq,
            syn,
            tcp.flags & link::FIN != 0,
            tcp.payload,
            tcp.payload_len as u64,
            pref,
            &ReasmLimits::of(limits),
            &mut |c| on_chunk(c, decoder, aligned, feed, &mut sink, limits),
        );
        sink.packets.retransmission[row as usize] = outcome.retransmission;
        if outcome.mismatched > 0 {
            let (n, of) = (outcome.mismatched, outcome.compared);
            sink.anomaly(
                AnomalyKind::RetransmissionMismatch,
                number,
                n,
                format!("{n} of {of} bytes re-sent for the same sequence numbers differ from the copy already received; one copy is decoded"),
            );
        }
        if outcome.out_of_window {
            let n = tcp.payload_len as u64;
            sink.anomaly(
                AnomalyKind::OutOfWindow,
                number,
                n,
                format!("{n} bytes at a sequence number more than {} bytes from the next expected byte: not used", limits.max_seq_jump_bytes),
            );
        }
        if !feed {
            if let Some(plain) = decrypted.take(number) {
                // The first plaintext byte of a direction is where AMQP starts (tshark decrypts
                // only connections whose handshake is in the capture).
                let first = decoder.as_deref().is_none_or(|d| d.untouched());
                if first && plain.starts_with(&PROTOCOL_HEADER_091[..4]) && st.evidence < ClientEvidence::ProtocolHeader {
                    st.a_is_client = d == 0;
                    st.evidence = ClientEvidence::ProtocolHeader;
                }
                dispatch::feed(decoder, true, plain, number, pref, &mut sink, limits);
            }
        }
        apply_tune(&mut st.info, &mut st.dirs, limits);
    }

    /// The rows the frames builder may still take under `max_frames` (rows handed to a sink
    /// count).
    fn frames_room(&self) -> u64 {
        self.limits.max_frames.saturating_sub(self.frames_out.as_ref().map_or(0, |o| o.handed))
    }

    /// No frame row still to come can be of a packet before the returned one, nor can a row
    /// already pushed before it change: packet `next` is the next to be decoded, and what a
    /// direction already holds may still give rows of earlier packets
    /// ([`crate::flow::conn::Dir::earliest_pending_frame`]); a stream whose client side may still
    /// change (`Stream::client_settled`) holds back its rows' direction, so its earliest row.
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
            let f = &self.frames;
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
    fn hand_settled_frames(&mut self, next: u32) {
        let Some(out) = self.frames_out.as_ref() else { return };
        if self.frames.rows() < out.next_look {
            return;
        }
        let batch_rows = out.batch_rows;
        let watermark = self.frames_watermark(next) as i32;
        let settled = self.frames.packet.iter().filter(|&&p| p < watermark).count();
        let rows = take_rows_before(&mut self.frames, watermark, settled / batch_rows * batch_rows);
        self.hand_frames(rows, false);
        // Look again after a quarter of a batch more, or, while rows are held back (a stream
        // whose client side is still open), after half as many rows again as are held: a look
        // reads every row held, so the looks cost as much as the rows they find, not quadratic.
        let held = self.frames.rows();
        let next_look = held + (batch_rows / 4).max(held / 2).max(1);
        if let Some(out) = self.frames_out.as_mut() {
            out.next_look = next_look;
        }
    }

    /// Frame rows, in the frames table's order, to the sink in batches; `last`: the rows left
    /// at the end, one table of no rows if the sink got none at all (it has the columns).
    fn hand_frames(&mut self, rows: FramesBuilder, last: bool) {
        let none_yet = self.frames_out.as_ref().is_some_and(|o| o.handed == 0);
        if rows.rows() == 0 && !(last && none_yet) {
            return;
        }
        let a_is_client: Vec<bool> = self.streams.iter().map(|s| s.a_is_client).collect();
        let times = PacketTimes::new(&self.packets.packet, &self.packets.ts);
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

    pub fn finish(mut self, read: ReadSummary) -> Output {
        // Not needed any more; a million conversations make it large.
        self.conversations = HashMap::default();
        let last = PacketRef {
            number: self.from_spill.as_ref().map_or(self.records.count(), |s| s.capture_records),
            row: self.packets.packet.len().saturating_sub(1) as u32,
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
        let Ingest { streams, packets, frames, anomalies, bodies, partition, .. } = self;
        for (idx, st) in streams.iter_mut().enumerate() {
            if st.kind != Kind::Amqp || partition.as_ref().is_some_and(|p| !p.keeps(idx as u32)) {
                continue;
            }
            for d in 0..2 {
                let origin = RowOrigin { stream: idx as u32, from_a: d == 0 };
                let info = &mut st.info;
                let dir = &mut st.dirs[d];
                let Dir { reasm, decoder, .. } = dir;
                let mut sink = Sink {
                    frames,
                    anomalies,
                    packets,
                    bodies: bodies.as_mut(),
                    info,
                    origin,
                    arrival_row: last.row,
                    max_frames,
                };
                let aligned = reasm.syn_seen;
                let feed = !st.decrypted;
                reasm.finish(last, &mut |c| on_chunk(c, decoder, aligned, feed, &mut sink, limits));
                if let Some(mut dec) = decoder.take() {
                    // What the decoder still completes or gives up at the end is in bytes
                    // the direction's latest data packet handed out, not in the capture's
                    // last packet (often of another stream).
                    let here = reasm.last_arrival().unwrap_or(last);
                    sink.arrival_row = here.row;
                    dec.finish(here.number, &mut sink, limits);
                    // Only the counts are needed from here on: free the buffers before the
                    // tables are built.
                    (dir.bytes_decoded, dir.bytes_skipped, dir.encrypted) = dec.counts();
                }
            }
            // Messages whose body never completed.
            if let (Some(b), Some(pending)) = (bodies.as_mut(), st.info.bodies.take()) {
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
        if let Some((n, bytes, Some(row))) = self.over_limit {
            self.anomalies.bytes[row] = bytes as i64;
            let detail = format!(
                "{n} packets of TCP conversations after the first {} are not decoded (max_streams)",
                self.limits.max_streams
            );
            self.anomalies.detail.set(row, detail.as_bytes());
        }
        for &(lt, n, bytes, row) in &self.skipped_linktypes {
            let Some(row) = row else { continue };
            self.anomalies.bytes[row] = bytes as i64;
            let detail = format!("{}: {n} packets skipped", linktype_text(lt));
            self.anomalies.detail.set(row, detail.as_bytes());
        }
        let over: u64 = self.anomalies.over.iter().map(|o| o.1).sum();
        if over > 0 {
            read.warnings.push(format!(
                "{over} anomalies have no row of their own: the anomalies table reached max_anomalies ({} rows); they are summed per kind",
                self.limits.max_anomalies
            ));
        }
        self.anomalies.summarise_over_cap();
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
            let rest = std::mem::take(&mut self.frames);
            self.hand_frames(rest, true);
        }
        let is_amqp: Vec<bool> = self.streams.iter().map(|s| s.kind == Kind::Amqp).collect();
        let a_is_client: Vec<bool> = self.streams.iter().map(|s| s.a_is_client).collect();
        let tcp_packets = self.tcp_packets;
        let partition = self.partition.take();
        let mut connections = connections_table(std::mem::take(&mut self.streams), |i| partition.as_ref().is_none_or(|p| p.keeps(i as u32)));
        // The other tables' times come from the packets table's (before it drops the rows of
        // conversations that turned out not to be AMQP: none of them is named by another row).
        let packets = std::mem::take(&mut self.packets);
        let times = PacketTimes::new(&packets.packet, &packets.ts);
        let mut frames = FrameRows::new(std::mem::take(&mut self.frames), &a_is_client, &times);
        let mut anomalies = anomalies_table(std::mem::take(&mut self.anomalies), &a_is_client, &times);
        let mut bodies = self.bodies.take().map(|b| {
            if b.not_kept > 0 {
                read.warnings.push(format!(
                    "message bodies: {} bytes not kept, the max_body_bytes cap ({} bytes) was reached; those messages have complete=False",
                    b.not_kept, self.limits.max_body_bytes
                ));
            }
            let mut t = bodies_table(b, &a_is_client, &times);
            sort_rows_by(&mut t, "last_packet");
            t
        });
        let mut packets = packets_table(packets, &is_amqp, &a_is_client);
        if let Some(sp) = self.from_spill.take() {
            for t in [&mut connections, &mut packets, &mut anomalies].into_iter().chain(bodies.as_mut()) {
                renumber_streams(t, &sp.global);
            }
            frames.renumber_streams(&sp.global);
        }
        let mut records = self.records.take_rows();
        if let Some((mut sink, _)) = self.records_sink.take() {
            sink(records);
            records = self.records.take_rows(); // (none: every row went to the sink)
        }
        let frames = if to_sink { Table::new() } else { frames.table() };
        Output {
            records,
            packets,
            frames,
            connections,
            anomalies,
            bodies,
            read,
            tcp_packets,
            first_ts: self.records.first_ts,
            last_ts: self.records.last_ts,
            files: Vec::new(),
        }
    }
}

/// The `stream` column of a table made by a decode of spilled packets, from its local stream
/// numbers to the capture's (`global[local]`).
fn renumber_streams(t: &mut Table, global: &[u32]) {
    for (name, col) in t.iter_mut() {
        if *name != "stream" {
            continue;
        }
        match col {
            Column::I32(v) => v.iter_mut().for_each(|s| *s = global[*s as usize] as i32),
            Column::NullI32(v, valid) => {
                for (s, &ok) in v.iter_mut().zip(valid.iter()) {
                    if ok {
                        *s = global[*s as usize] as i32;
                    }
                }
            }
            _ => unreachable!("stream columns are int32"),
        }
    }
}

fn linktype_text(lt: u32) -> String {
    if lt == u32::MAX {
        "packets of an interface that no interface description block describes".into()
    } else {
        format!("link type {} is not supported", link::linktype_name(lt))
    }
}

impl Ingest<'_> {
    /// Why nothing in the capture can be read, when every record had an unsupported link type.
    fn nothing_readable(&self, records: u64) -> Option<String> {
        let skipped: u64 = self.skipped_linktypes.iter().map(|s| s.1).sum();
        if records == 0 || skipped < records {
            return None;
        }
        let why: Vec<String> = self
            .skipped_linktypes
            .iter()
            .map(|&(lt, n, _, _)| format!("{} ({n} packets)", linktype_text(lt)))
            .collect();
        Some(format!(
            "none of its {records} packets can be read: {}; amqpcap reads Ethernet, Linux cooked (SLL, SLL2), BSD loopback and raw IP",
            why.join(", ")
        ))
    }
}

/// Decode the capture made of the files at `paths` (one file, or a set such as a tcpdump
/// ring, merged by time as `mergecap` does: [`read_captures`]); an unusable file of a set is
/// skipped with a warning, or is the error when `strict`. The plaintext of TLS streams, when a
/// key log decrypted them, comes from `decrypted` (see [`Decrypted`]). With `partition`, only
/// the connections it keeps are output (see [`Partition`]).
#[allow(clippy::too_many_arguments)]
pub fn ingest(
    paths: &[String],
    ports: &[u16],
    limits: &Limits,
    bodies: bool,
    decrypted: Option<Decrypted>,
    partition: Option<Partition>,
    strict: bool,
    progress: &Progress,
    records_sink: Option<(TableSink<'_>, usize)>,
    spill: Option<PacketSpill<'_>>,
    frames_sink: Option<(TableSink<'_>, usize)>,
) -> Result<Output, CaptureError> {
    if paths.len() > crate::limits::MAX_FILES {
        return Err(CaptureError::Unreadable(format!(
            "{} files given; at most {} can be read as one capture (merge them with mergecap first)",
            paths.len(),
            crate::limits::MAX_FILES
        )));
    }
    let mut ing = Ingest::new(ports, limits, bodies);
    if let Some(d) = decrypted {
        ing.set_decrypted(d);
    }
    if let Some(p) = partition {
        ing.set_partition(p);
    }
    if let Some((sink, batch_rows)) = records_sink {
        ing.set_records_sink(sink, batch_rows);
    }
    if let Some(spill) = spill {
        ing.set_spill(spill);
    }
    if let Some((sink, batch_rows)) = frames_sink {
        ing.set_frames_sink(sink, batch_rows);
    }
    let several = paths.len() > 1;
    let merged = read_captures(paths, limits.max_record_bytes, strict, progress, |rec, file| ing.record_from(rec, file))?;
    if let Some(why) = ing.nothing_readable(merged.read.records) {
        let name = if several { format!("none of the {} files", paths.len()) } else { paths[0].clone() };
        return Err(CaptureError::Unsupported(format!("{name}: {why}")));
    }
    let mut out = ing.finish(merged.read);
    out.files = merged.files;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::link::{FIN, LINKTYPE_IPV4};
    use crate::output::tables::Column;

    /// A raw IPv4/TCP packet (link type IPV4): 10.0.0.1:40000 is the client, 10.0.0.2:5672 the
    /// broker.
    fn packet(from_client: bool, seq: u32, ack: Option<u32>, flags: u16, payload: &[u8]) -> Vec<u8> {
        let total = (40 + payload.len()) as u16;
        let (src, dst, sport, dport) = if from_client { ([10, 0, 0, 1], [10, 0, 0, 2], 40000u16, 5672u16) } else { ([10, 0, 0, 2], [10, 0, 0, 1], 5672, 40000) };
        let mut p = vec![0x45, 0, (total >> 8) as u8, total as u8, 0, 0, 0x40, 0, 64, 6, 0, 0];
        p.extend_from_slice(&src);
        p.extend_from_slice(&dst);
        p.extend_from_slice(&sport.to_be_bytes());
        p.extend_from_slice(&dport.to_be_bytes());
        p.extend_from_slice(&seq.to_be_bytes());
        p.extend_from_slice(&ack.unwrap_or(0).to_be_bytes());
        let flags = flags | if ack.is_some() { ACK } else { 0 };
        p.extend_from_slice(&[0x50, flags as u8, 0xff, 0xff, 0, 0, 0, 0]);
        p.extend_from_slice(payload);
        p
    }

    fn run(packets: &[Vec<u8>]) -> Output {
        let limits = Limits::default();
        let mut ing = Ingest::new(&[5672], &limits, false);
        for (i, p) in packets.iter().enumerate() {
            ing.record(Record { ts_ns: i as i64, linktype: LINKTYPE_IPV4, origlen: p.len() as u32, data: p });
        }
        ing.finish(ReadSummary { format: "pcap", records: packets.len() as u64, ..Default::default() })
    }

    fn i64s<'t>(t: &'t Table, name: &str) -> &'t [i64] {
        match &t.iter().find(|(n, _)| *n == name).unwrap().1 {
            Column::I64(v) => v,
            _ => panic!("{name} is not int64"),
        }
    }

    /// The peer acknowledged client bytes the capture never saw, and nothing of the client
    /// follows: the hole is missing bytes of the client direction, but no packet's
    /// `gap_before` (found by the capture_reader fuzz target: the capture's last packet, of
    /// the other direction, got it).
    #[test]
    fn acknowledged_tail_is_missing_but_before_no_packet() {
        let (c, s) = (1000u32, 5000u32);
        let hdr = PROTOCOL_HEADER_091;
        let out = run(&[
            packet(true, c, None, SYN, &[]),
            packet(false, s, Some(c + 1), SYN, &[]),
            packet(true, c + 1, Some(s + 1), 0, hdr),
            // 20 client bytes after the header are not in the capture; the broker acks them
            packet(false, s + 1, Some(c + 1 + 8 + 20), 0, &[]),
        ]);
        assert_eq!(i64s(&out.connections, "c2s_bytes_missing"), [20]);
        assert_eq!(i64s(&out.connections, "c2s_stream_bytes"), [28]);
        assert_eq!(i64s(&out.packets, "gap_before"), [0, 0, 0, 0]);
        let Column::Cat(kinds, names) = &out.anomalies[0].1 else { panic!() };
        let kinds: Vec<&str> = kinds.iter().map(|&k| names[k as usize]).collect();
        assert_eq!(kinds, ["capture-gap"]);
        assert_eq!(i64s(&out.anomalies, "bytes"), [20]);
    }

    /// The same hole followed by client data: the data's packet carries it.
    #[test]
    fn acknowledged_hole_before_data_is_its_gap_before() {
        let (c, s) = (1000u32, 5000u32);
        let out = run(&[
            packet(true, c, None, SYN, &[]),
            packet(false, s, Some(c + 1), SYN, &[]),
            packet(true, c + 1, Some(s + 1), 0, PROTOCOL_HEADER_091),
            packet(false, s + 1, Some(c + 1 + 8 + 20), 0, &[]),
            packet(true, c + 1 + 28, Some(s + 1), FIN, &[8, 0, 0, 0, 0, 0, 0, 0xCE]),
        ]);
        assert_eq!(i64s(&out.connections, "c2s_bytes_missing"), [20]);
        assert_eq!(i64s(&out.packets, "gap_before"), [0, 0, 0, 0, 20]);
    }

    fn texts<'t>(t: &'t Table, name: &str) -> Vec<Option<&'t str>> {
        match &t.iter().find(|(n, _)| *n == name).unwrap().1 {
            Column::Text(codes, dict) => codes.iter().map(|&c| (c >= 0).then(|| dict[c as usize].as_str())).collect(),
            _ => panic!("{name} is not text"),
        }
    }

    /// The client's first bytes choose its decoder however they are cut: an AMQP 1.0 header in
    /// two packets waits for its rest, then AMQP 1.0's decoder frames the open that follows; the
    /// 0-9-1 header cut the same way gives AMQP 0-9-1, as before.
    #[test]
    fn the_first_bytes_choose_the_decoder_however_they_are_cut() {
        let (c, s) = (1000u32, 5000u32);
        let open = [0, 0, 0, 12, 2, 0, 0, 0, 0x00, 0x53, 0x10, 0x45];
        let out = run(&[
            packet(true, c, None, SYN, &[]),
            packet(false, s, Some(c + 1), SYN, &[]),
            packet(true, c + 1, Some(s + 1), 0, b"AMQ"),
            packet(true, c + 4, Some(s + 1), 0, b"P\x00\x01\x00\x00"),
            packet(true, c + 9, Some(s + 1), FIN, &open),
        ]);
        assert_eq!(texts(&out.connections, "protocol"), [Some("1.0")]);
        assert_eq!(i64s(&out.connections, "frames"), [1]);
        assert_eq!(i64s(&out.connections, "c2s_bytes_decoded"), [8 + 12]);
        assert_eq!(i64s(&out.connections, "anomalies"), [0]);
        let hdr = PROTOCOL_HEADER_091;
        let out = run(&[
            packet(true, c, None, SYN, &[]),
            packet(false, s, Some(c + 1), SYN, &[]),
            packet(true, c + 1, Some(s + 1), 0, &hdr[..3]),
            packet(true, c + 4, Some(s + 1), FIN, &hdr[3..]),
        ]);
        assert_eq!(texts(&out.connections, "protocol"), [Some("0-9-1")]);
        assert_eq!(i64s(&out.connections, "c2s_bytes_decoded"), [8]);
        // no byte of either direction: nothing told the protocol
        let out = run(&[packet(true, c, None, SYN, &[]), packet(false, s, Some(c + 1), SYN, &[])]);
        assert_eq!(texts(&out.connections, "protocol"), [None]);
    }
}
