//! Which fork of the process this is. Pooled connections, runtimes and their event loops belong
//! to the process that made them: after `os.fork` the child must build its own and leave the
//! parent's alone (their threads do not exist in the child, and their epoll instances are shared
//! with the parent, so even closing them would disturb it).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

/// Bumped in the child after every `fork`. Comparing it is a plain atomic load, where the pid
/// check it replaces was a `getpid` system call on every request.
static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);
static ATFORK: Once = Once::new();

extern "C" fn after_fork_in_child() {
    // Async-signal-safe: one atomic add, nothing else.
    FORK_GENERATION.fetch_add(1, Ordering::SeqCst);
}

/// 0 in the process that loaded the module, and different in every child forked after that.
/// Registers the `pthread_atfork` handler on first use, which is before any runtime or client
/// exists, so no fork can be missed.
pub fn generation() -> u64 {
    ATFORK.call_once(|| {
        // SAFETY: registers a handler that only touches an atomic. If registration fails
        // (ENOMEM), fork detection is lost; say so rather than fail every request.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
        if rc != 0 {
            log::warn!("sensorium: pthread_atfork failed ({rc}); clients must not be used across fork");
        }
    });
    FORK_GENERATION.load(Ordering::Acquire)
}
