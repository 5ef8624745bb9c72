//! The pipeline end to end on packets built here: who is the client, gaps, the first bytes'
//! choice of decoder.

use super::*;
use crate::capture::link::{ACK, SYN};
use crate::capture::reader::{ReadSummary, Record};
use crate::proto::amqp091::parser::PROTOCOL_HEADER_091;
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
    // an open with an empty container-id (its one mandatory field, Part 2 §2.7.1)
    let open = [0, 0, 0, 16, 2, 0, 0, 0, 0x00, 0x53, 0x10, 0xc0, 3, 1, 0xa1, 0];
    let out = run(&[
        packet(true, c, None, SYN, &[]),
        packet(false, s, Some(c + 1), SYN, &[]),
        packet(true, c + 1, Some(s + 1), 0, b"AMQ"),
        packet(true, c + 4, Some(s + 1), 0, b"P\x00\x01\x00\x00"),
        packet(true, c + 9, Some(s + 1), FIN, &open),
    ]);
    assert_eq!(texts(&out.connections, "protocol"), [Some("1.0")]);
    assert_eq!(i64s(&out.connections, "frames"), [1]);
    assert_eq!(i64s(&out.connections, "c2s_bytes_decoded"), [8 + 16]);
    assert_eq!(i64s(&out.connections, "anomalies"), [0]);
    let [("amqp10_frames", frames)] = &out.added[..] else { panic!("AMQP 1.0's frames are a table of their own") };
    assert_eq!(i64s(frames, "size_bytes"), [8], "a row: the open without its frame header");
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
