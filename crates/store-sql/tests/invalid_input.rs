//! Bad input beyond the contract's cases: every text field is checked before
//! the database sees it, the same on both backends.

use korvus_store::StoreExt as _;
use korvus_store::{
    validate, ContextRef, NewIncident, NewSession, SessionId, Store, StoreError, WorkspaceRef,
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
                runner: None,
                admission: Default::default(),
                lease: None,
                id: SessionId::new(),
                incident_id: inc.id,
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
    assert_eq!(store.all_session_artifacts(s.id).await.unwrap().len(), 1);
    assert_eq!(store.all_sessions(inc.id).await.unwrap().len(), 1);
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
