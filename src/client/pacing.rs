//! Pacing shared by the concurrent requests of a client, learnt from the server's 429s.
//!
//! A rate-limited server answers every request beyond its budget with 429 and a `Retry-After`
//! that says when to come back. Requests retried independently all wake at that moment and all
//! but one are refused again, so a batch of 64 in flight burns its retry budget in a few rounds.
//! Instead, after a 429 every request waits for the gate the server named, and then they go at a
//! rate learnt from what the server admitted.
//!
//! A `Retry-After` is when to come back, not the spacing between requests: a token bucket of
//! 20/s that rounds its answer up to whole seconds says "1" when its next token is 50 ms away,
//! and a server that refused one request out of a thousand says the same. So the rate is measured,
//! not read off the header:
//!
//! - Unpaced until a 429. The first one opens an estimate: the requests let through in the second
//!   before it, less those of them refused (counted until the gate opens, by when their answers
//!   are in), are what the server admits in a second. Under-counting is safe (the rate probes
//!   upwards), over-counting is not (requests refused three times fail their windows), so the
//!   count is over a whole second even when the batch began a moment before. When fewer than one
//!   in [`UNBOUND_SHARE`] of those requests was refused (one transient 429, or a limit the
//!   batch's concurrency never reached), the server was not what bounded them: the batch waits
//!   out the gate and runs on unpaced.
//! - From then on, additive increase and multiplicative decrease on that rate, as TCP does with
//!   its window: a 429 for a request sent at the current pace (one let through after the last
//!   slowdown; earlier ones were already answered by it) cuts the rate to [`BACK_OFF`] of itself,
//!   and marks that rate as the ceiling; each success climbs back towards the ceiling by a fixed
//!   share of it per second, then probes past it a little faster. A server with a token bucket
//!   banks the tokens of the slow stretch and hands them back on the fast one, so the average
//!   stays at its rate. A rate that climbs [`UNPACE`] times past the ceiling without a 429 means
//!   the limit is gone: the pacing stops.
//! - A retry never queues behind first attempts, nor a third attempt behind second ones: the
//!   open slot goes to the waiting request refused most often, so a request refused once is not
//!   the one that meets the next probe (a request refused three times has spent its retry budget
//!   and fails its window).
//!
//! One pacer belongs to a client's transport, so concurrent `embed_many` calls of one client
//! (threads, tasks) learn the server's rate together instead of each spending it on its own.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// The longest the gate stays shut after a 429, whatever a server says: the request it refused
/// still waits what the retry rule allows, but the others are not held an hour.
const MAX_WAIT: Duration = Duration::from_secs(2);
/// The wait assumed when a 429 gives no `Retry-After`.
const DEFAULT_WAIT: Duration = Duration::from_millis(100);
/// What a 429 at the current pace leaves of the rate.
const BACK_OFF: f64 = 0.7;
/// Below the ceiling, the rate climbs this share of the ceiling per second (back from a
/// slowdown in one second).
const CLIMB: f64 = 0.3;
/// At or past the ceiling, each success raises the rate by this fraction.
const PROBE: f64 = 0.02;
/// A rate this many times the ceiling, reached without a 429, ends the pacing.
const UNPACE: f64 = 4.0;
/// Never slower than one request a second.
const MIN_RATE: f64 = 1.0;
/// Fewer refusals than one in this many of the requests let through: the server did not bound
/// them, and the batch stays unpaced.
const UNBOUND_SHARE: usize = 10;
/// How far back the requests let through are counted for the first estimate.
const WINDOW: Duration = Duration::from_secs(1);
/// A slot missed by at most this much (a timer that fires late) is not lost: the next slot
/// counts from when it was due, so the rate holds at short intervals.
const CATCH_UP: Duration = Duration::from_millis(5);
/// How often a request looks again while one refused more often waits for the open slot.
const YIELD: Duration = Duration::from_millis(1);

/// The first estimate of the server's rate, open from the first 429 until the gate opens.
#[derive(Debug)]
struct Estimate {
    /// Requests let through in the `WINDOW` before the 429 are those from `since` to `until`.
    since: Instant,
    until: Instant,
    admitted: usize,
    refused: usize,
}

#[derive(Debug)]
struct State {
    /// Requests per second; `None` while unpaced.
    rate: Option<f64>,
    /// The rate at the last slowdown.
    ceiling: f64,
    /// No request starts before this (the server's `Retry-After`).
    gate: Instant,
    /// The earliest start of the next request while paced.
    next: Instant,
    /// When the rate was last set from a 429: a 429 for a request let through before it says
    /// nothing about the rate now.
    slowed: Option<Instant>,
    /// When the requests of the last `WINDOW` were let through.
    admitted: VecDeque<Instant>,
    estimate: Option<Estimate>,
}

impl State {
    /// When the next request may start, settling the first estimate once the gate is open.
    fn open_at(&mut self, now: Instant) -> Instant {
        if now >= self.gate {
            if let Some(estimate) = self.estimate.take() {
                // Refusals this rare say the server admitted what the batch sent: what bounded
                // the count was the batch, not the server, and the gate was all it asked for.
                if estimate.refused >= estimate.admitted.div_ceil(UNBOUND_SHARE) {
                    let admitted = estimate.admitted.saturating_sub(estimate.refused) as f64;
                    let rate = (admitted / WINDOW.as_secs_f64()).max(MIN_RATE);
                    self.rate = Some(rate);
                    self.ceiling = rate;
                    self.slowed = Some(now);
                    self.next = now;
                }
            }
        }
        match self.rate {
            Some(_) => self.gate.max(self.next),
            None => self.gate,
        }
    }

    /// Lets a request through at `now` (its slot is open).
    fn take(&mut self, now: Instant) {
        if let Some(rate) = self.rate {
            let due = self.next.max(self.gate).max(now.checked_sub(CATCH_UP).unwrap_or(now));
            self.next = due + Duration::from_secs_f64(1.0 / rate);
        }
        while self.admitted.front().is_some_and(|&t| now.saturating_duration_since(t) > WINDOW) {
            self.admitted.pop_front();
        }
        self.admitted.push_back(now);
    }
}

#[derive(Debug)]
pub struct Pacer {
    state: Mutex<State>,
    /// First attempts go one at a time, in arrival order (tokio's mutex is fair).
    turn: tokio::sync::Mutex<()>,
    /// Retries waiting for a slot, by attempt (2, 3, 4 and later): the open slot goes to the
    /// highest attempt waiting.
    retries_waiting: [AtomicUsize; PRIORITIES],
}

/// Attempts 2, 3 and 4 or later wait in their own priority.
const PRIORITIES: usize = 3;

/// Where a request's `attempt` waits: `None` for a first attempt.
fn priority(attempt: u32) -> Option<usize> {
    (attempt > 1).then(|| (attempt as usize - 2).min(PRIORITIES - 1))
}

impl Default for Pacer {
    fn default() -> Self {
        let now = Instant::now();
        Pacer {
            state: Mutex::new(State {
                rate: None,
                ceiling: 0.0,
                gate: now,
                next: now,
                slowed: None,
                admitted: VecDeque::new(),
                estimate: None,
            }),
            turn: tokio::sync::Mutex::new(()),
            retries_waiting: Default::default(),
        }
    }
}

/// Counts a retry as waiting while it lives (a cancelled request stops counting).
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::AcqRel);
        Waiting(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Pacer {
    /// Takes the slot at `now` for a request's `attempt` if it is open and no request refused
    /// more often waits for it; otherwise how long until it looks again.
    fn try_take(&self, now: Instant, attempt: u32) -> Result<(), Duration> {
        let mut s = self.state.lock();
        let open = s.open_at(now);
        if now < open {
            return Err(open - now);
        }
        let above = priority(attempt).map_or(0, |p| p + 1);
        if self.retries_waiting[above..].iter().any(|waiting| waiting.load(Ordering::Acquire) > 0) {
            return Err(YIELD);
        }
        s.take(now);
        Ok(())
    }

    /// Waits for the turn of a request's `attempt` (1 for the first) and returns when it was let
    /// through, the ticket to hand back with its answer.
    pub async fn admit(&self, attempt: u32) -> Instant {
        let now = Instant::now();
        if self.try_take(now, attempt).is_ok() {
            return now; // nothing to wait for: no queue at all
        }
        let _waiting = priority(attempt).map(|p| Waiting::new(&self.retries_waiting[p]));
        let _turn = if attempt > 1 { None } else { Some(self.turn.lock().await) };
        loop {
            let now = Instant::now();
            match self.try_take(now, attempt) {
                Ok(()) => return now,
                Err(wait) => tokio::time::sleep(wait).await,
            }
        }
    }

    /// A request let through at `ticket` was refused with 429 at `now`, asking to wait
    /// `retry_after`.
    pub fn rate_limited(&self, ticket: Instant, now: Instant, retry_after: Option<Duration>) {
        let wait = retry_after.unwrap_or(DEFAULT_WAIT).min(MAX_WAIT);
        let mut s = self.state.lock();
        s.gate = s.gate.max(now + wait);
        if let Some(estimate) = &mut s.estimate {
            if ticket >= estimate.since && ticket <= estimate.until {
                estimate.refused += 1;
            }
            return;
        }
        match s.rate {
            None => {
                let since = now.checked_sub(WINDOW).unwrap_or(now);
                let admitted = s.admitted.iter().filter(|&&t| t >= since).count();
                s.estimate = Some(Estimate { since, until: now, admitted, refused: usize::from(ticket >= since) });
            }
            Some(rate) if s.slowed.is_none_or(|slowed| ticket >= slowed) => {
                s.ceiling = rate;
                s.rate = Some((rate * BACK_OFF).max(MIN_RATE));
                s.slowed = Some(now);
            }
            Some(_) => {}
        }
    }

    /// A request succeeded: the rate climbs back towards the ceiling, then probes past it.
    pub fn succeeded(&self) {
        let mut s = self.state.lock();
        if let Some(rate) = s.rate {
            let rate = if rate < s.ceiling { rate + CLIMB * s.ceiling / rate } else { rate * (1.0 + PROBE) };
            s.rate = if rate > UNPACE * s.ceiling { None } else { Some(rate) };
        }
    }

    #[cfg(test)]
    fn rate(&self) -> Option<f64> {
        self.state.lock().rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Lets `n` requests through at `at` (the gate must be open).
    fn let_through(p: &Pacer, at: Instant, n: usize) {
        for _ in 0..n {
            p.state.lock().take(at);
        }
    }

    #[test]
    fn unpaced_until_the_first_429() {
        let p = Pacer::default();
        let now = Instant::now() + ms(1);
        assert_eq!(p.try_take(now, 1), Ok(()));
        assert_eq!(p.rate(), None);
    }

    #[test]
    fn a_429_shuts_the_gate_for_its_retry_after_capped() {
        let p = Pacer::default();
        let now = Instant::now();
        p.rate_limited(now, now, Some(ms(40)));
        assert_eq!(p.try_take(now, 1), Err(ms(40)));
        let q = Pacer::default();
        q.rate_limited(now, now, Some(Duration::from_secs(3600)));
        assert_eq!(q.try_take(now, 1), Err(MAX_WAIT));
    }

    #[test]
    fn the_first_rate_is_what_the_server_admitted_in_the_second_before() {
        // 64 let through at once, 44 refused with "Retry-After: 1": the server admits 20 a second.
        let p = Pacer::default();
        let start = Instant::now();
        let_through(&p, start, 64);
        let refused_at = start + ms(5);
        for _ in 0..44 {
            p.rate_limited(start, refused_at, Some(Duration::from_secs(1)));
        }
        let open = refused_at + Duration::from_secs(1);
        assert!(p.try_take(open - ms(1), 2).is_err(), "the gate holds retries too");
        assert_eq!(p.try_take(open, 1), Ok(()));
        assert_eq!(p.rate(), Some(20.0));
        // Then one every 50 ms.
        assert_eq!(p.try_take(open + ms(10), 1), Err(ms(40)));
        assert_eq!(p.try_take(open + ms(50), 1), Ok(()));
    }

    #[test]
    fn one_transient_429_only_shuts_the_gate() {
        let p = Pacer::default();
        let start = Instant::now();
        let_through(&p, start, 16);
        p.rate_limited(start, start + ms(2), Some(Duration::from_secs(1)));
        let open = start + ms(1002);
        assert!(p.try_take(open - ms(1), 1).is_err());
        for _ in 0..16 {
            assert_eq!(p.try_take(open, 1), Ok(()));
        }
        assert_eq!(p.rate(), None);
    }

    #[test]
    fn successes_far_past_the_ceiling_end_the_pacing() {
        let p = Pacer::default();
        let start = Instant::now();
        let_through(&p, start, 30);
        for _ in 0..10 {
            p.rate_limited(start, start + ms(2), Some(ms(50)));
        }
        assert_eq!(p.try_take(start + ms(52), 1), Ok(()));
        assert_eq!(p.rate(), Some(20.0));
        for _ in 0..100 {
            p.succeeded();
        }
        assert_eq!(p.rate(), None, "a rate 4 times past the ceiling without a 429 is no limit");
    }

    /// A pacer that learnt a rate of `rate` a second at `start + 10 ms`, when it let a request through.
    fn paced_at(rate: usize, start: Instant) -> Pacer {
        let p = Pacer::default();
        let_through(&p, start, 2 * rate);
        for _ in 0..rate {
            p.rate_limited(start, start, Some(ms(10)));
        }
        assert_eq!(p.try_take(start + ms(10), 1), Ok(()));
        assert_eq!(p.rate(), Some(rate as f64));
        p
    }

    #[test]
    fn a_429_at_the_current_pace_backs_off_once_and_successes_climb_back() {
        let start = Instant::now();
        let p = paced_at(20, start);
        let open = start + ms(10);
        // A request let through before the rate was set was refused: nothing to learn.
        p.rate_limited(start, open + ms(1), Some(ms(50)));
        assert_eq!(p.rate(), Some(20.0));
        // One let through at the current pace was: back off, once for the whole wave.
        p.rate_limited(open, open + ms(2), Some(ms(50)));
        p.rate_limited(open, open + ms(3), Some(ms(50)));
        assert_eq!(p.rate(), Some(20.0 * BACK_OFF));
        // Successes climb back to the ceiling in about a second of them, then probe past it.
        let mut successes = 0;
        while p.rate().is_some_and(|r| r < 20.0) {
            p.succeeded();
            successes += 1;
        }
        assert!((10..=20).contains(&successes), "{successes}");
        p.succeeded();
        assert!(p.rate().is_some_and(|r| r > 20.0));
    }

    #[test]
    fn a_late_timer_does_not_lose_slots_but_an_idle_pacer_does_not_burst() {
        let start = Instant::now();
        let p = paced_at(10, start);
        let open = start + ms(10);
        // Due at open + 100 ms, let through 3 ms late: the next is still due at open + 200 ms.
        assert_eq!(p.try_take(open + ms(103), 1), Ok(()));
        assert_eq!(p.try_take(open + ms(150), 1), Err(ms(50)));
        // Idle for a second: the next slot counts from at most 5 ms back.
        assert_eq!(p.try_take(open + ms(1200), 1), Ok(()));
        assert_eq!(p.try_take(open + ms(1200), 1), Err(ms(95)));
    }

    #[test]
    fn the_open_slot_goes_to_the_request_refused_most_often() {
        let p = Pacer::default();
        let now = Instant::now();
        let second = Waiting::new(&p.retries_waiting[0]);
        assert_eq!(p.try_take(now, 1), Err(YIELD));
        let third = Waiting::new(&p.retries_waiting[1]);
        assert_eq!(p.try_take(now, 2), Err(YIELD));
        assert_eq!(p.try_take(now, 3), Ok(()));
        drop(third);
        assert_eq!(p.try_take(now, 2), Ok(()));
        drop(second);
        assert_eq!(p.try_take(now, 1), Ok(()));
        assert_eq!(priority(9), Some(2));
    }
}
