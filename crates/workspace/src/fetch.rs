//! An artifact's bytes into a new file of the scratch dir, streamed: read
//! from the blob store a chunk at a time, written and hashed on a blocking
//! thread as they arrive, checked against the row's digest at the end. The
//! memory a file costs is a few chunks, whatever its size; a file whose
//! bytes do not match (or that fails half-way) is removed, never left
//! behind looking whole.

use std::fs::{File, OpenOptions, Permissions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use korvus_blob::{BlobError, BlobKey, BlobStore, Sha256Digest};
use korvus_store::Artifact;
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

use crate::error::{blocking, Result, WorkspaceError};
use crate::fsutil::make_parents;
use crate::path::WorkspacePath;

/// Bytes read from the blob store at a time.
const CHUNK: usize = 1024 * 1024;

/// Chunks in flight between the reader and the writing thread.
const IN_FLIGHT: usize = 2;

/// What was written: the digest (equal to the row's) and the size.
pub(crate) struct Fetched {
    pub(crate) sha256: Sha256Digest,
    pub(crate) size_bytes: u64,
}

/// Writes `artifact`'s bytes to a new file at `path` below `root` (parents
/// created 0700, the file `mode`), verified against its SHA-256.
///
/// # Errors
/// `Blob` when the bytes cannot be fetched, `DigestMismatch` when they do
/// not match, `Io` when the file cannot be written; the file is removed in
/// every case.
pub(crate) async fn to_file(
    artifact: &Artifact,
    blobs: &dyn BlobStore,
    root: &Path,
    path: &WorkspacePath,
    mode: u32,
) -> Result<Fetched> {
    let fetch_err = |source| WorkspaceError::Blob {
        op: "fetched",
        key: artifact.blob_key.clone(),
        source,
    };
    let key = BlobKey::new(artifact.blob_key.as_str()).map_err(fetch_err)?;
    let mut reader = blobs.get_stream(&key).await.map_err(fetch_err)?;
    let target = root.join(path.to_relative_path());
    let (tx, rx) = mpsc::channel::<Vec<u8>>(IN_FLIGHT);
    let writer = {
        let (root, rel, target) = (root.to_path_buf(), path.to_relative_path(), target.clone());
        tokio::task::spawn_blocking(move || write_chunks(&root, &rel, &target, mode, rx))
    };
    let mut read_error = None;
    loop {
        let mut chunk = vec![0u8; CHUNK];
        match read_full(&mut reader.body, &mut chunk).await {
            Ok(0) => break,
            Ok(n) => {
                chunk.truncate(n);
                if tx.send(chunk).await.is_err() {
                    break; // The writer failed; its error says why.
                }
            }
            Err(e) => {
                read_error = Some(e);
                break;
            }
        }
    }
    drop(tx);
    let written = writer
        .await
        .map_err(|source| WorkspaceError::Task { source })?;
    // The writer removes a file it created and then failed on; a file it
    // wrote whole but whose bytes are wrong or cut short is removed here.
    let failure = match (read_error, written) {
        (None, Ok(fetched))
            if artifact.sha256.parse::<Sha256Digest>().ok() == Some(fetched.sha256) =>
        {
            return Ok(fetched);
        }
        (None, Err(e)) => return Err(e),
        (Some(e), Err(_)) => return Err(fetch_err(BlobError::backend("read", e))),
        (Some(e), Ok(_)) => fetch_err(BlobError::backend("read", e)),
        (None, Ok(_)) => WorkspaceError::DigestMismatch {
            artifact: artifact.id,
        },
    };
    let _ = blocking(move || {
        let _ = std::fs::remove_file(&target);
        Ok(())
    })
    .await;
    Err(failure)
}

/// Reads until `buf` is full or the body ends; the bytes read.
async fn read_full(
    body: &mut (impl tokio::io::AsyncRead + Unpin + ?Sized),
    buf: &mut [u8],
) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        let n = body.read(&mut buf[filled..]).await?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    Ok(filled)
}

/// On a blocking thread: creates the file (never replacing or following
/// anything at `target`; a file of mode 0444 can still be written through
/// the descriptor that created it), writes and hashes each chunk as it
/// arrives, then leaves it with exactly `mode` and `fsync`s it.
fn write_chunks(
    root: &Path,
    rel: &Path,
    target: &PathBuf,
    mode: u32,
    mut rx: mpsc::Receiver<Vec<u8>>,
) -> Result<Fetched> {
    let io = |e| WorkspaceError::io("write", target, e);
    make_parents(root, rel).map_err(|e| WorkspaceError::io("create directory for", target, e))?;
    let mut file: File = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(target)
        .map_err(io)?;
    let mut hasher = Sha256::new();
    let mut size_bytes = 0u64;
    let written = (|| {
        while let Some(chunk) = rx.blocking_recv() {
            hasher.update(&chunk);
            file.write_all(&chunk)?;
            size_bytes += chunk.len() as u64;
        }
        file.set_permissions(Permissions::from_mode(mode))?;
        file.sync_all()
    })();
    if let Err(e) = written {
        drop(file);
        let _ = std::fs::remove_file(target);
        return Err(io(e));
    }
    Ok(Fetched {
        sha256: Sha256Digest::from_bytes(hasher.finalize().into()),
        size_bytes,
    })
}
