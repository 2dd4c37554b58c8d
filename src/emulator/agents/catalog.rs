//! What every organization sees: the node registry and the canonical blueprints (`osm`, `red`,
//! `ad`, `mga`, `tva`) with their Quick Start bundles.

use serde_json::{json, Value};

/// `(key, kind, description)`. Blueprint documents are checked against these keys.
pub const NODES: &[(&str, &str, &str)] = &[
    ("MultiModalSource", "source", "Reads the run's input files (CSV, JSONL, video, images)."),
    ("RecordsSink", "sink", "Writes the run's records to result files (config.format: jsonl/per-request, json/per-request, csv)."),
    ("OmegaEncoder", "node", "Encodes numeric windows into 768-dimension embeddings."),
    ("StateClassifier", "node", "Labels each window with one of the configured states."),
    ("EventDetector", "node", "Scores each window for rare events."),
    ("NewtonReasoner", "node", "Answers prompts over text, images and video frames."),
    ("ManualGenerator", "node", "Turns a procedure video into numbered manual steps."),
    ("TaskVerifier", "node", "Checks that a recorded task followed its steps."),
];

pub fn node_registry() -> Vec<Value> {
    NODES
        .iter()
        .map(|(key, kind, description)| json!({"key": key, "kind": kind, "name": key, "description": description}))
        .collect()
}

pub fn is_node(key: &str) -> bool {
    NODES.iter().any(|(k, _, _)| *k == key)
}

/// A canonical blueprint: key, name, description, the processing node, its model slot (name and
/// default registry tag), default values, and its Quick Start bundle's data set.
pub struct Canonical {
    pub key: &'static str,
    pub name: &'static str,
    pub description: &'static str,
    pub node: &'static str,
    pub model_slot: (&'static str, &'static str),
    pub values: fn() -> Value,
    pub quick_start: &'static [&'static str],
}

/// Default tags of the canonical model slots: versions of the default model registry.
const ENCODER: &str = "OmegaEncoder::omega_embeddings_01";
const REASONER: &str = "Newton::c2_4_7b_251215a172f6d7";

pub const CANONICAL: &[Canonical] = &[
    Canonical {
        key: "osm",
        name: "Operational State Monitoring Agent",
        description: "Labels each window of a sensor recording with the machine's operating state.",
        node: "StateClassifier",
        model_slot: ("encoder", ENCODER),
        values: || json!({"window_size": 16, "step_size": 16, "states": ["idle", "running", "loaded", "fault"]}),
        quick_start: &["Volve Six State"],
    },
    Canonical {
        key: "red",
        name: "Rare Event Detection Agent",
        description: "Scores each window of a sensor recording for rare events.",
        node: "EventDetector",
        model_slot: ("encoder", ENCODER),
        values: || json!({"window_size": 16, "step_size": 16, "threshold": 0.8}),
        quick_start: &["Pump Breakdown"],
    },
    Canonical {
        key: "ad",
        name: "Anomaly Detection Agent",
        description: "Scores each window of a sensor recording for anomalies.",
        node: "EventDetector",
        model_slot: ("encoder", ENCODER),
        values: || json!({"window_size": 16, "step_size": 16, "threshold": 0.7}),
        quick_start: &["Bearing Breakdown", "Bearing Breakdown Embeddings"],
    },
    Canonical {
        key: "mga",
        name: "Manual Generation Agent",
        description: "Turns a procedure video into a step-by-step manual.",
        node: "ManualGenerator",
        model_slot: ("reasoner", REASONER),
        values: || {
            json!({"max_frames": 32, "max_new_tokens": 256,
                   "prompt": "Describe each step of the procedure shown, one instruction per step."})
        },
        quick_start: &["Assembly Line Video"],
    },
    Canonical {
        key: "tva",
        name: "Task Verification Agent",
        description: "Checks that a recorded task followed its expected steps.",
        node: "TaskVerifier",
        model_slot: ("reasoner", REASONER),
        values: || json!({"max_frames": 32, "steps": ["pick", "place", "inspect"]}),
        quick_start: &["Pick and Place Video"],
    },
];

/// The blueprint document of a canonical key: source -> node -> sink, with the values it uses.
pub fn canonical_document(c: &Canonical) -> Value {
    let mut source_config = json!({});
    if c.key == "mga" {
        // The wire notes: the mga blueprint keeps its prompt in the source's default_text.
        source_config = json!({"default_text": "${values.prompt}"});
    }
    json!({
        "name": c.name,
        "description": c.description,
        "graph": {"edges": [{"from": "source", "to": "model"}, {"from": "model", "to": "sink"}]},
        "connectors": {
            "source": {"key": "MultiModalSource", "config": source_config},
            "sink": {"key": "RecordsSink", "config": {"format": "jsonl/per-request"}},
        },
        "nodes": {"model": {"key": c.node, "config": {"values": "${values}"}}},
        // The slot a bundle's `models` may fill (release 1.1.10 checks bundles against it).
        "models": {c.model_slot.0: {"tag": c.model_slot.1, "parameters": {}}},
        "values": (c.values)(),
    })
}
