//! What a store answers to bad input and unknown ids: typed errors naming
//! the field or entity, and nothing written.

use korvus_store::StoreExt as _;
use korvus_store::{
    validate, ArtifactId, ContinueFrom, Entity, IncidentId, NewIncident, SessionId, SessionStatus,
    Store, StoreError,
};

use super::{incident, new_artifact, new_report, new_session, session, settlement};

fn assert_invalid(result: Result<impl std::fmt::Debug, StoreError>, field: &str) {
    match result {
        Err(StoreError::InvalidInput { field: f, .. }) => assert_eq!(f, field),
        other => panic!("expected InvalidInput {{ field: {field:?} }}, got {other:?}"),
    }
}

/// NUL bytes, over-long text and out-of-range counters are typed errors
/// naming the field, and nothing is written.
pub async fn invalid_input_is_refused_and_nothing_written(store: &dyn Store) {
    let before = store.all_incidents().await.unwrap().len();
    let title = format!("nul\0title {}", uuid::Uuid::now_v7());
    assert_invalid(
        store
            .create_incident(NewIncident {
                title,
                workspace: None,
            })
            .await,
        "title",
    );
    assert_invalid(
        store
            .create_incident(NewIncident {
                title: "x".repeat(validate::MAX_TITLE_BYTES + 1),
                workspace: None,
            })
            .await,
        "title",
    );
    assert_invalid(
        store
            .create_incident(NewIncident {
                title: "  ".into(),
                workspace: None,
            })
            .await,
        "title",
    );
    assert_eq!(store.all_incidents().await.unwrap().len(), before);

    let inc = incident(store).await;
    let bad = new_session(&inc, "prompt with \0 inside");
    let bad_id = bad.id;
    assert_invalid(store.create_session(bad).await, "prompt");
    let long = new_session(&inc, &"p".repeat(validate::MAX_PROMPT_BYTES + 1));
    assert_invalid(store.create_session(long).await, "prompt");
    assert!(matches!(
        store.get_session(bad_id).await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(store.all_sessions(inc.id).await.unwrap().is_empty());

    let s = session(store, &inc).await;
    let mut huge = settlement(SessionStatus::Completed, "completed");
    huge.counters.turns = u64::MAX;
    assert_invalid(store.settle_session(s.id, huge).await, "counters.turns");
    let row = store.get_session(s.id).await.unwrap();
    assert_eq!(row.status, SessionStatus::Running);
    assert_eq!(row.ended_at, None);

    let mut art = new_artifact(&s, "out.txt", 1);
    art.path = "a\0b".into();
    let good = new_artifact(&s, "good.txt", 1);
    let good_id = good.id;
    assert_invalid(store.create_artifacts(vec![good, art]).await, "path");
    assert!(store.get_artifacts(&[good_id]).await.unwrap().is_empty());
    let mut rep = new_report(&s, 1);
    rep.detail = Some("x".repeat(validate::MAX_REPORT_DETAIL_BYTES + 1));
    assert_invalid(store.create_report(rep).await, "detail");
    assert!(store.all_reports(s.id).await.unwrap().is_empty());
}

fn assert_not_found(result: Result<impl std::fmt::Debug, StoreError>, entity: Entity) {
    match result {
        Err(StoreError::NotFound { entity: e, .. }) => assert_eq!(e, entity),
        other => panic!("expected NotFound {{ {entity:?} }}, got {other:?}"),
    }
}

/// Every read or update of an unknown id is `NotFound` of the right entity.
pub async fn unknown_ids_are_not_found(store: &dyn Store) {
    let inc = incident(store).await;
    let missing_session = SessionId::new();
    assert_not_found(
        store.get_incident(IncidentId::new()).await,
        Entity::Incident,
    );
    assert_not_found(
        store.close_incident(IncidentId::new()).await,
        Entity::Incident,
    );
    assert_not_found(store.get_session(missing_session).await, Entity::Session);
    assert_not_found(
        store
            .settle_session(
                missing_session,
                settlement(SessionStatus::Completed, "completed"),
            )
            .await,
        Entity::Session,
    );
    assert_not_found(
        store
            .continue_session(missing_session, ContinueFrom::Terminal, None)
            .await,
        Entity::Session,
    );
    assert_not_found(
        store.next_report_revision(missing_session).await,
        Entity::Session,
    );
    assert_not_found(store.get_report(missing_session, 1).await, Entity::Report);
    assert_not_found(
        store.insert_context_refs(missing_session, &[]).await,
        Entity::Session,
    );
    let mut orphan = new_session(&inc, "orphan");
    orphan.incident_id = IncidentId::new();
    assert_not_found(store.create_session(orphan).await, Entity::Incident);
    assert!(store
        .get_artifacts(&[ArtifactId::new()])
        .await
        .unwrap()
        .is_empty());
    assert!(store
        .all_sessions(IncidentId::new())
        .await
        .unwrap()
        .is_empty());
}
