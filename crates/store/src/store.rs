//! The [`Store`] seam.

use std::fmt::Debug;

use async_trait::async_trait;

use crate::{
    Artifact, ArtifactId, ContextRef, Incident, IncidentId, Lease, NewArtifact, NewIncident,
    NewReport, NewSession, Report, Result, Session, SessionContextRef, SessionId, Settlement,
};

/// Durable rows of the session layer: incidents, sessions, reports, artifacts and
/// context refs.
///
/// Every method is one logical operation: it either happens completely or leaves
/// nothing behind (backends use one transaction or one statement). Methods are
/// *not* cancel-safe in the sense of "nothing happened when the future is
/// dropped": a dropped call may or may not have committed. Callers that must
/// know (the session layer's settle) run the call on a detached task.
///
/// Errors are semantic ([`StoreError`](crate::StoreError)); a backend never
/// panics on bad input and never leaks its driver's error type except as the
/// `source` of [`StoreError::Backend`](crate::StoreError::Backend).
///
/// Text fields are checked by [`validate`](crate::validate) in every backend, so
/// a NUL byte or an over-long value is the same
/// [`StoreError::InvalidInput`](crate::StoreError::InvalidInput) everywhere.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait Store: Send + Sync + Debug + 'static {
    /// Creates an open incident with a store-minted UUID v7 id.
    ///
    /// # Errors
    /// `InvalidInput` for a blank, NUL-bearing or over-long title or workspace
    /// ref; `Backend` on I/O failure.
    async fn create_incident(&self, new: NewIncident) -> Result<Incident>;

    /// Reads one incident.
    ///
    /// # Errors
    /// `NotFound` when no such incident exists.
    async fn get_incident(&self, id: IncidentId) -> Result<Incident>;

    /// Lists every incident, oldest first.
    ///
    /// # Errors
    /// `Backend` on I/O failure.
    async fn list_incidents(&self) -> Result<Vec<Incident>>;

    /// Marks an incident closed. Idempotent: closing a closed incident returns it.
    ///
    /// # Errors
    /// `NotFound` when no such incident exists.
    async fn close_incident(&self, id: IncidentId) -> Result<Incident>;

    /// Inserts a session row with status `running`, revision 1, fence 1, and
    /// the next `seq` of its incident (1-based, gap-free, race-free:
    /// allocated inside the store's own transaction), owned under
    /// `new.lease` (expiry from the store's clock) in the same statement.
    ///
    /// # Errors
    /// `NotFound` (incident) when the incident does not exist; `Conflict` when
    /// the id is taken; `InvalidInput` for a bad prompt or workspace ref.
    async fn create_session(&self, new: NewSession) -> Result<Session>;

    /// Reads one session.
    ///
    /// # Errors
    /// `NotFound` when no such session exists.
    async fn get_session(&self, id: SessionId) -> Result<Session>;

    /// Lists the sessions of an incident in `seq` order (empty for an unknown incident).
    ///
    /// # Errors
    /// `Backend` on I/O failure.
    async fn list_sessions(&self, incident: IncidentId) -> Result<Vec<Session>>;

    /// Attaches context refs to a session, all or nothing, keeping request order
    /// (positions continue after any refs the session already has).
    ///
    /// # Errors
    /// `NotFound` (session) for an unknown session; `Constraint`
    /// (`session_context_refs_artifact_fk`) when an artifact is unknown or belongs
    /// to another incident; `Conflict` when an artifact is referenced twice.
    async fn insert_context_refs(
        &self,
        session: SessionId,
        refs: &[ContextRef],
    ) -> Result<Vec<SessionContextRef>>;

    /// Lists a session's context refs in stored (= request) order.
    ///
    /// # Errors
    /// `Backend` on I/O failure.
    async fn list_context_refs(&self, session: SessionId) -> Result<Vec<SessionContextRef>>;

    /// Writes a session's outcome: status, exit reason, counters. Sets `ended_at`
    /// to now for a terminal status and clears it for `running` (an idle
    /// settlement, exit reason `awaiting_user`). The run is over, so the
    /// owner and lease are cleared too.
    ///
    /// Fenced and final: it writes only while the row's
    /// [`fence`](crate::Session::fence) is the settlement's **and** the row
    /// is [active](crate::Session::is_active). A run that was superseded
    /// (reopened, resumed, taken over or force-cancelled since) changes
    /// nothing, and a terminal or idle row is never overwritten — only a
    /// reopen (or an answer) leaves those states. A settlement the row
    /// already holds exactly ([`Session::holds`](crate::Session::holds): a
    /// retry whose first attempt committed) answers `Ok` with the row.
    ///
    /// # Errors
    /// `NotFound` for an unknown session; [`StoreError::Fenced`](crate::StoreError::Fenced)
    /// for a stale fence and [`StoreError::NotActive`](crate::StoreError::NotActive)
    /// for a row whose run already ended otherwise (nothing written either
    /// way); `InvalidInput` for a bad exit reason or out-of-range counter.
    async fn settle_session(&self, id: SessionId, settlement: Settlement) -> Result<Session>;

    /// Moves a terminal session back to `running` in one conditional step:
    /// clears `ended_at` and `exit_reason`, increments `revision` and
    /// `fence`, and sets the owner and lease of the new run (`None`: none).
    /// Of concurrent reopens of one session exactly one succeeds.
    ///
    /// # Errors
    /// `NotFinished` when the session is not terminal (also for the loser of a
    /// race; nothing is written); `NotFound` for an unknown session.
    async fn reopen_session(&self, id: SessionId, lease: Option<Lease>) -> Result<Session>;

    /// Records a request to cancel the current run of a running session,
    /// naming its fence, for whichever manager runs it (that manager polls
    /// [`cancel_requests`](Store::cancel_requests)). A terminal session is
    /// returned as it is, unchanged. Idempotent.
    ///
    /// # Errors
    /// `NotFound` for an unknown session.
    async fn request_cancel(&self, id: SessionId) -> Result<Session>;

    /// The running sessions whose current run has a cancel request:
    /// `(session, fence)` pairs, in no particular order. One statement;
    /// cheap when there are none.
    ///
    /// # Errors
    /// `Backend` on I/O failure.
    async fn cancel_requests(&self) -> Result<Vec<(SessionId, u64)>>;

    /// A wake-up for whoever polls [`cancel_requests`](Store::cancel_requests):
    /// a new `Notify` that is notified (`notify_one`) soon after any
    /// replica records a cancel request, so the poller can poll at once
    /// instead of at its next period. `None` when the backend cannot push
    /// (the caller keeps polling); a wake-up may also be lost (while a
    /// listener reconnects), so polling stays the fallback. The backend
    /// stops pushing once every clone of the `Notify` is dropped.
    fn cancel_signal(&self) -> Option<std::sync::Arc<tokio::sync::Notify>>;

    /// Moves an idle session (`running` with exit reason
    /// [`AWAITING_USER`](crate::exit_reason::AWAITING_USER), see
    /// [`Session::is_idle`](crate::Session::is_idle)) to `cancelled` in one
    /// conditional step: exit reason
    /// [`CANCELLED`](crate::exit_reason::CANCELLED), `ended_at` now, counters
    /// and revision kept. Of concurrent transitions of one idle session
    /// (this, [`resume_idle_session`](Store::resume_idle_session)) exactly
    /// one succeeds.
    ///
    /// # Errors
    /// `NotIdle` when the session is active, terminal, or was moved by
    /// another caller first (nothing is written); `NotFound` for an unknown
    /// session.
    async fn cancel_idle_session(&self, id: SessionId) -> Result<Session>;

    /// Moves an idle session back to active in one conditional step, the
    /// way [`reopen_session`](Store::reopen_session) continues a terminal
    /// one: still `running`, exit reason cleared, `revision` and `fence` incremented,
    /// counters kept, owned under `lease`. Of concurrent transitions of one
    /// idle session (this,
    /// [`cancel_idle_session`](Store::cancel_idle_session)) exactly one
    /// succeeds.
    ///
    /// # Errors
    /// `NotIdle` when the session is active, terminal, or was moved by
    /// another caller first (nothing is written); `NotFound` for an unknown
    /// session.
    async fn resume_idle_session(&self, id: SessionId, lease: Option<Lease>) -> Result<Session>;

    /// Renews `lease` on those of `runs` — the `(session, fence)` pairs of
    /// the runs its owner is running — that it still holds, in one
    /// statement whatever their number, and answers which those are, in no
    /// particular order. A session taken over, continued elsewhere, settled
    /// or idle is not held and not in the answer; an expired lease nobody
    /// took over yet is renewed. A session the owner holds but does not
    /// list (its run is gone) is not renewed: its lease lapses and it
    /// becomes an orphan.
    ///
    /// # Errors
    /// `Backend` on I/O failure.
    async fn heartbeat(
        &self,
        lease: Lease,
        runs: &[(SessionId, u64)],
    ) -> Result<Vec<(SessionId, u64)>>;

    /// The orphans: active running sessions (not idle) whose lease has
    /// expired by the store's clock, or that have no owner at all, as
    /// `(session, fence)` pairs for [`take_over`](Store::take_over).
    ///
    /// # Errors
    /// `Backend` on I/O failure.
    async fn expired_leases(&self) -> Result<Vec<(SessionId, u64)>>;

    /// Takes an orphan over in one conditional step: only while the
    /// session is active (running, not idle), still at `fence` (the one the
    /// caller saw) and its lease has expired (or it has no owner). Then its
    /// fence is incremented — every write of the dead run is refused from
    /// here on — and it is owned under `lease`. A cancel request for the
    /// dead run carries over to the new fence. Of concurrent takeovers of
    /// one session exactly one succeeds.
    ///
    /// # Errors
    /// `Fenced` when the session's fence moved on; `NotOrphaned` when it is
    /// terminal, idle or its lease is live (nothing is written either way);
    /// `NotFound` for an unknown session.
    async fn take_over(&self, id: SessionId, fence: u64, lease: Lease) -> Result<Session>;

    /// Settles a session and makes sure its revision has a report row, in
    /// one transaction: `report` is inserted unless a row for its session
    /// and revision exists (that one wins and is kept), then the settlement
    /// is written as [`settle_session`](Store::settle_session) writes it.
    /// Returns the settled row and the report row that stands. This is how
    /// a takeover ends a run nobody will land.
    ///
    /// A row the dead run's report insert committed concurrently is found
    /// and kept too: the answer is never a `Conflict`.
    ///
    /// # Errors
    /// As `settle_session` and `create_report`; on any error nothing is
    /// written.
    async fn settle_with_report(
        &self,
        id: SessionId,
        settlement: Settlement,
        report: NewReport,
    ) -> Result<(Session, Report)>;

    /// An operator's forced cancel of the run at `fence`, in one
    /// transaction: only while the session is [active](crate::Session::is_active)
    /// at `fence` (the one the operator saw), its fence is incremented —
    /// every later write of that run is refused — and it is settled
    /// `cancelled` (exit reason `cancelled`, counters kept, `ended_at` now,
    /// owner and lease cleared, a pending cancel request dropped); the
    /// revision's report row is written unless one exists (that one wins):
    /// no document, exit reason `cancelled`, `detail` naming the operator
    /// action, at the new fence. Returns the settled row and the report row
    /// that stands. Like a takeover it moves the fence without starting a
    /// run; unlike one it does not wait for the owner's lease to lapse.
    ///
    /// # Errors
    /// `Fenced` when the session moved past `fence`; `NotActive` when it is
    /// terminal or idle (cancel an idle row with
    /// [`cancel_idle_session`](Store::cancel_idle_session)); `NotFound`
    /// for an unknown session; `InvalidInput` for a bad `detail`. Nothing
    /// is written on any error.
    async fn force_cancel(
        &self,
        id: SessionId,
        fence: u64,
        detail: String,
    ) -> Result<(Session, Report)>;

    /// Inserts a report row.
    ///
    /// Not idempotent by itself: a second `create_report` for the same
    /// session and revision — even of an identical [`NewReport`], e.g. a
    /// retry whose first attempt committed but whose answer was lost — is
    /// `Conflict`, and the stored row is left unchanged. A caller that
    /// retries reads the row back with [`get_report`](Store::get_report)
    /// and compares it to its request to tell a lost acknowledgement from a
    /// real conflict.
    ///
    /// Fenced and final like a settlement: written only while the session
    /// is active at `new.fence`.
    ///
    /// # Errors
    /// `Conflict` when the session already has this revision; `Constraint`
    /// (`reports_session_fk`) when the session does not exist in that
    /// incident; [`StoreError::Fenced`](crate::StoreError::Fenced) when
    /// `new.fence` is not the session's and
    /// [`StoreError::NotActive`](crate::StoreError::NotActive) when the
    /// session is terminal or idle (nothing written either way);
    /// `InvalidInput` for a bad key, exit reason, detail or out-of-range
    /// counter.
    async fn create_report(&self, new: NewReport) -> Result<Report>;

    /// Reads one report revision.
    ///
    /// # Errors
    /// `NotFound` when that revision does not exist.
    async fn get_report(&self, session: SessionId, revision: u32) -> Result<Report>;

    /// Lists a session's reports by revision.
    ///
    /// # Errors
    /// `Backend` on I/O failure.
    async fn list_reports(&self, session: SessionId) -> Result<Vec<Report>>;

    /// The revision the next report of this session must use: one more than the
    /// highest stored, or 1.
    ///
    /// # Errors
    /// `NotFound` for an unknown session.
    async fn next_report_revision(&self, session: SessionId) -> Result<u32>;

    /// Inserts artifact rows, all or nothing, in one round trip. Upload the bytes
    /// first: a row must never point at missing bytes. Fenced and final
    /// like a settlement: every row's session must be active at the row's
    /// fence.
    ///
    /// # Errors
    /// `Conflict` for a duplicate id; `Constraint` (`artifacts_session_fk`) when
    /// a session does not exist in the given incident;
    /// [`StoreError::Fenced`](crate::StoreError::Fenced) when a row's
    /// session is not at the row's fence and
    /// [`StoreError::NotActive`](crate::StoreError::NotActive) when it is
    /// terminal or idle (nothing written either way); `InvalidInput`
    /// for a bad path, key, content type or digest.
    async fn create_artifacts(&self, new: Vec<NewArtifact>) -> Result<Vec<Artifact>>;

    /// Reads the artifacts with these ids, in request order; unknown ids are
    /// left out (compare lengths to detect them).
    ///
    /// # Errors
    /// `Backend` on I/O failure.
    async fn get_artifacts(&self, ids: &[ArtifactId]) -> Result<Vec<Artifact>>;

    /// Lists the artifacts a session produced, oldest first.
    ///
    /// # Errors
    /// `Backend` on I/O failure.
    async fn list_session_artifacts(&self, session: SessionId) -> Result<Vec<Artifact>>;

    /// Lists every artifact of an incident, oldest first.
    ///
    /// # Errors
    /// `Backend` on I/O failure.
    async fn list_incident_artifacts(&self, incident: IncidentId) -> Result<Vec<Artifact>>;
}

/// Conveniences built on [`Store`]; implemented for every store.
#[async_trait]
pub trait StoreExt: Store {
    /// Reads one artifact.
    ///
    /// # Errors
    /// `NotFound` when it does not exist.
    async fn get_artifact(&self, id: ArtifactId) -> Result<Artifact> {
        self.get_artifacts(&[id])
            .await?
            .pop()
            .ok_or_else(|| crate::StoreError::not_found(crate::Entity::Artifact, id))
    }
}

impl<S: Store + ?Sized> StoreExt for S {}
