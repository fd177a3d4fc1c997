//! Mapping driver errors onto the seams' semantic errors.
//!
//! Callers of a seam match [`StoreError`] and [`LogError`] variants; a raw
//! [`sqlx::Error`] only ever travels as the `source` of a `Backend` variant.

use std::fmt;

use korvus_log::{LogError, LogId};
use korvus_store::{Entity, StoreError};
use sqlx::error::ErrorKind;

/// Stored data that does not fit the model (a status no enum knows, a
/// negative counter, …): a backend failure, never a panic.
#[derive(Debug)]
pub(crate) struct UnexpectedData(pub(crate) String);

impl fmt::Display for UnexpectedData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unexpected stored data: {}", self.0)
    }
}

impl std::error::Error for UnexpectedData {}

/// What a failing statement was doing, so its error can be named.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Op {
    /// `postgres` or `sqlite`.
    pub(crate) backend: &'static str,
    /// The row kind a uniqueness violation is about.
    pub(crate) entity: Entity,
    /// The foreign key a violation is reported as when the database does not
    /// name it (SQLite never does). Every statement is written so that only
    /// this key can fail: the others are satisfied by rows the statement reads
    /// itself. `None` for tables without foreign keys.
    pub(crate) foreign_key: Option<&'static str>,
}

impl Op {
    /// Maps a driver error: unique violation → `Conflict`, foreign-key
    /// violation → `Constraint { name }` (the database's name where it gives
    /// one), anything else — connection, pool, protocol, other database
    /// errors — → `Backend`.
    pub(crate) fn err(self, e: sqlx::Error) -> StoreError {
        if let sqlx::Error::Database(db) = &e {
            match db.kind() {
                ErrorKind::UniqueViolation => {
                    let detail = match db.constraint() {
                        Some(name) => format!("{name} violated: {}", db.message()),
                        None => db.message().to_owned(),
                    };
                    return StoreError::Conflict {
                        entity: self.entity,
                        detail,
                    };
                }
                ErrorKind::ForeignKeyViolation => {
                    if let Some(name) = db.constraint().or(self.foreign_key) {
                        return StoreError::Constraint {
                            name: name.to_owned(),
                        };
                    }
                }
                _ => {}
            }
        }
        StoreError::backend(self.backend, e)
    }
}

/// Any driver error, when no semantic mapping applies (reads).
pub(crate) fn backend(backend: &'static str) -> impl Fn(sqlx::Error) -> StoreError {
    move |e| StoreError::backend(backend, e)
}

/// Stored data that does not fit the model.
pub(crate) fn unexpected(backend: &'static str, what: impl Into<String>) -> StoreError {
    StoreError::backend(backend, UnexpectedData(what.into()))
}

/// A turn-log driver error: `Backend`.
pub(crate) fn log_backend(backend: &'static str) -> impl Fn(sqlx::Error) -> LogError {
    move |e| LogError::backend(backend, e)
}

/// `true` when `e` is a unique violation (e.g. creating a log twice).
pub(crate) fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.kind() == ErrorKind::UniqueViolation)
}

/// A stored log row or event that does not parse.
pub(crate) fn corrupt(id: LogId, detail: impl Into<String>) -> LogError {
    LogError::Corrupt {
        id,
        detail: detail.into(),
    }
}
