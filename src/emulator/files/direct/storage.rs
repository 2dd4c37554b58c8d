//! The storage side: part URLs under `/_storage/{upload_id}/{part_number}`, which the emulator
//! serves itself the way an object store serves presigned URLs. Answers are the object store's
//! (XML errors, an `ETag` header), not the platform's JSON, so a client that mixes the two up
//! is caught here.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use bytes::Bytes;

use super::registry::PartWrite;
use super::signing::Denied;
use crate::emulator::public_origin;
use crate::emulator::state::Shared;

pub(crate) const STORAGE_PREFIX: &str = "/_storage";

/// The fault-rule path of part `n` of every upload (a `*` matches one path segment).
pub(crate) fn part_path_pattern(n: u32) -> String {
    format!("{STORAGE_PREFIX}/*/{n}")
}

pub(crate) fn now_unix() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// A signed URL for one part, valid until `expires` (Unix seconds).
pub(crate) fn part_url(shared: &Shared, upload_id: &str, n: u32, expires: u64) -> String {
    let signature = shared.url_signer.sign(upload_id, n, expires);
    format!(
        "{}{STORAGE_PREFIX}/{upload_id}/{n}?expires={expires}&signature={signature}",
        public_origin::current(shared)
    )
}

/// An object-store error: `<Error><Code>..</Code><Message>..</Message></Error>`.
pub(crate) fn xml_error(status: StatusCode, code: &str, message: &str) -> Response {
    let body = format!("<Error><Code>{code}</Code><Message>{message}</Message></Error>");
    (status, [(header::CONTENT_TYPE, "application/xml")], body).into_response()
}

fn no_such_upload() -> Response {
    xml_error(
        StatusCode::NOT_FOUND,
        "NoSuchUpload",
        "The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed.",
    )
}

/// `expires` and `signature` from the query string.
pub(crate) fn signed_params(query: &str) -> Option<(u64, String)> {
    let mut expires = None;
    let mut signature = None;
    for (name, value) in url::form_urlencoded::parse(query.as_bytes()) {
        match name.as_ref() {
            "expires" => expires = value.parse::<u64>().ok(),
            "signature" => signature = Some(value.into_owned()),
            _ => {}
        }
    }
    Some((expires?, signature?))
}

pub(crate) async fn put_part(
    State(shared): State<Arc<Shared>>,
    path: Result<Path<(String, String)>, PathRejection>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (upload_id, n, write) = match authorize(&shared, path, query.as_deref(), &headers) {
        Ok(found) => found,
        Err(refused) => {
            // Read the body anyway, so the client has finished sending and sees this answer
            // rather than a broken pipe.
            let mut stream = body.into_data_stream();
            while let Some(Ok(_)) = stream.next().await {}
            return refused;
        }
    };
    let etag = match write_part(&write, body).await {
        Ok(etag) => etag,
        Err(response) => return response,
    };
    if !shared.uploads.finish_part(&upload_id, n, write.generation, etag.clone()) {
        return no_such_upload();
    }
    let mut response = StatusCode::OK.into_response();
    if let Ok(value) = HeaderValue::from_str(&format!("\"{etag}\"")) {
        response.headers_mut().insert(header::ETAG, value);
    }
    response
}

/// The checks made before any byte is written: one auth mechanism, a valid unexpired
/// signature, an open upload with that part. The part's earlier copy is forgotten on success.
// The error is the answer itself, returned once per refused request: boxing it gains nothing.
#[allow(clippy::result_large_err)]
fn authorize(
    shared: &Shared,
    path: Result<Path<(String, String)>, PathRejection>,
    query: Option<&str>,
    headers: &HeaderMap,
) -> Result<(String, u32, PartWrite), Response> {
    // Storage refuses a request with two auth mechanisms; it also means the client leaked its
    // platform API key to a third party.
    if headers.contains_key(header::AUTHORIZATION) {
        return Err(xml_error(
            StatusCode::BAD_REQUEST,
            "InvalidArgument",
            "Only one auth mechanism allowed; send either the signed URL or an Authorization header, not both.",
        ));
    }
    let Ok(Path((upload_id, part))) = path else { return Err(no_such_upload()) };
    let Ok(n) = part.parse::<u32>() else {
        return Err(xml_error(StatusCode::BAD_REQUEST, "InvalidArgument", "Part number must be a positive integer."));
    };
    let Some((expires, signature)) = signed_params(query.unwrap_or("")) else {
        return Err(xml_error(
            StatusCode::FORBIDDEN,
            "AccessDenied",
            "Query-string authentication requires the expires and signature parameters",
        ));
    };
    match shared.url_signer.check(&upload_id, n, expires, &signature, now_unix()) {
        Ok(()) => {}
        Err(Denied::Expired) => {
            return Err(xml_error(StatusCode::FORBIDDEN, "AccessDenied", "Request has expired"))
        }
        Err(Denied::BadSignature) => {
            return Err(xml_error(
                StatusCode::FORBIDDEN,
                "SignatureDoesNotMatch",
                "The request signature we calculated does not match the signature you provided.",
            ))
        }
    }
    let write = shared.uploads.begin_part(&upload_id, n).ok_or_else(no_such_upload)?;
    Ok((upload_id, n, write))
}

/// Streams the body into the part's byte range of the upload's file and returns its token.
/// The token only has to identify this write of the part (checkpoint and complete compare it
/// with the last write), so it is random rather than a hash of the bytes: hashing every byte
/// cost the emulator 1.5-3.5 s of CPU per GiB and capped every client's upload rate in the
/// benchmarks. Bytes past the part's length are read but not written, so a wrong-sized body
/// never spills into the next part, and the client still gets the 400 instead of a broken pipe.
///
/// The body's chunks are written as they came (no copy into a buffer) in batches of
/// [`WRITE_BATCH`] by one blocking task at a time, while the next batch is received. The
/// blocking task holds the upload's write lock for the system calls themselves; with
/// `tokio::fs::File` the lock only covered the hand-over, and parallel parts still met (and
/// spun) on the file's lock in the kernel.
async fn write_part(w: &PartWrite, body: Body) -> Result<String, Response> {
    let io_error = |e: std::io::Error| {
        xml_error(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", &format!("Could not store the part: {e}"))
    };
    let (path, offset, len) = (w.path.clone(), w.offset, w.len);
    let opened = tokio::task::spawn_blocking(move || {
        let file = std::fs::OpenOptions::new().write(true).open(path)?;
        reserve_range(&file, offset, len);
        Ok::<_, std::io::Error>(file)
    })
    .await;
    // Gone when the upload was aborted after the PUT began.
    let Ok(Ok(file)) = opened else { return Err(no_such_upload()) };
    let file = Arc::new(file);
    let mut writing: Option<tokio::task::JoinHandle<std::io::Result<()>>> = None;
    let mut batch: Vec<Bytes> = Vec::new();
    let mut batch_len: u64 = 0;
    let mut written: u64 = 0; // bytes handed to writers so far
    let mut received: u64 = 0;
    let mut stream = body.into_data_stream();
    loop {
        let chunk = match stream.next().await {
            Some(Ok(chunk)) => Some(chunk),
            Some(Err(_)) => {
                finish(writing.take()).await.map_err(io_error)?;
                return Err(xml_error(StatusCode::BAD_REQUEST, "IncompleteBody", "The request body was interrupted."));
            }
            None => None,
        };
        let last = chunk.is_none();
        if let Some(chunk) = chunk {
            let room = w.len.saturating_sub(received);
            let take = usize::try_from(room).unwrap_or(usize::MAX).min(chunk.len());
            if take > 0 {
                batch_len += take as u64;
                batch.push(chunk.slice(..take));
            }
            received += chunk.len() as u64;
        }
        if batch_len >= WRITE_BATCH || (last && batch_len > 0) {
            finish(writing.take()).await.map_err(io_error)?;
            let (file, lock, at) = (file.clone(), w.write_lock.clone(), w.offset + written);
            let chunks = std::mem::take(&mut batch);
            written += std::mem::take(&mut batch_len);
            writing = Some(tokio::task::spawn_blocking(move || write_at(&file, &lock, at, &chunks)));
        }
        if last {
            break;
        }
    }
    finish(writing.take()).await.map_err(io_error)?;
    if received != w.len {
        let code = if received < w.len { "IncompleteBody" } else { "EntityTooLarge" };
        return Err(xml_error(
            StatusCode::BAD_REQUEST,
            code,
            &format!("The part is {} bytes; the request body had {received}.", w.len),
        ));
    }
    Ok(uuid::Uuid::new_v4().simple().to_string())
}

/// Bytes collected from the body before they go to the file in one blocking task.
const WRITE_BATCH: u64 = 4 * 1024 * 1024;

/// Waits for the previous batch's writer, if any.
async fn finish(writing: Option<tokio::task::JoinHandle<std::io::Result<()>>>) -> std::io::Result<()> {
    match writing {
        Some(handle) => handle.await.map_err(std::io::Error::other)?,
        None => Ok(()),
    }
}

/// Writes `chunks` back to back from `at`, holding the upload's write lock.
fn write_at(file: &std::fs::File, lock: &parking_lot::Mutex<()>, mut at: u64, chunks: &[Bytes]) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let _writing = lock.lock();
    for chunk in chunks {
        file.write_all_at(chunk, at)?;
        at += chunk.len() as u64;
    }
    Ok(())
}

/// Allocates the part's byte range before it is written. The upload's file is sparse; three
/// parts written at once into holes of one ext4 file made the file system split and convert
/// extents as they grew, which cost the emulator about twice the CPU of one stream and held
/// parallel uploads to half the speed of a single PUT. Allocated up front, each part is one
/// extent. Only the range of a part being sent is allocated (never the whole declared size,
/// which a test may set to terabytes), and a file system that cannot allocate (or is full)
/// just keeps the sparse file.
fn reserve_range(file: &std::fs::File, offset: u64, len: u64) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        if let (Ok(offset), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) {
            if len > 0 {
                // SAFETY: the descriptor belongs to `file`, which outlives the call; mode 0 only
                // allocates blocks within the range and never changes the file's contents.
                unsafe { libc::fallocate(file.as_raw_fd(), 0, offset, len) };
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, offset, len);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(chunks: &[&'static [u8]]) -> Body {
        let chunks: Vec<Result<bytes::Bytes, std::io::Error>> =
            chunks.iter().map(|c| Ok(bytes::Bytes::from_static(c))).collect();
        Body::from_stream(futures_util::stream::iter(chunks))
    }

    #[tokio::test]
    async fn parts_land_at_their_offsets_and_never_spill() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("u.data");
        std::fs::write(&path, b"............").unwrap();
        let part = |offset, len| PartWrite { path: path.clone(), offset, len, generation: 1, write_lock: Default::default() };
        let etag = write_part(&part(4, 4), body(&[b"ab", b"cd"])).await.unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"....abcd....");
        assert_eq!(etag.len(), 32);
        let too_long = write_part(&part(0, 4), body(&[b"WXYZ", b"!!"])).await.unwrap_err();
        assert_eq!(too_long.status(), StatusCode::BAD_REQUEST);
        assert_eq!(std::fs::read(&path).unwrap(), b"WXYZabcd....", "bytes past the part are dropped");
        let short = write_part(&part(8, 4), body(&[b"12"])).await.unwrap_err();
        assert_eq!(short.status(), StatusCode::BAD_REQUEST);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn parallel_parts_of_several_batches_land_whole() {
        // Each part spans more than one write batch, arrives in odd-sized chunks, and is written
        // while the other parts are.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("u.data");
        let part_len = WRITE_BATCH as usize + 300_001;
        std::fs::File::create(&path).unwrap().set_len(3 * part_len as u64).unwrap();
        let lock = Arc::new(parking_lot::Mutex::new(()));
        let content = |n: usize| -> Vec<u8> { (0..part_len).map(|i| ((i * 7 + n * 13) % 251) as u8).collect() };
        let writes = (0..3).map(|n| {
            let part = PartWrite {
                path: path.clone(),
                offset: (n * part_len) as u64,
                len: part_len as u64,
                generation: 1,
                write_lock: lock.clone(),
            };
            let chunks: Vec<Result<Bytes, std::io::Error>> =
                content(n).chunks(65_537).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
            tokio::spawn(async move { write_part(&part, Body::from_stream(futures_util::stream::iter(chunks))).await })
        });
        for write in futures_util::future::join_all(writes).await {
            assert!(write.unwrap().is_ok());
        }
        let stored = std::fs::read(&path).unwrap();
        for n in 0..3 {
            assert!(stored[n * part_len..(n + 1) * part_len] == content(n)[..], "part {n}");
        }
    }

    #[tokio::test]
    async fn an_interrupted_body_is_refused_after_its_writes_finish() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("u.data");
        std::fs::write(&path, vec![b'.'; 8]).unwrap();
        let part = PartWrite { path: path.clone(), offset: 0, len: 8, generation: 1, write_lock: Default::default() };
        let chunks: Vec<Result<Bytes, std::io::Error>> =
            vec![Ok(Bytes::from_static(b"abcd")), Err(std::io::Error::other("connection reset"))];
        let refused = write_part(&part, Body::from_stream(futures_util::stream::iter(chunks))).await.unwrap_err();
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
        let gone = PartWrite { path: dir.path().join("aborted.data"), ..part };
        assert_eq!(write_part(&gone, body(&[b"x"])).await.unwrap_err().status(), StatusCode::NOT_FOUND);
    }

    #[test]
    fn signed_params_need_both() {
        assert_eq!(signed_params("expires=5&signature=ab"), Some((5, "ab".to_string())));
        assert_eq!(signed_params("expires=5"), None);
        assert_eq!(signed_params("expires=x&signature=ab"), None);
        assert_eq!(part_path_pattern(3), "/_storage/*/3");
    }
}
