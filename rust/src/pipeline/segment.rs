//! Each TCP segment of a conversation: what every packet tells (counts, whether the
//! conversation is AMQP, which side is the client, Wireshark's relative sequence numbers), and
//! for a kept AMQP conversation its packets row, reassembly and the decoders, reached through
//! one sink built for the packet.

use super::Ingest;
use crate::anomaly::AnomalyKind;
use crate::capture::link::{parse_options, TcpPacket, ACK, FIN, SYN};
use crate::capture::reader::Record;
use crate::flow::conn::{ClientEvidence, Dir, Kind, Stream};
use crate::flow::tcp::reassembly::{PacketRef, ReasmLimits, SegmentOutcome};
use crate::limits::Limits;
use crate::output::packets::Segment;
use crate::output::tables::RowOrigin;
use crate::proto::dispatch::{self, apply_tune, on_chunk};
use crate::proto::sink::{DecodeSink, Sink};

/// Every AMQP version's protocol header starts so (0-9-1 §4.2.2, 1.0 Part 2 §2.2).
const AMQP: &[u8] = b"AMQP";

impl Ingest<'_> {
    /// Packet `number` of conversation `idx`, a TCP segment.
    pub(super) fn tcp_segment(&mut self, idx: u32, tcp: &TcpPacket<'_>, rec: Record<'_>, number: u32) {
        let keep = self.keeps(idx);
        let st = &mut self.streams[idx as usize];
        let d = if st.a.addr == tcp.src && st.a.port == tcp.sport { 0 } else { 1 };
        if !follow(st, d, tcp, rec.ts_ns) {
            return;
        }
        // A connection of another partition: followed only this far, for the bases that tell
        // a reused port's new conversation (`records.rs`).
        if !keep {
            return;
        }
        let row = self.packet_row(idx, d, tcp, &rec, number);
        self.decode_segment(idx, d, tcp, PacketRef { number, row });
    }

    /// The segment's row of the packets table (relative sequence numbers, scaled window); the
    /// bytes snaplen cut before it are its `gap_before`.
    fn packet_row(&mut self, idx: u32, d: usize, tcp: &TcpPacket<'_>, rec: &Record<'_>, number: u32) -> u32 {
        let Ingest { streams, tables, .. } = self;
        let st = &mut streams[idx as usize];
        let syn = tcp.flags & SYN != 0;
        let (dir, other) = directions(&mut st.dirs, d);
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
        let has_ack = tcp.flags & ACK != 0;
        let row = tables.packets.push_segment(Segment {
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
            tables.packets.gap_before[row as usize] += std::mem::take(&mut st.info.snaplen_gap[d]) as i64;
        }
        row
    }

    /// Reassembly of the segment, and the decoders of what it hands out, through one sink:
    /// first the other direction's (the peer's acknowledgement may reveal bytes the capture
    /// lost there), then this direction's (its bytes, or the plaintext of a decrypted stream).
    fn decode_segment(&mut self, idx: u32, d: usize, tcp: &TcpPacket<'_>, pref: PacketRef) {
        let limits = self.limits;
        let max_frames = self.frames_room();
        let Ingest { streams, tables, decrypted, .. } = self;
        let Stream { dirs, info, decrypted: from_plaintext, evidence, a_is_client, .. } = &mut streams[idx as usize];
        let feed = !*from_plaintext;
        let syn = tcp.flags & SYN != 0;
        let (dir, other) = directions(dirs, d);
        let mut sink = Sink::new(tables, info, RowOrigin { stream: idx, from_a: d != 0 }, pref.row, max_frames);
        if tcp.flags & ACK != 0 {
            let Dir { reasm, decoder, .. } = other;
            reasm.peer_ack(tcp.ack, &mut |c| on_chunk(c, decoder, false, feed, &mut sink, limits));
        }
        sink.origin = RowOrigin { stream: idx, from_a: d == 0 };
        sink.arrival_row = pref.row;
        let aligned = if dir.reasm.started() { dir.reasm.syn_seen } else { syn };
        let Dir { reasm, decoder, .. } = dir;
        let fin = tcp.flags & FIN != 0;
        let reasm_limits = ReasmLimits::of(limits);
        let outcome = reasm.segment_with(tcp.seq, syn, fin, tcp.payload, tcp.payload_len as u64, pref, &reasm_limits, &mut |c| {
            on_chunk(c, decoder, aligned, feed, &mut sink, limits)
        });
        report_outcome(&mut sink, &outcome, pref, tcp.payload_len as u64, limits);
        if !feed {
            if let Some(plain) = decrypted.take(pref.number) {
                // The first plaintext byte of a direction is where AMQP starts (tshark decrypts
                // only connections whose handshake is in the capture).
                let first = decoder.as_deref().is_none_or(|d| d.untouched());
                if first && plain.starts_with(AMQP) && *evidence < ClientEvidence::ProtocolHeader {
                    *a_is_client = d == 0;
                    *evidence = ClientEvidence::ProtocolHeader;
                }
                dispatch::feed(decoder, true, plain, pref.number, pref, &mut sink, limits);
            }
        }
        let [a, b] = dirs;
        apply_tune(info, [a.decoder.as_deref_mut(), b.decoder.as_deref_mut()], limits);
    }
}

/// What every packet of a conversation tells, kept by this pass or not: its counts, whether the
/// conversation is AMQP, which side is the client, and the bases of Wireshark's relative
/// sequence numbers. False when the conversation is not AMQP: nothing more to do.
fn follow(st: &mut Stream, d: usize, tcp: &TcpPacket<'_>, ts_ns: i64) -> bool {
    if st.first_ts == 0 && st.dirs[0].packets == 0 && st.dirs[1].packets == 0 {
        st.first_ts = ts_ns;
    }
    st.last_ts = ts_ns;
    st.dirs[d].packets += 1;
    st.dirs[d].payload_bytes += tcp.payload_len as u64;
    if st.kind == Kind::Other {
        return false;
    }
    if st.kind == Kind::Undecided && tcp.payload_len > 0 {
        if tcp.payload.starts_with(AMQP) {
            st.kind = Kind::Amqp;
        } else {
            st.kind = Kind::Other;
            return false;
        }
    }
    // Who is the client: the protocol header's sender beats the port, which beats the SYN.
    if !st.decrypted && tcp.payload.starts_with(AMQP) && st.evidence < ClientEvidence::ProtocolHeader && st.dirs[d].reasm.span() == 0 {
        st.a_is_client = d == 0;
        st.evidence = ClientEvidence::ProtocolHeader;
    } else if tcp.flags & (SYN | ACK) == SYN && st.evidence < ClientEvidence::Syn {
        st.a_is_client = d == 0;
        st.evidence = ClientEvidence::Syn;
    }
    // Wireshark's relative sequence numbers: base = ISN on a SYN, else seq - 1; the other
    // direction's base may come from this ACK.
    let (dir, other) = directions(&mut st.dirs, d);
    if dir.base_seq.is_none() {
        dir.base_seq = Some(if tcp.flags & SYN != 0 { tcp.seq } else { tcp.seq.wrapping_sub(1) });
    }
    if other.base_seq.is_none() && tcp.flags & ACK != 0 {
        other.base_seq = Some(tcp.ack.wrapping_sub(1));
    }
    true
}

/// Direction `d` and the other one.
fn directions(dirs: &mut [Dir; 2], d: usize) -> (&mut Dir, &mut Dir) {
    let [a, b] = dirs;
    if d == 0 {
        (a, b)
    } else {
        (b, a)
    }
}

/// What reassembly found in the segment: a retransmission, re-sent bytes that differ, a
/// sequence number out of the window (`payload` bytes not used).
fn report_outcome(sink: &mut Sink<'_>, outcome: &SegmentOutcome, pref: PacketRef, payload: u64, limits: &Limits) {
    sink.tables.packets.retransmission[pref.row as usize] = outcome.retransmission;
    if outcome.mismatched > 0 {
        let (n, of) = (outcome.mismatched, outcome.compared);
        sink.anomaly(
            AnomalyKind::RetransmissionMismatch,
            pref.number,
            n,
            format!("{n} of {of} bytes re-sent for the same sequence numbers differ from the copy already received; one copy is decoded"),
        );
    }
    if outcome.out_of_window {
        sink.anomaly(
            AnomalyKind::OutOfWindow,
            pref.number,
            payload,
            format!("{payload} bytes at a sequence number more than {} bytes from the next expected byte: not used", limits.max_seq_jump_bytes),
        );
    }
}
