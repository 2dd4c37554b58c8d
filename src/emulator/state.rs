//! What every handler shares: organizations and keys, files, faults, the request log and the
//! knobs tests turn at run time.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use tokio_util::sync::CancellationToken;

use super::faults::FaultSet;
use super::files::direct::registry::Registry;
use super::files::direct::signing::Signer;
use super::files::store::FileStore;
use super::options::EmulatorOptions;
use super::recorder::Recorder;

/// Organization of the key the emulator starts with.
pub const DEFAULT_ORG: &str = "org-emu-default";

pub(crate) struct Shared {
    pub max_upload_bytes: u64,
    /// api key -> organization id.
    keys: RwLock<HashMap<String, String>>,
    pub default_key: String,
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
}

impl Shared {
    pub fn new(data_dir: PathBuf, opts: &EmulatorOptions, storage_origin: String) -> Self {
        let default_key = opts.api_key.clone().unwrap_or_else(random_key);
        let mut keys = HashMap::new();
        keys.insert(default_key.clone(), DEFAULT_ORG.to_string());
        Shared {
            max_upload_bytes: opts.max_upload_bytes,
            keys: RwLock::new(keys),
            default_key,
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
            shutdown: CancellationToken::new(),
        }
    }

    #[cfg(test)]
    pub fn files_dir_for_tests(&self) -> PathBuf {
        self.files.dir().to_path_buf()
    }

    pub fn org_of_key(&self, key: &str) -> Option<String> {
        self.keys.read().get(key).cloned()
    }

    /// A new key; for a new organization when `org` is `None`.
    pub fn issue_key(&self, org: Option<&str>) -> String {
        let org = match org {
            Some(name) => name.to_string(),
            None => format!("org-emu-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
        };
        let key = random_key();
        self.keys.write().insert(key.clone(), org);
        key
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
