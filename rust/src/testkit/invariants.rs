//! What the tables promise whatever the input (docs/tables.md), checked on a decode's output,
//! and the column helpers the checks read tables with.

use std::collections::HashMap;

use crate::pipeline::Output;
use crate::output::tables::{Column, Spread, SpreadValues, Table};

pub(super) fn column<'t>(t: &'t Table, name: &str) -> &'t Column {
    &t.iter().find(|(n, _)| *n == name).unwrap_or_else(|| panic!("no column {name}")).1
}

pub(super) fn column_len(c: &Column) -> usize {
    use Column::*;
    match c {
        I8(v) => v.len(),
        I16(v) => v.len(),
        I32(v) => v.len(),
        I64(v) | Ts(v) => v.len(),
        Bool(v) => v.len(),
        NullU8(v, m) => same_len(v.len(), m.len()),
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
pub(super) fn spread_values(s: &Spread) -> Vec<i64> {
    fn all<T: Copy + Into<i64>>(v: &[T]) -> Vec<i64> {
        v.iter().map(|&x| x.into()).collect()
    }
    match &s.values {
        SpreadValues::U8(v) => all(v),
        SpreadValues::I16(v) => all(v),
        SpreadValues::I32(v) | SpreadValues::Text { codes: v, .. } => all(v),
        SpreadValues::U32(v) => all(v),
        SpreadValues::I64(v) | SpreadValues::Ts(v) => v.clone(),
        SpreadValues::U64(v) => v.iter().map(|&x| x as i64).collect(),
        SpreadValues::Bool(v) => v.iter().map(|&x| x as i64).collect(),
    }
}

pub(super) fn same_len(values: usize, mask: usize) -> usize {
    assert_eq!(values, mask, "values and validity mask differ in length");
    values
}

/// Integer view of a column, `None` where a value is missing.
pub(super) fn ints(c: &Column) -> Vec<Option<i64>> {
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
        NullU8(v, m) => masked(v, m),
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
pub(super) fn same_rows_in_batches(batches: &[Table], all: &Table, batch_rows: usize, what: &str) {
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
pub(super) fn same_texts(some: &Table, all: &Table, start: usize, what: &str) {
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

pub(super) fn dense(t: &Table, name: &str) -> Vec<i64> {
    ints(column(t, name)).into_iter().map(|v| v.unwrap_or_else(|| panic!("{name} has a missing value"))).collect()
}

pub(super) fn rows(t: &Table) -> usize {
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

    // frames: AMQP 0-9-1's, and AMQP 1.0's (`amqp10_frames`), each in its own packet order
    let mut frames_per_conn = vec![0i64; conns];
    let mut frames_per_packet: HashMap<(i64, i64), i64> = HashMap::new();
    let amqp10_frames = out.added.iter().filter(|(n, _)| *n == "amqp10_frames").map(|(_, t)| t);
    for table in std::iter::once(&out.frames).chain(amqp10_frames) {
        let nfr = rows(table);
        let fr_packet = dense(table, "packet");
        let fr_first = dense(table, "first_packet");
        let fr_stream = dense(table, "stream");
        let fr_dir = dense(table, "direction");
        let mut last_frame_packet: HashMap<(i64, i64), i64> = HashMap::new();
        for i in 0..nfr {
            assert!(packet_ok(fr_packet[i]), "frame packet {} out of range", fr_packet[i]);
            assert!(fr_first[i] >= 1 && fr_first[i] <= fr_packet[i], "frame starts in packet {} after it ends in {}", fr_first[i], fr_packet[i]);
            let last = last_frame_packet.entry((fr_stream[i], fr_dir[i])).or_default();
            assert!(fr_packet[i] >= *last, "stream {} direction {}: a frame ends in packet {} after one in {}", fr_stream[i], fr_dir[i], fr_packet[i], last);
            *last = fr_packet[i];
            frames_per_conn[conn_of(fr_stream[i])] += 1;
            *frames_per_packet.entry((fr_stream[i], fr_packet[i])).or_default() += 1;
        }
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
    // every frame counted is a row of `frames` or of `amqp10_frames`
    assert_eq!(c("frames"), frames_per_conn, "connections.frames vs frames and amqp10_frames rows");
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
