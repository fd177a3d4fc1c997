//! Running the runner: inside the run's own task (a run is one task), under
//! the run's cancellation, the cancel grace and the run timeout, its panics
//! caught; and how its result maps to a status.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use crate::ending::Ending;
use futures::FutureExt;
use korvus_runner::{RunContext, RunError, RunOutcome};
use tracing::{error, warn};

use crate::run::Run;

/// How a run ended, before the manager's own rules are applied.
#[derive(Debug)]
pub(crate) enum RunResult {
    /// The runner returned.
    Returned(RunOutcome),
    /// The runner returned an error.
    Failed(RunError),
    /// The run was cancelled; the runner's outcome if it returned in time.
    Cancelled(Option<RunOutcome>),
    /// The manager cancelled the run because its lease may have lapsed;
    /// the runner's outcome if it returned in time.
    LeaseLost(Option<RunOutcome>),
    /// The run exceeded the run timeout.
    TimedOut,
    /// The runner panicked (its message is logged, never stored: it may
    /// hold what the runner's code had at hand).
    Panicked,
}

impl RunResult {
    /// How this run ended ([`Ending`]; its table gives the status and
    /// exit reason, before the report's part of `land`).
    pub(crate) fn ending(&self) -> Ending {
        match self {
            RunResult::Failed(e) => Ending::RunnerFailed(e.exit_reason.clone()),
            RunResult::Panicked => Ending::Panicked,
            RunResult::TimedOut => Ending::TimedOut,
            RunResult::Cancelled(_) => Ending::Cancelled,
            RunResult::LeaseLost(_) => Ending::LeaseLost,
            RunResult::Returned(o) => Ending::Returned(o.exit_reason.clone()),
        }
    }

    /// Why the run ended without its runner's say (the report's detail:
    /// the session's cause): the runner's error, a panic, the run timeout
    /// of `timeout`, a lapsed lease. `None` for a return and a cancel,
    /// which say it themselves.
    pub(crate) fn why(&self, timeout: std::time::Duration) -> Option<String> {
        match self {
            RunResult::Failed(e) => Some(match &e.source {
                Some(source) => format!("{}: {source}", e.message),
                None => e.message.clone(),
            }),
            RunResult::Panicked => {
                Some("the runner panicked (its message is in the korvus process's log)".into())
            }
            RunResult::TimedOut => Some(format!(
                "the run exceeded its run timeout ({:.1} s)",
                timeout.as_secs_f64()
            )),
            RunResult::LeaseLost(_) => Some(
                "this manager stopped the run: it could not renew its lease, so another \
                 manager may take the session over"
                    .into(),
            ),
            RunResult::Returned(_) | RunResult::Cancelled(_) => None,
        }
    }

    /// Whether korvus must say in the turn log why the run ended: a
    /// runner that failed said it itself (its error is its last word), a
    /// panic, a timeout and a lapsed lease cannot.
    pub(crate) fn unsaid(&self) -> bool {
        matches!(
            self,
            RunResult::Panicked | RunResult::TimedOut | RunResult::LeaseLost(_)
        )
    }

    /// The runner's outcome, when it returned one.
    pub(crate) fn outcome(&self) -> Option<&RunOutcome> {
        match self {
            RunResult::Returned(o)
            | RunResult::Cancelled(Some(o))
            | RunResult::LeaseLost(Some(o)) => Some(o),
            _ => None,
        }
    }

    /// A runner's result after the run was cancelled.
    fn cancelled(r: std::thread::Result<Result<RunOutcome, RunError>>) -> Self {
        match r {
            Ok(Ok(o)) => RunResult::Cancelled(Some(o)),
            Ok(Err(_)) => RunResult::Cancelled(None),
            Err(panic) => RunResult::joined(Err(panic)),
        }
    }

    fn joined(r: std::thread::Result<Result<RunOutcome, RunError>>) -> Self {
        match r {
            Ok(Ok(o)) => RunResult::Returned(o),
            Ok(Err(e)) => {
                warn!(error = %e, "runner failed");
                RunResult::Failed(e)
            }
            Err(payload) => {
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| payload.downcast_ref::<String>().cloned());
                error!(
                    message = message.as_deref().unwrap_or(""),
                    "runner panicked"
                );
                RunResult::Panicked
            }
        }
    }
}

impl Run<'_> {
    /// Runs the runner, polled by the calling (the run's) task with its panics
    /// caught. When `token` fires, the runner's own token fires too and it gets
    /// the cancel grace to return; on the run timeout likewise. A runner that
    /// does not return in time is dropped (its future, and what it owns, goes
    /// away at once; a runner blocking its thread blocks this task, as it
    /// would block any).
    pub(crate) async fn execute(&self, ctx: Box<RunContext>, resume: Option<String>) -> RunResult {
        let (inner, token) = (self.inner, &self.token);
        if token.is_cancelled() {
            return RunResult::Cancelled(None);
        }
        let runner = &inner.runner;
        let run_token = ctx.cancel.clone();
        // Built in place and the context boxed: a parked run's task holds
        // this future for as long as the agent runs, and a value moved from
        // one local (or argument) of an async fn into another takes room in
        // both.
        //
        // The context leaves its box in the call (`unbox`), so the box is
        // freed before the runner is awaited, not after it returns.
        let mut work = std::pin::pin!(AssertUnwindSafe(async move {
            match resume {
                Some(message) => runner.resume(crate::run::unbox(ctx), message).await,
                None => runner.run(crate::run::unbox(ctx)).await,
            }
        })
        .catch_unwind());
        let (run_timeout, grace) = (inner.config.run_timeout, inner.config.cancel_grace);
        // Pinned in place and selected by reference, like `work`: moved into
        // the select it would take its room twice.
        let timeout = std::pin::pin!(async {
            if run_timeout.is_zero() {
                std::future::pending::<()>().await
            } else {
                tokio::time::sleep(run_timeout).await
            }
        });
        // Biased, cancellation first: a runner that returns because its token
        // fired is ready at the same time as the cancellation, and a run the
        // manager cancelled settles `cancelled` every time.
        tokio::select! {
            biased;
            _ = token.cancelled() => {
                run_token.cancel();
                match within(grace, &mut work).await {
                    Some(r) => RunResult::cancelled(r),
                    None => {
                        warn!("runner ignored cancellation past the grace period; dropped");
                        RunResult::Cancelled(None)
                    }
                }
            }
            // The runner is polled here, so the run's cancellation can fire
            // inside that very poll (its log refused an append as superseded)
            // and the runner return at once: still a cancelled run.
            r = &mut work => if token.is_cancelled() {
                RunResult::cancelled(r)
            } else {
                RunResult::joined(r)
            },
            _ = timeout => {
                warn!(timeout = ?run_timeout, "run timed out");
                run_token.cancel();
                if within(grace, &mut work).await.is_none() {
                    warn!("runner ignored the timeout past the grace period; dropped");
                }
                RunResult::TimedOut
            }
        }
    }
}

/// `work`'s output if it is ready within `grace`.
async fn within<F: Future + Unpin>(grace: std::time::Duration, work: F) -> Option<F::Output> {
    tokio::time::timeout(grace, work).await.ok()
}
