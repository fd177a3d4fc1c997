//! Retention: [`Store::delete_session`] removes a finished session and its
//! rows in one conditional step, refuses anything else, and loses to (or
//! beats) a racing reopen cleanly.

use futures::future::join;
use korvus_store::{
    constraint, exit_reason, ContextRef, ContinueFrom, Entity, Session, SessionStatus, Store,
    StoreError, StoreExt as _,
};

use super::{incident, new_artifact, new_report, session, settlement_at};

/// A session with a report and two artifact rows, settled `completed`.
async fn finished_with_rows(store: &dyn Store, inc: &korvus_store::Incident) -> Session {
    let s = session(store, inc).await;
    store.create_report(new_report(&s, 1)).await.unwrap();
    store
        .create_artifacts(vec![
            new_artifact(&s, "a.txt", 1),
            new_artifact(&s, "b/c.txt", 1),
        ])
        .await
        .unwrap();
    store
        .settle_session(
            s.id,
            settlement_at(SessionStatus::Completed, "completed", s.fence),
        )
        .await
        .unwrap()
}

/// Asserts that nothing of `s` can be read any more.
async fn assert_gone(store: &dyn Store, s: &Session, artifacts: &[korvus_store::ArtifactId]) {
    match store.get_session(s.id).await {
        Err(StoreError::NotFound {
            entity: Entity::Session,
            ..
        }) => {}
        other => panic!("deleted session still reads: {other:?}"),
    }
    assert!(matches!(
        store.get_report(s.id, 1).await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(store.all_reports(s.id).await.unwrap().is_empty());
    assert!(store.all_session_artifacts(s.id).await.unwrap().is_empty());
    assert!(store.get_artifacts(artifacts).await.unwrap().is_empty());
    assert!(store.list_context_refs(s.id).await.unwrap().is_empty());
    assert!(store
        .latest_session_artifacts(s.id)
        .await
        .unwrap()
        .is_empty());
}

/// A finished session is deleted with its reports, artifact rows and
/// context refs; its neighbours are untouched; a second delete is
/// `NotFound`; the incident's `seq` numbers are not reused.
pub async fn delete_session_removes_a_finished_session_and_its_rows(store: &dyn Store) {
    let inc = incident(store).await;
    let producer = finished_with_rows(store, &inc).await;
    let produced = store.all_session_artifacts(producer.id).await.unwrap();
    let s = session(store, &inc).await;
    store
        .insert_context_refs(
            s.id,
            &[ContextRef {
                artifact_id: produced[0].id,
                role: "input".into(),
            }],
        )
        .await
        .unwrap();
    store.create_report(new_report(&s, 1)).await.unwrap();
    store
        .create_artifacts(vec![new_artifact(&s, "out.txt", 1)])
        .await
        .unwrap();
    let s = store
        .settle_session(
            s.id,
            settlement_at(SessionStatus::Failed, "agent_error", s.fence),
        )
        .await
        .unwrap();
    let own: Vec<_> = store
        .all_session_artifacts(s.id)
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.id)
        .collect();
    let neighbour = finished_with_rows(store, &inc).await;
    let neighbour_artifacts = store.all_session_artifacts(neighbour.id).await.unwrap();

    store.delete_session(s.id, s.fence).await.expect("delete");
    assert_gone(store, &s, &own).await;
    assert!(matches!(
        store.delete_session(s.id, s.fence).await,
        Err(StoreError::NotFound { .. })
    ));

    // The producer (whose artifact it inherited) and the neighbour are whole.
    assert_eq!(store.get_session(neighbour.id).await.unwrap(), neighbour);
    assert!(store.get_report(neighbour.id, 1).await.is_ok());
    assert_eq!(
        store.all_session_artifacts(neighbour.id).await.unwrap(),
        neighbour_artifacts
    );
    assert_eq!(
        store.all_session_artifacts(producer.id).await.unwrap(),
        produced
    );
    let listed: Vec<_> = store
        .all_sessions(inc.id)
        .await
        .unwrap()
        .into_iter()
        .map(|x| x.id)
        .collect();
    assert_eq!(listed, vec![producer.id, neighbour.id]);

    // Nothing inherits from the producer any more: it can go too.
    store
        .delete_session(producer.id, producer.fence)
        .await
        .unwrap();
    let next = session(store, &inc).await;
    assert_eq!(next.seq, 4, "seq numbers are never reused");
}

/// Deleting the newest session, then every session of an incident, hands
/// out no `seq` twice and makes no second `initial` session.
pub async fn delete_session_never_reuses_a_seq(store: &dyn Store) {
    let inc = incident(store).await;
    let first = finished_with_rows(store, &inc).await;
    let newest = finished_with_rows(store, &inc).await;
    store.delete_session(newest.id, newest.fence).await.unwrap();
    let next = finished_with_rows(store, &inc).await;
    assert_eq!(next.seq, 3, "the newest pruned seq is not handed out again");
    for s in [first, next] {
        store.delete_session(s.id, s.fence).await.unwrap();
    }
    assert!(store.all_sessions(inc.id).await.unwrap().is_empty());
    let after_all = session(store, &inc).await;
    assert_eq!(after_all.seq, 4);
    assert_eq!(after_all.kind, korvus_store::SessionKind::FollowUp);
}

/// A running, queued or idle row is `NotFinished`, a stale fence is
/// `Fenced`, a session whose artifact another session inherited is
/// `Constraint`; nothing is deleted in any of these cases.
pub async fn delete_session_refuses_unfinished_stale_and_inherited_rows(store: &dyn Store) {
    let inc = incident(store).await;
    let running = session(store, &inc).await;
    assert!(matches!(
        store.delete_session(running.id, running.fence).await,
        Err(StoreError::NotFinished { session }) if session == running.id
    ));
    let idle = store
        .settle_session(
            running.id,
            settlement_at(
                SessionStatus::Running,
                exit_reason::AWAITING_USER,
                running.fence,
            ),
        )
        .await
        .unwrap();
    assert!(matches!(
        store.delete_session(idle.id, idle.fence).await,
        Err(StoreError::NotFinished { .. })
    ));
    assert_eq!(store.get_session(idle.id).await.unwrap(), idle);

    // Finished, reopened and finished again: the first run's fence is stale.
    let s = finished_with_rows(store, &inc).await;
    let again = store
        .continue_session(s.id, ContinueFrom::Terminal, None)
        .await
        .unwrap();
    let again = store
        .settle_session(
            again.id,
            settlement_at(SessionStatus::Completed, "completed", again.fence),
        )
        .await
        .unwrap();
    match store.delete_session(s.id, s.fence).await {
        Err(StoreError::Fenced {
            presented, current, ..
        }) => assert_eq!((presented, current), (s.fence, again.fence)),
        other => panic!("expected Fenced, got {other:?}"),
    }
    assert_eq!(store.get_session(s.id).await.unwrap(), again);

    // Inherited: refused until the inheritor is gone.
    let produced = store.all_session_artifacts(s.id).await.unwrap();
    let heir = session(store, &inc).await;
    store
        .insert_context_refs(
            heir.id,
            &[ContextRef {
                artifact_id: produced[1].id,
                role: "input".into(),
            }],
        )
        .await
        .unwrap();
    match store.delete_session(again.id, again.fence).await {
        Err(StoreError::Constraint { name }) => {
            assert_eq!(name, constraint::CONTEXT_REFS_ARTIFACT_FK);
        }
        other => panic!("expected Constraint, got {other:?}"),
    }
    assert_eq!(store.get_session(s.id).await.unwrap(), again);
    assert_eq!(store.all_session_artifacts(s.id).await.unwrap(), produced);
    assert!(store.get_report(s.id, 1).await.is_ok());
    let heir = store
        .settle_session(
            heir.id,
            settlement_at(SessionStatus::Cancelled, "cancelled", heir.fence),
        )
        .await
        .unwrap();
    store.delete_session(heir.id, heir.fence).await.unwrap();
    store.delete_session(again.id, again.fence).await.unwrap();
    let ids: Vec<_> = produced.iter().map(|a| a.id).collect();
    assert_gone(store, &again, &ids).await;
}

/// A delete racing a reopen of the same finished session: exactly one
/// wins. Either the reopen won (the delete is `Fenced` and the session
/// reads whole, running) or the delete did (the reopen is `NotFound` and
/// nothing of the session reads) — never half.
pub async fn a_reopen_racing_a_delete_wins_or_finds_nothing(store: &dyn Store) {
    let inc = incident(store).await;
    let (mut reopens, mut deletes) = (0, 0);
    for _ in 0..20 {
        let s = finished_with_rows(store, &inc).await;
        let artifacts = store.all_session_artifacts(s.id).await.unwrap();
        let (deleted, reopened) = join(
            store.delete_session(s.id, s.fence),
            store.continue_session(s.id, ContinueFrom::Terminal, None),
        )
        .await;
        match (deleted, reopened) {
            (Err(StoreError::Fenced { .. }), Ok(row)) => {
                reopens += 1;
                assert_eq!(row.status, SessionStatus::Running);
                assert_eq!(store.get_session(s.id).await.unwrap(), row);
                assert!(store.get_report(s.id, 1).await.is_ok());
                assert_eq!(store.all_session_artifacts(s.id).await.unwrap(), artifacts);
            }
            (Ok(()), Err(StoreError::NotFound { .. })) => {
                deletes += 1;
                let ids: Vec<_> = artifacts.iter().map(|a| a.id).collect();
                assert_gone(store, &s, &ids).await;
            }
            other => panic!("a delete racing a reopen must have one clean winner: {other:?}"),
        }
    }
    assert_eq!(reopens + deletes, 20);
}
