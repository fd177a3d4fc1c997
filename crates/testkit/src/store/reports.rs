//! Report rows: unique revisions per session, and the composite key that
//! ties a report or artifact to a session of its own incident.

use korvus_store::StoreExt as _;
use korvus_store::{constraint, validate, ContinueFrom, Entity, SessionStatus, Store, StoreError};

use super::{incident, new_artifact, new_report, session};

/// Report revisions are unique per session; `next_report_revision` follows
/// the highest; reports list by revision.
pub async fn reports_are_unique_per_revision(store: &dyn Store) {
    let inc = incident(store).await;
    let s = session(store, &inc).await;
    assert_eq!(store.next_report_revision(s.id).await.unwrap(), 1);
    let r1 = store.create_report(new_report(&s, 1)).await.unwrap();
    assert_eq!(r1.revision, 1);
    assert_eq!(r1.markdown_bytes, 42);
    assert_eq!(store.next_report_revision(s.id).await.unwrap(), 2);
    match store.create_report(new_report(&s, 1)).await {
        Err(StoreError::Conflict { entity, .. }) => assert_eq!(entity, Entity::Report),
        other => panic!("duplicate revision: expected Conflict, got {other:?}"),
    }
    let mut r3 = new_report(&s, 3);
    r3.markdown_key = None;
    r3.markdown_bytes = 0;
    r3.exit_reason = "report_author_failed".into();
    store.create_report(r3).await.unwrap();
    assert_eq!(store.next_report_revision(s.id).await.unwrap(), 4);
    let listed = store.all_reports(s.id).await.unwrap();
    assert_eq!(
        listed.iter().map(|r| r.revision).collect::<Vec<_>>(),
        vec![1, 3]
    );
    assert_eq!(listed[1].markdown_key, None);
    assert_eq!(store.get_report(s.id, 1).await.unwrap(), r1);
    let other = session(store, &inc).await;
    assert_eq!(
        store.next_report_revision(other.id).await.unwrap(),
        1,
        "revisions are per session"
    );
}

/// A report or artifact naming a session of another incident (or no
/// session) is refused by the composite key, with its constraint name.
pub async fn report_for_another_incidents_session_is_refused(store: &dyn Store) {
    let inc = incident(store).await;
    let other = incident(store).await;
    let s = session(store, &inc).await;
    let mut wrong = new_report(&s, 1);
    wrong.incident_id = other.id;
    match store.create_report(wrong).await {
        Err(StoreError::Constraint { name }) => assert_eq!(name, constraint::REPORTS_SESSION_FK),
        other => panic!("expected Constraint, got {other:?}"),
    }
    let mut art = new_artifact(&s, "x.md", 1);
    art.incident_id = other.id;
    match store.create_artifacts(vec![art]).await {
        Err(StoreError::Constraint { name }) => {
            assert_eq!(name, constraint::ARTIFACTS_SESSION_FK)
        }
        other => panic!("expected Constraint, got {other:?}"),
    }
    assert!(store.all_reports(s.id).await.unwrap().is_empty());
    assert!(store
        .all_incident_artifacts(other.id)
        .await
        .unwrap()
        .is_empty());
}

/// A report's `detail` round-trips with and without a value (4 KiB is the
/// limit, multi-byte text kept exactly); longer or NUL-bearing detail is
/// `InvalidInput` and writes nothing. `salvaged_from` (where a lost run's
/// output was salvaged from) follows the same rules in a column of its own.
pub async fn report_detail_round_trips_and_is_bounded(store: &dyn Store) {
    let inc = incident(store).await;
    let s = session(store, &inc).await;
    let without = store.create_report(new_report(&s, 1)).await.unwrap();
    assert_eq!(without.detail, None);
    assert_eq!(store.get_report(s.id, 1).await.unwrap(), without);

    let mut with = new_report(&s, 2);
    let cause = "persist degraded: artifact rows failed: ünïcödé; ";
    let mut detail = cause.repeat(validate::MAX_REPORT_DETAIL_BYTES / cause.len());
    detail.push_str(&"x".repeat(validate::MAX_REPORT_DETAIL_BYTES - detail.len()));
    assert_eq!(detail.len(), validate::MAX_REPORT_DETAIL_BYTES);
    with.detail = Some(detail.clone());
    let from = "the scratch dir /var/lib/korvus/scratch/ü/2 of manager m-1, on its host";
    with.salvaged_from = Some(from.to_owned());
    let stored = store.create_report(with).await.unwrap();
    assert_eq!(stored.detail.as_deref(), Some(detail.as_str()));
    assert_eq!(stored.salvaged_from.as_deref(), Some(from));
    assert_eq!(without.salvaged_from, None);
    assert_eq!(store.get_report(s.id, 2).await.unwrap(), stored);
    assert_eq!(
        store.all_reports(s.id).await.unwrap(),
        vec![without, stored]
    );

    for bad in [
        "d".repeat(validate::MAX_REPORT_DETAIL_BYTES + 1),
        "cause\0more".to_owned(),
    ] {
        let mut report = new_report(&s, 3);
        report.detail = Some(bad.clone());
        match store.create_report(report).await {
            Err(StoreError::InvalidInput { field, .. }) => assert_eq!(field, "detail"),
            other => panic!("bad detail: expected InvalidInput, got {other:?}"),
        }
        let mut report = new_report(&s, 3);
        report.salvaged_from = Some(bad);
        match store.create_report(report).await {
            Err(StoreError::InvalidInput { field, .. }) => assert_eq!(field, "salvaged_from"),
            other => panic!("bad salvaged_from: expected InvalidInput, got {other:?}"),
        }
    }
    assert_eq!(store.next_report_revision(s.id).await.unwrap(), 3);
}

/// A second `create_report` of an identical request — a retry after a lost
/// acknowledgement — is `Conflict`, and the first row stays as it was.
pub async fn identical_second_report_is_a_conflict_and_keeps_the_first(store: &dyn Store) {
    let inc = incident(store).await;
    let s = session(store, &inc).await;
    let mut new = new_report(&s, 1);
    new.detail = Some("artifact rows failed: connection reset".into());
    let first = store.create_report(new.clone()).await.unwrap();
    match store.create_report(new.clone()).await {
        Err(StoreError::Conflict { entity, .. }) => assert_eq!(entity, Entity::Report),
        other => panic!("identical second insert: expected Conflict, got {other:?}"),
    }
    let mut different = new;
    different.exit_reason = "failed".into();
    different.detail = None;
    assert!(matches!(
        store.create_report(different).await,
        Err(StoreError::Conflict { .. })
    ));
    assert_eq!(store.get_report(s.id, 1).await.unwrap(), first);
    assert_eq!(store.all_reports(s.id).await.unwrap(), vec![first]);
}

/// A report row is written only under the session's current fence: after
/// a reopen, the superseded run's row is `Fenced` and nothing is stored;
/// the stored row records its fence.
pub async fn a_stale_fence_writes_no_report_row(store: &dyn Store) {
    let inc = incident(store).await;
    let s = session(store, &inc).await;
    store
        .settle_session(s.id, super::settlement(SessionStatus::Failed, "x"))
        .await
        .unwrap();
    let reopened = store
        .continue_session(s.id, ContinueFrom::Terminal, None)
        .await
        .unwrap();
    let late = store.create_report(new_report(&s, 1)).await.unwrap_err();
    assert!(
        matches!(
            late,
            StoreError::Fenced {
                presented: 1,
                current: 2,
                ..
            }
        ),
        "{late:?}"
    );
    assert!(store.all_reports(s.id).await.unwrap().is_empty());
    let report = store.create_report(new_report(&reopened, 2)).await.unwrap();
    assert_eq!(report.fence, 2);
    assert_eq!(store.get_report(s.id, 2).await.unwrap(), report);
}

/// An artifact batch is written only while every row's session is at the
/// row's fence: one stale row refuses the whole batch (`Fenced`, nothing
/// stored); the stored rows record their fence.
pub async fn a_stale_fence_writes_no_artifact_rows(store: &dyn Store) {
    let inc = incident(store).await;
    let s = session(store, &inc).await;
    let other = session(store, &inc).await;
    store
        .settle_session(s.id, super::settlement(SessionStatus::Failed, "x"))
        .await
        .unwrap();
    let reopened = store
        .continue_session(s.id, ContinueFrom::Terminal, None)
        .await
        .unwrap();
    let batch = vec![
        new_artifact(&other, "fresh.txt", 1),
        new_artifact(&s, "late.txt", 1),
    ];
    let late = store.create_artifacts(batch).await.unwrap_err();
    assert!(
        matches!(late, StoreError::Fenced { session, presented: 1, current: 2 } if session == s.id),
        "{late:?}"
    );
    assert!(store
        .all_incident_artifacts(inc.id)
        .await
        .unwrap()
        .is_empty());
    let stored = store
        .create_artifacts(vec![
            new_artifact(&other, "fresh.txt", 1),
            new_artifact(&reopened, "now.txt", 2),
        ])
        .await
        .unwrap();
    assert_eq!(stored.iter().map(|a| a.fence).collect::<Vec<_>>(), [1, 2]);
    let listed = store.all_session_artifacts(s.id).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].fence, 2);
}
