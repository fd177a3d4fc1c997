//! The `korvus-testkit` Store and TurnLog contracts, one `#[tokio::test]`
//! per case, against PostgreSQL and SQLite, each case on a fresh database.

/// One `#[tokio::test]` per contract case on a fresh PostgreSQL database.
///
/// `store_contract_tests!` cannot skip a case, so the case list is taken from
/// the same source the testkit macros use and each test may return early
/// when PostgreSQL is not configured.
macro_rules! pg_contract {
    ($suite:ident, $backend:path, [$($case:ident),* $(,)?]) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let Some(db) = crate::support::PgDb::create().await else {
                    return;
                };
                let subject = <$backend>::new(db.pool().clone());
                korvus_testkit::$suite::$case(&subject).await;
                drop(subject);
                db.drop_db().await;
            }
        )*
    };
}

mod pg_store {
    korvus_testkit::__with_cases!(store, [pg_contract], (store, korvus_store_sql::PgStore,));
}

mod pg_log {
    korvus_testkit::__with_cases!(log, [pg_contract], (log, korvus_store_sql::PgLog,));
}

mod sqlite_store {
    use korvus_store_sql::SqliteStore;

    use crate::support::{SqliteDb, With};

    async fn subject() -> With<SqliteStore, SqliteDb> {
        let db = SqliteDb::create().await;
        With {
            backend: SqliteStore::new(db.pool().clone()),
            db,
        }
    }

    korvus_testkit::store_contract_tests!(
        subject(),
        teardown = |s: With<SqliteStore, SqliteDb>| async move { s.db.close().await }
    );
}

mod sqlite_log {
    use korvus_store_sql::SqliteLog;

    use crate::support::{SqliteDb, With};

    async fn subject() -> With<SqliteLog, SqliteDb> {
        let db = SqliteDb::create().await;
        With {
            backend: SqliteLog::new(db.pool().clone()),
            db,
        }
    }

    korvus_testkit::log_contract_tests!(
        subject(),
        teardown = |s: With<SqliteLog, SqliteDb>| async move { s.db.close().await }
    );
}
