//! Owner leases: written with every run, renewed by the owner's heartbeat,
//! judged by the store's clock, and taken over exactly once when they
//! expire. A lease with a ttl of zero is expired at once: that is how these
//! cases make an orphan without waiting.

use korvus_store::StoreExt as _;
use std::time::Duration;

use futures::future::join_all;
use korvus_store::{
    exit_reason, ContinueFrom, CoordinatedStore, Lease, NewSession, OwnerId, Session,
    SessionStatus, StoreError,
};

use crate::store::{incident, new_report, session, settlement_at};

/// A lease that stays live for the length of any case.
pub(super) fn live(owner: OwnerId) -> Lease {
    Lease {
        owner,
        ttl: Duration::from_secs(600),
    }
}

/// A lease that is expired as soon as it is written.
pub(super) fn expired(owner: OwnerId) -> Lease {
    Lease {
        owner,
        ttl: Duration::ZERO,
    }
}

/// A running session created under `lease`.
pub(super) async fn leased(store: &dyn CoordinatedStore, lease: Lease) -> Session {
    let inc = incident(store).await;
    store
        .create_session(NewSession {
            runner: None,
            admission: Default::default(),
            lease: Some(lease),
            id: korvus_store::SessionId::new(),
            incident_id: inc.id,
            prompt: "leased".into(),
            workspace_ref: None,
        })
        .await
        .expect("create_session")
}

/// `owner`'s heartbeat for the run of `s`.
async fn beat(
    store: &dyn CoordinatedStore,
    owner: OwnerId,
    s: &Session,
) -> Vec<(korvus_store::SessionId, u64)> {
    store
        .heartbeat(live(owner), &[(s.id, s.fence)])
        .await
        .unwrap()
}

pub(super) fn holds(pairs: &[(korvus_store::SessionId, u64)], s: &Session) -> bool {
    pairs.contains(&(s.id, s.fence))
}

pub(super) fn listed(pairs: &[(korvus_store::SessionId, u64)], s: &Session) -> bool {
    pairs.iter().any(|(id, _)| *id == s.id)
}

/// Create, reopen and resume write the owner and a lease in the same step;
/// the owner's heartbeat renews exactly the active sessions it holds and
/// names them with their fence; settling (terminal or idle) ends the lease.
pub async fn a_lease_is_written_with_each_run_and_renewed_by_its_owner(
    store: &dyn CoordinatedStore,
) {
    let (a, b) = (OwnerId::new(), OwnerId::new());
    let s = leased(store, live(a)).await;
    assert_eq!(s.owner, Some(a));
    let first_expiry = s.lease_expires_at.expect("a lease expiry");
    assert_eq!(store.get_session(s.id).await.unwrap().owner, Some(a));
    let other = leased(store, live(b)).await;

    let held = store
        .heartbeat(live(a), &[(s.id, s.fence), (other.id, other.fence)])
        .await
        .unwrap();
    assert_eq!(
        held,
        vec![(s.id, s.fence)],
        "another owner's session is not held"
    );
    // A run at another fence is not held either, and an empty beat is fine.
    assert!(store
        .heartbeat(live(a), &[(s.id, s.fence + 1)])
        .await
        .unwrap()
        .is_empty());
    assert!(store.heartbeat(live(a), &[]).await.unwrap().is_empty());
    // A held session its owner no longer lists is not renewed: it lapses.
    let gone = leased(store, expired(a)).await;
    store.heartbeat(live(a), &[(s.id, s.fence)]).await.unwrap();
    assert!(listed(&store.expired_leases().await.unwrap(), &gone));
    assert!(
        holds(&beat(store, a, &gone).await, &gone),
        "renewed when listed"
    );
    assert!(!listed(&store.expired_leases().await.unwrap(), &gone));
    let renewed = store.get_session(s.id).await.unwrap();
    assert!(renewed.lease_expires_at.unwrap() >= first_expiry);

    settling_ends_the_lease_and_each_new_run_takes_one(store, &s, a, b).await;
}

/// The rest of the lease case, for the run of `s` held by `a`: an idle
/// or terminal settle ends the lease; a resume or reopen takes a new one
/// (of `b`, then `a`), and one without a lease has no owner.
async fn settling_ends_the_lease_and_each_new_run_takes_one(
    store: &dyn CoordinatedStore,
    s: &Session,
    a: OwnerId,
    b: OwnerId,
) {
    // An idle settle ends the run: no owner, no lease, not held.
    let idle = store
        .settle_session(
            s.id,
            settlement_at(SessionStatus::Running, exit_reason::AWAITING_USER, 1),
        )
        .await
        .unwrap();
    assert_eq!((idle.owner, idle.lease_expires_at), (None, None));
    assert!(store
        .heartbeat(live(a), &[(s.id, 1)])
        .await
        .unwrap()
        .is_empty());
    // Resuming takes a new lease (of whichever owner resumes).
    let resumed = store
        .continue_session(s.id, ContinueFrom::Idle, Some(live(b)))
        .await
        .unwrap();
    assert_eq!(resumed.owner, Some(b));
    assert!(resumed.lease_expires_at.is_some());
    assert!(holds(&beat(store, b, &resumed).await, &resumed));

    // A terminal settle ends it too; a reopen takes a new one.
    let done = store
        .settle_session(
            s.id,
            settlement_at(SessionStatus::Completed, "completed", resumed.fence),
        )
        .await
        .unwrap();
    assert_eq!((done.owner, done.lease_expires_at), (None, None));
    assert!(beat(store, b, &done).await.is_empty());
    let reopened = store
        .continue_session(s.id, ContinueFrom::Terminal, Some(live(a)))
        .await
        .unwrap();
    assert_eq!(reopened.owner, Some(a));
    assert!(holds(&beat(store, a, &reopened).await, &reopened));
    // Without a lease, a reopened run has no owner: it is queued, never
    // an orphan.
    store
        .settle_session(
            s.id,
            settlement_at(SessionStatus::Failed, "failed", reopened.fence),
        )
        .await
        .unwrap();
    let unowned = store
        .continue_session(s.id, ContinueFrom::Terminal, None)
        .await
        .unwrap();
    assert_eq!((unowned.owner, unowned.lease_expires_at), (None, None));
    assert!(unowned.is_queued(), "{unowned:?}");
    assert!(!listed(&store.expired_leases().await.unwrap(), &unowned));
}

/// Expired leases are listed; live, idle, queued and terminal rows are
/// not. Of concurrent takeovers exactly one wins: it
/// moves the fence on and owns the session, the others write nothing. The
/// dead owner's heartbeat no longer names the session.
pub async fn an_expired_lease_is_taken_over_exactly_once(store: &dyn CoordinatedStore) {
    let (dead, reapers) = (OwnerId::new(), OwnerId::new());
    let orphan = leased(store, expired(dead)).await;
    let alive = leased(store, live(OwnerId::new())).await;
    let inc = incident(store).await;
    let idle = session(store, &inc).await;
    store
        .settle_session(
            idle.id,
            settlement_at(SessionStatus::Running, exit_reason::AWAITING_USER, 1),
        )
        .await
        .unwrap();
    let queued = session(store, &inc).await;
    let expired_now = store.expired_leases().await.unwrap();
    assert!(holds(&expired_now, &orphan), "{expired_now:?}");
    assert!(!listed(&expired_now, &alive));
    assert!(!listed(&expired_now, &idle));
    assert!(!listed(&expired_now, &queued), "a queued row is no orphan");

    // A live lease, an idle row and a stale fence are refused.
    assert!(matches!(
        store.take_over(alive.id, alive.fence, live(reapers)).await,
        Err(StoreError::NotOrphaned { .. })
    ));
    assert!(matches!(
        store.take_over(idle.id, 1, live(reapers)).await,
        Err(StoreError::NotOrphaned { .. })
    ));
    assert!(matches!(
        store.take_over(queued.id, 1, live(reapers)).await,
        Err(StoreError::NotOrphaned { .. })
    ));
    assert!(matches!(
        store
            .take_over(orphan.id, orphan.fence + 7, live(reapers))
            .await,
        Err(StoreError::Fenced { .. })
    ));
    assert!(matches!(
        store
            .take_over(korvus_store::SessionId::new(), 1, live(reapers))
            .await,
        Err(StoreError::NotFound { .. })
    ));

    let results = join_all((0..8).map(|_| store.take_over(orphan.id, 1, live(reapers)))).await;
    let winners: Vec<&Session> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    for r in &results {
        if let Err(e) = r {
            assert!(
                matches!(
                    e,
                    StoreError::Fenced { .. } | StoreError::NotOrphaned { .. }
                ),
                "{e:?}"
            );
        }
    }
    let won = winners[0];
    assert_eq!((won.fence, won.owner), (2, Some(reapers)));
    assert_eq!(won.revision, orphan.revision);
    assert_eq!(won.status, SessionStatus::Running);
    assert_eq!(store.get_session(orphan.id).await.unwrap().fence, 2);
    assert!(!listed(&store.expired_leases().await.unwrap(), &orphan));
    assert!(beat(store, dead, &orphan).await.is_empty());
    // The dead run's settle is fenced off.
    assert!(matches!(
        store
            .settle_session(
                orphan.id,
                settlement_at(SessionStatus::Completed, "completed", 1)
            )
            .await,
        Err(StoreError::Fenced { .. })
    ));
}

/// A cancel requested for the dead run carries over to the takeover's
/// fence, so the one who took over sees it and settles `cancelled`.
pub async fn a_takeover_keeps_a_pending_cancel_request(store: &dyn CoordinatedStore) {
    let orphan = leased(store, expired(OwnerId::new())).await;
    store.request_cancel(orphan.id).await.unwrap();
    let won = store
        .take_over(orphan.id, orphan.fence, live(OwnerId::new()))
        .await
        .unwrap();
    assert!(won.cancel_requested);
    let plain = leased(store, expired(OwnerId::new())).await;
    let won = store
        .take_over(plain.id, plain.fence, live(OwnerId::new()))
        .await
        .unwrap();
    assert!(!won.cancel_requested);
}

/// `settle_with_report` writes the report row and the settlement together;
/// a row the dead run wrote for the revision stands; a stale fence or a
/// report of another incident writes nothing at all.
pub async fn settle_with_report_keeps_the_dead_runs_row_and_is_all_or_nothing(
    store: &dyn CoordinatedStore,
) {
    let reaper = live(OwnerId::new());
    let lost = |s: &Session| settlement_at(SessionStatus::Failed, "owner_lost", s.fence);
    let lost_report = |s: &Session| korvus_store::NewReport {
        markdown_key: None,
        manifest_key: None,
        markdown_bytes: 0,
        exit_reason: "owner_lost".into(),
        ..new_report(s, s.revision)
    };

    // No row yet: both are written.
    let a = leased(store, expired(OwnerId::new())).await;
    let a = store.take_over(a.id, a.fence, reaper).await.unwrap();
    let (settled, stands) = store
        .settle_with_report(a.id, lost(&a), lost_report(&a))
        .await
        .unwrap();
    assert_eq!(settled.status, SessionStatus::Failed);
    assert_eq!(settled.exit_reason.as_deref(), Some("owner_lost"));
    assert_eq!((settled.owner, settled.lease_expires_at), (None, None));
    assert!(settled.ended_at.is_some());
    assert_eq!(stands.exit_reason, "owner_lost");
    assert_eq!(stands.fence, a.fence);
    assert_eq!(store.all_reports(a.id).await.unwrap(), vec![stands]);

    // The dead run wrote its row before it died: that row stands.
    let b = leased(store, expired(OwnerId::new())).await;
    let own = store.create_report(new_report(&b, 1)).await.unwrap();
    let b = store.take_over(b.id, b.fence, reaper).await.unwrap();
    let (settled, stands) = store
        .settle_with_report(b.id, lost(&b), lost_report(&b))
        .await
        .unwrap();
    assert_eq!(settled.status, SessionStatus::Failed);
    assert_eq!(stands, own);
    assert_eq!(store.all_reports(b.id).await.unwrap(), vec![own]);

    // A stale fence: nothing written.
    let c = leased(store, expired(OwnerId::new())).await;
    let stale = c.clone();
    store.take_over(c.id, c.fence, reaper).await.unwrap();
    assert!(matches!(
        store
            .settle_with_report(c.id, lost(&stale), lost_report(&stale))
            .await,
        Err(StoreError::Fenced { .. })
    ));
    assert!(store.all_reports(c.id).await.unwrap().is_empty());
    assert_eq!(
        store.get_session(c.id).await.unwrap().status,
        SessionStatus::Running
    );

    // A report of another incident: nothing written, the row stays running.
    let d = leased(store, expired(OwnerId::new())).await;
    let d = store.take_over(d.id, d.fence, reaper).await.unwrap();
    let other = incident(store).await;
    let foreign = korvus_store::NewReport {
        incident_id: other.id,
        ..lost_report(&d)
    };
    assert!(matches!(
        store.settle_with_report(d.id, lost(&d), foreign).await,
        Err(StoreError::Constraint { .. })
    ));
    assert!(store.all_reports(d.id).await.unwrap().is_empty());
    assert_eq!(
        store.get_session(d.id).await.unwrap().status,
        SessionStatus::Running
    );
}

/// A session created without a lease is queued: running, unowned, not
/// started — never an orphan, so no reaper settles it. `mark_started`
/// records its run's start once, fenced like a settlement; a continue
/// clears it for the next revision. A started row without an owner (one
/// older than leases) is an orphan again.
pub async fn a_queued_row_is_no_orphan_and_a_start_is_recorded_once(store: &dyn CoordinatedStore) {
    let inc = incident(store).await;
    let queued = session(store, &inc).await;
    assert!(queued.is_queued(), "{queued:?}");
    assert_eq!(queued.started_at, None);
    assert_eq!(store.get_session(queued.id).await.unwrap(), queued);
    assert!(!listed(&store.expired_leases().await.unwrap(), &queued));

    // A claimed run (owned, lease written) is not queued; its start is
    // recorded once, and a retry finds it.
    let claimed = leased(store, live(OwnerId::new())).await;
    assert!(!claimed.is_queued() && claimed.started_at.is_none());
    let started = store.mark_started(claimed.id, claimed.fence).await.unwrap();
    let at = started.started_at.expect("recorded");
    let again = store.mark_started(claimed.id, claimed.fence).await.unwrap();
    assert_eq!(again.started_at, Some(at), "a retry keeps the first time");
    assert!(matches!(
        store.mark_started(claimed.id, claimed.fence + 1).await,
        Err(StoreError::Fenced { .. })
    ));
    assert!(matches!(
        store.mark_started(korvus_store::SessionId::new(), 1).await,
        Err(StoreError::NotFound { .. })
    ));

    // Terminal: refused. A continue starts a new revision, not started.
    let done = store
        .settle_session(
            claimed.id,
            settlement_at(SessionStatus::Completed, "completed", claimed.fence),
        )
        .await
        .unwrap();
    assert!(matches!(
        store.mark_started(done.id, done.fence).await,
        Err(StoreError::NotActive { .. })
    ));
    let next = store
        .continue_session(done.id, ContinueFrom::Terminal, None)
        .await
        .unwrap();
    assert!(next.is_queued() && next.started_at.is_none(), "{next:?}");

    // Started without an owner: an orphan, as rows older than leases are.
    let unowned = store.mark_started(queued.id, queued.fence).await.unwrap();
    assert!(!unowned.is_queued());
    assert!(listed(&store.expired_leases().await.unwrap(), &unowned));
}
