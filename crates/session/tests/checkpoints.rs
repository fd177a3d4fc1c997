//! Checkpoints while a run goes: a turn's end stores what the agent wrote
//! as hidden checkpoint rows, the landing promotes what did not change
//! (nothing uploaded twice), and a takeover on another host lands the last
//! checkpoint.

use korvus_store::StoreExt as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use korvus_blob::BlobStore as _;
use korvus_harvest::{Checkpointer, PersistConfig, PersistRequest};
use korvus_runner::RunOutcome;
use korvus_store::{
    ArtifactKind, Coordination, Lease, NewSession, OwnerId, Session, SessionId, SessionStatus,
    Store,
};
use tokio::sync::Notify;

use crate::support::{counters, log_turn, write, Env, ScriptRunner};

/// Polls `check` until it holds (or ten seconds passed).
async fn eventually<F: std::future::Future<Output = bool>>(mut check: impl FnMut() -> F) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    check().await
}

/// Whether `id` has a checkpoint row of `path`.
async fn checkpointed(env: &Env, id: SessionId, path: &str) -> bool {
    env.store
        .all_session_artifacts(id)
        .await
        .unwrap()
        .iter()
        .any(|a| a.kind == ArtifactKind::Checkpoint && a.path == path)
}

/// A turn's end checkpoints the file the agent wrote before it; the
/// landing promotes it (its bytes uploaded once) and stores the file
/// written after; no checkpoint row is left.
#[tokio::test]
async fn a_turns_end_checkpoints_and_the_landing_promotes_what_did_not_change() {
    let env = Env::new().await;
    let gate = Arc::new(Notify::new());
    let runner = ScriptRunner::new({
        let gate = Arc::clone(&gate);
        move |ctx, _| {
            let gate = Arc::clone(&gate);
            async move {
                let dir = ctx.scratch.clone().unwrap();
                write(&dir, "work/early.txt", "written in turn 1");
                log_turn(&ctx, 1).await;
                gate.notified().await;
                write(&dir, "work/late.txt", "written after");
                write(&dir, "report.md", "# done\n");
                Ok(RunOutcome::completed(counters()))
            }
        }
    });
    let manager = env
        .builder(runner)
        .checkpoint_interval(Duration::from_secs(3600))
        .build();
    let s = manager.create(env.request("checkpoint me")).await.unwrap();
    assert!(
        eventually(|| checkpointed(&env, s.id, "work/early.txt")).await,
        "the turn's end made a checkpoint"
    );
    gate.notify_one();
    let row = manager
        .await_settled(s.id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    let artifacts = env.store.all_session_artifacts(s.id).await.unwrap();
    assert!(
        !artifacts.iter().any(|a| a.kind == ArtifactKind::Checkpoint),
        "the landing replaced every checkpoint row: {artifacts:?}"
    );
    let early = artifacts
        .iter()
        .find(|a| a.path == "work/early.txt")
        .expect("early stored");
    assert_eq!(early.kind, ArtifactKind::AgentOutput);
    let key = korvus_blob::BlobKey::new(early.blob_key.clone()).unwrap();
    assert_eq!(env.blobs.puts_of(&key), 1, "promoted, not uploaded again");
    assert_eq!(
        env.blobs.get(&key).await.unwrap().bytes.as_ref(),
        b"written in turn 1"
    );
    assert!(artifacts.iter().any(|a| a.path == "work/late.txt"));
    assert!(env
        .store
        .get_report(s.id, 1)
        .await
        .unwrap()
        .markdown_key
        .is_some());
    manager.stop().await;
}

/// A run whose manager died on another host (its scratch dir is not on
/// this one) is landed from its last checkpoint: the report row holds the
/// checkpointed `report.md` and says it came from the checkpoint; the
/// checkpointed file is a final row of the revision.
#[tokio::test]
async fn a_takeover_on_another_host_lands_the_last_checkpoint() {
    let env = Env::new().await;
    let dead = env
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
            prompt: "its manager died elsewhere".into(),
            workspace_ref: None,
        })
        .await
        .unwrap();
    let dead: Session = env.store.mark_started(dead.id, dead.fence).await.unwrap();
    // The other host: its scratch dir and its checkpoint, then gone.
    let elsewhere = tempfile::tempdir().unwrap();
    write(elsewhere.path(), "report.md", "# found before the crash\n");
    write(elsewhere.path(), "work/progress.txt", "step 3 of 5\n");
    let mut checkpointer = Checkpointer::new(
        env.store.clone(),
        env.blobs.clone(),
        PersistConfig::default(),
        PersistRequest {
            incident: dead.incident_id,
            session: dead.id,
            revision: dead.revision,
            fence: dead.fence,
            scratch: Some(elsewhere.path().to_path_buf()),
            skip_prefixes: Vec::new(),
            restored: Default::default(),
        },
    );
    let outcome = checkpointer.checkpoint().await;
    assert_eq!(outcome.stored.len(), 2, "{outcome:?}");
    drop(elsewhere);

    let manager = env
        .builder(crate::support::writing(&[]))
        .lease(Duration::from_millis(300), Duration::from_millis(30))
        .resume_orphans(0, Duration::ZERO)
        .build();
    let ended = eventually(|| async {
        env.store
            .get_session(dead.id)
            .await
            .unwrap()
            .status
            .is_terminal()
    })
    .await;
    assert!(ended, "taken over and settled");
    let row = env.store.get_session(dead.id).await.unwrap();
    assert_eq!(row.exit_reason.as_deref(), Some("owner_lost"));
    let report = env.store.get_report(dead.id, dead.revision).await.unwrap();
    let from = report
        .salvaged_from
        .clone()
        .expect("says where it came from");
    assert!(from.contains("the checkpoint of the lost run"), "{from}");
    assert!(
        report
            .detail
            .as_deref()
            .unwrap()
            .contains("2 file(s) of its last checkpoint stored"),
        "{report:?}"
    );
    let key = korvus_blob::BlobKey::new(report.markdown_key.clone().unwrap()).unwrap();
    assert_eq!(
        env.blobs.get(&key).await.unwrap().bytes.as_ref(),
        b"# found before the crash\n"
    );
    let artifacts = env.store.all_session_artifacts(dead.id).await.unwrap();
    assert!(artifacts.iter().any(|a| a.path == "work/progress.txt"
        && a.kind == ArtifactKind::AgentOutput
        && a.fence == row.fence));
    // A reopen restores the landed files, not the hidden checkpoints.
    let latest = env.store.latest_session_artifacts(dead.id).await.unwrap();
    assert!(latest.iter().all(|a| a.kind != ArtifactKind::Checkpoint));
    manager.stop().await;
}
