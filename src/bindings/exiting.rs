//! Interpreter exit. Once Python finalizes, CPython (up to 3.13) ends any other thread that asks
//! for the GIL with `pthread_exit`, a forced unwind; met with Rust frames on that thread's stack,
//! it aborts the whole process (SIGABRT, exit code 134, nothing on stderr). Rust frames are there
//! whenever a thread of ours attaches: an I/O thread delivering a log line (`logging`), a
//! pyo3-async-runtimes completion, and a daemon thread of the program coming back from a wait
//! with the GIL released (`detach`).
//!
//! An `atexit` hook (atexit runs before finalization) closes the gate: past it, log lines from
//! other threads are dropped, completions are not delivered, and a daemon thread that comes back
//! from a wait stays parked with the GIL released until the process ends (CPython 3.14 does the
//! same to threads that ask for the GIL during finalization). Threads already on their way in
//! hold an `Entry`; the hook lets the GIL go and waits for them (bounded) before returning, so
//! none of them is left waiting for the GIL when finalization starts. Entering counts before
//! checking, and closing sets the flag before counting (both `SeqCst`): of a thread entering and
//! the hook closing at once, at least one sees the other.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pyo3::prelude::*;

static CLOSED: AtomicBool = AtomicBool::new(false);
/// Threads between `enter` and the drop of their `Entry`.
static INSIDE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Set on the thread that ran the hook: the one that finalizes, which Python never ends, so
    /// the `atexit` functions that run after ours can still log and make calls.
    static CLOSER: Cell<bool> = const { Cell::new(false) };
}

/// How long the hook waits for threads already on their way in (a log handler that blocks).
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// Leave to attach to the interpreter, held until the thread is done with it.
#[must_use]
pub struct Entry(());

impl Drop for Entry {
    fn drop(&mut self) {
        INSIDE.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Leave to attach, or `None` once the interpreter is exiting.
pub fn enter() -> Option<Entry> {
    INSIDE.fetch_add(1, Ordering::SeqCst);
    let entry = Entry(());
    if CLOSED.load(Ordering::SeqCst) && !CLOSER.with(Cell::get) {
        return None;
    }
    Some(entry)
}

/// `py.detach(f)` for a thread of the program: once the interpreter is exiting, the thread does
/// not come back from `f` (it would be ended inside Rust frames) but stays parked until the
/// process ends. Only daemon threads can be there then: Python joins the others before atexit.
pub fn detach<T, F>(py: Python<'_>, f: F) -> T
where
    F: Send + FnOnce() -> T,
    T: Send,
{
    // The entry is held until the GIL is back, and dropped after `detach` returns.
    let (value, _entry) = py.detach(|| {
        let value = f();
        let entry = enter().unwrap_or_else(|| loop {
            std::thread::park();
        });
        (value, entry)
    });
    value
}

/// The `atexit` hook (registered when the module loads, after `logging`, so it runs before
/// `logging.shutdown`).
#[pyfunction]
#[pyo3(name = "_close_for_exit")]
pub fn close_for_exit(py: Python<'_>) {
    CLOSER.with(|closer| closer.set(true));
    CLOSED.store(true, Ordering::SeqCst);
    if INSIDE.load(Ordering::SeqCst) == 0 {
        return;
    }
    // Those inside need the GIL to finish.
    py.detach(|| {
        let deadline = Instant::now() + DRAIN_LIMIT;
        while INSIDE.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}

/// Registers `close_for_exit` with `atexit`.
pub fn install(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let hook = wrap_pyfunction!(close_for_exit, m)?;
    m.py().import("atexit")?.call_method1("register", (hook,))?;
    Ok(())
}
