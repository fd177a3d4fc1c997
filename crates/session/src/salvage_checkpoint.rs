//! Salvage from the last checkpoint: a takeover on another host (the
//! dead run's scratch dir is not here) lands what the dead run's
//! checkpoints stored (`checkpoints.rs`) — the revision's `checkpoint`
//! rows become its final rows (`report`, `agent_output`, `agent_state`),
//! naming the same bytes, under the takeover's fence; the `report.md`
//! the checkpoints hold becomes the report row's document. Nothing is
//! uploaded: the bytes are in the blob store already.

use std::collections::BTreeMap;

use korvus_store::{Artifact, ArtifactId, ArtifactKind, NewArtifact, Session, StoreExt as _};
use korvus_workspace::REPORT_FILE;
use tracing::{info, warn};

use crate::inner::Inner;
use crate::salvage::Salvaged;

impl Inner {
    /// Lands the last checkpoint of the lost run of `row` (taken over, at
    /// `row.fence`): its newest checkpoint row of each path of the
    /// revision, written again as final rows at the takeover's fence.
    /// `None` when the revision has no checkpoint.
    pub(crate) async fn salvage_checkpoint(&self, row: &Session) -> Option<Salvaged> {
        // A run that never started made no checkpoint.
        row.started_at?;
        let artifacts = match self.store.all_session_artifacts(row.id).await {
            Ok(a) => a,
            Err(e) => {
                warn!(session_id = %row.id, error = %e, "the lost run's checkpoints not read");
                return None;
            }
        };
        let newest = newest_checkpoints(artifacts, row.revision);
        let last = newest.values().map(|a| a.created_at).max()?;
        let rows: Vec<NewArtifact> = newest
            .values()
            .map(|a| NewArtifact {
                id: ArtifactId::new(),
                incident_id: a.incident_id,
                session_id: a.session_id,
                kind: korvus_harvest::final_kind(&a.path),
                path: a.path.clone(),
                blob_key: a.blob_key.clone(),
                content_type: a.content_type.clone(),
                size_bytes: a.size_bytes,
                sha256: a.sha256.clone(),
                revision: a.revision,
                fence: row.fence,
            })
            .collect();
        let markdown = rows
            .iter()
            .find(|r| r.kind == ArtifactKind::Report && r.path == REPORT_FILE)
            .map(|r| (r.blob_key.clone(), r.size_bytes));
        let written = self.store.create_artifacts(rows.clone()).await;
        let (stored, detail, complete) = match written {
            Ok(_) => (rows.len(), None, true),
            Err(e) => {
                warn!(session_id = %row.id, error = %e, "the lost run's checkpoint not landed");
                (
                    0,
                    Some(format!("its last checkpoint not landed: {e}")),
                    false,
                )
            }
        };
        info!(session_id = %row.id, stored, "landed the lost run's last checkpoint");
        crate::metrics::salvaged(stored as u64, complete);
        Some(Salvaged {
            dir: None,
            from: format!(
                "the checkpoint of the lost run taken at {}, landed by manager {}",
                last.format("%Y-%m-%d %H:%M:%S%.3f UTC"),
                self.ownership.owner()
            ),
            markdown: markdown.filter(|_| complete),
            manifest_key: None,
            stored,
            detail,
            complete,
        })
    }
}

/// The newest checkpoint row of each path of `revision` (the lost run's:
/// an earlier run of the revision was fenced off before it), by
/// (`created_at`, fence).
pub(crate) fn newest_checkpoints(
    artifacts: Vec<Artifact>,
    revision: u32,
) -> BTreeMap<String, Artifact> {
    let mut newest: BTreeMap<String, Artifact> = BTreeMap::new();
    for a in artifacts {
        if a.kind != ArtifactKind::Checkpoint || a.revision != revision {
            continue;
        }
        let newer = newest
            .get(&a.path)
            .is_some_and(|n| (n.fence, n.created_at) > (a.fence, a.created_at));
        if !newer {
            newest.insert(a.path.clone(), a);
        }
    }
    newest
}
