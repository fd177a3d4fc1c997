//! The [`Manager`]'s public calls and the state every phase shares.
//!
//! What happens to a run lives in one file per phase: [`launch`] and the
//! supervisor (`supervise.rs`), preparing the scratch dir (`prepare.rs`),
//! running the runner (`execute.rs`), landing its output (`land.rs`),
//! cleaning up (`cleanup.rs`), `reopen.rs` and `watch.rs`.
//!
//! [`launch`]: Manager::launch

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use korvus_blob::BlobStore;
use korvus_log::{LogHeader, LogId, TurnLog};
use korvus_runner::Runner;
use korvus_store::{CoordinatedStore, IncidentId, OwnerId, Session, SessionId, StoreError};
use tracing::{info, warn};

use crate::live::LiveRuns;
use crate::{Result, SessionError};

mod budget;
mod builder;
mod check;
mod create;

pub use self::budget::{SessionBudgets, BUDGET_RAISED_MESSAGE};
pub use self::builder::ManagerBuilder;
pub use self::create::{default_role, ContextRequest, CreateOptions, CreateSession};
pub use crate::config::{
    DEFAULT_CANCEL_POLL, DEFAULT_CHECKPOINT_INTERVAL, DEFAULT_HEARTBEAT, DEFAULT_LEASE_TTL,
    DEFAULT_MAX_RUNNING, DEFAULT_RESUME_ORPHANS, DEFAULT_RUN_TIMEOUT,
};
use crate::inner::Inner;

/// Runs agent sessions and never loses what they produce.
///
/// Cheap to clone (an `Arc` inside); every clone is the same manager.
///
/// # Cancellation
///
/// A run's cancellation is its entry in [`LiveRuns`] — [`Manager::cancel`]
/// or [`Manager::stop`] — never the caller's request: dropping the future of
/// `create` after it returned does not stop the run. Persist, report and
/// settle run detached from the run's cancellation, so a cancelled run's
/// files are still stored and its row still settles.
#[derive(Clone)]
pub struct Manager {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for Manager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Manager")
            .field("runs", &self.inner.runs.len())
            .field("slots_in_use", &self.inner.slots.in_use())
            .field(
                "shutting_down",
                &self.inner.shutting_down.load(Ordering::SeqCst),
            )
            .finish_non_exhaustive()
    }
}

impl Manager {
    /// Starts building a manager from the two things it cannot work without.
    pub fn builder(store: Arc<dyn CoordinatedStore>, runner: Arc<dyn Runner>) -> ManagerBuilder {
        ManagerBuilder::new(store, runner)
    }

    /// The store this manager writes to.
    pub fn store(&self) -> &Arc<dyn CoordinatedStore> {
        &self.inner.store
    }

    /// Reads how many sessions are queued in this manager's pool and sets
    /// the [`SESSIONS_QUEUED`](crate::metrics::SESSIONS_QUEUED) gauge: for
    /// an exporter to call before it renders (the queue is the store's,
    /// shared by every replica, so no run of this process updates it).
    ///
    /// # Errors
    /// `Store`.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads the store, then sets the gauge.
    pub async fn observe_queue(&self) -> Result<u64> {
        let pool = &self.inner.config.pool;
        let depth = self
            .inner
            .store
            .queue_depth(pool, None, korvus_store::IncidentId::new())
            .await?
            .pool;
        crate::metrics::queued(pool, depth);
        Ok(depth)
    }

    /// The turn log service this manager writes to.
    pub fn turn_log(&self) -> &Arc<dyn TurnLog> {
        &self.inner.logs
    }

    /// The blob store, if configured.
    pub fn blob_store(&self) -> Option<&Arc<dyn BlobStore>> {
        self.inner.blobs.as_ref()
    }

    /// This manager's incarnation: the owner recorded on every session it
    /// runs ([`Session::owner`]). Fresh at every build.
    pub fn owner(&self) -> OwnerId {
        self.inner.ownership.owner()
    }

    /// The runs of this process (a read and cancel view).
    pub fn live_runs(&self) -> &LiveRuns {
        &self.inner.live
    }

    /// Refuses new work once `stop` began. Called after joining the run
    /// group, so either `stop` sees the caller in flight and waits for it,
    /// or the caller sees `stop`.
    pub(crate) fn check_not_stopping(&self) -> Result<()> {
        if self.inner.shutting_down.load(Ordering::SeqCst) {
            return Err(SessionError::ShuttingDown);
        }
        Ok(())
    }

    /// Cancels a session.
    ///
    /// The row decides: a terminal row is `AlreadyEnded`. A session waiting
    /// for the user (`running`, exit reason `awaiting_user`, no run active)
    /// is settled `cancelled` by one conditional store transition — on any
    /// replica; its report row already exists, so no second one is written.
    /// A queued session (no manager claimed it yet), or one whose resume
    /// is pending ([`Session::is_resume_pending`]), is settled
    /// `cancelled` with its report row by one fenced transition, its
    /// runner not called (again).
    /// An active row whose run is in this process, at the row's fence, is
    /// cancelled (the run settles `cancelled` shortly); a local run at an
    /// older fence is stale (the session was taken over or continued
    /// elsewhere) — it is stopped too, and the cancel goes on to the
    /// session's current run as below. An active row this process does not
    /// run belongs to another replica: a cancel request naming the run's
    /// fence is recorded in the store, and the manager that runs it fires
    /// the run's cancellation within its
    /// [`cancel_poll`](crate::ManagerBuilder::cancel_poll) period; the row
    /// is returned with `cancel_requested` set. An orphan — a run whose
    /// owner stopped renewing its lease — is taken over, the scratch dir
    /// its lost run left on this host salvaged, and settled `cancelled`
    /// with a report row for its revision, before this returns (bounded by
    /// the persist, report and settle bounds).
    ///
    /// # Errors
    /// `AlreadyEnded`, `NotFound`, `Store`.
    ///
    /// # Cancel safety
    /// Cancel-safe for every row but an orphan's: each write is one store
    /// call or the in-process cancellation, made after the row was read.
    /// Dropped while it ends an orphan it took over, the salvage and
    /// settlement stop half-way, but the orphan stays registered as a live
    /// run here: this manager's heartbeat holds the row, `running`, while
    /// the manager lives; a reaper ends it once its lease lapses.
    pub async fn cancel(&self, id: SessionId) -> Result<Session> {
        let row = self.inner.store.get_session(id).await?;
        if row.status.is_terminal() {
            return Err(SessionError::AlreadyEnded { session: id });
        }
        if row.is_idle() {
            return self.cancel_idle(row).await;
        }
        if row.is_queued() {
            return self
                .cancel_queued(row, "cancelled while queued: no run had started")
                .await;
        }
        if row.is_resume_pending() {
            return self
                .cancel_queued(
                    row,
                    "cancelled while waiting to be resumed after its owner was lost",
                )
                .await;
        }
        if let Some(run) = self.inner.live.get(id) {
            if run.fence == row.fence && !run.cancel.is_cancelled() {
                let _ = run.cancelled_at.set(std::time::Instant::now());
                crate::metrics::cancelled(false);
            }
            // A run being handed off (`drain`) lands cancelled instead.
            run.handoff.store(false, Ordering::Release);
            run.cancel.cancel();
            if run.fence == row.fence {
                return Ok(row);
            }
            // A stale local run (the session was taken over or continued
            // elsewhere): stopped above all the same, and the cancel goes
            // on to the session's current run.
            info!(session_id = %id, local = run.fence, current = row.fence, "cancel: the local run is stale; cancelling the current run");
        }
        // An orphan (its owner's lease expired): nobody would see a
        // request, so take it over and settle it `cancelled` here.
        match self
            .inner
            .store
            .take_over(id, row.fence, self.inner.lease())
            .await
        {
            Ok(taken) => {
                info!(session_id = %id, "cancel: the session's owner is gone; taken over and cancelled");
                // As a run of this manager, like a reaper's: its heartbeats
                // hold the row while the salvage stores the lost run's dir.
                let member = self.inner.runs.join();
                return match self.inner.end_orphan_as_run(&taken, true, member).await {
                    Some(ended) => ended,
                    None => Ok(self.inner.store.get_session(id).await?),
                };
            }
            Err(StoreError::NotOrphaned { .. } | StoreError::Fenced { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        // Another replica (or process) runs it: ask it through the store,
        // naming this run's fence.
        let row = self.inner.store.request_cancel(id).await?;
        info!(session_id = %id, fence = row.fence, "cancel: requested from the replica that runs the session");
        Ok(row)
    }

    /// Cancels a queued session, or one whose resume is pending (its
    /// lost attempt's files stay stored as checkpoints): one fenced store
    /// transition settles it `cancelled` with its report row (no
    /// document, `detail` saying which); its runner is not called again
    /// and no scratch dir is made. A manager that claimed it meanwhile moved its fence: the
    /// cancel then goes to that run like any other.
    async fn cancel_queued(&self, row: Session, detail: &str) -> Result<Session> {
        let id = row.id;
        match self
            .inner
            .store
            .force_cancel(id, row.fence, detail.to_owned())
            .await
        {
            Ok((settled, _)) => {
                crate::metrics::settled(settled.exit_reason.as_deref());
                info!(session_id = %id, "cancel: the queued session is cancelled");
                Ok(settled)
            }
            // Claimed (or ended) meanwhile: the row as it is now decides.
            Err(e) if e.is_fenced_off() => Box::pin(self.cancel(id)).await,
            Err(e) => Err(e.into()),
        }
    }

    /// Cancels a session waiting for the user. A local run that returned
    /// `awaiting_user` may still be unwinding: it is waited for first.
    async fn cancel_idle(&self, row: Session) -> Result<Session> {
        let id = row.id;
        if let Some(run) = self.inner.live.get(id) {
            run.settled().await;
        }
        match self.inner.store.cancel_idle_session(id).await {
            Ok(row) => {
                crate::metrics::settled(row.exit_reason.as_deref());
                info!(session_id = %id, "cancel: the session waiting for the user is cancelled");
                Ok(row)
            }
            // A racing answer or cancel won: the row as it is now decides.
            Err(StoreError::NotIdle { .. }) => {
                let now = self.inner.store.get_session(id).await?;
                if now.status.is_terminal() {
                    return Err(SessionError::AlreadyEnded { session: id });
                }
                self.inner.live.cancel(id);
                Ok(now)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// An operator's forced cancel: ends the session's active run now,
    /// whoever runs it and whether or not its owner answers. One fenced
    /// store transition ([`Coordination::force_cancel`](korvus_store::Coordination::force_cancel))
    /// moves the fence on, settles the row `cancelled` and writes the
    /// revision's report row (unless the run wrote its own), with a detail
    /// naming the operator action; then the session's turn log is fenced
    /// at the new fence, even while the old run holds it open. From then
    /// on every write of the old run is
    /// refused — its settlement, report, artifacts and log appends — and
    /// its owner cancels it (and stops its agent) within one heartbeat
    /// period, at once when the run is in this process. A session waiting
    /// for the user is cancelled as [`cancel`](Manager::cancel) does.
    ///
    /// # Errors
    /// `AlreadyEnded` for a terminal row; `NotFound`; `Store`.
    ///
    /// # Cancel safety
    /// Cancel-safe: the transition is one store call; a dropped future
    /// may leave the log unclaimed, which the old run's owner makes up for
    /// when its heartbeat finds the row moved on.
    pub async fn force_cancel(&self, id: SessionId) -> Result<Session> {
        let mut tries = 0;
        loop {
            let row = self.inner.store.get_session(id).await?;
            if row.status.is_terminal() {
                return Err(SessionError::AlreadyEnded { session: id });
            }
            if row.is_idle() {
                return self.cancel_idle(row).await;
            }
            let detail = format!(
                "cancelled by an operator (forced cancel through manager {}): the run at fence {} \
                 was fenced off and its report, if any, did not land",
                self.inner.ownership.owner(),
                row.fence
            );
            match self.inner.store.force_cancel(id, row.fence, detail).await {
                Ok((settled, _)) => {
                    if let Some(run) = self.inner.live.get(id) {
                        if run.fence == row.fence {
                            run.cancel.cancel();
                        }
                    }
                    if let Err(e) = self.inner.claim_log_retried(&settled).await {
                        warn!(session_id = %id, error = %e, "forced cancel: the turn log not fenced; the old run's owner stops it when it sees the row");
                    }
                    crate::metrics::settled(settled.exit_reason.as_deref());
                    info!(session_id = %id, fence = settled.fence, "forced cancel: the run was fenced off and the session cancelled");
                    return Ok(settled);
                }
                // The row moved between the read and the transition (its
                // run settled, or a new run started): read it again.
                Err(e) if e.is_fenced_off() && tries < 3 => tries += 1,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Ends every orphan now, whatever this manager's heartbeat history —
    /// for an operator who knows the dead replicas are gone (`korvus reap
    /// --apply`). Each session whose owner's lease has expired is taken
    /// over (exactly one caller wins each), its recorded agent processes on
    /// this host are stopped, the scratch dir its lost run left on this
    /// host is salvaged (its files stored, its `report.md` adopted when the
    /// revision wrote it; the report row says so in `salvaged_from`), and
    /// it is settled `owner_lost` (`cancelled` when a cancel was pending)
    /// with a report row for its revision — or,
    /// when its first run never started (claimed, then its manager died
    /// before calling the runner), it goes back to the queue
    /// ([`Session::is_queued`]). With
    /// [`resume_orphans`](crate::ManagerBuilder::resume_orphans) on, a
    /// started run with attempts left is sent back to its pool to be
    /// resumed instead ([`Session::is_resume_pending`]). Returns the rows
    /// it ended, queued again or sent back.
    ///
    /// # Errors
    /// `Store` when the orphans cannot be listed; a takeover or settlement
    /// that fails is logged and left to the next reaper.
    ///
    /// # Cancel safety
    /// Not cancel safe. A row it took over but did not start to end is an
    /// orphan again once its claim expires. Dropped while it ends one, that
    /// orphan stays registered as a live run here, as for
    /// [`cancel`](Manager::cancel): held `running` while the manager lives.
    pub async fn reap_orphans(&self) -> Result<Vec<Session>> {
        let mut taken = std::collections::HashMap::new();
        self.inner.take_over_orphans(&mut taken).await?;
        let mut settled = Vec::new();
        for row in taken.values() {
            // As a run of this manager: its heartbeats hold the row while
            // a salvage lands the dead run's scratch dir.
            let member = self.inner.runs.join();
            match self.inner.end_orphan_as_run(row, false, member).await {
                Some(Ok(done)) => settled.push(done),
                Some(Err(e)) => warn!(session_id = %row.id, error = %e, "orphan not settled"),
                None => warn!(session_id = %row.id, "orphan not settled: a run of it is live here"),
            }
        }
        Ok(settled)
    }

    /// Stops claiming queued sessions: this manager no longer takes work
    /// from its pool's queue, while everything else goes on — its runs
    /// continue, a create still runs at once while a slot is free (and is
    /// queued for the pool's other managers otherwise). For a process
    /// that waited for one session and now lets the runs it picked up
    /// from the queue finish ([`wait`](Manager::wait)) before it
    /// [`stop`](Manager::stop)s. A claim that was on its way is given back
    /// to the queue. Idempotent; `stop` implies it.
    pub fn stop_claiming(&self) {
        self.inner.claiming_stopped.store(true, Ordering::SeqCst);
    }

    /// Waits until every run of this process has settled and released.
    /// Cancels nothing.
    ///
    /// # Cancel safety
    /// Cancel-safe: it only waits.
    pub async fn wait(&self) {
        self.inner.runs.empty().await;
    }

    /// Shuts down: refuses new creates and reopens, cancels every run of
    /// this process, and waits until each has settled. Safe to call
    /// repeatedly and from many tasks at once; only the first call cancels.
    /// An owned scratch root is removed after the last run released it.
    ///
    /// # Cancel safety
    /// Dropping the future stops the waiting, not the shutdown: the runs
    /// stay cancelled and settle on their own; an owned scratch root is
    /// then not removed (a later `stop` does not remove it either).
    pub async fn stop(&self) {
        let inner = &self.inner;
        inner.claiming_stopped.store(true, Ordering::SeqCst);
        inner.shutting_down.store(true, Ordering::SeqCst);
        let first = !inner.stop_started.swap(true, Ordering::SeqCst);
        if first {
            let n = inner.live.cancel_all();
            info!(runs = n, "stop: cancelled every local run");
        }
        self.wait().await;
        if first {
            self.release_owned_root().await;
        }
    }

    /// Resolves once the session is settled — its row terminal, or idle
    /// (waiting for the user) — and returns the row as stored. A run in this
    /// process is waited for through its settle signal; a session another
    /// replica (or process) runs is read again every
    /// [`cancel_poll`](crate::ManagerBuilder::cancel_poll) period. A row
    /// that is neither terminal nor idle is never returned.
    ///
    /// # Errors
    /// [`SessionError::SettleDeadline`] when `deadline` passes first;
    /// [`SessionError::Unsettled`] when this process's run of the session
    /// ended without its outcome written (the store refused it or could not
    /// be reached within the settle bound: the row stays `running` until
    /// its lease lapses and a reaper settles it `owner_lost`); `NotFound`;
    /// `Store`.
    ///
    /// # Cancel safety
    /// Cancel-safe: it only waits and reads.
    pub async fn await_settled(&self, id: SessionId, deadline: Duration) -> Result<Session> {
        let until = tokio::time::Instant::now() + deadline;
        let over = || SessionError::SettleDeadline { session: id };
        loop {
            let local = self.inner.live.get(id);
            if let Some(run) = &local {
                if tokio::time::timeout_at(until, run.settled()).await.is_err() {
                    return Err(over());
                }
            }
            let row = self.inner.store.get_session(id).await?;
            if row.status.is_terminal() || row.is_idle() {
                return Ok(row);
            }
            if let Some(run) = local {
                // A later run of this process (a reopen) is waited for in
                // turn.
                if self.inner.live.get(id).is_some_and(|r| r.fence > run.fence) {
                    continue;
                }
            }
            // A row still at the fence of a run of this process that
            // ended without its outcome written stays unsettled.
            if self.inner.live.ended_unsettled(id, row.fence) {
                return Err(SessionError::Unsettled { session: id });
            }
            let now = tokio::time::Instant::now();
            if now >= until {
                return Err(over());
            }
            // A queued or foreign run settles elsewhere (or starts here):
            // looked at again within a second, whatever the poll period.
            let poll = self.inner.config.cancel_poll.min(Duration::from_secs(1));
            tokio::time::sleep_until(until.min(now + poll)).await;
        }
    }
}

/// The header of a session's turn log: its id is the session's, and it is
/// labelled with both ids.
pub(crate) fn log_header(incident: IncidentId, session: SessionId) -> LogHeader {
    LogHeader::new(LogId::from_uuid(session.as_uuid()))
        .with_label("incident_id", incident.to_string())
        .with_label("session_id", session.to_string())
}

/// Runs `work` on its own task and waits for it: the caller may go away,
/// the work finishes anyway. A panic in it is passed on to the caller.
pub(crate) async fn join_detached<T: Send + 'static>(
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    match tokio::spawn(work).await {
        Ok(value) => value,
        Err(join) => std::panic::resume_unwind(join.into_panic()),
    }
}
