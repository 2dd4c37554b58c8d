//! File records and the simple-upload response.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `POST /files`, `POST /files/base64` and `DELETE /files/delete/{file_id}` answer with this.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileOpResponse {
    #[serde(default)]
    pub is_valid: bool,
    pub file_id: String,
    #[serde(default)]
    pub file_uid: Option<String>,
}

/// A file's metadata record. Unknown fields are kept in `extra`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileRecord {
    pub file_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The file types `/query` accepts in `file_ids`, by extension (lowercase, without the dot).
pub const QUERY_FILE_EXTENSIONS: &[&str] = &["png", "jpg", "jpeg", "txt", "json", "csv", "mp4"];

/// MIME type the platform derives from a file name's extension. `None` for unknown extensions.
pub fn mime_for_name(name: &str) -> Option<&'static str> {
    let ext = name.rsplit_once('.')?.1.to_ascii_lowercase();
    Some(match ext.as_str() {
        "jpg" | "jpeg" => "image/jpeg",
        "png" => "image/png",
        "mp4" => "video/mp4",
        "txt" => "text/plain",
        "csv" => "text/csv",
        "json" => "application/json",
        "jsonl" | "ndjson" => "application/x-ndjson",
        _ => return None,
    })
}

/// Content types the simple upload (`POST /files`) accepts.
pub const SIMPLE_UPLOAD_TYPES: &[&str] = &[
    "image/jpeg",
    "image/png",
    "video/mp4",
    "text/plain",
    "text/csv",
    "application/json",
];

/// The simple upload's size ceiling (512 MB).
pub const SIMPLE_UPLOAD_MAX_BYTES: u64 = 512 * 1000 * 1000;
/// The direct-to-cloud upload's size ceiling (250 GB, the spec's limits table).
pub const DIRECT_UPLOAD_MAX_BYTES: u64 = 250 * 1000 * 1000 * 1000;
