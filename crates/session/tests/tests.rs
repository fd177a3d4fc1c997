//! Integration tests of korvus-session: the lifecycle on real in-memory
//! backends behind fault injectors.

mod backends;
mod docs;
mod support;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use korvus_blob::{BlobKey, BlobStore};
use korvus_log::{Event, EventKind};
use korvus_session::{exit, ContextRequest, Manager, RunError, RunOutcome, SessionError};
use korvus_store::{
    ArtifactId, Counters, NewIncident, NewSession, SessionId, SessionKind, SessionStatus, Store,
};
use korvus_testkit::faults::{BlobFault, StoreFault, StoreOp};
use support::{counters, log_turn, settled, write_files, Env, ScriptRunner};

mod create {
    use super::*;

    #[tokio::test]
    async fn returns_running_row_at_once_and_lands_report_then_completes() {
        let env = Env::new().await;
        let manager = env
            .builder(ScriptRunner::writing(&[
                ("report.md", "# Found it\n"),
                ("out/a.csv", "a\n"),
            ]))
            .build();
        let s = manager
            .create(env.request("why is db-1 full?"))
            .await
            .unwrap();
        assert_eq!(s.status, SessionStatus::Running);
        assert_eq!(s.kind, SessionKind::Initial);
        let done = settled(&manager, &s).await;
        assert_eq!(done.status, SessionStatus::Completed);
        assert_eq!(done.exit_reason.as_deref(), Some(exit::COMPLETED));
        assert_eq!(done.counters, counters());
        assert!(done.ended_at.is_some());
        let report = env.store.get_report(s.id, 1).await.unwrap();
        let key = report.markdown_key.clone().expect("markdown key");
        let bytes = env
            .blobs
            .get(&BlobKey::new(key).unwrap())
            .await
            .unwrap()
            .bytes;
        assert_eq!(&bytes[..], b"# Found it\n");
        assert_eq!(report.markdown_bytes, 11);
        env.assert_safe().await;
        // The second session of the incident is a follow-up.
        let s2 = manager.create(env.request("and now?")).await.unwrap();
        assert_eq!(s2.kind, SessionKind::FollowUp);
        manager.stop().await;
    }

    #[tokio::test]
    async fn refuses_blank_prompt_closed_incident_and_after_stop() {
        let env = Env::new().await;
        let manager = env.builder(ScriptRunner::writing(&[])).build();
        assert!(matches!(
            manager.create(env.request("   ")).await,
            Err(SessionError::PromptRequired)
        ));
        let closed = env
            .store
            .create_incident(NewIncident {
                title: "closed".into(),
                workspace: None,
            })
            .await
            .unwrap();
        env.store.close_incident(closed.id).await.unwrap();
        let mut req = env.request("x");
        req.incident_id = closed.id;
        assert!(matches!(
            manager.create(req).await,
            Err(SessionError::IncidentClosed { .. })
        ));
        manager.stop().await;
        assert!(matches!(
            manager.create(env.request("x")).await,
            Err(SessionError::ShuttingDown)
        ));
        assert!(env
            .store
            .list_sessions(env.incident.id)
            .await
            .unwrap()
            .is_empty());
    }

    #[tokio::test]
    async fn bad_context_refs_are_refused_before_the_row_exists() {
        let env = Env::new().await;
        let manager = env
            .builder(ScriptRunner::writing(&[("report.md", "# R\n")]))
            .build();
        let first = manager.create(env.request("first")).await.unwrap();
        settled(&manager, &first).await;
        let art = env.store.list_session_artifacts(first.id).await.unwrap()[0].clone();
        let other = env
            .store
            .create_incident(NewIncident {
                title: "other".into(),
                workspace: None,
            })
            .await
            .unwrap();
        let other_manager = env
            .builder(ScriptRunner::writing(&[("report.md", "# R\n")]))
            .build();
        let mut req = env.request("elsewhere");
        req.incident_id = other.id;
        let foreign = other_manager.create(req).await.unwrap();
        settled(&other_manager, &foreign).await;
        let foreign_art = env.store.list_session_artifacts(foreign.id).await.unwrap()[0].id;
        let before = env.store.count(StoreOp::CreateSession);
        let cases = [
            vec![ContextRequest {
                artifact_id: ArtifactId::from_uuid(uuid::Uuid::nil()),
                role: String::new(),
            }],
            vec![
                ContextRequest {
                    artifact_id: art.id,
                    role: String::new(),
                },
                ContextRequest {
                    artifact_id: art.id,
                    role: String::new(),
                },
            ],
            vec![ContextRequest {
                artifact_id: ArtifactId::new(),
                role: String::new(),
            }],
            vec![ContextRequest {
                artifact_id: foreign_art,
                role: String::new(),
            }],
        ];
        for context in cases {
            let mut req = env.request("with refs");
            req.context = context;
            let err = manager.create(req).await.unwrap_err();
            assert!(
                matches!(err, SessionError::InvalidContextRef { .. }),
                "{err:?}"
            );
        }
        assert_eq!(
            env.store.count(StoreOp::CreateSession),
            before,
            "refs are resolved before any row is written"
        );
        // A good ref gets its role from the kind.
        let mut req = env.request("with a good ref");
        req.context = vec![ContextRequest {
            artifact_id: art.id,
            role: "  ".into(),
        }];
        let s = manager.create(req).await.unwrap();
        let refs = env.store.list_context_refs(s.id).await.unwrap();
        assert_eq!(
            refs[0].role,
            korvus_session::default_role(SessionKind::FollowUp)
        );
        settled(&manager, &s).await;
        manager.stop().await;
        other_manager.stop().await;
    }

    #[tokio::test]
    async fn inherited_context_is_written_read_only_at_its_manifest_path() {
        let env = Env::new().await;
        let producer = env
            .builder(ScriptRunner::writing(&[
                ("report.md", "# R\n"),
                ("notes.txt", "n"),
            ]))
            .build();
        let first = producer.create(env.request("first")).await.unwrap();
        settled(&producer, &first).await;
        let arts = env.store.list_session_artifacts(first.id).await.unwrap();
        let notes = arts.iter().find(|a| a.path == "notes.txt").unwrap();
        let runner = ScriptRunner::new(|ctx, _| async move {
            let f = &ctx.inherited[0];
            let path = f.path.as_ref().expect("written");
            let body =
                std::fs::read_to_string(ctx.scratch.as_ref().unwrap().join(path.as_str())).unwrap();
            assert_eq!(body, "n");
            assert_eq!(path.as_str(), "context/1-notes.txt");
            Ok(RunOutcome::completed(Counters::default()))
        });
        let consumer = env.builder(runner.clone()).build();
        let mut req = env.request("use it");
        req.context = vec![ContextRequest {
            artifact_id: notes.id,
            role: "input".into(),
        }];
        let s = consumer.create(req).await.unwrap();
        let done = settled(&consumer, &s).await;
        assert_eq!(done.status, SessionStatus::Completed, "{done:?}");
        assert_eq!(runner.seen.lock().unwrap().len(), 1);
        producer.stop().await;
        consumer.stop().await;
    }
}

mod ordering {
    use super::*;

    #[tokio::test]
    async fn persist_then_report_row_then_terminal_status() {
        let env = Env::new().await;
        let manager = env
            .builder(ScriptRunner::writing(&[
                ("report.md", "# R\n"),
                ("x.txt", "x"),
            ]))
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
                        | StoreOp::ReopenSession
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
        // Bytes before rows: every report/artifact blob was put before rows.
        assert!(env.blobs.total_puts() >= 2);
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
        for s in env.store.list_sessions(env.incident.id).await.unwrap() {
            assert!(s.status.is_terminal(), "wait returned mid-write");
        }
        manager.stop().await;
    }

    #[tokio::test]
    async fn ref_insert_failure_settles_failed_never_running() {
        let env = Env::new().await;
        let manager = env
            .builder(ScriptRunner::writing(&[("report.md", "# R\n")]))
            .build();
        let s = manager.create(env.request("first")).await.unwrap();
        settled(&manager, &s).await;
        let art = env.store.list_session_artifacts(s.id).await.unwrap()[0].id;
        env.store
            .fault(StoreOp::InsertContextRefs, StoreFault::Fail);
        let mut req = env.request("refs fail");
        req.context = vec![ContextRequest {
            artifact_id: art,
            role: "input".into(),
        }];
        assert!(manager.create(req).await.is_err());
        let rows = env.store.list_sessions(env.incident.id).await.unwrap();
        let failed = rows.iter().find(|r| r.prompt == "refs fail").unwrap();
        assert_eq!(failed.status, SessionStatus::Failed);
        assert_eq!(
            failed.exit_reason.as_deref(),
            Some(exit::CONTEXT_REFS_FAILED)
        );
        env.assert_safe().await;
        manager.stop().await;
    }
}

mod faults {
    use super::*;

    async fn one(env: &Env, manager: &Manager) -> korvus_store::Session {
        let s = manager.create(env.request("go")).await.unwrap();
        settled(manager, &s).await
    }

    #[tokio::test]
    async fn runner_error_settles_failed_with_files_kept() {
        let env = Env::new().await;
        let manager = env
            .builder(ScriptRunner::new(|ctx, _| async move {
                write_files(&ctx, &[("partial.txt", "p")]);
                Err(RunError::msg("model API down"))
            }))
            .build();
        let row = one(&env, &manager).await;
        assert_eq!(row.status, SessionStatus::Failed);
        assert_eq!(row.exit_reason.as_deref(), Some(exit::RUNNER_FAILED));
        let arts = env.store.list_session_artifacts(row.id).await.unwrap();
        assert!(
            arts.iter().any(|a| a.path == "partial.txt"),
            "files of a failed run are kept"
        );
        assert_eq!(
            env.store.get_report(row.id, 1).await.unwrap().exit_reason,
            exit::RUNNER_FAILED
        );
        env.assert_safe().await;
        manager.stop().await;
    }

    #[tokio::test]
    async fn runner_error_may_name_its_exit_reason() {
        let env = Env::new().await;
        let manager = env
            .builder(ScriptRunner::new(|_, _| async move {
                Err(RunError::msg("agent exited with code 3").with_exit_reason("exit_code_3"))
            }))
            .build();
        let row = one(&env, &manager).await;
        assert_eq!(row.status, SessionStatus::Failed);
        assert_eq!(row.exit_reason.as_deref(), Some("exit_code_3"));
        manager.stop().await;
    }

    #[tokio::test]
    async fn runner_panic_settles_failed_panicked_and_the_process_lives() {
        let env = Env::new().await;
        let manager = env
            .builder(ScriptRunner::new(|ctx, _| async move {
                write_files(&ctx, &[("before-panic.txt", "x")]);
                panic!("runner bug");
            }))
            .build();
        let row = one(&env, &manager).await;
        assert_eq!(row.status, SessionStatus::Failed);
        assert_eq!(row.exit_reason.as_deref(), Some(exit::PANICKED));
        let arts = env.store.list_session_artifacts(row.id).await.unwrap();
        assert!(arts.iter().any(|a| a.path == "before-panic.txt"));
        env.assert_safe().await;
        manager.stop().await;
    }

    #[tokio::test]
    async fn hanging_runner_is_cancelled_and_its_files_harvested() {
        let env = Env::new().await;
        let manager = env
            .builder(ScriptRunner::new(|ctx, _| async move {
                write_files(&ctx, &[("report.md", "# partial\n")]);
                // Ignores cancellation entirely.
                std::future::pending::<()>().await;
                unreachable!()
            }))
            .build();
        let s = manager.create(env.request("hang")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let row = manager.cancel(s.id).await.unwrap();
        assert_eq!(row.status, SessionStatus::Running);
        let done = settled(&manager, &s).await;
        assert_eq!(done.status, SessionStatus::Cancelled);
        assert_eq!(done.exit_reason.as_deref(), Some(exit::CANCELLED));
        let report = env.store.get_report(s.id, 1).await.unwrap();
        assert!(
            report.markdown_key.is_some(),
            "a cancelled run's report is kept"
        );
        assert!(matches!(
            manager.cancel(s.id).await,
            Err(SessionError::AlreadyEnded { .. })
        ));
        env.assert_safe().await;
        manager.stop().await;
    }

    #[tokio::test]
    async fn a_hanging_seeder_obeys_cancel_and_stop() {
        #[derive(Debug)]
        struct Hang;
        #[async_trait::async_trait]
        impl korvus_workspace::Seeder for Hang {
            async fn seed<'a>(
                &self,
                _: &korvus_workspace::ScratchDir,
                _: Option<&'a korvus_store::WorkspaceRef>,
            ) -> korvus_workspace::Result<korvus_workspace::SeedOutcome> {
                std::future::pending().await
            }
        }
        let env = Env::new().await;
        let manager = env
            .builder(ScriptRunner::writing(&[("report.md", "# R\n")]))
            .seeder(Arc::new(Hang), korvus_workspace::default_trees())
            .build();
        let s = manager.create(env.request("seed hangs")).await.unwrap();
        tokio::time::timeout(Duration::from_secs(20), manager.stop())
            .await
            .expect("stop returns although the seeder hangs");
        let row = env.store.get_session(s.id).await.unwrap();
        assert_eq!(row.status, SessionStatus::Cancelled);
        env.assert_safe().await;
    }

    #[tokio::test]
    async fn hanging_runner_hits_the_run_timeout() {
        let env = Env::new().await;
        let manager = env
            .builder(ScriptRunner::new(|ctx, _| async move {
                ctx.cancel.cancelled().await;
                Ok(RunOutcome::completed(Counters::default()))
            }))
            .run_timeout(Duration::from_millis(200))
            .build();
        let row = one(&env, &manager).await;
        assert_eq!(row.status, SessionStatus::Failed);
        assert_eq!(row.exit_reason.as_deref(), Some(exit::TIMEOUT));
        env.assert_safe().await;
        manager.stop().await;
    }

    #[tokio::test]
    async fn report_upload_failure_lands_a_row_without_key() {
        let env = Env::new().await;
        env.blobs.fault_put("/reports/", BlobFault::Fail);
        let manager = env
            .builder(ScriptRunner::writing(&[
                ("report.md", "# R\n"),
                ("ok.txt", "ok"),
            ]))
            .build();
        let row = one(&env, &manager).await;
        assert_eq!(row.status, SessionStatus::Failed);
        assert_eq!(row.exit_reason.as_deref(), Some(exit::REPORT_UPLOAD_FAILED));
        let report = env.store.get_report(row.id, 1).await.unwrap();
        assert_eq!(report.markdown_key, None);
        let arts = env.store.list_session_artifacts(row.id).await.unwrap();
        assert!(arts.iter().any(|a| a.path == "ok.txt"));
        assert!(
            !arts.iter().any(|a| a.path == "report.md"),
            "no row for failed bytes"
        );
        env.assert_safe().await;
        manager.stop().await;
    }

    #[tokio::test]
    async fn artifact_row_failure_still_lands_report_and_status() {
        let env = Env::new().await;
        env.store.fault(StoreOp::CreateArtifacts, StoreFault::Fail);
        let manager = env
            .builder(ScriptRunner::writing(&[
                ("report.md", "# R\n"),
                ("ok.txt", "ok"),
            ]))
            .build();
        let row = one(&env, &manager).await;
        // The document's bytes are stored; the report row points at them.
        assert_eq!(row.status, SessionStatus::Completed);
        let report = env.store.get_report(row.id, 1).await.unwrap();
        assert!(report.markdown_key.is_some());
        assert!(env
            .store
            .list_session_artifacts(row.id)
            .await
            .unwrap()
            .is_empty());
        env.assert_safe().await;
        manager.stop().await;
    }

    #[tokio::test]
    async fn report_row_failure_settles_failed_report_persist_failed() {
        let env = Env::new().await;
        env.store.fault(StoreOp::CreateReport, StoreFault::Fail);
        let manager = env
            .builder(ScriptRunner::writing(&[("report.md", "# R\n")]))
            .build();
        let row = one(&env, &manager).await;
        assert_eq!(row.status, SessionStatus::Failed);
        assert_eq!(
            row.exit_reason.as_deref(),
            Some(exit::REPORT_PERSIST_FAILED)
        );
        env.assert_safe().await;
        manager.stop().await;
    }

    #[tokio::test]
    async fn settle_failure_is_retried_until_it_succeeds() {
        let env = Env::new().await;
        env.store
            .fault_times(StoreOp::SettleSession, StoreFault::Fail, 3);
        let manager = env
            .builder(ScriptRunner::writing(&[("report.md", "# R\n")]))
            .build();
        let row = one(&env, &manager).await;
        assert_eq!(row.status, SessionStatus::Completed);
        assert_eq!(env.store.count(StoreOp::SettleSession), 4);
        env.assert_safe().await;
        manager.stop().await;
    }

    #[tokio::test]
    async fn settle_panics_and_hangs_are_bounded() {
        let env = Env::new().await;
        env.store
            .fault_times(StoreOp::SettleSession, StoreFault::Panic, 1);
        let manager = env
            .builder(ScriptRunner::writing(&[("report.md", "# R\n")]))
            .build();
        let row = one(&env, &manager).await;
        assert_eq!(
            row.status,
            SessionStatus::Completed,
            "retried after the panic"
        );

        // A store that never answers: settle gives up at its bound, and the
        // run group is still released (stop returns).
        env.store.fault(StoreOp::SettleSession, StoreFault::Hang);
        let manager = env
            .builder(ScriptRunner::writing(&[("report.md", "# R\n")]))
            .settle_timeout(Duration::from_millis(300))
            .build();
        let s = manager.create(env.request("hang settle")).await.unwrap();
        tokio::time::timeout(Duration::from_secs(20), manager.stop())
            .await
            .expect("stop returns although settle cannot");
        env.store.heal();
        let row = env.store.get_session(s.id).await.unwrap();
        // Documented give-up: the row stays as it was; a later operator
        // (or reopen after repair) sees it. FIXME: a sweeper could settle
        // such rows `failed` once the store answers again.
        assert_eq!(row.status, SessionStatus::Running);
    }

    #[tokio::test]
    async fn awaiting_user_keeps_the_row_running_without_ended_at() {
        let env = Env::new().await;
        let manager = env
            .builder(ScriptRunner::new(|_, _| async move {
                Ok(RunOutcome {
                    exit_reason: exit::AWAITING_USER.into(),
                    author_finished: false,
                    counters: Counters::default(),
                })
            }))
            .build();
        let row = one(&env, &manager).await;
        assert_eq!(row.status, SessionStatus::Running);
        assert_eq!(row.ended_at, None);
        assert_eq!(row.exit_reason.as_deref(), Some(exit::AWAITING_USER));
        env.assert_safe().await;
        manager.stop().await;
    }
}

mod shutdown {
    use super::*;

    #[tokio::test]
    async fn two_hundred_creates_racing_stop_leave_nothing_running() {
        for round in 0..50 {
            let env = Env::new().await;
            let manager = env
                .builder(ScriptRunner::new(|ctx, _| async move {
                    ctx.cancel.cancelled().await;
                    Ok(RunOutcome::completed(Counters::default()))
                }))
                .build();
            let creates: Vec<_> = (0..200)
                .map(|i| {
                    let m = manager.clone();
                    let req = env.request(&format!("p{i}"));
                    tokio::spawn(async move { m.create(req).await })
                })
                .collect();
            tokio::time::sleep(Duration::from_micros(50 * (round % 10))).await;
            let stops: Vec<_> = (0..3)
                .map(|_| {
                    let m = manager.clone();
                    tokio::spawn(async move { m.stop().await })
                })
                .collect();
            for s in stops {
                s.await.unwrap();
            }
            // Every stop has returned: everything created is terminal now.
            let rows = env.store.list_sessions(env.incident.id).await.unwrap();
            for r in &rows {
                assert!(r.status.is_terminal(), "round {round}: {r:?} left running");
            }
            let mut ok = 0;
            for c in creates {
                match c.await.unwrap() {
                    Ok(_) => ok += 1,
                    Err(SessionError::ShuttingDown) => {}
                    Err(e) => panic!("round {round}: unexpected {e:?}"),
                }
            }
            assert_eq!(ok, rows.len(), "round {round}");
        }
    }

    #[tokio::test]
    async fn wait_joins_without_cancelling() {
        let env = Env::new().await;
        let manager = env
            .builder(ScriptRunner::new(|ctx, _| async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                assert!(!ctx.cancel.is_cancelled());
                Ok(RunOutcome::completed(Counters::default()))
            }))
            .build();
        let s = manager.create(env.request("go")).await.unwrap();
        manager.wait().await;
        let row = env.store.get_session(s.id).await.unwrap();
        assert_eq!(row.status, SessionStatus::Completed);
        manager.stop().await;
    }
}

mod cancel {
    use super::*;

    #[tokio::test]
    async fn a_session_of_another_replica_is_left_unchanged() {
        let env = Env::new().await;
        let manager = env.builder(ScriptRunner::writing(&[])).build();
        let foreign = env
            .store
            .create_session(NewSession {
                id: SessionId::new(),
                incident_id: env.incident.id,
                kind: SessionKind::Initial,
                prompt: "run elsewhere".into(),
                workspace_ref: None,
            })
            .await
            .unwrap();
        let row = manager.cancel(foreign.id).await.unwrap();
        assert_eq!(row, foreign);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(env.store.get_session(foreign.id).await.unwrap(), foreign);
        assert!(matches!(
            manager.cancel(SessionId::new()).await,
            Err(SessionError::NotFound { .. })
        ));
        manager.stop().await;
    }
}

mod watch {
    use super::*;

    fn numbered(n: u64) -> Event {
        Event::new(EventKind::Note {
            text: format!("event {n}"),
        })
    }

    #[tokio::test]
    async fn delivers_every_event_in_order_and_ends_after_the_terminal_row() {
        let env = Env::new().await;
        let (go_tx, go_rx) = tokio::sync::watch::channel(false);
        let runner = ScriptRunner::new(move |ctx, _| {
            let mut go = go_rx.clone();
            async move {
                for i in 0..50 {
                    ctx.log.append(&[numbered(i)]).await.unwrap();
                    if i == 20 {
                        // Let a watcher join mid-run.
                        let _ = go.wait_for(|g| *g).await;
                    }
                    tokio::task::yield_now().await;
                }
                Ok(RunOutcome::completed(Counters::default()))
            }
        });
        let manager = env.builder(runner).build();
        let s = manager.create(env.request("stream")).await.unwrap();
        let early = manager.watch(s.id);
        // Wait until the run reached event 20, then join a second watcher.
        loop {
            let stat = manager
                .turn_log()
                .stat(korvus_log::LogId::from_uuid(s.id.as_uuid()))
                .await
                .unwrap();
            if stat.event_count.unwrap_or(0) >= 21 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let late = manager.watch(s.id);
        go_tx.send_replace(true);
        let store = env.store.clone();
        let collect =
            |stream: futures::stream::BoxStream<'static, korvus_session::Result<Event>>| {
                let store = store.clone();
                async move {
                    let events: Vec<Event> = stream.map(|e| e.unwrap()).collect().await;
                    // The stream ended: the terminal row must be readable now.
                    let row = store.get_session(s.id).await.unwrap();
                    assert!(
                        row.status.is_terminal(),
                        "stream ended before the terminal row"
                    );
                    events
                }
            };
        let (a, b) = tokio::join!(collect(early.boxed()), collect(late.boxed()));
        let expected: Vec<Event> = (0..50).map(numbered).collect();
        assert_eq!(a, expected);
        assert_eq!(b, expected, "prefix + live without gaps or duplicates");
        // Watching a finished session replays the log and ends.
        let replay: Vec<Event> = manager.watch(s.id).map(|e| e.unwrap()).collect().await;
        assert_eq!(replay, expected);
        manager.stop().await;
    }
}

mod reopen {
    use super::*;

    #[tokio::test]
    async fn eight_concurrent_reopens_have_one_winner_each_round() {
        let env = Env::new().await;
        let manager = env
            .builder(ScriptRunner::writing(&[("report.md", "# R\n")]))
            .build();
        let s = manager.create(env.request("first")).await.unwrap();
        settled(&manager, &s).await;
        for round in 0..200u32 {
            let results =
                futures::future::join_all((0..8).map(|_| manager.reopen(s.id, "again"))).await;
            let ok = results.iter().filter(|r| r.is_ok()).count();
            assert_eq!(ok, 1, "round {round}: {results:?}");
            for r in &results {
                if let Err(e) = r {
                    assert!(matches!(e, SessionError::NotFinished { .. }), "{e:?}");
                }
            }
            settled(&manager, &s).await;
            let reports = env.store.list_reports(s.id).await.unwrap();
            assert_eq!(
                reports.len() as u32,
                round + 2,
                "one new revision per round"
            );
        }
        env.assert_safe().await;
        manager.stop().await;
    }

    #[tokio::test]
    async fn a_revision_whose_report_row_failed_is_not_reused() {
        let env = Env::new().await;
        env.store
            .fault_times(StoreOp::CreateReport, StoreFault::Fail, 1);
        let manager = env
            .builder(ScriptRunner::new(|ctx, _| async move {
                write_files(&ctx, &[("report.md", "# R\n")]);
                support::write(
                    ctx.scratch.as_ref().unwrap(),
                    "report.md",
                    &format!("# R{}\n", ctx.revision),
                );
                Ok(RunOutcome::completed(Counters::default()))
            }))
            .build();
        let s = manager.create(env.request("first")).await.unwrap();
        let first = settled(&manager, &s).await;
        assert_eq!(
            first.exit_reason.as_deref(),
            Some(exit::REPORT_PERSIST_FAILED)
        );
        manager.reopen(s.id, "again").await.unwrap();
        settled(&manager, &s).await;
        let revisions: Vec<u32> = env
            .store
            .list_reports(s.id)
            .await
            .unwrap()
            .iter()
            .map(|r| r.revision)
            .collect();
        assert_eq!(
            revisions,
            [2],
            "revision 1's key holds bytes a row describes"
        );
        env.assert_safe().await;
        manager.stop().await;
    }

    #[tokio::test]
    async fn running_is_not_finished_and_empty_message_writes_nothing() {
        let env = Env::new().await;
        let (tx, rx) = tokio::sync::watch::channel(false);
        let manager = env
            .builder(ScriptRunner::new(move |_, _| {
                let mut rx = rx.clone();
                async move {
                    let _ = rx.wait_for(|g| *g).await;
                    Ok(RunOutcome::completed(Counters::default()))
                }
            }))
            .build();
        let s = manager.create(env.request("first")).await.unwrap();
        assert!(matches!(
            manager.reopen(s.id, "too early").await,
            Err(SessionError::NotFinished { .. })
        ));
        tx.send_replace(true);
        let done = settled(&manager, &s).await;
        let calls = env.store.calls().len();
        assert!(matches!(
            manager.reopen(s.id, "  ").await,
            Err(SessionError::MessageRequired)
        ));
        assert_eq!(env.store.calls().len(), calls, "nothing read or written");
        assert_eq!(env.store.get_session(s.id).await.unwrap(), done);
        manager.stop().await;
    }

    #[tokio::test]
    async fn cancelled_and_failed_sessions_reopen() {
        let env = Env::new().await;
        let manager = env
            .builder(ScriptRunner::new(|_, msg| async move {
                match msg.as_deref() {
                    None => Err(RunError::msg("first run fails")),
                    Some(_) => Ok(RunOutcome::completed(Counters::default())),
                }
            }))
            .build();
        let s = manager.create(env.request("first")).await.unwrap();
        assert_eq!(settled(&manager, &s).await.status, SessionStatus::Failed);
        let reopened = manager.reopen(s.id, "try again").await.unwrap();
        assert_eq!(reopened.status, SessionStatus::Running);
        assert_eq!(reopened.revision, 2);
        let done = settled(&manager, &s).await;
        assert_eq!(done.status, SessionStatus::Completed);
        // It wrote no report.md: the revision lands without a document.
        assert_eq!(
            env.store.get_report(s.id, 2).await.unwrap().markdown_key,
            None
        );
        let cancelled = env
            .builder(ScriptRunner::new(|ctx, _| async move {
                ctx.cancel.cancelled().await;
                Ok(RunOutcome::completed(Counters::default()))
            }))
            .build();
        let c = cancelled.create(env.request("to cancel")).await.unwrap();
        cancelled.cancel(c.id).await.unwrap();
        assert_eq!(
            settled(&cancelled, &c).await.status,
            SessionStatus::Cancelled
        );
        cancelled.reopen(c.id, "resume").await.unwrap();
        cancelled.cancel(c.id).await.unwrap();
        assert_eq!(settled(&cancelled, &c).await.revision, 2);
        manager.stop().await;
        cancelled.stop().await;
    }

    #[tokio::test]
    async fn own_output_is_restored_and_unchanged_files_are_not_stored_again() {
        let env = Env::new().await;
        let runner = ScriptRunner::new(|ctx, msg| async move {
            let dir = ctx.scratch.clone().unwrap();
            match msg {
                None => {
                    support::write(&dir, "report.md", "# R1\n");
                    support::write(&dir, "data/same.txt", "same");
                    support::write(&dir, "data/changed.txt", "v1");
                }
                Some(_) => {
                    // Restored at their paths.
                    assert_eq!(
                        std::fs::read_to_string(dir.join("data/same.txt")).unwrap(),
                        "same"
                    );
                    assert_eq!(
                        std::fs::read_to_string(dir.join("data/changed.txt")).unwrap(),
                        "v1"
                    );
                    support::write(&dir, "data/changed.txt", "v2");
                    support::write(&dir, "report.md", "# R2\n");
                }
            }
            Ok(RunOutcome::completed(Counters::default()))
        });
        let manager = env.builder(runner).build();
        let s = manager.create(env.request("first")).await.unwrap();
        settled(&manager, &s).await;
        let first = env.store.list_session_artifacts(s.id).await.unwrap();
        let same_key = first
            .iter()
            .find(|a| a.path == "data/same.txt")
            .unwrap()
            .blob_key
            .clone();
        manager.reopen(s.id, "more").await.unwrap();
        let done = settled(&manager, &s).await;
        assert_eq!(done.status, SessionStatus::Completed, "{done:?}");
        assert_eq!(
            env.blobs.puts_of(&BlobKey::new(same_key).unwrap()),
            1,
            "not uploaded again"
        );
        let all = env.store.list_session_artifacts(s.id).await.unwrap();
        let changed: Vec<u32> = all
            .iter()
            .filter(|a| a.path == "data/changed.txt")
            .map(|a| a.revision)
            .collect();
        assert_eq!(changed, [1, 2]);
        assert_eq!(all.iter().filter(|a| a.path == "data/same.txt").count(), 1);
        let r2 = env.store.get_report(s.id, 2).await.unwrap();
        let bytes = env
            .blobs
            .get(&BlobKey::new(r2.markdown_key.unwrap()).unwrap())
            .await
            .unwrap()
            .bytes;
        assert_eq!(&bytes[..], b"# R2\n");
        env.assert_safe().await;
        manager.stop().await;
    }

    #[tokio::test]
    async fn stale_restored_report_is_not_adopted_when_the_author_fails() {
        let env = Env::new().await;
        let runner = ScriptRunner::new(|ctx, msg| async move {
            match msg {
                None => {
                    write_files(&ctx, &[("report.md", "# R1\n")]);
                    Ok(RunOutcome::completed(Counters::default()))
                }
                // The author phase fails; report.md is the restored r1.
                Some(_) => Ok(RunOutcome {
                    exit_reason: exit::COMPLETED.into(),
                    author_finished: false,
                    counters: Counters::default(),
                }),
            }
        });
        let manager = env.builder(runner).build();
        let s = manager.create(env.request("first")).await.unwrap();
        settled(&manager, &s).await;
        manager.reopen(s.id, "more").await.unwrap();
        let done = settled(&manager, &s).await;
        assert_eq!(
            done.exit_reason.as_deref(),
            Some(exit::REPORT_AUTHOR_FAILED)
        );
        let r2 = env.store.get_report(s.id, 2).await.unwrap();
        assert_eq!(r2.markdown_key, None, "not the old revision's key");
        assert_eq!(r2.exit_reason, exit::REPORT_AUTHOR_FAILED);
        manager.stop().await;
    }

    #[tokio::test]
    async fn an_interrupted_log_gets_its_closers_once() {
        let env = Env::new().await;
        let runner = ScriptRunner::new(|ctx, msg| async move {
            if msg.is_none() {
                // Simulate a crash mid-turn: a turn start and a tool call,
                // never ended.
                ctx.log
                    .append(&[
                        Event::new(EventKind::TurnStart { turn: 7 }),
                        Event::new(EventKind::ToolCall {
                            call_id: "c7".into(),
                            tool: "sh".into(),
                            input: serde_json::json!({"cmd": "df"}),
                        }),
                    ])
                    .await
                    .unwrap();
            }
            Ok(RunOutcome::completed(Counters::default()))
        });
        let manager = env.builder(runner).build();
        let s = manager.create(env.request("first")).await.unwrap();
        settled(&manager, &s).await;
        manager.reopen(s.id, "continue").await.unwrap();
        settled(&manager, &s).await;
        manager.reopen(s.id, "and again").await.unwrap();
        settled(&manager, &s).await;
        let events: Vec<Event> = manager.watch(s.id).map(|e| e.unwrap()).collect().await;
        let kinds: Vec<&EventKind> = events.iter().map(|e| &e.kind).collect();
        assert!(matches!(kinds[0], EventKind::TurnStart { turn: 7 }));
        assert!(matches!(kinds[1], EventKind::ToolCall { .. }));
        assert!(
            matches!(kinds[2], EventKind::ToolResult { ok: false, call_id, .. } if call_id == "c7")
        );
        assert!(matches!(
            kinds[3],
            EventKind::TurnEnd {
                turn: 7,
                interrupted: true
            }
        ));
        assert!(matches!(kinds[4], EventKind::Message { text, .. } if text == "continue"));
        assert!(matches!(kinds[5], EventKind::Message { text, .. } if text == "and again"));
        assert_eq!(
            kinds.len(),
            6,
            "the second reopen adds no closer: {kinds:?}"
        );
        manager.stop().await;
    }

    #[tokio::test]
    async fn a_watcher_subscribed_right_after_reopen_sees_the_new_iteration() {
        let env = Env::new().await;
        let runner = ScriptRunner::new(|ctx, msg| async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            let text = if msg.is_some() { "second" } else { "first" };
            ctx.log
                .append(&[Event::new(EventKind::Note { text: text.into() })])
                .await
                .unwrap();
            Ok(RunOutcome::completed(Counters::default()))
        });
        let manager = env.builder(runner).build();
        let s = manager.create(env.request("first")).await.unwrap();
        settled(&manager, &s).await;
        manager.reopen(s.id, "go on").await.unwrap();
        let events: Vec<Event> = manager.watch(s.id).map(|e| e.unwrap()).collect().await;
        let row = env.store.get_session(s.id).await.unwrap();
        assert!(
            row.status.is_terminal(),
            "ended only after the new terminal row"
        );
        let texts: Vec<String> = events
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::Note { text } => Some(text.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(texts, ["first", "second"]);
        manager.stop().await;
    }
}

#[tokio::test]
async fn stream_reopener_is_called_before_reopen_returns() {
    use std::sync::atomic::{AtomicBool, Ordering};
    #[derive(Debug, Default)]
    struct Latch(AtomicBool);
    #[async_trait::async_trait]
    impl korvus_session::StreamReopener for Latch {
        async fn reopen(&self, _: SessionId) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let env = Env::new().await;
    let latch = Arc::new(Latch::default());
    let manager = env
        .builder(ScriptRunner::writing(&[("report.md", "# R\n")]))
        .stream_reopener(latch.clone())
        .build();
    let s = manager.create(env.request("first")).await.unwrap();
    settled(&manager, &s).await;
    assert!(!latch.0.load(Ordering::SeqCst));
    manager.reopen(s.id, "more").await.unwrap();
    assert!(latch.0.load(Ordering::SeqCst));
    manager.stop().await;
}
