//! The queue: sessions created without a lease wait, unowned, for a
//! manager of their pool; `claim_next` hands out the highest priority
//! first, keys in turn (the key with the fewest runs in progress), and
//! within a key the one queued longest — each row to exactly one claimer.
//! Every case uses a pool of its own, so a shared store is fine.

use std::time::Duration;

use futures::future::join_all;
use korvus_store::{
    Admission, ContinueFrom, CoordinatedStore, Incident, Lease, OwnerId, Priority, QueueDepth,
    Session, SessionStatus,
};

use crate::store::{incident, new_session, settlement_at};

fn lease() -> Lease {
    Lease {
        owner: OwnerId::new(),
        ttl: Duration::from_secs(600),
    }
}

fn fresh_pool() -> String {
    format!("pool-{}", uuid::Uuid::now_v7().simple())
}

/// Queues a session of `incident` in `pool` under `key` at `priority`.
async fn queue(
    store: &dyn CoordinatedStore,
    incident: &Incident,
    pool: &str,
    key: &str,
    priority: Priority,
) -> Session {
    let mut new = new_session(incident, key);
    new.admission = Admission {
        pool: pool.to_owned(),
        priority,
        queue_key: Some(key.to_owned()),
        idempotency_key: None,
    };
    let s = store.create_session(new).await.unwrap();
    assert!(s.is_queued(), "{s:?}");
    s
}

async fn claim(store: &dyn CoordinatedStore, pool: &str, lease: Lease) -> Option<Session> {
    store.claim_next(pool, None, lease).await.unwrap()
}

/// Priority first; then the key with the fewest runs in progress; then
/// the oldest. A claimed row is owned at the next fence and not started;
/// another pool's claim never sees it.
pub async fn claims_go_by_priority_then_the_least_busy_key_then_age(store: &dyn CoordinatedStore) {
    let inc = incident(store).await;
    let (pool, other_pool) = (fresh_pool(), fresh_pool());
    let a1 = queue(store, &inc, &pool, "a", Priority::NORMAL).await;
    let a2 = queue(store, &inc, &pool, "a", Priority::NORMAL).await;
    let a3 = queue(store, &inc, &pool, "a", Priority::NORMAL).await;
    let b1 = queue(store, &inc, &pool, "b", Priority::NORMAL).await;
    let high = queue(store, &inc, &pool, "a", Priority::HIGHEST).await;
    assert_eq!(
        claim(store, &other_pool, lease()).await,
        None,
        "another pool"
    );

    let first = lease();
    let got = claim(store, &pool, first).await.expect("a claim");
    assert_eq!(got.id, high.id, "the highest priority first");
    assert_eq!((got.owner, got.fence), (Some(first.owner), high.fence + 1));
    assert!(got.lease_expires_at.is_some() && got.started_at.is_none());
    assert!(!got.is_queued());
    assert_eq!(store.get_session(high.id).await.unwrap(), got);

    // Key a has a run in progress, b none: b goes next, then a in age order.
    let order: Vec<_> = [
        claim(store, &pool, lease()).await,
        claim(store, &pool, lease()).await,
        claim(store, &pool, lease()).await,
        claim(store, &pool, lease()).await,
    ]
    .into_iter()
    .map(|s| s.expect("queued rows left").id)
    .collect();
    assert_eq!(order, [b1.id, a1.id, a2.id, a3.id]);
    assert_eq!(
        claim(store, &pool, lease()).await,
        None,
        "the queue is empty"
    );
}

/// Of concurrent claims of one queued row exactly one gets it; a row
/// continued without a lease is queued again and claimed at its next
/// fence.
pub async fn a_queued_row_is_claimed_exactly_once(store: &dyn CoordinatedStore) {
    let inc = incident(store).await;
    let pool = fresh_pool();
    let s = queue(store, &inc, &pool, "only", Priority::NORMAL).await;
    let results = join_all((0..16).map(|_| store.claim_next(&pool, None, lease()))).await;
    let won: Vec<Session> = results
        .into_iter()
        .filter_map(|r| r.expect("no error"))
        .collect();
    assert_eq!(won.len(), 1, "{won:?}");
    assert_eq!(won[0].id, s.id);

    let done = store
        .settle_session(
            s.id,
            settlement_at(SessionStatus::Completed, "completed", won[0].fence),
        )
        .await
        .unwrap();
    assert_eq!(
        claim(store, &pool, lease()).await,
        None,
        "terminal rows wait for nobody"
    );
    let again = store
        .continue_session(done.id, ContinueFrom::Terminal, None)
        .await
        .unwrap();
    assert!(again.is_queued());
    let claimed = claim(store, &pool, lease()).await.expect("queued again");
    assert_eq!((claimed.id, claimed.fence), (s.id, again.fence + 1));
}

/// A claim given back (`release`) is queued again at the next fence and
/// keeps its place in line; the claimer's writes are refused from then
/// on. A started run cannot be given back, nor a terminal row, nor a
/// stale fence; of concurrent releases exactly one wins.
pub async fn a_claim_given_back_is_queued_again_in_its_place(store: &dyn CoordinatedStore) {
    let inc = incident(store).await;
    let pool = fresh_pool();
    let first = queue(store, &inc, &pool, "k", Priority::NORMAL).await;
    let second = queue(store, &inc, &pool, "k", Priority::NORMAL).await;
    let claimed = claim(store, &pool, lease()).await.expect("a claim");
    assert_eq!(claimed.id, first.id);

    let results = join_all((0..8).map(|_| store.release(first.id, claimed.fence))).await;
    let won: Vec<Session> = results.into_iter().filter_map(Result::ok).collect();
    assert_eq!(won.len(), 1, "one release wins: {won:?}");
    let released = &won[0];
    assert!(released.is_queued(), "{released:?}");
    assert_eq!(released.fence, claimed.fence + 1);
    assert_eq!((released.owner, released.lease_expires_at), (None, None));
    assert_eq!(store.get_session(first.id).await.unwrap(), *released);
    // The claimer's run is fenced off.
    let stale = store
        .settle_session(
            first.id,
            settlement_at(SessionStatus::Completed, "completed", claimed.fence),
        )
        .await;
    assert!(
        matches!(stale, Err(korvus_store::StoreError::Fenced { .. })),
        "{stale:?}"
    );
    // It was queued before `second`, and is claimed before it again.
    let again = claim(store, &pool, lease()).await.expect("queued again");
    assert_eq!((again.id, again.fence), (first.id, released.fence + 1));

    // Started: the run is the claimer's to end.
    store.mark_started(first.id, again.fence).await.unwrap();
    let started = store.release(first.id, again.fence).await;
    assert!(
        matches!(started, Err(korvus_store::StoreError::AlreadyStarted { session }) if session == first.id),
        "{started:?}"
    );
    let row = store.get_session(first.id).await.unwrap();
    assert_eq!((row.owner.is_some(), row.fence), (true, again.fence));

    // A stale fence, a terminal row, an unknown id: refused, nothing written.
    let other = claim(store, &pool, lease()).await.expect("second");
    assert_eq!(other.id, second.id);
    let stale = store.release(second.id, other.fence - 1).await;
    assert!(
        matches!(stale, Err(korvus_store::StoreError::Fenced { .. })),
        "{stale:?}"
    );
    store
        .settle_session(
            second.id,
            settlement_at(SessionStatus::Cancelled, "cancelled", other.fence),
        )
        .await
        .unwrap();
    let ended = store.release(second.id, other.fence).await;
    assert!(
        matches!(ended, Err(korvus_store::StoreError::NotActive { .. })),
        "{ended:?}"
    );
    let unknown = store.release(korvus_store::SessionId::new(), 1).await;
    assert!(
        matches!(unknown, Err(korvus_store::StoreError::NotFound { .. })),
        "{unknown:?}"
    );
    assert_eq!(claim(store, &pool, lease()).await, None);

    // A row created owned and given back is queued from then on: behind a
    // row queued before the release, whenever it was created.
    let mut new = new_session(&inc, "k");
    new.admission = Admission {
        pool: pool.clone(),
        priority: Priority::NORMAL,
        queue_key: Some("k".to_owned()),
        idempotency_key: None,
    };
    new.lease = Some(lease());
    let owned = store.create_session(new).await.unwrap();
    assert!(!owned.is_queued());
    let earlier = queue(store, &inc, &pool, "k", Priority::NORMAL).await;
    // Queue times are milliseconds of the store's clock: let one pass.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let queued = store.release(owned.id, owned.fence).await.unwrap();
    assert!(queued.is_queued(), "{queued:?}");
    let order = [
        claim(store, &pool, lease()).await.expect("one").id,
        claim(store, &pool, lease()).await.expect("two").id,
    ];
    assert_eq!(order, [earlier.id, owned.id]);
}

/// A per-key cap holds across concurrent claimers: of many claims racing
/// with a cap of 2, exactly two runs of each key are claimed; a key at
/// its cap is passed over for another key, even one of lower priority;
/// a run that ends makes room for one more.
pub async fn a_per_key_cap_holds_across_concurrent_claims(store: &dyn CoordinatedStore) {
    let inc = incident(store).await;
    let pool = fresh_pool();
    for _ in 0..6 {
        queue(store, &inc, &pool, "k", Priority::NORMAL).await;
        queue(store, &inc, &pool, "j", Priority::NORMAL).await;
    }
    let results = join_all((0..16).map(|_| store.claim_next(&pool, Some(2), lease()))).await;
    let won: Vec<Session> = results
        .into_iter()
        .filter_map(|r| r.expect("no error"))
        .collect();
    let of = |key: &str| {
        won.iter()
            .filter(|s| s.admission.queue_key.as_deref() == Some(key))
            .count()
    };
    assert_eq!((of("k"), of("j")), (2, 2), "{won:?}");
    assert_eq!(claim_capped(store, &pool, 2).await, None, "both keys full");

    // A full key is passed over, whatever its priority.
    let low = queue(store, &inc, &pool, "low", Priority::LOWEST).await;
    queue(store, &inc, &pool, "k", Priority::HIGHEST).await;
    let next = claim_capped(store, &pool, 2).await.expect("another key");
    assert_eq!(next.id, low.id);

    // A run of k ends: room for exactly one more of k (the high one).
    let k_run = won
        .iter()
        .find(|s| s.admission.queue_key.as_deref() == Some("k"))
        .unwrap();
    store
        .settle_session(
            k_run.id,
            settlement_at(SessionStatus::Completed, "completed", k_run.fence),
        )
        .await
        .unwrap();
    let more = claim_capped(store, &pool, 2).await.expect("room in k");
    assert_eq!(more.admission.queue_key.as_deref(), Some("k"));
    assert_eq!(more.admission.priority, Priority::HIGHEST);
    assert_eq!(claim_capped(store, &pool, 2).await, None);
    // Without a cap the rest may go.
    assert!(claim(store, &pool, lease()).await.is_some());
}

async fn claim_capped(store: &dyn CoordinatedStore, pool: &str, cap: u32) -> Option<Session> {
    store.claim_next(pool, Some(cap), lease()).await.unwrap()
}

/// `queue_depth` counts the queued rows of a pool, and of them those
/// under one key — a row without a queue key under its incident; claimed
/// and ended rows and other pools do not count.
pub async fn the_queue_depth_counts_queued_rows_by_pool_and_key(store: &dyn CoordinatedStore) {
    let inc = incident(store).await;
    let pool = fresh_pool();
    let depth = |key: Option<&'static str>| {
        let pool = pool.clone();
        async move { store.queue_depth(&pool, key, inc.id).await.unwrap() }
    };
    assert_eq!(depth(None).await, QueueDepth::default());
    queue(store, &inc, &pool, "a", Priority::NORMAL).await;
    queue(store, &inc, &pool, "a", Priority::NORMAL).await;
    queue(store, &inc, &pool, "b", Priority::NORMAL).await;
    queue(store, &inc, &fresh_pool(), "a", Priority::NORMAL).await;
    // Two rows keyed by the incident (no queue key of their own).
    for _ in 0..2 {
        let mut new = new_session(&inc, "by incident");
        new.admission = Admission {
            pool: pool.clone(),
            ..Admission::default()
        };
        store.create_session(new).await.unwrap();
    }
    let a = depth(Some("a")).await;
    assert_eq!((a.pool, a.key), (5, 2));
    let by_incident = depth(None).await;
    assert_eq!((by_incident.pool, by_incident.key), (5, 2));
    assert_eq!(depth(Some("none")).await.key, 0);

    // Claimed rows are no longer queued.
    let claimed = claim(store, &pool, lease()).await.expect("a claim");
    let after = depth(Some("a")).await;
    assert_eq!(after.pool, 4);
    assert_eq!(
        after.key,
        if claimed.admission.queue_key.as_deref() == Some("a") {
            1
        } else {
            2
        }
    );
}

/// `queue_position` estimates a waiting row's place in its pool's line:
/// higher priorities first, then the time each was queued; other pools,
/// claimed, ended and unknown rows have none, and a row released for
/// resume waits again in its place.
pub async fn the_queue_position_is_an_estimate_by_priority_then_age(store: &dyn CoordinatedStore) {
    let inc = incident(store).await;
    let pool = fresh_pool();
    let a1 = queue(store, &inc, &pool, "a", Priority::NORMAL).await;
    let b1 = queue(store, &inc, &pool, "b", Priority::NORMAL).await;
    let other = queue(store, &inc, &fresh_pool(), "a", Priority::HIGHEST).await;
    let low = queue(store, &inc, &pool, "a", Priority::LOWEST).await;
    let position = |id| async move { store.queue_position(id).await.unwrap() };
    assert_eq!(position(a1.id).await, Some(1));
    assert_eq!(position(b1.id).await, Some(2));
    assert_eq!(position(low.id).await, Some(3));
    assert_eq!(position(other.id).await, Some(1), "alone in its pool");
    let high = queue(store, &inc, &pool, "b", Priority::HIGHEST).await;
    assert_eq!(
        position(high.id).await,
        Some(1),
        "a higher priority goes first"
    );
    assert_eq!(position(a1.id).await, Some(2));
    assert_eq!(position(low.id).await, Some(4));

    let claimed = claim(store, &pool, lease()).await.expect("a claim");
    assert_eq!(claimed.id, high.id);
    assert_eq!(position(high.id).await, None, "claimed: not waiting");
    assert_eq!(position(a1.id).await, Some(1));
    assert_eq!(position(low.id).await, Some(3));
    assert_eq!(position(korvus_store::SessionId::new()).await, None);

    // Started, then released for resume: it waits in line again.
    let started = store.mark_started(high.id, claimed.fence).await.unwrap();
    let pending = store
        .release_for_resume(high.id, started.fence, Duration::from_secs(600))
        .await
        .unwrap();
    assert!(pending.is_resume_pending(), "{pending:?}");
    assert_eq!(position(high.id).await, Some(1));
    assert_eq!(position(a1.id).await, Some(2));
}

/// [`Session::phase`] follows a row through the transitions of its table:
/// queued, claimed, given back, claimed, started, released for resume,
/// resumed (started still), idle, continued (queued), claimed, started,
/// ended.
pub async fn the_phase_follows_each_transition(store: &dyn CoordinatedStore) {
    use korvus_store::Phase;
    let inc = incident(store).await;
    let pool = fresh_pool();
    let s = queue(store, &inc, &pool, "a", Priority::NORMAL).await;
    assert_eq!(s.phase(), Phase::Queued);
    let claimed = claim(store, &pool, lease()).await.expect("a claim");
    assert_eq!(claimed.phase(), Phase::Claimed);
    let back = store.release(s.id, claimed.fence).await.unwrap();
    assert_eq!(back.phase(), Phase::Queued);
    let claimed = claim(store, &pool, lease()).await.expect("a claim");
    let started = store.mark_started(s.id, claimed.fence).await.unwrap();
    assert_eq!(started.phase(), Phase::Started);
    let pending = store
        .release_for_resume(s.id, started.fence, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(pending.phase(), Phase::ResumePending);
    let resumed = claim(store, &pool, lease()).await.expect("the resume");
    assert_eq!(resumed.phase(), Phase::Started, "{resumed:?}");
    let idle = store
        .settle_session(
            s.id,
            settlement_at(SessionStatus::Running, "awaiting_user", resumed.fence),
        )
        .await
        .unwrap();
    assert_eq!(idle.phase(), Phase::Idle);
    let continued = store
        .continue_session(s.id, ContinueFrom::Idle, None)
        .await
        .unwrap();
    assert_eq!(continued.phase(), Phase::Queued);
    let claimed = claim(store, &pool, lease()).await.expect("a claim");
    let started = store.mark_started(s.id, claimed.fence).await.unwrap();
    let ended = store
        .settle_session(
            s.id,
            settlement_at(SessionStatus::Completed, "completed", started.fence),
        )
        .await
        .unwrap();
    assert_eq!(ended.phase(), Phase::Ended);
}

/// Keys take turns even when runs do not overlap: of keys with as few
/// runs in progress, the one claimed longest ago (or never) goes first,
/// before an older row of the key claimed last.
pub async fn keys_take_turns_when_runs_do_not_overlap(store: &dyn CoordinatedStore) {
    let inc = incident(store).await;
    let pool = fresh_pool();
    let a1 = queue(store, &inc, &pool, "a", Priority::NORMAL).await;
    let a2 = queue(store, &inc, &pool, "a", Priority::NORMAL).await;
    let a3 = queue(store, &inc, &pool, "a", Priority::NORMAL).await;
    let b1 = queue(store, &inc, &pool, "b", Priority::NORMAL).await;
    let b2 = queue(store, &inc, &pool, "b", Priority::NORMAL).await;
    let mut order = Vec::new();
    while let Some(s) = claim(store, &pool, lease()).await {
        order.push(s.id);
        // The run ends before the next claim: nothing is in progress.
        store
            .settle_session(
                s.id,
                settlement_at(SessionStatus::Completed, "completed", s.fence),
            )
            .await
            .unwrap();
        // The store's clock orders the turns in milliseconds.
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    assert_eq!(order, [a1.id, b1.id, a2.id, b2.id, a3.id]);
}
