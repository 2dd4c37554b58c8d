//! Output files as an object store serves them: absolute presigned URLs into the emulator itself
//! (`/_storage/batch/{output_id}/{filename}?expires=&signature=`), fetched with no Authorization
//! header (scripts do exactly that), whole or by a single `Range`. `expire_output_urls` makes
//! every URL signed so far answer 403, as an expired presigned URL does; listing the outputs
//! again signs fresh ones. Errors are the object store's XML, not the platform's JSON.

use std::io::SeekFrom;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use super::store::OutputRec;
use crate::emulator::agents::store::timestamp;
use crate::emulator::files::direct::signing::Denied;
use crate::emulator::public_origin;
use crate::emulator::files::direct::storage::{now_unix, signed_params, xml_error};
use crate::emulator::state::Shared;

/// How long a listed output URL stays valid; the notes do not give the live value.
pub(crate) const OUTPUT_URL_TTL: Duration = Duration::from_secs(3600);
/// Signed outputs share the upload signer's scheme; their "part number" is fixed.
const OUTPUT_PART: u32 = 0;

/// `(ref, expires_at)` of a fresh presigned URL for `output`.
pub(crate) fn presign(shared: &Shared, output: &OutputRec) -> (String, String) {
    let expires = now_unix() + OUTPUT_URL_TTL.as_secs();
    let signature = shared.batch.signer.sign(&output.id, OUTPUT_PART, expires);
    let mut url = match url::Url::parse(&public_origin::current(shared)) {
        Ok(url) => url,
        // The origin is the emulator's own socket address or a checked `Host`, so it parses.
        Err(_) => return (String::new(), String::new()),
    };
    if let Ok(mut segments) = url.path_segments_mut() {
        segments.clear().extend(["_storage", "batch", &output.id, &output.filename]);
    }
    url.query_pairs_mut().append_pair("expires", &expires.to_string()).append_pair("signature", &signature);
    let expires_at = timestamp(SystemTime::UNIX_EPOCH + Duration::from_secs(expires));
    (url.to_string(), expires_at)
}

/// `bytes=a-b`, `bytes=a-` or `bytes=-n` of a `len`-byte object as `(start, end inclusive)`;
/// `None` for anything else (several ranges included), which is then served whole, as HTTP
/// allows; `Some(Err)` for a range that starts past the end (416).
fn byte_range(value: &str, len: u64) -> Option<Result<(u64, u64), ()>> {
    let spec = value.trim().strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    let (a, b) = spec.split_once('-')?;
    let (a, b) = (a.trim(), b.trim());
    let range = if a.is_empty() {
        let n = b.parse::<u64>().ok()?;
        if n == 0 || len == 0 {
            return Some(Err(()));
        }
        (len.saturating_sub(n), len - 1)
    } else {
        let start = a.parse::<u64>().ok()?;
        let end = if b.is_empty() { len.saturating_sub(1) } else { b.parse::<u64>().ok()?.min(len.saturating_sub(1)) };
        if start >= len || end < start {
            return Some(Err(()));
        }
        (start, end)
    };
    Some(Ok(range))
}

pub(crate) async fn get_output(
    State(shared): State<Arc<Shared>>,
    path: Result<Path<(String, String)>, PathRejection>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    // An object store refuses two auth mechanisms at once; here it also means the client sent
    // its platform API key to what would be a third party.
    if headers.contains_key(header::AUTHORIZATION) {
        return xml_error(StatusCode::BAD_REQUEST, "InvalidArgument",
                         "Only one auth mechanism allowed; send either the signed URL or an Authorization header, not both.");
    }
    let no_such_key = || xml_error(StatusCode::NOT_FOUND, "NoSuchKey", "The specified key does not exist.");
    let Ok(Path((output_id, filename))) = path else { return no_such_key() };
    let Some((expires, signature)) = signed_params(query.as_deref().unwrap_or("")) else {
        return xml_error(StatusCode::FORBIDDEN, "AccessDenied", "Query-string authentication requires the expires and signature parameters");
    };
    match shared.batch.signer.check(&output_id, OUTPUT_PART, expires, &signature, now_unix()) {
        Ok(()) => {}
        Err(Denied::Expired) => return xml_error(StatusCode::FORBIDDEN, "AccessDenied", "Request has expired"),
        Err(Denied::BadSignature) => return xml_error(StatusCode::FORBIDDEN, "SignatureDoesNotMatch",
                                                      "The request signature we calculated does not match the signature you provided."),
    }
    let found = shared.batch.jobs.lock().iter().flat_map(|j| j.outputs.iter()).find(|o| o.id == output_id).cloned();
    let Some(output) = found.filter(|o| o.filename == filename) else { return no_such_key() };
    serve(&output, headers.get(header::RANGE).and_then(|v| v.to_str().ok())).await.unwrap_or_else(|_| no_such_key())
}

/// Streams the file, or the one range asked for.
async fn serve(output: &OutputRec, range: Option<&str>) -> std::io::Result<Response> {
    let mut file = tokio::fs::File::open(&output.path).await?;
    let len = output.num_bytes;
    let (status, start, end) = match range.and_then(|r| byte_range(r, len)) {
        None => (StatusCode::OK, 0, len.saturating_sub(1)),
        Some(Ok((start, end))) => (StatusCode::PARTIAL_CONTENT, start, end),
        Some(Err(())) => {
            let mut refused = xml_error(StatusCode::RANGE_NOT_SATISFIABLE, "InvalidRange", "The requested range is not satisfiable");
            if let Ok(v) = HeaderValue::from_str(&format!("bytes */{len}")) {
                refused.headers_mut().insert(header::CONTENT_RANGE, v);
            }
            return Ok(refused);
        }
    };
    let count = if len == 0 { 0 } else { end - start + 1 };
    file.seek(SeekFrom::Start(start)).await?;
    let body = Body::from_stream(tokio_util::io::ReaderStream::with_capacity(file.take(count), 256 * 1024));
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let h = response.headers_mut();
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(count));
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(if output.filename.ends_with(".csv") { "text/csv" } else { "application/octet-stream" }));
    if status == StatusCode::PARTIAL_CONTENT {
        if let Ok(v) = HeaderValue::from_str(&format!("bytes {start}-{end}/{len}")) {
            h.insert(header::CONTENT_RANGE, v);
        }
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(byte_range("bytes=0-3", 10), Some(Ok((0, 3))));
        assert_eq!(byte_range("bytes=4-", 10), Some(Ok((4, 9))));
        assert_eq!(byte_range("bytes=-3", 10), Some(Ok((7, 9))));
        assert_eq!(byte_range("bytes=5-100", 10), Some(Ok((5, 9))));
        assert_eq!(byte_range("bytes=10-", 10), Some(Err(())));
        assert_eq!(byte_range("bytes=0-1,4-5", 10), None, "several ranges: the whole object");
        assert_eq!(byte_range("items=0-1", 10), None);
    }
}
