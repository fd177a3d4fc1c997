//! Session rows: per-incident seqs, the insert rules, settling, and the
//! single-winner reopen.

use futures::future::join_all;
use korvus_store::StoreExt as _;
use korvus_store::{
    Admission, ContinueFrom, Counters, Entity, Priority, Session, SessionId, SessionKind,
    SessionStatus, Store, StoreError,
};

use super::{incident, new_session, session, settlement, settlement_at};

/// 100 concurrent creates in one incident get seqs 1..=100, each exactly once.
pub async fn concurrent_creates_get_seqs_one_to_hundred(store: &dyn Store) {
    let inc = incident(store).await;
    let creates = (0..100).map(|i| store.create_session(new_session(&inc, &format!("p{i}"))));
    let results = join_all(creates).await;
    let mut seqs: Vec<u32> = results
        .into_iter()
        .map(|r| r.expect("concurrent create_session").seq)
        .collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=100).collect::<Vec<u32>>());
    let listed: Vec<u32> = store
        .all_sessions(inc.id)
        .await
        .unwrap()
        .iter()
        .map(|s| s.seq)
        .collect();
    assert_eq!(
        listed,
        (1..=100).collect::<Vec<u32>>(),
        "listed in seq order"
    );
}

/// A new session is born running at revision 1 with its fields intact; a
/// duplicate id is a conflict; seqs are per incident; the store decides the
/// kind from the seq (1: `initial`, later: `follow_up`).
pub async fn session_insert_rules(store: &dyn Store) {
    let inc = incident(store).await;
    let other = incident(store).await;
    let new = new_session(&inc, "why is the disk full? ünïcödé");
    let s = store.create_session(new.clone()).await.unwrap();
    assert_eq!(s.id, new.id);
    assert_eq!(s.seq, 1);
    assert_eq!(s.kind, SessionKind::Initial);
    assert_eq!(s.status, SessionStatus::Running);
    assert_eq!(s.prompt, new.prompt);
    assert_eq!(s.workspace_ref, inc.workspace);
    assert_eq!(s.revision, 1);
    assert_eq!(s.exit_reason, None);
    assert_eq!(s.ended_at, None);
    assert_eq!(s.counters, Counters::default());
    assert_eq!(store.get_session(s.id).await.unwrap(), s);
    match store.create_session(new).await {
        Err(StoreError::Conflict { entity, .. }) => assert_eq!(entity, Entity::Session),
        other => panic!("duplicate session id: expected Conflict, got {other:?}"),
    }
    let first_of_other = session(store, &other).await;
    assert_eq!(first_of_other.seq, 1, "seq is per incident");
    assert_eq!(first_of_other.kind, SessionKind::Initial);
    let second = session(store, &inc).await;
    assert_eq!(second.seq, 2);
    assert_eq!(second.kind, SessionKind::FollowUp);
    assert_eq!(
        store.get_session(second.id).await.unwrap().kind,
        SessionKind::FollowUp
    );
}

/// Two concurrent first creates in a fresh incident, 100 rounds: exactly
/// one is `initial` (the store decides the kind inside the insert, from the
/// seq it assigns), and the seqs are 1 and 2.
pub async fn concurrent_first_creates_have_one_initial(store: &dyn Store) {
    for round in 0..100 {
        let inc = incident(store).await;
        let (a, b) = futures::join!(
            store.create_session(new_session(&inc, "a")),
            store.create_session(new_session(&inc, "b"))
        );
        let (a, b) = (a.unwrap(), b.unwrap());
        let initial = [&a, &b]
            .iter()
            .filter(|s| s.kind == SessionKind::Initial)
            .count();
        assert_eq!(initial, 1, "round {round}: {a:?} {b:?}");
        let mut seqs = [a.seq, b.seq];
        seqs.sort_unstable();
        assert_eq!(seqs, [1, 2], "round {round}");
        for s in [&a, &b] {
            let want = if s.seq == 1 {
                SessionKind::Initial
            } else {
                SessionKind::FollowUp
            };
            assert_eq!(s.kind, want, "round {round}");
            assert_eq!(store.get_session(s.id).await.unwrap().kind, want);
        }
    }
}

/// Settling to a terminal status sets `ended_at` and copies the outcome;
/// a reopen clears `ended_at`, and an idle settlement sets none.
pub async fn settle_sets_and_clears_ended_at(store: &dyn Store) {
    let inc = incident(store).await;
    for status in SessionStatus::TERMINAL {
        let s = session(store, &inc).await;
        let settled = store
            .settle_session(s.id, settlement(*status, status.as_str()))
            .await
            .unwrap();
        assert_eq!(settled.status, *status);
        assert!(settled.ended_at.is_some(), "{status} sets ended_at");
        assert_eq!(settled.exit_reason.as_deref(), Some(status.as_str()));
        assert_eq!(settled.counters.tool_calls, 5);
        assert_eq!(store.get_session(s.id).await.unwrap(), settled);
        // A reopen clears it again.
        let reopened = store
            .continue_session(s.id, ContinueFrom::Terminal, None)
            .await
            .unwrap();
        assert_eq!(reopened.ended_at, None, "a reopen clears ended_at");
    }
    let s = session(store, &inc).await;
    let waiting = store
        .settle_session(s.id, settlement(SessionStatus::Running, "awaiting_user"))
        .await
        .unwrap();
    assert_eq!(waiting.status, SessionStatus::Running);
    assert_eq!(
        waiting.ended_at, None,
        "an idle settlement sets no ended_at"
    );
    assert_eq!(waiting.exit_reason.as_deref(), Some("awaiting_user"));
}

/// Of 16 concurrent reopens of one terminal session exactly one wins; the
/// others get `NotFinished`; the winner's row is running at revision 2.
pub async fn reopen_has_exactly_one_winner(store: &dyn Store) {
    let inc = incident(store).await;
    let s = session(store, &inc).await;
    store
        .settle_session(s.id, settlement(SessionStatus::Completed, "completed"))
        .await
        .unwrap();
    let results =
        join_all((0..16).map(|_| store.continue_session(s.id, ContinueFrom::Terminal, None))).await;
    let winners: Vec<&Session> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(winners.len(), 1, "exactly one reopen wins: {results:?}");
    for r in &results {
        if let Err(e) = r {
            assert!(
                matches!(e, StoreError::NotFinished { session } if *session == s.id),
                "loser gets NotFinished, got {e:?}"
            );
        }
    }
    let row = store.get_session(s.id).await.unwrap();
    assert_eq!(row.status, SessionStatus::Running);
    assert_eq!(row.ended_at, None);
    assert_eq!(row.exit_reason, None);
    assert_eq!(row.revision, 2);
    assert_eq!(&row, winners[0]);
}

/// Reopening a running session is `NotFinished` and writes nothing; failed
/// and cancelled sessions reopen.
pub async fn reopen_of_a_running_session_is_not_finished(store: &dyn Store) {
    let inc = incident(store).await;
    let s = session(store, &inc).await;
    assert!(matches!(
        store
            .continue_session(s.id, ContinueFrom::Terminal, None)
            .await,
        Err(StoreError::NotFinished { .. })
    ));
    assert_eq!(store.get_session(s.id).await.unwrap(), s);
    for status in [SessionStatus::Failed, SessionStatus::Cancelled] {
        let fence = store.get_session(s.id).await.unwrap().fence;
        store
            .settle_session(s.id, settlement_at(status, "x", fence))
            .await
            .unwrap();
        let reopened = store
            .continue_session(s.id, ContinueFrom::Terminal, None)
            .await
            .unwrap();
        assert_eq!(reopened.status, SessionStatus::Running);
    }
    assert_eq!(store.get_session(s.id).await.unwrap().revision, 3);
}

/// The fence is 1 at create; reopen and the resume of an idle session each
/// start a new run and increment it; settling and cancelling an idle row
/// keep it.
pub async fn each_new_run_increments_the_fence(store: &dyn Store) {
    let inc = incident(store).await;
    let s = session(store, &inc).await;
    assert_eq!(s.fence, 1);
    let done = store
        .settle_session(s.id, settlement(SessionStatus::Completed, "completed"))
        .await
        .unwrap();
    assert_eq!(done.fence, 1, "settling keeps the fence");
    let reopened = store
        .continue_session(s.id, ContinueFrom::Terminal, None)
        .await
        .unwrap();
    assert_eq!(reopened.fence, 2);
    let idle = store
        .settle_session(
            s.id,
            settlement_at(SessionStatus::Running, "awaiting_user", 2),
        )
        .await
        .unwrap();
    assert_eq!(idle.fence, 2);
    let resumed = store
        .continue_session(s.id, ContinueFrom::Idle, None)
        .await
        .unwrap();
    assert_eq!(resumed.fence, 3);
    store
        .settle_session(
            s.id,
            settlement_at(SessionStatus::Running, "awaiting_user", 3),
        )
        .await
        .unwrap();
    let cancelled = store.cancel_idle_session(s.id).await.unwrap();
    assert_eq!(cancelled.fence, 3, "cancelling an idle row starts no run");
    assert_eq!(store.get_session(s.id).await.unwrap().fence, 3);
}

/// A run superseded by a reopen settles nothing: its settlement presents
/// the old fence, gets `Fenced` (permanent) and leaves the new run's row
/// exactly as it was; the current fence still settles.
pub async fn a_stale_fence_settles_nothing(store: &dyn Store) {
    let inc = incident(store).await;
    let s = session(store, &inc).await;
    store
        .settle_session(s.id, settlement(SessionStatus::Cancelled, "cancelled"))
        .await
        .unwrap();
    let reopened = store
        .continue_session(s.id, ContinueFrom::Terminal, None)
        .await
        .unwrap();
    let late = store
        .settle_session(s.id, settlement(SessionStatus::Failed, "owner_lost"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            late,
            StoreError::Fenced { session, presented: 1, current: 2 } if session == s.id
        ),
        "{late:?}"
    );
    assert!(!late.is_transient());
    assert_eq!(
        store.get_session(s.id).await.unwrap(),
        reopened,
        "untouched"
    );
    let settled = store
        .settle_session(
            s.id,
            settlement_at(SessionStatus::Completed, "completed", reopened.fence),
        )
        .await
        .unwrap();
    assert_eq!(settled.status, SessionStatus::Completed);
    assert!(matches!(
        store
            .settle_session(SessionId::new(), settlement(SessionStatus::Failed, "x"))
            .await,
        Err(StoreError::NotFound { .. })
    ));
}

/// A session's admission (pool, priority, queue key, idempotency key)
/// round-trips; a second session of the incident with the same
/// idempotency key is a `Conflict` and writes nothing, in another incident
/// it is fine; a blank pool or key is `InvalidInput`.
pub async fn admission_round_trips_and_idempotency_keys_are_unique(store: &dyn Store) {
    let (inc, other) = (incident(store).await, incident(store).await);
    let admission = Admission {
        pool: "gpu".into(),
        priority: Priority::HIGHEST,
        queue_key: Some("tenant-a".into()),
        idempotency_key: Some("retry-7".into()),
    };
    let mut new = new_session(&inc, "keyed");
    new.admission = admission.clone();
    let s = store.create_session(new).await.unwrap();
    assert_eq!(s.admission, admission);
    assert_eq!(s.started_at, None);
    assert_eq!(store.get_session(s.id).await.unwrap(), s);
    assert_eq!(store.all_sessions(inc.id).await.unwrap(), vec![s.clone()]);
    assert_eq!(session(store, &inc).await.admission, Admission::default());

    let mut again = new_session(&inc, "keyed, again");
    again.admission.idempotency_key = admission.idempotency_key.clone();
    match store.create_session(again.clone()).await {
        Err(StoreError::Conflict { entity, .. }) => assert_eq!(entity, Entity::Session),
        other => panic!("a reused idempotency key: expected Conflict, got {other:?}"),
    }
    assert!(matches!(
        store.get_session(again.id).await,
        Err(StoreError::NotFound { .. })
    ));
    assert_eq!(
        store
            .session_by_idempotency_key(inc.id, "retry-7")
            .await
            .unwrap(),
        Some(s.clone())
    );
    assert_eq!(
        store
            .session_by_idempotency_key(other.id, "retry-7")
            .await
            .unwrap(),
        None
    );
    let mut elsewhere = new_session(&other, "keyed elsewhere");
    elsewhere.admission.idempotency_key = admission.idempotency_key.clone();
    store.create_session(elsewhere).await.unwrap();

    for (pool, key) in [(" ", None), ("gpu", Some("")), ("nul\0", None)] {
        let mut bad = new_session(&inc, "bad admission");
        bad.admission.pool = pool.into();
        bad.admission.queue_key = key.map(Into::into);
        assert!(
            matches!(
                store.create_session(bad).await,
                Err(StoreError::InvalidInput { .. })
            ),
            "pool {pool:?}, key {key:?}"
        );
    }
}

/// A session's runner description is stored as given and read back with
/// the row; one over the limit (or with a NUL) is refused and nothing is
/// written.
pub async fn the_runner_description_round_trips_and_is_bounded(store: &dyn Store) {
    let inc = incident(store).await;
    let mut new = new_session(&inc, "described");
    new.runner = Some(r#"["--agent","/opt/agents/investigate"]"#.to_owned());
    let created = store.create_session(new.clone()).await.unwrap();
    assert_eq!(created.runner, new.runner);
    assert_eq!(
        store.get_session(created.id).await.unwrap().runner,
        new.runner
    );
    let plain = store
        .create_session(new_session(&inc, "undescribed"))
        .await
        .unwrap();
    assert_eq!(store.get_session(plain.id).await.unwrap().runner, None);
    for bad in [
        "x".repeat(korvus_store::validate::MAX_RUNNER_BYTES + 1),
        "a\0b".to_owned(),
    ] {
        let mut new = new_session(&inc, "too long");
        new.runner = Some(bad);
        let id = new.id;
        assert!(matches!(
            store.create_session(new).await,
            Err(StoreError::InvalidInput { .. })
        ));
        assert!(matches!(
            store.get_session(id).await,
            Err(StoreError::NotFound { .. })
        ));
    }
}
