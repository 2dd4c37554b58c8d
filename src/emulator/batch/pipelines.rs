//! The pipeline registry: the two pipelines public usage shows (wire notes) and one retired key,
//! as data, with the records and schemas the registry routes serve. A job's ports and the kind of
//! input each takes are checked against it.

use serde_json::{json, Value};

/// What one port of a pipeline takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Accepts {
    /// Files of the organization with this extension.
    File(&'static str),
    /// A fine-tuning checkpoint `{kind: "checkpoint", checkpoint_id}`.
    Checkpoint,
}

#[derive(Debug)]
pub(crate) struct Port {
    pub name: &'static str,
    pub accepts: Accepts,
    pub required: bool,
    /// Whether each input of this port is processed into one output file.
    pub processed: bool,
    /// Metadata fields each entry carries (`class` on n-shot examples).
    pub metadata: &'static [&'static str],
    pub description: &'static str,
}

#[derive(Debug)]
pub(crate) struct Pipeline {
    pub id: &'static str,
    pub key: &'static str,
    pub name: &'static str,
    pub description: &'static str,
    /// Active versions, newest last; none for a retired key.
    pub versions: &'static [&'static str],
    pub ports: &'static [Port],
    /// `parameters.worker.config` fields, as a JSON-schema-like description.
    pub config: fn() -> Value,
}

impl Pipeline {
    pub fn latest(&self) -> Option<&'static str> {
        self.versions.last().copied()
    }

    pub fn port(&self, name: &str) -> Option<&Port> {
        self.ports.iter().find(|p| p.name == name)
    }

    pub fn record(&self) -> Value {
        json!({
            "id": self.id, "key": self.key, "name": self.name, "description": self.description,
            "pipeline_type": "batch", "version": self.latest(), "versions": self.versions,
            "status": if self.versions.is_empty() { "retired" } else { "active" },
            "ports": self.ports.iter().map(|p| p.name).collect::<Vec<_>>(),
        })
    }

    pub fn schema(&self) -> Value {
        let ports: Vec<Value> = self.ports.iter().map(|p| {
            let accepts = match p.accepts {
                Accepts::File(ext) => json!({"kind": "file", "format": ext, "entry": {"file_id": "string", "metadata": "object (optional)"}}),
                Accepts::Checkpoint => json!({"kind": "checkpoint", "entry": {"kind": "checkpoint", "checkpoint_id": "string"}}),
            };
            json!({"name": p.name, "required": p.required, "accepts": accepts, "metadata": p.metadata,
                   "produces_output": p.processed, "description": p.description})
        }).collect();
        json!({
            "pipeline_id": self.id, "key": self.key, "version": self.latest(), "ports": ports,
            "parameters": {"worker": {"parallelism": {"type": "integer", "default": 1}, "config": (self.config)()}},
        })
    }
}

fn machine_state_config() -> Value {
    json!({
        "model_type": {"type": "string", "default": "omega_1_5_base"},
        "batch_size": {"type": "integer", "default": 32},
        "reader_config": {
            "data_columns": {"type": "array of column names or \"auto\"", "default": "auto"},
            "timestamp_column": {"type": "string", "default": super::outputs::DEFAULT_TIMESTAMP_COLUMN},
            "window_size": {"type": "integer", "default": super::outputs::DEFAULT_WINDOW,
                             "note": "must equal the training window of a fine_tune_checkpoint"},
            "step_size": {"type": "integer", "default": "window_size"},
        },
        "classifier_config": {
            "n_neighbors": {"type": "integer", "default": 1},
            "metric": {"type": "string", "default": "cosine"},
            "weights": {"type": "string", "default": "uniform"},
            "normalize_embeddings": {"type": "boolean", "default": true},
        },
    })
}

fn activity_config() -> Value {
    json!({
        "generation": {"type": "object", "default": {}},
        "model_variant": {"type": "string", "default": "base"},
        "batch_size": {"type": "integer", "default": 8},
    })
}

fn no_config() -> Value {
    json!({})
}

pub(crate) const MACHINE_STATE: &str = "machine-state-classification";
pub(crate) const ACTIVITY: &str = "activity-detection";

pub(crate) static PIPELINES: &[Pipeline] = &[
    Pipeline {
        id: "pln_machine_state_classification",
        key: MACHINE_STATE,
        name: "Machine state classification",
        description: "Labels every window of each CSV recording with the class of its nearest n-shot example.",
        versions: &["1.3.0", "1.4.0"],
        ports: &[
            Port { name: "worker.inference", accepts: Accepts::File("csv"), required: true, processed: true, metadata: &[],
                   description: "CSV recordings to classify; one prediction file each." },
            Port { name: "worker.n_shots", accepts: Accepts::File("csv"), required: false, processed: false, metadata: &["class"],
                   description: "Labelled CSV examples; metadata {class} names the class each represents." },
            Port { name: "worker.fine_tune_checkpoint", accepts: Accepts::Checkpoint, required: false, processed: false, metadata: &[],
                   description: "A fine-tuning checkpoint to encode with; its training window must equal window_size." },
        ],
        config: machine_state_config,
    },
    Pipeline {
        id: "pln_activity_detection",
        key: ACTIVITY,
        name: "Activity detection",
        description: "Answers every JSONL record ({system?, instruction?, prompt?, inputs?}) of each input file.",
        versions: &["0.9.2"],
        ports: &[Port { name: "worker.data", accepts: Accepts::File("jsonl"), required: true, processed: true, metadata: &[],
                        description: "JSONL files, one record a line; one prediction file each." }],
        config: activity_config,
    },
    Pipeline {
        id: "pln_anomaly_scoring",
        key: "anomaly-scoring",
        name: "Anomaly scoring (retired)",
        description: "Retired; kept in the registry with no active versions.",
        versions: &[],
        ports: &[],
        config: no_config,
    },
];

/// A pipeline by its id or its key.
pub(crate) fn find(id_or_key: &str) -> Option<&'static Pipeline> {
    PIPELINES.iter().find(|p| p.id == id_or_key || p.key == id_or_key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry() {
        let ms = find(MACHINE_STATE).unwrap();
        assert_eq!(find(ms.id).unwrap().key, MACHINE_STATE);
        assert_eq!(ms.latest(), Some("1.4.0"));
        assert_eq!(ms.port("worker.n_shots").unwrap().metadata, ["class"]);
        assert_eq!(ms.port("worker.fine_tune_checkpoint").unwrap().accepts, Accepts::Checkpoint);
        assert_eq!(find(ACTIVITY).unwrap().port("worker.data").unwrap().accepts, Accepts::File("jsonl"));
        let retired = find("anomaly-scoring").unwrap();
        assert_eq!(retired.latest(), None);
        assert_eq!(retired.record()["status"], "retired");
        let schema = ms.schema();
        assert_eq!(schema["ports"].as_array().unwrap().len(), 3);
        assert!(schema["parameters"]["worker"]["config"]["reader_config"]["window_size"].is_object());
    }
}
