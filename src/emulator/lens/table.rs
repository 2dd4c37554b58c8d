//! The spec's Lens session state table, written once as data, and the two spellings of a status
//! the platform is seen to send (the enum string and a bare number).

use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Registered,
    Running,
    Destroyed,
    Expired,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trigger {
    /// The runner picked the session up (the emulator's clock: `START_DELAY` after creation).
    RunnerStart,
    /// `POST /lens/sessions/destroy` or the `session.destroy` WebSocket event.
    Destroy,
    /// No sensor activity for `session_ttl_sec`.
    Expire,
}

/// `(from, trigger) -> to`, the spec's rows. "active" is registered or running; "any" for expiry
/// means any state a session can still be found in (a destroyed session is already gone).
const TABLE: &[(Status, Trigger, Status)] = &[
    (Status::Registered, Trigger::RunnerStart, Status::Running),
    (Status::Registered, Trigger::Destroy, Status::Destroyed),
    (Status::Running, Trigger::Destroy, Status::Destroyed),
    (Status::Registered, Trigger::Expire, Status::Expired),
    (Status::Running, Trigger::Expire, Status::Expired),
];

/// The state `trigger` moves `from` to; `None` when the table has no such move (the caller
/// answers `session_not_found`, since only destroyed or expired sessions refuse a move).
pub(crate) fn transition(from: Status, trigger: Trigger) -> Option<Status> {
    TABLE.iter().find(|(f, t, _)| *f == from && *t == trigger).map(|(_, _, to)| *to)
}

impl Status {
    pub fn is_active(self) -> bool {
        matches!(self, Status::Registered | Status::Running)
    }

    fn enum_name(self) -> &'static str {
        match self {
            Status::Registered => "SESSION_STATUS_REGISTERED",
            Status::Running => "SESSION_STATUS_RUNNING",
            Status::Destroyed => "SESSION_STATUS_DESTROYED",
            Status::Expired => "SESSION_STATUS_EXPIRED",
        }
    }

    /// The bare-number spelling. The notes show `"3"` without its meaning; the emulator numbers
    /// the states in their order of life, leaving 0 for "unspecified" and 2 and 4 for states the
    /// spec does not show (starting, failed), so that running is 3.
    fn number(self) -> &'static str {
        match self {
            Status::Registered => "1",
            Status::Running => "3",
            Status::Destroyed => "5",
            Status::Expired => "6",
        }
    }

    pub fn spelled(self, style: StatusStyle) -> String {
        match style {
            StatusStyle::Enum => format!("LensSessionStatus.{}", self.enum_name()),
            StatusStyle::Number => self.number().to_string(),
        }
    }
}

/// How `session_status` is written on the wire (`Emulator(lens_status_style=...)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StatusStyle {
    /// `LensSessionStatus.SESSION_STATUS_RUNNING`, as the spec writes it.
    #[default]
    Enum,
    /// `"3"`, as some deployments send it (wire notes).
    Number,
}

impl StatusStyle {
    pub const NAMES: &'static [&'static str] = &["enum", "number"];

    pub fn as_str(self) -> &'static str {
        match self {
            StatusStyle::Enum => "enum",
            StatusStyle::Number => "number",
        }
    }
}

impl FromStr for StatusStyle {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "enum" => Ok(StatusStyle::Enum),
            "number" => Ok(StatusStyle::Number),
            other => Err(format!("lens_status_style is {other:?}; it takes one of {}", StatusStyle::NAMES.join(", "))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_table() {
        assert_eq!(transition(Status::Registered, Trigger::RunnerStart), Some(Status::Running));
        assert_eq!(transition(Status::Running, Trigger::RunnerStart), None, "a runner starts a session once");
        for active in [Status::Registered, Status::Running] {
            assert!(active.is_active());
            assert_eq!(transition(active, Trigger::Destroy), Some(Status::Destroyed));
            assert_eq!(transition(active, Trigger::Expire), Some(Status::Expired));
        }
        for gone in [Status::Destroyed, Status::Expired] {
            assert!(!gone.is_active());
            assert_eq!(transition(gone, Trigger::Destroy), None, "destroying twice is refused");
            assert_eq!(transition(gone, Trigger::RunnerStart), None);
        }
    }

    #[test]
    fn both_spellings() {
        assert_eq!(Status::Registered.spelled(StatusStyle::Enum), "LensSessionStatus.SESSION_STATUS_REGISTERED");
        assert_eq!(Status::Running.spelled(StatusStyle::Enum), "LensSessionStatus.SESSION_STATUS_RUNNING");
        assert_eq!(Status::Running.spelled(StatusStyle::Number), "3");
        assert_eq!("number".parse::<StatusStyle>(), Ok(StatusStyle::Number));
        assert!("Enum".parse::<StatusStyle>().unwrap_err().contains("enum, number"));
    }
}
