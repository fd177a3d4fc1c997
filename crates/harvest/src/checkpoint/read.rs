//! One file of a checkpoint: opened through the scratch dir's capability,
//! compared by hash where its `stat` cannot vouch for it, and stored whole
//! — or, after it kept changing while read, torn at the size its read
//! began with.

use std::io::{Read as _, Seek};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;

use korvus_blob::{digest_of_file, BlobBody, BlobError, BlobStore, Durability, Sha256Digest};
use korvus_store::NewArtifact;
use korvus_workspace::{upload, upload_file, UploadBody, UploadRow, WorkspaceError};

use crate::outcome::{error_chain, FailStage, FailedFile};
use crate::stat::FileStat;
use crate::walk::{SkipReason, Skipped};

/// What to do with one file.
pub(super) struct Job {
    /// Its path, relative to the scratch dir.
    pub path: String,
    /// Its size limit.
    pub limit: u64,
    /// The digest its bytes had when last judged (its checkpoint's or its
    /// restored twin's): equal bytes store nothing.
    pub compare: Option<Sha256Digest>,
    /// Store it torn: it changed while read too often.
    pub torn: bool,
    /// Its checkpoint row, but for what the upload decides.
    pub row: UploadRow,
}

/// What became of one file.
pub(super) enum Read {
    /// Stored; the row still has to be written.
    Stored {
        /// The checkpoint row.
        row: Box<NewArtifact>,
        /// The `stat` its read began with.
        stat: FileStat,
        /// Whether that stat cannot vouch for the bytes.
        racy: bool,
        /// Only the bytes up to `stat.size`.
        torn: bool,
    },
    /// Equal to `Job::compare`: nothing stored.
    Same {
        /// Its `stat`.
        stat: FileStat,
        /// Whether that stat cannot vouch for the bytes.
        racy: bool,
    },
    /// It changed while read: left for the next checkpoint. `orphan`:
    /// bytes stored meanwhile that no row will name.
    Changing {
        /// The key of bytes stored for nothing.
        orphan: Option<String>,
    },
    /// Not worth storing when opened (empty, too large, not regular).
    Skipped(Skipped),
    /// Could not be read or stored.
    Failed(FailedFile),
}

/// An opened file and the `stat` its read begins with.
struct Opened {
    file: std::fs::File,
    stat: FileStat,
    read_at: SystemTime,
}

/// Reads and stores one file of a checkpoint. Never fails as a whole.
pub(super) async fn read_file(dir: &Arc<Dir>, blobs: &dyn BlobStore, job: Job) -> Read {
    let path = job.row.path.clone();
    let failed = |stage, cause| {
        Read::Failed(FailedFile {
            path: path.clone(),
            stage,
            cause,
        })
    };
    let opened = {
        let (dir, rel, limit, compare) = (
            Arc::clone(dir),
            PathBuf::from(&job.path),
            job.limit,
            job.compare,
        );
        tokio::task::spawn_blocking(move || open(&dir, &rel, limit, compare)).await
    };
    let opened = match opened {
        Ok(Ok(Ok(opened))) => opened,
        Ok(Ok(Err(early))) => return early.into_read(&job.path),
        Ok(Err(e)) => return failed(FailStage::Read, e.to_string()),
        Err(e) => return failed(FailStage::Read, format!("read panicked: {e}")),
    };
    if job.torn {
        return store_torn(blobs, opened, job.row).await;
    }
    let Opened {
        file,
        stat,
        read_at,
    } = opened;
    let probe = match file.try_clone() {
        Ok(p) => p,
        Err(e) => return failed(FailStage::Read, e.to_string()),
    };
    let stored = upload_file(blobs, file, stat.size, job.row, Durability::AtBarrier).await;
    let after = probe.metadata().map(|md| FileStat::of(&md));
    let moved = after.map_or(true, |a| {
        (a.size, a.mtime, a.ctime) != (stat.size, stat.mtime, stat.ctime)
    });
    match stored {
        Ok(row) if moved => Read::Changing {
            orphan: Some(row.blob_key),
        },
        Ok(row) => Read::Stored {
            row: Box::new(row),
            stat,
            racy: stat.racy(read_at),
            torn: false,
        },
        Err(WorkspaceError::Blob {
            source: BlobError::ChecksumMismatch { .. },
            ..
        }) => Read::Changing { orphan: None },
        Err(e) => failed(FailStage::Upload, error_chain(&e)),
    }
}

/// Stores the first `stat.size` bytes of a file that keeps changing: hashed
/// first (one bounded read), then streamed (a second bounded read, which
/// the blob store checks against the digest: a file rewritten in between,
/// not only appended to, stores nothing).
async fn store_torn(blobs: &dyn BlobStore, opened: Opened, row: UploadRow) -> Read {
    let Opened { mut file, stat, .. } = opened;
    let path = row.path.clone();
    let len = stat.size;
    let hashed = tokio::task::spawn_blocking(move || {
        let digest = digest_of_prefix(&mut file, len)?;
        file.rewind()?;
        Ok::<_, std::io::Error>((file, digest))
    })
    .await;
    let (file, digest) = match hashed {
        Ok(Ok((file, Some(digest)))) => (file, digest),
        Ok(Ok((_, None))) => return Read::Changing { orphan: None },
        Ok(Err(e)) => return read_failed(path, e.to_string()),
        Err(e) => return read_failed(path, format!("read panicked: {e}")),
    };
    let body = BlobBody::new(tokio::fs::File::from_std(file).take(len), len);
    match upload(
        blobs,
        UploadBody::Stream(body),
        digest,
        row,
        Durability::AtBarrier,
    )
    .await
    {
        Ok(row) => Read::Stored {
            row: Box::new(row),
            stat,
            racy: true,
            torn: true,
        },
        Err(WorkspaceError::Blob {
            source: BlobError::ChecksumMismatch { .. },
            ..
        }) => Read::Changing { orphan: None },
        Err(e) => Read::Failed(FailedFile {
            path,
            stage: FailStage::Upload,
            cause: error_chain(&e),
        }),
    }
}

fn read_failed(path: String, cause: String) -> Read {
    Read::Failed(FailedFile {
        path,
        stage: FailStage::Read,
        cause,
    })
}

/// What opening found instead of a file to store.
enum Early {
    Skip(SkipReason),
    Same { stat: FileStat, racy: bool },
}

impl Early {
    fn into_read(self, path: &str) -> Read {
        match self {
            Early::Skip(reason) => Read::Skipped(Skipped {
                path: path.to_owned(),
                reason,
            }),
            Early::Same { stat, racy } => Read::Same { stat, racy },
        }
    }
}

/// Opens a file as the landing does (no symlink followed, a FIFO cannot
/// block, a regular file within its limit only) and takes its `stat`;
/// with `compare`, hashes it and answers [`Early::Same`] when equal and
/// unchanged meanwhile.
fn open(
    dir: &Dir,
    rel: &std::path::Path,
    limit: u64,
    compare: Option<Sha256Digest>,
) -> std::io::Result<Result<Opened, Early>> {
    let mut options = OpenOptions::new();
    options
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW);
    let mut file = dir.open_with(rel, &options)?.into_std();
    let md = file.metadata()?;
    if !md.is_file() {
        return Ok(Err(Early::Skip(SkipReason::NotRegular {
            kind: "not a regular file when opened".into(),
        })));
    }
    let stat = FileStat::of(&md);
    if stat.size == 0 {
        return Ok(Err(Early::Skip(SkipReason::Empty)));
    }
    if stat.size > limit {
        return Ok(Err(Early::Skip(SkipReason::TooLarge {
            size: stat.size,
            limit,
        })));
    }
    let read_at = SystemTime::now();
    if let Some(compare) = compare {
        let equal = digest_of_file(&mut file, stat.size)? == Some(compare);
        let still = FileStat::of(&file.metadata()?) == stat;
        if equal && still {
            let racy = stat.racy(read_at);
            return Ok(Err(Early::Same { stat, racy }));
        }
        file.rewind()?;
    }
    Ok(Ok(Opened {
        file,
        stat,
        read_at,
    }))
}

/// The SHA-256 of the first `len` bytes of `file` (from its current
/// position), whatever follows them; `None` when it holds fewer. Reads
/// through a small buffer. Blocking.
fn digest_of_prefix(file: &mut std::fs::File, len: u64) -> std::io::Result<Option<Sha256Digest>> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut reader = std::io::Read::take(file, len);
    let mut seen = 0u64;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        seen += n as u64;
        hasher.update(&buf[..n]);
    }
    Ok((seen == len).then(|| Sha256Digest::from_bytes(hasher.finalize().into())))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn a_prefix_is_hashed_whatever_follows_it() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"hello, world").unwrap();
        f.rewind().unwrap();
        assert_eq!(
            digest_of_prefix(&mut f, 5).unwrap(),
            Some(Sha256Digest::of(b"hello"))
        );
        f.rewind().unwrap();
        assert_eq!(digest_of_prefix(&mut f, 50).unwrap(), None);
    }
}
