//! A capture set too large for the page cache: its pages handed back to the kernel as they are
//! read. A capture is read once, front to back, and a page of it is of no use once parsed; yet
//! the kernel keeps it cached. When the set is a large share of the machine's memory, those pages
//! crowd out what the ingest needs next (the spill files it reads back, the dataset it writes),
//! and the kernel reclaims pages inside the ingest's own system calls. Measured on the 100M-packet
//! ring (18 GB on a machine of 24 GB) in docs/dataset.md, "A capture set too large for the page
//! cache".
//!
//! A set of at most [`MEMORY_SHARE_DIVISOR`]th of the memory keeps its pages: reading the
//! capture or the set whole sits well in the page cache, and a second command over it reads
//! from memory.

use std::fs::File;
use std::io::{self, Read};

/// A set of capture files larger than the physical memory divided by this (a third) has its
/// pages dropped behind the reader: the ingest's page cache then holds the capture, its spill
/// (about as large) and the dataset, and a third is where those begin to overflow it.
pub const MEMORY_SHARE_DIVISOR: u64 = 3;

/// How much is read between two hand-backs: one system call per this many bytes.
pub const STEP_BYTES: u64 = 64 << 20;

/// Whether a set of `set_bytes` of files is read dropping its pages behind, on a machine of
/// `memory_bytes` (0: unknown, and then they are kept).
pub fn drops_behind(set_bytes: u64, memory_bytes: u64) -> bool {
    memory_bytes > 0 && set_bytes > memory_bytes / MEMORY_SHARE_DIVISOR
}

/// This machine's physical memory, 0 where it cannot be told.
pub fn physical_memory_bytes() -> u64 {
    #[cfg(unix)]
    {
        // SAFETY: sysconf only reads system configuration.
        let (pages, page) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
        if pages > 0 && page > 0 {
            return pages as u64 * page as u64;
        }
    }
    0
}

/// A capture file, read front to back, that hands the pages read so far back to the kernel every
/// [`STEP_BYTES`] and at its end when `dropping` (else a plain file).
pub struct CaptureFile {
    file: File,
    dropping: bool,
    read_to: u64,
    dropped_to: u64,
}

impl CaptureFile {
    pub fn new(file: File, dropping: bool) -> Self {
        CaptureFile { file, dropping, read_to: 0, dropped_to: 0 }
    }

    /// The pages of the file's first `read_to` bytes handed back (POSIX_FADV_DONTNEED drops
    /// clean cached pages; Linux only, elsewhere nothing).
    fn drop_read(&mut self) {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            // SAFETY: an advice on a file descriptor this struct owns; it changes no memory.
            unsafe { libc::posix_fadvise(self.file.as_raw_fd(), 0, self.read_to as libc::off_t, libc::POSIX_FADV_DONTNEED) };
        }
        self.dropped_to = self.read_to;
    }
}

impl Read for CaptureFile {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read(buf)?;
        self.read_to += n as u64;
        if self.dropping && (self.read_to - self.dropped_to >= STEP_BYTES || (n == 0 && self.read_to > self.dropped_to)) {
            self.drop_read();
        }
        Ok(n)
    }
}

/// The pages of `path` in the page cache (mincore over a mapping of it): what the tests check.
#[cfg(all(test, target_os = "linux"))]
pub(crate) fn cached_pages(path: &std::path::Path) -> usize {
    use std::os::fd::AsRawFd;
    let f = File::open(path).unwrap();
    let len = f.metadata().unwrap().len() as usize;
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let mut resident = vec![0u8; len.div_ceil(page)];
    // SAFETY: a read-only shared mapping of a file of `len` bytes, unmapped below; mincore
    // writes one byte per page into `resident`, which has that many.
    unsafe {
        let map = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, f.as_raw_fd(), 0);
        assert_ne!(map, libc::MAP_FAILED);
        assert_eq!(libc::mincore(map, len, resident.as_mut_ptr()), 0);
        libc::munmap(map, len);
    }
    resident.iter().filter(|&&b| b & 1 == 1).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn only_a_set_past_a_share_of_memory_drops_its_pages() {
        let gib = 1u64 << 30;
        assert!(!drops_behind(8 * gib, 24 * gib));
        assert!(drops_behind(8 * gib + 1, 24 * gib));
        assert!(drops_behind(18 * gib, 24 * gib));
        assert!(!drops_behind(18 * gib, 0));
        assert!(physical_memory_bytes() > 0);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_dropping_file_leaves_none_of_its_pages_cached_and_a_plain_one_all() {
        let dir = std::env::temp_dir().join(format!("amqpcap-drop-behind-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("capture");
        let bytes: Vec<u8> = (0..(STEP_BYTES + (3 << 20))).map(|i| (i % 251) as u8).collect();
        let mut f = File::create(&path).unwrap();
        f.write_all(&bytes).unwrap();
        f.sync_all().unwrap(); // (dirty pages are not dropped: written back first)
        let pages = bytes.len().div_ceil(unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize);
        for dropping in [false, true] {
            let mut read = Vec::new();
            CaptureFile::new(File::open(&path).unwrap(), dropping).read_to_end(&mut read).unwrap();
            assert!(read == bytes);
            let cached = cached_pages(&path);
            if dropping {
                assert_eq!(cached, 0, "{cached} of {pages} pages still cached");
            } else {
                assert_eq!(cached, pages);
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
