//! Literal JSON written from the spec's tables, parsed with the client's types. If the client
//! and the emulator shared a wrong struct they would agree with each other; these fixtures are
//! the third party.

use serde_json::{json, Value};

use super::errors::ErrorEnvelope;
use super::files::{FileOpResponse, FileRecord};
use super::query::QueryResponse;
use crate::client::error_body::parse_error_entries;
use crate::client::pagination::normalize_page;
use crate::client::query::{output_texts, warnings, EncoderPayload};

/// The spec's `/query` 200 table, every field present.
const REASONER_RESPONSE: &str = r#"{
  "query_id": "q-7f3a",
  "status": "completed",
  "response": {
    "response": ["The belt stopped twice."],
    "query": "What happened?", "prompt": "...", "system": "", "instruction": "",
    "generation_latency": 0.41, "query_gpq_latency": 0.02, "query_queue_latency": 0.01,
    "results_timestamp": 1760000001.5, "prefetch_stats": {}
  },
  "query_timestamp": 1760000000.0,
  "loading_timestamp": 1760000000.1,
  "inference_timestamp": 1760000000.2,
  "response_timestamp": 1760000001.5,
  "query_queue_time_sec": 0.1,
  "inference_time_sec": 1.3,
  "query_response_time_sec": 1.5,
  "gpq_node": "gpq-node-12",
  "error_messages": ["queue: retried on another node"]
}"#;

#[test]
fn query_response_table() {
    let r: QueryResponse = serde_json::from_str(REASONER_RESPONSE).unwrap();
    assert_eq!(r.query_id.as_deref(), Some("q-7f3a"));
    assert_eq!(r.status.as_deref(), Some("completed"));
    assert_eq!(r.gpq_node.as_deref(), Some("gpq-node-12"));
    assert_eq!(r.inference_time_sec, Some(1.3));
    assert_eq!(r.response_timestamp, Some(1760000001.5));
    assert_eq!(output_texts(&r).unwrap(), vec!["The belt stopped twice."]);
    assert_eq!(warnings(&r), vec!["queue: retried on another node"]);
}

#[test]
fn failed_query_carries_error_msg() {
    let r: QueryResponse =
        serde_json::from_value(json!({"query_id": "q1", "status": "failed", "response": {}, "error_msg": "worker OOM"}))
            .unwrap();
    assert_eq!(r.error_msg.as_deref(), Some("worker OOM"));
}

#[test]
fn unknown_fields_are_kept() {
    let r: QueryResponse =
        serde_json::from_value(json!({"query_id": "q1", "status": "queued_v2", "brand_new": {"x": 1}})).unwrap();
    assert_eq!(r.status.as_deref(), Some("queued_v2"));
    assert_eq!(r.extra.get("brand_new"), Some(&json!({"x": 1})));
}

#[test]
fn encoder_layouts_from_wire_notes() {
    let one: Vec<f64> = (0..768).map(|i| i as f64 / 768.0).collect();
    let flat: EncoderPayload = serde_json::from_value(json!({
        "response": one,
        "warning_messages": ["window of 512 points was zero-padded to 1024"]
    }))
    .unwrap();
    assert_eq!((flat.response.rows, flat.response.cols), (1, 768));
    let nested: EncoderPayload = serde_json::from_value(json!({"response": [one.clone(), one.clone(), one]})).unwrap();
    assert_eq!((nested.response.rows, nested.response.cols), (3, 768));
}

#[test]
fn file_shapes() {
    let up: FileOpResponse =
        serde_json::from_str(r#"{"is_valid": true, "file_id": "notes.txt", "file_uid": "0b5c7a7e-2f0e-4c1b-9d8e-1f2a3b4c5d6e"}"#)
            .unwrap();
    assert!(up.is_valid);
    assert_eq!(up.file_id, "notes.txt");
    let rec: FileRecord = serde_json::from_str(
        r#"{"file_id": "a.csv", "file_uid": "fil_123", "num_bytes": 42, "created_at": "2026-11-01T10:00:00Z", "file_type": "text/csv", "width": 3}"#,
    )
    .unwrap();
    assert_eq!(rec.num_bytes, Some(42));
    assert_eq!(rec.extra.get("width"), Some(&json!(3)));
}

#[test]
fn cursor_list_from_wire_notes() {
    let page = normalize_page(json!({"data": [{"file_id": "a.txt"}], "has_more": true, "next_cursor": "opaque==", "prev_cursor": null}), None)
        .expect("a cursor page");
    assert!(page.has_more);
    assert_eq!(page.next_cursor.as_deref(), Some("opaque=="));
}

#[test]
fn every_error_shape_of_the_spec() {
    let cases: Vec<(&str, usize, Option<&str>)> = vec![
        (r#"{"errors": [{"code": "invalid_model_version", "message": "Unknown model", "suggestion": null, "error_uid": "err-1"}, {"code": "unsupported_file_type", "message": "x", "error_uid": "err-2"}]}"#, 2, Some("invalid_model_version")),
        (r#"{"detail": "Not authenticated"}"#, 1, None),
        (r#"{"code": "model_not_supported", "message": "no", "suggestion": "use newton", "error_uid": "err-3"}"#, 1, Some("model_not_supported")),
        (r#"{"errors": ["Invalid lens id", "Invalid lens config"]}"#, 2, None),
        (r#"{"type": "error", "event_data": {"is_valid": false, "error_messages": ["unknown event type"]}}"#, 1, None),
        (r#"{"code": "NOT_FOUND", "message": "Job not found", "error_uid": "err-4"}"#, 1, Some("NOT_FOUND")),
    ];
    for (body, count, code) in cases {
        let v: Value = serde_json::from_str(body).unwrap();
        let entries = parse_error_entries(Some(&v), body);
        assert_eq!(entries.len(), count, "{body}");
        assert_eq!(entries[0].code.as_deref(), code, "{body}");
    }
    let env: ErrorEnvelope = serde_json::from_str(r#"{"errors": [{"code": "file_already_exists", "message": "exists"}]}"#).unwrap();
    assert_eq!(env.errors[0].code.as_deref(), Some("file_already_exists"));
}
