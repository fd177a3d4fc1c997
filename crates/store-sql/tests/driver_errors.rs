//! Driver failures surface as `Backend`, never as a panic or a raw sqlx error.

use korvus_log::{LogError, TurnLog};
use korvus_store::{IncidentId, NewIncident, Store, StoreError};
use korvus_store_sql::{PgLog, PgStore, SqliteLog, SqliteStore};
use korvus_testkit::log::fresh_id;

use crate::support::{PgDb, SqliteDb};

async fn closed_pool_is_backend(store: &dyn Store, logs: &dyn TurnLog, backend: &str) {
    match store.get_incident(IncidentId::new()).await {
        Err(StoreError::Backend { backend: b, source }) => {
            assert_eq!(b, backend);
            assert!(source.downcast_ref::<sqlx::Error>().is_some(), "{source}");
        }
        other => panic!("expected Backend, got {other:?}"),
    }
    let new = NewIncident {
        title: "t".into(),
        workspace: None,
    };
    assert!(matches!(
        store.create_incident(new).await,
        Err(StoreError::Backend { .. })
    ));
    assert!(matches!(
        logs.stat(fresh_id()).await,
        Err(LogError::Backend { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_closed_pool() {
    let Some(db) = PgDb::create().await else {
        return;
    };
    let pool = db.pool().clone();
    pool.close().await;
    closed_pool_is_backend(&PgStore::new(pool.clone()), &PgLog::new(pool), "postgres").await;
    db.drop_db().await;
}

#[tokio::test]
async fn sqlite_closed_pool() {
    let db = SqliteDb::create().await;
    let pool = db.pool().clone();
    pool.close().await;
    closed_pool_is_backend(
        &SqliteStore::new(pool.clone()),
        &SqliteLog::new(pool),
        "sqlite",
    )
    .await;
}

#[tokio::test]
async fn sqlite_without_foreign_keys_is_refused_by_migrate() {
    use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
    let dir = tempfile::tempdir().unwrap();
    let options = SqliteConnectOptions::new()
        .filename(dir.path().join("nofk.db"))
        .create_if_missing(true)
        .foreign_keys(false);
    let pool = SqlitePoolOptions::new()
        .connect_with(options)
        .await
        .unwrap();
    assert!(matches!(
        korvus_store_sql::migrate(&pool).await,
        Err(StoreError::Backend { .. })
    ));
    pool.close().await;
}
