//! `POST /query`: the request fields of the spec's table and the response record.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The JSON type a request field takes, used to check keyword arguments before sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    String,
    StringList,
    Integer,
    Number,
    Boolean,
    Object,
    Events,
}

/// Every optional request field of the spec's table (`model` and `query` are positional).
pub const QUERY_FIELDS: &[(&str, FieldKind)] = &[
    ("system_prompt", FieldKind::String),
    ("instruction_prompt", FieldKind::String),
    ("response_start_prompt", FieldKind::String),
    ("template_name", FieldKind::String),
    ("file_ids", FieldKind::StringList),
    ("events", FieldKind::Events),
    ("max_new_tokens", FieldKind::Integer),
    ("max_frames", FieldKind::Integer),
    ("temperature", FieldKind::Number),
    ("do_sample", FieldKind::Boolean),
    ("repetition_penalty", FieldKind::Number),
    ("top_p", FieldKind::Number),
    ("top_k", FieldKind::Integer),
    ("presence_penalty", FieldKind::Number),
    ("normalize_input", FieldKind::Boolean),
    ("multi_image", FieldKind::Boolean),
    ("render", FieldKind::Boolean),
    ("query_metadata", FieldKind::Object),
    ("max_query_size_mb", FieldKind::Number),
    ("max_wait_time_sec", FieldKind::Number),
    ("sanitize_response", FieldKind::Boolean),
];

pub fn field_kind(name: &str) -> Option<FieldKind> {
    QUERY_FIELDS.iter().find(|(n, _)| *n == name).map(|(_, k)| *k)
}

/// Inline event types the spec names.
pub const EVENT_TYPES: &[&str] = &[
    "data.text",
    "data.json",
    "data.base64_img",
    "data.base64_img_array",
    "data.numeric_array",
];

/// The request as sent, less its events. `fields` holds only what the caller gave (the spec's
/// defaults are the server's business). Events are pre-serialised JSON appended after this
/// (see `client::query::build_request`) so numeric arrays are written exactly once.
#[derive(Debug, Serialize)]
pub struct QueryRequest {
    pub model: String,
    pub query: String,
    #[serde(flatten)]
    pub fields: Map<String, Value>,
}

/// The 200 response. Everything not named here stays in `extra`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct QueryResponse {
    #[serde(default)]
    pub query_id: Option<String>,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub response: Value,
    #[serde(default)]
    pub query_timestamp: Option<f64>,
    #[serde(default)]
    pub loading_timestamp: Option<f64>,
    #[serde(default)]
    pub inference_timestamp: Option<f64>,
    #[serde(default)]
    pub response_timestamp: Option<f64>,
    #[serde(default)]
    pub query_queue_time_sec: Option<f64>,
    #[serde(default)]
    pub inference_time_sec: Option<f64>,
    #[serde(default)]
    pub query_response_time_sec: Option<f64>,
    #[serde(default)]
    pub gpq_node: Option<String>,
    #[serde(default)]
    pub error_messages: Option<Vec<String>>,
    #[serde(default)]
    pub error_msg: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
