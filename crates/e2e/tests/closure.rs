//! Lifecycle closure on the embedded default, SQLite + files: the paths
//! that once left a row `running` or without a report row now end in one
//! terminal status with one report row per revision.

use korvus_store::StoreExt as _;
use std::sync::Arc;
use std::time::Duration;

use korvus_blob::{BlobStore, FsBlobStore};
use korvus_harvest::PersistConfig;
use korvus_log::{Access, EventKind, LogId};
use korvus_runner::{exit, ExitReason, RunError, RunOutcome};
use korvus_session::{ContextRequest, Manager, ManagerBuilder, SessionError};
use korvus_store::{CoordinatedStore, Counters, Session, SessionStatus, WorkspaceRef};
use korvus_store_sql::testing::SqliteDb;
use korvus_store_sql::{SqliteLog, SqliteStore};
use korvus_testkit::faults::{BlobFault, FaultBlobStore};
use korvus_workspace::ScratchRoot;

use crate::support::{settled, write, ScriptRunner};

/// SQLite for rows and logs, files for blobs, a scratch root: the
/// embedded default, all in temporary directories.
struct Embedded {
    db: SqliteDb,
    store: Arc<dyn CoordinatedStore>,
    blobs: Arc<FaultBlobStore>,
    logs: Arc<SqliteLog>,
    dir: tempfile::TempDir,
    incident: korvus_store::IncidentId,
}

impl Embedded {
    async fn new() -> Self {
        let db = SqliteDb::create().await;
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn CoordinatedStore> = Arc::new(SqliteStore::new(db.pool().clone()));
        let fs: Arc<dyn BlobStore> = Arc::new(FsBlobStore::open(dir.path().join("blobs")).unwrap());
        let incident = store
            .create_incident(korvus_store::NewIncident {
                title: "db-1 disk".into(),
                workspace: Some(WorkspaceRef {
                    repo: "repo.git".into(),
                    commit: "0123abcd".into(),
                }),
            })
            .await
            .unwrap()
            .id;
        std::fs::create_dir(dir.path().join("scratch")).unwrap();
        Self {
            logs: Arc::new(SqliteLog::new(db.pool().clone())),
            blobs: Arc::new(FaultBlobStore::new(fs)),
            db,
            store,
            dir,
            incident,
        }
    }

    fn builder(&self, runner: ScriptRunner) -> ManagerBuilder {
        Manager::builder(Arc::clone(&self.store), Arc::new(runner))
            .blob_store(self.blobs.clone())
            .turn_log(self.logs.clone())
            .scratch_root(ScratchRoot::supplied(self.dir.path().join("scratch")))
            .cancel_grace(Duration::from_millis(200))
            .report_timeout(Duration::from_secs(2))
            .settle_timeout(Duration::from_secs(2))
            .cleanup_timeout(Duration::from_secs(2))
    }

    fn request(&self, prompt: &str) -> korvus_session::CreateSession {
        korvus_session::CreateSession::new(self.incident, prompt)
    }

    /// No row running (but a live `awaiting_user`), exactly one report row
    /// per revision, and no scratch dir left behind.
    async fn assert_closed(&self) {
        for s in self.store.all_sessions(self.incident).await.unwrap() {
            if s.status == SessionStatus::Running {
                assert_eq!(s.exit_reason.as_deref(), Some(exit::AWAITING_USER));
            }
            let reports = self.store.all_reports(s.id).await.unwrap();
            let mut revisions: Vec<u32> = reports.iter().map(|r| r.revision).collect();
            revisions.dedup();
            assert_eq!(revisions.len(), reports.len(), "one row per revision");
            assert!(
                revisions.contains(&s.revision),
                "revision {} of {} has its report row",
                s.revision,
                s.id
            );
        }
        let left = std::fs::read_dir(self.dir.path().join("scratch"))
            .unwrap()
            .count();
        assert_eq!(left, 0, "no scratch dir left behind");
    }

    async fn notes(&self, session: korvus_store::SessionId) -> Vec<String> {
        use korvus_log::TurnLog;
        let log = self
            .logs
            .open(LogId::from_uuid(session.as_uuid()), Access::Read)
            .await
            .unwrap();
        log.read(0, None)
            .await
            .unwrap()
            .into_iter()
            .filter_map(|e| match e.kind {
                EventKind::Note { text } => Some(text),
                _ => None,
            })
            .collect()
    }
}

async fn one(env: &Embedded, manager: &Manager) -> Session {
    let s = manager.create(env.request("go")).await.unwrap();
    settled(manager, &s).await
}

#[tokio::test]
async fn counters_past_the_columns_and_bad_exit_reasons_still_end_the_row() {
    let env = Embedded::new().await;
    for reason in ["x".repeat(5_000), "nul\0inside".to_owned()] {
        let manager = env
            .builder(ScriptRunner::new(move |ctx, _| {
                let reason = reason.clone();
                async move {
                    write(ctx.scratch.as_ref().unwrap(), "report.md", "# R\n");
                    Ok(RunOutcome::new(
                        ExitReason::from(reason),
                        Counters {
                            turns: u64::MAX,
                            tool_calls: u64::MAX,
                            input_tokens: u64::MAX,
                            output_tokens: u64::MAX,
                        },
                    ))
                }
            }))
            .build();
        let row = one(&env, &manager).await;
        assert_eq!(row.status, SessionStatus::Completed);
        assert_eq!(row.exit_reason.as_deref(), Some(exit::INVALID_EXIT_REASON));
        assert_eq!(row.counters.turns, i64::MAX as u64);
        let notes = env.notes(row.id).await;
        assert!(
            notes
                .iter()
                .any(|n| n.contains("exit reason was not valid")),
            "{notes:?}"
        );
        manager.stop().await;
    }
    env.assert_closed().await;
}

#[tokio::test]
async fn cancel_while_preparing_lands_a_report_removes_the_scratch_and_reopen_works() {
    #[derive(Debug)]
    struct Hang;
    #[async_trait::async_trait]
    impl korvus_workspace::Seeder for Hang {
        async fn seed<'a>(
            &self,
            _: &korvus_workspace::ScratchDir,
            _: Option<&'a WorkspaceRef>,
        ) -> korvus_workspace::Result<korvus_workspace::SeedOutcome> {
            std::future::pending().await
        }
    }
    let env = Embedded::new().await;
    let hanging = env
        .builder(ScriptRunner::new(|_, _| async move {
            unreachable!("the seeder never returns")
        }))
        .seeder(Arc::new(Hang), korvus_workspace::default_trees())
        .build();
    let s = hanging.create(env.request("seed hangs")).await.unwrap();
    hanging.cancel(s.id).await.unwrap();
    let row = settled(&hanging, &s).await;
    assert_eq!(row.status, SessionStatus::Cancelled);
    assert!(env.store.get_report(s.id, 1).await.is_ok(), "report row");
    hanging.stop().await;
    env.assert_closed().await;

    let manager = env
        .builder(ScriptRunner::new(|ctx, _| async move {
            write(ctx.scratch.as_ref().unwrap(), "report.md", "# R2\n");
            Ok(RunOutcome::completed(Counters::default()))
        }))
        .build();
    manager.reopen(s.id, "try again").await.unwrap();
    let row = settled(&manager, &s).await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    assert_eq!(row.revision, 2);
    manager.stop().await;
    env.assert_closed().await;
}

#[tokio::test]
async fn a_hanging_archive_upload_is_skipped_within_the_bound() {
    let env = Embedded::new().await;
    env.blobs.fault_put("workspace.tar.gz", BlobFault::Hang);
    let manager = env
        .builder(ScriptRunner::new(|ctx, _| async move {
            write(ctx.scratch.as_ref().unwrap(), "report.md", "# R\n");
            Ok(RunOutcome::completed(Counters::default()))
        }))
        .archive_on_release(true)
        .persist_config({
            let mut v = PersistConfig::default();
            v.timeout = Duration::from_millis(500);
            v
        })
        .build();
    let row = one(&env, &manager).await;
    assert_eq!(row.status, SessionStatus::Completed);
    let report = env.store.get_report(row.id, 1).await.unwrap();
    assert!(report.markdown_key.is_some());
    tokio::time::timeout(Duration::from_secs(10), manager.stop())
        .await
        .expect("stop returns");
    env.assert_closed().await;
}

#[tokio::test]
async fn a_run_the_manager_cancelled_settles_cancelled_every_time() {
    let env = Embedded::new().await;
    let manager = env
        .builder(ScriptRunner::new(|ctx, _| async move {
            ctx.cancel.cancelled().await;
            Err::<RunOutcome, _>(RunError::msg("interrupted"))
        }))
        .build();
    for round in 0..20 {
        let s = manager.create(env.request("cancel me")).await.unwrap();
        manager.cancel(s.id).await.unwrap();
        let row = settled(&manager, &s).await;
        assert_eq!(row.status, SessionStatus::Cancelled, "round {round}");
    }
    manager.stop().await;
    env.assert_closed().await;
}

#[tokio::test]
async fn a_role_the_database_would_refuse_is_refused_before_any_row() {
    let env = Embedded::new().await;
    let manager = env
        .builder(ScriptRunner::new(|ctx, _| async move {
            write(ctx.scratch.as_ref().unwrap(), "report.md", "# R\n");
            Ok(RunOutcome::completed(Counters::default()))
        }))
        .build();
    let first = one(&env, &manager).await;
    let art = env.store.all_session_artifacts(first.id).await.unwrap()[0].id;
    for role in ["nul\0role".to_owned(), "r".repeat(200)] {
        let mut req = env.request("bad role");
        req.context = vec![ContextRequest::new(art).with_role(role)];
        let err = manager.create(req).await.unwrap_err();
        assert!(
            matches!(err, SessionError::InvalidContextRef { .. }),
            "{err:?}"
        );
    }
    let sessions = env.store.all_sessions(env.incident).await.unwrap();
    assert_eq!(sessions.len(), 1, "no seq used up");
    manager.stop().await;
    env.assert_closed().await;
    env.db.close().await;
}

#[tokio::test]
async fn an_oversized_report_is_an_upload_failure_and_an_empty_one_was_never_authored() {
    let env = Embedded::new().await;
    for (body, reason) in [
        (vec![b'#'; 2048], exit::REPORT_UPLOAD_FAILED),
        (Vec::new(), exit::REPORT_AUTHOR_FAILED),
    ] {
        let manager = env
            .builder(ScriptRunner::new(move |ctx, _| {
                let body = body.clone();
                async move {
                    write(ctx.scratch.as_ref().unwrap(), "report.md", body);
                    Ok(RunOutcome::completed(Counters::default()))
                }
            }))
            .persist_config({
                let mut v = PersistConfig::default();
                v.report_max_bytes = 1024;
                v
            })
            .build();
        let row = one(&env, &manager).await;
        assert_eq!(row.status, SessionStatus::Failed);
        assert_eq!(row.exit_reason.as_deref(), Some(reason));
        let report = env.store.get_report(row.id, 1).await.unwrap();
        assert_eq!(report.markdown_key, None);
        manager.stop().await;
    }
    env.assert_closed().await;
}

/// Asks the user on its first run; completes once answered.
fn asks_then_answers() -> ScriptRunner {
    ScriptRunner::new(|ctx, message| async move {
        write(ctx.scratch.as_ref().unwrap(), "report.md", "# R\n");
        Ok(match message {
            None => RunOutcome::new(ExitReason::AWAITING_USER, Counters::default()),
            Some(_) => RunOutcome::completed(Counters::default()),
        })
    })
}

#[tokio::test]
async fn a_session_waiting_for_the_user_is_cancelled_or_answered_on_any_replica() {
    let env = Embedded::new().await;
    let first = env.builder(asks_then_answers()).build();
    let waiting = one(&env, &first).await;
    let answered = one(&env, &first).await;
    assert!(waiting.is_idle() && answered.is_idle());
    first.stop().await;
    // Another manager — a replica, or this process after a restart.
    let replica = env.builder(asks_then_answers()).build();
    let cancelled = replica.cancel(waiting.id).await.unwrap();
    assert_eq!(cancelled.status, SessionStatus::Cancelled);
    assert_eq!(env.store.all_reports(waiting.id).await.unwrap().len(), 1);
    let continued = replica.send_message(answered.id, "db-1").await.unwrap();
    assert_eq!(continued.revision, 2);
    let done = settled(&replica, &continued).await;
    assert_eq!(done.status, SessionStatus::Completed);
    assert!(matches!(
        replica.send_message(waiting.id, "too late").await,
        Err(SessionError::NotAwaitingUser { .. })
    ));
    replica.stop().await;
    env.assert_closed().await;
}

#[tokio::test]
async fn send_message_racing_cancel_has_exactly_one_winner() {
    let env = Embedded::new().await;
    let manager = env.builder(asks_then_answers()).build();
    for round in 0..20 {
        let row = one(&env, &manager).await;
        let (sent, cancelled) = tokio::join!(
            manager.send_message(row.id, "answer"),
            manager.cancel(row.id)
        );
        let now = settled(&manager, &row).await;
        assert!(now.status.is_terminal(), "round {round}: {now:?}");
        let reports = env.store.all_reports(row.id).await.unwrap().len();
        match sent {
            Ok(_) => assert_eq!(reports, 2, "round {round}"),
            Err(SessionError::NotAwaitingUser { .. }) => {
                assert_eq!(now.status, SessionStatus::Cancelled, "round {round}");
                assert!(cancelled.is_ok());
                assert_eq!(reports, 1, "round {round}: the loser wrote nothing");
            }
            Err(e) => panic!("round {round}: {e:?}"),
        }
    }
    manager.stop().await;
    env.assert_closed().await;
}
