//! Cancelling a session: the replica running it ends it; any other replica
//! asks it to through the store.

use korvus_store::StoreExt as _;
use std::time::Duration;

use korvus_runner::RunOutcome;
use korvus_session::SessionError;
use korvus_store::{Coordination, Lease, NewSession, OwnerId, SessionId, SessionStatus, Store};

use crate::support::{writing, Env, ScriptRunner};

/// A session of another owner, under a lease of `ttl`, whose run started.
async fn foreign(env: &Env, ttl: Duration) -> korvus_store::Session {
    let row = env
        .store
        .create_session(NewSession {
            runner: None,
            admission: Default::default(),
            lease: Some(Lease {
                owner: OwnerId::new(),
                ttl,
            }),
            id: SessionId::new(),
            incident_id: env.incident.id,
            prompt: "run elsewhere".into(),
            workspace_ref: None,
        })
        .await
        .unwrap();
    env.store.mark_started(row.id, row.fence).await.unwrap()
}

#[tokio::test]
async fn an_orphan_is_taken_over_and_cancelled_at_once_with_its_report_row() {
    let env = Env::new().await;
    let manager = env.builder(writing(&[])).build();
    // Its owner's lease expired at once: no manager would ever see a request.
    let orphan = foreign(&env, Duration::ZERO).await;
    let row = manager.cancel(orphan.id).await.unwrap();
    assert_eq!(row.status, SessionStatus::Cancelled);
    assert_eq!(row.exit_reason.as_deref(), Some("cancelled"));
    assert_eq!(row.fence, orphan.fence + 1, "taken over");
    assert_eq!(row.owner, None);
    let reports = env.store.all_reports(orphan.id).await.unwrap();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(
        (reports[0].revision, reports[0].exit_reason.as_str()),
        (1, "cancelled")
    );
    assert!(matches!(
        manager.cancel(orphan.id).await,
        Err(SessionError::AlreadyEnded { .. })
    ));
    manager.stop().await;
}

#[tokio::test]
async fn a_session_no_manager_runs_only_records_the_request() {
    let env = Env::new().await;
    let manager = env.builder(writing(&[])).build();
    // Its owner's lease is live: only that owner may end the run.
    let foreign = foreign(&env, Duration::from_secs(600)).await;
    let row = manager.cancel(foreign.id).await.unwrap();
    assert!(row.cancel_requested);
    assert_eq!(row.status, SessionStatus::Running);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(env.store.get_session(foreign.id).await.unwrap(), row);
    assert!(matches!(
        manager.cancel(SessionId::new()).await,
        Err(SessionError::NotFound { .. })
    ));
    manager.stop().await;
}

#[tokio::test]
async fn a_cancel_on_another_replica_reaches_the_run_through_the_store() {
    let env = Env::new().await;
    // Replica A runs the session until it is cancelled.
    let a = env
        .builder(ScriptRunner::new(|ctx, _| async move {
            ctx.cancel.cancelled().await;
            Ok(
                RunOutcome::new(korvus_runner::ExitReason::CANCELLED, Default::default())
                    .with_author_finished(false),
            )
        }))
        .cancel_poll(Duration::from_millis(20))
        .build();
    // Replica B shares only the store.
    let b = env.builder(writing(&[])).build();
    let session = a.create(env.request("wait")).await.unwrap();
    let requested = b.cancel(session.id).await.unwrap();
    assert!(requested.cancel_requested);
    let row = a
        .await_settled(session.id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(row.status, SessionStatus::Cancelled, "{row:?}");
    assert_eq!(row.exit_reason.as_deref(), Some("cancelled"));
    assert_eq!(row.fence, session.fence);
    a.stop().await;
    b.stop().await;
}

/// A forced cancel made through another manager whose `JsonlLog` service
/// shares the directory (the owner's writer holds the file's `flock`, as
/// a run in another process would): the log is fenced all the same, so
/// nothing the owner's run appends after the cancel lands — the run,
/// which goes on appending as a paused process that came back would, is
/// refused and stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_cancel_elsewhere_fences_the_owners_file_log() {
    use std::sync::Arc;

    use korvus_log::{Access, Event, EventKind, JsonlLog, LogError, LogId, TurnLog};

    let dir = tempfile::tempdir().unwrap();
    let env = Env::with(
        Arc::new(korvus_store::MemoryStore::new()),
        Arc::new(korvus_blob::MemoryBlobStore::new()),
        Arc::new(JsonlLog::open_dir(dir.path()).unwrap()),
    )
    .await;
    let refused = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let told = Arc::clone(&refused);
    // Appends until the log refuses it, whatever its cancellation says
    // (a run that has not heard of the cancel yet).
    let appending = ScriptRunner::new(move |ctx, _| {
        let told = Arc::clone(&told);
        async move {
            for i in 0..2_000 {
                let note = Event::new(EventKind::Note {
                    text: format!("note {i}"),
                });
                if let Err(e) = ctx.log.append(&[note]).await {
                    assert!(matches!(e, LogError::Fenced { .. }), "{e:?}");
                    told.store(true, std::sync::atomic::Ordering::SeqCst);
                    break;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            Ok(RunOutcome::completed(crate::support::counters()))
        }
    });
    // The owner would notice the moved row only at a heartbeat, 30 s away.
    let owner = env
        .builder(appending)
        .lease(Duration::from_secs(90), Duration::from_secs(30))
        .build();
    let operator_logs = Arc::new(JsonlLog::open_dir(dir.path()).unwrap());
    let operator = env
        .builder(writing(&[]))
        .turn_log(Arc::clone(&operator_logs) as Arc<dyn TurnLog>)
        .build();
    let session = owner.create(env.request("long")).await.unwrap();
    let id = LogId::from_uuid(session.id.as_uuid());
    let reader = operator_logs.open(id, Access::Read).await.unwrap();
    while reader.len().await.unwrap() < 10 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let forced = operator.force_cancel(session.id).await.unwrap();
    assert_eq!(forced.status, SessionStatus::Cancelled);
    // Everything of the run that landed is in the file now.
    let at_fence = reader.len().await.unwrap();
    let row = owner
        .await_settled(session.id, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(row, forced, "the run's own settle was refused");
    assert!(refused.load(std::sync::atomic::Ordering::SeqCst));
    assert_eq!(
        reader.len().await.unwrap(),
        at_fence,
        "nothing of the run landed after the cancel"
    );
    for e in reader.read(0, None).await.unwrap() {
        assert!(e.epoch <= Some(session.fence), "{e:?}");
    }
    owner.stop().await;
    operator.stop().await;
}
