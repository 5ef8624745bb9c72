//! Fuzzing harnesses (cargo feature `fuzzing`). Each takes the fuzzer's bytes, drives one part
//! of the core and panics when something breaks: a panic of the core itself, or an invariant
//! the tables promise (docs/tables.md) or the component must keep. The cargo-fuzz targets in
//! `rust/fuzz/` are one-line wrappers; `rust/tests/fuzz_regressions.rs` replays saved inputs
//! through the same functions on stable Rust. docs/fuzzing.md describes the input formats.

use std::collections::HashMap;

use arbitrary::{Arbitrary, Unstructured};

use crate::proto::amqp091::decoder::{Decoder, FrameEvent, FrameSink};
use crate::proto::amqp10;
use crate::proto::sink::DecodeSink;
use crate::proto::amqp091::parser::{decode_content_header, decode_method, FrameType};
use crate::anomaly::AnomalyKind;
use crate::capture::link::{ACK, FIN, LINKTYPE_IPV4, RST, SYN};
use crate::capture::merge::{file_buffer_bytes, read_sources, Source};
use crate::capture::reader::{read_capture_buffered, ReadSummary, Record};
use crate::error::CaptureError;
use crate::pipeline::{Ingest, Output, TableSink};
use crate::limits::Limits;
use crate::buckets::partition::{bucket_of, Partition};
use crate::output::tables::{Column, Spread, SpreadValues, Table};
use crate::flow::tcp::reassembly::{Chunk, GapCause, PacketRef, Reassembler};

/// Caps small enough for fuzz-sized inputs to reach them. The resync window holds two
/// candidate frames of the largest resync size (body frame + the frame that must follow it),
/// so that, as with the defaults for any input below 2 MiB, dropping resync bytes never
/// depends on how the stream was segmented.
pub fn small_limits() -> Limits {
    Limits {
        max_frame_bytes: 16384,
        max_buffered_frame_bytes: 2048,
        max_reassembly_bytes: 4096,
        resync_max_frame_bytes: 1024,
        resync_window_bytes: 4096,
        max_streams: 3,
        max_record_bytes: 65536,
        // The caps added since (frames, anomalies, bodies, retained bytes, sequence jumps) keep
        // their defaults: past them the per-connection counts checked here are summed instead.
        ..Limits::default()
    }
}

// ---------------------------------------------------------------------------------------------
// capture_reader: bytes as a capture file, through the whole pipeline to tables.

/// `data` is a capture file (pcap, pcapng, gzip). It is decoded twice, on port 5672: with the
/// default caps and a 64 KiB initial read buffer, and with [`small_limits`] and a 4 KiB buffer
/// (so that records outgrow it); the tables must then hold [`check_output`]. With the default
/// caps it is also decoded as `amqpcap ingest` decodes it, split into two buckets and each
/// bucket decoded from its spilled packets, which must split the rows ([`check_spilled`]).
pub fn capture_reader(data: &[u8]) {
    for (limits, buffer) in [(Limits::default(), 64 << 10), (small_limits(), 4 << 10)] {
        let mut ing = Ingest::new(&[5672], &limits, false);
        let read = read_capture_buffered(data, "fuzz-input", limits.max_record_bytes, buffer, |rec| ing.record(rec));
        match read.map(|read| ing.finish(read)) {
            Ok(out) => {
                check_output(&out);
                if buffer == 64 << 10 {
                    check_spilled(data, &limits, &out);
                }
            }
            Err(e) => {
                assert!(!e.message().is_empty());
                assert!(!matches!(e, CaptureError::Unreadable(_)), "a byte slice cannot fail to read: {e:?}");
                assert_eq!(data.is_empty(), matches!(e, CaptureError::Empty(_)), "{e:?}");
            }
        }
    }
}

/// A packet spilled by the first step: its packet and stream numbers, time, link type,
/// on-wire length and bytes.
type SpilledPacket = (u32, u32, i64, u32, u32, Vec<u8>);

/// Decoded as `amqpcap ingest` decodes it (`crate::buckets::spill`, here in memory): a first step that
/// keeps no connection ([`Partition`] of none of 2 buckets, with the rows of no connection)
/// and spills each packet of a possible AMQP connection by bucket, then each bucket decoded
/// from its packets alone. The whole decode's rows must come out split by connection: each
/// connection's rows in its bucket's decode, in the whole decode's order, and the records and
/// the file's anomalies in the first step. (Under caps that no fuzz-sized input reaches:
/// `max_frames`, `max_anomalies` count per bucket.)
fn check_spilled(data: &[u8], limits: &Limits, whole: &Output) {
    let mut spilled: [Vec<SpilledPacket>; 2] = [Vec::new(), Vec::new()];
    let first = {
        let mut ing = Ingest::new(&[5672], limits, false);
        ing.set_partition(Partition::new(2, &[], true).unwrap());
        ing.set_spill(Box::new(|number, stream, rec: &Record<'_>| {
            spilled[bucket_of(stream, 2) as usize].push((number, stream, rec.ts_ns, rec.linktype, rec.origlen, rec.data.to_vec()));
        }));
        let read = read_capture_buffered(data, "fuzz-input", limits.max_record_bytes, 64 << 10, |rec| ing.record(rec));
        ing.finish(read.expect("the whole decode read it"))
    };
    assert_eq!(rows(&first.records), rows(&whole.records), "the first step has the records");
    assert_eq!((rows(&first.connections), rows(&first.packets), rows(&first.frames)), (0, 0, 0), "the first step decodes no connection");
    let no_stream = |o: &Output| ints(column(&o.anomalies, "stream")).iter().filter(|s| s.is_none()).count();
    assert_eq!(rows(&first.anomalies), no_stream(whole), "the first step has the anomalies of the file");
    let records = rows(&whole.records) as u32;
    let decode = |packets: &[SpilledPacket], frames_sink: Option<(TableSink<'_>, usize)>| -> Output {
        let mut ing = Ingest::new(&[5672], limits, false);
        ing.set_spilled(records);
        if let Some((sink, batch_rows)) = frames_sink {
            ing.set_frames_sink(sink, batch_rows);
        }
        for (number, stream, ts_ns, linktype, origlen, bytes) in packets {
            ing.spilled_record(*number, *stream, Record { ts_ns: *ts_ns, linktype: *linktype, origlen: *origlen, data: bytes });
        }
        ing.finish(ReadSummary::default())
    };
    let parts: Vec<Output> = spilled.iter().map(|packets| decode(packets, None)).collect();
    // A bucket's frames handed to a sink as they settle, as `amqpcap ingest` writes them, are
    // the rows of its frames table made at once; so are the whole decode's.
    let batch_rows = 1 + data.len() % 5;
    for (k, packets) in spilled.iter().enumerate() {
        let mut sunk = Vec::new();
        decode(packets, Some((Box::new(|t| sunk.push(t)), batch_rows)));
        same_rows_in_batches(&sunk, &parts[k].frames, batch_rows, &format!("bucket {k}"));
    }
    let mut sunk = Vec::new();
    let mut ing = Ingest::new(&[5672], limits, false);
    ing.set_frames_sink(Box::new(|t| sunk.push(t)), batch_rows);
    let read = read_capture_buffered(data, "fuzz-input", limits.max_record_bytes, 64 << 10, |rec| ing.record(rec));
    let out = ing.finish(read.expect("the whole decode read it"));
    assert!(out.frames.is_empty(), "the frames went to the sink");
    same_rows_in_batches(&sunk, &whole.frames, batch_rows, "the whole decode");
    for (k, part) in parts.iter().enumerate() {
        assert_eq!(rows(&part.records), 0, "bucket {k} has no records");
        assert_eq!(no_stream(part), 0, "bucket {k} has no anomaly of the file");
    }
    let tables: [(&str, fn(&Output) -> &Table, &[&str]); 4] = [
        ("connections", |o| &o.connections, &["stream", "c2s_packets", "s2c_packets", "frames", "bytes_missing", "anomalies"]),
        ("packets", |o| &o.packets, &["stream", "packet", "direction", "seq", "ack", "window", "frames_ended", "retransmission", "gap_before"]),
        ("frames", |o| &o.frames, &["stream", "packet", "first_packet", "direction", "channel", "type", "size_bytes"]),
        ("anomalies", |o| &o.anomalies, &["stream", "kind", "direction", "packet", "bytes"]),
    ];
    for (name, table, keys) in tables {
        let tuples = |t: &Table| -> Vec<Vec<Option<i64>>> {
            let cols: Vec<Vec<Option<i64>>> = keys.iter().map(|k| ints(column(t, k))).collect();
            (0..rows(t)).map(|i| cols.iter().map(|c| c[i]).collect()).collect()
        };
        let all = tuples(table(whole));
        for (k, part) in parts.iter().enumerate() {
            let want: Vec<_> = all.iter().filter(|r| r[0].is_some_and(|s| bucket_of(s as u32, 2) == k as u32)).cloned().collect();
            assert_eq!(tuples(table(part)), want, "{name} of bucket {k}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// capture_merge: two capture files read as one (capture::merge), against each read alone.

/// `data` is two capture files: a big-endian u16 `n`, then the first file (the next `n`
/// bytes, or all that is left), then the second. Each is read alone and both are read as one
/// set; the set must be exactly the two files' records interleaved as mergecap interleaves
/// them: each file's order kept, the earliest head first, ties to the first file. A file that
/// cannot be read is skipped (and is the error with `strict`).
pub fn capture_merge(data: &[u8]) {
    let Some((head, rest)) = data.split_first_chunk::<2>() else { return };
    let cut = (u16::from_be_bytes(*head) as usize).min(rest.len());
    let parts = [&rest[..cut], &rest[cut..]];
    let max = Limits::default().max_record_bytes;
    // Small buffers (fuzz-sized inputs outgrow them), the same for a file alone and in the set.
    let buffer = file_buffer_bytes(8 << 10, 2);
    let alone: Vec<Option<Vec<(i64, Vec<u8>)>>> = parts
        .iter()
        .map(|p| {
            let mut v = Vec::new();
            read_capture_buffered(*p, "part", max, buffer, |r| v.push((r.ts_ns, r.data.to_vec()))).ok().map(|_| v)
        })
        .collect();
    let make = || -> Vec<Source<'_>> {
        parts.iter().enumerate().map(|(i, p)| (format!("part{i}"), Ok(Box::new(*p) as Box<dyn std::io::Read + Send>))).collect()
    };
    let mut merged: Vec<(i64, Vec<u8>, usize)> = Vec::new();
    let result = read_sources(make(), max, false, 8 << 10, |r, file| merged.push((r.ts_ns, r.data.to_vec(), file)));
    match (&alone[0], &alone[1]) {
        (None, None) => assert!(result.is_err()),
        _ => {
            let summary = result.expect("one file is readable");
            let mut heads = [0usize, 0usize];
            let empty = Vec::new();
            let files = [alone[0].as_ref().unwrap_or(&empty), alone[1].as_ref().unwrap_or(&empty)];
            for (ts, bytes, file) in &merged {
                let other = 1 - file;
                assert_eq!(files[*file].get(heads[*file]), Some(&(*ts, bytes.clone())), "file order kept");
                if let Some((other_ts, _)) = files[other].get(heads[other]) {
                    // mergecap: the earliest head; a tie goes to the file listed first
                    assert!(*ts < *other_ts || (*ts == *other_ts && *file == 0), "merge order");
                }
                heads[*file] += 1;
            }
            assert_eq!(heads, [files[0].len(), files[1].len()], "every record merged once");
            assert_eq!(summary.read.records as usize, merged.len());
            let skipped = alone.iter().filter(|a| a.is_none()).count();
            assert_eq!(summary.files.iter().filter(|f| f.error.is_some() || f.read.is_none()).count(), skipped);
            if skipped > 0 {
                assert!(read_sources(make(), max, true, 8 << 10, |_, _| {}).is_err(), "strict stops at the unreadable file");
            }
        }
    }
}

fn column<'t>(t: &'t Table, name: &str) -> &'t Column {
    &t.iter().find(|(n, _)| *n == name).unwrap_or_else(|| panic!("no column {name}")).1
}

fn column_len(c: &Column) -> usize {
    use Column::*;
    match c {
        I8(v) => v.len(),
        I16(v) => v.len(),
        I32(v) => v.len(),
        I64(v) | Ts(v) => v.len(),
        Bool(v) => v.len(),
        NullI16(v, m) => same_len(v.len(), m.len()),
        NullI32(v, m) => same_len(v.len(), m.len()),
        NullU32(v, m) => same_len(v.len(), m.len()),
        NullI64(v, m) | NullTs(v, m) => same_len(v.len(), m.len()),
        NullU64(v, m) => same_len(v.len(), m.len()),
        NullBool(v, m) => same_len(v.len(), m.len()),
        Str(codes, dict) | StrWide(codes, dict) => {
            assert!(codes.iter().all(|&c| c >= -1 && (c as i64) < dict.len() as i64), "string code out of range");
            codes.len()
        }
        Str8(codes, dict) => {
            assert!(dict.len() < crate::output::tables::STR8_MAX_CATEGORIES, "1-byte codes for a large dictionary");
            assert!(codes.iter().all(|&c| c >= -1 && (c as i64) < dict.len() as i64), "string code out of range");
            codes.len()
        }
        Cat(codes, names) => {
            assert!(codes.iter().all(|&c| c >= -1 && (c as i64) < names.len() as i64), "category code out of range");
            codes.len()
        }
        Text(codes, dict) => {
            assert!(codes.iter().all(|&c| c >= -1 && (c as i64) < dict.len() as i64), "text code out of range");
            codes.len()
        }
        Bytes(data, ends) => {
            assert!(ends.windows(2).all(|w| w[0] <= w[1]) && ends.last().map_or(true, |&e| e <= data.len()), "byte offsets out of order");
            ends.len()
        }
        Spread(s) => {
            assert!(s.rows.windows(2).all(|w| w[0] < w[1]) && s.rows.last().is_none_or(|&r| (r as usize) < s.len), "sparse rows out of order");
            assert_eq!(spread_values(s).len(), s.rows.len(), "sparse rows and values differ in number");
            if let SpreadValues::Text { codes, texts, .. } = &s.values {
                assert!(codes.iter().all(|&c| c >= 0 && (c as usize) < texts.len()), "sparse text code out of range");
            }
            s.len
        }
    }
}

/// A sparse column's values as integers (text: their codes).
fn spread_values(s: &Spread) -> Vec<i64> {
    fn all<T: Copy + Into<i64>>(v: &[T]) -> Vec<i64> {
        v.iter().map(|&x| x.into()).collect()
    }
    match &s.values {
        SpreadValues::I16(v) => all(v),
        SpreadValues::I32(v) | SpreadValues::Text { codes: v, .. } => all(v),
        SpreadValues::U32(v) => all(v),
        SpreadValues::I64(v) | SpreadValues::Ts(v) => v.clone(),
        SpreadValues::U64(v) => v.iter().map(|&x| x as i64).collect(),
        SpreadValues::Bool(v) => v.iter().map(|&x| x as i64).collect(),
    }
}

fn same_len(values: usize, mask: usize) -> usize {
    assert_eq!(values, mask, "values and validity mask differ in length");
    values
}

/// Integer view of a column, `None` where a value is missing.
fn ints(c: &Column) -> Vec<Option<i64>> {
    fn masked<T: Copy + Into<i64>>(v: &[T], m: &[bool]) -> Vec<Option<i64>> {
        v.iter().zip(m).map(|(&x, &ok)| ok.then(|| x.into())).collect()
    }
    use Column::*;
    match c {
        I8(v) | Cat(v, _) | Str8(v, _) => v.iter().map(|&x| Some(x as i64)).collect(),
        I16(v) => v.iter().map(|&x| Some(x as i64)).collect(),
        I32(v) | Str(v, _) | StrWide(v, _) => v.iter().map(|&x| Some(x as i64)).collect(),
        I64(v) | Ts(v) => v.iter().map(|&x| Some(x)).collect(),
        Bool(v) => v.iter().map(|&x| Some(x as i64)).collect(),
        NullI16(v, m) => masked(v, m),
        NullI32(v, m) => masked(v, m),
        NullU32(v, m) => masked(v, m),
        NullI64(v, m) | NullTs(v, m) => masked(v, m),
        NullU64(v, m) => v.iter().zip(m).map(|(&x, &ok)| ok.then_some(x as i64)).collect(),
        NullBool(v, m) => v.iter().zip(m).map(|(&x, &ok)| ok.then_some(x as i64)).collect(),
        Text(..) | Bytes(..) => panic!("text or bytes column read as integers"),
        // (as its dense column reads: a text's code, -1 where a row has none)
        Spread(s) => {
            let missing = matches!(s.values, SpreadValues::Text { .. }).then_some(-1);
            let mut out = vec![missing; s.len];
            for (&r, x) in s.rows.iter().zip(spread_values(s)) {
                out[r as usize] = Some(x);
            }
            out
        }
    }
}

/// `batches`, as a frames sink got them, are the rows of `all`: tables of `batch_rows` rows
/// but the last, which has at most as many (and one of no rows when `all` has none).
fn same_rows_in_batches(batches: &[Table], all: &Table, batch_rows: usize, what: &str) {
    assert!(!batches.is_empty(), "the sink got no table ({what})");
    let mut start = 0;
    for (i, t) in batches.iter().enumerate() {
        let n = rows(t);
        let last = i + 1 == batches.len();
        assert!(if last { n <= batch_rows && (n > 0 || rows(all) == 0) } else { n == batch_rows }, "batch {i} of {n} rows ({what})");
        same_texts(t, all, start, &format!("frames {start}..{} of {what}", start + n));
        start += n;
    }
    assert_eq!(start, rows(all), "the frames of {what}");
}

/// `some` is the rows of `all` from row `start` on: every column's values and dictionary, except
/// that a text column's codes are wide and its dictionary is the texts met so far (a prefix of
/// `all`'s).
fn same_texts(some: &Table, all: &Table, start: usize, what: &str) {
    assert_eq!(some.iter().map(|c| c.0).collect::<Vec<_>>(), all.iter().map(|c| c.0).collect::<Vec<_>>(), "{what}");
    let n = rows(some);
    for (name, c) in some {
        let whole = column(all, name);
        assert_eq!(ints(c), ints(whole)[start..start + n], "{name} of {what}");
        match (c, whole) {
            (Column::StrWide(_, a), Column::Str8(_, b) | Column::Str(_, b)) => assert!(b.starts_with(a), "{name} of {what}"),
            // (a dictionary fixed in advance: `method`)
            (Column::Str8(_, a), Column::Str8(_, b)) => assert_eq!(a, b, "{name} of {what}"),
            (Column::Cat(_, a), Column::Cat(_, b)) => assert_eq!(a, b, "{name} of {what}"),
            (Column::Spread(a), Column::Spread(b)) => match (&a.values, &b.values) {
                (SpreadValues::Text { texts: a, wide: true, .. }, SpreadValues::Text { texts: b, wide: false, .. }) => {
                    assert!(b.starts_with(a), "{name} of {what}")
                }
                (a, b) => assert_eq!(std::mem::discriminant(a), std::mem::discriminant(b), "{name} of {what}"),
            },
            _ => assert_eq!(std::mem::discriminant(c), std::mem::discriminant(whole), "{name} of {what}"),
        }
    }
}

fn dense(t: &Table, name: &str) -> Vec<i64> {
    ints(column(t, name)).into_iter().map(|v| v.unwrap_or_else(|| panic!("{name} has a missing value"))).collect()
}

fn rows(t: &Table) -> usize {
    let n = t.first().map_or(0, |(_, c)| column_len(c));
    for (name, c) in t {
        assert_eq!(column_len(c), n, "column {name} has another length than the table");
    }
    n
}

/// What the tables promise whatever the input (docs/tables.md): equal column lengths, packet
/// numbers that exist, rows that belong to a listed connection, per-packet and per-connection
/// counts that agree with the rows, and the byte accounting
/// `bytes_decoded + bytes_skipped + bytes_missing == stream_bytes` for each direction.
pub fn check_output(out: &Output) {
    let records = rows(&out.records);
    assert_eq!(records as u64, out.read.records, "records table vs summary");
    assert_eq!(dense(&out.records, "packet"), (1..=records as i64).collect::<Vec<_>>());
    let packet_ok = |p: i64| p >= 1 && p <= records as i64;

    let conns = rows(&out.connections);
    let conn_streams = dense(&out.connections, "stream");
    let conn_index: HashMap<i64, usize> = conn_streams.iter().enumerate().map(|(i, &s)| (s, i)).collect();
    assert_eq!(conn_index.len(), conns, "a stream is listed twice in connections");
    let conn_of = |s: i64| *conn_index.get(&s).unwrap_or_else(|| panic!("stream {s} is not in connections"));

    // packets
    let npk = rows(&out.packets);
    let pk_packet = dense(&out.packets, "packet");
    assert!(pk_packet.windows(2).all(|w| w[0] < w[1]), "packets rows not in capture order");
    assert!(pk_packet.iter().all(|&p| packet_ok(p)), "packet number out of range");
    let pk_stream = dense(&out.packets, "stream");
    let pk_dir = dense(&out.packets, "direction");
    let gap_before = dense(&out.packets, "gap_before");
    let frames_ended = dense(&out.packets, "frames_ended");
    let mut gaps = vec![[0i64; 2]; conns];
    for i in 0..npk {
        assert!(gap_before[i] >= 0 && frames_ended[i] >= 0);
        assert!(pk_dir[i] == 0 || pk_dir[i] == 1);
        gaps[conn_of(pk_stream[i])][pk_dir[i] as usize] += gap_before[i];
    }

    // frames
    let nfr = rows(&out.frames);
    let fr_packet = dense(&out.frames, "packet");
    let fr_first = dense(&out.frames, "first_packet");
    let fr_stream = dense(&out.frames, "stream");
    let fr_dir = dense(&out.frames, "direction");
    let mut last_frame_packet: HashMap<(i64, i64), i64> = HashMap::new();
    let mut frames_per_conn = vec![0i64; conns];
    let mut frames_per_packet: HashMap<(i64, i64), i64> = HashMap::new();
    for i in 0..nfr {
        assert!(packet_ok(fr_packet[i]), "frame packet {} out of range", fr_packet[i]);
        assert!(fr_first[i] >= 1 && fr_first[i] <= fr_packet[i], "frame starts in packet {} after it ends in {}", fr_first[i], fr_packet[i]);
        let last = last_frame_packet.entry((fr_stream[i], fr_dir[i])).or_default();
        assert!(fr_packet[i] >= *last, "stream {} direction {}: a frame ends in packet {} after one in {}", fr_stream[i], fr_dir[i], fr_packet[i], last);
        *last = fr_packet[i];
        frames_per_conn[conn_of(fr_stream[i])] += 1;
        *frames_per_packet.entry((fr_stream[i], fr_packet[i])).or_default() += 1;
    }
    for i in 0..npk {
        let n = frames_per_packet.remove(&(pk_stream[i], pk_packet[i])).unwrap_or(0);
        assert_eq!(frames_ended[i], n, "frames_ended of packet {} vs frames rows", pk_packet[i]);
    }
    assert!(frames_per_packet.is_empty(), "frames end in packets that are not rows of their stream: {frames_per_packet:?}");

    // anomalies
    let nan = rows(&out.anomalies);
    let an_packet = ints(column(&out.anomalies, "packet"));
    let an_stream = ints(column(&out.anomalies, "stream"));
    let an_bytes = dense(&out.anomalies, "bytes");
    let mut anomalies_per_conn = vec![0i64; conns];
    for i in 0..nan {
        if let Some(p) = an_packet[i] {
            assert!(packet_ok(p), "anomaly packet {p} out of range");
        }
        if let Some(s) = an_stream[i] {
            anomalies_per_conn[conn_of(s)] += 1;
        }
        assert!(an_bytes[i] >= 0);
    }

    // connections
    let c = |name: &str| dense(&out.connections, name);
    // an AMQP 1.0 connection's AMQP 1.0 frames are counted, not rows of `frames` (docs/tables.md);
    // its other direction may still have started as 0-9-1 and have rows
    let Column::Text(protocol, names) = column(&out.connections, "protocol") else { panic!("protocol is not text") };
    let amqp10: Vec<bool> = protocol.iter().map(|&p| p >= 0 && names[p as usize] == "1.0").collect();
    for (i, &framed) in c("frames").iter().enumerate() {
        if amqp10[i] {
            assert!(frames_per_conn[i] <= framed, "an AMQP 1.0 connection with more frames rows than frames");
        } else {
            assert_eq!(framed, frames_per_conn[i], "connections.frames vs frames rows");
        }
    }
    assert_eq!(c("anomalies"), anomalies_per_conn, "connections.anomalies vs anomalies rows");
    let missing_total = c("bytes_missing");
    for (d, dir) in ["c2s", "s2c"].iter().enumerate() {
        let decoded = c(&format!("{dir}_bytes_decoded"));
        let skipped = c(&format!("{dir}_bytes_skipped"));
        let missing = c(&format!("{dir}_bytes_missing"));
        let span = c(&format!("{dir}_stream_bytes"));
        for i in 0..conns {
            assert_eq!(
                decoded[i] + skipped[i] + missing[i],
                span[i],
                "stream {} {dir}: decoded {} + skipped {} + missing {} != stream bytes {}",
                conn_streams[i],
                decoded[i],
                skipped[i],
                missing[i],
                span[i]
            );
            assert!(gaps[i][d] <= missing[i], "stream {} {dir}: gap_before sums to {} > bytes missing {}", conn_streams[i], gaps[i][d], missing[i]);
        }
    }
    let c2s = c("c2s_bytes_missing");
    let s2c = c("s2c_bytes_missing");
    for i in 0..conns {
        assert_eq!(missing_total[i], c2s[i] + s2c[i]);
    }
}

// ---------------------------------------------------------------------------------------------
// tcp_reassembly: a structured segment sequence, both directions.

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

// ---------------------------------------------------------------------------------------------
// amqp_decoder: one direction's byte stream in arbitrary chunkings.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    /// The next `n` stream bytes.
    Data(usize),
    /// `n` bytes missing from the capture.
    Gap(u64),
    /// connection.tune-ok fixed frame_max.
    FrameMax(u64),
}

const FRAME_MAX_CHOICES: [u64; 16] = [0, 1, 7, 8, 9, 12, 100, 1024, 4095, 4096, 8192, 65536, 131072, 1 << 20, u32::MAX as u64, u64::MAX];

/// Split `stream_len` bytes by the control bytes, used round and round: a byte c is a chunk of
/// c + 1 bytes, except on the first round, where 0xE0..=0xEF set frame_max and 0xF0..=0xFF are
/// a gap of 2^(c & 15) bytes.
fn plan(ctrl: &[u8], stream_len: usize) -> Vec<Event> {
    let mut ev = Vec::new();
    if ctrl.is_empty() {
        ev.push(Event::Data(stream_len));
        return ev;
    }
    let mut left = stream_len;
    let mut first_round = true;
    'outer: loop {
        for &c in ctrl {
            match c {
                0xE0..=0xEF if first_round => ev.push(Event::FrameMax(FRAME_MAX_CHOICES[(c & 15) as usize])),
                0xF0..=0xFF if first_round => ev.push(Event::Gap(1 << (c & 15))),
                _ => {
                    if left == 0 {
                        if first_round {
                            continue;
                        }
                        break 'outer;
                    }
                    let n = (c as usize + 1).min(left);
                    ev.push(Event::Data(n));
                    left -= n;
                }
            }
        }
        first_round = false;
        if left == 0 {
            break;
        }
    }
    ev
}

/// What a decoder reported, without packet numbers (they depend on the chunking).
#[derive(Debug, Default, PartialEq, Eq)]
struct Seen {
    events: Vec<String>,
    /// Feeding packet number of the current chunk, and the first packet fed.
    packet: u32,
}

impl FrameSink for Seen {
    fn frame(&mut self, ev: FrameEvent<'_>) -> bool {
        assert_eq!(ev.packet, self.packet, "a frame completed by another packet than the one fed");
        assert!(ev.first_packet >= 1 && ev.first_packet <= ev.packet, "frame starts in packet {} after {}", ev.first_packet, ev.packet);
        let h = ev.header;
        assert_eq!(ev.payload.is_none(), h.frame_type == FrameType::Body, "bodies (only) are not kept");
        if let Some(p) = ev.payload {
            assert_eq!(p.len() as u64, h.size as u64);
        }
        // What the pipeline does with the payload: must not panic.
        let parsed = match (h.frame_type, ev.payload) {
            (FrameType::Method, Some(p)) => match decode_method(p) {
                Ok(a) => {
                    let props = (a.user(), a.client_property(b"product"), a.server_property(b"version"), a.client_property(b"connection_name"));
                    format!("{} {:?} {props:?}", a.name(), a.delivery_tag)
                }
                Err(e) => format!("{e:?}"),
            },
            (FrameType::Header, Some(p)) => match decode_content_header(p) {
                Ok(c) => format!("{c:?}"),
                Err(e) => format!("{e:?}"),
            },
            _ => String::new(),
        };
        self.events.push(format!("frame {:?} ch{} {}B {:?} {parsed}", h.frame_type, h.channel, h.size, ev.payload));
        true
    }
}

impl DecodeSink for Seen {
    fn protocol_header(&mut self, version: [u8; 4], packet: u32) {
        assert_eq!(packet, self.packet);
        self.events.push(format!("protocol header {version:?}"));
    }
    fn anomaly(&mut self, kind: AnomalyKind, packet: u32, bytes: u64, detail: String) {
        assert!(packet <= self.packet, "anomaly in packet {packet} not fed yet");
        self.events.push(format!("anomaly {} {bytes}B {detail}", kind.name()));
    }
}

impl amqp10::decoder::FrameSink for Seen {
    fn frame(&mut self, ev: amqp10::decoder::FrameEvent) {
        assert_eq!(ev.packet, self.packet, "a frame completed by another packet than the one fed");
        assert!(ev.first_packet >= 1 && ev.first_packet <= ev.packet, "frame starts in packet {} after {}", ev.first_packet, ev.packet);
        let h = ev.header;
        assert!(h.size >= 8 && h.body_offset >= 8 && h.body_offset <= h.size);
        self.events.push(format!("frame {:?} ch{} {}B {}", h.kind, h.channel, h.size, amqp10::decoder::frame_name(&ev)));
    }
}

/// A direction's decoder as the harness drives it: AMQP 0-9-1's or AMQP 1.0's.
trait Fuzzed {
    fn feed(&mut self, data: &[u8], packet: u32, limits: &Limits, seen: &mut Seen);
    fn gap(&mut self, bytes: u64, packet: u32);
    fn set_frame_max(&mut self, frame_max: u64, limits: &Limits);
    fn finish(&mut self, packet: u32, limits: &Limits, seen: &mut Seen);
    /// Bytes decoded, bytes skipped, frames.
    fn counts(&self) -> [u64; 3];
}

impl Fuzzed for Decoder {
    fn feed(&mut self, data: &[u8], packet: u32, limits: &Limits, seen: &mut Seen) {
        Decoder::feed(self, data, packet, packet, limits, seen)
    }
    fn gap(&mut self, bytes: u64, packet: u32) {
        Decoder::gap(self, bytes, packet)
    }
    fn set_frame_max(&mut self, frame_max: u64, limits: &Limits) {
        Decoder::set_frame_max(self, frame_max, limits)
    }
    fn finish(&mut self, packet: u32, limits: &Limits, seen: &mut Seen) {
        Decoder::finish(self, packet, limits, seen)
    }
    fn counts(&self) -> [u64; 3] {
        [self.bytes_decoded, self.bytes_skipped, self.frames]
    }
}

impl Fuzzed for amqp10::decoder::Decoder {
    fn feed(&mut self, data: &[u8], packet: u32, _limits: &Limits, seen: &mut Seen) {
        amqp10::decoder::Decoder::feed(self, data, packet, packet, seen)
    }
    fn gap(&mut self, bytes: u64, packet: u32) {
        amqp10::decoder::Decoder::gap(self, bytes, packet)
    }
    /// AMQP 1.0's max-frame-size is not followed yet: the cap holds.
    fn set_frame_max(&mut self, _frame_max: u64, _limits: &Limits) {}
    fn finish(&mut self, packet: u32, _limits: &Limits, seen: &mut Seen) {
        amqp10::decoder::Decoder::finish(self, packet, seen)
    }
    fn counts(&self) -> [u64; 3] {
        [self.bytes_decoded, self.bytes_skipped, self.frames]
    }
}

/// Run a decoder made by `new` over the events; `merge` feeds runs of consecutive data chunks
/// at once.
fn decode<D: Fuzzed>(new: impl Fn() -> D, limits: &Limits, frame_max: Option<u64>, stream: &[u8], events: &[Event], merge: bool) -> (Seen, [u64; 3]) {
    let mut d = new();
    if let Some(fm) = frame_max {
        d.set_frame_max(fm, limits);
    }
    let mut seen = Seen::default();
    let mut pos = 0usize;
    let mut i = 0;
    while i < events.len() {
        match events[i] {
            Event::Data(n) => {
                let mut end = pos + n;
                if merge {
                    while let Some(Event::Data(m)) = events.get(i + 1) {
                        end += m;
                        i += 1;
                    }
                }
                seen.packet += 1;
                d.feed(&stream[pos..end], seen.packet, limits, &mut seen);
                pos = end;
            }
            Event::Gap(n) => d.gap(n, seen.packet.max(1)),
            Event::FrameMax(fm) => d.set_frame_max(fm, limits),
        }
        i += 1;
    }
    assert_eq!(pos, stream.len());
    seen.packet = seen.packet.max(1);
    d.finish(seen.packet, limits, &mut seen);
    (seen, d.counts())
}

/// The stream decoded chunk by chunk and with consecutive chunks merged: the same frames,
/// anomalies and byte counts, and every data byte decoded or skipped exactly once.
fn same_however_cut<D: Fuzzed>(new: impl Fn() -> D, limits: &Limits, frame_max: Option<u64>, stream: &[u8], events: &[Event]) {
    let (whole, whole_counts) = decode(&new, limits, frame_max, stream, events, true);
    let (chunked, chunked_counts) = decode(&new, limits, frame_max, stream, events, false);
    assert_eq!(whole.events, chunked.events, "decoding depends on segmentation");
    assert_eq!(whole_counts, chunked_counts, "byte counts depend on segmentation");
    let [decoded, skipped, _] = whole_counts;
    assert_eq!(decoded + skipped, stream.len() as u64, "bytes decoded {decoded} + skipped {skipped} != bytes fed {}", stream.len());
}

/// `data` = flags, k, k control bytes, then the byte stream of one direction. Flags: bit 0 the
/// stream starts at a frame boundary (SYN seen), bit 1 [`small_limits`] instead of the defaults,
/// bits 2-3 an initial frame_max (none, 0, 131072, 4096), bit 4 the AMQP 1.0 decoder instead of
/// AMQP 0-9-1's (the stream after an AMQP 1.0 protocol header, or the SASL one with bit 5). The
/// control bytes cut the stream into chunks and place gaps and frame_max changes ([`plan`]). The
/// stream is decoded twice, chunk by chunk and with consecutive chunks merged: frames,
/// anomalies and byte counts must be the same (the decoder does not depend on segmentation),
/// and every data byte is decoded or skipped exactly once.
pub fn amqp_decoder(data: &[u8]) {
    let [flags, k, rest @ ..] = data else { return };
    let (ctrl, stream) = rest.split_at((*k as usize).min(rest.len()));
    let aligned = flags & 1 != 0;
    let limits = if flags & 2 != 0 { small_limits() } else { Limits::default() };
    let frame_max = [None, Some(0), Some(131072), Some(4096)][((flags >> 2) & 3) as usize];
    if flags & 16 != 0 {
        let mut s = if flags & 32 != 0 { b"AMQP\x03\x01\x00\x00".to_vec() } else { b"AMQP\x00\x01\x00\x00".to_vec() };
        s.extend_from_slice(stream);
        let events = plan(ctrl, s.len());
        return same_however_cut(|| amqp10::decoder::Decoder::new(&limits), &limits, frame_max, &s, &events);
    }
    let events = plan(ctrl, stream.len());
    same_however_cut(|| Decoder::new(aligned, &limits), &limits, frame_max, stream, &events);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_covers_the_stream() {
        assert_eq!(plan(&[], 10), vec![Event::Data(10)]);
        assert_eq!(plan(&[1, 0xF3], 7), vec![Event::Data(2), Event::Gap(8), Event::Data(2), Event::Data(3)]);
        assert_eq!(plan(&[0xE0, 0xFF], 0), vec![Event::FrameMax(0), Event::Gap(32768)]);
    }

    /// The format that make_seeds.py writes for tcp_reassembly seeds, byte by byte.
    #[test]
    fn conversation_format() {
        let mut b = Vec::new();
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        b.extend_from_slice(&64u16.to_le_bytes());
        // from B, Delta(-5), ack Abs(7), SYN|FIN, 10 bytes, no snaplen
        b.extend_from_slice(&[1, 1, 0xfb, 0xff, 3, 7, 0, 0, 0, 3, 10, 0, 0]);
        // from A, Next, ack All, no flags, 4095 bytes, snaplen 2
        b.extend_from_slice(&[0, 0, 1, 0, 0xff, 0x0f, 1, 2, 0]);
        let c = Conversation::parse(&b);
        assert_eq!(
            format!("{c:?}"),
            "Conversation { isn: [1, 4294967295], cap: 64, segments: [\
             Segment { from_b: true, seq: Delta(-5), ack: Abs(7), flags: 3, len: 10, snap: None }, \
             Segment { from_b: false, seq: Next, ack: All, flags: 0, len: 4095, snap: Some(2) }] }"
        );
        assert_eq!(c.encode(), b);
        // a cut-off last segment reads as if zeros followed
        assert_eq!(format!("{:?}", Conversation::parse(&b[..b.len() - 3]).segments[1]), "Segment { from_b: false, seq: Next, ack: All, flags: 0, len: 4095, snap: None }");
    }

    #[test]
    fn harnesses_accept_trivial_inputs() {
        for d in [&b""[..], b"\x01", b"\x01\x00AMQP\x00\x00\x09\x01", &[0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0], b"\x30\x00\x00\x00\x00\x08\x02\x01\x00\x00"] {
            capture_reader(d);
            tcp_reassembly(d);
            amqp_decoder(d);
        }
    }
}
