//! Everything a client call can fail with. The bindings map each variant onto one class of
//! `sensorium.errors`.

use std::fmt;
use std::time::Duration;

use serde_json::Value;

use super::secret::ApiKey;
use crate::wire::errors::ErrorObject;

/// The longest piece of server text (one error entry, a suggestion, a worker's `error_msg`) an
/// exception message carries. Whole bodies stay on the exception's `body`; a message is for
/// reading, and a 10 MB `detail` in a traceback helps nobody.
pub const MESSAGE_LIMIT: usize = 500;
/// The longest summary of all entries of one error body.
pub const SUMMARY_LIMIT: usize = 1000;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server answered with a non-2xx status.
    #[error("{0}")]
    Api(Box<ApiError>),
    /// No response: refused, reset, DNS, TLS, or the connection dropped mid-body.
    #[error("connection error: {message}")]
    Connection { message: String },
    /// No connection could be made (refused, DNS, TLS handshake, or no answer to connecting
    /// within the connect timeout: `timed_out`): the request never left. Every request to that
    /// address fails the same way until something answers there. `certificate`: TLS refused the
    /// server's certificate, which no retry can change (until the certificate or the trusted CAs do).
    #[error("{}: {message}", if *.timed_out { "request timed out" } else { "connection error" })]
    Unreachable { message: String, timed_out: bool, certificate: bool },
    /// A timeout fired (connect, per-attempt, or a stalled body).
    #[error("request timed out: {message}")]
    Timeout { message: String },
    /// An argument was wrong; nothing was sent.
    #[error("{argument}: {message}")]
    InvalidArgument { argument: String, message: String },
    /// Missing configuration (key or base URL).
    #[error("{0}")]
    Config(String),
    /// `/query` answered 200 with `status: "failed"`.
    #[error("query {query_id} failed: {}", truncate(.error_msg, MESSAGE_LIMIT))]
    QueryFailed { query_id: String, error_msg: String, response: Value },
    /// A local file could not be read or written.
    #[error("{path}: {source}")]
    Io { path: String, #[source] source: std::io::Error },
    /// A 2xx body that is not what the spec says.
    #[error("unexpected response from {url}: {}", truncate(.message, MESSAGE_LIMIT))]
    Decode { url: String, message: String, body: String },
    /// An upload or download stopped part-way; `resumable` says whether calling again
    /// continues it.
    #[error("{message}")]
    Transfer { message: String, resumable: bool, upload_id: Option<String> },
    /// A call given a deadline of its own ([`crate::client::transport::Call::deadline`]) failed
    /// with a retryable error, and its next attempt would have started past the deadline.
    #[error("gave up at the deadline after: {last}")]
    DeadlinePassed { last: Box<Error> },
    /// A call that is not safe to repeat ([`crate::client::transport::Call::repeatable`], a POST
    /// that creates something) lost its answer after the request may have reached the server (a
    /// connection error once sent, a timeout, a cut body), so it was not sent again: the server may
    /// have carried it out. `last` is the failure (a `Connection` or a `Timeout`).
    #[error(
        "{last}. The request may have been carried out, and was not repeated: this {method} is not safe to \
         repeat (it could be done twice), so check whether it took effect before trying again"
    )]
    NotRepeated { last: Box<Error>, method: String },
}

impl Error {
    pub fn invalid_argument(argument: &str, message: impl Into<String>) -> Self {
        Error::InvalidArgument { argument: argument.to_string(), message: message.into() }
    }

    pub fn io(path: impl fmt::Display, source: std::io::Error) -> Self {
        Error::Io { path: path.to_string(), source }
    }

    /// Whether the retry rule allows another attempt after this error, for a call that is safe
    /// to repeat (the transport asks more of one that is not: see `Call::repeatable`).
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Api(api) => api.is_retryable(),
            Error::Unreachable { certificate, .. } => !certificate,
            Error::Connection { .. } | Error::Timeout { .. } => true,
            _ => false,
        }
    }

    /// The same error with every occurrence of `key` taken out of its texts and payloads. Servers
    /// echo keys (lens session records carry the caller's), and whatever they echo must not
    /// reach a message, a traceback, an attribute or a pickle.
    pub fn redacted(self, key: &ApiKey) -> Error {
        let text = |s: String| key.redact_in(&s);
        match self {
            Error::Api(mut api) => {
                api.body = text(api.body);
                api.url = text(api.url);
                if let Some(json) = api.json.as_mut() {
                    key.redact_value(json);
                }
                for entry in &mut api.errors {
                    for field in [&mut entry.code, &mut entry.message, &mut entry.suggestion, &mut entry.error_uid] {
                        if let Some(value) = field.take() {
                            *field = Some(text(value));
                        }
                    }
                }
                Error::Api(api)
            }
            Error::Connection { message } => Error::Connection { message: text(message) },
            Error::Unreachable { message, timed_out, certificate } => {
                Error::Unreachable { message: text(message), timed_out, certificate }
            }
            Error::Timeout { message } => Error::Timeout { message: text(message) },
            Error::QueryFailed { query_id, error_msg, mut response } => {
                key.redact_value(&mut response);
                Error::QueryFailed { query_id: text(query_id), error_msg: text(error_msg), response }
            }
            Error::Decode { url, message, body } => {
                Error::Decode { url: text(url), message: text(message), body: text(body) }
            }
            Error::Transfer { message, resumable, upload_id } => {
                Error::Transfer { message: text(message), resumable, upload_id }
            }
            Error::DeadlinePassed { last } => Error::DeadlinePassed { last: Box::new(last.redacted(key)) },
            Error::NotRepeated { last, method } => Error::NotRepeated { last: Box::new(last.redacted(key)), method },
            other @ (Error::InvalidArgument { .. } | Error::Config(_) | Error::Io { .. }) => other,
        }
    }

    /// A 2xx answer whose body is not what the spec promises; the whole body is kept.
    pub fn unexpected(url: &str, message: impl Into<String>, body: &[u8]) -> Self {
        Error::Decode {
            url: url.to_string(),
            message: message.into(),
            body: String::from_utf8_lossy(body).into_owned(),
        }
    }

    /// The server's requested delay, if it sent one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Api(api) => api.retry_after,
            _ => None,
        }
    }
}

/// A non-2xx answer, with every error entry the body carried.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: u16,
    pub method: String,
    pub url: String,
    /// All entries of the body, in order (the `{errors: [...]}` envelope can hold several).
    pub errors: Vec<ErrorObject>,
    /// The raw body text.
    pub body: String,
    /// The body parsed as JSON, when it was JSON.
    pub json: Option<Value>,
    pub retry_after: Option<Duration>,
    /// Which attempt got this answer (1 for the first).
    pub attempt: u32,
    /// Whether an earlier attempt of the same call failed without an answer, so the server may
    /// have acted on it (an upload may have landed although its response was lost).
    pub after_lost_response: bool,
    /// What the client can add about the likely cause (a surface mounted elsewhere).
    pub hint: Option<String>,
}

/// Statuses the spec's retry rule retries.
pub const RETRYABLE_STATUSES: &[u16] = &[429, 500, 502, 503, 504];

impl ApiError {
    /// The error a non-2xx answer means, from its (already redacted) body text.
    pub fn from_body(status: u16, method: &str, url: &str, raw: String, retry_after: Option<Duration>) -> ApiError {
        let json: Option<Value> = serde_json::from_str(&raw).ok();
        ApiError {
            status,
            method: method.to_string(),
            url: url.to_string(),
            errors: super::error_body::parse_error_entries(json.as_ref(), &raw),
            body: raw,
            json,
            retry_after,
            attempt: 1,
            after_lost_response: false,
            hint: None,
        }
    }

    pub fn is_retryable(&self) -> bool {
        RETRYABLE_STATUSES.contains(&self.status)
    }

    pub fn code(&self) -> Option<&str> {
        self.errors.iter().find_map(|e| e.code.as_deref())
    }

    pub fn first(&self) -> Option<&ErrorObject> {
        self.errors.first()
    }

    /// Whether any entry carries `code`, compared case-insensitively (legacy codes are
    /// uppercase twins of the current ones).
    pub fn has_code(&self, code: &str) -> bool {
        self.errors
            .iter()
            .filter_map(|e| e.code.as_deref())
            .any(|c| c.eq_ignore_ascii_case(code))
    }

    /// A one-line summary: the message of every entry, each with its code, bounded in length
    /// (`errors` and `body` keep everything).
    pub fn summary(&self) -> String {
        let parts: Vec<String> = self
            .errors
            .iter()
            .map(|e| match (&e.code, &e.message) {
                (Some(c), Some(m)) => format!("{}: {}", truncate(c, 100), truncate(m, MESSAGE_LIMIT)),
                (None, Some(m)) => truncate(m, MESSAGE_LIMIT),
                (Some(c), None) => truncate(c, 100),
                (None, None) => String::new(),
            })
            .filter(|s| !s.is_empty())
            .collect();
        if parts.is_empty() {
            let body = self.body.trim();
            if body.is_empty() {
                "(empty body)".to_string()
            } else {
                truncate(body, MESSAGE_LIMIT)
            }
        } else {
            truncate(&parts.join("; "), SUMMARY_LIMIT)
        }
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} answered {}: {}", self.method, self.url, self.status, self.summary())?;
        if let Some(s) = self.errors.iter().find_map(|e| e.suggestion.as_deref()) {
            write!(f, " (suggestion: {})", truncate(s, MESSAGE_LIMIT))?;
        }
        if let Some(uid) = self.errors.iter().find_map(|e| e.error_uid.as_deref()) {
            write!(f, " [{}]", truncate(uid, 100))?;
        }
        if let Some(hint) = &self.hint {
            write!(f, ". {hint}")?;
        }
        Ok(())
    }
}

/// `text` cut to at most `max` bytes (on a character boundary), with `...` when cut.
pub fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

/// `duration` for a message, to the millisecond and without trailing zeros ("0.3s", "30s"):
/// `{:.0}` printed a 0.3 s timeout as "0s".
pub fn seconds(duration: Duration) -> String {
    let text = format!("{:.3}", duration.as_secs_f64());
    format!("{}s", text.trim_end_matches('0').trim_end_matches('.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn seconds_are_printed_as_given() {
        assert_eq!(seconds(Duration::from_millis(300)), "0.3s");
        assert_eq!(seconds(Duration::from_secs(30)), "30s");
        assert_eq!(seconds(Duration::from_millis(1250)), "1.25s");
        assert_eq!(seconds(Duration::ZERO), "0s");
    }

    fn api(body: String, errors: Vec<ErrorObject>) -> ApiError {
        ApiError {
            status: 400,
            method: "GET".into(),
            url: "http://h/v0.5/x".into(),
            errors,
            body,
            json: None,
            retry_after: None,
            attempt: 1,
            after_lost_response: false,
            hint: None,
        }
    }

    #[test]
    fn messages_are_bounded_whatever_the_body() {
        let huge = "x".repeat(10_000_000);
        let entry = ErrorObject { code: Some("c".into()), message: Some(huge.clone()), ..Default::default() };
        let many = vec![entry.clone(); 50];
        for err in [api(huge.clone(), vec![]), api(String::new(), many), api(String::new(), vec![entry])] {
            let text = Error::Api(Box::new(err)).to_string();
            assert!(text.len() < 2 * SUMMARY_LIMIT, "{}", text.len());
        }
        let failed = Error::QueryFailed { query_id: "q".into(), error_msg: huge.clone(), response: Value::Null };
        assert!(failed.to_string().len() < 2 * MESSAGE_LIMIT);
        let decode = Error::Decode { url: "u".into(), message: huge, body: String::new() };
        assert!(decode.to_string().len() < 2 * MESSAGE_LIMIT);
        assert_eq!(truncate("h\u{e9}llo", 2), "h...", "cuts on a character boundary");
    }

    #[test]
    fn redaction_reaches_every_text_and_payload() {
        let key = ApiKey::new("sk-SECRET-123");
        let failed = Error::QueryFailed {
            query_id: "q".into(),
            error_msg: "worker saw key sk-SECRET-123".into(),
            response: json!({"error_msg": "sk-SECRET-123", "nested": [{"k": "a sk-SECRET-123 b"}]}),
        }
        .redacted(&key);
        let Error::QueryFailed { error_msg, response, .. } = &failed else { panic!() };
        assert!(!error_msg.contains("SECRET") && !response.to_string().contains("SECRET"));
        let decode = Error::unexpected("u", "m", b"{\"api_key\": \"sk-SECRET-123\"}").redacted(&key);
        assert!(!format!("{decode:?}").contains("SECRET"));
    }
}
