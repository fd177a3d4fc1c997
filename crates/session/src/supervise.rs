//! The one place background work starts ([`Manager::launch`]) and the
//! supervisor that ends every run with exactly one settle.
//!
//! # Ordering
//!
//! This is the one place the order of a run is written; the crate docs,
//! `docs/architecture.md` and the other modules refer here.
//!
//! 1. One iteration, in the supervisor's own task (a panic in any phase is
//!    caught there): prepare → the start recorded (`mark_started`; a
//!    first run whose start cannot be recorded, or that the manager's
//!    `stop` cancelled before it started, calls no runner, gives its
//!    claim back to the queue and skips step 2) → execute (the runner alone on a task
//!    of its own) → land (persist: bytes first, rows second; archive;
//!    report row) → log closed (`iterate`).
//! 2. The terminal write (`write.rs`: detached, bounded, retried on
//!    transient errors, panic-guarded).
//! 3. Clean-up (docs release, scratch removal; bounded, on its own task).
//! 4. Deregistration from the live-run table.
//! 5. The settle signal.
//! 6. The run slot's release (the admission loop may claim the next
//!    queued session), then the run group's.
//!
//! In that order, so a released watcher reads the terminal row, a reopen
//! never finds the old scratch dir, and `wait` never returns mid-write.
//! Every path, a panic outside the runner included, writes one report row
//! for the revision before the terminal status.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures::FutureExt;

use korvus_log::LogHandle;
use korvus_runner::{ExitReason, RunContext, Tools};
use korvus_store::Settlement;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, info_span, warn, Instrument};

use crate::cleanup::{cleanup, Leftovers};
use crate::execute::RunResult;
use crate::handoff::HandOff;
use crate::inner::Inner;
use crate::live::{LiveRun, RunGuard, Slot};
use crate::manager::Manager;
use crate::notify_log::notifying;
use crate::prepare::Prepared;
use crate::run::{Plan, Run};
use crate::write::{Settled, Write};

impl Manager {
    /// The one place background work starts. Registers the run in the
    /// live-run table (its cancellation is that entry, never the caller's
    /// request), then spawns the supervisor.
    pub(crate) fn launch(&self, plan: Plan, log: LogHandle, guard: RunGuard, slot: Slot) {
        let inner = Arc::clone(&self.inner);
        let id = plan.key().session;
        let run = match inner
            .live
            .register(id, plan.key().incident, plan.key().fence)
        {
            Ok(run) => run,
            Err(refused) => {
                let (e, run) = *refused;
                // Not reachable through the manager's own calls (a reopen
                // waits for the previous run to deregister); the run still
                // goes on and settles, only `cancel` cannot reach it.
                warn!(session_id = %id, error = %e, "session already registered");
                run
            }
        };
        // Re-check after registering: `stop` sets the flag before cancelling
        // every entry, so either it saw this entry or this sees the flag.
        if inner.is_shutting_down() {
            run.by_stop.store(true, Ordering::Release);
            run.handoff
                .store(inner.draining.load(Ordering::SeqCst), Ordering::Release);
            run.cancel.cancel();
        }
        // A root span: the run outlives the call that launched it (whose
        // span it follows from), and is one trace in a subscriber.
        let key = plan.key();
        let span = info_span!(
            parent: None,
            "run",
            session_id = %id,
            incident_id = %key.incident,
            revision = key.revision,
            fence = key.fence
        );
        span.follows_from(tracing::Span::current());
        let gauge = crate::metrics::run_started();
        // Owned by the run group: `wait`/`stop` join it through `guard`.
        let input = Box::new(RunInput {
            plan: Box::new(plan),
            log,
        });
        tokio::spawn(supervise(inner, input, run, (guard, slot, gauge)).instrument(span));
    }
}

/// What one run starts from, boxed: the arguments of an `async fn` stay
/// in its future for as long as it runs, beside wherever they are moved
/// next, so the plan (over 500 bytes) and the log handle passed by value
/// through `supervise` into `iterate` would be kept three times in every
/// parked run's task. The plan stays boxed inside until the runner's
/// context takes it: a local that lives across two awaits keeps its room
/// in the future for as long as the future runs.
struct RunInput {
    plan: Box<Plan>,
    log: LogHandle,
}

/// The supervisor of one run: everything after it returns happens here, in
/// the order the module docs give.
///
/// Every phase but the one a parked run waits in is boxed: a future's
/// state machine is as large as its largest phase, and ten thousand
/// parked runs would otherwise each reserve room for landing and clean-up
/// they are not doing yet.
async fn supervise(
    inner: Arc<Inner>,
    input: Box<RunInput>,
    run: LiveRun,
    (guard, slot, gauge): (RunGuard, Slot, crate::metrics::RunGauge),
) {
    let revision = input.plan.key();
    let id = revision.session;
    // In this task, not one of its own: a panic in any phase is caught
    // here and the row still settles. The runner is polled in this task
    // too (a run is one task): a runner must not block its thread — one
    // that does holds its run, its timeout and `stop` (see the Runner
    // contract).
    //
    // Awaited where it is built: a future held in a local and then
    // awaited takes its room in the task twice.
    let (settlement, leftovers) = match AssertUnwindSafe(iterate(&inner, input, &run))
        .catch_unwind()
        .await
    {
        Ok(done) => done,
        Err(panic) => {
            let panic = panic_text(panic.as_ref());
            error!(%panic, "run panicked outside the runner; settling failed");
            // The revision still gets its report row (unless landing wrote it
            // before the panic); the scratch dir is left for `reap`.
            (
                Some(Box::pin(inner.fail_early(revision, ExitReason::PANICKED)).await),
                Leftovers::default(),
            )
        }
    };
    // 1. The terminal write (detached, bounded, panic-guarded) — none for
    // a run that never started: its session is queued again (or left
    // claimed for a reaper to give back), and the run that starts it
    // settles it.
    let settled = match settlement {
        Some(settlement) => {
            crate::metrics::phase("settle", Box::pin(inner.settle(id, settlement)))
                .instrument(info_span!("settle"))
                .await
        }
        None => Settled::FencedOff,
    };
    if settled == Settled::Written {
        if let Some(at) = run.cancelled_at.get() {
            crate::metrics::cancel_took(at.elapsed());
        }
    }
    // 2. Clean-up (docs release, scratch removal), bounded. A run whose
    // output or outcome is not written keeps its scratch dir, marked kept:
    // no removal takes it until its output is stored (a takeover's salvage
    // does that for a row left running).
    let mut leftovers = leftovers;
    if settled == Settled::NotWritten {
        inner.live.mark_unsettled(id, run.fence);
        // The session ends through a takeover, which salvages this dir.
        leftovers
            .keep
            .get_or_insert_with(|| "the outcome was not written".into());
    }
    crate::metrics::phase("cleanup", Box::pin(cleanup(&inner, leftovers)))
        .instrument(info_span!("cleanup"))
        .await;
    // 3. Deregister.
    inner.live.unregister(id, &run);
    drop(gauge);
    // 4. Fire the settle signal: a watcher released now reads the final row.
    run.signal_settled();
    // 5. Release the run slot (the admission loop may claim the next
    // queued session) and the run group.
    drop(slot);
    drop(guard);
}

/// One iteration: prepare, record the start, execute, land, close the
/// log. Returns the settlement for the supervisor to write — `None` when
/// the run never started and its claim went back to the queue — and what
/// is left to clean up after it.
async fn iterate(
    inner: &Arc<Inner>,
    input: Box<RunInput>,
    live: &LiveRun,
) -> (Option<Settlement>, Leftovers) {
    // Taken out of its box at once, so the box is freed now rather than
    // when `iterate` returns (a box moved out of stays allocated until it
    // goes out of scope).
    let RunInput { mut plan, log } = crate::run::unbox(input);
    let run = Run::new(inner, live, plan.key(), Arc::new(notifying(log, live)));
    let mut prepared = match Box::pin(run.prepare(&plan)).await {
        Ok(p) => p,
        Err(settlement) => return (Some(settlement), Leftovers::default()),
    };
    let lease = Box::pin(run.pin_docs(&plan)).await;
    let (resume, resumed) = crate::run::Resume::split(plan.resume.take());
    // A resumed attempt of revision 1 has started before: never queued again.
    let never_started = plan.session().started_at.is_none();
    // The plan goes into the context: from here on the run needs its key.
    let ctx = context(
        crate::run::unbox(plan),
        &mut prepared,
        (&run.log, &run.token),
        lease.as_ref().map(|l| &l.client),
        crate::checkpoints::enabled(inner),
        resumed,
    );
    // Only a first run goes back to the queue: a continued revision's
    // message lives in this run alone (a claim of it would run it afresh).
    let first_run = run.key.revision == 1 && never_started;
    // Only a stop: a run a caller (or a cancel request) cancelled first
    // ends `cancelled` as asked.
    if first_run && run.token.is_cancelled() && live.by_stop.load(Ordering::Acquire) {
        info!("the manager stops before the run started: the session goes back to the queue");
        let leftovers = Leftovers::removing(lease, prepared.dir);
        Box::pin(run.go_back(leftovers)).await;
        return (None, Leftovers::default());
    }
    // The run starts: recorded before the runner is called, so a manager
    // that dies before this point leaves a claim (given back to the
    // queue), never an orphan whose agent may have run.
    // Awaited where it is built: a future held in a local and then awaited
    // takes its room in the task twice.
    let execute = |ctx| async {
        match crate::metrics::phase("execute", run.execute(ctx, resume))
            .instrument(info_span!("execute"))
            .await
        {
            // Stopped by this manager for a lapsed lease, not by a caller.
            RunResult::Cancelled(o) if live.lease_lost.load(Ordering::Acquire) => {
                RunResult::LeaseLost(o)
            }
            result => result,
        }
    };
    // One call site of the runner, below: the await a parked run waits in.
    let refused = match Box::pin(inner.mark_started(run.key)).await {
        Write::Done => None,
        Write::Refused(e) => {
            // Taken over, force-cancelled or ended meanwhile: the runner
            // is not called, and the writes that follow are refused.
            warn!(error = %e, "the run's start was refused: the session moved on; the runner is not called");
            Some(RunResult::LeaseLost(None))
        }
        Write::GaveUp if first_run => {
            error!("the run's start could not be recorded; the runner is not called and the session goes back to the queue");
            let leftovers = Leftovers::removing(lease, prepared.dir);
            if Box::pin(run.go_back(leftovers)).await {
                return (None, Leftovers::default());
            }
            // Its start committed after all and no runner ran: ended now
            // rather than left for a reaper to call `owner_lost`.
            let settlement = Box::pin(inner.fail_early(run.key, ExitReason::RUNNER_FAILED)).await;
            return (Some(settlement), Leftovers::default());
        }
        Write::GaveUp => {
            // Safe to run: a reaper never gives a continued revision
            // back, it settles it `owner_lost` should this manager die.
            warn!("the run's start could not be recorded; a continued revision runs all the same");
            None
        }
    };
    let result = match refused {
        Some(result) => result,
        None => {
            run.starting(&prepared, &ctx.checkpoint).await;
            execute(ctx).await
        }
    };
    // The checkpointer, once a checkpoint in flight finished: the landing
    // stores only what changed since the last one.
    let checkpointer = Box::pin(crate::checkpoints::take(inner, live)).await;
    // Handed off (`Manager::drain`): stored as a checkpoint and sent back
    // to the pool to be resumed — no landing, no terminal write.
    let checkpointer = match Box::pin(run.hand_off(&result, &mut prepared, checkpointer)).await {
        HandOff::Done => return (None, Leftovers::removing(lease, None)),
        HandOff::Land(checkpointer) => checkpointer,
    };
    let landed = Box::pin(run.land(&prepared, result, checkpointer));
    let landed = crate::metrics::phase("land", landed)
        .instrument(info_span!("land"))
        .await;
    // A watcher or a reopen must see the whole log once the row is terminal.
    Box::pin(run.close_log()).await;
    let leftovers = Leftovers {
        lease,
        dir: prepared.dir,
        keep: landed.keep,
    };
    (Some(landed.settlement), leftovers)
}

/// The prepare phase, timed and in its span. Preparing (and pinning docs)
/// obey the run's cancellation; a run cancelled while preparing still
/// lands and cleans up like any other. A workspace that cannot be
/// prepared ends the run `workspace_failed`: the log closed, the report
/// row and settlement written, which is returned.
impl Run<'_> {
    async fn prepare(&self, plan: &Plan) -> Result<Prepared, Settlement> {
        let inner = self.inner;
        let prepared = crate::metrics::phase("prepare", Box::pin(inner.prepare(plan, &self.token)))
            .instrument(info_span!("prepare"))
            .await;
        match prepared {
            Ok(p) => Ok(p),
            Err(e) => {
                error!(error = %e, "workspace not prepared");
                Box::pin(self.close_log()).await;
                Err(Box::pin(inner.fail_early(self.key, ExitReason::WORKSPACE_FAILED)).await)
            }
        }
    }

    /// Ends a first run that never started by giving its session back to the
    /// queue: its log closed and its scratch dir removed first, so the run
    /// that claims it next (perhaps here, at once) finds neither held.
    /// `false` when the store says the run started after all.
    async fn go_back(&self, leftovers: Leftovers) -> bool {
        Box::pin(self.close_log()).await;
        Box::pin(cleanup(self.inner, leftovers)).await;
        Box::pin(self.inner.give_back(self.key)).await
    }

    /// Closes the run's turn log (flushing it), bounded by the clean-up bound:
    /// a log backend that hangs must not hold the terminal write for ever.
    pub(crate) async fn close_log(&self) {
        let (inner, log) = (self.inner, &self.log);
        match tokio::time::timeout(inner.config.cleanup_timeout, log.close()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(error = %e, "turn log close failed"),
            Err(_) => error!(
                bound = ?inner.config.cleanup_timeout,
                "turn log close did not finish in time; going on"
            ),
        }
    }
}

/// What the runner gets for this iteration. It takes the plan's session
/// row and incident and the prepared inherited files and skills (landing
/// needs none of them), so a parked run holds them once. Its checkpoint
/// hook is live only when the run is `checkpointed` and has a scratch dir
/// (an inert one allocates nothing).
fn context(
    plan: Plan,
    prepared: &mut Prepared,
    (log, token): (&Arc<LogHandle>, &CancellationToken),
    docs: Option<&Arc<dyn korvus_runner::DocsClient>>,
    checkpointed: bool,
    resumed: Option<korvus_runner::Resumed>,
) -> Box<RunContext> {
    let revision = plan.key().revision;
    let (session, incident) = plan.into_parts();
    Box::new(RunContext {
        workspace_ref: session.workspace_ref.clone(),
        session,
        incident,
        inherited: std::mem::take(&mut prepared.inherited),
        scratch: prepared.dir.as_ref().map(|d| d.path().to_path_buf()),
        tools: Tools {
            docs: docs.cloned(),
        },
        skills: std::mem::take(&mut prepared.skills),
        log: Arc::clone(log),
        revision,
        report_template: prepared.report_template.clone(),
        cancel: token.child_token(),
        checkpoint: if checkpointed && prepared.dir.is_some() {
            korvus_runner::CheckpointHook::new()
        } else {
            korvus_runner::CheckpointHook::default()
        },
        resumed,
    })
}

/// The message of a caught panic, when it has one.
fn panic_text(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// What a run does as its agent starts: from here the dir holds what the
/// agent makes — kept until the landing says it is stored, so a process
/// that dies meanwhile leaves it for a salvage, never for a removal — and
/// the run is checkpointed (`checkpoints.rs`).
impl Run<'_> {
    async fn starting(&self, prepared: &Prepared, hook: &korvus_runner::CheckpointHook) {
        mark_running(self.inner, prepared).await;
        crate::checkpoints::attach(self.inner, self.live, self.key, prepared, hook);
    }
}

/// Marks the run's scratch dir kept while the agent runs
/// (`korvus_workspace::mark_running`); a mark that cannot be written is
/// logged, and the run goes on. Without a blob store nothing of the dir
/// is ever stored, so there is nothing to keep it for: no mark.
async fn mark_running(inner: &Inner, prepared: &Prepared) {
    let Some(path) = prepared.dir.as_ref().map(|d| d.path().to_path_buf()) else {
        return;
    };
    if inner.blobs.is_none() {
        return;
    }
    let marked = tokio::task::spawn_blocking(move || korvus_workspace::mark_running(&path)).await;
    if !matches!(marked, Ok(Ok(()))) {
        warn!(?marked, "the running scratch dir could not be marked kept");
    }
}
