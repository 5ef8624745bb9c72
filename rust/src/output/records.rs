//! The `records` table (docs/tables.md): every record of the capture, TCP or not — its packet
//! number, time, on-wire length, and the file of the set and number there it came from. A row
//! is settled as soon as the record is read, so the rows can leave the core in batches while
//! the capture is still being read ([`RecordsBuilder::take_rows`]): `amqpcap ingest` writes
//! them as they come, and memory does not grow with the capture.

use crate::output::tables::{Column, Table};

pub struct RecordsBuilder {
    /// This decode outputs the rows (a pass of `amqpcap ingest` that does not only counts).
    keep: bool,
    /// Rows not handed out yet; the first is packet `first_number`.
    first_number: u32,
    ts: Vec<i64>,
    frame_len: Vec<i32>,
    source_file: Vec<i16>,
    source_packet: Vec<i32>,
    /// Records read so far, and per file of the set.
    count: u32,
    per_file: Vec<i32>,
    pub(crate) first_ts: Option<i64>,
    pub(crate) last_ts: Option<i64>,
}

impl RecordsBuilder {
    pub fn new(keep: bool) -> Self {
        RecordsBuilder {
            keep,
            first_number: 1,
            ts: Vec::new(),
            frame_len: Vec::new(),
            source_file: Vec::new(),
            source_packet: Vec::new(),
            count: 0,
            per_file: Vec::new(),
            first_ts: None,
            last_ts: None,
        }
    }

    /// The record read next, from file `file` of the set (0 for one file); its packet number
    /// (1-based, in the merged capture).
    pub(crate) fn push(&mut self, ts_ns: i64, origlen: u32, file: usize) -> u32 {
        self.count += 1;
        self.first_ts.get_or_insert(ts_ns);
        self.last_ts = Some(ts_ns);
        if file >= self.per_file.len() {
            self.per_file.resize(file + 1, 0);
        }
        self.per_file[file] += 1;
        if self.keep {
            self.ts.push(ts_ns);
            self.frame_len.push(origlen as i32);
            self.source_file.push(file as i16);
            self.source_packet.push(self.per_file[file]);
        }
        self.count
    }

    /// Records read so far.
    pub(crate) fn count(&self) -> u32 {
        self.count
    }

    /// Rows held (not handed out yet).
    pub(crate) fn rows(&self) -> usize {
        self.ts.len()
    }

    /// The rows held, as the table's columns; the builder holds none after (numbering goes on).
    pub(crate) fn take_rows(&mut self) -> Table {
        let first = self.first_number as i32;
        let n = self.ts.len() as i32;
        self.first_number += n as u32;
        vec![
            ("packet", Column::I32((first..first + n).collect())),
            ("ts", Column::Ts(std::mem::take(&mut self.ts))),
            ("frame_len", Column::I32(std::mem::take(&mut self.frame_len))),
            ("source_file", Column::I16(std::mem::take(&mut self.source_file))),
            ("source_packet", Column::I32(std::mem::take(&mut self.source_packet))),
        ]
    }

    /// Room for the next `rows` rows at once: a decode that hands its rows out in batches
    /// ([`RecordsBuilder::take_rows`]) makes each batch in columns of its final size, instead of
    /// growing them from nothing again, copying and faulting in each doubling.
    pub(crate) fn reserve(&mut self, rows: usize) {
        if self.keep {
            self.ts.reserve_exact(rows);
            self.frame_len.reserve_exact(rows);
            self.source_file.reserve_exact(rows);
            self.source_packet.reserve_exact(rows);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_taken_in_batches_number_on_and_count_per_file() {
        let mut r = RecordsBuilder::new(true);
        for (ts, file) in [(10, 0), (11, 1), (12, 0)] {
            r.push(ts, 60, file);
        }
        let first = r.take_rows();
        r.push(13, 70, 1);
        let second = r.take_rows();
        let col = |t: &Table, name: &str| match &t.iter().find(|c| c.0 == name).unwrap().1 {
            Column::I32(v) => v.clone(),
            Column::I16(v) => v.iter().map(|&x| x as i32).collect(),
            Column::Ts(v) => v.iter().map(|&x| x as i32).collect(),
            _ => unreachable!(),
        };
        assert_eq!(col(&first, "packet"), [1, 2, 3]);
        assert_eq!(col(&first, "source_packet"), [1, 1, 2]);
        assert_eq!((col(&second, "packet"), col(&second, "source_packet"), col(&second, "ts")), (vec![4], vec![2], vec![13]));
        assert_eq!((r.count(), r.first_ts, r.last_ts), (4, Some(10), Some(13)));
    }

    #[test]
    fn a_decode_that_does_not_output_them_only_counts() {
        let mut r = RecordsBuilder::new(false);
        r.push(5, 60, 0);
        assert_eq!((r.count(), r.rows(), r.first_ts), (1, 0, Some(5)));
    }
}
