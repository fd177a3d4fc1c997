//! [`StoreError`]: what a [`Store`](crate::Store) call can fail with.

use std::fmt;

use crate::SessionId;

/// The kind of row an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Entity {
    /// An incident row.
    Incident,
    /// A session row.
    Session,
    /// A report row.
    Report,
    /// An artifact row.
    Artifact,
    /// A context ref row.
    ContextRef,
}

impl fmt::Display for Entity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Entity::Incident => "incident",
            Entity::Session => "session",
            Entity::Report => "report",
            Entity::Artifact => "artifact",
            Entity::ContextRef => "context ref",
        })
    }
}

/// Errors of the [`Store`](crate::Store) seam. Match on variants, never on message text.
///
/// Each variant says whether it is *transient* — the same call may succeed
/// when retried — or *permanent*; [`StoreError::is_transient`] answers it.
/// Only a [`Backend`](StoreError::Backend) error can be transient, and only
/// when its backend marked it so; every other variant is a definite answer
/// about the data and is permanent: retrying it gives the same answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The addressed row does not exist. Permanent.
    #[error("{entity} {id} not found")]
    NotFound {
        /// What kind of row.
        entity: Entity,
        /// Its id (for reports: `<session>/<revision>`).
        id: String,
    },
    /// A reopen lost: the session is not in a terminal status (it is running,
    /// possibly because another caller reopened it first). Permanent.
    #[error("session {session} is not finished")]
    NotFinished {
        /// The session.
        session: SessionId,
    },
    /// A uniqueness rule was violated (duplicate id, duplicate report revision, …).
    /// Permanent.
    #[error("{entity} conflict: {detail}")]
    Conflict {
        /// What kind of row.
        entity: Entity,
        /// Which rule, in words.
        detail: String,
    },
    /// A referential rule was refused, e.g. a context ref to another incident's
    /// artifact. `name` is the database constraint name (the in-memory store uses
    /// the same names). Permanent.
    #[error("constraint {name} violated")]
    Constraint {
        /// Constraint name, e.g. `session_context_refs_artifact_fk`.
        name: String,
    },
    /// A value cannot be stored (NUL byte, too long, out of range). Nothing was
    /// written. Permanent: the same value is refused again.
    #[error("invalid {field}: {reason}")]
    InvalidInput {
        /// The offending field, e.g. `prompt` or `counters.turns`.
        field: &'static str,
        /// Why, in words.
        reason: String,
    },
    /// A transition of an idle session (`cancel_idle_session`,
    /// `continue_session` from idle) lost: the session is not idle — it is active
    /// (running without an idle exit reason), terminal, or another
    /// caller moved it first. Nothing was written. Permanent.
    #[error("session {session} is not idle")]
    NotIdle {
        /// The session.
        session: SessionId,
    },
    /// A takeover ([`Coordination::take_over`](crate::Coordination::take_over)) found the
    /// session not orphaned: it is terminal or idle, or its owner's lease
    /// is still live. Nothing was written. Permanent.
    #[error("session {session} is not an orphan (its owner's lease is live, or no run is active)")]
    NotOrphaned {
        /// The session.
        session: SessionId,
    },
    /// A settlement presented the fence of a run that was superseded: the
    /// session was reopened, resumed or taken over since, and its row now
    /// carries a newer fence. Nothing was written. Permanent: the stale run
    /// must stop writing.
    #[error("session {session}: fence {presented} is stale (the row is at fence {current})")]
    Fenced {
        /// The session.
        session: SessionId,
        /// The fence the write presented.
        presented: u64,
        /// The row's fence.
        current: u64,
    },
    /// A write of a run presented the row's current fence, but the run is
    /// over: the row is terminal (completed, failed, cancelled — by its own
    /// run, a takeover, an idle cancel or an operator's forced cancel) or
    /// idle (waiting for the user). A settlement, report row or artifact
    /// row is accepted only while its run is active; nothing but a reopen
    /// (or, for an idle row, an answer) leaves that state. Nothing was
    /// written. Permanent: the run must stop writing.
    #[error("session {session} is not active at fence {fence} (its run already ended)")]
    NotActive {
        /// The session.
        session: SessionId,
        /// The fence the write presented (the row's).
        fence: u64,
    },
    /// A claim could not be given back
    /// ([`Coordination::release`](crate::Coordination::release)): its run
    /// already started (the runner was called), so the session is that
    /// run's to end — or a reaper's, as an orphan. Nothing was written.
    /// Permanent.
    #[error("session {session}: its run already started and cannot go back to the queue")]
    AlreadyStarted {
        /// The session.
        session: SessionId,
    },
    /// The backend failed (connection, pool, I/O, unexpected data).
    ///
    /// Transient exactly when `transient` is `true`: the backend classified
    /// the failure as one that may go away (a dropped connection, a pool or
    /// I/O timeout, a serialization failure or deadlock, a busy database).
    /// Unexpected stored data, a closed pool and every unclassified failure
    /// are permanent.
    #[error("{backend} store backend failed")]
    Backend {
        /// Which backend, e.g. `postgres`.
        backend: &'static str,
        /// Whether the same call may succeed when retried.
        transient: bool,
        /// The underlying error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

impl StoreError {
    /// The refusal of
    /// [`Coordination::release_for_resume`](crate::Coordination::release_for_resume)
    /// for a row whose cancel was requested at the presented fence: every
    /// backend answers exactly this ([`StoreError::Conflict`]), and writes
    /// nothing.
    pub fn resume_refused_for_cancel(session: SessionId) -> Self {
        StoreError::Conflict {
            entity: Entity::Session,
            detail: format!(
                "session {session} has a cancel pending: it is settled, not released for resume"
            ),
        }
    }

    /// Shorthand for [`StoreError::NotFound`].
    pub fn not_found(entity: Entity, id: impl fmt::Display) -> Self {
        StoreError::NotFound {
            entity,
            id: id.to_string(),
        }
    }

    /// A [`StoreError::Backend`] classified from its source: transient when
    /// an [`std::io::Error`] of a transient kind (see [`io_kind_is_transient`])
    /// is anywhere in the source chain, permanent otherwise. A backend that
    /// knows better says so with [`StoreError::transient`] or
    /// [`StoreError::permanent`].
    pub fn backend(
        backend: &'static str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        let source = source.into();
        let transient = chain_has_transient_io(&*source);
        StoreError::Backend {
            backend,
            transient,
            source,
        }
    }

    /// A [`StoreError::Backend`] that may succeed when retried.
    pub fn transient(
        backend: &'static str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        StoreError::Backend {
            backend,
            transient: true,
            source: source.into(),
        }
    }

    /// A [`StoreError::Backend`] that a retry cannot fix.
    pub fn permanent(
        backend: &'static str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        StoreError::Backend {
            backend,
            transient: false,
            source: source.into(),
        }
    }

    /// `true` when the same call may succeed if retried: only a
    /// [`Backend`](StoreError::Backend) error its backend marked transient
    /// (connection, pool, timeout, I/O). `false` for every other variant,
    /// including variants added later: a caller retries only what it was
    /// told may pass.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StoreError::Backend {
                transient: true,
                ..
            }
        )
    }
}

impl StoreError {
    /// `true` for the refusals that mean "this run may write nothing more":
    /// [`Fenced`](StoreError::Fenced) (the session moved on to a newer
    /// run) and [`NotActive`](StoreError::NotActive) (the run's row already
    /// ended). Permanent, like every variant but a transient `Backend`.
    pub fn is_fenced_off(&self) -> bool {
        matches!(
            self,
            StoreError::Fenced { .. } | StoreError::NotActive { .. }
        )
    }
}

/// Whether an I/O error of this kind may go away on retry: interrupted or
/// would-block calls, timeouts, and connections refused, reset, aborted,
/// closed or cut short. Anything else (not found, permission denied, invalid
/// data, …) is permanent.
pub fn io_kind_is_transient(kind: std::io::ErrorKind) -> bool {
    use std::io::ErrorKind as K;
    matches!(
        kind,
        K::Interrupted
            | K::WouldBlock
            | K::TimedOut
            | K::ConnectionRefused
            | K::ConnectionReset
            | K::ConnectionAborted
            | K::NotConnected
            | K::BrokenPipe
            | K::UnexpectedEof
    )
}

fn chain_has_transient_io(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if io_kind_is_transient(io.kind()) {
                return true;
            }
        }
        next = e.source();
    }
    false
}

/// `Result` with [`StoreError`] as the default error.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    #[test]
    fn only_backend_errors_marked_transient_are_transient() {
        let session = SessionId::new();
        let permanent = [
            StoreError::not_found(Entity::Session, session),
            StoreError::NotFinished { session },
            StoreError::NotIdle { session },
            StoreError::NotActive { session, fence: 1 },
            StoreError::Fenced {
                session,
                presented: 1,
                current: 2,
            },
            StoreError::Conflict {
                entity: Entity::Report,
                detail: "dup".into(),
            },
            StoreError::Constraint { name: "fk".into() },
            StoreError::InvalidInput {
                field: "prompt",
                reason: "NUL".into(),
            },
            StoreError::permanent("x", io::Error::from(io::ErrorKind::TimedOut)),
            StoreError::backend("x", "unexpected stored data"),
            StoreError::backend("x", io::Error::from(io::ErrorKind::PermissionDenied)),
        ];
        for e in &permanent {
            assert!(!e.is_transient(), "{e:?}");
        }
        assert!(StoreError::transient("x", "pool timed out").is_transient());
        let reset = io::Error::new(io::ErrorKind::ConnectionReset, "peer reset");
        assert!(StoreError::backend("x", reset).is_transient());
    }

    #[test]
    fn backend_finds_transient_io_deeper_in_the_chain() {
        #[derive(Debug, thiserror::Error)]
        #[error("driver failed")]
        struct Driver(#[source] io::Error);
        let deep = Driver(io::Error::from(io::ErrorKind::BrokenPipe));
        assert!(StoreError::backend("x", deep).is_transient());
        let deep = Driver(io::Error::from(io::ErrorKind::InvalidData));
        assert!(!StoreError::backend("x", deep).is_transient());
    }
}
