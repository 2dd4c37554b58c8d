//! `embed_many`: many windows through the encoder, a bounded number of requests in flight,
//! their results written in input order into one (N, channels, 768) buffer.
//!
//! The caller submits windows as they come (already serialised, one body per request) and
//! waits for room; each window runs as a task on the runtime whose requests share a semaphore
//! (the bound on requests in flight) and the transport's [`Pacer`](super::pacing::Pacer) (the
//! server's rate, learnt from 429s, shared with the client's other batches), and go through the
//! transport's retry rule. A window that still fails leaves NaN rows and its error;
//! the others carry on, unless the error is one no window can escape (a refused key, an unknown
//! model, a wrong address: [`stops_the_batch`]): then the batch sends nothing more, and the
//! windows not sent are reported as such. Cancelling the batch drops every request in flight.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::{watch, Semaphore};
use tokio_util::sync::CancellationToken;

use super::error::Error;
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
/// flooded by it: the client's `Pacer` holds every request to the rate the 429s reveal. The
/// windows kept ready (2 x this many requests) cost about 20 kB each.
pub const DEFAULT_CONCURRENCY: usize = 64;
pub const MAX_CONCURRENCY: usize = 1024;
/// Requests a batch sends before its first answer (TCP's slow start). A batch that opened with
/// all 64 against a rate-limited server had 44 of them refused, each a first attempt gone, and
/// with the limit shared by another client, every one of them: a refusal later in the batch then
/// left some window a single attempt. Answers come back within milliseconds, so growing by one
/// per answer reaches 64 in three round trips.
const OPENING: usize = 8;
/// Window indices a warning keeps to name (the lowest): enough to find an example, and the
/// memory of a warning that every window of a long recording gets stays the same.
const WARNING_INDICES: usize = 5;
/// Distinct warning messages a batch keeps; messages beyond them (a server that put each
/// window's own detail in its message) are counted together, so memory stays bounded.
const WARNING_MESSAGES: usize = 32;
/// What the messages beyond [`WARNING_MESSAGES`] are counted under.
const OTHER_WARNINGS: &str = "other warnings (too many distinct messages to keep each)";

/// One window ready to send: one body holding every channel, or one body per channel.
#[derive(Debug)]
pub struct PreparedWindow {
    pub channels: usize,
    pub bodies: Vec<Bytes>,
}

/// A warning the platform attached to answers (`response.warning_messages`, and the queue's
/// `error_messages`, as `embed` reports them), counted by window.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowWarning {
    pub message: String,
    /// How many windows' answers carried it.
    pub windows: usize,
    /// The lowest of those windows, ascending, at most [`WARNING_INDICES`].
    pub first: Vec<usize>,
}

impl WindowWarning {
    fn count(&mut self, index: usize) {
        self.windows += 1;
        // Windows finish in any order; keep the lowest indices seen.
        if let Err(at) = self.first.binary_search(&index) {
            if at < WARNING_INDICES {
                self.first.insert(at, index);
                self.first.truncate(WARNING_INDICES);
            }
        }
    }
}

/// The warnings of a batch: each distinct message once, within [`WARNING_MESSAGES`].
#[derive(Debug, Default)]
struct WarningTally(Vec<WindowWarning>);

impl WarningTally {
    /// Counts window `index` under each of its distinct warning `messages`.
    fn note(&mut self, index: usize, messages: Vec<String>) {
        let mut other = false;
        for message in messages {
            match self.0.iter().position(|w| w.message == message) {
                Some(at) => self.0[at].count(index),
                // The last place is kept for the messages beyond, counted together.
                None if self.0.len() + 1 < WARNING_MESSAGES => self.add(message, index),
                None => other = true,
            }
        }
        if other {
            match self.0.iter().position(|w| w.message == OTHER_WARNINGS) {
                Some(at) => self.0[at].count(index),
                None => self.add(OTHER_WARNINGS.into(), index),
            }
        }
    }

    fn add(&mut self, message: String, index: usize) {
        let mut new = WindowWarning { message, windows: 0, first: Vec::new() };
        new.count(index);
        self.0.push(new);
    }

    /// The warnings in the order of the first window that had each.
    fn into_sorted(self) -> Vec<WindowWarning> {
        let mut warnings = self.0;
        warnings.sort_by_key(|w| w.first.first().copied());
        warnings
    }
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
    /// Windows never sent because the batch stopped, ascending.
    pub not_sent: Vec<usize>,
    /// The first window whose error stopped the batch, if one did.
    pub stopped_by: Option<usize>,
    /// Each distinct warning once, in the order of the first window that had it.
    pub warnings: Vec<WindowWarning>,
}

pub struct Batch {
    transport: Transport,
    permits: Arc<Semaphore>,
    concurrency: usize,
    /// Permits made so far: the batch opens with a few requests in flight and adds one per
    /// answer up to `concurrency` (see [`Batch::new`]).
    granted: AtomicUsize,
    /// Windows submitted but not finished beyond which the caller waits (`room`); 0 until the
    /// first window says how many requests a window takes.
    capacity: AtomicUsize,
    channels: Mutex<Option<usize>>,
    vectors: Mutex<Vec<f32>>,
    failures: Mutex<BTreeMap<usize, Error>>,
    not_sent: Mutex<Vec<usize>>,
    warnings: Mutex<WarningTally>,
    /// Set once, by the first request answered with an error that [`stops_the_batch`] (the
    /// outcome names the lowest such window).
    stopped_by: OnceLock<usize>,
    submitted: AtomicUsize,
    finished: AtomicUsize,
    /// Bumped on every finished window; waiters watch it.
    progress: watch::Sender<usize>,
    cancel: CancellationToken,
}

impl Batch {
    /// `concurrency` requests in flight at most, reached from [`OPENING`] by one more per
    /// answer. With `probe_first`, the first request goes alone and the others wait for its
    /// answer: for a model whose prefix does not say it is an encoder (a user's fine-tuned model,
    /// a family newer than this client), a reasoning model behind it answers text, and sending
    /// `concurrency` billed queries before the first answer says so would waste them. One round
    /// trip at the start costs a batch nothing it would notice.
    pub fn new(transport: Transport, concurrency: usize, probe_first: bool) -> Arc<Self> {
        let concurrency = concurrency.clamp(1, MAX_CONCURRENCY);
        let opening = if probe_first { 1 } else { concurrency.min(OPENING) };
        Arc::new(Batch {
            transport,
            permits: Arc::new(Semaphore::new(opening)),
            concurrency,
            granted: AtomicUsize::new(opening),
            capacity: AtomicUsize::new(0),
            channels: Mutex::new(None),
            vectors: Mutex::new(Vec::new()),
            failures: Mutex::new(BTreeMap::new()),
            not_sent: Mutex::new(Vec::new()),
            warnings: Mutex::new(WarningTally::default()),
            stopped_by: OnceLock::new(),
            submitted: AtomicUsize::new(0),
            finished: AtomicUsize::new(0),
            progress: watch::channel(0).0,
            cancel: CancellationToken::new(),
        })
    }

    /// How many more windows the caller may submit before waiting.
    pub fn room(&self) -> usize {
        match self.capacity.load(Ordering::Acquire) {
            // Until a first window is sent and says how many requests a window takes: one at a
            // time (windows that could not be prepared finish at once, and take no room).
            0 => usize::from(self.pending() == 0),
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

    /// The window whose error stopped the batch: nothing is sent after it, and the caller
    /// should submit no more. The first such window by index, not the one that happened to
    /// finish first: windows in flight together often fail alike, and the message names it.
    pub fn stopped_by(&self) -> Option<usize> {
        let first_to_finish = *self.stopped_by.get()?;
        let failures = self.failures.lock();
        Some(failures.iter().find(|(_, err)| stops_the_batch(err)).map_or(first_to_finish, |(i, _)| *i))
    }

    /// Checks a window against the first one (every window needs the same channel count) and
    /// starts it on `runtime`. `index` is the window's position in the input; windows must be
    /// submitted in order.
    pub fn submit(self: &Arc<Self>, runtime: &tokio::runtime::Handle, window: PreparedWindow) {
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
                drop(channels);
                self.fail_unsent(Error::invalid_argument(
                    &format!("windows[{index}]"),
                    format!(
                        "has {} channels where the windows before have {expected}; every window needs the same channels",
                        window.channels
                    ),
                ));
                return;
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
    }

    /// Records the next window as failed without sending it: one that could not be prepared (a
    /// NaN, a wrong shape or channel count). It fails alone; the others go on, as a window whose
    /// requests failed does, so one bad window in an hour of data costs one NaN row.
    pub fn fail_unsent(&self, err: Error) {
        let index = self.submitted.load(Ordering::Acquire);
        self.failures.lock().insert(index, err);
        self.submitted.fetch_add(1, Ordering::AcqRel);
        self.mark_finished();
    }

    /// Counts one more window finished and wakes the waiters.
    fn mark_finished(&self) {
        let done = self.finished.fetch_add(1, Ordering::AcqRel) + 1;
        self.progress.send_replace(done);
    }

    async fn run_window(&self, index: usize, window: PreparedWindow) {
        let rows_per_request = if window.bodies.len() == 1 { window.channels } else { 1 };
        let requests = window.bodies.into_iter().map(|body| self.request(index, body, rows_per_request));
        let answers = futures_util::future::join_all(requests).await;
        let mut rows: Vec<Vec<f32>> = Vec::with_capacity(answers.len());
        let mut failure = None;
        let mut unsent = false;
        // A window's messages once each: a per-channel window's requests often all carry one.
        let mut messages: Vec<String> = Vec::new();
        for answer in answers {
            match answer {
                Some(Ok((data, warnings))) => {
                    rows.push(data);
                    for warning in warnings {
                        if !messages.contains(&warning) {
                            messages.push(warning);
                        }
                    }
                }
                Some(Err(err)) => {
                    failure.get_or_insert(err);
                }
                None => unsent = true,
            }
        }
        if !messages.is_empty() {
            self.warnings.lock().note(index, messages);
        }
        match failure {
            // An error that stops the batch already set `stopped_by` in `request`.
            Some(err) => {
                self.failures.lock().insert(index, err);
            }
            // Some of a per-channel window's requests may have been answered; without the
            // others the window is not embedded.
            None if unsent => self.not_sent.lock().push(index),
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
        self.mark_finished();
    }

    /// One request's answer (the vectors and the platform's warnings), or `None` when the batch
    /// stopped before it was sent.
    async fn request(&self, index: usize, body: Bytes, rows: usize) -> Option<Result<(Vec<f32>, Vec<String>), Error>> {
        let _permit = match self.permits.acquire().await {
            Ok(permit) => permit,
            // Never closed today; were it, nothing more could be sent.
            Err(_) => {
                let _ = self.stopped_by.set(index);
                return Some(Err(Error::Config("embed_many: the batch was closed".into())));
            }
        };
        if self.stopped_by.get().is_some() {
            return None;
        }
        let transport = &self.transport;
        // embed_many's bodies never set `max_wait_time_sec`: a 504 is retried by the rule.
        let call = transport.query_call(body, false);
        let answer = transport
            .execute_paced(
                &call,
                |response| async move {
                    let raw = transport.body(response).await?;
                    parse_embeddings(&raw, Some(rows)).map(|(matrix, warnings, _)| (matrix.data, warnings))
                },
                Some(transport.pacer()),
            )
            .await;
        match &answer {
            // Stopped here, before the permit goes to the next request (a per-channel window's
            // other channels among them), not when the whole window has finished.
            Err(err) if stops_the_batch(err) => {
                let _ = self.stopped_by.set(index);
            }
            _ => {
                // One more in flight per answer: the requests in flight double each round trip.
                let grown = self.granted.fetch_update(Ordering::AcqRel, Ordering::Acquire, |granted| {
                    (granted < self.concurrency).then_some(granted + 1)
                });
                if grown.is_ok() {
                    self.permits.add_permits(1);
                }
            }
        }
        Some(answer)
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
        let stopped_by = self.stopped_by();
        let mut vectors = std::mem::take(&mut *self.vectors.lock());
        // Rows for failed windows after the last one sent.
        vectors.resize(self.submitted() * channels * EMBEDDING_DIM, f32::NAN);
        let failures: Vec<(usize, Error)> = std::mem::take(&mut *self.failures.lock()).into_iter().collect();
        let mut not_sent = std::mem::take(&mut *self.not_sent.lock());
        not_sent.sort_unstable();
        let warnings = std::mem::take(&mut *self.warnings.lock()).into_sorted();
        BatchOutcome { windows: self.submitted(), channels, vectors, failures, not_sent, stopped_by, warnings }
    }
}

/// Whether `err` says nothing about the window and everything about the call, so every window
/// after it would fail the same way: the key refused (401) or not allowed (403), an address with
/// no encoder behind it (404), an unknown model (400 `invalid_model_version`), a model that is
/// not an encoder, an address where no connection can be made, or a client without its
/// configuration. Sending the rest would only repeat the
/// error (a typo in the model name would cost 4,000 requests, and an iterator would be read to
/// its end for nothing). A failure that depends on the window or on the moment (a 413 for one
/// body's size, a 5xx or 429 after its retries, a failed query) leaves the others running.
fn stops_the_batch(err: &Error) -> bool {
    match err {
        Error::Api(api) => {
            matches!(api.status, 401 | 403 | 404)
                || (api.status == 400 && api.errors.iter().any(|e| e.code.as_deref() == Some("invalid_model_version")))
        }
        Error::InvalidArgument { argument, .. } => argument == "model",
        // Nothing listening, no such host, a TLS handshake refused, no answer to connecting (an
        // address that drops packets): after its retries, the next window's connection would
        // fail the same way, after as long a wait.
        Error::Unreachable { .. } | Error::Config(_) => true,
        _ => false,
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::error::ApiError;

    fn api(status: u16, body: &str) -> Error {
        Error::Api(Box::new(ApiError::from_body(status, "POST", "http://127.0.0.1/v0.5/query", body.to_string(), None)))
    }

    #[test]
    fn warnings_are_kept_once_per_message_with_a_count_and_the_lowest_windows() {
        let mut tally = WarningTally::default();
        let message = |i: usize| format!("window {i} was odd");
        // Finished out of order; every window has the common message, and a message of its own.
        for index in (0..100).rev() {
            tally.note(index, vec!["common".into(), message(index)]);
        }
        let warnings = tally.into_sorted();
        assert_eq!(warnings.len(), WARNING_MESSAGES, "bounded, whatever the number of windows");
        let common = warnings.iter().find(|w| w.message == "common").expect("kept");
        assert_eq!((common.windows, common.first.as_slice()), (100, &[0, 1, 2, 3, 4][..]));
        let others = warnings.iter().find(|w| w.message == OTHER_WARNINGS).expect("counted together");
        assert_eq!(others.windows, 100 - (WARNING_MESSAGES - 2));
        // In the order of their first window.
        assert!(warnings.windows(2).all(|pair| pair[0].first[0] <= pair[1].first[0]));
    }

    #[test]
    fn errors_about_the_call_stop_the_batch_and_errors_about_a_window_do_not() {
        let envelope = |code: &str| format!(r#"{{"errors": [{{"code": "{code}", "message": "m"}}]}}"#);
        for stops in [
            api(401, &envelope("unauthorized")),
            api(403, &envelope("forbidden")),
            api(404, r#"{"detail": "Not Found"}"#),
            api(400, &envelope("invalid_model_version")),
            Error::invalid_argument("model", "answered with text, not embeddings"),
            Error::Config("no API key".into()),
            Error::Unreachable { message: "connection refused".into(), timed_out: false, certificate: false },
            Error::Unreachable { message: "connect timed out".into(), timed_out: true, certificate: false },
        ] {
            assert!(stops_the_batch(&stops), "{stops}");
        }
        for goes_on in [
            api(400, &envelope("invalid_parameter_type")),
            api(413, &envelope("payload_too_large")),
            api(429, &envelope("rate_limited")),
            api(503, &envelope("unavailable")),
            Error::Connection { message: "reset".into() },
            Error::Timeout { message: "read".into() },
            Error::invalid_argument("windows[3]", "holds a NaN"),
        ] {
            assert!(!stops_the_batch(&goes_on), "{goes_on}");
        }
    }
}
