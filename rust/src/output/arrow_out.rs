//! The finished tables as Arrow record batches, in the types pandas' own conversion gives the
//! columns `amqpcap.load` makes (docs/dataset.md): integers in their width, nullable columns
//! with a validity bitmap, timestamps as `timestamp[ns, UTC]`, categoricals as dictionary arrays
//! (keys in pandas' code width, [`code_width`]), free text as strings, bodies as binary.
//! Numeric vectors become Arrow buffers without a copy. The binding (`lib.rs`) hands a batch to
//! Python through the Arrow C Data Interface; `amqpcap ingest` writes it to Parquet without
//! pandas in between.

use std::sync::Arc;

use arrow_array::builder::StringBuilder;
use arrow_array::types::{ArrowDictionaryKeyType, Int16Type, Int32Type, Int8Type};
use arrow_array::{
    ArrayRef, BinaryArray, BooleanArray, DictionaryArray, Int16Array, Int32Array, Int64Array, Int8Array,
    LargeBinaryArray, PrimitiveArray, RecordBatch, RecordBatchOptions, StringArray, TimestampNanosecondArray,
    UInt32Array, UInt64Array, UInt8Array,
};
use arrow_buffer::{bit_util, ArrowNativeType, BooleanBuffer, MutableBuffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{ArrowError, Field, Schema};

use crate::output::tables::{code_width, filled, CodeWidth, Column, Spread, SpreadValues, Table};

const UTC: &str = "UTC";

/// The validity bitmap of `len` rows, `valid(i)` telling row `i`; None when no row is missing.
/// Packed 64 rows at a time (`BooleanBuffer::collect_bool`): arrow's `From<Vec<bool>>` sets the
/// bits one by one, which was 2.5% of `frames -o`'s CPU on 7 copies of flow-control.
fn validity(len: usize, valid: impl FnMut(usize) -> bool) -> Option<NullBuffer> {
    let n = NullBuffer::new(BooleanBuffer::collect_bool(len, valid));
    (n.null_count() > 0).then_some(n)
}

fn bits(v: &[bool]) -> BooleanBuffer {
    BooleanBuffer::collect_bool(v.len(), |i| v[i])
}

fn nulls(valid: Vec<bool>) -> Option<NullBuffer> {
    validity(valid.len(), |i| valid[i])
}

fn values<T: arrow_array::ArrowPrimitiveType>(v: Vec<T::Native>, valid: Option<Vec<bool>>) -> PrimitiveArray<T> {
    PrimitiveArray::new(ScalarBuffer::from(v), valid.and_then(nulls))
}

/// Dictionary keys of `codes` (-1 = missing) in `width` ([`code_width`] of the dictionary's
/// size: the width pandas would keep them in), the validity read from the codes themselves.
fn dictionary<C: Copy + Into<i32>>(codes: Vec<C>, dict: Vec<String>, width: CodeWidth) -> Result<ArrayRef, ArrowError> {
    let missing = validity(codes.len(), |i| codes[i].into() >= 0);
    let words: ArrayRef = Arc::new(StringArray::from(dict));
    Ok(match width {
        CodeWidth::I8 => {
            let keys: Vec<i8> = codes.into_iter().map(|c| c.into().max(0) as i8).collect();
            Arc::new(DictionaryArray::<Int8Type>::try_new(PrimitiveArray::new(keys.into(), missing), words)?)
        }
        CodeWidth::I16 => {
            let keys: Vec<i16> = codes.into_iter().map(|c| c.into().max(0) as i16).collect();
            Arc::new(DictionaryArray::<Int16Type>::try_new(PrimitiveArray::new(keys.into(), missing), words)?)
        }
        CodeWidth::I32 => {
            let keys: Vec<i32> = codes.into_iter().map(|c| c.into().max(0)).collect();
            Arc::new(DictionaryArray::<Int32Type>::try_new(PrimitiveArray::new(keys.into(), missing), words)?)
        }
    })
}

/// One column as an Arrow array.
pub fn array(c: Column) -> Result<ArrayRef, ArrowError> {
    Ok(match c {
        Column::I8(v) => Arc::new(Int8Array::from(v)),
        Column::I16(v) => Arc::new(Int16Array::from(v)),
        Column::I32(v) => Arc::new(Int32Array::from(v)),
        Column::I64(v) => Arc::new(Int64Array::from(v)),
        Column::Bool(v) => Arc::new(BooleanArray::new(bits(&v), None)),
        Column::Ts(v) => Arc::new(TimestampNanosecondArray::from(v).with_timezone(UTC)),
        Column::NullU8(v, m) => Arc::new(UInt8Array::new(ScalarBuffer::from(v), nulls(m))),
        Column::NullI16(v, m) => Arc::new(values::<Int16Type>(v, Some(m))),
        Column::NullI32(v, m) => Arc::new(values::<Int32Type>(v, Some(m))),
        Column::NullU32(v, m) => Arc::new(UInt32Array::new(ScalarBuffer::from(v), nulls(m))),
        Column::NullI64(v, m) => Arc::new(Int64Array::new(ScalarBuffer::from(v), nulls(m))),
        Column::NullU64(v, m) => Arc::new(UInt64Array::new(ScalarBuffer::from(v), nulls(m))),
        Column::NullBool(v, m) => Arc::new(BooleanArray::new(bits(&v), nulls(m))),
        Column::NullTs(v, m) => Arc::new(TimestampNanosecondArray::new(ScalarBuffer::from(v), nulls(m)).with_timezone(UTC)),
        Column::Str(codes, dict) => {
            let width = code_width(dict.len());
            dictionary(codes, dict, width)?
        }
        Column::StrWide(codes, dict) => dictionary(codes, dict, CodeWidth::I32)?,
        Column::Str8(codes, dict) => {
            let width = code_width(dict.len());
            dictionary(codes, dict, width)?
        }
        Column::Cat(codes, names) => {
            let width = code_width(names.len());
            dictionary(codes, names.into_iter().map(String::from).collect(), width)?
        }
        Column::Text(codes, dict) => {
            let bytes: usize = codes.iter().filter(|&&c| c >= 0).map(|&c| dict[c as usize].len()).sum();
            let mut b = StringBuilder::with_capacity(codes.len(), bytes);
            for c in codes {
                b.append_option((c >= 0).then(|| &dict[c as usize]));
            }
            Arc::new(b.finish())
        }
        Column::Spread(s) => spread(s)?,
        Column::Bytes(data, ends) => {
            let offsets = std::iter::once(0).chain(ends.iter().copied());
            if data.len() <= i32::MAX as usize {
                let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets.map(|e| e as i32).collect::<Vec<_>>()));
                Arc::new(BinaryArray::try_new(offsets, data.into(), None)?)
            } else {
                let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets.map(|e| e as i64).collect::<Vec<_>>()));
                Arc::new(LargeBinaryArray::try_new(offsets, data.into(), None)?)
            }
        }
    })
}

/// A sparse column made Arrow without its dense copy: its values set in zeroed buffers of
/// every row (pages no value falls in are not written: most columns of a batch of frames have
/// no value at all) and a validity bitmap from its rows. Through the dense column instead
/// (`Spread::dense`, then its Arrow array: a vector of every row and one of booleans filled and
/// read again per column), the decode of 7 copies of `fixtures/flow-control.pcap.gz` handing its
/// 2.9M frames out in batches took 1.24-1.98 s against 0.99-1.35 s (six runs each), most of
/// the difference memory filled and faulted in.
fn spread(s: Spread) -> Result<ArrayRef, ArrowError> {
    let Spread { len, rows, values } = s;
    if let Some(&r) = rows.last() {
        if r as usize >= len || !rows.windows(2).all(|w| w[0] < w[1]) {
            return Err(ArrowError::InvalidArgumentError(format!("sparse rows out of order or past {len}")));
        }
    }
    let valid = (rows.len() < len).then(|| NullBuffer::new(set_bits(len, rows.iter().map(|&r| r as usize))));
    Ok(match values {
        SpreadValues::U8(v) => Arc::new(UInt8Array::new(scattered(len, &rows, v), valid)),
        SpreadValues::I16(v) => Arc::new(Int16Array::new(scattered(len, &rows, v), valid)),
        SpreadValues::I32(v) => Arc::new(Int32Array::new(scattered(len, &rows, v), valid)),
        SpreadValues::U32(v) => Arc::new(UInt32Array::new(scattered(len, &rows, v), valid)),
        SpreadValues::I64(v) => Arc::new(Int64Array::new(scattered(len, &rows, v), valid)),
        SpreadValues::U64(v) => Arc::new(UInt64Array::new(scattered(len, &rows, v), valid)),
        SpreadValues::Ts(v) => Arc::new(TimestampNanosecondArray::new(scattered(len, &rows, v), valid).with_timezone(UTC)),
        SpreadValues::Bool(v) => {
            let set = rows.iter().zip(&v).filter(|(_, &b)| b).map(|(&r, _)| r as usize);
            Arc::new(BooleanArray::new(set_bits(len, set), valid))
        }
        SpreadValues::Text { codes, texts, wide } => {
            let width = if wide { CodeWidth::I32 } else { code_width(texts.len()) };
            let largest = codes.iter().copied().max().unwrap_or(-1);
            if codes.iter().any(|&c| c < 0) || largest >= 0 && largest as usize >= texts.len() {
                return Err(ArrowError::InvalidArgumentError(format!("text code {largest} past {} texts", texts.len())));
            }
            let words: ArrayRef = Arc::new(StringArray::from(texts));
            match width {
                CodeWidth::I8 => spread_keys::<Int8Type>(len, &rows, &codes, valid, words),
                CodeWidth::I16 => spread_keys::<Int16Type>(len, &rows, &codes, valid, words),
                CodeWidth::I32 => spread_keys::<Int32Type>(len, &rows, &codes, valid, words),
            }
        }
    })
}

/// A bitmap of `len` bits, those of `set` on.
fn set_bits(len: usize, set: impl Iterator<Item = usize>) -> BooleanBuffer {
    let mut bits = MutableBuffer::new_null(len);
    let slice = bits.as_slice_mut();
    for i in set {
        bit_util::set_bit(slice, i);
    }
    BooleanBuffer::new(bits.into(), 0, len)
}

/// `len` values, zero but at `rows`, which take `values` (zero: a page of the buffer no value
/// falls in is never written).
fn scattered<T: ArrowNativeType>(len: usize, rows: &[u32], values: Vec<T>) -> ScalarBuffer<T> {
    ScalarBuffer::from(filled(len, rows, values, T::default()))
}

/// Dictionary keys of type `K` for a sparse text column (0 and null where a row has none).
fn spread_keys<K: ArrowDictionaryKeyType>(
    len: usize,
    rows: &[u32],
    codes: &[i32],
    valid: Option<NullBuffer>,
    words: ArrayRef,
) -> ArrayRef {
    let key = |c: i32| K::Native::from_usize(c as usize).expect("a code within its key type");
    let keys = scattered(len, rows, codes.iter().map(|&c| key(c)).collect());
    // SAFETY: every code was checked to be a word's index (`spread`), and the key width holds
    // that many words (`code_width`); a row without a value has key 0 and is null.
    Arc::new(unsafe { DictionaryArray::<K>::new_unchecked(PrimitiveArray::new(keys, valid), words) })
}

/// A table as one record batch (columns in the table's order). Each column is converted and
/// its vectors released before the next, so the peak holds about one copy of the table.
pub fn record_batch(t: Table) -> Result<RecordBatch, ArrowError> {
    let mut fields = Vec::with_capacity(t.len());
    let mut arrays = Vec::with_capacity(t.len());
    let mut rows = 0;
    for (name, mut c) in t {
        c.shrink();
        let nullable = c.holds_nulls();
        let a = array(c)?;
        rows = a.len();
        fields.push(Field::new(name, a.data_type().clone(), nullable));
        arrays.push(a);
    }
    RecordBatch::try_new_with_options(
        Arc::new(Schema::new(fields)),
        arrays,
        &RecordBatchOptions::new().with_row_count(Some(rows)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each kind of sparse column over `len` rows with values at `rows`.
    fn spreads(len: usize, rows: &[u32]) -> Vec<(String, Spread)> {
        let n = rows.len();
        let spread = |values| Spread { len, rows: rows.to_vec(), values };
        let texts = |count: usize| (0..count).map(|i| format!("text {i}")).collect::<Vec<_>>();
        let codes = |count: usize| (0..n).map(|i| ((i * 7) % count.max(1)) as i32).collect::<Vec<_>>();
        let mut out = vec![
            ("i16".into(), spread(SpreadValues::I16((0..n).map(|i| i as i16 - 3).collect()))),
            ("i32".into(), spread(SpreadValues::I32((0..n).map(|i| i as i32 * -5).collect()))),
            ("u32".into(), spread(SpreadValues::U32((0..n).map(|i| u32::MAX - i as u32).collect()))),
            ("i64".into(), spread(SpreadValues::I64((0..n).map(|i| i as i64 * 1_000_000_007).collect()))),
            ("u64".into(), spread(SpreadValues::U64((0..n).map(|i| u64::MAX - i as u64).collect()))),
            ("bool".into(), spread(SpreadValues::Bool((0..n).map(|i| i % 3 == 1).collect()))),
            ("ts".into(), spread(SpreadValues::Ts((0..n).map(|i| 1_700_000_000_000_000_000 + i as i64).collect()))),
        ];
        // dictionaries on both sides of the 8- and 16-bit key widths, narrow and wide
        for count in [0, 3, 126, 127, 200, 40_000] {
            for wide in [false, true] {
                let codes = if count == 0 { Vec::new() } else { codes(count) };
                if count == 0 && n > 0 {
                    continue;
                }
                let values = SpreadValues::Text { codes, texts: texts(count), wide };
                out.push((format!("text of {count} (wide: {wide})"), spread(values)));
            }
        }
        out
    }

    #[test]
    fn a_sparse_column_is_the_array_its_dense_column_makes() {
        let every: Vec<u32> = (0..70).collect();
        let some: Vec<u32> = (0..70).filter(|r| r % 9 == 2 || *r == 69).collect();
        for (len, rows) in [(0, vec![]), (70, vec![]), (70, some), (70, every), (1, vec![0])] {
            for ((name, a), (_, b)) in spreads(len, &rows).into_iter().zip(spreads(len, &rows)) {
                let direct = array(Column::Spread(a)).unwrap();
                let dense = array(b.dense()).unwrap();
                assert_eq!(direct.data_type(), dense.data_type(), "{name}, {} of {len} rows", rows.len());
                assert_eq!(direct.to_data(), dense.to_data(), "{name}, {} of {len} rows", rows.len());
                assert_eq!(direct.logical_nulls(), dense.logical_nulls(), "{name}, {} of {len} rows", rows.len());
            }
        }
    }

    #[test]
    fn sparse_rows_out_of_order_or_codes_past_their_texts_are_refused() {
        let bad = [
            Spread { len: 5, rows: vec![3, 1], values: SpreadValues::I32(vec![1, 2]) },
            Spread { len: 5, rows: vec![5], values: SpreadValues::I32(vec![1]) },
            Spread { len: 5, rows: vec![1], values: SpreadValues::Text { codes: vec![2], texts: vec!["a".into()], wide: false } },
            Spread { len: 5, rows: vec![1], values: SpreadValues::Text { codes: vec![-1], texts: vec!["a".into()], wide: true } },
        ];
        for s in bad {
            assert!(array(Column::Spread(s)).is_err());
        }
    }
}
