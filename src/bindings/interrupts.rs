//! A Ctrl-C that lands in Python code we run on the side, where no exception can come back.
//!
//! Python runs pending signal handlers inside any Python code, so a `KeyboardInterrupt` can be
//! raised by code a binding calls along the way: delivering a log line (the user's handlers), a
//! user object's `tolist` while an argument is read, numpy's `copy`. Those places can only report
//! a bad argument or nothing at all; dropping the exception there loses the user's Ctrl-C. They
//! hand it to `keep` instead, and the binding call it happened in (`catching`, which every
//! `guard`ed binding and every blocking wait on a lane opens) raises it when it returns.

use std::cell::RefCell;

use pyo3::exceptions::{PyException, PyKeyboardInterrupt};
use pyo3::prelude::*;

thread_local! {
    /// `Some` while a `catching` scope is open on this thread; holds the first exception kept.
    static KEPT: RefCell<Option<Option<PyErr>>> = const { RefCell::new(None) };
}

/// Runs `f` (which may release the GIL), returning with its result the first exception `keep`
/// was given on this thread meanwhile. The caller raises it in place of the result.
pub fn catching<R>(f: impl FnOnce() -> R) -> (R, Option<PyErr>) {
    struct Scope(Option<Option<PyErr>>);
    impl Drop for Scope {
        fn drop(&mut self) {
            // Restores the enclosing scope's slot (a wait on a lane inside a guarded binding).
            let outer = self.0.take();
            KEPT.with(|slot| *slot.borrow_mut() = outer);
        }
    }
    let scope = Scope(KEPT.with(|slot| slot.borrow_mut().replace(None)));
    let result = f();
    let kept = KEPT.with(|slot| slot.borrow_mut().as_mut().and_then(Option::take));
    drop(scope);
    (result, kept)
}

/// Takes an exception that Python code run on the side raised, when it came from a signal
/// handler (anything that is not an `Exception`, such as `KeyboardInterrupt`): the open
/// `catching` scope raises it. With no scope open, a `KeyboardInterrupt` is signalled again, so
/// Python raises it at its next check. Returns ordinary errors, which are the caller's to report.
pub fn keep(py: Python<'_>, err: PyErr) -> Option<PyErr> {
    if err.is_instance_of::<PyException>(py) {
        return Some(err);
    }
    let unclaimed = KEPT.with(|slot| match slot.borrow_mut().as_mut() {
        Some(kept) => {
            kept.get_or_insert(err);
            None
        }
        None => Some(err),
    });
    if let Some(err) = unclaimed {
        if err.is_instance_of::<PyKeyboardInterrupt>(py) {
            // SAFETY: needs no GIL and only sets a flag; Python raises at its next signal check.
            unsafe { pyo3::ffi::PyErr_SetInterrupt() };
        } else {
            err.write_unraisable(py, None);
        }
    }
    None
}

/// [`keep`] for an error the caller goes on to report as well (as a bad argument): a copy is kept
/// when it came from a signal handler.
pub fn keep_copy(py: Python<'_>, err: &PyErr) {
    if !err.is_instance_of::<PyException>(py) {
        keep(py, err.clone_ref(py));
    }
}
