//! A drained manager hands its runs off instead of cancelling them: each
//! run's agent stops, its dir is stored as a checkpoint and removed, the
//! session waits to be resumed, and another manager of the pool resumes
//! it — the revision lands once, never `cancelled`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use korvus_runner::RunOutcome;
use korvus_store::{SessionStatus, Store, StoreExt as _};

use crate::support::{counters, write_files, Env, ScriptRunner};

/// What each attempt saw: its attempt, its message, the progress file.
type Seen = Arc<Mutex<Vec<(u32, Option<String>, Option<String>)>>>;

/// A runner that records what it saw; on its first attempt it writes its
/// progress and waits to be stopped, on a later one it finishes.
fn recording(seen: &Seen) -> ScriptRunner {
    let seen = Arc::clone(seen);
    ScriptRunner::new(move |ctx, message| {
        let seen = Arc::clone(&seen);
        async move {
            let scratch = ctx.scratch.clone().expect("a scratch dir");
            let progress = std::fs::read_to_string(scratch.join("work/progress.txt")).ok();
            let attempt = ctx.session.attempt;
            seen.lock().unwrap().push((attempt, message, progress));
            if attempt == 1 {
                write_files(&ctx, &[("work/progress.txt", "step 2 of 4\n")]);
                ctx.cancel.cancelled().await;
                return Ok(RunOutcome::completed(counters()));
            }
            write_files(&ctx, &[("report.md", "# resumed and done\n")]);
            Ok(RunOutcome::completed(counters()))
        }
    })
}

async fn until_started(env: &Env, id: korvus_store::SessionId) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while env
        .store
        .get_session(id)
        .await
        .unwrap()
        .started_at
        .is_none()
    {
        assert!(std::time::Instant::now() < deadline, "never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The runner is called right after the start is recorded.
    tokio::time::sleep(Duration::from_millis(200)).await;
}

#[tokio::test]
async fn a_drained_run_is_resumed_by_another_manager_and_lands_once() {
    let env = Env::new().await;
    let seen: Seen = Arc::default();
    let leaving = env.builder(recording(&seen)).build();
    let session = leaving.create(env.request("find the leak")).await.unwrap();
    until_started(&env, session.id).await;
    assert!(
        leaving.drain(Duration::from_secs(10)).await,
        "drained in time"
    );

    let pending = env.store.get_session(session.id).await.unwrap();
    assert!(pending.is_resume_pending(), "{pending:?}");
    assert_eq!(pending.status, SessionStatus::Running);
    assert_eq!((pending.attempt, pending.revision), (2, 1));
    assert!(!env.dir_of(session.id, 1).exists(), "the dir was removed");
    assert!(
        env.store.get_report(session.id, 1).await.is_err(),
        "nothing landed yet"
    );
    // A drained manager takes nothing new.
    assert!(leaving.create(env.request("late")).await.is_err());

    let staying = env.builder(recording(&seen)).build();
    let row = staying
        .await_settled(session.id, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    assert_eq!((row.revision, row.attempt), (1, 2), "{row:?}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    let (attempt, message, progress) = &seen[1];
    assert_eq!(*attempt, 2);
    let message = message.as_deref().expect("a resume message");
    assert!(message.contains("interrupted"), "{message}");
    assert!(message.contains("find the leak"), "{message}");
    assert_eq!(progress.as_deref(), Some("step 2 of 4\n"), "restored");
    let report = env.store.get_report(session.id, 1).await.unwrap();
    assert_eq!(report.exit_reason, "completed", "{report:?}");
    let notes = crate::support::notes(&env, session.id).await;
    assert!(
        notes.iter().any(|n| n.starts_with("handed off")),
        "{notes:?}"
    );
    staying.stop().await;
}

#[tokio::test]
async fn a_drain_leaves_queued_sessions_queued_and_a_stop_still_cancels() {
    let env = Env::new().await;
    let seen: Seen = Arc::default();
    let leaving = env.builder(recording(&seen)).max_running(1).build();
    let running = leaving.create(env.request("runs")).await.unwrap();
    let queued = leaving.create(env.request("waits")).await.unwrap();
    assert!(queued.is_queued(), "{queued:?}");
    until_started(&env, running.id).await;
    assert!(leaving.drain(Duration::from_secs(10)).await);
    let still = env.store.get_session(queued.id).await.unwrap();
    assert!(still.is_queued(), "{still:?}");
    assert!(env
        .store
        .get_session(running.id)
        .await
        .unwrap()
        .is_resume_pending());

    // `stop` is unchanged: it cancels.
    let stopping = env.builder(recording(&seen)).max_running(2).build();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let row = env.store.get_session(queued.id).await.unwrap();
        if row.started_at.is_some()
            && !env
                .store
                .get_session(running.id)
                .await
                .unwrap()
                .is_resume_pending()
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not both claimed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    stopping.stop().await;
    let ended = env.store.get_session(queued.id).await.unwrap();
    assert_eq!(ended.status, SessionStatus::Cancelled, "{ended:?}");
    // The resumed one finished on its own (its second attempt completes).
    let resumed = env.store.get_session(running.id).await.unwrap();
    assert!(resumed.status.is_terminal(), "{resumed:?}");
    assert!(env
        .store
        .all_session_artifacts(running.id)
        .await
        .unwrap()
        .iter()
        .any(|a| a.path == "work/progress.txt"));
}

/// A cancel that comes while a drain hands a run off wins: the run lands
/// `cancelled`, it is not sent back to be resumed.
#[tokio::test]
async fn a_cancel_during_a_hand_off_lands_cancelled() {
    let env = Env::new().await;
    let runner = ScriptRunner::new(|ctx, _| async move {
        write_files(&ctx, &[("work/progress.txt", "half\n")]);
        ctx.cancel.cancelled().await;
        // Still unwinding when the cancel arrives.
        tokio::time::sleep(Duration::from_millis(300)).await;
        Ok(RunOutcome::completed(counters()))
    });
    let manager = env.builder(runner).build();
    let session = manager.create(env.request("stop me")).await.unwrap();
    until_started(&env, session.id).await;
    let drain = {
        let manager = manager.clone();
        tokio::spawn(async move { manager.drain(Duration::from_secs(10)).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    manager.cancel(session.id).await.unwrap();
    assert!(drain.await.unwrap(), "drained");
    let row = env.store.get_session(session.id).await.unwrap();
    assert_eq!(row.status, SessionStatus::Cancelled, "{row:?}");
    assert!(!row.is_resume_pending(), "{row:?}");
}
