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
        store_backend(self.backend, e)
    }
}

/// Whether a driver error may go away when the call is retried:
///
/// - the pool timed out waiting for a connection, an I/O error (the
///   connection dropped or timed out), or SQLite's worker thread crashed;
/// - PostgreSQL: a serialization failure (`40001`), a deadlock (`40P01`), a
///   connection exception (class `08`), the server shutting down or not
///   yet accepting connections (`57P01`, `57P02`, `57P03`), or a full disk
///   (`53100`);
/// - SQLite: `SQLITE_BUSY` or `SQLITE_LOCKED`, with any extended code, or
///   `SQLITE_FULL` (the disk, or the write-ahead log's filesystem, is full).
///
/// A full disk is transient because it is a state of the machine, not of
/// the call: space comes back (a log rotated, a data dir pruned, an
/// operator), and the same write then succeeds. Callers retry transient
/// errors only within a bound (the session layer's settle and report
/// writes, the reaper's next period), so a disk that stays full costs that
/// bound and then the write is given up as before, while one that clears
/// meanwhile loses nothing. A full disk never half-writes: the failed
/// commit rolled the statement back (see `completed.rs`).
///
/// Everything else is permanent: constraint and data errors, a closed pool
/// (closed on purpose), configuration, TLS, protocol and decoding errors,
/// and every other database error.
///
/// `backend` is `postgres` or `sqlite`: it says how to read a database
/// error's code.
pub(crate) fn is_transient(backend: &str, e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|code| is_transient_code(backend, &code)),
        _ => false,
    }
}

/// Whether a database error code is transient: an SQLite result code (a
/// decimal number, the primary code in its low byte) or a PostgreSQL
/// SQLSTATE, by `backend`.
pub(crate) fn is_transient_code(backend: &str, code: &str) -> bool {
    const SQLITE_BUSY: i64 = 5;
    const SQLITE_LOCKED: i64 = 6;
    const SQLITE_FULL: i64 = 13;
    if backend == "sqlite" {
        return code
            .parse::<i64>()
            .is_ok_and(|c| matches!(c & 0xff, SQLITE_BUSY | SQLITE_LOCKED | SQLITE_FULL));
    }
    matches!(
        code,
        "40001" | "40P01" | "57P01" | "57P02" | "57P03" | "53100"
    ) || code.starts_with("08")
}

/// A driver error as a `Backend` store error, classified by [`is_transient`].
pub(crate) fn store_backend(backend: &'static str, e: sqlx::Error) -> StoreError {
    if is_transient(backend, &e) {
        StoreError::transient(backend, e)
    } else {
        StoreError::permanent(backend, e)
    }
}

/// Any driver error, when no semantic mapping applies (reads).
pub(crate) fn backend(backend: &'static str) -> impl Fn(sqlx::Error) -> StoreError {
    move |e| store_backend(backend, e)
}

/// Stored data that does not fit the model: permanent.
pub(crate) fn unexpected(backend: &'static str, what: impl Into<String>) -> StoreError {
    StoreError::permanent(backend, UnexpectedData(what.into()))
}

/// A turn-log driver error: `Backend`, classified by [`is_transient`].
pub(crate) fn log_backend(backend: &'static str) -> impl Fn(sqlx::Error) -> LogError {
    move |e| {
        if is_transient(backend, &e) {
            LogError::transient(backend, e)
        } else {
            LogError::permanent(backend, e)
        }
    }
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

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    #[test]
    fn pool_timeouts_io_and_crashed_workers_are_transient() {
        for backend in ["postgres", "sqlite"] {
            assert!(store_backend(backend, sqlx::Error::PoolTimedOut).is_transient());
            let reset = io::Error::from(io::ErrorKind::ConnectionReset);
            assert!(store_backend(backend, sqlx::Error::Io(reset)).is_transient());
            assert!(store_backend(backend, sqlx::Error::WorkerCrashed).is_transient());
            let eof = io::Error::from(io::ErrorKind::UnexpectedEof);
            assert!(log_backend(backend)(sqlx::Error::Io(eof)).is_transient());
            assert!(log_backend(backend)(sqlx::Error::PoolTimedOut).is_transient());
        }
    }

    #[test]
    fn closed_pools_protocol_and_decoding_errors_are_permanent() {
        let permanent = [
            sqlx::Error::PoolClosed,
            sqlx::Error::RowNotFound,
            sqlx::Error::Protocol("unexpected message".into()),
            sqlx::Error::ColumnNotFound("detail".into()),
            sqlx::Error::Decode("bad uuid".into()),
            sqlx::Error::Configuration("bad url".into()),
        ];
        for e in permanent {
            let shown = e.to_string();
            assert!(!store_backend("postgres", e).is_transient(), "{shown}");
        }
        assert!(!log_backend("sqlite")(sqlx::Error::PoolClosed).is_transient());
        assert!(!unexpected("sqlite", "status \"paused\"").is_transient());
    }

    #[test]
    fn postgres_serialization_deadlock_and_connection_codes_are_transient() {
        for code in [
            "40001", "40P01", "08006", "08003", "57P01", "57P03", "53100",
        ] {
            assert!(is_transient_code("postgres", code), "{code}");
        }
        // Unique violation, foreign key, not null, check, syntax, and a
        // statement timeout cancelled on purpose.
        for code in ["23505", "23503", "23502", "23514", "42601", "57014"] {
            assert!(!is_transient_code("postgres", code), "{code}");
        }
    }

    #[test]
    fn sqlite_busy_locked_and_full_are_transient_with_any_extended_code() {
        // SQLITE_BUSY, _RECOVERY, _SNAPSHOT, _TIMEOUT; SQLITE_LOCKED,
        // _SHAREDCACHE, _VTAB; SQLITE_FULL (a full disk may clear).
        for code in ["5", "261", "517", "773", "6", "262", "518", "13"] {
            assert!(is_transient_code("sqlite", code), "{code}");
        }
        // SQLITE_ERROR, SQLITE_CONSTRAINT_UNIQUE, _FOREIGNKEY,
        // SQLITE_READONLY, SQLITE_CORRUPT.
        for code in ["1", "2067", "787", "8", "11"] {
            assert!(!is_transient_code("sqlite", code), "{code}");
        }
    }
}
