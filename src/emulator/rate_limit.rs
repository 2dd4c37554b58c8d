//! The per-organization request rate limit (`Emulator(rate_limit=r)`): at most `r` requests per
//! second with bursts of at most `r`, as a GCRA (governor's keyed limiter). A request beyond it
//! gets 429 with `Retry-After` saying when the organization's next request would be admitted.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, MonotonicClock};
use governor::state::keyed::HashMapStateStore;
use governor::{Quota, RateLimiter};

pub(crate) struct OrgRateLimit {
    limiter: RateLimiter<String, HashMapStateStore<String>, MonotonicClock>,
    clock: MonotonicClock,
}

impl OrgRateLimit {
    /// `None` for a rate that is not a positive finite number (the bindings reject those first).
    pub fn new(per_second: f64) -> Option<Self> {
        if !(per_second.is_finite() && per_second > 0.0) {
            return None;
        }
        // One request every 1/r seconds, and a bucket of floor(r) for bursts ("bursts of at most
        // r": 2.5/s admits 2 back to back, not 3); at least 1, so a rate such as 0.5/s still
        // admits one request at a time.
        let period = Duration::try_from_secs_f64(1.0 / per_second).ok()?.max(Duration::from_nanos(1));
        let burst = NonZeroU32::new(per_second.floor().min(u32::MAX as f64) as u32).unwrap_or(NonZeroU32::MIN);
        let quota = Quota::with_period(period)?.allow_burst(burst);
        let clock = MonotonicClock;
        Some(OrgRateLimit { limiter: RateLimiter::new(quota, HashMapStateStore::default(), clock.clone()), clock })
    }

    /// `Ok` when `org` may send a request now (and counts it); otherwise how long until it may.
    pub fn check(&self, org: &str) -> Result<(), Duration> {
        self.limiter
            .check_key(&org.to_string())
            .map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursts_of_r_then_a_wait_of_about_one_period() {
        let limit = OrgRateLimit::new(5.0).unwrap();
        for _ in 0..5 {
            assert!(limit.check("a").is_ok());
        }
        let wait = limit.check("a").unwrap_err();
        assert!(wait > Duration::ZERO && wait <= Duration::from_millis(200), "{wait:?}");
        // Organizations do not share a budget.
        assert!(limit.check("b").is_ok());
    }

    #[test]
    fn a_fractional_rate_bursts_at_most_its_whole_part() {
        // Checks microseconds apart, against periods of 200 ms and more: no token comes back.
        for (rate, burst) in [(2.5, 2), (1.5, 1), (4.9, 4), (0.5, 1), (1.0, 1)] {
            let limit = OrgRateLimit::new(rate).unwrap();
            let admitted = (0..10).filter(|_| limit.check("a").is_ok()).count();
            assert_eq!(admitted, burst, "rate {rate}");
        }
    }

    #[test]
    fn rejects_nonsense_rates() {
        for rate in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(OrgRateLimit::new(rate).is_none(), "{rate}");
        }
        assert!(OrgRateLimit::new(0.5).unwrap().check("a").is_ok());
    }
}
