//! The platform side of the direct upload: `POST /files/uploads/initiate` and
//! `/files/uploads/{upload_id}/parts/checkpoint`, `/parts/urls`, `/complete`, `/abort`.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::Json;
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};

use super::registry::{name_taken, NewUpload, Started};
use super::storage::{now_unix, part_url};
use crate::emulator::api_error::ApiError;
use crate::emulator::auth;
use crate::emulator::files::store::{iso8601, STATUS_REGISTERED};
use crate::emulator::files::upload::base_name;
use crate::emulator::state::Shared;
use crate::wire::files::{mime_for_name, SIMPLE_UPLOAD_TYPES};
use crate::wire::uploads::{
    CompleteResponse, InitiateRequest, InitiateResponse, PartTarget, PartUrl, PartUrlsRequest, PartUrlsResponse,
    PartsRequest,
};

/// The spec's ceiling of a direct upload: 250 GB (decimal, as the spec writes sizes).
pub(crate) const MAX_DIRECT_UPLOAD_BYTES: u64 = 250_000_000_000;

/// Types `initiate` accepts beyond the simple upload's: JSONL (the notes), and generic bytes,
/// which clients send for files with an unknown extension.
const EXTRA_TYPES: &[&str] = &["application/x-ndjson", "application/octet-stream"];

fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid_request(format!("The body does not have the expected shape: {e}")))
}

fn upload_id_of(path: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    path.map(|Path(id)| id).map_err(|e| ApiError::invalid_request(format!("Bad upload id in the path: {e}")))
}

/// The MIME type without parameters, lowercased, when `initiate` accepts it.
fn accepted_type(file_type: &str) -> Result<String, ApiError> {
    let t = file_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    if SIMPLE_UPLOAD_TYPES.contains(&t.as_str()) || EXTRA_TYPES.contains(&t.as_str()) {
        return Ok(t);
    }
    Err(ApiError::bad_request(
        "invalid_file_type",
        format!(
            "file_type {file_type:?} is not accepted; accepted types are {}, {}.",
            SIMPLE_UPLOAD_TYPES.join(", "),
            EXTRA_TYPES.join(", ")
        ),
    ))
}

/// Part URLs share one expiry per answer, which `expires_at` reports.
fn url_expiry(shared: &Shared) -> u64 {
    now_unix().saturating_add(shared.upload_url_ttl.as_secs())
}

pub(crate) async fn initiate(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<InitiateResponse>, ApiError> {
    let org = auth::require_org(&shared, &headers)?;
    // serde's "invalid value: integer `-1`, expected u64" names neither the field nor the rule.
    if let Some(n) = serde_json::from_slice::<Value>(&body).ok().and_then(|v| v.get("num_bytes").cloned()) {
        if n.as_u64().is_none() {
            return Err(ApiError::invalid_request(format!(
                "num_bytes must be the file's size in bytes, a whole number from 0; got {n}."
            )));
        }
    }
    let req: InitiateRequest = parse(&body)?;
    let filename = base_name(&req.filename).to_string();
    if filename.is_empty() {
        return Err(ApiError::invalid_request("filename must not be empty."));
    }
    if req.num_bytes > MAX_DIRECT_UPLOAD_BYTES {
        return Err(ApiError::payload_too_large(format!(
            "num_bytes {} is over the direct upload's limit of {MAX_DIRECT_UPLOAD_BYTES} bytes (250 GB).",
            req.num_bytes
        )));
    }
    let requested_type = accepted_type(&req.file_type)?;
    // As on every upload path, the extension decides the stored type when it is known.
    let file_type = mime_for_name(&filename).map_or_else(|| requested_type.clone(), str::to_string);
    if shared.files.exists(&org, &filename) {
        return Err(name_taken(&filename));
    }
    let new = NewUpload {
        org: &org,
        filename: &filename,
        requested_type: &requested_type,
        file_type: &file_type,
        num_bytes: req.num_bytes,
    };
    let resumed = if req.resume_if_started == Some(true) { shared.uploads.resumable(&new) } else { None };
    let is_resume = resumed.is_some();
    let started: Started = match resumed {
        Some(s) => s,
        None => shared
            .uploads
            .start(&new, shared.upload_part_size)
            .await
            .map_err(|e| ApiError::internal(format!("Could not prepare the upload: {e}")))?,
    };
    let expires = url_expiry(&shared);
    let layout = started.layout;
    let parts = started
        .to_send
        .iter()
        .filter_map(|&n| {
            let (offset, length) = layout.range(n)?;
            Some(PartTarget {
                part_number: n,
                url: part_url(&shared, &started.id, n, expires),
                offset: Some(offset),
                length: Some(length),
            })
        })
        .collect();
    Ok(Json(InitiateResponse {
        upload_id: started.id,
        file_uid: Some(started.file_uid),
        strategy: Some(layout.strategy().to_string()),
        num_parts: Some(u64::from(layout.num_parts)),
        part_size: Some(layout.part_size),
        parts,
        expires_at: Some(Value::from(iso8601(UNIX_EPOCH + Duration::from_secs(expires)))),
        is_resume: Some(is_resume),
        total_bytes: Some(layout.num_bytes),
    }))
}

pub(crate) async fn checkpoint(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let org = auth::require_org(&shared, &headers)?;
    let upload_id = upload_id_of(path)?;
    let req: PartsRequest = parse(&body)?;
    let checkpointed = shared.uploads.checkpoint(&org, &upload_id, &req.parts)?;
    Ok(Json(json!({ "upload_id": upload_id, "checkpointed": checkpointed })))
}

pub(crate) async fn part_urls(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    body: Bytes,
) -> Result<Json<PartUrlsResponse>, ApiError> {
    let org = auth::require_org(&shared, &headers)?;
    let upload_id = upload_id_of(path)?;
    let req: PartUrlsRequest = parse(&body)?;
    shared.uploads.check_part_numbers(&org, &upload_id, &req.part_numbers)?;
    let expires = url_expiry(&shared);
    let parts = req
        .part_numbers
        .iter()
        .map(|&n| PartUrl { part_number: n, url: part_url(&shared, &upload_id, n, expires) })
        .collect();
    Ok(Json(PartUrlsResponse { parts }))
}

pub(crate) async fn complete(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    body: Bytes,
) -> Result<Json<CompleteResponse>, ApiError> {
    let org = auth::require_org(&shared, &headers)?;
    let upload_id = upload_id_of(path)?;
    let req: PartsRequest = parse(&body)?;
    let stored = shared.uploads.complete(&org, &upload_id, &req.parts, &shared.files)?;
    let mut extra = Map::new();
    // The platform's attributes (dimensions and such) are not shown; none are derived here.
    extra.insert("file_attributes".into(), json!({}));
    Ok(Json(CompleteResponse {
        file_uid: Some(stored.file_uid.clone()),
        file_name: Some(stored.file_id.clone()),
        file_status: Some(STATUS_REGISTERED.to_string()),
        num_bytes: Some(stored.num_bytes),
        extra,
    }))
}

/// The body, if any, is ignored: the client sends none.
pub(crate) async fn abort(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let org = auth::require_org(&shared, &headers)?;
    let upload_id = upload_id_of(path)?;
    shared.uploads.abort(&org, &upload_id)?;
    Ok(Json(json!({ "upload_id": upload_id, "status": "aborted" })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_types() {
        assert_eq!(accepted_type("text/CSV; charset=utf-8").unwrap(), "text/csv");
        assert_eq!(accepted_type("application/x-ndjson").unwrap(), "application/x-ndjson");
        assert_eq!(accepted_type("application/octet-stream").unwrap(), "application/octet-stream");
        assert_eq!(accepted_type("application/zip").unwrap_err().code, "invalid_file_type");
    }
}
