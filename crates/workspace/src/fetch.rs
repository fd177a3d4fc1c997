//! An artifact's bytes into a new file of the scratch dir, streamed: read
//! from the blob store a chunk at a time, written and hashed on a blocking
//! thread as they arrive, checked against the row's digest by that thread
//! once the reader says the bytes are all there. The memory a file costs
//! is a few chunks, whatever its size. A file is kept only when the reader
//! said it was whole and the digest matched: one whose bytes do not match,
//! whose read failed half-way, or whose restore was cancelled (the reader
//! dropped without saying so) is removed, never left behind looking whole.

use std::fs::{File, OpenOptions, Permissions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use korvus_blob::{BlobError, BlobKey, BlobStore, Sha256Digest};
use korvus_store::Artifact;
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

use crate::error::{Result, WorkspaceError};

/// Files fetched at once by [`materialize_context`](crate::materialize_context)
/// and [`restore_own_output`](crate::restore_own_output): each holds a few
/// 1 MiB chunks in flight, so a restore holds at most this many times that,
/// and a store with tens of milliseconds a request (S3) is not waited on
/// one file at a time.
pub const FETCH_CONCURRENCY: usize = 8;
use crate::fsutil::make_parents;
use korvus_paths::WorkspacePath;

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
    let (tx, rx) = mpsc::channel::<Piece>(IN_FLIGHT);
    let writer = {
        let job = Job {
            root: root.to_path_buf(),
            rel: path.to_relative_path(),
            mode,
            expected: artifact.sha256.parse::<Sha256Digest>().ok(),
            artifact: artifact.id,
        };
        tokio::task::spawn_blocking(move || job.run(rx))
    };
    let mut read_error = None;
    loop {
        let mut chunk = vec![0u8; CHUNK];
        match read_full(&mut reader.body, &mut chunk).await {
            Ok(0) => {
                // Only now is the file whole; dropping `tx` without this
                // (a failed read, a cancelled restore) removes it.
                let _ = tx.send(Piece::End).await;
                break;
            }
            Ok(n) => {
                chunk.truncate(n);
                if tx.send(Piece::Bytes(chunk)).await.is_err() {
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
    match read_error {
        // The writer saw no end, removed the file and says so; the read
        // error is the cause.
        Some(e) => Err(fetch_err(BlobError::backend("read", e))),
        None => written,
    }
}

/// [`to_file`] for each of `jobs` (a tag, the artifact, its path),
/// [`FETCH_CONCURRENCY`] in flight at once
/// (a slow file does not hold the others back), answered in job order.
pub(crate) async fn to_files<'a, T>(
    jobs: Vec<(T, &'a Artifact, WorkspacePath)>,
    blobs: &'a dyn BlobStore,
    root: &'a Path,
    mode: u32,
) -> Vec<(T, &'a Artifact, WorkspacePath, Result<Fetched>)> {
    use futures::stream::{FuturesUnordered, StreamExt};
    let mut jobs = jobs.into_iter().enumerate();
    let mut running = FuturesUnordered::new();
    let mut done = Vec::with_capacity(jobs.len());
    loop {
        while running.len() < FETCH_CONCURRENCY {
            let Some((i, (tag, artifact, path))) = jobs.next() else {
                break;
            };
            running.push(one(i, tag, artifact, path, blobs, root, mode));
        }
        match running.next().await {
            Some(answer) => done.push(answer),
            None => break,
        }
    }
    done.sort_by_key(|(i, ..)| *i);
    done.into_iter()
        .map(|(_, tag, artifact, path, fetched)| (tag, artifact, path, fetched))
        .collect()
}

/// One job of [`to_files`], numbered for the answer's order.
async fn one<'a, T>(
    i: usize,
    tag: T,
    artifact: &'a Artifact,
    path: WorkspacePath,
    blobs: &'a dyn BlobStore,
    root: &'a Path,
    mode: u32,
) -> (usize, T, &'a Artifact, WorkspacePath, Result<Fetched>) {
    let fetched = to_file(artifact, blobs, root, &path, mode).await;
    (i, tag, artifact, path, fetched)
}

/// What the reader hands the writing thread.
enum Piece {
    /// The next bytes of the file.
    Bytes(Vec<u8>),
    /// Every byte was read.
    End,
}

/// One file for the writing thread.
struct Job {
    root: PathBuf,
    rel: PathBuf,
    mode: u32,
    expected: Option<Sha256Digest>,
    artifact: korvus_store::ArtifactId,
}

impl Job {
    /// Creates the file, writes and hashes what arrives, and keeps the
    /// file only when the reader said it was whole and the digest
    /// matches; removes it otherwise.
    fn run(self, rx: mpsc::Receiver<Piece>) -> Result<Fetched> {
        let target = self.root.join(&self.rel);
        let result = write_chunks(&self.root, &self.rel, &target, self.mode, rx);
        let outcome = match result {
            Ok(Some(fetched)) if Some(fetched.sha256) == self.expected => return Ok(fetched),
            Ok(Some(_)) => Err(WorkspaceError::DigestMismatch {
                artifact: self.artifact,
            }),
            Ok(None) => Err(WorkspaceError::io(
                "write",
                &target,
                std::io::Error::other("the restore ended before every byte arrived"),
            )),
            // Not created (it may be someone else's file): nothing to remove.
            Err(Created::No(e)) => return Err(e),
            Err(Created::Yes(e)) => Err(e),
        };
        let _ = std::fs::remove_file(&target);
        outcome
    }
}

/// A failure of [`write_chunks`], and whether the file had been created.
enum Created {
    No(WorkspaceError),
    Yes(WorkspaceError),
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

/// Creates the file (never replacing or following anything at `target`;
/// a file of mode 0444 can still be written through the descriptor that
/// created it), writes and hashes each chunk as it arrives, and once the
/// reader says the bytes are all there leaves it with exactly `mode` and
/// `fsync`s it. `None`: the reader went away before the end.
fn write_chunks(
    root: &Path,
    rel: &Path,
    target: &Path,
    mode: u32,
    mut rx: mpsc::Receiver<Piece>,
) -> std::result::Result<Option<Fetched>, Created> {
    let io = |e| WorkspaceError::io("write", target, e);
    make_parents(root, rel)
        .map_err(|e| Created::No(WorkspaceError::io("create directory for", target, e)))?;
    let mut file: File = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(target)
        .map_err(|e| Created::No(io(e)))?;
    let mut hasher = Sha256::new();
    let mut size_bytes = 0u64;
    loop {
        match rx.blocking_recv() {
            Some(Piece::Bytes(chunk)) => {
                hasher.update(&chunk);
                file.write_all(&chunk).map_err(|e| Created::Yes(io(e)))?;
                size_bytes += chunk.len() as u64;
            }
            Some(Piece::End) => break,
            None => return Ok(None),
        }
    }
    file.set_permissions(Permissions::from_mode(mode))
        .and_then(|()| file.sync_all())
        .map_err(|e| Created::Yes(io(e)))?;
    Ok(Some(Fetched {
        sha256: Sha256Digest::from_bytes(hasher.finalize().into()),
        size_bytes,
    }))
}
