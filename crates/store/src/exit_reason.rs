//! Why a run ended: [`ExitReason`], the value on the session, report and
//! outbox rows, and the well-known reasons as text constants.
//!
//! This is the one list of exit reasons. The store writes and matches a few
//! of them itself ([`AWAITING_USER`] makes a `running` session idle,
//! [`CANCELLED`] ends an idle one); the session layer and the runners use
//! the rest. `korvus-runner` re-exports this module as `exit`.

use std::borrow::Cow;
use std::fmt;

/// The run finished its investigation.
pub const COMPLETED: &str = "completed";
/// Not terminal: the agent waits for the user; the row stays `running`.
pub const AWAITING_USER: &str = "awaiting_user";
/// The run was cancelled (by `cancel` or `stop`).
pub const CANCELLED: &str = "cancelled";
/// The run exceeded the configured run timeout.
pub const TIMEOUT: &str = "timeout";
/// The runner returned an error.
pub const RUNNER_FAILED: &str = "runner_failed";
/// Something in the run panicked; caught and settled.
pub const PANICKED: &str = "panicked";
/// The author phase did not finish, so no `report.md` — in particular
/// not a restored earlier one — is adopted as this revision's report.
pub const REPORT_AUTHOR_FAILED: &str = "report_author_failed";
/// `report.md` existed but could not be stored.
pub const REPORT_UPLOAD_FAILED: &str = "report_upload_failed";
/// The report row could not be written on an otherwise successful run.
pub const REPORT_PERSIST_FAILED: &str = "report_persist_failed";
/// The context refs could not be inserted after the session row was.
pub const CONTEXT_REFS_FAILED: &str = "context_refs_failed";
/// The session's turn log could not be created or opened.
pub const TURN_LOG_FAILED: &str = "turn_log_failed";
/// The scratch directory could not be prepared.
pub const WORKSPACE_FAILED: &str = "workspace_failed";
/// A runner handed over text that is not a valid exit reason (see
/// [`ExitReason`]); the original text goes into the
/// turn log as a note.
pub const INVALID_EXIT_REASON: &str = "invalid_exit_reason";
/// The manager running the session stopped renewing its lease (it was
/// killed or lost the database) and another manager took the session
/// over and ended it.
pub const OWNER_LOST: &str = "owner_lost";
/// The manager running the session could not renew its lease for long
/// enough that another manager might take the session over (a database
/// outage, a pause of the process): it cancelled the run and stopped
/// its agent itself, and the run landed what it had.
pub const LEASE_LOST: &str = "lease_lost";
/// The run's processes used more memory than their limit (resident
/// plus swap, the whole process tree) and were ended together.
pub const MEMORY_EXCEEDED: &str = "memory_exceeded";
/// The run's scratch dir grew past its size limit; the run was stopped.
pub const DISK_QUOTA_EXCEEDED: &str = "disk_quota_exceeded";
/// The run printed nothing and its processes used no CPU time for
/// longer than the stall limit; the run was stopped.
pub const STALLED: &str = "stalled";
/// The agent reported an error that ended its turn — its model
/// endpoint kept failing, or it gave up — and exited unsuccessfully
/// (an agent dialect such as Codex's or Claude Code's says so; the
/// log's notes carry the agent's message).
pub const AGENT_ERROR: &str = "agent_error";
/// Not terminal: the session spent its budget (tokens, cost or wall
/// time, per session or per incident) and korvus stopped its run. The
/// row stays `running` and idle, like [`AWAITING_USER`], with everything
/// the run made kept; raising the budget continues it.
pub const BUDGET_REACHED: &str = "budget_reached";

/// The exit reasons that leave a `running` session idle rather than end
/// it: a run that returned with one of them waits for an answer (or a
/// raised budget) to be continued. The SQL backends write the same set in
/// their queries and triggers.
pub const IDLE: &[&str] = &[AWAITING_USER, BUDGET_REACHED];

/// Every reason above: the only values a metric label takes
/// ([`ExitReason::label`]).
pub const ALL: &[&str] = &[
    COMPLETED,
    AWAITING_USER,
    CANCELLED,
    TIMEOUT,
    RUNNER_FAILED,
    PANICKED,
    REPORT_AUTHOR_FAILED,
    REPORT_UPLOAD_FAILED,
    REPORT_PERSIST_FAILED,
    CONTEXT_REFS_FAILED,
    TURN_LOG_FAILED,
    WORKSPACE_FAILED,
    INVALID_EXIT_REASON,
    OWNER_LOST,
    LEASE_LOST,
    MEMORY_EXCEEDED,
    DISK_QUOTA_EXCEEDED,
    STALLED,
    AGENT_ERROR,
    BUDGET_REACHED,
];

/// The label of a reason that is none of [`ALL`].
pub const OTHER: &str = "other";

/// `reason` as a metric label: itself when it is one of [`ALL`], else
/// [`OTHER`] — never free text, so a label has few values.
pub fn label(reason: &str) -> &'static str {
    ALL.iter().copied().find(|r| *r == reason).unwrap_or(OTHER)
}

/// Why a run ended: a short, printable code such as `completed` or
/// `exit_code_3`.
///
/// Invariants, checked by [`ExitReason::new`]:
///
/// - 1 to [`ExitReason::MAX_BYTES`] bytes, not blank;
/// - no control character (so no NUL, no newline).
///
/// Every valid reason fits every backend's exit-reason column, so no row
/// write can fail on an exit reason. Text from outside (a string an agent
/// printed) is converted with `From<String>`/`From<&str>`, which never
/// fails: invalid text becomes [`ExitReason::INVALID`] and keeps the
/// original, which the session layer writes into the turn log as a note
/// ([`rejected`](ExitReason::rejected)).
///
/// ```
/// use korvus_store::ExitReason;
///
/// assert_eq!(ExitReason::new("exit_code_3").unwrap(), "exit_code_3");
/// assert!(ExitReason::new("two\nlines").is_err());
///
/// let lossy = ExitReason::from("x".repeat(5_000));
/// assert_eq!(lossy, ExitReason::INVALID);
/// assert_eq!(lossy.rejected().map(str::len), Some(5_000));
/// ```
#[derive(Clone)]
pub struct ExitReason {
    text: Cow<'static, str>,
    rejected: Option<Box<str>>,
}

/// Text refused by [`ExitReason::new`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid exit reason: {reason}")]
#[non_exhaustive]
pub struct InvalidExitReason {
    /// Why the text was refused.
    pub reason: &'static str,
}

impl ExitReason {
    /// Whether this reason leaves a `running` session idle (one of
    /// [`IDLE`]: the session waits to be continued) rather than ends it.
    pub fn is_idle(&self) -> bool {
        IDLE.contains(&self.as_str())
    }

    /// The longest valid exit reason, in bytes.
    pub const MAX_BYTES: usize = 128;

    /// [`COMPLETED`].
    pub const COMPLETED: Self = Self::known(COMPLETED);
    /// [`AWAITING_USER`].
    pub const AWAITING_USER: Self = Self::known(AWAITING_USER);
    /// [`BUDGET_REACHED`].
    pub const BUDGET_REACHED: Self = Self::known(BUDGET_REACHED);
    /// [`CANCELLED`].
    pub const CANCELLED: Self = Self::known(CANCELLED);
    /// [`TIMEOUT`].
    pub const TIMEOUT: Self = Self::known(TIMEOUT);
    /// [`RUNNER_FAILED`].
    pub const RUNNER_FAILED: Self = Self::known(RUNNER_FAILED);
    /// [`PANICKED`].
    pub const PANICKED: Self = Self::known(PANICKED);
    /// [`REPORT_AUTHOR_FAILED`].
    pub const REPORT_AUTHOR_FAILED: Self = Self::known(REPORT_AUTHOR_FAILED);
    /// [`REPORT_UPLOAD_FAILED`].
    pub const REPORT_UPLOAD_FAILED: Self = Self::known(REPORT_UPLOAD_FAILED);
    /// [`REPORT_PERSIST_FAILED`].
    pub const REPORT_PERSIST_FAILED: Self = Self::known(REPORT_PERSIST_FAILED);
    /// [`CONTEXT_REFS_FAILED`].
    pub const CONTEXT_REFS_FAILED: Self = Self::known(CONTEXT_REFS_FAILED);
    /// [`TURN_LOG_FAILED`].
    pub const TURN_LOG_FAILED: Self = Self::known(TURN_LOG_FAILED);
    /// [`WORKSPACE_FAILED`].
    pub const WORKSPACE_FAILED: Self = Self::known(WORKSPACE_FAILED);
    /// [`INVALID_EXIT_REASON`].
    pub const INVALID: Self = Self::known(INVALID_EXIT_REASON);
    /// [`OWNER_LOST`].
    pub const OWNER_LOST: Self = Self::known(OWNER_LOST);
    /// [`LEASE_LOST`].
    pub const LEASE_LOST: Self = Self::known(LEASE_LOST);
    /// [`MEMORY_EXCEEDED`].
    pub const MEMORY_EXCEEDED: Self = Self::known(MEMORY_EXCEEDED);
    /// [`DISK_QUOTA_EXCEEDED`].
    pub const DISK_QUOTA_EXCEEDED: Self = Self::known(DISK_QUOTA_EXCEEDED);
    /// [`STALLED`].
    pub const STALLED: Self = Self::known(STALLED);
    /// [`AGENT_ERROR`].
    pub const AGENT_ERROR: Self = Self::known(AGENT_ERROR);

    /// A well-known reason; the constants above are the only callers and
    /// are valid by inspection (a unit test checks each).
    const fn known(text: &'static str) -> Self {
        Self {
            text: Cow::Borrowed(text),
            rejected: None,
        }
    }

    /// A validated exit reason.
    ///
    /// # Errors
    /// [`InvalidExitReason`] when the text is blank, longer than
    /// [`MAX_BYTES`](Self::MAX_BYTES) or contains a control character.
    pub fn new(text: impl Into<String>) -> Result<Self, InvalidExitReason> {
        let text = text.into();
        check(&text)?;
        Ok(Self {
            text: Cow::Owned(text),
            rejected: None,
        })
    }

    /// The reason as text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// This reason as a metric label: a well-known reason (one of
    /// [`ALL`]) or `other`.
    pub fn label(&self) -> &'static str {
        label(self.as_str())
    }

    /// The original text a lossy conversion refused, when this reason is
    /// [`ExitReason::INVALID`] because of it.
    pub fn rejected(&self) -> Option<&str> {
        self.rejected.as_deref()
    }
}

fn check(text: &str) -> Result<(), InvalidExitReason> {
    if text.trim().is_empty() {
        return Err(InvalidExitReason { reason: "is blank" });
    }
    if text.len() > ExitReason::MAX_BYTES {
        return Err(InvalidExitReason {
            reason: "is longer than 128 bytes",
        });
    }
    if text.chars().any(char::is_control) {
        return Err(InvalidExitReason {
            reason: "contains a control character",
        });
    }
    Ok(())
}

impl From<String> for ExitReason {
    /// Never fails: invalid text becomes [`ExitReason::INVALID`], keeping
    /// the original in [`rejected`](ExitReason::rejected).
    fn from(text: String) -> Self {
        match check(&text) {
            Ok(()) => Self {
                text: Cow::Owned(text),
                rejected: None,
            },
            Err(_) => Self {
                rejected: Some(text.into_boxed_str()),
                ..Self::INVALID
            },
        }
    }
}

impl From<&str> for ExitReason {
    /// As `From<String>`.
    fn from(text: &str) -> Self {
        Self::from(text.to_owned())
    }
}

impl From<ExitReason> for String {
    fn from(reason: ExitReason) -> Self {
        reason.text.into_owned()
    }
}

impl AsRef<str> for ExitReason {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl serde::Serialize for ExitReason {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// Strict: text that [`ExitReason::new`] refuses is an error. (The SQL
/// backends read their own rows with the lossy `From<String>` instead, so a
/// row written before exit reasons were typed — longer than 128 bytes, or
/// with a control character — still reads, as `invalid_exit_reason`.)
impl<'de> serde::Deserialize<'de> for ExitReason {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::new(text).map_err(serde::de::Error::custom)
    }
}

impl std::ops::Deref for ExitReason {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Display for ExitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for ExitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.rejected {
            None => fmt::Debug::fmt(self.as_str(), f),
            Some(original) => write!(f, "{:?} (rejected {:?})", self.as_str(), original),
        }
    }
}

/// Two reasons are equal when their text is; the rejected original is a
/// diagnostic, not part of the value.
impl PartialEq for ExitReason {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for ExitReason {}

impl std::hash::Hash for ExitReason {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.text.hash(state);
    }
}

impl PartialEq<str> for ExitReason {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ExitReason {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<ExitReason> for &str {
    fn eq(&self, other: &ExitReason) -> bool {
        *self == other.as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_is_a_well_known_reason_or_other() {
        assert_eq!(ExitReason::COMPLETED.label(), "completed");
        assert_eq!(ExitReason::OWNER_LOST.label(), "owner_lost");
        assert_eq!(ExitReason::new("found_it").unwrap().label(), OTHER);
        let mut all = ALL.to_vec();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), ALL.len(), "no reason twice");
        assert!(!ALL.contains(&OTHER));
    }

    #[test]
    fn every_well_known_reason_is_valid() {
        for known in [
            ExitReason::COMPLETED,
            ExitReason::AWAITING_USER,
            ExitReason::BUDGET_REACHED,
            ExitReason::CANCELLED,
            ExitReason::TIMEOUT,
            ExitReason::RUNNER_FAILED,
            ExitReason::PANICKED,
            ExitReason::REPORT_AUTHOR_FAILED,
            ExitReason::REPORT_UPLOAD_FAILED,
            ExitReason::REPORT_PERSIST_FAILED,
            ExitReason::CONTEXT_REFS_FAILED,
            ExitReason::TURN_LOG_FAILED,
            ExitReason::WORKSPACE_FAILED,
            ExitReason::INVALID,
            ExitReason::OWNER_LOST,
            ExitReason::LEASE_LOST,
            ExitReason::MEMORY_EXCEEDED,
            ExitReason::DISK_QUOTA_EXCEEDED,
            ExitReason::STALLED,
            ExitReason::AGENT_ERROR,
        ] {
            assert_eq!(ExitReason::new(known.as_str()).unwrap(), known);
        }
    }

    #[test]
    fn bad_text_is_refused_with_a_reason() {
        for bad in ["", "  ", "a\0b", "a\nb", "\u{7f}"] {
            assert!(ExitReason::new(bad).is_err(), "{bad:?}");
        }
        let long = "x".repeat(ExitReason::MAX_BYTES + 1);
        assert_eq!(
            ExitReason::new(long).unwrap_err().reason,
            "is longer than 128 bytes"
        );
        assert!(ExitReason::new("x".repeat(ExitReason::MAX_BYTES)).is_ok());
    }

    #[test]
    fn lossy_conversion_keeps_valid_text_and_the_rejected_original() {
        let ok = ExitReason::from("exit_code_3");
        assert_eq!(ok, "exit_code_3");
        assert_eq!(ok.rejected(), None);
        let bad = ExitReason::from("nul\0inside");
        assert_eq!(bad, ExitReason::INVALID);
        assert_eq!(bad.rejected(), Some("nul\0inside"));
        assert_eq!(String::from(bad), INVALID_EXIT_REASON);
    }
}
