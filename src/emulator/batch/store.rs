//! Batch job records and what hangs off them (inputs, events, progress, outputs), with their
//! JSON as the wire notes give it. Times are ISO 8601 (`created_at`, `started_at`, ...).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use parking_lot::Mutex;
use serde_json::{json, Value};

use crate::emulator::agents::store::{timestamp, type_id};
use crate::emulator::files::direct::signing::Signer;

/// One input of a job: a file of a port, or the checkpoint of `worker.fine_tune_checkpoint`.
#[derive(Debug, Clone)]
pub(crate) struct InputRec {
    pub id: String,
    pub port: String,
    /// Position within its port.
    pub index: usize,
    pub file_id: Option<String>,
    pub file_uid: Option<String>,
    pub checkpoint_id: Option<String>,
    pub metadata: Value,
    pub status: &'static str,
}

impl InputRec {
    pub fn json(&self) -> Value {
        json!({
            "id": self.id, "port": self.port, "index": self.index, "file_id": self.file_id,
            "file_name": self.file_id, "file_uid": self.file_uid, "checkpoint_id": self.checkpoint_id,
            "metadata": self.metadata, "status": self.status,
        })
    }

    /// The spec's `search`: a case-insensitive substring of the file name or file id.
    pub fn matches(&self, needle_lowercase: &str) -> bool {
        [&self.file_id, &self.file_uid].iter().any(|f| f.as_deref().is_some_and(|f| f.to_lowercase().contains(needle_lowercase)))
    }
}

/// One output file, kept under the emulator's data dir and served by its storage route.
#[derive(Debug, Clone)]
pub(crate) struct OutputRec {
    pub id: String,
    pub input_id: String,
    pub filename: String,
    pub num_bytes: u64,
    pub path: PathBuf,
    pub created: SystemTime,
}

pub(crate) struct JobRec {
    pub org: String,
    pub id: String,
    /// The job record as served; `status` and the times change in place.
    pub json: Value,
    pub inputs: Vec<InputRec>,
    pub events: Vec<Value>,
    pub progress: Vec<Value>,
    pub outputs: Vec<OutputRec>,
    /// Bumped by every retry: the executor's run of an earlier attempt sees it and stops.
    pub attempt: u64,
    pub started: Option<SystemTime>,
}

impl JobRec {
    pub fn status(&self) -> &str {
        self.json["status"].as_str().unwrap_or("")
    }

    pub fn set_status(&mut self, status: &str, time_field: Option<&str>) {
        self.json["status"] = json!(status);
        if let Some(field) = time_field {
            self.json[field] = json!(timestamp(SystemTime::now()));
        }
    }

    /// Appends an event; ids are integers counted over the whole emulator, so they order events
    /// of a job and never repeat after a retry.
    pub fn event(&mut self, ids: &AtomicU64, level: &str, event_type: &str, message: String, input: Option<&InputRec>) {
        let id = ids.fetch_add(1, Ordering::SeqCst) + 1;
        let mut event = json!({
            "id": id, "event_type": event_type, "level": level, "message": message,
            "payload": {}, "created_at": timestamp(SystemTime::now()),
        });
        if let Some(input) = input {
            event["input_id"] = json!(input.id);
            event["index"] = json!(input.index);
            event["payload"] = json!({"port": input.port, "file_id": input.file_id});
        }
        self.events.push(event);
    }

    /// A progress entry; `step` counts the job's entries from 1, retries included.
    pub fn progress(&mut self, kind: &str, message: String) {
        let step = self.progress.len() + 1;
        self.progress.push(json!({"kind": kind, "step": step, "message": message, "created_at": timestamp(SystemTime::now())}));
    }
}

pub(crate) struct BatchStore {
    pub jobs: Mutex<Vec<JobRec>>,
    pub event_ids: AtomicU64,
    /// Where output files are written (under the emulator's temporary data dir).
    pub outputs_dir: PathBuf,
    /// Signs output URLs; `expire_output_urls` expires every URL signed so far.
    pub signer: Signer,
}

impl BatchStore {
    pub fn new(outputs_dir: PathBuf) -> Self {
        BatchStore { jobs: Mutex::new(Vec::new()), event_ids: AtomicU64::new(0), outputs_dir, signer: Signer::new(rand::random()) }
    }

    pub fn new_job_id() -> String {
        type_id("job")
    }
}
