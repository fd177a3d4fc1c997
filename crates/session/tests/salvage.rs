//! Salvage of kept scratch dirs after their session settled:
//! `Manager::salvage` stores them once the cause is gone and attaches them
//! to their revision under a new fence; a reopen salvages first.

use korvus_store::StoreExt as _;
use std::time::Duration;

use korvus_blob::BlobStore as _;
use korvus_session::SessionError;
use korvus_store::{ArtifactKind, Store};
use korvus_testkit::faults::BlobFault;

use crate::support::{writing, Env};

/// A run whose every upload failed settles without its files; its dir is
/// kept. Once the blob store works again, `salvage` stores the dir: the
/// report row gets the document and says where it came from, the files
/// get rows at the next fence, the settlement stays, the dir goes; a
/// second salvage finds nothing.
#[tokio::test]
async fn salvage_stores_a_kept_dir_once_the_blob_store_is_back() {
    let env = Env::new().await;
    env.blobs.fault_put("", BlobFault::Fail);
    let manager = env
        .builder(writing(&[
            ("report.md", "# what I found"),
            ("work/progress.txt", "step 3 of 5"),
        ]))
        .build();
    let settled = env.run_to_end(&manager, "bucket gone").await;
    let session = settled.clone();
    manager.wait().await;
    let dir = env.dir_of(session.id, 1);
    assert!(korvus_workspace::kept_reason(&dir).is_some(), "kept");
    let before = env.store.get_report(session.id, 1).await.unwrap();
    assert_eq!(before.markdown_key, None, "{before:?}");
    assert!(env
        .store
        .all_session_artifacts(session.id)
        .await
        .unwrap()
        .is_empty());

    // While the cause is still there: nothing attached, the row as it
    // was, still kept.
    let still = manager.salvage(session.id).await.unwrap();
    assert!(!still.dirs[0].complete, "{still:?}");
    assert_eq!(still.still_kept.len(), 1);
    assert!(korvus_workspace::kept_reason(&dir).is_some());
    assert_eq!(env.store.get_session(session.id).await.unwrap(), settled);

    env.blobs.clear_faults();
    let done = manager.salvage(session.id).await.unwrap();
    assert!(!done.taken_over);
    assert_eq!(done.dirs.len(), 1, "{done:?}");
    let d = &done.dirs[0];
    assert!(d.complete && d.report, "{d:?}");
    assert_eq!((d.revision, d.stored), (1, 2));
    assert!(done.still_kept.is_empty());
    assert!(!dir.exists(), "stored whole: removed");

    let row = env.store.get_session(session.id).await.unwrap();
    assert_eq!(
        (row.status, row.exit_reason.clone(), row.counters),
        (
            settled.status,
            settled.exit_reason.clone(),
            settled.counters
        ),
        "the settlement stays"
    );
    let report = env.store.get_report(session.id, 1).await.unwrap();
    assert!(report.markdown_key.is_some(), "{report:?}");
    assert_eq!(report.exit_reason, before.exit_reason);
    let from = report.salvaged_from.as_deref().unwrap();
    assert!(from.contains(&dir.display().to_string()), "{from}");
    let detail = report.detail.as_deref().unwrap();
    assert!(detail.contains("salvaged later"), "{detail}");
    let document = env
        .blobs
        .get(&korvus_blob::BlobKey::new(report.markdown_key.unwrap()).unwrap())
        .await
        .unwrap();
    assert_eq!(&document.bytes[..], b"# what I found");
    let artifacts = env.store.all_session_artifacts(session.id).await.unwrap();
    let mut paths: Vec<_> = artifacts
        .iter()
        .map(|a| (a.path.as_str(), a.kind, a.fence))
        .collect();
    paths.sort_by_key(|p| p.0);
    assert_eq!(
        paths,
        vec![
            ("report.md", ArtifactKind::Report, row.fence),
            ("work/progress.txt", ArtifactKind::AgentOutput, row.fence),
        ]
    );

    let again = manager.salvage(session.id).await.unwrap();
    assert!(again.dirs.is_empty() && again.still_kept.is_empty());
    manager.stop().await;
}

/// A reopen of a session whose last dir is kept salvages it first; while
/// it cannot, the reopen is refused with `OutputKept` naming the dir and
/// nothing is continued.
#[tokio::test]
async fn a_reopen_salvages_the_kept_dir_first_or_refuses() {
    let env = Env::new().await;
    env.blobs.fault_put("progress", BlobFault::Fail);
    let manager = env
        .builder(writing(&[("work/progress.txt", "only copy")]))
        .build();
    let session = manager.create(env.request("first")).await.unwrap();
    manager
        .await_settled(session.id, Duration::from_secs(10))
        .await
        .unwrap();
    manager.wait().await;
    let dir = env.dir_of(session.id, 1);
    assert!(korvus_workspace::kept_reason(&dir).is_some());

    match manager.reopen(session.id, "go on").await {
        Err(SessionError::OutputKept {
            revision, dir: d, ..
        }) => assert_eq!((revision, d), (1, dir.clone())),
        other => panic!("{other:?}"),
    }
    let row = env.store.get_session(session.id).await.unwrap();
    assert_eq!(row.revision, 1, "not continued: {row:?}");
    assert!(row.status.is_terminal());

    env.blobs.clear_faults();
    let reopened = manager.reopen(session.id, "go on").await.unwrap();
    assert_eq!(reopened.revision, 2);
    let stored: Vec<_> = env
        .store
        .all_session_artifacts(session.id)
        .await
        .unwrap()
        .into_iter()
        .filter(|a| a.revision == 1)
        .map(|a| a.path)
        .collect();
    assert_eq!(stored, vec!["work/progress.txt".to_owned()]);
    manager
        .await_settled(session.id, Duration::from_secs(10))
        .await
        .unwrap();
    manager.stop().await;
}

/// `salvage` of a session a run of this process still has is refused: its
/// own landing stores its dir.
#[tokio::test]
async fn salvage_refuses_a_session_whose_run_is_live() {
    let env = Env::new().await;
    let gate = std::sync::Arc::new(tokio::sync::Notify::new());
    let manager = env
        .builder(crate::support::ScriptRunner::new({
            let gate = gate.clone();
            move |_, _| {
                let gate = gate.clone();
                async move {
                    gate.notified().await;
                    Ok(korvus_runner::RunOutcome::completed(
                        crate::support::counters(),
                    ))
                }
            }
        }))
        .build();
    let session = manager.create(env.request("busy")).await.unwrap();
    assert!(matches!(
        manager.salvage(session.id).await,
        Err(SessionError::NotFinished { .. })
    ));
    gate.notify_one();
    manager
        .await_settled(session.id, Duration::from_secs(10))
        .await
        .unwrap();
    manager.stop().await;
}

/// A kept dir whose mark names a live korvus process (a run still going on
/// this host) is left alone by a salvage; a dir of a run that stored all
/// its output but whose mark stayed (its clean-up never ran) is removed
/// without touching the row; `discard_kept` gives a dir up.
#[tokio::test]
async fn salvage_leaves_a_live_runs_dir_and_removes_a_stale_mark_without_a_write() {
    let env = Env::new().await;
    let manager = env
        .builder(writing(&[("work/progress.txt", "all stored")]))
        .build();
    let settled = env.run_to_end(&manager, "stored").await;
    let session = settled.clone();
    manager.wait().await;
    let dir = env.dir_of(session.id, 1);
    assert!(!dir.exists(), "stored whole: removed");

    // The same files, as a run killed after its clean-up's settle would
    // leave them: a running mark of a process that is gone.
    std::fs::create_dir_all(dir.join("work")).unwrap();
    std::fs::write(dir.join("work/progress.txt"), "all stored").unwrap();
    std::fs::write(
        env.root.path().join(session.id.to_string()).join("1.kept"),
        format!(
            "{} (korvus process 1 started at tick 1)\n",
            korvus_workspace::RUNNING_REASON
        ),
    )
    .unwrap();
    let done = manager.salvage(session.id).await.unwrap();
    assert_eq!(done.dirs.len(), 1, "{done:?}");
    assert!(
        done.dirs[0].complete && done.dirs[0].stored == 0,
        "{done:?}"
    );
    assert!(!dir.exists(), "removed");
    assert_eq!(
        env.store.get_session(session.id).await.unwrap(),
        settled,
        "the row as its run left it"
    );
    let report = env.store.get_report(session.id, 1).await.unwrap();
    assert_eq!(report.salvaged_from, None, "{report:?}");

    // A running mark of this live process: in use, left alone.
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("busy.txt"), "in use").unwrap();
    korvus_workspace::mark_running(&dir).unwrap();
    let done = manager.salvage(session.id).await.unwrap();
    assert!(done.dirs.is_empty(), "{done:?}");
    assert_eq!(done.still_kept.len(), 1);
    assert!(done.still_kept[0].run_alive);
    assert!(dir.join("busy.txt").exists());
    assert!(
        manager.discard_kept(session.id).await.unwrap().is_empty(),
        "a live run's dir stays"
    );

    // Given up by an operator once it is no longer in use.
    korvus_workspace::keep(&dir, "a file that cannot be read").unwrap();
    let gone = manager.discard_kept(session.id).await.unwrap();
    assert_eq!(gone.len(), 1);
    assert!(!dir.exists());
    assert!(korvus_workspace::kept_dirs(env.root.path(), session.id)
        .unwrap()
        .is_empty());
    manager.stop().await;
}

/// Two salvages of one kept dir at once (a `reap --apply` and an
/// operator's `korvus salvage`, here two managers on one store): the
/// output is attached once, and the manifest the report row names lists
/// exactly the rows that were attached — the loser's manifest, stored for
/// the same fence, never overwrites it.
#[tokio::test]
async fn two_salvages_at_once_attach_once_and_the_manifest_names_what_was_attached() {
    let env = Env::new().await;
    env.blobs.fault_put("", BlobFault::Fail);
    const FILES: &[(&str, &str)] = &[("report.md", "# what I found"), ("work/a.txt", "a")];
    let manager = env.builder(writing(FILES)).build();
    let other = env.builder(writing(FILES)).build();
    let settled = env.run_to_end(&manager, "raced").await;
    manager.wait().await;
    env.blobs.clear_faults();
    let (a, b) = tokio::join!(manager.salvage(settled.id), other.salvage(settled.id));
    let attached = [&a, &b]
        .iter()
        .filter(|r| matches!(r, Ok(s) if s.dirs.iter().any(|d| d.complete && d.stored > 0)))
        .count();
    assert!(attached >= 1, "{a:?} {b:?}");
    let rows: std::collections::BTreeSet<String> = env
        .store
        .all_session_artifacts(settled.id)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.blob_key)
        .collect();
    assert_eq!(rows.len(), 2, "attached once: {rows:?}");
    let report = env.store.get_report(settled.id, 1).await.unwrap();
    let key = korvus_blob::BlobKey::new(report.manifest_key.clone().expect("a manifest")).unwrap();
    let manifest: serde_json::Value =
        serde_json::from_slice(&env.blobs.get(&key).await.unwrap().bytes).unwrap();
    let listed: std::collections::BTreeSet<String> = manifest["stored"]
        .as_array()
        .expect("stored")
        .iter()
        .map(|f| f["blob_key"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(listed, rows, "{manifest}");
    manager.stop().await;
    other.stop().await;
}
