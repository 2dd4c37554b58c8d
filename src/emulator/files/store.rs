//! Registered files per organization, and the half-written upload that becomes one.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use parking_lot::Mutex;
use serde_json::{Map, Value};
use tokio::io::AsyncWriteExt;

use crate::wire::files::FileRecord;

/// The only status a simple upload reaches; listings sort statuses in lifecycle order.
pub const STATUS_REGISTERED: &str = "Registered";

#[derive(Debug)]
pub(crate) struct StoredFile {
    pub file_id: String,
    pub file_uid: String,
    pub file_type: String,
    pub num_bytes: u64,
    pub created_at: SystemTime,
    /// Registration order; breaks ties in every sort so cursors are stable.
    pub seq: u64,
    pub path: PathBuf,
}

impl StoredFile {
    pub fn record(&self) -> FileRecord {
        let mut extra = Map::new();
        extra.insert("status".into(), Value::from(STATUS_REGISTERED));
        FileRecord {
            file_id: self.file_id.clone(),
            file_uid: Some(self.file_uid.clone()),
            file_type: Some(self.file_type.clone()),
            num_bytes: Some(self.num_bytes),
            created_at: Some(Value::from(iso8601(self.created_at))),
            extra,
        }
    }
}

/// ISO 8601 in UTC with six fractional digits, as every other record of the emulator writes
/// its times (`2026-11-22T06:18:00.123456Z`); nanoseconds here failed parsers that take six.
pub(crate) use crate::emulator::agents::store::timestamp as iso8601;

pub(crate) struct FileStore {
    dir: PathBuf,
    orgs: Mutex<HashMap<String, BTreeMap<String, Arc<StoredFile>>>>,
    seq: AtomicU64,
}

impl FileStore {
    pub fn new(dir: PathBuf) -> Self {
        FileStore { dir, orgs: Mutex::new(HashMap::new()), seq: AtomicU64::new(0) }
    }

    /// The data dir, where results written by jobs are staged before they are listed.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn get(&self, org: &str, file_id: &str) -> Option<Arc<StoredFile>> {
        self.orgs.lock().get(org)?.get(file_id).cloned()
    }

    pub fn exists(&self, org: &str, file_id: &str) -> bool {
        self.get(org, file_id).is_some()
    }

    pub fn list(&self, org: &str) -> Vec<Arc<StoredFile>> {
        self.orgs
            .lock()
            .get(org)
            .map(|files| files.values().cloned().collect())
            .unwrap_or_default()
    }

    pub fn remove(&self, org: &str, file_id: &str) -> Option<Arc<StoredFile>> {
        self.orgs.lock().get_mut(org)?.remove(file_id)
    }

    /// A fresh temp file in the data dir; it deletes itself unless registered.
    pub async fn begin(&self) -> std::io::Result<PartialFile> {
        let path = self.dir.join(format!("incoming-{}.part", uuid::Uuid::new_v4().simple()));
        let file = tokio::fs::File::create(&path).await?;
        Ok(PartialFile { path: Some(path), file: Some(file), written: 0 })
    }

    /// Moves a complete upload into place and lists it. `Err` when the name was taken while
    /// the upload was streaming (the partial file is removed either way).
    pub async fn register(
        &self,
        org: &str,
        file_id: &str,
        file_type: &str,
        mut partial: PartialFile,
    ) -> std::io::Result<Result<Arc<StoredFile>, ()>> {
        partial.finish().await?;
        let Some(from) = partial.path.clone() else {
            return Err(std::io::Error::other("upload already registered"));
        };
        let file_uid = uuid::Uuid::new_v4().to_string();
        let stored = self.adopt(org, file_id, file_type, file_uid, &from, partial.written)?;
        if stored.is_ok() {
            partial.path = None; // moved into place: nothing to clean up
        }
        Ok(stored)
    }

    /// Lists the complete file at `from` under `file_id`, moving it into place. `Err` (with
    /// `from` untouched) when the name is taken. The rename runs under the lock so that the
    /// check and the listing are one step; it only changes a directory entry.
    pub fn adopt(
        &self,
        org: &str,
        file_id: &str,
        file_type: &str,
        file_uid: String,
        from: &Path,
        num_bytes: u64,
    ) -> std::io::Result<Result<Arc<StoredFile>, ()>> {
        let mut orgs = self.orgs.lock();
        let files = orgs.entry(org.to_string()).or_default();
        if files.contains_key(file_id) {
            return Ok(Err(()));
        }
        let final_path = self.dir.join(&file_uid);
        std::fs::rename(from, &final_path)?;
        let stored = Arc::new(StoredFile {
            file_id: file_id.to_string(),
            file_uid,
            file_type: file_type.to_string(),
            num_bytes,
            created_at: SystemTime::now(),
            seq: self.seq.fetch_add(1, Ordering::Relaxed),
            path: final_path,
        });
        files.insert(file_id.to_string(), stored.clone());
        Ok(Ok(stored))
    }
}

/// An upload being written. Dropping it (an error, a client that went away) removes the file,
/// so nothing half-written is ever left behind or listed.
pub(crate) struct PartialFile {
    path: Option<PathBuf>,
    file: Option<tokio::fs::File>,
    pub written: u64,
}

impl PartialFile {
    pub async fn write(&mut self, chunk: &[u8]) -> std::io::Result<()> {
        match self.file.as_mut() {
            Some(f) => f.write_all(chunk).await?,
            None => return Err(std::io::Error::other("upload already finished")),
        }
        self.written += chunk.len() as u64;
        Ok(())
    }

    async fn finish(&mut self) -> std::io::Result<()> {
        if let Some(mut f) = self.file.take() {
            f.flush().await?;
        }
        Ok(())
    }
}

impl Drop for PartialFile {
    fn drop(&mut self) {
        self.file.take();
        if let Some(path) = self.path.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}
