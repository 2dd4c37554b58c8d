//! The emulator: a local test double of the platform's HTTP API (axum on hyper), in pure Rust
//! (no pyo3). It serves direct query with deterministic stand-in models, files, and models, keeps
//! per-organization state in memory and file contents in a temp dir, injects faults and records
//! what it received. It never presents itself as the hosted service: every answer carries
//! `Server: sensorium-emulator`.

mod agents;
mod api_error;
mod app;
mod auth;
mod batch;
mod catalogue;
mod control;
mod faults;
mod fine_tuning;
mod job_list;
mod jobs;
mod files;
mod lens;
mod models;
mod options;
mod paging;
mod public_origin;
mod query;
mod rate_limit;
mod recorder;
mod server;
mod state;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub use app::API_PREFIX;
pub use auth::Role;
pub use catalogue::{Catalogue, ModelEntry};
pub use faults::{FaultAction, FaultRule};
pub use lens::{StatusStyle as LensStatusStyle, DEFAULT_HEARTBEAT_INTERVAL, DEFAULT_SESSION_TTL};
pub use options::{EmulatorOptions, ListStyle, DEFAULT_UPLOAD_PART_SIZE, DEFAULT_UPLOAD_URL_TTL};
pub use recorder::{RecordedRequest, BODY_CAPTURE_LIMIT};
pub use state::DEFAULT_ORG;
/// The largest page a list gives (`Emulator(page_size=...)`, `?limit=`).
pub(crate) use paging::MAX_LIMIT as MAX_PAGE_SIZE;
/// The most parts a direct upload has (`inject_upload_part`'s part numbers).
pub(crate) use files::direct::layout::MAX_PARTS as MAX_UPLOAD_PARTS;
/// The statuses a fault rule may answer with.
pub(crate) use faults::STATUSES as FAULT_STATUSES;

use state::Shared;

/// A running emulator. Cheap to clone; every clone controls the same server. The server stops
/// when [`Emulator::shutdown`] is awaited or the last handle is dropped.
#[derive(Clone)]
pub struct Emulator {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    addr: SocketAddr,
    server: Mutex<Option<JoinHandle<()>>>,
    data_dir: Mutex<Option<tempfile::TempDir>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shared.shutdown.cancel();
    }
}

impl Emulator {
    /// Binds and spawns the server on the current tokio runtime.
    pub async fn start(opts: EmulatorOptions) -> std::io::Result<Emulator> {
        let data_dir = tempfile::Builder::new().prefix("sensorium-emulator-").tempdir()?;
        let listener = TcpListener::bind((opts.host, opts.port)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::new(data_dir.path().to_path_buf(), &opts, origin(addr)));
        let app = app::router(shared.clone());
        let server = tokio::spawn(server::serve(listener, app, shared.clone()));
        Ok(Emulator {
            inner: Arc::new(Inner {
                shared,
                addr,
                server: Mutex::new(Some(server)),
                data_dir: Mutex::new(Some(data_dir)),
            }),
        })
    }

    /// `http://HOST:PORT/v0.5` (see [`origin`]).
    pub fn base_url(&self) -> String {
        format!("{}{API_PREFIX}", origin(self.inner.addr))
    }

    pub fn port(&self) -> u16 {
        self.inner.addr.port()
    }

    /// Key of the default organization.
    pub fn api_key(&self) -> String {
        self.inner.shared.default_key.clone()
    }

    /// `None`: a key for a new organization; `Some(name)`: a key for that (possibly new) one.
    /// `models` gives the organization its own catalogue; `None` leaves it as it is.
    pub fn new_api_key(&self, org: Option<&str>, role: Role, models: Option<Catalogue>) -> String {
        self.inner.shared.issue_key(org, role, models).0
    }

    /// Whether [`Emulator::shutdown`] has been called (or the last handle dropped).
    pub fn is_stopped(&self) -> bool {
        self.inner.shared.shutdown.is_cancelled()
    }

    pub fn inject(&self, rule: FaultRule) {
        self.inner.shared.faults.push(rule);
    }

    /// A fault for PUTs of part `part_number` of any direct upload: `fault`'s method and path
    /// are replaced by those of the part's storage URL.
    pub fn inject_upload_part(&self, part_number: u32, fault: FaultRule) {
        self.inject(FaultRule {
            method: Some("PUT".to_string()),
            path: files::direct::storage::part_path_pattern(part_number),
            ..fault
        });
    }

    /// Every part URL issued so far is expired; URLs issued later are valid as usual.
    pub fn expire_upload_urls(&self) {
        self.inner.shared.url_signer.expire_all();
    }

    /// Every batch output URL issued so far answers 403; listing the outputs again issues
    /// working ones.
    pub fn expire_output_urls(&self) {
        self.inner.shared.batch.signer.expire_all();
    }

    pub fn clear_faults(&self) {
        self.inner.shared.faults.clear();
    }

    /// The next `times` queries answer 200 with `status: "failed"` and this `error_msg`.
    pub fn fail_queries(&self, error_msg: &str, times: u32) {
        self.inner.shared.fail_queries(error_msg, times);
    }

    /// A job of `kind` (`agent`, `batch`, `fine_tuning`, `eval`, `optimization`) ends failed with
    /// `error`, or (batch) completes with `failed_inputs` failed, or (fine_tuning) completes with
    /// `outcome` (`PARTIAL`, `FAILED`). Plans of one kind queue: each fails the next job of that
    /// kind to run (a batch retry included), in order.
    pub fn fail_next_job(&self, kind: &str, error: Option<String>, failed_inputs: Vec<String>, outcome: Option<String>) -> Result<(), String> {
        self.inner.shared.jobs.fail_next(kind, jobs::Failure { error, failed_inputs, outcome })
    }

    /// Agent records keep saying `running` this long after their run ended (logs are not delayed).
    pub fn lag_agent_status(&self, lag: Duration) {
        *self.inner.shared.agents.lag.lock() = lag;
    }

    /// Each SSE stream connection is cut after `every` outputs; `None` turns it off.
    pub fn drop_streams(&self, every: Option<u64>) {
        *self.inner.shared.lens.drop_every.lock() = every.filter(|n| *n > 0);
    }

    /// How `session_status` is spelled from now on.
    pub fn set_lens_status_style(&self, style: LensStatusStyle) {
        *self.inner.shared.lens.status_style.lock() = style;
    }

    /// Closes every keep-alive connection that is between requests (and each busy one after
    /// its answer), as a server restart or a load balancer's idle timeout does.
    pub fn close_idle_connections(&self) {
        self.inner.shared.close_idle_connections();
    }

    pub fn set_query_delay(&self, d: Duration) {
        *self.inner.shared.query_delay.lock() = d;
    }

    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.inner.shared.recorder.all()
    }

    pub fn clear_requests(&self) {
        self.inner.shared.recorder.clear();
    }

    /// Stops accepting, closes every connection and removes the data dir. Idempotent.
    pub async fn shutdown(&self) {
        self.inner.shared.shutdown.cancel();
        let server = self.inner.server.lock().take();
        if let Some(server) = server {
            let _ = server.await;
        }
        let dir = self.inner.data_dir.lock().take();
        if let Some(dir) = dir {
            let _ = dir.close();
        }
    }
}

/// `http://HOST:PORT`. A wildcard bind address is reported as loopback, which is where a
/// local client can reach it.
fn origin(addr: SocketAddr) -> String {
    let ip = match addr.ip() {
        IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!("http://{}", SocketAddr::new(ip, addr.port()))
}

#[cfg(test)]
mod tests;

/// The emulator's `/query` request parser, for the fuzz targets in `crate::fuzz`.
#[cfg(test)]
pub(crate) fn fuzz_parse_query(raw: &[u8]) -> bool {
    query::validate::parse(raw, &catalogue::Catalogue::default()).is_ok()
}

/// The parser's answer both ways: with numeric contents read ahead (the default) and the plain
/// serde_json read, each as the error code or the numeric events, for `crate::fuzz`.
#[cfg(test)]
pub(crate) type ParsedBothWays = (Result<Vec<Vec<Vec<f64>>>, String>, Result<Vec<Vec<Vec<f64>>>, String>);

#[cfg(test)]
pub(crate) fn fuzz_parse_query_both_ways(raw: &[u8]) -> ParsedBothWays {
    let catalogue = catalogue::Catalogue::default();
    let numeric = |parsed: Result<query::validate::QueryInput, api_error::ApiError>| {
        parsed.map(|input| input.numeric_events().into_iter().cloned().collect()).map_err(|e| e.code)
    };
    (numeric(query::validate::parse(raw, &catalogue)), numeric(query::validate::parse_plain(raw, &catalogue)))
}
