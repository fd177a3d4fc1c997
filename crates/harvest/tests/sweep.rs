//! The orphan-blob sweeper on the filesystem backend: orphans go after the
//! grace period and only then; referenced keys, live runs' keys and
//! foreign keys stay; a persist racing sweeps never loses a referenced
//! object.

use korvus_store::StoreExt as _;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use korvus_blob::{BlobKey, BlobStore, FsBlobStore, PutOptions};
use korvus_harvest::{persist, sweep, PersistConfig, PersistOutcome, SweepConfig, SweepError};
use korvus_store::{
    Counters, Lease, MemoryStore, NewIncident, NewReport, NewSession, OwnerId, Session, SessionId,
    SessionStatus, Settlement, Store,
};
use korvus_testkit::faults::{FaultStore, StoreFault, StoreOp};

use crate::support::write;

const DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// A sweep configuration with the default grace, applying or not.
fn config(apply: bool) -> SweepConfig {
    let mut config = SweepConfig::default();
    config.apply = apply;
    config
}

/// A running session, under a live lease or none.
async fn session(store: &dyn Store, lease: Option<Lease>) -> Session {
    let incident = store
        .create_incident(NewIncident {
            title: "sweep".into(),
            workspace: None,
        })
        .await
        .unwrap();
    store
        .create_session(NewSession {
            runner: None,
            admission: Default::default(),
            lease,
            id: SessionId::new(),
            incident_id: incident.id,
            prompt: "go".into(),
            workspace_ref: None,
        })
        .await
        .unwrap()
}

/// Persists `files` from a fresh scratch dir for `s`, revision 1.
async fn persist_files(
    store: Arc<dyn Store>,
    blobs: Arc<dyn BlobStore>,
    s: &Session,
    files: &[(&str, &[u8])],
) -> PersistOutcome {
    let scratch = tempfile::tempdir().unwrap();
    for (path, bytes) in files {
        write(scratch.path(), path, bytes);
    }
    let request = korvus_harvest::PersistRequest {
        incident: s.incident_id,
        session: s.id,
        revision: 1,
        fence: s.fence,
        scratch: Some(scratch.path().to_path_buf()),
        skip_prefixes: Vec::new(),
        restored: Default::default(),
    };
    persist(store, Some(blobs), &PersistConfig::default(), request).await
}

/// Writes the report row of revision 1 from `outcome`, then settles `s`.
async fn land(store: &dyn Store, s: &Session, outcome: &PersistOutcome) {
    let markdown = outcome.report.markdown();
    store
        .create_report(NewReport {
            session_id: s.id,
            incident_id: s.incident_id,
            revision: 1,
            markdown_key: markdown.map(|(k, _)| k.to_owned()),
            manifest_key: outcome.manifest_key.clone(),
            markdown_bytes: markdown.map_or(0, |(_, b)| b),
            exit_reason: "completed".into(),
            counters: Counters::default(),
            detail: None,
            salvaged_from: None,
            fence: s.fence,
        })
        .await
        .unwrap();
    let settlement = Settlement {
        status: SessionStatus::Completed,
        exit_reason: Some("completed".into()),
        counters: Counters::default(),
        fence: s.fence,
    };
    store.settle_session(s.id, settlement).await.unwrap();
}

async fn keys(blobs: &dyn BlobStore) -> Vec<String> {
    let all = blobs.list(None).await.unwrap();
    all.into_iter().map(|m| m.key.to_string()).collect()
}

#[tokio::test]
async fn orphans_go_after_the_grace_period_and_referenced_keys_stay() {
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let root = tempfile::tempdir().unwrap();
    let blobs: Arc<dyn BlobStore> = Arc::new(FsBlobStore::open(root.path()).unwrap());
    // A landed session: every key referenced.
    let landed = session(&*memory, None).await;
    let files: &[(&str, &[u8])] = &[("report.md", b"# R\n"), ("a.txt", b"a")];
    let outcome = persist_files(Arc::clone(&memory), Arc::clone(&blobs), &landed, files).await;
    land(&*memory, &landed, &outcome).await;
    let referenced = keys(&*blobs).await;
    assert_eq!(
        referenced.len(),
        3,
        "report, a.txt, manifest: {referenced:?}"
    );
    // A session whose row batch failed: its bytes have no rows.
    let faults = Arc::new(FaultStore::new(Arc::clone(&memory)));
    faults.fault(StoreOp::CreateArtifacts, StoreFault::Fail);
    let failed = session(&*memory, None).await;
    let outcome = persist_files(faults, Arc::clone(&blobs), &failed, files).await;
    assert!(!outcome.rows_written);
    failed_settle(&*memory, &failed).await;
    // A key outside korvus's layout.
    let foreign = BlobKey::new("incidents/not-ours/x.bin").unwrap();
    let options = PutOptions::for_bytes("x/y", b"x");
    blobs
        .put(&foreign, Bytes::from_static(b"x"), options)
        .await
        .unwrap();
    let all = keys(&*blobs).await;
    assert_eq!(all.len(), 7);

    // Now: the orphans are young, nothing goes.
    let now = SystemTime::now();
    let report = sweep(&*memory, &*blobs, &config(true), now).await.unwrap();
    assert_eq!((report.referenced, report.young, report.foreign), (3, 3, 1));
    assert!(report.orphans.is_empty());
    assert_eq!(keys(&*blobs).await, all);
    // A day and a bit later, a dry run lists them and deletes nothing …
    let later = now + DAY + Duration::from_secs(60);
    let dry = sweep(&*memory, &*blobs, &config(false), later)
        .await
        .unwrap();
    assert_eq!(dry.orphans.len(), 3, "{dry:?}");
    assert!(dry
        .orphans
        .iter()
        .all(|o| o.key.contains(&failed.id.to_string())));
    assert_eq!(
        dry.orphan_bytes,
        dry.orphans.iter().map(|o| o.size).sum::<u64>()
    );
    assert!(!dry.applied);
    assert_eq!(keys(&*blobs).await, all);
    // … and an applied one deletes exactly them.
    let applied = sweep(&*memory, &*blobs, &config(true), later)
        .await
        .unwrap();
    assert_eq!(applied.orphans, dry.orphans);
    assert!(applied.failed.is_empty());
    let mut left = referenced.clone();
    left.push(foreign.to_string());
    left.sort();
    assert_eq!(keys(&*blobs).await, left);
}

async fn failed_settle(store: &dyn Store, s: &Session) {
    let settlement = Settlement {
        status: SessionStatus::Failed,
        exit_reason: Some("report_persist_failed".into()),
        counters: Counters::default(),
        fence: s.fence,
    };
    store.settle_session(s.id, settlement).await.unwrap();
}

#[tokio::test]
async fn a_live_run_keeps_its_unreferenced_keys_and_a_short_grace_is_refused() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let root = tempfile::tempdir().unwrap();
    let blobs: Arc<dyn BlobStore> = Arc::new(FsBlobStore::open(root.path()).unwrap());
    let lease = Lease {
        owner: OwnerId::new(),
        ttl: Duration::from_secs(600),
    };
    let running = session(&*store, Some(lease)).await;
    let files: &[(&str, &[u8])] = &[("report.md", b"# R\n")];
    let outcome = persist_files(Arc::clone(&store), Arc::clone(&blobs), &running, files).await;
    assert!(outcome.rows_written);
    // The manifest has no row yet (the report row comes at landing), but
    // the run is live: it stays, however old.
    let later = SystemTime::now() + 2 * DAY;
    let report = sweep(&*store, &*blobs, &config(true), later).await.unwrap();
    assert_eq!((report.referenced, report.live), (1, 1), "{report:?}");
    assert_eq!(keys(&*blobs).await.len(), 2);

    let mut short = config(true);
    short.grace = Duration::from_secs(60);
    let err = sweep(&*store, &*blobs, &short, later).await.unwrap_err();
    assert!(matches!(err, SweepError::GraceTooShort { .. }), "{err}");
}

#[tokio::test]
async fn persists_racing_sweeps_never_lose_a_referenced_object() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let root = tempfile::tempdir().unwrap();
    let blobs: Arc<dyn BlobStore> = Arc::new(FsBlobStore::open(root.path()).unwrap());
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Sweeps that judge every key as two days old, applied, back to back.
    let sweeper = {
        let (store, blobs, done) = (Arc::clone(&store), Arc::clone(&blobs), Arc::clone(&done));
        tokio::spawn(async move {
            let mut sweeps = 0;
            while !done.load(std::sync::atomic::Ordering::Acquire) || sweeps == 0 {
                let later = SystemTime::now() + 2 * DAY;
                sweep(&*store, &*blobs, &config(true), later).await.unwrap();
                sweeps += 1;
                tokio::task::yield_now().await;
            }
            sweeps
        })
    };
    let mut landed = Vec::new();
    for i in 0..20 {
        let lease = Lease {
            owner: OwnerId::new(),
            ttl: Duration::from_secs(600),
        };
        let s = session(&*store, Some(lease)).await;
        let body = format!("file {i}");
        let files: &[(&str, &[u8])] = &[("report.md", b"# R\n"), ("out.txt", body.as_bytes())];
        let outcome = persist_files(Arc::clone(&store), Arc::clone(&blobs), &s, files).await;
        land(&*store, &s, &outcome).await;
        landed.push(s.id);
    }
    done.store(true, std::sync::atomic::Ordering::Release);
    let sweeps = sweeper.await.unwrap();
    assert!(sweeps > 0);
    for id in landed {
        let mut wanted: Vec<String> = store
            .all_session_artifacts(id)
            .await
            .unwrap()
            .into_iter()
            .map(|a| a.blob_key)
            .collect();
        for r in store.all_reports(id).await.unwrap() {
            wanted.extend(r.markdown_key);
            wanted.extend(r.manifest_key);
        }
        assert_eq!(wanted.len(), 4, "report, out.txt, report row's two keys");
        for key in wanted {
            let key = BlobKey::new(key).unwrap();
            assert!(blobs.head(&key).await.is_ok(), "{key} was swept");
        }
    }
}

#[tokio::test]
async fn a_sweep_walks_page_by_page_and_deletes_a_batch_per_page() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let blobs: Arc<dyn BlobStore> = Arc::new(korvus_blob::MemoryBlobStore::new());
    let landed = session(&*store, None).await;
    let files: &[(&str, &[u8])] = &[("report.md", b"# R\n"), ("a.txt", b"a")];
    let outcome = persist_files(Arc::clone(&store), Arc::clone(&blobs), &landed, files).await;
    land(&*store, &landed, &outcome).await;
    let referenced = keys(&*blobs).await;
    // Two sessions with no rows at all, one spanning a page boundary.
    let incident = landed.incident_id;
    let mut orphans = 0;
    for n in [1500, 1000] {
        let session = SessionId::new();
        for i in 0..n {
            let key = format!("incidents/{incident}/sessions/{session}/artifacts/000001/f{i:05}");
            let key = BlobKey::new(key).unwrap();
            let body = Bytes::from(format!("{i}"));
            let options = PutOptions::for_bytes("text/plain", &body);
            blobs.put(&key, body, options).await.unwrap();
            orphans += 1;
        }
    }
    let later = SystemTime::now() + 2 * DAY;
    let dry = sweep(&*store, &*blobs, &config(false), later)
        .await
        .unwrap();
    assert_eq!(dry.listed, orphans + 3);
    assert_eq!((dry.orphan_count, dry.referenced), (orphans, 3));
    assert_eq!(dry.orphans.len(), korvus_harvest::MAX_REPORTED);
    assert_eq!((dry.pages, dry.delete_batches), (4, 0), "{dry:?}");
    assert_eq!(keys(&*blobs).await.len() as u64, orphans + 3);
    let applied = sweep(&*store, &*blobs, &config(true), later).await.unwrap();
    assert_eq!(applied.orphan_count, orphans);
    assert_eq!((applied.pages, applied.delete_batches), (4, 3));
    assert_eq!((applied.failed_count, applied.failed.len()), (0, 0));
    assert_eq!(keys(&*blobs).await, referenced);
    let again = sweep(&*store, &*blobs, &config(true), later).await.unwrap();
    assert_eq!((again.listed, again.orphan_count, again.pages), (3, 0, 2));
}
