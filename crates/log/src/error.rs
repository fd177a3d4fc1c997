//! Errors of the turn-log seam.

use std::fmt;

use crate::LogId;

/// What a [`TurnLog`](crate::TurnLog) or [`LogHandle`](crate::LogHandle) call can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// No log with this id exists.
    #[error("turn log {id} not found")]
    NotFound {
        /// The log.
        id: LogId,
    },
    /// `create` was called for an id that already has a log.
    #[error("turn log {id} already exists")]
    AlreadyExists {
        /// The log.
        id: LogId,
    },
    /// A write handle for this log is already open in this process.
    #[error("turn log {id} already has a writer")]
    AlreadyOwned {
        /// The log.
        id: LogId,
    },
    /// A mutation (append, flush) was attempted through a read handle.
    #[error("turn log {id} handle is read-only")]
    ReadOnly {
        /// The log.
        id: LogId,
    },
    /// The handle was closed.
    #[error("turn log {id} handle is closed")]
    Closed {
        /// The log.
        id: LogId,
    },
    /// Stored data does not parse or shrank under a reader.
    #[error("turn log {id} is corrupt: {detail}")]
    Corrupt {
        /// The log.
        id: LogId,
        /// What was wrong.
        detail: String,
    },
    /// The backend failed (I/O, database, serialisation).
    #[error("{backend} turn log backend failed")]
    Backend {
        /// Which backend, e.g. `jsonl`.
        backend: &'static str,
        /// The underlying error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

impl LogError {
    /// Shorthand for [`LogError::Backend`].
    pub fn backend(
        backend: &'static str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        LogError::Backend {
            backend,
            source: source.into(),
        }
    }
}

/// `Result` with [`LogError`] as the default error.
pub type Result<T, E = LogError> = std::result::Result<T, E>;

/// The service-wide [`TurnLog::flush`](crate::TurnLog::flush) failed for some
/// logs. Every other active writer was still flushed.
#[derive(Debug)]
pub struct FlushError {
    /// Each log whose flush failed, with its cause.
    pub failures: Vec<(LogId, LogError)>,
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
