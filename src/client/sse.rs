//! A lens session's SSE stream (`GET /lens/sessions/consumer/{session_id}`) as a lossless feed of
//! events: the framing is the SSE standard's (parsed by `eventsource-stream2`: CR, LF and CRLF,
//! a CRLF split across chunks, multi-line `data`, comments, `retry`); on a dropped or stalled
//! connection the feed reconnects with `Last-Event-ID` set to the last event it read, with
//! backoff and a bounded number of attempts, so the caller sees every event once; where that
//! cannot be kept (events without ids, an id no header can carry) it fails rather than repeat or
//! lose events. It ends on `sse.stream.end`. A 200 answer that is not an event stream fails at
//! once, and so does an event past `MAX_EVENT_BYTES`. Events go out in batches, so handing them
//! to Python costs one channel hop per batch rather than per event.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use eventsource_stream2::{Event, EventStream};
use futures_util::{FutureExt, Stream, StreamExt};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

use super::endpoint::Surface;
use super::error::{seconds, truncate, Error};
use super::secret::ApiKey;
use super::transport::{error_chain, Call, Transport};

/// The frame types that are the protocol's, not the lens's output.
pub const STREAM_START: &str = "sse.stream.start";
pub const STREAM_HEARTBEAT: &str = "sse.stream.heartbeat";
pub const STREAM_END: &str = "sse.stream.end";

/// Reconnects in a row without receiving an event before the feed gives up. The count starts
/// over whenever an event is handed out (not the start frame or a hidden heartbeat), so a long
/// stream that drops now and then never runs out. Each reconnect's connect is itself retried by
/// the client's retry rule, so with the defaults a stream rides out about 30 s without a server.
/// A client with `max_retries=0` asked for no retries: its stream only resumes once, at once,
/// after a connection that delivered events (`reconnects_allowed`).
pub const MAX_RECONNECTS: u32 = 8;

/// How many reconnects in a row `transport`'s streams make: `MAX_RECONNECTS`, or for a client
/// that retries nothing the one resume that a dropped connection's events earn (a resume is not
/// a retry of anything that failed, and costs nothing when the server is there).
fn reconnects_allowed(transport: &Transport) -> u32 {
    if transport.config.retry.max_retries == 0 {
        1
    } else {
        MAX_RECONNECTS
    }
}

/// Events per batch handed to the reader: large enough that the channel hop is amortised, small
/// enough that a slow reader holds little.
const BATCH: usize = 512;

/// The parser copies what follows each line it consumes; feeding it network chunks of 64 KiB
/// made that quadratic. Slices of this size (views, no copy) keep each line's cost small.
const PARSE_SLICE: usize = 2048;

/// The most bytes the parser may hold for one event (its lines, and whatever comes between two
/// events), as the session socket bounds a message at 16 MiB: a line that never ends would
/// otherwise grow the client's memory without bound. A stream that passes it fails.
pub const MAX_EVENT_BYTES: usize = 16 << 20;

/// How much of a 200 answer that is not an event stream its error keeps (`body`) and quotes.
const KEPT: usize = 4096;
const QUOTED: usize = 200;

/// One event of the stream: its `id` (the resume cursor), `type`, and the JSON texts of its
/// `event_data` and of the whole `data` object. A frame whose data is not a JSON object is kept
/// (never dropped): its type is the SSE event name and `data` the raw text.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamEvent {
    pub id: String,
    pub kind: String,
    /// Where `event_data` sits inside `data` (no copy of its own: one allocation less per event).
    event_data_at: Option<std::ops::Range<usize>>,
    pub data: String,
}

impl StreamEvent {
    /// An event from its id, type and `data` text (how a pickled event comes back): `event_data`
    /// is found in `data` again.
    pub fn from_parts(id: String, kind: String, data: String) -> StreamEvent {
        let event_data_at = frame_of(&data).ok().and_then(|(_, at)| at);
        StreamEvent { id, kind, event_data_at, data }
    }

    /// The JSON text of `event_data`, when the frame has one.
    pub fn event_data(&self) -> Option<&str> {
        self.event_data_at.clone().and_then(|range| self.data.get(range))
    }
}

#[derive(Debug, Clone, Default)]
pub struct StreamOptions {
    /// Resume after this event (a later process continuing a stream).
    pub last_event_id: Option<String>,
    /// Hand heartbeats to the caller too (they are hidden by default).
    pub heartbeats: bool,
}

/// How one connection's events are read and handed out.
struct Reading<'a> {
    /// Hand heartbeats out too (`StreamOptions::heartbeats`).
    heartbeats: bool,
    /// The key to take out of every event's data, should the server echo it, as HTTP answers
    /// and socket messages have it taken out on arrival (`pump` gives the transport's).
    redact: Option<&'a ApiKey>,
    /// How long the connection may send nothing before it counts as lost.
    stall: Duration,
}

/// What the feed sends its reader: a batch of events, or the error that ended it. The channel
/// closing after a batch means the stream ended normally.
pub type Feed = Result<Vec<StreamEvent>, Error>;

#[derive(Deserialize)]
struct Frame<'a> {
    /// Raw, so that a `type` that is not a string (`5`) costs only the type, not `event_data`.
    #[serde(rename = "type", borrow)]
    kind: Option<&'a RawValue>,
    #[serde(borrow)]
    event_data: Option<&'a RawValue>,
}

/// The `type` of a frame's `data` object (when it is a string), and where its `event_data` sits
/// in `data`.
fn frame_of(data: &str) -> Result<(Option<String>, Option<std::ops::Range<usize>>), serde_json::Error> {
    serde_json::from_str::<Frame<'_>>(data).map(|frame| {
        let base = data.as_ptr() as usize;
        // A borrowed RawValue is a slice of `data`, so its offset is a pointer difference.
        let at = frame.event_data.and_then(|raw| {
            let start = (raw.get().as_ptr() as usize).checked_sub(base)?;
            Some(start..start + raw.get().len())
        });
        let kind = frame.kind.and_then(|raw| serde_json::from_str::<String>(raw.get()).ok());
        (kind, at)
    })
}

fn to_event(event: Event) -> StreamEvent {
    match frame_of(&event.data) {
        Ok((kind, event_data_at)) => {
            StreamEvent { id: event.id, kind: kind.unwrap_or(event.event), event_data_at, data: event.data }
        }
        Err(_) => StreamEvent { id: event.id, kind: event.event, event_data_at: None, data: event.data },
    }
}

/// How one connection ended.
enum Ended {
    /// `sse.stream.end` arrived: the stream is over.
    Graceful,
    /// The connection closed, broke or stalled; `received` says whether it handed out an event
    /// first (the protocol's own frames and a replayed event do not count).
    Lost { reason: String, received: bool },
    /// The reader went away.
    Abandoned,
    /// The body cannot be read as a stream (an event past `MAX_EVENT_BYTES`); reconnecting would
    /// meet it again.
    Unreadable { message: String },
}

/// The bytes handed to the parser since it last gave out an event: what it holds for the event
/// being read. `frames` adds each slice it feeds and stops feeding past `MAX_EVENT_BYTES`;
/// `read` starts it over at each event.
#[derive(Clone, Default)]
struct Held(Arc<AtomicUsize>);

impl Held {
    /// Counts `n` more bytes; whether the total is still within the limit.
    fn add(&self, n: usize) -> bool {
        self.0.fetch_add(n, Ordering::Relaxed).saturating_add(n) <= MAX_EVENT_BYTES
    }

    fn over(&self) -> bool {
        self.0.load(Ordering::Relaxed) > MAX_EVENT_BYTES
    }

    fn clear(&self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

/// Reads the stream at `path` (under the API base) into `tx` until it ends, the reader hangs
/// up, or reconnecting fails `MAX_RECONNECTS` times in a row. Meant to be spawned; the caller
/// drops the receiver to stop it.
pub async fn pump(transport: &Transport, path: &str, options: StreamOptions, tx: mpsc::Sender<Feed>) {
    let reading = Reading {
        heartbeats: options.heartbeats,
        redact: Some(&transport.config.api_key),
        stall: transport.config.timeouts.read,
    };
    let url = format!("{}{}", Surface::Api.base(transport), path);
    let mut last_id = options.last_event_id.clone();
    let mut server_retry: Option<Duration> = None;
    let mut failures: u32 = 0;
    let allowed = reconnects_allowed(transport);
    loop {
        let mut call = Call::get(url.clone());
        call.streaming = true;
        call.headers.push(("accept", "text/event-stream".to_string()));
        if let Some(id) = &last_id {
            call.headers.push(("last-event-id", id.clone()));
        }
        // The transport applies the retry rule to the connect itself (429, 5xx, refused).
        let ended = match transport.execute(&call, |response| async move { Ok(response) }).await {
            Ok(response) => match foreign_content_type(&response) {
                // A proxy's page or an error sent with 200 is no stream, and will not become one
                // by reconnecting.
                Some(content_type) => {
                    let _ = tx.send(Err(not_a_stream(transport, &url, &content_type, response).await)).await;
                    return;
                }
                None => {
                    let held = Held::default();
                    let events = frames(response.bytes_stream(), held.clone());
                    read(events, &held, &reading, &mut last_id, &mut server_retry, &tx).await
                }
            },
            // A 4xx (unknown session, bad key) will not change by reconnecting.
            Err(e) if !e.is_retryable() => {
                let _ = tx.send(Err(e)).await;
                return;
            }
            Err(e) => Ended::Lost { reason: e.to_string(), received: false },
        };
        match ended {
            Ended::Graceful | Ended::Abandoned => return,
            Ended::Unreadable { message } => {
                let _ = tx.send(Err(Error::unexpected(&url, message, b""))).await;
                return;
            }
            Ended::Lost { reason, received } => {
                if let Some(message) = unresumable(last_id.as_deref(), received, &reason) {
                    let _ = tx.send(Err(Error::Connection { message })).await;
                    return;
                }
                failures = if received { 1 } else { failures + 1 };
                if failures > allowed {
                    // With no event id yet there is no place to resume from, only the start.
                    let resume = match &last_id {
                        Some(id) => format!("resume later with last_event_id={id:?}"),
                        None => "no event came, so start the stream again from the beginning \
                                 (without last_event_id)"
                            .to_string(),
                    };
                    let message = if transport.config.retry.max_retries == 0 {
                        format!(
                            "the event stream was lost and, the client having max_retries=0, is not reconnected \
                             to again (last: {reason}); {resume}"
                        )
                    } else {
                        format!(
                            "the event stream was lost and {allowed} reconnects in a row brought no event \
                             (last: {reason}); {resume}"
                        )
                    };
                    let _ = tx.send(Err(Error::Connection { message })).await;
                    return;
                }
                log::debug!("event stream lost ({reason}); reconnecting after {:?}", last_id);
                // A connection that delivered events and then dropped is resumed at once (or
                // after the server's `retry`, capped as a Retry-After is: a `retry` of ten days
                // would park the stream); only reconnects that bring nothing back off.
                let wait = match (server_retry, failures) {
                    (Some(retry), 1) => retry.min(transport.config.retry.max_retry_after),
                    (None, 1) => Duration::ZERO,
                    _ => transport.config.retry.delay(failures - 1, None),
                };
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// Why a stream lost for `reason` cannot be resumed without losing or repeating events, if it
/// cannot: events without ids were handed out (`received`) and there is no id to resume after,
/// so reconnecting would start the stream over and hand them out again; or the last id cannot
/// be sent back (a `Last-Event-ID` header cannot carry control characters; non-ASCII goes as
/// UTF-8, as the HTML standard's EventSource sends it).
fn unresumable(last_id: Option<&str>, received: bool, reason: &str) -> Option<String> {
    match last_id {
        None if received => Some(format!(
            "the event stream was lost ({reason}) after handing out events that carry no id: with no id to resume \
             after (Last-Event-ID), reconnecting would start the stream over and hand them out again, so it is not \
             resumed; open the stream again to read it from the beginning"
        )),
        Some(id) if reqwest::header::HeaderValue::from_str(id).is_err() => Some(format!(
            "the event stream was lost ({reason}) and cannot be resumed: the last event's id {id:?} holds a control \
             character, which the Last-Event-ID header cannot carry"
        )),
        _ => None,
    }
}

/// The Content-Type of an answer to the stream when it has one that is not `text/event-stream`
/// (parameters such as `; charset=utf-8` aside). An answer without one is read as an event
/// stream: the request asked for one (`Accept`), and a proxy that drops the header should not
/// break a stream that is fine.
fn foreign_content_type(response: &reqwest::Response) -> Option<String> {
    let value = response.headers().get(reqwest::header::CONTENT_TYPE)?;
    let text = String::from_utf8_lossy(value.as_bytes());
    let media_type = text.split(';').next().unwrap_or_default().trim();
    (!media_type.eq_ignore_ascii_case("text/event-stream")).then(|| text.into_owned())
}

/// The error for a 200 answer of `content_type` that is not an event stream (a proxy's sign-in
/// page, an error sent with 200): it names the type and quotes the start of the body, of which
/// it reads about `KEPT` bytes, each read within the stall timeout, with the key taken out.
async fn not_a_stream(transport: &Transport, url: &str, content_type: &str, mut response: reqwest::Response) -> Error {
    let mut head = Vec::new();
    let mut whole = false;
    while head.len() < KEPT {
        match tokio::time::timeout(transport.config.timeouts.read, response.chunk()).await {
            Ok(Ok(Some(chunk))) => head.extend_from_slice(&chunk),
            Ok(Ok(None)) => {
                whole = true;
                break;
            }
            _ => break,
        }
    }
    let key = &transport.config.api_key;
    let mut text = key.redact_in(&String::from_utf8_lossy(&head));
    if !whole {
        // A key cut where the reading stopped is not found whole: its start goes too.
        let secret = key.expose();
        let cut_at_end = |n: usize| secret.get(..n).is_some_and(|start| text.ends_with(start));
        if let Some(cut) = (1..secret.len()).rev().find(|&n| cut_at_end(n)) {
            text.truncate(text.len() - cut);
        }
    }
    let body = truncate(&text, KEPT);
    let message = format!(
        "the event stream was answered with Content-Type {content_type}, not text/event-stream (a proxy's page, or \
         an error sent with status 200?): {}",
        truncate(body.trim(), QUOTED)
    );
    Error::unexpected(url, message, body.as_bytes())
}

/// The events of one connection's body, parsed by `eventsource-stream2` from views of at most
/// `PARSE_SLICE` bytes. A chunk that ends in CR is followed by an LF of our own, and an LF that
/// then opens the next chunk is dropped: the parser keeps a final CR back until the next byte
/// shows whether it is a CRLF, so a CR-framed event would wait for the server's next bytes (and
/// the last one, `sse.stream.end` included, would never come when the body ends there). A CR
/// ends the line either way; only whether an LF after it is the same line end was open, and
/// that is settled here as the standard's CRLF rule settles it. Each slice fed is counted in
/// `held`; past `MAX_EVENT_BYTES` the body ends there for the parser (`read` tells why).
fn frames<S, E>(chunks: S, held: Held) -> EventStream<impl Stream<Item = Result<Bytes, E>> + Unpin>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
{
    let mut after_cr = false;
    let sliced = chunks.flat_map(move |chunk| match chunk {
        Ok(mut chunk) => {
            if !chunk.is_empty() {
                if after_cr && chunk[0] == b'\n' {
                    chunk = chunk.slice(1..);
                }
                after_cr = chunk.last() == Some(&b'\r');
            }
            let mut parts = slices(chunk);
            if after_cr && !parts.is_empty() {
                parts.push(Bytes::from_static(b"\n"));
            }
            futures_util::stream::iter(parts.into_iter().map(Ok)).left_stream()
        }
        Err(e) => futures_util::stream::iter(vec![Err(e)]).right_stream(),
    });
    EventStream::new(sliced.take_while(move |part| {
        futures_util::future::ready(part.as_ref().map_or(true, |slice| held.add(slice.len())))
    }))
}

/// `chunk` as views of at most `PARSE_SLICE` bytes.
fn slices(chunk: Bytes) -> Vec<Bytes> {
    (0..chunk.len()).step_by(PARSE_SLICE).map(|at| chunk.slice(at..(at + PARSE_SLICE).min(chunk.len()))).collect()
}

async fn read<S, E>(
    mut events: EventStream<S>,
    held: &Held,
    reading: &Reading<'_>,
    last_id: &mut Option<String>,
    server_retry: &mut Option<Duration>,
    tx: &mpsc::Sender<Feed>,
) -> Ended
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::error::Error,
{
    let mut received = false;
    // The Last-Event-ID this connection was opened with, until its first frame with an id. Ids
    // are optional (SSE standard: the last one carries forward to frames without one), so only
    // a frame at the head of a resumed connection whose id is the one sent is a replay, the
    // event the stream resumed after; a later frame with the same id is a new event.
    let mut resumed_after = last_id.clone();
    loop {
        let first = match tokio::time::timeout(reading.stall, events.next()).await {
            Err(_) => return Ended::Lost { reason: format!("no data for {}", seconds(reading.stall)), received },
            Ok(next) => next,
        };
        let mut batch = Vec::new();
        let mut next = first;
        let mut ended = None;
        // Everything already parsed goes out in one batch.
        loop {
            match next {
                None if held.over() => {
                    let after = match last_id {
                        Some(id) => format!("after event {id}"),
                        None => "before any event id".to_string(),
                    };
                    let message = format!(
                        "an event of the stream is larger than {} MiB ({after}); the stream is not read further",
                        MAX_EVENT_BYTES >> 20
                    );
                    ended = Some(Ended::Unreadable { message });
                    break;
                }
                None => {
                    ended = Some(Ended::Lost { reason: "the server closed the stream".into(), received });
                    break;
                }
                Some(Err(e)) => {
                    let reason = match (e.as_utf8(), e.as_transport()) {
                        (_, Some(cause)) => format!("the connection broke: {}", error_chain(cause)),
                        _ => "the stream is not UTF-8".to_string(),
                    };
                    ended = Some(Ended::Lost { reason, received });
                    break;
                }
                Some(Ok(event)) => {
                    held.clear();
                    if let Some(retry) = event.retry {
                        *server_retry = Some(retry);
                    }
                    let mut event = to_event(event);
                    if let Some(key) = reading.redact.filter(|key| key.appears_in(&event.data)) {
                        event = StreamEvent::from_parts(event.id, event.kind, key.redact_in(&event.data));
                    }
                    let repeated = if event.id.is_empty() {
                        // Before this connection's first id, the id carried forward is the one
                        // it resumed after (the parser starts each connection empty).
                        if let Some(after) = &resumed_after {
                            event.id = after.clone();
                        }
                        false
                    } else {
                        let replayed = resumed_after.take().is_some_and(|after| after == event.id);
                        *last_id = Some(event.id.clone());
                        replayed
                    };
                    if event.kind == STREAM_END {
                        ended = Some(Ended::Graceful);
                        break;
                    }
                    let hidden = event.kind == STREAM_START || (event.kind == STREAM_HEARTBEAT && !reading.heartbeats);
                    if !repeated && !hidden {
                        // Only an event handed out is progress: a server that sends its start
                        // frame (or heartbeats) and closes must run out the reconnects, with
                        // backoff, rather than be reconnected to at once for ever.
                        received = true;
                        batch.push(event);
                    }
                }
            }
            if batch.len() >= BATCH {
                break;
            }
            match events.next().now_or_never() {
                Some(more) => next = more,
                None => break,
            }
        }
        if !batch.is_empty() && tx.send(Ok(batch)).await.is_err() {
            return Ended::Abandoned;
        }
        if let Some(ended) = ended {
            return ended;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::config::ClientConfig;

    /// `read` of one connection's `body`.
    async fn read_body<S>(
        body: S,
        options: &StreamOptions,
        last: &mut Option<String>,
        retry: &mut Option<Duration>,
        tx: &mpsc::Sender<Feed>,
    ) -> Ended
    where
        S: Stream<Item = Result<Bytes, std::io::Error>> + Unpin,
    {
        let held = Held::default();
        let reading = Reading { heartbeats: options.heartbeats, redact: None, stall: Duration::from_secs(5) };
        read(frames(body, held.clone()), &held, &reading, last, retry, tx).await
    }

    async fn parse(chunks: Vec<&'static [u8]>, options: StreamOptions) -> (Vec<StreamEvent>, Option<String>) {
        let stream = futures_util::stream::iter(chunks.into_iter().map(|c| Ok::<_, std::io::Error>(Bytes::from(c))));
        let (tx, mut rx) = mpsc::channel(16);
        let mut last = options.last_event_id.clone();
        let mut retry = None;
        read_body(stream, &options, &mut last, &mut retry, &tx).await;
        drop(tx);
        let mut out = Vec::new();
        while let Some(Ok(batch)) = rx.recv().await {
            out.extend(batch);
        }
        (out, last)
    }

    #[tokio::test]
    async fn framing_follows_the_standard() {
        let chunks: Vec<&'static [u8]> = vec![
            b": a comment\r\nretry: 100\r\n\r",
            b"\nevent: message\rid: 1\rdata: {\"type\": \"inference.result\",\r",
            b"data: \"event_data\": {\"x\": 1}}\r\n\r",
            b"\n",
            b"id: 2\ndata: {\"type\": \"sse.stream.heartbeat\", \"event_data\": {}}\n\n",
            b"id: 3\ndata: not json\n\n",
            b"id: 4\ndata: {\"type\": \"sse.stream.end\"}\n\n",
            b"id: 5\ndata: {\"type\": \"after.end\"}\n\n",
        ];
        let (events, last) = parse(chunks, StreamOptions::default()).await;
        let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(kinds, ["inference.result", "message"]);
        assert_eq!(events[0].id, "1");
        assert_eq!(events[0].event_data(), Some("{\"x\": 1}"));
        assert_eq!(events[0].data, "{\"type\": \"inference.result\",\n\"event_data\": {\"x\": 1}}");
        assert_eq!(events[1].data, "not json");
        assert_eq!(last.as_deref(), Some("4"));
    }

    #[tokio::test]
    async fn framing_holds_when_fed_one_byte_at_a_time() {
        let text: &'static [u8] = b"retry: 5\r\n: note\r\nid: 1\r\ndata: {\"type\": \"a\",\r\ndata: \"event_data\": 1}\r\n\r\n\
            id: 2\rdata: {\"type\": \"b\"}\r\rid: 3\ndata: x\n\n";
        let whole = parse(vec![text], StreamOptions::default()).await;
        let bytes: Vec<&'static [u8]> = (0..text.len()).map(|i| &text[i..i + 1]).collect();
        let split = parse(bytes, StreamOptions::default()).await;
        assert_eq!(whole, split);
        let kinds: Vec<&str> = split.0.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(kinds, ["a", "b", "message"]);
        assert_eq!(split.0[0].event_data(), Some("1"));
    }

    #[tokio::test]
    async fn heartbeats_on_request_and_no_repeat_of_the_resumed_event() {
        let chunks: Vec<&'static [u8]> = vec![
            b"id: 7\ndata: {\"type\": \"inference.result\"}\n\n",
            b"id: 8\ndata: {\"type\": \"sse.stream.heartbeat\"}\n\nid: 9\ndata: {\"type\": \"x\"}\n\n",
        ];
        let options = StreamOptions { last_event_id: Some("7".into()), heartbeats: true };
        let (events, last) = parse(chunks, options).await;
        let ids: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["8", "9"]);
        assert_eq!(last.as_deref(), Some("9"));
    }

    #[tokio::test]
    async fn frames_without_an_id_are_new_events() {
        let chunks: Vec<&'static [u8]> = vec![
            b"id: 1\ndata: {\"type\": \"a\"}\n\ndata: {\"type\": \"b\"}\n\n",
            b"data: {\"type\": \"c\"}\n\nid: 4\ndata: {\"type\": \"d\"}\n\n",
        ];
        let (events, last) = parse(chunks, StreamOptions::default()).await;
        let seen: Vec<(&str, &str)> = events.iter().map(|e| (e.id.as_str(), e.kind.as_str())).collect();
        assert_eq!(seen, [("1", "a"), ("1", "b"), ("1", "c"), ("4", "d")]);
        assert_eq!(last.as_deref(), Some("4"));
    }

    #[tokio::test]
    async fn a_resumed_connection_skips_only_the_replayed_event_at_its_head() {
        let options = StreamOptions { last_event_id: Some("7".into()), heartbeats: false };
        // The server replays the event it resumes after; a frame without an id after it, and a
        // later frame that reuses the id, are new.
        let chunks: Vec<&'static [u8]> = vec![
            b"id: 7\ndata: {\"type\": \"replayed\"}\n\ndata: {\"type\": \"new\"}\n\n",
            b"id: 8\ndata: {\"type\": \"x\"}\n\nid: 7\ndata: {\"type\": \"again\"}\n\n",
        ];
        let (events, last) = parse(chunks, options.clone()).await;
        let seen: Vec<(&str, &str)> = events.iter().map(|e| (e.id.as_str(), e.kind.as_str())).collect();
        assert_eq!(seen, [("7", "new"), ("8", "x"), ("7", "again")]);
        assert_eq!(last.as_deref(), Some("7"));
        // A server that resumes after it: a first frame without an id carries the id resumed
        // after, as the SSE standard carries the last event id across reconnects.
        let (events, _) = parse(vec![b"data: {\"type\": \"next\"}\n\n"], options).await;
        assert_eq!((events[0].id.as_str(), events[0].kind.as_str()), ("7", "next"));
    }

    #[tokio::test]
    async fn a_cr_framed_event_is_handed_out_without_waiting_for_the_next_byte() {
        let head: Vec<std::io::Result<Bytes>> = vec![Ok(Bytes::from_static(b"id: 1\rdata: {\"type\": \"a\"}\r\r"))];
        // The server then sends nothing more for now.
        let body = futures_util::stream::iter(head).chain(futures_util::stream::pending());
        let mut events = frames(body, Held::default());
        let first = events.next().now_or_never();
        assert!(matches!(&first, Some(Some(Ok(event))) if event.id == "1"), "{first:?}");
    }

    #[tokio::test]
    async fn an_lf_after_a_cr_that_ended_a_chunk_is_the_same_line_end() {
        // CRLF split across chunks, alone or with an empty chunk between, is one line end: the
        // event is one event with two data lines, not two events.
        for chunks in [
            vec![&b"data: a\r"[..], b"\ndata: b\r\n\r", b"\n"],
            vec![b"data: a\r", b"", b"\n", b"data: b\r", b"\r", b"\n"],
        ] {
            let (events, _) = parse(chunks, StreamOptions::default()).await;
            let data: Vec<&str> = events.iter().map(|e| e.data.as_str()).collect();
            assert_eq!(data, ["a\nb"]);
        }
    }

    #[tokio::test]
    async fn the_last_frame_of_a_cr_framed_body_is_read_before_it_closes() {
        let chunks: Vec<&'static [u8]> = vec![
            b"event: message\rid: 1\rdata: {\"type\": \"inference.result\"}\r\r",
            b"event: message\rid: 2\rdata: {\"type\": \"sse.stream.end\"}\r\r",
        ];
        let stream = futures_util::stream::iter(chunks.into_iter().map(|c| Ok::<_, std::io::Error>(Bytes::from(c))));
        let (tx, mut rx) = mpsc::channel(16);
        let (mut last, mut retry) = (None, None);
        let ended = read_body(stream, &StreamOptions::default(), &mut last, &mut retry, &tx).await;
        assert!(matches!(ended, Ended::Graceful));
        assert!(matches!(rx.try_recv(), Ok(Ok(batch)) if batch.len() == 1 && batch[0].id == "1"));
        assert_eq!(last.as_deref(), Some("2"));
    }

    #[tokio::test]
    async fn protocol_frames_alone_are_no_progress() {
        let start_and_beat: &'static [u8] = b"id: 0\ndata: {\"type\": \"sse.stream.start\"}\n\n\
            id: 0\ndata: {\"type\": \"sse.stream.heartbeat\"}\n\n";
        let connection = |options: StreamOptions| async move {
            let stream = futures_util::stream::iter([Ok::<_, std::io::Error>(Bytes::from_static(start_and_beat))]);
            let (tx, _rx) = mpsc::channel(16);
            let (mut last, mut retry) = (options.last_event_id.clone(), None);
            read_body(stream, &options, &mut last, &mut retry, &tx).await
        };
        let received = |ended: Ended| match ended {
            Ended::Lost { received, .. } => received,
            _ => panic!("the connection closed, so it was lost"),
        };
        assert!(!received(connection(StreamOptions::default()).await));
        // Heartbeats asked for are handed out, so they are progress.
        assert!(received(connection(StreamOptions { heartbeats: true, ..Default::default() }).await));
    }

    /// A server on 127.0.0.1 that answers every request with `answer` and closes; and how many
    /// requests it has had.
    async fn answering(answer: &'static [u8]) -> (String, std::sync::Arc<std::sync::atomic::AtomicU32>) {
        answering_in_turn(vec![answer]).await
    }

    /// `answering`, with the n-th request answered by `answers[n]` (the last one from there on).
    async fn answering_in_turn(answers: Vec<&'static [u8]>) -> (String, std::sync::Arc<std::sync::atomic::AtomicU32>) {
        use std::sync::atomic::{AtomicU32, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = std::sync::Arc::new(AtomicU32::new(0));
        let counter = requests.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let (counter, answers) = (counter.clone(), answers.clone());
                tokio::spawn(async move {
                    let (mut buf, mut seen) = (vec![0u8; 8192], Vec::new());
                    while let Ok(n @ 1..) = socket.read(&mut buf).await {
                        seen.extend_from_slice(&buf[..n]);
                        if seen.windows(4).any(|w| w == b"\r\n\r\n") {
                            let turn = counter.fetch_add(1, Ordering::SeqCst) as usize;
                            let answer = answers[turn.min(answers.len() - 1)];
                            let _ = socket.write_all(answer).await;
                            return;
                        }
                    }
                });
            }
        });
        (format!("http://127.0.0.1:{port}/v0.5"), requests)
    }

    /// What `pump` sends for the stream at `base`, with a backoff of a millisecond.
    async fn pumped(base: String) -> Vec<Feed> {
        pumped_with(base, 2).await
    }

    async fn pumped_with(base: String, max_retries: u32) -> Vec<Feed> {
        pumped_configured(base, |config| config.retry.max_retries = max_retries).await
    }

    async fn pumped_configured(base: String, configure: impl FnOnce(&mut ClientConfig)) -> Vec<Feed> {
        let mut config = ClientConfig::resolve(Some("sk-test".into()), Some(base), |_| None).unwrap();
        config.retry.initial_delay = Duration::from_millis(1);
        configure(&mut config);
        let transport = Transport::new(config).unwrap();
        let (tx, mut rx) = mpsc::channel(64);
        pump(&transport, "/lens/sessions/consumer/lsn-1", StreamOptions::default(), tx).await;
        let mut out = Vec::new();
        while let Ok(feed) = rx.try_recv() {
            out.push(feed);
        }
        out
    }

    const SSE_HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";

    #[tokio::test]
    async fn a_server_that_sends_only_protocol_frames_runs_out_the_reconnects() {
        let answer = answer_of(SSE_HEAD, "id: 0\ndata: {\"type\": \"sse.stream.start\"}\n\nid: 0\ndata: {\"type\": \"sse.stream.heartbeat\"}\n\n");
        let (base, requests) = answering(answer).await;
        let feeds = pumped(base).await;
        assert_eq!(requests.load(std::sync::atomic::Ordering::SeqCst), MAX_RECONNECTS + 1);
        match feeds.as_slice() {
            [Err(Error::Connection { message })] => {
                assert!(message.contains("resume later with last_event_id=\"0\""), "{message}")
            }
            other => panic!("expected the error alone, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_client_that_retries_nothing_does_not_keep_reconnecting_its_stream() {
        let answer = answer_of(SSE_HEAD, "id: 0\ndata: {\"type\": \"sse.stream.start\"}\n\n");
        let (base, requests) = answering(answer).await;
        let feeds = pumped_with(base, 0).await;
        // The first connection, and the one resume a connection is given (at once, no backoff).
        assert_eq!(requests.load(std::sync::atomic::Ordering::SeqCst), 2);
        match feeds.as_slice() {
            [Err(Error::Connection { message })] => {
                assert!(message.contains("max_retries=0") && message.contains("last_event_id=\"0\""), "{message}")
            }
            other => panic!("expected the error alone, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_stream_that_never_had_an_event_id_says_to_start_again() {
        let (base, _) = answering(SSE_HEAD.as_bytes()).await;
        match pumped(base).await.as_slice() {
            [Err(Error::Connection { message })] => {
                assert!(message.contains("start the stream again from the beginning"), "{message}");
                assert!(!message.contains("last_event_id="), "{message}");
            }
            other => panic!("expected the error alone, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_cr_framed_stream_ends_on_its_last_frame() {
        let answer = answer_of(SSE_HEAD, "event: message\rid: 1\rdata: {\"type\": \"inference.result\"}\r\r\
            event: message\rid: 2\rdata: {\"type\": \"sse.stream.end\"}\r\r");
        let (base, requests) = answering(answer).await;
        let feeds = pumped(base).await;
        assert_eq!(requests.load(std::sync::atomic::Ordering::SeqCst), 1, "no reconnect after the end");
        match feeds.as_slice() {
            [Ok(batch)] => assert_eq!(batch.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(), ["1"]),
            other => panic!("expected one batch and the end, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_servers_retry_is_capped_as_a_retry_after_is() {
        // Ten days asked for: the stream waits the policy's cap instead.
        let (base, requests) = answering_in_turn(vec![
            answer_of(SSE_HEAD, "retry: 864000000\nid: 1\ndata: {\"type\": \"a\"}\n\n"),
            answer_of(SSE_HEAD, "id: 2\ndata: {\"type\": \"b\"}\n\nid: 3\ndata: {\"type\": \"sse.stream.end\"}\n\n"),
        ])
        .await;
        let pumped = pumped_configured(base, |config| config.retry.max_retry_after = Duration::from_millis(10));
        let feeds = tokio::time::timeout(Duration::from_secs(60), pumped).await.expect("the retry was not capped");
        let ids: Vec<&str> = feeds.iter().flat_map(|feed| feed.as_ref().unwrap()).map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["1", "2"]);
        assert_eq!(requests.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_frame_whose_type_is_not_a_string_keeps_its_event_data() {
        let frame: &'static [u8] = b"id: 1\ndata: {\"type\": 5, \"event_data\": {\"n\": 1}}\n\n";
        let (events, _) = parse(vec![frame], StreamOptions::default()).await;
        assert_eq!((events[0].kind.as_str(), events[0].event_data()), ("message", Some("{\"n\": 1}")));
        assert_eq!(StreamEvent::from_parts("1".into(), "message".into(), events[0].data.clone()), events[0]);
    }

    #[tokio::test]
    async fn an_event_past_the_limit_ends_the_connection_as_unreadable() {
        let mut body: Vec<Bytes> = vec![Bytes::from_static(b"id: 1\ndata: {\"type\": \"a\"}\n\nid: 2\ndata: \"")];
        body.extend(std::iter::repeat_n(Bytes::from(vec![b'A'; 1 << 20]), (MAX_EVENT_BYTES >> 20) + 1));
        let stream = futures_util::stream::iter(body.into_iter().map(Ok::<_, std::io::Error>));
        let (tx, mut rx) = mpsc::channel(16);
        let (mut last, mut retry) = (None, None);
        let ended = read_body(stream, &StreamOptions::default(), &mut last, &mut retry, &tx).await;
        match ended {
            Ended::Unreadable { message } => {
                assert!(message.contains("larger than 16 MiB (after event 1)"), "{message}")
            }
            _ => panic!("expected the connection to end as unreadable"),
        }
        assert!(matches!(rx.try_recv(), Ok(Ok(batch)) if batch.len() == 1 && batch[0].id == "1"));
    }

    #[test]
    fn a_stream_is_not_resumed_where_it_would_repeat_events_or_cannot_send_the_id() {
        let no_id = unresumable(None, true, "closed").unwrap();
        assert!(no_id.contains("carry no id") && no_id.contains("hand them out again"), "{no_id}");
        let control = unresumable(Some("a\u{1}b"), true, "closed").unwrap();
        assert!(control.contains("\"a\\u{1}b\" holds a control character"), "{control}");
        // Nothing handed out yet, or an id a header carries (non-ASCII as UTF-8): resumed.
        assert_eq!(unresumable(None, false, "closed"), None);
        assert_eq!(unresumable(Some("évt-1"), true, "closed"), None);
    }

    /// `head` then `body`, leaked: a test server's answer lives for the whole test run.
    fn answer_of(head: &str, body: &str) -> &'static [u8] {
        Box::leak(format!("{head}{body}").into_bytes().into_boxed_slice())
    }

    #[test]
    fn slices_are_views_that_cover_the_chunk() {
        let chunk = Bytes::from(vec![7u8; PARSE_SLICE * 2 + 5]);
        let parts = slices(chunk.clone());
        assert_eq!(parts.iter().map(Bytes::len).collect::<Vec<_>>(), [PARSE_SLICE, PARSE_SLICE, 5]);
        assert_eq!(parts.concat(), chunk.to_vec());
        assert!(slices(Bytes::new()).is_empty());
    }
}
