//! `GET /models` records.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRecord {
    pub id: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Values the spec gives for the `scope` filter.
pub const MODEL_SCOPES: &[&str] = &["platform", "org", "all"];
