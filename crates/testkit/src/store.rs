//! The [`Store`] contract. Every case is a public async function taking
//! `&dyn Store`; [`run_all`] runs them in order; the
//! [`store_contract_tests!`](crate::store_contract_tests) macro makes one test
//! per case. Cases create their own incidents, so a shared store is fine.

use futures::future::join_all;
use korvus_store::{
    constraint, validate, ArtifactId, ArtifactKind, ContextRef, Counters, Entity, Incident,
    IncidentStatus, NewArtifact, NewIncident, NewReport, NewSession, Session, SessionId,
    SessionKind, SessionStatus, Settlement, Store, StoreError, WorkspaceRef,
};

crate::__with_cases!(store, [crate::__gen_run_all], (store, Store,));

/// Creates an open incident with a unique title.
pub async fn incident(store: &dyn Store) -> Incident {
    store
        .create_incident(NewIncident {
            title: format!("contract incident {}", uuid::Uuid::now_v7()),
            workspace: Some(WorkspaceRef {
                repo: "/srv/repos/ops.git".into(),
                commit: "0123456789abcdef0123456789abcdef01234567".into(),
            }),
        })
        .await
        .expect("create_incident")
}

/// Creates a running session in `incident`.
pub async fn session(store: &dyn Store, incident: &Incident) -> Session {
    store
        .create_session(new_session(incident, "investigate"))
        .await
        .expect("create_session")
}

fn new_session(incident: &Incident, prompt: &str) -> NewSession {
    NewSession {
        id: SessionId::new(),
        incident_id: incident.id,
        kind: SessionKind::Initial,
        prompt: prompt.into(),
        workspace_ref: incident.workspace.clone(),
    }
}

/// A valid artifact row for `session` (no bytes are uploaded: the store does
/// not look at blobs).
pub fn new_artifact(session: &Session, path: &str, revision: u32) -> NewArtifact {
    let id = ArtifactId::new();
    NewArtifact {
        id,
        incident_id: session.incident_id,
        session_id: session.id,
        kind: ArtifactKind::AgentOutput,
        path: path.into(),
        blob_key: format!("contract/{id}/{path}"),
        content_type: "text/plain".into(),
        size_bytes: 3,
        sha256: "ab".repeat(32),
        revision,
    }
}

fn settlement(status: SessionStatus, reason: &str) -> Settlement {
    Settlement {
        status,
        exit_reason: Some(reason.into()),
        counters: Counters {
            turns: 3,
            tool_calls: 5,
            input_tokens: 1000,
            output_tokens: 200,
        },
    }
}

fn new_report(session: &Session, revision: u32) -> NewReport {
    NewReport {
        session_id: session.id,
        incident_id: session.incident_id,
        revision,
        markdown_key: Some(format!("contract/{}/report-{revision}.md", session.id)),
        markdown_bytes: 42,
        exit_reason: "completed".into(),
        counters: Counters::default(),
    }
}

/// Create, get, list and close an incident; closing twice is fine.
pub async fn incidents_round_trip(store: &dyn Store) {
    let created = incident(store).await;
    assert_eq!(created.status, IncidentStatus::Open);
    let got = store.get_incident(created.id).await.unwrap();
    assert_eq!(got.id, created.id);
    assert_eq!(got.title, created.title);
    assert_eq!(got.workspace, created.workspace);
    let listed = store.list_incidents().await.unwrap();
    assert!(listed.iter().any(|i| i.id == created.id));
    let closed = store.close_incident(created.id).await.unwrap();
    assert_eq!(closed.status, IncidentStatus::Closed);
    let again = store.close_incident(created.id).await.unwrap();
    assert_eq!(again.status, IncidentStatus::Closed);
    assert_eq!(
        store.get_incident(created.id).await.unwrap().status,
        IncidentStatus::Closed
    );
}

fn assert_invalid(result: Result<impl std::fmt::Debug, StoreError>, field: &str) {
    match result {
        Err(StoreError::InvalidInput { field: f, .. }) => assert_eq!(f, field),
        other => panic!("expected InvalidInput {{ field: {field:?} }}, got {other:?}"),
    }
}

/// NUL bytes, over-long text and out-of-range counters are typed errors
/// naming the field, and nothing is written.
pub async fn invalid_input_is_refused_and_nothing_written(store: &dyn Store) {
    let before = store.list_incidents().await.unwrap().len();
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
    assert_eq!(store.list_incidents().await.unwrap().len(), before);

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
    assert!(store.list_sessions(inc.id).await.unwrap().is_empty());

    let s = session(store, &inc).await;
    let mut huge = settlement(SessionStatus::Completed, "completed");
    huge.counters.turns = u64::MAX;
    assert_invalid(store.settle_session(s.id, huge).await, "counters.turns");
    let mut nul = settlement(SessionStatus::Completed, "done\0");
    nul.counters = Counters::default();
    assert_invalid(store.settle_session(s.id, nul).await, "exit_reason");
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
    rep.exit_reason = "x".repeat(validate::MAX_EXIT_REASON_BYTES + 1);
    assert_invalid(store.create_report(rep).await, "exit_reason");
    assert!(store.list_reports(s.id).await.unwrap().is_empty());
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
        store.get_incident(korvus_store::IncidentId::new()).await,
        Entity::Incident,
    );
    assert_not_found(
        store.close_incident(korvus_store::IncidentId::new()).await,
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
    assert_not_found(store.reopen_session(missing_session).await, Entity::Session);
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
    orphan.incident_id = korvus_store::IncidentId::new();
    assert_not_found(store.create_session(orphan).await, Entity::Incident);
    assert!(store
        .get_artifacts(&[ArtifactId::new()])
        .await
        .unwrap()
        .is_empty());
    assert!(store
        .list_sessions(korvus_store::IncidentId::new())
        .await
        .unwrap()
        .is_empty());
}

/// 100 concurrent creates in one incident get seqs 1..=100, each exactly once.
pub async fn concurrent_creates_get_seqs_one_to_hundred(store: &dyn Store) {
    let inc = incident(store).await;
    let creates = (0..100).map(|i| store.create_session(new_session(&inc, &format!("p{i}"))));
    let results = join_all(creates).await;
    let mut seqs: Vec<u32> = results
        .into_iter()
        .map(|r| r.expect("concurrent create_session").seq)
        .collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=100).collect::<Vec<u32>>());
    let listed: Vec<u32> = store
        .list_sessions(inc.id)
        .await
        .unwrap()
        .iter()
        .map(|s| s.seq)
        .collect();
    assert_eq!(
        listed,
        (1..=100).collect::<Vec<u32>>(),
        "listed in seq order"
    );
}

/// A new session is born running at revision 1 with its fields intact; a
/// duplicate id is a conflict; seqs are per incident.
pub async fn session_insert_rules(store: &dyn Store) {
    let inc = incident(store).await;
    let other = incident(store).await;
    let mut new = new_session(&inc, "why is the disk full? ünïcödé");
    new.kind = SessionKind::FollowUp;
    let s = store.create_session(new.clone()).await.unwrap();
    assert_eq!(s.id, new.id);
    assert_eq!(s.seq, 1);
    assert_eq!(s.kind, SessionKind::FollowUp);
    assert_eq!(s.status, SessionStatus::Running);
    assert_eq!(s.prompt, new.prompt);
    assert_eq!(s.workspace_ref, inc.workspace);
    assert_eq!(s.revision, 1);
    assert_eq!(s.exit_reason, None);
    assert_eq!(s.ended_at, None);
    assert_eq!(s.counters, Counters::default());
    assert_eq!(store.get_session(s.id).await.unwrap(), s);
    match store.create_session(new).await {
        Err(StoreError::Conflict { entity, .. }) => assert_eq!(entity, Entity::Session),
        other => panic!("duplicate session id: expected Conflict, got {other:?}"),
    }
    assert_eq!(session(store, &other).await.seq, 1, "seq is per incident");
    assert_eq!(session(store, &inc).await.seq, 2);
}

/// Settling to a terminal status sets `ended_at` and copies the outcome;
/// settling back to running clears `ended_at`.
pub async fn settle_sets_and_clears_ended_at(store: &dyn Store) {
    let inc = incident(store).await;
    let s = session(store, &inc).await;
    for status in SessionStatus::TERMINAL {
        let settled = store
            .settle_session(s.id, settlement(*status, status.as_str()))
            .await
            .unwrap();
        assert_eq!(settled.status, *status);
        assert!(settled.ended_at.is_some(), "{status} sets ended_at");
        assert_eq!(settled.exit_reason.as_deref(), Some(status.as_str()));
        assert_eq!(settled.counters.tool_calls, 5);
        assert_eq!(store.get_session(s.id).await.unwrap(), settled);
        let waiting = store
            .settle_session(s.id, settlement(SessionStatus::Running, "awaiting_user"))
            .await
            .unwrap();
        assert_eq!(waiting.status, SessionStatus::Running);
        assert_eq!(waiting.ended_at, None, "running clears ended_at");
        assert_eq!(waiting.exit_reason.as_deref(), Some("awaiting_user"));
    }
}

/// Of 16 concurrent reopens of one terminal session exactly one wins; the
/// others get `NotFinished`; the winner's row is running at revision 2.
pub async fn reopen_has_exactly_one_winner(store: &dyn Store) {
    let inc = incident(store).await;
    let s = session(store, &inc).await;
    store
        .settle_session(s.id, settlement(SessionStatus::Completed, "completed"))
        .await
        .unwrap();
    let results = join_all((0..16).map(|_| store.reopen_session(s.id))).await;
    let winners: Vec<&Session> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(winners.len(), 1, "exactly one reopen wins: {results:?}");
    for r in &results {
        if let Err(e) = r {
            assert!(
                matches!(e, StoreError::NotFinished { session } if *session == s.id),
                "loser gets NotFinished, got {e:?}"
            );
        }
    }
    let row = store.get_session(s.id).await.unwrap();
    assert_eq!(row.status, SessionStatus::Running);
    assert_eq!(row.ended_at, None);
    assert_eq!(row.exit_reason, None);
    assert_eq!(row.revision, 2);
    assert_eq!(&row, winners[0]);
}

/// Reopening a running session is `NotFinished` and writes nothing; failed
/// and cancelled sessions reopen.
pub async fn reopen_of_a_running_session_is_not_finished(store: &dyn Store) {
    let inc = incident(store).await;
    let s = session(store, &inc).await;
    assert!(matches!(
        store.reopen_session(s.id).await,
        Err(StoreError::NotFinished { .. })
    ));
    assert_eq!(store.get_session(s.id).await.unwrap(), s);
    for status in [SessionStatus::Failed, SessionStatus::Cancelled] {
        store
            .settle_session(s.id, settlement(status, "x"))
            .await
            .unwrap();
        let reopened = store.reopen_session(s.id).await.unwrap();
        assert_eq!(reopened.status, SessionStatus::Running);
    }
    assert_eq!(store.get_session(s.id).await.unwrap().revision, 3);
}

/// Context refs come back in request order, with positions 0.., and later
/// inserts continue the order.
pub async fn context_refs_keep_request_order(store: &dyn Store) {
    let inc = incident(store).await;
    let producer = session(store, &inc).await;
    let arts = store
        .create_artifacts(
            (0..5)
                .map(|i| new_artifact(&producer, &format!("f{i}.md"), 1))
                .collect(),
        )
        .await
        .unwrap();
    let consumer = session(store, &inc).await;
    // Deliberately not in id order.
    let order = [3usize, 0, 4];
    let refs: Vec<ContextRef> = order
        .iter()
        .map(|&i| ContextRef {
            artifact_id: arts[i].id,
            role: format!("role{i}"),
        })
        .collect();
    let stored = store.insert_context_refs(consumer.id, &refs).await.unwrap();
    assert_eq!(stored.len(), 3);
    let more = [ContextRef {
        artifact_id: arts[1].id,
        role: "late".into(),
    }];
    store.insert_context_refs(consumer.id, &more).await.unwrap();
    let listed = store.list_context_refs(consumer.id).await.unwrap();
    let ids: Vec<ArtifactId> = listed.iter().map(|r| r.artifact_id).collect();
    assert_eq!(ids, vec![arts[3].id, arts[0].id, arts[4].id, arts[1].id]);
    let positions: Vec<u32> = listed.iter().map(|r| r.position).collect();
    assert_eq!(positions, vec![0, 1, 2, 3]);
    assert_eq!(listed[0].role, "role3");
    assert!(listed
        .iter()
        .all(|r| r.session_id == consumer.id && r.incident_id == inc.id));
}

/// A ref to another incident's artifact (or an unknown one) is refused with
/// the constraint name, and nothing of the batch is inserted.
pub async fn cross_incident_context_ref_is_refused(store: &dyn Store) {
    let inc = incident(store).await;
    let other = incident(store).await;
    let mine = session(store, &inc).await;
    let theirs = session(store, &other).await;
    let my_art = store
        .create_artifacts(vec![new_artifact(&mine, "ok.md", 1)])
        .await
        .unwrap();
    let their_art = store
        .create_artifacts(vec![new_artifact(&theirs, "secret.md", 1)])
        .await
        .unwrap();
    let consumer = session(store, &inc).await;
    for foreign in [their_art[0].id, ArtifactId::new()] {
        let refs = [
            ContextRef {
                artifact_id: my_art[0].id,
                role: "input".into(),
            },
            ContextRef {
                artifact_id: foreign,
                role: "input".into(),
            },
        ];
        match store.insert_context_refs(consumer.id, &refs).await {
            Err(StoreError::Constraint { name }) => {
                assert_eq!(name, constraint::CONTEXT_REFS_ARTIFACT_FK)
            }
            other => panic!("expected Constraint, got {other:?}"),
        }
        assert!(
            store
                .list_context_refs(consumer.id)
                .await
                .unwrap()
                .is_empty(),
            "nothing inserted"
        );
    }
}

/// Referencing the same artifact twice in one session is a conflict.
pub async fn duplicate_context_ref_is_a_conflict(store: &dyn Store) {
    let inc = incident(store).await;
    let s = session(store, &inc).await;
    let art = store
        .create_artifacts(vec![new_artifact(&s, "a.md", 1)])
        .await
        .unwrap();
    let consumer = session(store, &inc).await;
    let r = ContextRef {
        artifact_id: art[0].id,
        role: "input".into(),
    };
    let result = store
        .insert_context_refs(consumer.id, &[r.clone(), r.clone()])
        .await;
    assert!(
        matches!(result, Err(StoreError::Conflict { .. })),
        "got {result:?}"
    );
    assert!(store
        .list_context_refs(consumer.id)
        .await
        .unwrap()
        .is_empty());
    store
        .insert_context_refs(consumer.id, std::slice::from_ref(&r))
        .await
        .unwrap();
    assert!(matches!(
        store.insert_context_refs(consumer.id, &[r]).await,
        Err(StoreError::Conflict { .. })
    ));
    assert_eq!(store.list_context_refs(consumer.id).await.unwrap().len(), 1);
}

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

/// A batch with one bad row inserts nothing.
pub async fn artifacts_batch_is_all_or_nothing(store: &dyn Store) {
    let inc = incident(store).await;
    let s = session(store, &inc).await;
    let first = store
        .create_artifacts(vec![new_artifact(&s, "first.md", 1)])
        .await
        .unwrap();
    let fresh = new_artifact(&s, "fresh.md", 1);
    let fresh_id = fresh.id;
    let mut dup = new_artifact(&s, "dup.md", 1);
    dup.id = first[0].id;
    match store.create_artifacts(vec![fresh, dup]).await {
        Err(StoreError::Conflict { entity, .. }) => assert_eq!(entity, Entity::Artifact),
        other => panic!("expected Conflict, got {other:?}"),
    }
    assert!(store.get_artifacts(&[fresh_id]).await.unwrap().is_empty());
    assert_eq!(store.list_session_artifacts(s.id).await.unwrap().len(), 1);
    assert!(store.create_artifacts(Vec::new()).await.unwrap().is_empty());
}

/// Artifacts round-trip and list per session and per incident, oldest first;
/// `get_artifacts` answers in request order and leaves unknown ids out.
pub async fn artifacts_are_listed_and_fetched(store: &dyn Store) {
    let inc = incident(store).await;
    let a = session(store, &inc).await;
    let b = session(store, &inc).await;
    let mut report = new_artifact(&a, "report.md", 1);
    report.kind = ArtifactKind::Report;
    report.content_type = "text/markdown".into();
    let stored_a = store
        .create_artifacts(vec![report.clone(), new_artifact(&a, "dir/data.csv", 1)])
        .await
        .unwrap();
    assert_eq!(stored_a[0].kind, ArtifactKind::Report);
    assert_eq!(stored_a[0].path, "report.md");
    assert_eq!(stored_a[0].blob_key, report.blob_key);
    assert_eq!(stored_a[0].sha256, report.sha256);
    assert_eq!(stored_a[0].size_bytes, 3);
    let stored_b = store
        .create_artifacts(vec![new_artifact(&b, "b.txt", 2)])
        .await
        .unwrap();
    let ids: Vec<ArtifactId> = store
        .list_session_artifacts(a.id)
        .await
        .unwrap()
        .iter()
        .map(|x| x.id)
        .collect();
    assert_eq!(ids, vec![stored_a[0].id, stored_a[1].id]);
    assert_eq!(
        store.list_incident_artifacts(inc.id).await.unwrap().len(),
        3
    );
    let got = store
        .get_artifacts(&[stored_b[0].id, ArtifactId::new(), stored_a[0].id])
        .await
        .unwrap();
    assert_eq!(got, vec![stored_b[0].clone(), stored_a[0].clone()]);
}
