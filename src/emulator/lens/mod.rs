//! The legacy lens surface of the emulator: lenses (`lenses`), sessions and their state table
//! (`session`, `table`), the pipeline runtime (`pipeline`, `processors`, `inputs`), outputs
//! kept per session (`outbox`), and the three ways in: REST (`routes`), the SSE consumer
//! (`sse`) and the WebSocket protocol (`socket`).

pub(crate) mod inputs;
pub(crate) mod lenses;
pub(crate) mod outbox;
pub(crate) mod pipeline;
pub(crate) mod processors;
pub(crate) mod routes;
pub(crate) mod session;
pub(crate) mod socket;
pub(crate) mod sse;
pub(crate) mod table;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use lenses::LensRec;
use session::{now, Session};
pub use table::StatusStyle;

/// The spec's default `session_ttl_sec` (24 hours of inactivity).
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(86_400);
/// Short, so tests see heartbeats; the live interval is not shown.
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);
/// How long an ended session's stream can still be *resumed* (a reconnect with `Last-Event-ID`
/// from a stream that was open when the session ended): the stream then gets what remains and
/// `sse.stream.end`, as if the connection had never dropped. A new stream gets 404 at once.
pub const RESUME_GRACE: Duration = Duration::from_secs(60);

pub(crate) struct Lens {
    pub lenses: Mutex<Vec<LensRec>>,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    pub session_ttl: Duration,
    pub heartbeat_interval: Duration,
    pub status_style: Mutex<StatusStyle>,
    /// `drop_streams(every=N)`: each SSE connection is cut after N outputs.
    pub drop_every: Mutex<Option<u64>>,
    /// Destroyed or expired sessions, with when they ended, for `RESUME_GRACE`.
    ended: Mutex<HashMap<String, (Arc<Session>, std::time::Instant)>>,
}

/// The spec's `session_ttl_sec` is an integer, and a session record reports it. A fractional
/// TTL (tests use short ones) is put in force rounded up to whole seconds, so the record states
/// the TTL that actually applies, rather than refusing a value callers already pass or reporting
/// 0.5 s as 0 (as if sessions expired at once).
fn whole_seconds_up(ttl: Duration) -> Duration {
    Duration::from_secs(ttl.as_secs().saturating_add(u64::from(ttl.subsec_nanos() > 0)))
}

impl Lens {
    pub fn new(session_ttl: Duration, heartbeat_interval: Duration, style: StatusStyle) -> Lens {
        Lens {
            lenses: Mutex::new(lenses::builtin()),
            sessions: Mutex::new(HashMap::new()),
            session_ttl: whole_seconds_up(session_ttl),
            heartbeat_interval,
            status_style: Mutex::new(style),
            drop_every: Mutex::new(None),
            ended: Mutex::new(HashMap::new()),
        }
    }

    pub fn style(&self) -> StatusStyle {
        *self.status_style.lock()
    }

    pub fn add_session(&self, session: Arc<Session>) {
        self.sessions.lock().insert(session.id.clone(), session);
    }

    /// The organization's active session `id`, after the clock's moves: a destroyed or expired
    /// session is removed and is `None` from then on (`session_not_found`).
    pub fn session(&self, org: &str, id: &str) -> Option<Arc<Session>> {
        let found = self.sessions.lock().get(id).filter(|s| s.org == org).cloned()?;
        if found.advance(now()).is_active() {
            Some(found)
        } else {
            self.retire(id);
            None
        }
    }

    /// Destroys and removes a session; `None` when there is no active one.
    pub fn destroy(&self, org: &str, id: &str) -> Option<Arc<Session>> {
        let session = self.session(org, id)?;
        let destroyed = session.destroy();
        self.retire(id);
        destroyed.then_some(session)
    }

    fn retire(&self, id: &str) {
        if let Some(session) = self.sessions.lock().remove(id) {
            let mut ended = self.ended.lock();
            ended.retain(|_, (_, at)| at.elapsed() < RESUME_GRACE);
            ended.insert(id.to_string(), (session, std::time::Instant::now()));
        }
    }

    /// A session whose stream a reconnecting reader may resume: the active one, or one that
    /// ended less than `RESUME_GRACE` ago.
    pub fn resumable(&self, org: &str, id: &str) -> Option<Arc<Session>> {
        self.session(org, id).or_else(|| {
            let ended = self.ended.lock();
            let (session, at) = ended.get(id).filter(|(s, _)| s.org == org)?;
            (at.elapsed() < RESUME_GRACE).then(|| session.clone())
        })
    }

    /// The organization's active sessions, oldest first.
    pub fn sessions_of(&self, org: &str) -> Vec<Arc<Session>> {
        let ids: Vec<String> = self.sessions.lock().values().filter(|s| s.org == org).map(|s| s.id.clone()).collect();
        let mut live: Vec<Arc<Session>> = ids.iter().filter_map(|id| self.session(org, id)).collect();
        live.sort_by(|a, b| a.state.lock().registered.total_cmp(&b.state.lock().registered));
        live
    }
}
