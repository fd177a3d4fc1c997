//! One harvested file: opened and read through the scratch dir's capability,
//! compared with its restored artifact, uploaded.

use std::io::{Read, Seek};
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};
use sha2::{Digest, Sha256};

use korvus_blob::{BlobBody, BlobError, BlobStore, Durability, Sha256Digest};
use korvus_store::{ArtifactKind, NewArtifact};
use korvus_workspace::{upload, UploadBody, UploadRow, WorkspaceError, STREAM_FROM_BYTES};

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
    let (body, digest) = match read_file(dir, &candidate, limit).await {
        Ok(Contents::Bytes(bytes)) => {
            let digest = Sha256Digest::of(&bytes);
            (UploadBody::Bytes(Bytes::from(bytes)), digest)
        }
        Ok(Contents::Large { file, size, digest }) => {
            let file = tokio::fs::File::from_std(file);
            (UploadBody::Stream(BlobBody::new(file, size)), digest)
        }
        Ok(Contents::Skip(_)) => unreachable!("read_file turns skips into results"),
        Err(result) if is_report => return report_not_read(result),
        Err(result) => return result,
    };
    let size = body.len();
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
    match upload(blobs, body, digest, row, Durability::AtBarrier).await {
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

/// The contents of a candidate (never [`Contents::Skip`]), or what became
/// of it instead.
async fn read_file(
    dir: &Arc<Dir>,
    candidate: &Candidate,
    limit: u64,
) -> Result<Contents, FileResult> {
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
        Ok(Ok(Contents::Skip(reason))) => Err(FileResult::Skipped(Skipped {
            path: path.clone(),
            reason,
        })),
        Ok(Ok(contents)) => Ok(contents),
        Ok(Err(e)) => Err(failed(e.to_string())),
        Err(e) => Err(failed(format!("read panicked: {e}"))),
    }
}

/// What reading a candidate found.
enum Contents {
    /// Its bytes, within the limit.
    Bytes(Vec<u8>),
    /// A file of [`STREAM_FROM_BYTES`] or more, hashed once and positioned
    /// at its start, to be streamed: never read into memory.
    Large {
        /// The open file.
        file: std::fs::File,
        /// Its size when it was hashed.
        size: u64,
        /// Its digest then; the upload hashes again and refuses a change.
        digest: Sha256Digest,
    },
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
    if md.len() >= STREAM_FROM_BYTES {
        return hash_large(file.into_std(), md.len(), limit);
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

/// Hashes a large file in 1 MiB reads, up to one byte past `limit`, and
/// leaves it positioned at its start for the streamed upload.
fn hash_large(mut file: std::fs::File, seen: u64, limit: u64) -> std::io::Result<Contents> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1024 * 1024];
    let mut size = 0u64;
    let mut reader = (&mut file).take(limit + 1);
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    if size == 0 {
        return Ok(Contents::Skip(SkipReason::Empty));
    }
    if size > limit {
        return Ok(Contents::Skip(SkipReason::TooLarge {
            size: seen.max(size),
            limit,
        }));
    }
    file.rewind()?;
    Ok(Contents::Large {
        file,
        size,
        digest: Sha256Digest::from_bytes(hasher.finalize().into()),
    })
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
