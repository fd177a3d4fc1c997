//! [`FaultStore`]: a [`Store`] (and [`Coordination`]) wrapper that records
//! calls and injects faults; its [`Outbox`] passes every call through.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use korvus_store::{
    Artifact, ArtifactId, ContextRef, ContinueFrom, CoordinatedStore, Coordination, Incident,
    IncidentId, Lease, NewArtifact, NewIncident, NewReport, NewSession, Outbox, OutboxEvent,
    OutboxKey, OwnerId, Page, Paged, Report, Result, Session, SessionContextRef, SessionId,
    Settlement, Store, StoreError,
};

/// One [`Store`] or [`Coordination`] method, for choosing faults and
/// reading the call record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // Each variant is the method of the same name.
pub enum StoreOp {
    CreateIncident,
    GetIncident,
    ListIncidents,
    CloseIncident,
    CreateSession,
    GetSession,
    SessionByIdempotencyKey,
    ListSessions,
    InsertContextRefs,
    ListContextRefs,
    SettleSession,
    ContinueSession,
    CancelIdleSession,
    DeleteSession,
    RequestCancel,
    CancelRequests,
    MarkStarted,
    Release,
    /// `release_for_resume`.
    ReleaseForResume,
    QueueDepth,
    QueuePosition,
    ClaimNext,
    Heartbeat,
    ExpiredLeases,
    TakeOver,
    SettleWithReport,
    ForceCancel,
    AttachKeptOutput,
    CreateReport,
    GetReport,
    ListReports,
    NextReportRevision,
    CreateArtifacts,
    ReplaceCheckpoints,
    GetArtifacts,
    ListSessionArtifacts,
    ListIncidentArtifacts,
}

/// What a faulty call does instead of reaching the wrapped store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreFault {
    /// Return a transient `StoreError::Backend`, as a dropped connection
    /// would: a caller that retries transient errors retries it.
    Fail,
    /// Return a permanent `StoreError::Backend`, which a caller must not retry.
    FailPermanent,
    /// Panic inside the call.
    Panic,
    /// Never return.
    Hang,
}

#[derive(Debug, Default)]
struct State {
    faults: HashMap<StoreOp, (StoreFault, Option<u32>)>,
    /// A fault of every operation (an outage), ahead of the per-op ones.
    all: Option<StoreFault>,
    calls: Vec<StoreOp>,
}

/// A [`Store`] wrapper that records every call in order and injects
/// faults into chosen operations; everything else reaches the wrapped store.
///
/// It is a [`Coordination`] too (so a
/// [`CoordinatedStore`] a manager can be built from) when what it wraps is:
/// `FaultStore::new(Arc<dyn CoordinatedStore>)` for a manager's store,
/// `FaultStore::new(Arc<dyn Store>)` for code that needs only rows.
#[derive(Debug)]
pub struct FaultStore<S: ?Sized = dyn CoordinatedStore> {
    inner: Arc<S>,
    state: Arc<Mutex<State>>,
}

impl<S: ?Sized> Clone for FaultStore<S> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            state: Arc::clone(&self.state),
        }
    }
}

impl<S: ?Sized> FaultStore<S> {
    /// Wraps `inner`; nothing fails until told.
    pub fn new(inner: Arc<S>) -> Self {
        Self {
            inner,
            state: Arc::default(),
        }
    }

    /// Every later call of `op` does `fault`.
    pub fn fault(&self, op: StoreOp, fault: StoreFault) {
        self.state.lock().unwrap().faults.insert(op, (fault, None));
    }

    /// The next `times` calls of `op` do `fault`; later ones succeed.
    pub fn fault_times(&self, op: StoreOp, fault: StoreFault, times: u32) {
        self.state
            .lock()
            .unwrap()
            .faults
            .insert(op, (fault, Some(times)));
    }

    /// Every later call of every operation does `fault`: an outage of
    /// the whole store (a database failover, a cut network) until
    /// [`heal`](FaultStore::heal).
    pub fn fault_all(&self, fault: StoreFault) {
        self.state.lock().unwrap().all = Some(fault);
    }

    /// Removes every fault.
    pub fn heal(&self) {
        let mut state = self.state.lock().unwrap();
        state.faults.clear();
        state.all = None;
    }

    /// Every call so far, in order (faulty ones included).
    pub fn calls(&self) -> Vec<StoreOp> {
        self.state.lock().unwrap().calls.clone()
    }

    /// How many times `op` was called.
    pub fn count(&self, op: StoreOp) -> usize {
        self.calls().iter().filter(|c| **c == op).count()
    }

    async fn enter(&self, op: StoreOp) -> Result<()> {
        let fault = {
            let mut state = self.state.lock().unwrap();
            state.calls.push(op);
            if let Some(all) = state.all {
                Some(all)
            } else {
                match state.faults.get_mut(&op) {
                    Some((fault, None)) => Some(*fault),
                    Some((fault, Some(n))) if *n > 0 => {
                        *n -= 1;
                        Some(*fault)
                    }
                    _ => None,
                }
            }
        };
        match fault {
            None => Ok(()),
            Some(StoreFault::Fail) => Err(StoreError::transient(
                "fault-store",
                format!("injected failure of {op:?}"),
            )),
            Some(StoreFault::FailPermanent) => Err(StoreError::permanent(
                "fault-store",
                format!("injected permanent failure of {op:?}"),
            )),
            Some(StoreFault::Panic) => panic!("injected panic in {op:?}"),
            Some(StoreFault::Hang) => std::future::pending().await,
        }
    }
}

#[async_trait]
impl<S: Store + ?Sized> Store for FaultStore<S> {
    async fn create_incident(&self, new: NewIncident) -> Result<Incident> {
        self.enter(StoreOp::CreateIncident).await?;
        self.inner.create_incident(new).await
    }
    async fn get_incident(&self, id: IncidentId) -> Result<Incident> {
        self.enter(StoreOp::GetIncident).await?;
        self.inner.get_incident(id).await
    }
    async fn list_incidents(&self, page: Page) -> Result<Paged<Incident>> {
        self.enter(StoreOp::ListIncidents).await?;
        self.inner.list_incidents(page).await
    }
    async fn close_incident(&self, id: IncidentId) -> Result<Incident> {
        self.enter(StoreOp::CloseIncident).await?;
        self.inner.close_incident(id).await
    }
    async fn create_session(&self, new: NewSession) -> Result<Session> {
        self.enter(StoreOp::CreateSession).await?;
        self.inner.create_session(new).await
    }
    async fn get_session(&self, id: SessionId) -> Result<Session> {
        self.enter(StoreOp::GetSession).await?;
        self.inner.get_session(id).await
    }
    async fn session_by_idempotency_key(
        &self,
        incident: IncidentId,
        key: &str,
    ) -> Result<Option<Session>> {
        self.enter(StoreOp::SessionByIdempotencyKey).await?;
        self.inner.session_by_idempotency_key(incident, key).await
    }
    async fn list_sessions(&self, incident: IncidentId, page: Page) -> Result<Paged<Session>> {
        self.enter(StoreOp::ListSessions).await?;
        self.inner.list_sessions(incident, page).await
    }
    async fn insert_context_refs(
        &self,
        session: SessionId,
        refs: &[ContextRef],
    ) -> Result<Vec<SessionContextRef>> {
        self.enter(StoreOp::InsertContextRefs).await?;
        self.inner.insert_context_refs(session, refs).await
    }
    async fn list_context_refs(&self, session: SessionId) -> Result<Vec<SessionContextRef>> {
        self.enter(StoreOp::ListContextRefs).await?;
        self.inner.list_context_refs(session).await
    }
    async fn settle_session(&self, id: SessionId, settlement: Settlement) -> Result<Session> {
        self.enter(StoreOp::SettleSession).await?;
        self.inner.settle_session(id, settlement).await
    }
    async fn continue_session(
        &self,
        id: SessionId,
        from: ContinueFrom,
        lease: Option<Lease>,
    ) -> Result<Session> {
        self.enter(StoreOp::ContinueSession).await?;
        self.inner.continue_session(id, from, lease).await
    }
    async fn cancel_idle_session(&self, id: SessionId) -> Result<Session> {
        self.enter(StoreOp::CancelIdleSession).await?;
        self.inner.cancel_idle_session(id).await
    }
    async fn delete_session(&self, id: SessionId, fence: u64) -> Result<()> {
        self.enter(StoreOp::DeleteSession).await?;
        self.inner.delete_session(id, fence).await
    }
    async fn create_report(&self, new: NewReport) -> Result<Report> {
        self.enter(StoreOp::CreateReport).await?;
        self.inner.create_report(new).await
    }
    async fn get_report(&self, session: SessionId, revision: u32) -> Result<Report> {
        self.enter(StoreOp::GetReport).await?;
        self.inner.get_report(session, revision).await
    }
    async fn list_reports(&self, session: SessionId, page: Page) -> Result<Paged<Report>> {
        self.enter(StoreOp::ListReports).await?;
        self.inner.list_reports(session, page).await
    }
    async fn next_report_revision(&self, session: SessionId) -> Result<u32> {
        self.enter(StoreOp::NextReportRevision).await?;
        self.inner.next_report_revision(session).await
    }
    async fn create_artifacts(&self, new: Vec<NewArtifact>) -> Result<Vec<Artifact>> {
        self.enter(StoreOp::CreateArtifacts).await?;
        self.inner.create_artifacts(new).await
    }
    async fn replace_checkpoints(
        &self,
        session: SessionId,
        fence: u64,
        insert: Vec<NewArtifact>,
        delete: Vec<ArtifactId>,
    ) -> Result<Vec<Artifact>> {
        self.enter(StoreOp::ReplaceCheckpoints).await?;
        self.inner
            .replace_checkpoints(session, fence, insert, delete)
            .await
    }
    async fn get_artifacts(&self, ids: &[ArtifactId]) -> Result<Vec<Artifact>> {
        self.enter(StoreOp::GetArtifacts).await?;
        self.inner.get_artifacts(ids).await
    }
    async fn list_session_artifacts(
        &self,
        session: SessionId,
        page: Page,
    ) -> Result<Paged<Artifact>> {
        self.enter(StoreOp::ListSessionArtifacts).await?;
        self.inner.list_session_artifacts(session, page).await
    }
    async fn list_incident_artifacts(
        &self,
        incident: IncidentId,
        page: Page,
    ) -> Result<Paged<Artifact>> {
        self.enter(StoreOp::ListIncidentArtifacts).await?;
        self.inner.list_incident_artifacts(incident, page).await
    }
}

#[async_trait]
impl<S: Outbox + ?Sized> Outbox for FaultStore<S> {
    async fn claim_events(
        &self,
        claimer: OwnerId,
        limit: u32,
        ttl: std::time::Duration,
    ) -> Result<Vec<OutboxEvent>> {
        self.inner.claim_events(claimer, limit, ttl).await
    }
    async fn mark_delivered(&self, key: OutboxKey) -> Result<()> {
        self.inner.mark_delivered(key).await
    }
    async fn mark_failed(
        &self,
        key: OutboxKey,
        claimer: OwnerId,
        retry_in: std::time::Duration,
        error: &str,
    ) -> Result<()> {
        self.inner.mark_failed(key, claimer, retry_in, error).await
    }
    async fn undelivered(&self) -> Result<u64> {
        self.inner.undelivered().await
    }
}

#[async_trait]
impl<S: CoordinatedStore + ?Sized> Coordination for FaultStore<S> {
    async fn claim_next(
        &self,
        pool: &str,
        per_key: Option<u32>,
        lease: Lease,
    ) -> Result<Option<Session>> {
        self.enter(StoreOp::ClaimNext).await?;
        self.inner.claim_next(pool, per_key, lease).await
    }
    async fn mark_started(&self, id: SessionId, fence: u64) -> Result<Session> {
        self.enter(StoreOp::MarkStarted).await?;
        self.inner.mark_started(id, fence).await
    }
    async fn release(&self, id: SessionId, fence: u64) -> Result<Session> {
        self.enter(StoreOp::Release).await?;
        self.inner.release(id, fence).await
    }
    async fn release_for_resume(
        &self,
        id: SessionId,
        fence: u64,
        backoff: std::time::Duration,
    ) -> Result<Session> {
        self.enter(StoreOp::ReleaseForResume).await?;
        self.inner.release_for_resume(id, fence, backoff).await
    }
    async fn queue_depth(
        &self,
        pool: &str,
        queue_key: Option<&str>,
        incident: IncidentId,
    ) -> Result<korvus_store::QueueDepth> {
        self.enter(StoreOp::QueueDepth).await?;
        self.inner.queue_depth(pool, queue_key, incident).await
    }
    async fn queue_position(&self, id: SessionId) -> Result<Option<u64>> {
        self.enter(StoreOp::QueuePosition).await?;
        self.inner.queue_position(id).await
    }
    async fn request_cancel(&self, id: SessionId) -> Result<Session> {
        self.enter(StoreOp::RequestCancel).await?;
        self.inner.request_cancel(id).await
    }
    async fn cancel_requests(&self) -> Result<Vec<(SessionId, u64)>> {
        self.enter(StoreOp::CancelRequests).await?;
        self.inner.cancel_requests().await
    }
    fn cancel_signal(&self) -> Option<Arc<tokio::sync::Notify>> {
        self.inner.cancel_signal()
    }
    fn queue_signal(&self) -> Option<Arc<tokio::sync::Notify>> {
        self.inner.queue_signal()
    }
    async fn heartbeat(
        &self,
        lease: Lease,
        runs: &[(SessionId, u64)],
    ) -> Result<Vec<(SessionId, u64)>> {
        self.enter(StoreOp::Heartbeat).await?;
        self.inner.heartbeat(lease, runs).await
    }
    async fn expired_leases(&self) -> Result<Vec<(SessionId, u64)>> {
        self.enter(StoreOp::ExpiredLeases).await?;
        self.inner.expired_leases().await
    }
    async fn take_over(&self, id: SessionId, fence: u64, lease: Lease) -> Result<Session> {
        self.enter(StoreOp::TakeOver).await?;
        self.inner.take_over(id, fence, lease).await
    }
    async fn settle_with_report(
        &self,
        id: SessionId,
        settlement: Settlement,
        report: NewReport,
    ) -> Result<(Session, Report)> {
        self.enter(StoreOp::SettleWithReport).await?;
        self.inner.settle_with_report(id, settlement, report).await
    }
    async fn attach_kept_output(
        &self,
        id: SessionId,
        fence: u64,
        kept: korvus_store::KeptOutput,
    ) -> Result<(Session, Report)> {
        self.enter(StoreOp::AttachKeptOutput).await?;
        self.inner.attach_kept_output(id, fence, kept).await
    }
    async fn force_cancel(
        &self,
        id: SessionId,
        fence: u64,
        detail: String,
    ) -> Result<(Session, Report)> {
        self.enter(StoreOp::ForceCancel).await?;
        self.inner.force_cancel(id, fence, detail).await
    }
}
