//! The batch routes (`/v0.5/batch/...`): jobs, their feeds and moves, the queue and the pipeline
//! registry. Every list answers in the emulator's list style; errors are bare objects (404
//! `NOT_FOUND`), 401 is `{detail}`, as the spec gives for batch.

use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Map, Value};

use super::create;
use super::listing::{styled_page, Entity};
use super::pipelines::{self, PIPELINES};
use super::storage::presign;
use super::store::{BatchStore, JobRec};
use super::table::{self, Move};
use super::work;
use crate::emulator::agents::store::timestamp;
use crate::emulator::api_error::ApiError;
use crate::emulator::auth;
use crate::emulator::paging::Params;
use crate::emulator::state::Shared;

pub(crate) fn router() -> Router<Arc<Shared>> {
    Router::new()
        .route("/jobs", post(create_job).get(list_jobs))
        // Static before the `{id}` capture: `queue` is not a job id.
        .route("/jobs/queue", get(queue))
        .route("/jobs/{id}", get(read).delete(delete))
        .route("/jobs/{id}/retry", post(retry))
        .route("/jobs/{id}/cancel", post(cancel))
        .route("/jobs/{id}/events", get(events))
        .route("/jobs/{id}/inputs", get(inputs))
        .route("/jobs/{id}/outputs", get(outputs))
        .route("/jobs/{id}/progress", get(progress))
        .route("/registry/pipelines", get(list_pipelines))
        .route("/registry/pipelines/{id}", get(pipeline))
        .route("/registry/pipelines/{id}/schema", get(schema))
}

type S = State<Arc<Shared>>;
type Answer = Result<Response, ApiError>;

fn caller(shared: &Shared, headers: &HeaderMap) -> Result<String, ApiError> {
    auth::require_org_detail(shared, headers)
}

fn not_found(what: &str, id: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "NOT_FOUND", format!("{what} '{id}' not found.")).bare()
}

fn with_job<T>(shared: &Shared, org: &str, id: &str, f: impl FnOnce(&mut JobRec) -> Result<T, ApiError>) -> Result<T, ApiError> {
    let mut jobs = shared.batch.jobs.lock();
    let job = jobs.iter_mut().find(|j| j.org == org && j.id == id).ok_or_else(|| not_found("Job", id))?;
    f(job)
}

fn listed(shared: &Shared, params: &Params, items: Vec<(String, Value)>, key: &str, job_id: Option<&str>) -> Answer {
    let answer = styled_page(items, params, shared.page_size, shared.list_style, Entity { key, job_id })?;
    Ok(Json(answer).into_response())
}

fn body_object(raw: &[u8]) -> Result<Map<String, Value>, ApiError> {
    match serde_json::from_slice::<Value>(raw) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(ApiError::invalid_request("The body must be a JSON object.").bare()),
    }
}

async fn create_job(State(shared): S, headers: HeaderMap, raw: axum::body::Bytes) -> Answer {
    let org = caller(&shared, &headers)?;
    let plan = create::check(&shared, &org, &body_object(&raw)?)?;
    let id = BatchStore::new_job_id();
    let json = json!({
        "id": id, "name": plan.name, "pipeline_type": plan.pipeline_type, "pipeline_key": plan.pipeline.key,
        "pipeline_id": plan.pipeline.id, "pipeline_version": plan.version, "status": "PENDING",
        "created_at": timestamp(SystemTime::now()), "started_at": null, "completed_at": null, "failed_at": null,
        "cancelled_at": null, "parameters": plan.parameters, "num_inputs": plan.inputs.len(), "errors": [], "org_id": org,
    });
    let mut job = JobRec { org, id: id.clone(), json: json.clone(), inputs: plan.inputs,
                           events: vec![], progress: vec![], outputs: vec![], attempt: 0, started: None };
    job.event(&shared.batch.event_ids, "INFO", "job.created", format!("Job created with {} inputs", job.inputs.len()), None);
    job.progress("job", "Queued".to_string());
    shared.batch.jobs.lock().push(job);
    work::spawn(&shared, id, 0);
    Ok((StatusCode::CREATED, Json(json)).into_response())
}

async fn list_jobs(State(shared): S, headers: HeaderMap, RawQuery(q): RawQuery) -> Answer {
    let org = caller(&shared, &headers)?;
    let params = Params::parse(q.as_deref());
    let status = params.get("status");
    let items = shared.batch.jobs.lock().iter().rev()
        .filter(|j| j.org == org && status.is_none_or(|s| j.status().eq_ignore_ascii_case(s)))
        .map(|j| (j.id.clone(), j.json.clone())).collect();
    listed(&shared, &params, items, "jobs", None)
}

async fn read(State(shared): S, headers: HeaderMap, Path(id): Path<String>) -> Answer {
    let org = caller(&shared, &headers)?;
    Ok(Json(with_job(&shared, &org, &id, |j| Ok(j.json.clone()))?).into_response())
}

/// A pending or running job must be cancelled first (as agents answer a running instance).
async fn delete(State(shared): S, headers: HeaderMap, Path(id): Path<String>) -> Answer {
    let org = caller(&shared, &headers)?;
    let removed = {
        let mut jobs = shared.batch.jobs.lock();
        let at = jobs.iter().position(|j| j.org == org && j.id == id).ok_or_else(|| not_found("Job", &id))?;
        if !table::TERMINAL.contains(&jobs[at].status()) {
            return Err(ApiError::new(StatusCode::CONFLICT, "conflict", format!("Job '{id}' is {}; cancel it before deleting it.", jobs[at].status())).bare());
        }
        jobs.remove(at)
    };
    work::remove_output_files(&removed.outputs);
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn cancel(State(shared): S, headers: HeaderMap, Path(id): Path<String>) -> Answer {
    let org = caller(&shared, &headers)?;
    let answer = with_job(&shared, &org, &id, |j| {
        let to = table::apply(&id, j.status(), Move::Cancel)?;
        j.set_status(to, Some("cancelled_at"));
        for input in j.inputs.iter_mut().filter(|i| i.status == "PENDING") {
            input.status = "CANCELLED";
        }
        j.event(&shared.batch.event_ids, "INFO", "job.cancelled", "Job cancelled".to_string(), None);
        j.progress("job", "Cancelled".to_string());
        Ok(json!({"id": j.id, "status": to, "cancelled_at": j.json["cancelled_at"]}))
    })?;
    Ok(Json(answer).into_response())
}

async fn retry(State(shared): S, headers: HeaderMap, Path(id): Path<String>) -> Answer {
    let org = caller(&shared, &headers)?;
    let (job, attempt, stale) = with_job(&shared, &org, &id, |j| {
        let to = table::apply(&id, j.status(), Move::Retry)?;
        j.set_status(to, None);
        for field in ["started_at", "completed_at", "failed_at", "cancelled_at"] {
            j.json[field] = Value::Null;
        }
        j.json["errors"] = json!([]);
        j.attempt += 1;
        j.started = None;
        for input in &mut j.inputs {
            input.status = "PENDING";
        }
        let stale = std::mem::take(&mut j.outputs);
        j.event(&shared.batch.event_ids, "INFO", "job.retried", format!("Job retried (attempt {})", j.attempt + 1), None);
        j.progress("job", "Queued again".to_string());
        Ok((j.json.clone(), j.attempt, stale))
    })?;
    work::remove_output_files(&stale);
    work::spawn(&shared, id, attempt);
    Ok(Json(job).into_response())
}

/// Global queue depths by pipeline type (every organization's jobs, as the platform's queue is
/// shared).
async fn queue(State(shared): S, headers: HeaderMap) -> Answer {
    caller(&shared, &headers)?;
    let mut depths = Map::new();
    for job in shared.batch.jobs.lock().iter() {
        let kind = job.json["pipeline_type"].as_str().unwrap_or("batch").to_string();
        let entry = depths.entry(kind).or_insert_with(|| json!({"pending": 0, "running": 0}));
        for (status, field) in [("PENDING", "pending"), ("RUNNING", "running")] {
            if job.status() == status {
                entry[field] = json!(entry[field].as_u64().unwrap_or(0) + 1);
            }
        }
    }
    depths.entry("batch").or_insert_with(|| json!({"pending": 0, "running": 0}));
    Ok(Json(json!({"queues": depths})).into_response())
}

async fn events(State(shared): S, headers: HeaderMap, Path(id): Path<String>, RawQuery(q): RawQuery) -> Answer {
    let org = caller(&shared, &headers)?;
    let params = Params::parse(q.as_deref());
    let rows = with_job(&shared, &org, &id, |j| Ok(j.events.clone()))?;
    let is = |row: &Value, field: &str| params.get(field).is_none_or(|want| row.get(field).and_then(Value::as_str) == Some(want));
    let items = rows.into_iter().filter(|r| is(r, "level") && is(r, "event_type") && is(r, "input_id"))
        .map(|r| (r["id"].to_string(), r)).collect();
    listed(&shared, &params, items, "events", Some(&id))
}

async fn inputs(State(shared): S, headers: HeaderMap, Path(id): Path<String>, RawQuery(q): RawQuery) -> Answer {
    let org = caller(&shared, &headers)?;
    let params = Params::parse(q.as_deref());
    let (port, status, search) = (params.get("port"), params.get("status"), params.get("search").map(str::to_lowercase));
    let items = with_job(&shared, &org, &id, |j| Ok(j.inputs.iter()
        .filter(|i| port.is_none_or(|p| i.port == p) && status.is_none_or(|s| i.status.eq_ignore_ascii_case(s))
                    && search.as_deref().is_none_or(|s| i.matches(s)))
        .map(|i| (i.id.clone(), i.json())).collect()))?;
    listed(&shared, &params, items, "inputs", Some(&id))
}

/// Every listing signs fresh URLs, so a caller whose URLs expired lists again.
async fn outputs(State(shared): S, headers: HeaderMap, Path(id): Path<String>, RawQuery(q): RawQuery) -> Answer {
    let org = caller(&shared, &headers)?;
    let params = Params::parse(q.as_deref());
    let outputs = with_job(&shared, &org, &id, |j| Ok(j.outputs.clone()))?;
    let items = outputs.iter().map(|o| {
        let (reference, expires_at) = presign(&shared, o);
        (o.id.clone(), json!({"id": o.id, "input_id": o.input_id, "created_at": timestamp(o.created),
                              "data": {"ref": reference, "filename": o.filename, "num_bytes": o.num_bytes}, "expires_at": expires_at}))
    }).collect();
    listed(&shared, &params, items, "outputs", Some(&id))
}

async fn progress(State(shared): S, headers: HeaderMap, Path(id): Path<String>) -> Answer {
    let org = caller(&shared, &headers)?;
    let entries = with_job(&shared, &org, &id, |j| Ok(j.progress.clone()))?;
    Ok(Json(json!({"job_id": id, "entries": entries})).into_response())
}

async fn list_pipelines(State(shared): S, headers: HeaderMap, RawQuery(q): RawQuery) -> Answer {
    caller(&shared, &headers)?;
    let params = Params::parse(q.as_deref());
    let items = PIPELINES.iter().map(|p| (p.id.to_string(), p.record())).collect();
    listed(&shared, &params, items, "pipelines", None)
}

async fn pipeline(State(shared): S, headers: HeaderMap, Path(id): Path<String>) -> Answer {
    caller(&shared, &headers)?;
    let p = pipelines::find(&id).ok_or_else(|| not_found("Pipeline", &id))?;
    Ok(Json(p.record()).into_response())
}

async fn schema(State(shared): S, headers: HeaderMap, Path(id): Path<String>) -> Answer {
    caller(&shared, &headers)?;
    let p = pipelines::find(&id).ok_or_else(|| not_found("Pipeline", &id))?;
    Ok(Json(p.schema()).into_response())
}
