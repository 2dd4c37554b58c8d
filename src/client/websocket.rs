//! A lens session's WebSocket (`session_endpoint`): JSON requests `{type, event_data}`, one reply
//! each, in order. One task always reads, so pings are answered (tungstenite queues the pong and
//! flushes it on the next read) even while Python is idle, and every reply goes to the call that
//! is waiting for it: a message no call waits for (a late reply to a call that timed out, was
//! cancelled or interrupted, an unsolicited heartbeat answer) is dropped, never handed to the next
//! caller. Every message is redacted as it arrives: a key the server echoes (in a record, a
//! message's text, anywhere) reaches no reply, error or log. Closing does the close handshake,
//! waiting at most `CLOSE_WAIT` for the server's answer, and then closes the connection.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use parking_lot::Mutex;
use serde_json::Value;
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::endpoint::Surface;
use super::error::{seconds, truncate, ApiError, Error};
use super::proxy::Route;
use super::secret::ApiKey;
use super::transport::{error_chain, Transport};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

type Stream = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Where the credential goes (spec, Authentication 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential {
    /// `Authorization: Bearer <key>`.
    Header,
    /// `Sec-WebSocket-Protocol: authenticationauthorization.bearer.<key>, event-protocol-v1`, for
    /// deployments (proxies) that drop the header on upgrades.
    Subprotocol,
}

/// The reply a call waits for.
struct Pending {
    /// Which call this is, so a call that gives up clears its own wait and no other.
    call: u64,
    request_type: String,
    reply: oneshot::Sender<Value>,
}

/// What the reader and the callers share.
#[derive(Default)]
struct Mailbox {
    pending: Option<Pending>,
    /// The request types of calls that were sent and then abandoned (timed out, cancelled,
    /// interrupted) before their reply came, oldest first: their replies are still on the way,
    /// and each is dropped when it comes.
    owed: VecDeque<String>,
    calls: u64,
    /// Why the socket stopped, once it has.
    closed: Option<String>,
    /// The last message that came while a call waited and was not its reply (one that is not
    /// JSON, or answers another request), for the error of a call that then gets none.
    stray: Option<String>,
}

/// The longest `close` waits for the close handshake (the client's reply timeout, when
/// shorter): a server answers the close frame within a round trip, and one that never does
/// costs this rather than seconds more on leaving a `with` block.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// How much of a message that is not JSON an error quotes.
const QUOTED: usize = 200;

/// Why calls fail after `close()`.
const CLOSED_BY_CALLER: &str =
    "the session socket was closed by the caller (close()); connect again with client.lens.sessions.connect";

pub struct Socket {
    /// `None` once closed: dropping it with the reader's half closes the connection.
    sink: tokio::sync::Mutex<Option<SplitSink<Stream, Message>>>,
    /// One request in flight at a time: the protocol pairs replies with requests only by order.
    turn: tokio::sync::Mutex<()>,
    mailbox: Arc<Mutex<Mailbox>>,
    reader: Mutex<Option<JoinHandle<()>>>,
    reply_timeout: Duration,
}

/// Whether `message` answers a `request_type` request: `<type>.response`, or for
/// `session.status` the bare session record; an `error` message answers whatever was asked.
fn answers(request_type: &str, message: &Value) -> bool {
    match message.get("type").and_then(Value::as_str) {
        Some("error") => true,
        Some(kind) => kind.strip_suffix(".response") == Some(request_type),
        None => request_type == "session.status" && message.get("session_id").is_some(),
    }
}

fn reply_type(message: &Value) -> String {
    match message.get("type").and_then(Value::as_str) {
        Some(kind) => kind.strip_suffix(".response").unwrap_or(kind).to_string(),
        None => "session.status".to_string(),
    }
}

impl Mailbox {
    fn deliver(&mut self, message: Value) {
        // A reply owed to an abandoned call comes before the waiting call's, which was sent
        // later; an `error` names no request type, so it is taken as the oldest owed call's.
        if let Some(at) = self.owed.iter().position(|request_type| answers(request_type, &message)) {
            if let Some(request_type) = self.owed.remove(at) {
                log::debug!("dropped a late reply to an earlier {request_type} request");
            }
            return;
        }
        match self.pending.take() {
            Some(p) if answers(&p.request_type, &message) => {
                let _ = p.reply.send(message);
            }
            other => {
                let kind = reply_type(&message);
                self.dropped(other, format!("a {kind} reply"));
                log::debug!("dropped a session socket message no call waits for ({kind})");
            }
        }
    }

    /// A message that is not the `pending` call's reply was dropped; the call, if one waits,
    /// names it should its reply never come.
    fn dropped(&mut self, pending: Option<Pending>, what: String) {
        if pending.is_some() {
            self.stray = Some(what);
        }
        self.pending = pending;
    }

    /// The call `call` stopped waiting without its reply: the reply, still to come, is owed.
    fn abandon(&mut self, call: u64) {
        if self.pending.as_ref().is_some_and(|p| p.call == call) {
            if let Some(p) = self.pending.take() {
                self.owed.push_back(p.request_type);
            }
        }
    }
}

/// Records a sent call's reply as owed when the call ends without it, whichever way it ends: a
/// timeout, a cancelled awaitable or Ctrl-C (both drop the call's future). A call that got its
/// reply, or whose socket closed, has no wait left to clear.
struct Abandon<'a> {
    mailbox: &'a Mutex<Mailbox>,
    call: u64,
}

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        self.mailbox.lock().abandon(self.call);
    }
}

async fn read_all(mut stream: SplitStream<Stream>, mailbox: Arc<Mutex<Mailbox>>, key: ApiKey) {
    let reason = loop {
        match stream.next().await {
            Some(Ok(Message::Text(text))) => deliver(&mailbox, text.as_bytes(), &key),
            Some(Ok(Message::Binary(bytes))) => deliver(&mailbox, &bytes, &key),
            Some(Ok(Message::Close(frame))) => {
                break match frame {
                    Some(f) => format!("the server closed the session socket ({} {})", u16::from(f.code), f.reason),
                    None => "the server closed the session socket".to_string(),
                }
            }
            Some(Ok(_)) => {} // pings (answered by tungstenite), pongs
            Some(Err(e)) => break format!("the session socket broke: {e}"),
            None => break "the session socket closed".to_string(),
        }
    };
    let mut mailbox = mailbox.lock();
    // A close the caller started has its reason already: the server's close frame answers it.
    mailbox.closed.get_or_insert(reason);
    // The waiting call learns from its reply channel closing.
    mailbox.pending = None;
}

/// Hands a message, the key taken out of it wherever it sits, to the call it answers. One that
/// is not JSON answers none; it is logged as a warning (never valid on this protocol, and
/// possibly a server's error text).
fn deliver(mailbox: &Mutex<Mailbox>, bytes: &[u8], key: &ApiKey) {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(mut message) => {
            key.redact_value(&mut message);
            mailbox.lock().deliver(message)
        }
        Err(_) => {
            let text = key.redact_in(&String::from_utf8_lossy(bytes));
            let what = format!("a message that is not JSON: {:?}", truncate(&text, QUOTED));
            log::warn!("dropped {what}");
            let mut mailbox = mailbox.lock();
            let pending = mailbox.pending.take();
            mailbox.dropped(pending, what);
        }
    }
}

impl Socket {
    /// Opens `endpoint` (the session record's `session_endpoint`) with the client's key.
    pub async fn connect(transport: &Transport, endpoint: &str, credential: Credential) -> Result<Socket, Error> {
        // The endpoint comes from the session record (`GET /lens/sessions/info`).
        let bad_endpoint = |why: String| {
            let record = format!("{}/lens/sessions/info", Surface::Api.base(transport));
            Error::unexpected(&record, format!("session_endpoint {endpoint:?} {why}"), b"")
        };
        if !(endpoint.starts_with("ws://") || endpoint.starts_with("wss://")) {
            return Err(bad_endpoint("is not a ws:// or wss:// URL".into()));
        }
        // The key goes in the upgrade request: over ws:// in clear text, which a platform reached
        // over https:// (its record too) must not be made to do. The emulator's http:// is fine.
        if endpoint.starts_with("ws://") && transport.config.root.scheme() == "https" {
            return Err(bad_endpoint(
                "is plain ws:// while base_url is https://: the API key would travel unencrypted, so the socket \
                 was not opened (the platform's session endpoints are wss://)"
                    .into(),
            ));
        }
        let mut request = endpoint.into_client_request().map_err(|e| bad_endpoint(format!("is not usable: {e}")))?;
        let key = transport.config.api_key.expose();
        let (name, value) = match credential {
            Credential::Header => ("authorization", format!("Bearer {key}")),
            Credential::Subprotocol => {
                ("sec-websocket-protocol", format!("authenticationauthorization.bearer.{key}, event-protocol-v1"))
            }
        };
        let value = HeaderValue::from_str(&value)
            .map_err(|_| Error::invalid_argument("api_key", "contains characters not allowed in an HTTP header"))?;
        request.headers_mut().insert(name, value);
        // Through the proxy HTTP calls to that host would take (loopback never has one).
        let route = transport.proxies().route(endpoint);
        let target = match &route {
            Some(route) => format!("{endpoint} through {route}"),
            None => endpoint.to_string(),
        };
        let connect = async {
            let stream = match &route {
                Some(route) => {
                    let tunnel = through(route, request.uri()).await.map_err(|e| Error::Connection {
                        message: format!("connecting to the session socket {target}: {}", error_chain(&*e)),
                    })?;
                    tokio_tungstenite::client_async_tls(request, tunnel).await
                }
                None => tokio_tungstenite::connect_async(request).await,
            };
            stream.map_err(|e| handshake_error(endpoint, &target, e, &transport.config.api_key))
        };
        let (stream, _) = tokio::time::timeout(transport.config.timeouts.connect, connect)
            .await
            .map_err(|_| Error::Timeout { message: format!("connecting to the session socket {target}") })??;
        let (sink, stream) = stream.split();
        let mailbox = Arc::new(Mutex::new(Mailbox::default()));
        let reader = tokio::spawn(read_all(stream, mailbox.clone(), transport.config.api_key.clone()));
        Ok(Socket {
            sink: tokio::sync::Mutex::new(Some(sink)),
            turn: tokio::sync::Mutex::new(()),
            mailbox,
            reader: Mutex::new(Some(reader)),
            reply_timeout: transport.config.timeouts.total.unwrap_or(transport.config.timeouts.read),
        })
    }

    /// Sends `{type, event_data}` (`event_data` as JSON text, `None` for none) and returns the
    /// reply to it.
    pub async fn call(&self, request_type: &str, event_data: Option<&str>) -> Result<Value, Error> {
        let _turn = self.turn.lock().await;
        let kind = serde_json::to_string(request_type).unwrap_or_else(|_| "\"\"".into());
        let frame = format!("{{\"type\":{kind},\"event_data\":{}}}", event_data.unwrap_or("null"));
        let sending = |e: tokio_tungstenite::tungstenite::Error| Error::Connection {
            message: format!("sending {request_type} on the session socket: {e}"),
        };
        let (rx, _abandon) = {
            let mut sink = self.sink.lock().await;
            let Some(sink) = sink.as_mut() else {
                return Err(Error::Connection { message: self.closed_reason() });
            };
            std::future::poll_fn(|cx| sink.poll_ready_unpin(cx)).await.map_err(sending)?;
            // From here to `start_send` nothing waits, so a call dropped before it sent nothing
            // and owes nothing; once the frame is queued it goes out ahead of any later one,
            // even if this call is dropped before the flush.
            let (tx, rx) = oneshot::channel();
            let call = {
                let mut mailbox = self.mailbox.lock();
                if let Some(reason) = &mailbox.closed {
                    return Err(Error::Connection { message: reason.clone() });
                }
                mailbox.calls += 1;
                mailbox.stray = None;
                let call = mailbox.calls;
                mailbox.pending = Some(Pending { call, request_type: request_type.to_string(), reply: tx });
                call
            };
            if let Err(e) = sink.start_send_unpin(Message::Text(frame.into())) {
                self.mailbox.lock().pending = None;
                return Err(sending(e));
            }
            let abandon = Abandon { mailbox: &self.mailbox, call };
            sink.flush().await.map_err(sending)?;
            (rx, abandon)
        };
        match tokio::time::timeout(self.reply_timeout, rx).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(_)) => Err(Error::Connection { message: format!("no reply to {request_type}: {}", self.closed_reason()) }),
            // `_abandon` records the reply as owed.
            Err(_) => {
                let instead = match self.mailbox.lock().stray.take() {
                    Some(what) => format!("; what came instead: {what}"),
                    None => String::new(),
                };
                Err(Error::Timeout {
                    message: format!("no reply to {request_type} within {}{instead}", seconds(self.reply_timeout)),
                })
            }
        }
    }

    fn closed_reason(&self) -> String {
        self.mailbox.lock().closed.clone().unwrap_or_else(|| "the session socket was closed".into())
    }

    /// The close handshake (a close frame, then the server's, both within `CLOSE_WAIT` or the
    /// reply timeout if shorter), then the connection is closed: the reader's half ends with its
    /// task and the sink is dropped here, so no socket is left half-open (CLOSE-WAIT) for as long
    /// as Python keeps the object.
    pub async fn close(&self) {
        let deadline = tokio::time::Instant::now() + CLOSE_WAIT.min(self.reply_timeout);
        // Before the close frame goes, so the server's answering close is not taken as the
        // reason; a socket the server closed first keeps the server's reason.
        self.mailbox.lock().closed.get_or_insert_with(|| CLOSED_BY_CALLER.into());
        let sink = self.sink.lock().await.take();
        if let Some(mut sink) = sink {
            let _ = tokio::time::timeout_at(deadline, sink.send(Message::Close(None))).await;
        }
        let reader = self.reader.lock().take();
        if let Some(mut reader) = reader {
            if tokio::time::timeout_at(deadline, &mut reader).await.is_err() {
                reader.abort();
                // Returns once the task is gone, and its half of the connection with it.
                let _ = reader.await;
            }
        }
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        if let Some(reader) = self.reader.get_mut().take() {
            reader.abort();
        }
    }
}

/// A connection to `endpoint` through `route`'s proxy: an HTTP CONNECT tunnel or a SOCKS one, by
/// the connectors reqwest uses for its own requests (hyper-util's). TLS, for wss://, goes inside.
async fn through(route: &Route, endpoint: &http::Uri) -> Result<TcpStream, BoxError> {
    use hyper_util::client::legacy::connect::proxy::{SocksV4, SocksV5, Tunnel};
    use hyper_util::client::legacy::connect::HttpConnector;
    use tower::ServiceExt;

    let secure = endpoint.scheme_str() == Some("wss");
    let host = endpoint.host().ok_or("the session endpoint has no host")?;
    let port = endpoint.port_u16().unwrap_or(if secure { 443 } else { 80 });
    let destination: http::Uri = format!("http://{host}:{port}").parse()?;
    let mut connector = HttpConnector::new();
    // Its destination is the proxy, whose scheme is not http:// for SOCKS.
    connector.enforce_http(false);
    let proxy = route.uri.clone();
    let connected = match proxy.scheme_str() {
        Some(scheme @ ("socks5" | "socks5h")) => {
            let socks = SocksV5::new(proxy.clone(), connector).local_dns(scheme == "socks5");
            let socks = match route.socks_auth.clone() {
                Some((user, password)) => socks.with_auth(user, password),
                None => socks,
            };
            socks.oneshot(destination).await?
        }
        Some(scheme @ ("socks4" | "socks4a")) => {
            SocksV4::new(proxy.clone(), connector).local_dns(scheme == "socks4").oneshot(destination).await?
        }
        Some("http") => {
            let tunnel = Tunnel::new(proxy.clone(), connector);
            let tunnel = match route.basic_auth.clone() {
                Some(auth) => tunnel.with_auth(auth),
                None => tunnel,
            };
            tunnel.oneshot(destination).await?
        }
        _ => {
            return Err(format!(
                "the session socket cannot go through an {}:// proxy; give {} an http:// or socks5:// proxy, or \
                 add the host to NO_PROXY",
                proxy.scheme_str().unwrap_or_default(),
                route.variable
            )
            .into())
        }
    };
    Ok(connected.into_inner())
}

/// A refused upgrade as the error the HTTP status means (401, 404 `session_not_found`, ...);
/// any other failure names `target`, the endpoint and the proxy it went through.
fn handshake_error(endpoint: &str, target: &str, e: tokio_tungstenite::tungstenite::Error, key: &ApiKey) -> Error {
    use tokio_tungstenite::tungstenite::Error as WsError;
    match e {
        WsError::Http(response) => {
            let body = response.body().as_deref().map(String::from_utf8_lossy).unwrap_or_default();
            let raw = key.redact_in(&body);
            Error::Api(Box::new(ApiError::from_body(response.status().as_u16(), "GET", endpoint, raw, None)))
        }
        other => Error::Connection { message: key.redact_in(&format!("connecting to the session socket {target}: {other}")) },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::proxy::Proxies;
    use serde_json::json;

    fn waiting(mailbox: &mut Mailbox, request_type: &str) -> oneshot::Receiver<Value> {
        let (tx, rx) = oneshot::channel();
        mailbox.calls += 1;
        mailbox.pending = Some(Pending { call: mailbox.calls, request_type: request_type.into(), reply: tx });
        rx
    }

    #[tokio::test]
    async fn close_waits_for_a_server_that_never_answers_the_close_frame_no_longer_than_its_bound() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("ws://{}/v0.5/lens/sessions/lsn-1", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let _ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
            std::future::pending::<()>().await // holds the connection and never reads from it
        });
        let base = Some("http://127.0.0.1:9/v0.5".to_string());
        let config = crate::client::config::ClientConfig::resolve(Some("sk-test".into()), base, |_| None).unwrap();
        let transport = Transport::new(config).unwrap();
        let socket = Socket::connect(&transport, &endpoint, Credential::Header).await.unwrap();
        // From here the clock only moves when every task waits: the close's wait is measured
        // exactly, in the test's time, not the machine's.
        tokio::time::pause();
        let start = tokio::time::Instant::now();
        socket.close().await;
        // Tokio's timers fire on the millisecond after their deadline.
        let bound = CLOSE_WAIT.min(socket.reply_timeout) + Duration::from_millis(1);
        assert!(start.elapsed() <= bound, "{:?}", start.elapsed());
        assert!(socket.reader.lock().is_none() && socket.sink.lock().await.is_none());
    }

    fn transport(base: &str, proxies: &[(&str, String)]) -> Transport {
        let base = Some(base.to_string());
        let config = crate::client::config::ClientConfig::resolve(Some("sk-test".into()), base, |_| None).unwrap();
        let proxies: Vec<(String, String)> = proxies.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        let proxies =
            Proxies::from_variables(move |name| proxies.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()));
        Transport::with_proxies(config, proxies).unwrap()
    }

    /// A WebSocket server on 127.0.0.1 that accepts every upgrade and holds the connection.
    async fn socket_server() -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                tokio::spawn(async move {
                    if let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await {
                        while let Some(Ok(_)) = ws.next().await {}
                    }
                });
            }
        });
        port
    }

    /// A proxy on 127.0.0.1 that takes an HTTP CONNECT (`socks: false`) or a SOCKS5 request
    /// without authentication, and connects it to `127.0.0.1:target` whatever host it names; it
    /// sends what it was asked (the CONNECT head, or the host and port) on the channel.
    async fn proxy(target: u16, socks: bool) -> (u16, tokio::sync::mpsc::UnboundedReceiver<String>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    if socks {
                        let mut greeting = [0u8; 2];
                        client.read_exact(&mut greeting).await.unwrap();
                        client.read_exact(&mut vec![0u8; greeting[1] as usize]).await.unwrap();
                        client.write_all(&[5, 0]).await.unwrap();
                        let mut head = [0u8; 5]; // version, command, reserved, address type 3, length
                        client.read_exact(&mut head).await.unwrap();
                        let mut host = vec![0u8; head[4] as usize];
                        client.read_exact(&mut host).await.unwrap();
                        let port = client.read_u16().await.unwrap();
                        tx.send(format!("{}:{port}", String::from_utf8(host).unwrap())).unwrap();
                        client.write_all(&[5, 0, 0, 1, 0, 0, 0, 0, 0, 0]).await.unwrap();
                    } else {
                        let mut head = Vec::new();
                        while !head.ends_with(b"\r\n\r\n") {
                            head.push(client.read_u8().await.unwrap());
                        }
                        tx.send(String::from_utf8(head).unwrap()).unwrap();
                        client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.unwrap();
                    }
                    let mut upstream = tokio::net::TcpStream::connect(("127.0.0.1", target)).await.unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                });
            }
        });
        (port, rx)
    }

    #[tokio::test]
    async fn the_socket_goes_through_the_proxy_http_calls_to_its_host_take() {
        let server = socket_server().await;
        let endpoint = format!("ws://lens.invalid:{server}/v0.5/lens/sessions/lsn-1");

        let (port, mut asked) = proxy(server, false).await;
        let proxied = transport("http://platform.invalid", &[("HTTP_PROXY", format!("http://bob:hunter2@127.0.0.1:{port}"))]);
        let socket = Socket::connect(&proxied, &endpoint, Credential::Header).await.unwrap();
        let head = asked.recv().await.unwrap();
        assert!(head.starts_with(&format!("CONNECT lens.invalid:{server} HTTP/1.1\r\n")), "{head}");
        assert!(head.to_ascii_lowercase().contains("proxy-authorization: basic "), "{head}");
        socket.close().await;

        let (port, mut asked) = proxy(server, true).await;
        let proxied = transport("http://platform.invalid", &[("ALL_PROXY", format!("socks5h://127.0.0.1:{port}"))]);
        let socket = Socket::connect(&proxied, &endpoint, Credential::Header).await.unwrap();
        assert_eq!(asked.recv().await.unwrap(), format!("lens.invalid:{server}"));
        socket.close().await;

        // Loopback goes direct, the variable notwithstanding.
        let direct = format!("ws://127.0.0.1:{server}/v0.5/lens/sessions/lsn-1");
        Socket::connect(&proxied, &direct, Credential::Header).await.unwrap().close().await;
    }

    #[tokio::test]
    async fn a_socket_that_cannot_reach_its_proxy_names_it_without_its_credentials() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        for (variable, proxy) in [("HTTP_PROXY", "http"), ("ALL_PROXY", "socks5h")] {
            let proxied = transport("http://platform.invalid", &[(variable, format!("{proxy}://bob:hunter2@127.0.0.1:{port}"))]);
            let err = Socket::connect(&proxied, "ws://lens.invalid/s", Credential::Header).await.err().unwrap().to_string();
            assert!(err.contains(&format!("through the proxy {proxy}://127.0.0.1:{port} (from {variable})")), "{err}");
            assert!(!err.contains("hunter2"), "{err}");
        }
    }

    #[tokio::test]
    async fn a_clear_text_endpoint_is_refused_when_the_platform_is_https() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let endpoint = format!("ws://{}/v0.5/lens/sessions/lsn-1", listener.local_addr().unwrap());
        let err = Socket::connect(&transport("https://platform.invalid", &[]), &endpoint, Credential::Header).await;
        let err = err.err().unwrap().to_string();
        assert!(err.contains(&format!("session_endpoint {endpoint:?} is plain ws:// while base_url is https://")), "{err}");
        // Refused before connecting: nothing, and no key, reached the endpoint.
        assert_eq!(listener.accept().unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
    }

    #[test]
    fn each_reply_goes_to_the_call_that_asked() {
        let mut mailbox = Mailbox::default();
        let mut rx = waiting(&mut mailbox, "session.read");
        // A heartbeat answer nobody asked for must not become the read's reply; the read names
        // it should its own reply never come.
        mailbox.deliver(json!({"type": "session.heartbeat.response", "event_data": null}));
        assert!(rx.try_recv().is_err());
        assert_eq!(mailbox.stray.as_deref(), Some("a session.heartbeat reply"));
        mailbox.deliver(json!({"type": "session.read.response", "event_data": null}));
        assert_eq!(rx.try_recv().unwrap()["type"], "session.read.response");

        let mut rx = waiting(&mut mailbox, "session.status");
        mailbox.deliver(json!({"session_id": "lsn-1", "session_status": "3"}));
        assert_eq!(rx.try_recv().unwrap()["session_id"], "lsn-1");
    }

    #[test]
    fn a_late_reply_is_dropped_not_handed_to_the_next_call() {
        let mut mailbox = Mailbox::default();
        waiting(&mut mailbox, "model.query");
        mailbox.abandon(mailbox.calls);
        let mut rx = waiting(&mut mailbox, "model.query");
        mailbox.deliver(json!({"type": "model.query.response", "event_data": {"result": "late"}}));
        assert!(rx.try_recv().is_err());
        mailbox.deliver(json!({"type": "model.query.response", "event_data": {"result": "mine"}}));
        assert_eq!(rx.try_recv().unwrap()["event_data"]["result"], "mine");
    }

    #[test]
    fn a_late_error_is_the_abandoned_calls_not_the_next_ones() {
        let mut mailbox = Mailbox::default();
        waiting(&mut mailbox, "model.query");
        mailbox.abandon(mailbox.calls);
        let mut rx = waiting(&mut mailbox, "session.validate");
        mailbox.deliver(json!({"type": "error", "event_data": {"error_messages": ["late"]}}));
        assert!(rx.try_recv().is_err());
        assert!(mailbox.owed.is_empty());
        mailbox.deliver(json!({"type": "error", "event_data": {"error_messages": ["mine"]}}));
        assert_eq!(rx.try_recv().unwrap()["event_data"]["error_messages"][0], "mine");
    }

    #[test]
    fn a_call_abandons_only_its_own_wait() {
        let mut mailbox = Mailbox::default();
        let mut rx = waiting(&mut mailbox, "session.read");
        mailbox.abandon(mailbox.calls - 1);
        assert!(mailbox.owed.is_empty());
        mailbox.deliver(json!({"type": "session.read.response", "event_data": null}));
        assert_eq!(rx.try_recv().unwrap()["type"], "session.read.response");
        // Answered: nothing is owed when the call then ends.
        mailbox.abandon(mailbox.calls);
        assert!(mailbox.owed.is_empty());
    }
}
