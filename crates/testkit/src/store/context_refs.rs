//! Context refs: the artifacts a session was given, in request order,
//! within one incident, each at most once.

use korvus_store::{constraint, ArtifactId, ContextRef, Store, StoreError};

use super::{incident, new_artifact, session};

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
