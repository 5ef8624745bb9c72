//! CSV text of an Arrow record batch, byte for byte what pyarrow's CSV writer
//! (`pyarrow.csv.write_csv` with its default options) writes for the column types every table
//! has once `amqpcap.table_files.as_csv_columns` has made timestamps text: integers in decimal,
//! booleans `true`/`false`, text in double quotes (a quote doubled), dictionary text as its
//! value, a missing value as an empty cell, a header of quoted names, `\n` after each row.
//! Columns given as `raw` are text written as it is, unquoted: numbers Arrow made text (its
//! cast of a double to a string writes what its CSV writer writes). Nanosecond timestamps are
//! written as `as_csv_columns` makes them text (`written_values.iso_utc_ns`: ISO 8601 UTC with
//! nine decimals and `Z`, quoted as text is), here rather than by numpy before (0.8 s of the
//! 7.3 s of CPU `frames -o X.csv` took on 7 copies of flow-control). A column of another type
//! is [`Unsupported`]: the caller writes that table with pyarrow. On the 2.9M-row frames table
//! of 7 copies of `fixtures/flow-control.pcap.gz`, in slices of 25,000 rows, one thread: 0.67-0.83
//! s here against 2.1-2.8 s for pyarrow's writer.

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Int16Type, Int32Type, Int64Type, Int8Type, TimestampNanosecondType, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_buffer::NullBuffer;
use arrow_schema::{DataType, TimeUnit};

/// A column whose type this writer does not write (its name and type).
#[derive(Debug)]
pub struct Unsupported(pub String);

/// One column, ready to write a row's cell of: its values, and which rows have one.
struct Cells<'a> {
    values: Values<'a>,
    valid: Option<NullBuffer>,
    /// No row has a value: only the column's separators are written.
    empty: bool,
}

enum Values<'a> {
    Signed(Vec<i64>),
    /// Text written as it is.
    Raw(Texts<'a>),
    Unsigned(Vec<u64>),
    Bool(arrow_array::BooleanArray),
    Text(Texts<'a>),
    /// Nanoseconds since the epoch (UTC).
    Time(&'a [i64]),
    /// Every row missing (Arrow's null type).
    Empty,
}

/// Text values by row: plain, or a dictionary's keys into its values.
enum Texts<'a> {
    Plain(&'a arrow_array::StringArray),
    Large(&'a arrow_array::LargeStringArray),
    Keys(Vec<usize>, Box<Texts<'a>>),
}

impl Texts<'_> {
    fn get(&self, row: usize) -> &str {
        match self {
            Texts::Plain(a) => a.value(row),
            Texts::Large(a) => a.value(row),
            Texts::Keys(k, v) => v.get(k[row]),
        }
    }
}

/// A text array's values: plain or large offsets.
fn plain(a: &ArrayRef) -> Option<Texts<'_>> {
    match a.data_type() {
        DataType::Utf8 => Some(Texts::Plain(a.as_string::<i32>())),
        DataType::LargeUtf8 => Some(Texts::Large(a.as_string::<i64>())),
        _ => None,
    }
}

fn signed(a: &ArrayRef) -> Option<Vec<i64>> {
    Some(match a.data_type() {
        DataType::Int8 => a.as_primitive::<Int8Type>().values().iter().map(|&v| v as i64).collect(),
        DataType::Int16 => a.as_primitive::<Int16Type>().values().iter().map(|&v| v as i64).collect(),
        DataType::Int32 => a.as_primitive::<Int32Type>().values().iter().map(|&v| v as i64).collect(),
        DataType::Int64 => a.as_primitive::<Int64Type>().values().to_vec(),
        _ => return None,
    })
}

fn unsigned(a: &ArrayRef) -> Option<Vec<u64>> {
    Some(match a.data_type() {
        DataType::UInt8 => a.as_primitive::<UInt8Type>().values().iter().map(|&v| v as u64).collect(),
        DataType::UInt16 => a.as_primitive::<UInt16Type>().values().iter().map(|&v| v as u64).collect(),
        DataType::UInt32 => a.as_primitive::<UInt32Type>().values().iter().map(|&v| v as u64).collect(),
        DataType::UInt64 => a.as_primitive::<UInt64Type>().values().to_vec(),
        _ => return None,
    })
}

/// A dictionary of text: each row's key as an index into its values (none when no row is
/// written, `empty`).
fn keys(a: &ArrayRef, empty: bool) -> Option<Texts<'_>> {
    let DataType::Dictionary(key, _) = a.data_type() else { return None };
    macro_rules! by {
        ($t:ty) => {{
            let d = a.as_dictionary::<$t>();
            let k = if empty { Vec::new() } else { d.keys().values().iter().map(|&k| k as usize).collect() };
            Texts::Keys(k, Box::new(plain(d.values())?))
        }};
    }
    Some(match **key {
        DataType::Int8 => by!(Int8Type),
        DataType::Int16 => by!(Int16Type),
        DataType::Int32 => by!(Int32Type),
        _ => return None,
    })
}

fn cells<'a>(name: &str, a: &'a ArrayRef, raw: bool) -> Result<Cells<'a>, Unsupported> {
    let empty = a.logical_null_count() == a.len();
    let values = if raw {
        match plain(a) {
            Some(t) => Values::Raw(t),
            None => return Err(Unsupported(format!("{name}: {}, not text", a.data_type()))),
        }
    } else if let Some(v) = signed(a) {
        Values::Signed(v)
    } else if let Some(v) = unsigned(a) {
        Values::Unsigned(v)
    } else {
        match a.data_type() {
            DataType::Boolean => Values::Bool(a.as_boolean().clone()),
            DataType::Utf8 | DataType::LargeUtf8 => Values::Text(plain(a).expect("text")),
            DataType::Timestamp(TimeUnit::Nanosecond, _) => Values::Time(a.as_primitive::<TimestampNanosecondType>().values()),
            DataType::Null => Values::Empty,
            // (a categorical with no category: every row missing)
            DataType::Dictionary(_, value) if **value == DataType::Null => Values::Empty,
            other => match keys(a, empty) {
                Some(t) => Values::Text(t),
                None => return Err(Unsupported(format!("{name}: {other}"))),
            },
        }
    };
    // (a dictionary's: its keys' and its values')
    Ok(Cells { values, valid: a.logical_nulls(), empty })
}

/// `text` in double quotes, a quote in it doubled.
fn quoted(out: &mut Vec<u8>, text: &str) {
    out.push(b'"');
    let b = text.as_bytes();
    if b.contains(&b'"') {
        for &c in b {
            if c == b'"' {
                out.push(b'"');
            }
            out.push(c);
        }
    } else {
        out.extend_from_slice(b);
    }
    out.push(b'"');
}

/// The proleptic Gregorian (year, month, day) of `days` since 1970-01-01 (H. Hinnant's
/// civil_from_days: years of 400 years from 0000-03-01, so that the leap day ends a year).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365], from March 1st
    let mp = (5 * doy + 2) / 153; // [0, 11], March first
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// `digits` decimal digits of `v`, zero-padded.
fn padded(out: &mut Vec<u8>, v: u64, digits: usize) {
    let mut text = [b'0'; 20];
    let mut v = v;
    for i in (0..digits).rev() {
        text[i] = b'0' + (v % 10) as u8;
        v /= 10;
    }
    out.extend_from_slice(&text[..digits]);
}

/// `ns` since the epoch as `"YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ"`, quoted (years 0-9999: a
/// nanosecond timestamp's range, 1677-2262, is inside).
fn iso_utc(out: &mut Vec<u8>, ns: i64) {
    let (days, in_day) = (ns.div_euclid(86_400_000_000_000), ns.rem_euclid(86_400_000_000_000) as u64);
    let (year, month, day) = civil(days);
    let (seconds, fraction) = (in_day / 1_000_000_000, in_day % 1_000_000_000);
    out.push(b'"');
    padded(out, year as u64, 4);
    out.push(b'-');
    padded(out, u64::from(month), 2);
    out.push(b'-');
    padded(out, u64::from(day), 2);
    out.push(b'T');
    padded(out, seconds / 3600, 2);
    out.push(b':');
    padded(out, seconds / 60 % 60, 2);
    out.push(b':');
    padded(out, seconds % 60, 2);
    out.push(b'.');
    padded(out, fraction, 9);
    out.extend_from_slice(b"Z\"");
}

fn decimal(out: &mut Vec<u8>, mut v: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

impl Cells<'_> {
    fn write(&self, row: usize, out: &mut Vec<u8>) {
        if self.valid.as_ref().is_some_and(|v| v.is_null(row)) {
            return; // missing: an empty cell
        }
        match &self.values {
            Values::Signed(v) => {
                let x = v[row];
                if x < 0 {
                    out.push(b'-');
                }
                decimal(out, x.unsigned_abs());
            }
            Values::Unsigned(v) => decimal(out, v[row]),
            Values::Raw(t) => out.extend_from_slice(t.get(row).as_bytes()),
            Values::Bool(a) => out.extend_from_slice(if a.value(row) { b"true" } else { b"false" }),
            Values::Text(t) => quoted(out, t.get(row)),
            // (the smallest value is pandas' NaT, missing as `as_csv_columns` makes it)
            Values::Time(v) if v[row] == i64::MIN => {}
            Values::Time(v) => iso_utc(out, v[row]),
            Values::Empty => {}
        }
    }
}

/// The CSV text of `batch`, with the header line first when `header`; the columns numbered in
/// `raw` are text written unquoted.
pub fn csv_text(batch: &RecordBatch, header: bool, raw: &[usize]) -> Result<Vec<u8>, Unsupported> {
    let schema = batch.schema();
    let columns: Vec<Cells<'_>> = schema
        .fields()
        .iter()
        .zip(batch.columns())
        .enumerate()
        .map(|(i, (f, a))| cells(f.name(), a, raw.contains(&i)))
        .collect::<Result<_, _>>()?;
    let mut out = Vec::with_capacity(batch.num_rows() * (columns.len() * 2 + 8) + 64);
    if header {
        for (i, f) in schema.fields().iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            quoted(&mut out, f.name());
        }
        out.push(b'\n');
    }
    let (steps, trailing) = row_steps(&columns);
    let commas = vec![b','; columns.len()];
    for row in 0..batch.num_rows() {
        for &(separators, c) in &steps {
            out.extend_from_slice(&commas[..separators]);
            c.write(row, &mut out);
        }
        out.extend_from_slice(&commas[..trailing]);
        out.push(b'\n');
    }
    Ok(out)
}

/// How a row is written: each column with a value in some row, after the separators that come
/// before it (its own and those of the empty columns before it, which write nothing else), then
/// the separators of the empty columns at the end. Most of the frames table's 52 columns are
/// empty in a slice of 25,000 rows (a method's arguments), so a row is mostly a run of commas.
fn row_steps<'c, 'a>(columns: &'c [Cells<'a>]) -> (Vec<(usize, &'c Cells<'a>)>, usize) {
    let mut steps = Vec::new();
    let mut pending = 0;
    for (i, c) in columns.iter().enumerate() {
        pending += usize::from(i > 0);
        if !c.empty {
            steps.push((pending, c));
            pending = 0;
        }
    }
    (steps, pending)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{BooleanArray, DictionaryArray, Int64Array, NullArray, StringArray, UInt64Array};
    use std::sync::Arc;

    #[test]
    fn cells_are_written_as_pyarrow_writes_them() {
        let words = StringArray::from(vec!["c2s", "s2c"]);
        let dir = DictionaryArray::<Int8Type>::try_new(vec![Some(1i8), None, Some(0)].into(), Arc::new(words)).unwrap();
        let batch = RecordBatch::try_from_iter(vec![
            ("n", Arc::new(Int64Array::from(vec![Some(-12), None, Some(i64::MIN)])) as ArrayRef),
            ("u", Arc::new(UInt64Array::from(vec![Some(u64::MAX), Some(0), None])) as ArrayRef),
            ("b", Arc::new(BooleanArray::from(vec![Some(true), Some(false), None])) as ArrayRef),
            ("say \"x\"", Arc::new(StringArray::from(vec![Some("a,\"b\"\nc"), Some(""), None])) as ArrayRef),
            ("d", Arc::new(dir) as ArrayRef),
            ("z", Arc::new(NullArray::new(3)) as ArrayRef),
        ])
        .unwrap();
        let text = String::from_utf8(csv_text(&batch, true, &[]).unwrap()).unwrap();
        assert_eq!(
            text,
            "\"n\",\"u\",\"b\",\"say \"\"x\"\"\",\"d\",\"z\"\n\
             -12,18446744073709551615,true,\"a,\"\"b\"\"\nc\",\"s2c\",\n\
             ,0,false,\"\",,\n\
             -9223372036854775808,,,,\"c2s\",\n"
        );
        assert_eq!(csv_text(&batch.slice(1, 1), false, &[]).unwrap(), b",0,false,\"\",,\n");
        // a raw column: its text unquoted
        assert_eq!(csv_text(&batch.slice(0, 1).project(&[3]).unwrap(), false, &[0]).unwrap(), b"a,\"b\"\nc\n");
    }

    #[test]
    fn timestamps_are_iso_8601_utc_text() {
        let text = |ns: i64| {
            let mut out = Vec::new();
            iso_utc(&mut out, ns);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(text(0), "\"1970-01-01T00:00:00.000000000Z\"");
        assert_eq!(text(-1), "\"1969-12-31T23:59:59.999999999Z\"");
        assert_eq!(text(951_782_400_000_000_001), "\"2000-02-29T00:00:00.000000001Z\"");
        assert_eq!(text(i64::MIN + 1), "\"1677-09-21T00:12:43.145224193Z\"");
        assert_eq!(text(i64::MAX), "\"2262-04-11T23:47:16.854775807Z\"");
    }

    #[test]
    fn other_types_are_left_to_pyarrow() {
        let batch = RecordBatch::try_from_iter(vec![(
            "f",
            Arc::new(arrow_array::Float64Array::from(vec![1.5])) as ArrayRef,
        )])
        .unwrap();
        assert!(csv_text(&batch, true, &[]).is_err());
        assert!(csv_text(&batch, true, &[0]).is_err(), "a raw column is text");
    }
}
