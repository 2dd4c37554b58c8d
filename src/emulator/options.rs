//! How an emulator is started.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use super::catalogue::Catalogue;
use super::lens::{StatusStyle, DEFAULT_HEARTBEAT_INTERVAL, DEFAULT_SESSION_TTL};

/// Start-up settings of an [`Emulator`](super::Emulator).
#[derive(Debug, Clone)]
pub struct EmulatorOptions {
    /// Address to bind; loopback by default so a test double is never reachable from outside.
    pub host: IpAddr,
    /// Port to bind; 0 lets the OS choose a free one.
    pub port: u16,
    /// Simulated worker time of every `/query` (changeable later with `set_query_delay`).
    pub query_delay: Duration,
    /// Ceiling of the simple upload (`POST /files`), in bytes of file content.
    pub max_upload_bytes: u64,
    /// Key of the default organization; a random `sk-emu-...` key when `None`.
    pub api_key: Option<String>,
    /// Part size of the direct-to-cloud upload; tests use a few MiB to get several parts.
    pub upload_part_size: u64,
    /// How long a part URL stays valid after it is issued.
    pub upload_url_ttl: Duration,
    /// The models every organization may query unless given its own list; the default
    /// catalogue (every id the spec and public code show, both spellings) when `None`.
    pub models: Option<Catalogue>,
    /// Running time of every job (agent run, evaluation, optimization trial, ...).
    pub work_duration: Duration,
    /// Default page size of the agents lists (the platform's 100 when `None`).
    pub page_size: Option<usize>,
    /// Inactivity after which a lens session expires (the spec's `session_ttl_sec`).
    pub session_ttl: Duration,
    /// Time between SSE heartbeats of an idle lens stream.
    pub lens_heartbeat_interval: Duration,
    /// Spelling of lens `session_status` (enum string or bare number).
    pub lens_status_style: StatusStyle,
    /// Requests per second per organization, bursts of at most this many; beyond it 429 with
    /// `Retry-After`. `None`: no limit (the spec records both a limit and its absence).
    pub rate_limit: Option<f64>,
    /// The server setting `MAX_QUERY_SIZE_MB`: when set, it bounds the combined prompt (instead
    /// of the spec's typical 0.04) and the whole body of an encoder request, 413 above it; a
    /// request's own `max_query_size_mb` overrides it, as the spec says. `None`: encoder bodies
    /// are bounded only by the transport limit.
    pub max_query_size_mb: Option<f64>,
    /// How the batch lists page: the cursor style of 1.1.11 on, or the offset style before it.
    pub list_style: ListStyle,
}

/// The two list styles the platform's releases used for batch lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ListStyle {
    /// `{data, has_more, next_cursor}`, paged with `?limit=N&cursor=<next_cursor>` (1.1.11 on).
    #[default]
    Cursor,
    /// `{total, offset, limit, <entity>: [...]}`, paged with `?offset=N&limit=N` (before 1.1.11).
    Offset,
}

impl std::str::FromStr for ListStyle {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cursor" => Ok(ListStyle::Cursor),
            "offset" => Ok(ListStyle::Offset),
            other => Err(format!("list_style is {other:?}; it takes \"cursor\" or \"offset\"")),
        }
    }
}

/// CHOICES: "Default small (0.2 s)".
pub const DEFAULT_WORK_DURATION: Duration = Duration::from_millis(200);

/// The part size the live service used (400 MiB).
pub const DEFAULT_UPLOAD_PART_SIZE: u64 = 400 * 1024 * 1024;
/// One hour, a common presigned-URL lifetime; the notes do not give the live value.
pub const DEFAULT_UPLOAD_URL_TTL: Duration = Duration::from_secs(3600);

impl Default for EmulatorOptions {
    fn default() -> Self {
        EmulatorOptions {
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 0,
            query_delay: Duration::ZERO,
            max_upload_bytes: crate::wire::files::SIMPLE_UPLOAD_MAX_BYTES,
            api_key: None,
            upload_part_size: DEFAULT_UPLOAD_PART_SIZE,
            upload_url_ttl: DEFAULT_UPLOAD_URL_TTL,
            models: None,
            work_duration: DEFAULT_WORK_DURATION,
            page_size: None,
            session_ttl: DEFAULT_SESSION_TTL,
            lens_heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL,
            lens_status_style: StatusStyle::Enum,
            list_style: ListStyle::Cursor,
            rate_limit: None,
            max_query_size_mb: None,
        }
    }
}
