//! Cancel requests: recorded by any replica, naming the fence of the run
//! they target, polled by the manager that runs it.

use korvus_store::{ContinueFrom, CoordinatedStore, SessionId, SessionStatus, StoreError};

use crate::store::{incident, session, settlement_at};

/// A request marks the running session's current run and is listed with
/// its fence until the session settles; it is idempotent, changes nothing
/// on a terminal session, and never reaches the run a reopen starts.
pub async fn a_cancel_request_names_the_run_it_targets(store: &dyn CoordinatedStore) {
    let inc = incident(store).await;
    let s = session(store, &inc).await;
    let quiet = session(store, &inc).await;
    assert!(!s.cancel_requested);
    let requested = store.request_cancel(s.id).await.unwrap();
    assert!(requested.cancel_requested);
    assert_eq!(requested.status, SessionStatus::Running);
    assert_eq!(
        store.request_cancel(s.id).await.unwrap(),
        requested,
        "idempotent"
    );
    let listed = store.cancel_requests().await.unwrap();
    assert!(listed.contains(&(s.id, 1)), "{listed:?}");
    assert!(!listed.iter().any(|(id, _)| *id == quiet.id));

    // Settled: no longer listed; a request on a terminal row changes nothing.
    let done = store
        .settle_session(
            s.id,
            settlement_at(SessionStatus::Cancelled, "cancelled", 1),
        )
        .await
        .unwrap();
    assert!(!listed_now(store, s.id).await);
    let again = store.request_cancel(s.id).await.unwrap();
    assert_eq!(again.status, SessionStatus::Cancelled);
    assert_eq!(again.ended_at, done.ended_at);

    // The next run has another fence: the old request does not reach it.
    let reopened = store
        .continue_session(s.id, ContinueFrom::Terminal, None)
        .await
        .unwrap();
    assert!(!reopened.cancel_requested);
    assert!(!listed_now(store, s.id).await);
    let requested = store.request_cancel(s.id).await.unwrap();
    assert!(requested.cancel_requested);
    assert!(store
        .cancel_requests()
        .await
        .unwrap()
        .contains(&(s.id, reopened.fence)));

    assert!(matches!(
        store.request_cancel(SessionId::new()).await,
        Err(StoreError::NotFound { .. })
    ));
}

async fn listed_now(store: &dyn CoordinatedStore, id: SessionId) -> bool {
    store
        .cancel_requests()
        .await
        .unwrap()
        .iter()
        .any(|(s, _)| *s == id)
}
