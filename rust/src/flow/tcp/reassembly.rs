//! Per-direction TCP reassembly: turns segments as captured (retransmitted, reordered,
//! overlapping, dropped, truncated) into the in-order byte stream plus explicit gaps.
//!
//! Offsets are 64-bit positions in the direction's sequence space, so sequence-number wrap
//! (RFC 9293 §3.4) is handled by comparing 32-bit numbers only as signed distances from the
//! next expected one.

use std::collections::{BTreeMap, VecDeque};

/// A packet as seen by reassembly: its Wireshark frame number and its row in `packets`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PacketRef {
    pub number: u32,
    pub row: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GapCause {
    /// The capture lost the bytes (kernel drops): the peer acknowledged them, or the stream
    /// went on past them.
    Dropped,
    /// The capture kept only the start of the packet (snaplen).
    Snaplen,
    /// Out-of-order data exceeded the reassembly cap and the hole was given up.
    Overflow,
    /// The peer acknowledged bytes after the last ones captured, and the capture ended: no
    /// packet of this direction follows the hole (`next` is the capture's last packet).
    Tail,
}

pub enum Chunk<'a> {
    /// In-order bytes; `from` holds them, `arrival` is the packet that released them.
    Data { bytes: &'a [u8], from: PacketRef, arrival: PacketRef },
    /// Bytes never seen; `next` is the packet whose data follows the hole (for drops).
    Gap { bytes: u64, cause: GapCause, next: PacketRef, arrival: PacketRef },
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SegmentOutcome {
    /// Payload (or part of it) already seen (Wireshark's tcp.analysis.retransmission).
    pub retransmission: bool,
    /// Bytes of the payload that differ from bytes already received for the same sequence
    /// numbers (compared where a copy is still held: see [`ReasmLimits::max_retained`]).
    pub mismatched: u64,
    /// Overlapping bytes compared (0 when nothing was compared).
    pub compared: u64,
    /// The segment lies too far from the next expected byte to belong to this stream; its
    /// payload was not used.
    pub out_of_window: bool,
}

/// The caps reassembly works within (docs/tables.md, "Resource caps").
#[derive(Debug, Clone, Copy)]
pub struct ReasmLimits {
    /// Out-of-order bytes held (with a per-segment overhead, so that tiny segments count too).
    pub max_buffered: u64,
    /// A segment starting further than this beyond the next expected byte (and not
    /// acknowledged by the peer), or ending further than this before it, is out of window.
    pub max_seq_jump: u64,
    /// Received bytes not yet acknowledged by the peer, kept to compare retransmissions with.
    pub max_retained: u64,
}

impl ReasmLimits {
    /// The caps of `limits` that reassembly works within.
    pub fn of(limits: &crate::limits::Limits) -> Self {
        ReasmLimits {
            max_buffered: limits.max_reassembly_bytes,
            max_seq_jump: limits.max_seq_jump_bytes,
            max_retained: limits.max_retained_bytes,
        }
    }

    /// Only the buffering cap given (the others at their defaults).
    pub fn buffered(max_buffered: u64) -> Self {
        let d = crate::limits::Limits::default();
        ReasmLimits {
            max_buffered,
            max_seq_jump: d.max_seq_jump_bytes,
            max_retained: d.max_retained_bytes,
        }
    }
}

/// Bookkeeping cost counted per buffered segment on top of its bytes: a million one-byte
/// segments must not hold far more memory than `max_buffered` says.
const PENDING_OVERHEAD: u64 = 64;

struct Pending {
    data: Vec<u8>,
    declared: u64,
    packet: PacketRef,
}

#[derive(Default)]
struct OutOfOrder {
    segments: BTreeMap<u64, Pending>,
    /// Bytes held, plus [`PENDING_OVERHEAD`] per segment.
    cost: u64,
}

#[derive(Default)]
pub struct Reassembler {
    started: bool,
    /// The direction's SYN was seen, so its first data byte starts the AMQP stream.
    pub syn_seen: bool,
    fin_done: bool,
    next_seq: u32,
    /// Sequence number of the direction's SYN, when seen.
    isn: Option<u32>,
    /// Offset of `next_seq`: bytes delivered or declared missing so far, plus a FIN.
    next_off: u64,
    peer_acked_off: u64,
    pub bytes_missing: u64,
    /// Allocated when the first segment arrives ahead of a hole (most streams never need it).
    ooo: Option<Box<OutOfOrder>>,
    /// The last delivered bytes the peer has not acknowledged (they end at `next_off`), to
    /// compare retransmissions with.
    recent: VecDeque<u8>,
    /// The latest `arrival` handed out so far.
    last_arrival: PacketRef,
}

impl Reassembler {
    pub fn started(&self) -> bool {
        self.started
    }

    /// Stream bytes accounted for (delivered or missing), FIN excluded.
    pub fn span(&self) -> u64 {
        self.next_off - self.fin_done as u64
    }

    /// The next sequence number expected in order (past a FIN once one was taken).
    pub fn next_seq(&self) -> u32 {
        self.next_seq
    }

    /// Out-of-order bytes held while waiting for a hole to fill, plus the per-segment overhead:
    /// what the `max_reassembly_bytes` cap limits.
    pub fn buffered_bytes(&self) -> u64 {
        self.ooo.as_ref().map_or(0, |o| o.cost)
    }

    fn offset_of(&self, seq: u32) -> i64 {
        self.next_off as i64 + seq.wrapping_sub(self.next_seq) as i32 as i64
    }

    /// One captured segment with only the buffering cap given (see [`Self::segment_with`]).
    #[allow(clippy::too_many_arguments)]
    pub fn segment(
        &mut self,
        seq: u32,
        syn: bool,
        fin: bool,
        data: &[u8],
        declared: u64,
        packet: PacketRef,
        max_buffered: u64,
        out: &mut impl FnMut(Chunk<'_>),
    ) -> SegmentOutcome {
        self.segment_with(
            seq,
            syn,
            fin,
            data,
            declared,
            packet,
            &ReasmLimits::buffered(max_buffered),
            out,
        )
    }

    /// One captured segment. `data` is what the capture holds of the payload, `declared` the
    /// payload length from the IP/TCP headers (larger when snaplen cut the packet).
    #[allow(clippy::too_many_arguments)]
    pub fn segment_with(
        &mut self,
        seq: u32,
        syn: bool,
        fin: bool,
        data: &[u8],
        declared: u64,
        packet: PacketRef,
        limits: &ReasmLimits,
        out: &mut impl FnMut(Chunk<'_>),
    ) -> SegmentOutcome {
        let mut seq = seq;
        let mut outcome = SegmentOutcome::default();
        if !self.started {
            self.started = true;
            self.syn_seen = syn;
            self.next_seq = if syn { seq.wrapping_add(1) } else { seq };
            if syn {
                self.isn = Some(seq);
            }
        } else if syn && self.isn == Some(seq) {
            // SYN and FIN occupy a sequence number, so a repeated one is a retransmission too
            // (as Wireshark counts them).
            outcome.retransmission = true;
        }
        if syn {
            // Data on a SYN (TCP Fast Open) starts after the SYN's own sequence number.
            seq = seq.wrapping_add(1);
        }
        if declared == 0 {
            if fin {
                let at = self.offset_of(seq);
                if !self.fin_done && at == self.next_off as i64 {
                    self.fin_done = true;
                    self.next_off += 1;
                    self.next_seq = self.next_seq.wrapping_add(1);
                } else if self.fin_done && at + 1 == self.next_off as i64 {
                    outcome.retransmission = true;
                }
            }
            return outcome;
        }
        let off = self.offset_of(seq);
        let end = off + declared as i64;
        let next = self.next_off as i64;
        let jump = limits.max_seq_jump.min(i64::MAX as u64) as i64;
        if end <= next {
            if next - end > jump {
                // Far behind anything a sender would still retransmit (RFC 9293 §3.10.7.4
                // acceptability test: outside the window).
                outcome.out_of_window = true;
                return outcome;
            }
            // Old data. A keep-alive re-sends the one byte before next_seq: not a retransmission.
            outcome.retransmission = !(declared <= 1 && end == next);
            let _ = self.compare(off, data, &mut outcome);
            return outcome;
        }
        if off > next {
            if self.peer_acked_off as i64 >= off {
                // The peer already acknowledged the bytes before this segment: the capture lost
                // them. Buffered data in between is released first, hole by hole.
                self.release_holes_before(off as u64, out);
                if off > self.next_off as i64 {
                    self.gap((off - self.next_off as i64) as u64, GapCause::Dropped, packet, packet, out);
                }
            } else if off - next > jump {
                outcome.out_of_window = true;
                return outcome;
            } else {
                let key = off as u64;
                let patched = self.compare(off, data, &mut outcome);
                let data = patched.as_deref().unwrap_or(data);
                let ooo = self.ooo.get_or_insert_with(Default::default);
                if ooo.segments.contains_key(&key) {
                    outcome.retransmission = true;
                    return outcome;
                }
                ooo.cost += data.len() as u64 + PENDING_OVERHEAD;
                ooo.segments.insert(
                    key,
                    Pending {
                        data: data.to_vec(),
                        declared,
                        packet,
                    },
                );
                if ooo.cost > limits.max_buffered {
                    self.flush_ooo(GapCause::Overflow, out);
                }
                return outcome;
            }
        }
        let trim = (self.next_off as i64 - off).max(0) as u64;
        outcome.retransmission = trim > 0;
        let patched = self.compare(off, data, &mut outcome);
        let data = patched.as_deref().unwrap_or(data);
        self.deliver(
            data,
            declared,
            trim,
            packet,
            packet,
            limits.max_retained,
            out,
        );
        if fin
            && !self.fin_done
            && self.offset_of(seq.wrapping_add(declared as u32)) == self.next_off as i64
        {
            self.fin_done = true;
            self.next_off += 1;
            self.next_seq = self.next_seq.wrapping_add(1);
        }
        self.drain(Some(packet), limits.max_retained, out);
        outcome
    }

    /// Compare the captured bytes of a segment starting at stream offset `off` with every
    /// copy of the same offsets still held: recent delivered bytes and buffered segments.
    /// Only overlaps are read, so a retransmission costs what it overlaps. The copy received
    /// first is the one decoded: delivered bytes are never delivered again, and when the
    /// segment disagrees with a buffered one, the returned copy of it carries the buffered
    /// bytes over the overlap.
    fn compare(&self, off: i64, data: &[u8], outcome: &mut SegmentOutcome) -> Option<Vec<u8>> {
        fn count(held: impl Iterator<Item = u8>, new: &[u8]) -> u64 {
            held.zip(new).map(|(a, b)| (a != *b) as u64).sum()
        }
        let end = off + data.len() as i64;
        let held_start = self.next_off as i64 - self.recent.len() as i64;
        let (lo, hi) = (off.max(held_start), end.min(self.next_off as i64));
        if lo < hi {
            let (skip, n) = ((lo - held_start) as usize, (hi - lo) as usize);
            let from = (lo - off) as usize;
            outcome.compared += n as u64;
            outcome.mismatched += count(
                self.recent.range(skip..skip + n).copied(),
                &data[from..from + n],
            );
        }
        let ooo = self.ooo.as_deref()?;
        if end <= 0 {
            return None;
        }
        let mut patched: Option<Vec<u8>> = None;
        // Buffered segments starting before `end`, from the last one starting at or before `off`.
        let first_key = ooo
            .segments
            .range(..=off.max(0) as u64)
            .next_back()
            .map_or(0, |(&k, _)| k);
        for (&k, p) in ooo.segments.range(first_key..end as u64) {
            let (lo, hi) = (off.max(k as i64), end.min(k as i64 + p.data.len() as i64));
            if lo < hi {
                let (held, new) = ((lo - k as i64) as usize, (lo - off) as usize);
                let n = (hi - lo) as usize;
                let held = &p.data[held..held + n];
                outcome.compared += n as u64;
                let differ = count(held.iter().copied(), &data[new..new + n]);
                if differ > 0 {
                    outcome.mismatched += differ;
                    patched.get_or_insert_with(|| data.to_vec())[new..new + n]
                        .copy_from_slice(held);
                }
            }
        }
        patched
    }

    /// The other direction acknowledged up to `ack`: bytes acknowledged but never captured
    /// before buffered out-of-order data are a capture gap.
    pub fn peer_ack(&mut self, ack: u32, out: &mut impl FnMut(Chunk<'_>)) {
        if !self.started {
            return;
        }
        let ack_off = self.offset_of(ack);
        if ack_off <= self.next_off as i64 {
            // Acknowledged bytes will not be retransmitted: stop holding them.
            let acked = ack_off - (self.next_off as i64 - self.recent.len() as i64);
            if acked > 0 {
                self.recent.drain(..acked as usize);
            }
            return;
        }
        self.recent.clear();
        self.peer_acked_off = self.peer_acked_off.max(ack_off as u64);
        if self.ooo.as_ref().is_none_or(|o| o.segments.is_empty()) {
            // Nothing buffered: the missing bytes are declared when data after them arrives.
            return;
        }
        self.release_holes_before(ack_off as u64, out);
        if let Some(p) = self.ooo.as_ref().and_then(|o| o.segments.values().next()) {
            if (self.next_off as i64) < ack_off {
                let next_pkt = p.packet;
                self.gap(
                    ack_off as u64 - self.next_off,
                    GapCause::Dropped,
                    next_pkt,
                    next_pkt,
                    out,
                );
                self.drain(None, 0, out);
            }
        }
    }

    fn first_pending(&self) -> Option<(u64, PacketRef)> {
        self.ooo
            .as_ref()
            .and_then(|o| o.segments.iter().next())
            .map(|(&k, p)| (k, p.packet))
    }

    /// Give up every hole in front of buffered data that starts at or before `limit`.
    fn release_holes_before(&mut self, limit: u64, out: &mut impl FnMut(Chunk<'_>)) {
        while let Some((first, next_pkt)) = self.first_pending() {
            if first > limit {
                break;
            }
            if first > self.next_off {
                self.gap(
                    first - self.next_off,
                    GapCause::Dropped,
                    next_pkt,
                    next_pkt,
                    out,
                );
            }
            self.drain(None, 0, out);
        }
    }

    /// End of capture: release buffered data behind its holes; report an unseen tail the
    /// peer acknowledged.
    pub fn finish(&mut self, packet: PacketRef, out: &mut impl FnMut(Chunk<'_>)) {
        self.flush_ooo(GapCause::Dropped, out);
        self.ooo = None;
        self.recent = VecDeque::new();
        // More than one byte: a FIN the capture missed is acknowledged too.
        if self.peer_acked_off > self.next_off + 1 {
            let hole = self.peer_acked_off - self.next_off;
            self.gap(hole, GapCause::Tail, packet, packet, out);
        }
    }

    /// Give up the holes before buffered data: each buffered segment is then released as if
    /// it had just arrived, so its frames belong to the packet that holds them.
    fn flush_ooo(&mut self, cause: GapCause, out: &mut impl FnMut(Chunk<'_>)) {
        while let Some((first, next_pkt)) = self.first_pending() {
            if first > self.next_off {
                self.gap(first - self.next_off, cause, next_pkt, next_pkt, out);
            }
            self.drain(None, 0, out);
        }
    }

    /// Chunks never name an earlier `arrival` than the chunks before them. When holes are
    /// given up, buffered segments come out in stream order, which need not be capture order
    /// (an overlapping retransmission captured later but starting earlier): a frame must not
    /// complete in a packet captured before one that holds its first bytes.
    /// The earliest packet of the out-of-order segments held, if any: when their holes are
    /// given up they are released as of their own packets (no earlier than `last_arrival`).
    pub fn earliest_held_packet(&self) -> Option<u32> {
        self.ooo.as_ref().and_then(|o| o.segments.values().map(|p| p.packet.number).min())
    }

    /// The packet that handed out the direction's latest bytes, if any did.
    pub fn last_arrival(&self) -> Option<PacketRef> {
        (self.last_arrival.number > 0).then_some(self.last_arrival)
    }

    fn later(&mut self, arrival: PacketRef) -> PacketRef {
        if arrival.number >= self.last_arrival.number {
            self.last_arrival = arrival;
        }
        self.last_arrival
    }

    fn gap(&mut self, bytes: u64, cause: GapCause, next: PacketRef, arrival: PacketRef, out: &mut impl FnMut(Chunk<'_>)) {
        let arrival = self.later(arrival);
        self.bytes_missing += bytes;
        self.next_off += bytes;
        self.next_seq = self.next_seq.wrapping_add(bytes as u32);
        // The held bytes no longer end at next_off.
        self.recent.clear();
        out(Chunk::Gap {
            bytes,
            cause,
            next,
            arrival,
        });
    }

    #[allow(clippy::too_many_arguments)]
    fn deliver(
        &mut self,
        data: &[u8],
        declared: u64,
        trim: u64,
        from: PacketRef,
        arrival: PacketRef,
        retain: u64,
        out: &mut impl FnMut(Chunk<'_>),
    ) {
        let arrival = self.later(arrival);
        let captured = (data.len() as u64).min(declared);
        if trim < captured {
            let bytes = &data[trim as usize..captured as usize];
            if retain > 0 {
                // Keep the newest `retain` bytes (retransmissions re-send unacknowledged data).
                let keep = bytes.len().min(retain as usize);
                self.recent.extend(&bytes[bytes.len() - keep..]);
                let over = self.recent.len().saturating_sub(retain as usize);
                self.recent.drain(..over);
            }
            out(Chunk::Data {
                bytes,
                from,
                arrival,
            });
        }
        let advance = declared - trim;
        let missing = declared - captured.max(trim);
        self.next_off += advance - missing;
        self.next_seq = self.next_seq.wrapping_add((advance - missing) as u32);
        if missing > 0 {
            self.gap(missing, GapCause::Snaplen, from, arrival, out);
        }
    }

    /// Deliver buffered segments that now continue the stream. `filler` is the packet that
    /// filled the hole before them (their frames complete on its arrival, as in Wireshark);
    /// `None` when a hole was given up instead.
    fn drain(&mut self, filler: Option<PacketRef>, retain: u64, out: &mut impl FnMut(Chunk<'_>)) {
        loop {
            let Some(ooo) = self.ooo.as_mut() else { return };
            let Some(entry) = ooo.segments.first_entry() else {
                return;
            };
            let key = *entry.key();
            if key > self.next_off {
                return;
            }
            let p = entry.remove();
            ooo.cost -= p.data.len() as u64 + PENDING_OVERHEAD;
            if key + p.declared <= self.next_off {
                continue;
            }
            let trim = self.next_off - key;
            self.deliver(
                &p.data,
                p.declared,
                trim,
                p.packet,
                filler.unwrap_or(p.packet),
                retain,
                out,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pr(n: u32) -> PacketRef {
        PacketRef { number: n, row: n }
    }

    #[derive(Default)]
    struct Out {
        bytes: Vec<u8>,
        gaps: Vec<(u64, GapCause)>,
    }

    fn run(r: &mut Reassembler, o: &mut Out, seq: u32, data: &[u8], n: u32) -> SegmentOutcome {
        r.segment(seq, false, false, data, data.len() as u64, pr(n), 1 << 20, &mut |c| match c {
            Chunk::Data { bytes, .. } => o.bytes.extend_from_slice(bytes),
            Chunk::Gap { bytes, cause, .. } => o.gaps.push((bytes, cause)),
        })
    }

    #[test]
    fn reorder_retransmit_overlap_wrap() {
        let mut r = Reassembler::default();
        let mut o = Out::default();
        let base = u32::MAX - 3; // the stream crosses the 32-bit wrap
        r.segment(base, true, false, &[], 0, pr(1), 1 << 20, &mut |_| {});
        let isn1 = base.wrapping_add(1);
        assert!(!run(&mut r, &mut o, isn1, b"abcd", 2).retransmission);
        assert!(!run(&mut r, &mut o, isn1.wrapping_add(8), b"ijkl", 3).retransmission); // ahead
        assert!(!run(&mut r, &mut o, isn1.wrapping_add(4), b"efgh", 4).retransmission); // fills
        assert!(run(&mut r, &mut o, isn1.wrapping_add(2), b"cdefgh", 5).retransmission);
        assert!(run(&mut r, &mut o, isn1.wrapping_add(10), b"klmn", 6).retransmission); // overlap
        assert_eq!(o.bytes, b"abcdefghijklmn");
        assert!(o.gaps.is_empty());
    }

    #[test]
    fn acked_hole_is_a_gap() {
        let mut r = Reassembler::default();
        let mut o = Out::default();
        run(&mut r, &mut o, 100, b"abc", 1);
        run(&mut r, &mut o, 110, b"xyz", 2); // 7 bytes lost by the capture
        r.peer_ack(113, &mut |c| match c {
            Chunk::Data { bytes, .. } => o.bytes.extend_from_slice(bytes),
            Chunk::Gap { bytes, cause, .. } => o.gaps.push((bytes, cause)),
        });
        assert_eq!(o.bytes, b"abcxyz");
        assert_eq!(o.gaps, vec![(7, GapCause::Dropped)]);
        assert_eq!(r.span(), 13);
    }

    #[test]
    fn several_holes_released_in_order() {
        let mut r = Reassembler::default();
        let mut o = Out::default();
        let sink = |o: &mut Out, c: Chunk<'_>| match c {
            Chunk::Data { bytes, .. } => o.bytes.extend_from_slice(bytes),
            Chunk::Gap { bytes, cause, .. } => o.gaps.push((bytes, cause)),
        };
        run(&mut r, &mut o, 0, b"ab", 1);
        run(&mut r, &mut o, 4, b"ef", 2); // hole of 2
        run(&mut r, &mut o, 10, b"kl", 3); // hole of 4
        r.peer_ack(8, &mut |c| sink(&mut o, c)); // acks past the first hole only
        assert_eq!(o.bytes, b"abef");
        // data after the last hole, already acknowledged: the buffered "kl" must not be lost
        r.peer_ack(14, &mut |c| sink(&mut o, c));
        run(&mut r, &mut o, 14, b"op", 4);
        assert_eq!(o.bytes, b"abefklop");
        assert_eq!(o.gaps, vec![(2, GapCause::Dropped), (2, GapCause::Dropped), (2, GapCause::Dropped), (2, GapCause::Dropped)]);
    }

    /// Found by the tcp_reassembly fuzz target: a hole given up at the end releases the
    /// buffered segments in stream order; a later-captured one that starts earlier must not
    /// make the next chunks arrive "before" it.
    #[test]
    fn released_chunks_never_arrive_earlier() {
        let mut r = Reassembler::default();
        let mut o = Out::default();
        run(&mut r, &mut o, 0, b"0123456789", 1);
        run(&mut r, &mut o, 20, b"KLMNOPQRST", 2); // ahead: hole 10..20
        run(&mut r, &mut o, 15, b"fghijKLMNO", 3); // overlaps the hole and packet 2
        let mut arrivals = Vec::new();
        r.finish(pr(4), &mut |c| match c {
            Chunk::Data { bytes, from, arrival } => {
                o.bytes.extend_from_slice(bytes);
                arrivals.push((from.number, arrival.number));
            }
            Chunk::Gap { bytes, cause, .. } => o.gaps.push((bytes, cause)),
        });
        assert_eq!(o.bytes, b"0123456789fghijKLMNOPQRST");
        assert_eq!(o.gaps, vec![(5, GapCause::Dropped)]);
        // packet 3's bytes come first; packet 2's rest follows, released with packet 3
        assert_eq!(arrivals, vec![(3, 3), (2, 3)]);
    }

    #[test]
    fn snaplen_truncation() {
        let mut r = Reassembler::default();
        let mut o = Out::default();
        r.segment(1, false, false, b"ab", 10, pr(1), 1 << 20, &mut |c| match c {
            Chunk::Data { bytes, .. } => o.bytes.extend_from_slice(bytes),
            Chunk::Gap { bytes, cause, .. } => o.gaps.push((bytes, cause)),
        });
        run(&mut r, &mut o, 11, b"cd", 2);
        assert_eq!(o.bytes, b"abcd");
        assert_eq!(o.gaps, vec![(8, GapCause::Snaplen)]);
    }
    fn collect(r: &mut Reassembler, o: &mut Out, seq: u32, data: &[u8], n: u32, limits: &ReasmLimits) -> SegmentOutcome {
        r.segment_with(seq, false, false, data, data.len() as u64, pr(n), limits, &mut |c| match c {
            Chunk::Data { bytes, .. } => o.bytes.extend_from_slice(bytes),
            Chunk::Gap { bytes, cause, .. } => o.gaps.push((bytes, cause)),
        })
    }

    const LIMITS: ReasmLimits = ReasmLimits { max_buffered: 1 << 20, max_seq_jump: 1 << 20, max_retained: 1 << 10 };

    #[test]
    fn far_segments_are_out_of_window() {
        let mut r = Reassembler::default();
        let mut o = Out::default();
        collect(&mut r, &mut o, 1000, b"abcd", 1, &LIMITS);
        for (n, seq) in [(2, 1004 + (1 << 20) + 1), (3, 1004u32.wrapping_sub(2 << 20)), (4, 1004u32.wrapping_add(3 << 30))] {
            let out = collect(&mut r, &mut o, seq, b"zzzz", n, &LIMITS);
            assert!(out.out_of_window && !out.retransmission, "seq {seq}");
        }
        // within the jump limit: buffered, then released when the hole fills
        assert!(!collect(&mut r, &mut o, 1010, b"klmn", 5, &LIMITS).out_of_window);
        collect(&mut r, &mut o, 1004, b"efghij", 6, &LIMITS);
        assert_eq!(o.bytes, b"abcdefghijklmn");
        assert!(o.gaps.is_empty());
        assert_eq!(r.span(), 14);
    }

    #[test]
    fn retransmission_with_other_bytes_is_counted_and_the_first_copy_kept() {
        let mut r = Reassembler::default();
        let mut o = Out::default();
        collect(&mut r, &mut o, 0, b"abcdef", 1, &LIMITS);
        let same = collect(&mut r, &mut o, 2, b"cdefgh", 2, &LIMITS);
        assert_eq!((same.retransmission, same.compared, same.mismatched), (true, 4, 0));
        let other = collect(&mut r, &mut o, 0, b"abXdeYghZ", 3, &LIMITS);
        assert_eq!((other.compared, other.mismatched), (8, 2));
        assert_eq!(o.bytes, b"abcdefghZ");
        // acknowledged bytes are no longer held: nothing to compare
        r.peer_ack(9, &mut |_| {});
        assert_eq!(collect(&mut r, &mut o, 0, b"XXXXXXXXX", 4, &LIMITS).compared, 0);
    }

    #[test]
    fn overlapping_out_of_order_segments_keep_the_first_copy() {
        let mut r = Reassembler::default();
        let mut o = Out::default();
        collect(&mut r, &mut o, 0, b"ab", 1, &LIMITS);
        collect(&mut r, &mut o, 6, b"ghij", 2, &LIMITS); // ahead of a hole
        // starts before the buffered one and disagrees with it on two of its bytes
        let out = collect(&mut r, &mut o, 4, b"efGHi", 3, &LIMITS);
        assert_eq!((out.compared, out.mismatched), (3, 2));
        collect(&mut r, &mut o, 2, b"cd", 4, &LIMITS); // fills the hole
        assert_eq!(o.bytes, b"abcdefghij");
    }

    #[test]
    fn tiny_segments_count_their_overhead() {
        let limits = ReasmLimits { max_buffered: 100 * (1 + PENDING_OVERHEAD), ..LIMITS };
        let mut r = Reassembler::default();
        let mut o = Out::default();
        collect(&mut r, &mut o, 0, b"a", 1, &limits);
        // a hole at 1, then one-byte segments after it: the cap is reached after 100 of them
        for i in 0..150u32 {
            collect(&mut r, &mut o, 2 + i, b"x", 2 + i, &limits);
        }
        assert_eq!(o.gaps, vec![(1, GapCause::Overflow)]);
        assert_eq!(o.bytes.len(), 151);
    }
}
