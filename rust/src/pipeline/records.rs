//! Each capture record to its TCP conversation: the records table, link types and IP packets
//! that are not decoded (counted, or an anomaly of the file), the conversations numbered as
//! Wireshark's tcp.stream (port reuse included), and the `max_streams` cap.

use super::Ingest;
use crate::anomaly::AnomalyKind;
use crate::capture::link::{self, LinkError, TcpPacket, ACK, SYN};
use crate::capture::reader::Record;
use crate::flow::conn::{ClientEvidence, Dir, Kind, Stream};
use crate::proto::facts::ConnInfo;
use crate::flow::tcp::{ConvKey, Endpoint};

impl Ingest<'_> {
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
                self.records.reserve(*batch_rows);
            }
        }
        if !link::linktype_supported(rec.linktype) {
            return self.skipped_linktype(&rec, number);
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
        match self.conversation_of(&tcp) {
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

    /// The conversation of a TCP packet, numbered on its first packet; None past `max_streams`.
    fn conversation_of(&mut self, tcp: &TcpPacket<'_>) -> Option<u32> {
        let src = Endpoint { addr: tcp.src, port: tcp.sport };
        let dst = Endpoint { addr: tcp.dst, port: tcp.dport };
        let key = ConvKey::new(src, dst, tcp.v6);
        let is_syn_only = tcp.flags & (SYN | ACK) == SYN;
        match self.conversations.get(&key) {
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
        }
    }

    /// A record of a link type not decoded: counted per link type, on one row per link type
    /// whose totals are filled in at the end.
    fn skipped_linktype(&mut self, rec: &Record<'_>, number: u32) {
        let bytes = rec.data.len() as u64;
        match self.skipped_linktypes.iter_mut().find(|s| s.0 == rec.linktype) {
            Some(s) => {
                s.1 += 1;
                s.2 += bytes;
            }
            None => {
                let row = self.summary_row(AnomalyKind::UnsupportedLinkType, number, rec.ts_ns);
                self.skipped_linktypes.push((rec.linktype, 1, bytes, row));
            }
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
        let row = self.tables.anomalies.kind.len();
        self.capture_rows().then(|| {
            self.tables.anomalies.push_row(kind, None, Some(number), Some(ts_ns), 0, String::new());
            row
        })
    }

    pub(super) fn file_anomaly(&mut self, kind: AnomalyKind, packet: u32, ts_ns: Option<i64>, bytes: u64, detail: String) {
        if !self.capture_rows() {
            return;
        }
        self.tables.anomalies.push(kind, None, Some(packet), ts_ns, bytes, detail);
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

    /// Why nothing in the capture can be read, when every record had an unsupported link type.
    pub(super) fn nothing_readable(&self, records: u64) -> Option<String> {
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

pub(super) fn linktype_text(lt: u32) -> String {
    if lt == u32::MAX {
        "packets of an interface that no interface description block describes".into()
    } else {
        format!("link type {} is not supported", link::linktype_name(lt))
    }
}
