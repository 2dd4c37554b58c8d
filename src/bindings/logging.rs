//! Rust `log` records go to Python's `logging`, under the `sensorium` logger.

use std::sync::atomic::{AtomicI64, Ordering};

use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

static RESET: Mutex<Option<pyo3_log::ResetHandle>> = Mutex::new(None);
static LOGGER: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static LAST_LEVEL: AtomicI64 = AtomicI64::new(-1);

/// Installs the bridge once per process. Levels are cached (so a disabled debug line costs no
/// GIL); `reset_logging` drops the cache after the user reconfigures logging.
pub fn install(py: Python<'_>) {
    let Ok(logger) = pyo3_log::Logger::new(py, pyo3_log::Caching::LoggersAndLevels) else { return };
    if let Ok(handle) = logger.set_prefix("sensorium").install() {
        *RESET.lock() = Some(handle);
    }
}

/// Re-reads Python's logging levels (called when a client is created).
#[pyfunction]
pub fn reset_logging() {
    if let Some(handle) = RESET.lock().as_ref() {
        handle.reset();
    }
}

/// Drops the bridge's cached levels when the `sensorium` logger's effective level changed since
/// the last call, so `logging.basicConfig(level=DEBUG)` after creating a client takes effect.
/// One attribute call per request; the cache keeps disabled log lines free of the GIL.
pub fn sync_level(py: Python<'_>) {
    let level = LOGGER
        .get_or_try_init(py, || -> PyResult<Py<PyAny>> {
            Ok(py.import("logging")?.getattr("getLogger")?.call1(("sensorium",))?.unbind())
        })
        .and_then(|logger| logger.bind(py).call_method0("getEffectiveLevel")?.extract::<i64>());
    if let Ok(level) = level {
        if LAST_LEVEL.swap(level, Ordering::Relaxed) != level {
            reset_logging();
        }
    }
}
