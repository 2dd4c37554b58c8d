//! `POST /files` and `POST /files/base64`: one multipart field `file`, streamed to a temp file
//! and registered only once complete.

use std::sync::Arc;

use axum::extract::{FromRequest, Multipart, Request, State};
use axum::http::StatusCode;
use axum::Json;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine;

use crate::emulator::api_error::ApiError;
use crate::emulator::auth;
use crate::emulator::state::Shared;
use crate::wire::files::{mime_for_name, FileOpResponse, SIMPLE_UPLOAD_TYPES};

const NDJSON: &str = "application/x-ndjson";

/// Multipart framing (boundaries, part headers) on top of the file itself; a request whose
/// declared length exceeds the limit by more than this is refused before reading.
const MULTIPART_OVERHEAD: u64 = 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Encoding {
    Raw,
    Base64,
}

pub(crate) async fn upload_raw(
    State(shared): State<Arc<Shared>>,
    req: Request,
) -> Result<Json<FileOpResponse>, ApiError> {
    upload(shared, req, Encoding::Raw).await
}

pub(crate) async fn upload_base64(
    State(shared): State<Arc<Shared>>,
    req: Request,
) -> Result<Json<FileOpResponse>, ApiError> {
    upload(shared, req, Encoding::Base64).await
}

fn too_large(max: u64) -> ApiError {
    ApiError::payload_too_large(format!(
        "The file is larger than the simple upload's limit of {max} bytes."
    ))
    .with_suggestion("Use the direct-to-cloud upload (POST /files/uploads/initiate) for large files.")
}

/// Base name of a client-supplied file name (browsers and some clients send paths).
pub(crate) fn base_name(name: &str) -> &str {
    name.rsplit(['/', '\\']).next().unwrap_or(name).trim()
}

/// The stored type: from the extension when known, else the part's content type when the
/// simple upload accepts it.
pub(crate) fn resolve_file_type(name: &str, part_type: Option<&str>) -> Result<String, ApiError> {
    let ndjson = || {
        ApiError::bad_request(
            "invalid_file_type",
            "JSONL/NDJSON files (application/x-ndjson) are not accepted by the simple upload.",
        )
        .with_suggestion("Use the direct-to-cloud upload (POST /files/uploads/initiate), which accepts application/x-ndjson.")
    };
    match mime_for_name(name) {
        Some(NDJSON) => Err(ndjson()),
        Some(t) => Ok(t.to_string()),
        None => {
            let part = part_type
                .map(|t| t.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
                .unwrap_or_default();
            if part == NDJSON {
                Err(ndjson())
            } else if SIMPLE_UPLOAD_TYPES.contains(&part.as_str()) {
                Ok(part)
            } else {
                Err(ApiError::bad_request(
                    "invalid_file_type",
                    format!(
                        "File '{name}' has an unknown extension and content type {part:?}; accepted types are {}.",
                        SIMPLE_UPLOAD_TYPES.join(", ")
                    ),
                ))
            }
        }
    }
}

async fn upload(shared: Arc<Shared>, req: Request, encoding: Encoding) -> Result<Json<FileOpResponse>, ApiError> {
    let org = auth::require_org(&shared, req.headers())?;
    let max = shared.max_upload_bytes;
    // Base64 text is 4/3 of the content plus line breaks; allow twice the content to be safe.
    let raw_limit = match encoding {
        Encoding::Raw => max,
        Encoding::Base64 => max.saturating_mul(2),
    };
    let declared = req
        .headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > raw_limit.saturating_add(MULTIPART_OVERHEAD)) {
        return Err(too_large(max));
    }
    let mut multipart = Multipart::from_request(req, &()).await.map_err(|e| {
        ApiError::invalid_request(format!("Expected a multipart/form-data body with a 'file' field: {e}"))
    })?;
    loop {
        let mut field = match multipart.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => {
                return Err(ApiError::invalid_request("The multipart body has no 'file' field."))
            }
            Err(e) => return Err(ApiError::invalid_request(format!("Malformed multipart body: {e}"))),
        };
        if field.name() != Some("file") {
            continue;
        }
        let file_id = field.file_name().map(base_name).unwrap_or("").to_string();
        if file_id.is_empty() {
            return Err(ApiError::invalid_request("The 'file' part has no filename."));
        }
        let file_type = resolve_file_type(&file_id, field.content_type())?;
        let conflict = || {
            ApiError::new(
                StatusCode::CONFLICT,
                "file_already_exists",
                format!("A file named '{file_id}' already exists in this organization."),
            )
            .with_suggestion("Delete it first or upload under another name.")
        };
        if shared.files.exists(&org, &file_id) {
            // Read to the end first, as the platform behind its buffering proxy does: answered
            // early, the connection closes under a client still sending a large file, which
            // then sees a broken pipe instead of the 409 (up to the size limit; past it the
            // body is not read on).
            drain(&mut field, raw_limit).await;
            drop(field);
            while let Ok(Some(mut rest)) = multipart.next_field().await {
                drain(&mut rest, raw_limit).await;
            }
            return Err(conflict());
        }
        let mut partial = shared
            .files
            .begin()
            .await
            .map_err(|e| ApiError::internal(format!("Could not store the upload: {e}")))?;
        let mut read: u64 = 0;
        let mut decoder = Base64Stream::default();
        loop {
            let chunk = match field.chunk().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => break,
                Err(e) => return Err(ApiError::invalid_request(format!("The upload was interrupted: {e}"))),
            };
            read += chunk.len() as u64;
            if read > raw_limit {
                return Err(too_large(max));
            }
            let content = match encoding {
                Encoding::Raw => chunk.to_vec(),
                Encoding::Base64 => decoder.push(&chunk).map_err(|_| bad_base64())?,
            };
            if partial.written + content.len() as u64 > max {
                return Err(too_large(max));
            }
            partial
                .write(&content)
                .await
                .map_err(|e| ApiError::internal(format!("Could not store the upload: {e}")))?;
        }
        if encoding == Encoding::Base64 {
            let tail = decoder.finish().map_err(|_| bad_base64())?;
            if partial.written + tail.len() as u64 > max {
                return Err(too_large(max));
            }
            partial
                .write(&tail)
                .await
                .map_err(|e| ApiError::internal(format!("Could not store the upload: {e}")))?;
        }
        let stored = shared
            .files
            .register(&org, &file_id, &file_type, partial)
            .await
            .map_err(|e| ApiError::internal(format!("Could not store the upload: {e}")))?
            .map_err(|_| conflict())?;
        return Ok(Json(FileOpResponse {
            is_valid: true,
            file_id: stored.file_id.clone(),
            file_uid: Some(stored.file_uid.clone()),
        }));
    }
}

/// Reads and drops the rest of `field` (at most `limit` bytes); a body that breaks off ends it.
async fn drain(field: &mut axum::extract::multipart::Field<'_>, limit: u64) {
    let mut read: u64 = 0;
    while let Ok(Some(chunk)) = field.chunk().await {
        read += chunk.len() as u64;
        if read > limit {
            return;
        }
    }
}

fn bad_base64() -> ApiError {
    ApiError::invalid_request("The 'file' part of a base64 upload is not valid base64 text.")
}

/// Padding is optional: encoders differ, and the content is unambiguous either way.
pub(crate) const LENIENT_BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Decodes base64 text arriving in arbitrary chunks, ignoring whitespace (line-wrapped
/// encoders), without holding the whole text in memory.
#[derive(Default)]
pub(crate) struct Base64Stream {
    pending: Vec<u8>,
    ended: bool,
}

impl Base64Stream {
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<u8>, ()> {
        let before = self.pending.len();
        self.pending.extend(chunk.iter().filter(|b| !b.is_ascii_whitespace()));
        if self.ended && self.pending.len() > before {
            return Err(()); // text after the padding that ended the data
        }
        let usable = self.pending.len() / 4 * 4;
        if usable == 0 {
            return Ok(Vec::new());
        }
        let decoded = LENIENT_BASE64.decode(&self.pending[..usable]).map_err(|_| ())?;
        self.ended = self.pending[..usable].contains(&b'=');
        self.pending.drain(..usable);
        Ok(decoded)
    }

    pub fn finish(self) -> Result<Vec<u8>, ()> {
        if self.pending.is_empty() {
            return Ok(Vec::new());
        }
        if self.ended {
            return Err(());
        }
        LENIENT_BASE64.decode(&self.pending).map_err(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_in_chunks(text: &str, size: usize) -> Result<Vec<u8>, ()> {
        let mut d = Base64Stream::default();
        let mut out = Vec::new();
        for chunk in text.as_bytes().chunks(size) {
            out.extend(d.push(chunk)?);
        }
        out.extend(d.finish()?);
        Ok(out)
    }

    #[test]
    fn streaming_base64_matches_whole_decode() {
        let data: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        let text = base64::engine::general_purpose::STANDARD.encode(&data);
        let wrapped: String = text.as_bytes().chunks(76).map(|c| String::from_utf8_lossy(c) + "\n").collect();
        for size in [1, 3, 7, 64, 5000] {
            assert_eq!(decode_in_chunks(&wrapped, size).unwrap(), data);
        }
        assert_eq!(decode_in_chunks("aGk", 2).unwrap(), b"hi");
        assert!(decode_in_chunks("not base64!", 4).is_err());
        assert!(decode_in_chunks("aGk=aGk=", 3).is_err());
    }

    #[test]
    fn file_types() {
        assert_eq!(resolve_file_type("a.PNG", None).unwrap(), "image/png");
        assert_eq!(resolve_file_type("a.bin", Some("text/plain; charset=utf-8")).unwrap(), "text/plain");
        assert_eq!(resolve_file_type("a.bin", Some("application/zip")).unwrap_err().code, "invalid_file_type");
        let e = resolve_file_type("a.jsonl", Some("text/plain")).unwrap_err();
        assert_eq!(e.code, "invalid_file_type");
        assert!(e.suggestion.unwrap_or_default().contains("direct-to-cloud") || e.message.contains("direct-to-cloud"));
        assert_eq!(base_name("C:\\dir\\x.txt"), "x.txt");
        assert_eq!(base_name("a/b/c.csv"), "c.csv");
    }
}
