//! A run whose owner was lost is resumed, not ended: with
//! `resume_orphans`, the reaper stores the dead attempt's scratch dir here
//! as a checkpoint, sends the session back to its pool, and a manager of
//! the pool runs the agent again as a resume of the same revision — its
//! files restored, told what happened — and the revision lands once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use korvus_runner::RunOutcome;
use korvus_store::{
    ArtifactKind, Coordination, Lease, OwnerId, SessionStatus, Store, StoreExt as _, DEFAULT_POOL,
};
use tokio::sync::Notify;

use crate::support::{counters, write, write_files, Env, ScriptRunner};

/// What the resumed attempt saw: its attempt, its message, the restored
/// progress file.
type Seen = Arc<Mutex<Vec<(u32, Option<String>, Option<String>)>>>;

/// A creator manager holding its one slot (its blocker waits on the
/// returned `Notify`) with `prompt`'s session queued behind it, whose
/// first attempt was then claimed and started by a manager that died (a
/// lease of ttl zero, never renewed) after writing `files` into its dir
/// here. Returns the creator, the blocker's release, the blocker's and the
/// orphan's ids.
async fn orphan_here(
    env: &Env,
    prompt: &str,
    files: &[(&str, &str)],
) -> (
    korvus_session::Manager,
    Arc<Notify>,
    korvus_store::SessionId,
    korvus_store::SessionId,
) {
    let release = Arc::new(Notify::new());
    let blocking = {
        let release = Arc::clone(&release);
        ScriptRunner::new(move |ctx, _| {
            let release = Arc::clone(&release);
            async move {
                tokio::select! {
                    () = release.notified() => {}
                    () = ctx.cancel.cancelled() => {}
                }
                write_files(&ctx, &[("report.md", "# held\n")]);
                Ok(RunOutcome::completed(counters()))
            }
        })
    };
    let creator = env
        .builder(blocking)
        .max_running(1)
        .claim_queued(false)
        .build();
    let blocker = creator.create(env.request("holds the slot")).await.unwrap();
    let target = creator.create(env.request(prompt)).await.unwrap();
    assert!(target.is_queued(), "{target:?}");
    let dead = env
        .store
        .claim_next(
            DEFAULT_POOL,
            None,
            Lease {
                owner: OwnerId::new(),
                ttl: Duration::ZERO,
            },
        )
        .await
        .unwrap()
        .expect("the queued session");
    assert_eq!(dead.id, target.id);
    env.store.mark_started(dead.id, dead.fence).await.unwrap();
    let dir = env.dir_of(dead.id, 1);
    for (path, body) in files {
        write(&dir, path, body);
    }
    (creator, release, blocker.id, target.id)
}

/// Lets the creator's blocker finish and stops the managers.
async fn finish(
    creator: korvus_session::Manager,
    release: &Notify,
    blocker: korvus_store::SessionId,
    others: &[&korvus_session::Manager],
) {
    release.notify_waiters();
    creator
        .await_settled(blocker, Duration::from_secs(10))
        .await
        .unwrap();
    for m in others {
        m.stop().await;
    }
    creator.stop().await;
}

#[tokio::test]
async fn an_orphan_is_resumed_from_its_dir_here_and_its_revision_lands_once() {
    let env = Env::new().await;
    // Its first attempt: claimed, started, wrote files here, then its
    // manager died.
    let (creator, release, blocker, target) = orphan_here(
        &env,
        "find the leak",
        &[
            ("work/progress.txt", "step 3 of 5\n"),
            ("notes.md", "half done\n"),
        ],
    )
    .await;
    let dir = env.dir_of(target, 1);

    let seen: Seen = Arc::default();
    let resumed = {
        let seen = Arc::clone(&seen);
        ScriptRunner::new(move |ctx, message| {
            let seen = Arc::clone(&seen);
            async move {
                let scratch = ctx.scratch.clone().expect("a scratch dir");
                let progress = std::fs::read_to_string(scratch.join("work/progress.txt")).ok();
                seen.lock()
                    .unwrap()
                    .push((ctx.session.attempt, message, progress));
                write_files(&ctx, &[("report.md", "# resumed and done\n")]);
                Ok(RunOutcome::completed(counters()))
            }
        })
    };
    let survivor = env
        .builder(resumed)
        .lease(Duration::from_millis(300), Duration::from_millis(30))
        .resume_orphans(3, Duration::ZERO)
        .build();
    let row = survivor
        .await_settled(target, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    assert_eq!((row.revision, row.attempt), (1, 2), "{row:?}");

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "one resumed attempt: {seen:?}");
    let (attempt, message, progress) = &seen[0];
    assert_eq!(*attempt, 2);
    let message = message.as_deref().expect("a resume message");
    assert!(message.contains("interrupted"), "{message}");
    assert!(
        message.contains("find the leak"),
        "the original prompt: {message}"
    );
    assert_eq!(progress.as_deref(), Some("step 3 of 5\n"), "restored");

    // One report row, of the resumed attempt; the dead attempt's files are
    // final rows of the revision; its dir is gone.
    let report = env.store.get_report(target, 1).await.unwrap();
    assert_eq!(report.exit_reason, "completed", "{report:?}");
    assert!(
        env.store.get_report(target, 2).await.is_err(),
        "no second revision"
    );
    let artifacts = env.store.all_session_artifacts(target).await.unwrap();
    for path in ["work/progress.txt", "notes.md"] {
        assert!(
            artifacts
                .iter()
                .any(|a| a.path == path && a.kind == ArtifactKind::AgentOutput && a.revision == 1),
            "{path}: {artifacts:?}"
        );
    }
    assert!(!dir.exists(), "the dead attempt's dir was removed");
    let notes = crate::support::notes(&env, target).await;
    assert!(
        notes.iter().any(|n| n.starts_with(
            "attempt 2 of revision 1: resumed after its previous attempt was interrupted"
        )),
        "{notes:?}"
    );

    finish(creator, &release, blocker, &[&survivor]).await;
}

#[tokio::test]
async fn a_pending_resume_is_cancelled_like_a_queued_session() {
    let env = Env::new().await;
    let (creator, release, blocker, target) =
        orphan_here(&env, "find the leak", &[("notes.md", "half done\n")]).await;

    // Resumed after an hour's backoff: it waits, pending, until cancelled.
    let survivor = env
        .builder(crate::support::writing(&[("report.md", "# never\n")]))
        .lease(Duration::from_millis(300), Duration::from_millis(30))
        .resume_orphans(3, Duration::from_secs(3600))
        .build();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let row = env.store.get_session(target).await.unwrap();
        if row.is_resume_pending() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never pending: {row:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let cancelled = survivor.cancel(target).await.unwrap();
    assert_eq!(cancelled.status, SessionStatus::Cancelled, "{cancelled:?}");
    assert!(!cancelled.is_resume_pending(), "{cancelled:?}");
    let report = env.store.get_report(target, 1).await.unwrap();
    assert!(
        report
            .detail
            .as_deref()
            .is_some_and(|d| d.contains("waiting to be resumed")),
        "{report:?}"
    );
    // The lost attempt's files stay stored.
    let artifacts = env.store.all_session_artifacts(target).await.unwrap();
    assert!(
        artifacts.iter().any(|a| a.path == "notes.md"),
        "{artifacts:?}"
    );
    finish(creator, &release, blocker, &[&survivor]).await;
}

#[tokio::test]
async fn a_report_the_lost_attempt_wrote_is_this_revisions_when_the_resume_leaves_it() {
    let env = Env::new().await;
    let (creator, release, blocker, target) = orphan_here(
        &env,
        "find the leak",
        &[("report.md", "# written before the crash\n")],
    )
    .await;
    // The resumed attempt finds its report done and leaves it alone.
    let survivor = env
        .builder(ScriptRunner::new(|_, _| async move {
            Ok(RunOutcome::completed(counters()))
        }))
        .lease(Duration::from_millis(300), Duration::from_millis(30))
        .resume_orphans(3, Duration::ZERO)
        .build();
    let row = survivor
        .await_settled(target, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    assert_eq!(row.attempt, 2, "{row:?}");
    let report = env.store.get_report(target, 1).await.unwrap();
    assert_eq!(report.exit_reason, "completed", "{report:?}");
    assert!(report.markdown_key.is_some(), "{report:?}");
    finish(creator, &release, blocker, &[&survivor]).await;
}

/// A replica cut off from the database whose run still holds the turn log
/// when another manager claims the resume: the claim waits for the log
/// (at most half a ttl) instead of failing the session `turn_log_failed`.
#[tokio::test]
async fn a_frozen_replicas_live_run_is_resumed_by_another_in_the_same_process() {
    use korvus_testkit::faults::{FaultStore, StoreFault, StoreOp};
    let env = Env::new().await;
    let frozen = Arc::new(FaultStore::new(env.store.clone()));
    let seen: Seen = Arc::default();
    let runner = {
        let seen = Arc::clone(&seen);
        move || {
            let seen = Arc::clone(&seen);
            ScriptRunner::new(move |ctx, message| {
                let seen = Arc::clone(&seen);
                async move {
                    if ctx.session.attempt >= 2 {
                        seen.lock()
                            .unwrap()
                            .push((ctx.session.attempt, message, None));
                        write_files(&ctx, &[("report.md", "# resumed\n")]);
                        return Ok(RunOutcome::completed(counters()));
                    }
                    ctx.cancel.cancelled().await;
                    Ok(RunOutcome::completed(counters()))
                }
            })
        }
    };
    let lease = (Duration::from_millis(600), Duration::from_millis(100));
    // A replica cut off from the database (every call it makes hangs) in
    // this process: its run lapses and gives up its writes within these
    // bounds, then closes its log — which the resume waits for.
    let a = korvus_session::Manager::builder(frozen.clone(), Arc::new(runner()))
        .blob_store(env.blobs.clone())
        .turn_log(Arc::clone(&env.logs))
        .lease(lease.0, lease.1)
        .report_timeout(Duration::from_millis(50))
        .settle_timeout(Duration::from_millis(50))
        .cleanup_timeout(Duration::from_millis(50))
        .build();
    let b = env
        .builder(runner())
        .lease(lease.0, lease.1)
        .resume_orphans(3, Duration::ZERO)
        .build();
    let s = a.create(env.request("frozen")).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while env
        .store
        .get_session(s.id)
        .await
        .unwrap()
        .started_at
        .is_none()
    {
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    for op in [
        StoreOp::Heartbeat,
        StoreOp::GetSession,
        StoreOp::SettleSession,
        StoreOp::CreateReport,
        StoreOp::CreateArtifacts,
        StoreOp::ExpiredLeases,
        StoreOp::TakeOver,
        StoreOp::SettleWithReport,
        StoreOp::CancelRequests,
    ] {
        frozen.fault(op, StoreFault::Hang);
    }
    let row = b
        .await_settled(s.id, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(
        row.status,
        SessionStatus::Completed,
        "{row:?}: {:?}",
        crate::support::notes(&env, s.id).await
    );
    assert_eq!(seen.lock().unwrap().len(), 1);
    b.stop().await;
}
