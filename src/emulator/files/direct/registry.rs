//! Uploads in progress and completed, per organization: which parts are written (with the
//! token storage gave for them), which are checkpointed, and the checks `complete` makes.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::http::StatusCode;
use parking_lot::Mutex;

use super::layout::Layout;
use crate::emulator::api_error::ApiError;
use crate::emulator::files::store::{FileStore, StoredFile};
use crate::wire::uploads::PartToken;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    InProgress,
    Completed,
}

#[derive(Debug, Clone, Default)]
struct PartState {
    /// The token (ETag, unquoted) of the copy now on disk; `None` until a PUT finished.
    etag: Option<String>,
    checkpointed: bool,
    /// Bumped by every PUT that starts, so only the latest of two racing PUTs is recorded.
    generation: u64,
}

#[derive(Debug)]
pub(crate) struct Upload {
    pub id: String,
    org: String,
    pub filename: String,
    /// The type the caller sent, which a resume must repeat.
    requested_type: String,
    /// The type the file is stored with (from the extension first, as on every upload path).
    file_type: String,
    pub file_uid: String,
    pub layout: Layout,
    data_path: PathBuf,
    /// Held by a PUT's blocking writer for each write into `data_path`: parallel PUTs into one
    /// file otherwise contend for the file's lock in the kernel, which spins (on 2 cores,
    /// three parts in parallel cost the server 2-3x the CPU of one stream); this lock parks them.
    write_lock: Arc<parking_lot::Mutex<()>>,
    /// Index `n - 1` is part `n`.
    parts: Vec<PartState>,
    stage: Stage,
    seq: u64,
}

/// Where one PUT writes, and the generation to hand back when it finished.
#[derive(Debug, Clone)]
pub(crate) struct PartWrite {
    pub path: PathBuf,
    pub offset: u64,
    pub len: u64,
    pub generation: u64,
    /// The upload's write lock (`Upload::write_lock`).
    pub write_lock: Arc<parking_lot::Mutex<()>>,
}

/// Tokens compare without the quotes an `ETag` header carries; clients send either form.
fn bare(token: &str) -> &str {
    token.trim().trim_matches('"')
}

pub(crate) fn invalid_parts(message: impl Into<String>) -> ApiError {
    ApiError::bad_request("invalid_upload_parts", message)
}

pub(crate) fn upload_not_found(upload_id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "upload_not_found",
        format!("Upload '{upload_id}' was not found in this organization."),
    )
}

fn already_completed(upload_id: &str) -> ApiError {
    ApiError::new(StatusCode::CONFLICT, "conflict", format!("Upload '{upload_id}' is already completed."))
}

fn list(numbers: &[u32]) -> String {
    numbers.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

impl Upload {
    /// Part numbers not checkpointed yet, in order: what a resume still has to send.
    pub fn uncheckpointed(&self) -> Vec<u32> {
        self.layout.part_numbers().filter(|n| !self.part(*n).is_some_and(|p| p.checkpointed)).collect()
    }

    fn part(&self, n: u32) -> Option<&PartState> {
        self.parts.get(usize::try_from(n).ok()?.checked_sub(1)?)
    }

    fn part_mut(&mut self, n: u32) -> Option<&mut PartState> {
        self.parts.get_mut(usize::try_from(n).ok()?.checked_sub(1)?)
    }

    /// Each token names a part of this file whose written copy it describes.
    fn check_tokens(&self, given: &[PartToken]) -> Result<(), ApiError> {
        for t in given {
            let Some(part) = self.part(t.part_number) else {
                return Err(invalid_parts(format!(
                    "Part {} is not a part of this upload (parts 1 to {}).",
                    t.part_number, self.layout.num_parts
                )));
            };
            match part.etag.as_deref() {
                Some(etag) if etag == bare(&t.part_token) => {}
                Some(_) => {
                    return Err(invalid_parts(format!(
                        "The token of part {} does not match the part stored.",
                        t.part_number
                    )))
                }
                None => return Err(invalid_parts(format!("Part {} has not been uploaded.", t.part_number))),
            }
        }
        Ok(())
    }

    /// What `complete` requires: tokens sorted and matching, and every part either given now
    /// or checkpointed before, with lengths adding up to the file's size.
    fn check_complete(&self, given: &[PartToken]) -> Result<(), ApiError> {
        if given.windows(2).any(|w| w[0].part_number >= w[1].part_number) {
            return Err(invalid_parts("Parts must be listed once each, sorted by part_number."));
        }
        self.check_tokens(given)?;
        let missing: Vec<u32> = self
            .layout
            .part_numbers()
            .filter(|n| {
                let now = given.iter().any(|t| t.part_number == *n);
                let before = self.part(*n).is_some_and(|p| p.checkpointed && p.etag.is_some());
                !(now || before)
            })
            .collect();
        if !missing.is_empty() {
            return Err(invalid_parts(format!("Missing parts: {}.", list(&missing)))
                .with_suggestion("Upload these parts (fresh URLs from parts/urls) and list them in complete."));
        }
        let total: u64 = self.layout.part_numbers().filter_map(|n| self.layout.range(n)).map(|(_, len)| len).sum();
        if total != self.layout.num_bytes {
            return Err(ApiError::internal(format!(
                "Parts add up to {total} bytes, not {}.",
                self.layout.num_bytes
            )));
        }
        Ok(())
    }
}

/// A new upload's identity and type, as `initiate` decided them.
pub(crate) struct NewUpload<'a> {
    pub org: &'a str,
    pub filename: &'a str,
    pub requested_type: &'a str,
    pub file_type: &'a str,
    pub num_bytes: u64,
}

pub(crate) struct Registry {
    dir: PathBuf,
    uploads: Mutex<HashMap<String, Upload>>,
    seq: AtomicU64,
}

/// What `initiate` answers about an upload.
pub(crate) struct Started {
    pub id: String,
    pub file_uid: String,
    pub layout: Layout,
    /// Parts to send: all of them for a new upload, the uncheckpointed ones for a resume.
    pub to_send: Vec<u32>,
}

impl Registry {
    pub fn new(dir: PathBuf) -> Self {
        Registry { dir, uploads: Mutex::new(HashMap::new()), seq: AtomicU64::new(0) }
    }

    /// The newest unfinished upload of the same (org, filename, file type, size), if any.
    pub fn resumable(&self, new: &NewUpload<'_>) -> Option<Started> {
        let uploads = self.uploads.lock();
        uploads
            .values()
            .filter(|u| {
                u.stage == Stage::InProgress
                    && u.org == new.org
                    && u.filename == new.filename
                    && u.requested_type == new.requested_type
                    && u.layout.num_bytes == new.num_bytes
            })
            .max_by_key(|u| u.seq)
            .map(|u| Started {
                id: u.id.clone(),
                file_uid: u.file_uid.clone(),
                layout: u.layout,
                to_send: u.uncheckpointed(),
            })
    }

    /// Registers a new upload with its data file preallocated (sparse on common file systems).
    pub async fn start(&self, new: &NewUpload<'_>, part_size: u64) -> std::io::Result<Started> {
        let id = format!("upl_{}", uuid::Uuid::new_v4().simple());
        let data_path = self.dir.join(format!("{id}.data"));
        let file = tokio::fs::File::create(&data_path).await?;
        file.set_len(new.num_bytes).await?;
        let layout = Layout::new(new.num_bytes, part_size);
        let upload = Upload {
            id: id.clone(),
            org: new.org.to_string(),
            filename: new.filename.to_string(),
            requested_type: new.requested_type.to_string(),
            file_type: new.file_type.to_string(),
            file_uid: uuid::Uuid::new_v4().to_string(),
            layout,
            data_path,
            write_lock: Arc::default(),
            parts: vec![PartState::default(); layout.num_parts as usize],
            stage: Stage::InProgress,
            seq: self.seq.fetch_add(1, Ordering::Relaxed),
        };
        let started = Started {
            id: id.clone(),
            file_uid: upload.file_uid.clone(),
            layout,
            to_send: layout.part_numbers().collect(),
        };
        self.uploads.lock().insert(id, upload);
        Ok(started)
    }

    /// Runs `f` on the caller's own unfinished upload (see [`open_mut`]).
    fn with_open<T>(&self, org: &str, id: &str, f: impl FnOnce(&mut Upload) -> Result<T, ApiError>) -> Result<T, ApiError> {
        f(open_mut(&mut self.uploads.lock(), org, id)?)
    }

    /// Records finished parts; answers every part checkpointed so far.
    pub fn checkpoint(&self, org: &str, id: &str, given: &[PartToken]) -> Result<Vec<u32>, ApiError> {
        self.with_open(org, id, |u| {
            u.check_tokens(given)?;
            for t in given {
                if let Some(p) = u.part_mut(t.part_number) {
                    p.checkpointed = true;
                }
            }
            Ok(u.layout.part_numbers().filter(|n| u.part(*n).is_some_and(|p| p.checkpointed)).collect())
        })
    }

    /// Checks part numbers a caller wants fresh URLs for.
    pub fn check_part_numbers(&self, org: &str, id: &str, numbers: &[u32]) -> Result<(), ApiError> {
        self.with_open(org, id, |u| {
            let unknown: Vec<u32> = numbers.iter().copied().filter(|n| u.layout.range(*n).is_none()).collect();
            if unknown.is_empty() {
                Ok(())
            } else {
                Err(invalid_parts(format!(
                    "Not parts of this upload (parts 1 to {}): {}.",
                    u.layout.num_parts,
                    list(&unknown)
                )))
            }
        })
    }

    /// Checks the parts, moves the data file into the file store and lists the file.
    pub fn complete(&self, org: &str, id: &str, given: &[PartToken], files: &FileStore) -> Result<Arc<StoredFile>, ApiError> {
        self.with_open(org, id, |u| {
            u.check_complete(given)?;
            let stored = files
                .adopt(org, &u.filename, &u.file_type, u.file_uid.clone(), &u.data_path, u.layout.num_bytes)
                .map_err(|e| ApiError::internal(format!("Could not store the upload: {e}")))?
                .map_err(|_| name_taken(&u.filename))?;
            u.stage = Stage::Completed;
            Ok(stored)
        })
    }

    /// Forgets an unfinished upload and deletes its data.
    pub fn abort(&self, org: &str, id: &str) -> Result<(), ApiError> {
        let upload = {
            let mut uploads = self.uploads.lock();
            open_mut(&mut uploads, org, id)?;
            uploads.remove(id)
        };
        if let Some(u) = upload {
            // A PUT still writing keeps its descriptor; the name is gone at once.
            let _ = std::fs::remove_file(&u.data_path);
        }
        Ok(())
    }

    /// Starts a PUT of part `n`: the earlier copy of that part (token and checkpoint) is
    /// forgotten, since its bytes are about to be overwritten in place. `None` when the upload
    /// is not open or the part is not one of its parts.
    pub fn begin_part(&self, id: &str, n: u32) -> Option<PartWrite> {
        let mut uploads = self.uploads.lock();
        let u = uploads.get_mut(id).filter(|u| u.stage == Stage::InProgress)?;
        let (offset, len) = u.layout.range(n)?;
        let path = u.data_path.clone();
        let write_lock = u.write_lock.clone();
        let part = u.part_mut(n)?;
        part.generation += 1;
        part.etag = None;
        part.checkpointed = false;
        Some(PartWrite { path, offset, len, generation: part.generation, write_lock })
    }

    /// Records a PUT that wrote its whole part; false when the upload went away meanwhile.
    pub fn finish_part(&self, id: &str, n: u32, generation: u64, etag: String) -> bool {
        let mut uploads = self.uploads.lock();
        let Some(u) = uploads.get_mut(id).filter(|u| u.stage == Stage::InProgress) else { return false };
        match u.part_mut(n) {
            Some(p) if p.generation == generation => {
                p.etag = Some(etag);
                true
            }
            // A later PUT of the same part started: it, not this one, decides the part.
            Some(_) => true,
            None => false,
        }
    }
}

/// The caller's own unfinished upload: 404 for unknown, aborted (forgotten) or another
/// organization's uploads, 409 once completed.
fn open_mut<'a>(uploads: &'a mut HashMap<String, Upload>, org: &str, id: &str) -> Result<&'a mut Upload, ApiError> {
    let upload = uploads.get_mut(id).filter(|u| u.org == org).ok_or_else(|| upload_not_found(id))?;
    if upload.stage == Stage::Completed {
        return Err(already_completed(id));
    }
    Ok(upload)
}

pub(crate) fn name_taken(filename: &str) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "conflict",
        format!("A file named '{filename}' already exists in this organization."),
    )
    .with_suggestion("Delete it first or upload under another name.")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upload(num_bytes: u64, part_size: u64) -> Upload {
        let layout = Layout::new(num_bytes, part_size);
        Upload {
            id: "upl_1".into(),
            org: "o".into(),
            filename: "f.bin".into(),
            requested_type: "application/octet-stream".into(),
            file_type: "application/octet-stream".into(),
            file_uid: "uid".into(),
            layout,
            data_path: PathBuf::new(),
            write_lock: Arc::default(),
            parts: vec![PartState::default(); layout.num_parts as usize],
            stage: Stage::InProgress,
            seq: 0,
        }
    }

    fn written(u: &mut Upload, n: u32, etag: &str, checkpointed: bool) {
        let p = u.part_mut(n).unwrap();
        p.etag = Some(etag.into());
        p.checkpointed = checkpointed;
    }

    fn token(n: u32, t: &str) -> PartToken {
        PartToken { part_number: n, part_token: t.into() }
    }

    #[test]
    fn complete_needs_every_part_now_or_checkpointed() {
        let mut u = upload(10, 4);
        written(&mut u, 1, "a", true);
        written(&mut u, 2, "b", false);
        let err = u.check_complete(&[token(2, "\"b\"")]).unwrap_err();
        assert_eq!(err.code, "invalid_upload_parts");
        assert!(err.message.contains('3'), "{}", err.message);
        written(&mut u, 3, "c", false);
        assert!(u.check_complete(&[token(2, "\"b\""), token(3, "c")]).is_ok());
        assert_eq!(u.uncheckpointed(), [2, 3]);
    }

    #[test]
    fn complete_rejects_bad_tokens_order_and_numbers() {
        let mut u = upload(8, 4);
        written(&mut u, 1, "a", false);
        written(&mut u, 2, "b", false);
        assert!(u.check_complete(&[token(1, "a"), token(2, "b")]).is_ok());
        let code = |given: &[PartToken]| u.check_complete(given).unwrap_err().code;
        assert_eq!(code(&[token(2, "b"), token(1, "a")]), "invalid_upload_parts");
        assert_eq!(code(&[token(1, "a"), token(1, "a"), token(2, "b")]), "invalid_upload_parts");
        assert_eq!(code(&[token(1, "a"), token(2, "x")]), "invalid_upload_parts");
        assert_eq!(code(&[token(1, "a"), token(2, "b"), token(3, "c")]), "invalid_upload_parts");
        assert_eq!(code(&[token(0, "a")]), "invalid_upload_parts");
    }

    #[test]
    fn unwritten_part_cannot_be_given() {
        let u = upload(8, 4);
        let err = u.check_complete(&[token(1, "a"), token(2, "b")]).unwrap_err();
        assert!(err.message.contains("not been uploaded"));
    }
}
