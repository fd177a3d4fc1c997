//! Driver failures surface as `Backend`, never as a panic or a raw sqlx
//! error, classified transient or permanent.

use korvus_log::{LogError, TurnLog};
use korvus_store::{IncidentId, NewIncident, Store, StoreError};
use korvus_store_sql::{PgLog, PgStore, SqliteLog, SqliteStore};
use korvus_testkit::log::fresh_id;

use crate::support::{PgDb, SqliteDb};

async fn closed_pool_is_backend(store: &dyn Store, logs: &dyn TurnLog, backend: &str) {
    match store.get_incident(IncidentId::new()).await {
        Err(StoreError::Backend {
            backend: b,
            transient,
            source,
        }) => {
            assert_eq!(b, backend);
            assert!(source.downcast_ref::<sqlx::Error>().is_some(), "{source}");
            assert!(!transient, "a pool closed on purpose stays closed");
        }
        other => panic!("expected Backend, got {other:?}"),
    }
    let new = NewIncident {
        title: "t".into(),
        workspace: None,
    };
    match store.create_incident(new).await {
        Err(e @ StoreError::Backend { .. }) => assert!(!e.is_transient(), "{e:?}"),
        other => panic!("expected Backend, got {other:?}"),
    }
    match logs.stat(fresh_id()).await {
        Err(e @ LogError::Backend { .. }) => assert!(!e.is_transient(), "{e:?}"),
        other => panic!("expected Backend, got {other:?}"),
    }
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

/// A write refused with `SQLITE_BUSY` (another connection holds the write
/// lock, and this one does not wait) is a transient `Backend` error, for
/// the store and the turn log alike; once the lock is gone the retry works.
#[tokio::test]
async fn sqlite_busy_is_transient() {
    use std::time::Duration;

    use korvus_log::LogHeader;
    use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("busy.db");
    let holder = korvus_store_sql::open_sqlite(&path).await.unwrap();
    korvus_store_sql::migrate(&holder).await.unwrap();
    let impatient = SqlitePoolOptions::new()
        .connect_with(
            SqliteConnectOptions::new()
                .filename(&path)
                .foreign_keys(true)
                .busy_timeout(Duration::ZERO),
        )
        .await
        .unwrap();
    let store = SqliteStore::new(impatient.clone());
    let logs = SqliteLog::new(impatient.clone());
    let new = || NewIncident {
        title: "busy".into(),
        workspace: None,
    };

    let mut lock = holder.acquire().await.unwrap();
    sqlx::query("BEGIN EXCLUSIVE")
        .execute(&mut *lock)
        .await
        .unwrap();
    match store.create_incident(new()).await {
        Err(e) => assert!(e.is_transient(), "busy store write: {e:?}"),
        Ok(i) => panic!("wrote {i:?} past an exclusive lock"),
    }
    match logs.create(LogHeader::new(fresh_id())).await {
        Err(e) => assert!(e.is_transient(), "busy log write: {e:?}"),
        Ok(_) => panic!("created a log past an exclusive lock"),
    }
    sqlx::query("ROLLBACK").execute(&mut *lock).await.unwrap();
    drop(lock);
    store
        .create_incident(new())
        .await
        .expect("retry after the lock");
    impatient.close().await;
    holder.close().await;
}

/// A database whose directory does not exist: the error names the file.
#[tokio::test]
async fn an_sqlite_open_that_fails_names_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("no/such/dir/korvus.db");
    let err = korvus_store_sql::open_sqlite(&path).await.unwrap_err();
    let mut chain = Vec::new();
    let mut next: Option<&dyn std::error::Error> = Some(&err);
    while let Some(e) = next {
        chain.push(e.to_string());
        next = e.source();
    }
    assert!(
        chain
            .iter()
            .any(|m| m.contains(&path.display().to_string())),
        "{chain:?}"
    );
}
