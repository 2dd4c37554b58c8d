//! Blocking calls that drive their own I/O on the calling thread.
//!
//! A blocking call handed to the shared multi-threaded runtime costs three context switches: the
//! caller wakes a worker and sleeps, the worker sleeps in epoll until the answer comes, and then
//! wakes the caller. Polling the request on the caller's thread does not help by itself, since
//! the runtime's I/O driver stays with its workers. A *lane* is a single-threaded runtime with an
//! HTTP client whose connections live on it: the calling thread writes the request, waits in
//! epoll itself and reads the answer, one context switch. Measured with reqwest against the
//! emulator on the 2-core VM (a `/query` round trip, 4 alternating runs of 3,000): median 68-87
//! µs and 30-41 µs of CPU per call on a lane, against 83-88 µs and 38-54 µs through a worker.
//!
//! A lane is held by one thread at a time (taken from `Lanes` for one call and given back), so
//! its connection tasks run only while a call holds it. That is all an HTTP/1 connection needs:
//! an idle one has nothing to do, and one the server closed in the meantime is found closed when
//! the next call polls it; hyper then sends that call's request on a new connection (the request
//! was never written, so this is not a retry of the call). Lanes idle for longer than the pool's
//! idle timeout are closed the next time a lane is taken.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::runtime::{EnterGuard, Runtime};
use tokio::time::Sleep;

use super::error::Error;
use super::fork;
use super::proxy::Proxies;
use super::transport::{build_http_client, POOL_IDLE_TIMEOUT};

/// A single-threaded runtime and an HTTP client whose connections belong to it.
pub struct Lane {
    /// Always `Some` until dropped; taken out to shut it down without waiting.
    runtime: Option<Runtime>,
    http: reqwest::Client,
    idle_since: Instant,
    /// The timer that ends a slice of [`Lane::block_on_slice`], kept from call to call (see
    /// there); made by the first slice, inside the runtime it belongs to.
    slice_end: Mutex<Option<Pin<Box<Sleep>>>>,
}

impl Lane {
    fn new(connect_timeout: Duration, proxies: &Proxies) -> Result<Lane, Error> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::Config(format!("could not start an I/O loop for blocking calls: {e}")))?;
        let http = build_http_client(connect_timeout, proxies)?;
        Ok(Lane { runtime: Some(runtime), http, idle_since: Instant::now(), slice_end: Mutex::new(None) })
    }

    fn runtime(&self) -> &Runtime {
        // Only `Drop` takes it out.
        self.runtime.as_ref().unwrap_or_else(|| unreachable!("a lane's runtime is present until it is dropped"))
    }

    /// The HTTP client to use on this lane, and only on it: its connections' tasks run on the
    /// lane's runtime, so a request through it elsewhere would wait for a `block_on` here.
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// Runs `fut` to completion on the calling thread. Must not be called from inside a runtime.
    ///
    /// First the lane catches up with what happened while nobody drove it: a connection the
    /// server closed meanwhile has its FIN waiting in the lane's epoll, and until its task reads
    /// it the pool offers it as open. A request written into it fails with "connection closed
    /// before message completed" (the server never saw it, but the client cannot know that),
    /// which a lane-less client avoids because its workers read the FIN when it comes. Two yields
    /// are enough: on the first, the scheduler polls the I/O driver without waiting (waking the
    /// closed connections' tasks); before the second returns, it runs the tasks so woken. That
    /// costs two `epoll_wait` calls with a zero timeout.
    pub fn block_on<F: Future>(&self, fut: F) -> F::Output {
        self.runtime().block_on(async {
            tokio::task::yield_now().await;
            tokio::task::yield_now().await;
            fut.await
        })
    }

    /// [`Lane::block_on`] for at most about `slice`: `None` if `fut` has not finished by then (it
    /// can be polled on by another call). Blocking calls wait in slices so the caller can check
    /// for Ctrl-C in between.
    ///
    /// The timer is the lane's, kept from call to call and set again only once it has fired.
    /// Making one per call cost a system call per call: registering a timer earlier than any the
    /// runtime knows wakes its I/O driver (an eventfd write), even when, as here, the driver is
    /// not asleep. So a slice ends up to `slice` after the timer was last set, which may be
    /// sooner than `slice` from now; a caller only checks for Ctrl-C and goes on.
    pub fn block_on_slice<F: Future + Unpin>(&self, fut: &mut F, slice: Duration) -> Option<F::Output> {
        let mut slice_end = self.slice_end.lock();
        self.block_on(async {
            let slice_end = slice_end.get_or_insert_with(|| Box::pin(tokio::time::sleep(slice)));
            // After `block_on`'s yields, which let the runtime see a deadline that passed while
            // nobody drove the lane.
            if slice_end.is_elapsed() {
                let next = tokio::time::Instant::now() + slice;
                slice_end.as_mut().reset(next);
            }
            tokio::select! {
                biased;
                output = fut => Some(output),
                () = slice_end.as_mut() => None,
            }
        })
    }

    /// Makes the lane's runtime current, for dropping a future that belongs to it outside
    /// `block_on`.
    pub fn enter(&self) -> EnterGuard<'_> {
        self.runtime().enter()
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        // The timer goes while its runtime is still there.
        drop(self.slice_end.lock().take());
        // Without waiting for anything: a lane may be dropped from inside another runtime's
        // task, where a blocking shutdown would panic.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// At most this many lanes per HTTP configuration. Each holds three descriptors of its own
/// (tokio's epoll, a duplicate of it and an eventfd waker) besides its connections, so a pool of hundreds of threads must not make
/// one each; calls beyond the limit wait on the shared runtime instead, as they did before lanes.
pub const MAX_LANES: usize = 32;

/// The lanes of one HTTP configuration (a connect timeout).
pub struct Lanes {
    connect_timeout: Duration,
    /// The pool's proxy rules, read from the environment once for all its lanes.
    proxies: Proxies,
    /// The fork generation the lanes were made in (see `Drop`).
    generation: u64,
    slots: Mutex<Slots>,
}

struct Slots {
    /// Most recently used last: a call takes the warmest lane.
    idle: Vec<Lane>,
    /// Lanes in existence, idle or taken.
    live: usize,
}

impl Lanes {
    pub fn new(connect_timeout: Duration, proxies: Proxies, generation: u64) -> Lanes {
        Lanes { connect_timeout, proxies, generation, slots: Mutex::new(Slots { idle: Vec::new(), live: 0 }) }
    }

    /// An idle lane, or a new one when every lane is in use; `None` when `MAX_LANES` are in use
    /// or a new one cannot be made (then the call goes through the shared runtime). Making one
    /// costs about 2 ms: its HTTP client reads the CA certificates.
    pub fn take(&self) -> Option<Lane> {
        let (lane, stale) = {
            let mut slots = self.slots.lock();
            let expired =
                slots.idle.iter().take_while(|lane| lane.idle_since.elapsed() >= POOL_IDLE_TIMEOUT).count();
            let stale: Vec<Lane> = slots.idle.drain(..expired).collect();
            slots.live -= stale.len();
            let lane = slots.idle.pop();
            if lane.is_none() {
                if slots.live >= MAX_LANES {
                    return None;
                }
                slots.live += 1;
            }
            (lane, stale)
        };
        // Closed outside the lock.
        drop(stale);
        if lane.is_some() {
            return lane;
        }
        match Lane::new(self.connect_timeout, &self.proxies) {
            Ok(lane) => Some(lane),
            Err(err) => {
                self.slots.lock().live -= 1;
                log::debug!("blocking calls go through the shared runtime: {err}");
                None
            }
        }
    }

    /// Whether `take` would find an idle lane now (and not build one).
    pub fn has_idle(&self) -> bool {
        !self.slots.lock().idle.is_empty()
    }

    /// Returns a lane taken with `take`.
    pub fn give_back(&self, mut lane: Lane) {
        lane.idle_since = Instant::now();
        self.slots.lock().idle.push(lane);
    }

    #[cfg(test)]
    fn idle_count(&self) -> usize {
        self.slots.lock().idle.len()
    }
}

impl Drop for Lanes {
    fn drop(&mut self) {
        if self.generation != fork::generation() {
            // Inherited across fork: their epoll instances are shared with the parent, so closing
            // their connections here would take them out of the parent's event loop too.
            for lane in self.slots.get_mut().idle.drain(..) {
                std::mem::forget(lane);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// A server that answers every request with `ok`. With `close_after_answer` it closes each
    /// connection after one answer without saying so (no `Connection: close`): the client pools
    /// the connection, and finds it closed next time.
    fn server(close_after_answer: bool) -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}/", listener.local_addr().expect("addr"));
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                counter.fetch_add(1, Ordering::SeqCst);
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    loop {
                        // Requests without a body: each ends at its blank line.
                        let mut seen = Vec::new();
                        while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                            match stream.read(&mut buf) {
                                Ok(0) | Err(_) => return,
                                Ok(n) => seen.extend_from_slice(&buf[..n]),
                            }
                        }
                        if stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").is_err()
                            || close_after_answer
                        {
                            return;
                        }
                    }
                });
            }
        });
        (url, accepted)
    }

    async fn get(lane_http: &reqwest::Client, url: &str) -> Result<String, reqwest::Error> {
        lane_http.get(url).send().await?.text().await
    }

    #[test]
    fn a_slice_ends_on_the_lanes_timer_and_the_same_future_goes_on_in_the_next() {
        let lanes = Lanes::new(Duration::from_secs(5), Proxies::none(), fork::generation());
        let lane = lanes.take().expect("a lane");
        let slice = Duration::from_millis(5);
        let mut never = std::future::pending::<()>();
        for _ in 0..3 {
            // Each slice ends although the future never does: the timer is set again once fired.
            assert_eq!(lane.block_on_slice(&mut never, slice), None);
        }
        // A future polled across slices keeps its state, and a ready one ends its slice at once.
        let (tx, mut rx) = tokio::sync::oneshot::channel::<u8>();
        assert_eq!(lane.block_on_slice(&mut rx, slice), None);
        tx.send(7).expect("send");
        assert_eq!(lane.block_on_slice(&mut rx, slice), Some(Ok(7)));
        lanes.give_back(lane);
    }

    #[test]
    fn calls_one_after_another_reuse_the_lanes_connection() {
        let (url, accepted) = server(false);
        let lanes = Lanes::new(Duration::from_secs(5), Proxies::none(), fork::generation());
        for _ in 0..3 {
            let lane = lanes.take().expect("a lane");
            assert_eq!(lane.block_on(get(lane.http(), &url)).expect("request"), "ok");
            lanes.give_back(lane);
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    /// With the test above: the connection was pooled, so here the second call meets it closed.
    #[test]
    fn a_connection_the_server_closed_while_the_lane_was_idle_is_replaced_without_an_error() {
        let (url, accepted) = server(true);
        let lanes = Lanes::new(Duration::from_secs(5), Proxies::none(), fork::generation());
        for round in 1..=20 {
            let lane = lanes.take().expect("a lane");
            let body = lane.block_on(get(lane.http(), &url)).expect("the request succeeds");
            assert_eq!(body, "ok");
            lanes.give_back(lane);
            // Give the server time to close; nothing polls the lane meanwhile.
            std::thread::sleep(Duration::from_millis(10));
            assert_eq!(accepted.load(Ordering::SeqCst), round);
        }
        assert_eq!(lanes.idle_count(), 1, "one lane served the calls one after another");
    }

    #[test]
    fn calls_at_once_get_lanes_of_their_own_and_give_them_back() {
        let (url, _) = server(true);
        let lanes = Lanes::new(Duration::from_secs(5), Proxies::none(), fork::generation());
        let first = lanes.take().expect("a lane");
        let second = lanes.take().expect("a lane");
        assert_eq!(second.block_on(get(second.http(), &url)).expect("request"), "ok");
        assert_eq!(first.block_on(get(first.http(), &url)).expect("request"), "ok");
        lanes.give_back(first);
        lanes.give_back(second);
        assert_eq!(lanes.idle_count(), 2);
    }

    #[test]
    fn past_the_limit_calls_get_no_lane_until_one_is_given_back() {
        let lanes = Lanes::new(Duration::from_secs(5), Proxies::none(), fork::generation());
        let taken: Vec<Lane> = (0..MAX_LANES).map(|_| lanes.take().expect("a lane")).collect();
        assert!(lanes.take().is_none());
        for lane in taken {
            lanes.give_back(lane);
        }
        assert_eq!(lanes.idle_count(), MAX_LANES);
        assert!(lanes.take().is_some());
    }

    #[tokio::test]
    async fn a_lane_dropped_inside_another_runtime_does_not_panic() {
        let lanes = Lanes::new(Duration::from_secs(5), Proxies::none(), fork::generation());
        let lane = lanes.take().expect("a lane");
        drop(lane);
    }
}
