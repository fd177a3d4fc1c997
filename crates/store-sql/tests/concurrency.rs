//! Seq allocation holds when the creates really run on several connections
//! at once (the contract case cannot see the pool).

use korvus_store::{NewSession, SessionId, SessionKind, Store};
use korvus_store_sql::{PgStore, SqliteStore};
use korvus_testkit::store::incident;

use crate::support::{PgDb, SqliteDb};

async fn hundred_creates(store: &dyn Store) {
    let inc = incident(store).await;
    let creates = (0..100).map(|i| {
        store.create_session(NewSession {
            lease: None,
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
