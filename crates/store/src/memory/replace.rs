//! Checkpoint rows in the memory store:
//! [`Store::replace_checkpoints`](crate::Store::replace_checkpoints).

use std::collections::BTreeSet;

use chrono::Utc;

use super::MemoryStore;
use crate::{
    constraint, validate, Artifact, ArtifactId, ArtifactKind, Entity, NewArtifact, Result,
    SessionId, StoreError,
};

impl MemoryStore {
    /// Inserts `insert` and deletes the checkpoint rows `delete` under one
    /// lock, every check made before anything is written.
    pub(super) fn replace_checkpoint_rows(
        &self,
        session: SessionId,
        fence: u64,
        insert: Vec<NewArtifact>,
        delete: &[ArtifactId],
    ) -> Result<Vec<Artifact>> {
        validate::replacement(session, fence, &insert)?;
        let mut inner = self.lock();
        let row = inner.session(session)?;
        if let Some(refused) = row.refusal(fence) {
            return Err(refused);
        }
        let incident = row.incident_id;
        if insert.iter().any(|n| n.incident_id != incident) {
            return Err(StoreError::Constraint {
                name: constraint::ARTIFACTS_SESSION_FK.to_owned(),
            });
        }
        let delete: BTreeSet<ArtifactId> = delete.iter().copied().collect();
        for id in &delete {
            let deletable = inner.artifacts.get(id).is_some_and(|a| {
                a.session_id == session && a.fence == fence && a.kind == ArtifactKind::Checkpoint
            });
            if !deletable {
                return Err(StoreError::not_found(Entity::Artifact, id));
            }
        }
        for (i, n) in insert.iter().enumerate() {
            if inner.artifacts.contains_key(&n.id) || insert[..i].iter().any(|o| o.id == n.id) {
                return Err(StoreError::Conflict {
                    entity: Entity::Artifact,
                    detail: format!("artifact id {} already exists", n.id),
                });
            }
        }
        for id in &delete {
            inner.artifacts.remove(id);
        }
        let now = Utc::now();
        let stored: Vec<Artifact> = insert.into_iter().map(|n| n.stored_at(now)).collect();
        for a in &stored {
            inner.artifacts.insert(a.id, a.clone());
        }
        Ok(stored)
    }
}
