//! Report rows: unique revisions per session, and the composite key that
//! ties a report or artifact to a session of its own incident.

use korvus_store::{constraint, Entity, Store, StoreError};

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
    let listed = store.list_reports(s.id).await.unwrap();
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
    assert!(store.list_reports(s.id).await.unwrap().is_empty());
    assert!(store
        .list_incident_artifacts(other.id)
        .await
        .unwrap()
        .is_empty());
}
