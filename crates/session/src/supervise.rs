//! The one place background work starts ([`Manager::launch`]) and the
//! supervisor that ends every run with exactly one settle.
//!
//! # Ordering
//!
//! One iteration is prepare → execute → land → clean-up (`iterate`); then
//! the supervisor writes the terminal status (detached, bounded,
//! panic-guarded), deregisters the run, fires its settle signal and
//! releases the run group — in that order, so a released watcher reads the
//! terminal row and `wait` never returns mid-write.

use std::sync::Arc;
use std::time::Duration;

use korvus_log::LogHandle;
use korvus_runner::{ExitReason, RunContext, Tools};
use korvus_store::{Artifact, Counters, Incident, Session, SessionId, SessionStatus, Settlement};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, info_span, warn, Instrument};

use crate::cleanup::cleanup;
use crate::execute::execute;
use crate::land::land;
use crate::live::{LiveRun, RunGuard};
use crate::manager::{Inner, Manager};
use crate::notify_log::notifying;
use crate::prepare::{pin_docs, Prepared};

/// What the second iteration of a reopened session needs, read before the
/// store's transition.
#[derive(Debug)]
pub(crate) struct Resume {
    pub(crate) message: String,
    pub(crate) own: Vec<Artifact>,
}

/// Everything one iteration needs.
pub(crate) struct Plan {
    pub(crate) session: Session,
    pub(crate) incident: Incident,
    pub(crate) inherited: Vec<(Artifact, String)>,
    pub(crate) revision: u32,
    pub(crate) resume: Option<Resume>,
}

/// A `failed` settlement with `reason` and no usage.
pub(crate) fn failed(reason: ExitReason) -> Settlement {
    Settlement {
        status: SessionStatus::Failed,
        exit_reason: Some(reason.into()),
        counters: Counters::default(),
    }
}

impl Manager {
    /// The one place background work starts. Registers the run in the
    /// live-run table (its cancellation is that entry, never the caller's
    /// request), then spawns the supervisor.
    pub(crate) fn launch(&self, plan: Plan, log: LogHandle, guard: RunGuard) {
        let inner = Arc::clone(&self.inner);
        let id = plan.session.id;
        let run = match inner.live.register(id, plan.session.incident_id) {
            Ok(run) => run,
            Err((e, run)) => {
                // Not reachable through the manager's own calls (a reopen
                // waits for the previous run to deregister); the run still
                // goes on and settles, only `cancel` cannot reach it.
                warn!(session_id = %id, error = %e, "session already registered");
                run
            }
        };
        // Re-check after registering: `stop` sets the flag before cancelling
        // every entry, so either it saw this entry or this sees the flag.
        if inner
            .shutting_down
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            run.cancel.cancel();
        }
        let span = info_span!("run", session_id = %id, incident_id = %plan.session.incident_id, revision = plan.revision);
        // Owned by the run group: `wait`/`stop` join it through `guard`.
        tokio::spawn(supervise(inner, plan, log, run, guard).instrument(span));
    }
}

/// The supervisor of one run: everything after it returns happens here, in
/// the order the module docs give.
async fn supervise(inner: Arc<Inner>, plan: Plan, log: LogHandle, run: LiveRun, guard: RunGuard) {
    let id = plan.session.id;
    let work = tokio::spawn(iterate(Arc::clone(&inner), plan, log, run.clone()).in_current_span());
    let settlement = match work.await {
        Ok(settlement) => settlement,
        Err(join) => {
            error!(error = %join, "run panicked outside the runner; settling failed");
            failed(ExitReason::PANICKED)
        }
    };
    // 1. The terminal write (detached, bounded, panic-guarded).
    inner.settle(id, settlement).await;
    // 2. Deregister.
    inner.live.unregister(id, &run);
    // 3. Fire the settle signal: a watcher released now reads the final row.
    run.signal_settled();
    // 4. Release the run group.
    drop(guard);
}

/// One iteration: prepare, execute, land, clean up. Returns the settlement
/// for the supervisor to write.
async fn iterate(inner: Arc<Inner>, plan: Plan, log: LogHandle, run: LiveRun) -> Settlement {
    let token = run.cancel.clone();
    let log = match notifying(&inner.writers, log, Arc::clone(&run.appended)) {
        Ok(log) => Arc::new(log),
        Err(e) => {
            error!(error = %e, "turn log not usable");
            return failed(ExitReason::TURN_LOG_FAILED);
        }
    };
    // Preparing and pinning docs obey the run's cancellation; a run
    // cancelled while preparing still lands and cleans up like any other.
    let prepared = match inner.prepare(&plan, &token).await {
        Ok(p) => p,
        Err(e) => {
            error!(error = %e, "workspace not prepared");
            let _ = log.close().await;
            return failed(ExitReason::WORKSPACE_FAILED);
        }
    };
    let lease = pin_docs(&inner, &plan, &token).await;
    let ctx = context(
        &plan,
        &prepared,
        &log,
        &token,
        lease.as_ref().map(|l| &l.client),
    );
    let resume = plan.resume.as_ref().map(|r| r.message.clone());
    let result = execute(&inner, ctx, resume, &token).await;
    let settlement = land(&inner, &plan, &prepared, &log, result).await;
    cleanup(&inner, &plan, lease, prepared.dir, log).await;
    settlement
}

/// What the runner gets for this iteration.
fn context(
    plan: &Plan,
    prepared: &Prepared,
    log: &Arc<LogHandle>,
    token: &CancellationToken,
    docs: Option<&Arc<dyn korvus_runner::DocsClient>>,
) -> RunContext {
    RunContext {
        session: plan.session.clone(),
        incident: plan.incident.clone(),
        inherited: prepared.inherited.clone(),
        workspace_ref: plan.session.workspace_ref.clone(),
        scratch: prepared.dir.as_ref().map(|d| d.path().to_path_buf()),
        tools: Tools {
            docs: docs.cloned(),
        },
        skills: prepared.skills.clone(),
        log: Arc::clone(log),
        revision: plan.revision,
        cancel: token.child_token(),
    }
}

impl Inner {
    /// Writes the session's outcome: the last write of every path. Runs on
    /// its own tasks (detached from any cancellation), retries with backoff,
    /// and gives up — loudly — after the settle timeout.
    pub(crate) async fn settle(&self, id: SessionId, settlement: Settlement) -> bool {
        let bound = self.config.settle_timeout;
        let deadline = tokio::time::Instant::now() + bound;
        let mut delay = Duration::from_millis(25);
        loop {
            let store = Arc::clone(&self.store);
            let s = settlement.clone();
            let attempt = tokio::spawn(async move { store.settle_session(id, s).await });
            let abort = attempt.abort_handle();
            match tokio::time::timeout_at(deadline, attempt).await {
                Ok(Ok(Ok(row))) => {
                    info!(status = %row.status, exit_reason = ?row.exit_reason, "session settled");
                    return true;
                }
                Ok(Ok(Err(e))) => warn!(error = %e, "settle failed; retrying"),
                Ok(Err(join)) => warn!(error = %join, "settle panicked; retrying"),
                Err(_) => {
                    abort.abort();
                    error!(session_id = %id, "settle gave up after {bound:?}; the row may stay running");
                    return false;
                }
            }
            if tokio::time::Instant::now() + delay >= deadline {
                error!(session_id = %id, "settle gave up after {bound:?}; the row may stay running");
                return false;
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(1));
        }
    }
}
