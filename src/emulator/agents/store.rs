//! The agents surface's records and their JSON: blueprints, bundles, agents (runs) with their
//! logs, events and results, evaluations and optimizations. One store for the whole emulator;
//! canonical records have no organization and are visible to every one.

use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Map, Value};

use super::table::Status;

/// `prefix_` + 26 lowercase base32 characters, the shape of the platform's TypeIDs: a UUIDv7
/// written most significant bits first, so ids sort as text in the order they were made (the
/// lists page by "older than this id", which must still place an id that has since been deleted
/// or no longer matches the list's filter).
pub(crate) fn type_id(prefix: &str) -> String {
    const ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";
    let bits = uuid::Uuid::now_v7().as_u128();
    // 26 characters hold 130 bits: the first takes the top 3, each next one 5.
    let body: String = (0..26).map(|i| ALPHABET[((bits >> (125 - 5 * i)) & 31) as usize] as char).collect();
    format!("{prefix}_{body}")
}

/// ISO 8601 UTC with exactly six fractional digits, so timestamps sort as text (log rows are
/// read that way by public scripts).
pub(crate) fn timestamp(t: SystemTime) -> String {
    let dt = time::OffsetDateTime::from(t);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        dt.year(),
        u8::from(dt.month()),
        dt.day(),
        dt.hour(),
        dt.minute(),
        dt.second(),
        dt.microsecond()
    )
}

pub(crate) fn now() -> String {
    timestamp(SystemTime::now())
}

#[derive(Debug, Clone)]
pub(crate) struct BlueprintRec {
    pub id: String,
    pub key: String,
    /// The key the version was created under: every version of one key shares it.
    pub lineage: String,
    pub name: String,
    pub description: String,
    pub document: Value,
    pub yaml: Option<String>,
    pub org: Option<String>,
    pub active: bool,
    pub created: SystemTime,
    pub seq: u64,
}

impl BlueprintRec {
    pub fn summary(&self) -> Value {
        json!({
            "id": self.id, "blueprint_key": self.key, "name": self.name, "description": self.description,
            "is_canonical": self.org.is_none(), "is_active": self.active, "created_at": timestamp(self.created),
        })
    }

    /// The whole record; `render_yaml` adds a YAML rendering when none was stored.
    pub fn full(&self, render_yaml: bool) -> Value {
        let mut v = self.summary();
        let mut document = self.document.clone();
        if let Some(map) = document.as_object_mut() {
            map.insert("blueprint_id".into(), json!(self.id));
        }
        let yaml = match (&self.yaml, render_yaml) {
            (Some(text), _) => json!(text),
            (None, true) => serde_yaml_ng::to_string(&self.document).map_or(Value::Null, Value::String),
            (None, false) => Value::Null,
        };
        if let Some(map) = v.as_object_mut() {
            map.insert("document".into(), document);
            map.insert("yaml_document".into(), yaml);
        }
        v
    }
}

#[derive(Debug, Clone)]
pub(crate) struct BundleRec {
    pub id: String,
    pub name: String,
    pub description: String,
    pub blueprint_id: String,
    pub values: Value,
    pub models: Value,
    pub artifacts: Value,
    pub org: Option<String>,
    pub created: SystemTime,
    pub seq: u64,
    /// Sequence number of its newest run (0: never run), for `sort=last_run_at`.
    pub last_run: u64,
}

impl BundleRec {
    pub fn json(&self) -> Value {
        let mut v = json!({
            "id": self.id, "name": self.name, "description": self.description, "blueprint_id": self.blueprint_id,
            "values": self.values, "models": self.models, "artifacts": self.artifacts, "status": "ready",
            "is_canonical": self.org.is_none(), "created_at": timestamp(self.created),
        });
        if let (Some(org), Some(map)) = (&self.org, v.as_object_mut()) {
            map.insert("org_id".into(), json!(org));
        }
        v
    }
}

#[derive(Debug, Clone)]
pub(crate) struct AgentRec {
    pub id: String,
    pub org: String,
    pub bundle_id: String,
    pub name: String,
    pub blueprint_key: String,
    pub blueprint_id: String,
    /// The bundle's values over the blueprint's defaults, as the run uses them.
    pub values: Value,
    pub status: Status,
    pub created: String,
    pub started_at: Option<String>,
    pub completed_at: Option<String>,
    pub error: Option<String>,
    pub connectors: Value,
    pub job_id: String,
    pub mode: Option<String>,
    pub logs: Vec<Value>,
    pub events: Vec<Value>,
    pub results: Vec<Value>,
    /// When its run ended by itself, completed or failed (the status lag counts from here; a
    /// cancel is the caller's own move and shows at once).
    pub ended: Option<Instant>,
    pub seq: u64,
    last_log: String,
}

impl AgentRec {
    #[allow(clippy::too_many_arguments)]
    pub fn new(org: &str, bundle: &BundleRec, blueprint: &BlueprintRec, values: Value, connectors: Value, mode: Option<String>, seq: u64) -> Self {
        AgentRec {
            id: type_id("agt"),
            org: org.to_string(),
            bundle_id: bundle.id.clone(),
            name: bundle.name.clone(),
            blueprint_key: blueprint.key.clone(),
            blueprint_id: blueprint.id.clone(),
            values,
            status: Status::Running,
            created: now(),
            started_at: None,
            completed_at: None,
            error: None,
            connectors,
            job_id: type_id("job"),
            mode,
            logs: Vec::new(),
            events: Vec::new(),
            results: Vec::new(),
            ended: None,
            seq,
            last_log: String::new(),
        }
    }

    /// The status the record shows: within `lag` of its end a run still reads `running` (the
    /// live service's status lag, switched on with `lag_agent_status`).
    pub fn shown_status(&self, lag: Duration) -> Status {
        if self.ended.is_some_and(|t| t.elapsed() < lag) {
            Status::Running
        } else {
            self.status
        }
    }

    /// The record as the platform shows it (see `shown_status`).
    pub fn json(&self, lag: Duration) -> Value {
        let lagging = self.ended.is_some_and(|t| t.elapsed() < lag);
        let (status, completed_at, error) = if lagging {
            (Status::Running.as_str(), Value::Null, Value::Null)
        } else {
            (self.status.as_str(), json!(self.completed_at), json!(self.error))
        };
        let mut v = json!({
            "id": self.id, "name": self.name, "org_id": self.org, "bundle_id": self.bundle_id,
            "blueprint": self.blueprint_key, "blueprint_id": self.blueprint_id, "status": status,
            "created_at": self.created, "connectors": self.connectors, "job_id": self.job_id,
            "started_at": self.started_at, "completed_at": completed_at, "error": error,
        });
        if let (Some(mode), Some(map)) = (&self.mode, v.as_object_mut()) {
            map.insert("mode".into(), json!(mode));
        }
        v
    }

    /// A run summary (`latest_runs[]`).
    pub fn summary(&self, lag: Duration) -> Value {
        let full = self.json(lag);
        let keep = ["id", "status", "created_at", "started_at", "completed_at", "job_id", "error"];
        Value::Object(keep.iter().filter_map(|k| full.get(*k).map(|v| (k.to_string(), v.clone()))).collect())
    }

    /// A log row and its event twin. `created_at` strictly increases along the run.
    pub fn log(&mut self, level: &str, event_type: &str, message: impl Into<String>) {
        let mut at = now();
        if at <= self.last_log {
            // Two rows in one microsecond: step past the previous one so the order is the text order.
            at = bump(&self.last_log);
        }
        self.last_log = at.clone();
        let message = message.into();
        let n = self.logs.len();
        self.logs.push(json!({"id": format!("log_{:06}", n + 1), "created_at": at, "level": level, "event_type": event_type, "message": message}));
        self.events.push(json!({"id": format!("evt_{:06}", n + 1), "created_at": at, "level": level, "message": message}));
    }
}

/// `t` plus one microsecond, in the same fixed-width form.
fn bump(t: &str) -> String {
    let parsed = time::PrimitiveDateTime::parse(
        t.trim_end_matches('Z'),
        &time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]"),
    );
    match parsed {
        Ok(dt) => timestamp(SystemTime::from(dt.assume_utc() + time::Duration::microseconds(1))),
        Err(_) => now(),
    }
}

/// Evaluations, optimizations and trials are kept as their JSON plus the owner.
#[derive(Debug, Clone)]
pub(crate) struct JsonRec {
    pub org: String,
    pub json: Value,
}

impl JsonRec {
    pub fn id(&self) -> String {
        self.json.get("id").and_then(Value::as_str).unwrap_or_default().to_string()
    }

    pub fn status(&self) -> Option<Status> {
        self.json.get("status").and_then(Value::as_str).and_then(Status::parse)
    }

    pub fn set(&mut self, field: &str, value: Value) {
        if let Some(map) = self.json.as_object_mut() {
            map.insert(field.to_string(), value);
        }
    }
}

/// Values as a run uses them: the blueprint's defaults, then the bundle's overrides.
pub(crate) fn layered(defaults: &Value, overrides: &Value) -> Value {
    let mut merged: Map<String, Value> = defaults.as_object().cloned().unwrap_or_default();
    if let Some(over) = overrides.as_object() {
        for (k, v) in over {
            merged.insert(k.clone(), v.clone());
        }
    }
    Value::Object(merged)
}

#[derive(Default)]
pub(crate) struct Store {
    pub seq: u64,
    pub blueprints: Vec<BlueprintRec>,
    pub bundles: Vec<BundleRec>,
    /// Deleted bundles, kept so that a list cursor naming one still marks its place (the bundle
    /// list is sorted by last run or name, which its id does not tell).
    pub deleted_bundles: Vec<BundleRec>,
    pub agents: Vec<AgentRec>,
    pub evals: Vec<JsonRec>,
    pub optimizations: Vec<JsonRec>,
    /// Trials by optimization id.
    pub trials: Vec<(String, JsonRec)>,
}

impl Store {
    pub fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    pub fn visible<'a>(org: &'a str) -> impl Fn(&Option<String>) -> bool + 'a {
        move |owner| owner.as_deref().is_none_or(|o| o == org)
    }

    /// A blueprint by `blp_` id, or the active holder of a key (the organization's own before
    /// a canonical one), or else the replaced version that holds it as its archived key.
    pub fn blueprint(&self, org: &str, reference: &str) -> Option<&BlueprintRec> {
        let visible = Store::visible(org);
        if reference.starts_with("blp_") {
            return self.blueprints.iter().find(|b| b.id == reference && visible(&b.org));
        }
        let holders = self.blueprints.iter().filter(|b| b.key == reference && visible(&b.org));
        holders.max_by_key(|b| (b.active, b.org.is_some(), b.seq))
    }

    /// Retires the active blueprint `id` when a new version replaces it: its key becomes
    /// `<key>-<creation date>` (the spec), unique in its scope so that `get` can take it.
    pub fn archive(&mut self, id: &str) {
        let Some(i) = self.blueprints.iter().position(|b| b.id == id) else { return };
        let old = &self.blueprints[i];
        let date = time::OffsetDateTime::from(old.created);
        let base = format!("{}-{:04}{:02}{:02}", old.key, date.year(), u8::from(date.month()), date.day());
        let scope = old.org.clone();
        // A second version archived under the same date (two replacements created on one day)
        // becomes `<key>-<date>-2`, a third `-3`, and so on: the first keeps the spec's form,
        // and no two blueprints of a scope share a key.
        let taken = |key: &str| self.blueprints.iter().any(|b| b.key == key && b.org == scope);
        let mut key = base.clone();
        let mut n = 2;
        while taken(&key) {
            key = format!("{base}-{n}");
            n += 1;
        }
        let old = &mut self.blueprints[i];
        old.key = key;
        old.active = false;
    }

    pub fn bundle(&self, org: &str, id: &str) -> Option<&BundleRec> {
        let visible = Store::visible(org);
        self.bundles.iter().find(|b| b.id == id && visible(&b.org))
    }

    pub fn agent_mut(&mut self, org: &str, id: &str) -> Option<&mut AgentRec> {
        self.agents.iter_mut().find(|a| a.id == id && a.org == org)
    }

    pub fn agent_by_id_mut(&mut self, id: &str) -> Option<&mut AgentRec> {
        self.agents.iter_mut().find(|a| a.id == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_timestamps_have_the_platform_shapes() {
        let id = type_id("agt");
        assert!(id.starts_with("agt_") && id.len() == 30, "{id}");
        let ids: Vec<String> = (0..1000).map(|_| type_id("agt")).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids sort in the order they were made");
        let t = now();
        assert_eq!(t.len(), "2026-11-23T10:00:00.000000Z".len(), "{t}");
        assert!(bump(&t) > t);
        assert_eq!(bump("2026-11-23T10:00:59.999999Z"), "2026-11-23T10:01:00.000000Z");
    }
}
