//! The ingestion pipeline: capture records → TCP conversations (numbered like Wireshark's
//! tcp.stream) → per-direction reassembly → AMQP frames, written into column builders.

use std::collections::HashMap;
use std::io::Read;

use ahash::RandomState;

use crate::amqp::decoder::{Decoder, FrameEvent, FrameSink};
use crate::amqp::parser::{decode_content_header, decode_method, method_ids, FrameType, Invalid, MethodArgs, PROTOCOL_HEADER_091};
use crate::amqp::spec::{METHODS, METHOD_COUNT};
use crate::anomaly::AnomalyKind;
use crate::capture::link::{self, parse_options, LinkError, TcpOptions, ACK, SYN};
use crate::capture::reader::{open_capture, read_capture_from, ReadSummary, Record};
use crate::error::CaptureError;
use crate::limits::Limits;
use crate::tables::{direction_codes, keep_rows, Column, OptCol, RowOrigin, Sparse, SparseStr, Table, DIRECTIONS};
use crate::tcp::reassembly::{Chunk, GapCause, PacketRef, Reassembler};
use crate::tcp::{format_addr, ConvKey, Endpoint};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// No payload yet and no AMQP port: may still turn out to be AMQP (protocol header).
    Undecided,
    Amqp,
    Other,
    /// Beyond `max_streams`: numbered, not decoded.
    OverLimit,
}

/// How sure we are which side is the client (higher wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum ClientEvidence {
    FirstPacket,
    Syn,
    Port,
    ProtocolHeader,
}

#[derive(Default)]
struct Dir {
    /// Wireshark's base for relative sequence numbers.
    base_seq: Option<u32>,
    syn_options: Option<TcpOptions>,
    reasm: Reassembler,
    decoder: Option<Decoder>,
    packets: u64,
    payload_bytes: u64,
}

#[derive(Default)]
struct ConnInfo {
    protocol_header_seen: bool,
    frame_max: Option<u64>,
    channel_max: Option<u64>,
    heartbeat: Option<u64>,
    /// Values from connection.tune-ok take precedence over connection.tune.
    tune_ok_seen: bool,
    vhost: Option<String>,
    user: Option<String>,
    mechanism: Option<String>,
    client_product: Option<String>,
    client_version: Option<String>,
    client_platform: Option<String>,
    connection_name: Option<String>,
    server_product: Option<String>,
    server_version: Option<String>,
    frames: u64,
    anomalies: u64,
    /// A tune-ok was decoded: the decoders' frame limit must follow it.
    frame_max_changed: bool,
    /// Bytes cut by snaplen at the end of a packet, shown as `gap_before` of the next data
    /// packet of the same direction (index: sent by endpoint A).
    snaplen_gap: [u64; 2],
}

struct Stream {
    a: Endpoint,
    b: Endpoint,
    v6: bool,
    kind: Kind,
    a_is_client: bool,
    evidence: ClientEvidence,
    dirs: [Dir; 2],
    first_ts: i64,
    last_ts: i64,
    info: ConnInfo,
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[derive(Default)]
pub struct PacketsBuilder {
    packet: Vec<i32>,
    stream: Vec<i32>,
    from_a: Vec<bool>,
    frame_len: Vec<i32>,
    payload_bytes: Vec<i32>,
    seq: Vec<i64>,
    ack: Vec<i64>,
    flags: Vec<i16>,
    window: Vec<i64>,
    tsval: OptCol<u32>,
    tsecr: OptCol<u32>,
    sack_blocks: Vec<i8>,
    frames_ended: Vec<i32>,
    retransmission: Vec<bool>,
    gap_before: Vec<i64>,
}

#[derive(Default)]
pub struct FramesBuilder {
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

fn frame_type_code(t: FrameType) -> i8 {
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
    fn push_method<'p>(&mut self, row: usize, payload: &'p [u8]) -> Result<MethodArgs<'p>, (AnomalyKind, String)> {
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

    fn rows(&self) -> usize {
        self.packet.len()
    }
}

#[derive(Default)]
pub struct AnomaliesBuilder {
    kind: Vec<i8>,
    stream: OptCol<i32>,
    from_a: Vec<bool>,
    packet: OptCol<i32>,
    bytes: Vec<i64>,
    detail: Vec<Option<String>>,
}

impl AnomaliesBuilder {
    fn push(&mut self, kind: AnomalyKind, origin: Option<RowOrigin>, packet: Option<u32>, bytes: u64, detail: String) {
        let code = AnomalyKind::ALL.iter().position(|k| *k == kind).unwrap() as i8;
        self.kind.push(code);
        self.stream.push(origin.map(|o| o.stream as i32));
        self.from_a.push(origin.is_some_and(|o| o.from_a));
        self.packet.push(packet.filter(|&p| p > 0).map(|p| p as i32));
        self.bytes.push(bytes as i64);
        self.detail.push(Some(detail));
    }
}

/// Receives frames from one direction's decoder.
struct Sink<'a> {
    frames: &'a mut FramesBuilder,
    anomalies: &'a mut AnomaliesBuilder,
    packets: &'a mut PacketsBuilder,
    info: &'a mut ConnInfo,
    origin: RowOrigin,
    arrival_row: u32,
}

impl FrameSink for Sink<'_> {
    fn frame(&mut self, ev: FrameEvent<'_>) {
        let f = &mut *self.frames;
        let row = f.packet.len();
        self.info.frames += 1;
        self.packets.frames_ended[self.arrival_row as usize] += 1;
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
                        self.anomaly(AnomalyKind::MalformedHeader, ev.packet, ev.header.size as u64, format!("{e:?}"));
                    }
                }
                let f = &mut *self.frames;
                f.method_id.push(None);
                f.method.push(-1);
            }
            FrameType::Body | FrameType::Heartbeat => {
                f.class_id.push(None);
                f.method_id.push(None);
                f.method.push(-1);
            }
        }
    }

    fn protocol_header(&mut self, version: [u8; 4], _packet: u32) {
        self.info.protocol_header_seen = true;
        let _ = version;
    }

    fn anomaly(&mut self, kind: AnomalyKind, packet: u32, bytes: u64, detail: String) {
        self.info.anomalies += 1;
        self.anomalies.push(kind, Some(self.origin), Some(packet), bytes, detail);
    }
}

impl Sink<'_> {
    /// Remember what a connection-level method says about the connection.
    fn connection_facts(&mut self, a: &MethodArgs<'_>) {
        let i = &mut *self.info;
        let s = |v: Option<&[u8]>| v.map(text);
        match a.name() {
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
                let ok = a.name() == "connection.tune-ok";
                if ok || !i.tune_ok_seen {
                    i.frame_max = a.frame_max;
                    i.channel_max = a.channel_max;
                    i.heartbeat = a.heartbeat;
                    i.frame_max_changed = true;
                }
                i.tune_ok_seen |= ok;
            }
            "connection.open" => i.vhost = s(a.vhost),
            _ => {}
        }
    }
}

pub struct Ingest<'l> {
    limits: &'l Limits,
    ports: Vec<u16>,
    conversations: HashMap<ConvKey, u32, RandomState>,
    streams: Vec<Stream>,
    all_ts: Vec<i64>,
    /// On-wire length of every record (the `records` table).
    all_len: Vec<i32>,
    packets: PacketsBuilder,
    frames: FramesBuilder,
    anomalies: AnomaliesBuilder,
    tcp_packets: u64,
    reported_linktypes: Vec<u32>,
    stream_limit_reported: bool,
}

pub struct Output {
    pub records: Table,
    pub packets: Table,
    pub frames: Table,
    pub connections: Table,
    pub anomalies: Table,
    pub read: ReadSummary,
    pub tcp_packets: u64,
    pub first_ts: Option<i64>,
    pub last_ts: Option<i64>,
}

impl<'l> Ingest<'l> {
    pub fn new(ports: &[u16], limits: &'l Limits) -> Self {
        Ingest {
            limits,
            ports: ports.to_vec(),
            conversations: HashMap::default(),
            streams: Vec::new(),
            all_ts: Vec::new(),
            all_len: Vec::new(),
            packets: PacketsBuilder::default(),
            frames: FramesBuilder::default(),
            anomalies: AnomaliesBuilder::default(),
            tcp_packets: 0,
            reported_linktypes: Vec::new(),
            stream_limit_reported: false,
        }
    }

    fn file_anomaly(&mut self, kind: AnomalyKind, packet: u32, bytes: u64, detail: String) {
        self.anomalies.push(kind, None, Some(packet), bytes, detail);
    }

    pub fn record(&mut self, rec: Record<'_>) {
        self.all_ts.push(rec.ts_ns);
        self.all_len.push(rec.origlen as i32);
        let number = self.all_ts.len() as u32;
        if !link::linktype_supported(rec.linktype) {
            if !self.reported_linktypes.contains(&rec.linktype) {
                self.reported_linktypes.push(rec.linktype);
                let name = if rec.linktype == u32::MAX { "unknown interface".to_string() } else { link::linktype_name(rec.linktype) };
                self.file_anomaly(AnomalyKind::UnsupportedLinkType, number, 0, format!("link type {name}: its packets are skipped"));
            }
            return;
        }
        let tcp = match link::decode(rec.linktype, rec.data) {
            Ok(t) => t,
            Err(LinkError::NotTcp) => return,
            Err(LinkError::Fragment) => {
                self.file_anomaly(AnomalyKind::IpFragment, number, rec.data.len() as u64, "fragmented IP packet (not reassembled)".into());
                return;
            }
            Err(LinkError::Malformed) => {
                self.file_anomaly(AnomalyKind::MalformedPacket, number, rec.data.len() as u64, "link, IP or TCP header does not parse".into());
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
                    self.new_stream(key, src, dst, tcp.v6, number)
                } else {
                    i
                }
            }
            None => self.new_stream(key, src, dst, tcp.v6, number),
        };
        self.tcp_segment(idx, &tcp, rec, number);
    }

    fn new_stream(&mut self, key: ConvKey, src: Endpoint, dst: Endpoint, v6: bool, number: u32) -> u32 {
        let idx = self.streams.len() as u32;
        let over = self.streams.len() as u64 >= self.limits.max_streams;
        let (kind, a_is_client, evidence) = if over {
            (Kind::OverLimit, true, ClientEvidence::FirstPacket)
        } else if self.ports.contains(&dst.port) {
            (Kind::Amqp, true, ClientEvidence::Port)
        } else if self.ports.contains(&src.port) {
            (Kind::Amqp, false, ClientEvidence::Port)
        } else {
            (Kind::Undecided, true, ClientEvidence::FirstPacket)
        };
        if over && !self.stream_limit_reported {
            self.stream_limit_reported = true;
            self.file_anomaly(AnomalyKind::StreamLimit, number, 0, format!("more than {} TCP conversations: later ones are not decoded", self.limits.max_streams));
        }
        self.streams.push(Stream {
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
        idx
    }

    fn tcp_segment(&mut self, idx: u32, tcp: &link::TcpPacket<'_>, rec: Record<'_>, number: u32) {
        let limits = self.limits;
        let Ingest { streams, packets, frames, anomalies, .. } = self;
        let st = &mut streams[idx as usize];
        let d = if st.a.addr == tcp.src && st.a.port == tcp.sport { 0 } else { 1 };
        if st.first_ts == 0 && st.dirs[0].packets == 0 && st.dirs[1].packets == 0 {
            st.first_ts = rec.ts_ns;
        }
        st.last_ts = rec.ts_ns;
        st.dirs[d].packets += 1;
        st.dirs[d].payload_bytes += tcp.payload_len as u64;
        if matches!(st.kind, Kind::Other | Kind::OverLimit) {
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
        if tcp.payload.starts_with(&PROTOCOL_HEADER_091[..4]) && st.evidence < ClientEvidence::ProtocolHeader && st.dirs[d].reasm.span() == 0 {
            st.a_is_client = d == 0;
            st.evidence = ClientEvidence::ProtocolHeader;
        } else if tcp.flags & (SYN | ACK) == SYN && st.evidence < ClientEvidence::Syn {
            st.a_is_client = d == 0;
            st.evidence = ClientEvidence::Syn;
        }

        let opts = parse_options(tcp.options);
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

        let row = packets.packet.len() as u32;
        packets.packet.push(number as i32);
        packets.stream.push(idx as i32);
        packets.from_a.push(d == 0);
        packets.frame_len.push(rec.origlen as i32);
        packets.payload_bytes.push(tcp.payload_len as i32);
        packets.seq.push(tcp.seq.wrapping_sub(dir.base_seq.unwrap_or(0)) as i64);
        packets.ack.push(if has_ack { tcp.ack.wrapping_sub(other.base_seq.unwrap_or(0)) as i64 } else { 0 });
        packets.flags.push(tcp.flags as i16);
        packets.window.push(window);
        packets.tsval.push(opts.timestamp.map(|t| t.0));
        packets.tsecr.push(opts.timestamp.map(|t| t.1));
        packets.sack_blocks.push(opts.sack_blocks as i8);
        packets.frames_ended.push(0);
        packets.retransmission.push(false);
        packets.gap_before.push(0);

        if tcp.payload_len > 0 && st.info.snaplen_gap[d] > 0 {
            packets.gap_before[row as usize] += std::mem::take(&mut st.info.snaplen_gap[d]) as i64;
        }
        let pref = PacketRef { number, row };
        let info = &mut st.info;
        // The peer's acknowledgement may reveal bytes the capture lost in the other direction.
        if has_ack {
            let origin = RowOrigin { stream: idx, from_a: d != 0 };
            let Dir { reasm, decoder, .. } = other;
            let mut sink = Sink { frames, anomalies, packets, info, origin, arrival_row: row };
            reasm.peer_ack(tcp.ack, &mut |c| on_chunk(c, decoder, false, &mut sink, limits));
        }
        let origin = RowOrigin { stream: idx, from_a: d == 0 };
        let aligned = if dir.reasm.started() { dir.reasm.syn_seen } else { syn };
        let Dir { reasm, decoder, .. } = dir;
        let mut sink = Sink { frames, anomalies, packets, info, origin, arrival_row: row };
        let outcome = reasm.segment(
            tcp.seq,
            syn,
            tcp.flags & link::FIN != 0,
            tcp.payload,
            tcp.payload_len as u64,
            pref,
            limits.max_reassembly_bytes,
            &mut |c| on_chunk(c, decoder, aligned, &mut sink, limits),
        );
        sink.packets.retransmission[row as usize] = outcome.retransmission;
        if st.info.frame_max_changed {
            st.info.frame_max_changed = false;
            let fm = st.info.frame_max.unwrap_or(0);
            for dir in st.dirs.iter_mut() {
                if let Some(dec) = dir.decoder.as_mut() {
                    dec.set_frame_max(fm, limits);
                }
            }
        }
    }

    pub fn finish(mut self, read: ReadSummary) -> Output {
        let last = PacketRef { number: self.all_ts.len() as u32, row: self.packets.packet.len().saturating_sub(1) as u32 };
        let limits = self.limits;
        {
            let Ingest { streams, packets, frames, anomalies, .. } = &mut self;
            for (idx, st) in streams.iter_mut().enumerate() {
                if st.kind != Kind::Amqp {
                    continue;
                }
                for d in 0..2 {
                    let origin = RowOrigin { stream: idx as u32, from_a: d == 0 };
                    let info = &mut st.info;
                    let Dir { reasm, decoder, .. } = &mut st.dirs[d];
                    let mut sink = Sink { frames, anomalies, packets, info, origin, arrival_row: last.row };
                    let aligned = reasm.syn_seen;
                    reasm.finish(last, &mut |c| on_chunk(c, decoder, aligned, &mut sink, limits));
                    if let Some(dec) = decoder.as_mut() {
                        dec.finish(last.number, &mut sink);
                    }
                }
            }
        }
        if read.truncated {
            let detail = read.warnings.last().cloned().unwrap_or_default();
            self.file_anomaly(AnomalyKind::CaptureTruncated, last.number, 0, detail);
        }
        let is_amqp: Vec<bool> = self.streams.iter().map(|s| s.kind == Kind::Amqp).collect();
        let a_is_client: Vec<bool> = self.streams.iter().map(|s| s.a_is_client).collect();
        let first_ts = self.all_ts.first().copied();
        let last_ts = self.all_ts.last().copied();
        let tcp_packets = self.tcp_packets;
        let connections = self.connections_table();
        let packets = packets_table(std::mem::take(&mut self.packets), &is_amqp, &a_is_client, &self.all_ts);
        let frames = frames_table(std::mem::take(&mut self.frames), &a_is_client, &self.all_ts);
        let anomalies = anomalies_table(std::mem::take(&mut self.anomalies), &a_is_client, &self.all_ts);
        let all_len = std::mem::take(&mut self.all_len);
        let records = vec![
            ("packet", Column::I32((1..=all_len.len() as i32).collect())),
            ("ts", Column::Ts(std::mem::take(&mut self.all_ts))),
            ("frame_len", Column::I32(all_len)),
        ];
        Output { records, packets, frames, connections, anomalies, read, tcp_packets, first_ts, last_ts }
    }

    fn connections_table(&self) -> Table {
        let amqp: Vec<(usize, &Stream)> = self.streams.iter().enumerate().filter(|(_, s)| s.kind == Kind::Amqp).collect();
        let col_i64 = |f: &dyn Fn(usize, &Stream) -> i64| Column::I64(amqp.iter().map(|&(i, s)| f(i, s)).collect());
        let col_opt = |f: &dyn Fn(&Stream) -> Option<i64>| {
            let v: Vec<Option<i64>> = amqp.iter().map(|&(_, s)| f(s)).collect();
            Column::NullI64(v.iter().map(|x| x.unwrap_or(0)).collect(), v.iter().map(|x| x.is_some()).collect())
        };
        let col_text = |f: &dyn Fn(&Stream) -> Option<String>| Column::Text(amqp.iter().map(|&(_, s)| f(s)).collect());
        let client = |s: &Stream| if s.a_is_client { 0 } else { 1 };
        let ep = |s: &Stream, client_side: bool| if s.a_is_client == client_side { s.a } else { s.b };
        vec![
            ("stream", Column::I32(amqp.iter().map(|&(i, _)| i as i32).collect())),
            ("client_addr", col_text(&|s| Some(format_addr(&ep(s, true).addr, s.v6)))),
            ("client_port", col_i64(&|_, s| ep(s, true).port as i64)),
            ("broker_addr", col_text(&|s| Some(format_addr(&ep(s, false).addr, s.v6)))),
            ("broker_port", col_i64(&|_, s| ep(s, false).port as i64)),
            ("first_ts", Column::Ts(amqp.iter().map(|(_, s)| s.first_ts).collect())),
            ("last_ts", Column::Ts(amqp.iter().map(|(_, s)| s.last_ts).collect())),
            ("c2s_packets", col_i64(&|_, s| s.dirs[client(s)].packets as i64)),
            ("s2c_packets", col_i64(&|_, s| s.dirs[1 - client(s)].packets as i64)),
            ("c2s_bytes", col_i64(&|_, s| s.dirs[client(s)].payload_bytes as i64)),
            ("s2c_bytes", col_i64(&|_, s| s.dirs[1 - client(s)].payload_bytes as i64)),
            ("handshake_seen", Column::Bool(amqp.iter().map(|(_, s)| s.dirs[client(s)].reasm.syn_seen).collect())),
            ("protocol_header_seen", Column::Bool(amqp.iter().map(|(_, s)| s.info.protocol_header_seen).collect())),
            ("frame_max", col_opt(&|s| s.info.frame_max.map(|v| v as i64))),
            ("channel_max", col_opt(&|s| s.info.channel_max.map(|v| v as i64))),
            ("heartbeat_s", col_opt(&|s| s.info.heartbeat.map(|v| v as i64))),
            ("vhost", col_text(&|s| s.info.vhost.clone())),
            ("user", col_text(&|s| s.info.user.clone())),
            ("mechanism", col_text(&|s| s.info.mechanism.clone())),
            ("client_product", col_text(&|s| s.info.client_product.clone())),
            ("client_version", col_text(&|s| s.info.client_version.clone())),
            ("client_platform", col_text(&|s| s.info.client_platform.clone())),
            ("connection_name", col_text(&|s| s.info.connection_name.clone())),
            ("server_product", col_text(&|s| s.info.server_product.clone())),
            ("server_version", col_text(&|s| s.info.server_version.clone())),
            ("mss_c2s", col_opt(&|s| s.dirs[client(s)].syn_options.and_then(|o| o.mss).map(|v| v as i64))),
            ("mss_s2c", col_opt(&|s| s.dirs[1 - client(s)].syn_options.and_then(|o| o.mss).map(|v| v as i64))),
            ("window_scale_c2s", col_opt(&|s| s.dirs[client(s)].syn_options.and_then(|o| o.window_scale).map(|v| v as i64))),
            ("window_scale_s2c", col_opt(&|s| s.dirs[1 - client(s)].syn_options.and_then(|o| o.window_scale).map(|v| v as i64))),
            ("frames", col_i64(&|_, s| s.info.frames as i64)),
            ("c2s_bytes_decoded", col_i64(&|_, s| decoded(&s.dirs[client(s)]).0 as i64)),
            ("s2c_bytes_decoded", col_i64(&|_, s| decoded(&s.dirs[1 - client(s)]).0 as i64)),
            ("c2s_bytes_skipped", col_i64(&|_, s| decoded(&s.dirs[client(s)]).1 as i64)),
            ("s2c_bytes_skipped", col_i64(&|_, s| decoded(&s.dirs[1 - client(s)]).1 as i64)),
            ("c2s_bytes_missing", col_i64(&|_, s| s.dirs[client(s)].reasm.bytes_missing as i64)),
            ("s2c_bytes_missing", col_i64(&|_, s| s.dirs[1 - client(s)].reasm.bytes_missing as i64)),
            ("bytes_missing", col_i64(&|_, s| (s.dirs[0].reasm.bytes_missing + s.dirs[1].reasm.bytes_missing) as i64)),
            ("c2s_stream_bytes", col_i64(&|_, s| s.dirs[client(s)].reasm.span() as i64)),
            ("s2c_stream_bytes", col_i64(&|_, s| s.dirs[1 - client(s)].reasm.span() as i64)),
            ("anomalies", col_i64(&|_, s| s.info.anomalies as i64)),
        ]
    }
}

fn decoded(d: &Dir) -> (u64, u64) {
    d.decoder.as_ref().map_or((0, 0), |x| (x.bytes_decoded, x.bytes_skipped))
}

fn on_chunk(c: Chunk<'_>, decoder: &mut Option<Decoder>, aligned: bool, sink: &mut Sink<'_>, limits: &Limits) {
    let dec = decoder.get_or_insert_with(|| {
        let mut d = Decoder::new(aligned, limits);
        if let Some(fm) = sink.info.frame_max {
            d.set_frame_max(fm, limits);
        }
        d
    });
    match c {
        Chunk::Data { bytes, from, arrival } => {
            sink.arrival_row = arrival.row;
            dec.feed(bytes, from.number, arrival.number, limits, sink);
        }
        Chunk::Gap { bytes, cause, next, arrival } => {
            sink.arrival_row = arrival.row;
            let (kind, packet, detail) = match cause {
                GapCause::Dropped => {
                    sink.packets.gap_before[next.row as usize] += bytes as i64;
                    (AnomalyKind::CaptureGap, next.number, format!("{bytes} bytes missing from the capture"))
                }
                GapCause::Snaplen => {
                    sink.info.snaplen_gap[!sink.origin.from_a as usize] += bytes;
                    (AnomalyKind::TruncatedPacket, next.number, format!("{bytes} bytes cut by the capture's snaplen"))
                }
                GapCause::Tail => {
                    // No packet of this direction follows the hole: no gap_before to add to.
                    (AnomalyKind::CaptureGap, next.number, format!("{bytes} bytes acknowledged by the peer are missing from the capture's end"))
                }
                GapCause::Overflow => {
                    sink.packets.gap_before[next.row as usize] += bytes as i64;
                    (AnomalyKind::ReassemblyOverflow, next.number, format!("{bytes} bytes given up: out-of-order data over the reassembly cap"))
                }
            };
            sink.anomaly(kind, packet, bytes, detail);
            dec.gap(bytes, arrival.number);
        }
    }
}

fn ts_of(packets: &[i32], all_ts: &[i64]) -> Vec<i64> {
    packets.iter().map(|&p| all_ts[(p - 1) as usize]).collect()
}

fn packets_table(mut p: PacketsBuilder, is_amqp: &[bool], a_is_client: &[bool], all_ts: &[i64]) -> Table {
    let keep: Vec<bool> = p.stream.iter().map(|&s| is_amqp[s as usize]).collect();
    if keep.iter().any(|k| !k) {
        keep_rows(&mut p.packet, &keep);
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
    let ts = ts_of(&p.packet, all_ts);
    vec![
        ("packet", Column::I32(p.packet)),
        ("ts", Column::Ts(ts)),
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

fn frames_table(f: FramesBuilder, a_is_client: &[bool], all_ts: &[i64]) -> Table {
    let n = f.rows();
    let stream_u32: Vec<u32> = f.stream.iter().map(|&s| s as u32).collect();
    let direction = direction_codes(&stream_u32, &f.from_a, a_is_client);
    let ts = ts_of(&f.packet, all_ts);
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
        ("method", Column::Str(f.method, method_names)),
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

fn anomalies_table(a: AnomaliesBuilder, a_is_client: &[bool], all_ts: &[i64]) -> Table {
    let direction: Vec<i8> = a
        .stream
        .values
        .iter()
        .zip(&a.stream.valid)
        .zip(&a.from_a)
        .map(|((&s, &valid), &fa)| if !valid { -1 } else if fa == a_is_client[s as usize] { 0 } else { 1 })
        .collect();
    let ts: Vec<i64> = a.packet.values.iter().zip(&a.packet.valid).map(|(&p, &v)| if v { all_ts[(p - 1) as usize] } else { 0 }).collect();
    let ts_valid = a.packet.valid.clone();
    let names: Vec<&'static str> = AnomalyKind::ALL.iter().map(|k| k.name()).collect();
    vec![
        ("kind", Column::Cat(a.kind, names)),
        ("stream", a.stream.finish()),
        ("direction", Column::Cat(direction, DIRECTIONS.to_vec())),
        ("packet", a.packet.finish()),
        ("ts", Column::NullTs(ts, ts_valid)),
        ("bytes", Column::I64(a.bytes)),
        ("detail", Column::Text(a.detail)),
    ]
}

/// Decode the capture at `path`.
pub fn ingest(path: &str, ports: &[u16], limits: &Limits) -> Result<Output, CaptureError> {
    ingest_from(open_capture(path)?, path, ports, limits)
}

/// Decode a capture read from `input` (a byte slice, any reader); `name` stands for it in
/// error messages.
pub fn ingest_from(input: impl Read + Send, name: &str, ports: &[u16], limits: &Limits) -> Result<Output, CaptureError> {
    let mut ing = Ingest::new(ports, limits);
    let read = read_capture_from(input, name, limits.max_record_bytes, |rec| ing.record(rec))?;
    Ok(ing.finish(read))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::link::{FIN, LINKTYPE_IPV4};

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
        let mut ing = Ingest::new(&[5672], &limits);
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
}
