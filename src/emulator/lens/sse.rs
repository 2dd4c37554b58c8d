//! `GET /lens/sessions/consumer/{session_id}`: the SSE stream of a session's outputs. Frames are
//! `event: message`, `id: <n>`, `data: <JSON with type>`; the stream starts with
//! `sse.stream.start`, replays the session's outputs from the first (or after `Last-Event-ID`),
//! sends `sse.stream.heartbeat` while idle, and ends with `sse.stream.end` once the session is
//! destroyed or expired and every output was sent. `drop_streams(every=N)` cuts the connection
//! (no end frame, no terminating chunk) after N outputs.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::routes::{caller, session_not_found};
use super::session::Session;
use crate::emulator::api_error::ApiError;
use crate::emulator::state::Shared;

/// Outputs written in one chunk at most: large enough for throughput, small enough that a
/// reader sees the first ones promptly.
const BATCH: usize = 512;
/// `message_timeout` of the first heartbeat; each next one adds a second (spec, Limits).
const FIRST_MESSAGE_TIMEOUT: f64 = 5.0;

/// One SSE frame. A `data` with line breaks becomes several `data:` lines, as the standard
/// says (the emulator's JSON never has any, but a frame must stay a frame whatever it carries).
pub(crate) fn frame(out: &mut BytesMut, id: u64, data: &str) {
    out.extend_from_slice(b"event: message\nid: ");
    out.extend_from_slice(itoa::Buffer::new().format(id).as_bytes());
    out.extend_from_slice(b"\n");
    for line in data.split('\n') {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line.strip_suffix('\r').unwrap_or(line).as_bytes());
        out.extend_from_slice(b"\n");
    }
    out.extend_from_slice(b"\n");
}

fn control(id: u64, kind: &str, event_data: serde_json::Value) -> Bytes {
    let mut out = BytesMut::new();
    frame(&mut out, id, &json!({ "type": kind, "event_data": event_data }).to_string());
    out.freeze()
}

pub(crate) async fn consume(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (org, _) = caller(&shared, &headers)?;
    let after = match headers.get("last-event-id").map(|v| v.to_str().map(str::trim)) {
        None | Some(Ok("")) => None,
        Some(value) => Some(value.ok().and_then(|v| v.parse::<u64>().ok()).ok_or_else(|| {
            ApiError::bad_request("invalid_cursor", "Last-Event-ID is not an event id of this stream.")
        })?),
    };
    // A reconnect (with Last-Event-ID) may finish the stream of a session that ended meanwhile.
    let session = match after {
        Some(_) => shared.lens.resumable(&org, &id),
        None => shared.lens.session(&org, &id),
    }
    .ok_or_else(|| session_not_found(&id))?;
    let after = after.unwrap_or(0);
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(8);
    tokio::spawn(pump(shared, org, session, after, tx));
    let body = Body::from_stream(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    }));
    let mut response = (StatusCode::OK, body).into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}

/// Writes one connection's frames into `tx` until the session ends, the client leaves, the
/// emulator stops, or `drop_streams` cuts it.
async fn pump(
    shared: Arc<Shared>,
    org: String,
    session: Arc<Session>,
    mut cursor: u64,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
) {
    let _connection = session.connection();
    let mut changes = session.outbox.subscribe();
    let drop_every = (*shared.lens.drop_every.lock()).filter(|n| *n > 0);
    let interval = shared.lens.heartbeat_interval;
    let reader_id = format!("rdr-{}", uuid::Uuid::new_v4().simple());
    // The start frame repeats the cursor it starts from: resuming after it loses nothing.
    let start = control(cursor, "sse.stream.start", json!({ "session_id": session.id, "reader_id": reader_id }));
    if tx.send(Ok(start)).await.is_err() {
        return;
    }
    let (mut sent, mut sent_bytes, mut beats) = (0u64, 0u64, 0u32);
    let mut next_beat = Instant::now() + interval;
    loop {
        let due = Instant::now() >= next_beat;
        let limit = drop_every.map_or(BATCH, |n| BATCH.min((n - sent % n) as usize));
        let mut take = session.outbox.take_sse(cursor, limit, due);
        if !take.outputs.is_empty() {
            let mut buf = BytesMut::new();
            for o in &take.outputs {
                frame(&mut buf, o.seq, &o.json);
                cursor = o.seq;
            }
            sent += take.outputs.len() as u64;
            sent_bytes += buf.len() as u64;
            if tx.send(Ok(buf.freeze())).await.is_err() {
                return;
            }
            if drop_every.is_some_and(|n| sent % n == 0) {
                cut(&tx).await;
                return;
            }
        }
        if take.ended {
            let seq = match take.control_seq {
                Some(seq) => seq,
                None => session.outbox.take_sse(cursor, 0, true).control_seq.unwrap_or(cursor + 1),
            };
            let _ = tx.send(Ok(control(seq, "sse.stream.end", serde_json::Value::Null))).await;
            return;
        }
        if let (true, Some(seq)) = (due, take.control_seq.take()) {
            let status = session.state.lock().status.spelled(shared.lens.style());
            let heartbeat = json!({
                "session_id": session.id,
                "session_status": status,
                "num_messages": sent,
                "num_bytes": sent_bytes,
                "message_timeout": FIRST_MESSAGE_TIMEOUT + f64::from(beats),
            });
            beats += 1;
            next_beat = Instant::now() + interval;
            if tx.send(Ok(control(seq, "sse.stream.heartbeat", heartbeat))).await.is_err() {
                return;
            }
        }
        if !take.outputs.is_empty() {
            continue;
        }
        tokio::select! {
            _ = changes.changed() => {}
            _ = tokio::time::sleep_until(next_beat) => {
                // Lets the clock expire an idle session, which closes its outbox and ends this stream.
                let _ = shared.lens.session(&org, &session.id);
            }
            _ = tx.closed() => return,
            _ = shared.shutdown.cancelled() => return,
        }
    }
}

/// Ends the body with an error, which makes hyper drop the connection without the chunked
/// terminator: the client sees a cut stream. hyper discards what it has not flushed when the
/// error comes, so the error waits until the frames before it were taken and written out (the
/// body is flushed whenever it has nothing more to give).
async fn cut(tx: &mpsc::Sender<Result<Bytes, std::io::Error>>) {
    let deadline = Instant::now() + std::time::Duration::from_secs(2);
    while tx.capacity() < tx.max_capacity() && Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let _ = tx.send(Err(std::io::Error::other("drop_streams"))).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_as_the_spec_gives_them() {
        let mut out = BytesMut::new();
        frame(&mut out, 7, r#"{"type":"inference.result"}"#);
        assert_eq!(&out[..], b"event: message\nid: 7\ndata: {\"type\":\"inference.result\"}\n\n");
        let mut out = BytesMut::new();
        frame(&mut out, 1, "a\r\nb\nc");
        assert_eq!(&out[..], b"event: message\nid: 1\ndata: a\ndata: b\ndata: c\n\n");
        let end = control(9, "sse.stream.end", serde_json::Value::Null);
        assert_eq!(&end[..], b"event: message\nid: 9\ndata: {\"type\":\"sse.stream.end\",\"event_data\":null}\n\n");
    }
}
