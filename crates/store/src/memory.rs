//! [`MemoryStore`]: the whole [`Store`] contract in process memory.

mod budget;
mod delete;
mod lease;
mod outbox;
mod owners;
mod pages;
mod replace;
mod salvage;
mod state;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicI64;
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use chrono::Utc;

use crate::{
    constraint, validate, Artifact, ArtifactId, ContextRef, ContinueFrom, Entity, Incident,
    IncidentId, IncidentStatus, Lease, NewArtifact, NewIncident, NewReport, NewSession, Page,
    Paged, Report, Result, Session, SessionContextRef, SessionId, SessionStatus, Settlement, Store,
    StoreError,
};

/// A [`Store`] that keeps every row in memory, behind one lock.
///
/// It enforces the same rules as the SQL backends, with the same constraint
/// names, so tests written against it hold against a database. Every operation
/// takes the lock once and runs to completion under it, which makes each one
/// atomic and makes `seq` allocation and reopen race-free.
///
/// Leases are judged by the store's own clock: the system clock plus an
/// offset that [`advance_clock`](MemoryStore::advance_clock) moves, so a
/// test can expire a lease without waiting.
#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
    /// The owners' leases; taken after `inner` when both are.
    leases: Mutex<owners::Leases>,
    /// Milliseconds added to the system clock.
    clock_offset_ms: AtomicI64,
}

#[derive(Debug, Default)]
struct Inner {
    incidents: BTreeMap<IncidentId, Incident>,
    sessions: HashMap<SessionId, Session>,
    last_seq: HashMap<IncidentId, u32>,
    reports: BTreeMap<(SessionId, u32), Report>,
    artifacts: BTreeMap<ArtifactId, Artifact>,
    context_refs: HashMap<SessionId, Vec<SessionContextRef>>,
    /// When each queued row was queued, as a running number: the queue's
    /// order within a key.
    queued: HashMap<SessionId, u64>,
    next_queued: u64,
    /// When each (pool, key) last had a session claimed, as a running
    /// number: keys take turns.
    key_turns: HashMap<(String, String), u64>,
    next_turn: u64,
    /// The webhook outbox, by (session, revision, fence, kind).
    outbox: BTreeMap<(SessionId, u32, u64, crate::OutboxKind), outbox::Entry>,
    next_outbox: u64,
    /// The budgets set, by scope: limits and what was spent.
    budgets: HashMap<crate::BudgetScope, crate::Budget>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave a row half-written: every
        // operation validates first and mutates last, so the data is consistent
        // and it is safe to keep serving.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Applies `change` to an idle session under the lock, so of concurrent
    /// transitions exactly one finds it idle.
    fn idle_transition(&self, id: SessionId, change: impl FnOnce(&mut Session)) -> Result<Session> {
        let mut inner = self.lock();
        let session = inner
            .sessions
            .get_mut(&id)
            .ok_or_else(|| StoreError::not_found(Entity::Session, id))?;
        if !session.is_idle() {
            return Err(StoreError::NotIdle { session: id });
        }
        change(session);
        let row = session.clone();
        inner.outbox_note(&row, self.now());
        Ok(row)
    }

    /// Writes a settlement into a session row: the run is over, so its
    /// owner and lease (and its claim) go too.
    fn settle(&self, session: &mut Session, settlement: Settlement) {
        session.ended_at = settlement.status.is_terminal().then(Utc::now);
        session.status = settlement.status;
        session.exit_reason = settlement.exit_reason;
        session.counters = settlement.counters;
        self.own(session, None);
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn create_incident(&self, new: NewIncident) -> Result<Incident> {
        validate::new_incident(&new)?;
        let incident = Incident {
            id: IncidentId::new(),
            title: new.title,
            status: IncidentStatus::Open,
            workspace: new.workspace,
            created_at: Utc::now(),
        };
        self.lock().incidents.insert(incident.id, incident.clone());
        Ok(incident)
    }

    async fn get_incident(&self, id: IncidentId) -> Result<Incident> {
        self.lock()
            .incidents
            .get(&id)
            .cloned()
            .ok_or_else(|| StoreError::not_found(Entity::Incident, id))
    }

    async fn list_incidents(&self, page: Page) -> Result<Paged<Incident>> {
        self.incidents_page(&page)
    }

    async fn close_incident(&self, id: IncidentId) -> Result<Incident> {
        let mut inner = self.lock();
        let incident = inner
            .incidents
            .get_mut(&id)
            .ok_or_else(|| StoreError::not_found(Entity::Incident, id))?;
        incident.status = IncidentStatus::Closed;
        Ok(incident.clone())
    }

    async fn create_session(&self, new: NewSession) -> Result<Session> {
        validate::new_session(&new)?;
        let mut inner = self.lock();
        if !inner.incidents.contains_key(&new.incident_id) {
            return Err(StoreError::not_found(Entity::Incident, new.incident_id));
        }
        if inner.sessions.contains_key(&new.id) {
            return Err(StoreError::Conflict {
                entity: Entity::Session,
                detail: format!("session id {} already exists", new.id),
            });
        }
        if let Some(key) = &new.admission.idempotency_key {
            let taken = inner.sessions.values().any(|s| {
                s.incident_id == new.incident_id
                    && s.admission.idempotency_key.as_ref() == Some(key)
            });
            if taken {
                return Err(StoreError::Conflict {
                    entity: Entity::Session,
                    detail: format!("idempotency key {key:?} is taken in this incident"),
                });
            }
        }
        let seq = {
            let last = inner.last_seq.entry(new.incident_id).or_insert(0);
            *last += 1;
            *last
        };
        let session = Session {
            id: new.id,
            incident_id: new.incident_id,
            seq,
            kind: crate::SessionKind::for_seq(seq),
            status: SessionStatus::Running,
            prompt: new.prompt,
            workspace_ref: new.workspace_ref,
            exit_reason: None,
            counters: Default::default(),
            revision: 1,
            fence: 1,
            cancel_requested: false,
            owner: None,
            lease_expires_at: None,
            created_at: Utc::now(),
            ended_at: None,
            started_at: None,
            attempt: 1,
            resume_pending: false,
            resume_after: None,
            admission: new.admission,
            runner: new.runner,
        };
        let mut session = session;
        self.own(&mut session, new.lease);
        inner.queue_if_unowned(session.id, session.owner);
        inner.sessions.insert(session.id, session.clone());
        Ok(session)
    }

    async fn get_session(&self, id: SessionId) -> Result<Session> {
        self.lock().session(id).cloned()
    }

    async fn session_by_idempotency_key(
        &self,
        incident: IncidentId,
        key: &str,
    ) -> Result<Option<Session>> {
        Ok(self
            .lock()
            .sessions
            .values()
            .find(|s| {
                s.incident_id == incident && s.admission.idempotency_key.as_deref() == Some(key)
            })
            .cloned())
    }

    async fn list_sessions(&self, incident: IncidentId, page: Page) -> Result<Paged<Session>> {
        self.sessions_page(incident, &page)
    }

    async fn insert_context_refs(
        &self,
        session: SessionId,
        refs: &[ContextRef],
    ) -> Result<Vec<SessionContextRef>> {
        for r in refs {
            validate::context_ref(r)?;
        }
        let mut inner = self.lock();
        let incident_id = inner.session(session)?.incident_id;
        let existing = inner
            .context_refs
            .get(&session)
            .map_or(&[][..], Vec::as_slice);
        // Check everything before writing anything: all or nothing.
        let mut seen: Vec<ArtifactId> = existing.iter().map(|r| r.artifact_id).collect();
        for r in refs {
            match inner.artifacts.get(&r.artifact_id) {
                Some(a) if a.incident_id == incident_id => {}
                _ => {
                    return Err(StoreError::Constraint {
                        name: constraint::CONTEXT_REFS_ARTIFACT_FK.to_owned(),
                    })
                }
            }
            if seen.contains(&r.artifact_id) {
                return Err(StoreError::Conflict {
                    entity: Entity::ContextRef,
                    detail: format!(
                        "artifact {} is already a context ref of session {session}",
                        r.artifact_id
                    ),
                });
            }
            seen.push(r.artifact_id);
        }
        let start = existing.len() as u32;
        let stored: Vec<SessionContextRef> = refs
            .iter()
            .enumerate()
            .map(|(i, r)| SessionContextRef {
                session_id: session,
                incident_id,
                artifact_id: r.artifact_id,
                role: r.role.clone(),
                position: start + i as u32,
            })
            .collect();
        inner
            .context_refs
            .entry(session)
            .or_default()
            .extend(stored.iter().cloned());
        Ok(stored)
    }

    async fn list_context_refs(&self, session: SessionId) -> Result<Vec<SessionContextRef>> {
        Ok(self
            .lock()
            .context_refs
            .get(&session)
            .cloned()
            .unwrap_or_default())
    }

    async fn settle_session(&self, id: SessionId, settlement: Settlement) -> Result<Session> {
        validate::settlement(&settlement)?;
        let mut inner = self.lock();
        let session = inner
            .sessions
            .get_mut(&id)
            .ok_or_else(|| StoreError::not_found(Entity::Session, id))?;
        if let Some(refused) = session.refusal(settlement.fence) {
            // A retry whose first attempt committed finds its own outcome.
            if session.holds(&settlement) {
                return Ok(session.clone());
            }
            return Err(refused);
        }
        self.settle(session, settlement);
        let row = session.clone();
        inner.outbox_note(&row, self.now());
        Ok(row)
    }

    async fn continue_session(
        &self,
        id: SessionId,
        from: ContinueFrom,
        lease: Option<Lease>,
    ) -> Result<Session> {
        let mut inner = self.lock();
        let session = inner
            .sessions
            .get_mut(&id)
            .ok_or_else(|| StoreError::not_found(Entity::Session, id))?;
        match from {
            ContinueFrom::Terminal if !session.status.is_terminal() => {
                return Err(StoreError::NotFinished { session: id });
            }
            ContinueFrom::Idle if !session.is_idle() => {
                return Err(StoreError::NotIdle { session: id });
            }
            _ => {}
        }
        session.status = SessionStatus::Running;
        session.ended_at = None;
        session.exit_reason = None;
        session.revision += 1;
        session.fence += 1;
        session.cancel_requested = false;
        session.started_at = None;
        session.attempt = 1;
        self.own(session, lease);
        let (id, owner, row) = (session.id, session.owner, session.clone());
        inner.queue_if_unowned(id, owner);
        Ok(row)
    }

    async fn cancel_idle_session(&self, id: SessionId) -> Result<Session> {
        self.idle_transition(id, |session| {
            session.status = SessionStatus::Cancelled;
            session.exit_reason = Some(crate::ExitReason::CANCELLED);
            session.ended_at = Some(Utc::now());
        })
    }

    async fn delete_session(&self, id: SessionId, fence: u64) -> Result<()> {
        self.delete_session_rows(id, fence)
    }

    async fn create_report(&self, new: NewReport) -> Result<Report> {
        validate::new_report(&new)?;
        let mut inner = self.lock();
        inner.session_in(
            new.session_id,
            new.incident_id,
            constraint::REPORTS_SESSION_FK,
        )?;
        if let Some(refused) = inner.session(new.session_id)?.refusal(new.fence) {
            return Err(refused);
        }
        let key = (new.session_id, new.revision);
        if inner.reports.contains_key(&key) {
            return Err(StoreError::Conflict {
                entity: Entity::Report,
                detail: format!(
                    "session {} already has report revision {}",
                    new.session_id, new.revision
                ),
            });
        }
        let report = new.stored_at(Utc::now());
        inner.reports.insert(key, report.clone());
        Ok(report)
    }

    async fn get_report(&self, session: SessionId, revision: u32) -> Result<Report> {
        self.lock()
            .reports
            .get(&(session, revision))
            .cloned()
            .ok_or_else(|| StoreError::not_found(Entity::Report, format!("{session}/{revision}")))
    }

    async fn list_reports(&self, session: SessionId, page: Page) -> Result<Paged<Report>> {
        self.reports_page(session, &page)
    }

    async fn next_report_revision(&self, session: SessionId) -> Result<u32> {
        let inner = self.lock();
        inner.session(session)?;
        let last = inner
            .reports
            .range((session, 0)..=(session, u32::MAX))
            .next_back()
            .map_or(0, |((_, rev), _)| *rev);
        Ok(last + 1)
    }

    async fn create_artifacts(&self, new: Vec<NewArtifact>) -> Result<Vec<Artifact>> {
        for n in &new {
            validate::new_artifact(n)?;
        }
        let mut inner = self.lock();
        // Every row's session and fence first, as one conditional insert
        // checks them before writing anything.
        for n in &new {
            inner.session_in(
                n.session_id,
                n.incident_id,
                constraint::ARTIFACTS_SESSION_FK,
            )?;
            if let Some(refused) = inner.session(n.session_id)?.refusal(n.fence) {
                return Err(refused);
            }
        }
        for (i, n) in new.iter().enumerate() {
            if inner.artifacts.contains_key(&n.id) || new[..i].iter().any(|o| o.id == n.id) {
                return Err(StoreError::Conflict {
                    entity: Entity::Artifact,
                    detail: format!("artifact id {} already exists", n.id),
                });
            }
        }
        let now = Utc::now();
        let stored: Vec<Artifact> = new.into_iter().map(|n| n.stored_at(now)).collect();
        for a in &stored {
            inner.artifacts.insert(a.id, a.clone());
        }
        Ok(stored)
    }

    async fn replace_checkpoints(
        &self,
        session: SessionId,
        fence: u64,
        insert: Vec<NewArtifact>,
        delete: Vec<ArtifactId>,
    ) -> Result<Vec<Artifact>> {
        self.replace_checkpoint_rows(session, fence, insert, &delete)
    }

    async fn get_artifacts(&self, ids: &[ArtifactId]) -> Result<Vec<Artifact>> {
        let inner = self.lock();
        Ok(ids
            .iter()
            .filter_map(|id| inner.artifacts.get(id).cloned())
            .collect())
    }

    async fn list_session_artifacts(
        &self,
        session: SessionId,
        page: Page,
    ) -> Result<Paged<Artifact>> {
        self.artifacts_page(&page, |a| a.session_id == session)
    }

    async fn list_incident_artifacts(
        &self,
        incident: IncidentId,
        page: Page,
    ) -> Result<Paged<Artifact>> {
        self.artifacts_page(&page, |a| a.incident_id == incident)
    }
}
