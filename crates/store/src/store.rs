//! The [`Store`] seam.

use std::fmt::Debug;

use async_trait::async_trait;

use crate::{
    Artifact, ArtifactId, ContextRef, Incident, IncidentId, Lease, NewArtifact, NewIncident,
    NewReport, NewSession, Page, Paged, Report, Result, Session, SessionContextRef, SessionId,
    Settlement,
};

/// Durable rows of the session layer: incidents, sessions, reports, artifacts and
/// context refs.
///
/// Every method is one logical operation: it either happens completely or leaves
/// nothing behind (backends use one transaction or one statement).
///
/// Errors are semantic ([`StoreError`](crate::StoreError)); a backend never
/// panics on bad input and never leaks its driver's error type except as the
/// `source` of [`StoreError::Backend`](crate::StoreError::Backend).
///
/// Text fields are checked by [`validate`](crate::validate) in every backend, so
/// a NUL byte or an over-long value is the same
/// [`StoreError::InvalidInput`](crate::StoreError::InvalidInput) everywhere.
///
/// # Cancel safety
/// Reads are cancel safe. Writes are *not* cancel safe in the sense of "nothing
/// happened when the future is dropped": a dropped call has committed whole or
/// not at all (the SQL backends roll back a dropped transaction), and the caller
/// does not learn which. A retry meets what the first attempt committed:
/// `settle_session` answers `Ok` with the row, `create_report`,
/// `create_artifacts` and `replace_checkpoints` a `Conflict` or `NotFound`, and
/// a second `create_incident` makes a second incident. Callers that must know
/// (the session layer's settle) run the call on a detached task. An
/// implementation must never leave part of one call's write behind when its
/// future is dropped.
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

    /// One page of the incidents, by id (UUID v7: roughly oldest first;
    /// see [`Page`] for what a walk guarantees).
    ///
    /// # Errors
    /// `InvalidInput` (`cursor`) for a cursor not of this list's form; `Backend` on
    /// I/O failure.
    async fn list_incidents(&self, page: Page) -> Result<Paged<Incident>>;

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

    /// The session of `incident` created with idempotency key `key`
    /// ([`Admission::idempotency_key`](crate::Admission::idempotency_key)),
    /// if there is one: at most one per incident.
    ///
    /// # Errors
    /// `Backend` on I/O failure.
    async fn session_by_idempotency_key(
        &self,
        incident: IncidentId,
        key: &str,
    ) -> Result<Option<Session>>;

    /// One page of an incident's sessions in `seq` order (empty for an
    /// unknown incident).
    ///
    /// # Errors
    /// `InvalidInput` (`cursor`) for a cursor not of this list's form; `Backend` on
    /// I/O failure.
    async fn list_sessions(&self, incident: IncidentId, page: Page) -> Result<Paged<Session>>;

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
    /// settlement, exit reason `awaiting_user` or `budget_reached`). The run is over, so the
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

    /// Starts the next run of a finished session in one conditional step:
    /// increments `revision` and `fence`, clears `exit_reason` (and
    /// `ended_at`), drops any pending cancel request and owns the row under
    /// `lease` (`None`: no owner). What it continues from is named by
    /// `from`: a [terminal](ContinueFrom::Terminal) row goes back to
    /// `running`; an [idle](ContinueFrom::Idle) one (see
    /// [`Session::is_idle`](crate::Session::is_idle)) stays `running` and
    /// becomes active, its counters kept. Of concurrent transitions of one
    /// session (this, and for an idle row
    /// [`cancel_idle_session`](Store::cancel_idle_session)) exactly one
    /// succeeds.
    ///
    /// # Errors
    /// `NotFinished` (from a terminal row) or `NotIdle` (from an idle one)
    /// when the session is not in that state, also for the loser of a race
    /// (nothing is written); `NotFound` for an unknown session.
    async fn continue_session(
        &self,
        id: SessionId,
        from: ContinueFrom,
        lease: Option<Lease>,
    ) -> Result<Session>;

    /// Moves an idle session (`running` with an exit reason of
    /// [`exit_reason::IDLE`](crate::exit_reason::IDLE), see
    /// [`Session::is_idle`](crate::Session::is_idle)) to `cancelled` in one
    /// conditional step: exit reason
    /// [`CANCELLED`](crate::exit_reason::CANCELLED), `ended_at` now, counters
    /// and revision kept. Of concurrent transitions of one idle session
    /// (this, [`continue_session`](Store::continue_session) from idle) exactly
    /// one succeeds.
    ///
    /// # Errors
    /// `NotIdle` when the session is active, terminal, or was moved by
    /// another caller first (nothing is written); `NotFound` for an unknown
    /// session.
    async fn cancel_idle_session(&self, id: SessionId) -> Result<Session>;

    /// Deletes a finished session for good (retention): its context refs,
    /// reports, artifact rows, webhook events (delivered or not), its
    /// budget, when the store keeps [`Budgets`](crate::Budgets) (its
    /// incident's stays), and the row itself, in one conditional step
    /// that happens only while the row is terminal **at `fence`**. A
    /// reopen racing the delete therefore either comes first (the fence
    /// moved: nothing is deleted) or finds no session (`NotFound`), never
    /// half a session. The incident's `seq` numbers are not reused, so a
    /// pruned incident's sessions have gaps in `seq`.
    ///
    /// The turn log and the blobs are the caller's to remove, after this
    /// (rows first: bytes no row references are what the sweeper removes).
    ///
    /// # Errors
    /// `NotFound` for an unknown (e.g. already deleted) session;
    /// [`StoreError::Fenced`](crate::StoreError::Fenced) when the row moved
    /// past `fence`; [`StoreError::NotFinished`](crate::StoreError::NotFinished)
    /// when it is at `fence` but not terminal (queued, running, idle);
    /// `Constraint`
    /// ([`CONTEXT_REFS_ARTIFACT_FK`](crate::constraint::CONTEXT_REFS_ARTIFACT_FK))
    /// when another session inherited one of its artifacts as context.
    /// Nothing is deleted on any error.
    async fn delete_session(&self, id: SessionId, fence: u64) -> Result<()>;

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

    /// One page of a session's reports by revision.
    ///
    /// # Errors
    /// `InvalidInput` (`cursor`) for a cursor not of this list's form; `Backend` on
    /// I/O failure.
    async fn list_reports(&self, session: SessionId, page: Page) -> Result<Paged<Report>>;

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

    /// Inserts `insert` and deletes the [checkpoint](crate::ArtifactKind::Checkpoint)
    /// rows `delete` in **one** transaction, only while `session` is active
    /// at `fence` — the rule of [`create_artifacts`](Store::create_artifacts).
    /// It is how a checkpoint supersedes the previous version of a file
    /// (insert the new checkpoint row, delete the old one) and how a run's
    /// landing promotes its checkpoint rows (insert `agent_output` or
    /// `report` rows naming the same blob keys, delete the checkpoint
    /// rows): a reader sees the rows before or after, never both or
    /// neither. Returns the inserted rows in request order.
    ///
    /// Every row of `insert` must be of `session` at `fence`. Every id of
    /// `delete` (duplicates count once) must name a checkpoint row of
    /// `session` written at `fence` — by this run, of its revision: no other
    /// row can be deleted this way. (The fence, not the session's revision
    /// column, names the run: a run's revision may be ahead of it when a
    /// failed report row took a number.) The blobs of deleted rows are the caller's to
    /// delete, after this returns (rows first, as everywhere). Both lists
    /// empty checks the fence and writes nothing.
    ///
    /// Not idempotent: a retry whose first attempt committed finds its ids
    /// taken (`Conflict`) or its deleted rows gone (`NotFound`); read the
    /// inserted ids back with [`get_artifacts`](Store::get_artifacts) to
    /// tell a lost acknowledgement from a refusal.
    ///
    /// # Errors
    /// `NotFound` (session) for an unknown session, (artifact) for an id of
    /// `delete` that names no checkpoint row of this run;
    /// [`StoreError::Fenced`](crate::StoreError::Fenced) when the session
    /// is not at `fence` and
    /// [`StoreError::NotActive`](crate::StoreError::NotActive) when it is
    /// terminal or idle; `Conflict` for a duplicate id; `Constraint`
    /// (`artifacts_session_fk`) for a row naming another incident;
    /// `InvalidInput` for a bad row, or one of another session (`session_id`)
    /// or fence (`fence`). Nothing is written on any error.
    async fn replace_checkpoints(
        &self,
        session: SessionId,
        fence: u64,
        insert: Vec<NewArtifact>,
        delete: Vec<ArtifactId>,
    ) -> Result<Vec<Artifact>>;

    /// Reads the artifacts with these ids, in request order; unknown ids are
    /// left out (compare lengths to detect them).
    ///
    /// # Errors
    /// `Backend` on I/O failure.
    async fn get_artifacts(&self, ids: &[ArtifactId]) -> Result<Vec<Artifact>>;

    /// One page of the artifacts a session produced, by id (roughly oldest
    /// first).
    ///
    /// # Errors
    /// `InvalidInput` (`cursor`) for a cursor not of this list's form; `Backend` on
    /// I/O failure.
    async fn list_session_artifacts(
        &self,
        session: SessionId,
        page: Page,
    ) -> Result<Paged<Artifact>>;

    /// One page of an incident's artifacts, by id (roughly oldest first).
    ///
    /// # Errors
    /// `InvalidInput` (`cursor`) for a cursor not of this list's form; `Backend` on
    /// I/O failure.
    async fn list_incident_artifacts(
        &self,
        incident: IncidentId,
        page: Page,
    ) -> Result<Paged<Artifact>>;

    /// The newest artifact of each kind and path a session produced —
    /// what a reopen restores — sorted by path, then id. The newest is
    /// the one with the greatest (revision, `created_at`, id); rows of
    /// earlier revisions are not returned. [Checkpoint](crate::ArtifactKind::Checkpoint)
    /// rows are left out: a run's mid-run copies are never restored.
    ///
    /// A provided method: the default walks
    /// [`list_session_artifacts`](Self::list_session_artifacts) keeping
    /// the newest per kind and path (memory bounded by the session's
    /// paths, every row read); the SQL backends select them in the query.
    ///
    /// # Errors
    /// `Backend` on I/O failure.
    async fn latest_session_artifacts(&self, session: SessionId) -> Result<Vec<Artifact>> {
        let mut newest: std::collections::HashMap<(crate::ArtifactKind, String), Artifact> =
            std::collections::HashMap::new();
        let mut page = Page::first(crate::MAX_PAGE_SIZE);
        loop {
            let paged = self.list_session_artifacts(session, page).await?;
            for a in paged.items {
                if a.kind == crate::ArtifactKind::Checkpoint {
                    continue;
                }
                let slot = newest.entry((a.kind, a.path.clone()));
                match slot {
                    std::collections::hash_map::Entry::Occupied(mut held) => {
                        let h = held.get();
                        if (a.revision, a.created_at, a.id) > (h.revision, h.created_at, h.id) {
                            held.insert(a);
                        }
                    }
                    std::collections::hash_map::Entry::Vacant(v) => {
                        v.insert(a);
                    }
                }
            }
            match paged.next {
                Some(next) => page = Page::after(next, crate::MAX_PAGE_SIZE),
                None => break,
            }
        }
        let mut latest: Vec<Artifact> = newest.into_values().collect();
        latest.sort_by(|a, b| a.path.cmp(&b.path).then(a.id.cmp(&b.id)));
        Ok(latest)
    }
}

/// What [`Store::continue_session`] continues a session from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ContinueFrom {
    /// A terminal row (`completed`, `failed`, `cancelled`): a reopen.
    Terminal,
    /// An idle row (`running`, waiting for the user): an answer resumes it.
    Idle,
}

/// Conveniences built on [`Store`]; implemented for every store.
///
/// # Cancel safety
/// Cancel safe: every method only reads, a page at a time; a dropped call
/// leaves nothing behind.
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

    /// Every incident, walked page by page ([`walk`](crate::walk)): for
    /// callers that know the list is small.
    ///
    /// # Errors
    /// As [`Store::list_incidents`].
    async fn all_incidents(&self) -> Result<Vec<Incident>> {
        crate::walk(|p| self.list_incidents(p)).await
    }

    /// Every session of an incident, in `seq` order, page by page.
    ///
    /// # Errors
    /// As [`Store::list_sessions`].
    async fn all_sessions(&self, incident: IncidentId) -> Result<Vec<Session>> {
        crate::walk(|p| self.list_sessions(incident, p)).await
    }

    /// Every report of a session, by revision, page by page.
    ///
    /// # Errors
    /// As [`Store::list_reports`].
    async fn all_reports(&self, session: SessionId) -> Result<Vec<Report>> {
        crate::walk(|p| self.list_reports(session, p)).await
    }

    /// Every artifact of a session, by id, page by page.
    ///
    /// # Errors
    /// As [`Store::list_session_artifacts`].
    async fn all_session_artifacts(&self, session: SessionId) -> Result<Vec<Artifact>> {
        crate::walk(|p| self.list_session_artifacts(session, p)).await
    }

    /// Every artifact of an incident, by id, page by page.
    ///
    /// # Errors
    /// As [`Store::list_incident_artifacts`].
    async fn all_incident_artifacts(&self, incident: IncidentId) -> Result<Vec<Artifact>> {
        crate::walk(|p| self.list_incident_artifacts(incident, p)).await
    }
}

impl<S: Store + ?Sized> StoreExt for S {}
