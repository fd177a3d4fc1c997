//! Artifact rows: all-or-nothing batches, listing and fetching.

use korvus_store::StoreExt as _;
use korvus_store::{ArtifactId, ArtifactKind, Entity, Store, StoreError};

use super::{incident, new_artifact, session};

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
    assert_eq!(store.all_session_artifacts(s.id).await.unwrap().len(), 1);
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
        .all_session_artifacts(a.id)
        .await
        .unwrap()
        .iter()
        .map(|x| x.id)
        .collect();
    assert_eq!(ids, vec![stored_a[0].id, stored_a[1].id]);
    assert_eq!(store.all_incident_artifacts(inc.id).await.unwrap().len(), 3);
    let got = store
        .get_artifacts(&[stored_b[0].id, ArtifactId::new(), stored_a[0].id])
        .await
        .unwrap();
    assert_eq!(got, vec![stored_b[0].clone(), stored_a[0].clone()]);
}
