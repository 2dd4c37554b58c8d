//! The lens REST routes under `/v0.5/lens`, with the spec's mixed error shapes: 422 envelopes
//! for registration, 400 `{errors: [string]}` plain strings for bad lens ids and configs,
//! `{is_valid: false, error_messages}` for refused lens changes, 404 `session_not_found`, the
//! 401 envelope, and 200-style `{type: "error"}` bodies from event processing.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Map, Value};

use super::inputs::check_input;
use super::lenses::{with_defaults, LensRec};
use super::pipeline::{entries, Pipeline};
use super::session::Session;
use super::{socket, sse};
use crate::emulator::public_origin;
use crate::emulator::api_error::ApiError;
use crate::emulator::app::API_PREFIX;
use crate::emulator::auth;
use crate::emulator::state::Shared;

type Answer = Result<Response, ApiError>;
type Params = Query<HashMap<String, String>>;

pub(crate) fn router() -> Router<Arc<Shared>> {
    Router::new()
        .route("/register", post(register))
        .route("/clone", post(clone_lens))
        .route("/modify", post(modify))
        .route("/delete", post(delete_lens))
        .route("/info", get(lens_info))
        .route("/metadata", get(lens_metadata))
        .route("/sessions/create", post(create_session))
        .route("/sessions/destroy", post(destroy_session))
        .route("/sessions/info", get(session_info))
        .route("/sessions/metadata", get(session_metadata))
        .route("/sessions/events/process", post(process_event))
        .route("/sessions/consumer/{session_id}", get(sse::consume))
        .route("/sessions/{session_id}", get(socket::connect))
}

/// `(organization, key)` of the caller, or the 401 envelope.
pub(crate) fn caller(shared: &Shared, headers: &HeaderMap) -> Result<(String, String), ApiError> {
    let key = auth::bearer_key(headers).ok_or_else(ApiError::unauthorized_envelope)?;
    let info = shared.key_info(key).ok_or_else(ApiError::unauthorized_envelope)?;
    Ok((info.org, key.to_string()))
}

pub(crate) fn session_not_found(id: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "session_not_found", format!("Session '{id}' was not found."))
}

/// `ws://HOST:PORT/v0.5/lens/sessions/<id>`, at the address the caller reached the emulator by.
pub(crate) fn endpoint(shared: &Shared, id: &str) -> String {
    let origin = public_origin::current(shared);
    let origin = origin.strip_prefix("http").unwrap_or(&origin);
    format!("ws{origin}{API_PREFIX}/lens/sessions/{id}")
}

fn ok(body: Value) -> Answer {
    Ok(Json(body).into_response())
}

/// 400 `{errors: [string]}`, the plain-string shape of session creation and lens lookups.
fn plain_errors(messages: Vec<String>) -> Answer {
    Ok((StatusCode::BAD_REQUEST, Json(json!({ "errors": messages }))).into_response())
}

/// 400 `{is_valid: false, error_messages}`, the shape of a refused lens change.
fn not_valid(messages: Vec<String>) -> Answer {
    Ok((StatusCode::BAD_REQUEST, Json(json!({ "is_valid": false, "error_messages": messages }))).into_response())
}

fn object(body: &[u8]) -> Option<Map<String, Value>> {
    match serde_json::from_slice(body) {
        Ok(Value::Object(m)) => Some(m),
        _ => None,
    }
}

fn text<'a>(m: &'a Map<String, Value>, key: &str) -> &'a str {
    m.get(key).and_then(Value::as_str).unwrap_or("")
}

/// An organization file's bytes by name (n-shot CSVs, input streams).
pub(crate) fn read_file(shared: &Shared, org: &str, name: &str) -> Option<Vec<u8>> {
    std::fs::read(&shared.files.get(org, name)?.path).ok()
}

fn invalid_lens_id(id: &str) -> Answer {
    plain_errors(vec![format!("Invalid lens id: '{id}'.")])
}

fn invalid_json() -> ApiError {
    ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_json_payload", "The body must be JSON with a lens_config object.")
}

/// The lens config of a register or modify body, checked: 422 for its JSON and name, the
/// pipeline's shape as `error_messages`.
fn checked_config(config: Map<String, Value>) -> Result<Result<Map<String, Value>, Vec<String>>, ApiError> {
    if text(&config, "lens_name").trim().is_empty() {
        return Err(ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "missing_lens_name", "lens_config.lens_name is required."));
    }
    let config = with_defaults(config);
    let mut errors = entries(&Value::Object(config.clone())).err().unwrap_or_default();
    if !config.get("model_parameters").is_some_and(Value::is_object) {
        errors.push("model_parameters must be an object.".into());
    }
    Ok(if errors.is_empty() { Ok(config) } else { Err(errors) })
}

async fn register(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: bytes::Bytes) -> Answer {
    let (org, _) = caller(&shared, &headers)?;
    let config = match object(&body).and_then(|mut m| m.remove("lens_config")) {
        Some(Value::Object(c)) => c,
        _ => return Err(invalid_json()),
    };
    match checked_config(config)? {
        Ok(config) => {
            let lens = LensRec::new(&org, config);
            let answer = lens.json();
            shared.lens.lenses.lock().push(lens);
            ok(answer)
        }
        Err(errors) => not_valid(errors),
    }
}

/// The lens `id` as the organization sees it.
fn find_lens(shared: &Shared, org: &str, id: &str) -> Option<LensRec> {
    shared.lens.lenses.lock().iter().find(|l| l.id == id && l.visible_to(org)).cloned()
}

async fn clone_lens(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: bytes::Bytes) -> Answer {
    let (org, _) = caller(&shared, &headers)?;
    let m = object(&body).unwrap_or_default();
    let Some(source) = find_lens(&shared, &org, text(&m, "lens_id")) else { return invalid_lens_id(text(&m, "lens_id")) };
    let mut config = source.config.clone();
    let name = match text(&m, "lens_name") {
        "" => format!("{} (clone)", source.name()),
        given => given.to_string(),
    };
    config.insert("lens_name".into(), Value::String(name));
    let lens = LensRec::new(&org, config);
    let answer = lens.json();
    shared.lens.lenses.lock().push(lens);
    ok(answer)
}

/// `{lens_id, lens_name?, model_pipeline?, model_parameters?}` or `{lens_id, lens_config}`:
/// the given fields replace the lens's.
async fn modify(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: bytes::Bytes) -> Answer {
    let (org, _) = caller(&shared, &headers)?;
    let Some(mut m) = object(&body) else { return Err(invalid_json()) };
    let id = text(&m, "lens_id").to_string();
    let Some(lens) = find_lens(&shared, &org, &id) else { return invalid_lens_id(&id) };
    if !lens.modifiable {
        return not_valid(vec![format!("Lens '{id}' is not modifiable.")]);
    }
    let changes = match m.remove("lens_config") {
        Some(Value::Object(c)) => c,
        Some(_) => return Err(invalid_json()),
        None => m,
    };
    let mut config = lens.config.clone();
    for (k, v) in changes {
        if k != "lens_id" {
            config.insert(k, v);
        }
    }
    let config = match checked_config(config)? {
        Ok(c) => c,
        Err(errors) => return not_valid(errors),
    };
    let mut lenses = shared.lens.lenses.lock();
    let Some(stored) = lenses.iter_mut().find(|l| l.id == id) else { return invalid_lens_id(&id) };
    stored.config = config;
    ok(stored.json())
}

async fn delete_lens(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: bytes::Bytes) -> Answer {
    let (org, _) = caller(&shared, &headers)?;
    let m = object(&body).unwrap_or_default();
    let id = text(&m, "lens_id");
    let Some(lens) = find_lens(&shared, &org, id) else { return invalid_lens_id(id) };
    if !lens.modifiable {
        return not_valid(vec![format!("Lens '{id}' is not modifiable and cannot be deleted.")]);
    }
    shared.lens.lenses.lock().retain(|l| l.id != id);
    ok(json!({ "is_valid": true, "error_messages": [], "lens_id": id }))
}

/// `shard_index` and `max_items_per_shard` as the official client sends them (-1: everything).
fn shard(items: Vec<Value>, q: &HashMap<String, String>) -> Vec<Value> {
    let number = |k: &str| q.get(k).and_then(|v| v.parse::<i64>().ok()).unwrap_or(-1);
    let (index, size) = (number("shard_index"), number("max_items_per_shard"));
    if index < 0 || size <= 0 {
        return items;
    }
    items.into_iter().skip((index * size) as usize).take(size as usize).collect()
}

async fn lens_info(State(shared): State<Arc<Shared>>, headers: HeaderMap, Query(q): Params) -> Answer {
    let (org, _) = caller(&shared, &headers)?;
    match q.get("lens_id").map(String::as_str) {
        Some(id) if !id.is_empty() => match find_lens(&shared, &org, id) {
            Some(lens) => ok(lens.json()),
            None => invalid_lens_id(id),
        },
        _ => {
            let ids: Vec<String> = shared.lens.lenses.lock().iter().filter(|l| l.visible_to(&org)).map(|l| l.id.clone()).collect();
            ok(json!({ "num_lenses": ids.len(), "lens_ids": ids }))
        }
    }
}

async fn lens_metadata(State(shared): State<Arc<Shared>>, headers: HeaderMap, Query(q): Params) -> Answer {
    let (org, _) = caller(&shared, &headers)?;
    let wanted = q.get("lens_id").filter(|s| !s.is_empty());
    let all: Vec<Value> = shared
        .lens
        .lenses
        .lock()
        .iter()
        .filter(|l| l.visible_to(&org) && wanted.is_none_or(|w| *w == l.id))
        .map(LensRec::json)
        .collect();
    ok(Value::Array(shard(all, &q)))
}

async fn create_session(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: bytes::Bytes) -> Answer {
    let (org, key) = caller(&shared, &headers)?;
    let m = object(&body).unwrap_or_default();
    let id = text(&m, "lens_id");
    if id.is_empty() {
        return plain_errors(vec!["lens_id is required.".into()]);
    }
    let Some(lens) = find_lens(&shared, &org, id) else { return invalid_lens_id(id) };
    let config = Value::Object(lens.config.clone());
    let pipeline = match Pipeline::build(&config, &|name| read_file(&shared, &org, name)) {
        Ok(p) => p,
        Err(errors) => return plain_errors(errors.into_iter().map(|e| format!("Invalid lens config: {e}")).collect()),
    };
    let session = Arc::new(Session::new(&org, &key, shared.lens.session_ttl, (&lens.id, lens.name(), config), pipeline));
    let record = session.record(shared.lens.style(), &endpoint(&shared, &session.id), true);
    shared.lens.add_session(session);
    ok(record)
}

fn session_id_of(body: &[u8]) -> String {
    object(body).map(|m| text(&m, "session_id").to_string()).unwrap_or_default()
}

async fn destroy_session(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: bytes::Bytes) -> Answer {
    let (org, _) = caller(&shared, &headers)?;
    let id = session_id_of(&body);
    let session = shared.lens.destroy(&org, &id).ok_or_else(|| session_not_found(&id))?;
    ok(session.record(shared.lens.style(), &endpoint(&shared, &id), false))
}

fn records(shared: &Shared, org: &str, wanted: Option<&String>) -> Vec<Value> {
    shared
        .lens
        .sessions_of(org)
        .iter()
        .filter(|s| wanted.is_none_or(|w| *w == s.id))
        .map(|s| s.record(shared.lens.style(), &endpoint(shared, &s.id), false))
        .collect()
}

async fn session_info(State(shared): State<Arc<Shared>>, headers: HeaderMap, Query(q): Params) -> Answer {
    let (org, _) = caller(&shared, &headers)?;
    match q.get("session_id").filter(|s| !s.is_empty()) {
        Some(id) => {
            let session = shared.lens.session(&org, id).ok_or_else(|| session_not_found(id))?;
            ok(session.record(shared.lens.style(), &endpoint(&shared, id), false))
        }
        None => {
            let sessions = shared.lens.sessions_of(&org);
            let ids: Vec<&str> = sessions.iter().map(|s| s.id.as_str()).collect();
            ok(json!({ "num_sessions": ids.len(), "session_ids": ids }))
        }
    }
}

async fn session_metadata(State(shared): State<Arc<Shared>>, headers: HeaderMap, Query(q): Params) -> Answer {
    let (org, _) = caller(&shared, &headers)?;
    let wanted = q.get("session_id").filter(|s| !s.is_empty());
    if let Some(id) = wanted {
        shared.lens.session(&org, id).ok_or_else(|| session_not_found(id))?;
    }
    ok(Value::Array(shard(records(&shared, &org, wanted), &q)))
}

/// The 200-style error body of event processing.
pub(crate) fn event_error(messages: Vec<String>) -> Value {
    json!({ "type": "error", "event_data": { "is_valid": false, "error_messages": messages } })
}

pub(crate) fn outputs_json(outputs: Vec<(String, Value)>) -> Value {
    Value::Array(outputs.into_iter().map(|(kind, data)| json!({ "type": kind, "event_data": data })).collect())
}

async fn process_event(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: bytes::Bytes) -> Answer {
    let (org, _) = caller(&shared, &headers)?;
    let Some(m) = object(&body) else { return ok(event_error(vec!["The body must be a JSON object.".into()])) };
    let id = text(&m, "session_id");
    let session = shared.lens.session(&org, id).ok_or_else(|| session_not_found(id))?;
    session.touch();
    let event = m.get("event").cloned().unwrap_or(Value::Null);
    if let Err(e) = check_input(&event) {
        return ok(event_error(vec![e]));
    }
    let outputs = session.feed(&event);
    ok(json!({ "type": "success", "event_data": { "response": outputs_json(outputs) } }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_slice_the_list() {
        let items: Vec<Value> = (0..5).map(Value::from).collect();
        let q = |i: &str, n: &str| HashMap::from([("shard_index".to_string(), i.to_string()), ("max_items_per_shard".to_string(), n.to_string())]);
        assert_eq!(shard(items.clone(), &q("1", "2")), vec![json!(2), json!(3)]);
        assert_eq!(shard(items.clone(), &q("-1", "-1")).len(), 5);
        assert!(shard(items, &q("9", "2")).is_empty());
    }

    #[test]
    fn config_checks() {
        let cfg = |v: Value| v.as_object().cloned().unwrap();
        assert_eq!(checked_config(cfg(json!({"lens_name": " "}))).unwrap_err().code, "missing_lens_name");
        let fine = checked_config(cfg(json!({"lens_name": "a"}))).unwrap().unwrap();
        assert_eq!(fine["model_pipeline"], json!([]));
        let bad = checked_config(cfg(json!({"lens_name": "a", "model_pipeline": 3, "model_parameters": []}))).unwrap().unwrap_err();
        assert_eq!(bad.len(), 2);
    }
}
