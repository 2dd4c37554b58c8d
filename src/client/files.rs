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
use super::stored_content::{self, Local};
use super::transport::{error_chain, Call, RequestBody, Transport};
use super::upload::{self, DirectUploadOptions, ProgressShare, TransferProgress};
use crate::wire::files::{mime_for_name, FileOpResponse, SIMPLE_UPLOAD_MAX_BYTES, SIMPLE_UPLOAD_TYPES};

/// The largest write batch of a download.
const DOWNLOAD_BUFFER: usize = 4 * 1024 * 1024;

const JSONL_TYPE: &str = "application/x-ndjson";

/// The content type a file is uploaded with: from its extension (as the platform derives it),
/// or the caller's for an unknown extension.
fn upload_type(name: &str, content_type: Option<&str>, argument: &str) -> Result<String, Error> {
    let mime = mime_for_name(name).map(str::to_string).or_else(|| content_type.map(str::to_string));
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
            argument,
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
    let is_jsonl = mime_for_name(name) == Some(JSONL_TYPE);
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
        ..Call::new(Method::POST, transport.config.url("/files"))
    };
    let result = transport.json::<FileOpResponse>(&call).await;
    resolve_lost_response(transport, result, &file_name_of(&call), meta.len(), Local::File(path)).await
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
    let mime = upload_type(name, content_type, "name")?;
    let encoded = base64::engine::general_purpose::STANDARD.encode(data);
    let call = Call {
        body: RequestBody::MultipartBytes {
            field: "file".into(),
            file_name: name.to_string(),
            mime,
            data: Bytes::from(encoded),
        },
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

/// The URL of `{prefix}/{file_id}` with the id percent-encoded as one path segment.
pub(crate) fn file_url(transport: &Transport, prefix: &str, file_id: &str) -> Result<String, Error> {
    check_name(file_id, "file_id")?;
    let mut url = url::Url::parse(&transport.config.url(prefix))
        .map_err(|e| Error::invalid_argument("base_url", e.to_string()))?;
    url.path_segments_mut()
        .map_err(|_| Error::invalid_argument("base_url", "cannot hold a path"))?
        .push(file_id);
    Ok(url.to_string())
}

/// One file's metadata (used to recognise an upload whose answer was lost).
async fn metadata(transport: &Transport, file_id: &str) -> Result<Value, Error> {
    transport.json(&Call::get(file_url(transport, "/files/metadata", file_id)?)).await
}

/// Streams a file to `dest`. Bytes go to a temporary file beside `dest` that is renamed only
/// once the body is complete, so an interrupted download never leaves a truncated file under
/// the real name. Returns the number of bytes written.
pub async fn download(
    transport: &Transport,
    file_id: &str,
    dest: &Path,
    progress: Arc<TransferProgress>,
) -> Result<u64, Error> {
    let call = Call::get(file_url(transport, "/files/download", file_id)?);
    download_call(transport, call, file_id, dest, Arc::new(ProgressShare::new(progress, 0))).await
}

/// Streams the body of `call` (a GET) to `dest` through a temporary file beside it, fsynced and
/// renamed only when complete: the one download path for files, agent results and job outputs.
/// `label` names the download in errors; `progress` is this download's share of the counters.
pub async fn download_call(
    transport: &Transport,
    mut call: Call,
    label: &str,
    dest: &Path,
    progress: Arc<ProgressShare>,
) -> Result<u64, Error> {
    call.streaming = true;
    let file_id = label;
    let dir = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if tokio::fs::metadata(&dir).await.map(|m| !m.is_dir()).unwrap_or(true) {
        return Err(Error::invalid_argument("path", format!("the folder {} does not exist", dir.display())));
    }
    let stall = transport.config.timeouts.read;
    let written = transport
        .execute(&call, |response| {
            let dir = dir.clone();
            let progress = progress.clone();
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
                        let partial = PartialFile::create(&dir, dest).await?;
                        let file = tokio::fs::OpenOptions::new()
                            .write(true)
                            .open(&partial.path)
                            .await
                            .map_err(|e| Error::io(partial.path.display(), e))?;
                        // Each tokio file write is a hop to the blocking pool; writing per
                        // received chunk (~20 KiB) made downloads context-switch-bound.
                        Sink::File(partial, tokio::io::BufWriter::with_capacity(DOWNLOAD_BUFFER, file))
                    }
                };
                let mut stream = response.bytes_stream();
                let mut written: u64 = 0;
                loop {
                    let next = tokio::time::timeout(stall, stream.next()).await.map_err(|_| Error::Timeout {
                        message: format!("download of {file_id} stalled: no data for {}", seconds(stall)),
                    })?;
                    match next {
                        Some(Ok(chunk)) => {
                            sink.write(&chunk).await?;
                            written += chunk.len() as u64;
                            progress.add(chunk.len() as u64);
                        }
                        Some(Err(e)) => {
                            return Err(Error::Connection {
                                message: format!("download of {file_id} broke off after {written} bytes: {}", error_chain(&e)),
                            })
                        }
                        None => break,
                    }
                }
                if let Some(n) = expected {
                    if n != written {
                        return Err(Error::Connection {
                            message: format!("download of {file_id} ended after {written} of {n} bytes"),
                        });
                    }
                }
                if let Sink::File(partial, file) = &mut sink {
                    file.flush().await.map_err(|e| Error::io(partial.path.display(), e))?;
                    file.get_mut().sync_all().await.map_err(|e| Error::io(partial.path.display(), e))?;
                }
                Ok((sink, written))
            }
        })
        .await;
    let (sink, written) = written?;
    match sink {
        Sink::File(partial, file) => {
            drop(file);
            partial.persist(dest).await?;
        }
        Sink::Memory(bytes) => land(dir, dest.to_path_buf(), bytes).await?,
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
            Sink::File(partial, file) => file.write_all(chunk).await.map_err(|e| Error::io(partial.path.display(), e)),
        }
    }
}

/// Writes `bytes` to a temporary file in `dir`, fsyncs it and renames it to `dest`: atomic, in
/// one blocking task. The temporary file is removed if anything fails.
async fn land(dir: PathBuf, dest: PathBuf, bytes: Vec<u8>) -> Result<(), Error> {
    let shown = dest.display().to_string();
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut temp = partial_beside(&dir, &dest)?;
        temp.write_all(&bytes).map_err(|e| Error::io(temp.path().display(), e))?;
        temp.as_file().sync_all().map_err(|e| Error::io(temp.path().display(), e))?;
        temp.persist(&dest).map_err(|e| Error::io(dest.display(), e.error))?;
        Ok(())
    })
    .await
    .map_err(|e| Error::io(shown, std::io::Error::other(e)))?
}

/// A temporary file in `dir` for the bytes of `dest`, with the permissions `open()` would give
/// `dest`: those of the file it replaces, else 0666 less the umask. (tempfile's own 0600 would
/// leave every download unreadable to the group that shares its folder, and would narrow the
/// mode of a file it replaces.)
fn partial_beside(dir: &Path, dest: &Path) -> Result<tempfile::NamedTempFile, Error> {
    let mut builder = tempfile::Builder::new();
    builder.prefix(".sensorium-download-").suffix(".partial");
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
    let temp = builder.tempfile_in(dir).map_err(|e| Error::io(dir.display(), e))?;
    #[cfg(unix)]
    if let Ok(replaced) = std::fs::metadata(dest) {
        if replaced.is_file() {
            temp.as_file().set_permissions(replaced.permissions()).map_err(|e| Error::io(temp.path().display(), e))?;
        }
    }
    Ok(temp)
}

/// A temporary file that is removed unless persisted.
struct PartialFile {
    path: PathBuf,
    keep: bool,
}

impl PartialFile {
    async fn create(dir: &Path, dest: &Path) -> Result<Self, Error> {
        let named = partial_beside(dir, dest)?;
        let (_, path) = named.keep().map_err(|e| Error::io(dir.display(), e.error))?;
        Ok(PartialFile { path, keep: false })
    }

    async fn persist(mut self, dest: &Path) -> Result<(), Error> {
        tokio::fs::rename(&self.path, dest).await.map_err(|e| Error::io(dest.display(), e))?;
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
}
