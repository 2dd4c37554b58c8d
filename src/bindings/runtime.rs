//! The process's tokio runtime and the two ways Python waits on it: blocking (interruptible by
//! Ctrl-C) and asyncio (a real awaitable on the running loop).
//!
//! The runtime is created lazily and keyed on the process id. After `os.fork` the child sees a
//! different pid and builds a fresh runtime instead of touching the parent's threads, which do
//! not exist in the child.

use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;
use pyo3_async_runtimes::generic::{self, ContextExt, Runtime};
use pyo3_async_runtimes::TaskLocals;
use tokio::runtime::Runtime as TokioRuntime;

/// How long a blocking wait sleeps (without the GIL) before checking for signals.
const SIGNAL_CHECK_INTERVAL: Duration = Duration::from_millis(50);

static RUNTIME: Mutex<Option<(u32, Arc<TokioRuntime>)>> = Mutex::new(None);

/// The runtime for this process, created on first use.
pub fn runtime() -> PyResult<Arc<TokioRuntime>> {
    let pid = std::process::id();
    let mut slot = RUNTIME.lock();
    if let Some((owner, rt)) = slot.as_ref() {
        if *owner == pid {
            return Ok(rt.clone());
        }
        // Inherited from the parent across fork: its worker threads are gone. Leak it rather
        // than drop it, since dropping would try to join threads that do not exist here.
        if let Some((_, stale)) = slot.take() {
            std::mem::forget(stale);
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(worker_threads())
        .thread_name("sensorium-io")
        .enable_all()
        .build()
        .map_err(|e| {
            pyo3::exceptions::PyRuntimeError::new_err(format!(
                "could not start the sensorium I/O runtime: {e}"
            ))
        })?;
    let rt = Arc::new(rt);
    *slot = Some((pid, rt.clone()));
    Ok(rt)
}

fn worker_threads() -> usize {
    std::env::var("SENSORIUM_IO_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n: &usize| *n > 0)
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get().min(4))
                .unwrap_or(2)
        })
}

/// Runs `fut` on the runtime and waits for it with the GIL released, checking for signals
/// between short slices so Ctrl-C raises `KeyboardInterrupt` promptly. On a signal the task is
/// aborted, which drops the in-flight request.
pub fn wait<F, T>(py: Python<'_>, fut: F) -> PyResult<T>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: Send + 'static,
{
    wait_ticking(py, fut, None)
}

/// How often a long transfer reports progress to Python.
pub const TICK_INTERVAL: Duration = Duration::from_millis(200);

/// `wait`, calling `tick()` on this (the caller's) thread about every `TICK_INTERVAL`, with the
/// GIL held, so progress callbacks never run on an I/O worker. An exception from `tick` aborts
/// the call like Ctrl-C does.
pub fn wait_ticking<F, T>(py: Python<'_>, fut: F, tick: Option<&Bound<'_, PyAny>>) -> PyResult<T>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: Send + 'static,
{
    let rt = runtime()?;
    let (tx, rx) = mpsc::sync_channel(1);
    let task = rt.spawn(async move {
        let _ = tx.send(fut.await);
    });
    let mut rx = rx;
    let mut last_tick = std::time::Instant::now();
    loop {
        // The receiver moves into the GIL-free closure and back out each slice.
        let (polled, back) = py.detach(move || (rx.recv_timeout(SIGNAL_CHECK_INTERVAL), rx));
        rx = back;
        match polled {
            Ok(result) => return result,
            Err(RecvTimeoutError::Disconnected) => {
                return Err(pyo3::exceptions::PyRuntimeError::new_err(
                    "sensorium: the I/O task ended without a result (it panicked); this is a bug",
                ))
            }
            Err(RecvTimeoutError::Timeout) => {
                if let Err(err) = py.check_signals() {
                    task.abort();
                    return Err(err);
                }
                if let Some(tick) = tick {
                    if last_tick.elapsed() >= TICK_INTERVAL {
                        last_tick = std::time::Instant::now();
                        if let Err(err) = tick.call0() {
                            task.abort();
                            return Err(err);
                        }
                    }
                }
            }
        }
    }
}

/// Turns `fut` into an asyncio awaitable on the running loop. Cancelling the awaitable cancels
/// the Rust future. Must be called from inside a running loop.
pub fn awaitable<'py, F, T>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    // Make sure this process's runtime exists before the generic bridge spawns on it.
    runtime()?;
    generic::future_into_py::<ProcessRuntime, F, T>(py, fut)
}

/// Either blocks (sync client) or returns an awaitable (async client) for the same future, so
/// every binding is written once.
pub fn run<'py, F, T>(py: Python<'py>, asynchronous: bool, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    run_ticking(py, asynchronous, None, fut)
}

/// `run`, with a progress tick for the blocking case (async callers poll on their own loop).
pub fn run_ticking<'py, F, T>(
    py: Python<'py>,
    asynchronous: bool,
    tick: Option<&Bound<'py, PyAny>>,
    fut: F,
) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    super::logging::sync_level(py);
    if asynchronous {
        awaitable(py, fut)
    } else {
        let value = wait_ticking(py, fut, tick)?;
        value.into_py_any(py).map(|v| v.into_bound(py))
    }
}

/// Adapter that lets pyo3-async-runtimes spawn onto the pid-keyed runtime.
pub struct ProcessRuntime;

pub struct ProcessJoinError(tokio::task::JoinError);

impl generic::JoinError for ProcessJoinError {
    fn is_panic(&self) -> bool {
        self.0.is_panic()
    }
    fn into_panic(self) -> Box<dyn std::any::Any + Send + 'static> {
        self.0.into_panic()
    }
}

tokio::task_local! {
    static TASK_LOCALS: std::cell::OnceCell<TaskLocals>;
}

type BoxJoin = Pin<Box<dyn Future<Output = Result<(), ProcessJoinError>> + Send>>;

fn current_handle() -> tokio::runtime::Handle {
    match runtime() {
        Ok(rt) => rt.handle().clone(),
        // runtime() only fails if the OS refuses threads; the caller already created it once
        // in `awaitable`, so this path is not reachable in practice. Fall back to the ambient
        // runtime when inside one.
        Err(_) => tokio::runtime::Handle::current(),
    }
}

impl Runtime for ProcessRuntime {
    type JoinError = ProcessJoinError;
    type JoinHandle = BoxJoin;

    fn spawn<F>(fut: F) -> Self::JoinHandle
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let handle = current_handle().spawn(async move { fut.await });
        Box::pin(async move { handle.await.map_err(ProcessJoinError) })
    }

    fn spawn_blocking<F>(f: F) -> Self::JoinHandle
    where
        F: FnOnce() + Send + 'static,
    {
        let handle = current_handle().spawn_blocking(f);
        Box::pin(async move { handle.await.map_err(ProcessJoinError) })
    }
}

impl ContextExt for ProcessRuntime {
    fn scope<F, R>(locals: TaskLocals, fut: F) -> Pin<Box<dyn Future<Output = R> + Send>>
    where
        F: Future<Output = R> + Send + 'static,
    {
        let cell = std::cell::OnceCell::new();
        let _ = cell.set(locals);
        Box::pin(TASK_LOCALS.scope(cell, fut))
    }

    fn get_task_locals() -> Option<TaskLocals> {
        TASK_LOCALS
            .try_with(|c| c.get().cloned())
            .unwrap_or_default()
    }
}
