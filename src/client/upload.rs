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
use super::transport::{read_body, shown_url, Call, RequestBody, Transport};
use super::upload_claim::UploadClaim;
use crate::wire::files::{mime_for_name, DIRECT_UPLOAD_MAX_BYTES};
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
pub(crate) fn direct_type(name: &str, content_type: Option<&str>) -> String {
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
    if num_bytes > DIRECT_UPLOAD_MAX_BYTES {
        return Err(Error::invalid_argument(
            "path",
            format!(
                "{} is {num_bytes} bytes; the direct-to-cloud upload takes at most {DIRECT_UPLOAD_MAX_BYTES} bytes (250 GB)",
                path.display()
            ),
        ));
    }
    let fingerprint = Fingerprint::of(&meta);
    let state = ResumeState::new(&transport.config.base_url(), path);
    // The platform matches an unfinished upload by (organization, name, type, size) only, so its
    // parts may hold another file's bytes: one of another path, another machine, or an edited
    // copy. Only the upload this machine's record says it started from this very version of the
    // file, in parts of the size it had then, is resumed; any other the platform offers is
    // discarded and the file sent afresh.
    let ours = match state.load() {
        Some(record) if opts.resume && record.fingerprint == fingerprint => Some(record),
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
    let layout_kept = |ours: &ResumeRecord| ours.upload_id == started.upload_id && ours.part_size == started.part_size;
    if started.is_resume == Some(true) && !ours.as_ref().is_some_and(layout_kept) {
        let why = match &ours {
            Some(ours) if ours.upload_id == started.upload_id => "its parts were sent in pieces of another size",
            _ => "not started from this file here",
        };
        log::debug!("discarding unfinished upload {} of {file_id}: {why}", started.upload_id);
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
        fingerprint: fingerprint.clone(),
        part_size: started.part_size,
    });
    let upload_id = started.upload_id.clone();
    let result = send_parts(transport, path, file_id, num_bytes, started, opts, progress, &fingerprint).await;
    match &result {
        // A plan or an answer the client cannot trust: resuming would only meet it again.
        Ok(_) | Err(Error::Transfer { resumable: false, .. }) | Err(Error::Decode { .. }) => state.remove(),
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

#[allow(clippy::too_many_arguments)]
async fn send_parts(
    transport: &Transport,
    path: &Path,
    file_id: String,
    num_bytes: u64,
    started: InitiateResponse,
    opts: &DirectUploadOptions,
    progress: Arc<TransferProgress>,
    fingerprint: &Fingerprint,
) -> Result<DirectUploadResult, Error> {
    let upload_id = started.upload_id.clone();
    let planned = part_ranges(&started, num_bytes).and_then(|parts| check_plan(&started, &parts, num_bytes).map(|()| parts));
    let parts = match planned {
        Ok(parts) => parts,
        Err(message) => {
            // The plan is the server's data, and carrying out a wrong one stores a file with
            // bytes missing or twice. Nothing was sent; the upload is of no use.
            if let Err(err) = discard(transport, &upload_id).await {
                log::debug!("could not abort upload {upload_id} after its unusable plan: {err}");
            }
            return Err(Error::Decode {
                url: transport.config.url("/files/uploads/initiate"),
                message: format!("the upload plan for {file_id} ({num_bytes} bytes) {message}"),
                body: String::new(),
            });
        }
    };
    let remaining: u64 = parts.iter().map(|p| p.len).sum();
    progress.total.store(num_bytes, Ordering::Relaxed);
    // Parts checkpointed by an earlier run count as done.
    progress.done.store(num_bytes.saturating_sub(remaining), Ordering::Relaxed);
    if started.is_resume == Some(true) {
        log::debug!("resuming upload {upload_id} of {file_id}: {} parts left", parts.len());
    }

    let sent = send_all_parts(transport, &upload_id, path, parts, opts.concurrency, &progress, fingerprint).await;
    let mut tokens = match sent {
        Ok(tokens) => tokens,
        // A part that failed because the file shrank under it is the file's change, not the link's.
        Err(err) if !unchanged(path, fingerprint).await => {
            log::debug!("upload {upload_id} of {file_id}: the local file changed ({err})");
            return Err(abandon_changed(transport, &upload_id, path).await);
        }
        Err(err) => return Err(resumable_failure(&upload_id, path, err)),
    };
    // Read last thing before `complete`: every part was read by now, so an edit at any moment
    // of the upload shows here, and parts of two versions are never registered as one file.
    if !unchanged(path, fingerprint).await {
        return Err(abandon_changed(transport, &upload_id, path).await);
    }
    tokens.sort_by_key(|t| t.part_number);
    let call = post_json(transport, &upload_path(&upload_id, "/complete")?, &PartsRequest { parts: tokens })?;
    let complete = match transport.json::<CompleteResponse>(&call).await {
        Ok(complete) => complete,
        Err(Error::Api(api)) if api.status == 409 && api.after_lost_response => {
            completed_by_lost_response(transport, &file_id, path, num_bytes).await.ok_or(Error::Api(api))?
        }
        Err(err) => return Err(resumable_failure(&upload_id, path, err)),
    };
    let wrong = match (&complete.num_bytes, &complete.file_name) {
        (Some(n), _) if *n != num_bytes => Some(format!("{n} bytes")),
        (_, Some(name)) if *name != file_id => Some(format!("a file named {name:?}")),
        _ => None,
    };
    if let Some(wrong) = wrong {
        return Err(Error::Decode {
            url: call.url.clone(),
            message: format!("the platform completed the upload of {file_id} ({num_bytes} bytes) as {wrong}"),
            body: serde_json::to_string(&complete).unwrap_or_default(),
        });
    }
    progress.done.store(num_bytes, Ordering::Relaxed);
    Ok(DirectUploadResult { file_id, complete })
}

/// Whether the file at `path` is still the one `fingerprint` was taken of (same size, times and
/// inode); a file that cannot be read any more is not.
pub(crate) async fn unchanged(path: &Path, fingerprint: &Fingerprint) -> bool {
    match tokio::fs::metadata(path).await {
        Ok(meta) => Fingerprint::of(&meta) == *fingerprint,
        Err(_) => false,
    }
}

/// The error for a local file that changed while it was being sent. A `TransferError` that is
/// not resumable: resuming would join the parts of two versions (the very thing refused), and
/// an `OSError` would say the file could not be read, which is not what happened. Uploading
/// again sends the file as it then is.
pub(crate) fn changed_during_upload(path: &Path, stored: &str) -> Error {
    Error::Transfer {
        message: format!(
            "{} changed during the upload (written to, truncated or replaced), so the bytes sent mix \
             versions of it; {stored}. Upload it again once nothing is writing to it",
            path.display()
        ),
        resumable: false,
        upload_id: None,
    }
}

/// Aborts an upload whose file changed under it (best effort: its parts are useless), and
/// gives the error to raise.
async fn abandon_changed(transport: &Transport, upload_id: &str, path: &Path) -> Error {
    if let Err(err) = discard(transport, upload_id).await {
        log::debug!("could not abort upload {upload_id} after its file changed: {err}");
    }
    changed_during_upload(path, "the upload was discarded and nothing was stored")
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
    fingerprint: &Fingerprint,
) -> Result<Vec<PartToken>, Error> {
    let send = |part: PartRange| {
        let transport = transport.clone();
        let progress = progress.clone();
        let upload_id = upload_id.to_string();
        let path = path.to_path_buf();
        async move {
            let token = send_part(&transport, &upload_id, &path, &part, &progress).await?;
            // Checked as each part is read (one stat), so an edited file stops the upload at
            // once; the part is not checkpointed, as its bytes may be of either version.
            if !unchanged(&path, fingerprint).await {
                return Err(changed_during_upload(&path, "the upload was stopped"));
            }
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

pub(crate) fn part_ranges(started: &InitiateResponse, num_bytes: u64) -> Result<Vec<PartRange>, String> {
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
                return Err(format!(
                    "has part {} covering bytes {offset}..{} of a {num_bytes}-byte file",
                    p.part_number,
                    offset.saturating_add(len)
                ));
            }
            check_part_url(&p.url).map_err(|why| format!("gives part {} the URL {why}", p.part_number))?;
            Ok(PartRange { number: p.part_number, url: p.url.clone(), offset, len })
        })
        .collect()
}

/// A part URL is the server's: one that is not an absolute http(s) URL is its error, not one of
/// the caller's `base_url`. Messages show no query (it holds the signature).
fn check_part_url(url: &str) -> Result<(), String> {
    match reqwest::Url::parse(url) {
        Ok(parsed) if matches!(parsed.scheme(), "http" | "https") && parsed.has_host() => Ok(()),
        _ => Err(format!("{:?}, which is not an absolute http(s) URL", shown_url(url))),
    }
}

/// Checks that the parts cover the file exactly once: no byte left out (a gap, an empty plan),
/// none sent twice (an overlap), no part number twice. On a resume the plan lists only the
/// parts still to send; those already recorded are the other numbers up to `num_parts`, each
/// where `part_size` puts it. Such a layout tiles the file when `num_parts` is the count of
/// `part_size` pieces in it, so the remaining parts must each sit at their own place in it.
pub(crate) fn check_plan(started: &InitiateResponse, parts: &[PartRange], num_bytes: u64) -> Result<(), String> {
    let mut numbers: Vec<u32> = parts.iter().map(|p| p.number).collect();
    numbers.sort_unstable();
    if let Some(twice) = numbers.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!("lists part {} twice", twice[0]));
    }
    if started.is_resume == Some(true) {
        if let Some(total) = started.total_bytes.filter(|&t| t != num_bytes) {
            return Err(format!("resumes an upload of {total} bytes"));
        }
        let (Some(count), Some(size)) = (started.num_parts, started.part_size.filter(|&s| s > 0)) else {
            return Err("resumes without num_parts and part_size, so the parts already sent cannot be checked".into());
        };
        if count != num_bytes.div_ceil(size).max(1) {
            return Err(format!("resumes as {count} parts of {size} bytes, which do not make a {num_bytes}-byte file"));
        }
        for p in parts {
            let offset = u64::from(p.number.saturating_sub(1)).saturating_mul(size);
            let in_place = p.number >= 1
                && u64::from(p.number) <= count
                && p.offset == offset
                && p.len == size.min(num_bytes.saturating_sub(offset));
            if !in_place {
                return Err(format!(
                    "resumes with part {} at bytes {}..{}, which is not that part's place among {count} parts of {size} bytes",
                    p.number,
                    p.offset,
                    p.offset.saturating_add(p.len)
                ));
            }
        }
        return Ok(());
    }
    let mut spans: Vec<(u64, u64, u32)> = parts.iter().map(|p| (p.offset, p.len, p.number)).collect();
    spans.sort_unstable();
    let mut covered: u64 = 0;
    for (offset, len, number) in spans {
        if offset != covered {
            let (from, to) = (covered.min(offset), covered.max(offset));
            let what = if offset > covered { "leaves out" } else { "sends twice" };
            return Err(format!("{what} bytes {from}..{to} (part {number} starts at {offset})"));
        }
        covered += len;
    }
    if covered != num_bytes {
        return Err(format!("covers {covered} of the {num_bytes} bytes"));
    }
    Ok(())
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
    let url = shown_url(response.url().as_str()).to_string();
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
        .ok_or_else(|| format!("no fresh URL for part {part_number}"))
        .and_then(|url| check_part_url(&url).map(|()| url).map_err(|why| format!("the fresh URL for part {part_number} is {why}")))
        .map_err(|message| Error::Decode { url: call.url.clone(), message, body: String::new() })
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
        // Wrong arguments and missing files are not transfer failures; a transfer failure (the
        // file changed) already says what to do.
        Error::InvalidArgument { .. } | Error::Config(_) | Error::Transfer { .. } => err,
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
    fn a_plan_must_cover_the_file_exactly_once() {
        let check = |parts: Vec<PartTarget>, n: u64| {
            let s = started(parts, Some(4));
            part_ranges(&s, n).and_then(|r| check_plan(&s, &r, n))
        };
        assert!(check(vec![target(1, None, None), target(2, None, None), target(3, None, None)], 10).is_ok());
        assert!(check(vec![target(1, Some(0), Some(0))], 0).is_ok(), "an empty file is one empty part");
        assert!(check(vec![], 0).is_ok());
        for (parts, why) in [
            (vec![target(1, None, None), target(3, None, None)], "leaves out"),
            (vec![], "covers 0"),
            (vec![target(1, Some(0), Some(6)), target(2, Some(4), Some(6))], "sends twice"),
            (vec![target(1, Some(0), Some(5)), target(1, Some(5), Some(5))], "twice"),
        ] {
            let err = check(parts, 10).expect_err(why);
            assert!(err.contains(why), "{err}");
        }
        let relative = PartTarget { part_number: 1, url: "/store/1?signature=s".into(), offset: None, length: None };
        let err = check(vec![relative], 4).expect_err("a relative URL");
        assert!(err.contains("/store/1") && !err.contains("signature"), "{err}");
    }

    #[test]
    fn a_resume_must_make_the_file_with_the_parts_already_sent() {
        let resume = |parts: Vec<PartTarget>, num_parts: u64, total: u64, n: u64| {
            let s = InitiateResponse {
                is_resume: Some(true),
                num_parts: Some(num_parts),
                total_bytes: Some(total),
                ..started(parts, Some(4))
            };
            part_ranges(&s, n).and_then(|r| check_plan(&s, &r, n))
        };
        assert!(resume(vec![target(3, None, None)], 3, 10, 10).is_ok());
        assert!(resume(vec![], 3, 10, 10).is_ok(), "every part already sent");
        assert!(resume(vec![target(3, Some(4), Some(4))], 3, 10, 10).is_err(), "part 3 out of its place");
        assert!(resume(vec![target(3, None, None)], 4, 10, 10).is_err(), "a layout of another size");
        assert!(resume(vec![target(3, None, None)], 3, 11, 10).is_err(), "another file's upload");
        assert!(resume(vec![target(4, None, None)], 3, 10, 10).is_err(), "a part past the layout");
        assert!(resume(vec![target(u32::MAX, None, None)], u64::MAX, 10, 10).is_err());
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
