//! The log of requests the emulator received, so tests can assert what a client sent.

use std::collections::VecDeque;

use bytes::Bytes;
use parking_lot::Mutex;

use super::lens::socket::PROTOCOL_KEY_PREFIX;

/// One received request. The credential is redacted wherever the spec lets it travel (see
/// [`redact_header`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    pub query: String,
    /// Lowercase names in arrival order.
    pub headers: Vec<(String, String)>,
    /// 1 + the value of `x-sensorium-retry-count`, or 1.
    pub attempt: u32,
    /// Organization of the key sent, when it is a known key.
    pub org: Option<String>,
    /// JSON bodies only, capped at [`BODY_CAPTURE_LIMIT`] bytes.
    pub body: Option<Bytes>,
    /// Bytes of request body the emulator read.
    pub body_len: u64,
    /// Status answered; 0 when the connection was reset instead.
    pub status: u16,
}

pub const BODY_CAPTURE_LIMIT: usize = 1024 * 1024;

/// Oldest entries are dropped past this many, so a long-running command-line emulator does not
/// grow without bound.
const MAX_RECORDS: usize = 10_000;

/// The bodies the log keeps, in all: past it the oldest records lose their body (their method,
/// path, headers, status and `body_len` stay). 10,000 records of up to 1 MiB each let an
/// embedding benchmark's in-process emulator hold gigabytes (10,000 (4, 1024) windows: 0.9 GB);
/// tests assert on the bodies of their last requests, which this keeps (about 800 such windows).
const BODY_BUDGET: usize = 64 * 1024 * 1024;

#[derive(Default)]
pub(crate) struct Recorder {
    log: Mutex<Log>,
}

#[derive(Default)]
struct Log {
    records: VecDeque<RecordedRequest>,
    /// Bytes of the bodies still kept.
    body_bytes: usize,
    /// Records before this position keep no body, so stripping resumes here.
    stripped: usize,
}

impl Recorder {
    pub fn push(&self, record: RecordedRequest) {
        let mut log = self.log.lock();
        if log.records.len() >= MAX_RECORDS {
            if let Some(Some(body)) = log.records.pop_front().map(|r| r.body) {
                log.body_bytes -= body.len();
            }
            log.stripped = log.stripped.saturating_sub(1);
        }
        log.body_bytes += record.body.as_ref().map_or(0, Bytes::len);
        log.records.push_back(record);
        while log.body_bytes > BODY_BUDGET {
            let at = log.stripped;
            let Some(oldest) = log.records.get_mut(at) else { break };
            if let Some(body) = oldest.body.take() {
                log.body_bytes -= body.len();
            }
            log.stripped += 1;
        }
    }

    pub fn all(&self) -> Vec<RecordedRequest> {
        self.log.lock().records.iter().cloned().collect()
    }

    pub fn clear(&self) {
        *self.log.lock() = Log::default();
    }
}

/// The header value tests may see instead of the key.
pub(crate) fn redact_authorization(value: &str) -> String {
    let scheme = value.split_whitespace().next().unwrap_or("");
    if scheme.eq_ignore_ascii_case("bearer") {
        "Bearer <redacted>".to_string()
    } else {
        "<redacted>".to_string()
    }
}

/// A received header's value as the log keeps it: the key is replaced by `<redacted>` in the
/// `Authorization` header and in the `Sec-WebSocket-Protocol` entry
/// `authenticationauthorization.bearer.<KEY>` (the spec's two places for it), and the rest of
/// the value is kept, so tests can still see the scheme and the other protocols offered.
pub(crate) fn redact_header(name: &str, value: &str) -> String {
    if name.eq_ignore_ascii_case("authorization") {
        redact_authorization(value)
    } else if name.eq_ignore_ascii_case("sec-websocket-protocol") {
        redact_protocols(value)
    } else {
        value.to_string()
    }
}

fn redact_protocols(value: &str) -> String {
    value
        .split(',')
        .map(|entry| {
            let protocol = entry.trim_start();
            let lead = &entry[..entry.len() - protocol.len()];
            // Case-insensitive, so a spelling the server would refuse is not kept either.
            match protocol.get(..PROTOCOL_KEY_PREFIX.len()) {
                Some(prefix) if prefix.eq_ignore_ascii_case(PROTOCOL_KEY_PREFIX) => format!("{lead}{prefix}<redacted>"),
                _ => entry.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// `text` with every occurrence of any of `keys` replaced by `<redacted>` ([`redact_keys`] on
/// its bytes; replacing whole UTF-8 keys in UTF-8 text leaves UTF-8).
pub(crate) fn redact_keys_in_text(text: &str, keys: &[String]) -> String {
    String::from_utf8_lossy(&redact_keys(text.as_bytes(), keys)).into_owned()
}

/// A URL's path or query string with `keys` redacted whether sent as they are or
/// percent-encoded (a key with a `/` or `+` in it goes as `%2F`, `%2B`): each `&`-separated
/// part of the query (the path as one part) that holds a key only once decoded is kept decoded,
/// with the key replaced; the others are kept as sent. `form` reads `+` as a space, as query
/// strings have it.
pub(crate) fn redact_keys_in_url_part(text: &str, keys: &[String], form: bool) -> String {
    let redact = |part: &str| {
        let plain = redact_keys_in_text(part, keys);
        if plain != part || !part.contains(['%', '+']) {
            return plain;
        }
        let spaced = if form { part.replace('+', " ") } else { part.to_string() };
        let decoded = percent_encoding::percent_decode_str(&spaced).decode_utf8_lossy().into_owned();
        let redacted = redact_keys_in_text(&decoded, keys);
        if redacted != decoded { redacted } else { plain }
    };
    if form {
        text.split('&').map(redact).collect::<Vec<_>>().join("&")
    } else {
        redact(text)
    }
}

/// `body` with every occurrence of any of `keys` replaced by `<redacted>` (bytes: a captured
/// body need not be UTF-8).
pub(crate) fn redact_keys(body: &[u8], keys: &[String]) -> Bytes {
    let mut body = body.to_vec();
    for key in keys.iter().filter(|key| !key.is_empty()) {
        let found: Vec<usize> = memchr::memmem::find_iter(&body, key.as_bytes()).collect();
        if found.is_empty() {
            continue;
        }
        let mut out = Vec::with_capacity(body.len());
        let mut from = 0;
        for at in found {
            out.extend_from_slice(&body[from..at]);
            out.extend_from_slice(REDACTED.as_bytes());
            from = at + key.len();
        }
        out.extend_from_slice(&body[from..]);
        body = out;
    }
    Bytes::from(body)
}

const REDACTED: &str = "<redacted>";

/// `x-sensorium-retry-count: N` means this is attempt N + 1; anything unparsable counts as 1.
pub(crate) fn attempt_from_header(value: Option<&str>) -> u32 {
    value
        .and_then(|v| v.trim().parse::<u32>().ok())
        .map(|n| n.saturating_add(1))
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_body(len: usize) -> RecordedRequest {
        RecordedRequest {
            method: "POST".into(),
            path: "/v0.5/query".into(),
            query: String::new(),
            headers: Vec::new(),
            attempt: 1,
            org: None,
            body: Some(Bytes::from(vec![b' '; len])),
            body_len: len as u64,
            status: 200,
        }
    }

    #[test]
    fn the_oldest_bodies_go_past_the_budget_and_the_records_stay() {
        let recorder = Recorder::default();
        let len = BODY_CAPTURE_LIMIT;
        let count = BODY_BUDGET / len + 50;
        for _ in 0..count {
            recorder.push(with_body(len));
        }
        let all = recorder.all();
        assert_eq!(all.len(), count);
        let kept: Vec<bool> = all.iter().map(|r| r.body.is_some()).collect();
        assert_eq!(kept.iter().filter(|k| **k).count(), BODY_BUDGET / len);
        assert!(kept[..50].iter().all(|k| !k) && kept[50..].iter().all(|k| *k), "the newest bodies are kept");
        assert!(all.iter().all(|r| r.body_len == len as u64));
        recorder.clear();
        recorder.push(with_body(10));
        assert_eq!(recorder.all()[0].body.as_ref().map(Bytes::len), Some(10));
    }

    #[test]
    fn authorization_is_redacted() {
        assert_eq!(redact_authorization("Bearer sk-emu-secret"), "Bearer <redacted>");
        assert_eq!(redact_authorization("bearer x"), "Bearer <redacted>");
        assert_eq!(redact_authorization("Basic abc"), "<redacted>");
    }

    #[test]
    fn the_key_is_redacted_in_every_header_the_spec_lets_it_travel_in() {
        assert_eq!(redact_header("authorization", "Bearer sk-emu-secret"), "Bearer <redacted>");
        assert_eq!(
            redact_header("sec-websocket-protocol", "authenticationauthorization.bearer.sk-emu-secret, event-protocol-v1"),
            "authenticationauthorization.bearer.<redacted>, event-protocol-v1"
        );
        assert_eq!(
            redact_header("Sec-WebSocket-Protocol", "event-protocol-v1,AuthenticationAuthorization.Bearer.sk-emu-secret "),
            "event-protocol-v1,AuthenticationAuthorization.Bearer.<redacted>"
        );
        assert_eq!(redact_header("sec-websocket-protocol", "event-protocol-v1"), "event-protocol-v1");
        // Not a char boundary where the prefix would end: kept, and no panic.
        assert_eq!(redact_header("sec-websocket-protocol", "authenticationauthorizé"), "authenticationauthorizé");
        assert_eq!(redact_header("user-agent", "sk-emu-secret"), "sk-emu-secret");
    }

    #[test]
    fn every_issued_key_is_redacted_wherever_it_appears() {
        let keys = vec!["sk-a".to_string(), "sk-bb".to_string(), String::new()];
        assert_eq!(redact_keys_in_text("api_key=sk-a&x=sk-bb&y=sk-a", &keys), "api_key=<redacted>&x=<redacted>&y=<redacted>");
        assert_eq!(redact_keys_in_text("nothing here", &keys), "nothing here");
        let odd = vec!["sk/a+b c".to_string()];
        assert_eq!(redact_keys_in_url_part("x=1&api_key=sk%2Fa%2Bb+c&y=%2F", &odd, true), "x=1&api_key=<redacted>&y=%2F");
        assert_eq!(redact_keys_in_url_part("api_key=sk%2fa%2bb%20c", &odd, true), "api_key=<redacted>");
        assert_eq!(redact_keys_in_url_part("/v0.5/files/sk%2Fa%2Bb%20c", &odd, false), "/v0.5/files/<redacted>");
        assert_eq!(redact_keys_in_url_part("/v0.5/files/a%20b", &odd, false), "/v0.5/files/a%20b");
        assert_eq!(&redact_keys(b"{\"q\": \"sk-bbsk-a\xff\"}", &keys)[..], b"{\"q\": \"<redacted><redacted>\xff\"}");
    }

    #[test]
    fn attempt_counts_from_retry_header() {
        assert_eq!(attempt_from_header(None), 1);
        assert_eq!(attempt_from_header(Some("2")), 3);
        assert_eq!(attempt_from_header(Some("junk")), 1);
    }
}
