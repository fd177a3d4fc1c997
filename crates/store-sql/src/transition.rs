//! The conditional transitions of a session row: [`Transition`], each one
//! `UPDATE … WHERE <condition> RETURNING` statement both engines run as it
//! is.
//!
//! Concurrent transitions of one row cannot both match. PostgreSQL lets the
//! first to take the row lock update it, and the others re-check the
//! condition on the updated row, match nothing and write nothing; SQLite runs
//! writes one at a time, so the later ones find the row changed. A statement
//! that matched nothing is told apart from an unknown id by a second read,
//! on the failure path only.

use std::sync::LazyLock;

use korvus_store::{SessionId, SessionStatus, StoreError};

use crate::error::unexpected;
use crate::rows::{placeholders, session_columns};

/// One conditional transition of a session row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transition {
    /// `reopen_session`: a terminal session becomes running again with the
    /// next revision and the next fence. Binds `$1` id, `$2` running, `$3…` the terminal
    /// statuses.
    Reopen,
    /// `cancel_idle_session`: an idle session (running, exit reason
    /// `awaiting_user`) becomes cancelled. Binds `$1` id, `$2` cancelled,
    /// `$3` the exit reason `cancelled`, `$4` `ended_at`, `$5` running, `$6`
    /// `awaiting_user`.
    CancelIdle,
    /// `resume_idle_session`: an idle session becomes active with the next
    /// revision and the next fence. Binds `$1` id, `$2` running, `$3` `awaiting_user`.
    ResumeIdle,
}

static REOPEN: LazyLock<String> = LazyLock::new(|| {
    format!(
        concat!(
            "UPDATE sessions SET status = $2, ended_at = NULL, exit_reason = NULL, \
             revision = revision + 1, fence = fence + 1 WHERE id = $1 AND status IN ({}) RETURNING ",
            session_columns!()
        ),
        placeholders(3, SessionStatus::TERMINAL.len())
    )
});

const CANCEL_IDLE: &str = concat!(
    "UPDATE sessions SET status = $2, exit_reason = $3, ended_at = $4 \
     WHERE id = $1 AND status = $5 AND exit_reason = $6 RETURNING ",
    session_columns!()
);

const RESUME_IDLE: &str = concat!(
    "UPDATE sessions SET exit_reason = NULL, revision = revision + 1, fence = fence + 1 \
     WHERE id = $1 AND status = $2 AND exit_reason = $3 RETURNING ",
    session_columns!()
);

/// `request_cancel`: a running session's row records a cancel request
/// naming its current fence. Binds `$1` id, `$2` running.
pub(crate) const REQUEST_CANCEL: &str = concat!(
    "UPDATE sessions SET cancel_fence = fence WHERE id = $1 AND status = $2 RETURNING ",
    session_columns!()
);

/// `cancel_requests`: `(id, fence)` of the running sessions whose request
/// names their current fence. Binds `$1` running.
pub(crate) const CANCEL_REQUESTS: &str = "SELECT id, fence FROM sessions \
     WHERE cancel_fence IS NOT NULL AND cancel_fence = fence AND status = $1";

/// The rows of [`CANCEL_REQUESTS`] as the seam's pairs.
pub(crate) fn cancel_requests(
    backend: &'static str,
    rows: Vec<(uuid::Uuid, i64)>,
) -> Result<Vec<(SessionId, u64)>, StoreError> {
    rows.into_iter()
        .map(|(id, fence)| {
            let fence = u64::try_from(fence)
                .map_err(|_| unexpected(backend, format!("session fence {fence}")))?;
            Ok((SessionId::from_uuid(id), fence))
        })
        .collect()
}

impl Transition {
    /// The statement; see each variant for its binds.
    pub(crate) fn statement(self) -> &'static str {
        match self {
            Transition::Reopen => &REOPEN,
            Transition::CancelIdle => CANCEL_IDLE,
            Transition::ResumeIdle => RESUME_IDLE,
        }
    }

    /// The error for an existing session the statement did not match.
    pub(crate) fn refused(self, session: SessionId) -> StoreError {
        match self {
            Transition::Reopen => StoreError::NotFinished { session },
            Transition::CancelIdle | Transition::ResumeIdle => StoreError::NotIdle { session },
        }
    }
}
