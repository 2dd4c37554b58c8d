//! Typed results handed to Python: `QueryResult`, `Embeddings`, and the pre-serialised
//! `NumericEvent`. Each keeps the raw body so `to_dict()` can return the whole response,
//! parsed only when asked for.

use bytes::Bytes;
use numpy::{PyArray2, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::client::query::{output_texts, warnings, EmbeddingMatrix};
use crate::client::Error;
use crate::wire::query::QueryResponse;

/// JSON text as Python objects, by the standard library's C parser.
pub(crate) fn loads<'py>(py: Python<'py>, raw: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    py.import("json")?.getattr("loads")?.call1((PyBytes::new(py, raw),))
}

/// A result's hash, from the answer's bytes its equality compares.
fn hash_of(raw: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    canonical(raw).hash(&mut hasher);
    hasher.finish()
}

/// The answer as compact JSON, which equality and the hash compare: a result saved as JSON with
/// other whitespace (`json.dump(r.to_dict(), f, indent=2)`) and loaded back equals the original.
/// The bytes as they came when they are not JSON (nothing else reaches a result).
fn canonical(raw: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    match serde_json::from_slice::<serde_json::Value>(raw).and_then(|v| serde_json::to_vec(&v)) {
        Ok(compact) => std::borrow::Cow::Owned(compact),
        Err(_) => std::borrow::Cow::Borrowed(raw),
    }
}

/// The body `from_json` takes: the answer's bytes, its text, or the dict `to_dict()` gave.
fn json_body(body: &Bound<'_, PyAny>) -> PyResult<Bytes> {
    if let Ok(text) = body.cast::<pyo3::types::PyString>() {
        return Ok(Bytes::from(text.to_str()?.as_bytes().to_vec()));
    }
    if let Ok(bytes) = body.extract::<Vec<u8>>() {
        return Ok(Bytes::from(bytes));
    }
    if body.is_instance_of::<PyDict>() {
        let text: String = body.py().import("json")?.getattr("dumps")?.call1((body,))?.extract()?;
        return Ok(Bytes::from(text.into_bytes()));
    }
    Err(pyo3::exceptions::PyTypeError::new_err(format!(
        "body: expected the answer as bytes, str or the dict to_dict() gave, got {}",
        body.get_type().name()?
    )))
}

/// The result of `client.query(...)`.
#[pyclass(module = "sensorium._core", name = "QueryResult", frozen)]
pub struct QueryResult {
    #[pyo3(get)]
    texts: Vec<String>,
    #[pyo3(get)]
    status: Option<String>,
    #[pyo3(get)]
    query_id: Option<String>,
    #[pyo3(get)]
    gpq_node: Option<String>,
    #[pyo3(get)]
    query_timestamp: Option<f64>,
    #[pyo3(get)]
    loading_timestamp: Option<f64>,
    #[pyo3(get)]
    inference_timestamp: Option<f64>,
    #[pyo3(get)]
    response_timestamp: Option<f64>,
    #[pyo3(get)]
    query_queue_time_sec: Option<f64>,
    #[pyo3(get)]
    inference_time_sec: Option<f64>,
    #[pyo3(get)]
    query_response_time_sec: Option<f64>,
    #[pyo3(get)]
    warnings: Vec<String>,
    raw: Bytes,
}

impl QueryResult {
    /// `texts` are the answer's outputs, already checked (`client::query::output_texts`).
    pub fn new(response: QueryResponse, texts: Vec<String>, raw: Bytes) -> Self {
        QueryResult {
            texts,
            warnings: warnings(&response),
            status: response.status,
            query_id: response.query_id,
            gpq_node: response.gpq_node,
            query_timestamp: response.query_timestamp,
            loading_timestamp: response.loading_timestamp,
            inference_timestamp: response.inference_timestamp,
            response_timestamp: response.response_timestamp,
            query_queue_time_sec: response.query_queue_time_sec,
            inference_time_sec: response.inference_time_sec,
            query_response_time_sec: response.query_response_time_sec,
            raw,
        }
    }
}

#[pymethods]
impl QueryResult {
    /// Equal when the platform's answers are the same bytes: a pickled or copied result equals
    /// its original (two calls' answers differ, if only by their `query_id`).
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<QueryResult>().is_ok_and(|o| o.get().raw == self.raw || canonical(&o.get().raw) == canonical(&self.raw))
    }

    fn __hash__(&self) -> u64 {
        hash_of(&self.raw)
    }

    /// The first output string ("" when the model returned none).
    #[getter]
    fn text(&self) -> &str {
        self.texts.first().map(String::as_str).unwrap_or("")
    }

    /// An encoder's answer as float32 (channels, 768), read from the response; `None` for a
    /// text answer. An encoder queried through `query()` (raw events, say) answers numbers,
    /// which `text` can only show as their JSON; `embed()` is the direct way.
    #[getter]
    fn vectors<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyArray2<f32>>>> {
        match crate::client::query::parse_embeddings(&self.raw, None) {
            Ok((matrix, ..)) => Ok(Some(super::numeric::embeddings_array(py, matrix)?)),
            Err(_) => Ok(None),
        }
    }

    /// The whole response as the service sent it.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        loads(py, &self.raw)
    }

    /// Rebuilds a result from a response body (how results pickle): its bytes, its text, or the
    /// dict `to_dict()` gave.
    #[staticmethod]
    fn from_json(py: Python<'_>, body: &Bound<'_, PyAny>) -> PyResult<Self> {
        let raw = json_body(body)?;
        let parsed: QueryResponse =
            crate::client::transport::decode_json("QueryResult.from_json", &raw).map_err(|e| super::errors::to_pyerr(py, e))?;
        let texts = output_texts(&parsed)
            .map_err(|problem| super::errors::to_pyerr(py, crate::client::Error::unexpected("QueryResult.from_json", problem, &raw)))?;
        Ok(QueryResult::new(parsed, texts, raw))
    }

    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyBytes>,))> {
        let rebuild = py.get_type::<QueryResult>().getattr("from_json")?;
        Ok((rebuild, (PyBytes::new(py, &self.raw),)))
    }

    fn __repr__(&self) -> String {
        let text = self.text();
        let shown: String = text.chars().take(60).collect();
        let ellipsis = if shown.len() < text.len() { "..." } else { "" };
        format!(
            "QueryResult(query_id={:?}, status={:?}, text={:?}{})",
            self.query_id.as_deref().unwrap_or(""),
            self.status.as_deref().unwrap_or(""),
            shown,
            ellipsis
        )
    }
}

/// The result of `client.embed(...)`: one 768-dimension float32 vector per channel.
#[pyclass(module = "sensorium._core", name = "Embeddings", frozen)]
pub struct Embeddings {
    /// float32 (channels, 768): the result's own array, the same object on every read. It is
    /// writable, so `e.vectors /= norms` works in place; equality, the hash, `to_dict()` and a
    /// pickle stay the platform's answer as received.
    #[pyo3(get)]
    vectors: Py<PyArray2<f32>>,
    #[pyo3(get)]
    warnings: Vec<String>,
    #[pyo3(get)]
    query_id: Option<String>,
    raw: Bytes,
}

/// What the I/O task returns; the numpy array is built once the GIL is held.
pub struct EmbeddingsData {
    pub matrix: EmbeddingMatrix,
    pub warnings: Vec<String>,
    pub query_id: Option<String>,
    pub raw: Bytes,
}

impl<'py> IntoPyObject<'py> for EmbeddingsData {
    type Target = Embeddings;
    type Output = Bound<'py, Embeddings>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, Embeddings>> {
        let vectors = super::numeric::embeddings_array(py, self.matrix)?.unbind();
        Bound::new(py, Embeddings { vectors, warnings: self.warnings, query_id: self.query_id, raw: self.raw })
    }
}

#[pymethods]
impl Embeddings {
    /// Equal when the platform's answers are the same bytes, as for `QueryResult`.
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<Embeddings>().is_ok_and(|o| o.get().raw == self.raw || canonical(&o.get().raw) == canonical(&self.raw))
    }

    fn __hash__(&self) -> u64 {
        hash_of(&self.raw)
    }

    /// (channels, dimension).
    #[getter]
    fn shape(&self, py: Python<'_>) -> (usize, usize) {
        let dims = numpy::PyUntypedArrayMethods::shape(self.vectors.bind(py).as_untyped());
        (dims[0], dims[1])
    }

    fn __len__(&self, py: Python<'_>) -> usize {
        self.shape(py).0
    }

    #[pyo3(signature = (dtype=None, copy=None))]
    fn __array__<'py>(
        &self,
        py: Python<'py>,
        dtype: Option<Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let array = self.vectors.bind(py).clone().into_any();
        let array = match dtype {
            Some(dt) => array.call_method1("astype", (dt,))?,
            None => array,
        };
        if copy == Some(true) {
            return array.call_method0("copy");
        }
        Ok(array)
    }

    /// The whole response as the service sent it.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        loads(py, &self.raw)
    }

    /// Rebuilds embeddings from a response body (how they pickle): its bytes, its text, or the
    /// dict `to_dict()` gave.
    #[staticmethod]
    fn from_json<'py>(py: Python<'py>, body: &Bound<'_, PyAny>) -> PyResult<Bound<'py, Embeddings>> {
        let raw = json_body(body)?;
        let data = crate::client::query::parse_embeddings(&raw, None).map_err(|e| super::errors::to_pyerr(py, e))?;
        EmbeddingsData { matrix: data.0, warnings: data.1, query_id: data.2, raw }.into_pyobject(py)
    }

    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyBytes>,))> {
        let rebuild = py.get_type::<Embeddings>().getattr("from_json")?;
        Ok((rebuild, (PyBytes::new(py, &self.raw),)))
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let (rows, cols) = self.shape(py);
        format!("Embeddings(shape=({rows}, {cols}), dtype=float32, warnings={})", self.warnings.len())
    }
}

/// A `data.numeric_array` event whose contents were written to JSON once, in Rust.
#[pyclass(module = "sensorium._core", name = "NumericEvent", frozen)]
pub struct NumericEvent {
    pub json: Bytes,
    #[pyo3(get)]
    pub channels: usize,
    #[pyo3(get)]
    pub window: usize,
}

#[pymethods]
impl NumericEvent {
    #[new]
    fn py_new(array: &Bound<'_, PyAny>) -> PyResult<Self> {
        Self::_from_array(array, "array")
    }

    /// The event of `array`, whose errors name it `argument` (the caller's own parameter, such
    /// as `update`'s `event`).
    #[staticmethod]
    fn _from_array(array: &Bound<'_, PyAny>, argument: &str) -> PyResult<Self> {
        let payload = super::numeric::channels_json(array, argument)
            .map_err(|e| super::errors::to_pyerr(array.py(), e))?;
        Ok(NumericEvent::from_channels(payload))
    }

    /// The event as the platform takes it.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let d = loads(py, &self.json)?;
        d.cast::<PyDict>()?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!("NumericEvent(channels={}, window={})", self.channels, self.window)
    }

    /// Pickles (and copies) as its JSON text, so the numbers come back exactly as written
    /// (a uint64 beyond float64's integers included).
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyBytes>,))> {
        let py = slf.py();
        let rebuild = slf.get_type().getattr("_from_json")?;
        Ok((rebuild, (PyBytes::new(py, &slf.get().json),)))
    }

    /// The event again from the JSON `__reduce__` gave; checked, since a pickle comes from outside.
    #[staticmethod]
    fn _from_json(py: Python<'_>, json: &[u8]) -> PyResult<Self> {
        let shape = || -> Option<(usize, usize)> {
            let event: serde_json::Value = serde_json::from_slice(json).ok()?;
            if event.get("type")?.as_str()? != "data.numeric_array" {
                return None;
            }
            let rows = event.get("event_data")?.get("contents")?.as_array()?;
            let window = rows.first()?.as_array()?.len();
            let numbers = |row: &serde_json::Value| row.as_array().is_some_and(|r| r.len() == window && r.iter().all(serde_json::Value::is_number));
            rows.iter().all(numbers).then_some((rows.len(), window))
        };
        let (channels, window) = shape().ok_or_else(|| {
            super::errors::to_pyerr(py, Error::invalid_argument("json", "is not a data.numeric_array event"))
        })?;
        Ok(NumericEvent { json: Bytes::copy_from_slice(json), channels, window })
    }
}

impl NumericEvent {
    pub fn from_channels(payload: super::numeric::ChannelsJson) -> Self {
        NumericEvent { json: Bytes::from(payload.json), channels: payload.channels, window: payload.window }
    }
}

/// Live byte counts of one transfer, readable from Python while it runs.
#[pyclass(module = "sensorium._core", name = "Progress", frozen)]
pub struct Progress {
    pub inner: std::sync::Arc<crate::client::upload::TransferProgress>,
}

#[pymethods]
impl Progress {
    #[new]
    fn py_new() -> Self {
        Progress { inner: Default::default() }
    }

    /// Bytes moved so far (bytes a resumed upload had already sent count as done).
    #[getter]
    fn done(&self) -> u64 {
        self.inner.snapshot().0
    }

    /// Bytes in all (0 until known).
    #[getter]
    fn total(&self) -> u64 {
        self.inner.snapshot().1
    }

    /// Whether a transfer still holds these counters. A transfer holds them until its future
    /// is dropped, finished or cancelled, so a caller that cancelled it can wait for this to turn
    /// false to know that it has stopped (no request of it left, its partial files removed).
    #[getter]
    fn busy(&self) -> bool {
        std::sync::Arc::strong_count(&self.inner) > 1
    }

    fn __repr__(&self) -> String {
        let (done, total) = self.inner.snapshot();
        format!("Progress(done={done}, total={total})")
    }
}
