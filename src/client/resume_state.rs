//! What this machine remembers about its unfinished direct uploads, so a resume never joins
//! parts of two different versions of a file.
//!
//! The platform matches an unfinished upload by (organization, name, type, size) only. If the
//! user edits a file after an interrupted upload and keeps its size, a resume would stitch old
//! and new parts together into a file that never existed. So when an upload starts, the file's
//! fingerprint (size, modification time, inode, inode change time) is written next to its upload
//! id; on resume a changed fingerprint means the unfinished upload is discarded and the file sent
//! afresh. The same fingerprint, taken again before `complete`, catches a file edited while its
//! parts were being sent. An
//! unfinished upload with no record here (started from another path, on another machine, or
//! before the cache was cleared) is never resumed either: its parts may be another file's bytes.
//!
//! The record lives in `$SENSORIUM_CACHE_DIR`, else `$XDG_CACHE_HOME/sensorium`, else
//! `~/.cache/sensorium`, under `uploads/`. It holds no secret (the key is not part of it).
//! Failing to read or write it only costs the resume (the file is sent whole), never the upload.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    pub size: u64,
    pub modified_ns: i128,
    pub inode: u64,
    /// The inode change time (`st_ctime`): any write, truncation or `utime` moves it, and no
    /// user can set it back, unlike the modification time (`cp -p`, `rsync -t` and data
    /// loggers set that to the recording's time, so a re-export of the same size would look
    /// unchanged). Windows has no such time in std; there it is the creation time, which a
    /// file written anew under the same name changes (an in-place rewrite with the
    /// modification time set back goes unseen there). Not defaulted: a record written before
    /// this field existed fails to parse, counts as no record, and its upload is discarded
    /// rather than resumed.
    pub changed_ns: i128,
}

impl Fingerprint {
    pub fn of(meta: &std::fs::Metadata) -> Self {
        let modified_ns = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_nanos() as i128)
            .unwrap_or(0);
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(meta);
        #[cfg(not(unix))]
        let inode = 0;
        #[cfg(unix)]
        let changed_ns = {
            use std::os::unix::fs::MetadataExt;
            i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec())
        };
        #[cfg(windows)]
        let changed_ns = i128::from(std::os::windows::fs::MetadataExt::creation_time(meta));
        #[cfg(not(any(unix, windows)))]
        let changed_ns = 0;
        Fingerprint { size: meta.len(), modified_ns, inode, changed_ns }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumeRecord {
    pub upload_id: String,
    pub path: String,
    pub fingerprint: Fingerprint,
    /// The part size the platform gave the upload when it started (`None`: it gave offsets
    /// instead). A resume says which parts are still to send by number, and a number means its
    /// bytes only under the layout the parts were sent with: under another, the parts "already
    /// sent" are other bytes than those the file has there. Not defaulted, as `changed_ns`.
    pub part_size: Option<u64>,
}

/// The record slot of one (service, file) pair.
#[derive(Debug, Clone)]
pub struct ResumeState {
    file: Option<PathBuf>,
}

fn cache_dir() -> Option<PathBuf> {
    cache_dir_in(|name| std::env::var_os(name), std::env::current_dir().ok())
}

/// `cache_dir` with the environment read through `var`. `SENSORIUM_CACHE_DIR` written in a
/// `.env`, Docker env-file or service file often starts with a `~` no shell expanded: it is the
/// home folder here too, not a folder named `~` in the current one. A relative folder would move
/// with the current directory, and a resume started from another would not find its record, so
/// it is taken against `cwd`. A blank value is unset. A relative `XDG_CACHE_HOME` is ignored, as
/// the XDG base directory rules say.
fn cache_dir_in(var: impl Fn(&str) -> Option<OsString>, cwd: Option<PathBuf>) -> Option<PathBuf> {
    let set = |name: &str| var(name).filter(|v| !v.to_string_lossy().trim().is_empty()).map(PathBuf::from);
    let home = set("HOME").filter(|home| home.is_absolute());
    let chosen = set("SENSORIUM_CACHE_DIR").and_then(|dir| {
        let dir = match dir.strip_prefix("~") {
            Ok(rest) => home.as_ref()?.join(rest),
            Err(_) => dir,
        };
        if dir.is_absolute() {
            Some(dir)
        } else {
            cwd.map(|cwd| cwd.join(dir))
        }
    });
    chosen
        .or_else(|| set("XDG_CACHE_HOME").filter(|d| d.is_absolute()).map(|d| d.join("sensorium")))
        .or_else(|| home.map(|d| d.join(".cache").join("sensorium")))
}

/// Where the records of unfinished uploads (and their lock files) live.
pub fn uploads_dir() -> Option<PathBuf> {
    cache_dir().map(|d| d.join("uploads"))
}

impl ResumeState {
    pub fn new(base_url: &str, path: &Path) -> Self {
        let absolute = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        let mut hasher = Sha256::new();
        hasher.update(base_url.as_bytes());
        hasher.update([0]);
        hasher.update(absolute.to_string_lossy().as_bytes());
        let name: String = hasher.finalize().iter().take(16).map(|b| format!("{b:02x}")).collect();
        ResumeState { file: uploads_dir().map(|d| d.join(format!("{name}.json"))) }
    }

    pub fn load(&self) -> Option<ResumeRecord> {
        let text = std::fs::read(self.file.as_ref()?).ok()?;
        serde_json::from_slice(&text).ok()
    }

    pub fn save(&self, record: &ResumeRecord) {
        let Some(file) = &self.file else { return };
        let write = || -> std::io::Result<()> {
            if let Some(dir) = file.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let body = serde_json::to_vec(record).map_err(std::io::Error::other)?;
            // Write then rename, so a crash never leaves a half-written record.
            let tmp = file.with_extension("json.tmp");
            std::fs::write(&tmp, body)?;
            std::fs::rename(&tmp, file)
        };
        if let Err(e) = write() {
            log::debug!("could not record the upload for resume at {}: {e}", file.display());
        }
    }

    pub fn remove(&self) {
        if let Some(file) = &self.file {
            let _ = std::fs::remove_file(file);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_folder_is_read_as_a_user_means_it() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| OsString::from(*v))
        };
        let cwd = Some(PathBuf::from("/work/here"));
        let dir = |pairs| cache_dir_in(env(pairs), cwd.clone());
        assert_eq!(dir(&[("SENSORIUM_CACHE_DIR", "~/cache"), ("HOME", "/home/u")]), Some("/home/u/cache".into()));
        assert_eq!(dir(&[("SENSORIUM_CACHE_DIR", "~"), ("HOME", "/home/u")]), Some("/home/u".into()));
        assert_eq!(dir(&[("SENSORIUM_CACHE_DIR", "rel/c"), ("HOME", "/home/u")]), Some("/work/here/rel/c".into()));
        assert_eq!(dir(&[("SENSORIUM_CACHE_DIR", "/abs"), ("HOME", "/home/u")]), Some("/abs".into()));
        // Blank is unset; so is a `~` with no home to expand it to, and a relative XDG folder.
        let fallback = Some(PathBuf::from("/home/u/.cache/sensorium"));
        assert_eq!(dir(&[("SENSORIUM_CACHE_DIR", "  "), ("HOME", "/home/u")]), fallback);
        assert_eq!(dir(&[("SENSORIUM_CACHE_DIR", ""), ("XDG_CACHE_HOME", "xdg"), ("HOME", "/home/u")]), fallback);
        assert_eq!(dir(&[("SENSORIUM_CACHE_DIR", "~/c"), ("XDG_CACHE_HOME", "/x")]), Some("/x/sensorium".into()));
        assert_eq!(dir(&[]), None);
    }

    #[test]
    fn round_trip_and_fingerprint_changes() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("a.bin");
        std::fs::write(&data, b"one").unwrap();
        let state = ResumeState { file: Some(dir.path().join("uploads").join("x.json")) };
        assert!(state.load().is_none());
        let fp = Fingerprint::of(&std::fs::metadata(&data).unwrap());
        let record = ResumeRecord { upload_id: "upl_1".into(), path: "a.bin".into(), fingerprint: fp.clone(), part_size: Some(8) };
        state.save(&record);
        assert_eq!(state.load(), Some(record));
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&data, b"two").unwrap();
        assert_ne!(Fingerprint::of(&std::fs::metadata(&data).unwrap()), fp, "same size, new content");
        state.remove();
        assert!(state.load().is_none());
    }

    #[test]
    fn a_rewrite_with_the_modification_time_set_back_changes_the_fingerprint() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("a.bin");
        std::fs::write(&data, b"one").unwrap();
        let before = std::fs::metadata(&data).unwrap();
        let fp = Fingerprint::of(&before);
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&data, b"two").unwrap();
        let file = std::fs::File::options().write(true).open(&data).unwrap();
        file.set_modified(before.modified().unwrap()).unwrap();
        let after = Fingerprint::of(&std::fs::metadata(&data).unwrap());
        assert_eq!((after.size, after.modified_ns, after.inode), (fp.size, fp.modified_ns, fp.inode));
        assert_ne!(after, fp, "the change time moved");
    }

    #[test]
    fn a_record_written_without_the_change_time_is_no_record() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("old.json");
        std::fs::write(
            &file,
            br#"{"upload_id":"upl_1","path":"a.bin","fingerprint":{"size":3,"modified_ns":1,"inode":2}}"#,
        )
        .unwrap();
        assert!(ResumeState { file: Some(file) }.load().is_none());
    }

    #[test]
    fn different_services_and_files_get_different_slots() {
        let a = ResumeState::new("http://a/v0.5", Path::new("/x/f.bin"));
        let b = ResumeState::new("http://b/v0.5", Path::new("/x/f.bin"));
        let c = ResumeState::new("http://a/v0.5", Path::new("/x/g.bin"));
        assert_ne!(a.file, b.file);
        assert_ne!(a.file, c.file);
    }
}
