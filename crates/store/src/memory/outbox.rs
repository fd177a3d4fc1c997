//! The memory store's [`Outbox`]: an event per transition into a terminal
//! or waiting row, written under the same lock as the transition.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{Inner, MemoryStore};
use crate::{
    IncidentId, Outbox, OutboxEvent, OutboxKey, OutboxKind, OwnerId, Result, Session, SessionStatus,
};

/// One stored event.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    order: u64,
    incident_id: IncidentId,
    status: SessionStatus,
    exit_reason: Option<crate::ExitReason>,
    occurred_at: DateTime<Utc>,
    due: DateTime<Utc>,
    attempts: u32,
    claim: Option<(OwnerId, DateTime<Utc>)>,
    delivered: bool,
    last_error: Option<String>,
}

impl Inner {
    /// Records the event of a transition that left `row` as it is now,
    /// when it is terminal or waiting (once per run and kind).
    pub(super) fn outbox_note(&mut self, row: &Session, now: DateTime<Utc>) {
        let kind = if row.status.is_terminal() {
            OutboxKind::Ended
        } else if row.is_idle() {
            OutboxKind::Waiting
        } else {
            return;
        };
        let key = (row.id, row.revision, row.fence, kind);
        if self.outbox.contains_key(&key) {
            return;
        }
        self.next_outbox += 1;
        self.outbox.insert(
            key,
            Entry {
                order: self.next_outbox,
                incident_id: row.incident_id,
                status: row.status,
                exit_reason: row.exit_reason.clone(),
                occurred_at: now,
                due: now,
                attempts: 0,
                claim: None,
                delivered: false,
                last_error: None,
            },
        );
    }
}

fn key_of(
    (session_id, revision, fence, kind): (crate::SessionId, u32, u64, OutboxKind),
) -> OutboxKey {
    OutboxKey {
        session_id,
        revision,
        fence,
        kind,
    }
}

fn tuple(key: OutboxKey) -> (crate::SessionId, u32, u64, OutboxKind) {
    (key.session_id, key.revision, key.fence, key.kind)
}

#[async_trait]
impl Outbox for MemoryStore {
    async fn claim_events(
        &self,
        claimer: OwnerId,
        limit: u32,
        ttl: Duration,
    ) -> Result<Vec<OutboxEvent>> {
        let now = self.now();
        let until = now + chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::MAX);
        let mut inner = self.lock();
        let mut due: Vec<_> = inner
            .outbox
            .iter()
            .filter(|(_, e)| {
                !e.delivered && e.due <= now && e.claim.is_none_or(|(_, until)| until <= now)
            })
            .map(|(k, e)| (e.order, *k))
            .collect();
        due.sort_unstable();
        due.truncate(limit as usize);
        let mut claimed = Vec::new();
        for (_, k) in due {
            let e = inner.outbox.get_mut(&k).expect("listed above");
            e.attempts += 1;
            e.claim = Some((claimer, until));
            claimed.push(OutboxEvent {
                key: key_of(k),
                incident_id: e.incident_id,
                status: e.status,
                exit_reason: e.exit_reason.clone(),
                occurred_at: e.occurred_at,
                attempts: e.attempts,
            });
        }
        Ok(claimed)
    }

    async fn mark_delivered(&self, key: OutboxKey) -> Result<()> {
        if let Some(e) = self.lock().outbox.get_mut(&tuple(key)) {
            e.delivered = true;
            e.claim = None;
        }
        Ok(())
    }

    async fn mark_failed(
        &self,
        key: OutboxKey,
        claimer: OwnerId,
        retry_in: Duration,
        error: &str,
    ) -> Result<()> {
        let due =
            self.now() + chrono::Duration::from_std(retry_in).unwrap_or(chrono::Duration::MAX);
        if let Some(e) = self.lock().outbox.get_mut(&tuple(key)) {
            if !e.delivered && e.claim.is_some_and(|(by, _)| by == claimer) {
                e.claim = None;
                e.due = due;
                e.last_error = Some(error.to_owned());
            }
        }
        Ok(())
    }

    async fn undelivered(&self) -> Result<u64> {
        Ok(self.lock().outbox.values().filter(|e| !e.delivered).count() as u64)
    }
}
