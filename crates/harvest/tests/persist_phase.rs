//! The persist phase: bytes first, rows second, with derived keys; one row
//! round trip; its fault matrix (failing and hanging stores and blob
//! stores, a cancelled caller); restored files; the filesystem backend.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use korvus_blob::{BlobKey, BlobStore, FsBlobStore, MemoryBlobStore, Sha256Digest};
use korvus_harvest::{
    persist, PersistConfig, PersistOutcome, PersistRequest, ReportFile, MANIFEST_PATH,
};
use korvus_store::{ArtifactKind, StoreExt};
use korvus_testkit::faults::{BlobFault, FaultBlobStore, FaultStore, StoreFault, StoreOp};
use korvus_workspace::{RestoredFile, WorkspacePath};

use crate::support::{env, paths, request, write, Env};

async fn run(env: &Env, blobs: Arc<dyn BlobStore>, req: PersistRequest) -> PersistOutcome {
    persist(
        Arc::clone(&env.store),
        Some(blobs),
        &PersistConfig::default(),
        req,
    )
    .await
}

#[tokio::test]
async fn skipped_not_failed_without_blob_store_or_scratch() {
    let env = env().await;
    let outcome = persist(
        Arc::clone(&env.store),
        None,
        &PersistConfig::default(),
        request(&env, 1),
    )
    .await;
    assert!(!outcome.attempted);
    assert!(outcome.reason.unwrap().contains("blob store"));
    let mut req = request(&env, 1);
    req.scratch = None;
    let outcome = run(&env, Arc::new(MemoryBlobStore::new()), req).await;
    assert!(!outcome.attempted);
    assert!(outcome.reason.unwrap().contains("scratch"));
}

#[tokio::test]
async fn files_land_bytes_first_rows_second_with_derived_keys() {
    let env = env().await;
    write(env.scratch.path(), "report.md", b"# R\n");
    write(env.scratch.path(), "out/data.csv", b"a,b\n1,2\n");
    let blobs = Arc::new(MemoryBlobStore::new());
    let outcome = run(&env, blobs.clone(), request(&env, 1)).await;
    assert_eq!(paths(&outcome), ["out/data.csv", "report.md"]);
    let rows = env
        .store
        .all_session_artifacts(env.session.id)
        .await
        .unwrap();
    assert_eq!(rows.len(), 2, "two files; the manifest is not an artifact");
    for row in &rows {
        let blob = blobs
            .get(&BlobKey::new(row.blob_key.clone()).unwrap())
            .await
            .unwrap();
        assert_eq!(Sha256Digest::of(&blob.bytes).to_hex(), row.sha256);
        assert_eq!(blob.bytes.len() as u64, row.size_bytes);
    }
    let report = rows.iter().find(|a| a.path == "report.md").unwrap();
    assert_eq!(report.kind, ArtifactKind::Report);
    assert_eq!(report.content_type, "text/markdown");
    let expected_key = korvus_blob::report_key(
        env.session.incident_id.as_uuid(),
        env.session.id.as_uuid(),
        1,
        env.session.fence,
    );
    assert_eq!(report.blob_key, expected_key.as_str());
    assert_eq!(
        outcome.report,
        ReportFile::Stored {
            key: expected_key.to_string(),
            bytes: 4
        }
    );
    let csv = rows.iter().find(|a| a.path == "out/data.csv").unwrap();
    assert_eq!(csv.kind, ArtifactKind::AgentOutput);
    assert_eq!(csv.content_type, "text/csv");
    assert!(csv.blob_key.ends_with(&format!("{}/data.csv", csv.id)));
    // The manifest says what happened, for an operator, after the rows:
    // at the revision's manifest key, which the report row will carry.
    let key = korvus_blob::manifest_key(
        env.session.incident_id.as_uuid(),
        env.session.id.as_uuid(),
        1,
        env.session.fence,
    );
    assert_eq!(outcome.manifest_key.as_deref(), Some(key.as_str()));
    let bytes = blobs.get(&key).await.unwrap().bytes;
    let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(json["stored"].as_array().unwrap().len(), 2);
    assert_eq!(json["rows_written"], true);
    assert_eq!(json["manifest_key"], key.as_str());
}

#[tokio::test]
async fn sixty_four_files_take_one_row_round_trip() {
    let inner = env().await;
    let faults = Arc::new(FaultStore::new(Arc::clone(&inner.store)));
    let env = Env {
        store: faults.clone(),
        ..inner
    };
    for i in 0..63 {
        write(env.scratch.path(), &format!("f{i:02}.txt"), b"data");
    }
    write(env.scratch.path(), "report.md", b"# R\n");
    let outcome = run(&env, Arc::new(MemoryBlobStore::new()), request(&env, 1)).await;
    assert_eq!(outcome.stored.len(), 64);
    assert_eq!(faults.calls(), vec![StoreOp::CreateArtifacts]);
}

#[tokio::test]
async fn failed_upload_gets_no_row_and_the_rest_land() {
    let env = env().await;
    write(env.scratch.path(), "good.txt", b"good");
    write(env.scratch.path(), "bad.txt", b"bad");
    write(env.scratch.path(), "report.md", b"# R\n");
    let blobs = Arc::new(FaultBlobStore::new(Arc::new(MemoryBlobStore::new())));
    blobs.fault_put("bad.txt", BlobFault::Fail);
    blobs.fault_put("/reports/", BlobFault::Fail);
    let outcome = run(&env, blobs.clone(), request(&env, 1)).await;
    assert_eq!(paths(&outcome), ["good.txt"]);
    let failed: Vec<&str> = outcome.failed.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(failed, ["bad.txt", "report.md"]);
    assert!(matches!(outcome.report, ReportFile::Failed { .. }));
    assert!(outcome.error_text().unwrap().contains("injected failure"));
    let rows = env
        .store
        .all_session_artifacts(env.session.id)
        .await
        .unwrap();
    let row_paths: Vec<&str> = rows.iter().map(|a| a.path.as_str()).collect();
    assert!(row_paths.contains(&"good.txt"));
    assert!(!row_paths.contains(&"bad.txt") && !row_paths.contains(&"report.md"));
}

#[tokio::test]
async fn transient_row_failures_are_retried_until_the_store_heals() {
    let inner = env().await;
    let faults = Arc::new(FaultStore::new(Arc::clone(&inner.store)));
    faults.fault_times(StoreOp::CreateArtifacts, StoreFault::Fail, 3);
    let env = Env {
        store: faults.clone(),
        ..inner
    };
    write(env.scratch.path(), "a.txt", b"a");
    write(env.scratch.path(), "report.md", b"# R\n");
    let outcome = run(&env, Arc::new(MemoryBlobStore::new()), request(&env, 1)).await;
    assert!(outcome.rows_written, "{outcome}");
    assert_eq!(outcome.stored.len(), 2);
    assert_eq!(
        faults.count(StoreOp::CreateArtifacts),
        4,
        "three failures, one success"
    );
    let rows = env
        .store
        .all_session_artifacts(env.session.id)
        .await
        .unwrap();
    assert_eq!(rows.len(), 2);
}

#[tokio::test]
async fn failed_row_batch_is_reported_and_bytes_remain() {
    let inner = env().await;
    let faults = Arc::new(FaultStore::new(Arc::clone(&inner.store)));
    faults.fault(StoreOp::CreateArtifacts, StoreFault::FailPermanent);
    let env = Env {
        store: faults.clone(),
        ..inner
    };
    write(env.scratch.path(), "a.txt", b"a");
    write(env.scratch.path(), "report.md", b"# R\n");
    let blobs = Arc::new(MemoryBlobStore::new());
    let outcome = run(&env, blobs.clone(), request(&env, 1)).await;
    assert!(!outcome.rows_written);
    assert!(outcome.stored.is_empty());
    assert_eq!(outcome.failed.len(), 2);
    assert!(outcome
        .error_text()
        .unwrap()
        .contains("artifact rows not written"));
    // The report's bytes are up but its artifact row is not: no report row
    // may point at them.
    assert!(matches!(outcome.report, ReportFile::Failed { .. }));
    assert_eq!(
        blobs.list(None).await.unwrap().len(),
        3,
        "bytes remain, harmless"
    );
}

#[tokio::test]
async fn hanging_blob_store_is_bounded_by_the_timeout() {
    let env = env().await;
    write(env.scratch.path(), "report.md", b"# R\n");
    write(env.scratch.path(), "x.txt", b"x");
    let blobs = Arc::new(FaultBlobStore::new(Arc::new(MemoryBlobStore::new())));
    blobs.fault_put("", BlobFault::Hang);
    let mut config = PersistConfig::default();
    config.timeout = Duration::from_millis(300);
    let outcome = tokio::time::timeout(
        Duration::from_secs(30),
        persist(
            Arc::clone(&env.store),
            Some(blobs),
            &config,
            request(&env, 1),
        ),
    )
    .await
    .expect("the phase returns by itself");
    assert!(outcome.reason.as_deref().unwrap().contains("timed out"));
    assert!(matches!(outcome.report, ReportFile::Failed { .. }));
    assert!(env
        .store
        .all_session_artifacts(env.session.id)
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn files_are_stored_even_when_the_caller_is_cancelled() {
    let env = env().await;
    write(env.scratch.path(), "report.md", b"# R\n");
    let blobs = Arc::new(MemoryBlobStore::new());
    let config = PersistConfig::default();
    let fut = persist(
        Arc::clone(&env.store),
        Some(blobs.clone() as Arc<dyn BlobStore>),
        &config,
        request(&env, 1),
    );
    // Poll once, then drop: the caller (a cancelled run) goes away.
    let _ = tokio::time::timeout(Duration::from_micros(1), fut).await;
    for _ in 0..200 {
        if !env
            .store
            .all_session_artifacts(env.session.id)
            .await
            .unwrap()
            .is_empty()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let rows = env
        .store
        .all_session_artifacts(env.session.id)
        .await
        .unwrap();
    assert!(rows.iter().any(|a| a.path == "report.md"), "{rows:?}");
}

#[tokio::test]
async fn unchanged_restored_file_is_not_uploaded_again() {
    let env = env().await;
    write(env.scratch.path(), "report.md", b"# R1\n");
    write(env.scratch.path(), "same.txt", b"same");
    write(env.scratch.path(), "changed.txt", b"v1");
    let blobs = Arc::new(FaultBlobStore::new(Arc::new(MemoryBlobStore::new())));
    let first = run(&env, blobs.clone(), request(&env, 1)).await;
    assert_eq!(first.stored.len(), 3);
    let rows = env
        .store
        .all_session_artifacts(env.session.id)
        .await
        .unwrap();
    let restored: BTreeMap<WorkspacePath, RestoredFile> = rows
        .iter()
        .filter(|a| a.path != MANIFEST_PATH)
        .map(|a| {
            (
                WorkspacePath::new(a.path.clone()).unwrap(),
                RestoredFile {
                    artifact: a.clone(),
                    sha256: a.sha256.parse().unwrap(),
                },
            )
        })
        .collect();
    write(env.scratch.path(), "changed.txt", b"v2");
    let mut req = request(&env, 2);
    req.restored = restored;
    let puts_before = blobs.total_puts();
    let second = run(&env, blobs.clone(), req).await;
    assert_eq!(paths(&second), ["changed.txt"]);
    let unchanged: Vec<&str> = second.unchanged.iter().map(|u| u.path.as_str()).collect();
    assert_eq!(unchanged, ["report.md", "same.txt"]);
    // changed.txt + the manifest; nothing for the unchanged files.
    assert_eq!(blobs.total_puts() - puts_before, 2);
    let same_key = rows
        .iter()
        .find(|a| a.path == "same.txt")
        .unwrap()
        .blob_key
        .clone();
    assert_eq!(blobs.puts_of(&BlobKey::new(same_key).unwrap()), 1);
    // The report keeps pointing at revision 1's key.
    let r1_key = rows
        .iter()
        .find(|a| a.path == "report.md")
        .unwrap()
        .blob_key
        .clone();
    assert_eq!(
        second.report,
        ReportFile::Unchanged {
            key: r1_key,
            bytes: 5
        }
    );
    let changed = env
        .store
        .all_session_artifacts(env.session.id)
        .await
        .unwrap()
        .into_iter()
        .filter(|a| a.path == "changed.txt")
        .map(|a| a.revision)
        .collect::<Vec<_>>();
    assert_eq!(
        changed,
        [1, 2],
        "the changed file lands as a new artifact of revision 2"
    );
}

#[tokio::test]
async fn persists_to_the_filesystem_backend() {
    let env = env().await;
    write(env.scratch.path(), "report.md", b"# R\n");
    write(
        env.scratch.path(),
        "img/chart.png",
        &[0x89, b'P', b'N', b'G'],
    );
    let root = tempfile::tempdir().unwrap();
    let blobs: Arc<dyn BlobStore> = Arc::new(FsBlobStore::open(root.path()).unwrap());
    let outcome = run(&env, Arc::clone(&blobs), request(&env, 1)).await;
    assert_eq!(outcome.stored.len(), 2);
    let png = outcome
        .stored
        .iter()
        .find(|s| s.path == "img/chart.png")
        .unwrap();
    let blob = blobs
        .get(&BlobKey::new(png.blob_key.clone()).unwrap())
        .await
        .unwrap();
    assert_eq!(blob.meta.content_type.as_deref(), Some("image/png"));
    let got = env.store.get_artifact(png.artifact_id).await.unwrap();
    assert_eq!(got.sha256, png.sha256);
}
