//! The [`Runner`] trait and what a run returns.

use std::fmt::Debug;

use async_trait::async_trait;
use korvus_store::Counters;

use crate::{ExitReason, RunContext};

/// What a run reports when it returns.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunOutcome {
    /// Why it ended (see [`exit`](crate::exit)); [`ExitReason::AWAITING_USER`]
    /// keeps the row running.
    pub exit_reason: ExitReason,
    /// Whether the author phase (writing `report.md`) finished.
    pub author_finished: bool,
    /// Usage.
    pub counters: Counters,
}

impl RunOutcome {
    /// A completed run whose author phase finished.
    pub fn completed(counters: Counters) -> Self {
        Self {
            exit_reason: ExitReason::COMPLETED,
            author_finished: true,
            counters,
        }
    }

    /// A run that ended with `exit_reason` and whose author phase finished
    /// (see [`with_author_finished`](Self::with_author_finished)).
    pub fn new(exit_reason: impl Into<ExitReason>, counters: Counters) -> Self {
        Self {
            exit_reason: exit_reason.into(),
            author_finished: true,
            counters,
        }
    }

    /// The same outcome, saying whether its author phase (writing
    /// `report.md`) finished; when it did not, no `report.md` is adopted as
    /// the revision's report.
    #[must_use]
    pub fn with_author_finished(mut self, finished: bool) -> Self {
        self.author_finished = finished;
        self
    }
}

/// A runner failed; the session settles `failed` with
/// [`exit_reason`](RunError::exit_reason), or `runner_failed` without one.
#[derive(Debug, thiserror::Error)]
#[error("runner failed: {message}")]
#[non_exhaustive]
pub struct RunError {
    /// What went wrong.
    pub message: String,
    /// The cause, if any.
    #[source]
    pub source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    /// The exit reason the session settles with (e.g. `exit_code_3`);
    /// `None` means [`ExitReason::RUNNER_FAILED`].
    pub exit_reason: Option<ExitReason>,
    /// What the run used before it failed, as far as the runner knows.
    /// The session layer keeps the larger of these and what the run's
    /// turn log holds (its turns, tool calls and usage events), so a
    /// failed run is never counted as having used nothing.
    pub counters: Counters,
}

impl RunError {
    /// An error with a message only.
    pub fn msg(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            source: None,
            exit_reason: None,
            counters: Counters::default(),
        }
    }

    /// Sets what the run used before it failed.
    pub fn with_counters(mut self, counters: Counters) -> Self {
        self.counters = counters;
        self
    }

    /// Adds the cause.
    pub fn with_source(
        mut self,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        self.source = Some(source.into());
        self
    }

    /// Sets the exit reason the session settles with. Text that is not a
    /// valid [`ExitReason`] becomes [`ExitReason::INVALID`] (the original
    /// is noted in the turn log).
    pub fn with_exit_reason(mut self, reason: impl Into<ExitReason>) -> Self {
        self.exit_reason = Some(reason.into());
        self
    }
}

/// Does the work of a session: one investigation, or one more iteration of
/// a finished session.
///
/// A runner should return soon after `ctx.cancel` fires; the manager waits a
/// short grace period and then drops the run. Panics are caught by the
/// manager and settled `failed` / `panicked`.
///
/// A runner must not block its thread (run blocking work with
/// `tokio::task::spawn_blocking`): the manager polls it inside the run's
/// own task, so a runner that blocks also blocks its run's timeout, its
/// cancellation and `Manager::stop`.
///
/// # Cancel safety
/// The manager drops a `run` or `resume` future that does not return within
/// the cancel grace once the run was cancelled or timed out. An implementation
/// must release what it started (processes, connections) on drop; what it
/// already appended to the turn log stays, and the manager still lands the
/// scratch dir.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait Runner: Send + Sync + Debug + 'static {
    /// Runs the first iteration with the session's prompt.
    ///
    /// # Errors
    /// [`RunError`] settles the session `failed`.
    ///
    /// # Cancel safety
    /// The manager drops the future when the run was cancelled and the
    /// grace period passed, or on the run timeout: an implementation must
    /// release what it started (processes, connections) on drop.
    async fn run(&self, ctx: RunContext) -> Result<RunOutcome, RunError>;

    /// Runs one more iteration of a reopened session with a new message.
    ///
    /// # Errors
    /// [`RunError`] settles the session `failed`.
    ///
    /// # Cancel safety
    /// As [`run`](Runner::run).
    async fn resume(&self, ctx: RunContext, message: String) -> Result<RunOutcome, RunError>;
}
