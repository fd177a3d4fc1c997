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
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The addressed row does not exist.
    #[error("{entity} {id} not found")]
    NotFound {
        /// What kind of row.
        entity: Entity,
        /// Its id (for reports: `<session>/<revision>`).
        id: String,
    },
    /// A reopen lost: the session is not in a terminal status (it is running,
    /// possibly because another caller reopened it first).
    #[error("session {session} is not finished")]
    NotFinished {
        /// The session.
        session: SessionId,
    },
    /// A uniqueness rule was violated (duplicate id, duplicate report revision, …).
    #[error("{entity} conflict: {detail}")]
    Conflict {
        /// What kind of row.
        entity: Entity,
        /// Which rule, in words.
        detail: String,
    },
    /// A referential rule was refused, e.g. a context ref to another incident's
    /// artifact. `name` is the database constraint name (the in-memory store uses
    /// the same names).
    #[error("constraint {name} violated")]
    Constraint {
        /// Constraint name, e.g. `session_context_refs_artifact_fk`.
        name: String,
    },
    /// A value cannot be stored (NUL byte, too long, out of range). Nothing was written.
    #[error("invalid {field}: {reason}")]
    InvalidInput {
        /// The offending field, e.g. `prompt` or `counters.turns`.
        field: &'static str,
        /// Why, in words.
        reason: String,
    },
    /// The backend failed (connection, pool, I/O, unexpected data).
    #[error("{backend} store backend failed")]
    Backend {
        /// Which backend, e.g. `postgres`.
        backend: &'static str,
        /// The underlying error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

impl StoreError {
    /// Shorthand for [`StoreError::NotFound`].
    pub fn not_found(entity: Entity, id: impl fmt::Display) -> Self {
        StoreError::NotFound {
            entity,
            id: id.to_string(),
        }
    }

    /// Shorthand for [`StoreError::Backend`].
    pub fn backend(
        backend: &'static str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        StoreError::Backend {
            backend,
            source: source.into(),
        }
    }
}

/// `Result` with [`StoreError`] as the default error.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
