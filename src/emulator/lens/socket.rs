//! The WebSocket session protocol on a session's `session_endpoint`: one JSON reply per JSON
//! request (text or binary, answered in kind), typed `<request type>.response` except
//! `session.status` (the bare record). The credential comes in the `Authorization` header or, for
//! clients that cannot set headers, as the `Sec-WebSocket-Protocol` entry
//! `authenticationauthorization.bearer.<KEY>` next to `event-protocol-v1` (the only protocol
//! the server selects, so the key is never echoed back). Pings are answered by the socket layer
//! while the loop waits for the next message.

use std::sync::Arc;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{close_code, CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::inputs::{check_input, set_input_stream, set_output_stream};
use super::pipeline::Pipeline;
use super::processors;
use super::routes::{endpoint, outputs_json, read_file, session_not_found};
use super::session::{now, Session};
use crate::emulator::api_error::ApiError;
use crate::emulator::auth;
use crate::emulator::public_origin;
use crate::emulator::state::Shared;

pub(crate) const EVENT_PROTOCOL: &str = "event-protocol-v1";
pub(crate) const PROTOCOL_KEY_PREFIX: &str = "authenticationauthorization.bearer.";
/// Most mailbox messages one `session.read` returns.
const READ_LIMIT: usize = 1000;
const QUERY_TIMEOUT: &str = "Response timed out for query";

/// The key from `Sec-WebSocket-Protocol` entries.
fn protocol_key(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|p| p.trim().strip_prefix(PROTOCOL_KEY_PREFIX))
        .filter(|k| !k.is_empty())
}

pub(crate) async fn connect(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let key = auth::bearer_key(&headers).or_else(|| protocol_key(&headers));
    let org = key.and_then(|k| shared.key_info(k)).ok_or_else(ApiError::unauthorized_envelope)?.org;
    let session = shared.lens.session(&org, &id).ok_or_else(|| session_not_found(&id))?;
    let upgrade = match upgrade {
        Ok(u) => u,
        Err(rejection) => return Ok(rejection.into_response()),
    };
    // The socket is served in a task of its own: it keeps the origin its upgrade request used.
    let origin = public_origin::current(&shared);
    Ok(upgrade
        .protocols([EVENT_PROTOCOL])
        .on_upgrade(move |socket| public_origin::within(Some(origin), serve(socket, shared, org, session))))
}

async fn serve(mut socket: WebSocket, shared: Arc<Shared>, org: String, session: Arc<Session>) {
    let _connection = session.connection();
    let id = session.id.clone();
    drop(session);
    loop {
        let message = tokio::select! {
            m = socket.recv() => m,
            _ = shared.shutdown.cancelled() => {
                let frame = CloseFrame { code: close_code::AWAY, reason: "emulator stopped".into() };
                let _ = socket.send(Message::Close(Some(frame))).await;
                return;
            }
        };
        let (raw, binary) = match message {
            Some(Ok(Message::Text(t))) => (Bytes::copy_from_slice(t.as_str().as_bytes()), false),
            Some(Ok(Message::Binary(b))) => (b, true),
            // The socket layer answers pings and the close handshake; reading on flushes them.
            Some(Ok(_)) => continue,
            None | Some(Err(_)) => return,
        };
        let reply = answer(&shared, &org, &id, &raw).to_string();
        let out = if binary { Message::Binary(Bytes::from(reply)) } else { Message::Text(reply.into()) };
        if socket.send(out).await.is_err() {
            return;
        }
    }
}

fn reply(kind: &str, event_data: Value) -> Value {
    json!({ "type": kind, "event_data": event_data })
}

fn verdict(errors: Vec<String>, extra: Value) -> Value {
    let mut m = Map::new();
    m.insert("is_valid".into(), Value::Bool(errors.is_empty()));
    m.insert("error_messages".into(), json!(errors));
    if let Value::Object(extra) = extra {
        m.extend(extra);
    }
    Value::Object(m)
}

/// The reply to one raw message.
pub(crate) fn answer(shared: &Shared, org: &str, id: &str, raw: &[u8]) -> Value {
    let message: Map<String, Value> = match serde_json::from_slice(raw) {
        Ok(Value::Object(m)) => m,
        _ => return reply("error", verdict(vec!["The message must be a JSON object with a 'type'.".into()], Value::Null)),
    };
    let Some(kind) = message.get("type").and_then(Value::as_str) else {
        return reply("error", verdict(vec!["The message has no 'type'.".into()], Value::Null));
    };
    let response = format!("{kind}.response");
    let Some(session) = shared.lens.session(org, id) else {
        return reply(&response, verdict(vec![format!("Session '{id}' was not found.")], Value::Null));
    };
    session.touch();
    let data = message.get("event_data").cloned().unwrap_or(Value::Null);
    let field = |k: &str| data.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let style = shared.lens.style();
    let event_data = match kind {
        "session.status" => return session.record(style, &endpoint(shared, id), true),
        "session.get" => session.record(style, &endpoint(shared, id), false),
        "session.validate" | "session.heartbeat" => {
            verdict(vec![], json!({ "session_status": session.state.lock().status.spelled(style) }))
        }
        "session.read" => {
            let client_id = match field("client_id") {
                c if c.is_empty() => "default".to_string(),
                c => c,
            };
            let messages: Vec<Value> = session.outbox.read_mailbox(&client_id, READ_LIMIT).iter().map(|o| o.message()).collect();
            if messages.is_empty() {
                Value::Null
            } else {
                json!({ "messages": messages, "client_id": client_id })
            }
        }
        "session.update" => match check_input(&data) {
            Ok(()) => verdict(vec![], json!({ "num_outputs": session.update(&data).len() })),
            Err(e) => verdict(vec![e], Value::Null),
        },
        "session.modify" => modify(shared, org, &session, &data),
        "input_stream.set" => {
            let config = data.get("stream_config").cloned().unwrap_or(Value::Null);
            match set_input_stream(&session, &field("stream_type"), &config, &|name| read_file(shared, org, name)) {
                Ok(stream_id) => verdict(vec![], json!({ "input_data_stream_id": stream_id })),
                Err(e) => verdict(vec![e], Value::Null),
            }
        }
        "output_stream.set" => match set_output_stream(&session, &field("stream_type")) {
            Ok(stream_id) => verdict(vec![], json!({ "output_data_stream_id": stream_id })),
            Err(e) => verdict(vec![e], Value::Null),
        },
        "model.query" => {
            if session.state.lock().pipeline.answers_queries {
                let (_, caption) = processors::camera(&json!({ "event_data": data.get("data").and_then(|d| d.get(0)).cloned() }));
                verdict(vec![], json!({ "result": caption["result"] }))
            } else {
                verdict(vec![QUERY_TIMEOUT.into()], json!({ "message": QUERY_TIMEOUT }))
            }
        }
        "session.destroy" => match shared.lens.destroy(org, id) {
            Some(gone) => verdict(vec![], json!({ "session_id": id, "session_status": gone.state.lock().status.spelled(style) })),
            None => verdict(vec![format!("Session '{id}' was not found.")], Value::Null),
        },
        other => verdict(vec![format!("Unknown event type '{other}'.")], Value::Null),
    };
    reply(&response, event_data)
}

/// `session.modify`: `{lens_config: {...}}` or the config's fields themselves replace the
/// session's; the pipeline is rebuilt, and a `session.modify.result` output says so.
fn modify(shared: &Shared, org: &str, session: &Session, data: &Value) -> Value {
    let changes = match data.get("lens_config").or(Some(data)) {
        Some(Value::Object(m)) => m.clone(),
        _ => return verdict(vec!["session.modify needs an object of lens_config fields.".into()], Value::Null),
    };
    let mut config = match session.state.lock().lens_config.clone() {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    config.extend(changes);
    let config = Value::Object(config);
    let pipeline = match Pipeline::build(&config, &|name| read_file(shared, org, name)) {
        Ok(p) => p,
        Err(errors) => return verdict(errors, Value::Null),
    };
    let channel = pipeline.channel;
    {
        let mut s = session.state.lock();
        s.lens_config = config.clone();
        s.pipeline = Arc::new(pipeline);
        s.updates += 1;
        s.last_update = now();
    }
    let result = ("session.modify.result".to_string(), json!({ "is_valid": true, "lens_config": config }));
    session.outbox.push(channel, vec![result.clone()], now());
    verdict(vec![], json!({ "outputs": outputs_json(vec![result]) }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn the_key_from_the_protocol_entries() {
        let mut h = HeaderMap::new();
        h.insert(header::SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static("event-protocol-v1, authenticationauthorization.bearer.sk-1"));
        assert_eq!(protocol_key(&h), Some("sk-1"));
        h.insert(header::SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static("event-protocol-v1"));
        assert_eq!(protocol_key(&h), None);
    }

    #[test]
    fn verdicts_carry_their_fields() {
        assert_eq!(verdict(vec![], json!({"a": 1})), json!({"is_valid": true, "error_messages": [], "a": 1}));
        assert_eq!(verdict(vec!["no".into()], Value::Null)["is_valid"], false);
    }
}
