//! Sessions waiting for the user (`awaiting_user`): recognisable from the
//! row alone, cancelled by one conditional transition, continued with
//! `send_message`, and exactly one winner when the two race.

use korvus_store::StoreExt as _;
use std::time::Duration;

use futures::StreamExt;
use korvus_runner::{exit, ExitReason, RunOutcome};
use korvus_session::{Manager, SessionError};
use korvus_store::{Counters, Session, SessionStatus};

use crate::support::{settled, write_files, Env, ScriptRunner};

/// A runner that asks the user on its first run and completes when
/// answered, writing a report each time.
fn asks_then_answers() -> ScriptRunner {
    ScriptRunner::new(|ctx, message| async move {
        match message {
            None => {
                write_files(&ctx, &[("report.md", "# Need more\n")]);
                Ok(RunOutcome::new(
                    ExitReason::AWAITING_USER,
                    Counters::default(),
                ))
            }
            Some(answer) => {
                write_files(&ctx, &[("report.md", &format!("# Done: {answer}\n"))]);
                Ok(RunOutcome::completed(Counters::default()))
            }
        }
    })
}

async fn idle(env: &Env, manager: &Manager) -> Session {
    let s = manager.create(env.request("ask me")).await.unwrap();
    let row = settled(manager, &s).await;
    assert!(row.is_idle(), "{row:?}");
    assert_eq!(row.status, SessionStatus::Running);
    assert_eq!(row.exit_reason.as_deref(), Some(exit::AWAITING_USER));
    assert!(row.ended_at.is_none());
    row
}

#[tokio::test]
async fn cancel_of_a_session_waiting_for_the_user_ends_it_without_a_second_report() {
    let env = Env::new().await;
    let manager = env.builder(asks_then_answers()).build();
    let row = idle(&env, &manager).await;
    let cancelled = manager.cancel(row.id).await.unwrap();
    assert_eq!(cancelled.status, SessionStatus::Cancelled);
    assert_eq!(cancelled.exit_reason.as_deref(), Some(exit::CANCELLED));
    assert!(cancelled.ended_at.is_some());
    let reports = env.store.all_reports(row.id).await.unwrap();
    assert_eq!(reports.len(), 1, "the burst's report row is the only one");
    assert!(matches!(
        manager.cancel(row.id).await,
        Err(SessionError::AlreadyEnded { .. })
    ));
    // Another manager (a replica) sees the same row: nothing to do there.
    let other = env.builder(asks_then_answers()).build();
    assert!(matches!(
        other.cancel(row.id).await,
        Err(SessionError::AlreadyEnded { .. })
    ));
    env.assert_safe().await;
    manager.stop().await;
    other.stop().await;
}

#[tokio::test]
async fn a_replica_cancels_a_session_another_left_waiting() {
    let env = Env::new().await;
    let first = env.builder(asks_then_answers()).build();
    let row = idle(&env, &first).await;
    first.stop().await;
    let replica = env.builder(asks_then_answers()).build();
    let cancelled = replica.cancel(row.id).await.unwrap();
    assert_eq!(cancelled.status, SessionStatus::Cancelled);
    replica.stop().await;
}

#[tokio::test]
async fn send_message_continues_a_waiting_session_with_the_next_revision() {
    let env = Env::new().await;
    let manager = env.builder(asks_then_answers()).build();
    let row = idle(&env, &manager).await;
    assert!(matches!(
        manager.send_message(row.id, "  ").await,
        Err(SessionError::MessageRequired)
    ));
    let continued = manager.send_message(row.id, "it is db-1").await.unwrap();
    assert_eq!(continued.status, SessionStatus::Running);
    assert_eq!(continued.revision, 2);
    assert_eq!(continued.exit_reason, None);
    let done = settled(&manager, &continued).await;
    assert_eq!(done.status, SessionStatus::Completed);
    let revisions: Vec<u32> = env
        .store
        .all_reports(row.id)
        .await
        .unwrap()
        .iter()
        .map(|r| r.revision)
        .collect();
    assert_eq!(revisions, [1, 2]);
    // A finished session is reopened, not answered.
    assert!(matches!(
        manager.send_message(row.id, "more?").await,
        Err(SessionError::NotAwaitingUser { .. })
    ));
    env.assert_safe().await;
    manager.stop().await;
}

#[tokio::test]
async fn watch_of_a_waiting_session_ends_after_its_stored_events() {
    let env = Env::new().await;
    let manager = env.builder(asks_then_answers()).build();
    let row = idle(&env, &manager).await;
    let other = env.builder(asks_then_answers()).build();
    let events = tokio::time::timeout(
        Duration::from_secs(10),
        other.watch(row.id).collect::<Vec<_>>(),
    )
    .await
    .expect("the stream ends");
    assert!(events.iter().all(Result::is_ok));
    manager.stop().await;
    other.stop().await;
}

#[tokio::test]
async fn send_message_racing_cancel_has_exactly_one_winner() {
    let env = Env::new().await;
    let manager = env.builder(asks_then_answers()).build();
    for round in 0..200 {
        let row = idle(&env, &manager).await;
        let (sent, cancelled) = tokio::join!(
            manager.send_message(row.id, "answer"),
            manager.cancel(row.id)
        );
        let now = settled(&manager, &row).await;
        match (&sent, &now.status) {
            (Ok(_), SessionStatus::Completed) => {
                // The answer won; the cancel either lost the transition and
                // cancelled nothing that had finished, or reached the new
                // run — which then settles cancelled, not completed.
            }
            (Ok(_), SessionStatus::Cancelled) => {
                assert!(cancelled.is_ok(), "round {round}: {cancelled:?}");
            }
            (Err(SessionError::NotAwaitingUser { .. }), SessionStatus::Cancelled) => {
                assert!(cancelled.is_ok(), "round {round}");
                let reports = env.store.all_reports(row.id).await.unwrap();
                assert_eq!(reports.len(), 1, "round {round}: the loser wrote nothing");
            }
            other => panic!("round {round}: {other:?} / {cancelled:?}"),
        }
    }
    env.assert_safe().await;
    manager.stop().await;
}
