//! The capture_reader and capture_merge harnesses: capture files, whole and spilled by
//! bucket, and sets of files merged by time.

use crate::capture::merge::{file_buffer_bytes, read_sources, Source};
use crate::capture::reader::{read_capture_buffered, ReadSummary, Record};
use crate::error::CaptureError;
use crate::pipeline::{Ingest, Output, TableSink};
use crate::limits::Limits;
use crate::buckets::partition::{bucket_of, Partition};
use crate::output::tables::Table;
use super::small_limits;
use super::invariants::{check_output, column, ints, rows, same_rows_in_batches};

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
