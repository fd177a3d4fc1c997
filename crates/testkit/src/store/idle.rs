//! Idle sessions — `running` with exit reason `awaiting_user` or
//! `budget_reached` ([`exit_reason::IDLE`]) — and the two conditional
//! transitions out of idle: cancel and resume.

use korvus_store::{
    exit_reason, ContinueFrom, Entity, Session, SessionId, SessionStatus, Store, StoreError,
};

use super::{incident, session, settlement};

/// A fresh session settled idle: running, `awaiting_user`, with counters.
async fn idle_session(store: &dyn Store) -> Session {
    idle_for(store, exit_reason::AWAITING_USER).await
}

/// A fresh session settled idle with `reason` (one of
/// [`exit_reason::IDLE`]): running, with counters, no run active.
async fn idle_for(store: &dyn Store, reason: &str) -> Session {
    let inc = incident(store).await;
    let s = session(store, &inc).await;
    let idle = store
        .settle_session(s.id, settlement(SessionStatus::Running, reason))
        .await
        .expect("settle idle");
    assert!(idle.is_idle(), "{idle:?}");
    assert!(!idle.is_active(), "{idle:?}");
    assert_eq!(idle.exit_reason.as_deref(), Some(reason));
    idle
}

fn assert_not_idle(result: Result<Session, StoreError>, id: SessionId) {
    match result {
        Err(StoreError::NotIdle { session }) => assert_eq!(session, id),
        other => panic!("expected NotIdle for {id}, got {other:?}"),
    }
}

/// Cancelling an idle session (waiting for the user, or paused at its
/// budget) makes it `cancelled` / `cancelled` with an `ended_at`, keeping
/// counters and revision.
pub async fn cancel_idle_session_cancels_an_idle_row(store: &dyn Store) {
    for reason in exit_reason::IDLE {
        cancel_one_idle_row(store, reason).await;
    }
}

async fn cancel_one_idle_row(store: &dyn Store, reason: &str) {
    let idle = idle_for(store, reason).await;
    let cancelled = store.cancel_idle_session(idle.id).await.unwrap();
    assert_eq!(cancelled.status, SessionStatus::Cancelled);
    assert_eq!(
        cancelled.exit_reason.as_deref(),
        Some(exit_reason::CANCELLED)
    );
    assert!(cancelled.ended_at.is_some(), "cancel sets ended_at");
    assert_eq!(cancelled.counters, idle.counters, "counters are kept");
    assert_eq!(cancelled.revision, idle.revision, "revision is kept");
    assert!(!cancelled.is_idle());
    assert_eq!(store.get_session(idle.id).await.unwrap(), cancelled);
}

/// Resuming an idle session (waiting for the user, or paused at its
/// budget) makes it active: running, no exit reason, the next revision,
/// counters kept.
pub async fn continue_from_idle_resumes_an_idle_row(store: &dyn Store) {
    for reason in exit_reason::IDLE {
        continue_one_idle_row(store, reason).await;
    }
}

async fn continue_one_idle_row(store: &dyn Store, reason: &str) {
    let idle = idle_for(store, reason).await;
    let resumed = store
        .continue_session(idle.id, ContinueFrom::Idle, None)
        .await
        .unwrap();
    assert_eq!(resumed.status, SessionStatus::Running);
    assert_eq!(resumed.exit_reason, None);
    assert_eq!(resumed.ended_at, None);
    assert_eq!(resumed.revision, idle.revision + 1);
    assert_eq!(resumed.counters, idle.counters, "counters are kept");
    assert!(!resumed.is_idle());
    assert_eq!(store.get_session(idle.id).await.unwrap(), resumed);
}

/// Neither transition moves a terminal row or an active one (running, no
/// exit reason): `NotIdle`, nothing written. An unknown id is `NotFound`.
pub async fn idle_transitions_refuse_terminal_and_active_rows(store: &dyn Store) {
    let inc = incident(store).await;
    let active = session(store, &inc).await;
    let terminal = session(store, &inc).await;
    let terminal = store
        .settle_session(
            terminal.id,
            settlement(SessionStatus::Completed, exit_reason::AWAITING_USER),
        )
        .await
        .unwrap();
    for row in [&active, &terminal] {
        assert_not_idle(store.cancel_idle_session(row.id).await, row.id);
        assert_not_idle(
            store
                .continue_session(row.id, ContinueFrom::Idle, None)
                .await,
            row.id,
        );
        assert_eq!(
            &store.get_session(row.id).await.unwrap(),
            row,
            "nothing written"
        );
    }
    let unknown = SessionId::new();
    for result in [
        store.cancel_idle_session(unknown).await,
        store
            .continue_session(unknown, ContinueFrom::Idle, None)
            .await,
    ] {
        match result {
            Err(StoreError::NotFound { entity, .. }) => assert_eq!(entity, Entity::Session),
            other => panic!("unknown session: expected NotFound, got {other:?}"),
        }
    }
}

/// Cancel and resume racing on one idle row, 50 rounds: exactly one wins
/// each round, the loser gets `NotIdle`, and the row is the winner's.
pub async fn cancel_and_resume_of_an_idle_row_have_exactly_one_winner(store: &dyn Store) {
    for round in 0..50 {
        let idle = idle_session(store).await;
        let (cancel, resume) = futures::join!(
            store.cancel_idle_session(idle.id),
            store.continue_session(idle.id, ContinueFrom::Idle, None)
        );
        let row = store.get_session(idle.id).await.unwrap();
        match (cancel, resume) {
            (Ok(cancelled), Err(loser)) => {
                assert_not_idle(Err(loser), idle.id);
                assert_eq!(row, cancelled, "round {round}: the cancel's row");
                assert_eq!(row.status, SessionStatus::Cancelled);
                assert_eq!(row.revision, idle.revision);
            }
            (Err(loser), Ok(resumed)) => {
                assert_not_idle(Err(loser), idle.id);
                assert_eq!(row, resumed, "round {round}: the resume's row");
                assert_eq!(row.status, SessionStatus::Running);
                assert_eq!(row.exit_reason, None);
                assert_eq!(row.revision, idle.revision + 1);
            }
            other => panic!("round {round}: expected exactly one winner, got {other:?}"),
        }
    }
}
