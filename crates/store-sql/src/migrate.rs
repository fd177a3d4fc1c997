//! [`migrate`]: brings a database to the current schema.

use async_trait::async_trait;
use korvus_store::StoreError;

mod sealed {
    pub trait Sealed {}
}

/// A connection pool whose database korvus knows how to migrate:
/// [`PgPool`](sqlx::PgPool) and [`SqlitePool`](sqlx::SqlitePool). Sealed.
///
/// # Cancel safety
/// As [`migrate`](fn@migrate)'s, which is the only caller.
#[async_trait]
pub trait Migrations: sealed::Sealed + Send + Sync {
    /// Applies every pending migration of this database kind.
    #[doc(hidden)]
    async fn apply_migrations(&self) -> Result<(), StoreError>;
}

/// Applies the pending migrations of `migrations/postgres` or
/// `migrations/sqlite` (embedded at build time) to the pool's database.
///
/// Idempotent: an up-to-date database is left as it is. Concurrent calls,
/// also from several processes, are safe: PostgreSQL serialises them with
/// an advisory lock; on SQLite, which has none, a run that lost a race is
/// tried again (each migration is one transaction, applied ones are
/// skipped).
///
/// # Errors
/// `Backend` when the database cannot be reached, a migration fails, an
/// applied migration was changed since, or (SQLite) the pool's connections do
/// not enforce foreign keys.
///
/// # Cancel safety
/// Each migration runs in its own transaction: a dropped call leaves the
/// database at some migration boundary, and the next call continues from there.
/// On PostgreSQL a call dropped while it holds the migration lock gives its
/// connection back to the pool still holding it: until that connection
/// closes, a `migrate` on another connection waits.
pub async fn migrate(pool: &impl Migrations) -> Result<(), StoreError> {
    pool.apply_migrations().await
}

#[cfg(feature = "postgres")]
static POSTGRES: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

#[cfg(feature = "sqlite")]
static SQLITE: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

#[cfg(feature = "postgres")]
impl sealed::Sealed for sqlx::PgPool {}

#[cfg(feature = "postgres")]
#[async_trait]
impl Migrations for sqlx::PgPool {
    async fn apply_migrations(&self) -> Result<(), StoreError> {
        POSTGRES
            .run(self)
            .await
            .map_err(|e| StoreError::backend(crate::postgres::BACKEND, e))
    }
}

#[cfg(feature = "sqlite")]
impl sealed::Sealed for sqlx::SqlitePool {}

#[cfg(feature = "sqlite")]
#[async_trait]
impl Migrations for sqlx::SqlitePool {
    async fn apply_migrations(&self) -> Result<(), StoreError> {
        use crate::completed::Completed as _;
        use crate::sqlite::BACKEND;
        // The composite foreign keys are the point of this schema; SQLite
        // enforces them only on connections that ask for it.
        let on: i64 = sqlx::query_scalar(crate::sqlite::FOREIGN_KEYS)
            .fetch_one_completed(self)
            .await
            .map_err(|e| StoreError::backend(BACKEND, e))?;
        if on != 1 {
            return Err(crate::error::unexpected(
                BACKEND,
                "the pool's connections do not enforce foreign keys (PRAGMA foreign_keys = OFF); \
                 open it with korvus_store_sql::open_sqlite or foreign_keys(true)",
            ));
        }
        // SQLite has no lock sqlx can take around a migration run: two
        // processes migrating a fresh file race, and the loser fails (a
        // table the winner just made, a locked database). Every migration
        // is one transaction and applied ones are skipped, so running again
        // is safe: a failed run is retried a few times before it counts.
        let mut delay = std::time::Duration::from_millis(20);
        let mut attempt = 1;
        loop {
            match SQLITE.run(self).await {
                Ok(()) => return Ok(()),
                Err(_) if attempt < MIGRATE_ATTEMPTS => {
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                    attempt += 1;
                }
                Err(e) => return Err(StoreError::backend(BACKEND, e)),
            }
        }
    }
}

/// How often a SQLite migration run is tried before its error counts.
#[cfg(feature = "sqlite")]
const MIGRATE_ATTEMPTS: u32 = 6;
