//! Context materialisation through the BlobStore seam.

use std::fs;

use korvus_blob::{MemoryBlobStore, Sha256Digest};
use korvus_store::{ArtifactKind, IncidentId, SessionId};
use korvus_workspace::{context_path, materialize_context, WorkspaceError};

use crate::support::{artifact, fail_get, fault_blobs, listing, mode, scratch};

#[tokio::test]
async fn inherited_artifacts_are_written_read_only_at_their_context_paths() {
    let s = scratch().await;
    let blobs = MemoryBlobStore::new();
    let incident = IncidentId::new();
    let earlier = SessionId::new();
    let a = artifact(
        &blobs,
        incident,
        earlier,
        ArtifactKind::Report,
        "report.md",
        1,
        "# r1\n",
    )
    .await;
    let b = artifact(
        &blobs,
        incident,
        earlier,
        ArtifactKind::Upload,
        "logs/../sys.log",
        1,
        "log\n",
    )
    .await;

    let out = materialize_context(&s.dir, incident, &[a.clone(), b.clone()], &blobs)
        .await
        .unwrap();
    assert!(out.failed.is_empty(), "{:?}", out.failed);
    let paths: Vec<&str> = out.written.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["context/1-report.md", "context/2-logs_.._sys.log"]);
    // The one definition of the path is what was written.
    assert_eq!(out.written[0].path, context_path(1, &a.path));
    assert_eq!(out.written[1].path, context_path(2, &b.path));
    assert_eq!(out.written[1].n, 2);
    assert_eq!(out.written[0].sha256, Sha256Digest::of(b"# r1\n"));
    assert_eq!(out.written[0].size_bytes, 5);

    let dir = s.dir.path();
    assert_eq!(
        listing(dir).into_iter().collect::<Vec<_>>(),
        [
            "context/",
            "context/1-report.md",
            "context/2-logs_.._sys.log"
        ]
    );
    assert_eq!(
        fs::read_to_string(dir.join("context/1-report.md")).unwrap(),
        "# r1\n"
    );
    assert_eq!(mode(&dir.join("context/1-report.md")), 0o444);
    assert_eq!(mode(&dir.join("context")), 0o555);
}

#[tokio::test]
async fn an_artifact_of_another_incident_is_refused_before_any_byte_is_written() {
    let s = scratch().await;
    let blobs = MemoryBlobStore::new();
    let mine = IncidentId::new();
    let theirs = IncidentId::new();
    let ok = artifact(
        &blobs,
        mine,
        SessionId::new(),
        ArtifactKind::AgentOutput,
        "a.md",
        1,
        "a",
    )
    .await;
    let foreign = artifact(
        &blobs,
        theirs,
        SessionId::new(),
        ArtifactKind::AgentOutput,
        "b.md",
        1,
        "b",
    )
    .await;

    // The foreign one is second: the good first one must not be written either.
    let err = materialize_context(&s.dir, mine, &[ok, foreign.clone()], &blobs)
        .await
        .unwrap_err();
    match err {
        WorkspaceError::CrossIncident {
            artifact,
            artifact_incident,
            session_incident,
        } => {
            assert_eq!(artifact, foreign.id);
            assert_eq!(artifact_incident, theirs);
            assert_eq!(session_incident, mine);
        }
        other => panic!("expected CrossIncident, got {other:?}"),
    }
    // Not a byte, not even the `context/` directory.
    assert!(
        listing(s.dir.path()).is_empty(),
        "{:?}",
        listing(s.dir.path())
    );
}

#[tokio::test]
async fn a_blob_that_cannot_be_fetched_or_verified_is_reported_and_left_out() {
    let s = scratch().await;
    let blobs = fault_blobs();
    let incident = IncidentId::new();
    let session = SessionId::new();
    let a = artifact(
        &blobs,
        incident,
        session,
        ArtifactKind::AgentOutput,
        "a.md",
        1,
        "a",
    )
    .await;
    let b = artifact(
        &blobs,
        incident,
        session,
        ArtifactKind::AgentOutput,
        "b.md",
        1,
        "b",
    )
    .await;
    let mut c = artifact(
        &blobs,
        incident,
        session,
        ArtifactKind::AgentOutput,
        "c.md",
        1,
        "c",
    )
    .await;
    c.sha256 = Sha256Digest::of(b"something else").to_hex();
    fail_get(&blobs, &a.blob_key);

    let out = materialize_context(&s.dir, incident, &[a.clone(), b, c.clone()], &blobs)
        .await
        .unwrap();
    let written: Vec<&str> = out.written.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(written, ["context/2-b.md"]);
    assert_eq!(out.failed.len(), 2);
    assert_eq!(out.failed[0].artifact, a.id);
    assert!(matches!(out.failed[0].cause, WorkspaceError::Blob { .. }));
    assert!(
        out.failed[0].to_string().contains("injected failure"),
        "{}",
        out.failed[0]
    );
    assert_eq!(out.failed[1].artifact, c.id);
    assert!(matches!(
        out.failed[1].cause,
        WorkspaceError::DigestMismatch { .. }
    ));
    assert_eq!(
        listing(s.dir.path()).into_iter().collect::<Vec<_>>(),
        ["context/", "context/2-b.md"]
    );
}
