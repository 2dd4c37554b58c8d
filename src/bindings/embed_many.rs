//! `EmbedBatch`: the Python handle on one `embed_many` run (`crate::client::embed_many`).
//! Python feeds it windows in chunks as room frees up (so an iterator is never read further than
//! the batch can hold), waits on it with the GIL released, and takes the (N, channels, 768)
//! result at the end. Dropping or cancelling it drops every request in flight.

use std::sync::Arc;
use std::time::Duration;

use numpy::ndarray::Array3;
use numpy::PyArray3;
use pyo3::prelude::*;

use super::errors::{guard, internal_error, to_pyerr};
use super::numeric::request_bodies;
use super::runtime;
use crate::client::embed_many::{Batch, PreparedWindow};
use crate::client::query::BodyTemplate;
use crate::client::query::EMBEDDING_DIM;
use crate::client::Error;

/// The longest a `wait` blocks without news, so the caller can tick progress and feed more.
const WAIT_SLICE: Duration = Duration::from_millis(200);

#[pyclass(module = "sensorium._core", name = "EmbedBatch", frozen)]
pub struct EmbedBatch {
    batch: Arc<Batch>,
    template: BodyTemplate,
    per_channel: bool,
}

impl EmbedBatch {
    pub fn new(batch: Arc<Batch>, template: BodyTemplate, per_channel: bool) -> Self {
        EmbedBatch { batch, template, per_channel }
    }

    /// One window's request bodies: the whole (channels, window) event, or one event per channel.
    fn prepare(&self, window: &Bound<'_, PyAny>, arg: &str) -> Result<PreparedWindow, Error> {
        let (bodies, channels) = request_bodies(window, arg, &self.template, self.per_channel)?;
        Ok(PreparedWindow { channels, bodies })
    }
}

/// What `finish` hands back: the vectors, the failed windows' indices, the error to report (the
/// one that stopped the batch, else the first failure), the windows not sent, and the platform's
/// warnings as (message, windows that had it, the first of them).
type Finished<'py> =
    (Bound<'py, PyArray3<f32>>, Vec<usize>, Option<Py<PyAny>>, Vec<usize>, Vec<(String, usize, Vec<usize>)>);

#[pymethods]
impl EmbedBatch {
    /// How many windows `push` may take now.
    #[getter]
    fn room(&self) -> usize {
        self.batch.room()
    }

    #[getter]
    fn pending(&self) -> usize {
        self.batch.pending()
    }

    #[getter]
    fn submitted(&self) -> usize {
        self.batch.submitted()
    }

    #[getter]
    fn finished(&self) -> usize {
        self.batch.finished()
    }

    /// The window whose error stopped the batch (a refused key, an unknown model...), after
    /// which nothing more is sent; `None` while it runs on.
    #[getter]
    fn stopped_by(&self) -> Option<usize> {
        self.batch.stopped_by()
    }

    /// Serialises and starts `windows` (an iterable of numpy windows: a 3-D array's first axis
    /// or a list), numbered on from the windows pushed before. A window that cannot be sent as
    /// it is (a NaN, a wrong shape) is recorded as failed and the others go on.
    fn push(&self, py: Python<'_>, windows: &Bound<'_, PyAny>) -> PyResult<()> {
        guard("embed_many", || {
            let handle = runtime::runtime()?.handle().clone();
            for window in windows.try_iter()? {
                let window = window?;
                let arg = format!("windows[{}]", self.batch.submitted());
                match self.prepare(&window, &arg) {
                    Ok(prepared) => self.batch.submit(&handle, prepared),
                    Err(err @ Error::InvalidArgument { .. }) => self.batch.fail_unsent(err),
                    // A Ctrl-C while a window was read, or a bug: the caller's.
                    Err(err) => return Err(to_pyerr(py, err)),
                }
            }
            Ok(())
        })
    }

    /// Records the next window as failed without sending it, for a window the caller could not
    /// even read as an array (`argument` names it, `message` says why).
    fn fail(&self, argument: &str, message: &str) {
        self.batch.fail_unsent(Error::invalid_argument(argument, message));
    }

    /// Waits (GIL released; Ctrl-C raises) until windows finished after `seen` had and room is
    /// free to refill (`Batch::changed`), or about 200 ms; returns the windows finished. Blocks, or with `asynchronous` returns an awaitable.
    fn wait<'py>(&self, py: Python<'py>, seen: usize, asynchronous: bool) -> PyResult<Bound<'py, PyAny>> {
        let batch = self.batch.clone();
        runtime::run(py, "embed_many", asynchronous, async move {
            let _ = tokio::time::timeout(WAIT_SLICE, batch.changed(seen)).await;
            Ok(batch.finished())
        })
    }

    /// Stops every window still running.
    fn cancel(&self) {
        self.batch.cancel();
    }

    /// Once nothing is pending: the (N, channels, 768) float32 array (NaN rows where a window
    /// failed or was not sent), the failed indices, the exception to report (`None` when none
    /// failed), the indices of the windows not sent, and the platform's warnings.
    fn finish<'py>(&self, py: Python<'py>) -> PyResult<Finished<'py>> {
        guard("embed_many", || {
            if self.batch.pending() != 0 {
                return Err(internal_error("embed_many", "finish() called with windows still running"));
            }
            let outcome = self.batch.take_outcome();
            let array = Array3::from_shape_vec((outcome.windows, outcome.channels, EMBEDDING_DIM), outcome.vectors)
                .map_err(|e| internal_error("embed_many: building the result", &e.to_string()))?;
            let failed: Vec<usize> = outcome.failures.iter().map(|(i, _)| *i).collect();
            // The error that stopped the batch explains the windows not sent; else the first.
            let reported = match outcome.stopped_by {
                Some(index) => outcome.failures.into_iter().find(|(i, _)| *i == index),
                None => outcome.failures.into_iter().next(),
            };
            let reported = reported.map(|(_, err)| to_pyerr(py, err).into_value(py).into_any());
            let warnings = outcome.warnings.into_iter().map(|w| (w.message, w.windows, w.first)).collect();
            Ok((PyArray3::from_owned_array(py, array), failed, reported, outcome.not_sent, warnings))
        })
    }
}

impl Drop for EmbedBatch {
    fn drop(&mut self) {
        self.batch.cancel();
    }
}
