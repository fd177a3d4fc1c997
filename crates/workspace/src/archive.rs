//! `workspace.tar.gz`: archiving a scratch dir and storing the archive.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use flate2::write::GzEncoder;
use flate2::Compression;
use korvus_blob::{BlobStore, Sha256Digest};
use korvus_store::{Artifact, ArtifactKind, IncidentId, SessionId, Store};
use tar::{EntryType, Header, HeaderMode};

use crate::error::blocking;
use crate::upload::{upload_artifact, UploadRow};
use crate::{Result, WorkspaceError};

/// The workspace path (and file name) of a workspace archive.
pub const ARCHIVE_PATH: &str = "workspace.tar.gz";

/// The content type a workspace archive is stored with.
pub const ARCHIVE_CONTENT_TYPE: &str = "application/gzip";

/// A scratch dir packed as one gzip-compressed tar (`workspace.tar.gz`), in
/// memory.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkspaceArchive {
    /// The `.tar.gz` bytes.
    pub bytes: Bytes,
    /// Their SHA-256.
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
}

/// Packs `dir` into one `workspace.tar.gz`, in memory.
///
/// Only regular files and directories become entries; symlinks and other
/// special files are left out and counted, and never followed. Entries are
/// relative to `dir` and in sorted order (byte order of names, a directory
/// before its contents). Headers are deterministic (mtime 0, uid/gid 0, mode
/// 0644 or 0755), so the same tree gives the same bytes. A file is read whole
/// before its header is written, so one that changes meanwhile cannot make
/// the archive inconsistent.
///
/// # Errors
/// [`WorkspaceError::Io`] when `dir` itself cannot be read or compression
/// fails; unreadable entries below it are reported in
/// [`WorkspaceArchive::unreadable`] instead.
///
/// # Cancel safety
/// Cancel-safe in effect: the work runs on a blocking task and writes
/// nothing to disk; a dropped call just discards the result.
pub async fn archive(dir: &Path) -> Result<WorkspaceArchive> {
    let dir = dir.to_path_buf();
    blocking(move || pack(&dir)).await
}

struct Packer {
    builder: tar::Builder<GzEncoder<Vec<u8>>>,
    files: u64,
    dirs: u64,
    symlinks: u64,
    specials: u64,
    unreadable: Vec<(PathBuf, String)>,
}

fn pack(dir: &Path) -> Result<WorkspaceArchive> {
    let meta = fs::symlink_metadata(dir).map_err(|e| WorkspaceError::io("archive", dir, e))?;
    if !meta.is_dir() {
        return Err(WorkspaceError::io(
            "archive",
            dir,
            io::Error::new(io::ErrorKind::InvalidInput, "not a directory"),
        ));
    }
    let mut builder = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::default()));
    builder.mode(HeaderMode::Deterministic);
    builder.follow_symlinks(false);
    let mut packer = Packer {
        builder,
        files: 0,
        dirs: 0,
        symlinks: 0,
        specials: 0,
        unreadable: Vec::new(),
    };
    let names = sorted_names(dir).map_err(|e| WorkspaceError::io("archive", dir, e))?;
    for name in names {
        packer.entry(dir, &PathBuf::from(name))?;
    }
    let Packer {
        builder,
        files,
        dirs,
        symlinks,
        specials,
        unreadable,
    } = packer;
    let bytes = builder
        .into_inner()
        .and_then(GzEncoder::finish)
        .map_err(|e| WorkspaceError::io("compress archive of", dir, e))?;
    Ok(WorkspaceArchive {
        sha256: Sha256Digest::of(&bytes),
        bytes: Bytes::from(bytes),
        files,
        dirs,
        symlinks_left_out: symlinks,
        specials_left_out: specials,
        unreadable,
    })
}

fn sorted_names(dir: &Path) -> io::Result<Vec<OsString>> {
    let mut names = fs::read_dir(dir)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<io::Result<Vec<_>>>()?;
    names.sort();
    Ok(names)
}

impl Packer {
    /// Archives `rel` (relative to `root`) and, for a directory, what is below.
    fn entry(&mut self, root: &Path, rel: &Path) -> Result<()> {
        let full = root.join(rel);
        let meta = match fs::symlink_metadata(&full) {
            Ok(m) => m,
            Err(e) => {
                self.unreadable.push((rel.to_path_buf(), e.to_string()));
                return Ok(());
            }
        };
        let kind = meta.file_type();
        if kind.is_symlink() {
            self.symlinks += 1;
        } else if kind.is_dir() {
            let names = match sorted_names(&full) {
                Ok(n) => n,
                Err(e) => {
                    self.unreadable.push((rel.to_path_buf(), e.to_string()));
                    return Ok(());
                }
            };
            let mut header = Header::new_gnu();
            header.set_metadata_in_mode(&meta, HeaderMode::Deterministic);
            header.set_entry_type(EntryType::Directory);
            header.set_size(0);
            self.append(rel, &mut header, &[], root)?;
            self.dirs += 1;
            for name in names {
                self.entry(root, &rel.join(name))?;
            }
        } else if kind.is_file() {
            let bytes = match read_same_file(&full, &meta) {
                Ok(b) => b,
                Err(e) => {
                    self.unreadable.push((rel.to_path_buf(), e.to_string()));
                    return Ok(());
                }
            };
            let mut header = Header::new_gnu();
            header.set_metadata_in_mode(&meta, HeaderMode::Deterministic);
            header.set_entry_type(EntryType::Regular);
            header.set_size(bytes.len() as u64);
            self.append(rel, &mut header, &bytes, root)?;
            self.files += 1;
        } else {
            self.specials += 1;
        }
        Ok(())
    }

    fn append(&mut self, rel: &Path, header: &mut Header, data: &[u8], root: &Path) -> Result<()> {
        self.builder
            .append_data(header, rel, data)
            .map_err(|e| WorkspaceError::io("archive", root.join(rel), e))
    }
}

/// Reads a file whole, refusing it if what was opened is not what was
/// inspected (it was swapped for something else, e.g. a symlink, meanwhile).
fn read_same_file(path: &Path, inspected: &fs::Metadata) -> io::Result<Vec<u8>> {
    let mut file = File::open(path)?;
    let opened = file.metadata()?;
    if !opened.is_file() || opened.dev() != inspected.dev() || opened.ino() != inspected.ino() {
        return Err(io::Error::other("file was replaced while being archived"));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(opened.len()).unwrap_or(0));
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Stores a workspace archive: bytes first, then the row — kind
/// [`ArtifactKind::WorkspaceArchive`] at path [`ARCHIVE_PATH`], uploaded by
/// [`upload_artifact`] (so its key comes from
/// [`artifact_key`](korvus_blob::artifact_key)), content type
/// [`ARCHIVE_CONTENT_TYPE`].
///
/// A row never points at missing bytes: the row is written only after the
/// upload succeeded. If the row cannot be written the uploaded bytes stay
/// behind (harmless; the key is unique and unreferenced).
///
/// # Errors
/// [`WorkspaceError::Blob`] when the upload fails (no row written);
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
    archive: &WorkspaceArchive,
) -> Result<Artifact> {
    let row = UploadRow {
        incident,
        session,
        revision,
        kind: ArtifactKind::WorkspaceArchive,
        path: ARCHIVE_PATH.to_owned(),
        content_type: ARCHIVE_CONTENT_TYPE.to_owned(),
    };
    let new = upload_artifact(blobs, archive.bytes.clone(), archive.sha256, row).await?;
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
