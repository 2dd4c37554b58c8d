//! The spec's Agent state table, written once as data. Every handler that moves an agent asks
//! `transition`; a move not in the table is refused with the table's 409.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Status {
    Running,
    Paused,
    Completed,
    Failed,
    Canceled,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Running => "running",
            Status::Paused => "paused",
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Canceled => "canceled",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Completed | Status::Failed | Status::Canceled)
    }

    /// Filter values as users send them (`cancelled` is a deployment's spelling of `canceled`).
    pub fn parse(text: &str) -> Option<Status> {
        match text.to_ascii_lowercase().as_str() {
            "running" => Some(Status::Running),
            "paused" => Some(Status::Paused),
            "completed" => Some(Status::Completed),
            "failed" => Some(Status::Failed),
            "canceled" | "cancelled" => Some(Status::Canceled),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trigger {
    Pause,
    Resume,
    Cancel,
    Delete,
    /// The executor: the run's work is done (or failed).
    Complete,
    Fail,
}

/// `None` as the target of `Delete`: the agent is removed.
type Row = (Status, Trigger, Option<Status>);

/// `(from, trigger) -> to`. From the spec's table; resume (its next state "not shown") goes back to
/// `running`; delete is allowed once terminal ("a running or paused agent must be canceled before
/// it is deleted").
const TABLE: &[Row] = &[
    (Status::Running, Trigger::Pause, Some(Status::Paused)),
    (Status::Paused, Trigger::Resume, Some(Status::Running)),
    (Status::Running, Trigger::Cancel, Some(Status::Canceled)),
    (Status::Paused, Trigger::Cancel, Some(Status::Canceled)),
    (Status::Running, Trigger::Complete, Some(Status::Completed)),
    (Status::Running, Trigger::Fail, Some(Status::Failed)),
    (Status::Completed, Trigger::Delete, None),
    (Status::Failed, Trigger::Delete, None),
    (Status::Canceled, Trigger::Delete, None),
];

/// The message of the 409 for a move the table refuses. The spec gives the conditions, not the
/// texts.
fn refusal(trigger: Trigger) -> &'static str {
    match trigger {
        Trigger::Pause => "Agent is not running.",
        Trigger::Resume => "Agent is not paused.",
        Trigger::Cancel => "Agent is already terminal.",
        Trigger::Delete => "Agent is running or paused; cancel it before deleting it.",
        Trigger::Complete | Trigger::Fail => "Agent is no longer running.",
    }
}

/// The state `trigger` moves `from` to (`Ok(None)`: removed), or the 409 message.
pub(crate) fn transition(from: Status, trigger: Trigger) -> Result<Option<Status>, &'static str> {
    TABLE
        .iter()
        .find(|(f, t, _)| *f == from && *t == trigger)
        .map(|(_, _, to)| *to)
        .ok_or_else(|| refusal(trigger))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_table() {
        assert_eq!(transition(Status::Running, Trigger::Pause), Ok(Some(Status::Paused)));
        assert!(transition(Status::Paused, Trigger::Pause).is_err());
        assert!(transition(Status::Completed, Trigger::Pause).is_err());
        assert_eq!(transition(Status::Paused, Trigger::Cancel), Ok(Some(Status::Canceled)));
        for terminal in [Status::Completed, Status::Failed, Status::Canceled] {
            assert_eq!(transition(terminal, Trigger::Cancel), Err("Agent is already terminal."));
            assert!(transition(terminal, Trigger::Resume).is_err(), "a canceled agent cannot be resumed");
            assert_eq!(transition(terminal, Trigger::Delete), Ok(None));
        }
        assert!(transition(Status::Running, Trigger::Delete).is_err());
        assert!(transition(Status::Paused, Trigger::Complete).is_err(), "a paused run does not complete");
        assert_eq!(Status::parse("CANCELLED"), Some(Status::Canceled));
    }
}
