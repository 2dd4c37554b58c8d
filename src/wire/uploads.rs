//! The direct-to-cloud (multipart) upload: `POST /files/uploads/initiate`, part PUTs to
//! presigned URLs, `parts/checkpoint`, `parts/urls`, `complete`, `abort`. The spec names the
//! endpoints only; the shapes are those public usage shows (wire-notes).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InitiateRequest {
    pub filename: String,
    pub file_type: String,
    pub num_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_if_started: Option<bool>,
}

/// One part to send. `offset`/`length` may be absent; they then follow from `part_size`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PartTarget {
    pub part_number: u32,
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InitiateResponse {
    pub upload_id: String,
    #[serde(default)]
    pub file_uid: Option<String>,
    /// `simple` or `multipart`.
    #[serde(default)]
    pub strategy: Option<String>,
    #[serde(default)]
    pub num_parts: Option<u64>,
    #[serde(default)]
    pub part_size: Option<u64>,
    /// The parts still to send (on a resume, only those not yet checkpointed).
    #[serde(default)]
    pub parts: Vec<PartTarget>,
    #[serde(default)]
    pub expires_at: Option<Value>,
    #[serde(default)]
    pub is_resume: Option<bool>,
    #[serde(default)]
    pub total_bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartToken {
    pub part_number: u32,
    pub part_token: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PartsRequest {
    pub parts: Vec<PartToken>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PartUrlsRequest {
    pub part_numbers: Vec<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PartUrl {
    pub part_number: u32,
    pub url: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PartUrlsResponse {
    pub parts: Vec<PartUrl>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CompleteResponse {
    #[serde(default)]
    pub file_uid: Option<String>,
    #[serde(default)]
    pub file_name: Option<String>,
    #[serde(default)]
    pub file_status: Option<String>,
    #[serde(default)]
    pub num_bytes: Option<u64>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
