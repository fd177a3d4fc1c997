//! Settlements retried and runs ended from outside the run: a settlement
//! the row already holds answers `Ok` (also through `settle_with_report`),
//! and an operator's forced cancel is a fenced transition of its own.

use futures::future::join;
use korvus_store::StoreExt as _;
use korvus_store::{
    exit_reason, ContinueFrom, CoordinatedStore, Lease, OwnerId, Session, SessionStatus,
    Settlement, StoreError,
};

use crate::store::{
    fenced, incident, new_artifact, new_report, not_active, session, settlement_at,
};

/// A settlement the row already holds — a retry whose first attempt
/// committed but whose answer was lost — answers `Ok` with the stored row
/// (its first `ended_at` kept), terminal and idle alike; so does a
/// retried `settle_with_report`.
pub async fn a_retried_identical_settlement_is_ok(store: &dyn CoordinatedStore) {
    let inc = incident(store).await;
    let s = session(store, &inc).await;
    let done = settlement_at(SessionStatus::Completed, "completed", s.fence);
    let first = store.settle_session(s.id, done.clone()).await.unwrap();
    let again = store.settle_session(s.id, done.clone()).await.unwrap();
    assert_eq!(again, first, "the retry changes nothing, ended_at included");
    // The same outcome with other counters is not a retry.
    let other = Settlement {
        counters: Default::default(),
        ..done
    };
    not_active(
        store.settle_session(s.id, other).await,
        &s,
        "a different outcome",
    );

    let s = session(store, &inc).await;
    let idle = settlement_at(SessionStatus::Running, exit_reason::AWAITING_USER, s.fence);
    let first = store.settle_session(s.id, idle.clone()).await.unwrap();
    assert_eq!(store.settle_session(s.id, idle).await.unwrap(), first);

    let s = session(store, &inc).await;
    let lost = settlement_at(SessionStatus::Failed, "owner_lost", s.fence);
    let report = korvus_store::NewReport {
        exit_reason: "owner_lost".into(),
        ..new_report(&s, 1)
    };
    let (row, stands) = store
        .settle_with_report(s.id, lost.clone(), report.clone())
        .await
        .unwrap();
    let (again, again_stands) = store.settle_with_report(s.id, lost, report).await.unwrap();
    assert_eq!((again, again_stands), (row, stands));
}

/// A forced cancel of an active run moves the fence on, settles the row
/// `cancelled` (owner, lease and a pending request gone) and writes the
/// revision's report row at the new fence unless the run wrote one; every
/// later write of the old run is refused, a second forced cancel too (a
/// terminal row is refused); a reopen continues from it.
pub async fn a_forced_cancel_is_a_fenced_transition_with_its_report_row(
    store: &dyn CoordinatedStore,
) {
    let inc = incident(store).await;
    let s = store
        .create_session(korvus_store::NewSession {
            runner: None,
            admission: Default::default(),
            lease: Some(Lease {
                owner: OwnerId::new(),
                ttl: std::time::Duration::from_secs(600),
            }),
            ..crate::store::new_session(&inc, "forced")
        })
        .await
        .unwrap();
    store.request_cancel(s.id).await.unwrap();
    let detail = "cancelled by an operator (korvus cancel --force)".to_owned();
    fenced(
        store.force_cancel(s.id, s.fence + 1, detail.clone()).await,
        "a forced cancel of a fence the row is not at",
    );
    let (row, report) = store
        .force_cancel(s.id, s.fence, detail.clone())
        .await
        .unwrap();
    assert_eq!(row.status, SessionStatus::Cancelled);
    assert_eq!(row.exit_reason.as_deref(), Some(exit_reason::CANCELLED));
    assert_eq!(row.fence, s.fence + 1);
    assert_eq!(row.revision, s.revision);
    assert!(row.ended_at.is_some());
    assert_eq!((row.owner, row.lease_expires_at), (None, None));
    assert!(!row.cancel_requested);
    assert_eq!(store.get_session(s.id).await.unwrap(), row);
    assert_eq!(report.revision, s.revision);
    assert_eq!(report.exit_reason, exit_reason::CANCELLED);
    assert_eq!(report.detail.as_deref(), Some(detail.as_str()));
    assert_eq!(report.markdown_key, None);
    assert_eq!(report.fence, row.fence);
    assert_eq!(store.all_reports(s.id).await.unwrap(), vec![report]);
    // Other cases may leave requests of their own on a shared store.
    assert!(!store
        .cancel_requests()
        .await
        .unwrap()
        .iter()
        .any(|(id, _)| *id == s.id));
    assert!(!store
        .expired_leases()
        .await
        .unwrap()
        .iter()
        .any(|(id, _)| *id == s.id));

    // The old run's late writes: all refused, nothing changes.
    the_old_runs_writes_are_refused(store, &s, &row, &detail).await;
    // A reopen continues a force-cancelled session with the next run.
    let reopened = store
        .continue_session(s.id, ContinueFrom::Terminal, None)
        .await
        .unwrap();
    assert_eq!(
        (reopened.revision, reopened.fence),
        (s.revision + 1, s.fence + 2)
    );
}

/// Every write the run at `s.fence` may still try after the forced cancel
/// that left `row`: all refused, nothing changes.
async fn the_old_runs_writes_are_refused(
    store: &dyn CoordinatedStore,
    s: &Session,
    row: &Session,
    detail: &str,
) {
    let detail = detail.to_owned();
    fenced(
        store
            .settle_session(
                s.id,
                settlement_at(SessionStatus::Completed, "completed", s.fence),
            )
            .await,
        "the old run's settle",
    );
    fenced(
        store
            .settle_session(
                s.id,
                settlement_at(SessionStatus::Running, exit_reason::AWAITING_USER, s.fence),
            )
            .await,
        "the old run's idle settle",
    );
    fenced(
        store.create_report(new_report(s, 1)).await,
        "the old run's report",
    );
    fenced(
        store
            .create_artifacts(vec![new_artifact(s, "late.txt", 1)])
            .await,
        "the old run's artifacts",
    );
    fenced(
        store.force_cancel(s.id, s.fence, detail.clone()).await,
        "a second forced cancel of the old run",
    );
    not_active(
        store.force_cancel(s.id, row.fence, detail.clone()).await,
        row,
        "a forced cancel of a terminal row",
    );
    assert_eq!(&store.get_session(s.id).await.unwrap(), row);
    assert_eq!(store.all_reports(s.id).await.unwrap().len(), 1);
}

/// A report row the run wrote before a forced cancel stands; an idle row
/// is refused (it has its report; `cancel_idle_session` ends it), and so
/// is an unknown session.
pub async fn a_forced_cancel_keeps_the_runs_own_report_and_refuses_idle_rows(
    store: &dyn CoordinatedStore,
) {
    let inc = incident(store).await;
    let detail = "cancelled by an operator".to_owned();
    let own = session(store, &inc).await;
    let written = store.create_report(new_report(&own, 1)).await.unwrap();
    let (_, stands) = store
        .force_cancel(own.id, own.fence, detail.clone())
        .await
        .unwrap();
    assert_eq!(stands, written);
    assert_eq!(store.all_reports(own.id).await.unwrap(), vec![written]);

    let idle = session(store, &inc).await;
    store
        .settle_session(
            idle.id,
            settlement_at(
                SessionStatus::Running,
                exit_reason::AWAITING_USER,
                idle.fence,
            ),
        )
        .await
        .unwrap();
    not_active(
        store
            .force_cancel(idle.id, idle.fence, detail.clone())
            .await,
        &idle,
        "a forced cancel of an idle row",
    );
    assert!(matches!(
        store
            .force_cancel(korvus_store::SessionId::new(), 1, detail)
            .await,
        Err(StoreError::NotFound { .. })
    ));
}

/// A forced cancel racing the run's own settlement: exactly one wins, and
/// the row is what the winner wrote.
pub async fn a_forced_cancel_racing_the_runs_settle_has_one_winner(store: &dyn CoordinatedStore) {
    let inc = incident(store).await;
    for _ in 0..8 {
        let s = session(store, &inc).await;
        let (settled, forced) = join(
            store.settle_session(
                s.id,
                settlement_at(SessionStatus::Completed, "completed", s.fence),
            ),
            store.force_cancel(s.id, s.fence, "operator".into()),
        )
        .await;
        let row = store.get_session(s.id).await.unwrap();
        match (settled, forced) {
            (Ok(done), Err(e)) => {
                assert!(matches!(e, StoreError::NotActive { .. }), "{e:?}");
                assert_eq!(row, done);
            }
            (Err(e), Ok((cancelled, _))) => {
                assert!(matches!(e, StoreError::Fenced { .. }), "{e:?}");
                assert_eq!(row, cancelled);
            }
            other => panic!("exactly one must win: {other:?}"),
        }
    }
}
