//! Pacing shared by the requests of one batch, learnt from the server's 429s.
//!
//! A rate-limited server answers every request beyond its budget with 429 and a `Retry-After`
//! that says when the next one would be admitted. Requests retried independently all wake at
//! that moment and all but one are refused again, so a batch of 64 in flight burns its retry
//! budget in a few rounds. Instead, after a 429 every request of the batch waits for the gate the
//! server named, and then they are let through one per `interval`. The interval starts at the
//! largest `Retry-After` seen (when the bucket is empty that is about one request's worth of the
//! limit), grows by a quarter on each further 429 and shrinks slowly with each success, so the
//! batch settles just under the server's rate and keeps probing it.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Never pace slower than this, whatever a server says: its `Retry-After` still gates the next
/// request, but the steady interval afterwards is bounded.
const MAX_INTERVAL: Duration = Duration::from_secs(2);
/// The interval assumed when a 429 gives no `Retry-After`.
const DEFAULT_INTERVAL: Duration = Duration::from_millis(100);
/// Each success takes the interval down by this fraction: 1 % is ~15 % faster after 16
/// successes, slow enough that a probe past the server's rate costs one 429, not a burst.
const SPEED_UP: f64 = 0.99;
/// Each further 429 lengthens the interval by this factor.
const SLOW_DOWN: f64 = 1.25;

#[derive(Debug)]
struct State {
    /// Zero until the first 429: unpaced.
    interval: Duration,
    /// The earliest start of the next request.
    next: Instant,
}

#[derive(Debug)]
pub struct Pacer {
    state: Mutex<State>,
}

impl Default for Pacer {
    fn default() -> Self {
        Pacer { state: Mutex::new(State { interval: Duration::ZERO, next: Instant::now() }) }
    }
}

impl Pacer {
    /// How long a request starting at `now` must wait for its slot, and takes the slot.
    pub fn reserve(&self, now: Instant) -> Duration {
        let mut s = self.state.lock();
        if s.interval.is_zero() && now >= s.next {
            return Duration::ZERO;
        }
        let slot = s.next.max(now);
        s.next = slot + s.interval;
        slot - now
    }

    /// Waits for this request's slot.
    pub async fn admit(&self) {
        let wait = self.reserve(Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }

    /// A 429 arrived at `now`, asking to wait `retry_after`.
    pub fn rate_limited(&self, now: Instant, retry_after: Option<Duration>) {
        let asked = retry_after.unwrap_or(DEFAULT_INTERVAL).min(MAX_INTERVAL);
        let mut s = self.state.lock();
        s.interval = s.interval.mul_f64(SLOW_DOWN).max(asked).min(MAX_INTERVAL);
        s.next = s.next.max(now + asked);
    }

    /// A request succeeded: probe a little faster.
    pub fn succeeded(&self) {
        let mut s = self.state.lock();
        if !s.interval.is_zero() {
            s.interval = s.interval.mul_f64(SPEED_UP);
        }
    }

    #[cfg(test)]
    fn interval(&self) -> Duration {
        self.state.lock().interval
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpaced_until_the_first_429() {
        let p = Pacer::default();
        let now = Instant::now();
        assert_eq!(p.reserve(now), Duration::ZERO);
        assert_eq!(p.reserve(now), Duration::ZERO);
    }

    #[test]
    fn after_a_429_requests_wait_for_the_gate_then_go_one_per_interval() {
        let p = Pacer::default();
        let now = Instant::now();
        p.rate_limited(now, Some(Duration::from_millis(50)));
        assert_eq!(p.reserve(now), Duration::from_millis(50));
        assert_eq!(p.reserve(now), Duration::from_millis(100));
        assert_eq!(p.reserve(now), Duration::from_millis(150));
        // A later request after the queue has drained goes at once.
        assert_eq!(p.reserve(now + Duration::from_secs(10)), Duration::ZERO);
    }

    #[test]
    fn interval_grows_on_429_and_shrinks_on_success_within_bounds() {
        let p = Pacer::default();
        let now = Instant::now();
        p.rate_limited(now, Some(Duration::from_millis(10)));
        p.rate_limited(now, Some(Duration::from_millis(40)));
        assert_eq!(p.interval(), Duration::from_millis(40));
        p.rate_limited(now, Some(Duration::from_millis(1)));
        assert_eq!(p.interval(), Duration::from_millis(50));
        p.succeeded();
        assert!(p.interval() < Duration::from_millis(50));
        p.rate_limited(now, Some(Duration::from_secs(3600)));
        assert_eq!(p.interval(), MAX_INTERVAL);
        p.rate_limited(now, None);
        assert_eq!(p.interval(), MAX_INTERVAL);
    }
}
