//! The landing after checkpoints: which files the run's checkpoints still
//! hold (promoted, not uploaded), which checkpoint rows the landing's one
//! transition deletes, and which checkpoint bytes go after it.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use cap_std::fs::Dir;
use tracing::warn;

use korvus_blob::{BlobKey, BlobStore};
use korvus_store::{ArtifactId, NewArtifact};
use korvus_workspace::{WorkspacePath, REPORT_FILE};

use super::state::{admission, promoted_row, standing, CheckpointState, Known, Standing};
use crate::config::{PersistConfig, PersistRequest};
use crate::file::{open_file, store_file, FileResult, Opened};
use crate::outcome::UnchangedFile;
use crate::walk::Candidate;

/// What a run's checkpoints stored, as its landing reads it.
#[derive(Debug)]
pub(crate) struct Prior {
    known: Arc<BTreeMap<WorkspacePath, Known>>,
    /// Every checkpoint row of the run: all deleted by the landing.
    rows: Vec<ArtifactId>,
}

impl Prior {
    /// The landing's view of `state`.
    pub(crate) fn new(state: CheckpointState) -> Self {
        let rows = state
            .known
            .values()
            .filter_map(|k| k.version.as_ref().map(|v| v.artifact))
            .collect();
        Self {
            known: state.known,
            rows,
        }
    }

    /// The cap decision of the landing's walk: after checkpoints, the
    /// paths they hold keep their places ([`admission`]); without, the
    /// first `max_files` files.
    pub(crate) fn admission(
        prior: Option<&Prior>,
        max_files: usize,
    ) -> Box<dyn FnMut(&WorkspacePath) -> bool + '_> {
        match prior {
            Some(p) => Box::new(admission(&p.known, max_files)),
            None => {
                let mut others = 0usize;
                Box::new(move |_| {
                    let room = others < max_files;
                    others += usize::from(room);
                    room
                })
            }
        }
    }

    /// Every checkpoint row of the run.
    pub(crate) fn checkpoint_rows(&self) -> Vec<ArtifactId> {
        self.rows.clone()
    }

    /// Deletes the bytes of the checkpoints the landing did not promote
    /// (superseded by a newer file, or of files gone), once the final rows
    /// are written. Best effort: a failure is logged, the sweeper collects
    /// what it leaves.
    pub(crate) async fn delete_unpromoted(&self, blobs: &dyn BlobStore, rows: &[NewArtifact]) {
        let kept: HashSet<&str> = rows.iter().map(|r| r.blob_key.as_str()).collect();
        let keys: Vec<BlobKey> = self
            .known
            .values()
            .filter_map(|k| k.version.as_ref())
            .filter(|v| !kept.contains(v.blob_key.as_str()))
            .filter_map(|v| BlobKey::new(v.blob_key.as_str()).ok())
            .collect();
        if keys.is_empty() {
            return;
        }
        for (key, e) in blobs.delete_many(&keys).await {
            warn!(%key, error = %e, "checkpoint bytes not deleted; the sweeper will");
        }
    }
}

/// One file of a landing after checkpoints: promoted when its checkpoint
/// holds its bytes (by stat, or by digest where the stat cannot vouch),
/// unchanged when it still equals its restored twin, else stored as the
/// landing stores any file.
pub(crate) async fn land_file(
    dir: &Arc<Dir>,
    blobs: &dyn BlobStore,
    request: &PersistRequest,
    config: &PersistConfig,
    candidate: Candidate,
    prior: &Prior,
) -> FileResult {
    let known = match standing(prior.known.get(&candidate.path), &candidate) {
        Standing::Unchanged(k) => Some(k),
        Standing::Verify(k) => {
            let twin = request.restored.get(&candidate.path);
            let limit = if candidate.path.as_str() == REPORT_FILE {
                config.report_max_bytes
            } else {
                config.max_file_bytes
            };
            let digest = k.digest(twin);
            let same = open_file(dir, &candidate, limit, digest).await;
            matches!(same, Ok(Opened::Unchanged { .. })).then_some(k)
        }
        Standing::Changed => None,
    };
    let Some(known) = known else {
        return store_file(dir, blobs, request, config, candidate).await;
    };
    if let Some(version) = &known.version {
        let row = promoted_row(request, &candidate.path, version);
        return FileResult::Promoted(Box::new(row));
    }
    match request.restored.get(&candidate.path) {
        Some(twin) => FileResult::Unchanged(UnchangedFile {
            path: candidate.path.as_str().to_owned(),
            artifact_id: twin.artifact.id,
            blob_key: twin.artifact.blob_key.clone(),
            size: known.stat.size,
        }),
        None => store_file(dir, blobs, request, config, candidate).await,
    }
}
