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

/// `latest_session_artifacts` answers the newest row of each kind and
/// path (greatest revision, then creation, then id), by path, and leaves
/// out every older revision and other sessions' rows.
pub async fn latest_session_artifacts_keep_the_newest_per_path(store: &dyn Store) {
    let inc = incident(store).await;
    let s = session(store, &inc).await;
    let other = session(store, &inc).await;
    let rev1 = store
        .create_artifacts(vec![
            new_artifact(&s, "a.txt", 1),
            new_artifact(&s, "b.txt", 1),
        ])
        .await
        .unwrap();
    let mut state = new_artifact(&s, "a.txt", 2);
    state.kind = ArtifactKind::AgentState;
    let rev2 = store
        .create_artifacts(vec![
            new_artifact(&s, "a.txt", 2),
            new_artifact(&s, "c.txt", 2),
            state,
        ])
        .await
        .unwrap();
    // Two rows of one path in one revision and one batch: the greater id.
    let (d1, d2) = (new_artifact(&s, "d.txt", 2), new_artifact(&s, "d.txt", 2));
    let newer_d = d1.id.max(d2.id);
    store.create_artifacts(vec![d1, d2]).await.unwrap();
    // An older revision written later still loses to the newer revision.
    store
        .create_artifacts(vec![new_artifact(&s, "c.txt", 1)])
        .await
        .unwrap();
    store
        .create_artifacts(vec![new_artifact(&other, "a.txt", 9)])
        .await
        .unwrap();
    let latest = store.latest_session_artifacts(s.id).await.unwrap();
    let got: Vec<(&str, ArtifactKind, u32, ArtifactId)> = latest
        .iter()
        .map(|a| (a.path.as_str(), a.kind, a.revision, a.id))
        .collect();
    let mut a_rows = vec![
        ("a.txt", ArtifactKind::AgentOutput, 2, rev2[0].id),
        ("a.txt", ArtifactKind::AgentState, 2, rev2[2].id),
    ];
    a_rows.sort_by_key(|r| r.3);
    let mut expected = a_rows;
    expected.extend([
        ("b.txt", ArtifactKind::AgentOutput, 1, rev1[1].id),
        ("c.txt", ArtifactKind::AgentOutput, 2, rev2[1].id),
        ("d.txt", ArtifactKind::AgentOutput, 2, newer_d),
    ]);
    assert_eq!(got, expected);
    assert!(latest.iter().all(|a| a.session_id == s.id));
    let none = session(store, &inc).await;
    assert!(store
        .latest_session_artifacts(none.id)
        .await
        .unwrap()
        .is_empty());
}
