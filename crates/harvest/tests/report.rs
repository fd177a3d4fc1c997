//! The root `report.md`'s own outcomes: its own size limit (over it is a
//! failure, exactly at it is stored, the artifact limit does not apply), an
//! empty report, a report whose artifact row was not written, and the
//! bounded detail text of a degraded phase.

use korvus_store::StoreExt as _;
use std::sync::Arc;
use std::time::Duration;

use korvus_blob::{BlobStore, MemoryBlobStore};
use korvus_harvest::{
    persist, FailStage, PersistConfig, PersistOutcome, ReportFile, SkipReason,
    DEFAULT_REPORT_MAX_BYTES, DETAIL_MAX_BYTES, REPORT_FILE,
};
use korvus_testkit::faults::{BlobFault, FaultBlobStore, FaultStore, StoreFault, StoreOp};

use crate::support::{env, paths, request, write, Env};

async fn run_with(env: &Env, blobs: Arc<dyn BlobStore>, config: &PersistConfig) -> PersistOutcome {
    persist(Arc::clone(&env.store), Some(blobs), config, request(env, 1)).await
}

fn limits(report: u64, file: u64) -> PersistConfig {
    let mut config = PersistConfig::default();
    config.report_max_bytes = report;
    config.max_file_bytes = file;
    config
}

/// The stored harvest manifest of revision 1, parsed.
async fn manifest(env: &Env, blobs: &dyn BlobStore) -> serde_json::Value {
    let key = korvus_blob::manifest_key(
        env.session.incident_id.as_uuid(),
        env.session.id.as_uuid(),
        1,
        env.session.fence,
    );
    let bytes = blobs.get(&key).await.unwrap().bytes;
    serde_json::from_slice(&bytes).unwrap()
}

async fn row_paths(env: &Env) -> Vec<String> {
    env.store
        .all_session_artifacts(env.session.id)
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.path)
        .collect()
}

#[test]
fn the_default_report_limit_is_eight_mib() {
    assert_eq!(DEFAULT_REPORT_MAX_BYTES, 8 * 1024 * 1024);
    assert_eq!(
        PersistConfig::default().report_max_bytes,
        DEFAULT_REPORT_MAX_BYTES
    );
}

#[tokio::test]
async fn a_report_over_its_limit_is_failed_not_stored_and_the_manifest_says_why() {
    let env = env().await;
    write(env.scratch.path(), REPORT_FILE, &[b'r'; 101]);
    write(env.scratch.path(), "out.txt", b"kept");
    let blobs = Arc::new(MemoryBlobStore::new());
    let outcome = run_with(&env, blobs.clone(), &limits(100, 1024)).await;
    let ReportFile::Failed { cause } = &outcome.report else {
        panic!("{:?}", outcome.report);
    };
    assert!(cause.contains("report limit"), "{cause}");
    assert!(cause.contains("101") && cause.contains("100"), "{cause}");
    assert_eq!(outcome.report.markdown(), None);
    assert_eq!(paths(&outcome), ["out.txt"]);
    assert_eq!(outcome.failed.len(), 1);
    assert_eq!(outcome.failed[0].path, REPORT_FILE);
    assert_eq!(outcome.failed[0].stage, FailStage::Limit);
    assert!(outcome.detail().unwrap().contains("report limit"));
    // Nothing of it was uploaded, and no row names it.
    let report_key = korvus_blob::report_key(
        env.session.incident_id.as_uuid(),
        env.session.id.as_uuid(),
        1,
        env.session.fence,
    );
    assert!(blobs.head(&report_key).await.is_err());
    assert!(!row_paths(&env).await.contains(&REPORT_FILE.to_owned()));
    let json = manifest(&env, &*blobs).await;
    assert_eq!(json["report"]["state"], "failed");
    assert!(json["report"]["cause"]
        .as_str()
        .unwrap()
        .contains("report limit"));
}

#[tokio::test]
async fn a_report_exactly_at_its_limit_is_stored() {
    let env = env().await;
    write(env.scratch.path(), REPORT_FILE, &[b'r'; 100]);
    let blobs = Arc::new(MemoryBlobStore::new());
    let outcome = run_with(&env, blobs.clone(), &limits(100, 1024)).await;
    assert!(
        matches!(outcome.report, ReportFile::Stored { bytes: 100, .. }),
        "{:?}",
        outcome.report
    );
    assert!(outcome.failed.is_empty(), "{:?}", outcome.failed);
    assert!(outcome.detail().is_none());
    assert!(row_paths(&env).await.contains(&REPORT_FILE.to_owned()));
}

#[tokio::test]
async fn the_artifact_limit_does_not_apply_to_the_report() {
    let env = env().await;
    write(env.scratch.path(), REPORT_FILE, &[b'r'; 500]);
    write(env.scratch.path(), "big.txt", &[b'b'; 500]);
    let blobs = Arc::new(MemoryBlobStore::new());
    // Artifacts up to 100 bytes, reports up to 1000.
    let outcome = run_with(&env, blobs.clone(), &limits(1000, 100)).await;
    assert!(
        matches!(outcome.report, ReportFile::Stored { bytes: 500, .. }),
        "{:?}",
        outcome.report
    );
    assert_eq!(paths(&outcome), [REPORT_FILE]);
    let big = outcome
        .skipped
        .iter()
        .find(|s| s.path == "big.txt")
        .unwrap();
    assert_eq!(
        big.reason,
        SkipReason::TooLarge {
            size: 500,
            limit: 100
        }
    );
    // And the other way round: a report over its own limit fails even when
    // the artifact limit would allow it.
    let env = crate::support::env().await;
    write(env.scratch.path(), REPORT_FILE, &[b'r'; 500]);
    let outcome = run_with(&env, blobs, &limits(100, 1000)).await;
    assert!(matches!(outcome.report, ReportFile::Failed { .. }));
}

#[tokio::test]
async fn an_empty_report_is_its_own_outcome_and_the_manifest_says_so() {
    let env = env().await;
    write(env.scratch.path(), REPORT_FILE, b"");
    write(env.scratch.path(), "out.txt", b"kept");
    let blobs = Arc::new(MemoryBlobStore::new());
    let outcome = run_with(&env, blobs.clone(), &PersistConfig::default()).await;
    assert_eq!(outcome.report, ReportFile::Empty);
    assert_eq!(outcome.report.markdown(), None);
    assert!(outcome.failed.is_empty(), "{:?}", outcome.failed);
    let skipped = outcome
        .skipped
        .iter()
        .find(|s| s.path == REPORT_FILE)
        .unwrap();
    assert_eq!(skipped.reason, SkipReason::Empty);
    assert_eq!(paths(&outcome), ["out.txt"]);
    assert!(!row_paths(&env).await.contains(&REPORT_FILE.to_owned()));
    let json = manifest(&env, &*blobs).await;
    assert_eq!(json["report"]["state"], "empty");
    assert!(json["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["path"] == REPORT_FILE && s["reason"] == "empty"));
}

#[tokio::test]
async fn a_report_whose_row_was_not_written_has_no_markdown_and_says_why() {
    let inner = env().await;
    let faults = Arc::new(FaultStore::new(Arc::clone(&inner.store)));
    faults.fault(StoreOp::CreateArtifacts, StoreFault::FailPermanent);
    let env = Env {
        store: faults.clone(),
        ..inner
    };
    write(env.scratch.path(), REPORT_FILE, b"# R\n");
    let outcome = run_with(
        &env,
        Arc::new(MemoryBlobStore::new()),
        &PersistConfig::default(),
    )
    .await;
    assert!(!outcome.rows_written);
    let ReportFile::Failed { cause } = &outcome.report else {
        panic!("{:?}", outcome.report);
    };
    assert!(cause.starts_with("artifact rows not written"), "{cause}");
    assert_eq!(outcome.report.markdown(), None);
    let detail = outcome.detail().unwrap();
    assert!(
        detail.starts_with("artifact rows not written"),
        "cause first: {detail}"
    );
    assert!(detail.contains(REPORT_FILE), "{detail}");
}

#[tokio::test]
async fn a_report_stored_before_a_hanging_row_write_has_no_markdown() {
    let inner = env().await;
    let faults = Arc::new(FaultStore::new(Arc::clone(&inner.store)));
    faults.fault(StoreOp::CreateArtifacts, StoreFault::Hang);
    let env = Env {
        store: faults.clone(),
        ..inner
    };
    write(env.scratch.path(), REPORT_FILE, b"# R\n");
    let mut config = PersistConfig::default();
    config.timeout = Duration::from_millis(300);
    let blobs = Arc::new(MemoryBlobStore::new());
    let outcome = run_with(&env, blobs.clone(), &config).await;
    assert!(!outcome.rows_written);
    // The manifest is stored after the cut-short phase, and says so.
    assert!(outcome.manifest_key.is_some());
    let json = manifest(&env, &*blobs).await;
    assert_eq!(json["rows_written"], false);
    assert!(
        json["reason"].as_str().unwrap().contains("timed out"),
        "{json}"
    );
    let ReportFile::Failed { cause } = &outcome.report else {
        panic!("{:?}", outcome.report);
    };
    assert!(cause.contains("timed out"), "{cause}");
    assert!(outcome
        .detail()
        .unwrap()
        .starts_with("persist phase timed out"));
}

#[tokio::test]
async fn the_detail_of_a_degraded_phase_is_bounded() {
    let env = env().await;
    let long = "n".repeat(120);
    for i in 0..60 {
        write(env.scratch.path(), &format!("{long}{i:02}é.txt"), b"x");
    }
    let blobs = Arc::new(FaultBlobStore::new(Arc::new(MemoryBlobStore::new())));
    blobs.fault_put("", BlobFault::Fail);
    let outcome = run_with(&env, blobs, &PersistConfig::default()).await;
    assert_eq!(outcome.failed.len(), 60);
    let full = outcome.error_text().unwrap();
    assert!(full.len() > DETAIL_MAX_BYTES);
    let detail = outcome.detail().unwrap();
    assert!(detail.len() <= DETAIL_MAX_BYTES, "{}", detail.len());
    assert!(detail.ends_with('…'));
    assert!(full.starts_with(detail.trim_end_matches('…')));
    assert_eq!(DETAIL_MAX_BYTES, 4096);
}
