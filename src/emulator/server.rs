//! The accept loop. axum's `serve` owns its sockets, so a fault could not reset a connection or
//! cut a body mid-way; here each connection keeps a second descriptor of its socket, and a
//! fault takes the socket over from hyper to reset it (SO_LINGER 0), or to write a partial
//! response by hand. Every request outside `/_emulator` is recorded and checked against the
//! fault rules here, before the router sees it.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderValue};
use axum::response::IntoResponse;
use axum::Router;
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use super::auth;
use super::faults::FaultAction;
use super::public_origin;
use super::recorder::{
    attempt_from_header, redact_header, redact_keys, redact_keys_in_text, redact_keys_in_url_part, RecordedRequest,
    BODY_CAPTURE_LIMIT,
};
use super::state::Shared;

/// Marks every answer as the emulator's, so it is never mistaken for the hosted service.
const SERVER_HEADER: &str = "sensorium-emulator";

pub(crate) async fn serve(listener: TcpListener, app: Router, shared: Arc<Shared>) {
    let token = shared.shutdown.clone();
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = token.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(connection(stream, app.clone(), shared.clone()));
                }
                Err(e) => {
                    // Usually out of descriptors: back off instead of spinning.
                    log::debug!("sensorium emulator: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    // Dropping each connection task closes its socket, stalled ones included.
    connections.shutdown().await;
}

/// What a fault does with the socket once hyper has let go of it.
enum Takeover {
    Reset,
    /// Write these bytes; then hold the connection silent (stall) or close it (truncate).
    Write { bytes: Bytes, hold: bool },
}

async fn connection(stream: TcpStream, app: Router, shared: Arc<Shared>) {
    let _ = stream.set_nodelay(true);
    let raw = match socket2::SockRef::from(&stream).try_clone() {
        Ok(socket) => socket,
        Err(e) => {
            log::debug!("sensorium emulator: could not duplicate a socket: {e}");
            return;
        }
    };
    let token = shared.shutdown.clone();
    let mut close_idle = shared.close_idle.subscribe();
    let (tx, mut rx) = mpsc::channel::<Takeover>(1);
    let service = hyper::service::service_fn(move |req| handle(req, app.clone(), shared.clone(), tx.clone()));
    let outcome = {
        // Upgrades: the lens WebSocket protocol takes the connection over from HTTP.
        let conn = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).with_upgrades();
        tokio::pin!(conn);
        loop {
            tokio::select! {
                _ = conn.as_mut() => break None,
                t = rx.recv() => break t,
                _ = token.cancelled() => break None,
                // Closes the connection now if it is between requests, or after the answer in
                // flight (no `Connection: close` on an idle one: a client learns by the FIN).
                Ok(()) = close_idle.changed() => conn.as_mut().graceful_shutdown(),
            }
        }
        // hyper's half of the socket is closed here; `raw` keeps the socket itself open.
    };
    if let Some(t) = outcome {
        takeover(t, raw, token).await;
    }
}

async fn takeover(t: Takeover, raw: socket2::Socket, token: CancellationToken) {
    match t {
        Takeover::Reset => {
            // Closing the last descriptor with a zero linger sends RST instead of FIN.
            let _ = raw.set_linger(Some(Duration::ZERO));
            drop(raw);
        }
        Takeover::Write { bytes, hold } => {
            let std_stream: std::net::TcpStream = raw.into();
            if std_stream.set_nonblocking(true).is_err() {
                return;
            }
            let Ok(mut stream) = TcpStream::from_std(std_stream) else { return };
            if stream.write_all(&bytes).await.is_err() {
                return;
            }
            let _ = stream.flush().await;
            if hold {
                // Silent until the client gives up or the emulator stops.
                let mut sink = [0u8; 1024];
                loop {
                    tokio::select! {
                        _ = token.cancelled() => break,
                        n = stream.read(&mut sink) => match n {
                            Ok(0) | Err(_) => break,
                            Ok(_) => continue,
                        },
                    }
                }
            } else {
                let _ = stream.shutdown().await;
            }
        }
    }
}

/// The request body as read: its length, and its first MiB when it is JSON.
struct Capture {
    len: u64,
    json: Option<BytesMut>,
}

impl Capture {
    fn push(&mut self, data: &Bytes) {
        self.len += data.len() as u64;
        if let Some(buf) = self.json.as_mut() {
            let room = BODY_CAPTURE_LIMIT.saturating_sub(buf.len());
            buf.extend_from_slice(&data[..data.len().min(room)]);
        }
    }
}

async fn call(app: Router, req: Request<Body>) -> Response<Body> {
    let origin = public_origin::of_request(req.headers());
    match public_origin::within(origin, app.oneshot(req)).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

fn mark(mut response: Response<Body>) -> Response<Body> {
    response.headers_mut().insert(header::SERVER, HeaderValue::from_static(SERVER_HEADER));
    response
}

async fn drain(body: Body) {
    let _ = body.collect().await;
}

/// How long the caller's organization must wait, when `Emulator(rate_limit=...)` is on and its
/// budget is spent. Unauthenticated requests are not counted: they get their 401 regardless.
fn rate_limited(shared: &Shared, org: Option<&str>) -> Option<Duration> {
    shared.rate_limit.as_ref()?.check(org?).err()
}

/// The 429 of the rate limit, with the wait as `Retry-After` (whole seconds) and
/// `retry-after-ms`, both rounded up so a client that honours either is admitted on its next
/// attempt rather than a hair too early.
fn rate_limit_error(wait: Duration) -> super::api_error::ApiError {
    super::api_error::ApiError::new(
        axum::http::StatusCode::TOO_MANY_REQUESTS,
        "rate_limit_exceeded",
        format!("Rate limit exceeded: retry in {} ms.", wait.as_nanos().div_ceil(1_000_000)),
    )
    .with_retry_after(Some(wait))
}

/// Status line and headers of `parts` with the full body length, as hyper would have sent them.
/// The status line and headers of `parts` as written on the wire, the body framed by
/// `content_length` or, without one, chunked.
fn head_bytes(parts: &axum::http::response::Parts, content_length: Option<usize>) -> BytesMut {
    let mut out = BytesMut::new();
    let reason = parts.status.canonical_reason().unwrap_or("");
    out.extend_from_slice(format!("HTTP/1.1 {} {reason}\r\n", parts.status.as_u16()).as_bytes());
    for (name, value) in &parts.headers {
        if name == header::CONTENT_LENGTH || name == header::TRANSFER_ENCODING || name == header::CONNECTION {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    match content_length {
        Some(length) => out.extend_from_slice(format!("content-length: {length}\r\n\r\n").as_bytes()),
        None => out.extend_from_slice(b"transfer-encoding: chunked\r\n\r\n"),
    }
    out
}

/// The first non-empty data frame of `body` (empty if it ends or fails first).
async fn first_data(body: &mut Body) -> Bytes {
    while let Some(Ok(frame)) = body.frame().await {
        if let Ok(data) = frame.into_data() {
            if !data.is_empty() {
                return data;
            }
        }
    }
    Bytes::new()
}

async fn handle(
    req: Request<Incoming>,
    app: Router,
    shared: Arc<Shared>,
    takeover: mpsc::Sender<Takeover>,
) -> Result<Response<Body>, Infallible> {
    let path = req.uri().path().to_string();
    // The control surface is neither recorded nor faulted: tests must always reach it.
    if path == "/_emulator" || path.starts_with("/_emulator/") {
        return Ok(mark(call(app, req.map(Body::new)).await));
    }
    let method = req.method().as_str().to_string();
    // Wherever a client puts a key (an `X-Api-Key` header, `?api_key=`, a body), the log keeps
    // `<redacted>` instead: tests print these records, and CI keeps what tests print.
    let keys = shared.issued_keys();
    let query = redact_keys_in_url_part(req.uri().query().unwrap_or(""), &keys, true);
    let headers: Vec<(String, String)> = req
        .headers()
        .iter()
        .map(|(name, value)| {
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            (name.as_str().to_string(), redact_keys_in_text(&redact_header(name.as_str(), &value), &keys))
        })
        .collect();
    let recorded_path = redact_keys_in_url_part(&path, &keys, false);
    let attempt = attempt_from_header(
        req.headers().get("x-sensorium-retry-count").and_then(|v| v.to_str().ok()),
    );
    let org = auth::org_of(&shared, req.headers());
    let is_json = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.to_ascii_lowercase().contains("json"));
    let capture = Arc::new(Mutex::new(Capture { len: 0, json: is_json.then(BytesMut::new) }));
    let counted = capture.clone();
    let req = req.map(move |body| {
        Body::new(body.map_frame(move |frame| {
            if let Some(data) = frame.data_ref() {
                counted.lock().push(data);
            }
            frame
        }))
    });
    let record = |status: u16| {
        let c = capture.lock();
        RecordedRequest {
            method: method.clone(),
            path: recorded_path.clone(),
            query: query.clone(),
            headers: headers.clone(),
            attempt,
            org: org.clone(),
            body: c.json.as_ref().map(|b| redact_keys(b, &keys)),
            body_len: c.len,
            status,
        }
    };

    let Some(fault) = shared.faults.take(&method, &path) else {
        if let Some(wait) = rate_limited(&shared, org.as_deref()) {
            drain(req.into_body()).await;
            shared.recorder.push(record(429));
            return Ok(mark(rate_limit_error(wait).into_response()));
        }
        let response = mark(call(app, req).await);
        shared.recorder.push(record(response.status().as_u16()));
        return Ok(response);
    };
    if let Some(delay) = fault.delay {
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = shared.shutdown.cancelled() => {}
        }
    }
    // Faulted requests are still read whole, so the client has finished sending (and sees the
    // fault, not a broken pipe) and the record holds the body a retry test compares.
    if fault.action == Some(FaultAction::Reset) {
        drain(req.into_body()).await;
        shared.recorder.push(record(0));
        let _ = takeover.send(Takeover::Reset).await;
        return std::future::pending().await;
    }
    let response = match fault.status {
        Some(status) => {
            drain(req.into_body()).await;
            mark(fault.status_error(status).into_response())
        }
        None => mark(call(app, req).await),
    };
    let status = response.status().as_u16();
    let hold = match fault.action {
        Some(FaultAction::Stall) => true,
        Some(FaultAction::Truncate) => false,
        _ => {
            shared.recorder.push(record(status));
            return Ok(response);
        }
    };
    let (parts, mut body) = response.into_parts();
    let bytes = if hyper::body::Body::size_hint(&body).exact().is_some() {
        // A cut response is buffered to know its length; faults target small test responses.
        let full = body.collect().await.map(|c| c.to_bytes()).unwrap_or_default();
        let mut bytes = head_bytes(&parts, Some(full.len()));
        bytes.extend_from_slice(&full[..full.len() / 2]);
        bytes
    } else {
        // An open-ended body (an SSE stream) never ends to be halved: its first chunk is
        // announced whole and half of it sent.
        let first = tokio::select! {
            first = first_data(&mut body) => first,
            _ = shared.shutdown.cancelled() => Bytes::new(),
        };
        let mut bytes = head_bytes(&parts, None);
        if !first.is_empty() {
            bytes.extend_from_slice(format!("{:x}\r\n", first.len()).as_bytes());
            bytes.extend_from_slice(&first[..first.len() / 2]);
        }
        bytes
    };
    shared.recorder.push(record(status));
    let _ = takeover.send(Takeover::Write { bytes: bytes.freeze(), hold }).await;
    std::future::pending().await
}
