//! Maps `client::Error` onto the exception classes of `sensorium.errors`.

use pyo3::exceptions::{PyOSError, PyRuntimeError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use pyo3::IntoPyObjectExt;

use super::convert::value_to_py;
use crate::client::Error;

/// Builds the Python exception for `err`. The classes and their selection by status live in
/// `sensorium/errors.py`; this only passes the fields across.
pub fn to_pyerr(py: Python<'_>, err: Error) -> PyErr {
    match build(py, err) {
        Ok(e) => e,
        Err(e) => e,
    }
}

fn build(py: Python<'_>, err: Error) -> PyResult<PyErr> {
    let errors = py.import("sensorium.errors")?;
    let message = err.to_string();
    let exc = match err {
        Error::Api(api) => {
            let entries = PyList::empty(py);
            for e in &api.errors {
                let d = PyDict::new(py);
                d.set_item("code", &e.code)?;
                d.set_item("message", &e.message)?;
                d.set_item("suggestion", &e.suggestion)?;
                d.set_item("error_uid", &e.error_uid)?;
                entries.append(d)?;
            }
            let json = match &api.json {
                Some(v) => value_to_py(py, v)?,
                None => py.None().into_bound(py),
            };
            let kwargs = PyDict::new(py);
            kwargs.set_item("status", api.status)?;
            kwargs.set_item("errors", entries)?;
            kwargs.set_item("body", &api.body)?;
            kwargs.set_item("json", json)?;
            kwargs.set_item("method", &api.method)?;
            kwargs.set_item("url", &api.url)?;
            kwargs.set_item("retry_after", api.retry_after.map(|d| d.as_secs_f64()))?;
            errors.getattr("_api_error")?.call((message,), Some(&kwargs))?
        }
        Error::Connection { .. } => errors.getattr("APIConnectionError")?.call1((message,))?,
        Error::Timeout { .. } => errors.getattr("APITimeoutError")?.call1((message,))?,
        Error::InvalidArgument { argument, .. } => {
            let kwargs = PyDict::new(py);
            kwargs.set_item("argument", argument)?;
            errors.getattr("InvalidArgumentError")?.call((message,), Some(&kwargs))?
        }
        Error::Config(_) => errors.getattr("ConfigurationError")?.call1((message,))?,
        Error::QueryFailed { query_id, error_msg, response } => {
            let kwargs = PyDict::new(py);
            kwargs.set_item("query_id", query_id)?;
            kwargs.set_item("error_msg", error_msg)?;
            kwargs.set_item("response", value_to_py(py, &response)?)?;
            errors.getattr("QueryFailedError")?.call((message,), Some(&kwargs))?
        }
        Error::Io { path, source } => {
            let errno = source.raw_os_error();
            // OSError(errno, strerror, filename) picks the subclass (FileNotFoundError...).
            return Ok(match errno {
                Some(code) => PyOSError::new_err((code, source.to_string(), path)),
                None => PyOSError::new_err(format!("{path}: {source}")),
            });
        }
        Error::Decode { body, .. } => {
            let kwargs = PyDict::new(py);
            kwargs.set_item("body", body)?;
            errors.getattr("APIResponseValidationError")?.call((message,), Some(&kwargs))?
        }
        Error::Transfer { resumable, upload_id, .. } => {
            let kwargs = PyDict::new(py);
            kwargs.set_item("resumable", resumable)?;
            kwargs.set_item("upload_id", upload_id)?;
            errors.getattr("TransferError")?.call((message,), Some(&kwargs))?
        }
    };
    Ok(PyErr::from_value(exc))
}

/// A client result that becomes a Python object, or the right exception, only once the GIL is
/// held by the caller's thread (or the async bridge's blocking thread), never on an I/O worker.
pub struct Outcome<T>(pub Result<T, Error>);

impl<'py, T> IntoPyObject<'py> for Outcome<T>
where
    T: IntoPyObject<'py>,
{
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self.0 {
            Ok(v) => v.into_bound_py_any(py),
            Err(e) => Err(to_pyerr(py, e)),
        }
    }
}

pub fn runtime_error(message: impl Into<String>) -> PyErr {
    PyRuntimeError::new_err(message.into())
}
