//! A batch job on the shared executor: `PENDING` -> `RUNNING` (after admission) -> `COMPLETED`
//! once every input is processed (some may have failed), or `FAILED` (a planned failure, or a
//! checkpoint whose training window differs from the job's). Per input it writes the events the
//! wire notes quote, a progress entry and one output file; a failed input writes none.
//!
//! Inputs are read and outputs written with the job's lock released, then applied only if the
//! job is still running the same attempt (a cancel or retry in between wins).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::SystemTime;

use serde_json::{json, Value};

use super::outputs::{self, Classes, Reader};
use super::pipelines::{self, Accepts, MACHINE_STATE};
use super::store::{InputRec, JobRec, OutputRec};
use super::table::{transition, Move};
use crate::emulator::agents::store::type_id;
use crate::emulator::jobs::{Control, Failure, Job};
use crate::emulator::state::Shared;

pub(crate) fn spawn(shared: &Arc<Shared>, job_id: String, attempt: u64) {
    shared.jobs.spawn("batch", Arc::new(BatchRun { shared: shared.clone(), job_id, attempt }), None);
}

pub(crate) fn remove_output_files(outputs: &[OutputRec]) {
    for output in outputs {
        let _ = std::fs::remove_file(&output.path);
    }
}

struct BatchRun {
    shared: Arc<Shared>,
    job_id: String,
    attempt: u64,
}

/// What one input came to.
enum Outcome {
    Written(OutputRec),
    Failed(String),
}

impl BatchRun {
    /// `f` on the job, if it still exists and is still this attempt.
    fn with<T>(&self, f: impl FnOnce(&mut JobRec) -> T) -> Option<T> {
        let mut jobs = self.shared.batch.jobs.lock();
        jobs.iter_mut().find(|j| j.id == self.job_id && j.attempt == self.attempt).map(f)
    }

    fn fail(&self, error: &str) {
        let ids = &self.shared.batch.event_ids;
        self.with(|j| {
            let Some(to) = transition(j.status(), Move::Fail) else { return };
            j.set_status(to, Some("failed_at"));
            j.json["errors"] = json!([error]);
            for input in j.inputs.iter_mut().filter(|i| i.status == "PENDING") {
                input.status = "FAILED";
            }
            j.event(ids, "FAILED", "job.failed", format!("FAILED Job failed: {error}"), None);
            j.progress("job", format!("Failed: {error}"));
        });
    }

    /// The job's work, done without its lock: a configuration error, or each processed input's
    /// outcome in order.
    fn process(&self, org: &str, key: &str, config: &Value, inputs: &[InputRec], failing: &HashSet<String>) -> Result<Vec<(InputRec, Outcome)>, String> {
        let reader = Reader::from_config(config);
        let mut fallback_labels = Vec::new();
        let mut trained_examples = Vec::new();
        if let Some(checkpoint) = inputs.iter().find_map(|i| i.checkpoint_id.as_deref()) {
            let training = self.shared.fine_tuning.checkpoint_training(org, checkpoint)
                .ok_or_else(|| format!("checkpoint {checkpoint} is no longer available"))?;
            let trained = training.window_size.map_or(outputs::DEFAULT_WINDOW as u64, |w| w);
            if reader.window_size as u64 != trained {
                return Err(format!(
                    "reader_config.window_size is {} but checkpoint {checkpoint} was trained on windows of {trained}; \
                     set window_size to {trained} to use it", reader.window_size));
            }
            fallback_labels = training.labels;
            trained_examples = training.examples;
        }
        let read_file = |f: &str| self.shared.files.get(org, f).and_then(|f| std::fs::read(&f.path).ok());
        let read = |i: &InputRec| i.file_id.as_deref().and_then(read_file);
        let mut examples: Vec<(String, Vec<u8>)> = inputs.iter().filter(|i| i.port == "worker.n_shots")
            .filter_map(|i| Some((i.metadata["class"].as_str()?.to_string(), read(i)?))).collect();
        // Without n-shot inputs, a checkpoint classifies by the examples it was trained on.
        if examples.is_empty() {
            examples = trained_examples.iter().filter_map(|(class, f)| Some((class.clone(), read_file(f)?))).collect();
        }
        let classes = Classes::new(&examples, &fallback_labels, &reader);
        let pipeline = pipelines::find(key);
        let processed = |i: &&InputRec| pipeline.and_then(|p| p.port(&i.port)).is_some_and(|p| p.processed && matches!(p.accepts, Accepts::File(_)));
        let mut results = Vec::new();
        for (n, input) in inputs.iter().filter(processed).enumerate() {
            let name = input.file_id.clone().unwrap_or_default();
            let outcome = if failing.contains(&name) {
                Outcome::Failed("planned failure (fail_next_job)".to_string())
            } else {
                match read(input) {
                    None => Outcome::Failed(format!("file {name} could not be read")),
                    Some(bytes) => {
                        let (ext, content) = if key == MACHINE_STATE {
                            ("csv", outputs::machine_state_csv(&bytes, &reader, &classes))
                        } else {
                            ("jsonl", outputs::activity_jsonl(&bytes))
                        };
                        self.write(input, outputs::output_name(&name, n, ext), content)
                    }
                }
            };
            results.push((input.clone(), outcome));
        }
        Ok(results)
    }

    fn write(&self, input: &InputRec, filename: String, content: Vec<u8>) -> Outcome {
        let id = type_id("out");
        let dir = &self.shared.batch.outputs_dir;
        let path = dir.join(&id);
        match std::fs::create_dir_all(dir).and_then(|_| std::fs::write(&path, &content)) {
            Ok(()) => Outcome::Written(OutputRec { id, input_id: input.id.clone(), filename, num_bytes: content.len() as u64, path,
                                                   created: SystemTime::now() }),
            Err(e) => Outcome::Failed(format!("the output could not be stored: {e}")),
        }
    }
}

impl Job for BatchRun {
    fn admitted(&self) {
        self.with(|j| {
            j.progress("job", "Admitted to the batch queue".to_string());
        });
    }

    fn started(&self) {
        let ids = &self.shared.batch.event_ids;
        self.with(|j| {
            let Some(to) = transition(j.status(), Move::Start) else { return };
            j.set_status(to, Some("started_at"));
            j.started = Some(SystemTime::now());
            j.event(ids, "INFO", "job.started", "Job started".to_string(), None);
            j.progress("job", "Running".to_string());
        });
    }

    fn control(&self) -> Control {
        match self.with(|j| j.status().to_string()).as_deref() {
            Some("PENDING" | "RUNNING") => Control::Run,
            _ => Control::Stop,
        }
    }

    fn finish(&self, plan: Failure) {
        let (failure, failed_inputs) = (plan.error, plan.failed_inputs);
        let Some(Some((org, key, config, inputs))) = self.with(|j| {
            (j.status() == "RUNNING").then(|| (j.org.clone(), j.json["pipeline_key"].as_str().unwrap_or("").to_string(),
                                               j.json["parameters"]["worker"]["config"].clone(), j.inputs.clone()))
        }) else { return };
        if let Some(error) = failure {
            return self.fail(&error);
        }
        let failing: HashSet<String> = failed_inputs.into_iter().collect();
        let results = match self.process(&org, &key, &config, &inputs, &failing) {
            Ok(results) => results,
            Err(error) => return self.fail(&error),
        };
        let ids = &self.shared.batch.event_ids;
        let applied = self.with(|j| {
            if j.status() != "RUNNING" {
                return false;
            }
            for (n, (input, outcome)) in results.iter().enumerate() {
                let name = input.file_id.as_deref().unwrap_or("");
                j.event(ids, "INFO", "input.started", format!("Processing input {n}: {name}"), Some(input));
                let status = match outcome {
                    Outcome::Written(output) => {
                        j.event(ids, "SUCCESS", "inference.success", format!("SUCCESS Processed 1 items (1 success, 0 failed) from {name}"), Some(input));
                        j.outputs.push(output.clone());
                        "COMPLETED"
                    }
                    Outcome::Failed(reason) => {
                        j.event(ids, "FAILED", "inference.failed", format!("FAILED Processing failed for {name}"), Some(input));
                        if let Some(last) = j.events.last_mut() {
                            last["payload"]["error"] = json!(reason);
                        }
                        "FAILED"
                    }
                };
                if let Some(rec) = j.inputs.iter_mut().find(|i| i.id == input.id) {
                    rec.status = status;
                }
                j.progress("input", format!("{name}: {}", status.to_ascii_lowercase()));
            }
            for rec in j.inputs.iter_mut().filter(|i| i.status == "PENDING") {
                // Examples and the checkpoint are used, not processed into outputs.
                rec.status = "COMPLETED";
            }
            let seconds = j.started.and_then(|s| s.elapsed().ok()).map_or(0, |d| d.as_secs_f64().round() as u64);
            if let Some(to) = transition(j.status(), Move::Complete) {
                j.set_status(to, Some("completed_at"));
            }
            j.event(ids, "SUCCESS", "job.completed", format!("SUCCESS Job completed in {seconds}s"), None);
            j.progress("job", "Completed".to_string());
            true
        });
        if applied != Some(true) {
            // Cancelled or retried while the inputs were processed: the files belong to no one.
            let written: Vec<OutputRec> = results.into_iter().filter_map(|(_, o)| match o { Outcome::Written(o) => Some(o), Outcome::Failed(_) => None }).collect();
            remove_output_files(&written);
        }
    }
}
