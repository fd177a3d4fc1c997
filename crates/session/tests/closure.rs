//! Closure: every path ends in exactly one terminal status and one report
//! row for the revision, within the documented bounds — whatever the runner,
//! the backends or the operator do.

use korvus_store::StoreExt as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use korvus_harvest::PersistConfig;
use korvus_runner::{exit, DocsLease, ExitReason, MockDocsSearch, RunError, RunOutcome};
use korvus_store::{Counters, NewIncident, Session, SessionStatus, Store, WorkspaceRef};
use korvus_testkit::faults::{BlobFault, StoreFault, StoreOp};
use korvus_workspace::ScratchRoot;

use crate::support::{settled, write_files, writing, Env, ScriptRunner};

/// The row is terminal and its revision has exactly one report row.
async fn assert_closed(env: &Env, row: &Session) {
    assert!(row.status.is_terminal(), "{row:?}");
    let reports = env.store.all_reports(row.id).await.unwrap();
    let of_revision = reports
        .iter()
        .filter(|r| r.revision == row.revision)
        .count();
    assert_eq!(
        of_revision, 1,
        "one report row for revision {}",
        row.revision
    );
    assert_eq!(
        reports.last().unwrap().exit_reason.as_str(),
        row.exit_reason.as_deref().unwrap(),
        "the report carries the row's exit reason"
    );
    env.assert_safe().await;
}

fn quick(env: &Env, runner: ScriptRunner) -> korvus_session::ManagerBuilder {
    env.builder(runner)
        .report_timeout(Duration::from_millis(300))
        .cleanup_timeout(Duration::from_millis(300))
}

#[tokio::test]
async fn counters_beyond_the_columns_saturate_and_the_row_ends() {
    let env = Env::new().await;
    let manager = quick(
        &env,
        ScriptRunner::new(|ctx, _| async move {
            write_files(&ctx, &[("report.md", "# big\n")]);
            Ok(RunOutcome::new(
                ExitReason::COMPLETED,
                Counters {
                    turns: u64::MAX,
                    tool_calls: u64::MAX,
                    input_tokens: u64::MAX,
                    output_tokens: 7,
                },
            ))
        }),
    )
    .build();
    let s = manager.create(env.request("huge usage")).await.unwrap();
    let row = settled(&manager, &s).await;
    assert_eq!(row.status, SessionStatus::Completed);
    assert_eq!(row.counters.turns, i64::MAX as u64);
    assert_eq!(row.counters.output_tokens, 7);
    assert_closed(&env, &row).await;
    manager.stop().await;
}

#[tokio::test]
async fn a_scratch_dir_that_cannot_be_made_still_lands_a_report_row() {
    let env = Env::new().await;
    // The scratch root is a file: no directory can be made under it.
    let file = env.root.path().join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    let manager = quick(&env, writing(&[("report.md", "# R\n")]))
        .scratch_root(ScratchRoot::supplied(&file))
        .build();
    let s = manager.create(env.request("no workspace")).await.unwrap();
    let row = settled(&manager, &s).await;
    assert_eq!(row.exit_reason.as_deref(), Some(exit::WORKSPACE_FAILED));
    assert_closed(&env, &row).await;
    manager.stop().await;
}

#[tokio::test]
async fn context_refs_that_cannot_be_inserted_still_land_a_report_row() {
    let env = Env::new().await;
    let manager = quick(&env, writing(&[("report.md", "# R\n")])).build();
    let first = manager.create(env.request("first")).await.unwrap();
    settled(&manager, &first).await;
    let art = env.store.all_session_artifacts(first.id).await.unwrap()[0].id;
    env.store
        .fault(StoreOp::InsertContextRefs, StoreFault::Fail);
    let mut req = env.request("with a ref");
    req.context = vec![korvus_session::ContextRequest::new(art)];
    assert!(manager.create(req).await.is_err());
    let sessions = env.store.all_sessions(env.incident.id).await.unwrap();
    let row = sessions.iter().find(|s| s.id != first.id).unwrap();
    assert_eq!(row.exit_reason.as_deref(), Some(exit::CONTEXT_REFS_FAILED));
    assert_closed(&env, row).await;
    manager.stop().await;
}

#[tokio::test]
async fn a_panic_outside_the_runner_still_lands_a_report_row() {
    #[derive(Debug)]
    struct Panics;
    #[async_trait::async_trait]
    impl korvus_workspace::Seeder for Panics {
        async fn seed<'a>(
            &self,
            _: &korvus_workspace::ScratchDir,
            _: Option<&'a WorkspaceRef>,
        ) -> korvus_workspace::Result<korvus_workspace::SeedOutcome> {
            panic!("seeder bug")
        }
    }
    let env = Env::new().await;
    let manager = quick(&env, writing(&[("report.md", "# R\n")]))
        .seeder(Arc::new(Panics), korvus_workspace::default_trees())
        .build();
    let s = manager.create(env.request("seeder panics")).await.unwrap();
    let row = settled(&manager, &s).await;
    assert_eq!(row.exit_reason.as_deref(), Some(exit::PANICKED));
    assert_closed(&env, &row).await;
    manager.stop().await;
}

#[tokio::test]
async fn a_hanging_report_row_write_is_bounded() {
    let env = Env::new().await;
    env.store.fault(StoreOp::CreateReport, StoreFault::Hang);
    let manager = quick(&env, writing(&[("report.md", "# R\n")])).build();
    let s = manager.create(env.request("report hangs")).await.unwrap();
    let row = settled(&manager, &s).await;
    assert_eq!(row.status, SessionStatus::Failed);
    assert_eq!(
        row.exit_reason.as_deref(),
        Some(exit::REPORT_PERSIST_FAILED)
    );
    tokio::time::timeout(Duration::from_secs(10), manager.stop())
        .await
        .expect("stop returns");
}

#[tokio::test]
async fn stop_returns_within_its_bound_with_a_hanging_archive_and_docs_release() {
    let env = Env::new().await;
    env.blobs.fault_put("workspace.tar.gz", BlobFault::Hang);
    let released = Arc::new(AtomicUsize::new(0));
    let mut docs = MockDocsSearch::new();
    let started = Arc::clone(&released);
    docs.expect_pin().returning(move |_| {
        let started = Arc::clone(&started);
        Ok(DocsLease {
            client: Arc::new(korvus_runner::MockDocsClient::new()),
            release: Box::pin(async move {
                started.fetch_add(1, Ordering::SeqCst);
                std::future::pending::<()>().await
            }),
        })
    });
    let incident = env
        .store
        .create_incident(NewIncident {
            title: "pinned".into(),
            workspace: Some(WorkspaceRef {
                repo: "r.git".into(),
                commit: "c".into(),
            }),
        })
        .await
        .unwrap();
    let runner = ScriptRunner::new(|ctx, _| async move {
        write_files(&ctx, &[("report.md", "# R\n")]);
        ctx.cancel.cancelled().await;
        Ok(RunOutcome::completed(Counters::default()))
    });
    let manager = quick(&env, runner.clone())
        .docs_search(Arc::new(docs))
        .archive_on_release(true)
        .persist_config({
            let mut v = PersistConfig::default();
            v.timeout = Duration::from_millis(300);
            v
        })
        .cancel_grace(Duration::from_millis(100))
        .settle_timeout(Duration::from_millis(300))
        .build();
    let mut req = env.request("everything hangs");
    req.incident_id = incident.id;
    let s = manager.create(req).await.unwrap();
    while runner.seen.lock().unwrap().is_empty() {
        tokio::task::yield_now().await;
    }
    // grace + persist + archive + report + settle + clean-up bounds, plus
    // the log close: about 2 s here; 10 s leaves room for a slow machine.
    tokio::time::timeout(Duration::from_secs(10), manager.stop())
        .await
        .expect("stop returns within its bound");
    let row = env.store.get_session(s.id).await.unwrap();
    assert_eq!(row.status, SessionStatus::Cancelled);
    assert_eq!(
        released.load(Ordering::SeqCst),
        1,
        "the release was started"
    );
    let report = env.store.get_report(s.id, 1).await.unwrap();
    assert!(report.markdown_key.is_some(), "the report landed");
    env.assert_safe().await;
}

#[tokio::test]
async fn a_run_the_manager_cancelled_settles_cancelled_every_time() {
    let env = Env::new().await;
    let runner = ScriptRunner::new(|ctx, _| async move {
        ctx.cancel.cancelled().await;
        Err::<RunOutcome, _>(RunError::msg("interrupted").with_exit_reason("exit_code_143"))
    });
    let manager = quick(&env, runner.clone()).build();
    for round in 0..200 {
        let s = manager.create(env.request("cancel me")).await.unwrap();
        while runner.seen.lock().unwrap().len() <= round {
            tokio::task::yield_now().await;
        }
        manager.cancel(s.id).await.unwrap();
        let row = settled(&manager, &s).await;
        assert_eq!(row.status, SessionStatus::Cancelled, "round {round}");
        assert_eq!(row.exit_reason.as_deref(), Some(exit::CANCELLED));
    }
    manager.stop().await;
}

#[tokio::test]
async fn an_oversized_report_is_an_upload_failure_and_an_empty_one_was_never_authored() {
    let env = Env::new().await;
    for (body, reason) in [
        (vec![b'#'; 2048], exit::REPORT_UPLOAD_FAILED),
        (Vec::new(), exit::REPORT_AUTHOR_FAILED),
    ] {
        let manager = quick(
            &env,
            ScriptRunner::new(move |ctx, _| {
                let body = body.clone();
                async move {
                    std::fs::write(ctx.scratch.as_ref().unwrap().join("report.md"), body).unwrap();
                    Ok(RunOutcome::completed(Counters::default()))
                }
            }),
        )
        .persist_config({
            let mut v = PersistConfig::default();
            v.report_max_bytes = 1024;
            v
        })
        .build();
        let s = manager.create(env.request("report")).await.unwrap();
        let row = settled(&manager, &s).await;
        assert_eq!(row.status, SessionStatus::Failed);
        assert_eq!(row.exit_reason.as_deref(), Some(reason));
        let report = env.store.get_report(row.id, 1).await.unwrap();
        assert_eq!(report.markdown_key, None);
        assert_closed(&env, &row).await;
        manager.stop().await;
    }
}

/// A turn log that cannot create logs, or whose write handles refuse
/// appends once opened again (a reopen's repair).
#[derive(Debug)]
struct BrokenLog {
    inner: korvus_log::MemoryLog,
    writers: korvus_log::Writers,
    fail_create: bool,
}

#[derive(Debug)]
struct RefusesAppends(korvus_log::LogHandle);

#[async_trait::async_trait]
impl korvus_log::LogIo for RefusesAppends {
    async fn read(
        &self,
        offset: u64,
        len: Option<u64>,
    ) -> korvus_log::Result<Vec<korvus_log::Event>> {
        self.0.read(offset, len).await
    }
    async fn event_count(&self) -> korvus_log::Result<u64> {
        self.0.len().await
    }
    async fn claim(&self, epoch: u64) -> korvus_log::Result<()> {
        self.0.claim_epoch(epoch).await
    }
    async fn append(&self, _: u64, _: &[korvus_log::Event]) -> korvus_log::Result<()> {
        Err(korvus_log::LogError::permanent("broken", "appends refused"))
    }
    async fn flush(&self) -> korvus_log::Result<()> {
        self.0.flush().await
    }
    async fn close(&self) -> korvus_log::Result<()> {
        self.0.close().await
    }
}

#[async_trait::async_trait]
impl korvus_log::TurnLog for BrokenLog {
    async fn create(
        &self,
        header: korvus_log::LogHeader,
    ) -> korvus_log::Result<korvus_log::LogHandle> {
        if self.fail_create {
            return Err(korvus_log::LogError::permanent("broken", "cannot create"));
        }
        self.inner.create(header).await
    }
    async fn open(
        &self,
        id: korvus_log::LogId,
        access: korvus_log::Access,
    ) -> korvus_log::Result<korvus_log::LogHandle> {
        let handle = self.inner.open(id, access).await?;
        if access != korvus_log::Access::Write {
            return Ok(handle);
        }
        let header = handle.header().clone();
        let claim = self.writers.claim(id)?;
        Ok(korvus_log::LogHandle::writer(
            header,
            Arc::new(RefusesAppends(handle)),
            claim,
        ))
    }
    async fn delete(&self, id: korvus_log::LogId) -> korvus_log::Result<()> {
        self.inner.delete(id).await
    }
    async fn fence(&self, id: korvus_log::LogId, epoch: u64) -> korvus_log::Result<()> {
        self.inner.fence(id, epoch).await
    }
    async fn stat(&self, id: korvus_log::LogId) -> korvus_log::Result<korvus_log::LogStat> {
        self.inner.stat(id).await
    }
    async fn list(&self) -> korvus_log::Result<Vec<korvus_log::LogId>> {
        self.inner.list().await
    }
    async fn flush(&self) -> Result<(), korvus_log::FlushError> {
        self.inner.flush().await
    }
}

#[tokio::test]
async fn a_turn_log_that_cannot_be_created_still_lands_a_report_row() {
    let logs: Arc<dyn korvus_log::TurnLog> = Arc::new(BrokenLog {
        inner: korvus_log::MemoryLog::new(),
        writers: korvus_log::Writers::new(),
        fail_create: true,
    });
    let env = Env::with(
        Arc::new(korvus_store::MemoryStore::new()),
        Arc::new(korvus_blob::MemoryBlobStore::new()),
        logs,
    )
    .await;
    let manager = quick(&env, writing(&[("report.md", "# R\n")])).build();
    assert!(manager.create(env.request("no log")).await.is_err());
    let row = env.store.all_sessions(env.incident.id).await.unwrap()[0].clone();
    assert_eq!(row.exit_reason.as_deref(), Some(exit::TURN_LOG_FAILED));
    assert_closed(&env, &row).await;
    manager.stop().await;
}

#[tokio::test]
async fn a_reopen_whose_log_cannot_be_repaired_still_lands_a_report_row() {
    let logs: Arc<dyn korvus_log::TurnLog> = Arc::new(BrokenLog {
        inner: korvus_log::MemoryLog::new(),
        writers: korvus_log::Writers::new(),
        fail_create: false,
    });
    let env = Env::with(
        Arc::new(korvus_store::MemoryStore::new()),
        Arc::new(korvus_blob::MemoryBlobStore::new()),
        logs,
    )
    .await;
    let manager = quick(&env, writing(&[("report.md", "# R\n")])).build();
    let s = manager.create(env.request("first")).await.unwrap();
    assert_eq!(settled(&manager, &s).await.status, SessionStatus::Completed);
    assert!(manager.reopen(s.id, "again").await.is_err());
    let row = env.store.get_session(s.id).await.unwrap();
    assert_eq!(row.revision, 2);
    assert_eq!(row.exit_reason.as_deref(), Some(exit::TURN_LOG_FAILED));
    assert_closed(&env, &row).await;
    manager.stop().await;
}
