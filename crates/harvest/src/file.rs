//! One harvested file: opened through the scratch dir's capability,
//! compared with its restored artifact, uploaded (read once, by the blob
//! store, which hashes it on the way).

use std::io::Seek;
use std::path::Path;
use std::sync::Arc;

use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};

use korvus_blob::{digest_of_file, BlobError, BlobStore, Durability, Sha256Digest};
use korvus_store::{ArtifactKind, NewArtifact};
use korvus_workspace::{upload_file, UploadRow, WorkspaceError};

use crate::config::{PersistConfig, PersistRequest};
use crate::outcome::{error_chain, FailStage, FailedFile, UnchangedFile};
use crate::walk::{Candidate, SkipReason, Skipped};
use crate::{content_type_for, REPORT_FILE};

/// What became of one candidate.
pub(crate) enum FileResult {
    /// Uploaded; the row still has to be written.
    Stored(Box<NewArtifact>),
    /// Its checkpoint holds its bytes: the row names them, nothing was
    /// uploaded; the row still has to be written.
    Promoted(Box<NewArtifact>),
    /// Equal to its restored artifact; not uploaded.
    Unchanged(UnchangedFile),
    /// Left out when opened or read (no longer a regular file, empty, too
    /// large).
    Skipped(Skipped),
    /// Could not be read or uploaded.
    Failed(FailedFile),
}

/// Opens, compares and uploads one candidate. Never fails as a whole:
/// every problem becomes a skipped or failed file.
///
/// Each byte is read once on the usual path (no restored twin): the blob
/// store hashes the file while it stores it, on a blocking thread
/// ([`upload_file`]). A file with a restored twin is hashed first (the
/// unchanged rule needs its digest before deciding) and, when it differs,
/// read again by the upload.
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
    let restored = request.restored.get(&candidate.path);
    let twin = restored.map(|r| r.sha256);
    let (file, len) = match open_file(dir, &candidate, limit, twin).await {
        Ok(Opened::File { file, len }) => (file, len),
        Ok(Opened::Unchanged { len }) => {
            let restored = restored.expect("only a file with a twin is unchanged");
            return FileResult::Unchanged(UnchangedFile {
                path,
                artifact_id: restored.artifact.id,
                blob_key: restored.artifact.blob_key.clone(),
                size: len,
            });
        }
        Ok(Opened::Skip(_)) => unreachable!("open_file turns skips into results"),
        Err(result) if is_report => return report_not_read(result),
        Err(result) => return result,
    };
    let row = UploadRow {
        incident: request.incident,
        session: request.session,
        revision: request.revision,
        kind: if is_report {
            ArtifactKind::Report
        } else if crate::agent_state::is_agent_state(&path) {
            ArtifactKind::AgentState
        } else {
            ArtifactKind::AgentOutput
        },
        content_type: content_type_for(&path),
        path: path.clone(),
        fence: request.fence,
    };
    // Deferred durability: the phase calls one barrier before any row.
    match upload_file(blobs, file, len, row, Durability::AtBarrier).await {
        Ok(row) => FileResult::Stored(Box::new(row)),
        Err(e) => FileResult::Failed(FailedFile {
            path,
            // The store reads the file: a failure to read it is still one.
            stage: match &e {
                WorkspaceError::Blob {
                    source: BlobError::Body { .. },
                    ..
                } => FailStage::Read,
                _ => FailStage::Upload,
            },
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

/// A candidate opened for its upload (never [`Opened::Skip`]), or what
/// became of it instead.
pub(crate) async fn open_file(
    dir: &Arc<Dir>,
    candidate: &Candidate,
    limit: u64,
    twin: Option<Sha256Digest>,
) -> Result<Opened, FileResult> {
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
    let opened =
        tokio::task::spawn_blocking(move || open_candidate(&read_dir, &rel, limit, twin)).await;
    let failed = |cause| {
        FileResult::Failed(FailedFile {
            path: path.clone(),
            stage: FailStage::Read,
            cause,
        })
    };
    match opened {
        Ok(Ok(Opened::Skip(reason))) => Err(FileResult::Skipped(Skipped {
            path: path.clone(),
            reason,
        })),
        Ok(Ok(opened)) => Ok(opened),
        Ok(Err(e)) => Err(failed(e.to_string())),
        Err(e) => Err(failed(format!("read panicked: {e}"))),
    }
}

/// What opening a candidate found.
pub(crate) enum Opened {
    /// A regular file of `len` bytes (1 to the limit), positioned at its
    /// start, for the upload to read.
    File {
        /// The open file.
        file: std::fs::File,
        /// Its size when it was opened; the upload refuses a change.
        len: u64,
    },
    /// Its bytes equal its restored twin's: nothing to upload.
    Unchanged {
        /// Its size.
        len: u64,
    },
    /// It turned out not to be worth storing.
    Skip(SkipReason),
}

/// Opens a candidate through the scratch dir's capability: no path can
/// lead outside it, a FIFO swapped in cannot block (non-blocking open),
/// and whatever is opened must be a regular file within the size limit.
/// With a restored twin's digest, hashes it to compare (one read).
fn open_candidate(
    dir: &Dir,
    path: &Path,
    limit: u64,
    twin: Option<Sha256Digest>,
) -> std::io::Result<Opened> {
    let mut options = OpenOptions::new();
    options
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW);
    let file = dir.open_with(path, &options)?;
    let md = file.metadata()?;
    if !md.is_file() {
        return Ok(Opened::Skip(SkipReason::NotRegular {
            kind: "not a regular file when opened".into(),
        }));
    }
    let len = md.len();
    if len == 0 {
        return Ok(Opened::Skip(SkipReason::Empty));
    }
    if len > limit {
        return Ok(Opened::Skip(SkipReason::TooLarge { size: len, limit }));
    }
    let mut file = file.into_std();
    if let Some(twin) = twin {
        if digest_of_file(&mut file, len)? == Some(twin) {
            return Ok(Opened::Unchanged { len });
        }
        file.rewind()?;
    }
    Ok(Opened::File { file, len })
}

/// The cause recorded for a failed upload: the blob store's error chain,
/// without the key (the failed file's path already says which file). A
/// streamed file whose bytes no longer match the digest taken before the
/// upload changed in between.
fn upload_cause(e: &WorkspaceError) -> String {
    match e {
        WorkspaceError::Blob {
            source: BlobError::ChecksumMismatch { .. },
            ..
        } => "the file changed while it was being stored (nothing stored)".to_owned(),
        WorkspaceError::Blob { source, .. } => error_chain(source),
        other => error_chain(other),
    }
}
