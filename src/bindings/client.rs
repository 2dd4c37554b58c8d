//! `CoreClient`: the Python handle on a configured transport. Each method converts its
//! arguments, hands a future to `runtime::run` (blocking or awaitable, one code path; calls that
//! are one request and its answer go through `runtime::run_unary`, which runs a blocking one on
//! the calling thread), and converts the result. Protocol decisions live in `crate::client`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use serde_json::{Map, Value};

use super::convert::{py_to_value, text_arg, type_name, Json, TextArgError};
use super::embed_many::EmbedBatch;
use super::errors::{guard, to_pyerr, Outcome, Outcomes};
use super::stream::{EventFeed, LensSocket};
use super::results::{EmbeddingsData, NumericEvent, Progress, QueryResult};
use super::runtime;
use crate::client::config::ClientConfig;
use crate::client::files::{self, Links, UploadMethod, UploadOptions};
use crate::client::upload::{self, DirectUploadOptions};
use crate::client::endpoint::{self, JsonCall, Surface};
use crate::client::embed_many;
use crate::client::pagination::ItemEnd;
use crate::client::query;
use crate::client::sse;
use crate::client::websocket::{Credential, Socket};
use crate::client::{Error, Transport};
use crate::wire::models::{family_of_id, ModelFamily};

#[pyclass(module = "sensorium._core", name = "CoreClient", frozen)]
pub struct CoreClient {
    /// The transport and the process it was built in. A forked child must not use the parent's
    /// pooled connections: their tasks ran on the parent's runtime threads, which the child does
    /// not have, so a request would wait forever. The child rebuilds the pool on first use.
    /// Keyed on `runtime::fork_generation()`, an atomic load, rather than on the pid (a system
    /// call per request).
    transport: Mutex<(u64, Transport)>,
}

/// The longest timeout taken: a year. Past it `Duration` arithmetic in the HTTP stack can
/// overflow, and no caller means it (`timeout=None` is "no limit").
const MAX_TIMEOUT_SECONDS: f64 = 365.0 * 24.0 * 3600.0;

fn seconds(value: Option<f64>, arg: &str) -> Result<Option<Duration>, Error> {
    match value {
        None => Ok(None),
        Some(v) if v.is_finite() && v > 0.0 && v <= MAX_TIMEOUT_SECONDS => Ok(Some(Duration::from_secs_f64(v))),
        Some(v) => Err(Error::invalid_argument(
            arg,
            format!("is {v}; it takes a positive number of seconds up to {MAX_TIMEOUT_SECONDS:.0} (a year)"),
        )),
    }
}

fn required_seconds(value: f64, arg: &str) -> Result<Duration, Error> {
    seconds(Some(value), arg)?.ok_or_else(|| Error::invalid_argument(arg, "is required"))
}

fn apply_options(
    config: &mut ClientConfig,
    timeout: Option<f64>,
    connect_timeout: f64,
    read_timeout: f64,
    max_retries: i64,
    default_headers: Option<Vec<(String, String)>>,
) -> Result<(), Error> {
    config.timeouts.total = seconds(timeout, "timeout")?;
    config.timeouts.connect = required_seconds(connect_timeout, "connect_timeout")?;
    config.timeouts.read = required_seconds(read_timeout, "read_timeout")?;
    config.retry.max_retries = u32::try_from(max_retries)
        .map_err(|_| Error::invalid_argument("max_retries", format!("is {max_retries}; it takes 0 or more")))?;
    if let Some(headers) = default_headers {
        if let Some((name, _)) = headers.iter().find(|(n, _)| n.eq_ignore_ascii_case("authorization")) {
            return Err(Error::invalid_argument(
                "default_headers",
                format!("sets {name}, which the client owns; pass the key as api_key"),
            ));
        }
        config.default_headers = headers;
    }
    Ok(())
}

/// A `str` argument, or the exception that names it.
fn text(py: Python<'_>, obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<String> {
    text_arg(obj, arg).map_err(|e| match e {
        TextArgError::Type(message) => PyTypeError::new_err(message),
        TextArgError::Invalid(err) => to_pyerr(py, err),
    })
}

impl CoreClient {
    fn new(transport: Transport) -> Self {
        CoreClient { transport: Mutex::new((runtime::fork_generation(), transport)) }
    }

    fn transport(&self) -> Transport {
        let mut slot = self.transport.lock();
        let generation = runtime::fork_generation();
        if slot.0 != generation {
            match Transport::shared((*slot.1.config).clone(), generation) {
                Ok(fresh) => *slot = (generation, fresh),
                Err(err) => log::warn!("could not rebuild the connection pool after fork: {err}"),
            }
        }
        slot.1.clone()
    }
}

#[pymethods]
impl CoreClient {
    #[new]
    #[pyo3(signature = (api_key, base_url, timeout, connect_timeout, read_timeout, max_retries, default_headers, agents_base_url=None))]
    #[allow(clippy::too_many_arguments)]
    fn py_new(
        py: Python<'_>,
        api_key: Option<String>,
        base_url: Option<String>,
        timeout: Option<f64>,
        connect_timeout: f64,
        read_timeout: f64,
        max_retries: i64,
        default_headers: Option<Vec<(String, String)>>,
        agents_base_url: Option<String>,
    ) -> PyResult<Self> {
        guard("Client()", || {
            let build = || -> Result<Transport, Error> {
                let env = |name: &str| std::env::var(name).ok();
                let mut config = ClientConfig::resolve(api_key, base_url, env)?;
                config.set_agents_base(agents_base_url, env)?;
                apply_options(&mut config, timeout, connect_timeout, read_timeout, max_retries, default_headers)?;
                Transport::shared(config, runtime::fork_generation())
            };
            build().map(CoreClient::new).map_err(|e| to_pyerr(py, e))
        })
    }

    /// A copy with other options that shares this client's connection pool (with another
    /// connect timeout, the pool of this client's copies with that timeout).
    #[pyo3(signature = (timeout, connect_timeout, read_timeout, max_retries, default_headers))]
    fn with_options(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
        connect_timeout: f64,
        read_timeout: f64,
        max_retries: i64,
        default_headers: Option<Vec<(String, String)>>,
    ) -> PyResult<Self> {
        guard("with_options", || {
            let current = self.transport();
            let mut config = (*current.config).clone();
            let result = apply_options(&mut config, timeout, connect_timeout, read_timeout, max_retries, default_headers)
                .and_then(|_| current.with_config(config));
            result.map(CoreClient::new).map_err(|e| to_pyerr(py, e))
        })
    }

    #[getter]
    fn base_url(&self) -> String {
        self.transport().config.base_url()
    }

    #[getter]
    fn agents_base_url(&self) -> String {
        self.transport().config.agents_base_url()
    }

    /// `text` with this client's API key taken out, as the transport takes it out of error
    /// answers: for what Python builds from successful answers that may echo it.
    fn redact(&self, text: &str) -> String {
        self.transport().config.api_key.redact_in(text)
    }

    /// One JSON call to any endpoint (`crate::client::endpoint`): the answer's JSON, or with
    /// `page` a normalised list page `{data, has_more, next_cursor}`. With `within`, the call
    /// (retries included) is over within that many seconds, or raises `WaitTimeoutError` from
    /// its last failure. `repeatable` marks a POST safe to send again after its answer was lost
    /// (GET, PUT, DELETE... are); any other POST is not (`Call::repeatable`).
    /// `renamed` maps places in the body to the keyword arguments they came from, where the two
    /// differ (`as_keyword_argument`). `item_cursor` (`"first"` or `"last"`): the list may say
    /// `has_more` with no `next_cursor`, and the id of the page's item at that end is the cursor.
    #[pyo3(signature = (method, surface, path, query, body, page, asynchronous, within=None, repeatable=false, renamed=None, item_cursor=None))]
    #[allow(clippy::too_many_arguments)]
    fn request<'py>(
        &self,
        py: Python<'py>,
        method: &str,
        surface: &str,
        path: &Bound<'py, PyAny>,
        query: Option<&Bound<'py, PyDict>>,
        body: Option<&Bound<'py, PyAny>>,
        page: bool,
        asynchronous: bool,
        within: Option<f64>,
        repeatable: bool,
        renamed: Option<HashMap<String, String>>,
        item_cursor: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let renamed = renamed.unwrap_or_default();
        guard("request", || {
            let path = text(py, path, "path")?;
            let build = || -> Result<JsonCall, Error> {
                let method = reqwest::Method::from_bytes(method.as_bytes())
                    .map_err(|_| Error::invalid_argument("method", format!("{method:?} is not an HTTP method")))?;
                let query = match query {
                    Some(q) => match py_to_value(q.as_any(), "query")? {
                        Value::Object(map) => map,
                        _ => Map::new(),
                    },
                    None => Map::new(),
                };
                let body = match body {
                    Some(b) if !b.is_none() => Some(py_to_value(b, "body").map_err(|e| as_keyword_argument(e, &renamed))?),
                    _ => None,
                };
                let within = match within {
                    None => None,
                    Some(v) if v.is_finite() && (0.0..=MAX_TIMEOUT_SECONDS).contains(&v) => Some(Duration::from_secs_f64(v)),
                    Some(v) => {
                        return Err(Error::invalid_argument("within", format!("is {v}; it takes 0 or more seconds up to a year")))
                    }
                };
                let item_cursor = match item_cursor {
                    None => None,
                    Some("first") => Some(ItemEnd::First),
                    Some("last") => Some(ItemEnd::Last),
                    Some(other) => {
                        return Err(Error::invalid_argument("item_cursor", format!("is {other:?}, not \"first\" or \"last\"")))
                    }
                };
                Ok(JsonCall { method, surface: Surface::parse(surface)?, path, query, body, page, item_cursor, within, repeatable })
            };
            let req = build().map_err(|e| to_pyerr(py, e))?;
            runtime::run_unary(py, "request", asynchronous, self.transport(), |transport| async move {
                Ok(Outcome(endpoint::call(&transport, &req).await.map(Json)))
            })
        })
    }

    /// Downloads `(reference, path, expected size)` items, `concurrency` at a time, into one
    /// byte count; returns each item's byte count or exception, in order. A symbolic link at an
    /// item's path is written through with `follow_links`, else replaced (for the names a server
    /// chose, which must stay in the caller's folder).
    #[pyo3(signature = (surface, items, concurrency, follow_links, progress, tick, asynchronous))]
    #[allow(clippy::too_many_arguments)]
    fn download_many<'py>(
        &self,
        py: Python<'py>,
        surface: &str,
        items: Vec<(String, PathBuf, Option<u64>)>,
        concurrency: usize,
        follow_links: bool,
        progress: &Bound<'py, Progress>,
        tick: Option<Bound<'py, PyAny>>,
        asynchronous: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        guard("download_many", || {
            let surface = Surface::parse(surface).map_err(|e| to_pyerr(py, e))?;
            let items = items
                .into_iter()
                .map(|(reference, dest, expected)| endpoint::DownloadItem { reference, dest, expected })
                .collect();
            let links = if follow_links { Links::Follow } else { Links::Replace };
            let transport = self.transport();
            let progress = progress.get().inner.clone();
            runtime::run_ticking(py, "download_many", asynchronous, tick.as_ref(), async move {
                let outcomes = endpoint::download_many(&transport, surface, items, concurrency, links, progress).await;
                Ok(Outcome(outcomes.map(Outcomes)))
            })
        })
    }

    /// Opens a lens session's SSE stream at `path` (under the API base): a feed of event
    /// batches read by a task that reconnects with `Last-Event-ID` on its own.
    #[pyo3(signature = (path, last_event_id, heartbeats))]
    fn open_stream(&self, path: &str, last_event_id: Option<String>, heartbeats: bool) -> PyResult<EventFeed> {
        guard("open_stream", || {
            let transport = self.transport();
            let path = path.to_string();
            let options = sse::StreamOptions { last_event_id, heartbeats };
            EventFeed::spawn(move |tx| async move { sse::pump(&transport, &path, options, tx).await })
        })
    }

    /// Opens a lens session's WebSocket at `endpoint` (its `session_endpoint`), the key in the
    /// `Authorization` header or, with `subprotocol`, in `Sec-WebSocket-Protocol`.
    #[pyo3(signature = (endpoint, subprotocol, asynchronous))]
    fn connect_socket<'py>(
        &self,
        py: Python<'py>,
        endpoint: String,
        subprotocol: bool,
        asynchronous: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        guard("connect_socket", || {
            let transport = self.transport();
            let credential = if subprotocol { Credential::Subprotocol } else { Credential::Header };
            runtime::run(py, "connect_socket", asynchronous, async move {
                Ok(Outcome(Socket::connect(&transport, &endpoint, credential).await.map(LensSocket::new)))
            })
        })
    }

    fn __repr__(&self) -> String {
        format!("CoreClient(base_url={:?})", self.base_url())
    }

    fn __reduce__(&self) -> PyResult<()> {
        Err(PyTypeError::new_err(
            "sensorium clients cannot be pickled: they hold an API key. Create a client in the \
             other process instead (sensorium.Client() reads SENSORIUM_API_KEY).",
        ))
    }

    #[pyo3(signature = (model, query, fields, asynchronous))]
    fn query<'py>(
        &self,
        py: Python<'py>,
        model: &Bound<'py, PyAny>,
        query: &Bound<'py, PyAny>,
        fields: &Bound<'py, PyDict>,
        asynchronous: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        guard("query", || {
            let model = text(py, model, "model")?;
            let query = text(py, query, "query")?;
            let body = query_body(&model, &query, fields).map_err(|e| to_pyerr(py, e))?;
            let own_wait = sets_own_wait(fields)?;
            runtime::run_unary(py, "query", asynchronous, self.transport(), |transport| async move {
                let result = query::run(&transport, body, own_wait)
                    .await
                    .map(|(parsed, texts, raw)| QueryResult::new(parsed, texts, raw));
                Ok(Outcome(result))
            })
        })
    }

    #[pyo3(signature = (model, data, normalize_input, fields, asynchronous))]
    fn embed<'py>(
        &self,
        py: Python<'py>,
        model: &Bound<'py, PyAny>,
        data: &Bound<'py, PyAny>,
        normalize_input: bool,
        fields: &Bound<'py, PyDict>,
        asynchronous: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        guard("embed", || {
            let model = text(py, model, "model")?;
            let build = || -> Result<(Bytes, usize), Error> {
                let mut map = fields_map(fields)?;
                if normalize_input {
                    map.insert("normalize_input".into(), Value::Bool(true));
                }
                // The event is written straight into the body (no second copy of 160 kB for an
                // (8, 1024) float64 window).
                let template = query::BodyTemplate::with_fields(&model, map)?;
                super::numeric::request_body(data, "data", &template)
            };
            let (body, channels) = build().map_err(|e| to_pyerr(py, e))?;
            let own_wait = sets_own_wait(fields)?;
            runtime::run_unary(py, "embed", asynchronous, self.transport(), |transport| async move {
                let result = query::run_embeddings(&transport, body, channels, own_wait).await.map(
                    |(matrix, warnings, query_id, raw)| EmbeddingsData { matrix, warnings, query_id, raw },
                );
                Ok(Outcome(result))
            })
        })
    }

    /// Starts an `embed_many` batch; Python feeds it windows (`EmbedBatch.push`).
    #[pyo3(signature = (model, normalize_input, per_channel, concurrency))]
    fn embed_many(
        &self,
        py: Python<'_>,
        model: &Bound<'_, PyAny>,
        normalize_input: Option<bool>,
        per_channel: bool,
        concurrency: Option<i64>,
    ) -> PyResult<EmbedBatch> {
        guard("embed_many", || {
            let model = text(py, model, "model")?;
            let build = || -> Result<EmbedBatch, Error> {
                let concurrency = match concurrency {
                    None => embed_many::DEFAULT_CONCURRENCY,
                    Some(n) if (1..=embed_many::MAX_CONCURRENCY as i64).contains(&n) => n as usize,
                    Some(n) => {
                        return Err(Error::invalid_argument(
                            "concurrency",
                            format!("is {n}; it takes 1 to {} requests in flight", embed_many::MAX_CONCURRENCY),
                        ))
                    }
                };
                let template = query::BodyTemplate::new(&model, normalize_input)?;
                // A prefix that does not name an encoder family may hide a reasoning model: the
                // batch hears its first answer before sending the rest.
                let probe_first = family_of_id(&model) != Some(ModelFamily::Encoder);
                let batch = embed_many::Batch::new(self.transport(), concurrency, probe_first);
                Ok(EmbedBatch::new(batch, template, per_channel))
            };
            build().map_err(|e| to_pyerr(py, e))
        })
    }

    /// Uploads by the method `method` picks ("auto", "simple", "direct"). `progress` is updated
    /// as bytes move; `tick` (blocking calls only) is called about every 200 ms meanwhile.
    #[pyo3(signature = (path, content_type, method, resume, concurrency, direct_threshold, progress, tick, asynchronous))]
    #[allow(clippy::too_many_arguments)]
    fn upload_file<'py>(
        &self,
        py: Python<'py>,
        path: PathBuf,
        content_type: Option<String>,
        method: &str,
        resume: bool,
        concurrency: Option<i64>,
        direct_threshold: Option<i64>,
        progress: &Bound<'py, Progress>,
        tick: Option<Bound<'py, PyAny>>,
        asynchronous: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        guard("files.upload", || {
            let build = || -> Result<UploadOptions, Error> {
                Ok(UploadOptions {
                    method: UploadMethod::parse(method)?,
                    content_type: content_type.clone(),
                    direct_threshold: match direct_threshold {
                        None => files::DEFAULT_DIRECT_THRESHOLD,
                        Some(n) => u64::try_from(n).map_err(|_| {
                            Error::invalid_argument("direct_threshold", format!("is {n}; it takes a size in bytes (0 or more)"))
                        })?,
                    },
                    direct: DirectUploadOptions {
                        resume,
                        concurrency: match concurrency {
                            None => upload::DEFAULT_CONCURRENCY,
                            Some(n) if (1..=256).contains(&n) => n as usize,
                            Some(n) => {
                                return Err(Error::invalid_argument(
                                    "concurrency",
                                    format!("is {n}; it takes 1 to 256 parts in flight"),
                                ))
                            }
                        },
                        content_type,
                    },
                })
            };
            let opts = build().map_err(|e| to_pyerr(py, e))?;
            let transport = self.transport();
            let progress = progress.get().inner.clone();
            runtime::run_ticking(py, "files.upload", asynchronous, tick.as_ref(), async move {
                Ok(Outcome(files::upload_file(&transport, &path, &opts, progress).await.map(Json)))
            })
        })
    }

    #[pyo3(signature = (name, data, content_type, asynchronous))]
    fn upload_base64<'py>(
        &self,
        py: Python<'py>,
        name: &Bound<'py, PyAny>,
        data: Vec<u8>,
        content_type: Option<String>,
        asynchronous: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        guard("files.upload_base64", || {
            let name = text(py, name, "name")?;
            let transport = self.transport();
            runtime::run(py, "files.upload_base64", asynchronous, async move {
                let result = files::upload_base64(&transport, &name, &data, content_type.as_deref()).await;
                Ok(Outcome(result.and_then(to_json)))
            })
        })
    }

    #[pyo3(signature = (file_id, path, progress, tick, asynchronous))]
    fn download_file<'py>(
        &self,
        py: Python<'py>,
        file_id: &Bound<'py, PyAny>,
        path: PathBuf,
        progress: &Bound<'py, Progress>,
        tick: Option<Bound<'py, PyAny>>,
        asynchronous: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        guard("files.download", || {
            let file_id = text(py, file_id, "file_id")?;
            let transport = self.transport();
            let progress = progress.get().inner.clone();
            runtime::run_ticking(py, "files.download", asynchronous, tick.as_ref(), async move {
                Ok(Outcome(files::download(&transport, &file_id, &path, progress).await))
            })
        })
    }

}

fn to_json<T: serde::Serialize>(value: T) -> Result<Json, Error> {
    serde_json::to_value(value).map(Json).map_err(|e| Error::Decode {
        url: String::new(),
        message: e.to_string(),
        body: String::new(),
    })
}

fn fields_map(fields: &Bound<'_, PyDict>) -> Result<Map<String, Value>, Error> {
    let mut map = Map::new();
    for (k, v) in fields.iter() {
        let name: String = k.extract().map_err(|_| Error::invalid_argument("fields", "keys must be strings"))?;
        if v.is_none() {
            continue; // not given: the spec's default applies server-side
        }
        let value = py_to_value(&v, &name)?;
        map.insert(name, value);
    }
    Ok(map)
}

/// The query body: fields checked against the spec's table, events checked one by one
/// (numeric events arrive pre-serialised).
fn query_body(model: &str, query: &str, fields: &Bound<'_, PyDict>) -> Result<Bytes, Error> {
    let events_obj = fields.get_item("events").ok().flatten();
    let rest = fields.copy().map_err(|e| Error::invalid_argument("fields", e.to_string()))?;
    let _ = rest.del_item("events");
    let map = fields_map(&rest)?;
    let events = match events_obj {
        Some(obj) if !obj.is_none() => Some(events_json(&obj)?),
        _ => None,
    };
    query::build_request(model, query, map, events)
}

fn events_json(obj: &Bound<'_, PyAny>) -> Result<Vec<Bytes>, Error> {
    // One event given alone iterates as its keys (or characters): say so rather than blame them.
    if obj.is_instance_of::<PyDict>() || obj.cast::<NumericEvent>().is_ok() || isinstance_str(obj) {
        return Err(Error::invalid_argument("events", format!("must be a list of events, got one {}; wrap it in a list", type_name(obj))));
    }
    let list = obj
        .cast::<PyList>()
        .map(|l| l.clone().into_any())
        .or_else(|_| obj.call_method0("__iter__").map(|_| obj.clone()))
        .map_err(|_| Error::invalid_argument("events", format!("must be a list of events, got {}", type_name(obj))))?;
    let mut out = Vec::new();
    let iter = list.try_iter().map_err(|_| Error::invalid_argument("events", "must be a list of events"))?;
    for (i, item) in iter.enumerate() {
        let item = item.map_err(|e| Error::invalid_argument("events", e.to_string()))?;
        if let Ok(numeric) = item.cast::<NumericEvent>() {
            out.push(numeric.get().json.clone()); // written by us; spliced as is
            continue;
        }
        if isinstance_str(&item) {
            return Err(Error::invalid_argument(
                "events",
                format!("events[{i}] is a string; wrap text with sensorium.events.text(...)"),
            ));
        }
        let value = py_to_value(&item, &format!("events[{i}]"))?;
        out.push(query::check_event(i, &value)?);
    }
    Ok(out)
}

fn isinstance_str(obj: &Bound<'_, PyAny>) -> bool {
    obj.is_instance_of::<pyo3::types::PyString>()
}

/// A bad value inside a request body, named as the caller gave it. Most of a body's members are
/// the keyword arguments of the method that built it (`inputs=`), so the argument is the member
/// and the message names the place below it (`inputs: inputs[0]["file_id"] is a string that is
/// not valid UTF-8`). `renamed` holds the places that came from a keyword of another name
/// (`connectors["sink"]` from `sink=`): the longest that holds the value names it instead
/// (`sink: sink["extra"] is a set`); the place `""` is the whole body, for a body that is one
/// keyword's dict sent as it is (`data: data["x"] is a set`).
fn as_keyword_argument(err: Error, renamed: &HashMap<String, String>) -> Error {
    let Error::InvalidArgument { argument, message } = err else {
        return err;
    };
    let Some(place) = argument.strip_prefix("body[\"") else {
        return Error::InvalidArgument { argument, message };
    };
    let Some((member, rest)) = place.split_once("\"]") else {
        return Error::InvalidArgument { argument, message };
    };
    let place = format!("{member}{rest}");
    let keyword = renamed
        .iter()
        .filter(|(prefix, _)| {
            prefix.is_empty()
                || place.strip_prefix(prefix.as_str()).is_some_and(|after| after.is_empty() || after.starts_with('['))
        })
        .max_by_key(|(prefix, _)| prefix.len());
    let (argument, place) = match keyword {
        Some((prefix, keyword)) if prefix.is_empty() => (keyword.clone(), format!("{keyword}[\"{member}\"]{rest}")),
        Some((prefix, keyword)) => (keyword.clone(), format!("{keyword}{}", &place[prefix.len()..])),
        None => (member.to_string(), place),
    };
    let message = if place == argument { message } else { format!("{place} {message}") };
    Error::InvalidArgument { argument, message }
}

/// Whether a query's fields set its own wait (`max_wait_time_sec`), whose expiry (504) is then
/// not retried (see `Call::retry_gateway_timeout`).
fn sets_own_wait(fields: &Bound<'_, PyDict>) -> PyResult<bool> {
    Ok(fields.get_item("max_wait_time_sec")?.is_some_and(|v| !v.is_none()))
}
