//! Lens records: registered per organization (mounted, modifiable) and the emulator's built-in
//! lens visible to every organization (registered, not modifiable).

use serde_json::{json, Map, Value};

use super::processors::{NOOP, SSE_WRITER};

pub(crate) const STATUS_MOUNTED: &str = "LENS_STATUS_MOUNTED";
pub(crate) const STATUS_REGISTERED: &str = "LENS_STATUS_REGISTERED";

#[derive(Debug, Clone)]
pub(crate) struct LensRec {
    pub id: String,
    /// `None`: built in, seen by every organization.
    pub org: Option<String>,
    pub modifiable: bool,
    pub status: &'static str,
    /// `lens_name`, `model_pipeline`, `model_parameters` and whatever else was registered.
    pub config: Map<String, Value>,
}

impl LensRec {
    pub fn new(org: &str, config: Map<String, Value>) -> LensRec {
        LensRec {
            id: format!("lns-{}", uuid::Uuid::new_v4().simple()),
            org: Some(org.to_string()),
            modifiable: true,
            status: STATUS_MOUNTED,
            config: with_defaults(config),
        }
    }

    pub fn name(&self) -> &str {
        self.config.get("lens_name").and_then(Value::as_str).unwrap_or("")
    }

    pub fn visible_to(&self, org: &str) -> bool {
        self.org.as_deref().is_none_or(|o| o == org)
    }

    pub fn json(&self) -> Value {
        json!({
            "lens_id": self.id,
            "lens_name": self.name(),
            "lens_status": self.status,
            "lens_modifiable": self.modifiable,
            "lens_config": self.config,
        })
    }
}

/// The resolved config: an empty pipeline and parameters when not given.
pub(crate) fn with_defaults(mut config: Map<String, Value>) -> Map<String, Value> {
    config.entry("model_pipeline").or_insert_with(|| json!([]));
    config.entry("model_parameters").or_insert_with(|| json!({}));
    config
}

/// A lens that echoes every update to the SSE stream, so a session can be tried without
/// registering anything.
pub(crate) fn builtin() -> Vec<LensRec> {
    let config = json!({
        "lens_name": "Emulator Echo Lens",
        "model_pipeline": [
            {"processor_name": NOOP, "processor_config": {}},
            {"processor_name": SSE_WRITER, "processor_config": {}},
        ],
        "model_parameters": {},
    });
    vec![LensRec {
        id: "lns-emulator-echo".to_string(),
        org: None,
        modifiable: false,
        status: STATUS_REGISTERED,
        config: config.as_object().cloned().unwrap_or_default(),
    }]
}
