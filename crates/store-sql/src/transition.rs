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

use crate::rows::session_columns;
use crate::store::placeholders;

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
