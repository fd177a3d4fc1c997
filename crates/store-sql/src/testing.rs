//! Test databases for korvus's own tests and for embedders testing against
//! real backends: one fresh PostgreSQL database (copied from a migrated
//! template) or SQLite file per test. Behind the `testing` feature.
//!
//! PostgreSQL comes from `KORVUS_TEST_DATABASE_URL` (set by
//! `cargo xtask test`). When it is missing, [`database_url`] panics if
//! `KORVUS_REQUIRE_SERVICES=1` and otherwise prints why and returns `None`,
//! so a plain `cargo test` can skip.

use std::io::Write;
use std::ops::Deref;
use std::str::FromStr;

use korvus_store_sql::{migrate, open_sqlite, PgPool, SqlitePool};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection};
use tokio::sync::OnceCell;

/// Where `cargo xtask test` puts the throwaway cluster's URL.
const URL_VAR: &str = "KORVUS_TEST_DATABASE_URL";
/// Set by `cargo xtask test`: a missing service is a failure, not a skip.
const REQUIRE_VAR: &str = "KORVUS_REQUIRE_SERVICES";
/// The migrated database every test database is copied from.
const TEMPLATE: &str = "korvus_test_template";
/// Serialises template builds and copies across test processes.
const LOCK_KEY: i64 = 0x6b6f_7276_7573; // "korvus"

/// The server's URL, or `None` (with the reason printed) when PostgreSQL
/// tests may be skipped.
///
/// # Panics
/// When the URL is missing under `cargo xtask test`.
pub fn database_url() -> Option<String> {
    match std::env::var(URL_VAR) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var(REQUIRE_VAR).as_deref() == Ok("1") => panic!(
            "{URL_VAR} is not set but {REQUIRE_VAR}=1: PostgreSQL tests must run; \
             `cargo xtask test` starts a server and sets it"
        ),
        _ => {
            // Straight to stderr, past the test harness's capture, so a
            // plain `cargo test` shows why PostgreSQL tests passed vacuously.
            let _ = writeln!(
                std::io::stderr(),
                "skipped: {URL_VAR} is not set (run `cargo xtask test` to start a throwaway \
                 PostgreSQL, or point {URL_VAR} at one)"
            );
            None
        }
    }
}

/// A database of its own for one test, copied from the migrated template.
/// Call [`PgDb::drop_db`] at the end; a database left by a failed test dies
/// with the throwaway cluster.
#[derive(Debug)]
pub struct PgDb {
    admin: PgConnectOptions,
    name: String,
    pool: PgPool,
}

static TEMPLATE_READY: OnceCell<()> = OnceCell::const_new();

impl PgDb {
    /// A fresh migrated database, or `None` when PostgreSQL tests are skipped.
    pub async fn create() -> Option<PgDb> {
        let url = database_url()?;
        let admin = PgConnectOptions::from_str(&url).expect("KORVUS_TEST_DATABASE_URL parses");
        let name = format!("korvus_test_{}", uuid::Uuid::now_v7().simple());
        let mut conn = PgConnection::connect_with(&admin)
            .await
            .expect("connect to the test server");
        // CREATE DATABASE … TEMPLATE fails while anyone is connected to the
        // template, so building it and copying it take turns.
        sqlx::query("SELECT pg_advisory_lock($1)")
            .bind(LOCK_KEY)
            .execute(&mut conn)
            .await
            .expect("take the template lock");
        TEMPLATE_READY.get_or_init(|| build_template(&admin)).await;
        sqlx::query(&format!("CREATE DATABASE {name} TEMPLATE {TEMPLATE}"))
            .execute(&mut conn)
            .await
            .expect("create the test database");
        sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(LOCK_KEY)
            .execute(&mut conn)
            .await
            .expect("release the template lock");
        conn.close().await.ok();
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .connect_with(admin.clone().database(&name))
            .await
            .expect("connect to the test database");
        Some(PgDb { admin, name, pool })
    }

    /// The pool of this test's database.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// This test's database name, for another process to [`connect`](PgDb::connect) to.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A pool on the test server's database `name` (made by another
    /// process's [`PgDb::create`]), or `None` when PostgreSQL tests are
    /// skipped.
    pub async fn connect(name: &str, max_connections: u32) -> Option<PgPool> {
        let url = database_url()?;
        let admin = PgConnectOptions::from_str(&url).expect("KORVUS_TEST_DATABASE_URL parses");
        Some(
            PgPoolOptions::new()
                .max_connections(max_connections)
                .connect_with(admin.database(name))
                .await
                .expect("connect to the test database"),
        )
    }

    /// Closes the pool and drops the database.
    pub async fn drop_db(self) {
        self.pool.close().await;
        let mut conn = PgConnection::connect_with(&self.admin)
            .await
            .expect("connect to the test server");
        sqlx::query(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ))
        .execute(&mut conn)
        .await
        .expect("drop the test database");
        conn.close().await.ok();
    }
}

/// (Re)builds the template once per test process, under the advisory lock:
/// migrating an existing template is a no-op when it is current, and a
/// template from changed migrations is rebuilt.
async fn build_template(admin: &PgConnectOptions) {
    let mut conn = PgConnection::connect_with(admin)
        .await
        .expect("connect to the test server");
    // Read to its end, as every statement of this crate is (`completed.rs`).
    let exists: Vec<i32> = sqlx::query_scalar("SELECT 1 FROM pg_database WHERE datname = $1")
        .bind(TEMPLATE)
        .fetch_all(&mut conn)
        .await
        .expect("look for the template");
    if !exists.is_empty() && migrate_db(admin, TEMPLATE).await.is_ok() {
        conn.close().await.ok();
        return;
    }
    sqlx::query(&format!("DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)"))
        .execute(&mut conn)
        .await
        .expect("drop a stale template");
    sqlx::query(&format!("CREATE DATABASE {TEMPLATE}"))
        .execute(&mut conn)
        .await
        .expect("create the template");
    conn.close().await.ok();
    migrate_db(admin, TEMPLATE)
        .await
        .expect("migrate the template");
}

async fn migrate_db(admin: &PgConnectOptions, name: &str) -> korvus_store::Result<()> {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(admin.clone().database(name))
        .await
        .expect("connect to the template");
    let result = migrate(&pool).await;
    // Nobody may stay connected to a template that is copied.
    pool.close().await;
    result
}

/// A SQLite database in its own temporary directory, removed on drop.
#[derive(Debug)]
pub struct SqliteDb {
    pool: SqlitePool,
    _dir: tempfile::TempDir,
}

impl SqliteDb {
    /// A fresh migrated database.
    pub async fn create() -> SqliteDb {
        let dir = tempfile::tempdir().expect("temp dir");
        let pool = open_sqlite(&dir.path().join("korvus.db"))
            .await
            .expect("open sqlite");
        migrate(&pool).await.expect("migrate sqlite");
        SqliteDb { pool, _dir: dir }
    }

    /// The pool.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Closes the pool (the directory goes with `self`).
    pub async fn close(self) {
        self.pool.close().await;
    }
}

/// A backend together with the database it runs on, so a contract case's
/// subject keeps its database alive; dereferences to the backend.
#[derive(Debug)]
pub struct With<B, D> {
    /// The backend under test.
    pub backend: B,
    /// The database it runs on.
    pub db: D,
}

impl<B, D> Deref for With<B, D> {
    type Target = B;
    fn deref(&self) -> &B {
        &self.backend
    }
}
