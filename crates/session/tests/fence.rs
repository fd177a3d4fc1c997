//! Fencing: a run superseded by a newer run of its session writes no
//! settlement. Replica A's run outlives an operator's forced cancel and a
//! reopen on replica B; A's late settle is refused and B's row stays.

use std::sync::Arc;
use std::time::Duration;

use korvus_blob::MemoryBlobStore;
use korvus_log::JsonlLog;
use korvus_session::{Manager, RunOutcome};
use korvus_store::{MemoryStore, SessionStatus, Settlement, Store};
use korvus_workspace::ScratchRoot;
use tokio::sync::Notify;

use crate::support::{counters, write_files, writing, Env, ScriptRunner};

#[tokio::test]
async fn a_superseded_runs_settle_is_refused_and_leaves_the_new_run_untouched() {
    let logs = tempfile::tempdir().unwrap();
    let env = Env::with(
        Arc::new(MemoryStore::new()),
        Arc::new(MemoryBlobStore::new()),
        Arc::new(JsonlLog::open_dir(logs.path()).unwrap()),
    )
    .await;
    // Replica A: its run waits until the test lets it finish.
    let gate = Arc::new(Notify::new());
    let release = Arc::clone(&gate);
    let a = env
        .builder(ScriptRunner::new(move |ctx, _| {
            let gate = Arc::clone(&gate);
            async move {
                gate.notified().await;
                write_files(&ctx, &[("report.md", "# A, too late\n")]);
                Ok(RunOutcome::completed(counters()))
            }
        }))
        .build();
    let session = a.create(env.request("why?")).await.unwrap();
    assert_eq!(session.fence, 1);

    // A looks dead to an operator, who ends the row (as `korvus cancel
    // --force` does), and replica B — its own log service on the same
    // directory, the same store — reopens the session.
    env.store
        .settle_session(
            session.id,
            Settlement {
                status: SessionStatus::Cancelled,
                exit_reason: Some("cancelled".into()),
                counters: Default::default(),
                fence: session.fence,
            },
        )
        .await
        .unwrap();
    let b = Manager::builder(
        env.store.clone(),
        Arc::new(writing(&[("report.md", "# B\n")])),
    )
    .blob_store(env.blobs.clone())
    .turn_log(Arc::new(JsonlLog::open_dir(logs.path()).unwrap()))
    .scratch_root(ScratchRoot::supplied(env.root.path()))
    .build();
    let reopened = b.reopen(session.id, "go on").await.unwrap();
    assert_eq!(reopened.fence, 2);
    let done = b
        .await_settled(session.id, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(done.status, SessionStatus::Completed);

    // A's run finishes now: it lands its own revision, but its settle
    // presents fence 1 and changes nothing.
    release.notify_one();
    a.stop().await;
    let row = env.store.get_session(session.id).await.unwrap();
    assert_eq!(row, done, "B's row is untouched");
    b.stop().await;
}
