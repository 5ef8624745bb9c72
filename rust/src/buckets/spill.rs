//! The capture spilled by bucket: how `amqpcap ingest` decodes a capture of any size in one
//! read. The first step reads the capture once, numbers every record and every TCP conversation
//! exactly as a whole decode does (Wireshark's frame numbers and tcp.stream, port reuse
//! included), writes the rows of no connection (`records`, anomalies of the file), and appends
//! each TCP packet of a possible AMQP connection to the spill file of its connection's bucket
//! ([`SpillWriter`]). Each bucket is then decoded on its own from its spill file
//! ([`decode_spilled`]): its connections' packets in capture order,
//! with their capture-wide packet and stream numbers, so its tables are those a whole decode
//! gives for these connections. Reading is linear in the capture (each byte is read from the
//! capture once and from a spill file once), and a bucket's decode holds one bucket's rows.
//!
//! A spill file is an Arrow IPC file (the Arrow columnar format on disk, arrow-rs'
//! `arrow-ipc`), one per bucket, of the columns in [`spill_schema`]. It is a temporary file: the
//! ingest deletes it once its bucket is written.

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use arrow_array::{Array, BinaryArray, Int64Array, RecordBatch, UInt32Array};
use arrow_buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use arrow_ipc::reader::FileReader;
use arrow_ipc::writer::{FileWriter, IpcWriteOptions};
use arrow_ipc::CompressionType;
use arrow_schema::{ArrowError, DataType, Field, Schema};

use crate::capture::reader::{ReadSummary, Record};
use crate::pipeline::{Ingest, Output, TableSink};
use crate::limits::Limits;
use crate::buckets::partition::bucket_of;

/// Bytes a bucket's spill holds in memory before they are written as one Arrow record batch,
/// with few buckets. With more, a bucket's batch is their share of [`SPILL_PENDING_BYTES`]
/// ([`batch_bytes`]).
pub const SPILL_BATCH_BYTES: usize = 1 << 20;

/// Bytes the first step holds pending for all the buckets together (about twice that at the
/// most: a growing buffer may hold twice what it uses), whatever their number. Each bucket
/// holds its rows pending until a batch of its own, so before this cap the pending rows grew with
/// the bucket count, which grows with the capture (one per 128 MB): the split of 10M packets
/// peaked at 200 MiB with 15 buckets, 372 MiB with 150 and 969 MiB with 600 (1 MiB batches).
pub const SPILL_PENDING_BYTES: usize = 64 << 20;

/// The smallest batch a bucket's spill writes (past `SPILL_PENDING_BYTES / SPILL_MIN_BATCH_BYTES`
/// = 1024 buckets, the most `amqpcap ingest` makes, the pending bytes grow again): below it an
/// Arrow IPC message's header and the LZ4 frames' own would start to count.
pub const SPILL_MIN_BATCH_BYTES: usize = 64 << 10;

/// The batch size of each of `buckets` buckets' spills: an equal share of
/// [`SPILL_PENDING_BYTES`], within [`SPILL_MIN_BATCH_BYTES`]..=[`SPILL_BATCH_BYTES`].
pub fn batch_bytes(buckets: u32) -> usize {
    (SPILL_PENDING_BYTES / buckets.max(1) as usize).clamp(SPILL_MIN_BATCH_BYTES, SPILL_BATCH_BYTES)
}

/// The spill file of bucket `bucket` in `dir`.
pub fn spill_path(dir: &Path, bucket: u32) -> PathBuf {
    dir.join(format!("bucket={bucket}.arrow"))
}

/// The columns of a spill file: one row per TCP packet, as the capture gave it.
pub fn spill_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("packet", DataType::UInt32, false),
        Field::new("stream", DataType::UInt32, false),
        Field::new("ts", DataType::Int64, false),
        Field::new("linktype", DataType::UInt32, false),
        Field::new("origlen", DataType::UInt32, false),
        Field::new("data", DataType::Binary, false),
    ]))
}

/// LZ4-compressed buffers (the IPC format's own compression): AMQP traffic compresses well,
/// and writing the bytes dominates the split (1.64 GB of packets of a 10M-packet PerfTest
/// capture: 4.4 s written plain on the 2-core dev machine; see docs/dataset.md).
fn write_options() -> std::io::Result<IpcWriteOptions> {
    IpcWriteOptions::default().try_with_compression(Some(CompressionType::LZ4_FRAME)).map_err(io_error)
}

/// Rows of one bucket not written yet.
struct Pending {
    packet: Vec<u32>,
    stream: Vec<u32>,
    ts: Vec<i64>,
    linktype: Vec<u32>,
    origlen: Vec<u32>,
    data: Vec<u8>,
    /// The offsets of the `data` column: 0, then each row's end.
    ends: Vec<i32>,
}

impl Default for Pending {
    fn default() -> Self {
        Pending { packet: Vec::new(), stream: Vec::new(), ts: Vec::new(), linktype: Vec::new(), origlen: Vec::new(), data: Vec::new(), ends: vec![0] }
    }
}

/// Bytes of a row besides its captured bytes (the five fixed-width columns and an offset).
const ROW_BYTES: usize = 4 + 4 + 8 + 4 + 4 + 4;

impl Pending {
    fn bytes(&self) -> usize {
        self.data.len() + self.packet.len() * ROW_BYTES
    }

    /// The rows as a record batch; the buffers start again at the size they reached, so that
    /// filling the next batch does not grow (and copy) them again.
    fn take_batch(&mut self) -> Result<RecordBatch, ArrowError> {
        fn take<T>(v: &mut Vec<T>) -> Vec<T> {
            let cap = v.capacity();
            std::mem::replace(v, Vec::with_capacity(cap))
        }
        let offsets = OffsetBuffer::new(ScalarBuffer::from(take(&mut self.ends)));
        self.ends.push(0);
        let data = BinaryArray::try_new(offsets, Buffer::from_vec(take(&mut self.data)), None)?;
        RecordBatch::try_new(
            spill_schema(),
            vec![
                Arc::new(UInt32Array::from(take(&mut self.packet))),
                Arc::new(UInt32Array::from(take(&mut self.stream))),
                Arc::new(Int64Array::from(take(&mut self.ts))),
                Arc::new(UInt32Array::from(take(&mut self.linktype))),
                Arc::new(UInt32Array::from(take(&mut self.origlen))),
                Arc::new(data),
            ],
        )
    }
}

/// What was spilled into one bucket's file.
#[derive(Debug, Clone, Copy, Default)]
pub struct Spilled {
    pub packets: u64,
    /// Captured bytes of its packets.
    pub bytes: u64,
}

/// Record batches waiting for the spill's writing thread: the first step holds at most this
/// many besides each bucket's pending rows ([`batch_bytes`] each).
const SPILL_BATCHES_QUEUED: usize = 4;

/// The spill files of a capture's buckets, being written. Rows are gathered per bucket by the
/// reading thread; full batches are compressed and written by a thread of their own, so that
/// the split reads on while LZ4 compresses (a third of the split's time in one thread, measured
/// on 10M packets of PerfTest). The first write error (a full disk) stops the writing and is
/// returned by [`SpillWriter::finish`].
pub struct SpillWriter {
    pending: Vec<Pending>,
    /// A bucket's pending rows are written as a batch once they reach this many bytes.
    batch_bytes: usize,
    spilled: Vec<Spilled>,
    /// Batches to the writing thread; `None` once it has stopped (an error) or is finishing.
    batches: Option<SyncSender<(usize, RecordBatch)>>,
    writing: JoinHandle<std::io::Result<()>>,
    error: Option<std::io::Error>,
}

fn io_error(e: ArrowError) -> std::io::Error {
    match e {
        ArrowError::IoError(_, e) => e,
        other => std::io::Error::other(other.to_string()),
    }
}

/// The writing thread: each batch appended to its bucket's file, then every file finished.
fn write_batches(mut writers: Vec<FileWriter<BufWriter<File>>>, batches: Receiver<(usize, RecordBatch)>) -> std::io::Result<()> {
    use std::io::Write;
    for (k, batch) in batches {
        writers[k].write(&batch).map_err(io_error)?;
    }
    for mut w in writers {
        w.finish().map_err(io_error)?;
        w.into_inner().map_err(io_error)?.flush()?;
    }
    Ok(())
}

impl SpillWriter {
    /// Spill files for `buckets` buckets in the directory `dir` (created if need be).
    pub fn create(dir: &Path, buckets: u32) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let schema = spill_schema();
        let batch_bytes = batch_bytes(buckets);
        // (an IPC message is written in several pieces: buffered, but not a whole batch per file)
        let buffer = batch_bytes / 4;
        let writers = (0..buckets)
            .map(|k| {
                let file = BufWriter::with_capacity(buffer, File::create(spill_path(dir, k))?);
                FileWriter::try_new_with_options(file, &schema, write_options()?).map_err(io_error)
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        let (tx, rx) = sync_channel(SPILL_BATCHES_QUEUED);
        let writing = std::thread::Builder::new().name("amqpcap-spill".into()).spawn(move || write_batches(writers, rx))?;
        let n = buckets as usize;
        Ok(SpillWriter {
            pending: (0..n).map(|_| Pending::default()).collect(),
            batch_bytes,
            spilled: vec![Spilled::default(); n],
            batches: Some(tx),
            writing,
            error: None,
        })
    }

    pub fn buckets(&self) -> u32 {
        self.pending.len() as u32
    }

    /// Bytes of rows pending in all the buckets (not yet handed to the writing thread).
    #[cfg(test)]
    fn pending_bytes(&self) -> usize {
        self.pending.iter().map(Pending::bytes).sum()
    }

    /// Append packet `number` of conversation `stream` to the spill of the stream's bucket.
    pub fn push(&mut self, number: u32, stream: u32, rec: &Record<'_>) {
        if self.batches.is_none() {
            return;
        }
        let k = bucket_of(stream, self.buckets()) as usize;
        let p = &mut self.pending[k];
        p.packet.push(number);
        p.stream.push(stream);
        p.ts.push(rec.ts_ns);
        p.linktype.push(rec.linktype);
        p.origlen.push(rec.origlen);
        p.data.extend_from_slice(rec.data);
        p.ends.push(p.data.len() as i32);
        self.spilled[k].packets += 1;
        self.spilled[k].bytes += rec.data.len() as u64;
        // (a record is at most max_record_bytes, far below the i32 offsets' 2 GiB)
        if p.bytes() >= self.batch_bytes {
            self.write(k);
        }
    }

    /// Hand bucket `k`'s pending rows to the writing thread (which, once stopped by an error,
    /// has dropped its end: the error is its result, taken by `finish`).
    fn write(&mut self, k: usize) {
        let sent = match self.pending[k].take_batch() {
            Ok(b) => self.batches.as_ref().is_some_and(|tx| tx.send((k, b)).is_ok()),
            Err(e) => {
                self.error = Some(io_error(e));
                false
            }
        };
        if !sent {
            self.batches = None;
        }
    }

    /// Write what is pending and close every file; what each bucket got.
    pub fn finish(mut self) -> std::io::Result<Vec<Spilled>> {
        for k in 0..self.pending.len() {
            if self.batches.is_some() && !self.pending[k].packet.is_empty() {
                self.write(k);
            }
        }
        self.batches = None; // (the writing thread finishes the files once the queue is empty)
        let written = self.writing.join().unwrap_or_else(|_| Err(std::io::Error::other("the spill's writing thread panicked")));
        match self.error.take() {
            Some(e) => Err(e),
            None => written.map(|()| self.spilled),
        }
    }
}

/// Hand each packet of the spill file at `path` to `f(number, stream, record)`, in the order
/// they were spilled (capture order).
pub fn read_spill(path: &Path, mut f: impl FnMut(u32, u32, Record<'_>)) -> std::io::Result<()> {
    let file = BufReader::with_capacity(1 << 16, File::open(path)?);
    let reader = FileReader::try_new(file, None).map_err(io_error)?;
    if reader.schema() != spill_schema() {
        return Err(std::io::Error::other(format!("{} is not an amqpcap spill file", path.display())));
    }
    for batch in reader {
        let b = batch.map_err(io_error)?;
        let col = |i: usize| b.column(i).as_any();
        let (Some(packet), Some(stream), Some(ts), Some(linktype), Some(origlen), Some(data)) = (
            col(0).downcast_ref::<UInt32Array>(),
            col(1).downcast_ref::<UInt32Array>(),
            col(2).downcast_ref::<Int64Array>(),
            col(3).downcast_ref::<UInt32Array>(),
            col(4).downcast_ref::<UInt32Array>(),
            col(5).downcast_ref::<BinaryArray>(),
        ) else {
            return Err(std::io::Error::other(format!("{}: a batch of other column types", path.display())));
        };
        for i in 0..b.num_rows() {
            let rec = Record { ts_ns: ts.value(i), linktype: linktype.value(i), origlen: origlen.value(i), data: data.value(i) };
            f(packet.value(i), stream.value(i), rec);
        }
    }
    Ok(())
}

/// Decode the bucket spilled into `path`: the tables of its connections, as a whole decode of
/// the capture (`capture_records` records in all) gives them for these connections. Its rows
/// of no connection are the anomalies past `max_anomalies`, summed per kind (caps count per
/// bucket). `packets`: the packets the split spilled into it ([`Spilled`]), for which its
/// `packets` columns are made at once ([`Ingest::reserve_packets`]; 0 if not known). With
/// `frames_sink`, the frames go there as they settle (`Ingest::set_frames_sink`).
pub fn decode_spilled(
    path: &Path,
    ports: &[u16],
    limits: &Limits,
    bodies: bool,
    capture_records: u32,
    packets: usize,
    frames_sink: Option<(TableSink<'_>, usize)>,
) -> std::io::Result<Output> {
    let mut ing = Ingest::new(ports, limits, bodies);
    ing.set_spilled(capture_records);
    ing.reserve_packets(packets);
    if let Some((sink, batch_rows)) = frames_sink {
        ing.set_frames_sink(sink, batch_rows);
    }
    read_spill(path, |number, stream, rec| ing.spilled_record(number, stream, rec))?;
    Ok(ing.finish(ReadSummary::default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_come_back_per_bucket_in_the_order_spilled() {
        let dir = std::env::temp_dir().join(format!("amqpcap-spill-test-{}", std::process::id()));
        let mut w = SpillWriter::create(&dir, 3).unwrap();
        let big = vec![7u8; SPILL_BATCH_BYTES]; // a batch of its own: the reader crosses batches
        let sent: Vec<(u32, u32, u32, Vec<u8>)> = (1..=40u32)
            .map(|n| (bucket_of(n / 2, 3), n, n / 2, if n == 20 { big.clone() } else { vec![n as u8; n as usize] }))
            .collect();
        for (_, number, stream, data) in &sent {
            let rec = Record { ts_ns: *number as i64 * 10, linktype: 1, origlen: data.len() as u32 + 4, data };
            w.push(*number, *stream, &rec);
        }
        let spilled = w.finish().unwrap();
        assert_eq!(spilled.iter().map(|s| s.packets).sum::<u64>(), 40);
        for k in 0..3 {
            let mut got = Vec::new();
            read_spill(&spill_path(&dir, k), |n, s, r| {
                assert_eq!((r.ts_ns, r.linktype, r.origlen as usize), (n as i64 * 10, 1, r.data.len() + 4));
                got.push((k, n, s, r.data.to_vec()));
            })
            .unwrap();
            let want: Vec<_> = sent.iter().filter(|x| x.0 == k).cloned().collect();
            assert_eq!(got, want);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_pending_rows_of_many_buckets_stay_within_the_budget() {
        assert_eq!(batch_bytes(15), SPILL_BATCH_BYTES);
        assert_eq!(batch_bytes(1024), SPILL_MIN_BATCH_BYTES);
        assert_eq!(batch_bytes(4096), SPILL_MIN_BATCH_BYTES);
        let buckets = 512;
        let dir = std::env::temp_dir().join(format!("amqpcap-spill-budget-{}", std::process::id()));
        let mut w = SpillWriter::create(&dir, buckets).unwrap();
        let data = vec![3u8; 1000];
        let (mut most, mut sent) = (0, vec![0u64; buckets as usize]);
        for n in 0..100_000u32 {
            let stream = n % 3000;
            w.push(n, stream, &Record { ts_ns: n as i64, linktype: 1, origlen: 1000, data: &data });
            sent[bucket_of(stream, buckets) as usize] += 1;
            most = most.max(w.pending_bytes());
        }
        // (100 MB pushed: with 1 MiB batches 512 buckets would have held up to 512 MiB)
        assert!(most <= SPILL_PENDING_BYTES, "{most} bytes pending");
        let spilled = w.finish().unwrap();
        for k in 0..buckets {
            let mut n = 0;
            read_spill(&spill_path(&dir, k), |_, _, r| (n += 1, assert_eq!(r.data.len(), 1000)).0).unwrap();
            assert_eq!((n, spilled[k as usize].packets), (sent[k as usize], sent[k as usize]));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_bucket_without_packets_is_an_empty_spill() {
        let dir = std::env::temp_dir().join(format!("amqpcap-spill-empty-{}", std::process::id()));
        SpillWriter::create(&dir, 1).unwrap().finish().unwrap();
        let mut n = 0;
        read_spill(&spill_path(&dir, 0), |_, _, _| n += 1).unwrap();
        assert_eq!(n, 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
