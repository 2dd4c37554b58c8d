//! What every handler shares: organizations and keys, files, faults, the request log and the
//! knobs tests turn at run time.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use tokio_util::sync::CancellationToken;

use super::agents::Agents;
use super::batch::BatchStore;
use super::fine_tuning::FineTuningStore;
use super::auth::{KeyInfo, Role};
use super::jobs::Executor;
use super::lens::Lens;
use super::paging::DEFAULT_LIMIT;
use super::catalogue::Catalogue;
use super::faults::FaultSet;
use super::files::direct::registry::Registry;
use super::files::direct::signing::Signer;
use super::files::store::FileStore;
use super::options::{EmulatorOptions, ListStyle};
use super::rate_limit::OrgRateLimit;
use super::recorder::Recorder;

/// Organization of the key the emulator starts with.
pub const DEFAULT_ORG: &str = "org-emu-default";

pub(crate) struct Shared {
    pub max_upload_bytes: u64,
    keys: RwLock<HashMap<String, KeyInfo>>,
    pub default_key: String,
    /// The models of every organization not given its own list.
    models: Arc<Catalogue>,
    /// Organizations given their own list ("availability varies per organization").
    org_models: RwLock<HashMap<String, Arc<Catalogue>>>,
    pub files: FileStore,
    /// Direct-to-cloud uploads, their part size and the signer and lifetime of part URLs.
    pub uploads: Registry,
    pub upload_part_size: u64,
    pub upload_url_ttl: Duration,
    pub url_signer: Signer,
    /// `http://HOST:PORT` of this server, where part URLs point (the emulator is its own storage).
    pub storage_origin: String,
    pub faults: FaultSet,
    pub recorder: Recorder,
    pub query_delay: Mutex<Duration>,
    failing_queries: Mutex<Option<(String, u32)>>,
    /// Signs listing cursors so a made-up one is recognised as such.
    pub cursor_secret: [u8; 32],
    pub shutdown: CancellationToken,
    /// Bumped by `close_idle_connections`; every connection watches it.
    pub close_idle: tokio::sync::watch::Sender<u64>,
    /// The one executor every job kind runs on.
    pub jobs: Arc<Executor>,
    pub agents: Agents,
    pub fine_tuning: FineTuningStore,
    pub lens: Lens,
    pub batch: BatchStore,
    /// How the batch lists page (`Emulator(list_style=...)`).
    pub list_style: ListStyle,
    /// Default page size of every list (`Emulator(page_size=...)`; the platform's 100).
    pub page_size: usize,
    /// `Emulator(rate_limit=...)`, checked for every authenticated platform request.
    pub rate_limit: Option<OrgRateLimit>,
    /// `Emulator(max_query_size_mb=...)`, the server setting of the `/query` size limits.
    pub max_query_size_mb: Option<f64>,
}

impl Shared {
    pub fn new(data_dir: PathBuf, opts: &EmulatorOptions, storage_origin: String) -> Self {
        let default_key = opts.api_key.clone().unwrap_or_else(random_key);
        let mut keys = HashMap::new();
        keys.insert(default_key.clone(), KeyInfo { org: DEFAULT_ORG.to_string(), role: Role::Admin });
        let shutdown = CancellationToken::new();
        let outputs_dir = data_dir.join("batch-outputs");
        Shared {
            max_upload_bytes: opts.max_upload_bytes,
            keys: RwLock::new(keys),
            default_key,
            models: Arc::new(opts.models.clone().unwrap_or_default()),
            org_models: RwLock::new(HashMap::new()),
            files: FileStore::new(data_dir.clone()),
            uploads: Registry::new(data_dir),
            upload_part_size: opts.upload_part_size.max(1),
            upload_url_ttl: opts.upload_url_ttl,
            url_signer: Signer::new(rand::random()),
            storage_origin,
            faults: FaultSet::default(),
            recorder: Recorder::default(),
            query_delay: Mutex::new(opts.query_delay),
            failing_queries: Mutex::new(None),
            cursor_secret: rand::random(),
            jobs: Arc::new(Executor::new(opts.work_duration, shutdown.clone())),
            agents: Agents::new(),
            fine_tuning: FineTuningStore::default(),
            lens: Lens::new(opts.session_ttl, opts.lens_heartbeat_interval, opts.lens_status_style),
            batch: BatchStore::new(outputs_dir),
            list_style: opts.list_style,
            page_size: opts.page_size.unwrap_or(DEFAULT_LIMIT),
            rate_limit: opts.rate_limit.and_then(OrgRateLimit::new),
            max_query_size_mb: opts.max_query_size_mb.filter(|mb| mb.is_finite() && *mb > 0.0),
            shutdown,
            close_idle: tokio::sync::watch::Sender::new(0),
        }
    }

    /// Closes every keep-alive connection between requests (each busy one after its answer):
    /// every connection watches `close_idle`.
    pub fn close_idle_connections(&self) {
        self.close_idle.send_modify(|n| *n += 1);
    }

    #[cfg(test)]
    pub fn files_dir_for_tests(&self) -> PathBuf {
        self.files.dir().to_path_buf()
    }

    /// Who holds `key` (organization and role); `None` for a key the emulator never issued.
    pub(crate) fn key_info(&self, key: &str) -> Option<KeyInfo> {
        self.keys.read().get(key).cloned()
    }

    /// A new key with `role`; for a new organization when `org` is `None`. `models`, when
    /// given, becomes the organization's own catalogue (replacing one it had); without it the
    /// organization keeps what it has.
    pub(crate) fn issue_key(&self, org: Option<&str>, role: Role, models: Option<Catalogue>) -> (String, KeyInfo) {
        let org = match org {
            Some(name) => name.to_string(),
            None => format!("org-emu-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
        };
        if let Some(models) = models {
            self.org_models.write().insert(org.clone(), Arc::new(models));
        }
        let info = KeyInfo { org, role };
        let key = random_key();
        self.keys.write().insert(key.clone(), info.clone());
        (key, info)
    }

    /// Every key issued so far, for the request log to redact.
    pub(crate) fn issued_keys(&self) -> Vec<String> {
        self.keys.read().keys().cloned().collect()
    }

    /// The models `org` may query.
    pub(crate) fn catalogue_for(&self, org: &str) -> Arc<Catalogue> {
        self.org_models.read().get(org).cloned().unwrap_or_else(|| self.models.clone())
    }

    pub fn fail_queries(&self, error_msg: &str, times: u32) {
        *self.failing_queries.lock() = (times > 0).then(|| (error_msg.to_string(), times));
    }

    /// Consumes one pending failure, if any.
    pub fn take_query_failure(&self) -> Option<String> {
        let mut slot = self.failing_queries.lock();
        let (msg, left) = slot.as_mut()?;
        let msg = msg.clone();
        *left -= 1;
        if *left == 0 {
            *slot = None;
        }
        Some(msg)
    }
}

fn random_key() -> String {
    format!("sk-emu-{}", uuid::Uuid::new_v4().simple())
}
