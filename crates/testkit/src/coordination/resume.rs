//! Resumes: a taken-over run sent back to its pool
//! ([`release_for_resume`](korvus_store::Coordination::release_for_resume))
//! waits unowned, is never an orphan, is claimed like a queued row once its
//! backoff has passed — exactly once, with its attempt counted and its
//! start kept — and is not counted as a run in progress of its key.

use std::time::Duration;

use korvus_store::{
    Admission, ContinueFrom, CoordinatedStore, Incident, Lease, OwnerId, Priority, Session,
    SessionStatus, StoreError,
};

use crate::store::{incident, new_session};

fn lease(ttl: Duration) -> Lease {
    Lease {
        owner: OwnerId::new(),
        ttl,
    }
}

/// Queues a session in `pool` under `key`.
async fn queued(store: &dyn CoordinatedStore, inc: &Incident, pool: &str, key: &str) -> Session {
    let mut new = new_session(inc, key);
    new.admission = Admission {
        pool: pool.to_owned(),
        priority: Priority::NORMAL,
        queue_key: Some(key.to_owned()),
        idempotency_key: None,
    };
    store.create_session(new).await.unwrap()
}

/// A started run of `pool` whose owner is gone, taken over by a live
/// lease: what a reaper holds when it decides to resume.
async fn taken_over(store: &dyn CoordinatedStore, inc: &Incident, pool: &str) -> Session {
    let s = queued(store, inc, pool, "k").await;
    let dead = store
        .claim_next(pool, None, lease(Duration::ZERO))
        .await
        .unwrap()
        .expect("the queued row");
    assert_eq!(dead.id, s.id);
    let started = store.mark_started(s.id, dead.fence).await.unwrap();
    let orphans = store.expired_leases().await.unwrap();
    assert!(orphans.contains(&(s.id, started.fence)), "{orphans:?}");
    store
        .take_over(s.id, started.fence, lease(Duration::from_secs(600)))
        .await
        .unwrap()
}

/// The release, the wait, the claim.
pub async fn a_run_released_for_resume_waits_unowned_and_is_claimed_once_after_its_backoff(
    store: &dyn CoordinatedStore,
) {
    let inc = incident(store).await;
    let pool = format!("pool-{}", uuid::Uuid::now_v7().simple());
    let held = taken_over(store, &inc, &pool).await;
    let pending = store
        .release_for_resume(held.id, held.fence, Duration::ZERO)
        .await
        .unwrap();
    assert!(
        pending.is_resume_pending() && pending.resume_pending,
        "{pending:?}"
    );
    assert_eq!(
        (pending.fence, pending.attempt, pending.revision),
        (held.fence + 1, 2, held.revision)
    );
    assert_eq!((pending.owner, pending.lease_expires_at), (None, None));
    assert_eq!(pending.started_at, held.started_at, "the start is kept");
    assert!(pending.started_at.is_some() && !pending.is_queued());
    assert_eq!(store.get_session(held.id).await.unwrap(), pending);

    // Never an orphan; the old run's fence is refused.
    let orphans = store.expired_leases().await.unwrap();
    assert!(!orphans.iter().any(|(id, _)| *id == held.id), "{orphans:?}");
    assert!(matches!(
        store
            .take_over(held.id, pending.fence, lease(Duration::from_secs(600)))
            .await,
        Err(StoreError::NotOrphaned { .. })
    ));
    assert!(matches!(
        store
            .release_for_resume(held.id, held.fence, Duration::ZERO)
            .await,
        Err(StoreError::Fenced { .. })
    ));

    // Claimed once, like a queued row, by any manager of the pool.
    let next = lease(Duration::from_secs(600));
    let claimed = store
        .claim_next(&pool, None, next)
        .await
        .unwrap()
        .expect("the pending resume");
    assert_eq!(claimed.id, held.id);
    assert_eq!(
        (claimed.owner, claimed.fence),
        (Some(next.owner), pending.fence + 1)
    );
    assert_eq!((claimed.attempt, claimed.started_at), (2, held.started_at));
    assert!(!claimed.resume_pending && claimed.resume_after.is_none());
    assert_eq!(store.claim_next(&pool, None, next).await.unwrap(), None);

    // A revision continued later starts again at attempt 1.
    let done = store
        .settle_session(
            held.id,
            crate::store::settlement_at(SessionStatus::Completed, "completed", claimed.fence),
        )
        .await
        .unwrap();
    assert_eq!(done.attempt, 2);
    let reopened = store
        .continue_session(held.id, ContinueFrom::Terminal, None)
        .await
        .unwrap();
    assert_eq!(
        (reopened.attempt, reopened.revision),
        (1, held.revision + 1)
    );
}

/// Before its backoff has passed a pending resume is not claimed, and it
/// holds no slot of its key: a per-key cap of 1 lets another row of the
/// key be claimed. A forced cancel ends it like a queued row.
pub async fn a_pending_resume_waits_out_its_backoff_holds_no_slot_and_can_be_cancelled(
    store: &dyn CoordinatedStore,
) {
    let inc = incident(store).await;
    let pool = format!("pool-{}", uuid::Uuid::now_v7().simple());
    let held = taken_over(store, &inc, &pool).await;
    let pending = store
        .release_for_resume(held.id, held.fence, Duration::from_secs(3600))
        .await
        .unwrap();
    assert!(pending.resume_after.is_some(), "{pending:?}");
    let other = queued(store, &inc, &pool, "k").await;
    let claimed = store
        .claim_next(&pool, Some(1), lease(Duration::from_secs(600)))
        .await
        .unwrap()
        .expect("the other row of the key");
    assert_eq!(
        claimed.id, other.id,
        "the pending resume waits out its backoff"
    );
    assert_eq!(
        store
            .claim_next(&pool, None, lease(Duration::from_secs(600)))
            .await
            .unwrap(),
        None
    );
    let (cancelled, _) = store
        .force_cancel(held.id, pending.fence, "cancelled while pending".to_owned())
        .await
        .unwrap();
    assert_eq!(cancelled.status, SessionStatus::Cancelled);
    assert!(!cancelled.resume_pending && !cancelled.is_resume_pending());
}

/// A pending resume cancelled and then reopened is an ordinary run again,
/// whatever flag the store kept: owned, it counts under its key, is never
/// claimed by another manager, and is an orphan once its owner is gone.
pub async fn a_cancelled_pending_resume_reopened_is_an_ordinary_run(store: &dyn CoordinatedStore) {
    let inc = incident(store).await;
    let pool = format!("pool-{}", uuid::Uuid::now_v7().simple());
    let held = taken_over(store, &inc, &pool).await;
    let pending = store
        .release_for_resume(held.id, held.fence, Duration::ZERO)
        .await
        .unwrap();
    store
        .force_cancel(held.id, pending.fence, "cancelled while pending".to_owned())
        .await
        .unwrap();
    let reopened = store
        .continue_session(held.id, ContinueFrom::Terminal, Some(lease(Duration::ZERO)))
        .await
        .unwrap();
    assert!(
        !reopened.resume_pending && reopened.owner.is_some(),
        "{reopened:?}"
    );
    let other = queued(store, &inc, &pool, "k").await;
    let claimed = store
        .claim_next(&pool, Some(1), lease(Duration::from_secs(600)))
        .await
        .unwrap();
    assert_eq!(claimed, None, "the reopened run holds its key's one slot");
    let claimed = store
        .claim_next(&pool, None, lease(Duration::from_secs(600)))
        .await
        .unwrap()
        .expect("the other row");
    assert_eq!(claimed.id, other.id, "the reopened run is not claimed");
    let started = store.mark_started(held.id, reopened.fence).await.unwrap();
    let orphans = store.expired_leases().await.unwrap();
    assert!(
        orphans.contains(&(held.id, started.fence)),
        "its owner gone, the reopened run is an orphan: {orphans:?}"
    );
}

/// A run whose cancel was requested is never released for resume: the
/// release is refused (`Conflict`), nothing changes, and the request
/// stands for the caller to settle.
pub async fn a_run_with_a_pending_cancel_is_not_released_for_resume(store: &dyn CoordinatedStore) {
    let inc = incident(store).await;
    let pool = format!("pool-{}", uuid::Uuid::now_v7().simple());
    let held = taken_over(store, &inc, &pool).await;
    let asked = store.request_cancel(held.id).await.unwrap();
    assert!(asked.cancel_requested, "{asked:?}");
    let refused = store
        .release_for_resume(held.id, held.fence, Duration::ZERO)
        .await;
    assert!(
        matches!(refused, Err(StoreError::Conflict { .. })),
        "{refused:?}"
    );
    let row = store.get_session(held.id).await.unwrap();
    assert_eq!((row.fence, row.attempt), (held.fence, held.attempt));
    assert!(row.cancel_requested && !row.is_resume_pending(), "{row:?}");
}
