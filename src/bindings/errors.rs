//! Maps `client::Error` onto the exception classes of `sensorium.errors`.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Once;

use pyo3::exceptions::PyOSError;
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
            kwargs.set_item("after_lost_response", api.after_lost_response)?;
            errors.getattr("_api_error")?.call((message,), Some(&kwargs))?
        }
        Error::Connection { .. } | Error::Unreachable { timed_out: false, .. } => {
            errors.getattr("APIConnectionError")?.call1((message,))?
        }
        Error::Timeout { .. } | Error::Unreachable { timed_out: true, .. } => {
            errors.getattr("APITimeoutError")?.call1((message,))?
        }
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
        Error::NotRepeated { last, .. } => {
            // The class of the failure (a connection error or a timeout), with the whole message
            // and the flag that tells a caller to check before trying again.
            let class = if matches!(*last, Error::Timeout { .. }) { "APITimeoutError" } else { "APIConnectionError" };
            let kwargs = PyDict::new(py);
            kwargs.set_item("may_have_been_processed", true)?;
            errors.getattr(class)?.call((message,), Some(&kwargs))?
        }
        Error::DeadlinePassed { last } => {
            // The caller (wait) says what ran out; the failure that used the time is the cause.
            let exc = errors.getattr("WaitTimeoutError")?.call1((message,))?;
            let cause = build(py, *last)?;
            exc.setattr("__cause__", cause.into_value(py))?;
            exc
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

/// One outcome per item of a batch call (`download_many`): each becomes its value or its
/// exception *instance*, so one failed item does not hide the others' results.
pub struct Outcomes<T>(pub Vec<Result<T, Error>>);

impl<'py, T> IntoPyObject<'py> for Outcomes<T>
where
    T: IntoPyObject<'py>,
{
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let items = self
            .0
            .into_iter()
            .map(|outcome| match outcome {
                Ok(v) => v.into_bound_py_any(py),
                Err(e) => Ok(to_pyerr(py, e).into_value(py).into_bound(py).into_any()),
            })
            .collect::<PyResult<Vec<_>>>()?;
        items.into_bound_py_any(py)
    }
}

// `sensorium.errors.InternalError`, imported lazily: a `PyErr` of it can be made on any thread
// without the GIL, which a panic caught on an I/O worker needs.
pyo3::import_exception!(sensorium.errors, InternalError);

/// The exception a caught panic becomes: a `SensoriumError` (never `PanicException`, which
/// `except Exception` does not catch, nor a bare `RuntimeError`) that says it is a bug and names
/// the call. The panic itself was logged by the hook `install_panic_hook` sets.
pub fn internal_error(call: &str, detail: &str) -> PyErr {
    InternalError::new_err(format!(
        "sensorium bug: {call} failed with an internal error ({}); the 'sensorium' logger has the \
         details. Please report it.",
        crate::client::error::truncate(detail, 300)
    ))
}

/// The text of a panic's payload.
pub fn panic_detail(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic".to_string()
    }
}

/// Runs `f` (a binding's argument conversion and set-up), turning a panic into `InternalError`
/// naming `call`, and raising a Ctrl-C that Python code run on the side met meanwhile
/// (`interrupts`) in place of the result.
pub fn guard<T>(call: &str, f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    let (result, interrupted) = super::interrupts::catching(|| {
        std::panic::catch_unwind(AssertUnwindSafe(f))
            .unwrap_or_else(|payload| Err(internal_error(call, &panic_detail(&*payload))))
    });
    match interrupted {
        Some(err) => Err(err),
        None => result,
    }
}

/// Logs every panic in this library once, at error level, through the `sensorium` logger,
/// instead of Rust's default backtrace on stderr. The hook belongs to this extension's copy of
/// the standard library, so other Rust extensions in the process keep theirs.
pub fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            log::error!("internal error (a bug in sensorium; please report it): {info}");
        }));
    });
}

/// Panics on purpose, in the binding itself (`place="call"`) or in its I/O task (`"task"`), so
/// the test suite can show that no panic reaches Python. Not public API.
#[pyfunction]
#[pyo3(name = "_panic_for_tests", signature = (place, asynchronous))]
pub fn panic_for_tests<'py>(py: Python<'py>, place: &str, asynchronous: bool) -> PyResult<Bound<'py, PyAny>> {
    guard("_panic_for_tests", || {
        if place == "call" {
            panic!("deliberate panic in the binding (test)");
        }
        super::runtime::run(py, "_panic_for_tests", asynchronous, async move {
            let fail = true;
            if fail {
                panic!("deliberate panic in the I/O task (test)");
            }
            Ok(())
        })
    })
}
