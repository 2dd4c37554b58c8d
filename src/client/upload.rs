//! The direct-to-cloud upload: parts sent in parallel from their file offsets, each retried
//! (and its URL refreshed when expired), each checkpointed, so an interrupted upload resumes
//! with only the parts the platform has not recorded.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use reqwest::Method;
use serde::Serialize;

use super::error::Error;
use super::path_segment::path_segment;
use super::resume_state::{Fingerprint, ResumeRecord, ResumeState};
use super::stored_content::{self, Local};
use super::transport::{read_body, Call, RequestBody, Transport};
use super::upload_claim::UploadClaim;
use crate::wire::files::mime_for_name;
use crate::wire::uploads::{
    CompleteResponse, InitiateRequest, InitiateResponse, PartTarget, PartToken, PartUrlsRequest,
    PartUrlsResponse, PartsRequest,
};

/// Parts in flight when the caller does not say. Loopback measurements (benchmarks/) show a
/// single stream already near the link's limit; a few streams hide per-part round trips.
pub const DEFAULT_CONCURRENCY: usize = 4;
/// How many times one part's URL is refreshed before giving up (expiry is not a retry).
const MAX_URL_REFRESHES: u32 = 3;

/// Bytes moved so far and bytes in all, shared between the transfer and whoever reports it.
#[derive(Debug, Default)]
pub struct TransferProgress {
    /// Shared with the byte streams, which add to it as they hand bytes to the connection.
    pub done: Arc<AtomicU64>,
    pub total: AtomicU64,
}

impl TransferProgress {
    pub fn snapshot(&self) -> (u64, u64) {
        (self.done.load(Ordering::Relaxed), self.total.load(Ordering::Relaxed))
    }
}

/// One transfer's part of a `TransferProgress` that several transfers share (`download_many`):
/// it adds to the shared counters and can take its part back when an attempt starts over, so a
/// retried file is not counted twice and a finished file counts its real size.
pub struct ProgressShare {
    progress: Arc<TransferProgress>,
    done: AtomicU64,
    total: AtomicU64,
}

impl ProgressShare {
    /// A share that already counts `expected` bytes into the total (a size the listing gave).
    pub fn new(progress: Arc<TransferProgress>, expected: u64) -> Self {
        progress.total.fetch_add(expected, Ordering::Relaxed);
        ProgressShare { progress, done: AtomicU64::new(0), total: AtomicU64::new(expected) }
    }

    /// An attempt starts: bytes an earlier attempt counted are taken back; `expected` (when the
    /// answer says) replaces this share's part of the total.
    pub fn restart(&self, expected: Option<u64>) {
        let counted = self.done.swap(0, Ordering::Relaxed);
        self.progress.done.fetch_sub(counted, Ordering::Relaxed);
        if let Some(n) = expected {
            self.set_total(n);
        }
    }

    pub fn add(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
        self.progress.done.fetch_add(n, Ordering::Relaxed);
    }

    pub fn set_total(&self, n: u64) {
        let before = self.total.swap(n, Ordering::Relaxed);
        // Two steps rather than a signed delta: the counters are unsigned.
        self.progress.total.fetch_add(n, Ordering::Relaxed);
        self.progress.total.fetch_sub(before, Ordering::Relaxed);
    }
}

#[derive(Debug, Clone)]
pub struct DirectUploadOptions {
    /// Continue an upload of the same file that was started and not completed.
    pub resume: bool,
    pub concurrency: usize,
    pub content_type: Option<String>,
}

/// What a finished direct upload returns: the file's id (its name) and the platform's record.
#[derive(Debug, Clone)]
pub struct DirectUploadResult {
    pub file_id: String,
    pub complete: CompleteResponse,
}

fn post_json<T: Serialize>(transport: &Transport, path: &str, body: &T) -> Result<Call, Error> {
    let bytes = serde_json::to_vec(body)
        .map_err(|e| Error::invalid_argument("body", format!("cannot be serialised: {e}")))?;
    // Every POST of the upload protocol is safe to send again after a lost answer: a repeated
    // initiate is offered the same unfinished upload, a repeated complete's 409 is settled by
    // comparing the stored content, a checkpoint records the same part again, and a URL refresh
    // gives another URL.
    Ok(Call { repeatable: true, ..Call::post_json(transport.config.url(path), Bytes::from(bytes)) })
}

/// `/files/uploads/{upload_id}{rest}`, the id (the server's, or one read back from a resume
/// record) percent-encoded as one segment.
fn upload_path(upload_id: &str, rest: &str) -> Result<String, Error> {
    if upload_id.contains('/') {
        return Err(Error::invalid_argument("upload_id", format!("{upload_id:?} is not an upload id")));
    }
    Ok(format!("/files/uploads/{}{rest}", path_segment(upload_id, "upload_id")?))
}

/// The content type sent with `initiate`: from the extension (JSONL included), else the caller's,
/// else generic bytes.
fn direct_type(name: &str, content_type: Option<&str>) -> String {
    mime_for_name(name)
        .map(str::to_string)
        .or_else(|| content_type.map(str::to_string))
        .unwrap_or_else(|| "application/octet-stream".to_string())
}

pub async fn upload_direct(
    transport: &Transport,
    path: &Path,
    opts: &DirectUploadOptions,
    progress: Arc<TransferProgress>,
) -> Result<DirectUploadResult, Error> {
    if opts.concurrency == 0 {
        return Err(Error::invalid_argument("concurrency", "must be at least 1"));
    }
    let meta = tokio::fs::metadata(path).await.map_err(|e| Error::io(path.display(), e))?;
    if !meta.is_file() {
        return Err(Error::invalid_argument("path", format!("{} is not a regular file", path.display())));
    }
    let file_id = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| Error::invalid_argument("path", format!("{} has no usable file name", path.display())))?
        .to_string();
    // Held to the end: no other uploader of this name here reads or changes the resume record,
    // adopts or discards the platform's unfinished upload, or sends parts meanwhile.
    let _claim = UploadClaim::acquire(&transport.config.base_url(), &file_id).await;
    // Read after the wait: an upload that held the claim may have changed the file or finished.
    let meta = tokio::fs::metadata(path).await.map_err(|e| Error::io(path.display(), e))?;
    let num_bytes = meta.len();
    let fingerprint = Fingerprint::of(&meta);
    let state = ResumeState::new(&transport.config.base_url(), path);
    // The platform matches an unfinished upload by (organization, name, type, size) only, so its
    // parts may hold another file's bytes: one of another path, another machine, or an edited
    // copy. Only the upload this machine's record says it started from this very version of the
    // file is resumed; any other the platform offers is discarded and the file sent afresh.
    let ours = match state.load() {
        Some(record) if opts.resume && record.fingerprint == fingerprint => Some(record.upload_id),
        Some(record) => {
            log::debug!("discarding unfinished upload {} of {}: the file changed", record.upload_id, path.display());
            discard(transport, &record.upload_id).await?;
            state.remove();
            None
        }
        None => None,
    };
    let request = InitiateRequest {
        filename: file_id.clone(),
        file_type: direct_type(&file_id, opts.content_type.as_deref()),
        num_bytes,
        resume_if_started: Some(true),
    };
    let initiate = || async { transport.json::<InitiateResponse>(&post_json(transport, "/files/uploads/initiate", &request)?).await };
    let mut started = initiate().await?;
    if started.is_resume == Some(true) && ours.as_deref() != Some(started.upload_id.as_str()) {
        log::debug!("discarding unfinished upload {} of {file_id}: not started from this file here", started.upload_id);
        discard(transport, &started.upload_id).await?;
        state.remove();
        started = initiate().await?;
        if started.is_resume == Some(true) {
            return Err(Error::Transfer {
                message: format!(
                    "another upload of {file_id} ({num_bytes} bytes) is in progress on the platform (upload {}); \
                     upload again once it has finished, or abort it with files.abort_upload",
                    started.upload_id
                ),
                upload_id: Some(started.upload_id),
                resumable: false,
            });
        }
    }
    send_recorded(transport, path, file_id, num_bytes, started, opts, progress, &state, fingerprint).await
}

/// Aborts an unfinished upload that must not be resumed; 404/409 mean it is already gone.
async fn discard(transport: &Transport, upload_id: &str) -> Result<(), Error> {
    match abort(transport, upload_id).await {
        Ok(()) => Ok(()),
        Err(Error::Api(api)) if api.status == 404 || api.status == 409 => Ok(()),
        Err(err) => Err(err),
    }
}

/// `send_parts`, with the local resume record written before the first byte goes out and
/// removed once the platform has the file (or no longer knows the upload).
#[allow(clippy::too_many_arguments)]
async fn send_recorded(
    transport: &Transport,
    path: &Path,
    file_id: String,
    num_bytes: u64,
    started: InitiateResponse,
    opts: &DirectUploadOptions,
    progress: Arc<TransferProgress>,
    state: &ResumeState,
    fingerprint: Fingerprint,
) -> Result<DirectUploadResult, Error> {
    state.save(&ResumeRecord {
        upload_id: started.upload_id.clone(),
        path: path.display().to_string(),
        fingerprint,
    });
    let upload_id = started.upload_id.clone();
    let result = send_parts(transport, path, file_id, num_bytes, started, opts, progress).await;
    match &result {
        Ok(_) | Err(Error::Transfer { resumable: false, .. }) => state.remove(),
        Err(Error::Api(api)) if api.status == 409 => {
            // The name was taken (or the upload completed) meanwhile: nothing is left to resume.
            // Our parts are of no use to anyone; best effort, as the 409 is what to report.
            if let Err(err) = discard(transport, &upload_id).await {
                log::debug!("could not abort upload {upload_id} after its 409: {err}");
            }
            state.remove();
        }
        Err(_) => {}
    }
    result
}

async fn send_parts(
    transport: &Transport,
    path: &Path,
    file_id: String,
    num_bytes: u64,
    started: InitiateResponse,
    opts: &DirectUploadOptions,
    progress: Arc<TransferProgress>,
) -> Result<DirectUploadResult, Error> {
    let upload_id = started.upload_id.clone();
    let parts = part_ranges(&started, num_bytes)?;
    let remaining: u64 = parts.iter().map(|p| p.len).sum();
    progress.total.store(num_bytes, Ordering::Relaxed);
    // Parts checkpointed by an earlier run count as done.
    progress.done.store(num_bytes.saturating_sub(remaining), Ordering::Relaxed);
    if started.is_resume == Some(true) {
        log::debug!("resuming upload {upload_id} of {file_id}: {} parts left", parts.len());
    }

    let sent = send_all_parts(transport, &upload_id, path, parts, opts.concurrency, &progress).await;
    let mut tokens = sent.map_err(|err| resumable_failure(&upload_id, path, err))?;
    tokens.sort_by_key(|t| t.part_number);
    let call = post_json(transport, &upload_path(&upload_id, "/complete")?, &PartsRequest { parts: tokens })?;
    let complete = match transport.json::<CompleteResponse>(&call).await {
        Ok(complete) => complete,
        Err(Error::Api(api)) if api.status == 409 && api.after_lost_response => {
            completed_by_lost_response(transport, &file_id, path, num_bytes).await.ok_or(Error::Api(api))?
        }
        Err(err) => return Err(resumable_failure(&upload_id, path, err)),
    };
    progress.done.store(num_bytes, Ordering::Relaxed);
    Ok(DirectUploadResult { file_id, complete })
}

/// A `complete` whose answer was lost and whose retry met a 409: our upload completed (the
/// upload is claimed, so no one else here completes it) or another writer took the name
/// meanwhile. As for the simple upload, the stored bytes decide; only ours are success.
async fn completed_by_lost_response(transport: &Transport, file_id: &str, path: &Path, num_bytes: u64) -> Option<CompleteResponse> {
    match stored_content::matches(transport, file_id, Local::File(path)).await {
        Ok(true) => {
            log::debug!("upload of {file_id}: complete met 409 after a lost response; the stored file holds our bytes");
            Some(CompleteResponse {
                file_uid: None,
                file_name: Some(file_id.to_string()),
                file_status: None,
                num_bytes: Some(num_bytes),
                extra: Default::default(),
            })
        }
        Ok(false) => None,
        Err(err) => {
            log::debug!("upload of {file_id}: complete met 409 after a lost response; could not compare ({err})");
            None
        }
    }
}

/// Sends every part, `concurrency` at a time. After the first failure no new part starts, but
/// the parts in flight run to the end of their PUT and checkpoint: a part the storage accepted
/// is recorded, so a resume does not send it again.
async fn send_all_parts(
    transport: &Transport,
    upload_id: &str,
    path: &Path,
    parts: Vec<PartRange>,
    concurrency: usize,
    progress: &Arc<TransferProgress>,
) -> Result<Vec<PartToken>, Error> {
    let send = |part: PartRange| {
        let transport = transport.clone();
        let progress = progress.clone();
        let upload_id = upload_id.to_string();
        let path = path.to_path_buf();
        async move {
            let token = send_part(&transport, &upload_id, &path, &part, &progress).await?;
            checkpoint(&transport, &upload_id, &token).await;
            Ok::<PartToken, Error>(token)
        }
    };
    let mut pending = parts.into_iter();
    let mut in_flight = FuturesUnordered::new();
    let mut tokens = Vec::new();
    let mut first_error = None;
    loop {
        while first_error.is_none() && in_flight.len() < concurrency {
            match pending.next() {
                Some(part) => in_flight.push(send(part)),
                None => break,
            }
        }
        match in_flight.next().await {
            Some(Ok(token)) => tokens.push(token),
            Some(Err(err)) => {
                if first_error.is_none() {
                    first_error = Some(err);
                }
            }
            None => break,
        }
    }
    match first_error {
        Some(err) => Err(err),
        None => Ok(tokens),
    }
}

/// A part with its byte range resolved.
#[derive(Debug, Clone)]
pub(crate) struct PartRange {
    number: u32,
    url: String,
    offset: u64,
    len: u64,
}

pub(crate) fn part_ranges(started: &InitiateResponse, num_bytes: u64) -> Result<Vec<PartRange>, Error> {
    let part_size = started.part_size;
    started
        .parts
        .iter()
        .map(|p: &PartTarget| {
            let offset = match (p.offset, part_size) {
                (Some(o), _) => o,
                // Saturating: a server's part number times its part size can exceed u64, and
                // then lies past the file, which the check below reports.
                (None, Some(size)) => u64::from(p.part_number.saturating_sub(1)).saturating_mul(size),
                (None, None) => 0,
            };
            let len = match (p.length, part_size) {
                (Some(l), _) => l,
                (None, Some(size)) => size.min(num_bytes.saturating_sub(offset)),
                (None, None) => num_bytes.saturating_sub(offset),
            };
            if offset.checked_add(len).is_none_or(|end| end > num_bytes) {
                return Err(Error::Decode {
                    url: String::new(),
                    message: format!(
                        "part {} covers bytes {offset}..{} of a {num_bytes}-byte file",
                        p.part_number,
                        offset.saturating_add(len)
                    ),
                    body: String::new(),
                });
            }
            Ok(PartRange { number: p.part_number, url: p.url.clone(), offset, len })
        })
        .collect()
}

/// Sends one part under the retry rule, refreshing its URL when the storage says it expired.
async fn send_part(
    transport: &Transport,
    upload_id: &str,
    path: &Path,
    part: &PartRange,
    progress: &Arc<TransferProgress>,
) -> Result<PartToken, Error> {
    let policy = &transport.config.retry;
    let mut url = part.url.clone();
    let mut attempt: u32 = 0;
    let mut retries: u32 = 0;
    let mut refreshes: u32 = 0;
    loop {
        attempt += 1;
        let this_attempt = Arc::new(AtomicU64::new(0));
        let call = Call {
            body: RequestBody::FileRange {
                path: path.to_path_buf(),
                offset: part.offset,
                len: part.len,
                progress: vec![this_attempt.clone(), progress.done.clone()],
            },
            streaming: true,
            authenticated: false,
            ..Call::new(Method::PUT, url.clone())
        };
        let result = match transport.send_once(&call, attempt).await {
            Ok(response) => part_token(part.number, response, transport.config.timeouts.read).await,
            Err(err) => Err(err),
        };
        let err = match result {
            Ok(token) => return Ok(token),
            Err(err) => err,
        };
        // Bytes of a failed attempt will be sent again: take them back off the total.
        progress.done.fetch_sub(this_attempt.load(Ordering::Relaxed), Ordering::Relaxed);
        if url_expired(&err) && refreshes < MAX_URL_REFRESHES {
            refreshes += 1;
            log::debug!("upload {upload_id} part {}: URL expired, refreshing", part.number);
            url = refresh_url(transport, upload_id, part.number).await?;
            continue;
        }
        if err.is_retryable() && retries < policy.max_retries {
            retries += 1;
            let delay = policy.delay(retries, err.retry_after());
            log::debug!("upload {upload_id} part {} attempt {attempt} failed ({err}); retrying in {:.3}s", part.number, delay.as_secs_f64());
            tokio::time::sleep(delay).await;
            continue;
        }
        return Err(err);
    }
}

/// The storage's answer to a part PUT: its `ETag` is the part's token.
async fn part_token(number: u32, response: reqwest::Response, stall: std::time::Duration) -> Result<PartToken, Error> {
    let url = response.url().to_string();
    let etag = response
        .headers()
        .get(reqwest::header::ETAG)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let _ = read_body(response, stall).await?;
    let token = etag.ok_or_else(|| Error::Decode {
        url,
        message: format!("part {number} was stored but the answer carried no ETag"),
        body: String::new(),
    })?;
    Ok(PartToken { part_number: number, part_token: token })
}

/// Storage answers 403 for an expired signature, or 400 mentioning `TokenExpired`.
fn url_expired(err: &Error) -> bool {
    match err {
        Error::Api(api) => api.status == 403 || (api.status == 400 && api.body.contains("TokenExpired")),
        _ => false,
    }
}

async fn refresh_url(transport: &Transport, upload_id: &str, part_number: u32) -> Result<String, Error> {
    let call = post_json(
        transport,
        &upload_path(upload_id, "/parts/urls")?,
        &PartUrlsRequest { part_numbers: vec![part_number] },
    )?;
    let fresh: PartUrlsResponse = transport.json(&call).await?;
    fresh
        .parts
        .into_iter()
        .find(|p| p.part_number == part_number)
        .map(|p| p.url)
        .ok_or_else(|| Error::Decode {
            url: call.url.clone(),
            message: format!("no fresh URL for part {part_number}"),
            body: String::new(),
        })
}

/// Records a finished part so a later run skips it. Best effort: a lost checkpoint only means
/// the part is sent again on resume.
async fn checkpoint(transport: &Transport, upload_id: &str, token: &PartToken) {
    let call = upload_path(upload_id, "/parts/checkpoint")
        .and_then(|p| post_json(transport, &p, &PartsRequest { parts: vec![token.clone()] }));
    let result = match call {
        Ok(call) => transport.json::<serde_json::Value>(&call).await.map(|_| ()),
        Err(e) => Err(e),
    };
    if let Err(err) = result {
        log::debug!("upload {upload_id}: checkpoint of part {} failed ({err}); it will be re-sent on resume", token.part_number);
    }
}

pub async fn abort(transport: &Transport, upload_id: &str) -> Result<(), Error> {
    // Aborting twice is harmless.
    let call = Call { repeatable: true, ..Call::new(Method::POST, transport.config.url(&upload_path(upload_id, "/abort")?)) };
    transport.json::<serde_json::Value>(&call).await.map(|_| ())
}

fn resumable_failure(upload_id: &str, path: &Path, err: Error) -> Error {
    match err {
        // Wrong arguments and missing files are not transfer failures.
        Error::InvalidArgument { .. } | Error::Config(_) => err,
        // A state conflict (the upload completed, the name taken): a resume would only meet it
        // again. It stays the `ConflictError` it is.
        Error::Api(ref api) if api.status == 409 => err,
        Error::Api(ref api) if api.status == 404 => Error::Transfer {
            message: format!(
                "upload {upload_id} of {} is no longer known to the platform ({err}); upload the file again",
                path.display()
            ),
            resumable: false,
            upload_id: Some(upload_id.to_string()),
        },
        other => Error::Transfer {
            message: format!(
                "upload {upload_id} of {} stopped: {other}. Parts already sent are kept: call \
                 files.upload() on the same path again to resume, or files.abort_upload({upload_id:?}) \
                 to discard them",
                path.display()
            ),
            resumable: true,
            upload_id: Some(upload_id.to_string()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::error::ApiError;

    fn started(parts: Vec<PartTarget>, part_size: Option<u64>) -> InitiateResponse {
        InitiateResponse {
            upload_id: "upl_1".into(),
            file_uid: None,
            strategy: Some("multipart".into()),
            num_parts: None,
            part_size,
            parts,
            expires_at: None,
            is_resume: None,
            total_bytes: None,
        }
    }

    fn target(n: u32, offset: Option<u64>, length: Option<u64>) -> PartTarget {
        PartTarget { part_number: n, url: format!("http://s/{n}"), offset, length }
    }

    #[test]
    fn ranges_from_explicit_offsets_or_part_size() {
        let explicit = part_ranges(&started(vec![target(2, Some(10), Some(5))], None), 15).unwrap();
        assert_eq!((explicit[0].offset, explicit[0].len), (10, 5));
        let derived =
            part_ranges(&started(vec![target(1, None, None), target(3, None, None)], Some(4)), 10).unwrap();
        assert_eq!((derived[0].offset, derived[0].len), (0, 4));
        assert_eq!((derived[1].offset, derived[1].len), (8, 2), "the last part is short");
    }

    #[test]
    fn ranges_past_the_file_are_refused() {
        assert!(part_ranges(&started(vec![target(1, Some(8), Some(5))], None), 10).is_err());
        assert!(part_ranges(&started(vec![target(1, Some(u64::MAX), Some(5))], None), 10).is_err());
    }

    fn api(status: u16, body: &str) -> Error {
        Error::Api(Box::new(ApiError {
            status,
            method: "PUT".into(),
            url: "u".into(),
            errors: vec![],
            body: body.into(),
            json: None,
            retry_after: None,
            attempt: 1,
            after_lost_response: false,
            hint: None,
        }))
    }

    #[test]
    fn expiry_is_403_or_400_token_expired() {
        assert!(url_expired(&api(403, "")));
        assert!(url_expired(&api(400, "<Code>TokenExpired</Code>")));
        assert!(!url_expired(&api(400, "bad part")));
        assert!(!url_expired(&api(500, "TokenExpired")));
    }

    #[test]
    fn failures_say_how_to_resume() {
        let err = resumable_failure("upl_9", Path::new("/data/big.bin"), api(503, ""));
        match err {
            Error::Transfer { resumable, upload_id, message } => {
                assert!(resumable);
                assert_eq!(upload_id.as_deref(), Some("upl_9"));
                assert!(message.contains("resume") && message.contains("abort_upload"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            resumable_failure("upl_9", Path::new("x"), api(404, "")),
            Error::Transfer { resumable: false, .. }
        ));
        assert!(matches!(resumable_failure("upl_9", Path::new("x"), api(409, "")), Error::Api(a) if a.status == 409));
    }
}
