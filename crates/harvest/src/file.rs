//! One harvested file: opened and read through the scratch dir's capability,
//! compared with its restored artifact, uploaded.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};

use korvus_blob::{BlobStore, Sha256Digest};
use korvus_store::{ArtifactKind, NewArtifact};
use korvus_workspace::{upload_artifact, UploadRow, WorkspaceError};

use crate::outcome::{error_chain, FailStage, FailedFile, UnchangedFile};
use crate::persist::{PersistConfig, PersistRequest};
use crate::walk::{Candidate, SkipReason, Skipped};
use crate::{content_type_for, REPORT_FILE};

/// What became of one candidate.
pub(crate) enum FileResult {
    /// Uploaded; the row still has to be written.
    Stored(Box<NewArtifact>),
    /// Equal to its restored artifact; not uploaded.
    Unchanged(UnchangedFile),
    /// Left out when opened or read (no longer a regular file, empty, too
    /// large).
    Skipped(Skipped),
    /// Could not be read or uploaded.
    Failed(FailedFile),
}

/// Reads, compares and uploads one candidate. Never fails as a whole: every
/// problem becomes a skipped or failed file.
pub(crate) async fn store_file(
    dir: &Arc<Dir>,
    blobs: &dyn BlobStore,
    request: &PersistRequest,
    config: &PersistConfig,
    candidate: Candidate,
) -> FileResult {
    let path = candidate.path.as_str().to_owned();
    let is_report = path == REPORT_FILE;
    let limit = if is_report {
        config.report_max_bytes
    } else {
        config.max_file_bytes
    };
    let bytes = match read_file(dir, &candidate, limit).await {
        Ok(bytes) => bytes,
        Err(result) if is_report => return report_not_read(result),
        Err(result) => return result,
    };
    let digest = Sha256Digest::of(&bytes);
    let size = bytes.len() as u64;
    if let Some(restored) = request.restored.get(&candidate.path) {
        if restored.sha256 == digest {
            return FileResult::Unchanged(UnchangedFile {
                path,
                artifact_id: restored.artifact.id,
                blob_key: restored.artifact.blob_key.clone(),
                size,
            });
        }
    }
    let row = UploadRow {
        incident: request.incident,
        session: request.session,
        revision: request.revision,
        kind: if is_report {
            ArtifactKind::Report
        } else {
            ArtifactKind::AgentOutput
        },
        content_type: content_type_for(&path),
        path: path.clone(),
        fence: request.fence,
    };
    match upload_artifact(blobs, Bytes::from(bytes), digest, row).await {
        Ok(row) => FileResult::Stored(Box::new(row)),
        Err(e) => FileResult::Failed(FailedFile {
            path,
            stage: FailStage::Upload,
            cause: upload_cause(&e),
        }),
    }
}

/// What became of a root `report.md` that was not read: one over its own
/// limit ([`PersistConfig::report_max_bytes`]) existed but cannot be stored,
/// so it is a failure, not a skip. An empty one stays a skip (the outcome's
/// report is then [`ReportFile::Empty`](crate::ReportFile::Empty)).
fn report_not_read(result: FileResult) -> FileResult {
    match result {
        FileResult::Skipped(Skipped {
            path,
            reason: SkipReason::TooLarge { size, limit },
        }) => FileResult::Failed(FailedFile {
            path,
            stage: FailStage::Limit,
            cause: format!("{size} bytes is over the {limit}-byte report limit"),
        }),
        other => other,
    }
}

/// The bytes of a candidate, or what became of it instead.
async fn read_file(
    dir: &Arc<Dir>,
    candidate: &Candidate,
    limit: u64,
) -> Result<Vec<u8>, FileResult> {
    let path = candidate.path.as_str().to_owned();
    if candidate.size > limit {
        return Err(FileResult::Skipped(Skipped {
            path,
            reason: SkipReason::TooLarge {
                size: candidate.size,
                limit,
            },
        }));
    }
    let read_dir = Arc::clone(dir);
    let rel = candidate.path.to_relative_path();
    let read = tokio::task::spawn_blocking(move || read_candidate(&read_dir, &rel, limit)).await;
    let failed = |cause| {
        FileResult::Failed(FailedFile {
            path: path.clone(),
            stage: FailStage::Read,
            cause,
        })
    };
    match read {
        Ok(Ok(Contents::Bytes(bytes))) => Ok(bytes),
        Ok(Ok(Contents::Skip(reason))) => Err(FileResult::Skipped(Skipped {
            path: path.clone(),
            reason,
        })),
        Ok(Err(e)) => Err(failed(e.to_string())),
        Err(e) => Err(failed(format!("read panicked: {e}"))),
    }
}

/// What reading a candidate found.
enum Contents {
    /// Its bytes, within the limit.
    Bytes(Vec<u8>),
    /// It turned out not to be worth storing.
    Skip(SkipReason),
}

/// Reads a candidate through the scratch dir's capability: no path can lead
/// outside it, a FIFO swapped in cannot block (non-blocking open), and
/// whatever is opened must be a regular file within the size limit.
fn read_candidate(dir: &Dir, path: &Path, limit: u64) -> std::io::Result<Contents> {
    let mut options = OpenOptions::new();
    options
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW);
    let file = dir.open_with(path, &options)?;
    let md = file.metadata()?;
    if !md.is_file() {
        return Ok(Contents::Skip(SkipReason::NotRegular {
            kind: "not a regular file when opened".into(),
        }));
    }
    let mut bytes = Vec::with_capacity(md.len().min(limit) as usize);
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.is_empty() {
        return Ok(Contents::Skip(SkipReason::Empty));
    }
    if bytes.len() as u64 > limit {
        return Ok(Contents::Skip(SkipReason::TooLarge {
            size: md.len().max(bytes.len() as u64),
            limit,
        }));
    }
    Ok(Contents::Bytes(bytes))
}

/// The cause recorded for a failed upload: the blob store's error chain,
/// without the key (the failed file's path already says which file).
fn upload_cause(e: &WorkspaceError) -> String {
    match e {
        WorkspaceError::Blob { source, .. } => error_chain(source),
        other => error_chain(other),
    }
}
