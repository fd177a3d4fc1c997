//! How every statement here is read: **a statement's rows are read only
//! after it completed; in autocommit that includes its commit.**
//!
//! SQLite commits a statement that runs outside an explicit transaction
//! (autocommit) when the statement is stepped to its end (`SQLITE_DONE`),
//! and that last step answers the commit's error. sqlx's SQLite
//! `fetch_optional` and `fetch_one` step a statement only to its first row
//! and then reset it; the reset runs the commit, and sqlx drops what the
//! reset answers. An `UPDATE … RETURNING` whose commit failed (`SQLITE_FULL`
//! on a full disk: the write-ahead log could not grow) was so answered with
//! its row, and the session layer was told of a settle that never happened
//! (`tests/commit_faults.rs` reproduces it on a full tmpfs). `fetch_all`
//! and `execute` step every statement to its end, so the commit happens
//! inside the statement's last step and its error is the call's.
//!
//! [`Completed`] is that read, written once: the row of a statement that
//! returns at most one, read with `fetch_all`. Every statement of this
//! crate that returns rows is read with it or with `fetch_all`, reads too,
//! so there is no list of exceptions to keep; on SQLite a read pays one
//! more step, on PostgreSQL nothing (sqlx's PostgreSQL `fetch_optional`
//! already reads every response, a commit's error included). A test in
//! `snapshot.rs` fails when `fetch_optional` or `fetch_one` appears in
//! `src/`. Inside an explicit transaction the commit is
//! `Transaction::commit`, whose result every caller checks; on SQLite a
//! connection whose commit failed is then closed, not reused
//! (`still_usable`, `open_sqlite`'s pool hook).

use std::future::Future;
use std::pin::Pin;

use sqlx::{Database, Executor, FromRow, IntoArguments};

/// A boxed `Send` future, as sqlx's executors answer: one with a named
/// type and lifetime, so the `async_trait` methods that await it stay
/// `Send` for every lifetime (an `async fn` of a generic trait is not
/// proven so).
pub(crate) type BoxFuture<'e, T> = Pin<Box<dyn Future<Output = T> + Send + 'e>>;

/// A statement read only once it completed (see the module docs): the
/// `fetch_optional` and `fetch_one` of this crate.
pub(crate) trait Completed<'q, DB: Database>: Sized {
    /// What one row decodes to.
    type Row: Send;

    /// Runs the statement to its end and answers its first row, or `None`
    /// when it returned none. For statements that return at most one row
    /// (by key, `LIMIT 1`, an aggregate).
    fn fetch_optional_completed<'e, 'c: 'e, E>(
        self,
        executor: E,
    ) -> BoxFuture<'e, Result<Option<Self::Row>, sqlx::Error>>
    where
        'q: 'e,
        Self: 'e,
        E: 'e + Executor<'c, Database = DB>;

    /// As [`fetch_optional_completed`](Completed::fetch_optional_completed),
    /// but no row is `RowNotFound`, as sqlx's `fetch_one` answers.
    fn fetch_one_completed<'e, 'c: 'e, E>(
        self,
        executor: E,
    ) -> BoxFuture<'e, Result<Self::Row, sqlx::Error>>
    where
        'q: 'e,
        Self: 'e,
        E: 'e + Executor<'c, Database = DB>,
    {
        let rows = self.fetch_optional_completed(executor);
        Box::pin(async move { rows.await?.ok_or(sqlx::Error::RowNotFound) })
    }
}

impl<'q, DB, O, A> Completed<'q, DB> for sqlx::query::QueryAs<'q, DB, O, A>
where
    DB: Database,
    A: 'q + Send + IntoArguments<'q, DB>,
    O: Send + Unpin + for<'r> FromRow<'r, DB::Row>,
{
    type Row = O;

    fn fetch_optional_completed<'e, 'c: 'e, E>(
        self,
        executor: E,
    ) -> BoxFuture<'e, Result<Option<O>, sqlx::Error>>
    where
        'q: 'e,
        Self: 'e,
        E: 'e + Executor<'c, Database = DB>,
    {
        let rows = self.fetch_all(executor);
        Box::pin(async move { Ok(rows.await?.into_iter().next()) })
    }
}

impl<'q, DB, O, A> Completed<'q, DB> for sqlx::query::QueryScalar<'q, DB, O, A>
where
    DB: Database,
    A: 'q + Send + IntoArguments<'q, DB>,
    O: Send + Unpin,
    (O,): Send + Unpin + for<'r> FromRow<'r, DB::Row>,
{
    type Row = O;

    fn fetch_optional_completed<'e, 'c: 'e, E>(
        self,
        executor: E,
    ) -> BoxFuture<'e, Result<Option<O>, sqlx::Error>>
    where
        'q: 'e,
        Self: 'e,
        E: 'e + Executor<'c, Database = DB>,
    {
        let rows = self.fetch_all(executor);
        Box::pin(async move { Ok(rows.await?.into_iter().next()) })
    }
}

/// Whether a connection given back to the pool may serve again: not when
/// it still counts a transaction. A `COMMIT` that fails with `SQLITE_FULL`
/// or an I/O error is rolled back by SQLite itself, so the `ROLLBACK` sqlx
/// sends when the failed transaction is dropped fails too ("no transaction
/// is active"), and sqlx's count of open transactions on that connection
/// stays at one for good: each later `begin_with(BEGIN IMMEDIATE)` on it
/// is refused (`InvalidSavePointStatement`) long after the disk has room
/// again. Such a connection is closed instead (the pool opens a fresh one).
/// Nearly every connection comes back with no transaction counted and costs
/// one load; one whose transaction was just dropped first lets the worker
/// run the queued rollback (a ping), then is judged.
#[cfg(feature = "sqlite")]
pub(crate) async fn still_usable(conn: &mut sqlx::SqliteConnection) -> Result<bool, sqlx::Error> {
    use sqlx::Connection as _;
    if !conn.is_in_transaction() {
        return Ok(true);
    }
    conn.ping().await?;
    Ok(!conn.is_in_transaction())
}
