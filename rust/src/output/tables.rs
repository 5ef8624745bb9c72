//! Column builders for the output tables. Rows are appended column-wise; `finish` hands whole
//! vectors to the binding layer, which moves them into numpy arrays without copying.

use std::collections::HashMap;


use ahash::RandomState;

/// One finished column, in the compact dtype it is handed to numpy with.
pub enum Column {
    I8(Vec<i8>),
    I16(Vec<i16>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    Bool(Vec<bool>),
    /// Nanoseconds since the epoch.
    Ts(Vec<i64>),
    NullU8(Vec<u8>, Vec<bool>),
    NullI16(Vec<i16>, Vec<bool>),
    NullI32(Vec<i32>, Vec<bool>),
    NullU32(Vec<u32>, Vec<bool>),
    NullI64(Vec<i64>, Vec<bool>),
    NullU64(Vec<u64>, Vec<bool>),
    NullBool(Vec<bool>, Vec<bool>),
    NullTs(Vec<i64>, Vec<bool>),
    /// Dictionary-encoded text: codes into `dict`, -1 for missing.
    Str(Vec<i32>, Vec<String>),
    /// `Str` with fewer than 127 distinct values, already in the 1-byte codes pandas keeps for
    /// such a categorical. Sparse argument columns are spread straight into this width: with
    /// i32 codes the ~25 text columns of a million-frame table held ~80 MB more at the peak.
    Str8(Vec<i8>, Vec<String>),
    /// `Str` of a table handed out a batch at a time while its rows still come
    /// ([`BuilderRows::text_wide`]): its Arrow keys are 32-bit whatever the dictionary's size,
    /// so that every batch has one schema while the dictionary grows (a file's batches must:
    /// the `correlation_id`s of `fixtures/rpc-nodelay.pcap` outgrow 8-bit keys in its second
    /// thousand frames).
    StrWide(Vec<i32>, Vec<String>),
    /// A fixed vocabulary (direction, frame type, anomaly kind): codes into the names, -1 missing.
    Cat(Vec<i8>, Vec<&'static str>),
    /// Free text for the small tables (connections, anomaly details), dictionary-encoded like
    /// `Str` (a million connections share a few user names) but handed to pandas as `str`
    /// objects, not a categorical.
    Text(Vec<i32>, Vec<String>),
    /// Byte strings (message bodies): all concatenated, and where each row's ends.
    Bytes(Vec<u8>, Vec<usize>),
    /// A column most rows leave empty, as its builder kept it ([`Sparse`], [`SparseStr`]).
    Spread(Spread),
}

/// A sparse column over `len` rows: the rows that have a value (ascending) and their values.
/// Arrow gets it without a dense copy (`arrow_out`: zeroed buffers with the values set in
/// them); numpy and the rest read it as [`Spread::dense`] makes it.
pub struct Spread {
    pub len: usize,
    pub rows: Vec<u32>,
    pub values: SpreadValues,
}

/// The values of a [`Spread`], one per row that has one.
pub enum SpreadValues {
    U8(Vec<u8>),
    I16(Vec<i16>),
    I32(Vec<i32>),
    U32(Vec<u32>),
    I64(Vec<i64>),
    U64(Vec<u64>),
    Bool(Vec<bool>),
    /// Nanoseconds since the epoch.
    Ts(Vec<i64>),
    /// Codes into the texts; `wide`: [`Column::StrWide`]'s 32-bit keys whatever the texts' number.
    Text { codes: Vec<i32>, texts: Vec<String>, wide: bool },
}

impl Spread {
    /// The column with every row (a `Null*` column, or `Str8`/`Str`/`StrWide` text).
    pub fn dense(self) -> Column {
        let Spread { len, rows, values } = self;
        let valid = || filled(len, &rows, std::iter::repeat(true), false);
        macro_rules! nullable {
            ($values:expr, $column:path) => {
                $column(filled(len, &rows, $values, Default::default()), valid())
            };
        }
        match values {
            SpreadValues::U8(v) => nullable!(v, Column::NullU8),
            SpreadValues::I16(v) => nullable!(v, Column::NullI16),
            SpreadValues::I32(v) => nullable!(v, Column::NullI32),
            SpreadValues::U32(v) => nullable!(v, Column::NullU32),
            SpreadValues::I64(v) => nullable!(v, Column::NullI64),
            SpreadValues::U64(v) => nullable!(v, Column::NullU64),
            SpreadValues::Bool(v) => nullable!(v, Column::NullBool),
            SpreadValues::Ts(v) => nullable!(v, Column::NullTs),
            SpreadValues::Text { codes, texts, wide: false } if texts.len() < STR8_MAX_CATEGORIES => {
                Column::Str8(filled(len, &rows, codes.into_iter().map(|c| c as i8), -1), texts)
            }
            SpreadValues::Text { codes, texts, wide } => {
                let dense = filled(len, &rows, codes, -1);
                if wide {
                    Column::StrWide(dense, texts)
                } else {
                    Column::Str(dense, texts)
                }
            }
        }
    }
}

/// `len` values, `empty` but at `rows` (ascending, each below `len`), which take `values`.
pub(crate) fn filled<T: Copy>(len: usize, rows: &[u32], values: impl IntoIterator<Item = T>, empty: T) -> Vec<T> {
    let mut out = vec![empty; len];
    for (&r, v) in rows.iter().zip(values) {
        out[r as usize] = v;
    }
    out
}

pub type Table = Vec<(&'static str, Column)>;

/// Interns byte strings as UTF-8 text (lossy), so equal texts share one code. Keyed by a hash
/// of the bytes, checked against the stored text, so each distinct string is stored once.
#[derive(Default)]
pub struct Interner {
    by_hash: HashMap<u64, i32, RandomState>,
    /// Strings whose hash slot is taken by another string, and invalid UTF-8 (whose text
    /// differs from its bytes).
    overflow: HashMap<Box<[u8]>, i32, RandomState>,
    /// Text of the invalid-UTF-8 strings, so their replacement text maps to one code.
    lossy_text: HashMap<String, i32, RandomState>,
    hasher: RandomState,
    values: Vec<String>,
}

impl Interner {
    pub fn code(&mut self, b: &[u8]) -> i32 {
        let h = self.hasher.hash_one(b);
        if let Some(&c) = self.by_hash.get(&h) {
            if self.values[c as usize].as_bytes() == b {
                return c;
            }
        }
        if let Some(&c) = self.overflow.get(b) {
            return c;
        }
        let c = match std::str::from_utf8(b) {
            Ok(text) => self.add(text.to_owned()),
            Err(_) => {
                let text = String::from_utf8_lossy(b).into_owned();
                match self.lossy_text.get(&text) {
                    Some(&c) => c,
                    None => {
                        let c = self.add(text.clone());
                        self.lossy_text.insert(text, c);
                        c
                    }
                }
            }
        };
        if self.values[c as usize].as_bytes() == b && !self.by_hash.contains_key(&h) {
            self.by_hash.insert(h, c);
        } else {
            self.overflow.insert(b.into(), c);
        }
        c
    }

    fn add(&mut self, text: String) -> i32 {
        // A valid string equal to an earlier lossy replacement text shares its code.
        if let Some(&c) = self.lossy_text.get(&text) {
            return c;
        }
        let c = self.values.len() as i32;
        self.values.push(text);
        c
    }
}

#[derive(Default)]
pub struct StrCol {
    codes: Vec<i32>,
    dict: Interner,
}

impl StrCol {
    pub fn push(&mut self, v: Option<&[u8]>) {
        let c = match v {
            Some(b) => self.dict.code(b),
            None => -1,
        };
        self.codes.push(c);
    }
    pub fn finish(self) -> Column {
        Column::Str(self.codes, self.dict.values)
    }
    /// Replace the value of an already pushed row.
    pub fn set(&mut self, row: usize, v: &[u8]) {
        self.codes[row] = self.dict.code(v);
    }
    pub fn finish_text(self) -> Column {
        Column::Text(self.codes, self.dict.values)
    }
}

pub struct OptCol<T> {
    pub(crate) values: Vec<T>,
    pub(crate) valid: Vec<bool>,
}

impl<T> Default for OptCol<T> {
    fn default() -> Self {
        OptCol { values: Vec::new(), valid: Vec::new() }
    }
}

impl<T: Default + Copy> OptCol<T> {
    pub fn push(&mut self, v: Option<T>) {
        self.values.push(v.unwrap_or_default());
        self.valid.push(v.is_some());
    }
    pub fn keep(&mut self, keep: &[bool]) {
        keep_rows(&mut self.values, keep);
        keep_rows(&mut self.valid, keep);
    }
    pub fn reserve_exact(&mut self, rows: usize) {
        self.values.reserve_exact(rows);
        self.valid.reserve_exact(rows);
    }
}

impl OptCol<i16> {
    pub fn finish(self) -> Column {
        Column::NullI16(self.values, self.valid)
    }
}
impl OptCol<i32> {
    pub fn finish(self) -> Column {
        Column::NullI32(self.values, self.valid)
    }
}
impl OptCol<u32> {
    pub fn finish(self) -> Column {
        Column::NullU32(self.values, self.valid)
    }
}
impl OptCol<i64> {
    pub fn finish(self) -> Column {
        Column::NullI64(self.values, self.valid)
    }
}
impl OptCol<u64> {
    pub fn finish(self) -> Column {
        Column::NullU64(self.values, self.valid)
    }
}
impl OptCol<bool> {
    pub fn finish(self) -> Column {
        Column::NullBool(self.values, self.valid)
    }
}

/// Where a row belongs: internal stream index (= Wireshark tcp.stream) and the side it came from.
#[derive(Debug, Clone, Copy)]
pub struct RowOrigin {
    pub stream: u32,
    /// Sent by endpoint A of the conversation (the first packet's source).
    pub from_a: bool,
}

/// Per-row direction codes (0 = c2s, 1 = s2c) from each stream's client side.
pub fn direction_codes(streams: &[u32], from_a: &[bool], a_is_client: &[bool]) -> Vec<i8> {
    streams
        .iter()
        .zip(from_a)
        .map(|(&s, &a)| if a == a_is_client[s as usize] { 0 } else { 1 })
        .collect()
}

pub const DIRECTIONS: [&str; 2] = ["c2s", "s2c"];

/// Keep only the rows whose stream is selected.
pub fn keep_rows<T: Copy>(v: &mut Vec<T>, keep: &[bool]) {
    let mut i = 0;
    v.retain(|_| {
        let k = keep[i];
        i += 1;
        k
    });
}

/// Put the rows of `t` in order of its i32 column `key`, keeping tied rows in their order (a
/// stable sort). Nothing is moved when they are in order already, the usual case: the frames
/// (by `packet`) and bodies (by `last_packet`) tables are out of order only where a capture gap
/// was given up and the frames after it were released in the packet that completed them,
/// earlier than frames already emitted. Settled here, so that every consumer of the tables
/// gets them in order.
pub fn sort_rows_by(t: &mut Table, key: &str) {
    let Some((_, Column::I32(k))) = t.iter().find(|(name, _)| *name == key) else {
        panic!("the table has no i32 column {key}")
    };
    if k.is_sorted() {
        return;
    }
    let mut order: Vec<u32> = (0..k.len() as u32).collect();
    order.sort_by_key(|&i| k[i as usize]);
    for (_, c) in t.iter_mut() {
        c.take(&order);
    }
}

/// The `stream` column of a table made by a decode of spilled packets, from its local stream
/// numbers to the capture's (`global[local]`).
pub fn renumber_streams(t: &mut Table, global: &[u32]) {
    for (name, col) in t.iter_mut() {
        if *name != "stream" {
            continue;
        }
        match col {
            Column::I32(v) => v.iter_mut().for_each(|s| *s = global[*s as usize] as i32),
            Column::NullI32(v, valid) => {
                for (s, &ok) in v.iter_mut().zip(valid.iter()) {
                    if ok {
                        *s = global[*s as usize] as i32;
                    }
                }
            }
            _ => unreachable!("stream columns are int32"),
        }
    }
}

fn take_vec<T: Copy>(v: &mut Vec<T>, order: &[u32]) {
    *v = order.iter().map(|&i| v[i as usize]).collect();
}

impl Column {
    /// Reorder the rows: row `i` becomes the old row `order[i]`.
    pub fn take(&mut self, order: &[u32]) {
        if let Column::Spread(_) = self {
            let Column::Spread(spread) = std::mem::replace(self, Column::I8(Vec::new())) else { unreachable!() };
            *self = spread.dense();
        }
        match self {
            Column::I8(v) | Column::Cat(v, _) | Column::Str8(v, _) => take_vec(v, order),
            Column::I16(v) => take_vec(v, order),
            Column::I32(v) | Column::Str(v, _) | Column::StrWide(v, _) | Column::Text(v, _) => take_vec(v, order),
            Column::I64(v) | Column::Ts(v) => take_vec(v, order),
            Column::Bool(v) => take_vec(v, order),
            Column::NullU8(v, m) => (take_vec(v, order), take_vec(m, order)).1,
            Column::NullI16(v, m) => (take_vec(v, order), take_vec(m, order)).1,
            Column::NullI32(v, m) => (take_vec(v, order), take_vec(m, order)).1,
            Column::NullU32(v, m) => (take_vec(v, order), take_vec(m, order)).1,
            Column::NullI64(v, m) | Column::NullTs(v, m) => (take_vec(v, order), take_vec(m, order)).1,
            Column::NullU64(v, m) => (take_vec(v, order), take_vec(m, order)).1,
            Column::NullBool(v, m) => (take_vec(v, order), take_vec(m, order)).1,
            Column::Bytes(data, ends) => {
                let mut out = Vec::with_capacity(data.len());
                let mut out_ends = Vec::with_capacity(ends.len());
                for &i in order {
                    let i = i as usize;
                    let start = if i == 0 { 0 } else { ends[i - 1] };
                    out.extend_from_slice(&data[start..ends[i]]);
                    out_ends.push(out.len());
                }
                *data = out;
                *ends = out_ends;
            }
            Column::Spread(_) => unreachable!("made dense above"),
        }
    }

    /// Whether the column's kind can hold a missing value: Arrow's `nullable`. A column that
    /// cannot is declared so, which Parquet writes as a REQUIRED column, without definition
    /// levels (their encoding and the validity bits had 12% of an ingest's CPU samples in `perf`).
    /// By kind, not by the rows at hand: every batch and bucket of a table has one schema.
    pub fn holds_nulls(&self) -> bool {
        !matches!(
            self,
            Column::I8(_) | Column::I16(_) | Column::I32(_) | Column::I64(_) | Column::Bool(_) | Column::Ts(_)
                | Column::Bytes(..)
        )
    }

    /// Give back the spare capacity of the builders' vectors before handing them to numpy
    /// (a growing Vec holds up to twice what it uses).
    pub fn shrink(&mut self) {
        match self {
            Column::I8(v) => v.shrink_to_fit(),
            Column::I16(v) => v.shrink_to_fit(),
            Column::I32(v) => v.shrink_to_fit(),
            Column::I64(v) | Column::Ts(v) => v.shrink_to_fit(),
            Column::Bool(v) => v.shrink_to_fit(),
            Column::NullU8(v, m) => (v.shrink_to_fit(), m.shrink_to_fit()).1,
            Column::NullI16(v, m) => (v.shrink_to_fit(), m.shrink_to_fit()).1,
            Column::NullI32(v, m) => (v.shrink_to_fit(), m.shrink_to_fit()).1,
            Column::NullU32(v, m) => (v.shrink_to_fit(), m.shrink_to_fit()).1,
            Column::NullI64(v, m) | Column::NullTs(v, m) => (v.shrink_to_fit(), m.shrink_to_fit()).1,
            Column::NullU64(v, m) => (v.shrink_to_fit(), m.shrink_to_fit()).1,
            Column::NullBool(v, m) => (v.shrink_to_fit(), m.shrink_to_fit()).1,
            Column::Str(c, _) | Column::StrWide(c, _) => c.shrink_to_fit(),
            Column::Str8(c, _) => c.shrink_to_fit(),
            Column::Cat(c, _) => c.shrink_to_fit(),
            Column::Text(c, _) => c.shrink_to_fit(),
            Column::Bytes(d, e) => (d.shrink_to_fit(), e.shrink_to_fit()).1,
            Column::Spread(s) => {
                s.rows.shrink_to_fit();
                match &mut s.values {
                    SpreadValues::U8(v) => v.shrink_to_fit(),
                    SpreadValues::I16(v) => v.shrink_to_fit(),
                    SpreadValues::I32(v) => v.shrink_to_fit(),
                    SpreadValues::U32(v) => v.shrink_to_fit(),
                    SpreadValues::I64(v) | SpreadValues::Ts(v) => v.shrink_to_fit(),
                    SpreadValues::U64(v) => v.shrink_to_fit(),
                    SpreadValues::Bool(v) => v.shrink_to_fit(),
                    SpreadValues::Text { codes, .. } => codes.shrink_to_fit(),
                }
            }
        }
    }
}

/// A builder's rows, copied out by range, put in another order or dropped from the front: how
/// a builder hands out its settled rows a batch at a time (`output::frames::take_rows_before`)
/// without spreading every column over every row at once.
pub trait BuilderRows {
    /// Rows `start..end` as a builder of their own (its rows numbered from 0).
    fn rows_slice(&self, start: usize, end: usize) -> Self;
    /// Put the rows in `order`: row `i` becomes the old row `order[i]`; `inverse` is the
    /// inverse permutation (`inverse[order[i]] == i`).
    fn reorder(&mut self, order: &[u32], inverse: &[u32]);
    /// Remove rows `..n` (the others numbered from 0 again); what is not a row (a text
    /// column's dictionary) stays.
    fn drop_front(&mut self, n: usize);
    /// Make text columns with wide codes whatever their dictionary's size: tables made a batch
    /// at a time while rows are still coming then share one schema (see [`SparseStr::finish`]).
    fn text_wide(&mut self) {}
}

impl<T: Copy> BuilderRows for Vec<T> {
    fn rows_slice(&self, start: usize, end: usize) -> Self {
        self[start..end].to_vec()
    }
    fn reorder(&mut self, order: &[u32], _: &[u32]) {
        take_vec(self, order);
    }
    fn drop_front(&mut self, n: usize) {
        self.drain(..n);
    }
}

impl<T: Copy> BuilderRows for OptCol<T> {
    fn rows_slice(&self, start: usize, end: usize) -> Self {
        OptCol { values: self.values.rows_slice(start, end), valid: self.valid.rows_slice(start, end) }
    }
    fn reorder(&mut self, order: &[u32], inverse: &[u32]) {
        self.values.reorder(order, inverse);
        self.valid.reorder(order, inverse);
    }
    fn drop_front(&mut self, n: usize) {
        self.values.drop_front(n);
        self.valid.drop_front(n);
    }
}

/// The entries of a sparse column (rows ascending) for the rows `start..end`: their range.
fn entries_in(rows: &[u32], start: usize, end: usize) -> std::ops::Range<usize> {
    rows.partition_point(|&r| (r as usize) < start)..rows.partition_point(|&r| (r as usize) < end)
}

/// A sparse column's entries of the rows from `n` on, those rows numbered from 0 again.
fn drop_entries_before<T>(rows: &mut Vec<u32>, values: &mut Vec<T>, n: usize) {
    let k = rows.partition_point(|&r| (r as usize) < n);
    rows.drain(..k);
    values.drain(..k);
    rows.iter_mut().for_each(|r| *r -= n as u32);
}

/// A sparse column's entries (row, value) moved to their rows' new places, ascending again.
fn reorder_entries<T: Copy>(rows: &mut Vec<u32>, values: &mut Vec<T>, inverse: &[u32]) {
    let mut moved: Vec<(u32, T)> = rows.iter().map(|&r| inverse[r as usize]).zip(values.iter().copied()).collect();
    moved.sort_by_key(|e| e.0);
    (*rows, *values) = moved.into_iter().unzip();
}

/// A column that most rows leave empty (method arguments, content properties): only the rows
/// that have a value are stored while decoding, in ascending order (a row's value is pushed
/// with the row: [`BuilderRows::rows_slice`] finds a range of rows by it); `finish` hands them
/// on as they are ([`Column::Spread`]), to be spread over all rows by whoever reads them.
pub struct Sparse<T> {
    rows: Vec<u32>,
    values: Vec<T>,
}

impl<T> Default for Sparse<T> {
    fn default() -> Self {
        Sparse { rows: Vec::new(), values: Vec::new() }
    }
}

impl<T: Copy + Default> Sparse<T> {
    #[inline]
    pub fn push(&mut self, row: usize, v: Option<T>) {
        if let Some(v) = v {
            debug_assert!(self.rows.last().is_none_or(|&r| (r as usize) < row), "sparse rows ascend");
            self.rows.push(row as u32);
            self.values.push(v);
        }
    }
}

impl<T: Copy> BuilderRows for Sparse<T> {
    fn rows_slice(&self, start: usize, end: usize) -> Self {
        let r = entries_in(&self.rows, start, end);
        Sparse {
            rows: self.rows[r.clone()].iter().map(|&row| row - start as u32).collect(),
            values: self.values[r].to_vec(),
        }
    }
    fn reorder(&mut self, _: &[u32], inverse: &[u32]) {
        reorder_entries(&mut self.rows, &mut self.values, inverse);
    }
    fn drop_front(&mut self, n: usize) {
        drop_entries_before(&mut self.rows, &mut self.values, n);
    }
}

macro_rules! sparse_finish {
    ($t:ty, $variant:ident) => {
        impl Sparse<$t> {
            /// The column over `n` rows.
            pub fn finish(self, n: usize) -> Column {
                Column::Spread(Spread { len: n, rows: self.rows, values: SpreadValues::$variant(self.values) })
            }
        }
    };
}
sparse_finish!(u8, U8);
sparse_finish!(i16, I16);
sparse_finish!(i32, I32);
sparse_finish!(u32, U32);
sparse_finish!(u64, U64);
sparse_finish!(bool, Bool);

impl Sparse<i64> {
    /// The column over `n` rows: integers.
    pub fn finish(self, n: usize) -> Column {
        Column::Spread(Spread { len: n, rows: self.rows, values: SpreadValues::I64(self.values) })
    }
    /// The column over `n` rows: nanoseconds since the epoch.
    pub fn finish_ts(self, n: usize) -> Column {
        Column::Spread(Spread { len: n, rows: self.rows, values: SpreadValues::Ts(self.values) })
    }
}

/// pandas keeps a categorical's codes as int8 below this many categories (`coerce_indexer_dtype`).
pub const STR8_MAX_CATEGORIES: usize = i8::MAX as usize;

/// The integer width pandas keeps a categorical's codes in for `categories` categories (int8,
/// int16 or int32), so that numpy codes and Arrow dictionary keys are handed over in it as they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeWidth {
    I8,
    I16,
    I32,
}

pub fn code_width(categories: usize) -> CodeWidth {
    if categories < STR8_MAX_CATEGORIES {
        CodeWidth::I8
    } else if categories < i16::MAX as usize {
        CodeWidth::I16
    } else {
        CodeWidth::I32
    }
}

/// Dense codes of a small dictionary in the width of [`Column::Str8`].
pub fn str_column(codes: Vec<i32>, dict: Vec<String>) -> Column {
    if dict.len() < STR8_MAX_CATEGORIES {
        Column::Str8(codes.into_iter().map(|c| c as i8).collect(), dict)
    } else {
        Column::Str(codes, dict)
    }
}

/// Sparse dictionary-encoded text (its rows ascending, as [`Sparse`]'s).
#[derive(Default)]
pub struct SparseStr {
    rows: Vec<u32>,
    codes: Vec<i32>,
    dict: Interner,
    /// Wide codes whatever the dictionary's size ([`BuilderRows::text_wide`]).
    wide: bool,
}

impl SparseStr {
    #[inline]
    pub fn push(&mut self, row: usize, v: Option<&[u8]>) {
        if let Some(b) = v {
            debug_assert!(self.rows.last().is_none_or(|&r| (r as usize) < row), "sparse rows ascend");
            self.rows.push(row as u32);
            let c = self.dict.code(b);
            self.codes.push(c);
        }
    }
    /// The column over `n` rows.
    pub fn finish(self, n: usize) -> Column {
        let values = SpreadValues::Text { codes: self.codes, texts: self.dict.values, wide: self.wide };
        Column::Spread(Spread { len: n, rows: self.rows, values })
    }
}

impl BuilderRows for SparseStr {
    /// (With every text of the column: a slice's codes are the column's, so that each slice
    /// is made with the same dictionary, in the same code width.)
    fn rows_slice(&self, start: usize, end: usize) -> Self {
        let r = entries_in(&self.rows, start, end);
        SparseStr {
            rows: self.rows[r.clone()].iter().map(|&row| row - start as u32).collect(),
            codes: self.codes[r].to_vec(),
            dict: Interner { values: self.dict.values.clone(), ..Default::default() },
            wide: self.wide,
        }
    }
    fn reorder(&mut self, _: &[u32], inverse: &[u32]) {
        reorder_entries(&mut self.rows, &mut self.codes, inverse);
    }
    fn drop_front(&mut self, n: usize) {
        drop_entries_before(&mut self.rows, &mut self.codes, n);
    }
    fn text_wide(&mut self) {
        self.wide = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_sorted_by_the_key_with_ties_kept_in_order() {
        let mut t: Table = vec![
            ("packet", Column::I32(vec![5, 3, 5, 1])),
            ("size", Column::NullI64(vec![50, 30, 51, 10], vec![true, false, true, true])),
            ("body", Column::Bytes(b"aaaaabbbcccccd".to_vec(), vec![5, 8, 13, 14])),
        ];
        sort_rows_by(&mut t, "packet");
        let [(_, Column::I32(p)), (_, Column::NullI64(v, m)), (_, Column::Bytes(d, e))] = &t[..] else { panic!() };
        assert_eq!(p, &[1, 3, 5, 5]);
        assert_eq!((v.as_slice(), m.as_slice()), (&[10, 30, 50, 51][..], &[true, false, true, true][..]));
        assert_eq!((d.as_slice(), e.as_slice()), (&b"dbbbaaaaaccccc"[..], &[1, 4, 9, 14][..]));
    }
}
