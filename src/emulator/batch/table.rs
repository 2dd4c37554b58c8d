//! The batch job status table as data: `(from, move) -> to`. Every handler and the executor's
//! job consult it, so a refused move is refused the same way everywhere (409 bare object).

use axum::http::StatusCode;

use crate::emulator::api_error::ApiError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Move {
    Start,
    Complete,
    Fail,
    Cancel,
    Retry,
}

/// Batch jobs have no admitted or paused state (wire notes: `PENDING`, `RUNNING`, `COMPLETED`,
/// `FAILED`, `CANCELLED`). A job that processed every input is `COMPLETED` even when some inputs
/// failed; retry runs a failed or cancelled job again from `PENDING`.
const TABLE: &[(&str, Move, &str)] = &[
    ("PENDING", Move::Start, "RUNNING"),
    ("RUNNING", Move::Complete, "COMPLETED"),
    ("RUNNING", Move::Fail, "FAILED"),
    ("PENDING", Move::Cancel, "CANCELLED"),
    ("RUNNING", Move::Cancel, "CANCELLED"),
    ("FAILED", Move::Retry, "PENDING"),
    ("CANCELLED", Move::Retry, "PENDING"),
];

pub(crate) const TERMINAL: &[&str] = &["COMPLETED", "FAILED", "CANCELLED"];

pub(crate) fn transition(from: &str, action: Move) -> Option<&'static str> {
    TABLE.iter().find(|(f, m, _)| *f == from && *m == action).map(|(_, _, to)| *to)
}

/// The move from `from`, or the 409 the platform gives for it ("already terminal" for cancel).
pub(crate) fn apply(job_id: &str, from: &str, action: Move) -> Result<&'static str, ApiError> {
    transition(from, action).ok_or_else(|| {
        let message = match action {
            Move::Cancel => format!("Job '{job_id}' is already {from} and cannot be cancelled."),
            Move::Retry => format!("Job '{job_id}' is {from}; only FAILED or CANCELLED jobs can be retried."),
            _ => format!("Job '{job_id}' is {from} and cannot be moved that way."),
        };
        ApiError::new(StatusCode::CONFLICT, "conflict", message).bare()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_batch_table() {
        assert_eq!(transition("PENDING", Move::Start), Some("RUNNING"));
        assert_eq!(transition("RUNNING", Move::Complete), Some("COMPLETED"));
        assert_eq!(transition("RUNNING", Move::Fail), Some("FAILED"));
        for from in ["PENDING", "RUNNING"] {
            assert_eq!(transition(from, Move::Cancel), Some("CANCELLED"), "{from}");
            assert_eq!(transition(from, Move::Retry), None, "{from}");
        }
        for terminal in TERMINAL {
            assert_eq!(transition(terminal, Move::Cancel), None, "{terminal}");
            assert_eq!(transition(terminal, Move::Complete), None, "{terminal}");
        }
        assert_eq!(transition("FAILED", Move::Retry), Some("PENDING"));
        assert_eq!(transition("CANCELLED", Move::Retry), Some("PENDING"));
        assert_eq!(transition("COMPLETED", Move::Retry), None, "a completed job is not re-run");
        assert_eq!(transition("PENDING", Move::Complete), None, "a job runs before it completes");
        let refused = apply("job_1", "COMPLETED", Move::Cancel).unwrap_err();
        assert_eq!(refused.status, StatusCode::CONFLICT);
        assert!(refused.bare && refused.message.contains("already COMPLETED"));
    }
}
