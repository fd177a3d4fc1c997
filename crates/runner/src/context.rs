//! What a [`Runner`](crate::Runner) gets for one iteration.

use std::path::PathBuf;
use std::sync::Arc;

use korvus_log::LogHandle;
use korvus_paths::{SkillCatalog, WorkspacePath};
use korvus_store::{Artifact, Incident, Session, WorkspaceRef};
use tokio_util::sync::CancellationToken;

use crate::{CheckpointHook, DocsClient};

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

/// What a resumed attempt continues from ([`RunContext::resumed`]): its
/// previous attempt was interrupted — its korvus process was lost, or
/// handed it off while stopping — and the same revision runs again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Resumed {
    /// When the previous attempt was interrupted, as far as korvus knows:
    /// the time of the last event it logged.
    pub interrupted_at: Option<chrono::DateTime<chrono::Utc>>,
    /// When the checkpoint its files are restored from was taken; `None`
    /// when none was stored (its files are as at the revision's start).
    pub restored_from: Option<chrono::DateTime<chrono::Utc>>,
}

impl Resumed {
    /// A resume from a previous attempt interrupted at `interrupted_at`,
    /// its files restored from a checkpoint taken at `restored_from`.
    pub fn new(
        interrupted_at: Option<chrono::DateTime<chrono::Utc>>,
        restored_from: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Self {
        Self {
            interrupted_at,
            restored_from,
        }
    }
}

/// Everything a [`Runner`](crate::Runner) gets for one iteration.
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
    /// Where the embedder's report template sits in the scratch dir
    /// (read-only, at `korvus_paths::REPORT_TEMPLATE`), when one is
    /// configured and was copied.
    pub report_template: Option<WorkspacePath>,
    /// Fires when the run must stop (cancel, stop, timeout). The manager
    /// stops waiting for the runner shortly after it fires.
    pub cancel: CancellationToken,
    /// Called by the manager just before each checkpoint of the scratch
    /// dir while the run goes; a runner installs what it must copy in
    /// first (see [`CheckpointHook`]).
    pub checkpoint: CheckpointHook,
    /// Set for a resumed attempt of a revision (the session's `attempt`
    /// is then above 1): what it continues from.
    pub resumed: Option<Resumed>,
}
