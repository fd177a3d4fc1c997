//! A persist phase whose rows are held for the caller: the bytes are
//! stored as [`persist`](crate::persist) stores them, but the artifact rows
//! are returned instead of written, so the caller can write them in a
//! transaction of its own — a salvage of a settled session attaches them
//! with its report row in one step
//! ([`Coordination::attach_kept_output`](korvus_store::Coordination::attach_kept_output)).

use std::sync::{Arc, Mutex};

use korvus_blob::{salvage_manifest_key, BlobStore};
use korvus_store::NewArtifact;

use crate::config::{PersistConfig, PersistRequest};
use crate::manifest::store_manifest_at;
use crate::outcome::PersistOutcome;
use crate::persist::{rows_failed, run_phase, Rows};

/// What a held phase stored, and the rows that would make it visible.
#[derive(Debug)]
#[non_exhaustive]
pub struct HeldRows {
    /// The phase's outcome; `rows_written` is false until
    /// [`attached`](HeldRows::attached) says the caller wrote them (true
    /// already when the phase stored nothing: there are no rows to write).
    pub outcome: PersistOutcome,
    /// The artifact rows of every stored file (bytes stored and made
    /// durable), not yet written.
    pub rows: Vec<NewArtifact>,
}

impl HeldRows {
    /// Records that the caller wrote [`rows`](HeldRows::rows).
    pub fn attached(&mut self) {
        self.outcome.rows_written = true;
    }

    /// Records that the rows were not written, for `cause`: every stored
    /// file becomes failed at the row stage (its bytes stay, harmless), as
    /// a phase whose own row write failed reports it.
    pub fn refused(&mut self, cause: &str) {
        rows_failed(&mut self.outcome, cause);
        self.rows.clear();
    }

    /// Stores the phase's manifest, as the rows will be once attached,
    /// and records its key in the outcome (none when it was not stored,
    /// within `config.manifest_timeout`). Call it before the attach: the
    /// report row the attach writes names it, in the same transaction as
    /// the rows, so a manifest a row names never says more than happened.
    /// Its key is this salvage's own
    /// ([`salvage_manifest_key`](korvus_blob::salvage_manifest_key)): a
    /// salvage racing it for the same fence never overwrites it.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped, the manifest may be stored while the outcome
    /// does not name it, so no row will; `sweep` removes such a blob later.
    pub async fn store_manifest(
        &mut self,
        blobs: &dyn BlobStore,
        config: &PersistConfig,
        request: &PersistRequest,
    ) {
        let mut described = self.outcome.clone();
        described.rows_written = self.outcome.attempted;
        let key = salvage_manifest_key(
            request.incident.as_uuid(),
            request.session.as_uuid(),
            request.revision,
            request.fence,
            uuid::Uuid::now_v7(),
        );
        store_manifest_at(blobs, key, &mut described, config.manifest_timeout).await;
        self.outcome.manifest_key = described.manifest_key;
    }
}

/// Runs the persist phase of `request` (the same walk, skip rules, caps,
/// uploads, one barrier and bound as [`persist`](crate::persist)) but
/// returns the artifact rows instead of writing them, and stores no
/// manifest (see [`HeldRows::store_manifest`]).
///
/// `request.scratch: None` skips the phase (`attempted: false`).
///
/// # Cancel safety
/// Dropping the future does not stop the phase's task, which then runs on
/// without its timeout; the rows it holds are dropped with it, so the bytes it
/// stores are referenced by no row and `sweep` removes them later.
pub async fn persist_held(
    blobs: Arc<dyn BlobStore>,
    config: &PersistConfig,
    request: PersistRequest,
) -> HeldRows {
    let Some(scratch) = request.scratch.clone() else {
        return HeldRows {
            outcome: PersistOutcome::skipped_phase("no scratch directory"),
            rows: Vec::new(),
        };
    };
    let held = Arc::new(Mutex::new(Vec::new()));
    let (outcome, _, _) = run_phase(
        Rows::Hold(Arc::clone(&held)),
        blobs,
        config,
        request,
        scratch,
        None,
    )
    .await;
    let rows = std::mem::take(&mut *held.lock().unwrap_or_else(|p| p.into_inner()));
    // A phase cut short recorded its stored files as failed at the row
    // stage: their rows are not offered.
    let rows = if outcome.stored.is_empty() {
        Vec::new()
    } else {
        rows
    };
    HeldRows { outcome, rows }
}
