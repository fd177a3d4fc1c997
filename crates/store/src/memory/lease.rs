//! Coordination in the memory store: its clock, and the
//! [`Coordination`] seam (cancel requests, heartbeat, expiry, takeover,
//! forced cancel).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::MemoryStore;
use crate::{
    constraint, validate, Coordination, Entity, Lease, NewReport, Report, Result, Session,
    SessionId, SessionStatus, Settlement, StoreError,
};

impl MemoryStore {
    /// Moves the store's clock forward by `by` (it never moves back), e.g.
    /// past a lease's expiry.
    pub fn advance_clock(&self, by: Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.clock_offset_ms.fetch_add(ms, Ordering::SeqCst);
    }

    /// The store's clock: what leases are written and judged by.
    pub(super) fn now(&self) -> DateTime<Utc> {
        let offset = chrono::Duration::milliseconds(self.clock_offset_ms.load(Ordering::SeqCst));
        Utc::now() + offset
    }

    /// The expiry of `lease` renewed now.
    pub(super) fn expiry(&self, lease: Lease) -> DateTime<Utc> {
        self.now() + chrono::Duration::milliseconds(lease.ttl_millis())
    }

    /// The owners' leases (taken after `inner` when both are).
    pub(super) fn leases(&self) -> std::sync::MutexGuard<'_, super::owners::Leases> {
        self.leases.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets (or, for `None`, clears) a session's owner and claims it
    /// under `lease` from now.
    pub(super) fn own(&self, session: &mut Session, lease: Option<Lease>) {
        // Owned or settled, a row no longer waits for a resume (a release
        // for resume marks it again after this).
        session.resume_pending = false;
        session.resume_after = None;
        session.owner = lease.map(|l| l.owner);
        session.lease_expires_at = self
            .leases()
            .claim(session.id, lease.map(|l| (l.owner, self.expiry(l))));
    }

    /// Whether `session` is an orphan by the store's clock.
    pub(super) fn orphaned(&self, session: &Session) -> bool {
        session.is_active()
            && !session.is_queued()
            && !session.resume_pending
            && session.lease_expires_at.is_none_or(|at| at <= self.now())
    }

    /// `mark_started`.
    pub(super) fn mark_started_now(&self, id: SessionId, fence: u64) -> Result<Session> {
        let now = self.now();
        let mut inner = self.lock();
        let session = inner
            .sessions
            .get_mut(&id)
            .ok_or_else(|| StoreError::not_found(Entity::Session, id))?;
        if let Some(refused) = session.refusal(fence) {
            return Err(refused);
        }
        session.started_at.get_or_insert(now);
        Ok(session.clone())
    }

    /// `release`.
    pub(super) fn release_now(&self, id: SessionId, fence: u64) -> Result<Session> {
        let mut inner = self.lock();
        let session = inner
            .sessions
            .get_mut(&id)
            .ok_or_else(|| StoreError::not_found(Entity::Session, id))?;
        if let Some(refused) = session.refusal(fence) {
            return Err(refused);
        }
        if session.started_at.is_some() {
            return Err(StoreError::AlreadyStarted { session: id });
        }
        self.own(session, None);
        session.fence += 1;
        session.cancel_requested = false;
        let session = session.clone();
        // Its place in line: kept from when it was queued.
        inner.keep_place(id);
        Ok(session)
    }

    /// `release_for_resume`.
    pub(super) fn release_for_resume_now(
        &self,
        id: SessionId,
        fence: u64,
        backoff: std::time::Duration,
    ) -> Result<Session> {
        // At most a day: a larger backoff is a caller's mistake, and the
        // sum must not overflow the clock.
        let backoff = backoff.min(std::time::Duration::from_secs(86_400));
        let after = self.now() + chrono::Duration::from_std(backoff).unwrap_or_default();
        let mut inner = self.lock();
        let session = inner
            .sessions
            .get_mut(&id)
            .ok_or_else(|| StoreError::not_found(Entity::Session, id))?;
        if let Some(refused) = session.refusal(fence) {
            return Err(refused);
        }
        if session.cancel_requested {
            return Err(StoreError::resume_refused_for_cancel(id));
        }
        self.own(session, None);
        session.fence += 1;
        session.attempt += 1;
        session.cancel_requested = false;
        session.resume_pending = true;
        session.resume_after = Some(after);
        let session = session.clone();
        // Its place in line: kept from when it was queued.
        inner.keep_place(id);
        Ok(session)
    }

    /// `heartbeat`: the owner's lease is renewed, not the rows (see
    /// [`owners`](super::owners)).
    pub(super) fn renew(&self, lease: Lease, runs: &[(SessionId, u64)]) -> Vec<(SessionId, u64)> {
        let (now, expires) = (self.now(), self.expiry(lease));
        let listed = runs.iter().copied().collect();
        let mut inner = self.lock();
        let mut leases = self.leases();
        leases.beat(
            lease.owner,
            expires,
            now,
            inner.sessions.values_mut(),
            &listed,
        )
    }

    /// `expired_leases`.
    pub(super) fn expired(&self) -> Vec<(SessionId, u64)> {
        self.lock()
            .sessions
            .values()
            .filter(|s| self.orphaned(s))
            .map(|s| (s.id, s.fence))
            .collect()
    }

    /// `take_over`.
    pub(super) fn take_over_now(&self, id: SessionId, fence: u64, lease: Lease) -> Result<Session> {
        let mut inner = self.lock();
        let session = inner
            .sessions
            .get_mut(&id)
            .ok_or_else(|| StoreError::not_found(Entity::Session, id))?;
        if !self.orphaned(session) {
            return Err(StoreError::NotOrphaned { session: id });
        }
        if session.fence != fence {
            return Err(StoreError::Fenced {
                session: id,
                presented: fence,
                current: session.fence,
            });
        }
        session.fence += 1;
        self.own(session, Some(lease));
        Ok(session.clone())
    }

    /// `settle_with_report`.
    pub(super) fn settle_with_report_now(
        &self,
        id: SessionId,
        settlement: Settlement,
        report: NewReport,
    ) -> Result<(Session, Report)> {
        validate::settlement(&settlement)?;
        validate::new_report(&report)?;
        validate::report_of_settlement(id, &settlement, &report)?;
        let mut inner = self.lock();
        inner.session_in(id, report.incident_id, constraint::REPORTS_SESSION_FK)?;
        let session = inner.session(id)?;
        if let Some(refused) = session.refusal(settlement.fence) {
            // A retry whose first attempt committed finds both its writes.
            let stored = inner.reports.get(&(id, report.revision));
            return match stored {
                Some(stands) if session.holds(&settlement) => Ok((session.clone(), stands.clone())),
                _ => Err(refused),
            };
        }
        // Checked: nothing below can fail, so both writes happen or neither.
        let stands = inner.report_unless_present(report);
        let session = inner.sessions.get_mut(&id).expect("checked above");
        self.settle(session, settlement);
        let row = session.clone();
        inner.outbox_note(&row, self.now());
        Ok((row, stands))
    }

    /// `force_cancel`.
    pub(super) fn force_cancel_now(
        &self,
        id: SessionId,
        fence: u64,
        detail: String,
    ) -> Result<(Session, Report)> {
        let mut inner = self.lock();
        let session = inner.session(id)?;
        if let Some(refused) = session.refusal(fence) {
            return Err(refused);
        }
        let bumped = Session {
            fence: session.fence + 1,
            ..session.clone()
        };
        let (settlement, report) = crate::forced_cancel(&bumped, detail);
        validate::new_report(&report)?;
        // Checked: nothing below can fail, so every write happens or none.
        let stands = inner.report_unless_present(report);
        let session = inner.sessions.get_mut(&id).expect("checked above");
        session.fence = settlement.fence;
        session.cancel_requested = false;
        self.settle(session, settlement);
        let row = session.clone();
        inner.outbox_note(&row, self.now());
        Ok((row, stands))
    }
}

impl super::Inner {
    /// Stores `report` unless its revision has a row; returns the row that
    /// stands.
    fn report_unless_present(&mut self, report: NewReport) -> Report {
        self.reports
            .entry((report.session_id, report.revision))
            .or_insert_with(|| report.stored_at(Utc::now()))
            .clone()
    }
}

impl MemoryStore {
    /// `claim_next`, under the lock: see [`Coordination::claim_next`].
    fn claim_next_now(&self, pool: &str, per_key: Option<u32>, lease: Lease) -> Option<Session> {
        let now = self.now();
        let mut inner = self.lock();
        let key = |s: &Session| {
            s.admission
                .queue_key
                .clone()
                .unwrap_or_else(|| s.incident_id.to_string())
        };
        let mut busy: HashMap<String, usize> = HashMap::new();
        for s in inner.sessions.values() {
            if s.admission.pool == pool && s.is_active() && s.owner.is_some() {
                *busy.entry(key(s)).or_default() += 1;
            }
        }
        let next = inner
            .sessions
            .values()
            .filter(|s| {
                s.admission.pool == pool
                    && (s.is_queued()
                        || (s.is_resume_pending() && s.resume_after.is_none_or(|at| at <= now)))
            })
            .filter(|s| {
                per_key.is_none_or(|cap| busy.get(&key(s)).copied().unwrap_or(0) < cap as usize)
            })
            .min_by_key(|s| {
                (
                    std::cmp::Reverse(s.admission.priority),
                    busy.get(&key(s)).copied().unwrap_or(0),
                    inner
                        .key_turns
                        .get(&(pool.to_owned(), key(s)))
                        .copied()
                        .unwrap_or(0),
                    inner.queued.get(&s.id).copied().unwrap_or(0),
                    s.id,
                )
            })?
            .id;
        // The entry stays: a claim given back (`release`) keeps its place.
        inner.next_turn += 1;
        let turn = inner.next_turn;
        let claimed_key = key(inner.sessions.get(&next)?);
        inner.key_turns.insert((pool.to_owned(), claimed_key), turn);
        let s = inner.sessions.get_mut(&next)?;
        self.own(s, Some(lease));
        s.fence += 1;
        Some(s.clone())
    }
}

#[async_trait]
impl Coordination for MemoryStore {
    async fn claim_next(
        &self,
        pool: &str,
        per_key: Option<u32>,
        lease: Lease,
    ) -> Result<Option<Session>> {
        Ok(self.claim_next_now(pool, per_key, lease))
    }

    async fn mark_started(&self, id: SessionId, fence: u64) -> Result<Session> {
        self.mark_started_now(id, fence)
    }

    async fn release_for_resume(
        &self,
        id: SessionId,
        fence: u64,
        backoff: std::time::Duration,
    ) -> Result<Session> {
        self.release_for_resume_now(id, fence, backoff)
    }

    async fn release(&self, id: SessionId, fence: u64) -> Result<Session> {
        self.release_now(id, fence)
    }

    async fn queue_depth(
        &self,
        pool: &str,
        queue_key: Option<&str>,
        incident: crate::IncidentId,
    ) -> Result<crate::QueueDepth> {
        let key = queue_key.map_or_else(|| incident.to_string(), str::to_owned);
        let inner = self.lock();
        let mut depth = crate::QueueDepth::default();
        for s in inner.sessions.values() {
            if s.admission.pool == pool && s.is_queued() {
                depth.pool += 1;
                let own = s
                    .admission
                    .queue_key
                    .clone()
                    .unwrap_or_else(|| s.incident_id.to_string());
                depth.key += u64::from(own == key);
            }
        }
        Ok(depth)
    }

    async fn queue_position(&self, id: SessionId) -> Result<Option<u64>> {
        let inner = self.lock();
        let waits = |s: &Session| s.is_queued() || s.is_resume_pending();
        let Some(me) = inner.sessions.get(&id).filter(|s| waits(s)) else {
            return Ok(None);
        };
        let place = |s: &Session| {
            (
                std::cmp::Reverse(s.admission.priority),
                inner.queued.get(&s.id).copied().unwrap_or(0),
                s.id,
            )
        };
        let mine = place(me);
        let ahead = inner
            .sessions
            .values()
            .filter(|s| s.admission.pool == me.admission.pool && waits(s) && place(s) < mine)
            .count();
        Ok(Some(ahead as u64 + 1))
    }

    async fn request_cancel(&self, id: SessionId) -> Result<Session> {
        let mut inner = self.lock();
        let session = inner
            .sessions
            .get_mut(&id)
            .ok_or_else(|| StoreError::not_found(Entity::Session, id))?;
        if session.status == SessionStatus::Running {
            session.cancel_requested = true;
        }
        Ok(session.clone())
    }

    async fn cancel_requests(&self) -> Result<Vec<(SessionId, u64)>> {
        Ok(self
            .lock()
            .sessions
            .values()
            .filter(|s| s.status == SessionStatus::Running && s.cancel_requested)
            .map(|s| (s.id, s.fence))
            .collect())
    }

    // `cancel_signal` and `queue_signal`: the defaults (none). In-process
    // replicas poll; there is nothing to push from.

    async fn heartbeat(
        &self,
        lease: Lease,
        runs: &[(SessionId, u64)],
    ) -> Result<Vec<(SessionId, u64)>> {
        Ok(self.renew(lease, runs))
    }

    async fn expired_leases(&self) -> Result<Vec<(SessionId, u64)>> {
        Ok(self.expired())
    }

    async fn take_over(&self, id: SessionId, fence: u64, lease: Lease) -> Result<Session> {
        self.take_over_now(id, fence, lease)
    }

    async fn settle_with_report(
        &self,
        id: SessionId,
        settlement: Settlement,
        report: NewReport,
    ) -> Result<(Session, Report)> {
        self.settle_with_report_now(id, settlement, report)
    }

    async fn attach_kept_output(
        &self,
        id: SessionId,
        fence: u64,
        kept: crate::KeptOutput,
    ) -> Result<(Session, Report)> {
        self.attach_kept_now(id, fence, kept)
    }

    async fn force_cancel(
        &self,
        id: SessionId,
        fence: u64,
        detail: String,
    ) -> Result<(Session, Report)> {
        self.force_cancel_now(id, fence, detail)
    }
}
