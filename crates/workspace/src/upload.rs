//! [`upload_artifact`]: bytes to blob storage, returning the row to write.

use bytes::Bytes;
use korvus_blob::{
    artifact_key, report_key, BlobBody, BlobKey, BlobStore, Durability, PutFileOptions, PutOptions,
    Sha256Digest,
};
use korvus_store::{ArtifactId, ArtifactKind, IncidentId, NewArtifact, SessionId};

use crate::{Result, WorkspaceError};

/// Files and archives from this size on are streamed to the blob store
/// ([`UploadBody::Stream`]) rather than read into memory: 4 MiB. Below it,
/// one read and one put cost less than a stream's chunked writes.
pub const STREAM_FROM_BYTES: u64 = 4 * 1024 * 1024;

/// The row data that goes with uploaded bytes: everything of a
/// [`NewArtifact`] except what [`upload_artifact`] decides (id, key) or
/// takes from the bytes (size, digest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadRow {
    /// The session's incident.
    pub incident: IncidentId,
    /// The producing session.
    pub session: SessionId,
    /// The report revision the artifact belongs to.
    pub revision: u32,
    /// What it is; [`ArtifactKind::Report`] selects the report key.
    pub kind: ArtifactKind,
    /// Workspace-relative path the row records.
    pub path: String,
    /// MIME type the bytes are stored with.
    pub content_type: String,
    /// The fence of the run that uploads it
    /// ([`Session::fence`](korvus_store::Session::fence)).
    pub fence: u64,
}

/// Uploads `bytes` and returns the [`NewArtifact`] describing them, for the
/// caller to write (alone or in a batch) once its uploads are done.
///
/// This is the one upload path of korvus: the harvest's files, the harvest
/// manifest and the workspace archive all go through it, so the key rule
/// lives here once. A [`ArtifactKind::Report`] goes to
/// [`report_key`]`(incident, session, revision)`, which is deterministic so
/// a retry overwrites; every other kind goes to
/// [`artifact_key`]`(incident, session, id, last segment of path)` under a
/// freshly minted [`ArtifactId`], which is unique.
///
/// Bytes first, row second: nothing is written to the store here, and no
/// row exists for bytes whose upload failed. `sha256` must be the digest of
/// `bytes` (callers usually have it already); the blob store verifies it.
///
/// # Errors
/// [`WorkspaceError::Blob`] (`op: "stored"`, with the key) when the upload
/// fails, including a digest that does not match the bytes.
///
/// # Cancel safety
/// Not cancel-safe: a dropped call may or may not have stored the bytes,
/// and then no row describes them (harmless: the key is unreferenced).
pub async fn upload_artifact(
    blobs: &dyn BlobStore,
    bytes: Bytes,
    sha256: Sha256Digest,
    row: UploadRow,
) -> Result<NewArtifact> {
    upload(
        blobs,
        UploadBody::Bytes(bytes),
        sha256,
        row,
        Durability::OnReturn,
    )
    .await
}

/// The bytes of an [`upload`]: in memory, or streamed from a reader.
#[derive(Debug)]
pub enum UploadBody {
    /// Bytes in memory, stored with [`BlobStore::put`].
    Bytes(Bytes),
    /// A streamed body, stored with [`BlobStore::put_stream`]: never held
    /// in memory whole, and checked against the digest while it is read.
    Stream(BlobBody),
}

impl UploadBody {
    /// Its length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            Self::Bytes(b) => b.len() as u64,
            Self::Stream(s) => s.len(),
        }
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// [`upload_artifact`] for a body in memory or streamed, with the
/// durability the caller needs: a batch uploads with
/// [`Durability::AtBarrier`] and calls [`BlobStore::barrier`] once before
/// writing its rows.
///
/// # Errors
/// As [`upload_artifact`]; for a streamed body also a reader failure or a
/// body that changed since `sha256` was computed (nothing stored).
///
/// # Cancel safety
/// As [`upload_artifact`].
pub async fn upload(
    blobs: &dyn BlobStore,
    body: UploadBody,
    sha256: Sha256Digest,
    row: UploadRow,
    durability: Durability,
) -> Result<NewArtifact> {
    let id = ArtifactId::new();
    let key = key_for(&row, id);
    let size_bytes = body.len();
    let options = PutOptions::new(row.content_type.clone(), sha256).durability(durability);
    let stored = match body {
        UploadBody::Bytes(bytes) => blobs.put(&key, bytes, options).await,
        UploadBody::Stream(body) => blobs.put_stream(&key, body, options).await,
    };
    stored.map_err(|source| WorkspaceError::Blob {
        op: "stored",
        key: key.to_string(),
        source,
    })?;
    Ok(new_artifact(id, key, row, size_bytes, sha256))
}

/// [`upload`] for the `len` bytes of an open file (from its current
/// position), through [`BlobStore::put_file`]: the blob store computes the
/// digest while it stores the bytes, so the caller need not read the file
/// first, and the row carries the digest of exactly the bytes stored.
///
/// # Errors
/// As [`upload`]; a file that does not hold `len` bytes (it changed since
/// its length was taken) is refused and nothing is stored.
///
/// # Cancel safety
/// As [`upload_artifact`].
pub async fn upload_file(
    blobs: &dyn BlobStore,
    file: std::fs::File,
    len: u64,
    row: UploadRow,
    durability: Durability,
) -> Result<NewArtifact> {
    let id = ArtifactId::new();
    let key = key_for(&row, id);
    let options = PutFileOptions::new(row.content_type.clone()).durability(durability);
    let sha256 = blobs
        .put_file(&key, file, len, options)
        .await
        .map_err(|source| WorkspaceError::Blob {
            op: "stored",
            key: key.to_string(),
            source,
        })?;
    Ok(new_artifact(id, key, row, len, sha256))
}

/// The row describing bytes stored at `key`.
fn new_artifact(
    id: ArtifactId,
    key: BlobKey,
    row: UploadRow,
    size_bytes: u64,
    sha256: Sha256Digest,
) -> NewArtifact {
    NewArtifact {
        id,
        incident_id: row.incident,
        session_id: row.session,
        kind: row.kind,
        path: row.path,
        blob_key: key.to_string(),
        content_type: row.content_type,
        size_bytes,
        sha256: sha256.to_hex(),
        revision: row.revision,
        fence: row.fence,
    }
}

/// The blob key of an upload; see [`upload_artifact`].
fn key_for(row: &UploadRow, id: ArtifactId) -> BlobKey {
    let (incident, session) = (row.incident.as_uuid(), row.session.as_uuid());
    if row.kind == ArtifactKind::Report {
        report_key(incident, session, row.revision, row.fence)
    } else {
        // `artifact_key` keeps only the path's last segment.
        artifact_key(incident, session, id.as_uuid(), &row.path)
    }
}

#[cfg(test)]
mod tests {
    use korvus_blob::MemoryBlobStore;

    use super::*;
    use crate::{HARVEST_MANIFEST, REPORT_FILE};

    fn row(kind: ArtifactKind, path: &str) -> UploadRow {
        UploadRow {
            incident: IncidentId::new(),
            session: SessionId::new(),
            revision: 3,
            kind,
            path: path.to_owned(),
            content_type: "text/plain".to_owned(),
            fence: 1,
        }
    }

    #[tokio::test]
    async fn reports_go_to_the_report_key_and_the_rest_to_a_unique_artifact_key() {
        let blobs = MemoryBlobStore::new();
        let bytes = Bytes::from_static(b"# R\n");
        let digest = Sha256Digest::of(&bytes);

        let report = row(ArtifactKind::Report, REPORT_FILE);
        let expected = report_key(
            report.incident.as_uuid(),
            report.session.as_uuid(),
            3,
            report.fence,
        );
        let new = upload_artifact(&blobs, bytes.clone(), digest, report.clone())
            .await
            .unwrap();
        assert_eq!(new.blob_key, expected.as_str());
        assert_eq!((new.path.as_str(), new.revision), (REPORT_FILE, 3));
        assert_eq!((new.size_bytes, new.sha256), (4, digest.to_hex()));
        assert_eq!(blobs.get(&expected).await.unwrap().bytes, bytes);

        let manifest = row(ArtifactKind::AgentOutput, HARVEST_MANIFEST);
        let a = upload_artifact(&blobs, bytes.clone(), digest, manifest.clone());
        let b = upload_artifact(&blobs, bytes.clone(), digest, manifest);
        let (a, b) = (a.await.unwrap(), b.await.unwrap());
        assert_ne!(a.blob_key, b.blob_key);
        assert!(a
            .blob_key
            .ends_with(&format!("/artifacts/{}/harvest.json", a.id)));
    }

    #[tokio::test]
    async fn a_wrong_digest_is_a_blob_error_and_stores_nothing() {
        let blobs = MemoryBlobStore::new();
        let wrong = Sha256Digest::of(b"other");
        let err = upload_artifact(
            &blobs,
            Bytes::from_static(b"x"),
            wrong,
            row(ArtifactKind::AgentOutput, "a.txt"),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(err, WorkspaceError::Blob { op: "stored", .. }),
            "{err}"
        );
        assert!(blobs.list(None).await.unwrap().is_empty());
    }
}
