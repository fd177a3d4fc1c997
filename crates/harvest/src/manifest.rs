//! The harvest manifest: the [`PersistOutcome`] of a phase, stored at
//! [`manifest_key`] **after** the phase's rows (so it can say whether they
//! were written), also when the phase was cut short, and referenced by the
//! revision's report row.

use std::time::Duration;

use bytes::Bytes;
use tracing::warn;

use korvus_blob::{manifest_key, BlobKey, BlobStore, Durability, PutOptions};
use korvus_workspace::HARVEST_MANIFEST;

use crate::config::PersistRequest;
use crate::outcome::{error_chain, PersistOutcome};

/// The workspace path of the harvest manifest under its older name; the
/// same constant as [`HARVEST_MANIFEST`], kept for existing callers.
/// Manifests are no longer artifact rows: the report row's
/// [`manifest_key`](korvus_store::Report::manifest_key) points at them.
pub const MANIFEST_PATH: &str = HARVEST_MANIFEST;

/// The content type the manifest is stored with.
const MANIFEST_CONTENT_TYPE: &str = "application/json";

/// Stores `outcome` as the manifest of `request`'s revision, within
/// `limit`, and records its key in `outcome` when it was stored. Losing
/// the manifest is logged and changes nothing else: it only describes the
/// phase.
pub(crate) async fn store_manifest(
    blobs: &dyn BlobStore,
    request: &PersistRequest,
    outcome: &mut PersistOutcome,
    limit: Duration,
) {
    let key = manifest_key(
        request.incident.as_uuid(),
        request.session.as_uuid(),
        request.revision,
        request.fence,
    );
    store_manifest_at(blobs, key, outcome, limit).await;
}

/// [`store_manifest`] under `key`.
pub(crate) async fn store_manifest_at(
    blobs: &dyn BlobStore,
    key: BlobKey,
    outcome: &mut PersistOutcome,
    limit: Duration,
) {
    // The manifest names its own key, as the report row will.
    outcome.manifest_key = Some(key.to_string());
    let bytes = match serde_json::to_vec_pretty(&*outcome) {
        Ok(b) => Bytes::from(b),
        Err(e) => {
            warn!(error = %e, "harvest manifest does not serialise");
            outcome.manifest_key = None;
            return;
        }
    };
    // After a phase that stored files and wrote their rows (so its
    // barrier ran and worked): deferred, then one barrier (on files one
    // flush of its own instead of an fsync for each of the object, its
    // metadata and their directories). Otherwise durable on return, so a
    // stuck or failing flush cannot also cost the manifest that records
    // it.
    let durability = if outcome.rows_written && !outcome.stored.is_empty() {
        Durability::AtBarrier
    } else {
        Durability::OnReturn
    };
    let options = PutOptions::for_bytes(MANIFEST_CONTENT_TYPE, &bytes).durability(durability);
    let put_durably = async {
        blobs.put(&key, bytes, options).await?;
        match durability {
            Durability::AtBarrier => blobs.barrier().await,
            Durability::OnReturn => Ok(()),
        }
    };
    let stored = tokio::time::timeout(limit, put_durably).await;
    let failure = match stored {
        Ok(Ok(())) => return,
        Ok(Err(e)) => error_chain(&e),
        Err(_) => format!("not stored within {limit:?}"),
    };
    warn!(error = %failure, "harvest manifest not stored");
    outcome.manifest_key = None;
}
