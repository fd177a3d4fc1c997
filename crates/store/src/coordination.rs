//! The [`Coordination`] seam: what replicas of the session layer need from
//! a store to share one database — cancel requests and their wake-up, lease
//! renewal, orphans and their takeover, and the transitions that end a run
//! nobody will land (a takeover's settle with its report, an operator's
//! forced cancel).
//!
//! It is a trait of its own, beside [`Store`], the way object_store keeps
//! capabilities apart from its minimum API: a backend author sees which
//! methods make a store *shared*, and a wrapper that only touches rows
//! forwards only [`Store`]. The session layer needs both and takes one
//! value that has both, a [`CoordinatedStore`].

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;

use crate::{
    IncidentId, Lease, NewReport, QueueDepth, Report, Result, Session, SessionId, Settlement, Store,
};

/// Replica coordination over the rows a [`Store`] keeps: cancel requests,
/// heartbeats, orphans, takeover, and the fenced transitions that end a run
/// from outside it.
///
/// The same rules hold as for [`Store`]: each method is one logical
/// operation (one statement or one transaction), errors are semantic, and
/// a dropped call may or may not have committed. Lease expiry is judged by
/// the store's own clock, never a replica's.
///
/// # Cancel safety
/// As [`Store`]'s: reads are cancel safe; a dropped write has committed
/// whole or not at all, and the caller does not learn which. A row a dropped
/// `claim_next` or `take_over` committed is owned under the caller's lease
/// but in no run: the owner's heartbeat does not list it, so once its claim
/// expires it is an orphan again, which a reaper ends (or gives back to the
/// queue when it is a first run that never started). An implementation must
/// never leave part of one call's write behind when its future is dropped.
#[async_trait]
pub trait Coordination: Send + Sync + Debug + 'static {
    /// Records a request to cancel the current run of a running session,
    /// naming its fence, for whichever manager runs it (that manager polls
    /// [`cancel_requests`](Coordination::cancel_requests)). A terminal session is
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

    /// A wake-up for whoever polls [`cancel_requests`](Coordination::cancel_requests):
    /// a new `Notify` that is notified (`notify_one`) soon after any
    /// replica records a cancel request, so the poller can poll at once
    /// instead of at its next period. `None` when the backend cannot push
    /// (the caller keeps polling); a wake-up may also be lost (while a
    /// listener reconnects), so polling stays the fallback. The backend
    /// stops pushing once every clone of the `Notify` is dropped. The
    /// default is `None`: a backend without notifications has nothing to
    /// write.
    fn cancel_signal(&self) -> Option<Arc<tokio::sync::Notify>> {
        None
    }

    /// Renews `lease` — the owner's lease, **one** lease whatever the
    /// number of its runs — and answers which of `runs` (the `(session,
    /// fence)` pairs of the runs the owner is running) it still holds, in
    /// no particular order, in one statement (PostgreSQL) or one
    /// transaction (SQLite). A session taken over, continued elsewhere,
    /// settled or idle is not held and not in the answer.
    ///
    /// A session row is held while its own claim lasts (`ttl` from when a
    /// run claimed it: create, continue, a queue claim, a takeover), and
    /// after that while its owner's lease is live and the owner has not
    /// released it. A beat releases the sessions its owner holds but does
    /// not list (their run is gone: it could not write its outcome) once
    /// their claim has expired: they are orphans from then on. It takes
    /// back a listed one it had released, unless it was taken over. An
    /// expired lease nobody took over yet is live again after the beat.
    ///
    /// A beat writes the owner's lease and only the session rows it
    /// releases or takes back: in the steady state, one row.
    ///
    /// The answer may lag a takeover that commits while the beat runs (a
    /// backend that reads one snapshot, PostgreSQL): that session is then
    /// missing from the next beat's answer. A takeover needs the owner's
    /// lease to have expired first, and a caller that was away that long
    /// has stopped its runs already.
    ///
    /// # Errors
    /// `Backend` on I/O failure.
    async fn heartbeat(
        &self,
        lease: Lease,
        runs: &[(SessionId, u64)],
    ) -> Result<Vec<(SessionId, u64)>>;

    /// The orphans: active running sessions (not idle) whose claim has
    /// expired by the store's clock and that no live owner holds (their
    /// owner's lease expired, or a beat released them; see
    /// [`heartbeat`](Coordination::heartbeat)), or that have no owner but
    /// were started (rows older than leases), as `(session, fence)` pairs
    /// for [`take_over`](Coordination::take_over). A queued row (no owner,
    /// not started) is never one.
    ///
    /// # Errors
    /// `Backend` on I/O failure.
    async fn expired_leases(&self) -> Result<Vec<(SessionId, u64)>>;

    /// Takes an orphan over in one conditional step: only while the
    /// session is active (running, not idle), still at `fence` (the one the
    /// caller saw) and an orphan (see
    /// [`expired_leases`](Coordination::expired_leases)). Then its
    /// fence is incremented — every write of the dead run is refused from
    /// here on — and it is owned under `lease`. A cancel request for the
    /// dead run carries over to the new fence. Of concurrent takeovers of
    /// one session exactly one succeeds.
    ///
    /// # Errors
    /// `Fenced` when the session's fence moved on; `NotOrphaned` when it is
    /// terminal, idle, queued or its lease is live (nothing is written
    /// either way);
    /// `NotFound` for an unknown session.
    async fn take_over(&self, id: SessionId, fence: u64, lease: Lease) -> Result<Session>;

    /// Settles a session and makes sure its revision has a report row, in
    /// one transaction: `report` is inserted unless a row for its session
    /// and revision exists (that one wins and is kept), then the settlement
    /// is written as [`settle_session`](crate::Store::settle_session) writes it.
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
    /// [`cancel_idle_session`](crate::Store::cancel_idle_session)); `NotFound`
    /// for an unknown session; `InvalidInput` for a bad `detail`. Nothing
    /// is written on any error.
    async fn force_cancel(
        &self,
        id: SessionId,
        fence: u64,
        detail: String,
    ) -> Result<(Session, Report)>;

    /// Attaches the output a settled session's run could not store — a
    /// kept scratch dir, stored later by a salvage — to the revision it
    /// belongs to. This is the only write a settled row accepts. In one
    /// transaction, while the session is settled (terminal or idle) at
    /// `fence`: its fence moves to `fence + 1` (so of two salvages of one
    /// dir exactly one attaches, and whatever presents the old fence is
    /// refused), `kept.artifacts` are inserted, and the revision's report
    /// row takes the salvage — its document when it had none, the
    /// salvage's manifest key, `salvaged_from`, `detail` and the new fence;
    /// its exit reason and counters stay (the run did not finish). A
    /// revision without a report row gets `kept.report`. The session's
    /// status, exit reason and counters do not change. Returns the row
    /// and the report row that stands.
    ///
    /// # Errors
    /// `Fenced` when the session moved past `fence`; `NotFinished` while a
    /// run is active (its own landing stores its dir); `NotFound` for an
    /// unknown session; `InvalidInput` for rows of another session,
    /// revision or fence (see [`KeptOutput::validate`](crate::KeptOutput::validate))
    /// or a revision the session has not reached; `Conflict` for an
    /// artifact id already taken. Nothing is written on any error.
    async fn attach_kept_output(
        &self,
        id: SessionId,
        fence: u64,
        kept: crate::KeptOutput,
    ) -> Result<(Session, Report)>;

    /// Claims the next queued session of `pool` for the manager holding
    /// `lease`, in one conditional step: the highest
    /// [priority](crate::Priority) first; among those, the key (the
    /// session's queue key, or its incident) with the fewest runs in
    /// progress, and of those the key whose last claim is oldest (or that
    /// was never claimed) — so keys take turns, also when runs do not
    /// overlap; within a key, the one queued longest. The claim records
    /// its key's turn. With `per_key`, a key that already has that many runs in
    /// progress (owned and active: claimed, started, or continued) is
    /// passed over, and the cap holds across concurrent claimers — a
    /// backend serialises the claims of one key (PostgreSQL: a lock row
    /// per pool and key) instead of trusting a count it read before
    /// another claimer committed. The claimed row is owned under `lease`
    /// at the next fence (the caller then claims its turn log at that
    /// fence), and stays unstarted until
    /// [`mark_started`](Coordination::mark_started). A
    /// [resume-pending](crate::Session::resume_pending) row whose backoff
    /// has passed is claimed as a queued one, by the same order; it keeps
    /// its `started_at` and attempt, and is no longer pending once
    /// claimed. Of concurrent claims
    /// each row goes to exactly one; `None` when the pool has nothing
    /// queued that may start.
    ///
    /// # Errors
    /// `Backend` on I/O failure (a transient one, such as a serialisation
    /// failure between claimers, may be retried).
    async fn claim_next(
        &self,
        pool: &str,
        per_key: Option<u32>,
        lease: Lease,
    ) -> Result<Option<Session>>;

    /// Records that the run at `fence` starts: its manager is about to call
    /// the runner. Sets [`Session::started_at`](crate::Session::started_at)
    /// to now unless it is set — a retry is `Ok` with the row. From here a run whose owner's lease lapses is an orphan
    /// (`owner_lost`); before it, it was only claimed, and nothing ran.
    ///
    /// # Errors
    /// `Fenced` when the session moved past `fence`; `NotActive` when it
    /// is terminal or idle; `NotFound` for an unknown session. Nothing is
    /// written on any error.
    async fn mark_started(&self, id: SessionId, fence: u64) -> Result<Session>;

    /// Gives a claim back to the queue: the active row at `fence`, owned
    /// and not [started](Coordination::mark_started), loses its owner and
    /// lease and moves to the next fence (so whatever the claimer still
    /// writes is refused), in one conditional step. It keeps its place in
    /// line — pool, priority, key and the time it was first queued — and
    /// the next [`claim_next`](Coordination::claim_next) of its pool may
    /// take it. A cancel request made for the claimed run does not move
    /// with it (cancel a queued row with
    /// [`force_cancel`](Coordination::force_cancel)). A reaper calls it
    /// for an orphan whose run never started (after
    /// [`take_over`](Coordination::take_over)); a manager for a claim it
    /// will not run.
    ///
    /// # Errors
    /// `Fenced` when the session moved past `fence`; `NotActive` when it
    /// is terminal or idle; `AlreadyStarted` when its run started;
    /// `NotFound` for an unknown session. Nothing is written on any
    /// error: of concurrent releases (or a release racing a start) one
    /// wins.
    async fn release(&self, id: SessionId, fence: u64) -> Result<Session>;

    /// Sends an interrupted run back to its pool to be resumed: the active
    /// row at `fence` (a takeover's, or a manager's handing its run off)
    /// becomes [resume pending](crate::Session::resume_pending), in one
    /// conditional step. It moves to the next fence (whatever the old run
    /// still writes is refused), counts the next
    /// [attempt](crate::Session::attempt) — persisted before that attempt
    /// can start — loses its owner, keeps `started_at`, its revision, pool,
    /// priority and key, and may be claimed by
    /// [`claim_next`](Coordination::claim_next) of its pool once `backoff`
    /// has passed by the store's clock. A row whose cancel was requested
    /// at `fence` is refused: a cancel is never dropped by a release (the
    /// caller settles it instead). A resume-pending row is never an orphan,
    /// is not counted as a run in progress of its key, and a replica of a
    /// release before this method neither takes it over nor claims it
    /// (SQL backends keep it owned by a reserved owner whose lease never
    /// lapses; the model shows no owner).
    ///
    /// # Errors
    /// `Fenced` when the session moved past `fence`; `NotActive` when it
    /// is terminal or idle; `Conflict` when a cancel is pending at
    /// `fence`; `NotFound` for an unknown session. Nothing is written on
    /// any error: of concurrent releases one wins.
    async fn release_for_resume(
        &self,
        id: SessionId,
        fence: u64,
        backoff: std::time::Duration,
    ) -> Result<Session>;

    /// A wake-up for the queue, when the backend can push one: notified
    /// soon after the commit when a row of any pool becomes queued and
    /// when a run ends, so a manager tries a claim at once instead of at
    /// its next poll period. Best effort (what is sent while a listener
    /// reconnects is lost): managers keep polling as the fallback. `None`
    /// when the backend has no such notifications. A `Notify` may also
    /// fire for nothing (another pool, a claim another manager won).
    /// Called once per manager; the backend keeps what feeds it alive
    /// while the returned `Arc` lives. The default is `None` (managers
    /// poll).
    fn queue_signal(&self) -> Option<Arc<tokio::sync::Notify>> {
        None
    }

    /// How many sessions are queued (active, unowned, not started) in
    /// `pool`, and of them how many under the key of a session with
    /// `queue_key` in `incident` (its queue key, else its incident: the
    /// key [`claim_next`](Coordination::claim_next) counts by). A read:
    /// what a create checks against a bound on the queue before it writes.
    ///
    /// # Errors
    /// `Backend` on I/O failure.
    async fn queue_depth(
        &self,
        pool: &str,
        queue_key: Option<&str>,
        incident: IncidentId,
    ) -> Result<QueueDepth>;

    /// Where a waiting session (queued, or its resume pending) stands in
    /// its pool's line, 1 being next: one more than the waiting rows of
    /// its pool with a higher priority, or the same priority and queued
    /// before it (by the time it was first queued, then id). An estimate
    /// for people, never an order: a claim also weighs each key's runs in
    /// progress and turn, per-key caps and resume backoffs. A read; `None`
    /// for a session that does not wait, or does not exist.
    ///
    /// # Errors
    /// `Backend` on I/O failure.
    async fn queue_position(&self, id: SessionId) -> Result<Option<u64>>;
}

/// A [`Store`] that also does [`Coordination`]: what `korvus-session`'s
/// manager is built from, as one `Arc`. The webhook
/// [`Outbox`](crate::Outbox) is not part of it — the manager never reads
/// it; a webhook deliverer takes its own `Arc<dyn Outbox>` of the same
/// store — so a backend that delivers no webhooks need not implement it.
///
/// Implemented for every type that implements both traits, so a backend
/// never implements it by hand. Its methods view the same value as a
/// plain [`Store`] for code that needs only rows (harvest, the CLI's
/// readers); they predate trait upcasting (Rust 1.86, below the minimum
/// supported version now), which does the same.
pub trait CoordinatedStore: Store + Coordination {
    /// This store as a plain [`Store`].
    fn as_store(&self) -> &dyn Store;

    /// This store, shared, as a plain [`Store`].
    fn into_store(self: Arc<Self>) -> Arc<dyn Store>;
}

impl<T: Store + Coordination> CoordinatedStore for T {
    fn as_store(&self) -> &dyn Store {
        self
    }

    fn into_store(self: Arc<Self>) -> Arc<dyn Store> {
        self
    }
}
