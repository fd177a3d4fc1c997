//! The persist phase on the production backends: bytes to S3 (moto), rows
//! on PostgreSQL.

use korvus_store::StoreExt as _;
use std::collections::BTreeMap;
use std::sync::Arc;

use korvus_blob::{BlobKey, Sha256Digest};
use korvus_harvest::{persist, PersistConfig, PersistRequest};
use korvus_store::{NewIncident, NewSession, Session, SessionId, Store};

use crate::support::{write, Backends};

/// A running session of a fresh incident.
async fn running_session(store: &dyn Store) -> Session {
    let incident = store
        .create_incident(NewIncident {
            title: "harvest".into(),
            workspace: None,
        })
        .await
        .unwrap();
    store
        .create_session(NewSession {
            runner: None,
            admission: Default::default(),
            lease: None,
            id: SessionId::new(),
            incident_id: incident.id,
            prompt: "go".into(),
            workspace_ref: None,
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn persists_to_s3_with_rows_on_postgres() {
    let Some(b) = Backends::new().await else {
        return;
    };
    let session = running_session(&*b.store).await;
    let scratch = tempfile::tempdir().unwrap();
    for i in 0..20 {
        write(
            scratch.path(),
            &format!("out/f{i:02}.json"),
            b"{\"ok\":true}",
        );
    }
    write(scratch.path(), "report.md", b"# R\n");
    let outcome = persist(
        Arc::clone(&b.store).into_store(),
        Some(Arc::clone(&b.blobs)),
        &PersistConfig::default(),
        PersistRequest {
            incident: session.incident_id,
            session: session.id,
            revision: 1,
            fence: 1,
            scratch: Some(scratch.path().to_path_buf()),
            skip_prefixes: korvus_workspace::read_only_prefixes(&korvus_workspace::default_trees()),
            restored: BTreeMap::new(),
        },
    )
    .await;
    assert!(outcome.failed.is_empty(), "{:?}", outcome.failed);
    assert_eq!(outcome.stored.len(), 21);
    assert!(outcome.rows_written);
    let rows = b.store.all_session_artifacts(session.id).await.unwrap();
    assert_eq!(rows.len(), 21, "21 files; the manifest is not an artifact");
    let manifest = BlobKey::new(outcome.manifest_key.clone().unwrap()).unwrap();
    assert!(b.blobs.head(&manifest).await.is_ok());
    for row in &rows {
        let blob = b
            .blobs
            .get(&BlobKey::new(row.blob_key.clone()).unwrap())
            .await
            .unwrap();
        assert_eq!(Sha256Digest::of(&blob.bytes).to_hex(), row.sha256);
        assert_eq!(
            blob.meta.content_type.as_deref(),
            Some(row.content_type.as_str())
        );
    }
    b.teardown().await;
}
