//! The `korvus-testkit` Store, Coordination, Budgets and TurnLog contracts, one `#[tokio::test]`
//! per case, against PostgreSQL and SQLite, each case on a fresh database.

mod pg_store {
    use korvus_store_sql::PgStore;

    use crate::support::{database_url, PgDb, With};

    async fn subject() -> With<PgStore, PgDb> {
        let db = PgDb::create().await.expect("skip_unless checked the URL");
        With {
            backend: PgStore::new(db.pool().clone()),
            db,
        }
    }

    // Without `KORVUS_TEST_DATABASE_URL` each case returns early after
    // `database_url()` printed why (or panicked under `cargo xtask test`).
    korvus_testkit::store_contract_tests!(
        subject(),
        skip_unless = database_url().is_some(),
        teardown = |s: With<PgStore, PgDb>| async move {
            drop(s.backend);
            s.db.drop_db().await;
        }
    );

    mod coordination {
        use korvus_store_sql::PgStore;

        use super::subject;
        use crate::support::{database_url, PgDb, With};

        korvus_testkit::coordination_contract_tests!(
            subject(),
            skip_unless = database_url().is_some(),
            teardown = |s: With<PgStore, PgDb>| async move {
                drop(s.backend);
                s.db.drop_db().await;
            }
        );
    }

    mod budgets {
        use korvus_store_sql::PgStore;

        use super::subject;
        use crate::support::{database_url, PgDb, With};

        korvus_testkit::budgets_contract_tests!(
            subject(),
            skip_unless = database_url().is_some(),
            teardown = |s: With<PgStore, PgDb>| async move {
                drop(s.backend);
                s.db.drop_db().await;
            }
        );
    }
}

mod pg_log {
    use korvus_store_sql::PgLog;

    use crate::support::{database_url, PgDb, With};

    async fn subject() -> With<PgLog, PgDb> {
        let db = PgDb::create().await.expect("skip_unless checked the URL");
        With {
            backend: PgLog::new(db.pool().clone()),
            db,
        }
    }

    korvus_testkit::log_contract_tests!(
        subject(),
        skip_unless = database_url().is_some(),
        teardown = |s: With<PgLog, PgDb>| async move {
            drop(s.backend);
            s.db.drop_db().await;
        }
    );
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

    mod coordination {
        use korvus_store_sql::SqliteStore;

        use super::subject;
        use crate::support::{SqliteDb, With};

        korvus_testkit::coordination_contract_tests!(
            subject(),
            teardown = |s: With<SqliteStore, SqliteDb>| async move { s.db.close().await }
        );
    }

    mod budgets {
        use korvus_store_sql::SqliteStore;

        use super::subject;
        use crate::support::{SqliteDb, With};

        korvus_testkit::budgets_contract_tests!(
            subject(),
            teardown = |s: With<SqliteStore, SqliteDb>| async move { s.db.close().await }
        );
    }
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
