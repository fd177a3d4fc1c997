//! Reopening a finished session: one winner among concurrent reopens, a new
//! revision each time, its own output restored, interrupted turns closed,
//! and the stream reopener told before `reopen` returns.

use korvus_store::StoreExt as _;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use korvus_blob::{BlobKey, BlobStore};
use korvus_log::{Event, EventKind};
use korvus_runner::{exit, RunError, RunOutcome};
use korvus_session::SessionError;
use korvus_store::{Counters, SessionId, SessionStatus, Store};
use korvus_testkit::faults::{StoreFault, StoreOp};

use crate::support::{settled, write_files, writing, Env, ScriptRunner};

#[tokio::test]
async fn eight_concurrent_reopens_have_one_winner_each_round() {
    let env = Env::new().await;
    // Each run waits for the round's reopens to return: a run that ended
    // meanwhile would make the session reopenable again within the round.
    let gate = Arc::new(tokio::sync::Semaphore::new(1));
    let runner = {
        let gate = Arc::clone(&gate);
        ScriptRunner::new(move |ctx, _| {
            let gate = Arc::clone(&gate);
            async move {
                gate.acquire().await.expect("the gate").forget();
                write_files(&ctx, &[("report.md", "# R\n")]);
                Ok(RunOutcome::completed(Counters::default()))
            }
        })
    };
    let manager = env.builder(runner).build();
    let s = manager.create(env.request("first")).await.unwrap();
    settled(&manager, &s).await;
    for round in 0..200u32 {
        let results =
            futures::future::join_all((0..8).map(|_| manager.reopen(s.id, "again"))).await;
        gate.add_permits(1);
        let ok = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(ok, 1, "round {round}: {results:?}");
        for r in &results {
            if let Err(e) = r {
                assert!(matches!(e, SessionError::NotFinished { .. }), "{e:?}");
            }
        }
        settled(&manager, &s).await;
        let reports = env.store.all_reports(s.id).await.unwrap();
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
    // Failing until the report bound passes (a single failure is retried).
    env.store.fault(StoreOp::CreateReport, StoreFault::Fail);
    let manager = env
        .builder(ScriptRunner::new(|ctx, _| async move {
            write_files(&ctx, &[("report.md", "# R\n")]);
            crate::support::write(
                ctx.scratch.as_ref().unwrap(),
                "report.md",
                &format!("# R{}\n", ctx.revision),
            );
            Ok(RunOutcome::completed(Counters::default()))
        }))
        .report_timeout(Duration::from_millis(300))
        .build();
    let s = manager.create(env.request("first")).await.unwrap();
    let first = settled(&manager, &s).await;
    assert_eq!(
        first.exit_reason.as_deref(),
        Some(exit::REPORT_PERSIST_FAILED)
    );
    assert!(env.store.count(StoreOp::CreateReport) > 1, "retried");
    env.store.heal();
    manager.reopen(s.id, "again").await.unwrap();
    settled(&manager, &s).await;
    // Revision 1's dir was kept (its report row failed) and the reopen
    // salvaged it first, into revision 1's own row; the reopened run is
    // revision 2, never revision 1 again.
    let reports = env.store.all_reports(s.id).await.unwrap();
    let revisions: Vec<(u32, bool)> = reports
        .iter()
        .map(|r| (r.revision, r.salvaged_from.is_some()))
        .collect();
    assert_eq!(
        revisions,
        [(1, true), (2, false)],
        "revision 1's key holds bytes a row describes: {reports:?}"
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
                crate::support::write(&dir, "report.md", "# R1\n");
                crate::support::write(&dir, "data/same.txt", "same");
                crate::support::write(&dir, "data/changed.txt", "v1");
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
                crate::support::write(&dir, "data/changed.txt", "v2");
                crate::support::write(&dir, "report.md", "# R2\n");
            }
        }
        Ok(RunOutcome::completed(Counters::default()))
    });
    let manager = env.builder(runner).build();
    let s = manager.create(env.request("first")).await.unwrap();
    settled(&manager, &s).await;
    let first = env.store.all_session_artifacts(s.id).await.unwrap();
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
    let all = env.store.all_session_artifacts(s.id).await.unwrap();
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
    let runner =
        ScriptRunner::new(|ctx, msg| async move {
            match msg {
                None => {
                    write_files(&ctx, &[("report.md", "# R1\n")]);
                    Ok(RunOutcome::completed(Counters::default()))
                }
                // The author phase fails; report.md is the restored r1.
                Some(_) => Ok(RunOutcome::new(exit::COMPLETED, Counters::default())
                    .with_author_finished(false)),
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
    // The prompt is logged first, as a user message.
    assert!(
        matches!(kinds[0], EventKind::Message { role: korvus_log::Role::User, text } if text == "first")
    );
    let kinds = &kinds[1..];
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
        .builder(writing(&[("report.md", "# R\n")]))
        .stream_reopener(latch.clone())
        .build();
    let s = manager.create(env.request("first")).await.unwrap();
    settled(&manager, &s).await;
    assert!(!latch.0.load(Ordering::SeqCst));
    manager.reopen(s.id, "more").await.unwrap();
    assert!(latch.0.load(Ordering::SeqCst));
    manager.stop().await;
}

#[tokio::test]
async fn a_resume_that_never_touches_the_restored_report_authored_nothing() {
    let env = Env::new().await;
    let manager = env
        .builder(ScriptRunner::new(|ctx, message| async move {
            match message.as_deref() {
                None => write_files(&ctx, &[("report.md", "# R1\n")]),
                // Claims success but leaves the restored report as it is.
                Some("idle") => {}
                // Writes the very same text again: that is authoring.
                Some(_) => write_files(&ctx, &[("report.md", "# R1\n")]),
            }
            Ok(RunOutcome::completed(Counters::default()))
        }))
        .build();
    let s = manager.create(env.request("first")).await.unwrap();
    settled(&manager, &s).await;
    manager.reopen(s.id, "idle").await.unwrap();
    let row = settled(&manager, &s).await;
    assert_eq!(row.status, SessionStatus::Failed);
    assert_eq!(row.exit_reason.as_deref(), Some(exit::REPORT_AUTHOR_FAILED));
    assert_eq!(
        env.store.get_report(s.id, 2).await.unwrap().markdown_key,
        None
    );

    manager.reopen(s.id, "write it again").await.unwrap();
    let row = settled(&manager, &s).await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    let r1 = env.store.get_report(s.id, 1).await.unwrap();
    let r3 = env.store.get_report(s.id, 3).await.unwrap();
    assert_eq!(
        r3.markdown_key, r1.markdown_key,
        "unchanged text keeps its key"
    );
    env.assert_safe().await;
    manager.stop().await;
}
