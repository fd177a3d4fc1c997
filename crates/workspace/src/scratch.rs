//! Scratch roots, per-session scratch dirs, release and reap.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use korvus_store::SessionId;
use uuid::Uuid;

use crate::error::blocking;
use crate::fsutil::{make_dir, remove_tree_if_exists, DIR_MODE};
use crate::{Result, WorkspaceError};

/// The directory scratch dirs are made in.
///
/// Either **supplied** by the embedder (used as given, never removed) or
/// **owned**: created by [`ScratchRoot::create_owned`] and removed by
/// [`ScratchRoot::release`]. Dropping a root removes nothing (no blocking
/// work in `Drop`); call `release` on shutdown.
#[derive(Debug)]
pub struct ScratchRoot {
    path: PathBuf,
    owned: bool,
}

impl ScratchRoot {
    /// Uses `path` as the root. It is never created or removed by this crate;
    /// it must exist when [`ScratchRoot::create`] is called.
    pub fn supplied(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            owned: false,
        }
    }

    /// Creates a fresh root `<parent>/korvus-scratch-<uuid>` (mode 0700) that
    /// this value owns. Its name is not a bare UUID, so a [`reap`](crate::reap()) of
    /// `parent` never removes it.
    ///
    /// # Errors
    /// [`WorkspaceError::Io`] when the directory cannot be created.
    ///
    /// # Cancel safety
    /// Not cancel-safe: the directory is created on a blocking task that
    /// finishes even if this future is dropped, and then nobody owns it.
    pub async fn create_owned(parent: &Path) -> Result<Self> {
        let path = parent.join(format!("korvus-scratch-{}", Uuid::now_v7()));
        let p = path.clone();
        blocking(move || {
            make_dir(&p, DIR_MODE).map_err(|e| WorkspaceError::io("create root", &p, e))
        })
        .await?;
        Ok(Self { path, owned: true })
    }

    /// The root directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `true` when [`ScratchRoot::release`] removes the root.
    pub fn is_owned(&self) -> bool {
        self.owned
    }

    /// Creates this session's scratch dir; see [`create`].
    ///
    /// # Errors
    /// As [`create`].
    ///
    /// # Cancel safety
    /// As [`create`].
    pub async fn create(&self, session: SessionId) -> Result<ScratchDir> {
        create(&self.path, session).await
    }

    /// Creates this iteration's scratch dir; see [`create_iteration`].
    ///
    /// # Errors
    /// As [`create_iteration`].
    ///
    /// # Cancel safety
    /// As [`create_iteration`].
    pub async fn create_iteration(&self, session: SessionId, revision: u32) -> Result<ScratchDir> {
        create_iteration(&self.path, session, revision).await
    }

    /// Releases the root: an owned root is removed with everything in it
    /// (symlinks are removed, never followed) — except a kept iteration dir
    /// ([`keep`](crate::keep): its output is not stored), which stays, and
    /// the root with it; a supplied root is left as it is.
    ///
    /// # Errors
    /// [`WorkspaceError::Io`] when an owned root cannot be removed.
    ///
    /// # Cancel safety
    /// Not cancel-safe: removal runs on a blocking task that finishes even if
    /// this future is dropped.
    pub async fn release(self) -> Result<()> {
        if !self.owned {
            return Ok(());
        }
        let path = self.path;
        blocking(move || {
            // A kept iteration dir (its output not stored) survives the
            // root it is in: the root stays with it.
            if crate::reap::release_root(&path)? {
                Ok(())
            } else {
                remove_tree_if_exists(&path)
            }
        })
        .await
    }
}

/// A scratch directory: one session's, `<root>/<session id>` (made by
/// [`create`]), or one iteration's, `<root>/<session id>/<revision>` (made by
/// [`create_iteration`]).
///
/// Not `Clone`: [`ScratchDir::release`] consumes it. Dropping it removes
/// nothing; a directory left behind by a crash is removed by [`reap`](crate::reap()).
#[derive(Debug)]
pub struct ScratchDir {
    path: PathBuf,
    session: SessionId,
    revision: Option<u32>,
}

impl ScratchDir {
    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The session it belongs to.
    pub fn session_id(&self) -> SessionId {
        self.session
    }

    /// The revision of an iteration's dir ([`create_iteration`]); `None` for
    /// a session's dir ([`create`]).
    pub fn revision(&self) -> Option<u32> {
        self.revision
    }

    /// Removes the directory and everything in it. Read-only seeded trees
    /// are made writable first; symlinks are removed, never followed. An
    /// iteration's dir also takes its session's dir with it when that is
    /// then empty (one non-recursive `rmdir`; a session dir still holding
    /// another iteration's dir, or anything else, stays).
    ///
    /// # Errors
    /// [`WorkspaceError::Io`] when something cannot be removed.
    ///
    /// # Cancel safety
    /// Not cancel-safe: removal runs on a blocking task that finishes even if
    /// this future is dropped.
    pub async fn release(self) -> Result<()> {
        let path = self.path;
        let iteration = self.revision.is_some();
        blocking(move || {
            remove_tree_if_exists(&path)?;
            match path.parent().filter(|_| iteration) {
                Some(session_dir) => remove_if_empty(session_dir),
                None => Ok(()),
            }
        })
        .await
    }
}

/// Removes `dir` if it is an empty directory; one that is missing or not
/// empty is left as it is.
fn remove_if_empty(dir: &Path) -> Result<()> {
    match fs::remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::DirectoryNotEmpty
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(WorkspaceError::io("remove", dir, e)),
    }
}

/// Creates `<root>/<session id>` with one non-recursive `mkdir`, mode 0700.
///
/// The root must already exist. Session ids are freshly minted, so an
/// existing directory under one belongs to someone else: it is refused, not
/// reused or cleaned.
///
/// # Errors
/// [`WorkspaceError::AlreadyExists`] when the path exists (as anything, even
/// a symlink); [`WorkspaceError::Io`] for any other failure, e.g. a missing
/// root.
///
/// # Cancel safety
/// Not cancel-safe: the directory is created on a blocking task that finishes
/// even if this future is dropped; [`reap`](crate::reap()) removes such leftovers.
pub async fn create(root: &Path, session: SessionId) -> Result<ScratchDir> {
    let path = root.join(session.to_string());
    let p = path.clone();
    blocking(move || make_fresh_dir(&p)).await?;
    Ok(ScratchDir {
        path,
        session,
        revision: None,
    })
}

/// Creates one iteration's scratch dir, `<root>/<session id>/<revision>`
/// (the revision in decimal), mode 0700.
///
/// The session's dir is made if it is missing (mode 0700) and reused if it
/// is a real directory, so a dir an earlier iteration left behind never
/// blocks a later one. The revision's dir is made with one non-recursive
/// `mkdir`: an existing one belongs to another run of that revision and is
/// refused, untouched. [`ScratchDir::release`] removes the revision's dir and
/// then the session's dir when it is empty; [`reap`](crate::reap()) removes leftovers of
/// both layouts.
///
/// The root must already exist.
///
/// # Errors
/// [`WorkspaceError::AlreadyExists`] when the revision's dir exists (as
/// anything, even a symlink), or when the session's path exists and is not
/// a real directory (a file, a symlink — never followed);
/// [`WorkspaceError::Io`] for any other failure, e.g. a missing root.
///
/// # Cancel safety
/// Not cancel-safe: the directories are created on a blocking task that
/// finishes even if this future is dropped; [`reap`](crate::reap()) removes such leftovers.
pub async fn create_iteration(
    root: &Path,
    session: SessionId,
    revision: u32,
) -> Result<ScratchDir> {
    let session_dir = root.join(session.to_string());
    let path = session_dir.join(revision.to_string());
    let p = path.clone();
    blocking(move || {
        make_session_dir(&session_dir)?;
        make_fresh_dir(&p)
    })
    .await?;
    Ok(ScratchDir {
        path,
        session,
        revision: Some(revision),
    })
}

/// Mode of `<root>/<session id>`: the owner's, plus search (not list) for
/// everyone else.
const SESSION_DIR_MODE: u32 = 0o711;

/// Makes `path` with one non-recursive `mkdir`: a directory already there
/// belongs to another run and is refused, untouched.
fn make_fresh_dir(path: &Path) -> Result<()> {
    match make_dir(path, DIR_MODE) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(WorkspaceError::AlreadyExists {
            path: path.to_path_buf(),
        }),
        Err(e) => Err(WorkspaceError::io("create scratch directory", path, e)),
    }
}

/// Makes a session's dir, or accepts an existing one that is a real
/// directory (`lstat`: a symlink is refused, not followed). Others may
/// search it but not list it ([`SESSION_DIR_MODE`]), so an agent running
/// under a user of its own reaches the iteration dir handed to it.
fn make_session_dir(dir: &Path) -> Result<()> {
    match make_dir(dir, SESSION_DIR_MODE) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => match fs::symlink_metadata(dir) {
            Ok(meta) if meta.file_type().is_dir() => Ok(()),
            Ok(_) => Err(WorkspaceError::AlreadyExists {
                path: dir.to_path_buf(),
            }),
            Err(e) => Err(WorkspaceError::io("inspect session directory", dir, e)),
        },
        Err(e) => Err(WorkspaceError::io("create session directory", dir, e)),
    }
}
