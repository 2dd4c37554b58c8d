//! One direct upload at a time per (service, file name) on this machine, so that two uploads of
//! the same file never adopt, abort or join each other's unfinished upload.
//!
//! The platform matches an unfinished upload by (organization, name, type, size), and the local
//! resume record says which one this machine started. Two uploaders that read that record (or
//! find the platform's unfinished upload) at the same time would both send parts to one upload
//! id, or one would discard the other's upload as "not ours". So an uploader first claims the
//! name: within the process through a table of held names (an async lock, so a waiting task
//! holds no thread and is cancelled with its call), across processes through a lock file beside
//! the resume records. The second uploader waits for the first to finish, then carries on: it
//! resumes what the first left unfinished, or meets the platform's 409 for a file that the first
//! stored, which is the `ConflictError` a simple upload gives too.
//!
//! A holder removes its lock file before releasing it, so none stays behind (one per name and
//! service used to pile up in the cache folder). A process that was waiting then holds the lock
//! of a file that no longer has the name: it finds the name gone, or given to a newer file, and
//! starts again, so only the holder of the file the name leads to holds "the" lock. (Elsewhere
//! than on Unix the files stay: an open file cannot be removed there.)

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use parking_lot::Mutex;
use sha2::{Digest, Sha256};

use super::resume_state::uploads_dir;

/// How often a process waiting for another's lock file tries again.
const LOCK_FILE_POLL: Duration = Duration::from_millis(100);

/// Keyed by process id as well: a child forked while a parent's task held a name must not
/// wait for a task that does not exist in the child.
type Key = (u32, String);

static HELD: LazyLock<Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>> = LazyLock::new(Default::default);

/// A held claim; dropping it lets the next uploader of the name go.
pub struct UploadClaim {
    key: Key,
    entry: Option<Arc<tokio::sync::Mutex<()>>>,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
    _file: Option<LockFile>,
}

/// A held lock file, removed (on Unix) before its lock is released.
struct LockFile {
    /// Holds the lock; closed, after `drop` has removed the name, it releases it.
    #[cfg_attr(not(test), allow(dead_code))]
    file: std::fs::File,
    path: PathBuf,
}

impl Drop for LockFile {
    fn drop(&mut self) {
        // Removed while still locked: a waiter that then gets the lock sees the name is gone.
        #[cfg(unix)]
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Whether `file` is still the file at `path` (a holder before us may have removed it, and
/// another process made a new one under the name).
fn still_named(file: &std::fs::File, path: &std::path::Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (file.metadata(), std::fs::metadata(path)) {
            (Ok(ours), Ok(named)) => ours.dev() == named.dev() && ours.ino() == named.ino(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (file, path);
        true
    }
}

fn key_of(base_url: &str, file_name: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(base_url.as_bytes());
    hasher.update([0]);
    hasher.update(file_name.as_bytes());
    hasher.finalize().iter().take(16).map(|b| format!("{b:02x}")).collect()
}

impl UploadClaim {
    /// Waits until no other uploader here holds `file_name` on `base_url`, then holds it.
    pub async fn acquire(base_url: &str, file_name: &str) -> UploadClaim {
        Self::acquire_in(uploads_dir(), base_url, file_name).await
    }

    async fn acquire_in(dir: Option<PathBuf>, base_url: &str, file_name: &str) -> UploadClaim {
        let name = key_of(base_url, file_name);
        let key = (std::process::id(), name.clone());
        let entry = HELD.lock().entry(key.clone()).or_default().clone();
        let guard = entry.clone().lock_owned().await;
        let file = match dir {
            Some(dir) => lock_file(&dir.join(format!("{name}.lock"))).await,
            None => None,
        };
        UploadClaim { key, entry: Some(entry), guard: Some(guard), _file: file }
    }
}

/// Holds an exclusive lock on `path` (created if missing), polling while another process has
/// it. Failing to create or lock the file costs only the cross-process exclusion, which is
/// logged; the upload goes on.
async fn lock_file(path: &std::path::Path) -> Option<LockFile> {
    loop {
        let file = lock_named(path).await?;
        if still_named(&file, path) {
            return Some(LockFile { file, path: path.to_path_buf() });
        }
        // Its holder removed it while we waited: lock whatever the name leads to now.
    }
}

/// The lock of the file at `path` as it was opened, which may since have lost the name.
async fn lock_named(path: &std::path::Path) -> Option<std::fs::File> {
    let open = || -> std::io::Result<std::fs::File> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(path)
    };
    let file = match open() {
        Ok(file) => file,
        Err(e) => {
            log::debug!("could not open the upload lock {}: {e}; uploading without it", path.display());
            return None;
        }
    };
    let mut logged = false;
    loop {
        match file.try_lock() {
            Ok(()) => return Some(file),
            Err(std::fs::TryLockError::WouldBlock) => {
                if !logged {
                    log::debug!("another process is uploading this file ({}); waiting for it", path.display());
                    logged = true;
                }
                tokio::time::sleep(LOCK_FILE_POLL).await;
            }
            Err(std::fs::TryLockError::Error(e)) => {
                log::debug!("could not lock {}: {e}; uploading without it", path.display());
                return None;
            }
        }
    }
}

impl Drop for UploadClaim {
    fn drop(&mut self) {
        // The lock file (closing it releases its lock) and the guard go first, then the table
        // entry if no one else holds or waits for it.
        self._file.take();
        self.guard.take();
        let mut held = HELD.lock();
        if let Some(entry) = self.entry.take() {
            // Ours and the table's: nobody else holds or waits.
            if Arc::strong_count(&entry) == 2 {
                held.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_second_claim_waits_for_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let first = UploadClaim::acquire_in(Some(dir.path().to_path_buf()), "http://a/v0.5", "f.csv").await;
        let second = UploadClaim::acquire_in(Some(dir.path().to_path_buf()), "http://a/v0.5", "f.csv");
        tokio::pin!(second);
        let waited = tokio::time::timeout(Duration::from_millis(50), &mut second).await;
        assert!(waited.is_err(), "the second claim went while the first was held");
        // Another name or another service is not held up.
        let _other = UploadClaim::acquire_in(Some(dir.path().to_path_buf()), "http://a/v0.5", "g.csv").await;
        let _elsewhere = UploadClaim::acquire_in(Some(dir.path().to_path_buf()), "http://b/v0.5", "f.csv").await;
        drop(first);
        let _second = second.await;
    }

    #[test]
    fn a_lock_file_held_elsewhere_is_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let held = runtime.block_on(lock_file(&path)).unwrap();
        // Another open file description of the same file: what another process would have.
        let attempt = runtime.block_on(async { tokio::time::timeout(Duration::from_millis(250), lock_file(&path)).await });
        assert!(attempt.is_err());
        drop(held);
        assert!(runtime.block_on(lock_file(&path)).is_some());
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn no_lock_file_stays_and_a_waiter_takes_the_name_its_holder_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let first = lock_file(&path).await.unwrap();
        // A waiter that opened the file while it was held (another process would have).
        let waiter = tokio::spawn({
            let path = path.clone();
            async move { lock_file(&path).await.unwrap() }
        });
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(!waiter.is_finished(), "the waiter went while the first held the lock");
        drop(first);
        let second = waiter.await.unwrap();
        // The waiter holds the file now at the name, and a third waits for it, not for the
        // removed file the waiter first opened.
        assert!(still_named(&second.file, &path));
        let third = tokio::time::timeout(Duration::from_millis(250), lock_file(&path)).await;
        assert!(third.is_err(), "two held the lock of one name");
        drop(second);
        assert!(!path.exists(), "the lock file stayed behind");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
