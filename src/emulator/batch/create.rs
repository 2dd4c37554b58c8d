//! `POST /batch/jobs`: the body checked against the pipeline registry, the organization's files
//! and its fine-tuning checkpoints, before anything is stored. Errors are bare objects; a job
//! with more than 10,000 inputs is 413 whatever its inputs are.

use serde_json::{json, Map, Value};

use super::pipelines::{self, Accepts, Pipeline};
use super::store::InputRec;
use crate::emulator::agents::store::type_id;
use crate::emulator::api_error::ApiError;
use crate::emulator::state::Shared;

/// CHOICES: "One job with more than 10,000 inputs is refused with 413."
pub(crate) const MAX_INPUTS: usize = 10_000;

/// A create body that passed every check.
pub(crate) struct Plan {
    pub name: String,
    pub pipeline_type: String,
    pub pipeline: &'static Pipeline,
    pub version: &'static str,
    pub inputs: Vec<InputRec>,
    pub parameters: Value,
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::invalid_request(message).bare()
}

fn text<'a>(body: &'a Map<String, Value>, field: &str) -> Result<&'a str, ApiError> {
    body.get(field).and_then(Value::as_str).filter(|s| !s.is_empty()).ok_or_else(|| invalid(format!("Field '{field}' is required (a string).")))
}

pub(crate) fn check(shared: &Shared, org: &str, body: &Map<String, Value>) -> Result<Plan, ApiError> {
    let name = text(body, "name")?.to_string();
    let key = text(body, "pipeline_key")?;
    let pipeline_type = match body.get("pipeline_type") {
        None | Some(Value::Null) => "batch",
        Some(Value::String(t)) if t == "batch" => "batch",
        Some(other) => return Err(invalid(format!("pipeline_type is {other}; the batch service runs \"batch\" pipelines."))),
    };
    let ports = match body.get("inputs") {
        Some(Value::Object(ports)) if !ports.is_empty() => ports,
        _ => return Err(invalid("Field 'inputs' is required: an object mapping each port name to a list of inputs.")),
    };
    let total: usize = ports.values().map(|v| v.as_array().map_or(1, Vec::len)).sum();
    if total > MAX_INPUTS {
        return Err(ApiError::payload_too_large(format!("The job has {total} inputs; at most {MAX_INPUTS} are accepted per job.")).bare());
    }
    let no_versions = || invalid(format!("Pipeline '{key}' has no active versions"));
    let pipeline = pipelines::find(key).filter(|p| p.key == key).ok_or_else(no_versions)?;
    let latest = pipeline.latest().ok_or_else(no_versions)?;
    let version = match body.get("pipeline_version") {
        None | Some(Value::Null) => latest,
        Some(Value::String(v)) => pipeline.versions.iter().copied().find(|known| known == v).ok_or_else(|| {
            invalid(format!("Pipeline '{key}' has no active version '{v}'; active: {}.", pipeline.versions.join(", ")))
        })?,
        Some(other) => return Err(invalid(format!("pipeline_version must be a string, got {other}."))),
    };
    let parameters = match body.get("parameters") {
        None | Some(Value::Null) => json!({}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => return Err(invalid("Field 'parameters' must be an object.")),
    };
    let mut inputs = Vec::new();
    for (port_name, entries) in ports {
        let port = pipeline.port(port_name).ok_or_else(|| {
            let known: Vec<&str> = pipeline.ports.iter().map(|p| p.name).collect();
            invalid(format!("Pipeline '{key}' has no port '{port_name}'; its ports are {}.", known.join(", ")))
        })?;
        let entries = entries.as_array().ok_or_else(|| invalid(format!("Port '{port_name}' takes a list of inputs.")))?;
        if port.accepts == Accepts::Checkpoint && entries.len() > 1 {
            return Err(invalid(format!("Port '{port_name}' takes one checkpoint.")));
        }
        for (index, entry) in entries.iter().enumerate() {
            inputs.push(input(shared, org, port_name, port.accepts, port.metadata, index, entry)?);
        }
    }
    for port in pipeline.ports.iter().filter(|p| p.required) {
        if !inputs.iter().any(|i| i.port == port.name) {
            return Err(invalid(format!("Pipeline '{key}' needs at least one input on port '{}'.", port.name)));
        }
    }
    Ok(Plan { name, pipeline_type: pipeline_type.to_string(), pipeline, version, inputs, parameters })
}

fn input(shared: &Shared, org: &str, port: &str, accepts: Accepts, metadata_fields: &[&str], index: usize, entry: &Value) -> Result<InputRec, ApiError> {
    let mut rec = InputRec { id: type_id("inp"), port: port.to_string(), index, file_id: None, file_uid: None, checkpoint_id: None,
                             metadata: entry.get("metadata").cloned().unwrap_or_else(|| json!({})), status: "PENDING" };
    match accepts {
        Accepts::Checkpoint => {
            let id = (entry.get("kind").and_then(Value::as_str) == Some("checkpoint"))
                .then(|| entry.get("checkpoint_id").and_then(Value::as_str)).flatten()
                .ok_or_else(|| invalid(format!("Port '{port}' takes {{kind: \"checkpoint\", checkpoint_id}}.")))?;
            if shared.fine_tuning.checkpoint_training(org, id).is_none() {
                return Err(invalid(format!("Checkpoint '{id}' was not found in this organization.")));
            }
            rec.checkpoint_id = Some(id.to_string());
        }
        Accepts::File(_) => {
            let file_id = entry.get("file_id").and_then(Value::as_str)
                .ok_or_else(|| invalid(format!("Each input of port '{port}' is {{file_id, metadata?}}.")))?;
            let file = shared.files.get(org, file_id)
                .ok_or_else(|| invalid(format!("File '{file_id}' (port '{port}') was not found in this organization.")))?;
            for field in metadata_fields {
                if !rec.metadata.get(*field).is_some_and(Value::is_string) {
                    return Err(invalid(format!("Each input of port '{port}' needs metadata {{{field}}}; '{file_id}' has none.")));
                }
            }
            rec.file_id = Some(file.file_id.clone());
            rec.file_uid = Some(file.file_uid.clone());
        }
    }
    Ok(rec)
}
