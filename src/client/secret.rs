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

    /// Removes every occurrence of the key from `text`, for messages built from server bodies
    /// that might echo it (lens session records do).
    pub fn redact_in(&self, text: &str) -> String {
        if self.0.len() < 4 {
            return text.to_string();
        }
        text.replace(&self.0, REDACTED)
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
}
