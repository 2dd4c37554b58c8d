//! `/_emulator/*`: the control surface for out-of-process tests (faults, request log, keys).
//! No auth: it is a local test double, bound to loopback by default.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine;
use serde_json::{json, Map, Value};

use super::api_error::ApiError;
use super::auth::Role;
use super::catalogue::Catalogue;
use super::faults::{FaultAction, FaultRule, STATUSES};
use super::jobs::Failure;
use super::lens::StatusStyle as LensStatusStyle;
use super::paging::Params;
use super::recorder::RecordedRequest;
use super::state::Shared;

pub(crate) fn router() -> Router<Arc<Shared>> {
    Router::new()
        .route("/faults", post(add_fault).delete(clear_faults))
        .route("/requests", get(list_requests).delete(clear_requests))
        .route("/keys", post(new_key))
        .route("/fail_queries", post(fail_queries))
        .route("/query_delay", post(query_delay))
        .route("/expire_upload_urls", post(expire_upload_urls))
        .route("/drop_streams", post(drop_streams))
        .route("/close_idle_connections", post(close_idle_connections))
        .route("/lens_status_style", post(lens_status_style))
        .route("/expire_output_urls", post(expire_output_urls))
        .route("/fail_next_job", post(fail_next_job))
        .route("/lag_agent_status", post(lag_agent_status))
}

fn object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice(body) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(ApiError::invalid_request("The body must be a JSON object.")),
    }
}

/// The string member `key` of a control body, `None` when absent or null.
fn optional_string(m: &Map<String, Value>, key: &str) -> Result<Option<String>, ApiError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ApiError::invalid_request(format!("'{key}' must be a string."))),
    }
}

fn seconds(v: &Value, name: &str) -> Result<Duration, ApiError> {
    v.as_f64()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| ApiError::invalid_request(format!("'{name}' must be a non-negative number of seconds.")))
}

/// Parses a rule from JSON. `times` absent means 1, like the Python API (a forgotten `times`
/// should not leave a permanent fault); `"times": null` means every time.
pub(crate) fn rule_from_json(m: &Map<String, Value>) -> Result<FaultRule, ApiError> {
    let text = |k: &str| optional_string(m, k);
    let path = text("path")?.ok_or_else(|| ApiError::invalid_request("'path' is required."))?;
    let status = match m.get("status") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .and_then(|s| u16::try_from(s).ok())
                .filter(|s| STATUSES.contains(s))
                .ok_or_else(|| {
                    ApiError::invalid_request(format!("'status' must be an HTTP status ({}-{}).", STATUSES.start(), STATUSES.end()))
                })?,
        ),
    };
    let action = match text("action")? {
        None => None,
        Some(a) => Some(a.parse::<FaultAction>().map_err(ApiError::invalid_request)?),
    };
    let times = match m.get("times") {
        None => Some(1),
        Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| ApiError::invalid_request("'times' must be a non-negative integer or null."))?,
        ),
    };
    let probability = match m.get("probability") {
        None | Some(Value::Null) => 1.0,
        Some(v) => v
            .as_f64()
            .filter(|p| *p > 0.0 && *p <= 1.0)
            .ok_or_else(|| ApiError::invalid_request("'probability' must be a number above 0 and at most 1."))?,
    };
    let rule = FaultRule {
        method: text("method")?,
        path,
        status,
        retry_after: match m.get("retry_after") {
            None | Some(Value::Null) => None,
            Some(v) => Some(seconds(v, "retry_after")?),
        },
        delay: match m.get("delay") {
            None | Some(Value::Null) => None,
            Some(v) => Some(seconds(v, "delay")?),
        },
        action,
        times,
        probability,
    };
    rule.check("a fault").map_err(ApiError::invalid_request)?;
    Ok(rule)
}

async fn add_fault(State(shared): State<Arc<Shared>>, body: bytes::Bytes) -> Result<Json<Value>, ApiError> {
    let rule = rule_from_json(&object(&body)?)?;
    shared.faults.push(rule.clone());
    Ok(Json(json!({
        "method": rule.method, "path": rule.path, "status": rule.status,
        "retry_after": rule.retry_after.map(|d| d.as_secs_f64()), "delay": rule.delay.map(|d| d.as_secs_f64()),
        "action": rule.action.map(|a| a.as_str()), "times": rule.times, "probability": rule.probability,
    })))
}

async fn clear_faults(State(shared): State<Arc<Shared>>) -> Json<Value> {
    shared.faults.clear();
    Json(json!({ "cleared": true }))
}

/// JSON view of a record: headers as an object, the (JSON) body as text.
pub(crate) fn record_json(r: &RecordedRequest) -> Value {
    let mut record = record_summary_json(r);
    record["body"] = json!(r.body.as_ref().map(|b| String::from_utf8_lossy(b).into_owned()));
    record["body_base64"] = json!(r.body.as_ref().map(|b| base64::engine::general_purpose::STANDARD.encode(b)));
    record
}

/// A record without its body: what a harness counting requests, attempts and statuses needs,
/// at a fraction of the bytes (an encoder request's body is kilobytes of numbers).
fn record_summary_json(r: &RecordedRequest) -> Value {
    let headers: Map<String, Value> = r.headers.iter().map(|(k, v)| (k.clone(), Value::from(v.clone()))).collect();
    json!({
        "method": r.method, "path": r.path, "query": r.query, "headers": headers,
        "attempt": r.attempt, "org": r.org, "body_len": r.body_len, "status": r.status,
    })
}

/// `GET /_emulator/requests`; with `?bodies=false` the records leave out `body` and
/// `body_base64`.
async fn list_requests(State(shared): State<Arc<Shared>>, RawQuery(query): RawQuery) -> Result<Json<Value>, ApiError> {
    let bodies = Params::parse(query.as_deref()).flag("bodies")?.unwrap_or(true);
    let render = if bodies { record_json } else { record_summary_json };
    let data: Vec<Value> = shared.recorder.all().iter().map(render).collect();
    Ok(Json(json!({ "data": data })))
}

async fn clear_requests(State(shared): State<Arc<Shared>>) -> Json<Value> {
    shared.recorder.clear();
    Json(json!({ "cleared": true }))
}

/// `{org?, role?, models?}` as `Emulator.new_api_key` takes them; `models` entries are ids or
/// `{id, family}` objects.
async fn new_key(State(shared): State<Arc<Shared>>, body: bytes::Bytes) -> Result<Json<Value>, ApiError> {
    let m = object(&body)?;
    let org = optional_string(&m, "org")?;
    let role = match optional_string(&m, "role")? {
        None => Role::Admin,
        Some(s) => s.parse::<Role>().map_err(ApiError::invalid_request)?,
    };
    let models = match m.get("models") {
        None | Some(Value::Null) => None,
        Some(v) => Some(Catalogue::from_json(v).map_err(ApiError::invalid_request)?),
    };
    let (key, info) = shared.issue_key(org.as_deref(), role, models);
    Ok(Json(json!({ "api_key": key, "org": info.org, "role": info.role.as_str() })))
}

async fn fail_queries(State(shared): State<Arc<Shared>>, body: bytes::Bytes) -> Result<Json<Value>, ApiError> {
    let m = object(&body)?;
    let msg = m.get("error_msg").and_then(Value::as_str).unwrap_or("emulated worker failure");
    let times = match m.get("times") {
        None | Some(Value::Null) => 1,
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| ApiError::invalid_request("'times' must be a non-negative integer."))?,
    };
    shared.fail_queries(msg, times);
    Ok(Json(json!({ "error_msg": msg, "times": times })))
}

async fn query_delay(State(shared): State<Arc<Shared>>, body: bytes::Bytes) -> Result<Json<Value>, ApiError> {
    let m = object(&body)?;
    let d = seconds(m.get("seconds").unwrap_or(&Value::Null), "seconds")?;
    *shared.query_delay.lock() = d;
    Ok(Json(json!({ "seconds": d.as_secs_f64() })))
}

/// Every part URL issued so far is expired (faults on part PUTs use `/faults` with the path
/// `/_storage/*/N`).
async fn expire_upload_urls(State(shared): State<Arc<Shared>>) -> Json<Value> {
    shared.url_signer.expire_all();
    Json(json!({ "expired": true }))
}

/// Closes every keep-alive connection between requests (`Emulator.close_idle_connections`).
async fn close_idle_connections(State(shared): State<Arc<Shared>>) -> Json<Value> {
    shared.close_idle_connections();
    Json(json!({}))
}

/// `{every: N}` cuts each SSE stream connection after N outputs; `{every: null}` turns it off.
async fn drop_streams(State(shared): State<Arc<Shared>>, body: bytes::Bytes) -> Result<Json<Value>, ApiError> {
    let m = object(&body)?;
    let every = match m.get("every") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .filter(|n| *n > 0)
                .ok_or_else(|| ApiError::invalid_request("'every' must be a positive integer or null."))?,
        ),
    };
    *shared.lens.drop_every.lock() = every;
    Ok(Json(json!({ "every": every })))
}

/// `{style: "enum" | "number"}`: how lens `session_status` is spelled from now on.
async fn lens_status_style(State(shared): State<Arc<Shared>>, body: bytes::Bytes) -> Result<Json<Value>, ApiError> {
    let m = object(&body)?;
    let style = m
        .get("style")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::invalid_request("'style' is required."))?
        .parse::<LensStatusStyle>()
        .map_err(ApiError::invalid_request)?;
    *shared.lens.status_style.lock() = style;
    Ok(Json(json!({ "style": style.as_str() })))
}

/// Every batch output URL issued so far answers 403 (listing the outputs again signs fresh ones).
async fn expire_output_urls(State(shared): State<Arc<Shared>>) -> Json<Value> {
    shared.batch.signer.expire_all();
    Json(json!({ "expired": true }))
}

/// `{kind, error?, failed_inputs?, outcome?}`: the next job of `kind` ends failed with `error`,
/// or (batch) completes with `failed_inputs` failed, or (fine_tuning) completes with `outcome`
/// (`PARTIAL`, `FAILED`) (`Emulator.fail_next_job`). Plans of one kind queue, each for one job.
/// The executor refuses a plan that would fail nothing, here as from Python.
async fn fail_next_job(State(shared): State<Arc<Shared>>, body: bytes::Bytes) -> Result<Json<Value>, ApiError> {
    let m = object(&body)?;
    let kind = m
        .get("kind")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::invalid_request("'kind' is required: a string."))?;
    let error = optional_string(&m, "error")?;
    let outcome = optional_string(&m, "outcome")?;
    let not_ids = || ApiError::invalid_request("'failed_inputs' must be a list of file ids (strings).");
    let failed_inputs: Vec<String> = match m.get("failed_inputs") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(ids)) => {
            ids.iter().map(|id| id.as_str().map(str::to_string).ok_or_else(not_ids)).collect::<Result<_, _>>()?
        }
        Some(_) => return Err(not_ids()),
    };
    let answer = json!({ "kind": kind, "error": error, "failed_inputs": failed_inputs, "outcome": outcome });
    shared.jobs.fail_next(kind, Failure { error, failed_inputs, outcome }).map_err(ApiError::invalid_request)?;
    Ok(Json(answer))
}

/// `{seconds}`: agent records keep saying `running` that long after their run ended
/// (`Emulator.lag_agent_status`).
async fn lag_agent_status(State(shared): State<Arc<Shared>>, body: bytes::Bytes) -> Result<Json<Value>, ApiError> {
    let m = object(&body)?;
    let lag = seconds(m.get("seconds").unwrap_or(&Value::Null), "seconds")?;
    *shared.agents.lag.lock() = lag;
    Ok(Json(json!({ "seconds": lag.as_secs_f64() })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_json_defaults_and_errors() {
        let m = |v: Value| v.as_object().cloned().unwrap();
        let r = rule_from_json(&m(json!({"path": "/query", "status": 503, "retry_after": 2}))).unwrap();
        assert_eq!(r.times, Some(1));
        assert_eq!(r.status, Some(503));
        let r = rule_from_json(&m(json!({"path": "/query", "times": null, "action": "stall", "delay": 0.5}))).unwrap();
        assert_eq!(r.times, None);
        assert_eq!(r.action, Some(FaultAction::Stall));
        assert_eq!(r.delay, Some(Duration::from_millis(500)));
        assert!(rule_from_json(&m(json!({"status": 500}))).is_err());
        assert!(rule_from_json(&m(json!({"path": "/q", "action": "boom"}))).unwrap_err().message.contains("boom"));
        assert!(rule_from_json(&m(json!({"path": "/q", "probability": 2}))).is_err());
        assert!(rule_from_json(&m(json!({"path": "/q", "probability": 0}))).is_err(), "a rule that never applies");
        for bad in [json!({"path": "/q", "status": 500, "retry_after": -1}), json!({"path": "/q"}), json!({"path": "q", "status": 500})] {
            assert!(rule_from_json(&m(bad.clone())).is_err(), "{bad}");
        }
    }
}
