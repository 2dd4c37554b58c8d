//! One JSON call to any endpoint, for every surface that has no dedicated path: the method, a
//! path under its surface's base URL, query parameters and a JSON body go out through the
//! transport (auth, retries, stall timeouts, error mapping); the answer's JSON comes back, or a
//! page normalised from either list style. Records are typed in Python; nothing here knows an
//! endpoint.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt;
use reqwest::Method;
use serde_json::{Map, Value};

use super::config::FINE_TUNING_VERSION;
use super::error::Error;
use super::files::{download_call, Links};
use super::pagination::{normalize_page, ItemEnd};
use super::transport::{decode_json, safe_to_repeat, shown_url, Call, RequestBody, Transport};
use super::upload::{ProgressShare, TransferProgress};

/// Where a path is mounted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surface {
    /// `{root}/v0.5`: files, query, batch, lens, models, jobs.
    Api,
    /// `{root}/v0.6`.
    FineTuning,
    /// The agents prefix (`agents_base_url`, by default the `/v0.5` base).
    Agents,
}

impl Surface {
    pub fn parse(name: &str) -> Result<Self, Error> {
        match name {
            "api" => Ok(Surface::Api),
            "fine_tuning" => Ok(Surface::FineTuning),
            "agents" => Ok(Surface::Agents),
            other => Err(Error::invalid_argument("surface", format!("is {other:?}; it takes api, fine_tuning or agents"))),
        }
    }

    pub fn base(self, transport: &Transport) -> String {
        match self {
            Surface::Api => transport.config.base_url(),
            Surface::FineTuning => transport.config.versioned(FINE_TUNING_VERSION),
            Surface::Agents => transport.config.agents_base_url(),
        }
    }
}

/// One call, as the Python resources describe it.
#[derive(Debug, Clone)]
pub struct JsonCall {
    pub method: Method,
    pub surface: Surface,
    /// Starts with `/`; path parameters arrive percent-encoded (the Python side checks and
    /// quotes each one as a single segment).
    pub path: String,
    pub query: Map<String, Value>,
    pub body: Option<Value>,
    /// Read the answer as a list page (either style) instead of returning it as is.
    pub page: bool,
    /// The list may say `has_more` with no `next_cursor`: its item at this end gives the cursor.
    pub item_cursor: Option<ItemEnd>,
    /// The whole call (retries included) ends within this long of its start.
    pub within: Option<std::time::Duration>,
    /// The caller marks a POST safe to repeat (a cancel, whose repeat meets 409 already-terminal;
    /// a query, which changes nothing). GET, PUT, DELETE... are whatever this says; any other
    /// POST is not sent again once its request may have reached the server
    /// ([`crate::client::transport::Call::repeatable`]).
    pub repeatable: bool,
}

/// Query parameters as sent: booleans as lowercase `true`/`false` (the agents service answers 400
/// to Python's `True`), numbers and strings as text, a list as the parameter repeated, `None`
/// left out.
pub fn query_pairs(query: &Map<String, Value>) -> Result<Vec<(String, String)>, Error> {
    let mut pairs = Vec::with_capacity(query.len());
    for (name, value) in query {
        let mut push = |v: &Value| -> Result<(), Error> {
            let text = match v {
                Value::Null => return Ok(()),
                Value::Bool(b) => b.to_string(),
                Value::Number(n) => n.to_string(),
                Value::String(s) => s.clone(),
                Value::Array(_) | Value::Object(_) => {
                    return Err(Error::invalid_argument(name, "takes a string, a number or a boolean"))
                }
            };
            pairs.push((name.clone(), text));
            Ok(())
        };
        match value {
            Value::Array(items) => items.iter().try_for_each(&mut push)?,
            other => push(other)?,
        }
    }
    Ok(pairs)
}

fn build(transport: &Transport, req: &JsonCall) -> Result<Call, Error> {
    if !req.path.starts_with('/') {
        return Err(Error::invalid_argument("path", "must start with '/'"));
    }
    let mut call = Call::new(req.method.clone(), format!("{}{}", req.surface.base(transport), req.path));
    call.query = query_pairs(&req.query)?;
    call.deadline = req.within.and_then(|within| tokio::time::Instant::now().checked_add(within));
    call.repeatable = req.repeatable || safe_to_repeat(&req.method);
    if let Some(body) = &req.body {
        let bytes = serde_json::to_vec(body).map_err(|e| Error::invalid_argument("body", e.to_string()))?;
        call.body = RequestBody::Json(Bytes::from(bytes));
    }
    Ok(call)
}

/// What an answer says it is, when that is not JSON: its Content-Type (an HTML page from a proxy)
/// and any Content-Encoding (a gzip body nobody asked for), which tell more than the parser's
/// "expected value at line 1 column 1".
fn served_as(headers: &reqwest::header::HeaderMap) -> Option<String> {
    let header = |name| headers.get(name).and_then(|v: &reqwest::header::HeaderValue| v.to_str().ok());
    let kind = header(reqwest::header::CONTENT_TYPE).filter(|kind| !kind.to_ascii_lowercase().contains("json"));
    let encoding = header(reqwest::header::CONTENT_ENCODING).filter(|e| !e.eq_ignore_ascii_case("identity"));
    match (kind, encoding) {
        (None, None) => None,
        (Some(kind), None) => Some(kind.to_string()),
        (None, Some(encoding)) => Some(format!("{encoding}-encoded")),
        (Some(kind), Some(encoding)) => Some(format!("{kind}, {encoding}-encoded")),
    }
}

/// Sends `req` and returns the answer's JSON (`null` for an empty body, such as a 204), or the
/// normalised page `{data, has_more, next_cursor}` when `req.page`.
pub async fn call(transport: &Transport, req: &JsonCall) -> Result<Value, Error> {
    let call = build(transport, req)?;
    let surface = req.surface;
    let result = transport
        .execute(&call, |response| async move {
            let url = response.url().to_string();
            let served_as = served_as(response.headers());
            let body = transport.body(response).await?;
            if body.iter().all(u8::is_ascii_whitespace) {
                return Ok(Value::Null);
            }
            decode_json::<Value>(&url, &body).map_err(|err| match (err, served_as) {
                (Error::Decode { url, message, body }, Some(served_as)) => {
                    Error::Decode { url, message: format!("{message} (the answer came as {served_as}, not JSON)"), body }
                }
                (err, _) => err,
            })
        })
        .await;
    let value = result.map_err(|err| explain_agents_404(transport, surface, err))?;
    if req.page {
        if !matches!(value, Value::Object(_) | Value::Array(_)) {
            return Err(Error::unexpected(&call.url, format!("expected a list page, got {}", short(&value)), value.to_string().as_bytes()));
        }
        // Moved, not re-serialised: a page of 1,000 records is not copied.
        let page = match normalize_page(value, req.item_cursor) {
            Ok(page) => page,
            Err(why) => return Err(Error::unexpected(&call.url, why, b"")),
        };
        return Ok(serde_json::json!({
            "data": page.data,
            "has_more": page.has_more,
            "next_cursor": page.next_cursor,
            "prev_cursor": page.prev_cursor,
            // Where the caller sends `next_cursor` back: `offset` for the older list style.
            "next_param": if page.offset_style { Some("offset") } else { None },
        }));
    }
    Ok(value)
}

fn short(value: &Value) -> String {
    super::error::truncate(&value.to_string(), 80)
}

/// A 404 on an agents route whose body is not the platform's error envelope most likely means
/// the deployment mounts agents elsewhere (with or without the version path): say so.
fn explain_agents_404(transport: &Transport, surface: Surface, err: Error) -> Error {
    match err {
        Error::Api(mut api) if surface == Surface::Agents && api.status == 404 => {
            let enveloped = api.json.as_ref().and_then(|j| j.get("errors")).is_some_and(Value::is_array);
            if !enveloped {
                api.hint = Some(format!(
                    "The answer is not the platform's error envelope, so the agents routes may not be mounted \
                     at {}; this deployment may mount them elsewhere: pass agents_base_url= (or set \
                     SENSORIUM_AGENTS_BASE_URL), e.g. the host without /v0.5 for a version-less /agents mount",
                    transport.config.agents_base_url()
                ));
            }
            Error::Api(api)
        }
        other => other,
    }
}

/// Downloads a reference the platform lists (an agent result, a job output) to `dest`,
/// atomically. A relative reference (`/files/download/<name>`) is read under `surface`'s base
/// with the API key; an absolute URL is presigned and gets no Authorization header (the key
/// never goes to a host the client was not configured with).
pub async fn download_ref(
    transport: &Transport,
    surface: Surface,
    reference: &str,
    dest: &Path,
    links: Links,
    progress: Arc<ProgressShare>,
    listed: Option<u64>,
) -> Result<u64, Error> {
    let call = if reference.starts_with("http://") || reference.starts_with("https://") {
        let mut call = Call::get(reference.to_string());
        call.authenticated = false;
        call
    } else if reference.starts_with('/') {
        Call::get(format!("{}{}", surface.base(transport), reference))
    } else {
        return Err(Error::unexpected("", format!("a result reference {:?} is neither a path nor a URL", shown_url(reference)), b""));
    };
    // Errors name the download by its reference without a presigned URL's signature.
    download_call(transport, call, shown_url(reference), dest, links, progress, listed).await
}

/// One file of `download_many`: where it comes from, where it goes, and the size the listing
/// gave (so the byte total is known before the first answer).
#[derive(Debug, Clone)]
pub struct DownloadItem {
    pub reference: String,
    pub dest: PathBuf,
    pub expected: Option<u64>,
}

/// Downloads every item, at most `concurrency` at a time, each atomically as `download_ref`
/// does (a link at an item's destination followed or replaced as `links` says), into one shared
/// byte count. Every item is attempted whatever the others do (a failed
/// file does not cost the finished ones), and each gets its own outcome, in `items`' order, so
/// the caller can fetch fresh references for the ones that failed (expired presigned URLs).
pub async fn download_many(
    transport: &Transport,
    surface: Surface,
    items: Vec<DownloadItem>,
    concurrency: usize,
    links: Links,
    progress: Arc<TransferProgress>,
) -> Result<Vec<Result<u64, Error>>, Error> {
    if concurrency == 0 {
        return Err(Error::invalid_argument("concurrency", "must be at least 1"));
    }
    let shares: Vec<Arc<ProgressShare>> = items
        .iter()
        .map(|item| Arc::new(ProgressShare::new(progress.clone(), item.expected.unwrap_or(0))))
        .collect();
    let outcomes = futures_util::stream::iter(items.into_iter().zip(shares))
        .map(|(item, share)| async move {
            download_ref(transport, surface, &item.reference, &item.dest, links, share, item.expected).await
        })
        // `buffered` keeps the items' order while up to `concurrency` run at once.
        .buffered(concurrency)
        .collect::<Vec<_>>()
        .await;
    Ok(outcomes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn query_values_as_the_platform_reads_them() {
        let q = json!({"include_latest_runs": true, "limit": 5, "key": "osm", "skip": null, "status": ["running", "paused"]});
        let pairs = query_pairs(q.as_object().unwrap()).unwrap();
        let text: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert_eq!(text, ["include_latest_runs=true", "limit=5", "key=osm", "status=running", "status=paused"]);
        assert!(query_pairs(json!({"x": {"a": 1}}).as_object().unwrap()).is_err());
    }
}
