//! Terminal is final: a terminal or idle row refuses every settlement,
//! report and artifact write of its run (`NotActive`). (A settlement the
//! row already holds answering `Ok`, and the forced cancel, are cases of
//! the coordination suite, which has `settle_with_report` and
//! `force_cancel`.)

use korvus_store::StoreExt as _;
use korvus_store::{exit_reason, SessionStatus, Store};

use super::{incident, new_artifact, new_report, not_active, session, settlement_at};

/// Every write of the run at the row's current fence is refused once the
/// row is terminal — whatever the status it would write, an idle one
/// (`awaiting_user`) included — and once it is idle; nothing changes.
pub async fn a_terminal_or_idle_row_refuses_every_write_of_its_run(store: &dyn Store) {
    let inc = incident(store).await;
    for status in SessionStatus::TERMINAL {
        let s = session(store, &inc).await;
        let done = store
            .settle_session(s.id, settlement_at(*status, status.as_str(), s.fence))
            .await
            .unwrap();
        for (other, reason) in [
            (SessionStatus::Completed, "completed"),
            (SessionStatus::Failed, "failed"),
            (SessionStatus::Cancelled, "cancelled"),
            (SessionStatus::Running, exit_reason::AWAITING_USER),
        ] {
            if other == *status {
                continue;
            }
            not_active(
                store
                    .settle_session(s.id, settlement_at(other, reason, s.fence))
                    .await,
                &s,
                "a settle of a terminal row",
            );
        }
        not_active(
            store.create_report(new_report(&s, 1)).await,
            &s,
            "a report row of a terminal row",
        );
        not_active(
            store
                .create_artifacts(vec![new_artifact(&s, "late.txt", 1)])
                .await,
            &s,
            "an artifact row of a terminal row",
        );
        assert_eq!(store.get_session(s.id).await.unwrap(), done);
        assert!(store.all_reports(s.id).await.unwrap().is_empty());
        assert!(store.all_session_artifacts(s.id).await.unwrap().is_empty());
    }

    // Idle: the run is over too; only an answer or a cancel moves it on.
    let s = session(store, &inc).await;
    let idle = store
        .settle_session(
            s.id,
            settlement_at(SessionStatus::Running, exit_reason::AWAITING_USER, s.fence),
        )
        .await
        .unwrap();
    not_active(
        store
            .settle_session(
                s.id,
                settlement_at(SessionStatus::Completed, "completed", s.fence),
            )
            .await,
        &s,
        "a settle of an idle row",
    );
    not_active(
        store.create_report(new_report(&s, 1)).await,
        &s,
        "a report row of an idle row",
    );
    not_active(
        store
            .create_artifacts(vec![new_artifact(&s, "late.txt", 1)])
            .await,
        &s,
        "an artifact row of an idle row",
    );
    assert_eq!(store.get_session(s.id).await.unwrap(), idle);
}

/// An idle row's settlement retried after `cancel_idle_session` won is
/// refused: the idle cancel stands.
pub async fn a_settle_retry_racing_an_idle_cancel_leaves_the_cancel_standing(store: &dyn Store) {
    let inc = incident(store).await;
    let s = session(store, &inc).await;
    let idle = settlement_at(SessionStatus::Running, exit_reason::AWAITING_USER, s.fence);
    store.settle_session(s.id, idle.clone()).await.unwrap();
    let cancelled = store.cancel_idle_session(s.id).await.unwrap();
    assert_eq!(cancelled.status, SessionStatus::Cancelled);
    not_active(
        store.settle_session(s.id, idle).await,
        &s,
        "the retried idle settlement",
    );
    assert_eq!(store.get_session(s.id).await.unwrap(), cancelled);
}
