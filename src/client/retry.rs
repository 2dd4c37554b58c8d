//! The retry rule: which failures are retried, and how long to wait before the next attempt.

use std::time::{Duration, SystemTime};

use rand::Rng;
use reqwest::header::HeaderMap;

#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Attempts after the first. 0 disables retries.
    pub max_retries: u32,
    /// Nominal delay before the first retry; doubles each time.
    pub initial_delay: Duration,
    /// Ceiling on the nominal delay.
    pub max_delay: Duration,
    /// Jitter takes the delay down to this fraction of nominal, never up, so the ceiling holds.
    pub min_jitter_fraction: f64,
    /// Ceiling on a server-requested `Retry-After`, so a misbehaving server cannot park a
    /// notebook for an hour.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 2,
            initial_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
            min_jitter_fraction: 0.75,
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// Delay before retry number `retry` (1-based), honouring the server's request if any. Its
    /// `Retry-After` is the least wait, and the backoff's jitter goes on top (the retry rule:
    /// "exponential backoff plus jitter"): callers a token bucket refused together were all told
    /// the same 50 ms, came back at the same instant, were refused together again, and spent
    /// their retries in 0.1 s (30 threads at 20 requests/s: 8 of them failed). Spread over the
    /// backoff's delay, they come back at the rate the bucket admits.
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        if let Some(wait) = retry_after {
            let spread = self.nominal_delay(retry).mul_f64(rand::rng().random_range(0.0..=1.0));
            return wait.saturating_add(spread).min(self.max_retry_after);
        }
        let nominal = self.nominal_delay(retry);
        let fraction = rand::rng().random_range(self.min_jitter_fraction..=1.0);
        nominal.mul_f64(fraction)
    }

    pub fn nominal_delay(&self, retry: u32) -> Duration {
        let exponent = retry.saturating_sub(1).min(30);
        self.initial_delay.saturating_mul(1u32 << exponent).min(self.max_delay)
    }
}

/// `retry-after-ms` (milliseconds), else `Retry-After` as seconds or an HTTP date. A value too
/// large for a `Duration` (`1e20`) saturates instead of panicking; the policy's cap (or the
/// call's timeout) decides what happens to it.
pub fn parse_retry_after(headers: &HeaderMap) -> Option<Duration> {
    if let Some(ms) = header_str(headers, "retry-after-ms").and_then(|v| v.trim().parse::<f64>().ok()) {
        if let Some(wait) = saturating_seconds(ms / 1000.0) {
            return Some(wait);
        }
    }
    let value = header_str(headers, "retry-after")?.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return saturating_seconds(secs);
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(when.duration_since(SystemTime::now()).unwrap_or(Duration::ZERO))
}

/// Seconds as a `Duration`: `None` for NaN and negative numbers, `Duration::MAX` past its range
/// (infinity included).
pub fn saturating_seconds(secs: f64) -> Option<Duration> {
    if secs.is_nan() || secs < 0.0 {
        return None;
    }
    Some(Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX))
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn backoff_doubles_with_bounded_jitter() {
        let p = RetryPolicy::default();
        assert_eq!(p.nominal_delay(1), Duration::from_millis(500));
        assert_eq!(p.nominal_delay(2), Duration::from_secs(1));
        assert_eq!(p.nominal_delay(5), Duration::from_secs(8));
        assert_eq!(p.nominal_delay(50), Duration::from_secs(8));
        for _ in 0..200 {
            let d = p.delay(2, None);
            assert!(d >= Duration::from_millis(750) && d <= Duration::from_secs(1), "{d:?}");
        }
    }

    #[test]
    fn a_retry_after_is_the_least_wait_with_the_backoffs_jitter_on_top() {
        let p = RetryPolicy::default();
        let told = Duration::from_millis(50);
        let delays: Vec<Duration> = (0..200).map(|_| p.delay(1, Some(told))).collect();
        assert!(delays.iter().all(|d| *d >= told && *d <= told + p.nominal_delay(1)), "{delays:?}");
        // Spread, so that callers refused together do not all come back together.
        let (least, most) = (delays.iter().min().unwrap(), delays.iter().max().unwrap());
        assert!(*most - *least > Duration::from_millis(200), "{least:?}..{most:?}");
    }

    #[test]
    fn retry_after_forms() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("3"));
        assert_eq!(parse_retry_after(&h), Some(Duration::from_secs(3)));
        h.insert("retry-after-ms", HeaderValue::from_static("250"));
        assert_eq!(parse_retry_after(&h), Some(Duration::from_millis(250)));
        let mut h = HeaderMap::new();
        let date = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(30));
        h.insert("retry-after", HeaderValue::from_str(&date).unwrap());
        let d = parse_retry_after(&h).unwrap();
        assert!(d > Duration::from_secs(25) && d <= Duration::from_secs(30), "{d:?}");
        h.insert("retry-after", HeaderValue::from_static("soon"));
        assert_eq!(parse_retry_after(&h), None);
    }

    #[test]
    fn huge_and_odd_values_never_panic() {
        for (name, value, expected) in [
            ("retry-after", "1e20", Some(Duration::MAX)),
            ("retry-after", "inf", Some(Duration::MAX)),
            ("retry-after", "-1", None),
            ("retry-after", "NaN", None),
            ("retry-after-ms", "1e23", Some(Duration::MAX)),
            ("retry-after-ms", "1e300", Some(Duration::MAX)),
        ] {
            let mut h = HeaderMap::new();
            h.insert(name, HeaderValue::from_static(value));
            assert_eq!(parse_retry_after(&h), expected, "{name}: {value}");
        }
        let p = RetryPolicy::default();
        assert_eq!(p.delay(1, Some(Duration::MAX)), p.max_retry_after);
    }

    #[test]
    fn server_delay_is_capped() {
        let p = RetryPolicy::default();
        assert_eq!(p.delay(1, Some(Duration::from_secs(3600))), Duration::from_secs(60));
        let short = p.delay(1, Some(Duration::from_millis(10)));
        assert!(short >= Duration::from_millis(10) && short <= Duration::from_millis(510), "{short:?}");
    }
}
