//! Everything a client call can fail with. The bindings map each variant onto one class of
//! `sensorium.errors`.

use std::fmt;
use std::time::Duration;

use serde_json::Value;

use crate::wire::errors::ErrorObject;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server answered with a non-2xx status.
    #[error("{0}")]
    Api(ApiError),
    /// No response: refused, reset, DNS, TLS, or the connection dropped mid-body.
    #[error("connection error: {message}")]
    Connection { message: String },
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
    #[error("query {query_id} failed: {error_msg}")]
    QueryFailed { query_id: String, error_msg: String, response: Value },
    /// A local file could not be read or written.
    #[error("{path}: {source}")]
    Io { path: String, #[source] source: std::io::Error },
    /// A 2xx body that is not what the spec says.
    #[error("unexpected response from {url}: {message}")]
    Decode { url: String, message: String, body: String },
    /// An upload or download stopped part-way; `resumable` says whether calling again
    /// continues it.
    #[error("{message}")]
    Transfer { message: String, resumable: bool, upload_id: Option<String> },
}

impl Error {
    pub fn invalid_argument(argument: &str, message: impl Into<String>) -> Self {
        Error::InvalidArgument { argument: argument.to_string(), message: message.into() }
    }

    pub fn io(path: impl fmt::Display, source: std::io::Error) -> Self {
        Error::Io { path: path.to_string(), source }
    }

    /// Whether the retry rule allows another attempt after this error.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Api(api) => api.is_retryable(),
            Error::Connection { .. } | Error::Timeout { .. } => true,
            _ => false,
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
}

/// Statuses the spec's retry rule retries.
pub const RETRYABLE_STATUSES: &[u16] = &[429, 500, 502, 503, 504];

impl ApiError {
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

    /// A one-line summary: the message of every entry, each with its code.
    pub fn summary(&self) -> String {
        let parts: Vec<String> = self
            .errors
            .iter()
            .map(|e| match (&e.code, &e.message) {
                (Some(c), Some(m)) => format!("{c}: {m}"),
                (None, Some(m)) => m.clone(),
                (Some(c), None) => c.clone(),
                (None, None) => String::new(),
            })
            .filter(|s| !s.is_empty())
            .collect();
        if parts.is_empty() {
            let body = self.body.trim();
            if body.is_empty() {
                "(empty body)".to_string()
            } else {
                truncate(body, 500)
            }
        } else {
            parts.join("; ")
        }
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} answered {}: {}", self.method, self.url, self.status, self.summary())?;
        if let Some(s) = self.errors.iter().find_map(|e| e.suggestion.as_deref()) {
            write!(f, " (suggestion: {s})")?;
        }
        if let Some(uid) = self.errors.iter().find_map(|e| e.error_uid.as_deref()) {
            write!(f, " [{uid}]")?;
        }
        Ok(())
    }
}

fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}
