//! The memory store's lookups of its state and the queue's places in
//! line.

use super::Inner;
use crate::{Entity, IncidentId, Result, Session, SessionId, StoreError};

impl Inner {
    /// Records that `id` was queued now when it has no owner; an owned
    /// row (created or continued under a lease) has no place in line
    /// until it is given back (`release` gives it one then).
    pub(super) fn queue_if_unowned(&mut self, id: SessionId, owner: Option<crate::OwnerId>) {
        if owner.is_none() {
            self.next_queued += 1;
            self.queued.insert(id, self.next_queued);
        } else {
            self.queued.remove(&id);
        }
    }

    pub(super) fn session(&self, id: SessionId) -> Result<&Session> {
        self.sessions
            .get(&id)
            .ok_or_else(|| StoreError::not_found(Entity::Session, id))
    }

    pub(super) fn session_in(&self, id: SessionId, incident: IncidentId, name: &str) -> Result<()> {
        match self.sessions.get(&id) {
            Some(s) if s.incident_id == incident => Ok(()),
            _ => Err(StoreError::Constraint {
                name: name.to_owned(),
            }),
        }
    }

    /// Gives `id` a place in line unless it has one (a row created owned
    /// and queued only now gets now).
    pub(super) fn keep_place(&mut self, id: SessionId) {
        if !self.queued.contains_key(&id) {
            self.next_queued += 1;
            self.queued.insert(id, self.next_queued);
        }
    }
}
