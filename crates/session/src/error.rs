//! [`SessionError`]: what a [`Manager`](crate::Manager) call can fail with.

use korvus_store::{IncidentId, SessionId, StoreError};

/// Errors of the session layer. Match on variants, never on message text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The prompt is blank.
    #[error("a prompt is required")]
    PromptRequired,
    /// A reopen message is blank.
    #[error("a message is required to reopen a session")]
    MessageRequired,
    /// The incident is closed to new sessions.
    #[error("incident {incident} is closed")]
    IncidentClosed {
        /// The incident.
        incident: IncidentId,
    },
    /// `stop` has begun: no new sessions or reopens.
    #[error("the manager is shutting down")]
    ShuttingDown,
    /// The session already ended.
    #[error("session {session} already ended")]
    AlreadyEnded {
        /// The session.
        session: SessionId,
    },
    /// The session is not in a terminal status (reopen), or lost a reopen race.
    #[error("session {session} is not finished")]
    NotFinished {
        /// The session.
        session: SessionId,
    },
    /// The session is not waiting for the user (`send_message`), or another
    /// caller moved it first (a racing cancel or message).
    #[error("session {session} is not waiting for the user")]
    NotAwaitingUser {
        /// The session.
        session: SessionId,
    },
    /// [`Manager::await_settled`](crate::Manager::await_settled): the
    /// session was not settled (terminal or idle) when the deadline passed.
    #[error("session {session} did not settle within the deadline")]
    SettleDeadline {
        /// The session.
        session: SessionId,
    },
    /// [`Manager::await_settled`](crate::Manager::await_settled): the
    /// session's run in this process ended without its outcome written —
    /// the store refused it or could not be reached within the settle
    /// bound. The row stays `running` until its lease lapses and a reaper
    /// settles it `owner_lost`; the run's scratch dir is kept.
    #[error("session {session}: its run ended but its outcome was not written")]
    Unsettled {
        /// The session.
        session: SessionId,
    },
    /// The session is already registered as live in this process.
    #[error("session {session} is already live in this process")]
    AlreadyLive {
        /// The session.
        session: SessionId,
    },
    /// The idempotency key of a create is taken in the incident by a
    /// session with another prompt; nothing was written.
    #[error("idempotency key {key:?} is taken in this incident by session {session}, with another prompt")]
    IdempotencyConflict {
        /// The session that holds the key.
        session: SessionId,
        /// The key.
        key: String,
    },
    /// The create would be queued past a bound on the queue
    /// ([`ManagerBuilder::max_queued`](crate::ManagerBuilder::max_queued),
    /// [`max_queued_per_key`](crate::ManagerBuilder::max_queued_per_key));
    /// nothing was written. Try again later (HTTP answers `429` with
    /// `Retry-After`).
    #[error("{} is full ({limit} queued); try again later", match key {
        Some(key) => format!("the queue of key {key:?} in pool {pool:?}"),
        None => format!("the queue of pool {pool:?}"),
    })]
    QueueFull {
        /// The pool.
        pool: String,
        /// The key whose queue is full; `None`: the pool's.
        key: Option<String>,
        /// The bound that was reached.
        limit: u64,
    },
    /// A requested context ref cannot be used; nothing was written.
    #[error("invalid context ref: {reason}")]
    InvalidContextRef {
        /// Why (empty id, duplicate, unknown, other incident).
        reason: String,
    },
    /// A row does not exist.
    #[error("{entity} {id} not found")]
    NotFound {
        /// What kind of row.
        entity: korvus_store::Entity,
        /// Its id.
        id: String,
    },
    /// [`Manager::check`](crate::Manager::check): one of the manager's
    /// backends cannot do what a run needs (the blob store refuses a
    /// write, the database is not migrated or not writable, the scratch
    /// root is not writable). Nothing was run.
    #[error("the {part} is not usable: {reason}")]
    NotReady {
        /// Which part: `"blob store"`, `"store"` or `"scratch root"`.
        part: &'static str,
        /// What failed, cause first.
        reason: String,
    },
    /// A reopen or answer found output of the session that an earlier run
    /// could not store (its scratch dir is kept) and could not store it
    /// now either: the session is not continued, so its next run never
    /// starts without that output. Nothing was written; salvage it
    /// ([`Manager::salvage`](crate::Manager::salvage), `korvus salvage`)
    /// once the cause is gone.
    #[error("session {session}: the output of its revision {revision} is kept at {} and not stored: {reason}", dir.display())]
    OutputKept {
        /// The session.
        session: SessionId,
        /// The revision whose output is kept.
        revision: u32,
        /// The kept dir.
        dir: std::path::PathBuf,
        /// Why it could not be stored, cause first.
        reason: String,
    },
    /// The store failed.
    #[error("store failed")]
    Store(#[source] StoreError),
    /// The turn log failed.
    #[error("turn log failed")]
    Log(#[from] korvus_log::LogError),
    /// A budget was asked of a manager that keeps none
    /// ([`ManagerBuilder::budgets`](crate::ManagerBuilder::budgets)).
    /// Nothing was written.
    #[error("this manager keeps no budgets")]
    NoBudgets,
}

impl From<StoreError> for SessionError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound { entity, id } => SessionError::NotFound { entity, id },
            StoreError::NotFinished { session } => SessionError::NotFinished { session },
            StoreError::NotIdle { session } => SessionError::NotAwaitingUser { session },
            other => SessionError::Store(other),
        }
    }
}

impl SessionError {
    /// `true` when the same call may succeed if tried again later,
    /// unchanged: the queue is full, the run did not settle within the
    /// caller's deadline, or the store or turn log failed transiently.
    /// Refusals of the call itself (a closed incident, a session in the
    /// wrong state, bad input, a manager shutting down) are `false`.
    pub fn is_transient(&self) -> bool {
        match self {
            SessionError::QueueFull { .. } | SessionError::SettleDeadline { .. } => true,
            SessionError::Store(e) => e.is_transient(),
            SessionError::Log(e) => e.is_transient(),
            _ => false,
        }
    }
}

/// `Result` with [`SessionError`] as the default error.
pub type Result<T, E = SessionError> = std::result::Result<T, E>;

/// `e` and every source under it, `": "`-separated: the text an error
/// leaves in a row, a log line or another error's reason.
pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_and_a_transient_store_failure_are_worth_a_retry() {
        let full = SessionError::QueueFull {
            pool: "default".into(),
            key: None,
            limit: 10,
        };
        assert!(full.is_transient());
        assert!(
            SessionError::from(StoreError::transient("pg", "serialization failure")).is_transient()
        );
        assert!(!SessionError::from(StoreError::backend("pg", "syntax error")).is_transient());
        assert!(!SessionError::ShuttingDown.is_transient());
        assert!(!SessionError::PromptRequired.is_transient());
    }
}
