//! Several capture files read as one capture, merged by timestamp the way Wireshark's
//! `mergecap` merges them (its default, chronological mode): the next record is always the
//! earliest of the files' next records, a tie goes to the file listed first, and each file's
//! own record order is kept (a file whose timestamps step back is not re-sorted). A tcpdump
//! ring (`-C`, `-G`) read this way is the one capture it was cut from, so a connection that
//! spans ring files is one conversation.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::capture::drop_behind::{self, CaptureFile};
use crate::capture::reader::{open_capture, ReadSummary, Record, RecordReader, BUFFER_BYTES};
use crate::error::CaptureError;

/// The smallest read buffer one file of a set gets: the set shares [`BUFFER_BYTES`], so a
/// ring of 50 files does not hold 50 full buffers (each still grows for a larger record).
const MIN_FILE_BUFFER_BYTES: usize = 256 << 10;

/// What became of one file of the set.
#[derive(Debug, Clone, Default)]
pub struct FileRead {
    pub name: String,
    /// What was read; `None` when the file was skipped (`error` says why).
    pub read: Option<ReadSummary>,
    pub error: Option<CaptureError>,
    pub first_ts_ns: Option<i64>,
    pub last_ts_ns: Option<i64>,
}

/// The set as one capture: totals over the files read, and each file's own account.
#[derive(Debug, Clone, Default)]
pub struct MergeSummary {
    /// `format` is the files' common format, or "mixed"; `warnings` name their file when the
    /// set has more than one.
    pub read: ReadSummary,
    pub files: Vec<FileRead>,
}

struct Open<'a> {
    index: usize,
    reader: RecordReader<'a>,
}

/// One input of a set: its name and what reads it (or why it cannot be opened).
pub type Source<'a> = (String, Result<Box<dyn Read + Send + 'a>, CaptureError>);

/// Open every input that can be read. An unusable one is an error when `strict`, else it is
/// skipped and named in a warning. None usable: the error of a single input as it is, or one
/// naming every input's.
fn open_all<'a>(sources: Vec<Source<'a>>, max_record_bytes: u64, strict: bool, buffer_bytes: usize) -> Result<(Vec<Open<'a>>, Vec<FileRead>), CaptureError> {
    let buffer = file_buffer_bytes(buffer_bytes, sources.len());
    let mut open = Vec::new();
    let mut files = Vec::new();
    for (index, (name, input)) in sources.into_iter().enumerate() {
        match input.and_then(|r| RecordReader::open(r, &name, max_record_bytes, buffer)) {
            Ok(reader) => open.push(Open { index, reader }),
            Err(e) if strict => return Err(e),
            Err(e) => files.push(FileRead { name: name.clone(), error: Some(e), ..Default::default() }),
        }
        if files.len() == index {
            files.push(FileRead { name, ..Default::default() });
        }
    }
    if open.is_empty() {
        return Err(none_usable(&files));
    }
    Ok((open, files))
}

/// Each file's initial read buffer when a set of `files` shares `total` bytes.
pub fn file_buffer_bytes(total: usize, files: usize) -> usize {
    (total / files.max(1)).max(MIN_FILE_BUFFER_BYTES.min(total))
}

fn none_usable(files: &[FileRead]) -> CaptureError {
    let errors: Vec<&CaptureError> = files.iter().filter_map(|f| f.error.as_ref()).collect();
    match errors.as_slice() {
        [only] if files.len() == 1 => (*only).clone(),
        _ => CaptureError::Unreadable(format!(
            "none of the {} files can be read: {}",
            files.len(),
            errors.iter().map(|e| e.message()).collect::<Vec<_>>().join("; ")
        )),
    }
}

/// How far reading has got, for a progress display in another thread: bytes read from the
/// files (compressed bytes for gzip files, so it ends at the files' total size) and records.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    pub bytes: Arc<AtomicU64>,
    pub records: Arc<AtomicU64>,
}

/// A file that adds what is read from it to a [`Progress`].
struct Counted {
    file: CaptureFile,
    bytes: Arc<AtomicU64>,
}

impl Read for Counted {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read(buf)?;
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// Stream the records of the files at `paths`, merged by time, to `f(record, file index)`. A set
/// too large for the page cache hands its pages back as it is read ([`drop_behind`]).
pub fn read_captures(
    paths: &[String],
    max_record_bytes: u64,
    strict: bool,
    progress: &Progress,
    f: impl FnMut(Record<'_>, usize),
) -> Result<MergeSummary, CaptureError> {
    let set_bytes = paths.iter().filter_map(|p| std::fs::metadata(p).ok()).map(|m| m.len()).sum();
    let dropping = drop_behind::drops_behind(set_bytes, drop_behind::physical_memory_bytes());
    read_files(paths, dropping, max_record_bytes, strict, progress, f)
}

/// [`read_captures`], its pages handed back as they are read when `dropping`.
fn read_files(
    paths: &[String],
    dropping: bool,
    max_record_bytes: u64,
    strict: bool,
    progress: &Progress,
    mut f: impl FnMut(Record<'_>, usize),
) -> Result<MergeSummary, CaptureError> {
    let sources = paths
        .iter()
        .map(|p| {
            let counted = |file: File| {
                Box::new(Counted { file: CaptureFile::new(file, dropping), bytes: progress.bytes.clone() }) as Box<dyn Read + Send>
            };
            (p.clone(), open_capture(p).map(counted))
        })
        .collect();
    let records = &progress.records;
    read_sources(sources, max_record_bytes, strict, BUFFER_BYTES, |rec, file| {
        records.fetch_add(1, Ordering::Relaxed);
        f(rec, file)
    })
}

/// [`read_captures`] over any readers (byte slices in the fuzz harness), sharing
/// `buffer_bytes` of initial read buffer.
pub fn read_sources<'a>(
    sources: Vec<Source<'a>>,
    max_record_bytes: u64,
    strict: bool,
    buffer_bytes: usize,
    mut f: impl FnMut(Record<'_>, usize),
) -> Result<MergeSummary, CaptureError> {
    let (mut open, mut files) = open_all(sources, max_record_bytes, strict, buffer_bytes)?;
    // Heap of (next record's time, position in `open`): the earliest first, ties to the
    // file listed first (its position, as `open` keeps the listed order).
    let mut heap = BinaryHeap::with_capacity(open.len());
    for (at, o) in open.iter_mut().enumerate() {
        if o.reader.advance() {
            heap.push(Reverse((o.reader.record().ts_ns, at)));
        }
    }
    while let Some(Reverse((_, at))) = heap.pop() {
        let o = &mut open[at];
        let rec = o.reader.record();
        let file = &mut files[o.index];
        file.first_ts_ns.get_or_insert(rec.ts_ns);
        file.last_ts_ns = Some(rec.ts_ns);
        f(rec, o.index);
        if o.reader.advance() {
            heap.push(Reverse((o.reader.record().ts_ns, at)));
        }
    }
    for o in open {
        let file = &mut files[o.index];
        match o.reader.finish() {
            Ok(read) => file.read = Some(read),
            Err(e) if strict => return Err(e),
            Err(e) => file.error = Some(e),
        }
    }
    if files.iter().all(|f| f.read.is_none()) {
        return Err(none_usable(&files));
    }
    Ok(MergeSummary { read: combined(&files), files })
}

/// The files' reads as one: counts summed, warnings prefixed with the file's name when the
/// set has several (and a line for each file skipped).
fn combined(files: &[FileRead]) -> ReadSummary {
    let several = files.len() > 1;
    let mut s = ReadSummary::default();
    for f in files {
        let Some(r) = &f.read else {
            // The core's messages name the file already ("cannot open X: ...", "X is empty").
            let why = f.error.as_ref().map_or("", |e| e.message());
            s.warnings.push(format!("{why}; the file is skipped (--strict stops instead)"));
            continue;
        };
        s.format = if s.format.is_empty() || s.format == r.format { r.format } else { "mixed" };
        s.compressed |= r.compressed;
        s.records += r.records;
        s.truncated |= r.truncated;
        for w in &r.warnings {
            s.warnings.push(if several { format!("{}: {w}", f.name) } else { w.clone() });
        }
        for &lt in &r.linktypes {
            if !s.linktypes.contains(&lt) {
                s.linktypes.push(lt);
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A set read dropping its pages gives the records it gives otherwise, and leaves none of its
    /// files' pages in the page cache.
    #[test]
    fn a_set_read_dropping_its_pages_reads_the_same_records() {
        // (copies, written back to the disk: the pages of a file not yet written back are not
        // dropped, and no other test reads these)
        let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures");
        let dir = std::env::temp_dir().join(format!("amqpcap-merge-dropping-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let paths: Vec<String> = ["ten-consumers.pcap", "prefetch-consumers.pcap"]
            .iter()
            .map(|name| {
                let copy = dir.join(name);
                std::fs::copy(format!("{fixtures}/{name}"), &copy).unwrap();
                File::open(&copy).unwrap().sync_all().unwrap();
                copy.to_string_lossy().into_owned()
            })
            .collect();
        let read = |dropping: bool| {
            let mut records = Vec::new();
            read_files(&paths, dropping, 16 << 20, true, &Progress::default(), |r, file| {
                records.push((file, r.ts_ns, r.linktype, r.origlen, r.data.to_vec()))
            })
            .unwrap();
            records
        };
        let kept = read(false);
        assert!(kept.len() > 1000);
        assert!(read(true) == kept);
        #[cfg(target_os = "linux")]
        for p in &paths {
            assert_eq!(drop_behind::cached_pages(std::path::Path::new(p)), 0, "{p}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
