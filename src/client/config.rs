//! Client configuration: credentials, the base URL and its per-surface version prefixes,
//! timeouts, retries and extra headers.

use std::time::Duration;

use url::Url;

use super::error::Error;
use super::retry::RetryPolicy;
use super::secret::ApiKey;

pub const API_KEY_ENV: &str = "SENSORIUM_API_KEY";
pub const BASE_URL_ENV: &str = "SENSORIUM_BASE_URL";
pub const AGENTS_BASE_URL_ENV: &str = "SENSORIUM_AGENTS_BASE_URL";

/// The version path of every surface but fine-tuning.
pub const API_VERSION: &str = "v0.5";
/// Fine-tuning lives under its own version.
pub const FINE_TUNING_VERSION: &str = "v0.6";

#[derive(Debug, Clone)]
pub struct Timeouts {
    /// Establishing a connection.
    pub connect: Duration,
    /// One attempt, from sending to the end of the response (`None`: no limit).
    pub total: Option<Duration>,
    /// Longest silence while streaming a body up or down; reset whenever bytes move.
    pub read: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(10),
            // /query holds the connection until the model answers; ten minutes matches the
            // peers' defaults (openai-python) and is overridable per client or call.
            total: Some(Duration::from_secs(600)),
            read: Duration::from_secs(60),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ClientConfig {
    pub api_key: ApiKey,
    /// The host root, without any version path, e.g. `https://api.example.com`.
    pub root: Url,
    /// The prefix `/agents/...` is appended to: `{root}/v0.5` by default, as the spec mounts
    /// it; some deployments mount agents without the version path (`http://host`).
    pub agents_base: Option<String>,
    pub timeouts: Timeouts,
    pub retry: RetryPolicy,
    pub default_headers: Vec<(String, String)>,
}

impl ClientConfig {
    /// Builds a configuration from arguments, falling back to the environment.
    pub fn resolve(
        api_key: Option<String>,
        base_url: Option<String>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, Error> {
        let api_key = api_key.or_else(|| env(API_KEY_ENV)).filter(|k| !k.trim().is_empty());
        let base_url_from_env = base_url.is_none();
        let base_url = base_url.or_else(|| env(BASE_URL_ENV)).filter(|u| !u.trim().is_empty());
        let (api_key, base_url) = match (api_key, base_url) {
            (Some(k), Some(u)) => (k, u),
            (k, u) => {
                let mut missing = Vec::new();
                if k.is_none() {
                    missing.push(format!(
                        "an API key (pass api_key=... or set the {API_KEY_ENV} environment variable)"
                    ));
                }
                if u.is_none() {
                    missing.push(format!(
                        "a base URL (pass base_url=... or set the {BASE_URL_ENV} environment variable; \
                         for local work use sensorium.testing.Emulator)"
                    ));
                }
                return Err(Error::Config(format!("sensorium needs {}", missing.join(" and "))));
            }
        };
        let api_key = ApiKey::new(api_key.trim());
        let root = root_url(&base_url, &api_key).map_err(|e| {
            // Given in each other's place (`Client(base_url, api_key)`): the key is the URL.
            let swapped = !base_url.contains("://") && is_web_url(api_key.expose());
            let e = match e {
                Error::Config(message) if swapped => Error::Config(format!("{message}; {SWAPPED}")),
                other => other,
            };
            from_variable(e, base_url_from_env, "base_url", BASE_URL_ENV)
        })?;
        Ok(ClientConfig {
            api_key,
            root,
            agents_base: None,
            timeouts: Timeouts::default(),
            retry: RetryPolicy::default(),
            default_headers: Vec::new(),
        })
    }

    /// Sets the agents prefix from an argument or `SENSORIUM_AGENTS_BASE_URL`; kept verbatim
    /// (less a trailing `/`), since it names exactly where `/agents` hangs.
    pub fn set_agents_base(&mut self, given: Option<String>, env: impl Fn(&str) -> Option<String>) -> Result<(), Error> {
        let from_env = given.is_none();
        let Some(text) = given.or_else(|| env(AGENTS_BASE_URL_ENV)).filter(|u| !u.trim().is_empty()) else {
            self.agents_base = None;
            return Ok(());
        };
        self.agents_base = Some(
            agents_base(&text, &self.api_key)
                .map_err(|e| from_variable(e, from_env, "agents_base_url", AGENTS_BASE_URL_ENV))?,
        );
        Ok(())
    }



    /// Where `/agents/...` paths go.
    pub fn agents_base_url(&self) -> String {
        self.agents_base.clone().unwrap_or_else(|| self.base_url())
    }

    /// `{root}/v0.5`, the base every surface but fine-tuning is relative to.
    pub fn base_url(&self) -> String {
        self.versioned(API_VERSION)
    }

    pub fn versioned(&self, version: &str) -> String {
        format!("{}/{}", self.root.as_str().trim_end_matches('/'), version)
    }

    /// The absolute URL of `path` (which starts with `/`) under the default version.
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base_url(), path)
    }
}

/// The agents prefix as given, less a trailing `/`, once checked.
fn agents_base(text: &str, key: &ApiKey) -> Result<String, Error> {
    let trimmed = text.trim().trim_end_matches('/');
    let shown = shown_value(trimmed, key, "agents_base_url")?;
    let url =
        Url::parse(trimmed).map_err(|e| Error::Config(format!("agents_base_url: {shown} is not a valid URL ({e})")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(Error::Config(format!("agents_base_url: {shown} must be an http:// or https:// URL with a host")));
    }
    refuse_credentials(&url, "agents_base_url")?;
    Ok(trimmed.to_string())
}

/// An error about `argument` told about `variable` instead when the value came from the
/// environment: a caller who passed no `base_url=` would look for the mistake in their code.
fn from_variable(err: Error, from_env: bool, argument: &str, variable: &str) -> Error {
    match err {
        Error::Config(message) if from_env => match message.strip_prefix(argument).and_then(|m| m.strip_prefix(':')) {
            Some(rest) => Error::Config(format!("the {variable} environment variable:{rest}")),
            None => Error::Config(message),
        },
        other => other,
    }
}

/// Accepts a base URL with or without a version suffix (`/v0.5`, `/v0.6`, `/v1`...) and returns
/// the root the versions hang off. A bare host gave an empty error in the platform's own
/// client; here it just works.
pub fn root_url(base_url: &str, key: &ApiKey) -> Result<Url, Error> {
    let trimmed = base_url.trim();
    let shown = shown_value(trimmed, key, "base_url")?;
    let mut url = Url::parse(trimmed).map_err(|e| {
        Error::Config(format!("base_url: {shown} is not a valid URL ({e})"))
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(Error::Config(format!("base_url: {shown} must start with http:// or https://")));
    }
    if url.host_str().is_none() {
        return Err(Error::Config(format!("base_url: {shown} has no host")));
    }
    refuse_credentials(&url, "base_url")?;
    url.set_query(None);
    url.set_fragment(None);
    let segments: Vec<String> = url
        .path_segments()
        .map(|s| s.filter(|p| !p.is_empty()).map(str::to_string).collect())
        .unwrap_or_default();
    // A version followed by more path is an endpoint pasted whole (`.../v0.5/query`): kept as a
    // prefix, every call would go to `.../v0.5/query/v0.5/...` and fail far from the cause.
    // Only a surface's path counts: a gateway may well have a `v1` of its own in its prefix.
    let pasted = segments.windows(2).position(|w| is_version_segment(&w[0]) && SURFACES.contains(&w[1].as_str()));
    if let Some(at) = pasted {
        let base: Vec<&str> = segments[..=at].iter().map(String::as_str).collect();
        let mut root = url.clone();
        root.set_path(&base.join("/"));
        return Err(Error::Config(format!(
            "base_url: {shown} goes on past its version (/{}): give the base URL up to the version, such as {:?}",
            key.redact_in(&segments[at + 1..].join("/")),
            key.redact_in(&without_credentials(root.as_str().trim_end_matches('/')))
        )));
    }
    let keep: Vec<&String> = match segments.last() {
        Some(last) if is_version_segment(last) => segments[..segments.len() - 1].iter().collect(),
        _ => segments.iter().collect(),
    };
    let path = keep.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("/");
    url.set_path(&path);
    Ok(url)
}

/// A URL with `user:password@` is refused: the platform takes the key as a bearer token, and a
/// password in the base URL would be printed wherever the URL is (reprs, log lines, errors,
/// pickles).
fn refuse_credentials(url: &Url, argument: &str) -> Result<(), Error> {
    if url.username().is_empty() && url.password().is_none() {
        return Ok(());
    }
    Err(Error::Config(format!(
        "{argument}: holds credentials before '@'; remove them (the API key goes in api_key or SENSORIUM_API_KEY)"
    )))
}

/// How an error message shows `text`, a value given for `argument`: quoted, with credentials
/// masked and the API key taken out wherever it sits. A value without `://` is refused here, and
/// not quoted: it is no URL, and is often the key itself given where a URL goes (arguments
/// swapped, `SENSORIUM_BASE_URL=$SENSORIUM_API_KEY`), which an error message would print where
/// logs and tracebacks keep it. It is described instead: its length and, when long enough that
/// the rest stays unknown, its first characters, so a caller can tell which value it was.
fn shown_value(text: &str, key: &ApiKey, argument: &str) -> Result<String, Error> {
    if text.contains("://") {
        return Ok(format!("{:?}", key.redact_in(&without_credentials(text))));
    }
    let what = if text == key.expose() {
        "holds the API key, not a URL".to_string()
    } else {
        let length = text.chars().count();
        let start: String = text.chars().take(SHOWN_START).collect();
        if length >= 3 * SHOWN_START && !key.appears_in(text) {
            format!("(a value of {length} characters starting {start:?}) has no scheme")
        } else {
            format!("(a value of {length} characters) has no scheme")
        }
    };
    Err(Error::Config(format!("{argument}: {what}; give a URL that starts with http:// or https://")))
}

/// How many of a value's first characters `shown_value` shows.
const SHOWN_START: usize = 4;

/// Said when `base_url` is no URL and `api_key` is one.
const SWAPPED: &str = "api_key holds a URL: were the two swapped? The key comes first: Client(api_key, base_url)";

fn is_web_url(text: &str) -> bool {
    let text = text.trim().to_ascii_lowercase();
    text.starts_with("http://") || text.starts_with("https://")
}

/// `text` for an error message, with anything between `://` and an `@` of the authority masked.
fn without_credentials(text: &str) -> String {
    let Some(start) = text.find("://").map(|i| i + 3) else { return text.to_string() };
    let authority_end = text[start..].find(['/', '?', '#']).map_or(text.len(), |i| start + i);
    match text[start..authority_end].rfind('@') {
        Some(at) => format!("{}***{}", &text[..start], &text[start + at..]),
        None => text.to_string(),
    }
}

/// The first path segment of each of the spec's surfaces.
const SURFACES: &[&str] = &["query", "files", "agents", "batch", "fine_tuning", "fine-tuning", "jobs", "lens", "models"];

fn is_version_segment(segment: &str) -> bool {
    // `V0.5` is the same version to a person typing it.
    let Some(rest) = segment.strip_prefix(['v', 'V']) else { return false };
    !rest.is_empty() && rest.chars().all(|c| c.is_ascii_digit() || c == '.')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(key: Option<&str>, url: Option<&str>) -> Result<ClientConfig, Error> {
        ClientConfig::resolve(key.map(String::from), url.map(String::from), |_| None)
    }

    #[test]
    fn credentials_in_a_base_url_are_refused_and_never_printed() {
        for url in ["http://bob:hunter2@h:1", "https://bob@h/v0.5", "http://bob:hunter2@h:notaport"] {
            let err = resolve(Some("k"), Some(url)).unwrap_err().to_string();
            assert!(err.contains("base_url") && !err.contains("hunter2") && !err.contains("bob"), "{err}");
        }
        let mut cfg = resolve(Some("k"), Some("http://h:1")).unwrap();
        let err = cfg.set_agents_base(Some("http://bob:hunter2@a:2".into()), |_| None).unwrap_err().to_string();
        assert!(err.contains("agents_base_url") && !err.contains("hunter2"), "{err}");
        assert_eq!(resolve(Some("k"), Some("http://h:1/V0.5")).unwrap().base_url(), "http://h:1/v0.5");
    }

    #[test]
    fn base_url_with_or_without_version() {
        for given in [
            "http://h:1",
            "http://h:1/",
            "http://h:1/v0.5",
            "http://h:1/v0.5/",
            "http://h:1/v0.6",
        ] {
            let cfg = resolve(Some("k"), Some(given)).unwrap();
            assert_eq!(cfg.base_url(), "http://h:1/v0.5", "{given}");
            assert_eq!(cfg.versioned(FINE_TUNING_VERSION), "http://h:1/v0.6");
        }
        let cfg = resolve(Some("k"), Some("https://h/api/v0.5")).unwrap();
        assert_eq!(cfg.url("/query"), "https://h/api/v0.5/query");
    }

    #[test]
    fn missing_settings_name_both_ways() {
        let msg = resolve(None, None).unwrap_err().to_string();
        assert!(msg.contains("api_key") && msg.contains(API_KEY_ENV), "{msg}");
        assert!(msg.contains("base_url") && msg.contains(BASE_URL_ENV), "{msg}");
        let msg = resolve(Some("k"), None).unwrap_err().to_string();
        assert!(!msg.contains(API_KEY_ENV) && msg.contains(BASE_URL_ENV), "{msg}");
    }

    #[test]
    fn a_bad_url_from_the_environment_is_blamed_on_its_variable() {
        let env = |name: &str| match name {
            BASE_URL_ENV => Some("api.example/v0.5".to_string()),
            AGENTS_BASE_URL_ENV => Some("ftp://h".to_string()),
            _ => None,
        };
        let err = ClientConfig::resolve(Some("k".into()), None, env).unwrap_err().to_string();
        assert!(err.contains("the SENSORIUM_BASE_URL environment variable: (a value of 16 characters starting \"api.\")"), "{err}");
        assert!(!err.contains("base_url:"), "{err}");
        // Passed as an argument, the argument is named.
        let err = ClientConfig::resolve(Some("k".into()), Some("api.example".into()), env).unwrap_err().to_string();
        assert!(err.starts_with("base_url: "), "{err}");
        let mut cfg = resolve(Some("k"), Some("http://h:1")).unwrap();
        let err = cfg.set_agents_base(None, env).unwrap_err().to_string();
        assert!(err.contains("the SENSORIUM_AGENTS_BASE_URL environment variable: \"ftp://h\""), "{err}");
        let err = cfg.set_agents_base(Some("ftp://h".into()), env).unwrap_err().to_string();
        assert!(err.starts_with("agents_base_url: "), "{err}");
    }

    #[test]
    fn environment_fills_gaps() {
        let cfg = ClientConfig::resolve(None, None, |name| match name {
            API_KEY_ENV => Some("from-env".into()),
            BASE_URL_ENV => Some("http://e:2/v0.5".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(cfg.api_key.expose(), "from-env");
        assert_eq!(cfg.base_url(), "http://e:2/v0.5");
    }

    #[test]
    fn agents_base_defaults_to_the_versioned_base() {
        let mut cfg = resolve(Some("k"), Some("http://h:1")).unwrap();
        cfg.set_agents_base(None, |_| None).unwrap();
        assert_eq!(cfg.agents_base_url(), "http://h:1/v0.5");
        cfg.set_agents_base(Some("http://h:1/".into()), |_| None).unwrap();
        assert_eq!(cfg.agents_base_url(), "http://h:1");
        cfg.set_agents_base(None, |n| (n == AGENTS_BASE_URL_ENV).then(|| "https://a/x".into())).unwrap();
        assert_eq!(cfg.agents_base_url(), "https://a/x");
        assert!(cfg.set_agents_base(Some("ftp://h".into()), |_| None).is_err());
    }

    #[test]
    fn a_key_given_where_a_url_goes_is_described_never_printed() {
        let key = "sk-live-9f8e7d6c5b4a39281706";
        let err = resolve(Some(key), Some(key)).unwrap_err().to_string();
        assert_eq!(err, "base_url: holds the API key, not a URL; give a URL that starts with http:// or https://");
        // Swapped: the key is in base_url, the URL in api_key.
        let err = resolve(Some("https://api.example.com"), Some(key)).unwrap_err().to_string();
        assert!(err.starts_with("base_url: (a value of 28 characters starting \"sk-l\") has no scheme"), "{err}");
        assert!(err.contains("swapped") && !err.contains(&key[4..]), "{err}");
        // Inside something that looks like a URL, the key is taken out.
        let err = resolve(Some(key), Some(&format!("https://h:{key}"))).unwrap_err().to_string();
        assert!(err.contains("\"https://h:<redacted>\"") && !err.contains(key), "{err}");
        let err = resolve(Some(key), Some(&format!("https://h/v0.5/query/{key}"))).unwrap_err().to_string();
        assert!(!err.contains(key), "{err}");
        // A short value shows only its length; one holding the key, too.
        let err = resolve(Some(key), Some("h:80")).unwrap_err().to_string();
        assert!(err.starts_with("base_url: (a value of 4 characters) has no scheme"), "{err}");
        let err = resolve(Some(key), Some(&format!("{key}-2025"))).unwrap_err().to_string();
        assert!(err.starts_with("base_url: (a value of 33 characters) has no scheme"), "{err}");
        let mut cfg = resolve(Some(key), Some("https://h")).unwrap();
        let err = cfg.set_agents_base(Some(key.into()), |_| None).unwrap_err().to_string();
        assert!(err.starts_with("agents_base_url: holds the API key"), "{err}");
    }

    #[test]
    fn rejects_bad_urls() {
        assert!(resolve(Some("k"), Some("ftp://h")).is_err());
        assert!(resolve(Some("k"), Some("not a url")).is_err());
    }
}
