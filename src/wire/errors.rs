//! The platform's error object (`{code, message, suggestion, error_uid}`) and its envelope.

use serde::{Deserialize, Serialize};

/// One platform error. Every field is optional when parsing: legacy bodies carry only a message.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suggestion: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_uid: Option<String>,
}

impl ErrorObject {
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        ErrorObject {
            code: Some(code.to_string()),
            message: Some(message.into()),
            suggestion: None,
            error_uid: None,
        }
    }

    pub fn with_suggestion(mut self, suggestion: impl Into<String>) -> Self {
        self.suggestion = Some(suggestion.into());
        self
    }

    pub fn with_uid(mut self, uid: impl Into<String>) -> Self {
        self.error_uid = Some(uid.into());
        self
    }
}

/// `{errors: [...]}`, the shape most endpoints answer with.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorEnvelope {
    pub errors: Vec<ErrorObject>,
}
