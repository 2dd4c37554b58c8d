//! Pacing shared by the requests of one batch, learnt from the server's 429s.
//!
//! A rate-limited server answers every request beyond its budget with 429 and a `Retry-After`
//! that says when the next one would be admitted. Requests retried independently all wake at
//! that moment and all but one are refused again, so a batch of 64 in flight burns its retry
//! budget in a few rounds. Instead, after a 429 every request of the batch waits for the gate the
//! server named, and then they are let through one per `interval`.
//!
//! The interval is learnt from the first 429 of each wave (the requests in flight together when
//! the budget ran out; the later 429s of a wave only say how long to wait): a request sent one
//! `interval` after the previous one and refused with `Retry-After: d` needed `interval + d`, so
//! that, with a 5 % margin for timer jitter, becomes the interval. Each success shortens it a
//! little, so the batch keeps probing the server's rate; with a token bucket on the server the
//! time spent just under the rate refills the bucket rather than wasting it, so the average stays
//! at the server's rate. (Compounding every 429 of a wave instead took a batch of 16 in flight at
//! a 20/s limit down to 3/s.)
//!
//! That probing is paid for with an occasional 429, and it must not fall on the same request
//! again and again: a request refused three times has spent its retry budget and fails its
//! window (seen about once in 15 runs of the 20/s test). So a retry never probes: it goes one
//! *safe* interval (the last one a 429 revealed, which successes do not shorten) after the
//! previous request, and a server with a token bucket admits a request that far behind the
//! last one.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Never pace slower than this, whatever a server says: its `Retry-After` still gates the next
/// request, but the steady interval afterwards is bounded.
const MAX_INTERVAL: Duration = Duration::from_secs(2);
/// The interval assumed when a 429 gives no `Retry-After`.
const DEFAULT_INTERVAL: Duration = Duration::from_millis(100);
/// Each success takes the interval down by this fraction: about 10 % faster after 20 successes,
/// slow enough that a probe past the server's rate costs a 429 now and then, not a burst.
const SPEED_UP: f64 = 0.995;
/// Headroom over the interval a 429 reveals, for timers that fire a little early or late.
const MARGIN: f64 = 1.05;

#[derive(Debug)]
struct State {
    /// Zero until the first 429: unpaced.
    interval: Duration,
    /// The earliest start of the next request.
    next: Instant,
    /// When the current wave of 429s began.
    wave: Option<Instant>,
    /// The interval the last wave revealed, which successes do not shorten: what a retry waits
    /// after the previous request.
    safe: Duration,
    /// When the last request was let through.
    last: Option<Instant>,
}

#[derive(Debug)]
pub struct Pacer {
    state: Mutex<State>,
    turn: tokio::sync::Mutex<()>,
}

impl Default for Pacer {
    fn default() -> Self {
        Pacer {
            state: Mutex::new(State { interval: Duration::ZERO, next: Instant::now(), wave: None, safe: Duration::ZERO, last: None }),
            turn: tokio::sync::Mutex::new(()),
        }
    }
}

impl Pacer {
    /// How long a request at `now` must still wait (zero once the gate is open); a `retry`
    /// also waits for one safe interval after the last request.
    fn wait_at(&self, now: Instant, retry: bool) -> Duration {
        let s = self.state.lock();
        let gate = match (retry, s.last) {
            (true, Some(last)) => s.next.max(last + s.safe),
            _ => s.next,
        };
        gate.saturating_duration_since(now)
    }

    /// Takes the open slot at `now`: the next request goes one interval later.
    fn take(&self, now: Instant) {
        let mut s = self.state.lock();
        s.next = s.next.max(now) + s.interval;
        s.last = Some(now);
    }

    /// Waits for this request's turn. Requests go one at a time in arrival order (tokio's
    /// mutex is fair), and each waits for the gate as it stands when its turn comes, so a 429
    /// that moves the gate or lengthens the interval holds back every request not yet sent,
    /// not only those that arrive after it.
    /// `retry` for a request's second and later attempts.
    pub async fn admit(&self, retry: bool) {
        {
            let s = self.state.lock();
            if s.interval.is_zero() && Instant::now() >= s.next {
                return; // unpaced: no queue at all
            }
        }
        let _turn = self.turn.lock().await;
        loop {
            let wait = self.wait_at(Instant::now(), retry);
            if wait.is_zero() {
                break;
            }
            tokio::time::sleep(wait).await;
        }
        self.take(Instant::now());
    }

    /// A 429 arrived at `now`, asking to wait `retry_after`.
    pub fn rate_limited(&self, now: Instant, retry_after: Option<Duration>) {
        let asked = retry_after.unwrap_or(DEFAULT_INTERVAL).min(MAX_INTERVAL);
        let mut s = self.state.lock();
        // A 429 more than one interval after the wave began answers a request sent under the
        // pacing already in force: that pacing is too fast, so slow down. Earlier ones belong to
        // the same wave and only say how long to wait.
        // A wave lasts one interval, or this 429's wait if longer: a request queued behind
        // others is refused with a long wait without the pacing being any more wrong.
        let new_wave = s.wave.is_none_or(|start| now >= start + s.interval.max(asked));
        if new_wave {
            s.wave = Some(now);
            s.interval = (s.interval + asked).mul_f64(MARGIN).min(MAX_INTERVAL);
            s.safe = s.interval;
        }
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
        let now = Instant::now() + Duration::from_millis(1);
        assert_eq!(p.wait_at(now, false), Duration::ZERO);
        assert_eq!(p.interval(), Duration::ZERO);
    }

    #[test]
    fn after_a_429_requests_wait_for_the_gate_then_go_one_per_interval() {
        let p = Pacer::default();
        let now = Instant::now();
        p.rate_limited(now, Some(Duration::from_millis(40)));
        assert_eq!(p.wait_at(now, false), Duration::from_millis(40));
        let open = now + Duration::from_millis(40);
        p.take(open);
        assert_eq!(p.wait_at(open, false), Duration::from_millis(42));
        // A later request after the queue has drained goes at once.
        assert_eq!(p.wait_at(now + Duration::from_secs(10), false), Duration::ZERO);
    }

    #[test]
    fn a_retry_never_probes_it_waits_a_safe_interval_after_the_last_request() {
        let p = Pacer::default();
        let now = Instant::now();
        p.rate_limited(now, Some(Duration::from_millis(50)));
        let safe = Duration::from_micros(52_500);
        // Twenty successes probe below the 50 ms the server needs...
        for _ in 0..20 {
            p.succeeded();
        }
        let probing = p.interval();
        assert!(probing < Duration::from_millis(50), "{probing:?}");
        let open = now + Duration::from_millis(50);
        p.take(open);
        // ...which a first attempt follows, but a retry waits the safe interval.
        let after = open + Duration::from_millis(1);
        assert_eq!(p.wait_at(after, false), probing - Duration::from_millis(1));
        assert_eq!(p.wait_at(after, true), safe - Duration::from_millis(1));
        // With no request sent yet since the 429, a retry waits only for the gate.
        let q = Pacer::default();
        q.rate_limited(now, Some(Duration::from_millis(50)));
        assert_eq!(q.wait_at(now, true), Duration::from_millis(50));
    }

    #[test]
    fn the_first_429_of_a_wave_sets_the_interval_and_successes_shorten_it() {
        let p = Pacer::default();
        let now = Instant::now();
        p.rate_limited(now, Some(Duration::from_millis(10)));
        // The rest of the wave only gates.
        for ms in [10, 1, 5] {
            p.rate_limited(now + Duration::from_millis(2), Some(Duration::from_millis(ms)));
        }
        assert_eq!(p.interval(), Duration::from_micros(10_500));
        // Sent 10.5 ms apart and refused with 9.5 ms to go: 20 ms was needed.
        p.rate_limited(now + Duration::from_millis(100), Some(Duration::from_micros(9_500)));
        assert_eq!(p.interval(), Duration::from_millis(21));
        p.succeeded();
        assert!(p.interval() < Duration::from_millis(21));
        // A server asking for an hour gates the batch for the capped wait, not an hour.
        let later = now + Duration::from_secs(1);
        p.rate_limited(later, Some(Duration::from_secs(3600)));
        assert_eq!(p.wait_at(later, false), MAX_INTERVAL);
        p.rate_limited(now + Duration::from_secs(100), Some(Duration::from_secs(3)));
        assert_eq!(p.interval(), MAX_INTERVAL);
    }
}
