//! [`WorkspaceError`]: what a workspace operation can fail with.

use std::io;
use std::path::PathBuf;

use korvus_blob::BlobError;
use korvus_store::{ArtifactId, IncidentId, StoreError};

/// Errors of the workspace crate. Match on variants, never on message text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkspaceError {
    /// `<root>/<session id>` already exists: it holds someone else's files,
    /// so it is refused rather than reused.
    #[error("scratch directory {path} already exists")]
    AlreadyExists {
        /// The existing directory.
        path: PathBuf,
    },
    /// A filesystem operation failed.
    #[error("could not {op} {path}")]
    Io {
        /// What was being done, e.g. `create directory`.
        op: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A workspace-relative path or tree prefix breaks a rule of
    /// [`WorkspacePath`](crate::WorkspacePath).
    #[error("invalid workspace path {path:?}: {reason}")]
    InvalidPath {
        /// The refused path (escaped, cut to 200 characters).
        path: String,
        /// The broken rule.
        reason: &'static str,
    },
    /// The `git` program could not be started.
    #[error("git program {program} could not be started")]
    GitNotFound {
        /// The program that was tried.
        program: PathBuf,
        /// Why it could not be started.
        #[source]
        source: io::Error,
    },
    /// The repository path does not exist or is not a git repository.
    #[error("{repo} is not a git repository: {detail}")]
    NotARepository {
        /// The repository path.
        repo: PathBuf,
        /// What git said.
        detail: String,
    },
    /// The pinned commit does not name a commit of the repository.
    #[error("commit {commit:?} not found in {repo}")]
    UnknownCommit {
        /// The repository path.
        repo: PathBuf,
        /// The pinned commit as given.
        commit: String,
    },
    /// The commit resolved but its trees or files could not be read.
    #[error("repository {repo} is corrupt: {detail}")]
    CorruptRepository {
        /// The repository path.
        repo: PathBuf,
        /// What git said.
        detail: String,
    },
    /// An artifact of another incident was offered as context. Nothing was
    /// written.
    #[error("artifact {artifact} belongs to incident {artifact_incident}, not {session_incident}")]
    CrossIncident {
        /// The refused artifact.
        artifact: ArtifactId,
        /// The incident it belongs to.
        artifact_incident: IncidentId,
        /// The incident of the receiving session.
        session_incident: IncidentId,
    },
    /// The bytes fetched for an artifact do not match its recorded SHA-256.
    #[error("artifact {artifact} does not match its SHA-256 digest")]
    DigestMismatch {
        /// The artifact.
        artifact: ArtifactId,
    },
    /// The workspace archive would be larger than its cap
    /// ([`ArchiveConfig::max_bytes`](crate::ArchiveConfig::max_bytes)): it
    /// was given up and nothing is stored.
    #[error("workspace archive is over its {limit}-byte cap; not archived")]
    ArchiveTooLarge {
        /// The cap, in bytes of compressed archive.
        limit: u64,
    },
    /// A blob store call failed.
    #[error("blob {key} could not be {op}")]
    Blob {
        /// `fetched` or `stored`.
        op: &'static str,
        /// The blob key.
        key: String,
        /// The underlying error.
        #[source]
        source: BlobError,
    },
    /// A store call failed.
    #[error("store call {op} failed")]
    Store {
        /// Which call, e.g. `create_artifacts`.
        op: &'static str,
        /// The underlying error.
        #[source]
        source: StoreError,
    },
    /// A blocking filesystem task panicked or was cancelled by runtime
    /// shutdown.
    #[error("blocking workspace task did not finish")]
    Task {
        /// The join error.
        #[source]
        source: tokio::task::JoinError,
    },
}

impl WorkspaceError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        WorkspaceError::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

/// `Result` with [`WorkspaceError`] as the default error.
pub type Result<T, E = WorkspaceError> = std::result::Result<T, E>;

/// Runs blocking filesystem work on tokio's blocking pool.
///
/// The closure runs to completion even when the returned future is dropped.
pub(crate) async fn blocking<T, F>(f: F) -> Result<T>
where
    F: FnOnce() -> Result<T> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|source| WorkspaceError::Task { source })?
}

impl From<korvus_paths::InvalidPath> for WorkspaceError {
    fn from(e: korvus_paths::InvalidPath) -> Self {
        WorkspaceError::InvalidPath {
            path: e.path,
            reason: e.reason,
        }
    }
}
