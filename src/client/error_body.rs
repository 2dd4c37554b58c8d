//! Reads every error body shape the spec lists into a list of error objects:
//! the `{errors: [...]}` envelope, `{detail}`, a bare error object, an array of plain strings,
//! the lens 200-style `{type: "error", event_data: {error_messages}}`, and anything else
//! (kept raw, logged at debug).

use serde_json::Value;

use crate::wire::errors::ErrorObject;

pub fn parse_error_entries(json: Option<&Value>, raw: &str) -> Vec<ErrorObject> {
    let Some(json) = json else {
        log::debug!("error body is not JSON ({} bytes); keeping it raw", raw.len());
        return Vec::new();
    };
    let entries = entries_of(json);
    if entries.is_empty() {
        log::debug!("error body has no known shape; keeping it raw: {}", short(raw));
    }
    entries
}

fn entries_of(json: &Value) -> Vec<ErrorObject> {
    match json {
        Value::Object(map) => {
            if let Some(errors) = map.get("errors") {
                return list_entries(errors);
            }
            if let Some(detail) = map.get("detail") {
                return detail_entries(detail);
            }
            if map.get("type").and_then(Value::as_str) == Some("error") {
                if let Some(messages) =
                    map.get("event_data").and_then(|d| d.get("error_messages"))
                {
                    return list_entries(messages);
                }
            }
            if let Some(inner @ Value::Object(_)) = map.get("error") {
                return entries_of(inner);
            }
            if map.contains_key("code") || map.contains_key("message") {
                return object_entry(json).into_iter().collect();
            }
            if let Some(messages) = map.get("error_messages") {
                return list_entries(messages);
            }
            Vec::new()
        }
        Value::Array(_) => list_entries(json),
        Value::String(s) if !s.is_empty() => vec![message_only(s.clone())],
        _ => Vec::new(),
    }
}

fn list_entries(value: &Value) -> Vec<ErrorObject> {
    match value {
        Value::Array(items) => items
            .iter()
            .filter_map(|item| match item {
                Value::String(s) => Some(message_only(s.clone())),
                Value::Object(_) => object_entry(item),
                Value::Null => None,
                other => Some(message_only(other.to_string())),
            })
            .collect(),
        other => entries_of(other),
    }
}

/// `{detail}` carries a string, or (FastAPI validation) a list of `{loc, msg, type}`.
fn detail_entries(detail: &Value) -> Vec<ErrorObject> {
    match detail {
        Value::String(s) => vec![message_only(s.clone())],
        Value::Array(items) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => message_only(s.clone()),
                Value::Object(o) => {
                    let msg = o.get("msg").and_then(Value::as_str).map(str::to_string);
                    let loc = o.get("loc").map(|l| l.to_string());
                    match (object_entry(item), msg) {
                        (Some(e), None) => e,
                        (_, Some(m)) => message_only(match loc {
                            Some(l) => format!("{m} (at {l})"),
                            None => m,
                        }),
                        (None, None) => message_only(item.to_string()),
                    }
                }
                other => message_only(other.to_string()),
            })
            .collect(),
        Value::Object(_) => entries_of(detail),
        Value::Null => Vec::new(),
        other => vec![message_only(other.to_string())],
    }
}

fn object_entry(value: &Value) -> Option<ErrorObject> {
    let map = value.as_object()?;
    let text = |k: &str| match map.get(k) {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Null) | None => None,
        Some(other) => Some(other.to_string()),
    };
    let entry = ErrorObject {
        code: text("code"),
        message: text("message").or_else(|| text("msg")).or_else(|| text("detail")),
        suggestion: text("suggestion"),
        error_uid: text("error_uid"),
    };
    if entry == ErrorObject::default() {
        Some(message_only(value.to_string()))
    } else {
        Some(entry)
    }
}

fn message_only(message: String) -> ErrorObject {
    ErrorObject { message: Some(message), ..Default::default() }
}

fn short(raw: &str) -> &str {
    let mut end = raw.len().min(300);
    while !raw.is_char_boundary(end) {
        end -= 1;
    }
    &raw[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(text: &str) -> Vec<ErrorObject> {
        let json: Option<Value> = serde_json::from_str(text).ok();
        parse_error_entries(json.as_ref(), text)
    }

    #[test]
    fn envelope_keeps_every_entry() {
        let e = parse(
            r#"{"errors":[{"code":"invalid_model_version","message":"Unknown model","suggestion":"List models","error_uid":"err-1"},{"code":"unsupported_file_type","message":"bad ext","error_uid":"err-2"}]}"#,
        );
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].code.as_deref(), Some("invalid_model_version"));
        assert_eq!(e[0].suggestion.as_deref(), Some("List models"));
        assert_eq!(e[1].error_uid.as_deref(), Some("err-2"));
    }

    #[test]
    fn detail_string() {
        let e = parse(r#"{"detail":"Invalid API key"}"#);
        assert_eq!(e, vec![message_only("Invalid API key".into())]);
    }

    #[test]
    fn bare_object() {
        let e = parse(r#"{"code":"NOT_FOUND","message":"no job","error_uid":"err-9"}"#);
        assert_eq!(e[0].code.as_deref(), Some("NOT_FOUND"));
        assert_eq!(e[0].error_uid.as_deref(), Some("err-9"));
    }

    #[test]
    fn plain_strings_in_envelope_and_array() {
        let e = parse(r#"{"errors":["invalid lens id","invalid lens config"]}"#);
        assert_eq!(e.len(), 2);
        assert_eq!(e[1].message.as_deref(), Some("invalid lens config"));
        let e = parse(r#"["a","b","c"]"#);
        assert_eq!(e.len(), 3);
    }

    #[test]
    fn lens_200_style() {
        let e = parse(
            r#"{"type":"error","event_data":{"is_valid":false,"error_messages":["unknown event type","empty payload"]}}"#,
        );
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].message.as_deref(), Some("unknown event type"));
    }

    #[test]
    fn unknown_shapes_are_empty_and_raw_is_kept_elsewhere() {
        assert!(parse("<html>bad gateway</html>").is_empty());
        assert!(parse(r#"{"weird":1}"#).is_empty());
        assert!(parse("").is_empty());
    }

    #[test]
    fn fastapi_validation_detail() {
        let body = json!({"detail":[{"loc":["body","model"],"msg":"field required","type":"missing"}]});
        let e = parse(&body.to_string());
        assert!(e[0].message.as_deref().unwrap().contains("field required"));
    }
}
