//! The owner lease of this manager's runs, and the reaper.
//!
//! Every run is owned by this manager's incarnation
//! ([`Manager::owner`](crate::Manager::owner)) under a lease the store
//! writes from the database clock. One task per manager:
//!
//! - **heartbeat**: every period, one store call renews the lease of every
//!   run of this process that this incarnation still holds, and names
//!   them. A local run missing from the answer was taken over (or moved on
//!   elsewhere): it is cancelled at once. A session this incarnation owns
//!   but no longer runs (its run could not write its outcome) is not
//!   renewed: it lapses and a reaper ends it.
//! - **own judgement**: before a run writes its outcome, the manager checks
//!   its last successful renewal on its own monotonic clock; if the lease
//!   may have lapsed (last renewal + ttl − margin has passed) it renews
//!   first, and writes nothing when the run is no longer held.
//! - **reaper**: once this manager's own heartbeats have succeeded for a
//!   full ttl (so a database outage does not end with every healthy run
//!   reaped), each period it lists the expired leases and takes each
//!   orphan over — one conditional transition, so exactly one manager
//!   wins — then stops the dead run's recorded agent processes on this
//!   host and, in one transaction, writes the revision's report row (unless
//!   the dead run wrote one) and the settlement: `cancelled` when a cancel
//!   was pending, else `failed` / `owner_lost`.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Instant;

use korvus_runner::ExitReason;
use korvus_store::{NewReport, Session, SessionId, SessionStatus, Settlement, StoreError};
use tracing::{debug, error, info, warn};

use crate::manager::Inner;

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
    /// Sessions taken over whose settlement has not been written yet.
    unsettled: HashMap<SessionId, Session>,
}

/// One period; `false` once the manager is gone, or stopped with no run left.
async fn beat(weak: &Weak<Inner>, reaper: &mut Reaper) -> bool {
    let Some(inner) = weak.upgrade() else {
        return false;
    };
    let stopping = inner.shutting_down.load(Ordering::Acquire);
    if stopping && inner.runs.len() == 0 {
        return false;
    }
    match inner.renew().await {
        Ok((sent, held)) => {
            let since = *reaper.healthy_since.get_or_insert(sent);
            inner.cancel_taken_over(sent, &held).await;
            if !stopping && since.elapsed() >= inner.config.lease_ttl {
                inner.reap(&mut reaper.unsettled).await;
            }
        }
        Err(e) => {
            reaper.healthy_since = None;
            warn!(error = %e, "lease not renewed; trying again");
        }
    }
    true
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
        let held = self.store.heartbeat(self.lease(), &runs).await?;
        let mut renewed = self.renewed.lock().unwrap_or_else(|p| p.into_inner());
        *renewed = (*renewed).max(sent);
        Ok((sent, held))
    }

    /// Whether the run of `session` at `fence` may still write: at once
    /// while the last renewal is recent enough by this process's clock
    /// (ttl less a fifth as margin), else after a renewal that names it.
    pub(crate) async fn lease_holds(&self, session: SessionId, fence: u64) -> bool {
        let ttl = self.config.lease_ttl;
        let renewed = *self.renewed.lock().unwrap_or_else(|p| p.into_inner());
        if renewed.elapsed() < ttl - ttl / 5 {
            return true;
        }
        match self.renew().await {
            Ok((_, held)) => {
                let holds = held.contains(&(session, fence));
                if !holds {
                    warn!(session_id = %session, fence, "the lease lapsed and the session was taken over: this run writes nothing more");
                }
                holds
            }
            Err(e) => {
                warn!(session_id = %session, error = %e, "the lease may have lapsed and cannot be renewed: this run writes nothing more");
                false
            }
        }
    }

    /// Cancels the local runs a renewal sent at `sent` did not name and
    /// whose row moved on to another fence (taken over, or continued
    /// elsewhere after a forced cancel). Runs registered after `sent`, and
    /// runs whose own row merely settled, are left alone.
    async fn cancel_taken_over(&self, sent: Instant, held: &[(SessionId, u64)]) {
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

    /// Takes over the orphans the store lists and settles them; retries
    /// the settlements still owed from earlier periods.
    async fn reap(&self, unsettled: &mut HashMap<SessionId, Session>) {
        if let Err(e) = self.take_over_orphans(unsettled).await {
            warn!(error = %e, "expired leases not listed");
        }
        let owed: Vec<Session> = unsettled.values().cloned().collect();
        for row in owed {
            match self.settle_taken_over(&row, false).await {
                Err(e) if e.is_transient() => {
                    warn!(session_id = %row.id, error = %e, "orphan not settled; trying again");
                }
                Err(e) => {
                    error!(session_id = %row.id, error = %e, "orphan settlement refused");
                    unsettled.remove(&row.id);
                }
                Ok(_) => {
                    unsettled.remove(&row.id);
                }
            }
        }
    }

    /// Stops the agent process groups that dead runs of `session` recorded
    /// under this manager's scratch root (on this host) and that still run.
    /// Called only when no run of the session is live here.
    pub(crate) async fn stop_dead_agents(&self, session: SessionId) {
        let Some(root) = &self.scratch else {
            return;
        };
        let dir = root.join(session.to_string());
        let stopped =
            tokio::task::spawn_blocking(move || korvus_workspace::stop_recorded_agents(&dir))
                .await
                .unwrap_or_default();
        if !stopped.is_empty() {
            warn!(session_id = %session, groups = ?stopped, "stopped the agent processes a dead run left running");
        }
    }

    /// Ends a run this manager took over: stops the dead run's recorded
    /// agent processes on this host, then writes the report row (unless
    /// the dead run wrote its own) and the settlement in one transaction —
    /// `cancelled` when `cancel` is set or a cancel was pending, else
    /// `failed` / `owner_lost`.
    pub(crate) async fn settle_taken_over(
        &self,
        row: &Session,
        cancel: bool,
    ) -> Result<Session, StoreError> {
        self.stop_dead_agents(row.id).await;
        let (status, reason) = if cancel || row.cancel_requested {
            (SessionStatus::Cancelled, ExitReason::CANCELLED)
        } else {
            (SessionStatus::Failed, ExitReason::OWNER_LOST)
        };
        let settlement = Settlement {
            status,
            exit_reason: Some(reason.to_string()),
            counters: row.counters,
            fence: row.fence,
        };
        let report = NewReport {
            session_id: row.id,
            incident_id: row.incident_id,
            revision: row.revision,
            markdown_key: None,
            manifest_key: None,
            markdown_bytes: 0,
            exit_reason: reason.to_string(),
            counters: row.counters,
            detail: Some(format!(
                "the manager running this revision stopped renewing its lease; \
                 manager {} took the session over",
                self.owner
            )),
            fence: row.fence,
        };
        let (settled, report) = self
            .store
            .settle_with_report(row.id, settlement, report)
            .await?;
        info!(session_id = %row.id, %status, report_exit_reason = %report.exit_reason, "taken-over session settled");
        Ok(settled)
    }
}
