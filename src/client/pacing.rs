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
//!   before it, less those of them refused, are what the server admits in a second. It settles
//!   once the gate is open and those requests are answered (at most a second after the 429): a
//!   server slow to answer a burst of a hundred had not refused all it would when a `Retry-After`
//!   of a few milliseconds opened the gate, and the estimate took the rest for admitted.
//!   Under-counting is safe (the rate grows from it), over-counting is not (every request sent
//!   too soon is refused), so the count is over a whole second even when the batch began a
//!   moment before. (A batch opens with a few requests in flight and adds one per answer, so
//!   few are refused before this first 429 tells it anything.) When only one of those requests,
//!   or fewer than one in [`UNBOUND_SHARE`], was refused (one transient 429, or a limit the
//!   batch's concurrency never reached), the server was not what bounded them: the batch waits
//!   out the gate and runs on unpaced.
//! - The estimate is a floor: until the first 429 at pace, each success adds one request a
//!   second ([`SLOW_START`]), so the rate grows by its own size each second.
//! - From then on, additive increase and multiplicative decrease on that rate, as TCP does with
//!   its window: a 429 for a request sent at the current pace (one let through after the last
//!   slowdown; earlier ones were already answered by it) cuts the rate to [`BACK_OFF`] of itself,
//!   and marks that rate as the ceiling; each success climbs back towards the ceiling by a fixed
//!   share of it per second, then probes past it by a fixed share of the rate per second. A
//!   server with a token bucket banks the tokens of the slow stretch and hands them back on the
//!   fast one, so the average stays at its rate. A rate that climbs [`UNPACE`] times past the
//!   ceiling without a 429, while no request waits for its slot, means the limit is gone: the
//!   pacing stops.
//! - Several clients (threads, processes, Dask workers) may share one organization's limit, each
//!   with its own pacer. Then a first estimate or a ceiling is only this client's share, which
//!   grows when the others finish: a batch whose burst met a bucket another client had drained
//!   estimates one request a second. So the rate grows from the estimate by slow start, and the
//!   probe past a ceiling grows it by a share of itself per second, whatever its scale (it once
//!   grew by 2 % per success, which at one a second took a minute to reach a limit of 20, so
//!   such a client crawled), and the pacing never stops while requests queue for their slots
//!   (unpacing let the whole queue go at once into the bucket the other client kept empty,
//!   costing each of them an attempt).
//! - A retry never queues behind first attempts, nor a third attempt behind second ones: the
//!   open slot goes to the waiting request refused most often, so a request refused once is not
//!   the one that meets the next probe. A request's last attempt (one more refusal fails its
//!   window) waits until the latest answer is not a refusal ([`Pacer::admit`]).
//! - Other clients' bursts, which this one cannot see, refuse some requests however well it
//!   paces: the transport retries a request refused while the pacer's other requests succeed
//!   without spending its retry budget (`Transport::execute_paced`), so such refusals cost time,
//!   never a window.
//!
//! One pacer belongs to a client's transport, so concurrent `embed_many` calls of one client
//! (threads, tasks) learn the server's rate together instead of each spending it on its own.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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
/// At or past the ceiling, each success raises the rate by this many requests a second: as the
/// successes come `rate` times a second, the rate grows by this share of itself per second
/// (x1.65), whatever its scale, so a rate ten times too low is back at the limit in 5 s.
const PROBE: f64 = 0.5;
/// After the first estimate and until the first 429 at pace, each success raises the rate by
/// this many requests a second: as successes come `rate` times a second, the rate grows by its
/// own size each second (e-fold, as TCP's slow start doubles each round trip), so an estimate
/// twenty times too low is left in three and a half seconds.
const SLOW_START: f64 = 1.0;
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
/// The longest a request's last attempt waits for an answer that is not a refusal (see
/// [`Pacer::admit`]); then it goes anyway.
const LAST_ATTEMPT_WAIT: Duration = Duration::from_secs(2);
/// How often a last attempt looks again while it waits for that answer.
const LAST_ATTEMPT_LOOK: Duration = Duration::from_millis(5);
/// How often a request looks again while the first estimate waits for its answers.
const ANSWERS: Duration = Duration::from_millis(5);

/// The first estimate of the server's rate, open from the first 429 until the gate opens and
/// the requests it counts are answered.
#[derive(Debug)]
struct Estimate {
    /// Requests let through in the `WINDOW` before the 429 are those from `since` to `until`.
    since: Instant,
    until: Instant,
    admitted: usize,
    refused: usize,
    succeeded: usize,
}

impl Estimate {
    fn counts(&self, ticket: Instant) -> bool {
        ticket >= self.since && ticket <= self.until
    }
}

#[derive(Debug)]
struct State {
    /// Requests per second; `None` while unpaced.
    rate: Option<f64>,
    /// The rate at the last slowdown.
    ceiling: f64,
    /// From the first estimate until the first 429 at pace: the estimate is only a floor.
    slow_start: bool,
    /// When a request last found its slot shut: the pacing was holding a queue back.
    held: Option<Instant>,
    /// No request starts before this (the server's `Retry-After`).
    gate: Instant,
    /// The earliest start of the next request while paced.
    next: Instant,
    /// When the rate was last set from a 429: a 429 for a request let through before it says
    /// nothing about the rate now.
    slowed: Option<Instant>,
    /// When the requests of the last `WINDOW` were let through.
    admitted: VecDeque<Instant>,
    /// When the requests that succeeded in the last `WINDOW` were let through: those of the
    /// first estimate's that were answered before its 429.
    answered: VecDeque<Instant>,
    estimate: Option<Estimate>,
    /// The latest answer was a 429.
    refusing: bool,
}

impl State {
    /// When the next request may start, settling the first estimate once the gate is open and
    /// the requests it counts are answered.
    fn open_at(&mut self, now: Instant) -> Instant {
        if now >= self.gate {
            // A server slow to answer the batch's first burst (a hundred refusals take it a
            // while) has not refused all it will when a short `Retry-After` opens the gate: the
            // count would take those for admitted and over-estimate the rate several times over,
            // which the retries sent at it then pay for. So wait for the answers, but no longer
            // than a `WINDOW` (an answer that never comes, an encoder that takes seconds).
            let answered = |e: &Estimate| e.refused + e.succeeded >= e.admitted || now >= e.until + WINDOW;
            if self.estimate.as_ref().is_some_and(|e| !answered(e)) {
                return now + ANSWERS;
            }
            if let Some(estimate) = self.estimate.take() {
                // Refusals this rare say the server admitted what the batch sent: what bounded
                // the count was the batch, not the server, and the gate was all it asked for.
                // One refusal alone is a transient too: a batch opens with few requests in
                // flight, so one of its first eight refused is not one in ten of a second's worth.
                if estimate.refused > 1 && estimate.refused >= estimate.admitted.div_ceil(UNBOUND_SHARE) {
                    let admitted = estimate.admitted.saturating_sub(estimate.refused) as f64;
                    let rate = (admitted / WINDOW.as_secs_f64()).max(MIN_RATE);
                    self.rate = Some(rate);
                    self.ceiling = rate;
                    self.slow_start = true;
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
    /// Requests that succeeded so far (see [`Pacer::successes`]).
    successes: AtomicU64,
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
                slow_start: false,
                held: None,
                gate: now,
                next: now,
                slowed: None,
                admitted: VecDeque::new(),
                answered: VecDeque::new(),
                estimate: None,
                refusing: false,
            }),
            turn: tokio::sync::Mutex::new(()),
            retries_waiting: Default::default(),
            successes: AtomicU64::new(0),
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
            s.held = Some(now);
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
    ///
    /// A `last` attempt (the retry rule allows no other) first waits, [`LAST_ATTEMPT_WAIT`] at
    /// most, until the latest answer is not a refusal: a refusal there fails the request's
    /// window, and a server that has just refused is the likeliest to refuse again. When several
    /// clients share one limit, each learns only its share, and the others drain the bucket in
    /// bursts this client cannot see; a request refused twice meets such a burst half the time.
    /// It does not wait in the queue meanwhile, so the requests that probe for it go on.
    pub async fn admit(&self, attempt: u32, last: bool) -> Instant {
        if last {
            let deadline = Instant::now() + LAST_ATTEMPT_WAIT;
            while self.state.lock().refusing && Instant::now() < deadline {
                tokio::time::sleep(LAST_ATTEMPT_LOOK).await;
            }
        }
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
        s.refusing = true;
        s.gate = s.gate.max(now + wait);
        if let Some(estimate) = &mut s.estimate {
            if estimate.counts(ticket) {
                estimate.refused += 1;
            }
            return;
        }
        match s.rate {
            None => {
                let since = now.checked_sub(WINDOW).unwrap_or(now);
                let admitted = s.admitted.iter().filter(|&&t| t >= since).count();
                let refused = usize::from(ticket >= since);
                let succeeded = s.answered.iter().filter(|&&t| t >= since).count();
                s.estimate = Some(Estimate { since, until: now, admitted, refused, succeeded });
            }
            Some(rate) if s.slowed.is_none_or(|slowed| ticket >= slowed) => {
                s.ceiling = rate;
                s.slow_start = false;
                s.rate = Some((rate * BACK_OFF).max(MIN_RATE));
                s.slowed = Some(now);
            }
            Some(_) => {}
        }
    }

    /// A request let through at `ticket` succeeded: the rate climbs back towards the ceiling,
    /// then probes past it.
    pub fn succeeded(&self, ticket: Instant) {
        self.succeeded_at(ticket, Instant::now());
    }

    fn succeeded_at(&self, ticket: Instant, now: Instant) {
        self.successes.fetch_add(1, Ordering::AcqRel);
        let mut s = self.state.lock();
        s.refusing = false;
        if let Some(estimate) = s.estimate.as_mut().filter(|e| e.counts(ticket)) {
            estimate.succeeded += 1;
        }
        if s.rate.is_none() {
            while s.answered.front().is_some_and(|&t| now.saturating_duration_since(t) > WINDOW) {
                s.answered.pop_front();
            }
            s.answered.push_back(ticket);
        }
        if let Some(rate) = s.rate {
            let rate = if s.slow_start {
                rate + SLOW_START
            } else if rate < s.ceiling {
                rate + CLIMB * s.ceiling / rate
            } else {
                rate + PROBE
            };
            // Far past the ceiling, and nothing held back for a while: the limit is gone. While
            // requests queue for their slots the ceiling may be only this client's share of a
            // limit others use too, and ending the pacing would let the whole queue go at once
            // into a bucket they keep empty, costing every request in it an attempt.
            let holding = s.held.is_some_and(|held| now.saturating_duration_since(held) < WINDOW);
            s.rate = if rate > UNPACE * s.ceiling && !holding { None } else { Some(rate) };
        }
    }

    /// How many requests have succeeded so far: a request refused while this grew was refused
    /// for its turn, not because the server admits nothing.
    pub fn successes(&self) -> u64 {
        self.successes.load(Ordering::Acquire)
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
    fn the_first_estimate_waits_for_the_answers_of_the_requests_it_counts() {
        // 64 let through at once, 44 refused: a server slow to answer them has refused 10 with a
        // 5 ms Retry-After when the gate opens, and refuses the other 34 after.
        let p = Pacer::default();
        let start = Instant::now();
        let_through(&p, start, 64);
        for _ in 0..12 {
            p.succeeded(start); // answered before the first 429
        }
        for _ in 0..10 {
            p.rate_limited(start, start + ms(1), Some(ms(5)));
        }
        // It once settled here, at 54 a second, which two clients together overshot until the
        // retries sent at it ran out.
        assert_eq!(p.try_take(start + ms(6), 2), Err(ANSWERS));
        for _ in 0..34 {
            p.rate_limited(start, start + ms(40), Some(ms(5)));
        }
        assert!(p.try_take(start + ms(46), 2).is_err(), "8 answers still to come");
        for _ in 0..8 {
            p.succeeded(start);
        }
        assert_eq!(p.try_take(start + ms(46), 2), Ok(()));
        assert_eq!(p.rate(), Some(20.0));
    }

    #[test]
    fn the_first_estimate_waits_for_its_answers_a_second_at_most() {
        let p = Pacer::default();
        let start = Instant::now();
        let_through(&p, start, 64);
        for _ in 0..44 {
            p.rate_limited(start, start + ms(1), Some(ms(5)));
        }
        assert!(p.try_take(start + ms(1000), 2).is_err());
        assert_eq!(p.try_take(start + ms(1001), 2), Ok(()));
        assert_eq!(p.rate(), Some(20.0));
    }

    #[test]
    fn one_transient_429_only_shuts_the_gate() {
        // 8: a batch's opening; one refused of them is more than one in ten, and still a
        // transient (the batch once went on at 8 a second after it).
        for opening in [8, 16] {
            one_transient_429_among(opening);
        }
    }

    fn one_transient_429_among(opening: usize) {
        let p = Pacer::default();
        let start = Instant::now();
        let_through(&p, start, opening);
        p.rate_limited(start, start + ms(2), Some(Duration::from_secs(1)));
        let open = start + ms(1002);
        assert!(p.try_take(open - ms(1), 1).is_err());
        for _ in 0..16 {
            assert_eq!(p.try_take(open, 1), Ok(()));
        }
        assert_eq!(p.rate(), None);
    }

    #[test]
    fn successes_far_past_the_ceiling_end_the_pacing_once_nothing_is_held_back() {
        let p = Pacer::default();
        let start = Instant::now();
        let_through(&p, start, 30);
        for _ in 0..10 {
            p.rate_limited(start, start + ms(2), Some(ms(50)));
        }
        for _ in 0..20 {
            p.succeeded(start);
        }
        let open = start + ms(52);
        assert_eq!(p.try_take(open, 1), Ok(()));
        assert_eq!(p.rate(), Some(20.0));
        // Requests queue for their slots: the ceiling may be this client's share of a limit
        // others use too, so the pacing goes on however high the rate climbs.
        assert!(p.try_take(open, 1).is_err());
        for _ in 0..1000 {
            p.succeeded_at(open, open + ms(500));
        }
        assert!(p.rate().is_some_and(|r| r > UNPACE * 20.0));
        // A second with no request held back: the limit is gone.
        p.succeeded_at(open, open + ms(1001));
        assert_eq!(p.rate(), None, "a rate 4 times past the ceiling without a 429 is no limit");
    }

    /// Seconds a pacer at `rate()` takes for `successes` successes, each at its own pace.
    fn seconds_of(p: &Pacer, successes: usize) -> f64 {
        let mut seconds = 0.0;
        for _ in 0..successes {
            seconds += 1.0 / p.rate().unwrap_or(f64::INFINITY);
            p.succeeded(Instant::now());
        }
        seconds
    }

    #[test]
    fn a_first_estimate_far_below_the_limit_is_only_a_floor() {
        // The batch's burst met a bucket another client had drained: 64 let through, 63
        // refused, so the estimate says 1 a second where the server admits 20 (and will admit
        // them all to this client once the other is done).
        let p = Pacer::default();
        let start = Instant::now();
        let_through(&p, start, 64);
        for _ in 0..63 {
            p.rate_limited(start, start + ms(2), Some(ms(50)));
        }
        p.succeeded(start);
        let open = start + ms(52);
        assert_eq!(p.try_take(open, 1), Ok(()));
        assert_eq!(p.rate(), Some(MIN_RATE));
        // The rest of the batch queues for its slots.
        assert!(p.try_take(open, 2).is_err());
        // Until the first 429 at pace, the estimate is only a floor: the rate grows by its own
        // size each second, whatever its scale, so it is at 20 a second within three and a half
        // seconds of its own successes (it once took a minute, growing by a share of itself per
        // success, which is next to nothing at one a second).
        let mut seconds = 0.0;
        while p.rate().is_some_and(|r| r < 20.0) {
            seconds += seconds_of(&p, 1);
        }
        assert!(seconds < 4.0, "{seconds:.1} s from 1 to 20 requests a second");
        // Past 4 times the estimate with the queue still held back: still paced (ending the
        // pacing let the queue go at once into the bucket the other client keeps empty).
        assert_eq!(p.rate().map(|r| r > UNPACE * MIN_RATE), Some(true));
    }

    #[test]
    fn the_first_429_at_pace_ends_the_slow_start() {
        let start = Instant::now();
        let p = paced_at(20, start);
        let open = start + ms(10);
        p.succeeded(open);
        assert_eq!(p.rate(), Some(21.0), "slow start: one more a second per success");
        p.rate_limited(open, open + ms(60), Some(ms(50)));
        assert_eq!(p.rate(), Some(21.0 * BACK_OFF));
        // Now additive increase back towards the ceiling (21), a share of it per success.
        p.succeeded(open + ms(60));
        let climbed = p.rate().unwrap_or_default() - 21.0 * BACK_OFF;
        assert!((climbed - CLIMB * 21.0 / (21.0 * BACK_OFF)).abs() < 1e-9, "{climbed}");
    }

    #[tokio::test]
    async fn a_last_attempt_waits_until_the_latest_answer_is_not_a_refusal() {
        let start = Instant::now();
        let p = std::sync::Arc::new(paced_at(1000, start));
        p.rate_limited(start + ms(10), Instant::now(), Some(ms(0)));
        let last = tokio::spawn({
            let p = p.clone();
            async move { p.admit(3, true).await }
        });
        tokio::time::sleep(ms(100)).await;
        assert!(!last.is_finished(), "sent straight after a refusal, which fails its window half the time");
        // Another request is not held back meanwhile: it probes for it.
        let other = p.admit(2, false).await;
        p.succeeded(other);
        assert!(tokio::time::timeout(LAST_ATTEMPT_WAIT, last).await.is_ok());
    }

    /// A pacer that learnt a rate of `rate` a second at `start + 10 ms`, when it let a request through.
    fn paced_at(rate: usize, start: Instant) -> Pacer {
        let p = Pacer::default();
        let_through(&p, start, 2 * rate);
        for _ in 0..rate {
            p.rate_limited(start, start, Some(ms(10)));
            p.succeeded(start);
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
        // A request let through after the first 429 but before the rate was set was refused:
        // nothing to learn.
        p.rate_limited(start + ms(5), open + ms(1), Some(ms(50)));
        assert_eq!(p.rate(), Some(20.0));
        // One let through at the current pace was: back off, once for the whole wave.
        p.rate_limited(open, open + ms(2), Some(ms(50)));
        p.rate_limited(open, open + ms(3), Some(ms(50)));
        assert_eq!(p.rate(), Some(20.0 * BACK_OFF));
        // Successes climb back to the ceiling in about a second of them, then probe past it.
        let mut successes = 0;
        while p.rate().is_some_and(|r| r < 20.0) {
            p.succeeded(Instant::now());
            successes += 1;
        }
        assert!((10..=20).contains(&successes), "{successes}");
        p.succeeded(Instant::now());
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
