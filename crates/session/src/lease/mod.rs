//! The owner lease of this manager's runs, and the reaper.
//!
//! Every run is owned by this manager's incarnation
//! ([`Manager::owner`](crate::Manager::owner)) under a lease the store
//! writes from the database clock. One task per manager, and every store
//! call it makes is bounded (a hung renewal costs one bound, never the
//! TCP timeout):
//!
//! - **heartbeat**: every period, one store call renews this incarnation's
//!   lease — one lease for all its runs, not one per run — and names the
//!   runs of this process it still holds. A local run missing from the
//!   answer whose row moved to another fence (taken over, force-cancelled,
//!   continued elsewhere) is cancelled at once. A session this incarnation
//!   owns but no longer runs (its run could not write its outcome) is not
//!   listed, so the store releases it from the lease: it becomes an orphan
//!   and a reaper ends it.
//! - **lapse**: a run whose lease was last renewed (or written) longer
//!   than ttl − ttl/5 ago, by this process's monotonic clock, may be
//!   taken over soon. The manager cancels it and stops its agent itself —
//!   before the lease can expire — and marks it `lease_lost`; the run
//!   still lands, because **fencing decides, not the local clock**: its
//!   writes present its fence, and the store refuses them only if the
//!   session really moved on.
//! - **reaper**: once this manager's own heartbeats have succeeded for a
//!   full ttl (so a database outage does not end with every healthy run
//!   reaped), each period it lists the expired leases and takes each
//!   orphan over — one conditional transition, so exactly one manager
//!   wins — then fences the orphan's turn log at the new fence (the dead
//!   run's appends are refused from then on, even while it holds the log
//!   open), stops the dead run's
//!   recorded agent processes on this host and, in one transaction,
//!   writes the revision's report row (unless the dead run wrote one) and
//!   the settlement: `cancelled` when a cancel was pending, else `failed`
//!   / `owner_lost`. An orphan whose first run never started (claimed,
//!   then its manager died before calling the runner) is not settled: it
//!   goes back to the queue in its place (`release`) and starts elsewhere.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Instant;

use korvus_log::{LogError, LogId};
use korvus_store::{Session, SessionId, StoreError};
use tracing::{debug, error, warn, Instrument as _};

use crate::inner::Inner;
use crate::SessionError;

pub(crate) mod state;

/// Whether a takeover's settlement failed in a way the next period may fix.
fn transient(e: &SessionError) -> bool {
    match e {
        SessionError::Store(e) => e.is_transient(),
        SessionError::Log(e) => e.is_transient(),
        _ => false,
    }
}

/// Starts the heartbeat and reaper task of `inner`'s manager, if a tokio
/// runtime is running. The task ends when the manager is dropped, or once
/// it stopped and its last run released.
pub(crate) fn start(inner: &Arc<Inner>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        debug!("no runtime: the lease is not renewed and no orphans are reaped");
        return;
    };
    let weak = Arc::downgrade(inner);
    let period = inner.config.heartbeat;
    runtime.spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut reaper = Reaper::default();
        loop {
            tick.tick().await;
            if !beat(&weak, &mut reaper).await {
                return;
            }
        }
    });
}

/// What the reaper keeps between periods.
#[derive(Default)]
struct Reaper {
    /// Since when every heartbeat succeeded.
    healthy_since: Option<Instant>,
}

/// One period; `false` once the manager is gone, or stopped with no run left.
async fn beat(weak: &Weak<Inner>, reaper: &mut Reaper) -> bool {
    let Some(inner) = weak.upgrade() else {
        return false;
    };
    let stopping = inner.is_shutting_down();
    if stopping && inner.runs.len() == 0 {
        return false;
    }
    // A process resumed after a pause stops what it may have lost first.
    inner.cancel_lapsed();
    let bound = inner.renewal_bound();
    let started = std::time::Instant::now();
    let renewed = tokio::time::timeout(bound, inner.renew()).await;
    crate::metrics::heartbeat(matches!(renewed, Ok(Ok(_))), started.elapsed());
    match renewed {
        Ok(Ok((sent, held))) => {
            let since = *reaper.healthy_since.get_or_insert(sent);
            let period = inner.config.heartbeat;
            if tokio::time::timeout(period, inner.cancel_taken_over(sent, &held))
                .await
                .is_err()
            {
                warn!(bound = ?period, "takeover checks did not finish within a period");
            }
            if !stopping && since.elapsed() >= inner.config.lease_ttl {
                let period = inner.config.heartbeat;
                if tokio::time::timeout(period, reap(&inner)).await.is_err() {
                    warn!(bound = ?period, "the reaper did not finish within a period; going on next period");
                }
            }
        }
        Ok(Err(e)) => {
            reaper.healthy_since = None;
            warn!(error = %e, "lease not renewed; trying again");
        }
        Err(_) => {
            reaper.healthy_since = None;
            warn!(?bound, "lease renewal did not answer in time; trying again");
        }
    }
    inner.cancel_lapsed();
    true
}

/// Whether the orphan `session` at `fence` is a first run's claim that
/// never started (so ending it is giving it back to the queue), as its
/// row says now; `false` when the row cannot be read.
async fn never_started(inner: &Inner, session: SessionId, fence: u64) -> bool {
    inner.store.get_session(session).await.is_ok_and(|row| {
        row.fence == fence && row.started_at.is_none() && row.revision == 1 && !row.cancel_requested
    })
}

/// Takes over the orphans the store lists, one per free run slot, and
/// ends each on a task of its own ([`Inner::end_orphan_as_run`]) — never on
/// this heartbeat task, which a salvage of a large scratch dir would hold
/// past its period. The slot is taken before the takeover, so no orphan is
/// held here waiting for one: with every slot busy, orphans stay for a
/// later period or another replica. A first run's claim that never started
/// needs no slot: it only goes back to the queue. An orphan whose ending failed is left
/// to the store: no heartbeat lists it, so its claim lapses and a reaper
/// takes it over again under a new fence.
async fn reap(inner: &Arc<Inner>) {
    let orphans = match inner.store.expired_leases().await {
        Ok(orphans) => orphans,
        Err(e) => {
            warn!(error = %e, "expired leases not listed");
            return;
        }
    };
    for (session, fence) in orphans {
        if inner.live.contains(session) {
            continue;
        }
        // A claim whose run never started only goes back to the queue: no
        // salvage, no slot — it is given back at once, as it always was.
        let slot = if never_started(inner, session, fence).await {
            None
        } else {
            match inner.slots.try_take() {
                Some(slot) => Some(slot),
                None => {
                    debug!("no run slot free to end an orphan; next period");
                    continue;
                }
            }
        };
        let row = match inner.store.take_over(session, fence, inner.lease()).await {
            Ok(row) => row,
            // Another reaper (or a renewal) came first.
            Err(StoreError::NotOrphaned { .. } | StoreError::Fenced { .. }) => continue,
            Err(e) => {
                warn!(session_id = %session, error = %e, "orphan not taken over");
                continue;
            }
        };
        warn!(session_id = %session, fence = row.fence, "took over an orphan (its owner stopped renewing its lease)");
        // A member of the run group before the task exists: `stop` waits
        // for it whenever it looks.
        let member = inner.runs.join();
        let inner = Arc::clone(inner);
        let span = tracing::info_span!(parent: None, "orphan", session_id = %row.id, incident_id = %row.incident_id, fence = row.fence);
        tokio::spawn(
            async move {
                match inner.end_orphan_as_run(&row, false, member).await {
                    Some(Err(e)) if transient(&e) => {
                        warn!(error = %e, "orphan not settled; a reaper takes it over again once its claim lapses");
                    }
                    Some(Err(e)) => error!(error = %e, "orphan settlement refused"),
                    Some(Ok(_)) | None => {}
                }
                drop(slot);
            }
            .instrument(span),
        );
    }
}

impl Inner {
    /// Renews this incarnation's lease: returns when the renewal was sent
    /// and the `(session, fence)` pairs it holds.
    pub(crate) async fn renew(&self) -> Result<(Instant, Vec<(SessionId, u64)>), StoreError> {
        let runs: Vec<(SessionId, u64)> = self
            .live
            .snapshot()
            .into_iter()
            .map(|(session, run)| (session, run.fence))
            .collect();
        let sent = Instant::now();
        let held = self.store.heartbeat(self.ownership.lease(), &runs).await?;
        self.ownership.renewed_at(sent);
        Ok((sent, held))
    }

    /// The bound of one renewal: a period, but never past the moment the
    /// oldest lease this manager holds lapses, so a hung renewal cannot
    /// delay [`cancel_lapsed`](Inner::cancel_lapsed).
    fn renewal_bound(&self) -> std::time::Duration {
        let period = self
            .config
            .heartbeat
            .max(std::time::Duration::from_millis(10));
        let oldest = self
            .live
            .snapshot()
            .into_iter()
            .map(|(_, run)| self.ownership.last_written(run.registered))
            .min();
        match oldest {
            Some(at) => {
                let left = self.ownership.lapse_after().saturating_sub(at.elapsed());
                period.min(left.max(std::time::Duration::from_millis(10)))
            }
            None => period,
        }
    }

    /// Cancels every local run whose lease may have lapsed (not renewed
    /// for ttl − ttl/5) and marks it `lease_lost`: its agent is stopped
    /// now, before another manager can take the session over, and the run
    /// lands what it has; the store decides whether it still may.
    pub(crate) fn cancel_lapsed(&self) {
        let after = self.ownership.lapse_after();
        for (session, run) in self.live.snapshot() {
            if run.cancel.is_cancelled() {
                continue;
            }
            let since = self.ownership.last_written(run.registered).elapsed();
            if since >= after {
                warn!(session_id = %session, fence = run.fence, ?since, "the lease was not renewed in time: stopping the run before another manager takes it over (lease_lost)");
                run.lease_lost.store(true, Ordering::Release);
                run.cancel.cancel();
            }
        }
    }

    /// Cancels the local runs a renewal sent at `sent` did not name and
    /// whose row moved on to another fence (taken over, or continued
    /// elsewhere after a forced cancel). Runs registered after `sent`, and
    /// runs whose own row merely settled, are left alone.
    async fn cancel_taken_over(&self, sent: Instant, held: &[(SessionId, u64)]) {
        // A set: the check is O(runs + held) per heartbeat, not their product.
        let held: std::collections::HashSet<(SessionId, u64)> = held.iter().copied().collect();
        for (session, run) in self.live.snapshot() {
            if run.registered > sent
                || run.cancel.is_cancelled()
                || held.contains(&(session, run.fence))
            {
                continue;
            }
            match self.store.get_session(session).await {
                Ok(row) if row.fence != run.fence => {
                    warn!(session_id = %session, fence = run.fence, current = row.fence, "the session was taken over: cancelling the local run");
                    run.cancel.cancel();
                }
                Ok(_) => {}
                Err(e) => debug!(session_id = %session, error = %e, "not checked for takeover"),
            }
        }
    }

    /// Takes over the orphans the store lists, into `unsettled`.
    pub(crate) async fn take_over_orphans(
        &self,
        unsettled: &mut HashMap<SessionId, Session>,
    ) -> Result<(), StoreError> {
        for (session, fence) in self.store.expired_leases().await? {
            if self.live.contains(session) || unsettled.contains_key(&session) {
                continue;
            }
            match self.store.take_over(session, fence, self.lease()).await {
                Ok(row) => {
                    warn!(session_id = %session, fence = row.fence, "took over an orphan (its owner stopped renewing its lease)");
                    unsettled.insert(session, row);
                }
                // Another reaper (or a renewal) came first.
                Err(StoreError::NotOrphaned { .. } | StoreError::Fenced { .. }) => {}
                Err(e) => warn!(session_id = %session, error = %e, "orphan not taken over"),
            }
        }
        Ok(())
    }

    /// Ends an orphan this manager took over as a run of its own: registered
    /// in the live-run table under the takeover's fence (so this manager's
    /// heartbeats hold the row while a salvage lands its dir, a cancel
    /// reaches it, and neither this reaper nor another takes it again
    /// meanwhile), a member of the run group through `member` (`stop`
    /// waits for it), and bounded as a whole: by the persist, report and
    /// settle bounds added up. `cancel` settles it `cancelled` (a cancel of
    /// the orphan). Returns `None` when a run of the session is already
    /// live here, or the bound passed (the row is then released by the next
    /// beat and ended again later).
    ///
    /// # Errors
    /// As [`Inner::end_orphan`].
    pub(crate) async fn end_orphan_as_run(
        &self,
        row: &Session,
        cancel: bool,
        member: crate::live::RunGuard,
    ) -> Option<Result<Session, SessionError>> {
        let run = self
            .live
            .register(row.id, row.incident_id, row.fence)
            .ok()?;
        // Unregistered and signalled on every way out, a dropped future
        // included.
        let run = Registered::new(self.live.clone(), row.id, run);
        let c = &self.config;
        let bound = c.persist.timeout
            + c.persist.manifest_timeout
            + c.report_timeout * 2
            + c.settle_timeout
            + c.cleanup_timeout;
        let cancelled = || run.cancel.is_cancelled();
        let work = async {
            if cancel {
                self.settle_taken_over(row, true, &cancelled).await
            } else {
                self.end_orphan(row, &cancelled).await
            }
        };
        let ended = tokio::time::timeout(bound, work).await;
        if ended.is_err() {
            error!(session_id = %row.id, ?bound, "the orphan was not ended within its bound; it is released and ended again later");
        }
        drop(run);
        drop(member);
        ended.ok()
    }

    /// Ends an orphan this manager took over. A first run that never
    /// started — its manager claimed it and died (or lost the database)
    /// before calling the runner — goes back to the queue in its place:
    /// nothing ran, so nothing is lost, and a manager of its pool starts
    /// it. Any other orphan is settled ([`Inner::settle_taken_over`]):
    /// `cancelled` when a cancel was pending, else `failed` /
    /// `owner_lost`. A continued revision (a reopen or an answer) is
    /// settled even when it never started, because its message lives only
    /// in the run that was lost. With resumes on, a started run with
    /// attempts left goes back to its pool to be resumed instead
    /// (`resume.rs`).
    ///
    /// # Errors
    /// As [`Inner::settle_taken_over`]; the store's error when the claim
    /// could not be given back.
    pub(crate) async fn end_orphan(
        &self,
        row: &Session,
        cancelled: &(dyn Fn() -> bool + Sync),
    ) -> Result<Session, SessionError> {
        if row.started_at.is_none() && !row.cancel_requested && row.revision == 1 {
            let queued = self.store.release(row.id, row.fence).await?;
            warn!(session_id = %row.id, fence = queued.fence, "an orphan that never started went back to the queue");
            self.slots.nudge();
            return Ok(queued);
        }
        if self.may_resume(row) {
            if let Some(pending) = self.release_for_resume(row).await? {
                return Ok(pending);
            }
        }
        self.settle_taken_over(row, false, cancelled).await
    }

    /// Stops the agent process groups that dead runs of `session` recorded
    /// under this manager's scratch root (on this host) and that still run.
    /// Called only when no run of the session is live here.
    pub(crate) async fn stop_dead_agents(&self, session: SessionId) -> Vec<i32> {
        let Some(root) = &self.scratch else {
            return Vec::new();
        };
        let dir = root.join(session.to_string());
        let stopped =
            tokio::task::spawn_blocking(move || korvus_workspace::stop_recorded_agents(&dir))
                .await
                .unwrap_or_default();
        if !stopped.is_empty() {
            warn!(session_id = %session, groups = ?stopped, "stopped the agent processes a dead run left running");
        }
        stopped
    }

    /// Claims the turn log of a session this manager took over (or
    /// force-cancelled) for the row's new fence by fencing it
    /// ([`TurnLog::fence`](korvus_log::TurnLog::fence)), without opening
    /// it for write: every later append of the superseded run is refused
    /// (`LogError::Fenced`), even while that run still holds the log open
    /// — a paused process that comes back, a run in another process or in
    /// this one. A session without a log has nothing to fence, and a log
    /// a newer run already claimed is fenced off all the more.
    ///
    /// # Errors
    /// The log's error when the fence could not be made; a transient one
    /// (a `JsonlLog` writer stopped in the middle of a write holds the
    /// log's epoch lock) may be tried again.
    pub(crate) async fn claim_log(&self, row: &Session) -> Result<(), LogError> {
        let id = LogId::from_uuid(row.id.as_uuid());
        match self.logs.fence(id, row.fence).await {
            Ok(()) | Err(LogError::NotFound { .. } | LogError::Fenced { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// [`claim_log`](Inner::claim_log), tried again with backoff while
    /// its error is transient, within the settle bound: a forced cancel's
    /// fence of the log is not given up for a writer caught mid-write.
    pub(crate) async fn claim_log_retried(&self, row: &Session) -> Result<(), LogError> {
        let deadline = tokio::time::Instant::now() + self.config.settle_timeout;
        let mut backoff = korvus_store::Backoff::WRITES.start();
        loop {
            match self.claim_log(row).await {
                Err(e)
                    if e.is_transient()
                        && tokio::time::Instant::now() + backoff.delay() < deadline =>
                {
                    debug!(session_id = %row.id, error = %e, "turn log not fenced yet; retrying");
                    tokio::time::sleep(backoff.delay()).await;
                    backoff.advance();
                }
                done => return done,
            }
        }
    }
}

/// A run's entry in [`LiveRuns`](crate::live::LiveRuns), removed — and its settle signal fired —
/// when this guard is dropped, however its owner ends: returning, or its
/// future dropped at an `.await` (a caller of `cancel` or `reap_orphans`
/// that gave up). Without it a dropped caller would leave the entry, and the
/// heartbeat would hold a row nothing runs.
#[derive(Debug)]
struct Registered {
    live: crate::live::LiveRuns,
    session: korvus_store::SessionId,
    run: crate::live::LiveRun,
}

impl Registered {
    /// Guards `run`, the entry of `session` in `live`.
    fn new(
        live: crate::live::LiveRuns,
        session: korvus_store::SessionId,
        run: crate::live::LiveRun,
    ) -> Self {
        Self { live, session, run }
    }
}

impl std::ops::Deref for Registered {
    type Target = crate::live::LiveRun;

    fn deref(&self) -> &crate::live::LiveRun {
        &self.run
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.live.unregister(self.session, &self.run);
        self.run.signal_settled();
    }
}
