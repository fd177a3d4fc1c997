//! Rules the databases enforce themselves, checked by writing rows with raw
//! SQL that bypasses the store entirely.

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
