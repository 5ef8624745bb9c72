//! Column builders for the output tables. Rows are appended column-wise; `finish` hands whole
//! vectors to the binding layer, which moves them into numpy arrays without copying.

use std::collections::HashMap;

use ahash::RandomState;

/// One finished column, in the compact dtype it is handed to numpy with.
pub enum Column {
    I32(Vec<i32>),
    I64(Vec<i64>),
    Bool(Vec<bool>),
    /// Nanoseconds since the epoch.
    Ts(Vec<i64>),
    NullI32(Vec<i32>, Vec<bool>),
    NullI64(Vec<i64>, Vec<bool>),
    NullU64(Vec<u64>, Vec<bool>),
    NullBool(Vec<bool>, Vec<bool>),
    NullTs(Vec<i64>, Vec<bool>),
    /// Dictionary-encoded text: codes into `dict`, -1 for missing.
    Str(Vec<i32>, Vec<String>),
    /// A fixed vocabulary (direction, frame type, anomaly kind): codes into the names, -1 missing.
    Cat(Vec<i8>, Vec<&'static str>),
    /// A few rows of free text (connections, anomalies details).
    Text(Vec<Option<String>>),
}

pub type Table = Vec<(&'static str, Column)>;

/// Interns byte strings as UTF-8 text (lossy), so equal texts share one code.
#[derive(Default)]
pub struct Interner {
    by_bytes: HashMap<Box<[u8]>, i32, RandomState>,
    by_text: HashMap<String, i32, RandomState>,
    values: Vec<String>,
}

impl Interner {
    pub fn code(&mut self, b: &[u8]) -> i32 {
        if let Some(&c) = self.by_bytes.get(b) {
            return c;
        }
        let text = String::from_utf8_lossy(b).into_owned();
        let c = match self.by_text.get(&text) {
            Some(&c) => c,
            None => {
                let c = self.values.len() as i32;
                self.values.push(text.clone());
                self.by_text.insert(text, c);
                c
            }
        };
        self.by_bytes.insert(b.into(), c);
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
}

impl OptCol<i32> {
    pub fn finish(self) -> Column {
        Column::NullI32(self.values, self.valid)
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
