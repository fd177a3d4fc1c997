//! Retention: `prune` deletes finished sessions older than the cut-off —
//! rows, then log, then blobs — skips and counts the rest, and a reopen
//! racing it wins whole or finds nothing.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use korvus_blob::MemoryBlobStore;
use korvus_blob::{artifact_key, session_prefix, BlobStore, PutOptions};
use korvus_harvest::SweepConfig;
use korvus_log::{Access, JsonlLog, LogHeader, LogId};
use korvus_runner::{ExitReason, RunOutcome};
use korvus_session::{prune, Manager, PruneConfig, PruneTargets, SessionError};
use korvus_store::{
    Counters, MemoryStore, Session, SessionStatus, Store, StoreError, StoreExt as _,
};
use korvus_testkit::store::{new_artifact, new_session, settlement_at};

use crate::support::{settled, write_files, Env, ScriptRunner};

/// Asks the user when the prompt is `ask`, runs until cancelled when it
/// (or the message of a reopen) is `hold`, and otherwise writes a report
/// and a file and completes.
fn by_prompt() -> ScriptRunner {
    ScriptRunner::new(|ctx, message| async move {
        let said = message.unwrap_or_else(|| ctx.session.prompt.clone());
        match said.as_str() {
            "ask" => Ok(RunOutcome::new(
                ExitReason::AWAITING_USER,
                Counters::default(),
            )),
            "hold" => {
                ctx.cancel.cancelled().await;
                Ok(RunOutcome::new(ExitReason::CANCELLED, Counters::default())
                    .with_author_finished(false))
            }
            _ => {
                let body = format!("# R{}\n", ctx.revision);
                write_files(&ctx, &[("report.md", &body), ("notes/a.txt", "kept bytes")]);
                Ok(RunOutcome::completed(Counters::default()))
            }
        }
    })
}

fn targets(env: &Env) -> PruneTargets<'_> {
    PruneTargets {
        store: &*env.store,
        logs: &*env.logs,
        blobs: &*env.blobs,
    }
}

async fn finished(env: &Env, manager: &Manager, n: usize) -> Vec<Session> {
    let mut out = Vec::new();
    for i in 0..n {
        let s = manager
            .create(env.request(&format!("run {i}")))
            .await
            .unwrap();
        let row = settled(manager, &s).await;
        assert_eq!(row.status, SessionStatus::Completed);
        out.push(row);
    }
    out
}

/// Nothing of `s` reads: no row, no reports, no artifacts, no log, no blob.
async fn assert_gone(env: &Env, s: &Session) {
    assert!(matches!(
        env.store.get_session(s.id).await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(env.store.all_reports(s.id).await.unwrap().is_empty());
    assert!(env
        .store
        .all_session_artifacts(s.id)
        .await
        .unwrap()
        .is_empty());
    assert!(env
        .logs
        .open(LogId::from_uuid(s.id.as_uuid()), Access::Read)
        .await
        .is_err());
    let prefix = session_prefix(s.incident_id.as_uuid(), s.id.as_uuid());
    assert!(env.blobs.list(Some(&prefix)).await.unwrap().is_empty());
}

/// `s` reads whole: its row, its reports with their bytes, its log.
async fn assert_whole(env: &Env, s: &Session) {
    let row = env.store.get_session(s.id).await.unwrap();
    assert_eq!(row.id, s.id);
    let reports = env.store.all_reports(s.id).await.unwrap();
    assert_eq!(reports.len() as u32, row.revision);
    for a in env.store.all_session_artifacts(s.id).await.unwrap() {
        let key = korvus_blob::BlobKey::new(a.blob_key).unwrap();
        assert_eq!(
            env.blobs.get(&key).await.unwrap().bytes.len() as u64,
            a.size_bytes
        );
    }
    env.logs
        .open(LogId::from_uuid(s.id.as_uuid()), Access::Read)
        .await
        .expect("the log of a kept session reads");
}

/// After an applied prune, every blob left is referenced by a row.
async fn assert_no_orphans(env: &Env) {
    let config = {
        let mut v = SweepConfig::default();
        v.grace = Duration::from_secs(86_400);
        v
    };
    let swept = korvus_harvest::sweep(&*env.store, &*env.blobs, &config, SystemTime::now())
        .await
        .unwrap();
    assert_eq!(
        (swept.referenced, swept.young, swept.orphan_count),
        (swept.listed, 0, 0),
        "every blob left is referenced: {swept:?}"
    );
}

#[tokio::test]
async fn prune_deletes_old_finished_sessions_whole_and_skips_the_rest() {
    let env = Env::new().await;
    let manager = env.builder(by_prompt()).build();
    let old = finished(&env, &manager, 6).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let cutoff = SystemTime::now();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let recent = finished(&env, &manager, 2).await;
    let asking = manager.create(env.request("ask")).await.unwrap();
    let waiting = settled(&manager, &asking).await;
    assert!(waiting.is_idle());
    let running = manager.create(env.request("hold")).await.unwrap();

    let dry = PruneConfig::new(cutoff, false);
    let counted = prune(targets(&env), &dry).await.unwrap();
    assert!(!counted.applied);
    assert_eq!(
        (counted.examined, counted.pruned, counted.recent),
        (10, 6, 2),
        "{counted:?}"
    );
    assert_eq!(
        (counted.active, counted.queued, counted.waiting),
        (1, 0, 1),
        "{counted:?}"
    );
    assert_eq!(
        (
            counted.raced,
            counted.inherited,
            counted.orphan_logs,
            counted.failure_count
        ),
        (0, 0, 0, 0)
    );
    assert_eq!(counted.pruned_blobs, 6 * 3, "report, notes/a.txt, manifest");
    assert!(counted.pruned_bytes > 6 * 10);
    for s in &old {
        assert_whole(&env, s).await;
    }

    let apply = {
        let mut v = dry;
        v.apply = true;
        v
    };
    let pruned = prune(targets(&env), &apply).await.unwrap();
    assert!(pruned.applied);
    let mut as_counted = counted.clone();
    as_counted.applied = true;
    assert_eq!(pruned, as_counted);
    for s in &old {
        assert_gone(&env, s).await;
    }
    for s in recent.iter().chain([&waiting]) {
        assert_whole(&env, s).await;
    }
    assert!(env.store.get_session(running.id).await.unwrap().is_active());
    assert_no_orphans(&env).await;

    // Again: nothing left to prune.
    let again = prune(targets(&env), &apply).await.unwrap();
    assert_eq!((again.examined, again.pruned), (4, 0));
    manager.cancel(running.id).await.unwrap();
    manager.stop().await;
}

#[tokio::test]
async fn a_reopen_racing_prune_is_kept_whole_or_not_found() {
    race_reopen_and_prune(&Env::new().await, 12).await;
}

/// The same race, 20 rounds, on the one-machine `JsonlLog`: a log file the
/// reopen holds open while prune deletes it must not make the reopen fail
/// with a log error, nor leave the file behind.
#[tokio::test]
async fn a_reopen_racing_prune_on_jsonl_logs_is_kept_whole_or_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let logs = Arc::new(JsonlLog::open_dir(dir.path()).unwrap());
    let env = Env::with(
        Arc::new(MemoryStore::new()),
        Arc::new(MemoryBlobStore::new()),
        logs,
    )
    .await;
    race_reopen_and_prune(&env, 20).await;
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "nothing of a pruned log is left: {left:?}");
}

/// `rounds` rounds of a reopen racing an applied prune of its finished
/// session: each ends with the session whole (the reopen won) or gone
/// with `NotFound` (prune won) — never another error, never an orphan —
/// and each side wins some rounds.
async fn race_reopen_and_prune(env: &Env, rounds: u64) {
    let manager = env.builder(by_prompt()).build();
    let (mut kept, mut gone) = (0, 0);
    for round in 0..rounds {
        let s = finished(env, &manager, 1).await.remove(0);
        let config = PruneConfig::new(SystemTime::now() + Duration::from_secs(60), true);
        // The prune starts at once, or a little after the reopen: each
        // side wins some rounds.
        let late = Duration::from_millis(if round % 2 == 0 { 0 } else { round });
        let (pruned, reopened) = tokio::join!(
            async {
                if !late.is_zero() {
                    tokio::time::sleep(late).await;
                }
                prune(targets(env), &config).await
            },
            manager.reopen(s.id, "hold")
        );
        let pruned = pruned.unwrap();
        let reopened_ok = reopened.is_ok();
        match reopened {
            Ok(_) => {
                kept += 1;
                assert_eq!(pruned.pruned, 0, "round {round}: {pruned:?}");
                manager.cancel(s.id).await.unwrap();
                let row = settled(&manager, &s).await;
                assert_eq!(row.revision, 2);
                assert_whole(env, &row).await;
            }
            Err(SessionError::NotFound { .. }) => {
                gone += 1;
                assert_eq!(pruned.pruned, 1, "round {round}: {pruned:?}");
                assert_gone(env, &s).await;
            }
            Err(other) => panic!("round {round}: a reopen racing prune failed {other:?}"),
        }
        // What the round kept is pruned before the next.
        let rest = prune(targets(env), &config).await.unwrap();
        assert_eq!(
            rest.pruned,
            u64::from(reopened_ok),
            "round {round}: {rest:?}"
        );
        assert_gone(env, &s).await;
        assert_no_orphans(env).await;
    }
    assert_eq!(kept + gone, rounds);
    assert!(
        kept > 0 && gone > 0,
        "both sides won some rounds: {kept} kept, {gone} gone"
    );
    manager.stop().await;
}

#[tokio::test]
async fn ten_thousand_finished_sessions_are_pruned_and_an_active_one_is_skipped() {
    let env = Env::new().await;
    let store: &dyn Store = &*env.store;
    let mut keep = Vec::new();
    for i in 0..10_050u32 {
        let s = store
            .create_session(new_session(&env.incident, "old"))
            .await
            .unwrap();
        let mut row = new_artifact(&s, &format!("out-{i}.txt"), 1);
        let key = artifact_key(
            s.incident_id.as_uuid(),
            s.id.as_uuid(),
            row.id.as_uuid(),
            &row.path,
        );
        row.blob_key = key.to_string();
        env.blobs
            .put(
                &key,
                Bytes::from_static(b"abc"),
                PutOptions::for_bytes("text/plain", b"abc"),
            )
            .await
            .unwrap();
        store.create_artifacts(vec![row]).await.unwrap();
        let header = LogHeader::new(LogId::from_uuid(s.id.as_uuid()))
            .with_label("incident_id", s.incident_id.to_string())
            .with_label("session_id", s.id.to_string());
        env.logs.create(header).await.unwrap();
        if i < 10_000 {
            store
                .settle_session(
                    s.id,
                    settlement_at(SessionStatus::Completed, "completed", s.fence),
                )
                .await
                .unwrap();
        } else {
            keep.push(s);
        }
    }
    let config = PruneConfig::new(SystemTime::now() + Duration::from_secs(60), true);
    let report = prune(targets(&env), &config).await.unwrap();
    assert_eq!(report.pruned, 10_000, "{report:?}");
    assert_eq!(report.pruned_blobs, 10_000);
    assert_eq!(report.pruned_bytes, 30_000);
    assert_eq!(report.active + report.queued, 50, "{report:?}");
    assert_eq!(report.failure_count, 0, "{report:?}");
    let left = env.store.all_sessions(env.incident.id).await.unwrap();
    assert_eq!(left, keep);
    assert_eq!(env.logs.list().await.unwrap().len(), 50);
    assert_eq!(env.blobs.list(None).await.unwrap().len(), 50);
    assert_no_orphans(&env).await;
}
