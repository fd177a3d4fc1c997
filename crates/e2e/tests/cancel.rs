//! Cross-replica cancel on PostgreSQL: a request recorded on replica B
//! wakes replica A through `LISTEN`/`NOTIFY`, so A cancels its run without
//! waiting for its poll period (switched to an hour here, so only the
//! notification can deliver it).

use std::sync::Arc;
use std::time::Duration;

use korvus_blob::MemoryBlobStore;
use korvus_runner::{ExitReason, RunOutcome};
use korvus_session::{CreateSession, Manager};
use korvus_store::{CoordinatedStore, Counters, NewIncident, SessionStatus};
use korvus_store_sql::testing::PgDb;
use korvus_store_sql::PgStore;

use crate::support::ScriptRunner;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_on_another_replica_arrives_by_notify() {
    let Some(db) = PgDb::create().await else {
        return;
    };
    let store: Arc<dyn CoordinatedStore> = Arc::new(PgStore::new(db.pool().clone()));
    let replica = |runner: ScriptRunner| {
        Manager::builder(Arc::clone(&store), Arc::new(runner))
            .blob_store(Arc::new(MemoryBlobStore::new()))
            .cancel_poll(Duration::from_secs(3600))
            .build()
    };
    let a = replica(ScriptRunner::new(|ctx, _| async move {
        ctx.cancel.cancelled().await;
        Ok(RunOutcome::new(ExitReason::CANCELLED, Counters::default()).with_author_finished(false))
    }));
    let b = replica(ScriptRunner::new(|_, _| async move {
        Ok(RunOutcome::completed(Counters::default()))
    }));
    let incident = store
        .create_incident(NewIncident {
            title: "notify".into(),
            workspace: None,
        })
        .await
        .unwrap();
    let session = a
        .create(CreateSession::new(incident.id, "wait"))
        .await
        .unwrap();
    // A request made before A's listener is connected is not delivered
    // (polling would catch it, but is switched off here): a repeated
    // request is a fresh notification, so ask until A answers.
    let mut row = b.cancel(session.id).await.unwrap();
    assert!(row.cancel_requested);
    for _ in 0..30 {
        match a.await_settled(session.id, Duration::from_secs(1)).await {
            Ok(settled) => {
                row = settled;
                break;
            }
            Err(korvus_session::SessionError::SettleDeadline { .. }) => {}
            Err(e) => panic!("{e}"),
        }
        b.cancel(session.id).await.unwrap();
    }
    assert_eq!(row.status, SessionStatus::Cancelled);
    a.stop().await;
    b.stop().await;
    drop(store);
    db.drop_db().await;
}
