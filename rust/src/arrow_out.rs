//! The finished tables as Arrow record batches, in the types pandas' own conversion gives the
//! columns `amqpcap.load` makes (docs/dataset.md): integers in their width, nullable columns
//! with a validity bitmap, timestamps as `timestamp[ns, UTC]`, categoricals as dictionary arrays
//! (keys in pandas' code width, [`code_width`]), free text as strings, bodies as binary.
//! Numeric vectors become Arrow buffers without a copy. The binding (`lib.rs`) hands a batch to
//! Python through the Arrow C Data Interface; `amqpcap ingest` writes it to Parquet without
//! pandas in between.

use std::sync::Arc;

use arrow_array::builder::StringBuilder;
use arrow_array::types::{Int16Type, Int32Type, Int8Type};
use arrow_array::{
    ArrayRef, BinaryArray, BooleanArray, DictionaryArray, Int16Array, Int32Array, Int64Array, Int8Array,
    LargeBinaryArray, PrimitiveArray, RecordBatch, RecordBatchOptions, StringArray, TimestampNanosecondArray,
    UInt32Array, UInt64Array,
};
use arrow_buffer::{BooleanBuffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{ArrowError, Field, Schema};

use crate::tables::{code_width, CodeWidth, Column, Table};

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

/// A table as one record batch (columns in the table's order). Each column is converted and
/// its vectors released before the next, so the peak holds about one copy of the table.
pub fn record_batch(t: Table) -> Result<RecordBatch, ArrowError> {
    let mut fields = Vec::with_capacity(t.len());
    let mut arrays = Vec::with_capacity(t.len());
    let mut rows = 0;
    for (name, mut c) in t {
        c.shrink();
        let a = array(c)?;
        rows = a.len();
        // nullable whatever the rows: batches of other buckets of the same table may have nulls
        fields.push(Field::new(name, a.data_type().clone(), true));
        arrays.push(a);
    }
    RecordBatch::try_new_with_options(
        Arc::new(Schema::new(fields)),
        arrays,
        &RecordBatchOptions::new().with_row_count(Some(rows)),
    )
}
