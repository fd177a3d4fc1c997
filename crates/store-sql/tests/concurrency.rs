//! Seq allocation holds when the creates really run on several connections
//! at once (the contract case cannot see the pool).

use korvus_store::StoreExt as _;
use korvus_store::{Coordination, NewSession, SessionId, Store};
use korvus_store_sql::{PgStore, SqliteStore};
use korvus_testkit::store::incident;

use crate::support::{PgDb, SqliteDb};

async fn hundred_creates(store: &dyn Store) {
    let inc = incident(store).await;
    let creates = (0..100).map(|i| {
        store.create_session(NewSession {
            runner: None,
            admission: Default::default(),
            lease: None,
            id: SessionId::new(),
            incident_id: inc.id,
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

/// A report row of `s`'s revision 1 presenting `fence`.
fn report_at(s: &korvus_store::Session, fence: u64, reason: &str) -> korvus_store::NewReport {
    korvus_store::NewReport {
        session_id: s.id,
        incident_id: s.incident_id,
        revision: 1,
        markdown_key: None,
        manifest_key: None,
        markdown_bytes: 0,
        exit_reason: reason.into(),
        counters: Default::default(),
        detail: None,
        salvaged_from: None,
        fence,
    }
}

/// A stale run's report insert racing a takeover, in the injected order
/// that used to lose a row: the takeover's transaction has moved the fence
/// but not committed when the insert starts. The insert waits for the
/// session row (its `FOR SHARE`), then sees the new fence and writes
/// nothing; the takeover's `settle_with_report` lands the one report row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_stale_report_racing_a_takeover_writes_nothing() {
    let Some(db) = PgDb::create().await else {
        return;
    };
    let store = PgStore::new(db.pool().clone());
    let inc = incident(&store).await;
    let s = store
        .create_session(NewSession {
            runner: None,
            admission: Default::default(),
            lease: None,
            id: SessionId::new(),
            incident_id: inc.id,
            prompt: "raced".into(),
            workspace_ref: None,
        })
        .await
        .unwrap();
    // The takeover's conditional step, held open in its transaction.
    let mut takeover = db.pool().begin().await.unwrap();
    sqlx::query("UPDATE sessions SET fence = fence + 1 WHERE id = $1 AND fence = $2")
        .bind(s.id.as_uuid())
        .bind(1_i64)
        .execute(&mut *takeover)
        .await
        .unwrap();
    let stale = {
        let (store, s) = (store.clone(), s.clone());
        tokio::spawn(async move { store.create_report(report_at(&s, 1, "completed")).await })
    };
    // Wait (bounded) until the insert waits on the row lock; without the
    // lock it does not wait, and the assertion below tells.
    for _ in 0..100 {
        let waiting: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_locks WHERE NOT granted")
            .fetch_one(db.pool())
            .await
            .unwrap();
        if waiting > 0 || stale.is_finished() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    takeover.commit().await.unwrap();
    match stale.await.unwrap() {
        Err(korvus_store::StoreError::Fenced {
            presented: 1,
            current: 2,
            ..
        }) => {}
        other => panic!("the stale report must be fenced off, got {other:?}"),
    }
    let (row, stands) = store
        .settle_with_report(
            s.id,
            korvus_store::Settlement {
                status: korvus_store::SessionStatus::Failed,
                exit_reason: Some("owner_lost".into()),
                counters: Default::default(),
                fence: 2,
            },
            report_at(&s, 2, "owner_lost"),
        )
        .await
        .unwrap();
    assert_eq!(row.status, korvus_store::SessionStatus::Failed);
    assert_eq!(
        (stands.exit_reason.as_str(), stands.fence),
        ("owner_lost", 2)
    );
    assert_eq!(store.all_reports(s.id).await.unwrap(), vec![stands]);
    db.drop_db().await;
}
