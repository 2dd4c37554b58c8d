//! One lens session: its record (status moved only through the state table), its counters and
//! timestamps, its runnable pipeline and its outbox.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde_json::{json, Value};

use super::outbox::Outbox;
use super::pipeline::Pipeline;
use super::table::{transition, Status, StatusStyle, Trigger};

/// How long after creation the emulator's runner starts a session (CHOICES: within 1 s).
pub(crate) const START_DELAY: Duration = Duration::from_millis(200);

pub(crate) fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

pub(crate) struct State {
    pub status: Status,
    pub lens_id: String,
    pub lens_name: String,
    pub lens_config: Value,
    pub pipeline: Arc<Pipeline>,
    pub registered: f64,
    pub started: Option<f64>,
    pub destroyed: Option<f64>,
    pub last_event: f64,
    pub last_update: f64,
    pub input_stream: Option<String>,
    pub output_stream: Option<String>,
    pub connections: u64,
    pub updates: u64,
    pub inputs: u64,
    pub events: u64,
}

/// Not `Debug`: it holds the caller's key, which the record echoes and nothing else may show.
pub(crate) struct Session {
    pub id: String,
    pub org: String,
    api_key: String,
    ttl: Duration,
    pub outbox: Outbox,
    pub state: Mutex<State>,
}

impl Session {
    pub fn new(org: &str, api_key: &str, ttl: Duration, lens: (&str, &str, Value), pipeline: Pipeline) -> Session {
        let t = now();
        Session {
            id: format!("lsn-{}", uuid::Uuid::new_v4().simple()),
            org: org.to_string(),
            api_key: api_key.to_string(),
            ttl,
            outbox: Outbox::default(),
            state: Mutex::new(State {
                status: Status::Registered,
                lens_id: lens.0.to_string(),
                lens_name: lens.1.to_string(),
                lens_config: lens.2,
                pipeline: Arc::new(pipeline),
                registered: t,
                started: None,
                destroyed: None,
                last_event: t,
                last_update: t,
                input_stream: None,
                output_stream: None,
                connections: 0,
                updates: 0,
                inputs: 0,
                events: 0,
            }),
        }
    }

    /// Applies the moves the clock has made due by `at` (runner start, expiry) and gives the
    /// status. Expiry closes the outbox, so open streams end.
    pub fn advance(&self, at: f64) -> Status {
        let mut s = self.state.lock();
        let start_at = s.registered + START_DELAY.as_secs_f64();
        if at >= start_at {
            if let Some(to) = transition(s.status, Trigger::RunnerStart) {
                s.status = to;
                s.started = Some(start_at);
            }
        }
        if s.status.is_active() && at - s.last_event >= self.ttl.as_secs_f64() {
            if let Some(to) = transition(s.status, Trigger::Expire) {
                s.status = to;
                drop(s);
                self.outbox.close();
                return to;
            }
        }
        s.status
    }

    /// `destroy`: `false` when the table refuses (already gone).
    pub fn destroy(&self) -> bool {
        let mut s = self.state.lock();
        let Some(to) = transition(s.status, Trigger::Destroy) else { return false };
        s.status = to;
        s.destroyed = Some(now());
        drop(s);
        self.outbox.close();
        true
    }

    /// Counts an event sent to the session (any WebSocket message, a processed event): it keeps
    /// the session from expiring.
    pub fn touch(&self) {
        let mut s = self.state.lock();
        s.events += 1;
        s.last_event = now();
    }

    /// Runs `input` (`{type, event_data}`) through the pipeline and keeps its outputs in the
    /// session's channel; returns the outputs.
    pub fn feed(&self, input: &Value) -> Vec<(String, Value)> {
        let pipeline = {
            let mut s = self.state.lock();
            s.inputs += 1;
            s.last_event = now();
            s.pipeline.clone()
        };
        let outputs = pipeline.process(input);
        self.outbox.push(pipeline.channel, outputs.clone(), now());
        outputs
    }

    /// `session.update`: an input that also counts as an update.
    pub fn update(&self, input: &Value) -> Vec<(String, Value)> {
        {
            let mut s = self.state.lock();
            s.updates += 1;
            s.last_update = now();
        }
        self.feed(input)
    }

    pub fn connection(self: &Arc<Self>) -> ConnectionGuard {
        self.state.lock().connections += 1;
        ConnectionGuard(self.clone())
    }

    /// The spec's record. `with_key`: echo the caller's key (creation and `session.status` only).
    pub fn record(&self, style: StatusStyle, endpoint: &str, with_key: bool) -> Value {
        let (num_outputs, _) = self.outbox.totals();
        let s = self.state.lock();
        let mut record = json!({
            "session_id": self.id,
            "lens_id": s.lens_id,
            "lens_name": s.lens_name,
            "org_id": self.org,
            "session_status": s.status.spelled(style),
            "session_endpoint": endpoint,
            "session_runner": "emulator-runner-0",
            "node_tag": "sensorium-emulator",
            "session_ttl_sec": self.ttl.as_secs(),
            "lens_config": s.lens_config,
            "input_data_stream_id": s.input_stream,
            "output_data_stream_id": s.output_stream,
            "registration_timestamp": s.registered,
            "last_event_timestamp": s.last_event,
            "last_update_timestamp": s.last_update,
            "session_start_timestamp": s.started,
            "session_destroyed_timestamp": s.destroyed,
            "num_active_connections": s.connections,
            "num_updates": s.updates,
            "num_inputs": s.inputs,
            "num_outputs": num_outputs,
            "num_events": s.events,
        });
        if with_key {
            if let Some(m) = record.as_object_mut() {
                m.insert("api_key".into(), Value::String(self.api_key.clone()));
            }
        }
        record
    }
}

/// Counts one open stream or socket in `num_active_connections` while it lives.
pub(crate) struct ConnectionGuard(Arc<Session>);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        let mut s = self.0.state.lock();
        s.connections = s.connections.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(ttl: Duration) -> Session {
        let pipeline = Pipeline::build(&json!({"model_pipeline": [{"processor_name": "lens_noop_processor"}]}), &|_| None).unwrap();
        Session::new("org", "sk-secret", ttl, ("lns-1", "l", json!({})), pipeline)
    }

    #[test]
    fn registered_then_running_then_destroyed() {
        let s = session(Duration::from_secs(60));
        let t0 = s.state.lock().registered;
        let r = s.record(StatusStyle::Enum, "ws://x", false);
        assert_eq!(r["session_status"], "LensSessionStatus.SESSION_STATUS_REGISTERED");
        assert!(r["session_start_timestamp"].is_null() && r.get("api_key").is_none());
        for counter in ["num_active_connections", "num_updates", "num_inputs", "num_outputs", "num_events"] {
            assert_eq!(r[counter], 0, "{counter}");
        }
        assert_eq!(s.advance(t0 + 0.1), Status::Registered);
        assert_eq!(s.advance(t0 + 1.0), Status::Running);
        assert_eq!(s.state.lock().started, Some(t0 + START_DELAY.as_secs_f64()));
        s.update(&json!({"type": "data.json", "event_data": {"a": 1}}));
        let r = s.record(StatusStyle::Number, "ws://x", true);
        assert_eq!((r["num_updates"].as_u64(), r["num_inputs"].as_u64(), r["num_outputs"].as_u64()), (Some(1), Some(1), Some(1)));
        assert_eq!(r["session_status"], "3");
        assert_eq!(r["api_key"], "sk-secret");
        assert!(s.destroy());
        assert!(!s.destroy(), "the table refuses a second destroy");
        assert!(s.record(StatusStyle::Enum, "", false)["session_destroyed_timestamp"].is_f64());
        assert!(s.outbox.take_sse(0, 10, false).ended);
    }

    #[test]
    fn expires_after_ttl_of_inactivity() {
        let s = session(Duration::from_secs(5));
        let t0 = s.state.lock().last_event;
        assert_eq!(s.advance(t0 + 4.0), Status::Running);
        assert_eq!(s.advance(t0 + 5.5), Status::Expired);
        assert_eq!(s.advance(t0 + 6.0), Status::Expired, "no way back");
    }
}
