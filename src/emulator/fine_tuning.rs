//! Fine-tuning on `/v0.6`: jobs at the detailed paths (`/fine_tuning/jobs/...`) and at the
//! index's hyphenated names (`/fine-tuning/create-job`, ...), the job state table as data, and
//! the job kind the shared executor runs (`PENDING` -> `ADMITTED` -> `RUNNING` -> `COMPLETED`,
//! writing events, logs, checkpoints and a falling loss). Errors are bare objects, as the spec
//! says of fine-tuning.
//!
//! Choices where the spec is silent: a refused move answers 409 `invalid_state_transition`;
//! the hyphenated index takes `job_id` as a query parameter (reads) or in the JSON body (moves);
//! metrics are `{data: [{step, loss, accuracy}]}`.

use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use parking_lot::Mutex;
use serde_json::{json, Map, Value};

use super::agents::store::type_id;
use super::api_error::ApiError;
use super::auth;
use super::jobs::{Control, Failure, Job};
use super::paging::{page, Params};
use super::state::Shared;

/// Base models the platform tunes (the spec: `newton`, the reasoning model; `omega`, the
/// encoder) and the methods each takes.
const MODELS: &[(&str, &[&str], &str)] = &[("newton", &["lora"], "plain"), ("omega", &["head", "knn"], "n_shot")];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Move {
    Admit,
    Start,
    Complete,
    Fail,
    Pause,
    Resume,
    Cancel,
}

/// `(from, move) -> to`. Cancel from every non-final state (the spec: "a cancellable state");
/// pause only while running ("a graceful, resumable stop"), resume only from paused.
const TABLE: &[(&str, Move, &str)] = &[
    ("PENDING", Move::Admit, "ADMITTED"),
    ("ADMITTED", Move::Start, "RUNNING"),
    ("RUNNING", Move::Complete, "COMPLETED"),
    ("RUNNING", Move::Fail, "FAILED"),
    ("RUNNING", Move::Pause, "PAUSED"),
    ("PAUSED", Move::Resume, "RUNNING"),
    ("PENDING", Move::Cancel, "CANCELLED"),
    ("ADMITTED", Move::Cancel, "CANCELLED"),
    ("RUNNING", Move::Cancel, "CANCELLED"),
    ("PAUSED", Move::Cancel, "CANCELLED"),
];

fn transition(from: &str, action: Move) -> Option<&'static str> {
    TABLE.iter().find(|(f, m, _)| *f == from && *m == action).map(|(_, _, to)| *to)
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

struct JobRec {
    org: String,
    json: Value,
    /// `(label, file id)` of the n-shot training files: a checkpoint's classes and examples when
    /// a batch job uses it.
    examples: Vec<(String, String)>,
    events: Vec<Value>,
    checkpoints: Vec<Value>,
    metrics: Vec<Value>,
}

impl JobRec {
    fn status(&self) -> String {
        self.json["status"].as_str().unwrap_or("").to_string()
    }

    fn event(&mut self, level: &str, kind: &str, message: String, index: Option<u64>) {
        let n = self.events.len() + 1;
        self.events.push(json!({"id": format!("ftevt_{n:06}"), "created_at": unix_now(), "level": level, "type": kind,
                                "index": index, "message": message}));
    }

    /// Applies `action` if the table allows it.
    fn apply(&mut self, action: Move) -> Result<&'static str, ApiError> {
        let from = self.status();
        let to = transition(&from, action).ok_or_else(|| {
            ApiError::new(StatusCode::CONFLICT, "invalid_state_transition", format!("A job that is {from} cannot be moved that way."))
                .bare()
        })?;
        self.json["status"] = json!(to);
        Ok(to)
    }
}

#[derive(Default)]
pub(crate) struct FineTuningStore {
    jobs: Mutex<Vec<JobRec>>,
}

/// What a batch job needs of the training behind a checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Training {
    /// `method.<head|knn>.reader.window_size` as an integer; `None` for `auto` (the reader's
    /// default window).
    pub window_size: Option<u64>,
    /// The classes of the n-shot training files, in order, without repeats.
    pub labels: Vec<String>,
    /// `(class, file id)` of each n-shot training file: what the stand-in head "learned", so a
    /// batch job fed the checkpoint labels windows by their nearest training example.
    pub examples: Vec<(String, String)>,
}

impl FineTuningStore {
    /// The training of checkpoint `checkpoint_id` of `org`; `None` when the organization has no
    /// such checkpoint.
    pub fn checkpoint_training(&self, org: &str, checkpoint_id: &str) -> Option<Training> {
        let jobs = self.jobs.lock();
        let job = jobs.iter().find(|j| j.org == org && j.checkpoints.iter().any(|c| c["id"] == json!(checkpoint_id)))?;
        let method = &job.json["method"];
        let reader = method.get("type").and_then(Value::as_str).map(|kind| &method[kind]["reader"]);
        let window_size = reader.and_then(|r| r.get("window_size")).and_then(|w| match w {
            Value::String(s) => s.parse::<u64>().ok(),
            other => other.as_u64(),
        });
        let mut labels: Vec<String> = Vec::new();
        for (label, _) in &job.examples {
            if !labels.contains(label) {
                labels.push(label.clone());
            }
        }
        Some(Training { window_size, labels, examples: job.examples.clone() })
    }

    /// Every job of `org` with its creation time, for `GET /jobs`.
    pub fn listed(&self, org: &str) -> Vec<Value> {
        self.jobs.lock().iter().filter(|j| j.org == org).map(|j| j.json.clone()).collect()
    }
}

pub(crate) fn router() -> Router<Arc<Shared>> {
    Router::new()
        .route("/fine_tuning/jobs", post(create).get(list))
        .route("/fine_tuning/jobs/{id}", get(read))
        .route("/fine_tuning/jobs/{id}/cancel", post(cancel))
        .route("/fine_tuning/jobs/{id}/pause", post(pause))
        .route("/fine_tuning/jobs/{id}/resume", post(resume))
        .route("/fine_tuning/jobs/{id}/checkpoints", get(checkpoints))
        .route("/fine_tuning/jobs/{id}/events", get(events))
        .route("/fine_tuning/jobs/{id}/logs", get(logs))
        .route("/fine_tuning/jobs/{id}/metrics", get(metrics))
        .route("/fine_tuning/checkpoint_options", get(checkpoint_options))
        // The index's names for the same operations.
        .route("/fine-tuning/create-job", post(create))
        .route("/fine-tuning/list-jobs", get(list))
        .route("/fine-tuning/get-job", get(index_read))
        .route("/fine-tuning/cancel-job", post(index_cancel))
        .route("/fine-tuning/pause-job", post(index_pause))
        .route("/fine-tuning/resume-job", post(index_resume))
        .route("/fine-tuning/list-job-checkpoints", get(index_checkpoints))
        .route("/fine-tuning/list-job-events", get(index_events))
        .route("/fine-tuning/list-job-logs", get(index_logs))
        .route("/fine-tuning/list-job-metrics", get(index_metrics))
        .route("/fine-tuning/list-checkpoint-options", get(checkpoint_options))
}

type S = State<Arc<Shared>>;
type Id = Path<String>;

async fn cancel(s: S, h: HeaderMap, p: Id) -> Answer { moved(s, h, p, Move::Cancel).await }
async fn pause(s: S, h: HeaderMap, p: Id) -> Answer { moved(s, h, p, Move::Pause).await }
async fn resume(s: S, h: HeaderMap, p: Id) -> Answer { moved(s, h, p, Move::Resume).await }
async fn checkpoints(s: S, h: HeaderMap, p: Id, q: RawQuery) -> Answer { feed(s, h, p, q, Feed::Checkpoints).await }
async fn events(s: S, h: HeaderMap, p: Id, q: RawQuery) -> Answer { feed(s, h, p, q, Feed::Events).await }
async fn logs(s: S, h: HeaderMap, p: Id, q: RawQuery) -> Answer { feed(s, h, p, q, Feed::Logs).await }
async fn metrics(s: S, h: HeaderMap, p: Id, q: RawQuery) -> Answer { feed(s, h, p, q, Feed::Metrics).await }
async fn index_read(s: S, h: HeaderMap, q: RawQuery) -> Answer { read(s, h, Path(job_id_param(&q)?)).await }
async fn index_cancel(s: S, h: HeaderMap, q: RawQuery, b: axum::body::Bytes) -> Answer { index_move(s, h, q, b, Move::Cancel).await }
async fn index_pause(s: S, h: HeaderMap, q: RawQuery, b: axum::body::Bytes) -> Answer { index_move(s, h, q, b, Move::Pause).await }
async fn index_resume(s: S, h: HeaderMap, q: RawQuery, b: axum::body::Bytes) -> Answer { index_move(s, h, q, b, Move::Resume).await }
async fn index_checkpoints(s: S, h: HeaderMap, q: RawQuery) -> Answer { index_feed(s, h, q, Feed::Checkpoints).await }
async fn index_events(s: S, h: HeaderMap, q: RawQuery) -> Answer { index_feed(s, h, q, Feed::Events).await }
async fn index_logs(s: S, h: HeaderMap, q: RawQuery) -> Answer { index_feed(s, h, q, Feed::Logs).await }
async fn index_metrics(s: S, h: HeaderMap, q: RawQuery) -> Answer { index_feed(s, h, q, Feed::Metrics).await }

type Answer = Result<Response, ApiError>;

fn caller(shared: &Shared, headers: &HeaderMap) -> Result<String, ApiError> {
    auth::org_of(shared, headers).ok_or_else(|| ApiError::unauthorized_envelope().bare())
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::invalid_request(message).bare()
}

fn not_found(id: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("Fine-tuning job {id:?} not found.")).bare()
}

fn job_id_param(q: &RawQuery) -> Result<String, ApiError> {
    Params::parse(q.0.as_deref()).get("job_id").map(str::to_string).ok_or_else(|| invalid("Query parameter 'job_id' is required."))
}

/// Checks a create body: model (501 when not tunable), name, method and files that fit the model.
fn check(body: &Map<String, Value>) -> Result<(), ApiError> {
    let model = body.get("model").and_then(Value::as_str).ok_or_else(|| invalid("Field 'model' is required."))?;
    let Some((_, methods, file_type)) = MODELS.iter().find(|(m, _, _)| *m == model.to_ascii_lowercase()) else {
        return Err(ApiError::new(StatusCode::NOT_IMPLEMENTED, "model_not_supported",
                                  format!("Model {model:?} cannot be fine-tuned; use newton or omega.")).bare());
    };
    if body.get("name").and_then(Value::as_str).is_none_or(str::is_empty) {
        return Err(invalid("Field 'name' is required."));
    }
    let kind = body.get("method").and_then(|m| m.get("type")).and_then(Value::as_str).unwrap_or("");
    if !methods.contains(&kind) {
        return Err(invalid(format!("Model {model} is tuned with method {}, not {kind:?}.", methods.join(" or "))));
    }
    check_method(kind, &body["method"])?;
    for field in ["training_files", "validation_files"] {
        let files = match body.get(field) {
            Some(Value::Array(items)) => items.clone(),
            None | Some(Value::Null) if field == "validation_files" => Vec::new(),
            _ => return Err(invalid(format!("Field '{field}' must be a list of files."))),
        };
        if field == "training_files" && files.is_empty() {
            return Err(invalid("training_files needs at least one file."));
        }
        for file in &files {
            if file.get("type").and_then(Value::as_str) != Some(file_type) || !file.get("file_id").is_some_and(Value::is_string) {
                return Err(invalid(format!("Each of {field} must be {{type: {file_type}, file_id, ...}} for {model}.")));
            }
            if *file_type == "n_shot" && !file.get("label").is_some_and(Value::is_string) {
                return Err(invalid(format!("An n_shot file of {field} needs its label.")));
            }
        }
    }
    Ok(())
}

/// The settings of a method, as the spec's method shapes give them: `{type, <type>: {hyperparameters,
/// reader}}`, each part optional (every setting defaults to `auto`), each setting `auto` or a value
/// of its type. Counts are whole numbers of at least 1; a name the table does not give is left to
/// the trainer.
fn check_method(kind: &str, method: &Value) -> Result<(), ApiError> {
    let settings = match method.get(kind) {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Object(settings)) => settings,
        Some(_) => return Err(invalid(format!("Field 'method.{kind}' must be an object."))),
    };
    let part = |name: &str| match settings.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(part)) => Ok(Some(part)),
        Some(_) => Err(invalid(format!("Field 'method.{kind}.{name}' must be an object."))),
    };
    let auto = |v: &Value| v.as_str() == Some("auto");
    let count = |v: &Value| auto(v) || v.as_u64().is_some_and(|n| n >= 1);
    let positive = |v: &Value| auto(v) || v.as_f64().is_some_and(|x| x > 0.0);
    let named = |v: &Value| v.as_str().is_some_and(|s| !s.is_empty());
    let switch = |v: &Value| auto(v) || v.is_boolean();
    let columns = |v: &Value| auto(v) || v.as_array().is_some_and(|c| !c.is_empty() && c.iter().all(named));
    type Rule<'a> = (&'a str, &'a dyn Fn(&Value) -> bool, &'a str);
    let hyperparameters: &[Rule] = &[
        ("batch_size", &count, "a whole number of at least 1 or \"auto\""),
        ("n_epochs", &count, "a whole number of at least 1 or \"auto\""),
        ("learning_rate_multiplier", &positive, "a number above 0 or \"auto\""),
        ("n_neighbors", &count, "a whole number of at least 1 or \"auto\""),
        ("metric", &named, "a name or \"auto\""),
        ("weights", &named, "a name or \"auto\""),
        ("normalize_embeddings", &switch, "true, false or \"auto\""),
    ];
    let reader: &[Rule] = &[
        ("data_columns", &columns, "a list of CSV column names or \"auto\""),
        ("step_size", &count, "a whole number of at least 1 or \"auto\""),
        ("window_size", &count, "a whole number of at least 1 or \"auto\""),
    ];
    for (name, rules) in [("hyperparameters", hyperparameters), ("reader", reader)] {
        let Some(given) = part(name)? else { continue };
        for (setting, valid, what) in rules {
            if let Some(value) = given.get(*setting).filter(|v| !valid(v)) {
                return Err(invalid(format!("Field 'method.{kind}.{name}.{setting}' must be {what}, got {value}.")));
            }
        }
    }
    Ok(())
}

/// The optional fields' types and what the body refers to: `seed` an integer, `suffix` and
/// `checkpoint_id` strings (kept as sent, never swapped for a default), every file uploaded to the
/// organization, the checkpoint one of its own. A typo'd id is refused here, as batch create
/// refuses it, rather than training on nothing.
fn check_references(shared: &Shared, org: &str, body: &Map<String, Value>) -> Result<(), ApiError> {
    let given = |field: &str| body.get(field).filter(|v| !v.is_null());
    if given("seed").is_some_and(|v| !(v.is_i64() || v.is_u64())) {
        return Err(invalid("Field 'seed' must be an integer."));
    }
    for field in ["suffix", "checkpoint_id"] {
        if given(field).is_some_and(|v| !v.is_string()) {
            return Err(invalid(format!("Field '{field}' must be a string.")));
        }
    }
    for field in ["training_files", "validation_files"] {
        let ids = given(field).and_then(Value::as_array).into_iter().flatten().filter_map(|f| f.get("file_id")?.as_str());
        for file_id in ids {
            if shared.files.get(org, file_id).is_none() {
                return Err(invalid(format!("File '{file_id}' of {field} was not found in this organization."))
                    .with_suggestion("Upload it first; files are named by their file_id."));
            }
        }
    }
    if let Some(checkpoint) = given("checkpoint_id").and_then(Value::as_str) {
        if shared.fine_tuning.checkpoint_training(org, checkpoint).is_none() {
            return Err(invalid(format!("Checkpoint '{checkpoint}' was not found in this organization.")));
        }
    }
    Ok(())
}

fn object(raw: &[u8]) -> Result<Map<String, Value>, ApiError> {
    match serde_json::from_slice::<Value>(raw) {
        Ok(Value::Object(map)) => Ok(map),
        _ if raw.iter().all(u8::is_ascii_whitespace) => Ok(Map::new()),
        _ => Err(invalid("The body must be a JSON object.")),
    }
}

async fn create(State(shared): State<Arc<Shared>>, headers: HeaderMap, raw: axum::body::Bytes) -> Answer {
    let org = caller(&shared, &headers)?;
    let body = object(&raw)?;
    check(&body)?;
    check_references(&shared, &org, &body)?;
    let file_ids = |field: &str| -> Vec<Value> {
        body.get(field).and_then(Value::as_array).map(|a| a.iter().filter_map(|f| f.get("file_id").cloned()).collect()).unwrap_or_default()
    };
    let job = json!({
        "object": "fine_tuning.job", "id": type_id("ftj"), "name": body["name"], "model": body["model"],
        "created_at": unix_now(), "org_id": org, "status": "PENDING", "outcome": null,
        "training_files": file_ids("training_files"), "validation_files": file_ids("validation_files"),
        "errors": [], "checkpoint_id": body.get("checkpoint_id").cloned().unwrap_or(Value::Null),
        "fine_tuned_model": null, "finished_at": null,
        "seed": body.get("seed").filter(|v| !v.is_null()).cloned().unwrap_or_else(|| json!(rand::random::<u32>())),
        "user_provided_suffix": body.get("suffix").and_then(Value::as_str).unwrap_or(""),
        "method": body.get("method"),
    });
    let id = job["id"].as_str().unwrap_or_default().to_string();
    let examples = body.get("training_files").and_then(Value::as_array).into_iter().flatten()
        .filter_map(|f| Some((f.get("label")?.as_str()?.to_string(), f.get("file_id")?.as_str()?.to_string())))
        .collect();
    let mut rec = JobRec { org, json: job.clone(), examples, events: Vec::new(),
                           checkpoints: Vec::new(), metrics: Vec::new() };
    rec.event("INFO", "job.created", "Job created.".into(), None);
    shared.fine_tuning.jobs.lock().push(rec);
    shared.jobs.spawn("fine_tuning", Arc::new(TuningJob { shared: shared.clone(), id }), None);
    Ok((StatusCode::CREATED, Json(job)).into_response())
}

async fn list(State(shared): State<Arc<Shared>>, headers: HeaderMap, RawQuery(q): RawQuery) -> Answer {
    let org = caller(&shared, &headers)?;
    let params = Params::parse(q.as_deref());
    let jobs = shared.fine_tuning.jobs.lock();
    let items = jobs.iter().rev().filter(|j| j.org == org).map(|j| (j.json["id"].as_str().unwrap_or_default().to_string(), j.json.clone())).collect();
    let mut answer = page(items, &params, shared.page_size).map_err(ApiError::bare)?;
    answer["object"] = json!("list");
    Ok(Json(answer).into_response())
}

fn with_job<T>(shared: &Shared, org: &str, id: &str, f: impl FnOnce(&mut JobRec) -> Result<T, ApiError>) -> Result<T, ApiError> {
    let mut jobs = shared.fine_tuning.jobs.lock();
    let job = jobs.iter_mut().find(|j| j.org == org && j.json["id"] == json!(id)).ok_or_else(|| not_found(id))?;
    f(job)
}

async fn read(State(shared): State<Arc<Shared>>, headers: HeaderMap, Path(id): Path<String>) -> Answer {
    let org = caller(&shared, &headers)?;
    Ok(Json(with_job(&shared, &org, &id, |j| Ok(j.json.clone()))?).into_response())
}

async fn moved(State(shared): State<Arc<Shared>>, headers: HeaderMap, Path(id): Path<String>, action: Move) -> Answer {
    let org = caller(&shared, &headers)?;
    let job = with_job(&shared, &org, &id, |j| {
        let to = j.apply(action)?;
        if to == "CANCELLED" {
            // Killed without a final checkpoint; not resumable; outcome stays null.
            j.json["finished_at"] = json!(unix_now());
        }
        j.event("INFO", &format!("job.{}", to.to_ascii_lowercase()), format!("Job {}.", to.to_ascii_lowercase()), None);
        Ok(j.json.clone())
    })?;
    Ok(Json(job).into_response())
}

async fn index_move(state: State<Arc<Shared>>, headers: HeaderMap, q: RawQuery, raw: axum::body::Bytes, action: Move) -> Answer {
    let from_body = object(&raw)?.get("job_id").and_then(Value::as_str).map(str::to_string);
    let id = match from_body {
        Some(id) => id,
        None => job_id_param(&q)?,
    };
    moved(state, headers, Path(id), action).await
}

#[derive(Clone, Copy)]
enum Feed {
    Checkpoints,
    Events,
    Logs,
    Metrics,
}

async fn feed(State(shared): State<Arc<Shared>>, headers: HeaderMap, Path(id): Path<String>, RawQuery(q): RawQuery, which: Feed) -> Answer {
    let org = caller(&shared, &headers)?;
    let params = Params::parse(q.as_deref());
    let mut default = shared.page_size;
    if matches!(which, Feed::Logs) {
        // The spec: logs `limit` is 1 to 100 (so a limit that is no number is told that range too,
        // not the 1 to 1000 of the other lists).
        if let Some(text) = params.get("limit").filter(|l| !l.parse::<usize>().is_ok_and(|l| (1..=100).contains(&l))) {
            return Err(invalid(format!(
                "Query parameter 'limit' of fine-tuning logs must be an integer from 1 to 100, got {text:?}."
            )));
        }
        default = default.min(100);
    }
    let rows = with_job(&shared, &org, &id, |j| Ok(match which {
        Feed::Checkpoints => j.checkpoints.clone(),
        Feed::Metrics => j.metrics.clone(),
        Feed::Events | Feed::Logs => j.events.iter().rev().cloned().collect(),
    }))?;
    let level = params.get("level");
    let search = params.get("q").map(str::to_lowercase);
    let items = rows.into_iter().filter(|r| {
        let field = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        level.is_none_or(|l| field("level") == l)
            && search.as_ref().is_none_or(|s| field("message").to_lowercase().contains(s) || field("type").to_lowercase().contains(s))
    }).enumerate().map(|(i, r)| (r.get("id").and_then(Value::as_str).map_or_else(|| format!("row_{i}"), str::to_string), r)).collect();
    let mut answer = page(items, &params, default).map_err(ApiError::bare)?;
    answer["object"] = json!("list");
    Ok(Json(answer).into_response())
}

async fn index_feed(state: State<Arc<Shared>>, headers: HeaderMap, q: RawQuery, which: Feed) -> Answer {
    let id = job_id_param(&q)?;
    feed(state, headers, Path(id), q, which).await
}

async fn checkpoint_options(State(shared): State<Arc<Shared>>, headers: HeaderMap, RawQuery(q): RawQuery) -> Answer {
    let org = caller(&shared, &headers)?;
    let jobs = shared.fine_tuning.jobs.lock();
    let items = jobs.iter().filter(|j| j.org == org).flat_map(|j| j.checkpoints.iter().cloned())
        .map(|c| (c["id"].as_str().unwrap_or_default().to_string(), c)).collect();
    let mut answer = page(items, &Params::parse(q.as_deref()), shared.page_size).map_err(ApiError::bare)?;
    answer["object"] = json!("list");
    Ok(Json(answer).into_response())
}

/// A fine-tuning job on the shared executor.
struct TuningJob {
    shared: Arc<Shared>,
    id: String,
}

impl TuningJob {
    fn with<T>(&self, f: impl FnOnce(&mut JobRec) -> T) -> Option<T> {
        let mut jobs = self.shared.fine_tuning.jobs.lock();
        jobs.iter_mut().find(|j| j.json["id"] == json!(self.id)).map(f)
    }
}

impl Job for TuningJob {
    fn admitted(&self) {
        self.with(|j| {
            if j.apply(Move::Admit).is_ok() {
                j.event("INFO", "job.admitted", "Job admitted.".into(), None);
            }
        });
    }

    fn started(&self) {
        self.with(|j| {
            if j.apply(Move::Start).is_ok() {
                j.event("INFO", "job.started", "Training started.".into(), None);
                j.event("INFO", "worker.started", "Worker 0 started.".into(), Some(0));
            }
        });
    }

    fn control(&self) -> Control {
        match self.with(|j| j.status()).as_deref() {
            Some("PENDING" | "ADMITTED" | "RUNNING") => Control::Run,
            Some("PAUSED") => Control::Pause,
            _ => Control::Stop,
        }
    }

    fn finish(&self, plan: Failure) {
        self.with(|j| {
            if let Some(error) = plan.error {
                if j.apply(Move::Fail).is_ok() {
                    j.json["errors"] = json!([{"code": "training_failed", "message": error, "suggestion": null, "error_uid": super::api_error::error_uid()}]);
                    j.json["finished_at"] = json!(unix_now());
                    j.event("FAILED", "job.failed", format!("Job failed: {error}"), None);
                }
                return;
            }
            if j.apply(Move::Complete).is_err() {
                return;
            }
            // Three checkpoints along a falling loss; a planned outcome (`fail_next_job(...,
            // outcome=)`) gives the spec's other outcomes of a COMPLETED job: PARTIAL stops
            // after the first checkpoint, FAILED produced nothing (no checkpoint, no metrics).
            // `fine_tuned_model` stays null either way: a model is named only on promotion.
            let outcome = plan.outcome.unwrap_or_else(|| "SUCCESS".to_string());
            let steps: &[u64] = match outcome.as_str() {
                "FAILED" => &[],
                "PARTIAL" => &[10],
                _ => &[10, 20, 30],
            };
            for (i, step) in steps.iter().enumerate() {
                let loss = 1.0 / (1.0 + *step as f64 / 10.0);
                let accuracy = 1.0 - loss / 2.0;
                j.metrics.push(json!({"step": step, "loss": loss, "accuracy": accuracy}));
                j.checkpoints.push(json!({"id": type_id("ckp"), "job_id": self.id, "step": step,
                                          "metrics": {"loss": loss, "accuracy": accuracy}, "created_at": unix_now()}));
                j.event("INFO", "checkpoint.created", format!("Checkpoint {} at step {step}.", i + 1), Some(0));
            }
            j.json["finished_at"] = json!(unix_now());
            match outcome.as_str() {
                "FAILED" => {
                    // The spec: errors hold platform error objects "when failed".
                    j.json["errors"] = json!([{"code": "training_failed", "message": "Training produced nothing (outcome FAILED).",
                                               "suggestion": null, "error_uid": super::api_error::error_uid()}]);
                    j.event("FAILED", "job.completed", "Job completed with outcome FAILED: it produced nothing.".into(), None);
                }
                "PARTIAL" => j.event("WARN", "job.completed", "Job completed with outcome PARTIAL: training stopped early.".into(), None),
                _ => j.event("SUCCESS", "job.completed", "Job completed.".into(), None),
            }
            j.json["outcome"] = json!(outcome);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_job_table() {
        assert_eq!(transition("RUNNING", Move::Pause), Some("PAUSED"));
        assert_eq!(transition("PAUSED", Move::Resume), Some("RUNNING"));
        for from in ["PENDING", "ADMITTED", "RUNNING", "PAUSED"] {
            assert_eq!(transition(from, Move::Cancel), Some("CANCELLED"), "{from}");
        }
        for terminal in ["COMPLETED", "FAILED", "CANCELLED"] {
            for action in [Move::Cancel, Move::Pause, Move::Resume] {
                assert_eq!(transition(terminal, action), None, "{terminal}");
            }
        }
        assert_eq!(transition("PAUSED", Move::Complete), None, "a paused job does not complete");
    }

    #[test]
    fn a_checkpoints_training_window_and_labels() {
        let store = FineTuningStore::default();
        let job = |org: &str, window: Value, checkpoint: &str| JobRec {
            org: org.into(),
            json: json!({"method": {"type": "head", "head": {"reader": {"window_size": window}}}}),
            examples: vec![("idle".into(), "i1.csv".into()), ("busy".into(), "b.csv".into()), ("idle".into(), "i2.csv".into())],
            events: vec![],
            checkpoints: vec![json!({"id": checkpoint})], metrics: vec![],
        };
        store.jobs.lock().extend([job("a", json!(32), "ckp_1"), job("a", json!("auto"), "ckp_2")]);
        let trained = store.checkpoint_training("a", "ckp_1").unwrap();
        assert_eq!(trained.window_size, Some(32));
        assert_eq!(trained.labels, ["idle", "busy"]);
        assert_eq!(trained.examples[1], ("busy".to_string(), "b.csv".to_string()));
        assert_eq!(store.checkpoint_training("a", "ckp_2").unwrap().window_size, None, "auto: the reader's default");
        assert_eq!(store.checkpoint_training("b", "ckp_1"), None, "another organization's checkpoint");
        assert_eq!(store.checkpoint_training("a", "ckp_3"), None);
    }
}
