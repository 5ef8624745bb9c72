//! The Python binding (the `python` feature): converts arguments, runs the pipeline without
//! the GIL, and hands the finished tables over (`columns`). The stub `amqpcap/_core.pyi`
//! documents what Python sees.

mod columns;

use numpy::PyArray1;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyCapsule, PyDict, PyList, PyTuple};
use std::sync::atomic::Ordering;

use crate::buckets::partition::Partition;
use crate::capture::link::linktype_name;
use crate::capture::merge::{FileRead, Progress};
use crate::limits::Limits;
use crate::output::tables::Table;
use crate::pipeline::ingest;
use crate::tls::Decrypted;
use columns::{arr, arrow_table, table, table_sink, ArrowBatch};

pyo3::create_exception!(_core, CoreCaptureError, PyException, "The capture cannot be used: args are (kind, message).");


fn limits_from(d: Option<&Bound<'_, PyDict>>) -> PyResult<Limits> {
    let mut l = Limits::default();
    let Some(d) = d else { return Ok(l) };
    for (k, v) in d.iter() {
        let key: String = k.extract()?;
        l.set(&key, v.extract()?).map_err(pyo3::exceptions::PyValueError::new_err)?;
    }
    Ok(l)
}

/// The resource caps as the core declares them (`crate::limits::LIMITS`): (name, default,
/// unit, meaning) each, in the docs' order. `amqpcap.Limits` is made from it.
#[pyfunction]
fn limits() -> Vec<(&'static str, u64, &'static str, &'static str)> {
    crate::limits::LIMITS.iter().map(|l| (l.name, l.default, l.unit, l.meaning)).collect()
}

/// `(streams, packets, ends, data)`: see `amqpcap/_core.pyi`.
fn decrypted_from(t: &Bound<'_, PyTuple>) -> PyResult<Decrypted> {
    let streams: Vec<u32> = t.get_item(0)?.extract()?;
    let packets: Vec<u32> = t.get_item(1)?.extract()?;
    let ends: Vec<u64> = t.get_item(2)?.extract()?;
    let data = t.get_item(3)?;
    let data = data.cast::<PyBytes>()?.as_bytes().to_vec();
    Decrypted::new(streams, packets, ends, data).map_err(pyo3::exceptions::PyValueError::new_err)
}

/// How far a `decode` running in another thread has read (it runs without the GIL).
#[pyclass(frozen)]
struct ReadProgress(Progress);

#[pymethods]
impl ReadProgress {
    #[new]
    fn new() -> Self {
        ReadProgress(Progress::default())
    }
    /// Bytes read from the files so far (compressed bytes for gzip files).
    #[getter]
    fn bytes(&self) -> u64 {
        self.0.bytes.load(Ordering::Relaxed)
    }
    /// Packet records read so far.
    #[getter]
    fn records(&self) -> u64 {
        self.0.records.load(Ordering::Relaxed)
    }
}

/// Each file of the set: name, format, compressed, packets, first/last timestamps (ns),
/// truncated, warnings; `error` (kind, message) for a file that was skipped.
fn files<'py>(py: Python<'py>, files: &[FileRead]) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for f in files {
        let d = PyDict::new(py);
        d.set_item("name", &f.name)?;
        if let Some(r) = &f.read {
            d.set_item("format", r.format)?;
            d.set_item("compressed", r.compressed)?;
            d.set_item("packets", r.records)?;
            d.set_item("truncated", r.truncated)?;
            d.set_item("warnings", &r.warnings)?;
        }
        d.set_item("first_ts_ns", f.first_ts_ns)?;
        d.set_item("last_ts_ns", f.last_ts_ns)?;
        d.set_item("error", f.error.as_ref().map(|e| (e.kind(), e.message().to_string())))?;
        out.append(d)?;
    }
    Ok(out)
}

/// Decode a capture (one file or a set merged by time) into column tables. See `amqpcap/_core.pyi`.
#[pyfunction]
#[pyo3(signature = (
    paths, ports, limits=None, bodies=false, decrypted=None, strict=false, progress=None, arrow=false,
    records_sink=None, records_batch_rows=1 << 20, spill=None, frames_sink=None, frames_batch_rows=1 << 20
))]
#[allow(clippy::too_many_arguments)]
fn decode<'py>(
    py: Python<'py>,
    paths: Vec<String>,
    ports: Vec<u16>,
    limits: Option<&Bound<'py, PyDict>>,
    bodies: bool,
    decrypted: Option<&Bound<'py, PyTuple>>,
    strict: bool,
    progress: Option<PyRef<'py, ReadProgress>>,
    arrow: bool,
    records_sink: Option<Bound<'py, PyAny>>,
    records_batch_rows: usize,
    spill: Option<(String, u32)>,
    frames_sink: Option<Bound<'py, PyAny>>,
    frames_batch_rows: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let limits = limits_from(limits)?;
    // The first step of a spilled ingest keeps no connection: it writes the rows of no
    // connection and spills the packets of every connection into its bucket's file.
    let partition = spill.as_ref().map(|(_, buckets)| Partition::new(*buckets, &[], true)).transpose().map_err(pyo3::exceptions::PyValueError::new_err)?;
    let mut spill_writer = spill
        .map(|(dir, buckets)| crate::buckets::spill::SpillWriter::create(std::path::Path::new(&dir), buckets))
        .transpose()?;
    let decrypted = decrypted.map(decrypted_from).transpose()?;
    let progress = progress.map(|p| p.0.clone()).unwrap_or_default();
    let (records_sink, frames_sink) = (records_sink.map(Bound::unbind), frames_sink.map(Bound::unbind));
    let failed: std::sync::Mutex<Option<PyErr>> = std::sync::Mutex::new(None);
    let out = py.detach(|| {
        let records_sink = records_sink.as_ref().map(|obj| (table_sink(obj, &failed), records_batch_rows));
        let frames_sink = frames_sink.as_ref().map(|obj| (table_sink(obj, &failed), frames_batch_rows));
        let spill = spill_writer.as_mut().map(|w| {
            let push = |number: u32, stream: u32, rec: &crate::capture::reader::Record<'_>| w.push(number, stream, rec);
            Box::new(push) as crate::pipeline::PacketSpill<'_>
        });
        ingest(&paths, &ports, &limits, bodies, decrypted, partition, strict, &progress, records_sink, spill, frames_sink)
    });
    if let Some(e) = failed.into_inner().expect("not poisoned") {
        return Err(e);
    }
    let out = out.map_err(|e| CoreCaptureError::new_err((e.kind(), e.message().to_string())))?;
    // A write error of the spill (a full disk) is an OSError.
    let spilled = spill_writer.map(|w| py.detach(|| w.finish())).transpose()?;
    tables_dict(py, out, arrow, spilled)
}

/// The dict `decode` and `decode_spilled` return (see `amqpcap/_core.pyi`); "frames" is
/// None when they went to a frames sink.
fn tables_dict<'py>(
    py: Python<'py>,
    out: crate::pipeline::Output,
    arrow: bool,
    spilled: Option<Vec<crate::buckets::spill::Spilled>>,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let hand = |t: Table| if arrow { arrow_table(py, t) } else { table(py, t).map(Bound::into_any) };
    d.set_item("records", hand(out.records)?)?;
    d.set_item("packets", hand(out.packets)?)?;
    // (None: they went to the frames sink)
    let sunk = out.frames.is_empty();
    d.set_item("frames", if sunk { py.None().into_bound(py) } else { hand(out.frames)? })?;
    d.set_item("connections", hand(out.connections)?)?;
    d.set_item("anomalies", hand(out.anomalies)?)?;
    match out.bodies {
        Some(b) => d.set_item("bodies", hand(b)?)?,
        None => d.set_item("bodies", py.None())?,
    }
    for (name, t) in out.added {
        d.set_item(name, hand(t)?)?;
    }
    let s = PyDict::new(py);
    s.set_item("format", out.read.format)?;
    s.set_item("compressed", out.read.compressed)?;
    s.set_item("packets", out.read.records)?;
    s.set_item("tcp_packets", out.tcp_packets)?;
    s.set_item("first_ts_ns", out.first_ts)?;
    s.set_item("last_ts_ns", out.last_ts)?;
    s.set_item("truncated", out.read.truncated)?;
    s.set_item("warnings", out.read.warnings)?;
    s.set_item("link_types", out.read.linktypes.iter().map(|&l| linktype_name(l)).collect::<Vec<_>>())?;
    s.set_item("files", files(py, &out.files)?)?;
    d.set_item("summary", s)?;
    if let Some(spilled) = spilled {
        d.set_item("spilled", spilled.iter().map(|b| (b.packets, b.bytes)).collect::<Vec<_>>())?;
    }
    Ok(d)
}

/// Decode one bucket of a spilled ingest from its spill file. See `amqpcap/_core.pyi`.
#[pyfunction]
#[pyo3(signature = (
    path, ports, capture_records, limits=None, bodies=false, arrow=true, frames_sink=None, frames_batch_rows=1 << 20,
    packets=0
))]
#[allow(clippy::too_many_arguments)]
fn decode_spilled<'py>(
    py: Python<'py>,
    path: String,
    ports: Vec<u16>,
    capture_records: u32,
    limits: Option<&Bound<'py, PyDict>>,
    bodies: bool,
    arrow: bool,
    frames_sink: Option<Bound<'py, PyAny>>,
    frames_batch_rows: usize,
    packets: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let limits = limits_from(limits)?;
    let frames_sink = frames_sink.map(Bound::unbind);
    let failed: std::sync::Mutex<Option<PyErr>> = std::sync::Mutex::new(None);
    let out = py.detach(|| {
        let path = std::path::Path::new(&path);
        let frames_sink = frames_sink.as_ref().map(|obj| (table_sink(obj, &failed), frames_batch_rows));
        crate::buckets::spill::decode_spilled(path, &ports, &limits, bodies, capture_records, packets, frames_sink)
    });
    if let Some(e) = failed.into_inner().expect("not poisoned") {
        return Err(e);
    }
    tables_dict(py, out?, arrow, None)
}

/// The CSV text of a record batch given through the Arrow PyCapsule interface (the two
/// capsules of `batch.__arrow_c_array__()`), with the header line when `header`, the text
/// columns numbered in `raw` unquoted; None when a column's type is not one `csv_out`
/// writes. See `amqpcap/_core.pyi`.
#[pyfunction]
#[pyo3(signature = (schema, array, header, raw=Vec::new()))]
fn csv_text<'py>(
    py: Python<'py>,
    schema: Bound<'py, PyCapsule>,
    array: Bound<'py, PyCapsule>,
    header: bool,
    raw: Vec<usize>,
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let schema = schema.pointer_checked(Some(c"arrow_schema"))?.as_ptr() as *const arrow_schema::ffi::FFI_ArrowSchema;
    let array = array.pointer_checked(Some(c"arrow_array"))?.as_ptr() as *mut arrow_data::ffi::FFI_ArrowArray;
    // SAFETY: the capsules named so hold a schema and an array of the Arrow C Data
    // Interface (the PyCapsule interface's contract); the array is moved out of its
    // capsule (`from_raw` leaves a released one there), the schema is only read.
    let data = unsafe { arrow_array::ffi::from_ffi(arrow_data::ffi::FFI_ArrowArray::from_raw(array), &*schema) }
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
    let batch = arrow_array::RecordBatch::from(arrow_array::StructArray::from(data));
    Ok(py.detach(|| crate::output::csv_out::csv_text(&batch, header, &raw)).ok().map(|text| PyBytes::new(py, &text)))
}

/// The spill file of a bucket in a spill directory (`amqpcap.dataset.spill_path`).
#[pyfunction]
fn spill_path(dir: std::path::PathBuf, bucket: u32) -> std::path::PathBuf {
    crate::buckets::spill::spill_path(&dir, bucket)
}

/// The bucket of each stream number (`amqpcap.dataset.bucket_of`).
#[pyfunction]
fn bucket_of<'py>(py: Python<'py>, streams: numpy::PyReadonlyArray1<'py, i64>, buckets: u32) -> PyResult<Bound<'py, PyArray1<i32>>> {
    let out: Vec<i32> = streams
        .as_array()
        .iter()
        .map(|&s| crate::buckets::partition::bucket_of(s as u32, buckets) as i32)
        .collect();
    Ok(arr(py, out))
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(decode, m)?)?;
    m.add_function(wrap_pyfunction!(bucket_of, m)?)?;
    m.add_function(wrap_pyfunction!(decode_spilled, m)?)?;
    m.add_function(wrap_pyfunction!(spill_path, m)?)?;
    m.add_function(wrap_pyfunction!(csv_text, m)?)?;
    m.add_function(wrap_pyfunction!(limits, m)?)?;
    m.add_class::<ReadProgress>()?;
    m.add_class::<ArrowBatch>()?;
    m.add("CoreCaptureError", m.py().get_type::<CoreCaptureError>())?;
    m.add("ANOMALY_KINDS", crate::anomaly::AnomalyKind::ALL.iter().map(|k| k.name()).collect::<Vec<_>>())?;
    m.add("MAX_FILES", crate::limits::MAX_FILES)?;
    // amqpcap's one version number: Cargo.toml's (maturin writes it into the wheel's metadata,
    // pyproject.toml lists `version` as dynamic), read by `amqpcap --version` and datasets' manifests
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("METHOD_NAMES", crate::proto::amqp091::spec::METHODS.iter().map(|x| x.name).collect::<Vec<_>>())?;
    Ok(())
}
