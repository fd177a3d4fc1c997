//! `MockStore` (the `mock` feature) standing in for a backend: what the
//! provided methods of [`StoreExt`] make of a backend's answers.

use std::io;

use korvus_store::{ArtifactId, Entity, MockStore, Store, StoreError, StoreExt};

#[tokio::test]
async fn get_artifact_asks_for_one_id_and_turns_no_row_into_not_found() {
    let id = ArtifactId::new();
    let mut store = MockStore::new();
    store
        .expect_get_artifacts()
        .withf(move |ids| ids == [id])
        .times(1)
        .returning(|_| Ok(Vec::new()));
    // Through `dyn Store`, as the session layer holds it.
    let store: &dyn Store = &store;
    match store.get_artifact(id).await {
        Err(StoreError::NotFound {
            entity: Entity::Artifact,
            id: shown,
        }) => assert_eq!(shown, id.to_string()),
        other => panic!("expected NotFound for the artifact, got {other:?}"),
    }
}

#[tokio::test]
async fn get_artifact_passes_a_backend_failure_through_with_its_source() {
    let mut store = MockStore::new();
    store.expect_get_artifacts().times(1).returning(|_| {
        Err(StoreError::backend(
            "flaky",
            io::Error::new(io::ErrorKind::ConnectionReset, "peer reset"),
        ))
    });
    match store.get_artifact(ArtifactId::new()).await {
        Err(StoreError::Backend {
            backend,
            transient,
            source,
        }) => {
            assert_eq!(backend, "flaky");
            assert!(transient, "a reset connection is transient");
            let cause = source
                .downcast_ref::<io::Error>()
                .expect("the driver's error");
            assert_eq!(cause.kind(), io::ErrorKind::ConnectionReset);
        }
        other => panic!("expected the backend error unchanged, got {other:?}"),
    }
}
