//! Rust `log` records go to Python's `logging`, under the `sensorium` logger.
//!
//! Delivering a record runs Python code (`getLogger`, the user's handlers and filters), and
//! Python runs pending signal handlers inside any Python code: a Ctrl-C that lands there raises
//! `KeyboardInterrupt` out of the logging call. `pyo3_log` leaves such an exception set on the
//! thread, where it would surface as a `SystemError` from whichever call returns next, or be
//! overwritten and lost. `Bridge` takes it instead and hands it to `interrupts`, which sees it
//! raised by the call it happened in.

use std::sync::atomic::{AtomicI64, Ordering};

use log::{Level, LevelFilter, Log, Metadata, Record};
use parking_lot::Mutex;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use super::interrupts;

static RESET: Mutex<Option<pyo3_log::ResetHandle>> = Mutex::new(None);
static LOGGER: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static LAST_LEVEL: AtomicI64 = AtomicI64::new(-1);

/// Installs the bridge once per process. Levels are cached (so a disabled debug line costs no
/// GIL); `reset_logging` drops the cache after the user reconfigures logging.
pub fn install(py: Python<'_>) {
    // Debug, pyo3_log's default top filter: trace lines never reach Python.
    let Ok(logger) = pyo3_log::Logger::new(py, pyo3_log::Caching::LoggersAndLevels) else { return };
    let logger = logger.set_prefix("sensorium");
    let handle = logger.reset_handle();
    if log::set_boxed_logger(Box::new(Bridge(logger))).is_ok() {
        log::set_max_level(LevelFilter::Debug);
        *RESET.lock() = Some(handle);
    }
}

struct Bridge(pyo3_log::Logger);

impl Log for Bridge {
    fn enabled(&self, metadata: &Metadata) -> bool {
        self.0.enabled(metadata)
    }

    fn log(&self, record: &Record) {
        // Another crate's lines (rustls, hyper, tungstenite) go at debug: they tell of failures the
        // SDK reports itself, by an exception or a line of its own, and Python, with no logging
        // set up, prints warnings and errors to stderr: a refused certificate printed
        // `failed to verify TLS certificate` once per attempt above the exception that said so.
        if record.level() < Level::Debug && !is_ours(record.target()) {
            let args = *record.args();
            let demoted = Record::builder()
                .args(args)
                .level(Level::Debug)
                .target(record.target())
                .module_path(record.module_path())
                .file(record.file())
                .line(record.line())
                .build();
            return self.deliver(&demoted);
        }
        self.deliver(record);
    }

    fn flush(&self) {}
}

/// Whether a record's target is this crate's own (`_core::client::transport`).
fn is_ours(target: &str) -> bool {
    target.strip_prefix(env!("CARGO_CRATE_NAME")).is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
}

impl Bridge {
    fn deliver(&self, record: &Record) {
        // Answered from the cache: a disabled line takes no GIL.
        if !self.0.enabled(record.metadata()) {
            return;
        }
        // Most lines come from I/O threads: past interpreter exit, attaching would end them.
        let Some(_entry) = super::exiting::enter() else { return };
        Python::attach(|py| {
            let earlier = PyErr::take(py);
            self.0.log(record);
            let raised = PyErr::take(py);
            if let Some(earlier) = earlier {
                earlier.restore(py);
            }
            if let Some(raised) = raised {
                hand_on(py, raised);
            }
        });
    }
}

/// Where an exception raised while logging goes. An ordinary error (`Exception`) is the logging
/// setup's and must not fail a request: Python reports it as unraisable, as its own logging does.
/// Anything else came from a signal handler (a Ctrl-C's `KeyboardInterrupt`), and the call it
/// happened in raises it (`interrupts::keep`).
fn hand_on(py: Python<'_>, raised: PyErr) {
    if let Some(ordinary) = interrupts::keep(py, raised) {
        ordinary.write_unraisable(py, None);
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
///
/// `getEffectiveLevel` is Python code, so a Ctrl-C can land in it: that `KeyboardInterrupt` (any
/// exception that is not an `Exception`) is the caller's to raise. A broken logging setup is not a
/// reason to fail a request, so ordinary errors are ignored.
pub fn sync_level(py: Python<'_>) -> PyResult<()> {
    let level = LOGGER
        .get_or_try_init(py, || -> PyResult<Py<PyAny>> {
            Ok(py.import("logging")?.getattr("getLogger")?.call1(("sensorium",))?.unbind())
        })
        .and_then(|logger| logger.bind(py).call_method0("getEffectiveLevel")?.extract::<i64>());
    match level {
        Ok(level) => {
            if LAST_LEVEL.swap(level, Ordering::Relaxed) != level {
                reset_logging();
            }
            Ok(())
        }
        Err(err) if err.is_instance_of::<PyException>(py) => Ok(()),
        Err(interrupt) => Err(interrupt),
    }
}

#[cfg(test)]
mod tests {
    use super::is_ours;

    #[test]
    fn only_this_crates_lines_keep_their_level() {
        assert!(is_ours("_core") && is_ours("_core::client::transport"));
        for other in ["_core_extra::x", "rustls_platform_verifier::verification::others", "hyper_util::client", "sensorium"] {
            assert!(!is_ours(other), "{other}");
        }
    }
}
