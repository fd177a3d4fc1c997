//! Retention in the memory store: [`Store::delete_session`](crate::Store::delete_session).

use super::MemoryStore;
use crate::{constraint, Entity, Result, SessionId, StoreError};

impl MemoryStore {
    /// Deletes a terminal session at `fence` and its rows, under one lock.
    pub(super) fn delete_session_rows(&self, id: SessionId, fence: u64) -> Result<()> {
        let mut inner = self.lock();
        let session = inner
            .sessions
            .get(&id)
            .ok_or_else(|| StoreError::not_found(Entity::Session, id))?;
        if let Some(refused) = session.deletion_refusal(fence) {
            return Err(refused);
        }
        let inherited = inner.context_refs.iter().any(|(holder, refs)| {
            *holder != id
                && refs.iter().any(|r| {
                    inner
                        .artifacts
                        .get(&r.artifact_id)
                        .is_some_and(|a| a.session_id == id)
                })
        });
        if inherited {
            return Err(StoreError::Constraint {
                name: constraint::CONTEXT_REFS_ARTIFACT_FK.to_owned(),
            });
        }
        inner.context_refs.remove(&id);
        inner.reports.retain(|(session, _), _| *session != id);
        inner.artifacts.retain(|_, a| a.session_id != id);
        inner.queued.remove(&id);
        inner.sessions.remove(&id);
        self.leases().forget(id);
        inner.outbox.retain(|(session, ..), _| *session != id);
        inner.budgets.remove(&crate::BudgetScope::Session(id));
        Ok(())
    }
}
