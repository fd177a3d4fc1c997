//! Owner leases on the manager's side: the heartbeat that notices a
//! takeover, the manager's own judgement of a lapsed lease, and the reaper
//! that ends orphans — only once its own heartbeats were healthy for a ttl.

use korvus_store::StoreExt as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use korvus_blob::MemoryBlobStore;
use korvus_log::MemoryLog;
use korvus_runner::{ExitReason, RunOutcome};
use korvus_session::SessionError;
use korvus_store::{
    Coordination, Lease, MemoryStore, NewSession, OwnerId, Session, SessionId, SessionStatus, Store,
};
use korvus_testkit::faults::{StoreFault, StoreOp};

use crate::support::{counters, writing, Env, ScriptRunner};

/// A running session of another owner whose lease expired at once; its
/// run started (a run that never started is only a claim, given back to
/// the queue).
async fn orphan(env: &Env) -> Session {
    let row = env
        .store
        .create_session(NewSession {
            runner: None,
            admission: Default::default(),
            lease: Some(Lease {
                owner: OwnerId::new(),
                ttl: Duration::ZERO,
            }),
            id: SessionId::new(),
            incident_id: env.incident.id,
            prompt: "its manager died".into(),
            workspace_ref: None,
        })
        .await
        .unwrap();
    env.store.mark_started(row.id, row.fence).await.unwrap()
}

/// Polls the row until `done` holds (or ten seconds passed).
async fn until(env: &Env, id: SessionId, done: impl Fn(&Session) -> bool) -> Session {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let row = env.store.get_session(id).await.unwrap();
        if done(&row) || Instant::now() > deadline {
            return row;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_reaper_waits_for_a_healthy_ttl_then_settles_the_orphan_owner_lost_once() {
    let env = Env::new().await;
    let dead = orphan(&env).await;
    // The database "is down" for this manager: no heartbeat succeeds.
    env.store.fault(StoreOp::Heartbeat, StoreFault::Fail);
    let manager = env
        .builder(writing(&[]))
        .lease(Duration::from_millis(300), Duration::from_millis(30))
        .resume_orphans(0, Duration::ZERO)
        .build();
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(env.store.count(StoreOp::TakeOver), 0, "no healthy ttl yet");
    assert_eq!(
        env.store.get_session(dead.id).await.unwrap().status,
        SessionStatus::Running
    );

    env.store.heal();
    let healed = Instant::now();
    let row = until(&env, dead.id, |s| s.status.is_terminal()).await;
    assert!(
        healed.elapsed() >= Duration::from_millis(300),
        "reaped only after a ttl of healthy heartbeats"
    );
    assert_eq!(row.status, SessionStatus::Failed);
    assert_eq!(
        row.exit_reason.as_deref(),
        Some(ExitReason::OWNER_LOST.as_str())
    );
    assert_eq!(row.fence, dead.fence + 1);
    let reports = env.store.all_reports(dead.id).await.unwrap();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0].exit_reason, "owner_lost");
    assert_eq!(reports[0].fence, row.fence);
    // Exactly once: later periods find nothing to take over.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(env.store.all_reports(dead.id).await.unwrap().len(), 1);
    manager.stop().await;
}

#[tokio::test]
async fn a_run_taken_over_elsewhere_is_cancelled_and_writes_nothing() {
    let memory = Arc::new(MemoryStore::new());
    let env = Env::with(
        memory.clone(),
        Arc::new(MemoryBlobStore::new()),
        Arc::new(MemoryLog::new()),
    )
    .await;
    let a = env
        .builder(ScriptRunner::new(|ctx, _| async move {
            ctx.cancel.cancelled().await;
            std::fs::write(ctx.scratch.unwrap().join("report.md"), "# late\n").unwrap();
            Ok(RunOutcome::completed(counters()))
        }))
        .lease(Duration::from_secs(10), Duration::from_millis(30))
        .build();
    let session = a.create(env.request("long")).await.unwrap();
    // A's lease lapses by the store's clock (A is "paused"), and B takes over.
    let b = Lease {
        owner: OwnerId::new(),
        ttl: Duration::from_secs(600),
    };
    // A renews every 30 ms (by the advanced clock, too): move the clock on
    // until a takeover falls between two renewals.
    let mut taken = None;
    for _ in 0..100 {
        memory.advance_clock(Duration::from_secs(60));
        if let Ok(row) = env.store.take_over(session.id, 1, b).await {
            taken = Some(row);
            break;
        }
    }
    let taken = taken.expect("taken over");
    // A's next heartbeat does not hold the run: it is cancelled, and every
    // write it tries is fenced off. The row is B's now, active, so
    // `await_settled` never reports it settled.
    assert!(matches!(
        a.await_settled(session.id, Duration::from_secs(2)).await,
        Err(SessionError::SettleDeadline { .. })
    ));
    assert!(!a.live_runs().contains(session.id));
    let row = env.store.get_session(session.id).await.unwrap();
    assert_eq!(row, taken, "B's row is untouched");
    assert!(env.store.all_reports(session.id).await.unwrap().is_empty());
    assert!(env
        .store
        .all_session_artifacts(session.id)
        .await
        .unwrap()
        .is_empty());
    a.stop().await;
}

#[tokio::test]
async fn a_run_whose_lease_may_have_lapsed_is_stopped_and_still_lands_lease_lost() {
    let env = Env::new().await;
    let manager = env
        .builder(ScriptRunner::new(|ctx, _| async move {
            std::fs::write(ctx.scratch.unwrap().join("report.md"), "# so far\n").unwrap();
            // Works on until the manager stops it.
            tokio::select! {
                _ = ctx.cancel.cancelled() => {}
                _ = tokio::time::sleep(Duration::from_secs(30)) => {}
            }
            Ok(RunOutcome::completed(counters()))
        }))
        .lease(Duration::from_millis(300), Duration::from_millis(30))
        .build();
    let session = manager.create(env.request("slow")).await.unwrap();
    // No renewal succeeds: after ttl − ttl/5 the manager stops the run
    // itself, before any other manager could take the session over. Nobody
    // did, so the store accepts everything the run lands.
    env.store.fault(StoreOp::Heartbeat, StoreFault::Fail);
    let started = Instant::now();
    let row = manager
        .await_settled(session.id, Duration::from_secs(10))
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(row.status, SessionStatus::Failed);
    assert_eq!(
        row.exit_reason.as_deref(),
        Some(ExitReason::LEASE_LOST.as_str())
    );
    let report = env.store.get_report(session.id, 1).await.unwrap();
    assert_eq!(report.exit_reason, "lease_lost");
    assert!(report.markdown_key.is_some(), "the document is kept");
    assert_eq!(
        env.store
            .all_session_artifacts(session.id)
            .await
            .unwrap()
            .len(),
        1
    );
    env.assert_safe().await;
    manager.stop().await;
}

/// A session whose claim outlived its manager before the runner was
/// called goes back to the queue in its place (take over, release) and
/// runs once, on a manager of its pool: no `owner_lost`, one report row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_manager_died_before_its_runner_goes_back_to_the_queue_and_runs_once() {
    let env = Env::new().await;
    // A manager of pool `p` whose one slot is held, so its next create is
    // queued with its turn log.
    let held = ScriptRunner::new(|ctx, _| async move {
        ctx.cancel.cancelled().await;
        Ok(RunOutcome::completed(counters()))
    });
    let queuer = env
        .builder(held)
        .pool("p")
        .max_running(1)
        .cancel_poll(Duration::from_millis(50))
        .build();
    queuer.create(env.request("holds the slot")).await.unwrap();
    let mut queued = queuer.create(env.request("waits")).await.unwrap();
    for _ in 0..200 {
        if queued.is_queued() {
            break;
        }
        // The create met the manager's own claim probe; try once more.
        queued = queuer.create(env.request("waits")).await.unwrap();
    }
    assert!(queued.is_queued(), "{queued:?}");
    // A manager claims it and dies before calling its runner: its lease
    // lapses at once and nobody renews it.
    let dead = Lease {
        owner: OwnerId::new(),
        ttl: Duration::ZERO,
    };
    let claimed = env
        .store
        .claim_next("p", None, dead)
        .await
        .unwrap()
        .expect("the queued session");
    assert_eq!(claimed.id, queued.id);
    assert!(claimed.started_at.is_none());
    queuer.stop().await;

    let survivor_runner = writing(&[("report.md", "# ran once\n")]);
    let seen = Arc::clone(&survivor_runner.seen);
    let survivor = env
        .builder(survivor_runner)
        .pool("p")
        .lease(Duration::from_millis(300), Duration::from_millis(30))
        .cancel_poll(Duration::from_millis(50))
        .build();
    let row = until(&env, queued.id, |s| s.status.is_terminal()).await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    // Taken over, given back, claimed: three fences past the dead claim.
    assert_eq!(row.fence, claimed.fence + 3, "{row:?}");
    assert!(row.started_at.is_some());
    let calls = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(ctx, _)| ctx.session.id == queued.id)
        .count();
    assert_eq!(calls, 1, "the runner was called once");
    let reports = env.store.all_reports(queued.id).await.unwrap();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0].exit_reason, "completed");
    assert_eq!(
        env.store.count(StoreOp::SettleWithReport),
        0,
        "never settled as an orphan"
    );
    survivor.stop().await;
}

/// The scratch dir a dead run of `row` left on this host, with its
/// `report.md` and a progress file.
fn dead_runs_dir(env: &Env, row: &Session) -> std::path::PathBuf {
    let dir = env
        .root
        .path()
        .join(row.id.to_string())
        .join(row.revision.to_string());
    crate::support::write(&dir, "report.md", "# what the lost run found\n");
    crate::support::write(&dir, "work/progress.txt", "step 3 of 5\n");
    dir
}

#[tokio::test]
async fn a_takeover_salvages_the_lost_runs_scratch_dir_before_it_settles() {
    let env = Env::new().await;
    let dead = orphan(&env).await;
    let dir = dead_runs_dir(&env, &dead);
    let manager = env
        .builder(writing(&[]))
        .lease(Duration::from_millis(300), Duration::from_millis(30))
        .resume_orphans(0, Duration::ZERO)
        .build();
    let row = until(&env, dead.id, |s| s.status.is_terminal()).await;
    assert_eq!(row.status, SessionStatus::Failed);
    assert_eq!(
        row.exit_reason.as_deref(),
        Some("owner_lost"),
        "the run did not finish"
    );

    let reports = env.store.all_reports(dead.id).await.unwrap();
    assert_eq!(reports.len(), 1, "{reports:?}");
    let report = &reports[0];
    let from = report
        .salvaged_from
        .as_deref()
        .expect("the row says where the output came from");
    assert!(from.contains(&dir.display().to_string()), "{from}");
    assert!(
        report
            .detail
            .as_deref()
            .unwrap()
            .contains("2 file(s) of its scratch dir stored"),
        "{report:?}"
    );
    let key = korvus_blob::BlobKey::new(
        report
            .markdown_key
            .clone()
            .expect("the salvaged report.md is adopted"),
    )
    .unwrap();
    use korvus_blob::BlobStore as _;
    assert_eq!(
        env.blobs.get(&key).await.unwrap().bytes.as_ref(),
        b"# what the lost run found\n"
    );
    assert_eq!(report.markdown_bytes, 26);
    let artifacts = env.store.all_session_artifacts(dead.id).await.unwrap();
    let progress = artifacts
        .iter()
        .find(|a| a.path == "work/progress.txt")
        .expect("progress stored");
    assert_eq!(progress.revision, dead.revision);
    assert_eq!(
        env.blobs
            .get(&korvus_blob::BlobKey::new(progress.blob_key.clone()).unwrap())
            .await
            .unwrap()
            .bytes
            .as_ref(),
        b"step 3 of 5\n"
    );
    // Stored whole: the dir is removed after the settlement.
    let deadline = Instant::now() + Duration::from_secs(10);
    while dir.exists() {
        assert!(
            Instant::now() < deadline,
            "a salvaged dir is removed once its output is stored"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    env.assert_safe().await;
    manager.stop().await;
}

#[tokio::test]
async fn a_salvage_that_cannot_store_everything_keeps_the_dir_and_says_where() {
    let env = Env::new().await;
    let dead = orphan(&env).await;
    let dir = dead_runs_dir(&env, &dead);
    // The blob store refuses the progress file.
    env.blobs
        .fault_put("progress.txt", korvus_testkit::faults::BlobFault::Fail);
    let manager = env
        .builder(writing(&[]))
        .lease(Duration::from_millis(300), Duration::from_millis(30))
        .build();
    let row = until(&env, dead.id, |s| s.status.is_terminal()).await;
    assert_eq!(row.exit_reason.as_deref(), Some("owner_lost"));
    let report = &env.store.all_reports(dead.id).await.unwrap()[0];
    assert!(
        report.markdown_key.is_some(),
        "what could be stored is: {report:?}"
    );
    let detail = report.detail.as_deref().unwrap();
    assert!(detail.contains("the scratch dir is kept at"), "{detail}");
    assert!(detail.contains(&dir.display().to_string()), "{detail}");
    assert!(
        dir.join("work/progress.txt").exists(),
        "the only copy of the progress file is kept"
    );
    // Marked kept (before the settlement), so no removal takes it.
    let reason = korvus_workspace::kept_reason(&dir).expect("marked kept");
    assert!(reason.contains("progress.txt"), "{reason}");
    korvus_workspace::reap(env.root.path()).await.unwrap();
    assert!(dir.join("work/progress.txt").exists(), "reap keeps it");
    env.assert_safe().await;
    manager.stop().await;
}

/// A `cancel` that ends an orphan inline and is dropped while the settle
/// hangs leaves no live entry behind: the heartbeat would otherwise hold a
/// row nothing runs, and reapers would pass it over while this manager
/// lives.
#[tokio::test]
async fn a_dropped_cancel_of_an_orphan_leaves_no_live_run_behind() {
    let env = Env::new().await;
    let dead = orphan(&env).await;
    env.store.fault(StoreOp::SettleWithReport, StoreFault::Hang);
    let manager = env.builder(writing(&[])).build();
    let cut = tokio::time::timeout(Duration::from_millis(500), manager.cancel(dead.id)).await;
    assert!(
        cut.is_err(),
        "the settle hangs, so the cancel is still waiting"
    );
    assert!(
        !manager.live_runs().contains(dead.id),
        "the dropped cancel's live entry was removed"
    );
    env.store.heal();
    manager.stop().await;
}
