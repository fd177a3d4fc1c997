//! Integration tests of korvus-store-sql: the `korvus-testkit` Store and
//! TurnLog contracts against PostgreSQL and SQLite, plus what only SQL
//! backends have (database-enforced keys, driver-error mapping, migrations).
//!
//! PostgreSQL tests need `KORVUS_TEST_DATABASE_URL` (set by `cargo xtask
//! test`, which starts a throwaway server); each gets a database of its own.
//! Without the URL they fail under `cargo xtask test` and are skipped, with
//! the reason printed, under a plain `cargo test`. SQLite tests use their own
//! temporary files.

mod support;

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

mod pg_store_contract {
    korvus_testkit::__with_cases!(store, [pg_contract], (store, korvus_store_sql::PgStore,));
}

mod pg_log_contract {
    korvus_testkit::__with_cases!(log, [pg_contract], (log, korvus_store_sql::PgLog,));
}

mod sqlite_store_contract {
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

mod sqlite_log_contract {
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

/// Rules the databases enforce themselves, checked by writing rows with raw
/// SQL that bypasses the store entirely.
mod database_keys {
    use korvus_store::{constraint, ContextRef, Store, StoreError};
    use korvus_store_sql::{PgStore, SqliteStore};
    use korvus_testkit::store::{incident, new_artifact, session};
    use sqlx::error::ErrorKind;

    use crate::support::{PgDb, SqliteDb};

    /// Two incidents, each with a session and an artifact.
    struct World {
        mine: korvus_store::Session,
        theirs: korvus_store::Session,
        their_artifact: korvus_store::Artifact,
    }

    async fn world(store: &dyn Store) -> World {
        let a = incident(store).await;
        let b = incident(store).await;
        let mine = session(store, &a).await;
        let theirs = session(store, &b).await;
        store
            .create_artifacts(vec![new_artifact(&mine, "mine.md", 1)])
            .await
            .unwrap();
        let their_artifact = store
            .create_artifacts(vec![new_artifact(&theirs, "theirs.md", 1)])
            .await
            .unwrap()
            .remove(0);
        World {
            mine,
            theirs,
            their_artifact,
        }
    }

    fn assert_fk(result: Result<impl std::fmt::Debug, sqlx::Error>, name: Option<&str>) {
        match result {
            Err(sqlx::Error::Database(db)) => {
                assert_eq!(db.kind(), ErrorKind::ForeignKeyViolation, "{db}");
                if let Some(name) = name {
                    assert_eq!(db.constraint(), Some(name));
                }
            }
            other => panic!("expected a foreign-key violation, got {other:?}"),
        }
    }

    /// Through the store: refused with the constraint name, nothing written.
    async fn store_refuses(store: &dyn Store, w: &World) {
        let refs = [ContextRef {
            artifact_id: w.their_artifact.id,
            role: "input".into(),
        }];
        match store.insert_context_refs(w.mine.id, &refs).await {
            Err(StoreError::Constraint { name }) => {
                assert_eq!(name, constraint::CONTEXT_REFS_ARTIFACT_FK)
            }
            other => panic!("expected Constraint, got {other:?}"),
        }
        assert!(store.list_context_refs(w.mine.id).await.unwrap().is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_refuses_cross_incident_refs_written_with_raw_sql() {
        let Some(db) = PgDb::create().await else {
            return;
        };
        let store = PgStore::new(db.pool().clone());
        let w = world(&store).await;
        // The ref claims the session's incident: the artifact key fails.
        let raw = sqlx::query(
            "INSERT INTO session_context_refs (session_id, incident_id, artifact_id, role, position) \
             VALUES ($1, $2, $3, 'input', 0)",
        );
        let result = raw
            .bind(w.mine.id.as_uuid())
            .bind(w.mine.incident_id.as_uuid())
            .bind(w.their_artifact.id.as_uuid())
            .execute(db.pool())
            .await;
        assert_fk(result, Some(constraint::CONTEXT_REFS_ARTIFACT_FK));
        // The ref claims the artifact's incident: the session key fails.
        let result = sqlx::query(
            "INSERT INTO session_context_refs (session_id, incident_id, artifact_id, role, position) \
             VALUES ($1, $2, $3, 'input', 0)",
        )
        .bind(w.mine.id.as_uuid())
        .bind(w.theirs.incident_id.as_uuid())
        .bind(w.their_artifact.id.as_uuid())
        .execute(db.pool())
        .await;
        assert_fk(result, Some(constraint::CONTEXT_REFS_SESSION_FK));
        // A report and an artifact naming a session of another incident.
        let result = sqlx::query(
            "INSERT INTO reports (session_id, incident_id, revision, markdown_bytes, exit_reason, \
             turns, tool_calls, input_tokens, output_tokens, created_at) \
             VALUES ($1, $2, 1, 0, 'x', 0, 0, 0, 0, now())",
        )
        .bind(w.mine.id.as_uuid())
        .bind(w.theirs.incident_id.as_uuid())
        .execute(db.pool())
        .await;
        assert_fk(result, Some(constraint::REPORTS_SESSION_FK));
        store_refuses(&store, &w).await;
        drop(store);
        db.drop_db().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_refuses_cross_incident_refs_written_with_raw_sql() {
        let db = SqliteDb::create().await;
        let store = SqliteStore::new(db.pool().clone());
        let w = world(&store).await;
        // SQLite does not name the failed key; the kind is what it reports.
        let result = sqlx::query(
            "INSERT INTO session_context_refs (session_id, incident_id, artifact_id, role, position) \
             VALUES ($1, $2, $3, 'input', 0)",
        )
        .bind(w.mine.id.as_uuid())
        .bind(w.mine.incident_id.as_uuid())
        .bind(w.their_artifact.id.as_uuid())
        .execute(db.pool())
        .await;
        assert_fk(result, None);
        let result = sqlx::query(
            "INSERT INTO session_context_refs (session_id, incident_id, artifact_id, role, position) \
             VALUES ($1, $2, $3, 'input', 0)",
        )
        .bind(w.mine.id.as_uuid())
        .bind(w.theirs.incident_id.as_uuid())
        .bind(w.their_artifact.id.as_uuid())
        .execute(db.pool())
        .await;
        assert_fk(result, None);
        let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM session_context_refs")
            .fetch_one(db.pool())
            .await
            .unwrap();
        assert_eq!(count, 0);
        store_refuses(&store, &w).await;
        drop(store);
        db.close().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_schema_names_every_contract_constraint() {
        let Some(db) = PgDb::create().await else {
            return;
        };
        for name in [
            constraint::SESSIONS_INCIDENT_FK,
            constraint::REPORTS_SESSION_FK,
            constraint::ARTIFACTS_SESSION_FK,
            constraint::CONTEXT_REFS_ARTIFACT_FK,
            constraint::CONTEXT_REFS_SESSION_FK,
        ] {
            let kind: Option<String> =
                sqlx::query_scalar("SELECT contype::text FROM pg_constraint WHERE conname = $1")
                    .bind(name)
                    .fetch_optional(db.pool())
                    .await
                    .unwrap();
            assert_eq!(kind.as_deref(), Some("f"), "{name} is a foreign key");
        }
        db.drop_db().await;
    }

    #[tokio::test]
    async fn sqlite_schema_names_every_contract_constraint() {
        let db = SqliteDb::create().await;
        let schema: Vec<String> =
            sqlx::query_scalar("SELECT sql FROM sqlite_master WHERE type = 'table'")
                .fetch_all(db.pool())
                .await
                .unwrap();
        let schema = schema.join("\n");
        for name in [
            constraint::SESSIONS_INCIDENT_FK,
            constraint::REPORTS_SESSION_FK,
            constraint::ARTIFACTS_SESSION_FK,
            constraint::CONTEXT_REFS_ARTIFACT_FK,
            constraint::CONTEXT_REFS_SESSION_FK,
        ] {
            assert!(
                schema.contains(&format!("CONSTRAINT {name} FOREIGN KEY")),
                "{name} missing"
            );
        }
        db.close().await;
    }
}

/// Bad input beyond the contract's cases: every text field is checked before
/// the database sees it, the same on both backends.
mod invalid_input {
    use korvus_store::{
        validate, ContextRef, NewIncident, NewSession, SessionId, SessionKind, Store, StoreError,
        WorkspaceRef,
    };
    use korvus_store_sql::{PgStore, SqliteStore};
    use korvus_testkit::store::{incident, new_artifact, session};

    use crate::support::{PgDb, SqliteDb};

    fn assert_invalid<T: std::fmt::Debug>(result: Result<T, StoreError>, field: &str) {
        match result {
            Err(StoreError::InvalidInput { field: f, .. }) => assert_eq!(f, field),
            other => panic!("expected InvalidInput {{ {field} }}, got {other:?}"),
        }
    }

    async fn refused_before_the_database(store: &dyn Store) {
        let inc = incident(store).await;
        assert_invalid(
            store
                .create_incident(NewIncident {
                    title: "ok".into(),
                    workspace: Some(WorkspaceRef {
                        repo: "/srv/\0repo".into(),
                        commit: "abc".into(),
                    }),
                })
                .await,
            "workspace.repo",
        );
        assert_invalid(
            store
                .create_session(NewSession {
                    id: SessionId::new(),
                    incident_id: inc.id,
                    kind: SessionKind::Initial,
                    prompt: "fine".into(),
                    workspace_ref: Some(WorkspaceRef {
                        repo: "/srv/repo".into(),
                        commit: "c".repeat(validate::MAX_PATH_BYTES + 1),
                    }),
                })
                .await,
            "workspace.commit",
        );
        let s = session(store, &inc).await;
        let art = store
            .create_artifacts(vec![new_artifact(&s, "a.md", 1)])
            .await
            .unwrap();
        for role in [
            "in\0put".to_owned(),
            "r".repeat(validate::MAX_ROLE_BYTES + 1),
        ] {
            let refs = [ContextRef {
                artifact_id: art[0].id,
                role,
            }];
            assert_invalid(store.insert_context_refs(s.id, &refs).await, "role");
        }
        assert!(store.list_context_refs(s.id).await.unwrap().is_empty());
        let mut bad_key = new_artifact(&s, "b.md", 1);
        bad_key.blob_key = "k\0".into();
        assert_invalid(store.create_artifacts(vec![bad_key]).await, "blob_key");
        let mut bad_size = new_artifact(&s, "c.md", 1);
        bad_size.size_bytes = u64::MAX;
        assert_invalid(store.create_artifacts(vec![bad_size]).await, "size_bytes");
        assert_eq!(store.list_session_artifacts(s.id).await.unwrap().len(), 1);
        assert_eq!(store.list_sessions(inc.id).await.unwrap().len(), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        let Some(db) = PgDb::create().await else {
            return;
        };
        refused_before_the_database(&PgStore::new(db.pool().clone())).await;
        db.drop_db().await;
    }

    #[tokio::test]
    async fn sqlite() {
        let db = SqliteDb::create().await;
        refused_before_the_database(&SqliteStore::new(db.pool().clone())).await;
        db.close().await;
    }
}

/// Driver failures surface as `Backend`, never as a panic or a raw sqlx error.
mod driver_errors {
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
}

/// SQL turn logs beyond the contract: the same export as the reference
/// backends, and contiguous numbering when two services append to one log.
mod turn_logs {
    use korvus_log::{export_jsonl, Access, Event, EventKind, LogHeader, MemoryLog, TurnLog};
    use korvus_store_sql::{PgLog, SqliteLog};
    use korvus_testkit::log::{fresh_id, sample_events};

    use crate::support::{PgDb, SqliteDb};

    async fn export(logs: &dyn TurnLog, header: &LogHeader, events: &[Event]) -> String {
        let w = logs.create(header.clone()).await.unwrap();
        w.append(&events[..7]).await.unwrap();
        w.append(&events[7..]).await.unwrap();
        w.close().await.unwrap();
        let r = logs.open(header.id, Access::Read).await.unwrap();
        String::from_utf8(export_jsonl(&r).await.unwrap()).unwrap()
    }

    /// Two services (as in two processes) append to one log at once; every
    /// event lands exactly once, numbered contiguously.
    async fn concurrent_services_append_contiguously(a: &dyn TurnLog, b: &dyn TurnLog) {
        let id = fresh_id();
        a.create(LogHeader::new(id))
            .await
            .unwrap()
            .close()
            .await
            .unwrap();
        let wa = a.open(id, Access::Write).await.unwrap();
        let wb = b.open(id, Access::Write).await.unwrap();
        let batches: Vec<_> = (0..10).map(sample_events).collect();
        let appends = batches.iter().enumerate().map(|(turn, events)| {
            let w = if turn % 2 == 0 { &wa } else { &wb };
            w.append(events)
        });
        for r in futures::future::join_all(appends).await {
            r.unwrap();
        }
        let r = a.open(id, Access::Read).await.unwrap();
        let all = r.read(0, None).await.unwrap();
        assert_eq!(all.len(), 60);
        // Each append's six events stay together and in order.
        let mut turns: Vec<u64> = all
            .chunks(6)
            .map(|chunk| {
                let EventKind::TurnStart { turn } = chunk[0].kind else {
                    panic!("an append was split: {chunk:?}");
                };
                let kinds: Vec<&EventKind> = chunk.iter().map(|e| &e.kind).collect();
                let expected = sample_events(turn);
                assert_eq!(kinds, expected.iter().map(|e| &e.kind).collect::<Vec<_>>());
                turn
            })
            .collect();
        turns.sort_unstable();
        assert_eq!(turns, (0..10).collect::<Vec<u64>>());
        let stat = a.stat(id).await.unwrap();
        assert_eq!(stat.event_count, Some(60));
        wa.close().await.unwrap();
        wb.close().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        let Some(db) = PgDb::create().await else {
            return;
        };
        let header = LogHeader::new(fresh_id()).with_label("incident_id", "x");
        let events: Vec<Event> = (1..=4).flat_map(sample_events).collect();
        let memory = export(&MemoryLog::new(), &header, &events).await;
        let pg = export(&PgLog::new(db.pool().clone()), &header, &events).await;
        assert_eq!(pg, memory, "byte-identical export");
        concurrent_services_append_contiguously(
            &PgLog::new(db.pool().clone()),
            &PgLog::new(db.pool().clone()),
        )
        .await;
        db.drop_db().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        let db = SqliteDb::create().await;
        let header = LogHeader::new(fresh_id()).with_label("incident_id", "x");
        let events: Vec<Event> = (1..=4).flat_map(sample_events).collect();
        let memory = export(&MemoryLog::new(), &header, &events).await;
        let sqlite = export(&SqliteLog::new(db.pool().clone()), &header, &events).await;
        assert_eq!(sqlite, memory, "byte-identical export");
        concurrent_services_append_contiguously(
            &SqliteLog::new(db.pool().clone()),
            &SqliteLog::new(db.pool().clone()),
        )
        .await;
        db.close().await;
    }
}

/// Seq allocation holds when the creates really run on several connections
/// at once (the contract case cannot see the pool).
mod concurrency {
    use korvus_store::{NewSession, SessionId, SessionKind, Store};
    use korvus_store_sql::{PgStore, SqliteStore};
    use korvus_testkit::store::incident;

    use crate::support::{PgDb, SqliteDb};

    async fn hundred_creates(store: &dyn Store) {
        let inc = incident(store).await;
        let creates = (0..100).map(|i| {
            store.create_session(NewSession {
                id: SessionId::new(),
                incident_id: inc.id,
                kind: SessionKind::FollowUp,
                prompt: format!("p{i}"),
                workspace_ref: None,
            })
        });
        let mut seqs: Vec<u32> = futures::future::join_all(creates)
            .await
            .into_iter()
            .map(|r| r.unwrap().seq)
            .collect();
        seqs.sort_unstable();
        assert_eq!(seqs, (1..=100).collect::<Vec<u32>>());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_seq_allocation_across_connections() {
        let Some(db) = PgDb::create().await else {
            return;
        };
        hundred_creates(&PgStore::new(db.pool().clone())).await;
        assert!(
            db.pool().size() > 1,
            "the creates ran on {} connection(s)",
            db.pool().size()
        );
        db.drop_db().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_seq_allocation_across_connections() {
        let db = SqliteDb::create().await;
        hundred_creates(&SqliteStore::new(db.pool().clone())).await;
        assert!(db.pool().size() > 1, "one connection only");
        db.close().await;
    }
}

/// Every case of both suites, in order, on one shared database: the cases
/// must not interfere with each other or with existing rows.
mod shared_database {
    use korvus_store_sql::{PgLog, PgStore, SqliteLog, SqliteStore};

    use crate::support::{PgDb, SqliteDb};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_run_all() {
        let Some(db) = PgDb::create().await else {
            return;
        };
        korvus_testkit::store::run_all(&PgStore::new(db.pool().clone())).await;
        korvus_testkit::log::run_all(&PgLog::new(db.pool().clone())).await;
        db.drop_db().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_run_all() {
        let db = SqliteDb::create().await;
        korvus_testkit::store::run_all(&SqliteStore::new(db.pool().clone())).await;
        korvus_testkit::log::run_all(&SqliteLog::new(db.pool().clone())).await;
        db.close().await;
    }
}
