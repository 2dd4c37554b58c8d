//! Sends requests: authentication, timeouts, the retry loop and error-body parsing. Every
//! surface goes through `Transport::execute`.

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use reqwest::{Method, Response};
use serde::de::DeserializeOwned;

use super::certificate;
use super::config::ClientConfig;
use super::error::{seconds, ApiError, Error};
use super::fork;
use super::lanes::{Lane, Lanes};
use super::pacing::Pacer;
use super::proxy::Proxies;
use super::retry::parse_retry_after;

/// Sent with every attempt so servers (and the emulator's request log) can tell retries apart.
pub const RETRY_COUNT_HEADER: &str = "x-sensorium-retry-count";
pub const USER_AGENT: &str = concat!("sensorium-python/", env!("CARGO_PKG_VERSION"));

/// A request body that can be produced again for every attempt: a body streamed from a file is
/// re-read from its start on retry, never buffered whole.
#[derive(Debug, Clone)]
pub enum RequestBody {
    Empty,
    Json(Bytes),
    /// A multipart form with one file field, streamed from disk.
    MultipartFile { field: String, path: PathBuf, file_name: String, mime: String, len: u64, progress: Option<Arc<AtomicU64>> },
    /// A multipart form with one field whose content is in memory.
    MultipartBytes { field: String, file_name: String, mime: String, data: Bytes },
    /// Raw bytes `offset..offset+len` of a file, streamed (a part of a direct upload). Bytes
    /// sent are added to each counter in `progress`.
    FileRange { path: PathBuf, offset: u64, len: u64, progress: Vec<Arc<AtomicU64>> },
}

/// One logical call; `execute` may send it several times.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: Method,
    /// Absolute URL.
    pub url: String,
    pub query: Vec<(String, String)>,
    pub body: RequestBody,
    /// Bodies that move many bytes are bounded by the stall timeout instead of the
    /// per-attempt deadline, so a long transfer is not cut while it makes progress; the
    /// `timeout` option bounds only the wait for the answer once the request body is sent.
    pub streaming: bool,
    /// Presigned storage URLs carry their own signature and must not get the API key.
    pub authenticated: bool,
    /// Headers of this call only (`Accept`, `Last-Event-ID` of a stream).
    pub headers: Vec<(&'static str, String)>,
    /// `url` already parsed, on the hot paths ([`Transport::query_call`]); otherwise reqwest
    /// parses `url` on every attempt (about 1 µs of an `embed_many` request's 60).
    pub parsed_url: Option<reqwest::Url>,
    /// When the whole call, retries and their pauses included, must be over (`wait(timeout=)`
    /// polls): each attempt is cut at it, and a retry that would start past it is not made
    /// ([`Error::DeadlinePassed`]). Each attempt still gets [`MIN_ATTEMPT`], so a call whose
    /// deadline has already come still looks once.
    pub deadline: Option<tokio::time::Instant>,
    /// Whether sending this call again is harmless. The platform has no idempotency keys, so a
    /// call that is not (a POST that creates something) is not sent again after a failure that
    /// may have reached the server (a connection error once the request may have been written, a
    /// timeout, a body cut off): that failure comes back as [`Error::NotRepeated`]. Failures that
    /// prove nothing was done are retried for every call: a connect-phase error (refused, DNS,
    /// TLS), and the statuses of the retry rule (the server answered). `Call::new` sets it from
    /// the method ([`safe_to_repeat`]), so a new POST path is safe by default; the dedicated POST
    /// paths that are harmless to repeat mark themselves (`/query` and embeddings change nothing;
    /// uploads settle a repeat's 409 themselves), as do the per-endpoint calls their caller
    /// marks ([`crate::client::endpoint::JsonCall`]).
    pub repeatable: bool,
    /// Whether a 504 is retried, as the retry rule has it. A query that sets its own wait
    /// (`max_wait_time_sec`) gets a 504 when that wait expires: sent again, it would run the
    /// model again and take the caller's deadline two or three times over, so its 504 is final.
    pub retry_gateway_timeout: bool,
}

/// Whether HTTP says a request of `method` may be sent again: GET, HEAD, PUT, DELETE, OPTIONS
/// and TRACE are idempotent; POST (and PATCH) are not unless their endpoint says so.
pub fn safe_to_repeat(method: &Method) -> bool {
    [Method::GET, Method::HEAD, Method::PUT, Method::DELETE, Method::OPTIONS, Method::TRACE].contains(method)
}

/// A failed attempt, and whether it failed before any of the request could reach the server
/// (an argument or file refused before sending, or reqwest's connect phase: refused, DNS, TLS).
struct Failed {
    error: Error,
    unsent: bool,
}

impl From<Error> for Failed {
    /// The failures of building a request, before anything is sent.
    fn from(error: Error) -> Self {
        Failed { error, unsent: true }
    }
}

/// A paced request refused for its turn (see `Transport::execute_paced`) is retried without
/// spending `max_retries`, up to this many times `max_retries + 1` attempts in all.
const PACED_ATTEMPTS: u32 = 3;

/// The least time an attempt gets under a call's deadline.
pub const MIN_ATTEMPT: Duration = Duration::from_secs(1);

impl Call {
    pub fn new(method: Method, url: String) -> Self {
        Call {
            repeatable: safe_to_repeat(&method),
            method,
            url,
            query: Vec::new(),
            body: RequestBody::Empty,
            streaming: false,
            authenticated: true,
            headers: Vec::new(),
            parsed_url: None,
            deadline: None,
            retry_gateway_timeout: true,
        }
    }

    pub fn get(url: String) -> Self {
        Call::new(Method::GET, url)
    }

    pub fn post_json(url: String, body: Bytes) -> Self {
        Call { body: RequestBody::Json(body), ..Call::new(Method::POST, url) }
    }

    pub fn query_param(mut self, name: &str, value: impl Into<String>) -> Self {
        self.query.push((name.to_string(), value.into()));
        self
    }
}

#[derive(Clone)]
pub struct Transport {
    http: reqwest::Client,
    pub config: Arc<ClientConfig>,
    /// Worked out once, when the client is made, not per request: `/query` parsed (every query,
    /// `embed` and `embed_many` request goes there), the `Authorization` value (marked sensitive,
    /// so it is never logged or shown) and `default_headers` as sent.
    query_url: reqwest::Url,
    authorization: HeaderValue,
    default_headers: HeaderMap,
    /// What `http` came from, with the lanes of blocking calls; kept alive by every transport
    /// that uses it.
    pool: Arc<Pool>,
    /// The pools of the client this transport belongs to and of its copies (`with_config`).
    family: Family,
    /// The server's rate as this client's `embed_many` batches learnt it, shared by the copies of
    /// the transport so concurrent batches pace together.
    pacer: Arc<Pacer>,
}

/// The pools a client and its copies use, by connect timeout, oldest first, the client's own
/// first of all. A copy with another connect timeout finds here the pool of the copies made
/// before it, which this keeps for as long as the client or any copy lives: without it, a copy
/// made per call (`client.with_options(connect_timeout=7).query(...)`) took a new pool and a new
/// connection per call, its pool going with it. At most `FAMILY_POOLS`, the oldest dropped.
type Family = Arc<parking_lot::Mutex<Vec<(Duration, Arc<Pool>)>>>;

/// Connect timeouts a client and its copies keep pools for: a few suffice (the client's own and
/// one or two of its copies'), and each idle pool holds connections open.
const FAMILY_POOLS: usize = 4;

/// The connections of one connect timeout: an HTTP client on the shared runtime, and the lanes
/// blocking calls run on (`crate::client::lanes`). Transports share one while any of them
/// lives; it goes with the last, closing its connections.
pub struct Pool {
    /// `None` only once dropped in a forked child (see `Drop`).
    http: Option<reqwest::Client>,
    lanes: Lanes,
    generation: u64,
    /// The proxy variables as they were when the pool was built, which its connections follow.
    proxies: Proxies,
}

impl Pool {
    fn new(connect_timeout: Duration, generation: u64, proxies: Proxies) -> Result<Pool, Error> {
        let http = build_http_client(connect_timeout, &proxies)?;
        let lanes = Lanes::new(connect_timeout, proxies.clone(), generation);
        Ok(Pool { http: Some(http), lanes, generation, proxies })
    }
}

/// The variables a pool reads when it is built: its trusted CAs (rustls reads `SSL_CERT_FILE`
/// and `SSL_CERT_DIR` with the system's) and its proxies ([`Proxies`]). A client made after one
/// changed gets a pool of its own, which reads them anew, rather than that of the clients made
/// before: a notebook that sets `SSL_CERT_FILE` after a first failure is then answered by the next
/// client it makes, not only after every earlier one is gone.
/// The pool's proxies are read from the same snapshot that keys it, so the two always agree.
#[derive(Clone, PartialEq, Eq)]
struct PoolEnvironment(Vec<(&'static str, Option<std::ffi::OsString>)>);

impl PoolEnvironment {
    /// The trust variables rustls reads, besides the proxy ones.
    const TLS_VARIABLES: [&'static str; 2] = ["SSL_CERT_FILE", "SSL_CERT_DIR"];

    fn now() -> Self {
        let names = Self::TLS_VARIABLES.iter().chain(super::proxy::VARIABLES.iter());
        PoolEnvironment(names.map(|name| (*name, std::env::var_os(name))).collect())
    }

    /// The proxy rules of this snapshot.
    fn proxies(&self) -> Proxies {
        Proxies::from_variables(|name| {
            let (_, value) = self.0.iter().find(|(known, _)| *known == name)?;
            value.as_ref()?.to_str().map(str::to_string)
        })
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        if self.generation != fork::generation() {
            // Inherited across fork: the connections' tasks belong to the parent's runtime,
            // whose threads (and perhaps the locks they held) did not survive the fork. Their
            // sockets stay open rather than risk waking them. The lanes see to themselves.
            std::mem::forget(self.http.take());
        }
    }
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport").field("base_url", &self.config.base_url()).finish()
    }
}

impl Transport {
    /// A transport with a pool of its own.
    pub fn new(config: ClientConfig) -> Result<Self, Error> {
        Transport::with_proxies(config, Proxies::from_env())
    }

    /// A transport with a pool of its own that routes by `proxies`.
    pub fn with_proxies(config: ClientConfig, proxies: Proxies) -> Result<Self, Error> {
        let pool = Arc::new(Pool::new(config.timeouts.connect, fork::generation(), proxies)?);
        Transport::founding(pool, config)
    }

    /// A transport on the pool of the process's live transports with the same connect timeout,
    /// or on a new one. Building a pool costs about 2 ms (reqwest reads the system's CA
    /// certificates) and opens its own connections: a script that makes a new `Client` per
    /// batch (or a notebook that runs `client = Client()` again) paid both every time, where now
    /// the new one finds the connections of one still alive warm. Sharing is safe because
    /// nothing in the pool belongs to a caller (the key goes with each request). When the last
    /// transport on a pool goes, so do its connections. `generation` is the process's fork
    /// generation: after a fork the parent's pools are left alone and new ones are built.
    pub fn shared(config: ClientConfig, generation: u64) -> Result<Self, Error> {
        let pool = Transport::shared_pool(config.timeouts.connect, generation)?;
        Transport::founding(pool, config)
    }

    /// The first transport of a client, on `pool`.
    fn founding(pool: Arc<Pool>, config: ClientConfig) -> Result<Self, Error> {
        let family = Arc::new(parking_lot::Mutex::new(vec![(config.timeouts.connect, pool.clone())]));
        Transport::around(pool, config, family)
    }

    /// The pool of the process's live transports with connect timeout `connect`, built under
    /// the environment as it is now ([`PoolEnvironment`]), or a new one.
    fn shared_pool(connect: Duration, generation: u64) -> Result<Arc<Pool>, Error> {
        /// The fork generation they belong to, and the pool per connect timeout and environment.
        type Pools = Vec<(Duration, PoolEnvironment, Weak<Pool>)>;
        static SHARED: parking_lot::Mutex<Option<(u64, Pools)>> = parking_lot::Mutex::new(None);
        /// This generation's pools, the ones gone dropped.
        fn pools(slot: &mut Option<(u64, Pools)>, generation: u64) -> &mut Pools {
            if slot.as_ref().is_some_and(|(owner, _)| *owner != generation) {
                slot.take();
            }
            let (_, pools) = slot.get_or_insert_with(|| (generation, Vec::new()));
            pools.retain(|(_, _, pool)| pool.strong_count() > 0);
            pools
        }
        let environment = PoolEnvironment::now();
        let live = |pools: &Pools| {
            pools.iter().find_map(|(timeout, built_in, pool)| (*timeout == connect && *built_in == environment).then(|| pool.upgrade()).flatten())
        };
        let found = live(pools(&mut SHARED.lock(), generation));
        let pool = match found {
            Some(pool) => pool,
            None => {
                // Built without holding SHARED: building logs (reqwest, rustls), a log line runs
                // Python code, which needs the GIL, and a thread holding the GIL may be waiting
                // for SHARED; holding it here deadlocked two threads creating clients at once.
                // Of two pools built at once, the one registered first is used.
                let built = Arc::new(Pool::new(connect, generation, environment.proxies())?);
                let mut slot = SHARED.lock();
                let pools = pools(&mut slot, generation);
                match live(pools) {
                    Some(pool) => pool,
                    None => {
                        pools.push((connect, environment.clone(), Arc::downgrade(&built)));
                        built
                    }
                }
            }
        };
        Ok(pool)
    }

    fn around(pool: Arc<Pool>, config: ClientConfig, family: Family) -> Result<Self, Error> {
        let query_url = config.url("/query");
        let query_url = reqwest::Url::parse(&query_url)
            .map_err(|e| Error::invalid_argument("base_url", format!("cannot build a request to {query_url}: {e}")))?;
        // The key and the headers are checked here, when the client is made, rather than at its
        // first call, where a typo in a header would surface far from where it was written.
        if let Some(why) = config.api_key.unusable() {
            return Err(Error::invalid_argument("api_key", why));
        }
        let mut authorization = HeaderValue::from_str(&format!("Bearer {}", config.api_key.expose()))
            .map_err(|_| Error::invalid_argument("api_key", "cannot be sent in an HTTP header"))?;
        authorization.set_sensitive(true);
        let default_headers = config
            .default_headers
            .iter()
            .map(|(name, value)| default_header(name, value))
            .collect::<Result<HeaderMap, Error>>()?;
        let http = pool.http.clone().ok_or_else(|| Error::Config("the connection pool is gone".into()))?;
        Ok(Transport {
            http,
            config: Arc::new(config),
            query_url,
            authorization,
            default_headers,
            pool,
            family,
            pacer: Arc::default(),
        })
    }

    /// The pacing shared by this client's concurrent batches (`execute_paced`).
    pub fn pacer(&self) -> &Pacer {
        &self.pacer
    }

    /// The proxy rules this transport's connections follow.
    pub fn proxies(&self) -> &Proxies {
        &self.pool.proxies
    }

    /// The lanes blocking calls of this transport run on (see `crate::client::lanes`).
    pub fn lanes(&self) -> &Lanes {
        &self.pool.lanes
    }

    /// This transport with its requests sent through `lane`'s HTTP client. Use it only inside
    /// `lane.block_on`: its connections live on the lane's runtime.
    pub fn on_lane(&self, lane: &Lane) -> Transport {
        Transport { http: lane.http().clone(), ..self.clone() }
    }

    /// A POST of `body` to `/query`, its URL parsed once for the transport's life. `own_wait`:
    /// the body sets `max_wait_time_sec`, so a 504 is that wait's end and is not retried.
    pub fn query_call(&self, body: Bytes, own_wait: bool) -> Call {
        // A repeated query changes nothing on the platform: safe to send again after a lost answer.
        Call {
            parsed_url: Some(self.query_url.clone()),
            repeatable: true,
            retry_gateway_timeout: !own_wait,
            ..Call::post_json(self.query_url.as_str().to_owned(), body)
        }
    }

    /// A copy with another configuration. It shares the connection pool, unless the connect
    /// timeout changed (it is a property of the pool); then it shares the pool of this client's
    /// copies with that timeout (`Family`), or of the process's live clients with it (`shared`).
    pub fn with_config(&self, config: ClientConfig) -> Result<Self, Error> {
        let connect = config.timeouts.connect;
        if connect == self.config.timeouts.connect {
            return Transport::around(self.pool.clone(), config, self.family.clone());
        }
        let generation = fork::generation();
        let known = |family: &[(Duration, Arc<Pool>)]| {
            family.iter().find(|(timeout, pool)| *timeout == connect && pool.generation == generation).map(|(_, pool)| pool.clone())
        };
        let found = known(&self.family.lock());
        let pool = match found {
            Some(pool) => pool,
            None => {
                // Looked up (or built, which logs) without holding the family's lock; see `shared`.
                let pool = Transport::shared_pool(connect, generation)?;
                let mut family = self.family.lock();
                match known(&family) {
                    Some(pool) => pool,
                    None => {
                        // Dropped once the lock is let go: the last reference to a pool closes its
                        // connections, which may log.
                        let _evicted = (family.len() >= FAMILY_POOLS).then(|| family.remove(0));
                        family.push((connect, pool.clone()));
                        drop(family);
                        pool
                    }
                }
            }
        };
        Transport::around(pool, config, self.family.clone())
    }

    /// Sends `call` under the retry rule and hands each 2xx response to `read`. A failure of
    /// `read` that is retryable (a body cut off mid-way) is retried like a failed send.
    pub async fn execute<T, F, Fut>(&self, call: &Call, read: F) -> Result<T, Error>
    where
        F: Fn(Response) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        self.execute_paced(call, read, None).await
    }

    /// `execute`, with every attempt (first ones and retries) waiting for its slot in `pacer`,
    /// which learns from the 429s: the requests of one batch share the server's rate instead of
    /// each retrying on its own.
    pub async fn execute_paced<T, F, Fut>(&self, call: &Call, read: F, pacer: Option<&Pacer>) -> Result<T, Error>
    where
        F: Fn(Response) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let policy = &self.config.retry;
        let mut attempt: u32 = 0;
        // Retries that spent the budget: all but the refusals for a paced request's turn.
        let mut retries: u32 = 0;
        // The pacer's successes when the previous attempt was sent (see `for_its_turn`).
        let mut successes_before: Option<u64> = None;
        let mut lost_response = false;
        loop {
            attempt += 1;
            let ticket = match pacer {
                // A retry with none after it waits for a better moment (see `Pacer::admit`). Not a
                // first attempt: under `max_retries=0` every request's one attempt is its last,
                // and all would wait the longest for an answer none of them was sending.
                Some(pacer) => Some(pacer.admit(attempt, attempt > 1 && retries >= policy.max_retries).await),
                None => None,
            };
            let successes_at_send = pacer.map_or(0, Pacer::successes);
            log::debug!("{} {} attempt {}", call.method, shown(call), attempt);
            let (outcome, sent) = match self.attempt(call, attempt).await {
                Ok(response) => (read(response).await, true),
                Err(Failed { error: Error::Api(mut api), .. }) => {
                    api.attempt = attempt;
                    api.after_lost_response = lost_response;
                    (Err(Error::Api(api)), true)
                }
                Err(Failed { error, unsent }) => (Err(error), !unsent),
            };
            // Before anything logs or returns it: the server may have echoed the key.
            let outcome = outcome.map_err(|err| err.redacted(&self.config.api_key));
            // No answer to a request that may have reached the server: it may have been acted on.
            // (A connection never made, `Error::Unreachable`, comes unsent.)
            let lost = sent && matches!(outcome, Err(Error::Connection { .. } | Error::Timeout { .. }));
            lost_response |= lost;
            if let (Some(pacer), Some(ticket)) = (pacer, ticket) {
                match &outcome {
                    Ok(_) => pacer.succeeded(ticket),
                    Err(Error::Api(api)) if api.status == 429 => {
                        pacer.rate_limited(ticket, std::time::Instant::now(), api.retry_after)
                    }
                    Err(_) => {}
                }
            }
            // A 429 while the server goes on admitting the batch's other requests refused this one
            // for its turn, not for anything wrong with it or the server: several clients share
            // one organization's limit, each learning only its share, and any request may meet
            // the moment another drains the bucket. Such a refusal is retried without spending
            // `max_retries` (which then bounds refusals while nothing is admitted, as it bounds
            // every other failure), up to `PACED_ATTEMPTS` times the budget in all. A request
            // refused three times in a run of thousands once failed its window, and two clients
            // sharing a limit lost windows on most runs.
            let for_its_turn = pacer.is_some_and(|pacer| {
                let since = successes_before.unwrap_or(successes_at_send);
                matches!(&outcome, Err(Error::Api(api)) if api.status == 429)
                    && policy.max_retries > 0
                    && attempt < PACED_ATTEMPTS * (policy.max_retries + 1)
                    && pacer.successes() > since
            });
            successes_before = Some(successes_at_send);
            match outcome {
                Ok(value) => return Ok(value),
                Err(err) if lost && !call.repeatable => {
                    log::debug!(
                        "{} {} attempt {} failed ({}); the server may have acted on it and the call is not safe to \
                         repeat, so it is not retried",
                        call.method,
                        shown(call),
                        attempt,
                        err
                    );
                    return Err(Error::NotRepeated { last: Box::new(err), method: call.method.to_string() });
                }
                Err(err)
                    if err.is_retryable()
                        && (call.retry_gateway_timeout || !matches!(&err, Error::Api(api) if api.status == 504))
                        && (for_its_turn || retries < policy.max_retries) =>
                {
                    retries += u32::from(!for_its_turn);
                    let delay = match (pacer, err.retry_after()) {
                        // A paced batch is spaced by its pacer, from what the server admits: the
                        // wait asked for is enough, and its other requests go on meanwhile.
                        (Some(_), Some(wait)) => wait.min(policy.max_retry_after),
                        (_, retry_after) => policy.delay(attempt, retry_after),
                    };
                    if call.deadline.is_some_and(|deadline| tokio::time::Instant::now() + delay >= deadline) {
                        log::debug!(
                            "{} {} attempt {} failed ({}); the next would start past the call's deadline",
                            call.method,
                            shown(call),
                            attempt,
                            err
                        );
                        return Err(Error::DeadlinePassed { last: Box::new(err) });
                    }
                    if let Some(limit) = self.attempt_deadline(call) {
                        if err.retry_after().is_some_and(|wait| wait > limit) {
                            // `timeout` bounds one attempt; a caller who allows 2 s per attempt
                            // does not expect to sleep a minute between them. The error carries
                            // `retry_after`, so the caller can come back when the server says.
                            log::debug!(
                                "{} {} attempt {}: the server asks to wait longer than the {:.1}s timeout; giving up",
                                call.method,
                                shown(call),
                                attempt,
                                limit.as_secs_f64()
                            );
                            return Err(err);
                        }
                    }
                    log::debug!(
                        "{} {} attempt {} failed ({}); retrying in {:.3}s",
                        call.method,
                        shown(call),
                        attempt,
                        err,
                        delay.as_secs_f64()
                    );
                    tokio::time::sleep(delay).await;
                }
                Err(err) => {
                    log::debug!("{} {} attempt {} failed: {}", call.method, shown(call), attempt, err);
                    return Err(err);
                }
            }
        }
    }

    /// The deadline of one attempt of `call`: the `timeout` option, except for transfers, which
    /// are bounded by the stall timeout instead (and by `timeout` only while they wait for the
    /// answer, see `send_once`); and no later than the call's own deadline (but at least
    /// [`MIN_ATTEMPT`]).
    fn attempt_deadline(&self, call: &Call) -> Option<Duration> {
        let option = if call.streaming { None } else { self.config.timeouts.total };
        let Some(deadline) = call.deadline else { return option };
        let left = deadline.saturating_duration_since(tokio::time::Instant::now()).max(MIN_ATTEMPT);
        Some(option.map_or(left, |option| option.min(left)))
    }

    /// Reads a whole 2xx body under the stall timeout, with the key taken out of it should the
    /// server have echoed it (error bodies are redacted in [`Transport::execute_paced`]).
    pub async fn body(&self, response: Response) -> Result<Bytes, Error> {
        Ok(self.config.api_key.redact_bytes(read_body(response, self.config.timeouts.read).await?))
    }

    /// `execute` with the body parsed as JSON into `T`.
    pub async fn json<T: DeserializeOwned>(&self, call: &Call) -> Result<T, Error> {
        self.execute(call, |response| async move {
            let url = response.url().to_string();
            let body = self.body(response).await?;
            decode_json(&url, &body)
        })
        .await
    }

    /// One attempt, no retries: for callers that run their own attempt loop (upload parts,
    /// which refresh expired URLs between attempts).
    pub async fn send_once(&self, call: &Call, attempt: u32) -> Result<Response, Error> {
        self.attempt(call, attempt).await.map_err(|failed| failed.error)
    }

    /// `send_once`, saying whether a failure came before anything could reach the server.
    async fn attempt(&self, call: &Call, attempt: u32) -> Result<Response, Failed> {
        let cfg = &self.config;
        let activity = Activity::new();
        // Set when a file body turns out shorter than when the call was built.
        let short = Arc::new(AtomicBool::new(false));
        let request = match &call.parsed_url {
            Some(url) => self.http.request(call.method.clone(), url.clone()),
            None => self.http.request(call.method.clone(), &call.url),
        };
        if !matches!(call.body, RequestBody::MultipartFile { .. } | RequestBody::FileRange { .. }) {
            // Nothing streamed up: the wait for the answer starts now.
            activity.body_sent();
        }
        let mut request = request.headers(self.headers(attempt, call.authenticated));
        for (name, value) in &call.headers {
            request = request.header(*name, value);
        }
        if !call.query.is_empty() {
            request = request.query(&call.query);
        }
        if let Some(total) = self.attempt_deadline(call) {
            request = request.timeout(total);
        }
        request = match &call.body {
            RequestBody::Empty => request,
            RequestBody::Json(bytes) => request
                .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
                .body(bytes.clone()),
            RequestBody::MultipartFile { field, path, file_name, mime, len, progress } => {
                // Each attempt sends the whole file again, so progress restarts from zero.
                let counters: Vec<Arc<AtomicU64>> = progress.iter().cloned().collect();
                for c in &counters {
                    c.store(0, Ordering::Relaxed);
                }
                let stream = reqwest::Body::wrap_stream(
                    file_range_stream(path, 0, *len, counters, activity.clone(), short.clone()).await?,
                );
                let part = reqwest::multipart::Part::stream_with_length(stream, *len)
                    .file_name(file_name.clone())
                    .mime_str(mime)
                    .map_err(|e| Error::invalid_argument("file", format!("bad content type {mime:?}: {e}")))?;
                request.multipart(reqwest::multipart::Form::new().part(field.clone(), part))
            }
            RequestBody::MultipartBytes { field, file_name, mime, data } => {
                let part = reqwest::multipart::Part::stream_with_length(
                    reqwest::Body::from(data.clone()),
                    data.len() as u64,
                )
                .file_name(file_name.clone())
                .mime_str(mime)
                .map_err(|e| Error::invalid_argument("file", format!("bad content type {mime:?}: {e}")))?;
                request.multipart(reqwest::multipart::Form::new().part(field.clone(), part))
            }
            RequestBody::FileRange { path, offset, len, progress } => {
                let stream =
                    file_range_stream(path, *offset, *len, progress.clone(), activity.clone(), short.clone()).await?;
                request
                    .header(CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"))
                    .header(reqwest::header::CONTENT_LENGTH, *len)
                    .body(reqwest::Body::wrap_stream(stream))
            }
        };
        let sent = if call.streaming {
            // No overall deadline on a transfer; instead it fails once nothing has moved for
            // the stall timeout (the body being sent, or the answer awaited after it), or when
            // its answer has not begun within `timeout` of the body's last byte, as any other
            // call's would not. The answer's body is bounded by the stall timeout only.
            let stall = cfg.timeouts.read;
            let answer_within = cfg.timeouts.total;
            let overdue = async {
                match answer_within {
                    Some(limit) => activity.answer_overdue(limit).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                result = request.send() => result,
                _ = activity.stalled(stall) => {
                    let error = Error::Timeout {
                        message: format!(
                            "{} {}: no progress for {} (read_timeout)",
                            call.method,
                            shown(call),
                            seconds(stall)
                        ),
                    };
                    return Err(Failed { error, unsent: false });
                }
                _ = overdue => {
                    let error = Error::Timeout {
                        message: format!(
                            "{} {}: no answer within {} of sending the request (timeout)",
                            call.method,
                            shown(call),
                            seconds(answer_within.unwrap_or_default())
                        ),
                    };
                    return Err(Failed { error, unsent: false });
                }
            }
        } else {
            request.send().await
        };
        // reqwest's connect phase (refused, DNS, TLS, connect timeout) ends before the request is
        // written, so the server cannot have acted on it.
        let response = match sent {
            Ok(response) => response,
            // The body broke off because the file ran out: the file changed, not the connection.
            Err(_) if short.load(Ordering::Relaxed) => {
                let (path, len) = match &call.body {
                    RequestBody::MultipartFile { path, len, .. } | RequestBody::FileRange { path, len, .. } => (path.display().to_string(), *len),
                    _ => (String::new(), 0),
                };
                let source = std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("the file changed size during the upload: it ended before the {len} bytes being sent"),
                );
                return Err(Failed { error: Error::io(path, source), unsent: false });
            }
            Err(e) => return Err(Failed { unsent: e.is_connect(), error: self.send_error(call, e) }),
        };
        if response.status().is_success() {
            return Ok(response);
        }
        Err(Failed { error: Error::Api(Box::new(self.api_error(call, response).await)), unsent: false })
    }

    fn headers(&self, attempt: u32, authenticated: bool) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if authenticated {
            headers.insert(AUTHORIZATION, self.authorization.clone());
        }
        headers.insert(
            HeaderName::from_static(RETRY_COUNT_HEADER),
            HeaderValue::from(attempt.saturating_sub(1)),
        );
        for (name, value) in &self.default_headers {
            headers.insert(name, value.clone());
        }
        headers
    }

    fn send_error(&self, call: &Call, err: reqwest::Error) -> Error {
        let (connect, timeout, builder) = (err.is_connect(), err.is_timeout(), err.is_builder());
        // reqwest's text names the URL in full; ours is written below, as `shown` gives it.
        let err = err.without_url();
        let detail = error_chain(&err);
        // Through a proxy, what failed may be the proxy: say which (never its credentials).
        let via = self.proxies().route(&call.url).map_or_else(String::new, |route| format!(" through {route}"));
        let url = format!("{}{via}", shown(call));
        // A connect timeout is both: it counts as no connection made (nothing was sent, and a
        // batch stops on it), and is still told to the caller as a timeout.
        let host = reqwest::Url::parse(&call.url).ok().and_then(|u| u.host_str().map(str::to_string)).unwrap_or_default();
        if head_too_large(&err) {
            // An answer came, and would come the same again: not retried.
            let why = format!(
                "the answer's header section is too large to read (more than {MAX_ANSWER_HEADERS} headers, or \
                 about 400 kB); a proxy or gateway on the way may be adding them"
            );
            Error::unexpected(&url, why, b"")
        } else if let Some(why) = certificate::refused(&err, &host) {
            Error::Unreachable { message: format!("{} {url}: {why}", call.method), timed_out: false, certificate: true }
        } else if connect {
            Error::Unreachable { message: format!("{} {url}: {detail}", call.method), timed_out: timeout, certificate: false }
        } else if timeout {
            Error::Timeout { message: format!("{} {url}: {detail}", call.method) }
        } else if builder {
            Error::invalid_argument("base_url", format!("cannot build a request to {url}: {detail}"))
        } else {
            Error::Connection { message: format!("{} {url}: {detail}", call.method) }
        }
    }

    async fn api_error(&self, call: &Call, response: Response) -> ApiError {
        let status = response.status().as_u16();
        let retry_after = parse_retry_after(response.headers());
        let hint = redirect_hint(status, response.headers()).or_else(|| self.proxy_hint(call, status));
        let raw = match read_body(response, self.config.timeouts.read).await {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(err) => format!("(error body unreadable: {err})"),
        };
        // Some bodies echo the caller's key (lens session records); keep it out of exceptions.
        let raw = self.config.api_key.redact_in(&raw);
        let mut error = ApiError::from_body(status, call.method.as_str(), shown(call), raw, retry_after);
        error.hint = hint.map(|hint| self.config.api_key.redact_in(&hint));
        error
    }
}

impl Transport {
    /// What an answer that may be a proxy's says: one sent through a proxy and answered with a
    /// status proxies give (407, or a gateway's 502, 503, 504) may never have reached the platform.
    fn proxy_hint(&self, call: &Call, status: u16) -> Option<String> {
        if !matches!(status, 407 | 502..=504) {
            return None;
        }
        let route = self.proxies().route(&call.url)?;
        Some(format!(
            "The request went through {route}, which may have given this answer itself; if the platform is \
             reachable directly, add its host to NO_PROXY"
        ))
    }
}

/// `url` as messages and logs show it: without its query, which on a presigned storage URL holds
/// the signature (whoever reads it can use the URL until it expires). Scheme, host and path stay.
pub fn shown_url(url: &str) -> &str {
    url.find(['?', '#']).map_or(url, |end| &url[..end])
}

/// `call`'s URL as messages and logs show it: an unauthenticated call's URL is presigned
/// storage, shown without its query; the platform's own calls keep theirs (list filters,
/// cursors), which carry no secret (the key travels in a header).
fn shown(call: &Call) -> &str {
    if call.authenticated {
        &call.url
    } else {
        shown_url(&call.url)
    }
}

/// How long an idle pooled connection is kept.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// How many idle connections to one host a pool keeps. Without a cap, a burst of 3,000 gathered
/// calls left 3,000 sockets open for the next 90 s, and the process could open no more files.
/// Twice `embed_many`'s default concurrency: a steady batch hands its connections from request
/// to request and never fills the idle list, so the cap only closes what a burst left behind.
const POOL_MAX_IDLE_PER_HOST: usize = 128;

/// The most headers an answer may have. hyper's default, 100, is Python's http.client's too, but
/// gateways and proxies add their own (tracing, cookies, security policies): an answer with
/// about 96 of the platform's and theirs failed as "message head is too large". Above 100, hyper
/// takes the room for this many per answer from the heap (64 bytes each); the head's size stays
/// bounded by hyper's buffer (about 400 kB).
pub const MAX_ANSWER_HEADERS: usize = 500;

/// Whether `err` is an answer whose head was too large to read (too many headers, or too long).
fn head_too_large(err: &reqwest::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(error) = cause {
        if error.downcast_ref::<hyper::Error>().is_some_and(hyper::Error::is_parse_too_large) {
            return true;
        }
        cause = error.source();
    }
    false
}

pub(crate) fn build_http_client(connect_timeout: Duration, proxies: &Proxies) -> Result<reqwest::Client, Error> {
    proxies
        .apply(reqwest::Client::builder())
        .http1_max_headers(MAX_ANSWER_HEADERS)
        .user_agent(USER_AGENT)
        .connect_timeout(connect_timeout)
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .pool_max_idle_per_host(POOL_MAX_IDLE_PER_HOST)
        .tcp_nodelay(true)
        .redirect(redirect_policy())
        .build()
        .map_err(|e| Error::Config(format!("could not set up the HTTP client: {}", error_chain(&e))))
}

/// The platform does not redirect; a proxy or a wrong `base_url` (`http://` sent to `https://`)
/// may. 307 and 308 keep the method and the body, so they are followed (reqwest drops the key on
/// the way to another host). 301, 302 and 303 are not: reqwest would turn a POST into a bodiless
/// GET, and a `bundles.run` into a read of a list, answered as if it had run. Their 3xx is raised
/// with the new address (`redirect_hint`).
fn redirect_policy() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        if matches!(attempt.status().as_u16(), 307 | 308) && attempt.previous().len() <= MAX_REDIRECTS {
            attempt.follow()
        } else {
            attempt.stop()
        }
    })
}

/// As many redirects as reqwest's own default policy follows.
const MAX_REDIRECTS: usize = 10;

/// What a redirect that was not followed says: where the server pointed, and what to do.
fn redirect_hint(status: u16, headers: &HeaderMap) -> Option<String> {
    if !(300..400).contains(&status) {
        return None;
    }
    let to = headers.get(reqwest::header::LOCATION).and_then(|v| v.to_str().ok()).map(shown_url);
    let whither = to.map_or_else(|| "elsewhere (no Location given)".to_string(), |to| format!("to {to}"));
    Some(format!(
        "The server redirects {whither} with {status}, which sensorium does not follow (only 307 and 308 keep \
         the method and the body); if the address moved, set base_url to the new one"
    ))
}

/// When bytes last moved on a streaming call. The stall timeout counts from here, so a long
/// upload that keeps sending is never cut, while a server that goes quiet (before answering,
/// or mid-body) is.
#[derive(Debug)]
pub struct Activity {
    start: std::time::Instant,
    last_ms: AtomicU64,
    /// When the request body's last byte was handed to the connection; `NOT_SENT` until then.
    sent_ms: AtomicU64,
    sent: tokio::sync::Notify,
}

const NOT_SENT: u64 = u64::MAX;

impl Activity {
    pub fn new() -> Arc<Self> {
        Arc::new(Activity {
            start: std::time::Instant::now(),
            last_ms: AtomicU64::new(0),
            sent_ms: AtomicU64::new(NOT_SENT),
            sent: tokio::sync::Notify::new(),
        })
    }

    pub fn touch(&self) {
        let now = self.start.elapsed().as_millis() as u64;
        self.last_ms.store(now, Ordering::Relaxed);
    }

    /// Marks the request body as all sent: the wait for the answer starts.
    pub fn body_sent(&self) {
        let now = self.start.elapsed().as_millis() as u64;
        if self.sent_ms.compare_exchange(NOT_SENT, now, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
            self.sent.notify_waiters();
        }
    }

    /// Resolves once `limit` has passed since the request body was all sent. (Bytes handed to
    /// the connection may still sit in the socket's buffer; on a slow link the wait counts from
    /// a little before the server has them all.)
    pub async fn answer_overdue(&self, limit: Duration) {
        loop {
            // Created before the check, so a `body_sent` between the two still wakes it.
            let notified = self.sent.notified();
            let sent = self.sent_ms.load(Ordering::SeqCst);
            if sent != NOT_SENT {
                let since = Duration::from_millis((self.start.elapsed().as_millis() as u64).saturating_sub(sent));
                if let Some(left) = limit.checked_sub(since) {
                    tokio::time::sleep(left).await;
                }
                return;
            }
            notified.await;
        }
    }

    fn idle(&self) -> Duration {
        let now = self.start.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last_ms.load(Ordering::Relaxed)))
    }

    /// Resolves once nothing has moved for `limit`.
    pub async fn stalled(&self, limit: Duration) {
        loop {
            let idle = self.idle();
            if idle >= limit {
                return;
            }
            tokio::time::sleep(limit - idle).await;
        }
    }
}

/// Streams `len` bytes of `path` from `offset`, adding the bytes handed to the connection to
/// every counter in `progress`. Memory stays at one buffer per stream, whatever the part size.
async fn file_range_stream(
    path: &std::path::Path,
    offset: u64,
    len: u64,
    progress: Vec<Arc<AtomicU64>>,
    activity: Arc<Activity>,
    short: Arc<AtomicBool>,
) -> Result<impl futures_util::Stream<Item = std::io::Result<Bytes>> + Send + 'static, Error> {
    use futures_util::StreamExt;
    use std::io::Read;
    use tokio::io::AsyncSeekExt;
    // Opened and positioned here so a missing file fails the call before anything is sent.
    let mut file = tokio::fs::File::open(path).await.map_err(|e| Error::io(path.display(), e))?;
    file.seek(std::io::SeekFrom::Start(offset)).await.map_err(|e| Error::io(path.display(), e))?;
    let file = file.into_std().await;
    // One blocking task reads the whole range ahead of the socket, READ_AHEAD chunks deep, so
    // a chunk is always ready when hyper asks for the next: reading each chunk on demand (a
    // hop to the blocking pool per read, the socket idle meanwhile) cost 20x the context
    // switches of a single PUT and made the server read in small pieces (2x its CPU).
    // Memory: (READ_AHEAD + 1) x 1 MiB per part in flight.
    const CHUNK: usize = 1024 * 1024;
    const READ_AHEAD: usize = 4;
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(READ_AHEAD);
    tokio::task::spawn_blocking(move || {
        let mut file = file.take(len);
        let mut read_so_far: u64 = 0;
        loop {
            // `read_to_end` on a `take` fills the chunk (retrying interrupted reads) without
            // zeroing it first, and stops at the chunk's size or the range's end.
            let mut chunk = Vec::with_capacity(CHUNK);
            // An error ends the body (hyper aborts the request); a dropped receiver means the
            // request is gone, so stop reading.
            let read = match (&mut file).take(CHUNK as u64).read_to_end(&mut chunk) {
                Ok(read) => read,
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                    return;
                }
            };
            read_so_far += read as u64;
            if read > 0 && tx.blocking_send(Ok(Bytes::from(chunk))).is_err() {
                return;
            }
            if read < CHUNK {
                if read_so_far < len {
                    // The file got shorter since the request was built. Ended here, the body
                    // would be reported as a connection's "early end"; the flag tells the
                    // attempt what happened.
                    short.store(true, Ordering::Relaxed);
                    let eof = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the file got shorter during the upload");
                    let _ = tx.blocking_send(Err(eof));
                }
                return;
            }
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) });
    if len == 0 {
        activity.body_sent();
    }
    let mut handed: u64 = 0;
    Ok(stream.inspect(move |chunk| {
        activity.touch();
        if let Ok(bytes) = chunk {
            for counter in &progress {
                counter.fetch_add(bytes.len() as u64, Ordering::Relaxed);
            }
            handed += bytes.len() as u64;
            if handed >= len {
                activity.body_sent();
            }
        }
    }))
}

/// Reads a whole body. A body cut off mid-way is a retryable connection error, and one that
/// stops arriving for `stall` (the `read_timeout` option) a timeout: every body read is bounded
/// by it, so a server that sends headers and then goes quiet cannot hold a call forever, even
/// with `timeout=None`.
pub async fn read_body(mut response: Response, stall: Duration) -> Result<Bytes, Error> {
    // Written out only for an error message (formatting it cost more than the clone).
    let url = response.url().clone();
    let cut = |e: reqwest::Error| {
        let timeout = e.is_timeout();
        // Without the query (a presigned URL's signature): see `shown_url`.
        let message = format!("reading the response from {}: {}", shown_url(url.as_str()), error_chain(&e.without_url()));
        if timeout {
            Error::Timeout { message }
        } else {
            Error::Connection { message }
        }
    };
    let stalled = || Error::Timeout {
        message: format!(
            "reading the response from {}: no data for {:.1}s (read_timeout)",
            shown_url(url.as_str()),
            stall.as_secs_f64()
        ),
    };
    // Most bodies arrive in one chunk: hand that chunk on without copying it.
    let first = match tokio::time::timeout(stall, response.chunk()).await.map_err(|_| stalled())? {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(Bytes::new()),
        Err(e) => return Err(cut(e)),
    };
    let mut body: Option<bytes::BytesMut> = None;
    loop {
        match tokio::time::timeout(stall, response.chunk()).await.map_err(|_| stalled())? {
            Ok(Some(bytes)) => {
                let buffer = body.get_or_insert_with(|| {
                    // The server's Content-Length is a hint, not a promise: one that claims a
                    // petabyte must not have the process abort on allocating it.
                    let hint = response.content_length().unwrap_or(0).min(PREALLOCATED_BODY) as usize;
                    let mut b = bytes::BytesMut::with_capacity(hint.max(first.len() + bytes.len()));
                    b.extend_from_slice(&first);
                    b
                });
                buffer.extend_from_slice(&bytes);
            }
            Ok(None) => return Ok(body.map_or(first, bytes::BytesMut::freeze)),
            Err(e) => return Err(cut(e)),
        }
    }
}

/// The most room `read_body` makes at once for a body, whatever its Content-Length says; a
/// larger body still arrives whole, the buffer growing as it comes.
const PREALLOCATED_BODY: u64 = 64 << 20;

/// One of `default_headers` as sent, or the error naming what is wrong with it.
fn default_header(name: &str, value: &str) -> Result<(HeaderName, HeaderValue), Error> {
    let header = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| Error::invalid_argument("default_headers", format!("{name:?} is not a valid header name")))?;
    let value = HeaderValue::from_str(value).map_err(|_| {
        Error::invalid_argument("default_headers", format!("the value of {name} is not a valid header value"))
    })?;
    Ok((header, value))
}

pub fn decode_json<T: DeserializeOwned>(url: &str, body: &[u8]) -> Result<T, Error> {
    serde_json::from_slice(body).map_err(|e| Error::unexpected(url, e.to_string(), body))
}

/// `err` and its sources on one line: reqwest's top-level message alone ("error sending
/// request") hides the cause the user needs (connection refused, reset...).
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;

    #[tokio::test]
    async fn a_file_range_streams_its_bytes_in_order_and_counts_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data.bin");
        // 2.5 chunks of data after a 7-byte offset, so the range ends mid-chunk.
        let data: Vec<u8> = (0..(7 + 5 * 512 * 1024)).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let counter = Arc::new(AtomicU64::new(0));
        let len = (data.len() - 7 - 3) as u64;
        let stream = file_range_stream(&path, 7, len, vec![counter.clone()], Activity::new(), Default::default()).await.unwrap();
        let chunks: Vec<Bytes> = stream.map(|c| c.unwrap()).collect().await;
        assert_eq!(chunks.len(), 3);
        assert_eq!(chunks.concat(), data[7..data.len() - 3]);
        assert_eq!(counter.load(Ordering::Relaxed), len);
    }

    #[tokio::test]
    async fn clients_of_one_process_share_connections_and_a_forked_child_gets_its_own() {
        let server = fixed_server(Some(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}")).await;
        let accepted = server.connections;
        let config = || ClientConfig::resolve(Some("sk-test".into()), Some(server.base.clone()), |_| None).unwrap();
        let get = |transport: Transport| async move {
            let call = Call::get(transport.config.url("/models"));
            transport.json::<serde_json::Value>(&call).await.unwrap();
            // Time for the connection to go back to the pool, which happens after the answer.
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        // A generation of its own, so the shared clients start empty.
        let generation = u64::MAX - 1;
        let first = Transport::shared(config(), generation).unwrap();
        get(first.clone()).await;
        get(Transport::shared(config(), generation).unwrap()).await;
        assert_eq!(accepted.load(Ordering::SeqCst), 1, "the second client reuses the first one's connection");
        get(Transport::new(config()).unwrap()).await;
        assert_eq!(accepted.load(Ordering::SeqCst), 2, "a transport of its own opens its own");
        get(Transport::shared(config(), generation + 1).unwrap()).await; // as in a forked child
        assert_eq!(accepted.load(Ordering::SeqCst), 3, "after a fork nothing of the parent's pool is used");
        drop(first);
        get(Transport::shared(config(), generation).unwrap()).await;
        assert_eq!(accepted.load(Ordering::SeqCst), 4, "the pool went with the last client on it");
    }

    /// A keep-alive server on 127.0.0.1 that gives every request `answer` (or, when `None`,
    /// never answers), counting connections and requests.
    struct FixedServer {
        base: String,
        connections: Arc<AtomicU64>,
        requests: Arc<AtomicU64>,
    }

    async fn fixed_server(answer: Option<&'static [u8]>) -> FixedServer {
        serve(answer, false).await
    }

    /// `fixed_server`, closing each connection once it has written `answer` (or, when `None`,
    /// as soon as it has read a request): the answer to every request is lost or cut.
    async fn closing_server(answer: Option<&'static [u8]>) -> FixedServer {
        serve(answer, true).await
    }

    async fn serve(answer: Option<&'static [u8]>, close: bool) -> FixedServer {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (connections, requests) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (accepted, counter) = (connections.clone(), requests.clone());
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                accepted.fetch_add(1, Ordering::SeqCst);
                let counter = counter.clone();
                tokio::spawn(async move {
                    let (mut buf, mut seen) = (vec![0u8; 8192], Vec::new());
                    while let Ok(n @ 1..) = socket.read(&mut buf).await {
                        seen.extend_from_slice(&buf[..n]);
                        while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                            seen.drain(..end + 4);
                            counter.fetch_add(1, Ordering::SeqCst);
                            match answer {
                                Some(answer) if socket.write_all(answer).await.is_ok() => {}
                                Some(_) => return,
                                None => {}
                            }
                            if close {
                                return;
                            }
                        }
                    }
                });
            }
        });
        FixedServer { base: format!("http://127.0.0.1:{port}/v0.5"), connections, requests }
    }

    #[tokio::test]
    async fn a_call_with_a_deadline_neither_retries_nor_pauses_past_it() {
        let config = |base: &str| {
            let mut config = ClientConfig::resolve(Some("sk-test".into()), Some(base.to_string()), |_| None).unwrap();
            config.retry.max_retries = 10;
            // The pauses are the server's alone (the jitter on top of a Retry-After is at most
            // the backoff's delay), so that they can be counted.
            config.retry.initial_delay = Duration::from_millis(1);
            Transport::new(config).unwrap()
        };
        let within = |seconds: f64| {
            let mut call = Call::get("".into());
            call.deadline = Some(tokio::time::Instant::now() + Duration::from_secs_f64(seconds));
            call
        };
        let deadline_passed = |result: Result<serde_json::Value, Error>| match result {
            Err(Error::DeadlinePassed { last }) => *last,
            other => panic!("expected DeadlinePassed, got {other:?}"),
        };

        // The server asks to come back after the deadline: one request, then its 503 as the cause.
        let FixedServer { base, requests, .. } = fixed_server(Some(b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 10\r\ncontent-length: 0\r\n\r\n")).await;
        let transport = config(&base);
        let call = Call { url: transport.config.url("/models"), ..within(2.0) };
        let last = deadline_passed(transport.json(&call).await);
        assert!(matches!(&last, Error::Api(api) if api.status == 503), "{last:?}");
        assert_eq!(requests.load(Ordering::SeqCst), 1);

        // Short pauses are taken while they end before the deadline, and no more.
        let FixedServer { base, requests, .. } = fixed_server(Some(b"HTTP/1.1 503 Service Unavailable\r\nretry-after-ms: 300\r\ncontent-length: 0\r\n\r\n")).await;
        let transport = config(&base);
        let started = std::time::Instant::now();
        let call = Call { url: transport.config.url("/models"), ..within(1.0) };
        deadline_passed(transport.json(&call).await);
        assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());
        let made = requests.load(Ordering::SeqCst);
        assert!((3..=4).contains(&made), "{made} requests in 1 s of 300 ms pauses");

        // An attempt nobody answers is cut at the deadline, but not before it has had a second.
        let FixedServer { base, requests, .. } = fixed_server(None).await;
        let transport = config(&base);
        let started = std::time::Instant::now();
        let call = Call { url: transport.config.url("/models"), ..within(0.0) };
        let last = deadline_passed(transport.json(&call).await);
        assert!(matches!(last, Error::Timeout { .. }), "{last:?}");
        assert!(started.elapsed() >= MIN_ATTEMPT, "{:?}", started.elapsed());
        assert_eq!(requests.load(Ordering::SeqCst), 1);

        // Without a deadline the same retry rule runs out its retries and returns the error.
        let FixedServer { base, requests, .. } = fixed_server(Some(b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 0\r\ncontent-length: 0\r\n\r\n")).await;
        let transport = config(&base);
        let result = transport.json::<serde_json::Value>(&Call::get(transport.config.url("/models"))).await;
        assert!(matches!(result, Err(Error::Api(api)) if api.status == 503));
        assert_eq!(requests.load(Ordering::SeqCst), 11);
    }

    fn transport_to(base: &str, max_retries: u32) -> Transport {
        let mut config = ClientConfig::resolve(Some("sk-test".into()), Some(base.to_string()), |_| None).unwrap();
        config.retry.max_retries = max_retries;
        config.retry.initial_delay = Duration::from_millis(1);
        config.timeouts.total = Some(Duration::from_millis(500));
        Transport::new(config).unwrap()
    }

    /// A POST that creates something, as the generic endpoint path describes it.
    fn create(transport: &Transport) -> Call {
        let mut call = Call::post_json(transport.config.url("/agents/bundles"), Bytes::from_static(b"{}"));
        call.repeatable = safe_to_repeat(&call.method);
        call
    }

    #[test]
    fn only_posts_are_unsafe_to_repeat() {
        for method in [Method::GET, Method::HEAD, Method::PUT, Method::DELETE, Method::OPTIONS] {
            assert!(safe_to_repeat(&method), "{method}");
        }
        assert!(!safe_to_repeat(&Method::POST) && !safe_to_repeat(&Method::PATCH));
        // A call built anywhere follows its method unless its path marks it; /query is marked.
        assert!(!Call::post_json("http://127.0.0.1:9/v0.5/x".into(), Bytes::new()).repeatable);
        assert!(Call::get("http://127.0.0.1:9/v0.5/x".into()).repeatable);
        let config = ClientConfig::resolve(Some("sk-test".into()), Some("http://127.0.0.1:9/v0.5".into()), |_| None).unwrap();
        assert!(Transport::new(config).unwrap().query_call(Bytes::new(), false).repeatable);
    }

    #[tokio::test]
    async fn a_call_not_safe_to_repeat_is_not_sent_again_once_it_may_have_reached_the_server() {
        let not_repeated = |result: Result<serde_json::Value, Error>| match result {
            Err(Error::NotRepeated { last, method }) => {
                assert_eq!(method, "POST");
                *last
            }
            other => panic!("expected NotRepeated, got {other:?}"),
        };
        // The request is read, then the connection closes without an answer.
        let FixedServer { base, requests, .. } = closing_server(None).await;
        let transport = transport_to(&base, 3);
        let last = not_repeated(transport.json(&create(&transport)).await);
        assert!(matches!(last, Error::Connection { .. }), "{last:?}");
        assert_eq!(requests.load(Ordering::SeqCst), 1);

        // The server acted and its answer was cut off mid-body.
        let cut = b"HTTP/1.1 201 Created\r\ncontent-type: application/json\r\ncontent-length: 40\r\n\r\n{\"id\": \"bnd_";
        let FixedServer { base, requests, .. } = closing_server(Some(cut)).await;
        let transport = transport_to(&base, 3);
        let err = transport.json::<serde_json::Value>(&create(&transport)).await.unwrap_err();
        assert!(err.to_string().contains("may have been carried out"), "{err}");
        assert!(matches!(not_repeated(Err(err)), Error::Connection { .. }));
        assert_eq!(requests.load(Ordering::SeqCst), 1);

        // No answer before the attempt's timeout.
        let FixedServer { base, requests, .. } = fixed_server(None).await;
        let transport = transport_to(&base, 3);
        let last = not_repeated(transport.json(&create(&transport)).await);
        assert!(matches!(last, Error::Timeout { .. }), "{last:?}");
        assert_eq!(requests.load(Ordering::SeqCst), 1);

        // The same call marked safe to repeat is retried as before.
        let FixedServer { base, requests, .. } = closing_server(None).await;
        let transport = transport_to(&base, 3);
        let call = Call { repeatable: true, ..create(&transport) };
        let result = transport.json::<serde_json::Value>(&call).await;
        assert!(matches!(result, Err(Error::Connection { .. })), "{result:?}");
        assert_eq!(requests.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn a_call_not_safe_to_repeat_is_retried_when_nothing_was_done() {
        // The server answered with a status of the retry rule: it says what it did (nothing).
        let FixedServer { base, requests, .. } =
            fixed_server(Some(b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 0\r\ncontent-length: 0\r\n\r\n")).await;
        let transport = transport_to(&base, 2);
        let result = transport.json::<serde_json::Value>(&create(&transport)).await;
        assert!(matches!(result, Err(Error::Api(api)) if api.status == 503));
        assert_eq!(requests.load(Ordering::SeqCst), 3);

        // A failure of the connect phase (here the TLS handshake, which this server cannot do)
        // comes before the request is written.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(AtomicU64::new(0));
        let accepted = connections.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                accepted.fetch_add(1, Ordering::SeqCst);
                drop(socket);
            }
        });
        let transport = transport_to(&format!("https://127.0.0.1:{port}/v0.5"), 2);
        let result = transport.json::<serde_json::Value>(&create(&transport)).await;
        assert!(matches!(&result, Err(Error::Unreachable { .. })), "{result:?}");
        assert_eq!(connections.load(Ordering::SeqCst), 3, "{result:?}");
    }

    #[tokio::test]
    async fn a_missing_file_fails_before_anything_is_sent() {
        let dir = tempfile::tempdir().unwrap();
        let err = file_range_stream(&dir.path().join("gone.bin"), 0, 10, Vec::new(), Activity::new(), Default::default()).await.err().unwrap();
        assert!(err.to_string().contains("gone.bin"), "{err}");
    }

    #[tokio::test]
    async fn dropping_the_stream_stops_the_reader() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.bin");
        std::fs::write(&path, vec![1u8; 16 * 1024 * 1024]).unwrap();
        let mut stream = Box::pin(file_range_stream(&path, 0, 16 * 1024 * 1024, Vec::new(), Activity::new(), Default::default()).await.unwrap());
        assert!(stream.next().await.unwrap().is_ok());
        drop(stream);
        // The reader ends on its next send; nothing to join, but the runtime must not hang on
        // it at shutdown (a leaked blocking task would keep this test from finishing).
    }
}
