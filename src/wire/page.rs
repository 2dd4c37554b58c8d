//! Cursor pages: `{data: [...], has_more, next_cursor, prev_cursor?}` (release 1.1.11 on).

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CursorPage<T = Value> {
    pub data: Vec<T>,
    #[serde(default)]
    pub has_more: bool,
    #[serde(default)]
    pub next_cursor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prev_cursor: Option<String>,
    /// The page came in the older offset style: `next_cursor` is the next `offset`.
    #[serde(skip)]
    pub offset_style: bool,
}
