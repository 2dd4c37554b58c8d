//! The `/query` route itself.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::Serialize;
use serde_json::value::{to_raw_value, RawValue};
use serde_json::{json, Map, Value};

use super::validate::{self, Family, QueryInput};
use super::{encoder, media, reasoner};
use crate::emulator::api_error::ApiError;
use crate::emulator::auth;
use crate::emulator::files::store::StoredFile;
use crate::emulator::state::Shared;

/// Raised from axum's 2 MB default: numeric arrays and inline images are large.
pub const QUERY_BODY_LIMIT: usize = 64 * 1024 * 1024;
pub const GPQ_NODE: &str = "emulator-gpq-0";

fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

#[derive(Serialize)]
struct WorkerPayload<'a> {
    response: Box<RawValue>,
    query: &'a str,
    prompt: String,
    system: &'a str,
    instruction: &'a str,
    generation_latency: f64,
    query_gpq_latency: f64,
    query_queue_latency: f64,
    results_timestamp: f64,
    prefetch_stats: PrefetchStats,
    #[serde(skip_serializing_if = "Option::is_none")]
    warning_messages: Option<Vec<String>>,
}

/// The spec names `prefetch_stats` (an object) without its fields: these say what the worker
/// loaded before inference and how long that took.
#[derive(Serialize)]
struct PrefetchStats {
    num_files: usize,
    num_bytes: u64,
    prefetch_time_sec: f64,
}

#[derive(Serialize)]
struct QueryAnswer {
    query_id: String,
    status: &'static str,
    response: Box<RawValue>,
    query_timestamp: f64,
    loading_timestamp: f64,
    inference_timestamp: f64,
    response_timestamp: f64,
    query_queue_time_sec: f64,
    inference_time_sec: f64,
    query_response_time_sec: f64,
    gpq_node: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    error_msg: Option<String>,
    /// The raw record's internal fields, present only with `sanitize_response: false`.
    #[serde(flatten)]
    internals: Map<String, Value>,
}

pub(crate) async fn query(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Body) -> Response {
    match run(&shared, &headers, body).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

async fn read_body(body: Body) -> Result<bytes::Bytes, ApiError> {
    match Limited::new(body, QUERY_BODY_LIMIT).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(ApiError::payload_too_large(format!(
            "The request body is larger than {QUERY_BODY_LIMIT} bytes."
        ))),
        Err(e) => Err(ApiError::invalid_request(format!("Could not read the request body: {e}"))),
    }
}

/// Numeric points up to which a query is encoded on the async worker itself.
const INLINE_ENCODE_POINTS: usize = 64 * 1024;

fn internal_error(e: impl std::fmt::Display) -> ApiError {
    ApiError::internal(format!("The emulator could not build the answer: {e}"))
}

async fn run(shared: &Shared, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let query_timestamp = now();
    let org = auth::require_org_detail(shared, headers)?;
    let raw = read_body(body).await?;
    let mut input = validate::parse(&raw, &shared.catalogue_for(&org))?;
    let mut files = Vec::with_capacity(input.file_ids.len());
    for id in &input.file_ids {
        files.push(shared.files.get(&org, id).ok_or_else(|| ApiError::file_not_found(id))?);
    }
    check_sizes(shared, &input, raw.len())?;
    validate::check_frames(&input)?;

    // Timeline: queued until loading begins, then the files are prefetched, then inference.
    let loading_timestamp = now();
    let mut described = Vec::new();
    if input.family == Family::Reasoner {
        described.reserve(files.len());
        for f in &files {
            described.push(media::describe_file(f).await);
        }
    }
    let prefetch = PrefetchStats {
        num_files: files.len(),
        num_bytes: files.iter().map(|f| f.num_bytes).sum(),
        prefetch_time_sec: now() - loading_timestamp,
    };
    let worker_time = *shared.query_delay.lock();
    if let Some(wait) = input.max_wait {
        if worker_time > wait {
            tokio::time::sleep(wait).await;
            return Err(ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                "query_timeout",
                format!("The query did not finish within max_wait_time_sec ({} s).", wait.as_secs_f64()),
            ));
        }
    }
    let inference_timestamp = now();
    if worker_time > Duration::ZERO {
        tokio::time::sleep(worker_time).await;
    }

    let failure = shared.take_query_failure();
    let (payload, warnings) = match (&failure, input.family) {
        (Some(_), _) => (None, Vec::new()),
        (None, Family::Encoder) => {
            let events: Vec<Vec<Vec<f64>>> = input.take_numeric_events();
            let normalize = input.normalize_input;
            // The stand-in encoder costs ~1 µs per channel of 1024 points: a window of a few
            // channels is encoded here, and only large requests go to a blocking thread (the
            // hop cost more than the encoding, in CPU and in two thread wake-ups per query).
            let points: usize = events.iter().flatten().map(Vec::len).sum();
            let encoded = if points <= INLINE_ENCODE_POINTS {
                encoder::encode(&events, normalize)
            } else {
                tokio::task::spawn_blocking(move || encoder::encode(&events, normalize))
                    .await
                    .map_err(internal_error)?
            };
            // One channel: a flat vector; several: one vector per channel, index = channel.
            let raw = if encoded.embeddings.len() == 1 {
                to_raw_value(&encoded.embeddings[0])
            } else {
                to_raw_value(&encoded.embeddings)
            };
            (Some(raw.map_err(internal_error)?), encoded.warnings)
        }
        (None, Family::Reasoner) => {
            let text = reasoner::answer(&input, &described);
            (Some(to_raw_value(&[text]).map_err(internal_error)?), Vec::new())
        }
    };
    let response_timestamp = now();
    let queue_time = loading_timestamp - query_timestamp;
    let inference_time = response_timestamp - inference_timestamp;
    let response = match payload {
        // The spec does not show a failed query's `response`; null says "no output".
        None => to_raw_value(&Value::Null).map_err(internal_error)?,
        Some(output) => to_raw_value(&WorkerPayload {
            response: output,
            query: &input.query,
            prompt: prompt_of(&input),
            system: &input.system_prompt,
            instruction: &input.instruction_prompt,
            generation_latency: inference_time,
            // Loading on the GPU processing queue: from loading to the start of inference.
            query_gpq_latency: inference_timestamp - loading_timestamp,
            query_queue_latency: queue_time,
            results_timestamp: response_timestamp,
            prefetch_stats: prefetch,
            warning_messages: (!warnings.is_empty()).then_some(warnings),
        })
        .map_err(internal_error)?,
    };
    let internals = if input.sanitize_response {
        Map::new()
    } else {
        raw_fields(&input, &files, org, auth::bearer_key(headers).unwrap_or_default())
    };
    let answer = QueryAnswer {
        query_id: uuid::Uuid::new_v4().to_string(),
        status: if failure.is_some() { "failed" } else { "completed" },
        response,
        query_timestamp,
        loading_timestamp,
        inference_timestamp,
        response_timestamp,
        query_queue_time_sec: queue_time,
        inference_time_sec: inference_time,
        query_response_time_sec: response_timestamp - query_timestamp,
        gpq_node: GPQ_NODE,
        error_msg: failure,
        internals,
    };
    Ok(axum::Json(answer).into_response())
}

/// The internal fields the spec lists for `sanitize_response: false`, `api_key` included: the
/// platform echoes the caller's key there, so code reading raw records (and the SDK's redaction
/// of answers) meets it in tests as it will live. The spec names them without their shapes, so
/// these are the emulator's: `input_items` has one object per input in the order the model reads
/// them (files, then events), `data_types` the distinct types among them (a file's content type,
/// an event's `type`) in first-seen order.
fn raw_fields(input: &QueryInput, files: &[Arc<StoredFile>], org: String, api_key: &str) -> Map<String, Value> {
    let mut items: Vec<Value> = files
        .iter()
        .map(|f| json!({"kind": "file", "file_id": f.file_id, "data_type": f.file_type}))
        .collect();
    items.extend(input.events.iter().map(|e| json!({"kind": "event", "data_type": e.event_type()})));
    let mut data_types: Vec<Value> = Vec::new();
    for item in &items {
        if !data_types.contains(&item["data_type"]) {
            data_types.push(item["data_type"].clone());
        }
    }
    let mut fields = Map::new();
    fields.insert("api_key".into(), Value::from(api_key));
    fields.insert("org_id".into(), Value::from(org));
    fields.insert("file_ids".into(), Value::from(input.file_ids.clone()));
    fields.insert("query_metadata".into(), input.query_metadata.clone().unwrap_or(Value::Null));
    fields.insert("data_types".into(), Value::Array(data_types));
    fields.insert("render".into(), Value::Bool(input.render));
    fields.insert("input_items".into(), Value::Array(items));
    fields.insert("sanitize".into(), Value::Bool(false));
    fields
}

/// The spec's size limits: the combined prompt, bounded by the request's `max_query_size_mb`,
/// else the server setting (`Emulator(max_query_size_mb=...)`), else the typical 0.04 MB; and,
/// when a limit is set, the whole body of an encoder request, which is how large multichannel
/// windows are refused while one channel at a time passes.
fn check_sizes(shared: &Shared, input: &QueryInput, body_bytes: usize) -> Result<(), ApiError> {
    let setting = input.max_query_size_mb.or(shared.max_query_size_mb);
    let prompt_mb = setting.unwrap_or(validate::DEFAULT_MAX_QUERY_SIZE_MB);
    let limit_bytes = prompt_mb * 1_000_000.0;
    let prompt_bytes = input.prompt_bytes();
    if prompt_bytes as f64 > limit_bytes {
        return Err(ApiError::payload_too_large(format!(
            "The combined prompt is {prompt_bytes} bytes, over the limit of {prompt_mb} MB ({limit_bytes} bytes)."
        ))
        .with_suggestion("Shorten the prompts or raise max_query_size_mb."));
    }
    if let (Family::Encoder, Some(mb)) = (input.family, setting) {
        if body_bytes as f64 > mb * 1_000_000.0 {
            return Err(ApiError::payload_too_large(format!(
                "The encoder request is {body_bytes} bytes, over the limit of {mb} MB."
            ))
            .with_suggestion("Send fewer channels per request (one request per channel) or shorter windows."));
        }
    }
    Ok(())
}

/// What the worker was prompted with: system prompt, then instruction, then the query.
fn prompt_of(input: &QueryInput) -> String {
    [&input.system_prompt, &input.instruction_prompt, &input.query]
        .iter()
        .filter(|s| !s.is_empty())
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}
