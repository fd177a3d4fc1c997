//! Collaborator traits the [`Manager`](crate::Manager) drives: the
//! [`Runner`] that does the work, [`DocsSearch`] and [`StreamReopener`].

use std::fmt::Debug;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use futures::future::BoxFuture;
use korvus_log::LogHandle;
use korvus_store::{Artifact, Counters, Incident, Session, SessionId, WorkspaceRef};
use korvus_workspace::{SkillCatalog, WorkspacePath};
use tokio_util::sync::CancellationToken;

/// Exit reasons with a meaning to the manager. Any other text a runner
/// returns is kept as given and means "completed".
pub mod exit {
    /// The run finished its investigation.
    pub const COMPLETED: &str = "completed";
    /// Not terminal: the agent waits for the user; the row stays `running`.
    pub const AWAITING_USER: &str = "awaiting_user";
    /// The run was cancelled (by `cancel` or `stop`).
    pub const CANCELLED: &str = "cancelled";
    /// The run exceeded the configured run timeout.
    pub const TIMEOUT: &str = "timeout";
    /// The runner returned an error.
    pub const RUNNER_FAILED: &str = "runner_failed";
    /// Something in the run panicked; caught and settled.
    pub const PANICKED: &str = "panicked";
    /// The author phase did not finish, so no `report.md` — in particular
    /// not a restored earlier one — is adopted as this revision's report.
    pub const REPORT_AUTHOR_FAILED: &str = "report_author_failed";
    /// `report.md` existed but could not be stored.
    pub const REPORT_UPLOAD_FAILED: &str = "report_upload_failed";
    /// The report row could not be written on an otherwise successful run.
    pub const REPORT_PERSIST_FAILED: &str = "report_persist_failed";
    /// The context refs could not be inserted after the session row was.
    pub const CONTEXT_REFS_FAILED: &str = "context_refs_failed";
    /// The session's turn log could not be created or opened.
    pub const TURN_LOG_FAILED: &str = "turn_log_failed";
    /// The scratch directory could not be prepared.
    pub const WORKSPACE_FAILED: &str = "workspace_failed";
}

/// An inherited artifact and the workspace path it was written to.
#[derive(Debug, Clone)]
pub struct InheritedFile {
    /// The artifact.
    pub artifact: Artifact,
    /// Role of the context ref.
    pub role: String,
    /// Where it sits in the scratch dir (`context/<n>-<name>`), when a
    /// scratch dir exists and the file was written.
    pub path: Option<WorkspacePath>,
}

/// Tools a run may use besides its scratch dir.
#[derive(Debug, Clone, Default)]
pub struct Tools {
    /// Documentation search at the session's pinned commit, when configured.
    pub docs: Option<Arc<dyn DocsClient>>,
}

/// Everything a [`Runner`] gets for one iteration.
#[derive(Debug, Clone)]
pub struct RunContext {
    /// The session row as it is when the run starts.
    pub session: Session,
    /// Its incident.
    pub incident: Incident,
    /// Inherited context, in stored order.
    pub inherited: Vec<InheritedFile>,
    /// The pinned repository, if any.
    pub workspace_ref: Option<WorkspaceRef>,
    /// The scratch dir (the working directory of the run), if configured.
    pub scratch: Option<PathBuf>,
    /// Tools.
    pub tools: Tools,
    /// Skills read from the seeded `skills/` tree (empty when not seeded).
    pub skills: SkillCatalog,
    /// The session's turn log, open for write. The manager closes it.
    pub log: Arc<LogHandle>,
    /// The report revision this iteration lands.
    pub revision: u32,
    /// Fires when the run must stop (cancel, stop, timeout). The manager
    /// stops waiting for the runner shortly after it fires.
    pub cancel: CancellationToken,
}

/// What a run reports when it returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutcome {
    /// Why it ended (see [`exit`]); [`exit::AWAITING_USER`] keeps the row running.
    pub exit_reason: String,
    /// Whether the author phase (writing `report.md`) finished.
    pub author_finished: bool,
    /// Usage.
    pub counters: Counters,
}

impl RunOutcome {
    /// A completed run whose author phase finished.
    pub fn completed(counters: Counters) -> Self {
        Self {
            exit_reason: exit::COMPLETED.into(),
            author_finished: true,
            counters,
        }
    }
}

/// A runner failed; the session settles `failed` with
/// [`exit_reason`](RunError::exit_reason), or `runner_failed` without one.
#[derive(Debug, thiserror::Error)]
#[error("runner failed: {message}")]
pub struct RunError {
    /// What went wrong.
    pub message: String,
    /// The cause, if any.
    #[source]
    pub source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    /// The exit reason the session settles with (e.g. `exit_code_3`);
    /// `None` means [`exit::RUNNER_FAILED`].
    pub exit_reason: Option<String>,
}

impl RunError {
    /// An error with a message only.
    pub fn msg(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            source: None,
            exit_reason: None,
        }
    }

    /// Adds the cause.
    pub fn with_source(
        mut self,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        self.source = Some(source.into());
        self
    }

    /// Sets the exit reason the session settles with.
    pub fn with_exit_reason(mut self, reason: impl Into<String>) -> Self {
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
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait Runner: Send + Sync + Debug + 'static {
    /// Runs the first iteration with the session's prompt.
    ///
    /// # Errors
    /// [`RunError`] settles the session `failed`.
    async fn run(&self, ctx: RunContext) -> Result<RunOutcome, RunError>;

    /// Runs one more iteration of a reopened session with a new message.
    ///
    /// # Errors
    /// [`RunError`] settles the session `failed`.
    async fn resume(&self, ctx: RunContext, message: String) -> Result<RunOutcome, RunError>;
}

/// A documentation search client pinned to one commit.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait DocsClient: Send + Sync + Debug + 'static {
    /// Searches; returns matching snippets.
    ///
    /// # Errors
    /// Whatever the search backend fails with.
    async fn search(&self, query: &str, limit: usize) -> Result<Vec<String>, RunError>;
}

/// A pinned docs client and how to unpin it.
pub struct DocsLease {
    /// The client handed to the run.
    pub client: Arc<dyn DocsClient>,
    /// Unpins the commit; awaited once after the run landed.
    pub release: BoxFuture<'static, ()>,
}

impl Debug for DocsLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DocsLease")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

/// Pins documentation search at a session's commit.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait DocsSearch: Send + Sync + Debug + 'static {
    /// Pins `workspace` and returns a client plus its release.
    ///
    /// # Errors
    /// A failure degrades to a run without docs search (logged).
    async fn pin(&self, workspace: &WorkspaceRef) -> Result<DocsLease, RunError>;
}

/// Lifts the "finished" latch of an external event stream (e.g. an SSE hub)
/// when a session is reopened, so subscribers see the next iteration.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait StreamReopener: Send + Sync + Debug + 'static {
    /// Called by `reopen` after the store's transition, before it returns.
    async fn reopen(&self, session: SessionId);
}
