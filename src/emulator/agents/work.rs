//! The agents surface's job kinds on the shared executor: a run (`agent`), an evaluation
//! (`eval`) and an optimization's trials (`optimization`). Each reads its inputs from the
//! organization's files and writes its results back there.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};

use super::outputs::{append, read_labelled_csv, result_for, states, windows};
use super::store::{now, type_id, JsonRec};
use super::table::{transition, Status, Trigger};
use crate::emulator::jobs::{Control, Failure, Job};
use crate::emulator::state::Shared;

/// The bytes of a data ref: the organization's file for a `file` ref (its name when the file is
/// gone or the ref is of another kind, so a stand-in still has something to work on).
fn read_ref(shared: &Shared, org: &str, reference: &Value) -> (String, Vec<u8>) {
    let id = reference.get("id").and_then(Value::as_str).unwrap_or("input").to_string();
    let is_file = reference.get("type").and_then(Value::as_str) == Some("file");
    let bytes = is_file
        .then(|| shared.files.get(org, &id))
        .flatten()
        .and_then(|f| std::fs::read(&f.path).ok())
        .unwrap_or_else(|| id.clone().into_bytes());
    (id, bytes)
}

/// Writes `content` into the organization's files as `name`, and returns its size. An earlier
/// file of that name (a sink's output from a previous run) is replaced; a sink naming one of the
/// run's own sources is refused when the run is made (409 `file_already_exists`). (Result files
/// without a sink carry the run's id in their name, so they meet no other file.)
fn write_file(shared: &Shared, org: &str, name: &str, content: &[u8]) -> std::io::Result<u64> {
    let uid = uuid::Uuid::new_v4().to_string();
    let temp = shared.files.dir().join(format!("result-{uid}.part"));
    std::fs::write(&temp, content)?;
    let mime = crate::wire::files::mime_for_name(name).unwrap_or("application/octet-stream");
    shared.files.remove(org, name);
    match shared.files.adopt(org, name, mime, uid, &temp, content.len() as u64)? {
        Ok(_) => Ok(content.len() as u64),
        Err(()) => {
            let _ = std::fs::remove_file(&temp);
            Err(std::io::Error::other(format!("{name} was taken while the result was written")))
        }
    }
}

fn stem(name: &str) -> &str {
    let base = name.rsplit('/').next().unwrap_or(name);
    base.rsplit_once('.').map_or(base, |(s, _)| s)
}

pub(crate) struct RunJob {
    pub shared: Arc<Shared>,
    pub id: String,
}

impl RunJob {
    fn with<T>(&self, f: impl FnOnce(&mut super::store::AgentRec) -> T) -> Option<T> {
        let mut store = self.shared.agents.store.lock();
        store.agent_by_id_mut(&self.id).map(f)
    }

    fn end(&self, trigger: Trigger, error: Option<String>, results: Vec<Value>) {
        self.with(|agent| {
            let Ok(Some(to)) = transition(agent.status, trigger) else { return };
            agent.status = to;
            agent.completed_at = Some(now());
            agent.ended = Some(Instant::now());
            agent.results = results;
            match &error {
                Some(text) => agent.log("ERROR", "job.failed", format!("Run failed: {text}")),
                None => agent.log("INFO", "job.completed", format!("Run completed; {} result file(s).", agent.results.len())),
            }
            agent.error = error;
        });
    }
}

impl Job for RunJob {
    fn admitted(&self) {
        self.with(|a| a.log("INFO", "job.admitted", "Run admitted to the queue."));
    }

    fn started(&self) {
        self.with(|a| {
            a.started_at = Some(now());
            a.log("INFO", "job.started", "Run started.");
        });
    }

    fn control(&self) -> Control {
        match self.with(|a| a.status) {
            Some(Status::Running) => Control::Run,
            Some(Status::Paused) => Control::Pause,
            _ => Control::Stop,
        }
    }

    fn finish(&self, plan: Failure) {
        if let Some(error) = plan.error {
            return self.end(Trigger::Fail, Some(error), Vec::new());
        }
        let Some((org, key, values, connectors)) =
            self.with(|a| (a.org.clone(), a.blueprint_key.clone(), a.values.clone(), a.connectors.clone()))
        else {
            return;
        };
        let sources = connectors.get("source").and_then(Value::as_array).cloned().unwrap_or_default();
        let sink = connectors.get("sink").and_then(|s| s.get("id")).and_then(Value::as_str).map(str::to_string);
        let mut files: Vec<(String, String, Vec<u8>)> = Vec::new(); // (name, extension, content)
        for source in &sources {
            let (name, bytes) = read_ref(&self.shared, &org, source);
            let (ext, content) = result_for(&key, &self.id, &values, &name, &bytes);
            match (&sink, files.first_mut()) {
                (Some(_), Some(gathered)) => append(&mut gathered.2, ext, &content),
                (Some(sink_name), None) => files.push((sink_name.clone(), ext.to_string(), content)),
                (None, _) => {
                    // One result per input: inputs that share a stem (pump.csv, pump.txt) get
                    // numbered names rather than one overwriting the other.
                    let base = format!("{}__output_{}", self.id, stem(&name));
                    let taken = |candidate: &str| files.iter().any(|(n, _, _)| n == candidate);
                    let mut result_name = format!("{base}.{ext}");
                    let mut n = 2;
                    while taken(&result_name) {
                        result_name = format!("{base}_{n}.{ext}");
                        n += 1;
                    }
                    files.push((result_name, ext.to_string(), content))
                }
            }
        }
        let mut results = Vec::new();
        for (name, ext, content) in files {
            match write_file(&self.shared, &org, &name, &content) {
                Ok(size) => results.push(json!({
                    "id": type_id("res"),
                    "port_name": if sink.is_some() { "sink" } else { "output" },
                    "data": {
                        "filename": name,
                        "num_bytes": size,
                        "ref": format!("/files/download/{}", url::form_urlencoded::byte_serialize(name.as_bytes()).collect::<String>().replace('+', "%20")),
                        "file_extension": ext,
                        "expires_at": null,
                    },
                    "created_at": now(),
                })),
                Err(e) => return self.end(Trigger::Fail, Some(format!("could not write {name}: {e}")), Vec::new()),
            }
        }
        self.end(Trigger::Complete, None, results);
    }
}

/// The label column an example's `ground_truth` names for the `state` target, in the shape the
/// platform's examples carry (`{"state": {"from": {"column": "label"}}}`); `None` without a
/// ground truth (the CSV's own `state` or `label` column is read then). A ground truth of
/// another shape, or for targets other than `state` only, is an error saying what is read,
/// rather than being ignored (the emulator scores the `state` target).
fn ground_truth_column(example: &Value) -> Result<Option<String>, String> {
    let truth = match example.get("ground_truth") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(map)) => map,
        Some(_) => return Err("ground_truth must be an object such as {\"state\": {\"from\": {\"column\": \"label\"}}}".into()),
    };
    let Some(state) = truth.get("state") else {
        let targets: Vec<&str> = truth.keys().map(String::as_str).collect();
        return Err(format!(
            "ground_truth names the targets {}; the emulator scores the state target (ground_truth.state)",
            targets.join(", ")
        ));
    };
    match state.get("from").and_then(|f| f.get("column")).and_then(Value::as_str) {
        Some(column) if !column.trim().is_empty() => Ok(Some(column.to_string())),
        _ => Err("ground_truth.state must be {\"from\": {\"column\": <the CSV column holding the labels>}}".into()),
    }
}

/// Class names, confusion matrix and scores of one example: windows predicted by the blueprint's
/// stand-in against the labels of the column the example's `ground_truth` names, or else of the
/// CSV's `state` (or `label`) column.
fn score_example(shared: &Shared, org: &str, example: &Value, values: &Value) -> Result<(Vec<String>, Vec<String>), String> {
    let inputs = example.get("inputs").and_then(Value::as_array).cloned().unwrap_or_default();
    let (_, bytes) = inputs.first().map(|r| read_ref(shared, org, r)).ok_or("the example has no inputs")?;
    let column = ground_truth_column(example)?;
    let table = read_labelled_csv(&bytes, column.as_deref())?;
    let labels = table.labels.clone()
        .ok_or("no labels: the example has no ground_truth and its CSV has no state column")?;
    let names = states(values);
    let mut truth = Vec::new();
    let mut predicted = Vec::new();
    for w in windows(&table, values, names.len()) {
        let mut counts: Vec<(String, usize)> = Vec::new();
        for label in &labels[w.first..=w.last] {
            match counts.iter_mut().find(|(l, _)| l == label) {
                Some(c) => c.1 += 1,
                None => counts.push((label.clone(), 1)),
            }
        }
        let majority = counts.into_iter().max_by_key(|(_, n)| *n).map(|(l, _)| l).unwrap_or_default();
        truth.push(majority);
        predicted.push(names[w.best()].clone());
    }
    Ok((truth, predicted))
}

/// `metrics_report` from every example's (truth, predicted) windows.
fn metrics(pairs: &[(Vec<String>, Vec<String>)], primary: &Value) -> Value {
    let mut classes: Vec<String> = pairs.iter().flat_map(|(t, p)| t.iter().chain(p)).cloned().collect();
    classes.sort();
    classes.dedup();
    let index = |c: &String| classes.iter().position(|x| x == c).unwrap_or(0);
    let mut matrix = vec![vec![0u64; classes.len()]; classes.len()];
    for (truth, predicted) in pairs {
        for (t, p) in truth.iter().zip(predicted) {
            matrix[index(t)][index(p)] += 1;
        }
    }
    let total: u64 = matrix.iter().flatten().sum();
    let correct: u64 = (0..classes.len()).map(|i| matrix[i][i]).sum();
    let f1: Vec<f64> = (0..classes.len())
        .map(|i| {
            let tp = matrix[i][i] as f64;
            let predicted: f64 = (0..classes.len()).map(|r| matrix[r][i] as f64).sum();
            let actual: f64 = matrix[i].iter().map(|v| *v as f64).sum();
            if predicted + actual == 0.0 { 0.0 } else { 2.0 * tp / (predicted + actual) }
        })
        .collect();
    let macro_f1 = if f1.is_empty() { 0.0 } else { f1.iter().sum::<f64>() / f1.len() as f64 };
    json!({
        "primary": if primary.is_null() { json!("state.macro_f1") } else { primary.clone() },
        "targets": {"state": {
            "class_names": classes,
            "confusion_matrix": matrix,
            "accuracy": if total == 0 { 0.0 } else { correct as f64 / total as f64 },
            "macro_f1": macro_f1,
        }},
    })
}

fn finish_json(rec: &mut JsonRec, error: Option<String>) {
    let Some(status) = rec.status() else { return };
    let trigger = if error.is_some() { Trigger::Fail } else { Trigger::Complete };
    let Ok(Some(to)) = transition(status, trigger) else { return };
    rec.set("status", json!(to.as_str()));
    rec.set("completed_at", json!(now()));
    rec.set("error", json!(error));
}

fn json_control(status: Option<Status>) -> Control {
    match status {
        Some(Status::Running) => Control::Run,
        Some(Status::Paused) => Control::Pause,
        _ => Control::Stop,
    }
}

pub(crate) struct EvalJob {
    pub shared: Arc<Shared>,
    pub id: String,
    pub values: Value,
}

impl Job for EvalJob {
    fn started(&self) {
        let mut store = self.shared.agents.store.lock();
        if let Some(rec) = store.evals.iter_mut().find(|e| e.id() == self.id) {
            rec.set("started_at", json!(now()));
        }
    }

    fn control(&self) -> Control {
        let store = self.shared.agents.store.lock();
        json_control(store.evals.iter().find(|e| e.id() == self.id).and_then(JsonRec::status))
    }

    fn finish(&self, plan: Failure) {
        let failure = plan.error;
        let Some((org, examples, primary)) = ({
            let store = self.shared.agents.store.lock();
            store.evals.iter().find(|e| e.id() == self.id).map(|e| (e.org.clone(), e.json["examples"].clone(), e.json["primary"].clone()))
        }) else {
            return;
        };
        let mut scored = Vec::new();
        let mut per_example = Vec::new();
        for (i, example) in examples.as_array().cloned().unwrap_or_default().iter().enumerate() {
            let name = example.get("name").cloned().unwrap_or_else(|| json!(format!("example {}", i + 1)));
            // A failed evaluation scored nothing: each example ends failed with its error, not
            // `completed` with metrics beside a record that has no metrics_report.
            let scored_example = match &failure {
                Some(error) => Err(error.clone()),
                None => score_example(&self.shared, &org, example, &self.values),
            };
            match scored_example {
                Ok(pair) => {
                    let report = metrics(std::slice::from_ref(&pair), &primary);
                    per_example.push(json!({"id": type_id("exm"), "index": i, "name": name, "inputs": example["inputs"],
                                            "status": "completed", "metrics": report["targets"], "error": null}));
                    scored.push(pair);
                }
                Err(e) => per_example.push(json!({"id": type_id("exm"), "index": i, "name": name, "inputs": example["inputs"],
                                                  "status": "failed", "metrics": null, "error": e})),
            }
        }
        let mut store = self.shared.agents.store.lock();
        if let Some(rec) = store.evals.iter_mut().find(|e| e.id() == self.id) {
            if rec.status() != Some(Status::Running) {
                return;
            }
            let error = failure.or_else(|| scored.is_empty().then(|| "no example could be scored (no labels)".to_string()));
            if error.is_none() {
                rec.set("metrics_report", metrics(&scored, &primary));
            }
            rec.set("example_results", json!(per_example));
            finish_json(rec, error);
        }
    }
}

/// The metric an optimization's `objective` names, as (target, metric): `"accuracy"` or
/// `"state.accuracy"`, or an objective object's `metric` (or `name`) in the same form. An
/// object naming none is scored by the evaluations' default primary, `state.macro_f1`.
pub(crate) fn objective_metric(objective: &Value) -> Result<(String, String), String> {
    let name = match objective {
        Value::String(s) => s.as_str(),
        Value::Object(m) => ["metric", "name"].iter().find_map(|k| m.get(*k).and_then(Value::as_str)).unwrap_or("state.macro_f1"),
        _ => return Err("objective must be a metric name (such as \"accuracy\" or \"state.macro_f1\") or an object.".into()),
    };
    let (target, metric) = name.trim().split_once('.').unwrap_or(("state", name.trim()));
    if target.is_empty() || metric.is_empty() {
        return Err(format!("objective names the metric {name:?}; it takes <metric> or <target>.<metric>."));
    }
    Ok((target.to_string(), metric.to_string()))
}

/// One searched value of `search_space`.
pub(crate) enum Dimension {
    /// `[a, b, ...]`: one of these.
    Choices(Vec<Value>),
    /// `{low, high}` (or `{min, max}`): a number in between, whole when both bounds are.
    Range { low: f64, high: f64, whole: bool },
}

/// `search_space` as the trials draw from it: a map from value name to a list of choices or a
/// `{low, high}` range. Null is no space given (the trials then vary a window size of their
/// own); any other shape is refused at create, rather than ignored by every trial.
pub(crate) fn search_space(space: &Value) -> Result<Option<Vec<(String, Dimension)>>, String> {
    let map = match space {
        Value::Null => return Ok(None),
        Value::Object(map) => map,
        _ => return Err("search_space must be an object mapping each value name to a list of choices or a {low, high} range.".into()),
    };
    let mut dimensions = Vec::new();
    for (name, spec) in map {
        let bounds = |a: &str, b: &str| Some((spec.get(a)?.as_f64()?, spec.get(b)?.as_f64()?, spec.get(a)?.is_i64() && spec.get(b)?.is_i64()));
        let dimension = match spec {
            Value::Array(choices) if !choices.is_empty() => Dimension::Choices(choices.clone()),
            Value::Object(_) => match bounds("low", "high").or_else(|| bounds("min", "max")) {
                Some((low, high, whole)) if low <= high => Dimension::Range { low, high, whole },
                _ => return Err(format!("search_space.{name} must be {{low, high}} with low <= high (numbers).")),
            },
            _ => return Err(format!("search_space.{name} must be a list of one or more choices or a {{low, high}} range.")),
        };
        dimensions.push((name.clone(), dimension));
    }
    Ok(Some(dimensions))
}

/// The values of trial `number` of `trials`: the choices are walked as a grid (the first value
/// changing fastest), so the trials cover every choice they can, and a range is sampled evenly
/// from low to high. Deterministic: the same optimization gives the same trials.
fn trial_values(space: Option<&[(String, Dimension)]>, number: u64, trials: u64) -> Value {
    let Some(space) = space else {
        return json!({"window_size": 8 * (number + 1), "k_neighbors": 5 + 2 * number});
    };
    let mut values = serde_json::Map::new();
    let mut rest = number;
    for (name, dimension) in space {
        let value = match dimension {
            Dimension::Choices(choices) => {
                let n = choices.len() as u64;
                let pick = choices[(rest % n) as usize].clone();
                rest /= n;
                pick
            }
            Dimension::Range { low, high, whole } => {
                let at = if trials > 1 { number as f64 / (trials - 1) as f64 } else { 0.5 };
                let x = low + (high - low) * at;
                if *whole { json!(x.round() as i64) } else { json!(x) }
            }
        };
        values.insert(name.clone(), value);
    }
    Value::Object(values)
}

/// One trial of an optimization; finishing it starts the next, and the last one ends the
/// optimization.
pub(crate) struct TrialJob {
    pub shared: Arc<Shared>,
    pub optimization_id: String,
    pub number: u64,
}

impl TrialJob {
    fn optimization_status(&self) -> Option<Status> {
        let store = self.shared.agents.store.lock();
        store.optimizations.iter().find(|o| o.id() == self.optimization_id).and_then(JsonRec::status)
    }
}

impl Job for TrialJob {
    fn started(&self) {
        let mut store = self.shared.agents.store.lock();
        let Some((org, space, trials)) = store.optimizations.iter().find(|o| o.id() == self.optimization_id)
            .map(|o| (o.org.clone(), o.json["search_space"].clone(), o.json["budget"]["max_trials"].as_u64().unwrap_or(1)))
        else {
            return;
        };
        // The space was checked at create; one that no longer reads is no space.
        let space = search_space(&space).ok().flatten();
        let trial = json!({
            "id": type_id("otr"), "optimization_id": self.optimization_id, "trial_number": self.number,
            "status": "running", "objective_value": null, "metrics_report": null,
            "trial_values": trial_values(space.as_deref(), self.number, trials),
            "created_at": now(), "completed_at": null,
        });
        store.trials.push((self.optimization_id.clone(), JsonRec { org, json: trial }));
        progress(&mut store, &self.optimization_id);
    }

    fn control(&self) -> Control {
        json_control(self.optimization_status())
    }

    fn finish(&self, plan: Failure) {
        let failure = plan.error;
        let mut store = self.shared.agents.store.lock();
        let Some((max_trials, blueprint_id, objective)) = store
            .optimizations
            .iter()
            .find(|o| o.id() == self.optimization_id)
            .map(|o| (o.json["budget"]["max_trials"].as_u64().unwrap_or(1), o.json["blueprint_id"].clone(), o.json["objective"].clone()))
        else {
            return;
        };
        let (target, metric) = objective_metric(&objective).unwrap_or_else(|_| ("state".into(), "macro_f1".into()));
        // The blueprint's key, not its id: ids are new in every emulator, and the same
        // optimization must score the same everywhere.
        let blueprint = store.blueprints.iter().find(|b| json!(b.id) == blueprint_id).map_or_else(String::new, |b| b.lineage.clone());
        let trial_index = store.trials.iter().rposition(|(o, t)| *o == self.optimization_id && t.json["trial_number"] == json!(self.number));
        let values = trial_index.map_or(Value::Null, |i| store.trials[i].1.json["trial_values"].clone());
        // A deterministic score in [0.55, 0.95] from the blueprint, the trial's values and the metric.
        let seed = format!("{blueprint}{values}{target}.{metric}");
        let h = seed.bytes().fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
        let value = 0.55 + (h % 400) as f64 / 1000.0;
        if let Some((_, trial)) = trial_index.and_then(|i| store.trials.get_mut(i)) {
            match &failure {
                Some(e) => {
                    trial.set("status", json!("failed"));
                    trial.set("error", json!(e));
                }
                None => {
                    trial.set("status", json!("completed"));
                    trial.set("objective_value", json!(value));
                    trial.set("metrics_report", json!({"targets": {target: {metric: value}}}));
                }
            }
            trial.set("completed_at", json!(now()));
        }
        let ends = failure.is_some() || self.number + 1 >= max_trials;
        if ends {
            if let Some(rec) = store.optimizations.iter_mut().find(|o| o.id() == self.optimization_id) {
                finish_json(rec, failure);
            }
        }
        // After the end is recorded: an ended optimization has no trial pending.
        progress(&mut store, &self.optimization_id);
        if ends {
            return;
        }
        drop(store);
        let next = TrialJob { shared: self.shared.clone(), optimization_id: self.optimization_id.clone(), number: self.number + 1 };
        self.shared.jobs.continue_with(Arc::new(next), None);
    }
}

/// `progress`: the optimization's trials counted by their status (`running`, `completed`,
/// `failed`, `canceled`, the agent status words trials use), and `pending`, the trials of the
/// budget not yet begun. Once the optimization has ended no trial will begin any more, so
/// `pending` is 0 and the counts are those of the trials that ran: a canceled or failed
/// optimization does not report trials pending for ever.
pub(super) fn progress(store: &mut super::store::Store, optimization_id: &str) {
    let trials: Vec<&JsonRec> = store.trials.iter().filter(|(o, _)| o == optimization_id).map(|(_, t)| t).collect();
    let count = |s: &str| trials.iter().filter(|t| t.json["status"] == json!(s)).count();
    let (running, completed, failed, canceled) = (count("running"), count("completed"), count("failed"), count("canceled"));
    if let Some(rec) = store.optimizations.iter_mut().find(|o| o.id() == optimization_id) {
        let max = rec.json["budget"]["max_trials"].as_u64().unwrap_or(0) as usize;
        let ended = rec.status().is_some_and(|s| s.is_terminal());
        let pending = if ended { 0 } else { max.saturating_sub(trials.len()) };
        rec.set("progress", json!({"pending": pending, "running": running, "completed": completed, "failed": failed,
                                   "canceled": canceled}));
    }
}
