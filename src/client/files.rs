//! The files surface: simple and base64 uploads, listing, metadata, download, delete.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use futures_util::StreamExt;
use reqwest::Method;
use serde_json::Value;
use tokio::io::AsyncWriteExt;

use super::error::{seconds, Error};
use super::path_segment::path_segment;
use super::resume_state::Fingerprint;
use super::stored_content::{self, Local};
use super::transport::{error_chain, Call, RequestBody, Transport};
use super::upload::{self, DirectUploadOptions, ProgressShare, TransferProgress};
use crate::wire::files::{mime_for_name, FileOpResponse, SIMPLE_UPLOAD_MAX_BYTES, SIMPLE_UPLOAD_TYPES};

/// The largest write batch of a download.
const DOWNLOAD_BUFFER: usize = 4 * 1024 * 1024;

const JSONL_TYPE: &str = "application/x-ndjson";

/// The content type a file is uploaded with: from its extension (as the platform derives it),
/// or the caller's for an unknown extension. A refused type is blamed on where it came from:
/// `argument` (the name) for an extension's, `content_type` for the caller's.
fn upload_type(name: &str, content_type: Option<&str>, argument: &str) -> Result<String, Error> {
    let named = argument;
    let (mime, argument) = match mime_for_name(name) {
        Some(m) => (Some(m.to_string()), named),
        None => (content_type.map(str::to_string), "content_type"),
    };
    match mime {
        Some(m) if m == JSONL_TYPE => Err(Error::invalid_argument(
            argument,
            format!(
                "{name:?} is JSONL (application/x-ndjson), which the simple upload rejects; it \
                 needs the direct-to-cloud upload (method=\"direct\", which method=\"auto\" picks for JSONL)"
            ),
        )),
        Some(m) if SIMPLE_UPLOAD_TYPES.contains(&m.as_str()) => Ok(m),
        Some(m) => Err(Error::invalid_argument(
            argument,
            format!("{name:?} has type {m}, which the upload does not accept; accepted: {}", SIMPLE_UPLOAD_TYPES.join(", ")),
        )),
        None => Err(Error::invalid_argument(
            // No type at all: the name is what lacks one.
            named,
            format!(
                "{name:?} has no known extension; use .png, .jpg, .jpeg, .mp4, .txt, .csv or .json \
                 (the platform derives the file type from it), or pass content_type"
            ),
        )),
    }
}

/// How `upload` sends a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UploadMethod {
    /// The simple upload for small files of the types it takes; the direct flow above the
    /// threshold, and always for JSONL.
    Auto,
    Simple,
    Direct,
}

impl UploadMethod {
    pub fn parse(text: &str) -> Result<Self, Error> {
        match text {
            "auto" => Ok(UploadMethod::Auto),
            "simple" => Ok(UploadMethod::Simple),
            "direct" => Ok(UploadMethod::Direct),
            other => Err(Error::invalid_argument("method", format!("is {other:?}; it takes 'auto', 'simple' or 'direct'"))),
        }
    }
}

/// Above this size `Auto` uses the resumable direct flow. The simple upload is one request
/// that restarts from zero on any failure; past ~100 MB that costs more than the direct flow's
/// extra round trips.
pub const DEFAULT_DIRECT_THRESHOLD: u64 = 100 * 1000 * 1000;

#[derive(Debug, Clone)]
pub struct UploadOptions {
    pub method: UploadMethod,
    pub content_type: Option<String>,
    pub direct_threshold: u64,
    pub direct: DirectUploadOptions,
}

/// Uploads a file by the method `opts` picks and returns its record (`file_id`, `file_uid`, and
/// what else the platform reported).
pub async fn upload_file(
    transport: &Transport,
    path: &Path,
    opts: &UploadOptions,
    progress: Arc<TransferProgress>,
) -> Result<Value, Error> {
    if opts.direct_threshold > SIMPLE_UPLOAD_MAX_BYTES {
        return Err(Error::invalid_argument(
            "direct_threshold",
            format!("is {}; the simple upload takes at most {SIMPLE_UPLOAD_MAX_BYTES} bytes", opts.direct_threshold),
        ));
    }
    let meta = tokio::fs::metadata(path).await.map_err(|e| Error::io(path.display(), e))?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    // Refused on every method, so whether a name can be uploaded never depends on the size.
    check_sendable(name, "path")?;
    // JSONL by its extension or, for an unknown one, by `content_type`: the type the upload
    // would be sent with.
    let is_jsonl = upload::direct_type(name, opts.content_type.as_deref()) == JSONL_TYPE;
    let direct = match opts.method {
        UploadMethod::Direct => true,
        UploadMethod::Simple => false,
        UploadMethod::Auto => is_jsonl || meta.len() > opts.direct_threshold,
    };
    if direct {
        let done = upload::upload_direct(transport, path, &opts.direct, progress).await?;
        let mut record = serde_json::to_value(&done.complete).unwrap_or(Value::Null);
        if let Value::Object(map) = &mut record {
            map.insert("file_id".into(), Value::String(done.file_id));
            map.insert("is_valid".into(), Value::Bool(true));
        }
        return Ok(record);
    }
    progress.total.store(meta.len(), Ordering::Relaxed);
    let done = upload(transport, path, opts.content_type.as_deref(), Some(progress.done.clone())).await?;
    progress.done.store(meta.len(), Ordering::Relaxed);
    serde_json::to_value(done).map_err(|e| Error::Decode { url: String::new(), message: e.to_string(), body: String::new() })
}

/// Uploads a file from disk, streamed (never read whole), through `POST /files`.
pub async fn upload(
    transport: &Transport,
    path: &Path,
    content_type: Option<&str>,
    progress: Option<Arc<AtomicU64>>,
) -> Result<FileOpResponse, Error> {
    let meta = tokio::fs::metadata(path).await.map_err(|e| Error::io(path.display(), e))?;
    if !meta.is_file() {
        return Err(Error::invalid_argument("path", format!("{} is not a regular file", path.display())));
    }
    let file_name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| Error::invalid_argument("path", format!("{} has no usable file name", path.display())))?
        .to_string();
    check_sendable(&file_name, "path")?;
    let mime = upload_type(&file_name, content_type, "path")?;
    if meta.len() > SIMPLE_UPLOAD_MAX_BYTES {
        return Err(Error::invalid_argument(
            "path",
            format!(
                "{} is {} bytes; the simple upload takes at most {} bytes and larger files need the \
                 direct-to-cloud upload (method=\"direct\")",
                path.display(),
                meta.len(),
                SIMPLE_UPLOAD_MAX_BYTES
            ),
        ));
    }
    let call = Call {
        body: RequestBody::MultipartFile {
            field: "file".into(),
            path: path.to_path_buf(),
            file_name,
            mime,
            len: meta.len(),
            progress,
        },
        streaming: true,
        // A repeat after a lost answer meets a 409, which `resolve_lost_response` settles.
        repeatable: true,
        ..Call::new(Method::POST, transport.config.url("/files"))
    };
    let fingerprint = Fingerprint::of(&meta);
    let result = transport.json::<FileOpResponse>(&call).await;
    let result = resolve_lost_response(transport, result, &file_name_of(&call), meta.len(), Local::File(path)).await;
    if upload::unchanged(path, &fingerprint).await {
        return result;
    }
    // The file changed while it was sent: what arrived, if anything did, mixes its versions.
    match result {
        Ok(done) => {
            // Stored, but not as any version of the file was: take it back (best effort; the
            // message says whether it went).
            let gone = match file_url(transport, "/files/delete", &done.file_id) {
                Ok(url) => transport.json::<Value>(&Call::new(Method::DELETE, url)).await.is_ok(),
                Err(_) => false,
            };
            let stored = if gone {
                "what arrived was deleted again"
            } else {
                "what arrived is stored under that name and could not be deleted: delete it with files.delete"
            };
            Err(upload::changed_during_upload(path, stored))
        }
        Err(err) => {
            log::debug!("upload of {}: the local file changed ({err})", path.display());
            Err(upload::changed_during_upload(path, "the upload was stopped and nothing was stored"))
        }
    }
}

fn file_name_of(call: &Call) -> String {
    match &call.body {
        RequestBody::MultipartFile { file_name, .. } | RequestBody::MultipartBytes { file_name, .. } => file_name.clone(),
        _ => String::new(),
    }
}

/// An upload retried after its response was lost can meet its own earlier attempt as a 409:
/// the file landed, the answer did not. It is taken as ours only when the stored file holds
/// byte for byte what we sent (size first, from the metadata, then the content, streamed;
/// both only in this rare case). Another writer's file of the same size but other bytes stays
/// the conflict it is; one with identical bytes cannot be told from ours, and reporting it as
/// stored is true of what the platform holds. Anything that prevents the check (the file gone,
/// a network failure) leaves the 409: success is never reported unverified.
async fn resolve_lost_response(
    transport: &Transport,
    result: Result<FileOpResponse, Error>,
    file_id: &str,
    size: u64,
    local: Local<'_>,
) -> Result<FileOpResponse, Error> {
    let api = match result {
        Err(Error::Api(api)) if api.status == 409 && api.after_lost_response && !file_id.is_empty() => api,
        other => return other,
    };
    let record = match metadata(transport, file_id).await {
        Ok(record) if record.get("num_bytes").and_then(Value::as_u64) == Some(size) => record,
        _ => return Err(Error::Api(api)),
    };
    match stored_content::matches(transport, file_id, local).await {
        Ok(true) => {
            log::debug!("upload of {file_id}: 409 after a lost response; the stored file holds our bytes, taking it as ours");
            Ok(FileOpResponse {
                is_valid: true,
                file_id: file_id.to_string(),
                file_uid: record.get("file_uid").and_then(Value::as_str).map(str::to_string),
            })
        }
        Ok(false) => {
            log::debug!("upload of {file_id}: 409 after a lost response; the stored file holds other bytes");
            Err(Error::Api(api))
        }
        Err(err) => {
            log::debug!("upload of {file_id}: 409 after a lost response; could not compare the stored file ({err})");
            Err(Error::Api(api))
        }
    }
}

/// Uploads in-memory content through `POST /files/base64` (the multipart shape, with the
/// base64 text as the part's content). `data` is the raw content; it is encoded here.
pub async fn upload_base64(transport: &Transport, name: &str, data: &[u8], content_type: Option<&str>) -> Result<FileOpResponse, Error> {
    check_name(name, "name")?;
    check_sendable(name, "name")?;
    let mime = upload_type(name, content_type, "name")?;
    let encoded = base64::engine::general_purpose::STANDARD.encode(data);
    let call = Call {
        body: RequestBody::MultipartBytes {
            field: "file".into(),
            file_name: name.to_string(),
            mime,
            data: Bytes::from(encoded),
        },
        repeatable: true, // as for `/files`: a repeat's 409 is settled by the stored content
        ..Call::new(Method::POST, transport.config.url("/files/base64"))
    };
    let result = transport.json::<FileOpResponse>(&call).await;
    resolve_lost_response(transport, result, name, data.len() as u64, Local::Bytes(data)).await
}

fn check_name(file_id: &str, argument: &str) -> Result<(), Error> {
    if file_id.is_empty() || file_id.contains('/') || file_id.contains('\\') {
        return Err(Error::invalid_argument(argument, format!("{file_id:?} is not a file name (file_id is the uploaded file's base name)")));
    }
    Ok(())
}

/// Refuses a name that cannot go into a multipart part header as sent: CR or LF would end the
/// header line there (reqwest writes them raw), and the other control characters but tab are
/// not allowed in a header. The spec allows none of them in a file name. Whitespace at either
/// end is refused too: the platform keeps a file under its name trimmed (as the emulator does),
/// so ` notes.txt` would be stored, listed and downloaded as `notes.txt`, and a direct upload
/// would end in a name mismatch after the bytes were sent.
fn check_sendable(name: &str, argument: &str) -> Result<(), Error> {
    if let Some(c) = name.chars().find(|&c| c.is_ascii_control() && c != '\t') {
        return Err(Error::invalid_argument(
            argument,
            format!("{name:?} contains a control character ({c:?}), which an uploaded file's name cannot hold; rename it"),
        ));
    }
    if name.trim() != name {
        return Err(Error::invalid_argument(
            argument,
            format!(
                "{name:?} begins or ends with whitespace, which the platform drops from a file's name (it would be \
                 stored as {:?}); rename it",
                name.trim()
            ),
        ));
    }
    Ok(())
}

/// The URL of `{prefix}/{file_id}` with the id percent-encoded as one path segment.
pub(crate) fn file_url(transport: &Transport, prefix: &str, file_id: &str) -> Result<String, Error> {
    check_name(file_id, "file_id")?;
    Ok(format!("{}/{}", transport.config.url(prefix), path_segment(file_id, "file_id")?))
}

/// One file's metadata (used to recognise an upload whose answer was lost).
async fn metadata(transport: &Transport, file_id: &str) -> Result<Value, Error> {
    transport.json(&Call::get(file_url(transport, "/files/metadata", file_id)?)).await
}

/// What a download does with a symbolic link at its destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// Writes the file the link points at, as `open()` does: for a path the caller named.
    Follow,
    /// Replaces the link with the downloaded file: for a name the server chose, which must not
    /// lead the bytes out of the folder the caller chose (a link kept there, such as
    /// `latest.csv -> ../elsewhere/config.yaml`, would).
    Replace,
}

/// Streams a file to `dest`, following a link there as `open()` does. Bytes go to a temporary
/// file beside `dest` that is renamed only once the body is complete, so an interrupted download
/// never leaves a truncated file under the real name. Returns the number of bytes written.
pub async fn download(
    transport: &Transport,
    file_id: &str,
    dest: &Path,
    progress: Arc<TransferProgress>,
) -> Result<u64, Error> {
    let call = Call::get(file_url(transport, "/files/download", file_id)?);
    let progress = Arc::new(ProgressShare::new(progress, 0));
    download_call(transport, call, file_id, dest, Links::Follow, progress, None).await
}

/// Streams the body of `call` (a GET) to `dest` through a temporary file beside it, fsynced and
/// renamed only when complete: the one download path for files, agent results and job outputs.
/// `label` names the download in errors; `links` says whether a link at `dest` is written
/// through or replaced; `progress` is this download's share of the counters. `listed` is the
/// size a listing gave for the file, if any: a body that comes without a length (one the server
/// ends by closing the connection) and stops short of it is cut, not complete.
pub async fn download_call(
    transport: &Transport,
    mut call: Call,
    label: &str,
    dest: &Path,
    links: Links,
    progress: Arc<ProgressShare>,
    listed: Option<u64>,
) -> Result<u64, Error> {
    call.streaming = true;
    let file_id = label;
    // Errors name the path the caller gave, as open() does, whichever file failed.
    let shown = dest.display().to_string();
    // Replaced, the link needs nothing: the temporary file is made beside it, in the folder, and
    // the rename onto its path replaces the link, not its target.
    let dest = &match links {
        Links::Follow => through_links(dest).await?,
        Links::Replace => dest.to_path_buf(),
    };
    let dir = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    match tokio::fs::metadata(&dir).await {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Err(Error::invalid_argument("path", format!("{} is not a folder", dir.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            return Err(Error::invalid_argument("path", format!("{} is not a folder (a part of it is a file)", dir.display())))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::invalid_argument("path", format!("the folder {} does not exist", dir.display())))
        }
        Err(e) => return Err(Error::io(&shown, e)),
    }
    if first_download_into(&dir) {
        let swept = dir.clone();
        // Best effort, and never the download's failure.
        let _ = tokio::task::spawn_blocking(move || remove_dead_partials(&swept)).await;
    }
    let stall = transport.config.timeouts.read;
    let written = transport
        .execute(&call, |response| {
            let dir = dir.clone();
            let progress = progress.clone();
            let shown = shown.clone();
            async move {
                let expected = response.content_length();
                // A retried download starts over.
                progress.restart(expected);
                // A body that fits the write buffer is gathered in memory and lands in one hop to
                // the blocking pool (create, write, fsync, rename); per-file hops were most of
                // the cost of downloading many small outputs.
                let mut sink = match expected {
                    Some(n) if n as usize <= DOWNLOAD_BUFFER => Sink::Memory(Vec::with_capacity(n as usize)),
                    _ => {
                        let (partial, file) = PartialFile::create(&dir, dest, &shown).await?;
                        // Each tokio file write is a hop to the blocking pool; writing per
                        // received chunk (~20 KiB) made downloads context-switch-bound.
                        Sink::File(partial, tokio::io::BufWriter::with_capacity(DOWNLOAD_BUFFER, file))
                    }
                };
                let mut stream = response.bytes_stream();
                let mut written: u64 = 0;
                let what = format!("download of {file_id}");
                while let Some(chunk) = next_piece(&mut stream, stall, &what, written).await? {
                    sink.write(&chunk).await?;
                    written += chunk.len() as u64;
                    progress.add(chunk.len() as u64);
                }
                match (expected, listed) {
                    (Some(n), _) if n != written => {
                        return Err(Error::Connection {
                            message: format!("download of {file_id} ended after {written} of {n} bytes"),
                        });
                    }
                    // Without a Content-Length (a chunked body's end is checked by the HTTP
                    // layer) only the listing can tell a cut body from a whole one. Only a
                    // shortfall is refused: a listed size is the platform's, not the storage's.
                    (None, Some(n)) if written < n => {
                        return Err(Error::Connection {
                            message: format!(
                                "download of {file_id} ended after {written} bytes, without a length, where the \
                                 listing gave {n} bytes"
                            ),
                        });
                    }
                    _ => {}
                }
                if let Sink::File(partial, file) = &mut sink {
                    file.flush().await.map_err(|e| Error::io(&partial.shown, e))?;
                    file.get_mut().sync_all().await.map_err(|e| Error::io(&partial.shown, e))?;
                }
                Ok((sink, written))
            }
        })
        .await;
    let (sink, written) = written?;
    match sink {
        Sink::File(partial, file) => {
            // Renamed while still open, so its lock holds until it has its real name.
            partial.persist(dest).await?;
            drop(file);
        }
        Sink::Memory(bytes) => land(dir, dest.to_path_buf(), bytes, shown).await?,
    }
    progress.set_total(written);
    Ok(written)
}

/// Where a download's bytes go while they arrive.
enum Sink {
    Memory(Vec<u8>),
    File(PartialFile, tokio::io::BufWriter<tokio::fs::File>),
}

impl Sink {
    async fn write(&mut self, chunk: &[u8]) -> Result<(), Error> {
        match self {
            Sink::Memory(bytes) => {
                bytes.extend_from_slice(chunk);
                Ok(())
            }
            Sink::File(partial, file) => file.write_all(chunk).await.map_err(|e| Error::io(&partial.shown, e)),
        }
    }
}

/// The next piece of a download's body, `None` at its end. Silence for `stall` is a timeout and
/// a body that breaks off a connection error, each naming `what` and the bytes it got (`so_far`).
pub(crate) async fn next_piece(
    stream: &mut (impl futures_util::Stream<Item = reqwest::Result<Bytes>> + Unpin),
    stall: std::time::Duration,
    what: &str,
    so_far: u64,
) -> Result<Option<Bytes>, Error> {
    let next = tokio::time::timeout(stall, stream.next())
        .await
        .map_err(|_| Error::Timeout { message: format!("{what} stalled: no data for {}", seconds(stall)) })?;
    next.transpose().map_err(|e| Error::Connection {
        // Without the URL reqwest would name: a presigned one carries its signature.
        message: format!("{what} broke off after {so_far} bytes: {}", error_chain(&e.without_url())),
    })
}

/// Writes `bytes` to a temporary file in `dir`, fsyncs it and renames it to `dest`: atomic, in
/// one blocking task. The temporary file is removed if anything fails. Errors name `shown`.
async fn land(dir: PathBuf, dest: PathBuf, bytes: Vec<u8>, shown: String) -> Result<(), Error> {
    let joined = shown.clone();
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut temp = partial_beside(&dir, &dest, &shown)?;
        // Through the plain `File`: `NamedTempFile`'s own writes wrap errors in a type that
        // hides the OS error code (and with it Python's errno and OSError subclass).
        temp.as_file_mut().write_all(&bytes).map_err(|e| Error::io(&shown, e))?;
        temp.as_file().sync_all().map_err(|e| Error::io(&shown, e))?;
        temp.persist(&dest).map_err(|e| Error::io(&shown, e.error))?;
        Ok(())
    })
    .await
    .map_err(|e| Error::io(joined, std::io::Error::other(e)))?
}

/// The most symbolic links followed from a download's destination (Linux's own limit).
const MAX_LINK_HOPS: usize = 40;

/// `dest` with the links it names followed, as `open()` follows them: a download onto a
/// symbolic link writes the file the link points at (its temporary file in that file's folder,
/// so the rename stays atomic) and leaves the link in place; a dangling link gives the file it
/// would point at. A loop fails as `open()` does (ELOOP).
async fn through_links(dest: &Path) -> Result<PathBuf, Error> {
    let mut path = dest.to_path_buf();
    for _ in 0..MAX_LINK_HOPS {
        match tokio::fs::symlink_metadata(&path).await {
            Ok(meta) if meta.file_type().is_symlink() => {
                let target = tokio::fs::read_link(&path).await.map_err(|e| Error::io(dest.display(), e))?;
                // A relative target is relative to the link's folder; `join` keeps an absolute one.
                path = path.parent().map_or_else(|| target.clone(), |folder| folder.join(&target));
            }
            _ => return Ok(path),
        }
    }
    let looped = match tokio::fs::metadata(dest).await {
        Err(e) => e,
        Ok(_) => std::io::Error::other(format!("more than {MAX_LINK_HOPS} symbolic links")),
    };
    Err(Error::io(dest.display(), looped))
}

/// A temporary file in `dir` for the bytes of `dest`, with the permissions `open()` would give
/// `dest`: those of the file it replaces, else 0666 less the umask. (tempfile's own 0600 would
/// leave every download unreadable to the group that shares its folder, and would narrow the
/// mode of a file it replaces.) Opened by our own `OpenOptions`, not `tempfile_in`, whose errors
/// hide the OS error code behind their path.
///
/// The file is locked (an exclusive OS lock, released when it is closed or its process dies) for
/// as long as it is open, so `remove_dead_partials` can tell a live download's file from one a
/// killed process left behind.
fn partial_beside(dir: &Path, dest: &Path, shown: &str) -> Result<tempfile::NamedTempFile, Error> {
    // A sweep in another download may catch a new file in the moment before its lock (and lock
    // or remove it): then another name is tried.
    for _ in 0..PARTIAL_ATTEMPTS {
        let temp = new_partial(dir, dest, shown)?;
        if temp.as_file().try_lock().is_ok() && still_linked(temp.as_file()) {
            return Ok(temp);
        }
    }
    Err(Error::io(shown, std::io::Error::other("could not lock a temporary file for the download")))
}

/// How many temporary names `partial_beside` tries before giving up.
const PARTIAL_ATTEMPTS: usize = 8;

/// The prefix and suffix of a download's temporary file (hidden, and told apart from the
/// user's files by both). The prefix is reserved: a name a server lists is never written under
/// it (the Python side renames it), or the next sweep would take the file for a dead partial.
pub const PARTIAL_PREFIX: &str = ".sensorium-download-";
const PARTIAL_SUFFIX: &str = ".partial";

/// Whether `file` still has a name (a sweep did not remove it before it was locked).
fn still_linked(file: &std::fs::File) -> bool {
    #[cfg(unix)]
    {
        file.metadata().map(|m| std::os::unix::fs::MetadataExt::nlink(&m) > 0).unwrap_or(false)
    }
    // Elsewhere an open file is not removed under its user (std opens with delete sharing, but
    // the name stays until the last handle closes).
    #[cfg(not(unix))]
    {
        let _ = file;
        true
    }
}

/// Whether this process downloads into `dir` for the first time. The folder is swept for dead
/// partials then only: a batch of thousands of outputs into one folder would otherwise list the
/// folder once per file. A download killed after that sweep leaves its partial to the next
/// process's.
fn first_download_into(dir: &Path) -> bool {
    static SWEPT: parking_lot::Mutex<Option<std::collections::HashSet<PathBuf>>> = parking_lot::Mutex::new(None);
    SWEPT.lock().get_or_insert_with(Default::default).insert(dir.to_path_buf())
}

/// Removes the temporary files of downloads that died without cleaning up (a SIGKILL, a power
/// cut): those in `dir` whose lock can be taken, which no live download holds. A file another
/// process is writing stays locked and is left alone.
fn remove_dead_partials(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !(name.starts_with(PARTIAL_PREFIX) && name.ends_with(PARTIAL_SUFFIX)) {
            continue;
        }
        let path = entry.path();
        let Ok(file) = std::fs::File::open(&path) else { continue };
        if file.try_lock().is_ok() {
            match std::fs::remove_file(&path) {
                Ok(()) => log::debug!("removed {}, left by a download that did not finish", path.display()),
                Err(e) => log::debug!("could not remove {}, left by a download that did not finish: {e}", path.display()),
            }
        }
    }
}

fn new_partial(dir: &Path, dest: &Path, shown: &str) -> Result<tempfile::NamedTempFile, Error> {
    let temp = tempfile::Builder::new()
        .prefix(PARTIAL_PREFIX)
        .suffix(PARTIAL_SUFFIX)
        .make_in(dir, |path| {
            let mut options = std::fs::OpenOptions::new();
            options.read(true).write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o666);
            options.open(path)
        })
        .map_err(|e| Error::io(shown, e))?;
    // Not through a link: a link being replaced (`Links::Replace`) lends its target's mode to
    // nothing. (A followed link is already resolved.)
    #[cfg(unix)]
    if let Ok(replaced) = std::fs::symlink_metadata(dest) {
        if replaced.is_file() {
            temp.as_file().set_permissions(replaced.permissions()).map_err(|e| Error::io(shown, e))?;
        }
    }
    Ok(temp)
}

/// A temporary file that is removed unless persisted. `shown` is the destination as the caller
/// gave it, which errors name.
struct PartialFile {
    path: PathBuf,
    shown: String,
    keep: bool,
}

impl PartialFile {
    /// The temporary file and its handle, which holds its lock: keep it open until `persist`.
    async fn create(dir: &Path, dest: &Path, shown: &str) -> Result<(Self, tokio::fs::File), Error> {
        let named = partial_beside(dir, dest, shown)?;
        let (file, path) = named.keep().map_err(|e| Error::io(shown, e.error))?;
        Ok((PartialFile { path, shown: shown.to_string(), keep: false }, tokio::fs::File::from_std(file)))
    }

    async fn persist(mut self, dest: &Path) -> Result<(), Error> {
        tokio::fs::rename(&self.path, dest).await.map_err(|e| Error::io(&self.shown, e))?;
        self.keep = true;
        Ok(())
    }
}

impl Drop for PartialFile {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upload_types() {
        assert_eq!(upload_type("a.TXT", None, "path").unwrap(), "text/plain");
        let err = upload_type("a.jsonl", None, "path").unwrap_err().to_string();
        assert!(err.contains("direct-to-cloud"), "{err}");
        assert!(upload_type("a.bin", None, "path").is_err());
        assert_eq!(upload_type("a.bin", Some("image/png"), "path").unwrap(), "image/png");
    }

    #[test]
    fn names_sent_in_a_part_header_hold_no_control_characters() {
        assert!(check_sendable("tab\t.txt", "name").is_ok());
        assert!(check_sendable("é 50% #1.txt", "name").is_ok());
        for bad in ["a\r\nb.txt", "a\nb.txt", "a\rb.txt", "a\u{0}b.txt", "a\u{1b}b.txt", "a\u{7f}b.txt", " lead.txt", "trail.txt ", "\tx.txt", "x.txt\u{a0}"] {
            let err = check_sendable(bad, "path").unwrap_err();
            assert!(matches!(&err, Error::InvalidArgument { argument, .. } if argument == "path"), "{bad:?}: {err}");
        }
    }
}
