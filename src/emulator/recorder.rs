//! The log of requests the emulator received, so tests can assert what a client sent.

use std::collections::VecDeque;

use bytes::Bytes;
use parking_lot::Mutex;

/// One received request. The `authorization` header value is redacted.
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

#[derive(Default)]
pub(crate) struct Recorder {
    records: Mutex<VecDeque<RecordedRequest>>,
}

impl Recorder {
    pub fn push(&self, record: RecordedRequest) {
        let mut records = self.records.lock();
        if records.len() >= MAX_RECORDS {
            records.pop_front();
        }
        records.push_back(record);
    }

    pub fn all(&self) -> Vec<RecordedRequest> {
        self.records.lock().iter().cloned().collect()
    }

    pub fn clear(&self) {
        self.records.lock().clear();
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

    #[test]
    fn authorization_is_redacted() {
        assert_eq!(redact_authorization("Bearer sk-emu-secret"), "Bearer <redacted>");
        assert_eq!(redact_authorization("bearer x"), "Bearer <redacted>");
        assert_eq!(redact_authorization("Basic abc"), "<redacted>");
    }

    #[test]
    fn attempt_counts_from_retry_header() {
        assert_eq!(attempt_from_header(None), 1);
        assert_eq!(attempt_from_header(Some("2")), 3);
        assert_eq!(attempt_from_header(Some("junk")), 1);
    }
}
