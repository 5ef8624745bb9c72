//! The tables handed to Python: numpy arrays for `load()` (pandas' own dtypes, no per-row
//! Python work), Arrow record batches through the PyCapsule interface for `ingest` and
//! `frames -o`, and the sinks that hand tables over while a capture is read.

use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyList, PyTuple};

use crate::output::tables::{CodeWidth, Column, Table};
/// numpy array from a Vec without copying.
pub(super) fn arr<'py, T: numpy::Element>(py: Python<'py>, v: Vec<T>) -> Bound<'py, PyArray1<T>> {
    PyArray1::from_vec(py, v)
}

/// pandas masks are true where a value is missing: flip the builders' validity in place.
fn missing(mut valid: Vec<bool>) -> Vec<bool> {
    valid.iter_mut().for_each(|v| *v = !*v);
    valid
}

/// Dictionary codes in the narrowest integer type pandas would pick itself, so that
/// `Categorical.from_codes` keeps our array instead of copying it.
fn codes<'py>(py: Python<'py>, codes: Vec<i32>, categories: usize) -> Bound<'py, PyAny> {
    match crate::output::tables::code_width(categories) {
        CodeWidth::I8 => arr(py, codes.into_iter().map(|c| c as i8).collect::<Vec<_>>()).into_any(),
        CodeWidth::I16 => arr(py, codes.into_iter().map(|c| c as i16).collect::<Vec<_>>()).into_any(),
        CodeWidth::I32 => arr(py, codes).into_any(),
    }
}

fn column<'py>(py: Python<'py>, mut c: Column) -> PyResult<Bound<'py, PyTuple>> {
    if let Column::Spread(s) = c {
        return column(py, s.dense());
    }
    c.shrink();
    let t = match c {
        Column::I8(v) => ("i8", arr(py, v)).into_pyobject(py)?,
        Column::I16(v) => ("i16", arr(py, v)).into_pyobject(py)?,
        Column::I32(v) => ("i32", arr(py, v)).into_pyobject(py)?,
        Column::I64(v) => ("i64", arr(py, v)).into_pyobject(py)?,
        Column::Bool(v) => ("bool", arr(py, v)).into_pyobject(py)?,
        Column::Ts(v) => ("ts", arr(py, v)).into_pyobject(py)?,
        Column::NullU8(v, m) => ("null_u8", arr(py, v), arr(py, missing(m))).into_pyobject(py)?,
        Column::NullI16(v, m) => ("null_i16", arr(py, v), arr(py, missing(m))).into_pyobject(py)?,
        Column::NullI32(v, m) => ("null_i32", arr(py, v), arr(py, missing(m))).into_pyobject(py)?,
        Column::NullU32(v, m) => ("null_u32", arr(py, v), arr(py, missing(m))).into_pyobject(py)?,
        Column::NullI64(v, m) => ("null_i64", arr(py, v), arr(py, missing(m))).into_pyobject(py)?,
        Column::NullU64(v, m) => ("null_u64", arr(py, v), arr(py, missing(m))).into_pyobject(py)?,
        Column::NullBool(v, m) => ("null_bool", arr(py, v), arr(py, missing(m))).into_pyobject(py)?,
        Column::NullTs(v, m) => ("null_ts", arr(py, v), arr(py, missing(m))).into_pyobject(py)?,
        Column::Str(c, dict) | Column::StrWide(c, dict) => {
            let n = dict.len();
            ("str", codes(py, c, n), PyList::new(py, dict)?).into_pyobject(py)?
        }
        Column::Str8(c, dict) => ("str", arr(py, c), PyList::new(py, dict)?).into_pyobject(py)?,
        Column::Cat(c, names) => {
            ("cat", arr(py, c), PyList::new(py, names)?).into_pyobject(py)?
        }
        Column::Bytes(data, ends) => {
            let mut start = 0;
            let items = ends.iter().map(|&e| {
                let b = pyo3::types::PyBytes::new(py, &data[start..e]);
                start = e;
                b
            });
            ("bytes", PyList::new(py, items)?).into_pyobject(py)?
        }
        Column::Text(c, dict) => {
            let n = dict.len();
            ("text", codes(py, c, n), PyList::new(py, dict)?).into_pyobject(py)?
        }
        Column::Spread(_) => unreachable!("made dense above"),
    };
    Ok(t)
}

/// A table as an Arrow record batch, handed over through the Arrow PyCapsule interface:
/// `pyarrow.record_batch(obj)` takes it without a copy (once: the batch moves out).
#[pyclass(frozen)]
pub(super) struct ArrowBatch(std::sync::Mutex<Option<arrow_array::RecordBatch>>);

#[pymethods]
impl ArrowBatch {
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_array__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<(Bound<'py, PyCapsule>, Bound<'py, PyCapsule>)> {
        let _ = requested_schema; // the batch is given in its own types
        let batch = self.0.lock().expect("not poisoned").take().ok_or_else(|| {
            pyo3::exceptions::PyValueError::new_err("this Arrow batch was taken already")
        })?;
        let data = arrow_array::Array::to_data(&arrow_array::StructArray::from(batch));
        let schema = arrow_schema::ffi::FFI_ArrowSchema::try_from(data.data_type())
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
        let array = arrow_data::ffi::FFI_ArrowArray::new(&data);
        Ok((
            PyCapsule::new_with_value(py, schema, c"arrow_schema")?,
            PyCapsule::new_with_value(py, array, c"arrow_array")?,
        ))
    }
}

/// A Python callable as a sink of tables (`decode`'s `records_sink`, `frames_sink`): each
/// table goes to it as an ArrowBatch (the GIL is taken for each call). Its first error
/// stops the calls and is kept in `failed`, to be raised once the decode returns.
pub(super) fn table_sink<'a>(obj: &'a Py<PyAny>, failed: &'a std::sync::Mutex<Option<PyErr>>) -> crate::pipeline::TableSink<'a> {
    Box::new(move |t: Table| {
        if failed.lock().expect("not poisoned").is_some() {
            return;
        }
        let res = Python::attach(|py| obj.call1(py, (arrow_table(py, t)?,)).map(drop));
        if let Err(e) = res {
            *failed.lock().expect("not poisoned") = Some(e);
        }
    })
}

pub(super) fn arrow_table<'py>(py: Python<'py>, t: Table) -> PyResult<Bound<'py, PyAny>> {
    let batch = py
        .detach(|| crate::output::arrow_out::record_batch(t))
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
    Ok(Bound::new(py, ArrowBatch(std::sync::Mutex::new(Some(batch))))?.into_any())
}

pub(super) fn table<'py>(py: Python<'py>, t: Table) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for (name, c) in t {
        out.append((name, column(py, c)?))?;
    }
    Ok(out)
}
