//! Closure under partial failure: a terminal status is final (a forced
//! cancel stands against the run it ended), a store outage loses no
//! output, a superseded run writes nothing and stops, a hung renewal
//! cannot hold up `stop`, a cancel reaches the current run, and a reopen
//! degrades when the log is missing.

use korvus_store::StoreExt as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use korvus_blob::MemoryBlobStore;
use korvus_log::{EventKind, LogId, MemoryLog, TurnLog};
use korvus_runner::{ExitReason, RunOutcome};
use korvus_session::{Manager, SessionError};
use korvus_store::{Coordination, MemoryStore, Session, SessionId, SessionStatus, Store};
use korvus_testkit::faults::{StoreFault, StoreOp};
use tokio::sync::Notify;

use crate::support::{counters, write_files, writing, Env, ScriptRunner};

/// Polls `check` until it holds (or ten seconds passed); returns whether it held.
async fn eventually(mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    check()
}

/// Polls the row until `done` holds (or ten seconds passed).
async fn row_until(store: &dyn Store, id: SessionId, done: impl Fn(&Session) -> bool) -> Session {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let row = store.get_session(id).await.unwrap();
        if done(&row) || Instant::now() > deadline {
            return row;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A runner that writes its files at once, then works until `go` is
/// notified or it is cancelled, and returns `completed` either way — an
/// agent that finishes whatever happens around it.
fn finishing(go: Arc<Notify>) -> ScriptRunner {
    ScriptRunner::new(move |ctx, _| {
        let go = Arc::clone(&go);
        async move {
            write_files(&ctx, &[("report.md", "# found it\n"), ("notes.txt", "n")]);
            tokio::select! {
                () = go.notified() => {}
                _ = ctx.cancel.cancelled() => {}
            }
            Ok(RunOutcome::completed(counters()))
        }
    })
}

/// A runner that returns `awaiting_user` once cancelled.
fn asking_after_cancel() -> ScriptRunner {
    ScriptRunner::new(|ctx, _| async move {
        ctx.cancel.cancelled().await;
        write_files(&ctx, &[("report.md", "# question\n")]);
        Ok(RunOutcome::new(ExitReason::AWAITING_USER, counters()))
    })
}

/// The forced cancel stands against its run: whatever the run returns
/// afterwards (a finished report, or a question for the user), the row
/// stays `cancelled` with its first `ended_at` and the one report row the
/// cancel wrote, and no artifact row of the run lands.
#[tokio::test]
async fn a_forced_cancel_during_a_run_stays_cancelled_whatever_the_run_returns() {
    for runner in [finishing(Arc::new(Notify::new())), asking_after_cancel()] {
        let env = Env::new().await;
        let manager = env.builder(runner).build();
        let session = manager.create(env.request("long")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let forced = manager.force_cancel(session.id).await.unwrap();
        assert_eq!(forced.status, SessionStatus::Cancelled);
        assert_eq!(forced.fence, session.fence + 1);
        assert!(eventually(|| !manager.live_runs().contains(session.id)).await);
        let row = env.store.get_session(session.id).await.unwrap();
        assert_eq!(
            row, forced,
            "the row is the forced cancel's, ended_at included"
        );
        let reports = env.store.all_reports(session.id).await.unwrap();
        assert_eq!(reports.len(), 1, "{reports:?}");
        assert_eq!(reports[0].exit_reason, "cancelled");
        assert!(reports[0].detail.as_deref().unwrap().contains("operator"));
        assert!(env
            .store
            .all_session_artifacts(session.id)
            .await
            .unwrap()
            .is_empty());
        assert_eq!(
            manager
                .await_settled(session.id, Duration::from_secs(1))
                .await
                .unwrap(),
            forced
        );
        assert!(matches!(
            manager.force_cancel(session.id).await,
            Err(SessionError::AlreadyEnded { .. })
        ));
        env.assert_safe().await;
        manager.stop().await;
    }
}

/// A forced cancel made through another manager: the owner's next
/// heartbeat finds the row moved on and stops its run — within one
/// heartbeat period plus the kill grace — and nothing of the run lands.
#[tokio::test]
async fn a_forced_cancel_elsewhere_stops_the_owners_run_within_a_period() {
    let env = Env::new().await;
    let owner = env
        .builder(finishing(Arc::new(Notify::new())))
        .lease(Duration::from_secs(30), Duration::from_millis(100))
        .build();
    let operator = env.builder(writing(&[])).build();
    let session = owner.create(env.request("long")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let forced = operator.force_cancel(session.id).await.unwrap();
    let cancelled = Instant::now();
    assert!(eventually(|| !owner.live_runs().contains(session.id)).await);
    // Period 100 ms + grace 200 ms, with room for a loaded machine.
    assert!(
        cancelled.elapsed() < Duration::from_secs(5),
        "{:?}",
        cancelled.elapsed()
    );
    assert_eq!(env.store.get_session(session.id).await.unwrap(), forced);
    assert_eq!(env.store.all_reports(session.id).await.unwrap().len(), 1);
    assert!(env
        .store
        .all_session_artifacts(session.id)
        .await
        .unwrap()
        .is_empty());
    owner.stop().await;
    operator.stop().await;
}

/// ttl 2 s and a store outage of 3 s while the run finishes, no other
/// replica: once the store heals, the run's report and artifacts are
/// stored and the row is terminal — `completed`, or `lease_lost` when the
/// manager stopped the run before it returned — with the files.
#[tokio::test]
async fn an_outage_past_the_lease_loses_nothing_when_nobody_took_over() {
    let env = Env::new().await;
    let go = Arc::new(Notify::new());
    let manager = env
        .builder(finishing(Arc::clone(&go)))
        .lease(Duration::from_secs(2), Duration::from_millis(200))
        .build();
    let session = manager.create(env.request("finish")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    env.store.fault_all(StoreFault::Fail);
    tokio::time::sleep(Duration::from_millis(500)).await;
    go.notify_one();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    env.store.heal();
    let row = manager
        .await_settled(session.id, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(row.status.is_terminal(), "{row:?}");
    let reason = row.exit_reason.clone().unwrap();
    assert!(
        reason == "completed" || reason == ExitReason::LEASE_LOST.as_str(),
        "{reason}"
    );
    let report = env.store.get_report(session.id, 1).await.unwrap();
    assert!(report.markdown_key.is_some(), "the document landed");
    let paths: Vec<String> = env
        .store
        .all_session_artifacts(session.id)
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.path)
        .collect();
    assert!(paths.contains(&"report.md".to_owned()), "{paths:?}");
    assert!(paths.contains(&"notes.txt".to_owned()), "{paths:?}");
    env.assert_safe().await;
    manager.stop().await;
}

/// The same outage, but a second replica (which reaches the store) took
/// the session over meanwhile: every write of the first run is refused
/// after the store heals, and the takeover's row stands.
#[tokio::test]
async fn an_outage_during_which_another_replica_took_over_refuses_every_write_of_the_old_run() {
    let memory = Arc::new(MemoryStore::new());
    let env = Env::with(
        memory.clone(),
        Arc::new(MemoryBlobStore::new()),
        Arc::new(MemoryLog::new()),
    )
    .await;
    let lease = (Duration::from_secs(2), Duration::from_millis(200));
    // Replica B: the same store, never cut off; healthy from the start.
    let b = Manager::builder(memory.clone(), Arc::new(writing(&[])))
        .turn_log(Arc::new(MemoryLog::new()))
        .lease(lease.0, lease.1)
        .resume_orphans(0, Duration::ZERO)
        .build();
    let go = Arc::new(Notify::new());
    let a = env
        .builder(finishing(Arc::clone(&go)))
        .lease(lease.0, lease.1)
        .build();
    let session = a.create(env.request("cut off")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    env.store.fault_all(StoreFault::Fail);
    // B takes over once A's lease expired (2 s after its last renewal).
    let taken = row_until(&*memory, session.id, |s| s.status.is_terminal()).await;
    assert_eq!(taken.status, SessionStatus::Failed, "{taken:?}");
    assert_eq!(taken.exit_reason.as_deref(), Some("owner_lost"));
    assert_eq!(taken.fence, session.fence + 1);
    go.notify_one();
    tokio::time::sleep(Duration::from_millis(300)).await;
    env.store.heal();
    // A's run lands into refusals; the row B wrote stands.
    let row = a
        .await_settled(session.id, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(row, taken);
    assert!(eventually(|| !a.live_runs().contains(session.id)).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(memory.get_session(session.id).await.unwrap(), taken);
    let reports = memory.all_reports(session.id).await.unwrap();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0].exit_reason, "owner_lost");
    assert!(memory
        .all_session_artifacts(session.id)
        .await
        .unwrap()
        .is_empty());
    a.stop().await;
    b.stop().await;
}

/// A heartbeat that never answers (a black-holed connection) holds up
/// neither the run's landing nor `stop`.
#[tokio::test]
async fn a_hanging_heartbeat_does_not_hold_up_stop() {
    let env = Env::new().await;
    let manager = env
        .builder(finishing(Arc::new(Notify::new())))
        .lease(Duration::from_millis(300), Duration::from_millis(30))
        .build();
    let session = manager.create(env.request("hung")).await.unwrap();
    env.store.fault(StoreOp::Heartbeat, StoreFault::Hang);
    tokio::time::sleep(Duration::from_millis(500)).await;
    tokio::time::timeout(Duration::from_secs(20), manager.stop())
        .await
        .expect("stop returns within its bound");
    let row = env.store.get_session(session.id).await.unwrap();
    assert!(row.status.is_terminal(), "{row:?}");
    assert_eq!(env.store.all_reports(session.id).await.unwrap().len(), 1);
}

/// A replica whose local run of a session is stale (the session was
/// force-cancelled and continued on another replica) cancels the session's
/// current run, not only its own stale one.
#[tokio::test]
async fn cancel_with_a_stale_local_run_cancels_the_current_run() {
    let env = Env::new().await;
    let waiting = || {
        ScriptRunner::new(|ctx, _| async move {
            write_files(&ctx, &[("report.md", "# so far\n")]);
            ctx.cancel.cancelled().await;
            Ok(RunOutcome::completed(counters()))
        })
    };
    // A renews rarely, so it keeps its stale run through the test.
    let a = env
        .builder(waiting())
        .lease(Duration::from_secs(600), Duration::from_secs(200))
        .build();
    // B is another process: a log service of its own (A's in-process
    // writer claim would refuse B's writer).
    let b = env
        .builder(waiting())
        .turn_log(Arc::new(MemoryLog::new()))
        .cancel_poll(Duration::from_millis(50))
        .build();
    let session = a.create(env.request("first")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    env.store
        .force_cancel(session.id, session.fence, "operator".into())
        .await
        .unwrap();
    let current = b.reopen(session.id, "go on").await.unwrap();
    assert_eq!((current.revision, current.fence), (2, 3));
    assert!(
        a.live_runs().contains(session.id),
        "A's run is stale, still live"
    );

    let asked = a.cancel(session.id).await.unwrap();
    assert_eq!(asked.fence, current.fence);
    let row = row_until(&*env.store, session.id, |s| s.status.is_terminal()).await;
    assert_eq!(row.status, SessionStatus::Cancelled, "{row:?}");
    assert_eq!(
        (row.revision, row.fence),
        (2, 3),
        "the current run was cancelled"
    );
    assert!(eventually(|| !a.live_runs().contains(session.id)).await);
    a.stop().await;
    b.stop().await;
}

/// A reopen in a deployment whose turn log backend has no log of the
/// session (one added or changed later) starts a log, says so in a note,
/// and lands revision 2.
#[tokio::test]
async fn a_reopen_without_its_log_starts_one_with_a_note_and_lands_revision_two() {
    let env = Env::new().await;
    let first = env.builder(writing(&[])).build();
    let session = first.create(env.request("first")).await.unwrap();
    let done = first
        .await_settled(session.id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(done.status, SessionStatus::Completed);
    first.stop().await;

    let fresh: Arc<dyn TurnLog> = Arc::new(MemoryLog::new());
    let later = env
        .builder(writing(&[]))
        .turn_log(Arc::clone(&fresh))
        .build();
    let reopened = later.reopen(session.id, "and now?").await.unwrap();
    assert_eq!(reopened.revision, 2);
    let row = later
        .await_settled(session.id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(row.status, SessionStatus::Completed);
    let report = env.store.get_report(session.id, 2).await.unwrap();
    assert_eq!(report.exit_reason, "completed");
    let log = fresh
        .open(
            LogId::from_uuid(session.id.as_uuid()),
            korvus_log::Access::Read,
        )
        .await
        .unwrap();
    let notes: Vec<String> = log
        .read(0, None)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::Note { text } => Some(text),
            _ => None,
        })
        .collect();
    assert!(
        notes.iter().any(|n| n.contains("had no turn log")),
        "{notes:?}"
    );
    later.stop().await;
}

/// A run whose outcome cannot be written (the store refuses its settlement
/// for good) is never reported settled: `await_settled` and `watch` answer
/// `Unsettled`, and the scratch dir is kept for `reap`.
#[tokio::test]
async fn a_run_whose_outcome_was_not_written_is_unsettled_and_keeps_its_dir() {
    use futures::StreamExt;
    let env = Env::new().await;
    env.store
        .fault(StoreOp::SettleSession, StoreFault::FailPermanent);
    let manager = env.builder(writing(&[("notes.txt", "n")])).build();
    let session = manager.create(env.request("lost")).await.unwrap();
    let events: Vec<_> = manager.watch(session.id).collect().await;
    assert!(
        matches!(events.last(), Some(Err(SessionError::Unsettled { .. }))),
        "{:?}",
        events.last()
    );
    assert!(matches!(
        manager
            .await_settled(session.id, Duration::from_secs(5))
            .await,
        Err(SessionError::Unsettled { .. })
    ));
    let row = env.store.get_session(session.id).await.unwrap();
    assert!(row.is_active(), "{row:?}");
    let dir = env.dir_of(session.id, 1);
    assert!(dir.join("notes.txt").exists(), "the scratch dir is kept");
    assert_eq!(
        korvus_workspace::kept_reason(&dir).as_deref(),
        Some("the outcome was not written"),
        "and marked kept, so no reap removes it"
    );
    let reaped = korvus_workspace::reap(env.root.path()).await.unwrap();
    assert!(dir.join("notes.txt").exists(), "{reaped:?}");
    manager.stop().await;
}

/// A run whose files could not all be stored (the blob store refused one)
/// settles as it ended, but its scratch dir — the only copy of that file —
/// is kept, marked, and the report row says where.
#[tokio::test]
async fn a_run_whose_files_were_not_all_stored_keeps_its_dir_and_says_where() {
    let env = Env::new().await;
    env.blobs
        .fault_put("notes.txt", korvus_testkit::faults::BlobFault::Fail);
    let manager = env
        .builder(writing(&[
            ("report.md", "# found"),
            ("notes.txt", "only copy"),
        ]))
        .build();
    let row = env.run_to_end(&manager, "partly stored").await;
    let session = row.clone();
    assert_eq!(
        row.status,
        korvus_store::SessionStatus::Completed,
        "{row:?}"
    );
    let dir = env.dir_of(session.id, 1);
    assert_eq!(
        std::fs::read_to_string(dir.join("notes.txt")).unwrap(),
        "only copy"
    );
    let reason = korvus_workspace::kept_reason(&dir).expect("marked kept");
    assert!(reason.contains("notes.txt"), "{reason}");
    let report = &env.store.all_reports(session.id).await.unwrap()[0];
    let detail = report.detail.as_deref().unwrap();
    assert!(
        detail.contains(&format!("the scratch dir is kept at {}", dir.display())),
        "{detail}"
    );
    assert!(
        report.markdown_key.is_some(),
        "what could be stored is: {report:?}"
    );
    manager.stop().await;
    assert!(dir.join("notes.txt").exists(), "stop keeps it too");
}

/// A run whose files were all stored leaves no dir behind.
#[tokio::test]
async fn a_run_whose_files_were_all_stored_removes_its_dir() {
    let env = Env::new().await;
    let manager = env.builder(writing(&[("notes.txt", "n")])).build();
    let session = manager.create(env.request("stored")).await.unwrap();
    manager
        .await_settled(session.id, Duration::from_secs(10))
        .await
        .unwrap();
    manager.wait().await;
    assert!(!env.root.path().join(session.id.to_string()).exists());
    manager.stop().await;
}

/// A reopen right after a forced cancel in the same process waits for the
/// fenced-off run to unwind, then runs revision 2.
#[tokio::test]
async fn a_reopen_right_after_a_forced_cancel_waits_for_the_old_run() {
    let env = Env::new().await;
    let manager = env.builder(finishing(Arc::new(Notify::new()))).build();
    let session = manager.create(env.request("long")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    manager.force_cancel(session.id).await.unwrap();
    let reopened = manager.reopen(session.id, "again").await.unwrap();
    assert_eq!(reopened.revision, 2);
    manager.cancel(session.id).await.unwrap();
    let row = manager
        .await_settled(session.id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!((row.revision, row.status), (2, SessionStatus::Cancelled));
    manager.stop().await;
}
