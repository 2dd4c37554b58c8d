//! The route table: the platform surfaces under `/v0.5` (fine-tuning and the job list under
//! `/v0.6`), the control surface under `/_emulator`, and spec-shaped answers for anything else.

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::{Method, StatusCode, Uri};
use axum::routing::{delete, get, post, put};
use axum::{Json, Router};
use serde_json::{json, Value};

use super::api_error::ApiError;
use super::files::direct::{routes as direct, storage};
use super::files::{routes as files, upload};
use super::state::Shared;
use super::{agents, batch, control, fine_tuning, job_list, lens, models, query};

pub const API_PREFIX: &str = "/v0.5";

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    let api = Router::new()
        .route("/query", post(query::handler::query))
        .route("/files", post(upload::upload_raw))
        .route("/files/base64", post(upload::upload_base64))
        .route("/files/metadata", get(files::list))
        .route("/files/metadata/{file_id}", get(files::metadata))
        .route("/files/info", get(files::info))
        .route("/files/download/{file_id}", get(files::download))
        .route("/files/delete/{file_id}", delete(files::delete))
        .route("/files/uploads/initiate", post(direct::initiate))
        .route("/files/uploads/{upload_id}/parts/checkpoint", post(direct::checkpoint))
        .route("/files/uploads/{upload_id}/parts/urls", post(direct::part_urls))
        .route("/files/uploads/{upload_id}/complete", post(direct::complete))
        .route("/files/uploads/{upload_id}/abort", post(direct::abort))
        .route("/models", get(models::list))
        .nest("/agents", agents::routes::router())
        .nest("/batch", batch::routes::router())
        .route("/jobs", get(job_list::all_jobs))
        .nest("/lens", lens::routes::router())
        // Uploads and /query enforce their own limits with the spec's error shapes.
        .layer(DefaultBodyLimit::disable());
    Router::new()
        .route("/", get(about))
        .nest(API_PREFIX, api)
        // The spec's index has `GET /jobs` in both API versions.
        .nest("/v0.6", fine_tuning::router().route("/jobs", get(job_list::all_jobs)))
        // Some deployments mount agents without the version path.
        .nest("/agents", agents::routes::router())
        // Part URLs: the emulator is also the object store the platform presigns URLs for.
        .route(
            "/_storage/{upload_id}/{part_number}",
            put(storage::put_part).layer(DefaultBodyLimit::disable()),
        )
        // Batch output URLs: presigned, fetched without the platform's Authorization header.
        .route("/_storage/batch/{output_id}/{filename}", get(batch::storage::get_output))
        .nest("/_emulator", control::router())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(shared)
}

/// Says plainly what this server is, so nobody mistakes it for the hosted service.
async fn about() -> Json<Value> {
    Json(json!({
        "service": "sensorium emulator",
        "note": "A local test double of the platform's HTTP API; it is not the hosted service.",
        "api": API_PREFIX,
    }))
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("The emulator does not implement {}.", uri.path()),
    )
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{method} is not allowed on {}.", uri.path()),
    )
}
