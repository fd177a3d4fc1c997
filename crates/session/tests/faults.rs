//! The fault matrix: failing, hanging and panicking runners, seeders, stores
//! and blob stores. Every path ends in a terminal row (or one awaiting the
//! user) and no row points at missing bytes.

use korvus_store::StoreExt as _;
use std::sync::Arc;
use std::time::Duration;

use korvus_runner::{exit, RunError, RunOutcome};
use korvus_session::{Manager, SessionError};
use korvus_store::{Counters, SessionStatus, Store};
use korvus_testkit::faults::{BlobFault, StoreFault, StoreOp};

use crate::support::{settled, write_files, writing, Env, ScriptRunner};

/// One session, settled; a failed one must say why
/// ([`Manager::progress`]'s cause: its report's detail, else korvus's last
/// note).
async fn one(env: &Env, manager: &Manager) -> korvus_store::Session {
    let s = manager.create(env.request("go")).await.unwrap();
    let row = settled(manager, &s).await;
    if row.status == SessionStatus::Failed {
        let cause = manager.progress(&row).await.unwrap().cause;
        assert!(
            cause.as_deref().is_some_and(|c| !c.trim().is_empty()),
            "a failed session says why: {row:?}"
        );
    }
    row
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
    let arts = env.store.all_session_artifacts(row.id).await.unwrap();
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
async fn an_exit_reason_that_is_not_valid_is_stored_as_a_fixed_code_and_noted_in_the_log() {
    for (text, failed) in [("x".repeat(5_000), false), ("nul\0inside".to_owned(), true)] {
        let env = Env::new().await;
        let manager = env
            .builder(ScriptRunner::new(move |ctx, _| {
                let text = text.clone();
                async move {
                    write_files(&ctx, &[("report.md", "# done\n")]);
                    if failed {
                        return Err(RunError::msg("agent said so").with_exit_reason(text));
                    }
                    Ok(RunOutcome::new(text, Counters::default()))
                }
            }))
            .build();
        let row = one(&env, &manager).await;
        let status = if failed {
            SessionStatus::Failed
        } else {
            SessionStatus::Completed
        };
        assert_eq!(row.status, status);
        assert_eq!(row.exit_reason.as_deref(), Some(exit::INVALID_EXIT_REASON));
        let report = env.store.get_report(row.id, 1).await.unwrap();
        assert_eq!(report.exit_reason, exit::INVALID_EXIT_REASON);
        let notes = crate::support::notes(&env, row.id).await;
        assert!(
            notes
                .iter()
                .any(|n| n.contains("exit reason was not valid") && n.len() < 1_200),
            "{notes:?}"
        );
        env.assert_safe().await;
        manager.stop().await;
    }
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
    let arts = env.store.all_session_artifacts(row.id).await.unwrap();
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

/// A seeder that never returns.
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

#[tokio::test]
async fn a_hanging_seeder_obeys_cancel_and_stop() {
    let env = Env::new().await;
    let manager = env
        .builder(writing(&[("report.md", "# R\n")]))
        .seeder(Arc::new(Hang), korvus_workspace::default_trees())
        .build();
    let s = manager.create(env.request("seed hangs")).await.unwrap();
    tokio::time::timeout(Duration::from_secs(20), manager.stop())
        .await
        .expect("stop returns although the seeder hangs");
    // Stopped before its run started: back in the queue, nothing written
    // for the revision, for the next manager to run.
    let row = env.store.get_session(s.id).await.unwrap();
    assert!(row.is_queued(), "{row:?}");
    assert!(env.store.all_reports(s.id).await.unwrap().is_empty());
    let next = env.builder(writing(&[("report.md", "# R\n")])).build();
    assert_eq!(
        crate::support::settled(&next, &s).await.status,
        SessionStatus::Completed
    );
    next.stop().await;
    env.assert_safe().await;
}

/// A run its caller cancelled while it prepared stays cancelled when a
/// `stop` follows: only what `stop` itself caught goes back to the queue.
#[tokio::test]
async fn a_run_cancelled_before_a_stop_stays_cancelled() {
    let env = Env::new().await;
    let manager = env
        .builder(writing(&[("report.md", "# R\n")]))
        .seeder(Arc::new(Hang), korvus_workspace::default_trees())
        .build();
    let s = manager.create(env.request("seed hangs")).await.unwrap();
    manager.cancel(s.id).await.unwrap();
    manager.stop().await;
    let row = env.store.get_session(s.id).await.unwrap();
    assert_eq!(row.status, SessionStatus::Cancelled, "{row:?}");
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
        .builder(writing(&[("report.md", "# R\n"), ("ok.txt", "ok")]))
        .build();
    let row = one(&env, &manager).await;
    assert_eq!(row.status, SessionStatus::Failed);
    assert_eq!(row.exit_reason.as_deref(), Some(exit::REPORT_UPLOAD_FAILED));
    let report = env.store.get_report(row.id, 1).await.unwrap();
    assert_eq!(report.markdown_key, None);
    let arts = env.store.all_session_artifacts(row.id).await.unwrap();
    assert!(arts.iter().any(|a| a.path == "ok.txt"));
    assert!(
        !arts.iter().any(|a| a.path == "report.md"),
        "no row for failed bytes"
    );
    env.assert_safe().await;
    manager.stop().await;
}

#[tokio::test]
async fn artifact_row_failure_lands_a_report_row_without_a_document_and_says_why() {
    let env = Env::new().await;
    env.store
        .fault(StoreOp::CreateArtifacts, StoreFault::FailPermanent);
    let manager = env
        .builder(writing(&[("report.md", "# R\n"), ("ok.txt", "ok")]))
        .build();
    let row = one(&env, &manager).await;
    // The document's bytes are stored, but no artifact row describes them:
    // the report row must not point at them, and says why.
    assert_eq!(row.status, SessionStatus::Failed);
    assert_eq!(row.exit_reason.as_deref(), Some(exit::REPORT_UPLOAD_FAILED));
    let report = env.store.get_report(row.id, 1).await.unwrap();
    assert_eq!(report.markdown_key, None);
    let detail = report.detail.expect("the cause reaches the report row");
    assert!(detail.contains("artifact rows not written"), "{detail}");
    assert!(env
        .store
        .all_session_artifacts(row.id)
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
        .builder(writing(&[("report.md", "# R\n")]))
        .report_timeout(Duration::from_millis(300))
        .build();
    let row = one(&env, &manager).await;
    assert_eq!(row.status, SessionStatus::Failed);
    assert_eq!(
        row.exit_reason.as_deref(),
        Some(exit::REPORT_PERSIST_FAILED)
    );
    assert!(
        env.store.count(StoreOp::CreateReport) > 1,
        "a transient failure is retried within the report bound"
    );
    env.assert_safe().await;
    manager.stop().await;
}

#[tokio::test]
async fn settle_failure_is_retried_until_it_succeeds() {
    let env = Env::new().await;
    env.store
        .fault_times(StoreOp::SettleSession, StoreFault::Fail, 3);
    let manager = env.builder(writing(&[("report.md", "# R\n")])).build();
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
    let manager = env.builder(writing(&[("report.md", "# R\n")])).build();
    let row = one(&env, &manager).await;
    assert_eq!(
        row.status,
        SessionStatus::Completed,
        "retried after the panic"
    );

    // A store that never answers: settle gives up at its bound, and the
    // run group is still released (stop returns). The revision's report
    // row was written before; the row itself cannot be (see below).
    env.store.fault(StoreOp::SettleSession, StoreFault::Hang);
    let manager = env
        .builder(writing(&[("report.md", "# R\n")]))
        .settle_timeout(Duration::from_millis(300))
        .build();
    let s = manager.create(env.request("hang settle")).await.unwrap();
    // Landed (its report row written) before the stop: a run stopped
    // before it started would go back to the queue instead.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while env.store.get_report(s.id, 1).await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "no report row");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::timeout(Duration::from_secs(20), manager.stop())
        .await
        .expect("stop returns although settle cannot");
    env.store.heal();
    assert!(env.store.get_report(s.id, 1).await.is_ok(), "report row");
    let row = env.store.get_session(s.id).await.unwrap();
    // Documented give-up: a store that never answers cannot be written, so
    // the row stays as it was. FIXME(F11): the orphan reaper settles such
    // rows `failed` once the owner's lease has expired.
    assert_eq!(row.status, SessionStatus::Running);
}

#[tokio::test]
async fn a_settle_that_hangs_once_is_abandoned_and_tried_again() {
    let env = Env::new().await;
    env.store
        .fault_times(StoreOp::SettleSession, StoreFault::Hang, 1);
    let manager = env
        .builder(writing(&[("report.md", "# R\n")]))
        .settle_timeout(Duration::from_secs(2))
        .build();
    let row = one(&env, &manager).await;
    assert_eq!(row.status, SessionStatus::Completed);
    assert_eq!(env.store.count(StoreOp::SettleSession), 2);
    env.assert_safe().await;
    manager.stop().await;
}

#[tokio::test]
async fn a_report_row_write_that_hangs_once_is_abandoned_and_tried_again() {
    let env = Env::new().await;
    env.store
        .fault_times(StoreOp::CreateReport, StoreFault::Hang, 1);
    let manager = env
        .builder(writing(&[("report.md", "# R\n")]))
        .report_timeout(Duration::from_secs(2))
        .build();
    let row = one(&env, &manager).await;
    assert_eq!(row.status, SessionStatus::Completed);
    assert!(env
        .store
        .get_report(row.id, 1)
        .await
        .unwrap()
        .markdown_key
        .is_some());
    env.assert_safe().await;
    manager.stop().await;
}

#[tokio::test]
async fn awaiting_user_keeps_the_row_running_without_ended_at() {
    let env = Env::new().await;
    let manager = env
        .builder(ScriptRunner::new(|_, _| async move {
            Ok(RunOutcome::new(exit::AWAITING_USER, Counters::default())
                .with_author_finished(false))
        }))
        .build();
    let row = one(&env, &manager).await;
    assert_eq!(row.status, SessionStatus::Running);
    assert_eq!(row.ended_at, None);
    assert_eq!(row.exit_reason.as_deref(), Some(exit::AWAITING_USER));
    env.assert_safe().await;
    manager.stop().await;
}

#[tokio::test]
async fn a_replaced_exit_reason_is_the_last_word_of_the_log() {
    let env = Env::new().await;
    // Completes without writing report.md.
    let manager = env
        .builder(ScriptRunner::new(|ctx, _| async move {
            write_files(&ctx, &[("notes.txt", "n")]);
            // As a CommandRunner says of an agent that left no report.md.
            Ok(RunOutcome::completed(Counters::default()).with_author_finished(false))
        }))
        .build();
    let row = one(&env, &manager).await;
    assert_eq!(row.exit_reason.as_deref(), Some(exit::REPORT_AUTHOR_FAILED));
    let notes = crate::support::notes(&env, row.id).await;
    let last = notes.last().expect("a note");
    assert!(
        last.contains("returned completed") && last.contains("report_author_failed"),
        "{notes:?}"
    );
    manager.stop().await;
}

/// A run whose start cannot be recorded (the store fails `mark_started`
/// past the report bound) calls no runner and gives its claim back: the
/// session is queued again, writes no report or settlement, and runs once
/// when the store heals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_that_cannot_be_recorded_calls_no_runner_and_queues_the_session_again() {
    let env = Env::new().await;
    env.store.fault(StoreOp::MarkStarted, StoreFault::Fail);
    let runner = writing(&[("report.md", "# ran\n")]);
    let seen = Arc::clone(&runner.seen);
    let manager = env
        .builder(runner)
        .report_timeout(Duration::from_millis(200))
        .cancel_poll(Duration::from_millis(50))
        .build();
    let s = manager.create(env.request("go")).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while env.store.count(StoreOp::Release) == 0 {
        assert!(tokio::time::Instant::now() < deadline, "never given back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(seen.lock().unwrap().is_empty(), "no runner was called");
    let reports = env.store.all_reports(s.id).await.unwrap();
    assert!(reports.is_empty(), "{reports:?}");
    assert_eq!(env.store.count(StoreOp::SettleSession), 0);
    let row = env.store.get_session(s.id).await.unwrap();
    assert_eq!(row.status, SessionStatus::Running, "{row:?}");
    assert!(row.started_at.is_none(), "{row:?}");

    env.store.heal();
    let row = settled(&manager, &s).await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    assert!(row.started_at.is_some());
    assert_eq!(seen.lock().unwrap().len(), 1, "one runner call");
    assert_eq!(env.store.all_reports(s.id).await.unwrap().len(), 1);
    manager.stop().await;
    env.assert_safe().await;
}

/// A turn, a tool call and a usage report, as an agent logs them.
async fn log_work(ctx: &korvus_runner::RunContext) {
    use korvus_log::{Event, EventKind};
    ctx.log
        .append(&[
            Event::new(EventKind::TurnStart { turn: 1 }),
            Event::new(EventKind::ToolCall {
                call_id: "c1".into(),
                tool: "df".into(),
                input: serde_json::Value::Null,
            }),
            Event::new(EventKind::ToolResult {
                call_id: "c1".into(),
                ok: true,
                output: serde_json::Value::Null,
            }),
            Event::new(EventKind::Usage {
                input_tokens: 7,
                output_tokens: 3,
            }),
        ])
        .await
        .unwrap();
}

fn worked() -> Counters {
    Counters {
        turns: 1,
        tool_calls: 1,
        input_tokens: 7,
        output_tokens: 3,
    }
}

/// Every ending keeps what the run used: a failed run (the runner told
/// nothing), a stalled one, an agent error, a cancelled one whose runner
/// returned an error, and one that ignored its cancellation and was
/// dropped — the row and the report row carry the counters of its log.
#[tokio::test]
async fn every_ending_keeps_what_the_run_used() {
    let endings: [(&str, Option<&str>); 3] = [
        ("exit_code_3", Some("exit_code_3")),
        ("stalled", Some("stalled")),
        ("agent_error", Some("agent_error")),
    ];
    for (reason, expected) in endings {
        let env = Env::new().await;
        let manager = env
            .builder(ScriptRunner::new(move |ctx, _| async move {
                log_work(&ctx).await;
                Err(RunError::msg("the agent failed").with_exit_reason(reason))
            }))
            .build();
        let row = one(&env, &manager).await;
        assert_eq!(row.status, SessionStatus::Failed);
        assert_eq!(row.exit_reason.as_deref(), expected);
        assert_eq!(row.counters, worked(), "{reason}");
        assert_eq!(
            env.store.get_report(row.id, 1).await.unwrap().counters,
            worked()
        );
        manager.stop().await;
    }

    // Cancelled: one runner fails when its token fires, one never returns.
    for ignores in [false, true] {
        let env = Env::new().await;
        let manager = env
            .builder(ScriptRunner::new(move |ctx, _| async move {
                log_work(&ctx).await;
                if ignores {
                    std::future::pending::<()>().await;
                }
                ctx.cancel.cancelled().await;
                Err(RunError::msg("cancelled"))
            }))
            .build();
        let s = manager.create(env.request("go")).await.unwrap();
        // Until its work is logged.
        let log = korvus_log::LogId::from_uuid(s.id.as_uuid());
        loop {
            let h = env.logs.open(log, korvus_log::Access::Read).await.unwrap();
            if h.len().await.unwrap() >= 4 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        manager.cancel(s.id).await.unwrap();
        let row = settled(&manager, &s).await;
        assert_eq!(row.status, SessionStatus::Cancelled);
        assert_eq!(row.counters, worked(), "ignores cancel: {ignores}");
        manager.stop().await;
    }

    // A runner that says more than its log (it counted past a cap) wins.
    let env = Env::new().await;
    let manager = env
        .builder(ScriptRunner::new(|ctx, _| async move {
            log_work(&ctx).await;
            Err(RunError::msg("failed").with_counters(Counters {
                turns: 5,
                ..Counters::default()
            }))
        }))
        .build();
    let row = one(&env, &manager).await;
    assert_eq!(
        row.counters,
        Counters {
            turns: 5,
            ..worked()
        }
    );
    manager.stop().await;
}
