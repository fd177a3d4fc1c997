//! `workspace.tar.gz`: archiving a scratch dir and storing the archive.
//! `pack.rs` holds the walk that writes it.

mod pack;

use std::fs::File;
use std::io::{self, Seek};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use korvus_blob::{BlobBody, BlobStore, Durability, Sha256Digest};
use korvus_store::{Artifact, ArtifactKind, IncidentId, SessionId, Store};

use crate::error::blocking;
use crate::upload::{upload, UploadBody, UploadRow, STREAM_FROM_BYTES};
use crate::{Result, WorkspaceError};

/// The workspace path (and file name) of a workspace archive.
pub const ARCHIVE_PATH: &str = "workspace.tar.gz";

/// The content type a workspace archive is stored with.
pub const ARCHIVE_CONTENT_TYPE: &str = "application/gzip";

/// The default of [`ArchiveConfig::max_bytes`]: 256 MiB.
pub const DEFAULT_ARCHIVE_MAX_BYTES: u64 = 256 * 1024 * 1024;

/// Limits of [`archive_with`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ArchiveConfig {
    /// The most the compressed archive may hold, in bytes. Over it the
    /// archive is given up ([`WorkspaceError::ArchiveTooLarge`]) as soon as
    /// the compressed stream passes it. Until uploads stream,
    /// [`store_archive`] reads the archive into memory once, so this cap is
    /// what bounds that memory. [`DEFAULT_ARCHIVE_MAX_BYTES`] by default.
    pub max_bytes: u64,
}

impl Default for ArchiveConfig {
    fn default() -> Self {
        Self {
            max_bytes: DEFAULT_ARCHIVE_MAX_BYTES,
        }
    }
}

impl ArchiveConfig {
    /// The default limits, with [`max_bytes`](Self::max_bytes) set.
    pub fn with_max_bytes(max_bytes: u64) -> Self {
        Self { max_bytes }
    }
}

/// A scratch dir packed as one gzip-compressed tar (`workspace.tar.gz`),
/// held in an unnamed temporary file (never in memory). Dropping it frees
/// the file.
#[derive(Debug)]
#[non_exhaustive]
pub struct WorkspaceArchive {
    /// The `.tar.gz` bytes, in an unnamed file read with positioned reads.
    file: File,
    /// Size of the `.tar.gz` in bytes.
    pub size: u64,
    /// SHA-256 of the `.tar.gz` bytes.
    pub sha256: Sha256Digest,
    /// Regular files archived.
    pub files: u64,
    /// Directories archived (the scratch dir itself is not an entry).
    pub dirs: u64,
    /// Symlinks left out (never followed).
    pub symlinks_left_out: u64,
    /// Other special files (sockets, FIFOs, devices) left out.
    pub specials_left_out: u64,
    /// Entries that could not be read, relative to the scratch dir, with the
    /// cause; left out, the rest archived.
    pub unreadable: Vec<(PathBuf, String)>,
    /// Files whose size changed while they were archived, relative to the
    /// scratch dir: their entry holds the size seen when opened, cut off or
    /// padded with zeros, so the archive stays well-formed.
    pub changed: Vec<PathBuf>,
}

impl WorkspaceArchive {
    /// Reads the whole `.tar.gz` into memory (at most
    /// [`ArchiveConfig::max_bytes`]), on tokio's blocking pool.
    ///
    /// # Errors
    /// [`WorkspaceError::Io`] when the temporary file cannot be read.
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    pub async fn read_bytes(&self) -> Result<Bytes> {
        let file = self
            .file
            .try_clone()
            .map_err(|e| WorkspaceError::io("read", "the archive's temporary file", e))?;
        let size = usize::try_from(self.size).map_err(|_| {
            WorkspaceError::io(
                "read",
                "the archive's temporary file",
                io::Error::other("archive does not fit in memory"),
            )
        })?;
        blocking(move || {
            let mut bytes = vec![0u8; size];
            file.read_exact_at(&mut bytes, 0)
                .map_err(|e| WorkspaceError::io("read", "the archive's temporary file", e))?;
            Ok(Bytes::from(bytes))
        })
        .await
    }

    /// The `.tar.gz` as a streamed body for
    /// [`BlobStore::put_stream`](korvus_blob::BlobStore::put_stream), read
    /// from the start of the temporary file without holding it in memory.
    /// Bodies share the file's read position: upload one at a time.
    ///
    /// # Errors
    /// [`WorkspaceError::Io`] when the temporary file cannot be reopened.
    ///
    /// # Cancel safety
    /// Cancel safe: it writes nothing. The seek runs on a blocking task that
    /// finishes anyway, so the shared read position may be moved to the start.
    pub async fn body(&self) -> Result<BlobBody> {
        let mut file = self
            .file
            .try_clone()
            .map_err(|e| WorkspaceError::io("read", "the archive's temporary file", e))?;
        let file = blocking(move || {
            file.seek(io::SeekFrom::Start(0))
                .map_err(|e| WorkspaceError::io("read", "the archive's temporary file", e))?;
            Ok(file)
        })
        .await?;
        Ok(BlobBody::new(tokio::fs::File::from_std(file), self.size))
    }
}

/// Packs `dir` into one `workspace.tar.gz` with the default
/// [`ArchiveConfig`]; see [`archive_with`].
///
/// # Errors
/// As [`archive_with`].
///
/// # Cancel safety
/// As [`archive_with`].
pub async fn archive(dir: &Path) -> Result<WorkspaceArchive> {
    archive_with(dir, &ArchiveConfig::default()).await
}

/// Packs `dir` into one `workspace.tar.gz`, streamed through gzip into an
/// unnamed temporary file inside `dir` while walking, so neither the
/// archive nor any file in it is held in memory whole; the file has no
/// name, so it is not part of the walk and is never left behind.
///
/// Only regular files and directories become entries; symlinks and other
/// special files are left out and counted, and never followed. Entries are
/// relative to `dir` and in sorted order (byte order of names, a directory
/// before its contents). Headers are deterministic (mtime 0, uid/gid 0, mode
/// 0644 or 0755), so the same tree gives the same bytes. A file's size is
/// taken when it is opened and its entry holds exactly that many bytes, so
/// one that changes meanwhile cannot make the archive inconsistent (it is
/// listed in [`WorkspaceArchive::changed`]).
///
/// # Errors
/// [`WorkspaceError::ArchiveTooLarge`] when the compressed archive would
/// pass `config.max_bytes` (the walk stops there and the partial file is
/// freed); [`WorkspaceError::Io`] when `dir` itself cannot be read, the
/// temporary file cannot be made or written, or compression fails;
/// unreadable entries below `dir` are reported in
/// [`WorkspaceArchive::unreadable`] instead.
///
/// # Cancel safety
/// Cancel-safe in effect: the work runs on a blocking task and its only
/// output is the unnamed temporary file, freed when the dropped result is.
pub async fn archive_with(dir: &Path, config: &ArchiveConfig) -> Result<WorkspaceArchive> {
    let dir = dir.to_path_buf();
    let config = config.clone();
    blocking(move || pack::pack(&dir, &config)).await
}

/// Stores a workspace archive: bytes first, then the row — kind
/// [`ArtifactKind::WorkspaceArchive`] at path [`ARCHIVE_PATH`], uploaded by
/// [`upload`](crate::upload()) (so its key comes from
/// [`artifact_key`](korvus_blob::artifact_key)), content type
/// [`ARCHIVE_CONTENT_TYPE`].
///
/// An archive from [`STREAM_FROM_BYTES`] on is streamed from its temporary
/// file ([`BlobStore::put_stream`](korvus_blob::BlobStore::put_stream));
/// a smaller one is read into memory once for a single put.
///
/// A row never points at missing bytes: the row is written only after the
/// upload succeeded. If the row cannot be written the uploaded bytes stay
/// behind (harmless; the key is unique and unreferenced).
///
/// # Errors
/// [`WorkspaceError::Io`] when the archive cannot be read back (nothing
/// stored); [`WorkspaceError::Blob`] when the upload fails (no row written);
/// [`WorkspaceError::Store`] when the row cannot be written.
///
/// # Cancel safety
/// Not cancel-safe: a dropped call may leave the bytes stored without a row.
pub async fn store_archive(
    store: &dyn Store,
    blobs: &dyn BlobStore,
    incident: IncidentId,
    session: SessionId,
    revision: u32,
    fence: u64,
    archive: &WorkspaceArchive,
) -> Result<Artifact> {
    let row = UploadRow {
        incident,
        session,
        revision,
        kind: ArtifactKind::WorkspaceArchive,
        path: ARCHIVE_PATH.to_owned(),
        content_type: ARCHIVE_CONTENT_TYPE.to_owned(),
        fence,
    };
    let body = if archive.size >= STREAM_FROM_BYTES {
        UploadBody::Stream(archive.body().await?)
    } else {
        UploadBody::Bytes(archive.read_bytes().await?)
    };
    let new = upload(blobs, body, archive.sha256, row, Durability::OnReturn).await?;
    let id = new.id;
    let mut rows =
        store
            .create_artifacts(vec![new])
            .await
            .map_err(|source| WorkspaceError::Store {
                op: "create_artifacts",
                source,
            })?;
    rows.pop().ok_or_else(|| WorkspaceError::Store {
        op: "create_artifacts",
        source: korvus_store::StoreError::not_found(korvus_store::Entity::Artifact, id),
    })
}
