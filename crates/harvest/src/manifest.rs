//! The harvest manifest: the [`PersistOutcome`] of a phase, stored as one
//! more artifact at [`HARVEST_MANIFEST`] so a reader can see later what a
//! harvest stored, left out and failed.

use bytes::Bytes;
use tracing::warn;

use korvus_blob::Durability;
use korvus_blob::{BlobStore, Sha256Digest};
use korvus_store::{ArtifactKind, NewArtifact};
use korvus_workspace::{upload, UploadBody, UploadRow, HARVEST_MANIFEST};

use crate::outcome::{error_chain, PersistOutcome};
use crate::persist::PersistRequest;

/// The workspace path of the harvest manifest under its older name; the
/// same constant as [`HARVEST_MANIFEST`], kept for existing callers.
pub const MANIFEST_PATH: &str = HARVEST_MANIFEST;

/// The content type the manifest is stored with.
const MANIFEST_CONTENT_TYPE: &str = "application/json";

/// Uploads `outcome` as the harvest manifest and returns its row, to be
/// written with the files' rows. `None` when it cannot be serialised or
/// uploaded: the manifest only describes the phase, so losing it is logged
/// and nothing else changes.
pub(crate) async fn upload_manifest(
    blobs: &dyn BlobStore,
    request: &PersistRequest,
    outcome: &PersistOutcome,
) -> Option<NewArtifact> {
    let bytes = match serde_json::to_vec_pretty(outcome) {
        Ok(b) => b,
        Err(e) => {
            warn!(error = %e, "harvest manifest does not serialise");
            return None;
        }
    };
    let digest = Sha256Digest::of(&bytes);
    let row = UploadRow {
        incident: request.incident,
        session: request.session,
        revision: request.revision,
        kind: ArtifactKind::AgentOutput,
        path: HARVEST_MANIFEST.to_owned(),
        content_type: MANIFEST_CONTENT_TYPE.to_owned(),
        fence: request.fence,
    };
    let body = UploadBody::Bytes(Bytes::from(bytes));
    match upload(blobs, body, digest, row, Durability::AtBarrier).await {
        Ok(row) => Some(row),
        Err(e) => {
            warn!(error = %error_chain(&e), "harvest manifest not stored");
            None
        }
    }
}
