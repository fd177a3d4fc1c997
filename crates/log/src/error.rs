//! Errors of the turn-log seam.

use std::fmt;

use crate::LogId;

/// What a [`TurnLog`](crate::TurnLog) or [`LogHandle`](crate::LogHandle) call can fail with.
///
/// Each variant says whether it is *transient* — the same call may succeed
/// when retried — or *permanent*; [`LogError::is_transient`] answers it. Only
/// a [`Backend`](LogError::Backend) error can be transient, and only when its
/// backend marked it so; every other variant is permanent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// No log with this id exists. Permanent.
    #[error("turn log {id} not found")]
    NotFound {
        /// The log.
        id: LogId,
    },
    /// `create` was called for an id that already has a log. Permanent.
    #[error("turn log {id} already exists")]
    AlreadyExists {
        /// The log.
        id: LogId,
    },
    /// A write handle for this log is already open in this process. Permanent.
    #[error("turn log {id} already has a writer")]
    AlreadyOwned {
        /// The log.
        id: LogId,
    },
    /// A writer's epoch is older than the newest the log has seen: a newer
    /// writer (a later run) claimed it. Nothing was written. Permanent.
    #[error("turn log {id}: writer epoch {epoch} is stale (the log has seen epoch {newest})")]
    Fenced {
        /// The log.
        id: LogId,
        /// The writer's epoch.
        epoch: u64,
        /// The newest epoch the log has seen.
        newest: u64,
    },
    /// A mutation (append, flush) was attempted through a read handle. Permanent.
    #[error("turn log {id} handle is read-only")]
    ReadOnly {
        /// The log.
        id: LogId,
    },
    /// The handle was closed. Permanent.
    #[error("turn log {id} handle is closed")]
    Closed {
        /// The log.
        id: LogId,
    },
    /// An append expected the log to hold `expected` events (or already
    /// its own ones after them) and it held `found`: another writer
    /// appended. Nothing was stored. Permanent.
    #[error("turn log {id} holds {found} events where an append expected {expected}")]
    Conflict {
        /// The log.
        id: LogId,
        /// Where the append meant to start.
        expected: u64,
        /// How many events the log held.
        found: u64,
    },
    /// Stored data does not parse or shrank under a reader. Permanent.
    #[error("turn log {id} is corrupt: {detail}")]
    Corrupt {
        /// The log.
        id: LogId,
        /// What was wrong.
        detail: String,
    },
    /// The backend failed (I/O, database, serialisation).
    ///
    /// Transient exactly when `transient` is `true`: the backend classified
    /// the failure as one that may go away (a dropped connection, a pool or
    /// I/O timeout, a busy database). Serialisation failures and every
    /// unclassified failure are permanent.
    #[error("{backend} turn log backend failed")]
    Backend {
        /// Which backend, e.g. `jsonl`.
        backend: &'static str,
        /// Whether the same call may succeed when retried.
        transient: bool,
        /// The underlying error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

impl LogError {
    /// A [`LogError::Backend`] classified from its source: transient when an
    /// [`std::io::Error`] of a transient kind (interrupted, would block,
    /// timed out, connection refused, reset, aborted or not connected, broken
    /// pipe, unexpected end of file) is anywhere in the source chain,
    /// permanent otherwise. A backend that knows better says so with
    /// [`LogError::transient`] or [`LogError::permanent`].
    pub fn backend(
        backend: &'static str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        let source = source.into();
        let transient = chain_has_transient_io(&*source);
        LogError::Backend {
            backend,
            transient,
            source,
        }
    }

    /// A [`LogError::Backend`] that may succeed when retried.
    pub fn transient(
        backend: &'static str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        LogError::Backend {
            backend,
            transient: true,
            source: source.into(),
        }
    }

    /// A [`LogError::Backend`] that a retry cannot fix.
    pub fn permanent(
        backend: &'static str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        LogError::Backend {
            backend,
            transient: false,
            source: source.into(),
        }
    }

    /// `true` when the same call may succeed if retried: only a
    /// [`Backend`](LogError::Backend) error its backend marked transient
    /// (connection, pool, timeout, I/O). `false` for every other variant,
    /// including variants added later.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            LogError::Backend {
                transient: true,
                ..
            }
        )
    }
}

/// The same rule as `korvus_store::io_kind_is_transient` (the seams do not
/// depend on each other, so each states it).
fn io_kind_is_transient(kind: std::io::ErrorKind) -> bool {
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

/// `Result` with [`LogError`] as the default error.
pub type Result<T, E = LogError> = std::result::Result<T, E>;

/// The service-wide [`TurnLog::flush`](crate::TurnLog::flush) failed for some
/// logs. Every other active writer was still flushed.
#[derive(Debug)]
#[non_exhaustive]
pub struct FlushError {
    /// Each log whose flush failed, with its cause.
    pub failures: Vec<(LogId, LogError)>,
}

impl FlushError {
    /// The error of a flush in which the logs in `failures` failed (for a
    /// `TurnLog` that wraps or merges others).
    pub fn new(failures: Vec<(LogId, LogError)>) -> Self {
        Self { failures }
    }
}

impl fmt::Display for FlushError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "flushing {} turn log(s) failed: ", self.failures.len())?;
        for (i, (id, err)) in self.failures.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{id}: {err}")?;
        }
        Ok(())
    }
}

impl std::error::Error for FlushError {}

/// An error and its sources, joined with `: `.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    #[test]
    fn only_backend_errors_marked_transient_are_transient() {
        let id = LogId::from_uuid(uuid::Uuid::nil());
        let permanent = [
            LogError::NotFound { id },
            LogError::AlreadyExists { id },
            LogError::AlreadyOwned { id },
            LogError::Fenced {
                id,
                epoch: 1,
                newest: 2,
            },
            LogError::ReadOnly { id },
            LogError::Closed { id },
            LogError::Conflict {
                id,
                expected: 1,
                found: 3,
            },
            LogError::Corrupt {
                id,
                detail: "torn".into(),
            },
            LogError::permanent("x", io::Error::from(io::ErrorKind::TimedOut)),
            LogError::backend("x", io::Error::from(io::ErrorKind::NotFound)),
            LogError::backend("x", "serialisation failed"),
        ];
        for e in &permanent {
            assert!(!e.is_transient(), "{e:?}");
        }
        assert!(LogError::transient("x", "pool timed out").is_transient());
        assert!(LogError::backend("x", io::Error::from(io::ErrorKind::Interrupted)).is_transient());
    }
}
