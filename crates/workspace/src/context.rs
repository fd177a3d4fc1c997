//! Context materialisation (inherited artifacts) and restore of a session's
//! own earlier output.

use std::collections::BTreeMap;
use std::fmt;

use korvus_blob::{BlobStore, Sha256Digest};
use korvus_store::{Artifact, ArtifactId, ArtifactKind, IncidentId};

use crate::error::blocking;
use crate::fetch;
use crate::fsutil::{
    make_dir, set_dir_modes, DIR_MODE, READ_ONLY_DIR_MODE, READ_ONLY_FILE_MODE, WRITABLE_FILE_MODE,
};
use crate::{
    context_path, is_read_only, Result, ScratchDir, WorkspaceError, WorkspacePath, CONTEXT_DIR,
};

/// `wanted` without the files whose parent directory is another wanted
/// file's path, each reported failed in `outcome` (the parent sorts
/// first: restored one at a time it would have taken the name), so the
/// files fetched at once never clash.
fn without_clashes<'a>(
    wanted: Vec<(WorkspacePath, &'a Artifact)>,
    dir: &ScratchDir,
    outcome: &mut RestoreOutcome,
) -> Vec<(WorkspacePath, &'a Artifact)> {
    let clashes: Vec<bool> = {
        let files: std::collections::HashSet<&str> =
            wanted.iter().map(|(p, _)| p.as_str()).collect();
        wanted
            .iter()
            .map(|(path, _)| {
                let p = path.as_str();
                p.match_indices('/').any(|(i, _)| files.contains(&p[..i]))
            })
            .collect()
    };
    let mut kept = Vec::with_capacity(wanted.len());
    for ((path, artifact), clash) in wanted.into_iter().zip(clashes) {
        if !clash {
            kept.push((path, artifact));
            continue;
        }
        let cause = std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            "a parent directory of this path is another restored file",
        );
        outcome.failed.push(FileFailure {
            artifact: artifact.id,
            cause: WorkspaceError::io("create directory", dir.path().join(path.as_str()), cause),
            path,
        });
    }
    kept
}

pub use crate::fetch::FETCH_CONCURRENCY;

/// One file that could not be put into the workspace, and why.
#[derive(Debug)]
#[non_exhaustive]
pub struct FileFailure {
    /// The artifact.
    pub artifact: ArtifactId,
    /// Where it was to go.
    pub path: WorkspacePath,
    /// Why it could not.
    pub cause: WorkspaceError,
}

impl fmt::Display for FileFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.cause)?;
        let mut source = std::error::Error::source(&self.cause);
        while let Some(s) = source {
            write!(f, ": {s}")?;
            source = s.source();
        }
        Ok(())
    }
}

/// An inherited artifact written under `context/`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ContextFile {
    /// Its number `n` in [`context_path`].
    pub n: u32,
    /// The artifact.
    pub artifact: ArtifactId,
    /// Where it was written: `context_path(n, &artifact.path)`.
    pub path: WorkspacePath,
    /// Digest of the bytes written (verified against the artifact row).
    pub sha256: Sha256Digest,
    /// Size of the bytes written.
    pub size_bytes: u64,
}

/// What [`materialize_context`] did.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct ContextOutcome {
    /// Files written, in the order of the artifacts given.
    pub written: Vec<ContextFile>,
    /// Artifacts whose bytes could not be fetched, verified or written; they
    /// are absent from the workspace.
    pub failed: Vec<FileFailure>,
}

/// Writes a session's inherited artifacts read-only under `context/`.
///
/// `artifacts` are given in stored context-ref order; the `i`th (0-based)
/// goes to [`context_path`]`(i + 1, &artifact.path)`, mode 0444, and
/// `context/` itself ends up 0555 (it is created even when there is nothing
/// to write, so the deny list always names a real read-only directory).
///
/// Every artifact is checked first: if any belongs to an incident other than
/// `incident`, the call fails before a single byte — or the `context/`
/// directory — is written. The store refuses such refs too; this is the
/// second lock on the same door.
///
/// A blob that cannot be fetched, does not match the row's SHA-256, or cannot
/// be written is reported in [`ContextOutcome::failed`] and left out; the
/// rest are written.
///
/// # Errors
/// [`WorkspaceError::CrossIncident`] (nothing written);
/// [`WorkspaceError::Io`] when `context/` cannot be created or made read-only.
///
/// # Cancel safety
/// Not cancel-safe: a dropped call leaves the files written so far.
pub async fn materialize_context(
    dir: &ScratchDir,
    incident: IncidentId,
    artifacts: &[Artifact],
    blobs: &dyn BlobStore,
) -> Result<ContextOutcome> {
    if let Some(a) = artifacts.iter().find(|a| a.incident_id != incident) {
        return Err(WorkspaceError::CrossIncident {
            artifact: a.id,
            artifact_incident: a.incident_id,
            session_incident: incident,
        });
    }
    let context_dir = dir.path().join(CONTEXT_DIR);
    let cd = context_dir.clone();
    blocking(move || {
        make_dir(&cd, DIR_MODE).map_err(|e| WorkspaceError::io("create directory", &cd, e))
    })
    .await?;

    let mut outcome = ContextOutcome::default();
    let jobs = artifacts
        .iter()
        .enumerate()
        .map(|(i, artifact)| {
            let n = u32::try_from(i + 1).unwrap_or(u32::MAX);
            (n, artifact, context_path(n, &artifact.path))
        })
        .collect();
    let fetched = fetch::to_files(jobs, blobs, dir.path(), READ_ONLY_FILE_MODE).await;
    for (n, artifact, path, written) in fetched {
        match written.map(|f| (f.sha256, f.size_bytes)) {
            Ok((sha256, size_bytes)) => outcome.written.push(ContextFile {
                n,
                artifact: artifact.id,
                path,
                sha256,
                size_bytes,
            }),
            Err(cause) => outcome.failed.push(FileFailure {
                artifact: artifact.id,
                path,
                cause,
            }),
        }
    }

    blocking(move || {
        set_dir_modes(&context_dir, READ_ONLY_DIR_MODE)
            .map_err(|e| WorkspaceError::io("make read-only", &context_dir, e))
    })
    .await?;
    Ok(outcome)
}

/// A restored file: the artifact it came from and the digest of the bytes
/// written, for the persist phase's unchanged rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoredFile {
    /// The artifact row (the newest revision at its path).
    pub artifact: Artifact,
    /// Digest of the bytes written (equal to `artifact.sha256`).
    pub sha256: Sha256Digest,
}

/// Why [`restore_own_output`] refused an artifact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RefuseReason {
    /// The path lies under a read-only prefix (a seeded tree or `context/`).
    ReadOnly,
    /// The path is not a valid workspace path: absolute, `..`, empty
    /// segment, control character, … — it could escape the scratch dir.
    Escapes,
    /// The artifact belongs to another session.
    OtherSession,
}

impl fmt::Display for RefuseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RefuseReason::ReadOnly => "path is under a read-only prefix",
            RefuseReason::Escapes => "path would escape the scratch directory",
            RefuseReason::OtherSession => "artifact belongs to another session",
        })
    }
}

/// An artifact [`restore_own_output`] refused to restore.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Refused {
    /// The artifact.
    pub artifact: ArtifactId,
    /// Its path as stored.
    pub path: String,
    /// Why.
    pub reason: RefuseReason,
}

/// What [`restore_own_output`] did.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct RestoreOutcome {
    /// The files restored, by workspace path.
    pub restored: BTreeMap<WorkspacePath, RestoredFile>,
    /// Older revisions not restored because a newer one exists at the path.
    pub superseded: Vec<ArtifactId>,
    /// Workspace archives skipped (never unpacked into a workspace).
    pub archives_skipped: Vec<ArtifactId>,
    /// Artifacts refused, with the reason.
    pub refused: Vec<Refused>,
    /// Files that could not be fetched, verified or written; left out.
    pub failed: Vec<FileFailure>,
}

/// Restores a session's own earlier output into its fresh scratch dir (on
/// reopen), after seeding and context.
///
/// Of the artifacts at one path, the newest revision wins (ties broken by
/// `created_at`, then id). Workspace archives are skipped. A path under one
/// of `read_only` (from [`read_only_prefixes`](crate::read_only_prefixes)),
/// a path that is not a valid [`WorkspacePath`] (it could escape the scratch
/// dir), and an artifact of another session are refused. A file that cannot
/// be fetched, does not match its SHA-256, or cannot be written (say a file
/// already occupies a parent directory's name) is reported and left out;
/// the rest are restored, [`FETCH_CONCURRENCY`] files at a time. A path
/// below another restored file's path (`x/y` beside a file `x`) is left
/// out as an `Io` failure. Restored files are writable (0644): they are the
/// session's own output. Missing parent directories are created 0700 and
/// nothing that is not a real directory (such as a symlink) is walked
/// through.
///
/// # Errors
/// None as a whole: everything that goes wrong is per file, in
/// [`RestoreOutcome::refused`] and [`RestoreOutcome::failed`].
///
/// # Cancel safety
/// Not cancel-safe: a dropped call leaves the files restored so far.
pub async fn restore_own_output(
    dir: &ScratchDir,
    artifacts: &[Artifact],
    read_only: &[WorkspacePath],
    blobs: &dyn BlobStore,
) -> RestoreOutcome {
    let mut outcome = RestoreOutcome::default();
    let mut newest: BTreeMap<&str, &Artifact> = BTreeMap::new();
    for a in artifacts {
        if a.kind == ArtifactKind::WorkspaceArchive {
            outcome.archives_skipped.push(a.id);
            continue;
        }
        if a.session_id != dir.session_id() {
            outcome.refused.push(Refused {
                artifact: a.id,
                path: a.path.clone(),
                reason: RefuseReason::OtherSession,
            });
            continue;
        }
        let slot = newest.entry(a.path.as_str()).or_insert(a);
        if (a.revision, a.created_at, a.id) > (slot.revision, slot.created_at, slot.id) {
            outcome.superseded.push(slot.id);
            *slot = a;
        } else if slot.id != a.id {
            outcome.superseded.push(a.id);
        }
    }

    let mut wanted = Vec::with_capacity(newest.len());
    for (raw, artifact) in newest {
        let refuse = |reason| Refused {
            artifact: artifact.id,
            path: raw.to_owned(),
            reason,
        };
        let Ok(path) = WorkspacePath::new(raw) else {
            outcome.refused.push(refuse(RefuseReason::Escapes));
            continue;
        };
        if is_read_only(&path, read_only) {
            outcome.refused.push(refuse(RefuseReason::ReadOnly));
            continue;
        }
        wanted.push((path, artifact));
    }
    let wanted = without_clashes(wanted, dir, &mut outcome);
    let jobs = wanted
        .into_iter()
        .map(|(path, artifact)| ((), artifact, path))
        .collect();
    let fetched = fetch::to_files(jobs, blobs, dir.path(), WRITABLE_FILE_MODE).await;
    for ((), artifact, path, result) in fetched {
        match result.map(|f| f.sha256) {
            Ok(sha256) => {
                outcome.restored.insert(
                    path,
                    RestoredFile {
                        artifact: artifact.clone(),
                        sha256,
                    },
                );
            }
            Err(cause) => outcome.failed.push(FileFailure {
                artifact: artifact.id,
                path,
                cause,
            }),
        }
    }
    // Fetched concurrently, reported in path order.
    outcome.failed.sort_by(|a, b| a.path.cmp(&b.path));
    outcome
}
