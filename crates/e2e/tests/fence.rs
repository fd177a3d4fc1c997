//! Fencing on the embedded default (SQLite rows and logs): a run
//! superseded by a newer run of its session writes no settlement, and a
//! run whose turn log a newer writer claimed is cancelled. Replica
//! A's run outlives an operator's forced cancel and a reopen on replica B
//! (another log service on the same database); A's late settle is refused
//! and B's row stays as B left it.

use korvus_store::StoreExt as _;
use std::sync::Arc;
use std::time::Duration;

use korvus_blob::MemoryBlobStore;
use korvus_log::{Access, Event, EventKind, LogId, TurnLog};
use korvus_runner::testing::ScriptRunner;
use korvus_runner::RunOutcome;
use korvus_session::{CreateSession, Manager};
use korvus_store::{CoordinatedStore, Counters, NewIncident, SessionStatus, Settlement};
use korvus_store_sql::testing::SqliteDb;
use korvus_store_sql::{SqliteLog, SqliteStore};
use korvus_workspace::ScratchRoot;
use tokio::sync::Notify;

use crate::support::write;

fn writes_report(text: &'static str) -> ScriptRunner {
    ScriptRunner::new(move |ctx, _| async move {
        write(ctx.scratch.as_ref().unwrap(), "report.md", text);
        Ok(RunOutcome::completed(Counters::default()))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_superseded_runs_settle_is_refused_and_leaves_the_new_run_untouched() {
    let db = SqliteDb::create().await;
    let store: Arc<dyn CoordinatedStore> = Arc::new(SqliteStore::new(db.pool().clone()));
    let scratch = tempfile::tempdir().unwrap();
    let blobs = Arc::new(MemoryBlobStore::new());
    let replica = |runner: ScriptRunner| {
        Manager::builder(Arc::clone(&store), Arc::new(runner))
            .blob_store(blobs.clone())
            .turn_log(Arc::new(SqliteLog::new(db.pool().clone())))
            .scratch_root(ScratchRoot::supplied(scratch.path()))
            .build()
    };
    // Replica A: its run waits until the test lets it finish.
    let gate = Arc::new(Notify::new());
    let release = Arc::clone(&gate);
    let a = replica(ScriptRunner::new(move |ctx, _| {
        let gate = Arc::clone(&gate);
        async move {
            gate.notified().await;
            write(
                ctx.scratch.as_ref().unwrap(),
                "report.md",
                "# A, too late\n",
            );
            Ok(RunOutcome::completed(Counters::default()))
        }
    }));
    let incident = store
        .create_incident(NewIncident {
            title: "db-1".into(),
            workspace: None,
        })
        .await
        .unwrap();
    let session = a
        .create(CreateSession::new(incident.id, "why?"))
        .await
        .unwrap();
    assert_eq!(session.fence, 1);

    // A looks dead to an operator, who ends the row (as `korvus cancel
    // --force` does); replica B reopens the session.
    store
        .settle_session(
            session.id,
            Settlement {
                status: SessionStatus::Cancelled,
                exit_reason: Some("cancelled".into()),
                counters: Counters::default(),
                fence: session.fence,
            },
        )
        .await
        .unwrap();
    let b = replica(writes_report("# B\n"));
    let reopened = b.reopen(session.id, "go on").await.unwrap();
    assert_eq!(reopened.fence, 2);
    let done = b
        .await_settled(session.id, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(done.status, SessionStatus::Completed);

    // A's run finishes now and lands its own revision, but its settle
    // presents fence 1 and changes nothing.
    release.notify_one();
    a.stop().await;
    let row = store.get_session(session.id).await.unwrap();
    assert_eq!(row, done, "B's row is untouched");
    // A's report row was refused too: every row is B's.
    let reports = store.all_reports(session.id).await.unwrap();
    assert!(!reports.is_empty());
    assert!(reports.iter().all(|r| r.fence == 2), "{reports:?}");
    let artifacts = store.all_session_artifacts(session.id).await.unwrap();
    assert!(artifacts.iter().all(|a| a.fence == 2), "{artifacts:?}");
    b.stop().await;
}

/// A run whose turn log was claimed by a newer writer (another service on
/// the same database, as a run that took the session over would) has its
/// next append refused and is cancelled at once; none of its events lands
/// after the claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_log_a_newer_writer_claimed_is_cancelled() {
    let db = SqliteDb::create().await;
    let store: Arc<dyn CoordinatedStore> = Arc::new(SqliteStore::new(db.pool().clone()));
    let scratch = tempfile::tempdir().unwrap();
    // The run appends a note every 20 ms until its appends fail.
    let runner = ScriptRunner::new(|ctx, _| async move {
        for turn in 0..1000u64 {
            let note = Event::new(EventKind::Note {
                text: format!("note {turn}"),
            });
            if ctx.log.append(&[note]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        ctx.cancel.cancelled().await;
        Ok(
            RunOutcome::new(korvus_runner::ExitReason::CANCELLED, Counters::default())
                .with_author_finished(false),
        )
    });
    let a = Manager::builder(Arc::clone(&store), Arc::new(runner))
        .blob_store(Arc::new(MemoryBlobStore::new()))
        .turn_log(Arc::new(SqliteLog::new(db.pool().clone())))
        .scratch_root(ScratchRoot::supplied(scratch.path()))
        .build();
    let incident = store
        .create_incident(NewIncident {
            title: "log epoch".into(),
            workspace: None,
        })
        .await
        .unwrap();
    let session = a
        .create(CreateSession::new(incident.id, "write"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let other = SqliteLog::new(db.pool().clone());
    let id = LogId::from_uuid(session.id.as_uuid());
    let newer = other.open(id, Access::Write).await.unwrap();
    newer.claim_epoch(session.fence + 1).await.unwrap();
    let claimed_at = newer.len().await.unwrap();
    let row = a
        .await_settled(session.id, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(row.status, SessionStatus::Cancelled, "{row:?}");
    let events = newer.read(0, None).await.unwrap();
    assert!(claimed_at > 0, "the run wrote before the claim");
    assert_eq!(
        events.len() as u64,
        claimed_at,
        "nothing of the old run landed after the claim"
    );
    assert!(events.iter().all(|e| e.epoch == Some(session.fence)));
    newer.close().await.unwrap();
    a.stop().await;
}
