//! Rust `log` records go to Python's `logging`, under the `sensorium` logger.

use parking_lot::Mutex;
use pyo3::prelude::*;

static RESET: Mutex<Option<pyo3_log::ResetHandle>> = Mutex::new(None);

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
