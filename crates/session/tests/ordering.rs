//! The order in which a run becomes visible: files, then the report row,
//! then the terminal status, so whoever sees the terminal row sees the rest.

use korvus_store::StoreExt as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use korvus_blob::{Blob, BlobKey, BlobMeta, BlobStore, PutOptions};
use korvus_testkit::faults::{FaultBlobStore, FaultStore};

use korvus_runner::{exit, RunOutcome};
use korvus_session::ContextRequest;
use korvus_store::{Counters, SessionStatus};
use korvus_testkit::faults::{StoreFault, StoreOp};

use crate::support::{log_turn, settled, writing, Env, ScriptRunner};

/// Records, for every put, how many store calls had been made before it:
/// one order across the blob store and the store.
#[derive(Debug)]
struct PutRecorder {
    inner: Arc<FaultBlobStore>,
    store: Arc<FaultStore>,
    puts: Mutex<Vec<(String, usize)>>,
}

#[async_trait]
impl BlobStore for PutRecorder {
    async fn put(
        &self,
        key: &BlobKey,
        bytes: Bytes,
        options: PutOptions,
    ) -> korvus_blob::Result<()> {
        self.inner.put(key, bytes, options).await?;
        let before = self.store.calls().len();
        self.puts.lock().unwrap().push((key.to_string(), before));
        Ok(())
    }
    async fn put_stream(
        &self,
        key: &BlobKey,
        body: korvus_blob::BlobBody,
        options: PutOptions,
    ) -> korvus_blob::Result<()> {
        self.inner.put_stream(key, body, options).await?;
        let before = self.store.calls().len();
        self.puts.lock().unwrap().push((key.to_string(), before));
        Ok(())
    }
    async fn barrier(&self) -> korvus_blob::Result<()> {
        self.inner.barrier().await
    }
    async fn get(&self, key: &BlobKey) -> korvus_blob::Result<Blob> {
        self.inner.get(key).await
    }
    async fn head(&self, key: &BlobKey) -> korvus_blob::Result<BlobMeta> {
        self.inner.head(key).await
    }
    async fn delete(&self, key: &BlobKey) -> korvus_blob::Result<()> {
        self.inner.delete(key).await
    }
    async fn list<'a>(&self, prefix: Option<&'a BlobKey>) -> korvus_blob::Result<Vec<BlobMeta>> {
        self.inner.list(prefix).await
    }
}

#[tokio::test]
async fn persist_then_report_row_then_terminal_status() {
    let env = Env::new().await;
    let recorder = Arc::new(PutRecorder {
        inner: env.blobs.clone(),
        store: env.store.clone(),
        puts: Mutex::default(),
    });
    let manager = env
        .builder(writing(&[("report.md", "# R\n"), ("x.txt", "x")]))
        .blob_store(recorder.clone())
        .build();
    let s = manager.create(env.request("go")).await.unwrap();
    settled(&manager, &s).await;
    let calls = env.store.calls();
    let pos = |op| calls.iter().position(|c| *c == op).unwrap();
    assert!(pos(StoreOp::CreateSession) < pos(StoreOp::CreateArtifacts));
    assert!(
        pos(StoreOp::CreateArtifacts) < pos(StoreOp::CreateReport),
        "persist before report row: {calls:?}"
    );
    assert!(
        pos(StoreOp::CreateReport) < pos(StoreOp::SettleSession),
        "report row before terminal status: {calls:?}"
    );
    let writes: Vec<&StoreOp> = calls
        .iter()
        .filter(|c| {
            matches!(
                c,
                StoreOp::CreateSession
                    | StoreOp::InsertContextRefs
                    | StoreOp::CreateArtifacts
                    | StoreOp::CreateReport
                    | StoreOp::SettleSession
                    | StoreOp::ContinueSession
            )
        })
        .collect();
    assert_eq!(
        writes.last(),
        Some(&&StoreOp::SettleSession),
        "settle is the last write"
    );
    assert_eq!(
        env.store.count(StoreOp::SettleSession),
        1,
        "exactly one settle"
    );
    // Bytes before rows: one recorder saw every put and every store call.
    // The harvest manifest describes the row batch, so it goes up after
    // the artifact rows, and before the report row that references it.
    let puts = recorder.puts.lock().unwrap().clone();
    assert_eq!(puts.len(), 3, "{puts:?}");
    let (rows, report) = (pos(StoreOp::CreateArtifacts), pos(StoreOp::CreateReport));
    for (key, store_calls_before) in &puts {
        let before = if key.contains("/manifests/") {
            *store_calls_before > rows && *store_calls_before <= report
        } else {
            *store_calls_before <= rows
        };
        assert!(before, "{key} put out of order: {puts:?} / {calls:?}");
    }
    let report_row = env.store.all_reports(s.id).await.unwrap();
    let manifest = &puts
        .iter()
        .find(|(k, _)| k.contains("/manifests/"))
        .unwrap()
        .0;
    assert_eq!(report_row[0].manifest_key.as_ref(), Some(manifest));
    env.assert_safe().await;
    manager.stop().await;
}

#[tokio::test]
async fn a_watcher_released_by_the_settle_signal_reads_the_terminal_row() {
    let env = Env::new().await;
    // A slow settle widens the window between runner return and the
    // terminal write: a watcher must not be released inside it.
    let runner = ScriptRunner::new(|ctx, _| async move {
        log_turn(&ctx, 1).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        Ok(RunOutcome::completed(Counters::default()))
    });
    let manager = env.builder(runner).build();
    for _ in 0..20 {
        let s = manager.create(env.request("go")).await.unwrap();
        let row = manager
            .await_settled(s.id, Duration::from_secs(30))
            .await
            .unwrap();
        assert!(
            row.status.is_terminal(),
            "released before the terminal write: {row:?}"
        );
        assert!(
            !manager.live_runs().contains(s.id),
            "deregistered before the signal"
        );
    }
    manager.wait().await;
    for s in env.store.all_sessions(env.incident.id).await.unwrap() {
        assert!(s.status.is_terminal(), "wait returned mid-write");
    }
    manager.stop().await;
}

#[tokio::test]
async fn ref_insert_failure_settles_failed_never_running() {
    let env = Env::new().await;
    let manager = env.builder(writing(&[("report.md", "# R\n")])).build();
    let s = manager.create(env.request("first")).await.unwrap();
    settled(&manager, &s).await;
    let art = env.store.all_session_artifacts(s.id).await.unwrap()[0].id;
    env.store
        .fault(StoreOp::InsertContextRefs, StoreFault::Fail);
    let mut req = env.request("refs fail");
    req.context = vec![ContextRequest::new(art).with_role("input")];
    assert!(manager.create(req).await.is_err());
    let rows = env.store.all_sessions(env.incident.id).await.unwrap();
    let failed = rows.iter().find(|r| r.prompt == "refs fail").unwrap();
    assert_eq!(failed.status, SessionStatus::Failed);
    assert_eq!(
        failed.exit_reason.as_deref(),
        Some(exit::CONTEXT_REFS_FAILED)
    );
    env.assert_safe().await;
    manager.stop().await;
}
