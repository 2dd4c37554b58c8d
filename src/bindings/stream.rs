//! Lens session streams handed to Python. `EventFeed` yields batches of `StreamEvent`s read by a
//! task on the runtime (`client::sse::pump`); dropping or closing the feed stops that task. The
//! iterator protocol (and `last_event_id`) lives in Python, over whole batches. A batch that has
//! left the channel stays in the feed until Python has taken it, so a wait that is cancelled or
//! interrupted loses nothing. `LensSocket` carries one request at a time over a session's
//! WebSocket (`client::websocket`).

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, OnceLock};

use futures_util::FutureExt;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{mpsc, Mutex};
use tokio::task::JoinHandle;

use super::convert::{py_to_value, Json};
use super::errors::{guard, internal_error, panic_detail, to_pyerr, Outcome};
use super::results::{loads, NumericEvent};
use super::runtime;
use crate::client::sse::{Feed, StreamEvent as Event};
use crate::client::websocket::Socket;

/// One event of a lens session's stream: `id` (resume with it as `last_event_id`), `type`, and
/// `event_data` (the payload, decoded on first access).
#[pyclass(module = "sensorium._core", name = "StreamEvent", frozen)]
pub struct StreamEvent {
    event: Event,
    decoded: OnceLock<Py<PyAny>>,
}

#[pymethods]
impl StreamEvent {
    #[getter]
    fn id(&self) -> &str {
        &self.event.id
    }

    #[getter(r#type)]
    fn kind(&self) -> &str {
        &self.event.kind
    }

    /// The event's `event_data` as Python objects (`None` when the frame has none).
    #[getter]
    fn event_data(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        if let Some(done) = self.decoded.get() {
            return Ok(done.clone_ref(py));
        }
        let value = match self.event.event_data() {
            Some(text) => loads(py, text.as_bytes())?.unbind(),
            None => py.None(),
        };
        Ok(self.decoded.get_or_init(|| value).clone_ref(py))
    }

    /// The frame's whole `data` text, as received.
    #[getter]
    fn data(&self) -> &str {
        &self.event.data
    }

    /// `{id, type, event_data}`; the frame's whole `data` text is `data`.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        out.set_item("id", &self.event.id)?;
        out.set_item("type", &self.event.kind)?;
        out.set_item("event_data", self.event_data(py)?)?;
        Ok(out)
    }

    fn __repr__(&self) -> String {
        format!("StreamEvent(id={:?}, type={:?})", self.event.id, self.event.kind)
    }

    /// Two events are equal when their id, type and data are.
    fn __eq__(&self, other: &Bound<'_, StreamEvent>) -> bool {
        self.event == other.get().event
    }

    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (&self.event.id, &self.event.kind, &self.event.data).hash(&mut hasher);
        hasher.finish()
    }

    /// Pickles (and copies) as its id, type and data text; an event holds no credential.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, (String, String, String))> {
        let event = &slf.get().event;
        let rebuild = slf.get_type().getattr("_from_parts")?;
        Ok((rebuild, (event.id.clone(), event.kind.clone(), event.data.clone())))
    }

    /// The event again from what `__reduce__` gave.
    #[staticmethod]
    fn _from_parts(id: String, kind: String, data: String) -> Self {
        StreamEvent { event: Event::from_parts(id, kind, data), decoded: OnceLock::new() }
    }
}

/// What a wait took from the channel and Python has not yet: a batch, the error that ended the
/// stream, or its end (`None`).
type Held = Arc<parking_lot::Mutex<Option<Option<Feed>>>>;

/// The reading side of one stream.
#[pyclass(module = "sensorium._core", name = "EventFeed", frozen)]
pub struct EventFeed {
    /// Locked by a wait for as long as it waits, and by nothing else for longer than a `try_recv`.
    batches: Arc<Mutex<mpsc::Receiver<Feed>>>,
    held: Held,
    task: parking_lot::Mutex<Option<JoinHandle<()>>>,
    /// Set when the reading task panicked, so its end is not mistaken for the stream's.
    panicked: Arc<parking_lot::Mutex<Option<String>>>,
    /// The error that ended the stream, raised again by every later `take_into`: the channel
    /// closing after it must not read as the stream's end.
    failed: parking_lot::Mutex<Option<PyErr>>,
}

impl EventFeed {
    /// Starts the task `pump(tx)` makes (it reads the stream into `tx`) on the runtime.
    pub fn spawn<F, Fut>(pump: F) -> PyResult<Self>
    where
        F: FnOnce(mpsc::Sender<Feed>) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        // A few batches ahead of the reader; beyond that the connection waits (back-pressure).
        let (tx, batches) = mpsc::channel(8);
        // Held until the panic is recorded, so the reader never sees the channel close first.
        let keep_open = tx.clone();
        let work = pump(tx);
        let panicked = Arc::new(parking_lot::Mutex::new(None));
        let flag = panicked.clone();
        let task = runtime::runtime()?.spawn(async move {
            if let Err(payload) = AssertUnwindSafe(work).catch_unwind().await {
                *flag.lock() = Some(panic_detail(&*payload));
            }
            drop(keep_open);
        });
        Ok(EventFeed {
            batches: Arc::new(Mutex::new(batches)),
            held: Held::default(),
            task: parking_lot::Mutex::new(Some(task)),
            panicked,
            failed: parking_lot::Mutex::new(None),
        })
    }
}

#[pymethods]
impl EventFeed {
    /// Waits (blocking, or as an awaitable when `asynchronous`) until a batch, the error that
    /// ended the stream, or its end is held for `take_into`. The wait only moves it from the
    /// channel into the feed, never into its own result: when the wait is cancelled or
    /// interrupted (Ctrl-C) after that move, the batch is still there for the next call.
    fn wait<'py>(&self, py: Python<'py>, asynchronous: bool) -> PyResult<Bound<'py, PyAny>> {
        let batches = self.batches.clone();
        let held = self.held.clone();
        guard("stream", || {
            runtime::run(py, "stream", asynchronous, async move {
                let mut batches = batches.lock().await;
                if held.lock().is_none() {
                    // Nothing waits between the receive and the store, so an abort cannot come
                    // between them.
                    let next = batches.recv().await;
                    *held.lock() = Some(next);
                }
                Ok(())
            })
        })
    }

    /// Moves the held batch, or one already in the channel, into `events` ahead of what it
    /// holds, last event first (Python pops them from the end). With the GIL held and no Python
    /// code in between, so no Ctrl-C can land between taking a batch and storing it. Returns
    /// `True` once the stream has ended, `False` when events were moved, `None` when nothing has
    /// arrived (then `wait`); raises the error that ended the stream, on this call and every
    /// later one.
    fn take_into(&self, py: Python<'_>, events: &Bound<'_, PyList>) -> PyResult<Option<bool>> {
        if let Some(error) = self.failed.lock().as_ref() {
            return Err(error.clone_ref(py));
        }
        let held = self.held.lock().take();
        let next = match held {
            Some(next) => next,
            // A wait that holds the receiver will hold what it receives.
            None => match self.batches.try_lock() {
                Err(_) => return Ok(None),
                Ok(mut batches) => match batches.try_recv() {
                    Ok(feed) => Some(feed),
                    Err(TryRecvError::Empty) => return Ok(None),
                    Err(TryRecvError::Disconnected) => None,
                },
            },
        };
        match next {
            Some(Ok(batch)) => {
                let items = batch
                    .into_iter()
                    .rev()
                    .map(|event| Bound::new(py, StreamEvent { event, decoded: OnceLock::new() }))
                    .collect::<PyResult<Vec<_>>>()?;
                events.set_slice(0, 0, PyList::new(py, items)?.as_any())?;
                Ok(Some(false))
            }
            Some(Err(e)) => {
                let error = to_pyerr(py, e);
                *self.failed.lock() = Some(error.clone_ref(py));
                Err(error)
            }
            None => match self.panicked.lock().clone() {
                // The reading task's end is not the stream's.
                Some(detail) => Err(internal_error("stream", &detail)),
                None => Ok(Some(true)),
            },
        }
    }

    /// Stops reading: the connection is closed and no more events arrive.
    fn close(&self) {
        if let Some(task) = self.task.lock().take() {
            task.abort();
        }
        self.held.lock().take();
    }
}

impl Drop for EventFeed {
    fn drop(&mut self) {
        if let Some(task) = self.task.get_mut().take() {
            task.abort();
        }
    }
}

/// A lens session's WebSocket. `call` sends `{type, event_data}` and returns the reply to it.
#[pyclass(module = "sensorium._core", name = "LensSocket", frozen)]
pub struct LensSocket {
    socket: Arc<Socket>,
}

impl LensSocket {
    pub fn new(socket: Socket) -> Self {
        LensSocket { socket: Arc::new(socket) }
    }
}

/// `event_data` as JSON text: `None`, a `NumericEvent` (already JSON, from numpy or pandas), or
/// any JSON-able value.
fn event_json(event_data: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
    if event_data.is_none() {
        return Ok(None);
    }
    if let Ok(numeric) = event_data.cast::<NumericEvent>() {
        return Ok(Some(String::from_utf8_lossy(&numeric.get().json).into_owned()));
    }
    let value = py_to_value(event_data, "event_data").map_err(|e| to_pyerr(event_data.py(), e))?;
    Ok(Some(value.to_string()))
}

#[pymethods]
impl LensSocket {
    #[pyo3(signature = (request_type, event_data, asynchronous))]
    fn call<'py>(
        &self,
        py: Python<'py>,
        request_type: String,
        event_data: &Bound<'py, PyAny>,
        asynchronous: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        guard("socket.call", || {
            let event_data = event_json(event_data)?;
            let socket = self.socket.clone();
            runtime::run(py, "socket.call", asynchronous, async move {
                Ok(Outcome(socket.call(&request_type, event_data.as_deref()).await.map(Json)))
            })
        })
    }

    /// The close handshake.
    fn close<'py>(&self, py: Python<'py>, asynchronous: bool) -> PyResult<Bound<'py, PyAny>> {
        let socket = self.socket.clone();
        guard("socket.close", || {
            runtime::run(py, "socket.close", asynchronous, async move {
                socket.close().await;
                Ok(())
            })
        })
    }
}
