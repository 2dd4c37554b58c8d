//! The API key, in a type that cannot be printed by accident.

use std::fmt;

const REDACTED: &str = "<redacted>";

/// An API key. `Debug` and `Display` are redacted; the only way to the text is `expose()`,
/// which the transport calls when it writes the Authorization header.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: impl Into<String>) -> Self {
        ApiKey(key.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Why this key cannot be sent, if it cannot, for a message after `api_key: `. A key goes as
    /// `Authorization: Bearer <key>`, where only visible ASCII arrives as given: a control
    /// character cannot be sent at all, and a space or a non-ASCII character (an accented letter, a
    /// non-breaking space, a Unicode line separator pasted with it) would go as other bytes than
    /// the server issued, to be answered 401 far from the cause. The message says what kind of
    /// character and where, never what the key holds.
    pub fn unusable(&self) -> Option<String> {
        let (at, c) = self.0.chars().enumerate().find(|(_, c)| !c.is_ascii_graphic())?;
        let kind = match c {
            ' ' => "a space",
            c if c.is_control() => "a control character (a line break, a tab...)",
            _ => "a non-ASCII character",
        };
        Some(format!(
            "contains characters an API key cannot hold: {kind} at position {at} (a key is visible ASCII only, as \
             it travels in an HTTP header); check how it was copied"
        ))
    }

    /// Whether `text` holds the key (one SIMD scan); a key too short to redact never does.
    pub fn appears_in(&self, text: &str) -> bool {
        self.0.len() >= 4 && memchr::memmem::find(text.as_bytes(), self.0.as_bytes()).is_some()
    }

    /// Removes every occurrence of the key from `text`, for messages built from server bodies
    /// that might echo it (lens session records do).
    pub fn redact_in(&self, text: &str) -> String {
        if self.0.len() < 4 {
            return text.to_string();
        }
        text.replace(&self.0, REDACTED)
    }

    /// `body` with every occurrence of the key replaced, for answers that echo it (a raw query
    /// record, a lens session record): what Python builds from them (records, `to_dict()`,
    /// pickles) never holds it. An answer without the key, nearly all of them, is returned as
    /// it is, after one SIMD scan (about 2 µs for an encoder's 67 kB answer).
    pub fn redact_bytes(&self, body: bytes::Bytes) -> bytes::Bytes {
        let key = self.0.as_bytes();
        if key.len() < 4 || memchr::memmem::find(&body, key).is_none() {
            return body;
        }
        let mut out = Vec::with_capacity(body.len());
        let mut from = 0;
        for at in memchr::memmem::find_iter(&body, key) {
            if at < from {
                continue; // overlaps the occurrence just replaced
            }
            out.extend_from_slice(&body[from..at]);
            out.extend_from_slice(REDACTED.as_bytes());
            from = at + key.len();
        }
        out.extend_from_slice(&body[from..]);
        bytes::Bytes::from(out)
    }

    /// `redact_in` over every string of a JSON value, keys included.
    pub fn redact_value(&self, value: &mut serde_json::Value) {
        use serde_json::Value;
        if self.0.len() < 4 {
            return;
        }
        match value {
            Value::String(s) if s.contains(&self.0) => *s = self.redact_in(s),
            Value::Array(items) => items.iter_mut().for_each(|v| self.redact_value(v)),
            Value::Object(map) => {
                if map.keys().any(|k| k.contains(&self.0)) {
                    let entries = std::mem::take(map);
                    *map = entries.into_iter().map(|(k, v)| (self.redact_in(&k), v)).collect();
                }
                map.values_mut().for_each(|v| self.redact_value(v));
            }
            _ => {}
        }
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_prints_the_key() {
        let key = ApiKey::new("sk-very-secret-123");
        assert!(!format!("{key:?}").contains("secret"));
        assert!(!format!("{key}").contains("secret"));
        assert_eq!(key.redact_in("x sk-very-secret-123 y"), "x <redacted> y");
    }

    #[test]
    fn a_key_of_anything_but_visible_ascii_is_unusable_and_the_reason_never_quotes_it() {
        assert_eq!(ApiKey::new("sk-live_0123.AZaz~!").unusable(), None);
        for (key, kind, at) in [
            ("sk-clé-secret", "non-ASCII", 5),
            ("sk-\u{a0}secret", "non-ASCII", 3),
            ("sk-secret\u{2028}", "non-ASCII", 9),
            ("sk secret", "a space", 2),
            ("sk-\nsecret", "control", 3),
            ("sk-secret\u{7f}", "control", 9),
        ] {
            let why = ApiKey::new(key).unusable().expect(key);
            assert!(why.starts_with("contains characters ") && why.contains(kind), "{why}");
            assert!(why.contains(&format!("position {at}")) && !why.contains("secret"), "{why}");
        }
    }

    #[test]
    fn bodies_lose_every_occurrence_of_the_key_and_others_are_untouched() {
        let key = ApiKey::new("sk-aaa");
        let body = bytes::Bytes::from_static(br#"{"api_key":"sk-aaa","b":"sk-aaask-aaa","c":"sk-aa"}"#);
        assert_eq!(&key.redact_bytes(body)[..], br#"{"api_key":"<redacted>","b":"<redacted><redacted>","c":"sk-aa"}"#);
        let plain = bytes::Bytes::from_static(b"[1,2,3]");
        assert_eq!(key.redact_bytes(plain.clone()).as_ptr(), plain.as_ptr(), "no copy without the key");
    }
}
