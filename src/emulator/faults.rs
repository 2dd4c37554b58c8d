//! Fault injection rules: which requests get a status, a delay, a reset, a stall or a truncated
//! body, and how many times.

use std::str::FromStr;
use std::time::Duration;

use axum::http::StatusCode;
use parking_lot::Mutex;

use super::api_error::ApiError;

/// What happens to the connection instead of (or on top of) a normal answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultAction {
    /// Drop the TCP connection without any response (the client sees a reset).
    Reset,
    /// Send the headers and half of the body, then nothing more until shutdown.
    Stall,
    /// Send the headers (with the full Content-Length) and half the body, then close.
    Truncate,
}

impl FromStr for FaultAction {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "reset" => Ok(FaultAction::Reset),
            "stall" => Ok(FaultAction::Stall),
            "truncate" => Ok(FaultAction::Truncate),
            _ => Err(format!(
                "unknown fault action {s:?}: expected one of \"reset\", \"stall\", \"truncate\""
            )),
        }
    }
}

impl FaultAction {
    pub fn as_str(&self) -> &'static str {
        match self {
            FaultAction::Reset => "reset",
            FaultAction::Stall => "stall",
            FaultAction::Truncate => "truncate",
        }
    }
}

/// One rule. `path` matches with or without its API version (`/v0.5`, or `/v0.6` for the
/// fine-tuning paths the spec writes relative to that base); a trailing `*` matches a prefix.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultRule {
    pub method: Option<String>,
    pub path: String,
    pub status: Option<u16>,
    /// Sent as `Retry-After` (whole seconds) and `retry-after-ms` with a status.
    pub retry_after: Option<Duration>,
    pub delay: Option<Duration>,
    pub action: Option<FaultAction>,
    /// How many requests it applies to; `None` means every matching request.
    pub times: Option<u32>,
    pub probability: f64,
}

impl Default for FaultRule {
    fn default() -> Self {
        FaultRule {
            method: None,
            path: "*".to_string(),
            status: None,
            retry_after: None,
            delay: None,
            action: None,
            times: Some(1),
            probability: 1.0,
        }
    }
}

/// The methods a rule may name (in any case); `*`, like no method, matches every one.
const METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "*"];

/// The statuses a rule may answer with, written once for every way a rule is made.
pub(crate) const STATUSES: std::ops::RangeInclusive<u16> = 100..=599;

/// The API bases the spec writes paths relative to: `/v0.5`, and `/v0.6` for fine-tuning.
const VERSIONS: &[&str] = &["/v0.5", "/v0.6"];

impl FaultRule {
    /// Why the rule could never apply, naming the argument (`who` is the call that made it): a
    /// typo here would otherwise leave a test passing with no fault injected.
    pub fn check(&self, who: &str) -> Result<(), String> {
        if let Some(m) = &self.method {
            if !METHODS.iter().any(|known| known.eq_ignore_ascii_case(m)) {
                return Err(format!(
                    "method is {m:?}; it takes one of {} (any case), or None for every method",
                    METHODS.join(", ")
                ));
            }
        }
        let path = &self.path;
        if !path.starts_with('/') && path != "*" {
            return Err(format!("path is {path:?}; it must start with \"/\" (\"/query\", \"/files/*\"), or be \"*\""));
        }
        if path.contains('?') {
            return Err(format!("path is {path:?}; a rule matches the path without its query string: leave out \"?...\""));
        }
        if self.status.is_none() && self.action.is_none() && self.delay.is_none() {
            return Err(format!("{who} needs a status, an action or a delay"));
        }
        if let Some(status) = self.status.filter(|s| !STATUSES.contains(s)) {
            return Err(format!("status must be an HTTP status ({} to {}), got {status}", STATUSES.start(), STATUSES.end()));
        }
        if self.times == Some(0) {
            return Err("times is 0, so the rule would never apply; give at least 1, or None for every time".to_string());
        }
        Ok(())
    }

    fn matches(&self, method: &str, path: &str) -> bool {
        if let Some(m) = &self.method {
            if !m.eq_ignore_ascii_case(method) && m != "*" {
                return false;
            }
        }
        // "/v0.5*" and "*" both mean "everything"; otherwise the rule matches the path as written
        // or both without their versions.
        if self.path == "/v0.5*" {
            return true;
        }
        glob(&self.path, path) || glob(without_version(&self.path), without_version(path))
    }

    /// The error answer of a status fault, with the code the platform uses for that status.
    pub(crate) fn status_error(&self, status: u16) -> ApiError {
        let code = match status {
            429 => "rate_limit_exceeded",
            500 => "internal_error",
            502 => "bad_gateway",
            503 => "server_at_capacity",
            504 => "gateway_timeout",
            _ => "injected_fault",
        };
        let status_code =
            StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        ApiError::new(
            status_code,
            code,
            format!("Fault injected by the sensorium emulator (status {status})."),
        )
        .with_retry_after(self.retry_after)
    }
}

/// A trailing `*` matches any rest (a prefix rule); a `*` before more pattern matches within one
/// path segment, so `/_storage/*/3` targets part 3 of every upload and nothing deeper.
fn glob(pattern: &str, path: &str) -> bool {
    let Some(star) = pattern.find('*') else { return pattern == path };
    let (head, tail) = (&pattern[..star], &pattern[star + 1..]);
    let Some(rest) = path.strip_prefix(head) else { return false };
    if tail.is_empty() {
        return true;
    }
    let segment_end = rest.find('/').unwrap_or(rest.len());
    (0..=segment_end).any(|k| glob(tail, &rest[k..]))
}

fn without_version(path: &str) -> &str {
    for version in VERSIONS {
        if let Some(rest) = path.strip_prefix(version) {
            if rest.is_empty() {
                return "/";
            }
            if rest.starts_with('/') {
                return rest;
            }
        }
    }
    path
}

struct ActiveRule {
    rule: FaultRule,
    remaining: Option<u32>,
}

/// The ordered rule list. The first rule that matches (and wins its probability roll) applies
/// and consumes one of its `times`; exhausted rules are dropped.
#[derive(Default)]
pub(crate) struct FaultSet {
    rules: Mutex<Vec<ActiveRule>>,
}

impl FaultSet {
    pub fn push(&self, rule: FaultRule) {
        let remaining = rule.times;
        self.rules.lock().push(ActiveRule { rule, remaining });
    }

    pub fn clear(&self) {
        self.rules.lock().clear();
    }

    pub fn take(&self, method: &str, path: &str) -> Option<FaultRule> {
        self.take_with(method, path, rand::random::<f64>)
    }

    /// `roll` draws in [0, 1); split out so tests can decide the dice.
    fn take_with(&self, method: &str, path: &str, mut roll: impl FnMut() -> f64) -> Option<FaultRule> {
        let mut rules = self.rules.lock();
        rules.retain(|r| r.remaining != Some(0));
        let mut chosen = None;
        for (i, active) in rules.iter_mut().enumerate() {
            if !active.rule.matches(method, path) {
                continue;
            }
            // A rule that loses its roll does not apply and keeps its count; later rules
            // still get their chance.
            if active.rule.probability < 1.0 && roll() >= active.rule.probability {
                continue;
            }
            if let Some(n) = active.remaining.as_mut() {
                *n = n.saturating_sub(1);
            }
            chosen = Some((i, active.rule.clone()));
            break;
        }
        let (index, rule) = chosen?;
        if rules.get(index).map(|r| r.remaining == Some(0)).unwrap_or(false) {
            rules.remove(index);
        }
        Some(rule)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.rules.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(method: Option<&str>, path: &str, times: Option<u32>) -> FaultRule {
        FaultRule {
            method: method.map(str::to_string),
            path: path.to_string(),
            status: Some(503),
            times,
            ..FaultRule::default()
        }
    }

    #[test]
    fn path_matches_with_or_without_version_prefix() {
        assert!(rule(None, "/query", None).matches("POST", "/v0.5/query"));
        assert!(rule(None, "/v0.5/query", None).matches("POST", "/v0.5/query"));
        assert!(!rule(None, "/query", None).matches("POST", "/v0.5/query/x"));
        assert!(rule(None, "/files/*", None).matches("GET", "/v0.5/files/metadata"));
        assert!(rule(None, "/v0.5/files/*", None).matches("GET", "/v0.5/files/info"));
        assert!(!rule(None, "/files/*", None).matches("GET", "/v0.5/models"));
        assert!(rule(None, "*", None).matches("GET", "/v0.5/models"));
        assert!(rule(None, "/v0.5*", None).matches("GET", "/v0.5/models"));
        // Fine-tuning paths as the spec writes them, relative to the /v0.6 base.
        assert!(rule(None, "/fine_tuning/jobs", None).matches("GET", "/v0.6/fine_tuning/jobs"));
        assert!(rule(None, "/v0.6/fine_tuning/*", None).matches("GET", "/v0.6/fine_tuning/jobs"));
        assert!(rule(None, "/v0.6*", None).matches("GET", "/v0.6/fine_tuning/jobs"));
        assert!(!rule(None, "/v0.6*", None).matches("GET", "/v0.5/models"));
        assert!(!rule(None, "/fine_tuning/jobs", None).matches("GET", "/v0.6x/fine_tuning/jobs"));
    }

    #[test]
    fn rules_that_could_never_apply_are_refused_naming_the_argument() {
        let ok = rule(Some("get"), "/query", None);
        assert_eq!(ok.check("inject"), Ok(()));
        let refused = |r: FaultRule, word: &str| {
            let e = r.check("inject").unwrap_err();
            assert!(e.contains(word), "{e}");
        };
        refused(FaultRule { method: Some("FOO".into()), ..ok.clone() }, "method");
        refused(FaultRule { path: "models".into(), ..ok.clone() }, "path");
        refused(FaultRule { path: "/models?scope=all".into(), ..ok.clone() }, "path");
        refused(FaultRule { status: None, ..ok.clone() }, "inject needs a status, an action or a delay");
        refused(FaultRule { status: Some(99), ..ok.clone() }, "status");
        refused(FaultRule { times: Some(0), ..ok.clone() }, "times");
        assert_eq!(FaultRule { path: "*".into(), times: None, ..ok }.check("inject"), Ok(()));
    }

    #[test]
    fn inner_star_matches_one_segment() {
        let part3 = rule(Some("PUT"), "/_storage/*/3", None);
        assert!(part3.matches("PUT", "/_storage/upl_ab12/3"));
        assert!(!part3.matches("PUT", "/_storage/upl_ab12/30"));
        assert!(!part3.matches("PUT", "/_storage/upl_ab12/x/3"));
        assert!(!part3.matches("PUT", "/_storage/upl_ab12/13"));
        assert!(rule(None, "/files/*/x*", None).matches("GET", "/v0.5/files/a/xyz/w"));
    }

    #[test]
    fn method_is_case_insensitive_and_optional() {
        assert!(rule(Some("post"), "/query", None).matches("POST", "/v0.5/query"));
        assert!(!rule(Some("GET"), "/query", None).matches("POST", "/v0.5/query"));
        assert!(rule(None, "/query", None).matches("DELETE", "/v0.5/query"));
    }

    #[test]
    fn times_are_consumed_in_order() {
        let set = FaultSet::default();
        set.push(FaultRule { status: Some(429), ..rule(None, "/query", Some(1)) });
        set.push(FaultRule { status: Some(500), ..rule(None, "/query", Some(2)) });
        let seen: Vec<_> = (0..4)
            .map(|_| set.take("POST", "/v0.5/query").and_then(|r| r.status))
            .collect();
        assert_eq!(seen, vec![Some(429), Some(500), Some(500), None]);
        assert_eq!(set.len(), 0);
    }

    #[test]
    fn unlimited_rule_stays() {
        let set = FaultSet::default();
        set.push(rule(None, "/query", None));
        for _ in 0..5 {
            assert!(set.take("POST", "/v0.5/query").is_some());
        }
        assert!(set.take("GET", "/v0.5/models").is_none());
    }

    #[test]
    fn probability_roll_that_fails_skips_without_consuming() {
        let set = FaultSet::default();
        set.push(FaultRule { probability: 0.5, ..rule(None, "/query", Some(1)) });
        assert!(set.take_with("POST", "/v0.5/query", || 0.9).is_none());
        assert_eq!(set.len(), 1);
        assert!(set.take_with("POST", "/v0.5/query", || 0.1).is_some());
        assert_eq!(set.len(), 0);
    }

    #[test]
    fn action_parses_and_names_unknown_values() {
        assert_eq!("Reset".parse::<FaultAction>(), Ok(FaultAction::Reset));
        let err = "explode".parse::<FaultAction>().unwrap_err();
        assert!(err.contains("explode"));
    }

    #[test]
    fn status_codes_map_to_platform_codes() {
        let r = rule(None, "/query", None);
        assert_eq!(r.status_error(429).code, "rate_limit_exceeded");
        assert_eq!(r.status_error(503).code, "server_at_capacity");
        assert_eq!(r.status_error(418).code, "injected_fault");
    }
}
