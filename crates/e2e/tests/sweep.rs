//! The orphan-blob sweeper on PostgreSQL + S3: orphans (bytes of a failed
//! row batch) go once old, judged by S3's own last-modified stamps; a
//! large file streams up in parts; persists racing applied sweeps never
//! lose a referenced object.

use korvus_store::StoreExt as _;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use korvus_blob::{BlobKey, BlobStore};
use korvus_harvest::{persist, sweep, PersistConfig, PersistOutcome, PersistRequest, SweepConfig};
use korvus_store::{
    CoordinatedStore, Counters, Lease, NewIncident, NewReport, NewSession, OwnerId, Session,
    SessionId, SessionStatus, Settlement, Store,
};
use korvus_testkit::faults::{FaultStore, StoreFault, StoreOp};

use crate::support::{write, Backends};

const DAY: Duration = Duration::from_secs(24 * 60 * 60);

fn applied() -> SweepConfig {
    {
        let mut v = SweepConfig::default();
        v.apply = true;
        v
    }
}

async fn running(store: &dyn Store) -> Session {
    let incident = store
        .create_incident(NewIncident {
            title: "sweep".into(),
            workspace: None,
        })
        .await
        .unwrap();
    let lease = Lease {
        owner: OwnerId::new(),
        ttl: Duration::from_secs(600),
    };
    store
        .create_session(NewSession {
            runner: None,
            admission: Default::default(),
            lease: Some(lease),
            id: SessionId::new(),
            incident_id: incident.id,
            prompt: "go".into(),
            workspace_ref: None,
        })
        .await
        .unwrap()
}

async fn persist_files(
    store: Arc<dyn CoordinatedStore>,
    blobs: Arc<dyn BlobStore>,
    s: &Session,
    files: &[(&str, Vec<u8>)],
) -> PersistOutcome {
    let scratch = tempfile::tempdir().unwrap();
    for (path, body) in files {
        write(scratch.path(), path, body);
    }
    let request = PersistRequest {
        incident: s.incident_id,
        session: s.id,
        revision: 1,
        fence: s.fence,
        scratch: Some(scratch.path().to_path_buf()),
        skip_prefixes: Vec::new(),
        restored: BTreeMap::new(),
    };
    persist(store, Some(blobs), &PersistConfig::default(), request).await
}

/// The report row (referencing the manifest), then the settlement.
async fn land(store: &dyn Store, s: &Session, outcome: &PersistOutcome, status: SessionStatus) {
    let markdown = outcome.report.markdown();
    let row = NewReport {
        session_id: s.id,
        incident_id: s.incident_id,
        revision: 1,
        markdown_key: markdown.map(|(k, _)| k.to_owned()),
        manifest_key: outcome.manifest_key.clone(),
        markdown_bytes: markdown.map_or(0, |(_, b)| b),
        exit_reason: status.to_string().into(),
        counters: Counters::default(),
        detail: None,
        salvaged_from: None,
        fence: s.fence,
    };
    store.create_report(row).await.unwrap();
    let settlement = Settlement {
        status,
        exit_reason: Some(status.to_string().into()),
        counters: Counters::default(),
        fence: s.fence,
    };
    store.settle_session(s.id, settlement).await.unwrap();
}

/// Every key the rows of `id` reference.
async fn referenced(store: &dyn Store, id: SessionId) -> Vec<String> {
    let mut keys: Vec<String> = store
        .all_session_artifacts(id)
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.blob_key)
        .collect();
    for r in store.all_reports(id).await.unwrap() {
        keys.extend(r.markdown_key);
        keys.extend(r.manifest_key);
    }
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphans_on_s3_go_once_old_and_a_large_file_streams_in_parts() {
    let Some(b) = Backends::new().await else {
        return;
    };
    // Landed, with a 17 MiB file: over the 16 MiB multipart threshold.
    let big: Vec<u8> = (0..17 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
    let landed = running(&*b.store).await;
    let files = [
        ("report.md", b"# R\n".to_vec()),
        ("data/big.bin", big.clone()),
    ];
    let outcome = persist_files(Arc::clone(&b.store), Arc::clone(&b.blobs), &landed, &files).await;
    assert!(
        outcome.rows_written && outcome.failed.is_empty(),
        "{outcome:?}"
    );
    land(&*b.store, &landed, &outcome, SessionStatus::Completed).await;
    let keep = referenced(&*b.store, landed.id).await;
    assert_eq!(keep.len(), 4);
    let big_row = b.store.all_session_artifacts(landed.id).await.unwrap();
    let big_row = big_row.iter().find(|a| a.path == "data/big.bin").unwrap();
    let blob = b
        .blobs
        .get(&BlobKey::new(&big_row.blob_key).unwrap())
        .await
        .unwrap();
    assert!(blob.bytes == big, "the streamed object differs");

    // A failed row batch: bytes without rows.
    let faults = Arc::new(FaultStore::new(Arc::clone(&b.store)));
    faults.fault(StoreOp::CreateArtifacts, StoreFault::Fail);
    let failed = running(&*b.store).await;
    let files = [("report.md", b"# R\n".to_vec()), ("a.txt", b"a".to_vec())];
    let outcome = persist_files(faults, Arc::clone(&b.blobs), &failed, &files).await;
    assert!(!outcome.rows_written);
    land(&*b.store, &failed, &outcome, SessionStatus::Failed).await;

    let now = SystemTime::now();
    let young = sweep(&*b.store, &*b.blobs, &applied(), now).await.unwrap();
    assert!(young.orphans.is_empty(), "{young:?}");
    assert_eq!(young.young, 2, "report.md and a.txt of the failed batch");
    let old = sweep(&*b.store, &*b.blobs, &applied(), now + 2 * DAY)
        .await
        .unwrap();
    assert_eq!(old.orphans.len(), 2, "{old:?}");
    assert!(old.failed.is_empty());
    let mut left: Vec<String> = b
        .blobs
        .list(None)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.key.to_string())
        .collect();
    let mut expected = keep;
    // The failed session's report row still references its manifest.
    expected.extend(referenced(&*b.store, failed.id).await);
    expected.sort();
    expected.dedup(); // report.md: its artifact row and its report row
    left.sort();
    assert_eq!(left, expected);
    b.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persists_racing_sweeps_on_s3_never_lose_a_referenced_object() {
    let Some(b) = Backends::new().await else {
        return;
    };
    let done = Arc::new(AtomicBool::new(false));
    let sweeper = {
        let (store, blobs, done) = (
            Arc::clone(&b.store),
            Arc::clone(&b.blobs),
            Arc::clone(&done),
        );
        tokio::spawn(async move {
            let mut sweeps = 0u32;
            while !done.load(Ordering::Acquire) || sweeps == 0 {
                let later = SystemTime::now() + 2 * DAY;
                sweep(&*store, &*blobs, &applied(), later).await.unwrap();
                sweeps += 1;
            }
            sweeps
        })
    };
    let mut landed = Vec::new();
    for i in 0..10 {
        let s = running(&*b.store).await;
        let files = [
            ("report.md", b"# R\n".to_vec()),
            ("out.txt", format!("{i}").into_bytes()),
        ];
        let outcome = persist_files(Arc::clone(&b.store), Arc::clone(&b.blobs), &s, &files).await;
        land(&*b.store, &s, &outcome, SessionStatus::Completed).await;
        landed.push(s.id);
    }
    done.store(true, Ordering::Release);
    assert!(sweeper.await.unwrap() > 0);
    for id in landed {
        let keys = referenced(&*b.store, id).await;
        assert_eq!(keys.len(), 4);
        for key in keys {
            let key = BlobKey::new(key).unwrap();
            assert!(b.blobs.head(&key).await.is_ok(), "{key} was swept");
        }
    }
    b.teardown().await;
}
