//! Capture files: pcap (µs and ns, either byte order), pcapng (several sections and interfaces,
//! per-interface link type and timestamp resolution, unknown blocks skipped), both optionally
//! gzip-compressed. Records are streamed through a bounded buffer, never loaded whole.

use std::fs::File;
use std::io::{self, Chain, Cursor, Read};
use std::sync::{Arc, Mutex};

use flate2::read::MultiGzDecoder;
use pcap_parser::pcapng::Block;
use pcap_parser::traits::PcapReaderIterator;
use pcap_parser::{create_reader, PcapBlockOwned, PcapError};

use crate::error::CaptureError;

/// Initial read buffer; grown for larger records up to `max_record_bytes`.
pub const BUFFER_BYTES: usize = 4 << 20;
const SNIFF_BYTES: usize = 64 << 10;

#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// Nanoseconds since the Unix epoch.
    pub ts_ns: i64,
    pub linktype: u32,
    /// On-wire length (Wireshark frame.len).
    pub origlen: u32,
    /// Captured bytes (frame.cap_len of them).
    pub data: &'a [u8],
}

#[derive(Debug, Clone, Copy)]
struct Interface {
    linktype: u32,
    /// Timestamp units per second.
    units_per_sec: u64,
    offset_s: i64,
}

#[derive(Debug, Default, Clone)]
pub struct ReadSummary {
    pub format: &'static str,
    pub compressed: bool,
    pub records: u64,
    /// The file ended inside a record or a gzip stream ended early.
    pub truncated: bool,
    pub warnings: Vec<String>,
    pub linktypes: Vec<u32>,
}

fn describe_start(b: &[u8]) -> String {
    if b.is_empty() {
        return "it is empty".into();
    }
    let hex: Vec<String> = b.iter().take(4).map(|x| format!("{x:02x}")).collect();
    let printable = b.iter().take(64).all(|&c| c.is_ascii_graphic() || c.is_ascii_whitespace());
    format!("it starts with {}{}", hex.join(" "), if printable { ", which looks like text" } else { "" })
}

/// The first four bytes of a pcap (µs and ns, either byte order, and the modified pcap of
/// Alexey Kuznetsov's patches) or a pcapng file.
const CAPTURE_MAGICS: [u32; 7] = [0xa1b2c3d4, 0xd4c3b2a1, 0xa1b23c4d, 0x4d3cb2a1, 0xa1b2cd34, 0x34cdb2a1, PCAPNG_MAGIC];
/// A pcapng file starts with a section header block, whose block type this is.
const PCAPNG_MAGIC: u32 = 0x0a0d0d0a;
/// The pcap file header (magic, versions, zone, accuracy, snaplen, link type).
const PCAP_HEADER_BYTES: usize = 24;
/// The fewest bytes of a pcapng section header block: type, length, byte-order magic,
/// versions, section length and the trailing length (draft-ietf-opsawg-pcapng §4.1).
const PCAPNG_SHB_MIN_BYTES: usize = 28;

fn is_capture_magic(b: &[u8]) -> bool {
    b.len() >= 4 && CAPTURE_MAGICS.contains(&u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// A whole input of fewer than 4 bytes that begins as a capture does: a file cut short.
fn is_cut_magic(b: &[u8]) -> bool {
    b.len() < 4 && CAPTURE_MAGICS.iter().any(|m| m.to_be_bytes().starts_with(b))
}

/// The input the capture is in: `the file`, or its decompressed content.
fn what_ends(compressed: bool) -> &'static str {
    if compressed {
        "the decompressed capture"
    } else {
        "the file"
    }
}

/// What the capture's first bytes were, as far as messages about its header need them.
struct Head {
    /// Its first bytes (up to 64).
    start: Vec<u8>,
    /// Its length, when it ends within the bytes sniffed (else it is longer than any header).
    len: Option<usize>,
    compressed: bool,
}

/// Why the capture header at the start of `head` cannot be read, in words: where the input
/// ends in it when it is cut (pcap-parser says `Incomplete(4)`, or, for a pcapng section header
/// block it cannot parse whole, that no header was recognized), else what is wrong with it.
fn header_error(name: &str, head: &Head, e: &PcapError<&[u8]>) -> String {
    let b = &head.start;
    let cut = |header: &str, size: String, n: usize| {
        format!("{name}: {} ends after {n} bytes, inside {header} ({size})", what_ends(head.compressed))
    };
    if b.len() >= 4 && u32::from_be_bytes([b[0], b[1], b[2], b[3]]) == PCAPNG_MAGIC {
        let header = "the pcapng section header block";
        // its length (bytes 4-8) is in the byte order its byte-order magic (bytes 8-12) shows
        let len = match (b.get(4..8), b.get(8..12)) {
            (Some(l), Some([0x1a, 0x2b, 0x3c, 0x4d])) => Some(u32::from_be_bytes([l[0], l[1], l[2], l[3]]) as usize),
            (Some(l), Some([0x4d, 0x3c, 0x2b, 0x1a])) => Some(u32::from_le_bytes([l[0], l[1], l[2], l[3]]) as usize),
            _ => None,
        };
        if let Some(n) = head.len.filter(|&n| n < len.unwrap_or(0).max(PCAPNG_SHB_MIN_BYTES)) {
            let size = match len {
                Some(l) if l >= PCAPNG_SHB_MIN_BYTES => format!("{l} bytes"),
                _ => format!("at least {PCAPNG_SHB_MIN_BYTES} bytes"),
            };
            return cut(header, size, n);
        }
        if b.len() >= 12 && len.is_none() {
            return format!("{name}: {header} has no byte-order magic (1a 2b 3c 4d, either way round)");
        }
        return format!("{name}: {header} cannot be read: {}", pcap_error_words(e));
    }
    if let Some(n) = head.len.filter(|&n| n < PCAP_HEADER_BYTES) {
        return cut("the pcap file header", format!("{PCAP_HEADER_BYTES} bytes"), n);
    }
    format!("{name}: the pcap file header cannot be read: {}", pcap_error_words(e))
}

/// A pcap-parser error in words, of what was being read (its Display shows the parser's input
/// bytes and nom's error kinds: `Internal parser error Verify, input [...]`).
fn pcap_error_words<I>(e: &PcapError<I>) -> &'static str {
    match e {
        PcapError::Eof => "the bytes end before it",
        PcapError::Incomplete(_) | PcapError::UnexpectedEof => "the bytes end inside it",
        PcapError::ReadError => "its bytes could not be read",
        PcapError::BufferTooSmall => "it is larger than the read buffer",
        PcapError::HeaderNotRecognized | PcapError::NomError(..) | PcapError::OwnedNomError(..) => {
            "a length, a version or a magic number in it is wrong"
        }
    }
}

/// The sniffed prefix, then the rest of the input.
type Source<'a> = Chain<Cursor<Vec<u8>>, Box<dyn Read + Send + 'a>>;
/// Where [`StopAtError`] notes the error that ended the bytes early.
type ReadError = Arc<Mutex<Option<String>>>;

/// Read up to `n` bytes, retrying short reads (gzip streams return small chunks).
fn read_prefix(r: &mut dyn Read, n: usize) -> io::Result<Vec<u8>> {
    let mut v = Vec::with_capacity(n);
    r.take(n as u64).read_to_end(&mut v)?;
    Ok(v)
}

/// Ends the stream at the first read error and remembers it: a gzip stream cut or damaged
/// after its first packets still has those packets, and the warning can say why reading
/// stopped (the capture parser only says that it did).
struct StopAtError<R> {
    inner: R,
    error: ReadError,
}

impl<R: Read> Read for StopAtError<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // Not locked while reading: the gzip decoder reads the file through another one.
        if self.error.lock().map_or(true, |e| e.is_some()) {
            return Ok(0);
        }
        loop {
            match self.inner.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    if let Ok(mut slot) = self.error.lock() {
                        slot.get_or_insert_with(|| e.to_string());
                    }
                    return Ok(0);
                }
                ok => return ok,
            }
        }
    }
}

/// Sniff the input's first bytes: gzip, pcap or pcapng, or an error naming what it is instead.
/// `name` stands for the input in messages (the path, for files). Returns the capture's bytes
/// (decompressed), its first bytes, and where a read error that ended the bytes early is noted.
fn open_source<'a>(mut input: impl Read + Send + 'a, name: &str) -> Result<(Source<'a>, Head, ReadError), CaptureError> {
    let head = read_prefix(&mut input, SNIFF_BYTES).map_err(|e| CaptureError::Unreadable(format!("cannot read {name}: {e}")))?;
    if head.is_empty() {
        return Err(CaptureError::Empty(format!("{name} is empty")));
    }
    let error = Arc::new(Mutex::new(None));
    let rest: Box<dyn Read + Send + 'a> = Box::new(StopAtError {
        inner: input,
        error: error.clone(),
    });
    if head.starts_with(&[0x1f, 0x8b]) {
        let gz = MultiGzDecoder::new(Cursor::new(head).chain(rest));
        let mut gz: Box<dyn Read + Send + 'a> = Box::new(StopAtError {
            inner: gz,
            error: error.clone(),
        });
        let inner = read_prefix(&mut gz, SNIFF_BYTES).unwrap_or_default();
        if inner.is_empty() {
            if let Some(e) = error.lock().ok().and_then(|e| e.clone()) {
                return Err(CaptureError::NotACapture(format!(
                    "{name} is gzip-compressed but cannot be decompressed: {e}"
                )));
            }
        }
        if is_cut_magic(&inner) {
            return Err(CaptureError::NotACapture(format!(
                "{name}: the decompressed capture ends after {} bytes, inside the 4 that say pcap or pcapng",
                inner.len()
            )));
        }
        if !is_capture_magic(&inner) {
            return Err(CaptureError::NotACapture(format!(
                "{name} is gzip-compressed but holds no pcap or pcapng capture ({})",
                describe_start(&inner)
            )));
        }
        let head = sniffed(&inner, true);
        return Ok((Cursor::new(inner).chain(gz), head, error));
    }
    if is_cut_magic(&head) {
        return Err(CaptureError::NotACapture(format!(
            "{name}: the file ends after {} bytes, inside the 4 that say pcap or pcapng",
            head.len()
        )));
    }
    if !is_capture_magic(&head) {
        return Err(CaptureError::NotACapture(format!("{name} is not a pcap or pcapng capture ({})", describe_start(&head))));
    }
    let sniffed = sniffed(&head, false);
    Ok((Cursor::new(head).chain(rest), sniffed, error))
}

fn sniffed(head: &[u8], compressed: bool) -> Head {
    Head { start: head[..head.len().min(64)].to_vec(), len: (head.len() < SNIFF_BYTES).then_some(head.len()), compressed }
}

/// The fewest bytes a pcapng block has: its type and its total length, before and after the body
/// (pcapng, draft-ietf-opsawg-pcapng §3.1). pcap-parser 0.17 checks a Process Information Block's
/// length against 4 and then subtracts 12 from it (an overflow: found by the `capture_merge`
/// fuzz target), so a shorter block is refused here, before it is parsed.
const PCAPNG_MIN_BLOCK_BYTES: u64 = 12;

/// Length a record claims, read from its header, to tell "large record" from "garbage".
fn claimed_record_len(data: &[u8], pcapng: bool, big_endian: bool) -> Option<u64> {
    let at = if pcapng { 4 } else { 8 };
    let b: [u8; 4] = data.get(at..at + 4)?.try_into().ok()?;
    Some(if big_endian { u32::from_be_bytes(b) } else { u32::from_le_bytes(b) } as u64)
}

/// Nanoseconds since the epoch of a pcapng timestamp: `raw` units of 1/`units_per_sec` s plus
/// the interface's `if_tsoffset` seconds. Instants that int64 nanoseconds cannot hold (before
/// 1678 or after 2262) are clamped, not wrapped, and never i64::MIN, which pandas reads as NaT.
fn pcapng_ts_ns(raw: u64, units_per_sec: u64, offset_s: i64) -> i64 {
    let ns = raw as i128 * 1_000_000_000 / units_per_sec as i128 + offset_s as i128 * 1_000_000_000;
    ns.clamp(i64::MIN as i128 + 1, i64::MAX as i128) as i64
}

/// Open the capture file at `path` for [`read_capture_from`].
pub fn open_capture(path: &str) -> Result<File, CaptureError> {
    File::open(path).map_err(|e| CaptureError::Unreadable(format!("cannot open {path}: {e}")))
}

/// Stream every record of the capture at `path` to `f`.
pub fn read_capture(path: &str, max_record_bytes: u64, f: impl FnMut(Record<'_>)) -> Result<ReadSummary, CaptureError> {
    read_capture_from(open_capture(path)?, path, max_record_bytes, f)
}

/// Stream every record of the capture read from `input` (a file, a byte slice) to `f`; `name`
/// stands for the input in error messages and warnings.
pub fn read_capture_from(input: impl Read + Send, name: &str, max_record_bytes: u64, f: impl FnMut(Record<'_>)) -> Result<ReadSummary, CaptureError> {
    read_capture_buffered(input, name, max_record_bytes, BUFFER_BYTES, f)
}

/// [`read_capture_from`] with another initial read buffer (grown for larger records as
/// usual). The fuzz harnesses use a small one: allocating 4 MiB per input would dominate their
/// run time, and fuzz-sized inputs then reach the buffer-growing paths.
pub fn read_capture_buffered(
    input: impl Read + Send,
    name: &str,
    max_record_bytes: u64,
    buffer_bytes: usize,
    mut f: impl FnMut(Record<'_>),
) -> Result<ReadSummary, CaptureError> {
    let mut reader = RecordReader::open(input, name, max_record_bytes, buffer_bytes)?;
    while reader.advance() {
        f(reader.record());
    }
    reader.finish()
}

fn note_linktype(s: &mut ReadSummary, lt: u32) {
    if !s.linktypes.contains(&lt) {
        s.linktypes.push(lt);
    }
}

/// The packet record last read by [`RecordReader::advance`], owned: a merge of several files
/// holds one per file while it picks the earliest.
#[derive(Debug, Default)]
struct Current {
    ts_ns: i64,
    linktype: u32,
    origlen: u32,
    data: Vec<u8>,
}

/// One capture read record by record (pull, not push), so that several can be merged by
/// time (`capture::merge`). Errors inside the file end it early with a warning in the summary,
/// as in [`read_capture_from`].
pub struct RecordReader<'a> {
    name: String,
    reader: Box<dyn PcapReaderIterator + Send + 'a>,
    read_error: ReadError,
    summary: ReadSummary,
    interfaces: Vec<Interface>,
    legacy: Option<(u32, u64)>, // (linktype, units per second)
    big_endian: bool,
    pcapng: bool,
    buffer_size: usize,
    max_record_bytes: u64,
    current: Current,
    ended: bool,
}

impl<'a> RecordReader<'a> {
    /// Sniff and open `input`; `name` stands for it in messages. Nothing is read past the
    /// capture header until [`advance`](Self::advance).
    pub fn open(input: impl Read + Send + 'a, name: &str, max_record_bytes: u64, buffer_bytes: usize) -> Result<Self, CaptureError> {
        let (source, head, read_error) = open_source(input, name)?;
        let compressed = head.compressed;
        let reader = match create_reader(buffer_bytes, source) {
            Ok(r) => r,
            Err(PcapError::Eof) => return Err(CaptureError::Empty(format!("{name} is empty"))),
            Err(e) => return Err(CaptureError::NotACapture(header_error(name, &head, &e))),
        };
        Ok(RecordReader {
            name: name.to_string(),
            reader,
            read_error,
            summary: ReadSummary { compressed, ..Default::default() },
            interfaces: Vec::new(),
            legacy: None,
            big_endian: false,
            pcapng: false,
            buffer_size: buffer_bytes,
            max_record_bytes,
            current: Current::default(),
            ended: false,
        })
    }

    /// The record read by the last successful [`advance`](Self::advance).
    pub fn record(&self) -> Record<'_> {
        let c = &self.current;
        Record { ts_ns: c.ts_ns, linktype: c.linktype, origlen: c.origlen, data: &c.data }
    }

    /// Packet records read so far (the number of the current one, 1-based, in this file).
    pub fn records(&self) -> u64 {
        self.summary.records
    }


    fn stop(&mut self, warning: String) -> bool {
        self.summary.truncated = true;
        self.summary.warnings.push(warning);
        self.ended = true;
        false
    }

    /// The length the next pcapng block claims, when it is less than any block has (the first
    /// block, the section header, is told by its magic and parsed whole by pcap-parser).
    fn undersized_block(&self) -> Option<u64> {
        if !self.pcapng {
            return None;
        }
        claimed_record_len(self.reader.data(), true, self.big_endian).filter(|&n| n < PCAPNG_MIN_BLOCK_BYTES)
    }

    /// Read up to the next packet record (see [`record`](Self::record)); false at the end of
    /// the file or where it cannot be read further (the warning is in the summary).
    pub fn advance(&mut self) -> bool {
        while !self.ended {
            if let Some(claimed) = self.undersized_block() {
                let why = format!(
                    "corrupt data after {} packets (a block claims {claimed} bytes; a pcapng block has at least {PCAPNG_MIN_BLOCK_BYTES}); the rest of the file is skipped",
                    self.summary.records
                );
                return self.stop(why);
            }
            match self.reader.next() {
                Ok((offset, block)) => {
                    // The block borrows the reader: what it yields is copied into fields
                    // other than `reader` (`take`), then the reader moves on.
                    let last_ts = self.current.ts_ns;
                    let (summary, current) = (&mut self.summary, &mut self.current);
                    let mut take = |ts_ns: i64, linktype: u32, origlen: u32, data: &[u8]| {
                        summary.records += 1;
                        (current.ts_ns, current.linktype, current.origlen) = (ts_ns, linktype, origlen);
                        current.data.clear();
                        current.data.extend_from_slice(data);
                    };
                    match block {
                        PcapBlockOwned::LegacyHeader(h) => {
                            summary.format = "pcap";
                            self.big_endian = h.is_bigendian();
                            let units = if h.is_nanosecond_precision() { 1_000_000_000 } else { 1_000_000 };
                            let lt = h.network.0 as u32;
                            self.legacy = Some((lt, units));
                            note_linktype(summary, lt);
                        }
                        PcapBlockOwned::Legacy(b) => {
                            let (lt, units) = self.legacy.unwrap_or((1, 1_000_000));
                            let ts = b.ts_sec as i64 * 1_000_000_000 + b.ts_usec as i64 * (1_000_000_000 / units as i64);
                            let data = &b.data[..(b.caplen as usize).min(b.data.len())];
                            take(ts, lt, b.origlen, data);
                            self.reader.consume(offset);
                            return true;
                        }
                        PcapBlockOwned::NG(block) => {
                            summary.format = "pcapng";
                            self.pcapng = true;
                            match block {
                                Block::SectionHeader(shb) => {
                                    self.big_endian = shb.big_endian();
                                    self.interfaces.clear();
                                }
                                Block::InterfaceDescription(idb) => {
                                    let lt = idb.linktype.0 as u32;
                                    let units = idb.ts_resolution().unwrap_or(1_000_000);
                                    self.interfaces.push(Interface { linktype: lt, units_per_sec: units, offset_s: idb.ts_offset() });
                                    note_linktype(summary, lt);
                                }
                                Block::EnhancedPacket(epb) => {
                                    let (lt, ts) = match self.interfaces.get(epb.if_id as usize) {
                                        Some(i) => {
                                            let raw = ((epb.ts_high as u64) << 32) | epb.ts_low as u64;
                                            (i.linktype, pcapng_ts_ns(raw, i.units_per_sec, i.offset_s))
                                        }
                                        None => (u32::MAX, last_ts),
                                    };
                                    let data = &epb.data[..(epb.caplen as usize).min(epb.data.len())];
                                    take(ts, lt, epb.origlen, data);
                                    self.reader.consume(offset);
                                    return true;
                                }
                                Block::SimplePacket(spb) => {
                                    let lt = self.interfaces.first().map_or(u32::MAX, |i| i.linktype);
                                    let snap = spb.data.len().min(spb.origlen as usize);
                                    take(last_ts, lt, spb.origlen, &spb.data[..snap]);
                                    self.reader.consume(offset);
                                    return true;
                                }
                                _ => {} // statistics, name resolution, custom and unknown blocks
                            }
                        }
                    }
                    self.reader.consume(offset);
                }
                Err(PcapError::Eof) => self.ended = true,
                Err(PcapError::Incomplete(_)) => {
                    if let Err(e) = self.reader.refill() {
                        let why = format!("reading stopped after {} packets: {}", self.summary.records, pcap_error_words(&e));
                        return self.stop(why);
                    }
                }
                Err(PcapError::UnexpectedEof) => {
                    return self.stop(format!(
                        "the capture ends in the middle of a record after {} packets (tcpdump killed?); decoded what is there",
                        self.summary.records
                    ));
                }
                Err(PcapError::BufferTooSmall) => {
                    let claimed = claimed_record_len(self.reader.data(), self.pcapng, self.big_endian).unwrap_or(u64::MAX);
                    let next = self.summary.records + 1;
                    if claimed > self.max_record_bytes || (claimed as usize) < self.buffer_size / 2 {
                        return self.stop(format!(
                            "record {next} claims {claimed} bytes (cap {}); the rest of the file is skipped",
                            self.max_record_bytes
                        ));
                    }
                    self.buffer_size = (claimed as usize + 65536).max(self.buffer_size * 2);
                    if !self.reader.grow(self.buffer_size) {
                        return self.stop(format!("record {next} of {claimed} bytes could not be buffered"));
                    }
                    if let Err(e) = self.reader.refill() {
                        let why = format!("reading stopped after {} packets: {}", self.summary.records, pcap_error_words(&e));
                        return self.stop(why);
                    }
                }
                Err(e) => {
                    let what = match e {
                        PcapError::ReadError => "the next bytes could not be read",
                        _ => "a length, a version or a magic number in the next block or record is wrong",
                    };
                    let why = format!("corrupt data after {} packets ({what}); the rest of the file is skipped", self.summary.records);
                    return self.stop(why);
                }
            }
        }
        false
    }

    /// What was read: format, counts, warnings. An error when the input held no capture.
    pub fn finish(self) -> Result<ReadSummary, CaptureError> {
        let mut s = self.summary;
        if let Some(e) = self.read_error.lock().ok().and_then(|mut e| e.take()) {
            // The bytes ended early because of this error: it, not the cut record, is the news.
            if s.truncated {
                s.warnings.pop();
            }
            s.truncated = true;
            let compressed = s.compressed;
            let hint = if compressed { "gzip: " } else { "" };
            s.warnings.push(format!(
                "reading stopped after {} packets: {hint}{e} ({}the packets before are decoded)",
                s.records,
                if compressed { "the gzip stream ends early or is corrupt; " } else { "" }
            ));
        }
        if s.records == 0 && s.format.is_empty() {
            return Err(CaptureError::NotACapture(format!("{}: no capture header", self.name)));
        }
        if s.records == 0 && !s.truncated {
            s.warnings.push("the capture holds no packets".into());
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found while fuzzing (the capture_reader harness on a crafted pcapng): an if_tsoffset
    /// of 2^62 s overflowed the multiplication (a panic in debug builds, a wrapped timestamp in
    /// release builds).
    /// The path entry point and the byte-slice one read the same records, and name the input
    /// the same way in errors.
    #[test]
    fn file_and_bytes_read_the_same() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/gzipped.pcap.gz");
        let facts = std::fs::read_to_string(format!("{path}.tshark.json")).unwrap();
        let at = facts.find("\"packets\":").unwrap() + "\"packets\":".len();
        let tshark_packets: usize = facts[at..].trim_start().split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap();
        let collect = |v: &mut Vec<(i64, u32, u32, Vec<u8>)>, r: Record<'_>| v.push((r.ts_ns, r.linktype, r.origlen, r.data.to_vec()));
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let sa = read_capture(path, 16 << 20, |r| collect(&mut a, r)).unwrap();
        let bytes = std::fs::read(path).unwrap();
        let sb = read_capture_from(&bytes[..], path, 16 << 20, |r| collect(&mut b, r)).unwrap();
        assert_eq!(a.len(), tshark_packets);
        assert!(a == b);
        assert_eq!(format!("{sa:?}"), format!("{sb:?}"));
        assert!(sa.compressed);
        assert_eq!(read_capture_from(&b""[..], "x.pcap", 1 << 20, |_| {}).unwrap_err(), CaptureError::Empty("x.pcap is empty".into()));
        let missing = "/nonexistent/x.pcap";
        assert!(matches!(read_capture(missing, 1 << 20, |_| {}), Err(CaptureError::Unreadable(m)) if m.starts_with("cannot open /nonexistent/x.pcap")));
    }

    /// A pcapng block claiming fewer bytes than a block has stops the read with a warning; it
    /// never reaches pcap-parser, which subtracted 12 from a Process Information Block's length
    /// (an overflow panic in builds with overflow checks, the fuzz targets' and the tests').
    #[test]
    fn a_pcapng_block_shorter_than_any_block_is_corrupt_data() {
        let mut f = Vec::new();
        for word in [0x0A0D_0D0Au32, 28, 0x1A2B_3C4D, 1, u32::MAX, u32::MAX, 28] {
            f.extend_from_slice(&word.to_le_bytes()); // section header: version 1.0, length unknown
        }
        f.extend_from_slice(&0x8000_0001u32.to_le_bytes()); // a Process Information Block ...
        f.extend_from_slice(&5u32.to_le_bytes()); // ... of 5 bytes
        f.extend_from_slice(&[0; 16]);
        let s = read_capture_from(&f[..], "x.pcapng", 1 << 20, |_| panic!("no packet")).unwrap();
        assert_eq!(s.format, "pcapng");
        assert!(s.truncated);
        assert_eq!(
            s.warnings,
            ["corrupt data after 0 packets (a block claims 5 bytes; a pcapng block has at least 12); the rest of the file is skipped"]
        );
    }

    #[test]
    fn pcapng_timestamps_clamp_instead_of_overflowing() {
        // 1.5 s in microseconds, 10 s offset
        assert_eq!(pcapng_ts_ns(1_500_000, 1_000_000, 10), 11_500_000_000);
        // nanosecond resolution, negative offset
        assert_eq!(pcapng_ts_ns(2_000_000_001, 1_000_000_000, -1), 1_000_000_001);
        assert_eq!(pcapng_ts_ns(0, 1_000_000, 1 << 62), i64::MAX);
        assert_eq!(pcapng_ts_ns(0, 1_000_000, i64::MIN), i64::MIN + 1);
        assert_eq!(pcapng_ts_ns(u64::MAX, 1, 0), i64::MAX);
    }
}
