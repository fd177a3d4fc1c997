//! Every case of the three suites, in order, on one shared database: the cases
//! must not interfere with each other or with existing rows.

use korvus_store_sql::{PgLog, PgStore, SqliteLog, SqliteStore};

use crate::support::{PgDb, SqliteDb};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_run_all() {
    let Some(db) = PgDb::create().await else {
        return;
    };
    korvus_testkit::store::run_all(&PgStore::new(db.pool().clone())).await;
    korvus_testkit::coordination::run_all(&PgStore::new(db.pool().clone())).await;
    korvus_testkit::log::run_all(&PgLog::new(db.pool().clone())).await;
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_run_all() {
    let db = SqliteDb::create().await;
    korvus_testkit::store::run_all(&SqliteStore::new(db.pool().clone())).await;
    korvus_testkit::coordination::run_all(&SqliteStore::new(db.pool().clone())).await;
    korvus_testkit::log::run_all(&SqliteLog::new(db.pool().clone())).await;
    db.close().await;
}
