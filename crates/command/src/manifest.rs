//! The run manifest: a JSON file the runner writes into the scratch dir at
//! [`RUN_MANIFEST`] and names in `KORVUS_MANIFEST`. (Not the harvest
//! manifest, which records what a persist phase stored.)

use std::path::{Path, PathBuf};

use korvus_runner::RunContext;
use korvus_workspace::RUN_MANIFEST;
use serde::Serialize;

use crate::CommandError;

/// Version of the manifest's shape; bumped on an incompatible change.
pub const PROTOCOL_VERSION: u32 = 1;

/// What the agent is told about its run (`KORVUS_MANIFEST`).
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct RunManifest {
    /// [`PROTOCOL_VERSION`].
    pub protocol: u32,
    /// The session id.
    pub session_id: String,
    /// The incident id.
    pub incident_id: String,
    /// The incident's title.
    pub incident_title: String,
    /// The report revision this iteration lands.
    pub revision: u32,
    /// `true` for a reopened session.
    pub resume: bool,
    /// The session's first prompt.
    pub prompt: String,
    /// The reopen message (only when `resume`).
    pub message: Option<String>,
    /// The attempt of this revision, from 1: above 1 when the previous
    /// attempt was interrupted (its korvus process lost, or handed off)
    /// and this one resumes it (`KORVUS_ATTEMPT`).
    pub attempt: u32,
    /// For a resumed attempt: when the previous one was interrupted, as
    /// far as korvus knows (RFC 3339).
    pub interrupted_at: Option<String>,
    /// For a resumed attempt: when the checkpoint its files are restored
    /// from was taken (RFC 3339); `None` when none was stored.
    pub restored_from: Option<String>,
    /// The pinned repository and commit, if any.
    pub workspace: Option<ManifestWorkspace>,
    /// Inherited context files, in stored order.
    pub context: Vec<ManifestContext>,
    /// Skills of the seeded `skills/` tree.
    pub skills: Vec<ManifestSkill>,
}

/// The pinned repository of a run.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ManifestWorkspace {
    /// Repository (as pinned).
    pub repo: String,
    /// Commit.
    pub commit: String,
}

/// One inherited context file.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ManifestContext {
    /// Workspace path (`context/<n>-<name>`), or `null` when it was not written.
    pub path: Option<String>,
    /// Role of the context ref.
    pub role: String,
    /// The artifact's id.
    pub artifact_id: String,
    /// The artifact's path in the session that produced it.
    pub source_path: String,
    /// Content type.
    pub content_type: String,
    /// Size in bytes.
    pub size_bytes: u64,
}

/// One skill.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ManifestSkill {
    /// Name from the front matter.
    pub name: String,
    /// Description from the front matter.
    pub description: String,
    /// Workspace path of its `SKILL.md`.
    pub path: String,
}

impl RunManifest {
    /// The manifest of one run.
    pub fn for_run(ctx: &RunContext, message: Option<&str>) -> Self {
        Self {
            protocol: PROTOCOL_VERSION,
            session_id: ctx.session.id.to_string(),
            incident_id: ctx.incident.id.to_string(),
            incident_title: ctx.incident.title.clone(),
            revision: ctx.revision,
            resume: message.is_some(),
            prompt: ctx.session.prompt.clone(),
            message: message.map(str::to_owned),
            attempt: ctx.session.attempt.max(1),
            interrupted_at: ctx
                .resumed
                .as_ref()
                .and_then(|r| r.interrupted_at)
                .map(|at| at.to_rfc3339()),
            restored_from: ctx
                .resumed
                .as_ref()
                .and_then(|r| r.restored_from)
                .map(|at| at.to_rfc3339()),
            workspace: ctx.workspace_ref.as_ref().map(|w| ManifestWorkspace {
                repo: w.repo.clone(),
                commit: w.commit.clone(),
            }),
            context: ctx
                .inherited
                .iter()
                .map(|f| ManifestContext {
                    path: f.path.as_ref().map(|p| p.as_str().to_owned()),
                    role: f.role.clone(),
                    artifact_id: f.artifact.id.to_string(),
                    source_path: f.artifact.path.clone(),
                    content_type: f.artifact.content_type.clone(),
                    size_bytes: f.artifact.size_bytes,
                })
                .collect(),
            skills: ctx
                .skills
                .skills()
                .iter()
                .map(|s| ManifestSkill {
                    name: s.name.clone(),
                    description: s.description.clone(),
                    path: s.path.as_str().to_owned(),
                })
                .collect(),
        }
    }

    /// Writes the manifest to [`RUN_MANIFEST`] under `scratch` (replacing
    /// one a restore may have put there) and returns its absolute path.
    /// The path is dot-prefixed, so the harvest never stores the file.
    pub(crate) async fn write(&self, scratch: &Path) -> Result<PathBuf, CommandError> {
        let path = scratch.join(RUN_MANIFEST);
        let err = |source| CommandError::Manifest {
            path: path.clone(),
            source,
        };
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| err(e.into()))?;
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent).await.map_err(err)?;
        }
        // A restored file of the same name may be read-only; replace it.
        let _ = tokio::fs::remove_file(&path).await;
        tokio::fs::write(&path, bytes).await.map_err(err)?;
        Ok(path)
    }
}
