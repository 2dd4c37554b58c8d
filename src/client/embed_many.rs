//! `embed_many`: many windows through the encoder, a bounded number of requests in flight,
//! their results written in input order into one (N, channels, 768) buffer.
//!
//! The caller submits windows as they come (already serialised, one body per request) and
//! waits for room; each window runs as a task on the runtime whose requests share a semaphore
//! (the bound on requests in flight) and a [`Pacer`] (the server's rate, learnt from 429s), and
//! go through the transport's retry rule. A window that still fails leaves NaN rows and its error;
//! the others carry on. Cancelling the batch drops every request in flight.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::{watch, Semaphore};
use tokio_util::sync::CancellationToken;

use super::error::Error;
use super::pacing::Pacer;
use super::query::{parse_embeddings, EMBEDDING_DIM};
use super::transport::Transport;

/// Requests in flight when the caller does not say. Chosen from two sweeps of
/// `benchmarks/embed_many.py --windows 200 --sweep 4,8,16,32,64` (800 single-channel requests to
/// the emulator in its own process; debug build, 2-core VM at load 3.7, so the numbers are
/// rough): 4 in flight was slowest in both runs (5.6k/s against 7.4-7.8k/s in the quieter one);
/// 8 to 64 were level within the run-to-run noise (4-7.8k/s). Locally nothing beyond 8 is
/// needed, but against the hosted service a request takes a round trip plus the encoder's time
/// (the public scripts' 8 threads managed 2.6 requests/s, about 3 s each), and then requests per
/// second = in flight / latency: 64, the in-flight count of the aiohttp peer in the benchmarks,
/// keeps the local plateau and does not starve a remote one. A rate-limited server is not
/// flooded by it: the batch's `Pacer` holds every request to the rate the 429s reveal. The
/// windows kept ready (2 x this many requests) cost about 20 kB each.
pub const DEFAULT_CONCURRENCY: usize = 64;
pub const MAX_CONCURRENCY: usize = 1024;

/// One window ready to send: one body holding every channel, or one body per channel.
#[derive(Debug)]
pub struct PreparedWindow {
    pub channels: usize,
    pub bodies: Vec<Bytes>,
}

/// What a finished batch hands back.
#[derive(Debug)]
pub struct BatchOutcome {
    pub windows: usize,
    pub channels: usize,
    /// (windows, channels, 768), NaN where a window failed.
    pub vectors: Vec<f32>,
    /// Failed windows in index order, with their errors.
    pub failures: Vec<(usize, Error)>,
}

pub struct Batch {
    transport: Transport,
    permits: Arc<Semaphore>,
    pacer: Pacer,
    concurrency: usize,
    /// Windows submitted but not finished beyond which the caller waits (`room`); 0 until the
    /// first window says how many requests a window takes.
    capacity: AtomicUsize,
    channels: Mutex<Option<usize>>,
    vectors: Mutex<Vec<f32>>,
    failures: Mutex<BTreeMap<usize, Error>>,
    submitted: AtomicUsize,
    finished: AtomicUsize,
    /// Bumped on every finished window; waiters watch it.
    progress: watch::Sender<usize>,
    cancel: CancellationToken,
}

impl Batch {
    /// `concurrency` requests in flight at most.
    pub fn new(transport: Transport, concurrency: usize) -> Arc<Self> {
        let concurrency = concurrency.clamp(1, MAX_CONCURRENCY);
        Arc::new(Batch {
            transport,
            permits: Arc::new(Semaphore::new(concurrency)),
            pacer: Pacer::default(),
            concurrency,
            capacity: AtomicUsize::new(0),
            channels: Mutex::new(None),
            vectors: Mutex::new(Vec::new()),
            failures: Mutex::new(BTreeMap::new()),
            submitted: AtomicUsize::new(0),
            finished: AtomicUsize::new(0),
            progress: watch::channel(0).0,
            cancel: CancellationToken::new(),
        })
    }

    /// How many more windows the caller may submit before waiting.
    pub fn room(&self) -> usize {
        match self.capacity.load(Ordering::Acquire) {
            0 => 1 - self.submitted().min(1),
            capacity => capacity.saturating_sub(self.pending()),
        }
    }

    pub fn pending(&self) -> usize {
        self.submitted.load(Ordering::Acquire) - self.finished.load(Ordering::Acquire)
    }

    pub fn submitted(&self) -> usize {
        self.submitted.load(Ordering::Acquire)
    }

    pub fn finished(&self) -> usize {
        self.finished.load(Ordering::Acquire)
    }

    /// Checks a window against the first one (every window needs the same channel count) and
    /// starts it on `runtime`. `index` is the window's position in the input; windows must be
    /// submitted in order.
    pub fn submit(self: &Arc<Self>, runtime: &tokio::runtime::Handle, window: PreparedWindow) -> Result<(), Error> {
        let index = self.submitted.load(Ordering::Acquire);
        {
            let mut channels = self.channels.lock();
            if channels.is_none() {
                // Enough windows ready to keep every request slot busy twice over, so a slot
                // never waits for the caller to serialise the next window; no more, so memory
                // stays bounded whatever the input's length.
                let per_window = window.bodies.len().max(1);
                self.capacity.store((2 * self.concurrency).div_ceil(per_window).max(2), Ordering::Release);
            }
            let expected = *channels.get_or_insert(window.channels);
            if window.channels != expected {
                return Err(Error::invalid_argument(
                    &format!("windows[{index}]"),
                    format!("has {} channels where windows[0] has {expected}; every window needs the same channels", window.channels),
                ));
            }
            let row = expected * EMBEDDING_DIM;
            self.vectors.lock().resize((index + 1) * row, f32::NAN);
        }
        self.submitted.fetch_add(1, Ordering::AcqRel);
        let batch = self.clone();
        let cancel = self.cancel.clone();
        runtime.spawn(async move {
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = batch.run_window(index, window) => {}
            }
        });
        Ok(())
    }

    async fn run_window(&self, index: usize, window: PreparedWindow) {
        let rows_per_request = if window.bodies.len() == 1 { window.channels } else { 1 };
        let requests = window.bodies.into_iter().map(|body| self.request(body, rows_per_request));
        let answers = futures_util::future::join_all(requests).await;
        let mut rows: Vec<Vec<f32>> = Vec::with_capacity(answers.len());
        let mut failure = None;
        for answer in answers {
            match answer {
                Ok(data) => rows.push(data),
                Err(err) => {
                    failure.get_or_insert(err);
                }
            }
        }
        match failure {
            Some(err) => {
                self.failures.lock().insert(index, err);
            }
            None => {
                let row = window.channels * EMBEDDING_DIM;
                let mut vectors = self.vectors.lock();
                let mut at = index * row;
                for data in rows {
                    // Sizes were checked against the channels sent when the answer was parsed.
                    if let Some(dest) = vectors.get_mut(at..at + data.len()) {
                        dest.copy_from_slice(&data);
                    }
                    at += data.len();
                }
            }
        }
        let done = self.finished.fetch_add(1, Ordering::AcqRel) + 1;
        self.progress.send_replace(done);
    }

    async fn request(&self, body: Bytes, rows: usize) -> Result<Vec<f32>, Error> {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| Error::Config("embed_many: the batch was closed".into()))?;
        let transport = &self.transport;
        let call = transport.query_call(body);
        transport
            .execute_paced(
                &call,
                |response| async move {
                    let raw = transport.body(response).await?;
                    parse_embeddings(&raw, Some(rows)).map(|(matrix, _, _)| matrix.data)
                },
                Some(&self.pacer),
            )
            .await
    }

    /// Resolves once windows have finished since `seen` finished windows and either a quarter of
    /// the batch's room is free again or none is pending. Waking the caller for every window
    /// cost a thread wake-up and a pass of its loop per window; a quarter keeps the requests
    /// fed (half the ready windows are still queued when the caller refills).
    pub async fn changed(&self, seen: usize) {
        let refill = (self.capacity.load(Ordering::Acquire) / 4).max(1);
        let mut rx = self.progress.subscribe();
        let _ = rx.wait_for(|done| *done != seen && (self.room() >= refill || self.pending() == 0)).await;
    }

    /// Stops every window still running; their requests are dropped.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// The results once every submitted window has finished (the caller waits for `pending()`
    /// to reach 0 first). Leaves the batch empty.
    pub fn take_outcome(&self) -> BatchOutcome {
        let channels = self.channels.lock().unwrap_or(0);
        let vectors = std::mem::take(&mut *self.vectors.lock());
        let failures = std::mem::take(&mut *self.failures.lock()).into_iter().collect();
        BatchOutcome { windows: self.submitted(), channels, vectors, failures }
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}
