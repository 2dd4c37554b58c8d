//! The process's tokio runtime and the two ways Python waits on it: blocking (interruptible by
//! Ctrl-C) and asyncio (a real awaitable on the running loop).
//!
//! The runtime is created lazily and keyed on a fork generation that a `pthread_atfork` child
//! handler bumps. After `os.fork` the child sees a new generation and builds a fresh runtime
//! instead of touching the parent's threads, which do not exist in the child.

use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::io::AsRawFd;
use std::os::unix::net::UnixStream;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use parking_lot::Mutex;
use pyo3::exceptions::{PyKeyError, PyNotImplementedError, PyTypeError};
use pyo3::intern;
use pyo3::gc::{PyTraverseError, PyVisit};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::IntoPyObjectExt;
use pyo3_async_runtimes::generic::{self, ContextExt, Runtime};
use pyo3_async_runtimes::TaskLocals;
use tokio::runtime::Runtime as TokioRuntime;

use super::errors::{internal_error, panic_detail};
use super::exiting;
use crate::client::lanes::{Lane, Lanes};
use crate::client::Transport;

/// How long a blocking wait sleeps (without the GIL) before checking for signals.
const SIGNAL_CHECK_INTERVAL: Duration = Duration::from_millis(50);

static RUNTIME: Mutex<Option<(u64, Arc<TokioRuntime>)>> = Mutex::new(None);

/// Which fork of the process this is (see `crate::client::fork`).
pub use crate::client::fork::generation as fork_generation;

/// The runtime for this process, created on first use.
pub fn runtime() -> PyResult<Arc<TokioRuntime>> {
    let generation = fork_generation();
    let mut slot = RUNTIME.lock();
    if let Some((owner, rt)) = slot.as_ref() {
        if *owner == generation {
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
    *slot = Some((generation, rt.clone()));
    Ok(rt)
}

/// One core is left to the Python thread that starts the calls and takes their results (up to 4
/// workers; `SENSORIUM_IO_THREADS` overrides). On the 2-core VM, one worker instead of two cut a
/// blocking query from 4.5 context switches to 3 and its median from 133-140 µs to 121 µs
/// (`benchmarks/run.py --quick --only sequential`), where pyreqwest, on one runtime thread, took
/// 98-136 µs; `embed_many` (Python writing bodies, the worker sending and parsing) kept its
/// throughput: 8,900-10,200 requests/s against 8,000-9,100 with two.
fn worker_threads() -> usize {
    std::env::var("SENSORIUM_IO_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n: &usize| *n > 0)
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get().saturating_sub(1).clamp(1, 4))
                .unwrap_or(1)
        })
}

/// Runs `fut` on the runtime and waits for it with the GIL released, checking for signals
/// between short slices so Ctrl-C raises `KeyboardInterrupt` promptly. On a signal the task is
/// aborted, which drops the in-flight request.
pub fn wait<F, T>(py: Python<'_>, call: &'static str, fut: F) -> PyResult<T>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: Send + 'static,
{
    wait_ticking(py, call, fut, None)
}

/// `fut`, with a panic inside it turned into `InternalError` naming `call`: no panic crosses
/// into Python, whichever thread it happens on.
fn contain_panics<F, T>(call: &'static str, fut: F) -> impl Future<Output = PyResult<T>> + Send + 'static
where
    F: Future<Output = PyResult<T>> + Send + 'static,
{
    AssertUnwindSafe(fut).catch_unwind().map(move |outcome| {
        outcome.unwrap_or_else(|payload| Err(internal_error(call, &panic_detail(&*payload))))
    })
}

/// How often a long transfer reports progress to Python.
pub const TICK_INTERVAL: Duration = Duration::from_millis(200);

/// `wait`, calling `tick()` on this (the caller's) thread about every `TICK_INTERVAL`, with the
/// GIL held, so progress callbacks never run on an I/O worker. An exception from `tick` aborts
/// the call like Ctrl-C does.
///
/// Spawn + channel, measured against polling the future on this thread (`block_on` of a
/// `timeout` slice, GIL released): on the 2-core VM the in-place variant had the same median
/// latency but more context switches per call (about 7 vs 5; the I/O driver stays on a worker,
/// which then has to wake this thread), so the spawn path stays.
pub fn wait_ticking<F, T>(py: Python<'_>, call: &'static str, fut: F, tick: Option<&Bound<'_, PyAny>>) -> PyResult<T>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: Send + 'static,
{
    let rt = runtime()?;
    let (tx, rx) = mpsc::sync_channel(1);
    let fut = contain_panics(call, fut);
    let task = rt.spawn(async move {
        let _ = tx.send(fut.await);
    });
    let mut rx = rx;
    let mut last_tick = std::time::Instant::now();
    loop {
        // The receiver moves into the GIL-free closure and back out each slice.
        let (polled, back) = exiting::detach(py, move || (rx.recv_timeout(SIGNAL_CHECK_INTERVAL), rx));
        rx = back;
        match polled {
            Ok(result) => return result,
            Err(RecvTimeoutError::Disconnected) => {
                return Err(internal_error(call, "the I/O task ended without a result"))
            }
            Err(RecvTimeoutError::Timeout) => {
                if let Err(err) = py.check_signals() {
                    settle_aborted(py, &rt, task);
                    return Err(err);
                }
                if let Some(tick) = tick {
                    if last_tick.elapsed() >= TICK_INTERVAL {
                        last_tick = std::time::Instant::now();
                        if let Err(err) = tick.call0() {
                            settle_aborted(py, &rt, task);
                            return Err(err);
                        }
                    }
                }
            }
        }
    }
}

/// How long an aborted call may take to be dropped before the caller gets its exception anyway.
const SETTLE_LIMIT: Duration = Duration::from_secs(2);

/// Aborts `task` and waits (GIL released, bounded) until its future is dropped: the call's
/// exception then reaches Python only once the transfer has really stopped, its partial files
/// removed and no further request of it to come.
fn settle_aborted(py: Python<'_>, rt: &TokioRuntime, task: tokio::task::JoinHandle<()>) {
    task.abort();
    exiting::detach(py, || {
        rt.block_on(async {
            let _ = tokio::time::timeout(SETTLE_LIMIT, task).await;
        })
    });
}

/// Turns `fut` into an asyncio future on the running loop. Cancelling it aborts the Rust task.
/// Must be called from inside a running loop (a RuntimeError otherwise).
///
/// The result comes back through the loop's completion queue (`LoopBridge`): the task pushes its
/// Rust value, the loop thread converts it. No tokio thread ever takes the GIL. Loops that cannot
/// host the queue (not weak-referenceable, or without `add_reader`, like the Windows proactor)
/// fall back to pyo3-async-runtimes' per-request bridge.
pub fn awaitable<'py, F, T>(py: Python<'py>, call: &'static str, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let rt = runtime()?;
    let fut = contain_panics(call, fut);
    let event_loop = running_loop(py)?;
    let Some(bridge) = LoopBridge::for_loop(py, &event_loop)? else {
        return generic::future_into_py::<ProcessRuntime, _, T>(py, fut);
    };
    let future = event_loop.call_method0(intern!(py, "create_future"))?;
    let bridge_ref = bridge.get();
    let id = bridge_ref.next_id.fetch_add(1, Ordering::Relaxed);
    bridge_ref.pending.lock().insert(id, future.clone().unbind());
    let shared = bridge_ref.shared.clone();
    let task = rt.spawn(async move {
        let result = fut.await;
        let completion: Completion = Box::new(move |py: Python<'_>| result.and_then(|v| v.into_py_any(py)));
        shared.push(id, completion);
    });
    let on_done = CancelOnDone { bridge: bridge.unbind(), id, abort: task.abort_handle() };
    future.call_method1(intern!(py, "add_done_callback"), (on_done,))?;
    Ok(future)
}

/// The running loop, or a RuntimeError that says what the caller did wrong.
fn running_loop<'py>(py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
    static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let get = GET_RUNNING_LOOP.get_or_try_init(py, || {
        py.import("asyncio")?.getattr("_get_running_loop").map(Bound::unbind)
    })?;
    let event_loop = get.bind(py).call0()?;
    if event_loop.is_none() {
        return Err(pyo3::exceptions::PyRuntimeError::new_err(
            "sensorium: an AsyncClient call must be awaited inside a running asyncio event loop \
             (use sensorium.Client outside one)",
        ));
    }
    Ok(event_loop)
}

/// A finished request, converted to Python only on the loop thread.
type Completion = Box<dyn FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send>;

/// The half of a loop's bridge that tokio tasks touch: the queue and the wake-up socket. No
/// Python objects in here, so it can be dropped on any thread.
struct Shared {
    queue: Mutex<Vec<(u64, Completion)>>,
    /// Read end, registered with `loop.add_reader`; both ends live as long as any task holds
    /// this, so a late task never writes into a closed socket (no SIGPIPE).
    reader: UnixStream,
    writer: UnixStream,
}

impl Shared {
    fn push(&self, id: u64, completion: Completion) {
        let first = {
            let mut queue = self.queue.lock();
            queue.push((id, completion));
            queue.len() == 1
        };
        // Only the push that makes the queue non-empty wakes the loop; later ones ride along in
        // the same drain. WouldBlock means wake-ups are already pending, so it is not an error.
        if first {
            let _ = (&self.writer).write(&[1]);
        }
    }
}

/// Per-event-loop completion queue. The loop's reader registration holds it while the loop is
/// open; the table that finds it (a WeakKeyDictionary keyed on the loop) only refers to it
/// weakly, since it holds the pending futures, which hold the loop: a strong entry kept every loop
/// closed with a call pending alive, and its sockets open, for good. Closed, the loop, the bridge
/// and those futures are one cycle the garbage collector frees (`__traverse__`), as it frees a
/// pure-Python loop's pending tasks; the sockets close once the tasks still running have ended.
#[pyclass(module = "sensorium._core", name = "_LoopBridge", frozen, weakref)]
pub struct LoopBridge {
    shared: Arc<Shared>,
    /// The asyncio futures still waiting, by id. Only the loop thread touches it.
    pending: Mutex<HashMap<u64, Py<PyAny>>>,
    next_id: AtomicU64,
    generation: u64,
}

impl LoopBridge {
    /// This loop's bridge, created and registered on first use. `None` if the loop cannot host
    /// one.
    fn for_loop<'py>(
        py: Python<'py>,
        event_loop: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, LoopBridge>>> {
        static BRIDGES: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let bridges = BRIDGES
            .get_or_try_init(py, || {
                py.import("weakref")?.getattr("WeakKeyDictionary")?.call0().map(Bound::unbind)
            })?
            .bind(py);
        let generation = fork_generation();
        match bridges.get_item(event_loop) {
            Ok(found) => {
                // A weak reference: `None` once the bridge was freed (the loop dropped it).
                if let Ok(bridge) = found.call0()?.cast_into::<LoopBridge>() {
                    if bridge.get().generation == generation {
                        return Ok(Some(bridge));
                    }
                    // Inherited across fork: the parent's tasks will never complete here, and
                    // the socket is shared with the parent. Start over with a new one.
                    let fd = bridge.get().shared.reader.as_raw_fd();
                    // An ordinary error only means the loop no longer watches it; a Ctrl-C
                    // raised meanwhile is the caller's.
                    if let Err(err) = event_loop.call_method1(intern!(py, "remove_reader"), (fd,)) {
                        drop(super::interrupts::keep(py, err));
                    }
                }
            }
            Err(err) if err.is_instance_of::<PyKeyError>(py) => {}
            // Not weak-referenceable: no per-loop state we could clean up; use the fallback.
            Err(err) if err.is_instance_of::<PyTypeError>(py) => return Ok(None),
            Err(err) => return Err(err),
        }
        let (reader, writer) = UnixStream::pair()
            .and_then(|(r, w)| {
                r.set_nonblocking(true)?;
                w.set_nonblocking(true)?;
                Ok((r, w))
            })
            .map_err(|e| {
                pyo3::exceptions::PyOSError::new_err(format!("sensorium: could not create the loop wake-up socket: {e}"))
            })?;
        let fd = reader.as_raw_fd();
        let bridge = Bound::new(
            py,
            LoopBridge {
                shared: Arc::new(Shared { queue: Mutex::new(Vec::new()), reader, writer }),
                pending: Mutex::new(HashMap::new()),
                next_id: AtomicU64::new(0),
                generation,
            },
        )?;
        match event_loop.call_method1(intern!(py, "add_reader"), (fd, bridge.clone())) {
            Ok(_) => {}
            Err(err) if err.is_instance_of::<PyNotImplementedError>(py) => return Ok(None),
            Err(err) => return Err(err),
        }
        static WEAK_REF: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let weak_ref =
            WEAK_REF.get_or_try_init(py, || py.import("weakref")?.getattr("ref").map(Bound::unbind))?.bind(py);
        bridges.set_item(event_loop, weak_ref.call1((&bridge,))?)?;
        Ok(Some(bridge))
    }
}

#[pymethods]
impl LoopBridge {
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // Only ever locked briefly by the thread holding the GIL, which is the one collecting.
        if let Some(pending) = self.pending.try_lock() {
            for future in pending.values() {
                visit.call(future)?;
            }
        }
        Ok(())
    }

    fn __clear__(&self) {
        // Dropped outside the lock: freeing a future runs Python code.
        let pending = std::mem::take(&mut *self.pending.lock());
        drop(pending);
    }

    /// The loop's reader callback: runs on the loop thread and settles every finished future.
    fn __call__(&self, py: Python<'_>) {
        // Empty the socket before taking the queue: a push after the take then writes a fresh
        // byte and schedules another drain, so no completion is ever left unannounced.
        let mut sink = [0u8; 256];
        while matches!((&self.shared.reader).read(&mut sink), Ok(n) if n > 0) {}
        let batch = std::mem::take(&mut *self.shared.queue.lock());
        for (id, completion) in batch {
            let future = self.pending.lock().remove(&id);
            let Some(future) = future else {
                // Cancelled and already forgotten: drop the result.
                continue;
            };
            let future = future.bind(py);
            let converted = std::panic::catch_unwind(AssertUnwindSafe(|| completion(py)))
                .unwrap_or_else(|payload| Err(internal_error("converting a result", &panic_detail(&*payload))));
            let settled = match converted {
                Ok(value) => future.call_method1(intern!(py, "set_result"), (value,)),
                Err(err) => future.call_method1(intern!(py, "set_exception"), (err.into_value(py),)),
            };
            if let Err(err) = settled {
                // Cancelled after the task finished but before its done-callback ran: the
                // result is simply not wanted (InvalidStateError). Checking `done()` only on this
                // rare path saves a Python call per request.
                let cancelled = future.call_method0(intern!(py, "done")).and_then(|d| d.is_truthy()).unwrap_or(false);
                if !cancelled {
                    // Nothing sensible to raise into: the loop would only log it. Do the same.
                    err.write_unraisable(py, Some(future));
                }
            }
        }
    }
}

/// Done-callback on each awaitable's future: forgets the future and, if it was cancelled before
/// the request finished, aborts the Rust task (`abort` is thread-safe and a no-op once done).
#[pyclass(module = "sensorium._core", name = "_CancelOnDone", frozen)]
pub struct CancelOnDone {
    bridge: Py<LoopBridge>,
    id: u64,
    abort: tokio::task::AbortHandle,
}

#[pymethods]
impl CancelOnDone {
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.bridge)
    }

    fn __call__(&self, _future: &Bound<'_, PyAny>) {
        self.bridge.get().pending.lock().remove(&self.id);
        self.abort.abort();
    }
}

/// Either blocks (sync client) or returns an awaitable (async client) for the same future, so
/// every binding is written once.
/// `call` names the operation in the `InternalError` a panic would become.
pub fn run<'py, F, T>(py: Python<'py>, call: &'static str, asynchronous: bool, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    run_ticking(py, call, asynchronous, None, fut)
}

/// `run`, with a progress tick for the blocking case (async callers poll on their own loop).
pub fn run_ticking<'py, F, T>(
    py: Python<'py>,
    call: &'static str,
    asynchronous: bool,
    tick: Option<&Bound<'py, PyAny>>,
    fut: F,
) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    super::logging::sync_level(py)?;
    if asynchronous {
        awaitable(py, call, fut)
    } else {
        let value = wait_ticking(py, call, fut, tick)?;
        value.into_py_any(py).map(|v| v.into_bound(py))
    }
}

/// `run` for a call that is one exchange of requests and answers with nothing spawned (query,
/// embed, the JSON endpoints). `make` builds the call's future from the transport it must use.
/// A blocking caller runs it on its own thread, on one of the transport's lanes
/// (`crate::client::lanes`: one context switch per request instead of three); an async caller
/// gets an awaitable on the shared runtime, like `run`.
pub fn run_unary<'py, M, F, T>(
    py: Python<'py>,
    call: &'static str,
    asynchronous: bool,
    transport: Transport,
    make: M,
) -> PyResult<Bound<'py, PyAny>>
where
    M: FnOnce(Transport) -> F,
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    // A thread already inside a tokio runtime (Python called back from some other library's
    // runtime) cannot start another one there; it waits on the shared runtime instead.
    if asynchronous || tokio::runtime::Handle::try_current().is_ok() {
        return run(py, call, asynchronous, make(transport));
    }
    super::logging::sync_level(py)?;
    let lanes = transport.lanes();
    // Building a lane takes about 2 ms; other threads keep the GIL meanwhile.
    let lane = if lanes.has_idle() { lanes.take() } else { exiting::detach(py, || lanes.take()) };
    let Some(lane) = lane else {
        return run(py, call, asynchronous, make(transport));
    };
    let lane = Borrowed { lanes, lane: Some(lane) };
    let fut = make(transport.on_lane(lane.get()));
    let value = wait_on_lane(py, call, lane.get(), fut)?;
    value.into_py_any(py).map(|v| v.into_bound(py))
}

/// A lane taken for one call, given back however the call ends.
struct Borrowed<'a> {
    lanes: &'a Lanes,
    lane: Option<Lane>,
}

impl Borrowed<'_> {
    fn get(&self) -> &Lane {
        // Only `Drop` takes it out.
        self.lane.as_ref().unwrap_or_else(|| unreachable!("a borrowed lane is present until given back"))
    }
}

impl Drop for Borrowed<'_> {
    fn drop(&mut self) {
        if let Some(lane) = self.lane.take() {
            self.lanes.give_back(lane);
        }
    }
}

/// Drives `fut` on `lane` from this thread with the GIL released, in slices of
/// `SIGNAL_CHECK_INTERVAL` so Ctrl-C raises `KeyboardInterrupt` promptly (the in-flight request
/// is dropped).
fn wait_on_lane<F, T>(py: Python<'_>, call: &'static str, lane: &Lane, fut: F) -> PyResult<T>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: Send + 'static,
{
    let mut fut = Box::pin(contain_panics(call, fut));
    loop {
        let (slice, raised) =
            super::interrupts::catching(|| exiting::detach(py, || lane.block_on_slice(&mut fut, SIGNAL_CHECK_INTERVAL)));
        // A Ctrl-C that landed in Python code run on the side (a log line delivered), or one
        // that is pending.
        let interrupted = match (raised, &slice) {
            (Some(raised), _) => Some(raised),
            (None, Some(_)) => None,
            (None, None) => py.check_signals().err(),
        };
        if let Some(err) = interrupted {
            // Dropped where its connections' tasks live.
            let _current = lane.enter();
            drop(fut);
            return Err(err);
        }
        if let Some(result) = slice {
            return result;
        }
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
        let handle = current_handle().spawn(fut);
        Box::pin(async move { handle.await.map_err(ProcessJoinError) })
    }

    fn spawn_blocking<F>(f: F) -> Self::JoinHandle
    where
        F: FnOnce() + Send + 'static,
    {
        // pyo3-async-runtimes attaches there to deliver a result; past interpreter exit that
        // would end the thread inside Rust frames, so the result is dropped instead.
        let handle = current_handle().spawn_blocking(move || {
            if let Some(_entry) = exiting::enter() {
                f();
            }
        });
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
