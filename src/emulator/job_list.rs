//! `GET /jobs` (on `/v0.5` and `/v0.6`): every job of the organization, batch and fine-tuning alike, newest
//! first. `status` matches case-insensitively and takes every status either kind can have
//! (`PAUSED` and `INTERRUPTED` included, as the spec says of both API versions).

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::api_error::ApiError;
use super::auth;
use super::paging::{page, Params};
use super::state::Shared;

/// The fine-tuning statuses of the spec, which include every batch status.
const STATUSES: &[&str] = &["PENDING", "ADMITTED", "RUNNING", "COMPLETED", "FAILED", "PREEMPTED", "CANCELLED", "PAUSED", "INTERRUPTED"];

pub(crate) async fn all_jobs(State(shared): State<Arc<Shared>>, headers: HeaderMap, RawQuery(q): RawQuery) -> Result<Response, ApiError> {
    let org = auth::require_org(&shared, &headers)?;
    let params = Params::parse(q.as_deref());
    let status = params.get("status");
    if let Some(s) = status.filter(|s| !STATUSES.iter().any(|known| known.eq_ignore_ascii_case(s))) {
        return Err(ApiError::invalid_request(format!("Query parameter 'status' is {s:?}; it takes one of {}.", STATUSES.join(", "))));
    }
    let mut jobs = shared.fine_tuning.listed(&org);
    jobs.extend(shared.batch.jobs.lock().iter().filter(|j| j.org == org).map(|j| j.json.clone()));
    // Newest first, by the ids' TypeID bodies (the order the jobs were made, whichever kind):
    // the order in which a cursor whose job has since left the list (deleted, or no longer
    // matching `status`) still marks its place.
    let mut items: Vec<(String, serde_json::Value)> = jobs.into_iter()
        .filter(|j| status.is_none_or(|s| j["status"].as_str().is_some_and(|js| js.eq_ignore_ascii_case(s))))
        .map(|j| (j["id"].as_str().unwrap_or_default().to_string(), j)).collect();
    let body = |id: &str| id.rsplit_once('_').map_or(id, |(_, body)| body).to_string();
    items.sort_by_cached_key(|(id, _)| std::cmp::Reverse(body(id)));
    Ok(Json(page(items, &params, shared.page_size)?).into_response())
}
