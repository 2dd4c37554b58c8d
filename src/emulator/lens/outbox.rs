//! A session's outputs, kept until the session is destroyed (so every stream can replay them from
//! the first), numbered from one sequence shared with the SSE control frames: every frame of a
//! session has a larger id than the ones before it, and resuming after any id (an output's or a
//! heartbeat's) means "the outputs numbered above it".

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::sync::watch;

/// Where a lens routes its outputs: the SSE consumer when its pipeline has a
/// `server_sent_events_writer`, otherwise the `session.read` mailbox (spec, Events).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Channel {
    Sse,
    Mailbox,
}

#[derive(Debug)]
pub(crate) struct Output {
    pub seq: u64,
    pub channel: Channel,
    pub kind: String,
    pub timestamp: f64,
    pub event_data: Value,
    /// The SSE `data:` JSON, serialized once for every reader.
    pub json: String,
}

impl Output {
    /// A `session.read` message: `{timestamp, type, data}`.
    pub fn message(&self) -> Value {
        json!({ "timestamp": self.timestamp, "type": self.kind, "data": self.event_data })
    }
}

#[derive(Default)]
struct Inner {
    outputs: Vec<Arc<Output>>,
    last_seq: u64,
    closed: bool,
    /// `session.read` readers: client id -> index in `outputs` of the next one to look at.
    readers: HashMap<String, usize>,
}

pub(crate) struct Outbox {
    inner: Mutex<Inner>,
    /// Bumped on every change, so waiting streams wake without polling.
    changed: watch::Sender<u64>,
}

/// What an SSE stream takes in one go.
pub(crate) struct Take {
    pub outputs: Vec<Arc<Output>>,
    /// An id for the control frame asked for, given only once every pending output is in
    /// `outputs`, so a client resuming after the control frame loses nothing.
    pub control_seq: Option<u64>,
    /// The session is gone and `outputs` holds the last of its outputs.
    pub ended: bool,
}

impl Default for Outbox {
    fn default() -> Self {
        Outbox { inner: Mutex::new(Inner::default()), changed: watch::channel(0).0 }
    }
}

impl Outbox {
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    /// Appends outputs; `false` (nothing kept) once the outbox is closed.
    pub fn push(&self, channel: Channel, outputs: Vec<(String, Value)>, timestamp: f64) -> usize {
        let count = outputs.len();
        {
            let mut inner = self.inner.lock();
            if inner.closed {
                return 0;
            }
            for (kind, event_data) in outputs {
                inner.last_seq += 1;
                let json = json!({ "type": kind, "timestamp": timestamp, "event_data": event_data }).to_string();
                let seq = inner.last_seq;
                inner.outputs.push(Arc::new(Output { seq, channel, kind, timestamp, event_data, json }));
            }
        }
        self.bump();
        count
    }

    pub fn close(&self) {
        self.inner.lock().closed = true;
        self.bump();
    }

    /// SSE outputs numbered above `after` (at most `limit`), and an id for a control frame when
    /// `control` is asked.
    pub fn take_sse(&self, after: u64, limit: usize, control: bool) -> Take {
        let mut inner = self.inner.lock();
        let start = inner.outputs.partition_point(|o| o.seq <= after);
        let mut outputs = Vec::new();
        let mut rest = inner.outputs[start..].iter().filter(|o| o.channel == Channel::Sse);
        for o in rest.by_ref().take(limit) {
            outputs.push(o.clone());
        }
        let drained = rest.next().is_none();
        let control_seq = (control && drained).then(|| {
            inner.last_seq += 1;
            inner.last_seq
        });
        Take { outputs, control_seq, ended: inner.closed && drained }
    }

    /// The mailbox messages `client_id` has not read yet (a new client id starts from the first).
    pub fn read_mailbox(&self, client_id: &str, limit: usize) -> Vec<Arc<Output>> {
        let mut inner = self.inner.lock();
        let from = inner.readers.get(client_id).copied().unwrap_or(0);
        let mut next = from;
        let mut out = Vec::new();
        for o in &inner.outputs[from..] {
            if out.len() == limit {
                break;
            }
            next += 1;
            if o.channel == Channel::Mailbox {
                out.push(o.clone());
            }
        }
        inner.readers.insert(client_id.to_string(), next);
        out
    }

    /// `(number of outputs, their SSE bytes)`.
    pub fn totals(&self) -> (u64, u64) {
        let inner = self.inner.lock();
        (inner.outputs.len() as u64, inner.outputs.iter().map(|o| o.json.len() as u64).sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(n: i64) -> (String, Value) {
        ("inference.result".to_string(), json!({ "n": n }))
    }

    #[test]
    fn ids_increase_across_outputs_and_control_frames() {
        let outbox = Outbox::default();
        outbox.push(Channel::Sse, vec![ev(1), ev(2)], 1.0);
        let t = outbox.take_sse(0, 10, true);
        assert_eq!(t.outputs.iter().map(|o| o.seq).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(t.control_seq, Some(3), "a heartbeat after every pending output");
        outbox.push(Channel::Sse, vec![ev(3)], 2.0);
        // Resuming after the heartbeat's id gives the output pushed after it, and nothing twice.
        let t = outbox.take_sse(3, 10, false);
        assert_eq!(t.outputs.iter().map(|o| o.seq).collect::<Vec<_>>(), [4]);
        assert!(t.outputs[0].json.contains(r#""type":"inference.result""#));
    }

    #[test]
    fn no_control_id_while_outputs_are_pending() {
        let outbox = Outbox::default();
        outbox.push(Channel::Sse, vec![ev(1), ev(2), ev(3)], 1.0);
        let t = outbox.take_sse(0, 2, true);
        assert_eq!(t.outputs.len(), 2);
        assert_eq!(t.control_seq, None);
        assert!(!t.ended);
        outbox.close();
        let t = outbox.take_sse(2, 2, true);
        assert_eq!((t.outputs.len(), t.control_seq, t.ended), (1, Some(4), true));
        assert_eq!(outbox.push(Channel::Sse, vec![ev(9)], 1.0), 0, "nothing is kept after close");
    }

    #[test]
    fn mailbox_readers_have_their_own_playback() {
        let outbox = Outbox::default();
        outbox.push(Channel::Mailbox, vec![ev(1), ev(2)], 1.0);
        outbox.push(Channel::Sse, vec![ev(3)], 1.0);
        assert_eq!(outbox.read_mailbox("a", 1).len(), 1);
        assert_eq!(outbox.read_mailbox("a", 10)[0].event_data, json!({"n": 2}));
        assert!(outbox.read_mailbox("a", 10).is_empty());
        assert_eq!(outbox.read_mailbox("b", 10).len(), 2, "a new client id restarts playback");
        assert!(outbox.take_sse(0, 10, false).outputs.iter().all(|o| o.channel == Channel::Sse));
        assert_eq!(outbox.read_mailbox("b", 10).len(), 0);
        assert_eq!(outbox.totals().0, 3);
    }
}
