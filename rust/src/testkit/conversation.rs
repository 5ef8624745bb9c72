//! The tcp_reassembly harness: a structured segment sequence of both directions ([`Conversation`]),
//! a model of what reassembly must hand out, and the packet builders that turn the segments
//! into IPv4 packets carrying AMQP frames for the whole pipeline.

use arbitrary::{Arbitrary, Unstructured};

use crate::capture::link::{ACK, FIN, LINKTYPE_IPV4, RST, SYN};
use crate::capture::reader::{ReadSummary, Record};
use crate::pipeline::Ingest;
use crate::limits::Limits;
use crate::flow::tcp::reassembly::{Chunk, GapCause, PacketRef, Reassembler};
use super::small_limits;
use super::invariants::{check_output, dense, rows};

/// Where a segment starts, relative to the direction's stream.
#[derive(Debug, Clone, Copy)]
pub enum Seq {
    /// Right after the highest byte this direction sent so far (in-order data).
    Next,
    /// That point moved back or ahead (retransmission, overlap, hole).
    Delta(i16),
    /// Initial sequence number + offset (far jumps, wrap-around).
    Abs(u32),
}

/// The acknowledgement a segment carries (for the other direction's stream).
#[derive(Debug, Clone, Copy)]
pub enum Ack {
    None,
    /// Everything the peer sent so far.
    All,
    Delta(i16),
    Abs(u32),
}

#[derive(Debug, Clone)]
pub struct Segment {
    /// Sent by B (the broker side, port 5672) rather than A.
    pub from_b: bool,
    pub seq: Seq,
    pub ack: Ack,
    /// SYN 0x02, FIN 0x01, RST 0x04 (other bits ignored; ACK follows `ack`).
    pub flags: u8,
    /// Payload length on the wire (IP/TCP headers), taken modulo 4096.
    pub len: u16,
    /// Bytes the capture kept of it (snaplen), when fewer than `len`.
    pub snap: Option<u16>,
}

#[derive(Debug, Clone)]
pub struct Conversation {
    /// Initial sequence number of each direction (A, B).
    pub isn: [u32; 2],
    /// Out-of-order bytes held per direction (`max_reassembly_bytes`).
    pub cap: u16,
    pub segments: Vec<Segment>,
}

// The input format, by hand rather than derived: simple enough for make_seeds.py to write, and
// independent of how `arbitrary`'s derive macro encodes enums (it may change between versions).

impl<'a> Arbitrary<'a> for Seq {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(match u8::arbitrary(u)? % 3 {
            0 => Seq::Next,
            1 => Seq::Delta(u.arbitrary()?),
            _ => Seq::Abs(u.arbitrary()?),
        })
    }
}

impl<'a> Arbitrary<'a> for Ack {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(match u8::arbitrary(u)? % 4 {
            0 => Ack::None,
            1 => Ack::All,
            2 => Ack::Delta(u.arbitrary()?),
            _ => Ack::Abs(u.arbitrary()?),
        })
    }
}

impl<'a> Arbitrary<'a> for Segment {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(Segment {
            from_b: u.arbitrary()?,
            seq: u.arbitrary()?,
            ack: u.arbitrary()?,
            flags: u.arbitrary()?,
            len: u.arbitrary()?,
            snap: u.arbitrary()?,
        })
    }
}

impl<'a> Arbitrary<'a> for Conversation {
    /// Segments follow one another until the input ends (a short last one is completed with
    /// zeros, as `arbitrary` does).
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let isn = u.arbitrary()?;
        let cap = u.arbitrary()?;
        let mut segments = Vec::new();
        while !u.is_empty() {
            segments.push(u.arbitrary()?);
        }
        Ok(Conversation { isn, cap, segments })
    }
}

impl Conversation {
    /// Read a conversation from fuzz input ([`Conversation::encode`] gives the format).
    pub fn parse(data: &[u8]) -> Self {
        // Reading integers never fails: missing bytes read as zeros.
        Conversation::arbitrary(&mut Unstructured::new(data)).expect("arbitrary integers do not fail")
    }

    /// The bytes [`Conversation::parse`] reads back into this conversation (make_seeds.py
    /// writes the same): ISNs (u32, u32), cap (u16), then each segment: side (u8, low bit),
    /// sequence tag (u8 % 3: Next, Delta i16, Abs u32) and value, acknowledgement tag (u8 % 4:
    /// None, All, Delta i16, Abs u32) and value, flags (u8), length (u16), snaplen (u8 low bit
    /// set: u16 follows). Integers little-endian.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&self.isn[0].to_le_bytes());
        b.extend_from_slice(&self.isn[1].to_le_bytes());
        b.extend_from_slice(&self.cap.to_le_bytes());
        for s in &self.segments {
            b.push(s.from_b as u8);
            match s.seq {
                Seq::Next => b.push(0),
                Seq::Delta(d) => {
                    b.push(1);
                    b.extend_from_slice(&d.to_le_bytes());
                }
                Seq::Abs(a) => {
                    b.push(2);
                    b.extend_from_slice(&a.to_le_bytes());
                }
            }
            match s.ack {
                Ack::None => b.push(0),
                Ack::All => b.push(1),
                Ack::Delta(d) => {
                    b.push(2);
                    b.extend_from_slice(&d.to_le_bytes());
                }
                Ack::Abs(a) => {
                    b.push(3);
                    b.extend_from_slice(&a.to_le_bytes());
                }
            }
            b.push(s.flags);
            b.extend_from_slice(&s.len.to_le_bytes());
            match s.snap {
                None => b.push(0),
                Some(n) => {
                    b.push(1);
                    b.extend_from_slice(&n.to_le_bytes());
                }
            }
        }
        b
    }
}

/// A concrete segment: sequence numbers resolved, lengths bounded.
#[derive(Debug, Clone, Copy)]
struct Seg {
    dir: usize,
    seq: u32,
    ack: Option<u32>,
    syn: bool,
    fin: bool,
    rst: bool,
    declared: u32,
    captured: u32,
}

impl Conversation {
    fn resolve(&self) -> Vec<Seg> {
        // Highest sequence number sent so far per direction (the start of in-order data).
        let mut high = [self.isn[0].wrapping_add(1), self.isn[1].wrapping_add(1)];
        let mut out = Vec::with_capacity(self.segments.len());
        for s in &self.segments {
            let dir = s.from_b as usize;
            let syn = s.flags & SYN as u8 != 0;
            let seq = match s.seq {
                Seq::Next if syn => self.isn[dir],
                Seq::Next => high[dir],
                Seq::Delta(d) => high[dir].wrapping_add(d as i32 as u32),
                Seq::Abs(a) => self.isn[dir].wrapping_add(a),
            };
            let ack = match s.ack {
                Ack::None => None,
                Ack::All => Some(high[1 - dir]),
                Ack::Delta(d) => Some(high[1 - dir].wrapping_add(d as i32 as u32)),
                Ack::Abs(a) => Some(self.isn[1 - dir].wrapping_add(a)),
            };
            let declared = (s.len % 4096) as u32;
            let captured = s.snap.map_or(declared, |n| (n as u32).min(declared));
            let fin = s.flags & FIN as u8 != 0;
            let end = seq.wrapping_add(syn as u32).wrapping_add(declared).wrapping_add(fin as u32);
            if (end.wrapping_sub(high[dir]) as i32) > 0 {
                high[dir] = end;
            }
            out.push(Seg { dir, seq, ack, syn, fin, rst: s.flags & RST as u8 != 0, declared, captured });
        }
        out
    }
}

/// Content of the byte at sequence number `seq`: a hash, so that a byte delivered at the wrong
/// position shows.
fn content(seq: u32) -> u8 {
    (seq.wrapping_mul(0x9E37_79B1) >> 24) as u8
}

/// The reference for one direction: where the stream stands, as the chunks say.
#[derive(Default)]
struct Model {
    started: bool,
    /// Next sequence number, offset: advanced by every chunk (and by the FIN, once).
    seq: u32,
    off: u64,
    delivered: u64,
    gaps: u64,
    fin_taken: bool,
    /// Sequence numbers at which a FIN was offered.
    fins: Vec<u32>,
    /// Furthest offset offered: a segment's end (its FIN included) or an acknowledgement.
    frontier: u64,
    captured_offered: u64,
    /// Packet number of the last chunk's arrival: never decreases.
    arrival: u32,
}

impl Model {
    fn offset_of(&self, seq: u32) -> i64 {
        self.off as i64 + seq.wrapping_sub(self.seq) as i32 as i64
    }

    /// `len` sequence numbers from `seq` were offered (a segment, or an acknowledgement up to
    /// `seq` with `len` 0). As the reassembler does, where the range starts decides whether it
    /// lies ahead or behind; its end follows from there, even past 2^31 ahead.
    fn offer(&mut self, seq: u32, len: u64) {
        let end = self.offset_of(seq) + len as i64;
        if end > self.frontier as i64 {
            self.frontier = end as u64;
        }
    }

    /// One chunk out of the reassembler. `segs` are all segments so far; `finishing` marks the
    /// end-of-capture packet reference.
    fn chunk(&mut self, c: Chunk<'_>, dir: usize, segs: &[Seg], finishing: Option<PacketRef>) {
        let seg_of = |p: PacketRef, what: &str| -> Seg {
            let s = *segs.get(p.row as usize).unwrap_or_else(|| panic!("{what} refers to unknown packet {p:?}"));
            assert_eq!(s.dir, dir, "{what} refers to packet {p:?} of the other direction");
            assert_eq!(p.number, p.row + 1);
            s
        };
        let arrival = match c {
            Chunk::Data { arrival, .. } | Chunk::Gap { arrival, .. } => arrival,
        };
        assert!(arrival.number >= self.arrival, "a chunk arrives in packet {} after one in {}", arrival.number, self.arrival);
        self.arrival = arrival.number;
        match c {
            Chunk::Data { bytes, from, arrival } => {
                assert!(!bytes.is_empty(), "empty data chunk");
                let s = seg_of(from, "data");
                seg_of(arrival, "data arrival");
                assert!(arrival.row >= from.row, "data released before it arrived");
                let matches = |at: u32| bytes.iter().enumerate().all(|(i, &b)| b == content(at.wrapping_add(i as u32)));
                if !matches(self.seq) {
                    let fin_here = !self.fin_taken && self.fins.contains(&self.seq);
                    assert!(fin_here && matches(self.seq.wrapping_add(1)), "data chunk of {} bytes is not the stream's next bytes", bytes.len());
                    self.take_fin();
                }
                // The bytes are captured bytes of `from`.
                let data_seq = s.seq.wrapping_add(s.syn as u32);
                let at = self.seq.wrapping_sub(data_seq) as u64;
                assert!(at + bytes.len() as u64 <= s.captured as u64, "data chunk outside the captured bytes of packet {from:?}");
                self.seq = self.seq.wrapping_add(bytes.len() as u32);
                self.off += bytes.len() as u64;
                self.delivered += bytes.len() as u64;
            }
            Chunk::Gap { bytes, cause, next, arrival } => {
                assert!(bytes > 0, "empty gap");
                if finishing == Some(next) {
                    assert_eq!(cause, GapCause::Tail);
                } else {
                    let s = seg_of(next, "gap");
                    seg_of(arrival, "gap arrival");
                    if cause == GapCause::Snaplen {
                        assert!(bytes <= (s.declared - s.captured) as u64, "snaplen gap larger than what snaplen cut");
                        // It ends where the cut packet ended. A FIN just taken (the drain after
                        // it released this packet's part past the FIN) shows here.
                        let start = s.seq.wrapping_add(s.syn as u32).wrapping_add(s.declared).wrapping_sub(bytes as u32);
                        if start != self.seq {
                            let fin_here = !self.fin_taken && self.fins.contains(&self.seq);
                            assert!(fin_here && start == self.seq.wrapping_add(1), "snaplen gap at seq {start}, the stream is at {}", self.seq);
                            self.take_fin();
                        }
                    }
                }
                assert!(bytes < 1 << 31, "a gap of {bytes} bytes: more than sequence numbers can tell");
                self.seq = self.seq.wrapping_add(bytes as u32);
                self.off += bytes;
                self.gaps += bytes;
            }
        }
    }

    fn take_fin(&mut self) {
        assert!(!self.fin_taken);
        self.fin_taken = true;
        self.seq = self.seq.wrapping_add(1);
        self.off += 1;
    }

    /// After each call into the reassembler: the model and the reassembler agree.
    fn sync(&mut self, r: &Reassembler, cap: u64) {
        if !self.started {
            return;
        }
        if r.next_seq() != self.seq {
            // A FIN taken without data behind it (the chunks cannot show it).
            let fin_here = !self.fin_taken && self.fins.contains(&self.seq);
            assert!(fin_here && r.next_seq() == self.seq.wrapping_add(1), "reassembler at seq {} but its chunks reach {}", r.next_seq(), self.seq);
            self.take_fin();
        }
        assert_eq!(r.span(), self.delivered + self.gaps, "span vs bytes delivered + gaps");
        assert_eq!(r.bytes_missing, self.gaps, "bytes_missing vs gaps");
        assert!(self.off <= self.frontier, "stream reached offset {} past everything offered ({})", self.off, self.frontier);
        assert!(self.delivered <= self.captured_offered, "more bytes delivered than captured");
        assert!(r.buffered_bytes() <= cap, "{} bytes buffered over the cap {cap}", r.buffered_bytes());
    }
}

/// `data` is a [`Conversation`] ([`Conversation::encode`] gives the format). Its segments go (1) straight to two
/// reassemblers, as the pipeline calls them (the peer's ACK first, then the segment), and a
/// model of each direction checks every chunk: data bytes are the bytes captured at their
/// sequence numbers, each byte once, in order; gaps are accounted for; nothing passes the
/// furthest sequence number offered; buffered bytes stay under the cap; the outcome matches
/// `span` and `bytes_missing`. (2) The same segments as IPv4 packets (RST included) through
/// the whole pipeline, carrying AMQP frames, checked by [`check_output`].
pub fn tcp_reassembly(data: &[u8]) {
    let conv = Conversation::parse(data);
    let segs = conv.resolve();
    let cap = conv.cap as u64;
    let mut r = [Reassembler::default(), Reassembler::default()];
    let mut m = [Model::default(), Model::default()];
    let mut retrans = Vec::with_capacity(segs.len());
    for (i, s) in segs.iter().enumerate() {
        let (d, o) = (s.dir, 1 - s.dir);
        let pref = PacketRef { number: i as u32 + 1, row: i as u32 };
        if let Some(ack) = s.ack {
            if m[o].started {
                m[o].offer(ack, 0);
            }
            let (mo, seen) = (&mut m[o], &segs[..=i]);
            r[o].peer_ack(ack, &mut |c| mo.chunk(c, o, seen, None));
            m[o].sync(&r[o], cap);
        }
        let data_seq = s.seq.wrapping_add(s.syn as u32);
        if !m[d].started {
            m[d].started = true;
            m[d].seq = data_seq;
        }
        let md = &mut m[d];
        md.captured_offered += s.captured as u64;
        md.offer(data_seq, s.declared as u64 + s.fin as u64);
        if s.fin {
            md.fins.push(data_seq.wrapping_add(s.declared));
        }
        let payload: Vec<u8> = (0..s.captured).map(|k| content(data_seq.wrapping_add(k))).collect();
        let seen = &segs[..=i];
        let outcome = r[d].segment(s.seq, s.syn, s.fin, &payload, s.declared as u64, pref, cap, &mut |c| md.chunk(c, d, seen, None));
        md.sync(&r[d], cap);
        retrans.push(outcome.retransmission);
    }
    let last = PacketRef { number: segs.len() as u32 + 1, row: u32::MAX };
    for d in 0..2 {
        let md = &mut m[d];
        r[d].finish(last, &mut |c| md.chunk(c, d, &segs, Some(last)));
        md.sync(&r[d], cap);
        assert_eq!(r[d].buffered_bytes(), 0, "bytes still buffered after finish");
    }

    // (2) through the pipeline.
    let limits = Limits { max_reassembly_bytes: cap, ..small_limits() };
    let mut ing = Ingest::new(&[5672], &limits, false);
    let streams = [amqp_stream(true), amqp_stream(false)];
    for (i, s) in segs.iter().enumerate() {
        let pkt = ipv4_packet(s, conv.isn[s.dir], &streams[s.dir]);
        ing.record(Record { ts_ns: i as i64 * 1000, linktype: LINKTYPE_IPV4, origlen: 40 + s.declared, data: &pkt });
    }
    let out = ing.finish(ReadSummary { format: "pcap", records: segs.len() as u64, ..Default::default() });
    check_output(&out);
    // With one conversation (no SYN reusing the ports with a new ISN) the pipeline's
    // reassembly must be the one checked above. A is the client: port 5672 is B's, and only A's
    // stream starts with the protocol header.
    if rows(&out.connections) == 1 {
        let col = |name: &str| dense(&out.connections, name)[0] as u64;
        assert_eq!(col("c2s_stream_bytes"), r[0].span());
        assert_eq!(col("s2c_stream_bytes"), r[1].span());
        assert_eq!(col("c2s_bytes_missing"), r[0].bytes_missing);
        assert_eq!(col("s2c_bytes_missing"), r[1].bytes_missing);
        let pipeline_retrans: Vec<bool> = dense(&out.packets, "retransmission").into_iter().map(|v| v != 0).collect();
        assert_eq!(pipeline_retrans, retrans, "retransmission flags differ from the reassembler's");
    }
}

fn frame(v: &mut Vec<u8>, frame_type: u8, channel: u16, payload: &[u8]) {
    v.push(frame_type);
    v.extend_from_slice(&channel.to_be_bytes());
    v.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    v.extend_from_slice(payload);
    v.push(0xCE);
}

/// A short AMQP conversation of one side, repeated to fill the sequence space: the segments'
/// payloads are cut from it at their sequence offsets, so the decoder finds frames.
fn amqp_stream(client: bool) -> Vec<u8> {
    let mut v = Vec::new();
    if client {
        v.extend_from_slice(b"AMQP\x00\x00\x09\x01");
        // basic.publish (60.40): ticket, exchange "", routing key "q", flags
        frame(&mut v, 1, 1, &[0, 60, 0, 40, 0, 0, 0, 1, b'q', 0]);
    } else {
        // basic.deliver (60.60): consumer tag "c", delivery tag 1, redelivered, exchange "", key "q"
        frame(&mut v, 1, 1, &[0, 60, 0, 60, 1, b'c', 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, b'q']);
    }
    // content header: class 60, weight 0, body size 5, no properties
    frame(&mut v, 2, 1, &[0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0]);
    frame(&mut v, 3, 1, b"hello");
    frame(&mut v, 8, 0, &[]);
    v
}

/// The segment as a raw IPv4 packet (link type IPV4) from 10.0.0.1:40000 (A) or
/// 10.0.0.2:5672 (B), its payload cut from `stream` at the segment's offset from the ISN.
fn ipv4_packet(s: &Seg, isn: u32, stream: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(40 + s.captured as usize);
    let total = 40 + s.declared;
    let (src, dst, sport, dport) = if s.dir == 0 { ([10, 0, 0, 1], [10, 0, 0, 2], 40000u16, 5672u16) } else { ([10, 0, 0, 2], [10, 0, 0, 1], 5672, 40000) };
    p.extend_from_slice(&[0x45, 0, (total >> 8) as u8, total as u8, 0, 0, 0x40, 0, 64, 6, 0, 0]);
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    p.extend_from_slice(&sport.to_be_bytes());
    p.extend_from_slice(&dport.to_be_bytes());
    p.extend_from_slice(&s.seq.to_be_bytes());
    p.extend_from_slice(&s.ack.unwrap_or(0).to_be_bytes());
    let flags = (s.fin as u16 * FIN) | (s.syn as u16 * SYN) | (s.rst as u16 * RST) | (s.ack.is_some() as u16 * ACK);
    p.extend_from_slice(&[0x50, flags as u8, 0xff, 0xff, 0, 0, 0, 0]);
    let start = s.seq.wrapping_add(s.syn as u32).wrapping_sub(isn.wrapping_add(1));
    p.extend((0..s.captured).map(|k| stream[(start.wrapping_add(k) as usize) % stream.len()]));
    p
}
