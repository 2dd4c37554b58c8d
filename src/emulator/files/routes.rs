//! Reading and deleting files: listing, one record, storage summary, download, delete.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use serde_json::json;

use super::listing::ListParams;
use crate::emulator::api_error::ApiError;
use crate::emulator::auth;
use crate::emulator::state::Shared;
use crate::wire::files::{FileOpResponse, FileRecord};
use crate::wire::page::CursorPage;

fn file_id_of(path: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    path.map(|Path(id)| id)
        .map_err(|e| ApiError::invalid_request(format!("Bad file id in the path: {e}")))
}

/// The file listing always carries `prev_cursor` (null at the start), unlike other cursor
/// lists, whose shared wire type omits it when absent.
#[derive(Serialize)]
pub(crate) struct FilePage {
    data: Vec<FileRecord>,
    has_more: bool,
    next_cursor: Option<String>,
    prev_cursor: Option<String>,
}

impl From<CursorPage<FileRecord>> for FilePage {
    fn from(p: CursorPage<FileRecord>) -> Self {
        FilePage { data: p.data, has_more: p.has_more, next_cursor: p.next_cursor, prev_cursor: p.prev_cursor }
    }
}

pub(crate) async fn list(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Json<FilePage>, ApiError> {
    let org = auth::require_org(&shared, &headers)?;
    let params = ListParams::parse(query.as_deref().unwrap_or(""), &shared.cursor_secret)?.default_limit(shared.page_size);
    Ok(Json(params.page(shared.files.list(&org), &shared.cursor_secret).into()))
}

pub(crate) async fn metadata(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<FileRecord>, ApiError> {
    let org = auth::require_org(&shared, &headers)?;
    let file_id = file_id_of(path)?;
    let file = shared.files.get(&org, &file_id).ok_or_else(|| ApiError::file_not_found(&file_id))?;
    Ok(Json(file.record()))
}

pub(crate) async fn info(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let org = auth::require_org(&shared, &headers)?;
    let files = shared.files.list(&org);
    let num_bytes: u64 = files.iter().map(|f| f.num_bytes).sum();
    Ok(Json(json!({ "num_files": files.len(), "num_bytes": num_bytes })).into_response())
}

pub(crate) async fn download(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let org = auth::require_org(&shared, &headers)?;
    let file_id = file_id_of(path)?;
    let file = shared.files.get(&org, &file_id).ok_or_else(|| ApiError::file_not_found(&file_id))?;
    // Deleted between lookup and open: the content is gone, as it would be on the platform.
    let handle = tokio::fs::File::open(&file.path)
        .await
        .map_err(|_| ApiError::file_not_found(&file_id))?;
    // 1 MiB reads: the default 4 KiB made serving a GiB cost ~16 s of CPU.
    let body = Body::from_stream(tokio_util::io::ReaderStream::with_capacity(handle, 1024 * 1024));
    let mut response = Response::new(body);
    let h = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&file.file_type) {
        h.insert(header::CONTENT_TYPE, v);
    }
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(file.num_bytes));
    Ok(response)
}

pub(crate) async fn delete(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<FileOpResponse>, ApiError> {
    let org = auth::require_org(&shared, &headers)?;
    let file_id = file_id_of(path)?;
    let file = shared.files.remove(&org, &file_id).ok_or_else(|| ApiError::file_not_found(&file_id))?;
    // An open download keeps reading its descriptor; the name is gone at once.
    let _ = tokio::fs::remove_file(&file.path).await;
    Ok(Json(FileOpResponse {
        is_valid: true,
        file_id: file.file_id.clone(),
        file_uid: Some(file.file_uid.clone()),
    }))
}
