//! Error answers in the spec's shapes: the `{errors: [...]}` envelope almost everywhere, and the
//! legacy `{detail}` body that `/query` still uses for 401.

use std::time::Duration;

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::wire::errors::{ErrorEnvelope, ErrorObject};

/// A fresh `err-` uid, as the platform quotes in every error so a report can name it.
pub(crate) fn error_uid() -> String {
    format!("err-{}", uuid::Uuid::new_v4().simple())
}

#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub code: String,
    pub message: String,
    pub suggestion: Option<String>,
    pub retry_after: Option<Duration>,
    /// Answer `{detail: message}` instead of the envelope (legacy 401 of `/query`).
    pub legacy_detail: bool,
    /// Answer the error object alone, without the envelope (fine-tuning, some batch errors).
    pub bare: bool,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code: code.to_string(),
            message: message.into(),
            suggestion: None,
            retry_after: None,
            legacy_detail: false,
            bare: false,
        }
    }

    pub fn bad_request(code: &str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::bad_request("invalid_request", message)
    }

    pub fn file_not_found(file_id: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "file_not_found",
            format!("File '{file_id}' was not found in this organization."),
        )
    }

    pub fn payload_too_large(message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", message)
    }

    pub fn unauthorized_envelope() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized_request",
            "Missing or invalid API key.",
        )
        .with_suggestion("Send the header 'Authorization: Bearer <API_KEY>' with a key the emulator issued.")
    }

    pub fn unauthorized_detail() -> Self {
        let mut e = Self::new(StatusCode::UNAUTHORIZED, "unauthorized_request", "Invalid or missing API key.");
        e.legacy_detail = true;
        e
    }

    pub fn with_suggestion(mut self, suggestion: impl Into<String>) -> Self {
        self.suggestion = Some(suggestion.into());
        self
    }

    /// The same error as a bare object (`{code, message, suggestion, error_uid}`).
    pub fn bare(mut self) -> Self {
        self.bare = true;
        self
    }

    pub fn with_retry_after(mut self, wait: Option<Duration>) -> Self {
        self.retry_after = wait;
        self
    }
}

/// The two headers of a wait: `Retry-After` in whole seconds, rounded up (RFC 9110's
/// delay-seconds is a whole number, and urllib3/requests refuse `0.5`), and `retry-after-ms`
/// with the wait to the millisecond, also rounded up, which clients that know it (openai-python,
/// sensorium) read first, so a sub-second wait is not stretched to a second.
pub(crate) fn retry_after_headers(wait: Duration) -> [(&'static str, String); 2] {
    let seconds = wait.as_secs().saturating_add(u64::from(wait.subsec_nanos() > 0));
    let millis = wait.as_nanos().div_ceil(1_000_000);
    [("retry-after", seconds.to_string()), ("retry-after-ms", millis.to_string())]
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = if self.legacy_detail {
            (self.status, Json(json!({ "detail": self.message }))).into_response()
        } else {
            let mut object = ErrorObject::new(&self.code, self.message).with_uid(error_uid());
            object.suggestion = self.suggestion;
            if self.bare {
                // A bare error object always carries `suggestion`, null when there is none: the
                // spec writes fine-tuning errors as `{code, message, suggestion, error_uid}`.
                let mut bare = serde_json::to_value(&object).unwrap_or_default();
                if let Some(map) = bare.as_object_mut() {
                    map.entry("suggestion").or_insert(serde_json::Value::Null);
                }
                (self.status, Json(bare)).into_response()
            } else {
                (self.status, Json(ErrorEnvelope { errors: vec![object] })).into_response()
            }
        };
        if let Some(wait) = self.retry_after {
            for (name, value) in retry_after_headers(wait) {
                if let Ok(value) = HeaderValue::from_str(&value) {
                    response.headers_mut().insert(name, value);
                }
            }
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_whole_seconds_rounded_up_and_exact_in_milliseconds() {
        let headers = |wait| retry_after_headers(wait).map(|(_, v)| v);
        assert_eq!(headers(Duration::from_millis(499)), ["1", "499"]);
        assert_eq!(headers(Duration::from_secs(2)), ["2", "2000"]);
        assert_eq!(headers(Duration::ZERO), ["0", "0"]);
        assert_eq!(headers(Duration::from_nanos(1_000_001)), ["1", "2"]);
        assert_eq!(headers(Duration::MAX)[0], u64::MAX.to_string());
    }
}
